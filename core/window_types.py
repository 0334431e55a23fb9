"""Windows: Flink's ``Window``, ``TimeWindow``, ``GlobalWindow`` and PyFlink's ``CountWindow``.

``TimeWindow`` is the interval ``[start, end)`` in milliseconds with
``max_timestamp() == end - 1``; it is a tuple subclass, so it hashes and compares
in C — it is the namespace of window state and timers. ``GlobalWindow`` is the
single window of ``GlobalWindows`` (``max_timestamp`` = ``Long.MAX_VALUE``).
Immutable values, safe to share. Import them from ``raylink.api.window``.
"""

from __future__ import annotations

from operator import itemgetter
from typing import Any, Iterable, List, Optional

MAX_LONG_VALUE = (1 << 63) - 1
MIN_LONG_VALUE = -(1 << 63)


class _Generic:
    """PyFlink's triggers and assigners are ``Generic``: ``Trigger[T, W]`` is the class itself here."""

    def __class_getitem__(cls, _params: Any) -> type:
        return cls


class Window:
    """A finite bucket of elements; all of them have arrived once time passes ``max_timestamp()``."""

    __slots__ = ()

    def max_timestamp(self) -> int:
        raise NotImplementedError


class TimeWindow(tuple, Window):
    """The interval ``[start, end)`` in milliseconds (Flink's ``TimeWindow``)."""

    __slots__ = ()

    def __new__(cls, start: int, end: int) -> "TimeWindow":
        return tuple.__new__(cls, (start, end))

    def __getnewargs__(self):  # pickling goes through __new__(start, end)
        return tuple(self)

    start = property(itemgetter(0), doc="First millisecond in the window.")
    end = property(itemgetter(1), doc="First millisecond after the window.")

    def max_timestamp(self) -> int:
        return self[1] - 1

    def get_start(self) -> int:
        return self[0]

    def get_end(self) -> int:
        return self[1]

    def intersects(self, other: "TimeWindow") -> bool:
        """True if the windows overlap or touch (``[0, 5)`` and ``[5, 10)`` intersect)."""
        return self[0] <= other[1] and self[1] >= other[0]

    def cover(self, other: "TimeWindow") -> "TimeWindow":
        """The smallest window containing both."""
        return TimeWindow(min(self[0], other[0]), max(self[1], other[1]))

    @staticmethod
    def get_window_start_with_offset(timestamp: int, offset: int, window_size: int) -> int:
        """Start of the window of ``window_size`` (shifted by ``offset``) holding ``timestamp``."""
        return timestamp - (timestamp - offset) % window_size

    @staticmethod
    def merge_windows(windows: Iterable["TimeWindow"], callback: Any) -> None:
        """Merge intersecting windows: ``callback.merge(to_be_merged, merge_result)`` (or
        ``callback(to_be_merged, merge_result)``) for every group of two or more."""
        merge = getattr(callback, "merge", callback)
        current: Optional[TimeWindow] = None
        group: List[TimeWindow] = []
        for candidate in sorted(windows):
            if current is None:
                current, group = candidate, [candidate]
            elif current.intersects(candidate):
                current = current.cover(candidate)
                if candidate != group[-1]:  # a set of windows, as in Flink
                    group.append(candidate)
            else:
                if len(group) > 1:
                    merge(group, current)
                current, group = candidate, [candidate]
        if current is not None and len(group) > 1:
            merge(group, current)

    def __repr__(self) -> str:
        return f"TimeWindow(start={self[0]}, end={self[1]})"


class GlobalWindow(Window):
    """The single window of ``GlobalWindows`` (a singleton)."""

    __slots__ = ()
    _instance: Optional["GlobalWindow"] = None

    def __new__(cls) -> "GlobalWindow":
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    @staticmethod
    def get() -> "GlobalWindow":
        return GlobalWindow()

    def max_timestamp(self) -> int:
        return MAX_LONG_VALUE

    def __eq__(self, other: object) -> bool:
        return type(other) is GlobalWindow

    def __hash__(self) -> int:
        return 0

    def __reduce__(self):
        return (GlobalWindow, ())

    def __repr__(self) -> str:
        return "GlobalWindow"


class CountWindow(Window):
    """Window number ``id`` of PyFlink's count assigners."""

    __slots__ = ("id",)

    def __init__(self, id: int) -> None:  # noqa: A002 - PyFlink's name
        self.id = id

    def max_timestamp(self) -> int:
        return MAX_LONG_VALUE

    def __eq__(self, other: object) -> bool:
        return type(other) is CountWindow and other.id == self.id

    def __hash__(self) -> int:
        return hash(("CountWindow", self.id))

    def __reduce__(self):
        return (CountWindow, (self.id,))

    def __repr__(self) -> str:
        return f"CountWindow(id={self.id})"


__all__ = ["MAX_LONG_VALUE", "MIN_LONG_VALUE", "Window", "TimeWindow", "GlobalWindow", "CountWindow"]
