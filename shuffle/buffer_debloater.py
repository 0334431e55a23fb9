"""Flink's ``BufferDebloater`` (FLIP-183): size network buffers by the consumer's throughput.

A remote channel keeps credit for two transport batches (64 buffers of 32 KiB
by default), far more than Flink's 2 exclusive + 8 floating buffers, because a
Ray call is expensive. Behind a slow consumer that much data in flight would
take many seconds to drain. The debloater bounds it in *time* instead: every
``period`` the task measures how fast it consumes a gate's data while it is not
idle (Flink's ``ThroughputCalculator``), averages it over ``samples``
measurements, and asks the producers of the gate's remote channels for buffers
of ``throughput * target / buffers`` bytes (between ``min_size`` and the segment
size), so the gate's buffers hold about ``target`` of work. Buffer *counts*,
and with them the credit protocol, stay as they are.

A new size is announced only when it differs from the current one by at least
``threshold`` (a fraction of it). Remote channels start at ``initial_size``:
before the first measurement a slow consumer would otherwise receive whole
segments, the most data in flight of all.
"""

from __future__ import annotations

from typing import Optional

__all__ = ["BufferDebloater", "DebloatSettings", "MIN_BUFFER_SIZE"]

#: Flink's ``taskmanager.memory.min-segment-size``
MIN_BUFFER_SIZE = 256
#: busy time a measurement needs before it says anything about throughput
MIN_BUSY_NS = 5_000_000


class DebloatSettings:
    """Flink's ``taskmanager.network.memory.buffer-debloat.*`` options (plus the start size);
    the TaskExecutor's ``NetworkSettings`` reads them from the configuration."""

    def __init__(
        self,
        enabled: bool = True,
        target_ms: int = 1000,
        period_ms: int = 200,
        samples: int = 20,
        threshold_percentages: int = 25,
        max_size: int = 32 * 1024,
        initial_size: int = 4096,
    ) -> None:
        for name, value in (("target", target_ms), ("period", period_ms), ("samples", samples)):
            if value <= 0:
                raise ValueError(f"buffer debloat {name} must be > 0, got {value}")
        self.enabled = enabled
        self.target_ms = target_ms
        self.period_ms = period_ms
        self.samples = samples
        self.threshold = threshold_percentages / 100.0
        self.max_size = max_size
        self.initial_size = min(max_size, initial_size)


class BufferDebloater:
    """The buffer size for one input gate from its measured throughput (see the module doc)."""

    def __init__(self, settings: DebloatSettings, num_buffers: int) -> None:
        self.settings = settings
        self.num_buffers = max(1, num_buffers)
        self.buffer_size = settings.initial_size
        self.throughput: Optional[float] = None  # bytes per second of non-idle time, averaged
        self._alpha = 2.0 / (settings.samples + 1)
        self._last_bytes = 0
        self._last_busy_ns = 0

    def measure(self, total_bytes: int, total_busy_ns: int) -> Optional[int]:
        """Take the gate's consumed bytes and the task's non-idle time so far (both
        cumulative); returns a new buffer size to announce, or None."""
        num_bytes = total_bytes - self._last_bytes
        busy_ns = total_busy_ns - self._last_busy_ns
        if busy_ns < MIN_BUSY_NS:
            return None  # idle since the last measurement: nothing learned
        self._last_bytes, self._last_busy_ns = total_bytes, total_busy_ns
        rate = num_bytes * 1e9 / busy_ns
        if self.throughput is None:
            self.throughput = rate
        else:
            self.throughput += self._alpha * (rate - self.throughput)
        s = self.settings
        size = int(self.throughput * s.target_ms / 1000.0 / self.num_buffers)
        size = max(MIN_BUFFER_SIZE, min(s.max_size, size))
        if size == self.buffer_size or (
            abs(size - self.buffer_size) < s.threshold * self.buffer_size and size != s.max_size
        ):
            return None
        self.buffer_size = size
        return size
