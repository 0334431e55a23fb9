"""Watermark and idleness alignment across input channels: Flink's ``StatusWatermarkValve``.

Each input channel has a watermark (initially ``Long.MIN_VALUE``), a status
(ACTIVE/IDLE) and an *aligned* flag. The output watermark is the minimum over
the aligned, active channels and is emitted only when it advances. A channel
that goes idle stops holding the watermark back; when all channels are idle
the output becomes IDLE (after releasing the max watermark across channels if
the channel that went idle last was the one holding the minimum). A channel
that becomes active again is not aligned — it does not take part in the
minimum — until its watermark catches up with the last output watermark.

``input_watermark(wm, channel) -> int | None``: the new output watermark, or
None. ``input_stream_status(status, channel) -> list`` of the elements to
forward, in order (``Watermark`` and/or ``WatermarkStatus``; empty if none) —
a list because a status change can also release a watermark.
"""

from __future__ import annotations

from typing import List, Optional, Union

from raylink.shuffle.elements import LONG_MIN, Watermark, WatermarkStatus

__all__ = ["StatusWatermarkValve"]


class _ChannelStatus:
    __slots__ = ("watermark", "idle", "aligned")

    def __init__(self) -> None:
        self.watermark = LONG_MIN
        self.idle = False
        self.aligned = True


class StatusWatermarkValve:
    """Combines per-channel watermarks and statuses into one output (not thread safe)."""

    def __init__(self, num_channels: int) -> None:
        if num_channels < 1:
            raise ValueError(f"num_channels must be >= 1, got {num_channels}")
        self._channels = [_ChannelStatus() for _ in range(num_channels)]
        self.last_output_watermark = LONG_MIN
        self.last_output_idle = False

    @property
    def num_channels(self) -> int:
        return len(self._channels)

    @property
    def output_status(self) -> WatermarkStatus:
        return WatermarkStatus.IDLE if self.last_output_idle else WatermarkStatus.ACTIVE

    def channel_watermark(self, channel: int) -> int:
        return self._channels[channel].watermark

    def is_channel_idle(self, channel: int) -> bool:
        return self._channels[channel].idle

    def is_channel_aligned(self, channel: int) -> bool:
        return self._channels[channel].aligned

    def input_watermark(self, watermark: Union[Watermark, int], channel: int) -> Optional[int]:
        """Feed a channel's watermark; returns the new output watermark or None."""
        ts = watermark.timestamp if isinstance(watermark, Watermark) else int(watermark)
        ch = self._channels[channel]
        # watermarks from idle channels (or while the output is idle) are ignored, as in Flink
        if self.last_output_idle or ch.idle:
            return None
        if ts > ch.watermark:
            ch.watermark = ts
            if not ch.aligned and ts >= self.last_output_watermark:
                ch.aligned = True
            return self._new_min_across_aligned()
        return None

    def input_stream_status(self, status: Union[WatermarkStatus, bool], channel: int) -> List[object]:
        """Feed a channel's status; returns the elements to forward (maybe empty)."""
        idle = status.idle if isinstance(status, WatermarkStatus) else bool(status)
        ch = self._channels[channel]
        out: List[object] = []
        if idle and not ch.idle:
            ch.idle = True
            ch.aligned = False
            if not any(not c.idle for c in self._channels):
                # all idle: the channel that just went idle may have held back the watermark
                if ch.watermark == self.last_output_watermark:
                    wm = self._max_across_all()
                    if wm is not None:
                        out.append(Watermark(wm))
                self.last_output_idle = True
                out.append(WatermarkStatus.IDLE)
            elif ch.watermark == self.last_output_watermark:
                wm = self._new_min_across_aligned()
                if wm is not None:
                    out.append(Watermark(wm))
        elif not idle and ch.idle:
            ch.idle = False
            if ch.watermark >= self.last_output_watermark:
                ch.aligned = True
            if self.last_output_idle:
                self.last_output_idle = False
                out.append(WatermarkStatus.ACTIVE)
        return out

    def _new_min_across_aligned(self) -> Optional[int]:
        new_min = None
        for c in self._channels:
            if c.aligned and (new_min is None or c.watermark < new_min):
                new_min = c.watermark
        if new_min is not None and new_min > self.last_output_watermark:
            self.last_output_watermark = new_min
            return new_min
        return None

    def _max_across_all(self) -> Optional[int]:
        mx = max(c.watermark for c in self._channels)
        if mx > self.last_output_watermark:
            self.last_output_watermark = mx
            return mx
        return None
