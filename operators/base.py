"""Operator interfaces: Flink's ``AbstractStreamOperator`` / ``OneInputStreamOperator`` /
``TwoInputStreamOperator`` / ``AbstractUdfStreamOperator``.

Lifecycle, driven by the task (StreamTask + OperatorChain)::

    op.setup(output, runtime_context)   # bind output and context (keyed ops create
                                        # their state backend + timer service here)
    op.open()                           # resolve user functions, call fn.open(ctx)
    op.process_element(v) / op.process_batch(vs) / op.process_watermark(ts) ...
    op.process_watermark_status(idle)   # the input went idle / active (Flink's WatermarkStatus)
    op.end_input()                      # input exhausted (two-input: end_input(i))
    op.close()                          # fn.close(), release timers

Records are bare values. ``process_batch(values)`` handles a list of records
that share the timestamp in ``runtime_context.record_context.timestamp``; an
operator may also offer ``process_timestamped_batch(values, timestamps)`` for a
run of records with a timestamp each (the task and chained outputs use it when
present, else they hand such records over one by one).
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, List, Optional

from raylink.core.field_selectors import field_getter
from raylink.operators.output import Output

MIN_WATERMARK = -(1 << 63)
MAX_WATERMARK = (1 << 63) - 1

CHAINING_STRATEGIES = ("ALWAYS", "HEAD", "NEVER")


class StreamOperator:
    """One-input stream operator (also the base of every operator).

    ``chaining_strategy``: "ALWAYS" (chain with both neighbours), "HEAD" (only
    with downstream: sources), "NEVER". ``num_inputs``: 0 (source), 1 or 2.
    """

    chaining_strategy = "ALWAYS"
    num_inputs = 1

    def __init__(self, name: str = "", operator_id: str = "") -> None:
        self.name = name or type(self).__name__
        self.operator_id = operator_id
        self.spec: Any = None  # the OperatorSpec it was built from (set by create_operator)
        self.output: Optional[Output] = None
        self.runtime_context: Any = None
        self.record_context: Any = None
        self.current_watermark = MIN_WATERMARK

    def setup(self, output: Output, runtime_context: Any) -> None:
        """Bind the output (its methods are cached here) and the runtime context."""
        self.output = output
        self.runtime_context = runtime_context
        self.record_context = runtime_context.record_context
        self._collect = output.collect
        self._collect_batch = output.collect_batch
        self._collect_side = output.collect_side
        # records with one timestamp each: the output's batch method when it has one
        self._collect_timestamped = getattr(output, "collect_timestamped_batch", None) or self._collect_each_timestamped
        self._emit_watermark_status = getattr(output, "emit_watermark_status", None)
        group = getattr(runtime_context, "metrics_group", None)
        if group is not None:  # Flink's per-operator watermark gauges
            group.gauge("currentInputWatermark", self.current_input_watermark)
            group.gauge("currentOutputWatermark", self.current_output_watermark)

    def current_input_watermark(self) -> int:
        """The last watermark this operator processed (``currentInputWatermark``)."""
        return self.current_watermark

    def current_output_watermark(self) -> int:
        """The last watermark this operator emitted (``currentOutputWatermark``)."""
        return self.current_watermark

    def _collect_each_timestamped(self, values: List[Any], timestamps: List[int]) -> None:
        """Emit ``values[i]`` with timestamp ``timestamps[i]`` through ``collect``; the
        record context's timestamp is restored afterwards."""
        rc = self.record_context
        previous = rc.timestamp
        collect = self._collect
        for value, timestamp in zip(values, timestamps):
            rc.timestamp = timestamp
            collect(value)
        rc.timestamp = previous

    def open(self) -> None:
        pass

    def process_element(self, value: Any) -> None:
        raise NotImplementedError(f"{type(self).__name__} does not take one-input records")

    def process_batch(self, values: List[Any]) -> None:
        process = self.process_element
        for value in values:
            process(value)

    def process_watermark(self, timestamp: int) -> None:
        self.current_watermark = timestamp
        self.output.emit_watermark(timestamp)  # type: ignore[union-attr]

    def process_latency_marker(self, marker: Any) -> None:
        self.output.emit_latency_marker(marker)  # type: ignore[union-attr]

    def process_watermark_status(self, idle: bool) -> None:
        """The input became idle (``True``) or active again: forwarded, as Flink's
        ``AbstractStreamOperator.processWatermarkStatus`` does."""
        emit = self._emit_watermark_status
        if emit is not None:
            emit(idle)

    def end_input(self) -> None:
        pass

    def close(self) -> None:
        pass

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"


class TwoInputStreamOperator(StreamOperator):
    """Operator with two inputs; its watermark is the minimum of both inputs'
    (Flink's ``AbstractStreamOperator.processWatermark1/2``)."""

    num_inputs = 2

    def __init__(self, name: str = "", operator_id: str = "") -> None:
        super().__init__(name, operator_id)
        self.input1_watermark = MIN_WATERMARK
        self.input2_watermark = MIN_WATERMARK
        self._input_idle = [False, False]
        self._output_idle = False

    def process_element1(self, value: Any) -> None:
        raise NotImplementedError

    def process_element2(self, value: Any) -> None:
        raise NotImplementedError

    def process_batch1(self, values: List[Any]) -> None:
        process = self.process_element1
        for value in values:
            process(value)

    def process_batch2(self, values: List[Any]) -> None:
        process = self.process_element2
        for value in values:
            process(value)

    def process_watermark1(self, timestamp: int) -> None:
        self.input1_watermark = timestamp
        self._combine_watermarks()

    def process_watermark2(self, timestamp: int) -> None:
        self.input2_watermark = timestamp
        self._combine_watermarks()

    def _combine_watermarks(self) -> None:
        combined = min(self.input1_watermark, self.input2_watermark)
        if combined > self.current_watermark:
            self.process_watermark(combined)

    def process_watermark_status1(self, idle: bool) -> None:
        self._input_idle[0] = idle
        self._combine_statuses()

    def process_watermark_status2(self, idle: bool) -> None:
        self._input_idle[1] = idle
        self._combine_statuses()

    def _combine_statuses(self) -> None:
        """Idle when both inputs are idle, active when one is active (emitted on change)."""
        idle = all(self._input_idle)
        if idle != self._output_idle:
            self._output_idle = idle
            self.process_watermark_status(idle)

    def process_latency_marker1(self, marker: Any) -> None:
        self.process_latency_marker(marker)

    def process_latency_marker2(self, marker: Any) -> None:
        self.process_latency_marker(marker)

    def end_input(self, input_index: int = 1) -> None:  # type: ignore[override]
        pass


def resolve_function(function: Any, method: str, operator_name: str) -> Callable[..., Any]:
    """The callable to invoke per record: ``function.<method>`` when the object has
    that method (a Function-class instance or duck-typed object), else ``function``."""
    if not isinstance(function, type):
        bound = getattr(function, method, None)
        if bound is not None and callable(bound):
            return bound
    if callable(function):
        return function
    raise TypeError(
        f"operator {operator_name!r}: expected a callable or an object with a {method}() method, got {function!r}"
    )


def resolve_key_selector(key_selector: Any, operator_name: str) -> Callable[[Any], Any]:
    """The key selector to call per record: its ``get_key`` or itself, as an
    ``operator.itemgetter`` when it only reads fields (:func:`field_getter`)."""
    return field_getter(resolve_function(key_selector, "get_key", operator_name))


class AbstractUdfStreamOperator(StreamOperator):
    """Operator wrapping user function(s); opens/closes the function objects whose
    methods it calls (plain callables have no lifecycle)."""

    def __init__(self, function: Any, name: str = "", operator_id: str = "") -> None:
        super().__init__(name, operator_id)
        self.function = function
        self._lifecycle: List[Any] = []
        self._closed = False

    def _resolve(self, function: Any, method: str) -> Callable[..., Any]:
        resolved = resolve_function(function, method, self.name)
        if resolved is not function and not any(o is function for o in self._lifecycle):
            self._lifecycle.append(function)
        return resolved

    def _open_functions(self) -> None:
        for obj in self._lifecycle:
            hook = getattr(obj, "open", None)
            if callable(hook):
                hook(self.runtime_context)

    def _close_functions(self) -> None:
        if self._closed:
            return
        self._closed = True
        for obj in self._lifecycle:
            hook = getattr(obj, "close", None)
            if callable(hook):
                hook()

    def close(self) -> None:
        self._close_functions()


class TwoInputUdfStreamOperator(TwoInputStreamOperator, AbstractUdfStreamOperator):
    """Two-input operator wrapping user function(s)."""

    def __init__(self, function: Any, name: str = "", operator_id: str = "") -> None:
        AbstractUdfStreamOperator.__init__(self, function, name, operator_id)
        self.input1_watermark = MIN_WATERMARK
        self.input2_watermark = MIN_WATERMARK
        self._input_idle = [False, False]
        self._output_idle = False

    def _resolve_pair(self, method1: str, method2: str) -> "tuple[Callable[..., Any], Callable[..., Any]]":
        """``(f1, f2)`` tuple/list of callables or one object with ``method1``/``method2``."""
        function = self.function
        if isinstance(function, (tuple, list)):
            if len(function) != 2:
                raise TypeError(f"operator {self.name!r}: expected two functions, got {len(function)}")
            return self._resolve(function[0], method1), self._resolve(function[1], method2)
        f1 = getattr(function, method1, None)
        f2 = getattr(function, method2, None)
        if not (callable(f1) and callable(f2)):
            raise TypeError(
                f"operator {self.name!r}: expected a ({method1}, {method2}) pair of callables "
                f"or an object with {method1}() and {method2}(), got {function!r}"
            )
        self._lifecycle.append(function)
        return f1, f2


def side_output_error(operator_name: str, tag: Any) -> Exception:
    return ValueError(f"operator {operator_name!r} emitted to side output {tag!r}, which has no string tag_id")


class EmittingMixin:
    """Dispatch of what a process function yields: values to the main output, a
    2-tuple ``(OutputTag, value)`` to a side output (tags recognised by their
    ``_is_output_tag`` class attribute)."""

    name: str
    _collect: Callable[[Any], None]
    _collect_side: Callable[[Any, Any], None]

    def _emit_side(self, tag: Any, value: Any) -> None:
        if type(getattr(tag, "tag_id", None)) is not str:
            raise side_output_error(self.name, tag)
        self._collect_side(tag, value)

    def _iter_result(self, result: Any) -> Iterable[Any]:
        try:
            return iter(result)
        except TypeError:
            raise TypeError(
                f"operator {self.name!r}: a process function must yield values (or return an "
                f"iterable or None), got {type(result).__name__}"
            ) from None

    def _emit(self, result: Any) -> None:
        """Emit one call's results immediately (per-record path, timers)."""
        if result is None:
            return
        collect = self._collect
        for item in self._iter_result(result):
            if type(item) is tuple and len(item) == 2 and getattr(item[0], "_is_output_tag", False):
                self._emit_side(item[0], item[1])
            else:
                collect(item)

    def _emit_into(self, result: Any, append: Callable[[Any], None]) -> None:
        """Batch path: main-output values go to ``append``; side outputs are emitted."""
        for item in self._iter_result(result):
            if type(item) is tuple and len(item) == 2 and getattr(item[0], "_is_output_tag", False):
                self._emit_side(item[0], item[1])
            else:
                append(item)


__all__ = [
    "MIN_WATERMARK",
    "MAX_WATERMARK",
    "CHAINING_STRATEGIES",
    "StreamOperator",
    "TwoInputStreamOperator",
    "AbstractUdfStreamOperator",
    "TwoInputUdfStreamOperator",
    "EmittingMixin",
    "resolve_function",
]
