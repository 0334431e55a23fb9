"""The PyFlink-style DataStream API of raylink: the user's top floor.

Everything a PyFlink program imports from ``pyflink.common`` or ``pyflink.datastream``
that raylink supports is importable from here; the submodules mirror PyFlink's
(``raylink.api.window`` ~ ``pyflink.datastream.window``, ``raylink.api.time`` ~
``pyflink.common.time``, ``raylink.api.watermark_strategy`` ~
``pyflink.common.watermark_strategy``, ``raylink.api.functions``, ``raylink.api.state``).
The environment, the streams and ``ExecutionConfig`` live here; the rest is re-exported
from the floors below (mostly :mod:`raylink.core`). What raylink has only as stand-ins
(Flink's Java connectors and formats, the Table API) comes from :mod:`raylink.api.pyflink_compat`.
"""

from raylink.api import functions as _functions
from raylink.api import pyflink_compat  # noqa: F401 - installs the stand-in modules (jdbc, formats, table)
from raylink.api import state as _state
from raylink.api.async_data_stream import AsyncDataStream
from raylink.api.configuration import Configuration
from raylink.api.connectors.file_system import (
    BucketAssigner,
    Encoder,
    FileSink,
    OutputFileConfig,
    RollingPolicy,
)
from raylink.api.datastream import (
    AllWindowedStream,
    BroadcastConnectedStream,
    BroadcastStream,
    CachedDataStream,
    ConnectedStreams,
    DataStream,
    DataStreamSink,
    KeyedStream,
    WindowedStream,
)
from raylink.api.execution_config import ExecutionConfig
from raylink.api.execution_mode import RuntimeExecutionMode
from raylink.api.functions import *  # noqa: F401,F403 - every user function class, as pyflink.datastream
from raylink.api.job_client import JobClient
from raylink.api.job_status import JobStatus
from raylink.api.output_tag import OutputTag
from raylink.api.serialization import ByteArraySchema, DeserializationSchema, SerializationSchema, SimpleStringSchema
from raylink.api.slot_sharing_group import MemorySize, SlotSharingGroup
from raylink.api.state import *  # noqa: F401,F403 - state descriptors and interfaces
from raylink.api.state_backend import EmbeddedRocksDBStateBackend, HashMapStateBackend, StateBackend
from raylink.api.stream_execution_environment import StreamExecutionEnvironment
from raylink.api.time import Duration, Instant, Time
from raylink.api.types import Row, RowKind, TypeInformation, Types
from raylink.api.watermark_strategy import TimestampAssigner, WatermarkGenerator, WatermarkStrategy
from raylink.api.window import (
    ContinuousEventTimeTrigger,
    ContinuousProcessingTimeTrigger,
    CountEvictor,
    CountSlidingWindowAssigner,
    CountTrigger,
    CountTumblingWindowAssigner,
    CountWindow,
    DynamicEventTimeSessionWindows,
    DynamicProcessingTimeSessionWindows,
    EventTimeSessionWindows,
    EventTimeTrigger,
    Evictor,
    GlobalWindow,
    GlobalWindows,
    MergingWindowAssigner,
    NeverTrigger,
    ProcessingTimeSessionWindows,
    ProcessingTimeTrigger,
    PurgingTrigger,
    SessionWindowTimeGapExtractor,
    SlidingEventTimeWindows,
    SlidingProcessingTimeWindows,
    TimeEvictor,
    TimestampedValue,
    TimeWindow,
    Trigger,
    TriggerResult,
    TumblingEventTimeWindows,
    TumblingProcessingTimeWindows,
    Window,
    WindowAssigner,
)
from raylink.core.checkpointing import (
    CheckpointConfig,
    CheckpointedFunction,
    CheckpointingMode,
    CheckpointListener,
    FunctionInitializationContext,
    FunctionSnapshotContext,
)
from raylink.errors import RaylinkError
from raylink.graph.stream_graph import GraphError

__all__ = (
    [
        "AsyncDataStream",
        "BucketAssigner",
        "EmbeddedRocksDBStateBackend",
        "HashMapStateBackend",
        "StateBackend",
        "CheckpointConfig",
        "CheckpointListener",
        "CheckpointedFunction",
        "CheckpointingMode",
        "Encoder",
        "FileSink",
        "FunctionInitializationContext",
        "FunctionSnapshotContext",
        "OutputFileConfig",
        "RollingPolicy",
        "AllWindowedStream",
        "Configuration",
        "BroadcastConnectedStream",
        "BroadcastStream",
        "CachedDataStream",
        "MemorySize",
        "SlotSharingGroup",
        "ConnectedStreams",
        "ContinuousEventTimeTrigger",
        "ContinuousProcessingTimeTrigger",
        "CountEvictor",
        "CountSlidingWindowAssigner",
        "CountTrigger",
        "CountTumblingWindowAssigner",
        "CountWindow",
        "DataStream",
        "DataStreamSink",
        "Duration",
        "DynamicEventTimeSessionWindows",
        "DynamicProcessingTimeSessionWindows",
        "EventTimeSessionWindows",
        "EventTimeTrigger",
        "Evictor",
        "ExecutionConfig",
        "GlobalWindow",
        "GlobalWindows",
        "GraphError",
        "Instant",
        "JobClient",
        "JobStatus",
        "KeyedStream",
        "MergingWindowAssigner",
        "NeverTrigger",
        "OutputTag",
        "ProcessingTimeSessionWindows",
        "ProcessingTimeTrigger",
        "PurgingTrigger",
        "RaylinkError",
        "RuntimeExecutionMode",
        "SessionWindowTimeGapExtractor",
        "SlidingEventTimeWindows",
        "SlidingProcessingTimeWindows",
        "StreamExecutionEnvironment",
        "Time",
        "TimeEvictor",
        "TimeWindow",
        "TimestampAssigner",
        "TimestampedValue",
        "Trigger",
        "TriggerResult",
        "TumblingEventTimeWindows",
        "TumblingProcessingTimeWindows",
        "TypeInformation",
        "Types",
        "Row",
        "RowKind",
        "WatermarkGenerator",
        "WatermarkStrategy",
        "Window",
        "WindowAssigner",
        "WindowedStream",
    ]
    + list(_functions.__all__)
    + list(_state.__all__)
    + ["ByteArraySchema", "DeserializationSchema", "SerializationSchema", "SimpleStringSchema"]
)
