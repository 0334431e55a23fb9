"""StatusWatermarkValve: min over active channels, idleness, realignment (Flink semantics)."""

import pytest

from raylink.shuffle.elements import Watermark, WatermarkStatus
from raylink.shuffle.watermark_valve import StatusWatermarkValve

pytestmark = pytest.mark.timeout(30)

IDLE, ACTIVE = WatermarkStatus.IDLE, WatermarkStatus.ACTIVE


def test_single_channel_emits_only_increasing_watermarks():
    v = StatusWatermarkValve(1)
    assert v.input_watermark(Watermark(0), 0) == 0
    assert v.input_watermark(Watermark(25), 0) == 25
    assert v.input_watermark(Watermark(18), 0) is None
    assert v.input_watermark(25, 0) is None
    assert v.input_watermark(42, 0) == 42


def test_output_waits_for_every_channel_and_is_the_minimum():
    v = StatusWatermarkValve(3)
    assert v.input_watermark(10, 0) is None
    assert v.input_watermark(7, 1) is None
    assert v.input_watermark(12, 2) == 7
    assert v.input_watermark(9, 1) == 9
    assert v.input_watermark(20, 1) == 10
    assert v.input_watermark(11, 0) == 11
    assert v.input_watermark(30, 0) == 12


def test_idle_channel_no_longer_holds_back_the_watermark():
    v = StatusWatermarkValve(3)
    v.input_watermark(10, 0)
    v.input_watermark(7, 1)
    assert v.input_watermark(3, 2) == 3
    assert v.input_stream_status(IDLE, 2) == [Watermark(7)]
    assert not v.is_channel_aligned(2)
    assert v.input_watermark(50, 2) is None  # watermarks of idle channels are ignored
    assert v.channel_watermark(2) == 3


def test_resumed_channel_realigns_only_after_catching_up():
    v = StatusWatermarkValve(3)
    v.input_watermark(10, 0)
    v.input_watermark(7, 1)
    v.input_watermark(3, 2)
    v.input_stream_status(IDLE, 2)  # -> 7
    assert v.input_stream_status(ACTIVE, 2) == []  # output never went idle
    assert not v.is_channel_aligned(2)
    assert v.input_watermark(5, 2) is None  # behind the output (7): not aligned
    assert v.input_watermark(12, 1) == 10
    assert v.input_watermark(11, 2) is None  # caught up -> aligned, min still 10
    assert v.is_channel_aligned(2)
    assert v.input_watermark(15, 0) == 11  # now channel 2 holds the minimum


def test_all_idle_releases_max_watermark_then_idle_then_active():
    v = StatusWatermarkValve(2)
    v.input_watermark(5, 0)
    assert v.input_watermark(8, 1) == 5
    assert v.input_stream_status(IDLE, 1) == []  # channel 1 was not holding the minimum
    assert v.input_stream_status(IDLE, 0) == [Watermark(8), IDLE]
    assert v.output_status is IDLE
    assert v.input_watermark(100, 0) is None  # output idle: ignored
    assert v.input_stream_status(IDLE, 0) == []  # no change
    assert v.input_stream_status(ACTIVE, 0) == [ACTIVE]
    assert v.input_stream_status(ACTIVE, 1) == []
    assert v.input_watermark(9, 0) is None  # channel 1 (aligned, at 8) holds it
    assert v.input_watermark(9, 1) == 9


def test_all_idle_without_watermark_change():
    v = StatusWatermarkValve(2)
    assert v.input_stream_status(True, 0) == []
    assert v.input_stream_status(True, 1) == [IDLE]
    assert v.input_stream_status(False, 1) == [ACTIVE]


def test_invalid_channel_count():
    with pytest.raises(ValueError):
        StatusWatermarkValve(0)
