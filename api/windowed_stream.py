"""PyFlink's ``WindowedStream`` and ``AllWindowedStream`` (``KeyedStream.window`` /
``DataStream.window_all``), ``count_window`` / ``count_window_all`` with Flink's Java
definition, and ``assign_timestamps_and_watermarks``.

A windowed stream is pure API: configure the trigger, evictor, allowed lateness
and late-data side output, then one of ``reduce`` / ``aggregate`` / ``apply`` /
``process`` records one window transformation (operator kind ``"window"``) whose
function is a :class:`WindowOperatorDescriptor`. Arguments are checked here, so a
bad one fails when the program is built, naming the operator. ``window_all`` keys
the stream by a constant (Flink's ``NullByteKeySelector``) and runs the window
operator with parallelism 1.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Optional

from raylink.api.window import (
    CountEvictor,
    CountTrigger,
    GlobalWindows,
    MergingWindowAssigner,
    PurgingTrigger,
    Trigger,
    WindowAssigner,
)
from raylink.core.output_tag import OutputTag
from raylink.core.time import to_millis
from raylink.graph import transformations as T
from raylink.graph.operator_spec import OperatorSpec

if TYPE_CHECKING:
    from raylink.api.datastream import DataStream, KeyedStream

WINDOW_KIND = "window"
TIMESTAMPS_KIND = "timestamps"


@dataclass
class WindowOperatorDescriptor:
    """Everything the window operator needs (Flink's ``WindowOperatorBuilder`` result).

    ``contents``: "reducing" (a reduced value per pane), "aggregating" (an
    ``AggregateFunction`` accumulator) or "list" (every element). ``function_kind``:
    "pass" (emit the reduced value / aggregate result), "window"
    (``apply(key, window, inputs)``), "process" (``process(key, context, elements)``),
    "all_window" (``apply(window, inputs)``) or "process_all" (``process(context, elements)``).
    """

    assigner: Any
    trigger: Any
    evictor: Any
    allowed_lateness: int
    late_data_output_tag: Optional[OutputTag]
    contents: str
    reduce_function: Any = None
    aggregate_function: Any = None
    window_function: Any = None
    function_kind: str = "pass"

    def describe(self, function_name: str, all_windows: bool) -> str:
        parts = [repr(self.assigner), type(self.trigger).__name__]
        if self.evictor is not None:
            parts.append(type(self.evictor).__name__)
        parts.append(function_name)
        return f"{'AllWindow' if all_windows else 'Window'}({', '.join(parts)})"


class NullByteKeySelector:
    """Keys every record by ``0`` (what ``window_all`` partitions by)."""

    def get_key(self, value: Any) -> int:
        return 0

    def __call__(self, value: Any) -> int:
        return 0


def _function_name(function: Any) -> str:
    if function is None:
        return "PassThrough"
    name = type(function).__name__
    return getattr(function, "__name__", name) if name == "function" else name


def _check_methods(function: Any, methods: tuple, what: str) -> None:
    missing = [m for m in methods if not callable(getattr(function, m, None))]
    if missing:
        raise TypeError(
            f"{what}: expected an object with {', '.join(m + '()' for m in missing)}, got {type(function).__name__}"
        )


class _WindowedStreamBase:
    _ALL = False

    def __init__(self, keyed_stream: "KeyedStream", window_assigner: WindowAssigner) -> None:
        if not callable(getattr(window_assigner, "assign_windows", None)):
            raise TypeError(f"{self._api_name()}: expected a WindowAssigner, got {type(window_assigner).__name__}")
        self._keyed_stream = keyed_stream
        self._window_assigner = window_assigner
        self._trigger: Optional[Trigger] = None
        self._evictor: Any = None
        self._allowed_lateness = 0
        self._late_data_output_tag: Optional[OutputTag] = None

    def _api_name(self) -> str:
        return "window_all" if self._ALL else "window"

    def get_execution_environment(self) -> Any:
        return self._keyed_stream.get_execution_environment()

    def get_input_type(self) -> Any:
        return self._keyed_stream.get_type()

    # -- configuration -----------------------------------------------------------------------------
    def trigger(self, trigger: Trigger):
        if not callable(getattr(trigger, "on_element", None)):
            raise TypeError(f"trigger: expected a Trigger, got {type(trigger).__name__}")
        if isinstance(self._window_assigner, MergingWindowAssigner) and not trigger.can_merge():
            raise TypeError("A merging window assigner cannot be used with a trigger that does not support merging.")
        self._trigger = trigger
        return self

    def evictor(self, evictor: Any):
        if not (callable(getattr(evictor, "evict_before", None)) and callable(getattr(evictor, "evict_after", None))):
            raise TypeError(f"evictor: expected an Evictor, got {type(evictor).__name__}")
        if isinstance(self._window_assigner, MergingWindowAssigner):
            raise TypeError("Cannot use a merging WindowAssigner with an Evictor.")
        self._evictor = evictor
        return self

    def allowed_lateness(self, time_ms: Any):
        lateness = to_millis(time_ms, "allowed_lateness")
        if lateness < 0:
            raise ValueError("The allowed lateness cannot be negative.")
        self._allowed_lateness = lateness
        return self

    def side_output_late_data(self, output_tag: OutputTag):
        if not isinstance(output_tag, OutputTag):
            raise TypeError(f"side_output_late_data: expected an OutputTag, got {type(output_tag).__name__}")
        self._late_data_output_tag = output_tag
        return self

    # -- window functions --------------------------------------------------------------------------
    def _window_function_kind(self, function: Any, what: str) -> str:
        """ "process" or "window" (all-window variants for ``window_all``)."""
        if callable(getattr(function, "process", None)) and not isinstance(function, type):
            return "process_all" if self._ALL else "process"
        if callable(getattr(function, "apply", None)) or callable(function):
            return "all_window" if self._ALL else "window"
        raise TypeError(
            f"{what}: the window function must be a {'AllWindowFunction' if self._ALL else 'WindowFunction'}, "
            f"a {'ProcessAllWindowFunction' if self._ALL else 'ProcessWindowFunction'} or a callable, "
            f"got {type(function).__name__}"
        )

    def reduce(self, reduce_function: Any, window_function: Any = None, output_type: Any = None) -> "DataStream":
        """Reduce each pane incrementally; emit the result (or pass it to ``window_function``)."""
        if not (callable(getattr(reduce_function, "reduce", None)) or callable(reduce_function)):
            raise TypeError(
                f"Window Reduce: reduce_function must be a ReduceFunction or a callable, "
                f"got {type(reduce_function).__name__}"
            )
        kind = "pass" if window_function is None else self._window_function_kind(window_function, "Window Reduce")
        if window_function is None and output_type is None:
            output_type = self.get_input_type()
        name = _function_name(reduce_function)
        if window_function is not None:
            name = f"{name}, {_function_name(window_function)}"
        return self._build(
            "reducing",
            name,
            output_type,
            reduce_function=reduce_function,
            window_function=window_function,
            function_kind=kind,
        )

    def aggregate(
        self,
        aggregate_function: Any,
        window_function: Any = None,
        accumulator_type: Any = None,
        output_type: Any = None,
    ) -> "DataStream":
        """Aggregate each pane incrementally with an ``AggregateFunction``."""
        _check_methods(aggregate_function, ("create_accumulator", "add", "get_result"), "Window Aggregate")
        if isinstance(self._window_assigner, MergingWindowAssigner):
            _check_methods(aggregate_function, ("merge",), "Window Aggregate over merging windows")
        kind = "pass" if window_function is None else self._window_function_kind(window_function, "Window Aggregate")
        name = _function_name(aggregate_function)
        if window_function is not None:
            name = f"{name}, {_function_name(window_function)}"
        return self._build(
            "aggregating",
            name,
            output_type,
            aggregate_function=aggregate_function,
            window_function=window_function,
            function_kind=kind,
        )

    def apply(self, window_function: Any, output_type: Any = None) -> "DataStream":
        """Buffer each pane and evaluate it with a (All)WindowFunction: ``apply([key,] window, inputs)``."""
        if not (callable(getattr(window_function, "apply", None)) or callable(window_function)):
            raise TypeError(
                f"Window Apply: expected a WindowFunction or a callable, got {type(window_function).__name__}"
            )
        kind = "all_window" if self._ALL else "window"
        return self._build(
            "list", _function_name(window_function), output_type, window_function=window_function, function_kind=kind
        )

    def process(self, process_window_function: Any, output_type: Any = None) -> "DataStream":
        """Buffer each pane and evaluate it with a Process(All)WindowFunction."""
        if not callable(getattr(process_window_function, "process", None)):
            raise TypeError(
                f"Window Process: expected a {'ProcessAllWindowFunction' if self._ALL else 'ProcessWindowFunction'}, "
                f"got {type(process_window_function).__name__}"
            )
        kind = "process_all" if self._ALL else "process"
        return self._build(
            "list",
            _function_name(process_window_function),
            output_type,
            window_function=process_window_function,
            function_kind=kind,
        )

    def _build(self, contents: str, function_name: str, output_type: Any, **functions: Any) -> "DataStream":
        trigger = self._trigger or self._window_assigner.get_default_trigger(self.get_execution_environment())
        descriptor = WindowOperatorDescriptor(
            assigner=self._window_assigner,
            trigger=trigger,
            evictor=self._evictor,
            allowed_lateness=self._allowed_lateness,
            late_data_output_tag=self._late_data_output_tag,
            contents=contents,
            **functions,
        )
        keyed = self._keyed_stream
        env = keyed.get_execution_environment()
        spec = OperatorSpec(kind=WINDOW_KIND, function=descriptor, key_selector=keyed.get_key_selector())
        t = env._add_transformation(
            T.ONE_INPUT,
            descriptor.describe(function_name, self._ALL),
            [keyed.get_transformation()],
            operator=spec,
            output_type=output_type,
        )
        if self._ALL:
            t.parallelism = 1
            t.non_parallel = True
        return keyed._derived_stream(t)


class WindowedStream(_WindowedStreamBase):
    """A keyed stream cut into windows (PyFlink's ``WindowedStream``)."""


class AllWindowedStream(_WindowedStreamBase):
    """A non-keyed stream cut into windows, evaluated by one subtask (PyFlink's ``AllWindowedStream``)."""

    _ALL = True

    def __init__(self, data_stream: "DataStream", window_assigner: WindowAssigner) -> None:
        super().__init__(data_stream.key_by(NullByteKeySelector()), window_assigner)


def _count_window(stream: Any, size: int, slide: int, all_windows: bool) -> Any:
    what = "count_window_all" if all_windows else "count_window"
    for name, value in (("size", size), ("slide", slide)):
        if not isinstance(value, int) or isinstance(value, bool):
            raise TypeError(f"{what}: {name} must be an int, got {value!r}")
    if size <= 0:
        raise ValueError(f"{what}: size must be positive, got {size}")
    if slide < 0:
        raise ValueError(f"{what}: slide must not be negative, got {slide}")
    windowed = (
        AllWindowedStream(stream, GlobalWindows.create())
        if all_windows
        else WindowedStream(stream, GlobalWindows.create())
    )
    if slide == 0:  # Flink: tumbling count windows purge on every firing
        return windowed.trigger(PurgingTrigger.of(CountTrigger.of(size)))
    # Flink: the last `size` elements, every `slide` elements (the first firings hold fewer)
    return windowed.evictor(CountEvictor.of(size)).trigger(CountTrigger.of(slide))


def count_window(keyed_stream: "KeyedStream", size: int, slide: int = 0) -> WindowedStream:
    """Flink's ``KeyedStream.countWindow``: ``slide`` 0 fires every ``size`` elements of a key with
    exactly them (``GlobalWindows`` + ``PurgingTrigger(CountTrigger(size))``); otherwise every
    ``slide`` elements of a key with its last ``size`` elements (``GlobalWindows`` +
    ``CountEvictor(size)`` + ``CountTrigger(slide)``: every element is kept until evicted, and a
    reduce / aggregate runs over what the evictor leaves when the window fires).

    The contents follow the order in which a key's elements reach the window operator: it is the
    input order when they come from one upstream subtask (or each key from one), but a
    ``rebalance`` before the ``key_by`` interleaves the upstream subtasks, in Flink as well."""
    return _count_window(keyed_stream, size, slide, False)


def count_window_all(data_stream: "DataStream", size: int, slide: int = 0) -> AllWindowedStream:
    """Flink's ``DataStream.countWindowAll``: :func:`count_window` over the whole stream, in one
    subtask (in the order elements reach it: interleaved when several upstream subtasks feed it)."""
    return _count_window(data_stream, size, slide, True)


def assign_timestamps_and_watermarks(data_stream: "DataStream", watermark_strategy: Any) -> "DataStream":
    """Flink's ``assignTimestampsAndWatermarks``: a chained operator at the input's parallelism."""
    if not callable(getattr(watermark_strategy, "create_watermark_generator", None)):
        raise TypeError(
            f"assign_timestamps_and_watermarks: expected a WatermarkStrategy, got {type(watermark_strategy).__name__}"
        )
    source = data_stream.get_transformation()
    env = data_stream.get_execution_environment()
    spec = OperatorSpec(kind=TIMESTAMPS_KIND, function=watermark_strategy)
    t = env._add_transformation(
        T.ONE_INPUT, "Timestamps/Watermarks", [source], operator=spec, output_type=source.output_type
    )
    t.parallelism = source.parallelism
    return data_stream._derived_stream(t)


__all__ = [
    "WindowedStream",
    "AllWindowedStream",
    "WindowOperatorDescriptor",
    "NullByteKeySelector",
    "count_window",
    "count_window_all",
    "assign_timestamps_and_watermarks",
    "WINDOW_KIND",
    "TIMESTAMPS_KIND",
]
