"""BATCH execution of keyed operators: Flink's ``SortingDataInput`` /
``MultiInputSortingDataInput``, ``BatchExecutionInternalTimeService`` and
``BatchGroupedReduceOperator``.

In a job run in BATCH mode (``OperatorSpec.execution_mode == "BATCH"``, set by the
``StreamGraphGenerator``) ``for_batch_execution`` gives every keyed operator a sorted input:

* ``SortingOneInputOperator`` / ``SortingTwoInputOperator`` wrap the operator at the head
  of its chain (a keyed operator always is: its input comes through a hash exchange). They
  hold every record of a sorted input until the input ends (for two inputs: until both
  have), then hand the records over key by key — keys in the order Flink's sort gives
  PyFlink's pickled keys (by the length, then the bytes of ``pickle.dumps(key)``), the
  records of a key by timestamp (of both inputs merged, input 1 first on a tie) — and end
  each key by firing its timers. Watermarks of a sorted input are held back; the highest
  one goes on after the last key. A pass-through input (the broadcast side of a keyed
  broadcast operator) is handed over at once, so it is processed first.
* ``BatchExecutionInternalTimeService`` (what ``internal_timer_service`` returns for such an
  operator) keeps timers without physical processing-time registrations; at the end of a
  key it fires the key's event-time timers with the watermark at +inf, then its
  processing-time timers (processing time does not advance during BATCH execution), and
  ignores timers registered meanwhile (Flink quiesces the service).
* ``BatchGroupedReduceOperator`` replaces the rolling reduce / aggregation: it emits one
  final value per key, when the key's input ends, with timestamp +inf (``MAX_WATERMARK``).

The wrapped operator is reachable as ``.operator``; attributes the task reads off an
operator (``function``, ``timer_service``, ...) are forwarded to it. Single-threaded (the
task thread). The records of one sorted input are held in memory.
"""

from __future__ import annotations

import logging
import pickle
from typing import Any, Callable, Dict, List, Optional

from raylink.operators.aggregation import field_check, make_aggregator
from raylink.operators.base import (
    MAX_WATERMARK,
    MIN_WATERMARK,
    AbstractUdfStreamOperator,
    StreamOperator,
    resolve_key_selector,
)
from raylink.operators.timer_service import InternalTimerService
from raylink.state.state_backend import keyed_backend_for

_LOG = logging.getLogger(__name__)
_MISSING = object()


# -- timers ------------------------------------------------------------------------------------------
class BatchExecutionInternalTimeService(InternalTimerService):
    """Timers of a keyed operator reading a sorted input: they fire when their key ends."""

    def __init__(self, backend: Any, processing_time_service: Any, triggerable: Any) -> None:
        super().__init__(backend, processing_time_service, triggerable)
        self._quiesced = False
        self._warned = False

    def _schedule(self, timestamp: int) -> None:
        """No physical timer: processing-time timers fire at the end of their key."""

    def _ignored(self, domain: str, timestamp: int) -> bool:
        if not self._quiesced:
            return False
        if not self._warned:
            self._warned = True
            _LOG.warning(
                "Timer service is quiesced at the end of a key (BATCH execution): the %s timer for "
                "timestamp %s (and any later one) is ignored.",
                domain,
                timestamp,
            )
        return True

    def register_event_time_timer(self, key: Any, timestamp: int, namespace: Any = None) -> None:
        if not self._ignored("event-time", timestamp):
            super().register_event_time_timer(key, timestamp, namespace)

    def register_processing_time_timer(self, key: Any, timestamp: int, namespace: Any = None) -> None:
        if not self._ignored("processing-time", timestamp):
            super().register_processing_time_timer(key, timestamp, namespace)

    def end_key(self) -> None:
        """The current key's input ended (Flink: the key changed): fire its event-time timers
        at watermark +inf, then its processing-time timers; the watermark is -inf again after."""
        self._quiesced = True
        try:
            self.advance_watermark(MAX_WATERMARK)
            self.on_processing_time(MAX_WATERMARK)
        finally:
            self._quiesced = False
            self.current_watermark = MIN_WATERMARK


def internal_timer_service(backend: Any, processing_time_service: Any, operator: Any) -> InternalTimerService:
    """The timer service of a keyed ``operator``: the BATCH one when it runs in a BATCH job
    (Flink's ``InternalTimeServiceManager`` provider), else the streaming one."""
    spec = getattr(operator, "spec", None)
    if getattr(spec, "execution_mode", "STREAMING") == "BATCH":
        return BatchExecutionInternalTimeService(backend, processing_time_service, operator)
    return InternalTimerService(backend, processing_time_service, operator)


# -- the batch reduce --------------------------------------------------------------------------------
class BatchGroupedReduceOperator(AbstractUdfStreamOperator):
    """Reduce (or built-in aggregation) over an input sorted by key: one final value per key,
    emitted when the key's records end, with timestamp ``MAX_WATERMARK``."""

    def __init__(
        self,
        function: Any,
        key_selector: Any,
        first_of_key_check: Optional[Callable[[Any], None]] = None,
        name: str = "",
        operator_id: str = "",
    ) -> None:
        super().__init__(function, name, operator_id)
        self.key_selector = key_selector
        self._check = first_of_key_check
        self._key: Any = _MISSING
        self._value: Any = _MISSING

    def setup(self, output: Any, runtime_context: Any) -> None:
        super().setup(output, runtime_context)
        self.keyed_state_backend = keyed_backend_for(runtime_context)

    def open(self) -> None:
        if self.key_selector is None:
            raise ValueError(f"keyed operator {self.name!r} has no key selector")
        self._key_of = resolve_key_selector(self.key_selector, self.name)
        self._reduce = self._resolve(self.function, "reduce")
        self._open_functions()

    def process_element(self, value: Any) -> None:
        key = self._key_of(value)
        if self._value is not _MISSING and key == self._key:
            self._value = self._reduce(self._value, value)
            return
        self._emit_result()
        self.keyed_state_backend.set_current_key(key)  # validates the key; state of the function
        if self._check is not None:
            self._check(value)
        self._key, self._value = key, value

    def _emit_result(self) -> None:
        value = self._value
        if value is _MISSING:
            return
        self._key = self._value = _MISSING
        rc = self.record_context
        previous = rc.timestamp
        rc.timestamp = MAX_WATERMARK
        try:
            self._collect(value)
        finally:
            rc.timestamp = previous

    def end_input(self) -> None:
        self._emit_result()


def _batch_reduce(spec: Any) -> BatchGroupedReduceOperator:
    if spec.kind == "aggregate":
        params = spec.params or {}
        agg, field = params["agg"], params.get("field")
        return BatchGroupedReduceOperator(
            make_aggregator(agg, field), spec.key_selector, field_check(agg, field, spec.name)
        )
    return BatchGroupedReduceOperator(spec.function, spec.key_selector)


# -- sorted inputs ----------------------------------------------------------------------------------
def _key_order(keys: List[Any]) -> List[Any]:
    """Keys in the order of Flink's batch sort of PyFlink's (pickled) keys: by the length,
    then the bytes of their pickled form; keys that cannot be pickled keep their order."""
    try:
        pickled = [pickle.dumps(k) for k in keys]
    except Exception:  # noqa: BLE001 - any key pickle refuses: no defined order
        return keys
    order = sorted(range(len(keys)), key=lambda i: (len(pickled[i]), pickled[i]))
    return [keys[i] for i in order]


def _by_timestamp(timestamp: Optional[int]) -> int:
    return MIN_WATERMARK if timestamp is None else timestamp


class _SortingInputBase(StreamOperator):
    """Shared by the sorting wrappers: the wrapped operator, forwarding, ending a key."""

    def __init__(self, operator: StreamOperator) -> None:
        super().__init__(operator.name, operator.operator_id)
        self.operator = operator
        self.spec = operator.spec
        self.chaining_strategy = operator.chaining_strategy

    def __getattr__(self, name: str) -> Any:  # function, _lifecycle, timer_service, hooks ...
        if name == "operator":
            raise AttributeError(name)
        return getattr(self.operator, name)

    @property
    def operator_state_store(self) -> Any:
        return getattr(self.operator, "operator_state_store", None)

    @operator_state_store.setter
    def operator_state_store(self, store: Any) -> None:
        self.operator.operator_state_store = store

    def setup(self, output: Any, runtime_context: Any) -> None:
        self.output = output
        self.runtime_context = runtime_context
        self.record_context = runtime_context.record_context
        self.operator.setup(output, runtime_context)

    def _end_key(self) -> None:
        timers = getattr(self.operator, "timer_service", None)
        if isinstance(timers, BatchExecutionInternalTimeService):
            timers.end_key()

    def current_input_watermark(self) -> int:
        return self.operator.current_input_watermark()

    def current_output_watermark(self) -> int:
        return self.operator.current_output_watermark()

    def process_latency_marker(self, marker: Any) -> None:
        """Latency markers do not pass a sorting input (as in Flink)."""

    def close(self) -> None:
        self.operator.close()


class SortingOneInputOperator(_SortingInputBase):
    """A keyed one-input operator fed key by key once its input has ended."""

    def __init__(self, operator: StreamOperator, key_selector: Any) -> None:
        super().__init__(operator)
        self.key_selector = key_selector
        self._values: Dict[Any, List[Any]] = {}
        self._timestamps: Dict[Any, List[Optional[int]]] = {}
        self._watermark = MIN_WATERMARK

    def open(self) -> None:
        self._key_of = resolve_key_selector(self.key_selector, self.name)
        self.operator.open()

    def _add(self, value: Any, timestamp: Optional[int]) -> None:
        key = self._key_of(value)
        values = self._values.get(key)
        if values is None:
            values = self._values[key] = []
            self._timestamps[key] = []
        values.append(value)
        self._timestamps[key].append(timestamp)

    def process_element(self, value: Any) -> None:
        self._add(value, self.record_context.timestamp)

    def process_batch(self, values: List[Any]) -> None:
        timestamp = self.record_context.timestamp
        add = self._add
        for value in values:
            add(value, timestamp)

    def process_timestamped_batch(self, values: List[Any], timestamps: List[int]) -> None:
        add = self._add
        for value, timestamp in zip(values, timestamps):
            add(value, timestamp)

    def process_watermark(self, timestamp: int) -> None:
        self._watermark = max(self._watermark, timestamp)

    def process_watermark_status(self, idle: bool) -> None:
        """Idleness does not matter to a sorted input."""

    def end_input(self) -> None:
        operator = self.operator
        rc = self.record_context
        previous = rc.timestamp
        values_by_key, timestamps_by_key = self._values, self._timestamps
        self._values, self._timestamps = {}, {}
        try:
            for key in _key_order(list(values_by_key)):
                values, timestamps = values_by_key.pop(key), timestamps_by_key.pop(key)
                if all(t is None for t in timestamps):
                    rc.timestamp = None
                    operator.process_batch(values)
                else:
                    for i in sorted(range(len(values)), key=lambda i: _by_timestamp(timestamps[i])):
                        rc.timestamp = timestamps[i]
                        operator.process_element(values[i])
                self._end_key()
        finally:
            rc.timestamp = previous
        if self._watermark > MIN_WATERMARK:
            operator.process_watermark(self._watermark)
        operator.end_input()


class SortingTwoInputOperator(_SortingInputBase):
    """A keyed two-input operator: its keyed inputs (a key selector given) are sorted together,
    an input without key selector passes through at once (and so is processed first)."""

    num_inputs = 2

    def __init__(self, operator: StreamOperator, key_selector1: Any, key_selector2: Any) -> None:
        super().__init__(operator)
        self.key_selectors = (key_selector1, key_selector2)
        self._records: Dict[Any, List[tuple]] = {}  # key -> [(timestamp, input, value)]
        self._watermarks = [MIN_WATERMARK, MIN_WATERMARK]
        self._ended = [False, False]

    def open(self) -> None:
        self._key_of = [None if s is None else resolve_key_selector(s, self.name) for s in self.key_selectors]
        op = self.operator
        self._element = (op.process_element1, op.process_element2)
        self._batch = (op.process_batch1, op.process_batch2)
        self._watermark_to = (op.process_watermark1, op.process_watermark2)
        op.open()

    def _add(self, index: int, value: Any, timestamp: Optional[int]) -> None:
        key = self._key_of[index](value)  # type: ignore[misc]
        records = self._records.get(key)
        if records is None:
            records = self._records[key] = []
        records.append((timestamp, index, value))

    def _element_of(self, index: int, value: Any) -> None:
        if self._key_of[index] is None:
            self._element[index](value)
        else:
            self._add(index, value, self.record_context.timestamp)

    def _batch_of(self, index: int, values: List[Any]) -> None:
        if self._key_of[index] is None:
            self._batch[index](values)
            return
        timestamp = self.record_context.timestamp
        for value in values:
            self._add(index, value, timestamp)

    def _timestamped_of(self, index: int, values: List[Any], timestamps: List[int]) -> None:
        """A run with a timestamp each (the wrapped operator's own run methods are not reached
        through ``__getattr__``: keyed records are sorted first)."""
        if self._key_of[index] is None:
            rc = self.record_context
            previous = rc.timestamp
            element = self._element[index]
            for value, timestamp in zip(values, timestamps):
                rc.timestamp = timestamp
                element(value)
            rc.timestamp = previous
            return
        add = self._add
        for value, timestamp in zip(values, timestamps):
            add(index, value, timestamp)

    def _watermark_of(self, index: int, timestamp: int) -> None:
        if self._key_of[index] is None:
            self._watermark_to[index](timestamp)
        else:
            self._watermarks[index] = max(self._watermarks[index], timestamp)

    def process_element1(self, value: Any) -> None:
        self._element_of(0, value)

    def process_element2(self, value: Any) -> None:
        self._element_of(1, value)

    def process_batch1(self, values: List[Any]) -> None:
        self._batch_of(0, values)

    def process_batch2(self, values: List[Any]) -> None:
        self._batch_of(1, values)

    def process_timestamped_batch1(self, values: List[Any], timestamps: List[int]) -> None:
        self._timestamped_of(0, values, timestamps)

    def process_timestamped_batch2(self, values: List[Any], timestamps: List[int]) -> None:
        self._timestamped_of(1, values, timestamps)

    def process_watermark1(self, timestamp: int) -> None:
        self._watermark_of(0, timestamp)

    def process_watermark2(self, timestamp: int) -> None:
        self._watermark_of(1, timestamp)

    def process_watermark_status1(self, idle: bool) -> None:
        if self._key_of[0] is None:
            self.operator.process_watermark_status1(idle)

    def process_watermark_status2(self, idle: bool) -> None:
        if self._key_of[1] is None:
            self.operator.process_watermark_status2(idle)

    def process_latency_marker1(self, marker: Any) -> None:
        """Latency markers do not pass a sorting input."""

    def process_latency_marker2(self, marker: Any) -> None:
        """Latency markers do not pass a sorting input."""

    def end_input(self, input_index: int = 1) -> None:  # type: ignore[override]
        self._ended[input_index - 1] = True
        if self._key_of[input_index - 1] is None:
            self.operator.end_input(input_index)
        if all(self._ended):
            self._drain()

    def _drain(self) -> None:
        rc = self.record_context
        previous = rc.timestamp
        element = self._element
        records_by_key, self._records = self._records, {}
        try:
            for key in _key_order(list(records_by_key)):
                records = records_by_key.pop(key)
                records.sort(key=lambda r: (_by_timestamp(r[0]), r[1]))
                for timestamp, index, value in records:
                    rc.timestamp = timestamp
                    element[index](value)
                self._end_key()
        finally:
            rc.timestamp = previous
        for index in (0, 1):
            if self._key_of[index] is not None:
                if self._watermarks[index] > MIN_WATERMARK:
                    self._watermark_to[index](self._watermarks[index])
                self.operator.end_input(index + 1)


# -- the factory's hook -----------------------------------------------------------------------------
def for_batch_execution(spec: Any, operator: StreamOperator) -> StreamOperator:
    """The operator to run for ``spec`` in a BATCH job: the batch reduce for a reduce or
    aggregation, a sorting wrapper around every keyed operator, else ``operator`` itself."""
    if spec.kind in ("reduce", "aggregate"):
        batch = _batch_reduce(spec)
        batch.name, batch.operator_id, batch.spec = operator.name, operator.operator_id, spec
        operator = batch
    params = spec.params or {}
    if operator.num_inputs == 1 and spec.key_selector is not None:
        return SortingOneInputOperator(operator, spec.key_selector)
    if operator.num_inputs == 2:
        key_selector1 = params.get("key_selector1", spec.key_selector)
        key_selector2 = params.get("key_selector2")
        if key_selector1 is not None or key_selector2 is not None:
            return SortingTwoInputOperator(operator, key_selector1, key_selector2)
    return operator


__all__ = [
    "BatchExecutionInternalTimeService",
    "BatchGroupedReduceOperator",
    "SortingOneInputOperator",
    "SortingTwoInputOperator",
    "for_batch_execution",
    "internal_timer_service",
]
