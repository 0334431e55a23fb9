"""PyFlink's ``pyflink.common.watermark_strategy`` (``raylink.core.watermark_strategy``).

Only re-exports: the implementation lives on a lower floor."""

from raylink.core.time import (
    Duration,
)
from raylink.core.watermark_strategy import (
    LONG_MAX,
    LONG_MIN,
    AscendingTimestampsWatermarks,
    AssignerWithPeriodicWatermarksWrapper,
    BoundedOutOfOrdernessWatermarks,
    NoWatermarksGenerator,
    RecordTimestampAssigner,
    TimestampAssigner,
    Watermark,
    WatermarkGenerator,
    WatermarkOutput,
    WatermarkStrategy,
    WatermarksWithIdleness,
    watermark_timestamp,
)

__all__ = [
    "Duration",
    "Watermark",
    "WatermarkOutput",
    "WatermarkGenerator",
    "BoundedOutOfOrdernessWatermarks",
    "AscendingTimestampsWatermarks",
    "NoWatermarksGenerator",
    "WatermarksWithIdleness",
    "TimestampAssigner",
    "RecordTimestampAssigner",
    "WatermarkStrategy",
    "AssignerWithPeriodicWatermarksWrapper",
    "watermark_timestamp",
    "LONG_MAX",
    "LONG_MIN",
]
