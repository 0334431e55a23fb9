"""Windows, window assigners, triggers and evictors: PyFlink's ``pyflink.datastream.window``
with the semantics of Flink's Java classes of the same names.

This module gathers them under PyFlink's module path; they live in
``window_types`` (``TimeWindow``, ``GlobalWindow``, ``CountWindow``),
``window_assigners`` (tumbling / sliding / session windows in event and processing
time, ``GlobalWindows``, PyFlink's count assigners), ``triggers`` and ``evictors``.
The operator that runs them is ``raylink.operators.window.WindowOperator``.
"""

from raylink.core.evictors import CountEvictor, Evictor, TimeEvictor, TimestampedValue
from raylink.core.triggers import (
    ContinuousEventTimeTrigger,
    ContinuousProcessingTimeTrigger,
    CountTrigger,
    EventTimeTrigger,
    NeverTrigger,
    ProcessingTimeTrigger,
    PurgingTrigger,
    Trigger,
    TriggerResult,
)
from raylink.core.window_assigners import (
    CountSlidingWindowAssigner,
    CountTumblingWindowAssigner,
    DynamicEventTimeSessionWindows,
    DynamicProcessingTimeSessionWindows,
    EventTimeSessionWindows,
    GlobalWindows,
    MergingWindowAssigner,
    ProcessingTimeSessionWindows,
    SessionWindowTimeGapExtractor,
    SlidingEventTimeWindows,
    SlidingProcessingTimeWindows,
    TumblingEventTimeWindows,
    TumblingProcessingTimeWindows,
    WindowAssigner,
)
from raylink.core.window_types import MAX_LONG_VALUE, MIN_LONG_VALUE, CountWindow, GlobalWindow, TimeWindow, Window

__all__ = [
    "MAX_LONG_VALUE",
    "MIN_LONG_VALUE",
    "Window",
    "TimeWindow",
    "GlobalWindow",
    "CountWindow",
    "TriggerResult",
    "Trigger",
    "EventTimeTrigger",
    "ProcessingTimeTrigger",
    "CountTrigger",
    "PurgingTrigger",
    "ContinuousEventTimeTrigger",
    "ContinuousProcessingTimeTrigger",
    "NeverTrigger",
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
    "TimestampedValue",
    "Evictor",
    "CountEvictor",
    "TimeEvictor",
]
