"""Evictors: Flink's ``Evictor``, ``CountEvictor`` and ``TimeEvictor``.

An evictor removes elements of a window, in place, from its list of
``TimestampedValue``s (arrival order) before and/or after the window function
runs; the window operator keeps what remains. Import them from ``raylink.api.window``.
"""

from __future__ import annotations

from typing import Any, List, Optional

from raylink.core.time import to_millis
from raylink.core.window_types import _Generic


class TimestampedValue:
    """An element of a window with its timestamp (``None``: the record had none)."""

    __slots__ = ("value", "timestamp")

    def __init__(self, value: Any, timestamp: Optional[int] = None) -> None:
        self.value = value
        self.timestamp = timestamp

    def get_value(self) -> Any:
        return self.value

    def get_timestamp(self) -> Optional[int]:
        return self.timestamp

    def has_timestamp(self) -> bool:
        return self.timestamp is not None

    def __eq__(self, other: object) -> bool:
        return isinstance(other, TimestampedValue) and other.value == self.value and other.timestamp == self.timestamp

    def __repr__(self) -> str:
        return f"TimestampedValue({self.value!r}, {self.timestamp!r})"


class Evictor(_Generic):
    """Removes elements from a window before and/or after the window function runs.

    ``elements`` is the window's list of ``TimestampedValue``s in arrival order; an
    evictor removes from it in place (``del elements[i]``, slice assignment ...).
    """

    class EvictorContext:
        def get_current_processing_time(self) -> int:
            raise NotImplementedError

        def get_metric_group(self) -> Any:
            raise NotImplementedError

        def get_current_watermark(self) -> int:
            raise NotImplementedError

    def evict_before(self, elements: List[TimestampedValue], size: int, window: Any, evictor_context: Any) -> None:
        pass

    def evict_after(self, elements: List[TimestampedValue], size: int, window: Any, evictor_context: Any) -> None:
        pass


class CountEvictor(Evictor):
    """Keeps the last ``max_count`` elements (before the function, or after it with ``do_evict_after``)."""

    def __init__(self, max_count: int, do_evict_after: bool = False) -> None:
        if not isinstance(max_count, int) or isinstance(max_count, bool) or max_count < 0:
            raise ValueError(f"CountEvictor: max_count must be a non-negative int, got {max_count!r}")
        self.max_count = max_count
        self.do_evict_after = do_evict_after

    @staticmethod
    def of(max_count: int, do_evict_after: bool = False) -> "CountEvictor":
        return CountEvictor(max_count, do_evict_after)

    def _evict(self, elements: List[TimestampedValue], size: int) -> None:
        if size > self.max_count:
            del elements[: size - self.max_count]

    def evict_before(self, elements: List[TimestampedValue], size: int, window: Any, evictor_context: Any) -> None:
        if not self.do_evict_after:
            self._evict(elements, size)

    def evict_after(self, elements: List[TimestampedValue], size: int, window: Any, evictor_context: Any) -> None:
        if self.do_evict_after:
            self._evict(elements, size)

    def __repr__(self) -> str:
        return f"CountEvictor({self.max_count})"


class TimeEvictor(Evictor):
    """Keeps the elements newer than ``window_size`` before the newest element's timestamp."""

    def __init__(self, window_size: int, do_evict_after: bool = False) -> None:
        if window_size < 0:
            raise ValueError(f"TimeEvictor: window size must not be negative, got {window_size} ms")
        self.window_size = window_size
        self.do_evict_after = do_evict_after

    @staticmethod
    def of(window_size: Any, do_evict_after: bool = False) -> "TimeEvictor":
        return TimeEvictor(to_millis(window_size, "TimeEvictor: window_size"), do_evict_after)

    def _evict(self, elements: List[TimestampedValue]) -> None:
        if not elements or not elements[0].has_timestamp():
            return
        cutoff = max(e.timestamp for e in elements) - self.window_size
        elements[:] = [e for e in elements if e.timestamp > cutoff]

    def evict_before(self, elements: List[TimestampedValue], size: int, window: Any, evictor_context: Any) -> None:
        if not self.do_evict_after:
            self._evict(elements)

    def evict_after(self, elements: List[TimestampedValue], size: int, window: Any, evictor_context: Any) -> None:
        if self.do_evict_after:
            self._evict(elements)

    def __repr__(self) -> str:
        return f"TimeEvictor({self.window_size})"


__all__ = ["TimestampedValue", "Evictor", "CountEvictor", "TimeEvictor"]
