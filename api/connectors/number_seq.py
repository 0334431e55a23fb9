"""PyFlink's ``NumberSequenceSource`` (``pyflink.datastream.connectors.number_seq``): a
bounded, parallel source of the longs ``start..end`` for ``env.from_source``.

Each subtask emits a contiguous part of the range (Flink splits it the same way into
``NumberSequenceSplit``s) and checkpoints its position; the range is the same one
``env.from_sequence(start, end)`` emits, which is Flink's shortcut for this source.
"""

from __future__ import annotations

from typing import Any


class NumberSequenceSource:
    """The numbers ``start`` to ``end`` inclusive, split over the source's subtasks."""

    def __init__(self, start: int, end: int) -> None:
        if not isinstance(start, int) or not isinstance(end, int):
            raise TypeError("NumberSequenceSource: start and end must be integers")
        if end < start:
            raise ValueError(f"NumberSequenceSource: start ({start}) must be <= end ({end})")
        self.start = start
        self.end = end

    def _raylink_source_spec(self) -> tuple[str, Any, dict, bool]:
        """(operator kind, function, parameters, non-parallel) for ``env.from_source``."""
        return "source_sequence", None, {"start": self.start, "end": self.end}, False

    def __repr__(self) -> str:
        return f"NumberSequenceSource({self.start}, {self.end})"
