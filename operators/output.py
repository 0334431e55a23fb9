"""The output an operator emits into: Flink's ``Output`` (``Collector`` + watermarks).

The OperatorChain implements this protocol (``ChainingOutput`` calls the next
operator, ``RecordWriterOutput`` serialises into a partition, a broadcasting
output fans out). Records are bare values; their timestamp is whatever
``runtime_context.record_context.timestamp`` holds at the time of the call —
for ``collect_batch`` that one timestamp applies to every value of the batch.

``CollectingOutput`` records everything for tests; ``DiscardingOutput`` is the
output of a chain's last operator (a sink).
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional


class Output:
    """Protocol of an operator's output (all methods must be implemented)."""

    def collect(self, value: Any) -> None:
        raise NotImplementedError

    def collect_batch(self, values: List[Any]) -> None:
        """Emit several records; the list belongs to the callee afterwards."""
        raise NotImplementedError

    def collect_side(self, output_tag: Any, value: Any) -> None:
        """Emit to the side output named by ``output_tag`` (has ``tag_id``)."""
        raise NotImplementedError

    def emit_watermark(self, timestamp: int) -> None:
        raise NotImplementedError

    def emit_latency_marker(self, marker: Any) -> None:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError


class DiscardingOutput(Output):
    """Drops everything (what a sink at the end of a chain writes into)."""

    def collect(self, value: Any) -> None:
        pass

    def collect_batch(self, values: List[Any]) -> None:
        pass

    def collect_side(self, output_tag: Any, value: Any) -> None:
        pass

    def emit_watermark(self, timestamp: int) -> None:
        pass

    def emit_latency_marker(self, marker: Any) -> None:
        pass

    def close(self) -> None:
        pass


class CollectingOutput(Output):
    """Keeps every record, side output, watermark and latency marker (for tests).

    ``records``: main-output values in order; ``side_outputs``: tag id -> values;
    ``watermarks``: emitted watermark timestamps; ``batches``: how many
    ``collect_batch`` calls arrived. With a ``record_context``, ``timestamps``
    holds the record timestamp seen at each main-output record.
    """

    def __init__(self, record_context: Optional[Any] = None) -> None:
        self.records: List[Any] = []
        self.side_outputs: Dict[str, List[Any]] = {}
        self.watermarks: List[int] = []
        self.latency_markers: List[Any] = []
        self.timestamps: List[Optional[int]] = []
        self.batches = 0
        self.closed = False
        self._record_context = record_context

    def collect(self, value: Any) -> None:
        self.records.append(value)
        if self._record_context is not None:
            self.timestamps.append(self._record_context.timestamp)

    def collect_batch(self, values: List[Any]) -> None:
        self.batches += 1
        self.records.extend(values)
        if self._record_context is not None:
            self.timestamps.extend([self._record_context.timestamp] * len(values))

    def collect_side(self, output_tag: Any, value: Any) -> None:
        self.side_outputs.setdefault(output_tag.tag_id, []).append(value)

    def emit_watermark(self, timestamp: int) -> None:
        self.watermarks.append(timestamp)

    def emit_latency_marker(self, marker: Any) -> None:
        self.latency_markers.append(marker)

    def close(self) -> None:
        self.closed = True

    def clear(self) -> None:
        self.records.clear()
        self.side_outputs.clear()
        self.watermarks.clear()
        self.latency_markers.clear()
        self.timestamps.clear()
        self.batches = 0


__all__ = ["Output", "DiscardingOutput", "CollectingOutput"]
