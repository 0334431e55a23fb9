"""Window assigners: Flink's ``WindowAssigner`` family and PyFlink's count assigners.

Tumbling / sliding windows start at ``ts - (ts - offset) mod size`` (``slide`` for
sliding windows; an element belongs to every sliding window containing it);
sessions are ``[ts, ts + gap)`` per element, merged while they intersect (touching
ones included); processing-time twins use the operator's clock instead of the
element's timestamp; ``GlobalWindows`` puts everything in one window whose default
trigger never fires. Immutable configuration. Import them from ``raylink.api.window``.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, List

from raylink.core.state import ValueStateDescriptor
from raylink.core.time import to_millis
from raylink.core.triggers import CountTrigger, EventTimeTrigger, NeverTrigger, ProcessingTimeTrigger, Trigger
from raylink.core.window_types import MIN_LONG_VALUE, CountWindow, GlobalWindow, TimeWindow, _Generic

_NO_TIMESTAMP = (
    "Record has Long.MIN_VALUE timestamp (= no timestamp marker). Is the time characteristic set to "
    "'ProcessingTime', or did you forget to call 'data_stream.assign_timestamps_and_watermarks(...)'?"
)


class WindowAssigner(_Generic):
    """Assigns zero or more windows to each element (Flink's ``WindowAssigner``)."""

    class WindowAssignerContext:
        def get_current_processing_time(self) -> int:
            raise NotImplementedError

        def get_runtime_context(self) -> Any:
            raise NotImplementedError

    def assign_windows(self, element: Any, timestamp: int, context: Any) -> List[Any]:
        raise NotImplementedError

    def get_default_trigger(self, env: Any = None) -> Trigger:
        raise NotImplementedError

    def is_event_time(self) -> bool:
        raise NotImplementedError

    def get_window_serializer(self) -> Any:
        return None  # windows travel as Python objects

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class MergingWindowAssigner(WindowAssigner):
    """An assigner whose windows can merge (sessions)."""

    class MergeCallback:
        def merge(self, to_be_merged: Iterable[Any], merge_result: Any) -> None:
            raise NotImplementedError

    def merge_windows(self, windows: Iterable[Any], callback: Any) -> None:
        raise NotImplementedError


def _size_and_offset(name: str, size: Any, offset: Any) -> "tuple[int, int]":
    size_ms = to_millis(size, f"{name}: size")
    offset_ms = 0 if offset is None else to_millis(offset, f"{name}: offset")
    return size_ms, offset_ms


class TumblingEventTimeWindows(WindowAssigner):
    """Windows of ``size`` ms by the elements' timestamps (``[start, start + size)``)."""

    def __init__(self, size: int, offset: int = 0) -> None:
        if size <= 0 or abs(offset) >= size:
            raise ValueError(
                f"{type(self).__name__} parameters must satisfy abs(offset) < size (size {size} ms, offset {offset} ms)"
            )
        self.size = size
        self.offset = offset

    @classmethod
    def of(cls, size: Any, offset: Any = None) -> "TumblingEventTimeWindows":
        return cls(*_size_and_offset(cls.__name__, size, offset))

    def assign_windows(self, element: Any, timestamp: int, context: Any) -> List[TimeWindow]:
        if timestamp is None or timestamp <= MIN_LONG_VALUE:
            raise RuntimeError(_NO_TIMESTAMP)
        start = timestamp - (timestamp - self.offset) % self.size
        return [TimeWindow(start, start + self.size)]

    def get_default_trigger(self, env: Any = None) -> Trigger:
        return EventTimeTrigger()

    def is_event_time(self) -> bool:
        return True

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.size}, {self.offset})"


class TumblingProcessingTimeWindows(TumblingEventTimeWindows):
    """Windows of ``size`` ms by the processing-time clock of the window operator."""

    def assign_windows(self, element: Any, timestamp: int, context: Any) -> List[TimeWindow]:
        now = context.get_current_processing_time()
        start = now - (now - self.offset) % self.size
        return [TimeWindow(start, start + self.size)]

    def get_default_trigger(self, env: Any = None) -> Trigger:
        return ProcessingTimeTrigger()

    def is_event_time(self) -> bool:
        return False


class SlidingEventTimeWindows(WindowAssigner):
    """Windows of ``size`` ms starting every ``slide`` ms; an element is in every one containing it."""

    def __init__(self, size: int, slide: int, offset: int = 0) -> None:
        if size <= 0 or slide <= 0 or abs(offset) >= slide:
            raise ValueError(
                f"{type(self).__name__} parameters must satisfy abs(offset) < slide and size > 0 "
                f"(size {size} ms, slide {slide} ms, offset {offset} ms)"
            )
        self.size = size
        self.slide = slide
        self.offset = offset

    @classmethod
    def of(cls, size: Any, slide: Any, offset: Any = None) -> "SlidingEventTimeWindows":
        size_ms, offset_ms = _size_and_offset(cls.__name__, size, offset)
        return cls(size_ms, to_millis(slide, f"{cls.__name__}: slide"), offset_ms)

    def _windows(self, timestamp: int) -> List[TimeWindow]:
        size = self.size
        last_start = timestamp - (timestamp - self.offset) % self.slide
        return [TimeWindow(start, start + size) for start in range(last_start, timestamp - size, -self.slide)]

    def assign_windows(self, element: Any, timestamp: int, context: Any) -> List[TimeWindow]:
        if timestamp is None or timestamp <= MIN_LONG_VALUE:
            raise RuntimeError(_NO_TIMESTAMP)
        return self._windows(timestamp)

    def get_default_trigger(self, env: Any = None) -> Trigger:
        return EventTimeTrigger()

    def is_event_time(self) -> bool:
        return True

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.size}, {self.slide}, {self.offset})"


class SlidingProcessingTimeWindows(SlidingEventTimeWindows):
    """Sliding windows by the processing-time clock of the window operator."""

    def assign_windows(self, element: Any, timestamp: int, context: Any) -> List[TimeWindow]:
        return self._windows(context.get_current_processing_time())

    def get_default_trigger(self, env: Any = None) -> Trigger:
        return ProcessingTimeTrigger()

    def is_event_time(self) -> bool:
        return False


class SessionWindowTimeGapExtractor:
    """Gives the session gap (ms) of an element for dynamic session windows."""

    def extract(self, element: Any) -> int:
        raise NotImplementedError


class EventTimeSessionWindows(MergingWindowAssigner):
    """Sessions by timestamp: ``[ts, ts + gap)`` per element, merged while they intersect."""

    def __init__(self, session_gap: int) -> None:
        if session_gap <= 0:
            raise ValueError(f"{type(self).__name__} parameters must satisfy 0 < size (gap {session_gap} ms)")
        self.session_gap = session_gap

    @classmethod
    def with_gap(cls, size: Any) -> "EventTimeSessionWindows":
        return cls(to_millis(size, f"{cls.__name__}: gap"))

    @staticmethod
    def with_dynamic_gap(extractor: Any) -> "DynamicEventTimeSessionWindows":
        return DynamicEventTimeSessionWindows(extractor)

    def _gap(self, element: Any) -> int:
        return self.session_gap

    def _timestamp(self, timestamp: int, context: Any) -> int:
        if timestamp is None or timestamp <= MIN_LONG_VALUE:
            raise RuntimeError(_NO_TIMESTAMP)
        return timestamp

    def assign_windows(self, element: Any, timestamp: int, context: Any) -> List[TimeWindow]:
        ts = self._timestamp(timestamp, context)
        return [TimeWindow(ts, ts + self._gap(element))]

    def merge_windows(self, windows: Iterable[Any], callback: Any) -> None:
        TimeWindow.merge_windows(windows, callback)

    def get_default_trigger(self, env: Any = None) -> Trigger:
        return EventTimeTrigger()

    def is_event_time(self) -> bool:
        return True

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.session_gap})"


class ProcessingTimeSessionWindows(EventTimeSessionWindows):
    """Sessions by the processing-time clock of the window operator."""

    @staticmethod
    def with_dynamic_gap(extractor: Any) -> "DynamicProcessingTimeSessionWindows":
        return DynamicProcessingTimeSessionWindows(extractor)

    def _timestamp(self, timestamp: int, context: Any) -> int:
        return context.get_current_processing_time()

    def get_default_trigger(self, env: Any = None) -> Trigger:
        return ProcessingTimeTrigger()

    def is_event_time(self) -> bool:
        return False


def _gap_extractor(extractor: Any, name: str) -> Callable[[Any], int]:
    extract = getattr(extractor, "extract", None)
    if callable(extract) and not isinstance(extractor, type):
        return extract
    if callable(extractor):
        return extractor
    raise TypeError(f"{name}: expected a SessionWindowTimeGapExtractor or a callable, got {extractor!r}")


class DynamicEventTimeSessionWindows(EventTimeSessionWindows):
    """Event-time sessions whose gap ``extractor.extract(element)`` gives per element."""

    def __init__(self, session_window_time_gap_extractor: Any) -> None:
        self.extractor = session_window_time_gap_extractor
        self._extract = _gap_extractor(session_window_time_gap_extractor, type(self).__name__)
        self.session_gap = 0

    @classmethod
    def with_dynamic_gap(cls, extractor: Any) -> "DynamicEventTimeSessionWindows":  # type: ignore[override]
        return cls(extractor)

    def _gap(self, element: Any) -> int:
        gap = to_millis(self._extract(element), "session gap")
        if gap <= 0:
            raise ValueError(f"Dynamic session time gap must satisfy 0 < gap, got {gap} ms for {element!r}")
        return gap

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.extractor!r})"


class DynamicProcessingTimeSessionWindows(DynamicEventTimeSessionWindows):
    """Processing-time sessions with a gap per element."""

    def _timestamp(self, timestamp: int, context: Any) -> int:
        return context.get_current_processing_time()

    def get_default_trigger(self, env: Any = None) -> Trigger:
        return ProcessingTimeTrigger()

    def is_event_time(self) -> bool:
        return False


class GlobalWindows(WindowAssigner):
    """Every element in the one ``GlobalWindow``; the default trigger never fires."""

    _WINDOWS = [GlobalWindow()]

    @staticmethod
    def create() -> "GlobalWindows":
        return GlobalWindows()

    def assign_windows(self, element: Any, timestamp: int, context: Any) -> List[GlobalWindow]:
        return self._WINDOWS

    def get_default_trigger(self, env: Any = None) -> Trigger:
        return NeverTrigger()

    def is_event_time(self) -> bool:
        return False


class CountTumblingWindowAssigner(WindowAssigner):
    """PyFlink's count windows: element ``n`` of a key goes to ``CountWindow(n // size)``."""

    def __init__(self, window_size: int) -> None:
        if window_size <= 0:
            raise ValueError(f"CountTumblingWindowAssigner: window size must be positive, got {window_size}")
        self.window_size = window_size
        self.count_descriptor = ValueStateDescriptor("tumble-count-assigner")

    @staticmethod
    def of(window_size: int) -> "CountTumblingWindowAssigner":
        return CountTumblingWindowAssigner(window_size)

    def assign_windows(self, element: Any, timestamp: int, context: Any) -> List[CountWindow]:
        state = context.get_runtime_context().get_state(self.count_descriptor)
        count = state.value() or 0
        state.update(count + 1)
        return [CountWindow(count // self.window_size)]

    def get_default_trigger(self, env: Any = None) -> Trigger:
        return CountTrigger(self.window_size)

    def is_event_time(self) -> bool:
        return False

    def __repr__(self) -> str:
        return f"CountTumblingWindowAssigner({self.window_size})"


class CountSlidingWindowAssigner(WindowAssigner):
    """PyFlink's sliding count windows (each window fires once it holds ``size`` elements)."""

    def __init__(self, window_size: int, window_slide: int) -> None:
        if window_size <= 0 or window_slide <= 0:
            raise ValueError(
                f"CountSlidingWindowAssigner: size and slide must be positive, got {window_size} and {window_slide}"
            )
        self.window_size = window_size
        self.window_slide = window_slide
        self.count_descriptor = ValueStateDescriptor("slide-count-assigner")

    @staticmethod
    def of(window_size: int, window_slide: int) -> "CountSlidingWindowAssigner":
        return CountSlidingWindowAssigner(window_size, window_slide)

    def assign_windows(self, element: Any, timestamp: int, context: Any) -> List[CountWindow]:
        state = context.get_runtime_context().get_state(self.count_descriptor)
        count = state.value() or 0
        state.update(count + 1)
        last_id = count // self.window_slide
        windows = []
        window_id = last_id
        while (
            window_id >= 0 and window_id * self.window_slide <= count < window_id * self.window_slide + self.window_size
        ):
            windows.append(CountWindow(window_id))
            window_id -= 1
        return windows

    def get_default_trigger(self, env: Any = None) -> Trigger:
        return CountTrigger(self.window_size)

    def is_event_time(self) -> bool:
        return False

    def __repr__(self) -> str:
        return f"CountSlidingWindowAssigner({self.window_size}, {self.window_slide})"


__all__ = [
    "WindowAssigner",
    "MergingWindowAssigner",
    "TumblingEventTimeWindows",
    "TumblingProcessingTimeWindows",
    "SlidingEventTimeWindows",
    "SlidingProcessingTimeWindows",
    "SessionWindowTimeGapExtractor",
    "EventTimeSessionWindows",
    "ProcessingTimeSessionWindows",
    "DynamicEventTimeSessionWindows",
    "DynamicProcessingTimeSessionWindows",
    "GlobalWindows",
    "CountTumblingWindowAssigner",
    "CountSlidingWindowAssigner",
]
