"""Broadcast-state operators: Flink's ``CoBroadcastWithNonKeyedOperator`` and
``CoBroadcastWithKeyedOperator`` (with the contexts their functions receive).

Input 1 is the non-broadcast stream, input 2 the ``BroadcastStream`` (its edge uses the
BROADCAST partitioner, so every subtask sees every broadcast element). The broadcast
states are the ``MapStateDescriptor``s of ``DataStream.broadcast(...)``: operator state
held by the operator's ``OperatorStateStore`` (:mod:`raylink.state.snapshots`), so
every subtask checkpoints its copy and a restore with another parallelism hands each new
subtask one of the old copies. ``process_broadcast_element`` gets a ``Context`` with the
writable state, ``process_element`` (and ``on_timer``) a ``ReadOnlyContext`` with a
read-only view; asking for a state that was not declared in ``broadcast(...)`` fails as
in Flink. The keyed variant adds keyed state (``set_current_key`` per element of input 1),
``ctx.get_current_key()``, timers and ``ctx.apply_to_keyed_state`` on the broadcast side.

BATCH execution (``execution_mode == "BATCH"``): the broadcast side is processed first,
as in Flink's ``BatchCoBroadcastWith*Operator``; the non-keyed operator holds input 1
(and its watermark) until input 2 has ended, the keyed one gets that from its sorted
input (:mod:`raylink.operators.batch`). Single-threaded: the task thread.
"""

from __future__ import annotations

from typing import Any, Dict, Iterable, List, Optional, Tuple

from raylink.core.functions import BroadcastProcessFunction, KeyedBroadcastProcessFunction, TimeDomain
from raylink.operators.base import EmittingMixin, TwoInputUdfStreamOperator, resolve_function, resolve_key_selector
from raylink.operators.process import KeyedTimersMixin
from raylink.state.broadcast_state import HeapBroadcastState
from raylink.state.snapshots import OperatorStateStore

_NO_SUCH_STATE = (
    "The requested state does not exist. Check for typos in your state descriptor, or specify the "
    "state descriptor in the datastream.broadcast(...) call if you forgot to register it."
)


class _BaseContext:
    """What every broadcast-function context offers (Flink's ``BaseContext``)."""

    def __init__(self, operator: "CoBroadcastWithNonKeyedOperator") -> None:
        self._operator = operator
        self._record_context = operator.record_context
        self._pts = operator.runtime_context.processing_time_service

    def timestamp(self) -> Optional[int]:
        return self._record_context.timestamp

    def current_processing_time(self) -> int:
        return self._pts.current_processing_time()

    def current_watermark(self) -> int:
        return self._operator.context_watermark()

    def output(self, output_tag: Any, value: Any) -> None:
        self._operator._emit_side(output_tag, value)


class BroadcastContextImpl(_BaseContext, BroadcastProcessFunction.Context):
    """``ctx`` of ``BroadcastProcessFunction.process_broadcast_element``."""

    def get_broadcast_state(self, state_descriptor: Any) -> HeapBroadcastState:
        return self._operator.broadcast_state(state_descriptor)


class ReadOnlyContextImpl(_BaseContext, BroadcastProcessFunction.ReadOnlyContext):
    """``ctx`` of ``BroadcastProcessFunction.process_element``."""

    def get_broadcast_state(self, state_descriptor: Any) -> Any:
        return self._operator.broadcast_state(state_descriptor).read_only()


class KeyedBroadcastContextImpl(_BaseContext, KeyedBroadcastProcessFunction.Context):
    """``ctx`` of ``KeyedBroadcastProcessFunction.process_broadcast_element``."""

    def get_broadcast_state(self, state_descriptor: Any) -> HeapBroadcastState:
        return self._operator.broadcast_state(state_descriptor)

    def apply_to_keyed_state(self, state_descriptor: Any, function: Any) -> None:
        self._operator.apply_to_keyed_state(state_descriptor, function)


class KeyedReadOnlyContextImpl(_BaseContext, KeyedBroadcastProcessFunction.ReadOnlyContext):
    """``ctx`` of ``KeyedBroadcastProcessFunction.process_element``."""

    def get_broadcast_state(self, state_descriptor: Any) -> Any:
        return self._operator.broadcast_state(state_descriptor).read_only()

    def timer_service(self) -> Any:
        return self._operator._user_timer_service

    def get_current_key(self) -> Any:
        return self._operator.keyed_state_backend.current_key


class KeyedOnTimerContextImpl(KeyedReadOnlyContextImpl, KeyedBroadcastProcessFunction.OnTimerContext):
    """``ctx`` of ``KeyedBroadcastProcessFunction.on_timer``: ``timestamp()`` is the timer's."""

    def __init__(self, operator: "CoBroadcastWithKeyedOperator") -> None:
        super().__init__(operator)
        self._timer_timestamp = 0
        self._time_domain = TimeDomain.EVENT_TIME

    def timestamp(self) -> int:
        return self._timer_timestamp

    def time_domain(self) -> TimeDomain:
        return self._time_domain


class CoBroadcastWithNonKeyedOperator(EmittingMixin, TwoInputUdfStreamOperator):
    """A ``BroadcastProcessFunction`` over a non-keyed stream (input 1) and a broadcast one (input 2)."""

    def __init__(
        self,
        function: Any,
        broadcast_state_descriptors: Iterable[Any],
        name: str = "",
        operator_id: str = "",
        broadcast_first: bool = False,
    ) -> None:
        super().__init__(function, name, operator_id)
        self.broadcast_state_descriptors = list(broadcast_state_descriptors)
        if not self.broadcast_state_descriptors:
            raise ValueError(f"operator {self.name!r}: a broadcast operator needs at least one MapStateDescriptor")
        self._declared = {d.name for d in self.broadcast_state_descriptors}
        self._states: Dict[str, HeapBroadcastState] = {}
        #: BATCH: input 1 waits for the end of the broadcast input (records + timestamps, watermark)
        self.broadcast_first = broadcast_first
        self._held: Optional[List[Tuple[Any, Optional[int]]]] = [] if broadcast_first else None
        self._held_watermark: Optional[int] = None

    # -- broadcast states ----------------------------------------------------------------------
    def broadcast_state(self, descriptor: Any) -> HeapBroadcastState:
        """The broadcast state of ``descriptor`` (one of the declared ``MapStateDescriptor``s)."""
        name = getattr(descriptor, "name", None)
        state = self._states.get(name)  # type: ignore[arg-type]
        if state is None:
            if name not in self._declared:
                raise RuntimeError(_NO_SUCH_STATE)
            store = getattr(self, "operator_state_store", None)
            if store is None:  # never initialized from a checkpoint (a bare operator)
                store = self.operator_state_store = OperatorStateStore()
            state = self._states[name] = store.get_broadcast_state(descriptor)  # type: ignore[index]
        return state

    def context_watermark(self) -> int:
        """The watermark the contexts report (``current_watermark()``)."""
        return self.current_watermark

    # -- lifecycle -----------------------------------------------------------------------------
    def open(self) -> None:
        self._process, self._process_broadcast = self._resolve_pair("process_element", "process_broadcast_element")
        self._read_only_ctx: Any = ReadOnlyContextImpl(self)
        self._broadcast_ctx: Any = BroadcastContextImpl(self)
        self._open_functions()

    # -- elements ------------------------------------------------------------------------------
    def process_element1(self, value: Any) -> None:
        held = self._held
        if held is not None:
            held.append((value, self.record_context.timestamp))
            return
        result = self._process(value, self._read_only_ctx)
        if result is not None:
            self._emit(result)

    def process_element2(self, value: Any) -> None:
        result = self._process_broadcast(value, self._broadcast_ctx)
        if result is not None:
            self._emit(result)

    def process_watermark1(self, timestamp: int) -> None:
        if self._held is not None:  # BATCH: after the held records, not before them
            self._held_watermark = timestamp
            return
        super().process_watermark1(timestamp)

    def end_input(self, input_index: int = 1) -> None:
        if input_index == 2 and self._held is not None:
            self._release_held()

    def _release_held(self) -> None:
        held, self._held = self._held, None
        rc = self.record_context
        previous = rc.timestamp
        try:
            for value, timestamp in held or ():
                rc.timestamp = timestamp
                self.process_element1(value)
        finally:
            rc.timestamp = previous
        if self._held_watermark is not None:
            self.process_watermark1(self._held_watermark)
            self._held_watermark = None


class CoBroadcastWithKeyedOperator(KeyedTimersMixin, CoBroadcastWithNonKeyedOperator):
    """A ``KeyedBroadcastProcessFunction`` over a keyed stream (input 1) and a broadcast one (input 2)."""

    def __init__(
        self,
        function: Any,
        key_selector: Any,
        broadcast_state_descriptors: Iterable[Any],
        name: str = "",
        operator_id: str = "",
    ) -> None:
        super().__init__(function, broadcast_state_descriptors, name, operator_id)
        self.key_selector = key_selector

    def setup(self, output: Any, runtime_context: Any) -> None:
        super().setup(output, runtime_context)
        self._setup_keyed()
        self._timer_ctx = KeyedOnTimerContextImpl(self)

    def open(self) -> None:
        if self.key_selector is None:
            raise ValueError(f"keyed operator {self.name!r} has no key selector")
        self._key_of = resolve_key_selector(self.key_selector, self.name)
        self._process, self._process_broadcast = self._resolve_pair("process_element", "process_broadcast_element")
        self._resolve_on_timer()
        self._read_only_ctx = KeyedReadOnlyContextImpl(self)
        self._broadcast_ctx = KeyedBroadcastContextImpl(self)
        self._open_functions()

    def context_watermark(self) -> int:
        return self.timer_service.current_watermark

    def process_element1(self, value: Any) -> None:
        self.keyed_state_backend.set_current_key(self._key_of(value))
        result = self._process(value, self._read_only_ctx)
        if result is not None:
            self._emit(result)

    def apply_to_keyed_state(self, state_descriptor: Any, function: Any) -> None:
        """Flink's ``applyToKeyedState``: ``function(key, state)`` for every key of this subtask
        with a value in the state; the current key is restored afterwards."""
        backend = self.keyed_state_backend
        state = backend.get_or_create_state(state_descriptor)
        process = resolve_function(function, "process", self.name)
        previous = backend.current_key
        try:
            for key in list(backend.keys(state_descriptor.name)):
                backend.set_current_key(key)
                process(key, state)
        finally:
            if previous is not None:
                backend.set_current_key(previous)


__all__ = [
    "BroadcastContextImpl",
    "CoBroadcastWithKeyedOperator",
    "CoBroadcastWithNonKeyedOperator",
    "KeyedBroadcastContextImpl",
    "KeyedOnTimerContextImpl",
    "KeyedReadOnlyContextImpl",
    "ReadOnlyContextImpl",
]
