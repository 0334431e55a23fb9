"""User function classes of the DataStream API (PyFlink's ``pyflink.datastream.functions``).

Mirrors Flink's ``Function`` / ``RichFunction`` family (``MapFunction``,
``FlatMapFunction``, ``FilterFunction``, ``ReduceFunction``, ``KeySelector``,
``ProcessFunction``, ``KeyedProcessFunction``, the ``Co*`` functions, the broadcast
process functions (``BroadcastProcessFunction``, ``KeyedBroadcastProcessFunction``),
``SinkFunction``, ``SourceFunction``, ``Partitioner``), the window functions
(``AggregateFunction``, ``WindowFunction``, ``AllWindowFunction``,
``ProcessWindowFunction``, ``ProcessAllWindowFunction``), ``KeyedStateStore``,
``RuntimeContext`` and the async I/O function (``AsyncFunction``; its retry strategies and
predicates are in :mod:`raylink.core.async_retry`).

Every class here is plain Python with no dependency on the rest of raylink.
Wherever the API accepts one of these objects it also accepts a plain callable
(the operators resolve the method by name once, at ``open()``).

Where PyFlink declares an interface abstract, so does raylink (``abc.ABC`` and
``@abstractmethod``: ``map``, ``flat_map``, ``filter``, ``reduce``, ``get_key``,
``partition``, the four of ``AggregateFunction``, ``process_element`` of the process
functions, ``apply`` / ``process`` of the window functions, and the context, timer
service, state store and runtime context methods): a subclass that misses one fails
when it is instantiated, naming the method. Optional hooks (``open``, ``close``,
``on_timer``, ``clear``) and raylink's own interfaces (``SourceFunction``,
``SinkFunction`` and their contexts) stay concrete. A function instance belongs to one
parallel subtask and is called from its task's thread (``SourceFunction.cancel``: from
another thread).

Output of process functions (PyFlink style): ``process_element`` / ``on_timer``
are generators (or return an iterable, or ``None``). Each yielded item is a
main-output record, except a 2-tuple ``(output_tag, value)`` whose first element
is an ``OutputTag``: that value goes to the side output.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from enum import Enum
from typing import Any, Iterable, Optional


class _Generic:
    """PyFlink's window functions are ``Generic``: ``ProcessWindowFunction[IN, OUT, KEY, W]``
    (in a class statement or an annotation) is the class itself here."""

    def __class_getitem__(cls, _params: Any) -> type:
        return cls


class TimeDomain(Enum):
    """Flink's ``TimeDomain``: which clock a timer belongs to."""

    EVENT_TIME = 0
    PROCESSING_TIME = 1


class Function(ABC):
    """Base of all user functions (Flink's ``RichFunction``): optional lifecycle hooks."""

    def open(self, runtime_context: "RuntimeContext") -> None:
        """Called once per parallel instance before the first record."""

    def close(self) -> None:
        """Called once per parallel instance after the last record."""


class MapFunction(Function):
    """One record in, one record out."""

    @abstractmethod
    def map(self, value: Any) -> Any:
        raise NotImplementedError


class FlatMapFunction(Function):
    """One record in, any number out: return or yield an iterable."""

    @abstractmethod
    def flat_map(self, value: Any) -> Iterable[Any]:
        raise NotImplementedError


class FilterFunction(Function):
    """Keep a record when ``filter`` returns a truthy value."""

    @abstractmethod
    def filter(self, value: Any) -> bool:
        raise NotImplementedError


class ReduceFunction(Function):
    """Combine two values of the same type into one."""

    @abstractmethod
    def reduce(self, value1: Any, value2: Any) -> Any:
        raise NotImplementedError


class AggregateFunction(Function, _Generic):
    """Incremental aggregation with an accumulator (Flink's ``AggregateFunction``)."""

    @abstractmethod
    def create_accumulator(self) -> Any:
        raise NotImplementedError

    @abstractmethod
    def add(self, value: Any, accumulator: Any) -> Any:
        """Add ``value`` to ``accumulator`` and return the (new or updated) accumulator."""
        raise NotImplementedError

    @abstractmethod
    def get_result(self, accumulator: Any) -> Any:
        raise NotImplementedError

    @abstractmethod
    def merge(self, acc_a: Any, acc_b: Any) -> Any:
        """Merge two accumulators (needed by merging windows, e.g. sessions)."""
        raise NotImplementedError


class KeySelector(Function):
    """Extract the key of a record (must be deterministic and never ``None``)."""

    @abstractmethod
    def get_key(self, value: Any) -> Any:
        raise NotImplementedError


class NullByteKeySelector(KeySelector):
    """Keys every record by ``0`` (Flink's ``NullByteKeySelector``: what ``window_all`` and
    ``count_window_all`` partition by)."""

    def get_key(self, value: Any) -> int:
        return 0

    def __call__(self, value: Any) -> int:
        return 0


class Partitioner(Function):
    """Custom partitioning: pick the target channel of a key."""

    @abstractmethod
    def partition(self, key: Any, num_partitions: int) -> int:
        raise NotImplementedError


class TimerService(ABC):
    """What a process function sees of time (Flink's ``TimerService``)."""

    @abstractmethod
    def current_processing_time(self) -> int:
        raise NotImplementedError

    @abstractmethod
    def current_watermark(self) -> int:
        raise NotImplementedError

    @abstractmethod
    def register_processing_time_timer(self, timestamp: int) -> None:
        raise NotImplementedError

    @abstractmethod
    def register_event_time_timer(self, timestamp: int) -> None:
        raise NotImplementedError

    @abstractmethod
    def delete_processing_time_timer(self, timestamp: int) -> None:
        raise NotImplementedError

    @abstractmethod
    def delete_event_time_timer(self, timestamp: int) -> None:
        raise NotImplementedError


class ProcessContext(ABC):
    """Context handed to ``process_element`` (Flink's ``ProcessFunction.Context``)."""

    @abstractmethod
    def timestamp(self) -> Optional[int]:
        """Timestamp of the current record, or ``None``."""
        raise NotImplementedError

    @abstractmethod
    def timer_service(self) -> TimerService:
        raise NotImplementedError

    def output(self, output_tag: Any, value: Any) -> None:
        """Emit ``value`` to a side output (alternative to yielding a tag pair)."""
        raise NotImplementedError


class KeyedProcessContext(ProcessContext):
    """Context of keyed functions: also knows the current key."""

    @abstractmethod
    def get_current_key(self) -> Any:
        raise NotImplementedError


class OnTimerContext(KeyedProcessContext):
    """Context handed to ``on_timer``: ``timestamp()`` is the timer's timestamp."""

    @abstractmethod
    def time_domain(self) -> TimeDomain:
        raise NotImplementedError


class ProcessFunction(Function):
    """Low-level per-record function (Flink's ``ProcessFunction``)."""

    Context = ProcessContext

    @abstractmethod
    def process_element(self, value: Any, ctx: ProcessContext) -> Optional[Iterable[Any]]:
        raise NotImplementedError

    def on_timer(self, timestamp: int, ctx: OnTimerContext) -> Optional[Iterable[Any]]:
        """Timers are only available on keyed streams; never called here."""
        return None


class KeyedProcessFunction(Function):
    """Process function on a keyed stream, with keyed state and timers."""

    Context = KeyedProcessContext
    OnTimerContext = OnTimerContext

    @abstractmethod
    def process_element(self, value: Any, ctx: KeyedProcessContext) -> Optional[Iterable[Any]]:
        raise NotImplementedError

    def on_timer(self, timestamp: int, ctx: OnTimerContext) -> Optional[Iterable[Any]]:
        """Called when a timer registered through ``ctx.timer_service()`` fires."""
        return None


class CoMapFunction(Function):
    """Map over two connected streams."""

    @abstractmethod
    def map1(self, value: Any) -> Any:
        raise NotImplementedError

    @abstractmethod
    def map2(self, value: Any) -> Any:
        raise NotImplementedError


class CoFlatMapFunction(Function):
    """Flat map over two connected streams."""

    @abstractmethod
    def flat_map1(self, value: Any) -> Iterable[Any]:
        raise NotImplementedError

    @abstractmethod
    def flat_map2(self, value: Any) -> Iterable[Any]:
        raise NotImplementedError


class CoProcessFunction(Function):
    """Process function over two connected streams."""

    Context = ProcessContext

    @abstractmethod
    def process_element1(self, value: Any, ctx: ProcessContext) -> Optional[Iterable[Any]]:
        raise NotImplementedError

    @abstractmethod
    def process_element2(self, value: Any, ctx: ProcessContext) -> Optional[Iterable[Any]]:
        raise NotImplementedError


class KeyedCoProcessFunction(Function):
    """Process function over two connected keyed streams, with state and timers."""

    Context = KeyedProcessContext
    OnTimerContext = OnTimerContext

    @abstractmethod
    def process_element1(self, value: Any, ctx: KeyedProcessContext) -> Optional[Iterable[Any]]:
        raise NotImplementedError

    @abstractmethod
    def process_element2(self, value: Any, ctx: KeyedProcessContext) -> Optional[Iterable[Any]]:
        raise NotImplementedError

    def on_timer(self, timestamp: int, ctx: OnTimerContext) -> Optional[Iterable[Any]]:
        return None


class BaseBroadcastProcessFunction(Function):
    """Flink's ``BaseBroadcastProcessFunction``: what both broadcast process functions share.

    Input 1 is the non-broadcast stream (``process_element``: read-only broadcast state),
    input 2 the ``BroadcastStream`` (``process_broadcast_element``: read-write broadcast
    state). The broadcast states are the ``MapStateDescriptor``s given to
    ``DataStream.broadcast(...)``; ``ctx.get_broadcast_state(descriptor)`` fetches one.
    """

    class BaseContext(ABC):
        """What every method of a broadcast process function can ask."""

        @abstractmethod
        def timestamp(self) -> Optional[int]:
            """Timestamp of the current element (or firing timer), ``None`` without one."""

        @abstractmethod
        def current_processing_time(self) -> int:
            """The current processing time (ms)."""

        @abstractmethod
        def current_watermark(self) -> int:
            """The current event-time watermark."""

        def output(self, output_tag: Any, value: Any) -> None:
            """Emit ``value`` to a side output (alternative to yielding a tag pair)."""
            raise NotImplementedError

    class Context(BaseContext):
        """The broadcast side's context: read-write access to the broadcast states."""

        @abstractmethod
        def get_broadcast_state(self, state_descriptor: Any) -> Any:
            """The ``BroadcastState`` of ``state_descriptor`` (a ``MapStateDescriptor``)."""

    class ReadOnlyContext(BaseContext):
        """The non-broadcast side's context: read-only access to the broadcast states."""

        @abstractmethod
        def get_broadcast_state(self, state_descriptor: Any) -> Any:
            """A ``ReadOnlyBroadcastState`` view of ``state_descriptor``'s broadcast state."""


class BroadcastProcessFunction(BaseBroadcastProcessFunction):
    """Flink's ``BroadcastProcessFunction``: a non-keyed stream connected with a
    ``BroadcastStream`` (``ds.connect(other.broadcast(descriptor)).process(function)``)."""

    class Context(BaseBroadcastProcessFunction.Context, ABC):
        """Context of ``process_broadcast_element``."""

    class ReadOnlyContext(BaseBroadcastProcessFunction.ReadOnlyContext, ABC):
        """Context of ``process_element``."""

    @abstractmethod
    def process_element(self, value: Any, ctx: "BroadcastProcessFunction.ReadOnlyContext") -> Optional[Iterable[Any]]:
        """Called for each element of the non-broadcast stream; yields the outputs."""

    @abstractmethod
    def process_broadcast_element(self, value: Any, ctx: "BroadcastProcessFunction.Context") -> Optional[Iterable[Any]]:
        """Called for each element of the broadcast stream (in every parallel instance)."""


class KeyedBroadcastProcessFunction(BaseBroadcastProcessFunction):
    """Flink's ``KeyedBroadcastProcessFunction``: a ``KeyedStream`` connected with a
    ``BroadcastStream``. ``process_element`` has keyed state (through the runtime context),
    the current key and timers; ``process_broadcast_element`` can visit the keyed state of
    every key with ``ctx.apply_to_keyed_state(descriptor, function)``."""

    class Context(BaseBroadcastProcessFunction.Context, ABC):
        """Context of ``process_broadcast_element``."""

        def apply_to_keyed_state(self, state_descriptor: Any, function: Any) -> None:
            """Call ``function(key, state)`` (or ``function.process(key, state)``) for every key
            of this subtask that has a value in ``state_descriptor``'s keyed state (Flink's
            ``applyToKeyedState``)."""
            raise NotImplementedError

    class ReadOnlyContext(BaseBroadcastProcessFunction.ReadOnlyContext, ABC):
        """Context of ``process_element``: also the timer service and the current key."""

        @abstractmethod
        def timer_service(self) -> TimerService:
            """A ``TimerService`` to query time and register timers for the current key."""

        @abstractmethod
        def get_current_key(self) -> Any:
            """The key of the element being processed."""

    class OnTimerContext(ReadOnlyContext, ABC):
        """Context of ``on_timer``."""

        @abstractmethod
        def time_domain(self) -> TimeDomain:
            """Whether the firing timer is an event-time or a processing-time timer."""

    @abstractmethod
    def process_element(
        self, value: Any, ctx: "KeyedBroadcastProcessFunction.ReadOnlyContext"
    ) -> Optional[Iterable[Any]]:
        """Called for each element of the keyed stream; yields the outputs."""

    @abstractmethod
    def process_broadcast_element(
        self, value: Any, ctx: "KeyedBroadcastProcessFunction.Context"
    ) -> Optional[Iterable[Any]]:
        """Called for each element of the broadcast stream (in every parallel instance)."""

    def on_timer(self, timestamp: int, ctx: "KeyedBroadcastProcessFunction.OnTimerContext") -> Optional[Iterable[Any]]:
        """Called when a timer registered through ``ctx.timer_service()`` fires."""
        return None


class KeyedStateStore(ABC):
    """Access to keyed state (Flink's ``KeyedStateStore``): the per-window and the global
    state of a ``ProcessWindowFunction``."""

    @abstractmethod
    def get_state(self, state_descriptor: Any) -> Any:
        raise NotImplementedError

    @abstractmethod
    def get_list_state(self, state_descriptor: Any) -> Any:
        raise NotImplementedError

    @abstractmethod
    def get_map_state(self, state_descriptor: Any) -> Any:
        raise NotImplementedError

    @abstractmethod
    def get_reducing_state(self, state_descriptor: Any) -> Any:
        raise NotImplementedError

    @abstractmethod
    def get_aggregating_state(self, state_descriptor: Any) -> Any:
        raise NotImplementedError


class WindowFunction(Function, _Generic):
    """Evaluates a keyed window: ``apply(key, window, inputs)`` yields the results."""

    @abstractmethod
    def apply(self, key: Any, window: Any, inputs: Iterable[Any]) -> Iterable[Any]:
        raise NotImplementedError


class AllWindowFunction(Function, _Generic):
    """Evaluates a non-keyed window: ``apply(window, inputs)`` yields the results."""

    @abstractmethod
    def apply(self, window: Any, inputs: Iterable[Any]) -> Iterable[Any]:
        raise NotImplementedError


class WindowContext(ABC, _Generic):
    """What a process window function sees of its window (``ProcessWindowFunction.Context``)."""

    @abstractmethod
    def window(self) -> Any:
        raise NotImplementedError

    @abstractmethod
    def current_processing_time(self) -> int:
        raise NotImplementedError

    @abstractmethod
    def current_watermark(self) -> int:
        raise NotImplementedError

    @abstractmethod
    def window_state(self) -> KeyedStateStore:
        """State of the current key and window (clean it up in ``clear``)."""
        raise NotImplementedError

    @abstractmethod
    def global_state(self) -> KeyedStateStore:
        """State of the current key, across windows."""
        raise NotImplementedError

    def output(self, output_tag: Any, value: Any) -> None:
        """Emit ``value`` to a side output (timestamp: the window's max timestamp)."""
        raise NotImplementedError


class ProcessWindowFunction(Function, _Generic):
    """Evaluates a keyed window with its context: ``process(key, context, elements)``."""

    Context = WindowContext

    @abstractmethod
    def process(self, key: Any, context: WindowContext, elements: Iterable[Any]) -> Iterable[Any]:
        raise NotImplementedError

    def clear(self, context: WindowContext) -> None:
        """Called when the window is purged: delete per-window state here."""


class ProcessAllWindowFunction(Function, _Generic):
    """Evaluates a non-keyed window with its context: ``process(context, elements)``."""

    Context = WindowContext

    @abstractmethod
    def process(self, context: WindowContext, elements: Iterable[Any]) -> Iterable[Any]:
        raise NotImplementedError

    def clear(self, context: WindowContext) -> None:
        """Called when the window is purged: delete per-window state here."""


class SinkContext:
    """Context handed to ``SinkFunction.invoke`` (Flink's ``SinkFunction.Context``)."""

    def timestamp(self) -> Optional[int]:
        raise NotImplementedError

    def current_processing_time(self) -> int:
        raise NotImplementedError

    def current_watermark(self) -> int:
        raise NotImplementedError


class SinkFunction(Function):
    """Consume records at the end of a stream."""

    def invoke(self, value: Any, context: SinkContext) -> None:
        raise NotImplementedError


class SourceContext:
    """What ``SourceFunction.run`` emits through (Flink's ``SourceFunction.SourceContext``)."""

    def collect(self, value: Any) -> None:
        raise NotImplementedError

    def collect_with_timestamp(self, value: Any, timestamp: int) -> None:
        raise NotImplementedError

    def collect_batch(self, values: list) -> None:
        """raylink extension: ``collect`` every value of ``values`` (one call, much cheaper)."""
        for value in values:
            self.collect(value)

    def emit_watermark(self, watermark: Any) -> None:
        """Emit a watermark: an int (ms) or an object with a ``timestamp``."""
        raise NotImplementedError

    def get_runtime_context(self) -> "RuntimeContext":
        """Runtime context of this source subtask (subtask index, parallelism, ...)."""
        raise NotImplementedError


class SourceFunction(Function):
    """A source: ``run`` emits through ``ctx`` until done or until ``cancel`` is called.

    Each parallel subtask runs its own ``run``; it can find its position with
    ``ctx.get_runtime_context().get_index_of_this_subtask()`` (also passed to
    ``open``). ``cancel`` is called from another thread: ``run`` must watch a
    flag that ``cancel`` clears, e.g. ``while self.running: ...``.
    """

    def run(self, ctx: SourceContext) -> None:
        raise NotImplementedError

    def cancel(self) -> None:
        """Ask ``run`` to return soon (default: nothing to do)."""


class RuntimeContext(ABC):
    """Per parallel instance information and keyed state access (Flink's ``RuntimeContext``)."""

    @abstractmethod
    def get_task_name(self) -> str:
        raise NotImplementedError

    @abstractmethod
    def get_number_of_parallel_subtasks(self) -> int:
        raise NotImplementedError

    @abstractmethod
    def get_max_number_of_parallel_subtasks(self) -> int:
        raise NotImplementedError

    @abstractmethod
    def get_index_of_this_subtask(self) -> int:
        raise NotImplementedError

    @abstractmethod
    def get_attempt_number(self) -> int:
        raise NotImplementedError

    @abstractmethod
    def get_task_name_with_subtasks(self) -> str:
        raise NotImplementedError

    @abstractmethod
    def get_job_parameter(self, key: str, default_value: Optional[str] = None) -> Optional[str]:
        raise NotImplementedError

    @abstractmethod
    def get_metrics_group(self) -> Any:
        raise NotImplementedError

    def get_state(self, state_descriptor: Any) -> Any:
        raise NotImplementedError

    def get_list_state(self, state_descriptor: Any) -> Any:
        raise NotImplementedError

    def get_map_state(self, state_descriptor: Any) -> Any:
        raise NotImplementedError

    def get_reducing_state(self, state_descriptor: Any) -> Any:
        raise NotImplementedError

    def get_aggregating_state(self, state_descriptor: Any) -> Any:
        raise NotImplementedError


class AsyncFunction(Function, _Generic):
    """A function doing asynchronous I/O per record (PyFlink's ``AsyncFunction``), applied by
    ``AsyncDataStream.unordered_wait`` / ``ordered_wait``: ``async_invoke`` (``async def``)
    returns the list of results for one record; ``timeout`` gives the results of a record whose
    ``async_invoke`` did not finish in time (by default the job fails with a ``TimeoutError``)."""

    @abstractmethod
    async def async_invoke(self, value: Any) -> list:
        raise NotImplementedError

    def timeout(self, value: Any) -> list:
        raise TimeoutError("Async function call has timed out for input: " + str(value))


__all__ = [
    "AsyncFunction",
    "TimeDomain",
    "Function",
    "MapFunction",
    "FlatMapFunction",
    "FilterFunction",
    "ReduceFunction",
    "KeySelector",
    "Partitioner",
    "AggregateFunction",
    "KeyedStateStore",
    "WindowFunction",
    "AllWindowFunction",
    "WindowContext",
    "ProcessWindowFunction",
    "ProcessAllWindowFunction",
    "TimerService",
    "ProcessContext",
    "KeyedProcessContext",
    "OnTimerContext",
    "ProcessFunction",
    "KeyedProcessFunction",
    "CoMapFunction",
    "CoFlatMapFunction",
    "CoProcessFunction",
    "KeyedCoProcessFunction",
    "BaseBroadcastProcessFunction",
    "BroadcastProcessFunction",
    "KeyedBroadcastProcessFunction",
    "SinkContext",
    "SinkFunction",
    "SourceContext",
    "SourceFunction",
    "RuntimeContext",
]
