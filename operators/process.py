"""Process-function operators: Flink's ``ProcessOperator`` and ``KeyedProcessOperator``
(with the ``Context`` / ``OnTimerContext`` objects their functions receive).

One context object per operator is reused for every record; ``ctx.timestamp()``
reads the task's shared ``record_context``. On a timer, the record timestamp is
set to the timer's timestamp (event time) or ``None`` (processing time) while
``on_timer`` runs, as Flink's ``TimestampedCollector`` does.
"""

from __future__ import annotations

from types import GeneratorType
from typing import Any, Callable, List, Optional

from raylink.core.functions import KeyedProcessContext, OnTimerContext, ProcessContext, TimeDomain
from raylink.operators.base import AbstractUdfStreamOperator, EmittingMixin, resolve_key_selector
from raylink.operators.batch import internal_timer_service
from raylink.operators.timer_service import KeyedTimerService, NonKeyedTimerService
from raylink.state.state_backend import keyed_backend_for


class ProcessContextImpl(ProcessContext):
    """``ctx`` of ``process_element`` on non-keyed streams."""

    def __init__(self, operator: Any, timer_service: Any) -> None:
        self._record_context = operator.record_context
        self._timer_service = timer_service
        self._operator = operator

    def timestamp(self) -> Optional[int]:
        return self._record_context.timestamp

    def timer_service(self) -> Any:
        return self._timer_service

    def output(self, output_tag: Any, value: Any) -> None:
        self._operator._emit_side(output_tag, value)


class KeyedProcessContextImpl(ProcessContextImpl, KeyedProcessContext):
    """``ctx`` of ``process_element`` on keyed streams."""

    def __init__(self, operator: Any, timer_service: Any, backend: Any) -> None:
        super().__init__(operator, timer_service)
        self._backend = backend

    def get_current_key(self) -> Any:
        return self._backend.current_key


class OnTimerContextImpl(KeyedProcessContextImpl, OnTimerContext):
    """``ctx`` of ``on_timer``: ``timestamp()`` is the firing timer's timestamp."""

    def __init__(self, operator: Any, timer_service: Any, backend: Any) -> None:
        super().__init__(operator, timer_service, backend)
        self._timer_timestamp = 0
        self._time_domain = TimeDomain.EVENT_TIME

    def timestamp(self) -> int:
        return self._timer_timestamp

    def time_domain(self) -> TimeDomain:
        return self._time_domain


class ProcessOperator(EmittingMixin, AbstractUdfStreamOperator):
    """Runs a ``ProcessFunction`` (or ``callable(value, ctx)``) on a non-keyed stream."""

    def open(self) -> None:
        self._process = self._resolve(self.function, "process_element")
        timer_service = NonKeyedTimerService(self, self.runtime_context.processing_time_service)
        self._ctx = ProcessContextImpl(self, timer_service)
        self._open_functions()

    def process_element(self, value: Any) -> None:
        result = self._process(value, self._ctx)
        if result is not None:
            self._emit(result)

    def process_batch(self, values: List[Any]) -> None:
        out: List[Any] = []
        append = out.append
        process = self._process
        ctx = self._ctx
        emit_into = self._emit_into
        for value in values:
            result = process(value, ctx)
            if result is not None:
                emit_into(result, append)
        if out:
            self._collect_batch(out)

    def process_timestamped_batch(self, values: List[Any], timestamps: List[Any]) -> None:
        process_timestamped_run(self, values, timestamps, self._process, None)


class KeyedTimersMixin:
    """Keyed state backend + timers for keyed process operators (one- and two-input)."""

    runtime_context: Any
    record_context: Any
    function: Any
    _emit: Callable[[Any], None]

    def _setup_keyed(self) -> None:
        rc = self.runtime_context
        self.keyed_state_backend = keyed_backend_for(rc)
        self.timer_service = internal_timer_service(self.keyed_state_backend, rc.processing_time_service, self)
        self._user_timer_service = KeyedTimerService(self.timer_service, self.keyed_state_backend)
        self._ctx = KeyedProcessContextImpl(self, self._user_timer_service, self.keyed_state_backend)
        self._timer_ctx = OnTimerContextImpl(self, self._user_timer_service, self.keyed_state_backend)
        self._on_timer: Optional[Callable[[int, Any], Any]] = None

    def _resolve_on_timer(self) -> None:
        on_timer = getattr(self.function, "on_timer", None)
        self._on_timer = on_timer if callable(on_timer) else None

    def _fire_timer(self, timestamp: int, record_timestamp: Optional[int], domain: TimeDomain) -> None:
        on_timer = self._on_timer
        if on_timer is None:
            return
        rc = self.record_context
        previous = rc.timestamp
        rc.timestamp = record_timestamp
        ctx = self._timer_ctx
        ctx._timer_timestamp = timestamp
        ctx._time_domain = domain
        try:
            self._emit(on_timer(timestamp, ctx))
        finally:
            rc.timestamp = previous

    # Triggerable
    def on_event_time(self, timestamp: int, key: Any, namespace: Any = None) -> None:
        self._fire_timer(timestamp, timestamp, TimeDomain.EVENT_TIME)

    def on_processing_time(self, timestamp: int, key: Any, namespace: Any = None) -> None:
        self._fire_timer(timestamp, None, TimeDomain.PROCESSING_TIME)

    # event-time timers fire before the watermark moves on (Flink's InternalTimeServiceManager)
    def process_watermark(self, timestamp: int) -> None:
        self.current_watermark = timestamp
        self.timer_service.advance_watermark(timestamp)
        self.output.emit_watermark(timestamp)  # type: ignore[attr-defined]

    def close(self) -> None:
        self.timer_service.close()
        super().close()  # type: ignore[misc]


def process_timestamped_run(
    operator: Any, values: List[Any], timestamps: List[Any], process: Callable[..., Any], key_of: Any
) -> None:
    """``process(value, ctx)`` for each record of a run that carries a timestamp each, with the
    record context's timestamp (and, ``key_of`` given, the current key) the record's own; the
    main results leave as one batch, each with its record's timestamp (Flink's
    ``TimestampedCollector``), side outputs at once. The per-record path's results, in fewer calls."""
    out: List[Any] = []
    stamps: List[Any] = []
    append = out.append
    ctx = operator._ctx
    emit_into = operator._emit_into
    emit_side = operator._emit_side
    set_key = operator.keyed_state_backend.set_current_key if key_of is not None else None
    rc = operator.record_context
    previous = rc.timestamp
    try:
        for value, timestamp in zip(values, timestamps):
            rc.timestamp = timestamp
            if set_key is not None:
                set_key(key_of(value))
            result = process(value, ctx)
            if result is not None:
                before = len(out)
                if type(result) is GeneratorType:  # a function that yields: ``_emit_into`` inline
                    for item in result:
                        if type(item) is tuple and len(item) == 2 and getattr(item[0], "_is_output_tag", False):
                            emit_side(item[0], item[1])
                        else:
                            append(item)
                else:
                    emit_into(result, append)
                if len(out) > before:
                    stamps.extend([timestamp] * (len(out) - before))
    finally:
        rc.timestamp = previous
    if out:
        operator._collect_timestamped(out, stamps)


class KeyedProcessOperator(KeyedTimersMixin, ProcessOperator):
    """Runs a ``KeyedProcessFunction`` with keyed state, ``ctx.get_current_key()`` and timers."""

    def __init__(self, function: Any, key_selector: Any, name: str = "", operator_id: str = "") -> None:
        super().__init__(function, name, operator_id)
        self.key_selector = key_selector

    def setup(self, output: Any, runtime_context: Any) -> None:
        super().setup(output, runtime_context)
        self._setup_keyed()

    def open(self) -> None:
        if self.key_selector is None:
            raise ValueError(f"keyed operator {self.name!r} has no key selector")
        self._key_of = resolve_key_selector(self.key_selector, self.name)
        self._process = self._resolve(self.function, "process_element")
        self._resolve_on_timer()
        self._open_functions()

    def process_element(self, value: Any) -> None:
        self.keyed_state_backend.set_current_key(self._key_of(value))
        result = self._process(value, self._ctx)
        if result is not None:
            self._emit(result)

    def process_timestamped_batch(self, values: List[Any], timestamps: List[Any]) -> None:
        process_timestamped_run(self, values, timestamps, self._process, self._key_of)

    def process_batch(self, values: List[Any]) -> None:
        out: List[Any] = []
        append = out.append
        process = self._process
        key_of = self._key_of
        set_key = self.keyed_state_backend.set_current_key
        ctx = self._ctx
        emit_into = self._emit_into
        for value in values:
            set_key(key_of(value))
            result = process(value, ctx)
            if result is not None:
                emit_into(result, append)
        if out:
            self._collect_batch(out)


__all__ = [
    "ProcessContextImpl",
    "KeyedProcessContextImpl",
    "OnTimerContextImpl",
    "ProcessOperator",
    "KeyedProcessOperator",
    "KeyedTimersMixin",
    "process_timestamped_run",
]
