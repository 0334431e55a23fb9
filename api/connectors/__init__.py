"""Connectors of the DataStream API (PyFlink's ``pyflink.datastream.connectors``).

``raylink.api.connectors.base`` holds Flink's Sink V2 interfaces (``Sink``, ``SinkWriter``,
``Committer``, ...); ``raylink.api.connectors.file_system`` the exactly-once ``FileSink``
and what configures it. The runtime side of each connector lives in ``raylink.connectors``.
"""

from raylink.api.connectors.base import (
    Committer,
    CommittingSinkWriter,
    DeliveryGuarantee,
    Sink,
    SinkWriter,
    SinkWriterContext,
    StatefulSinkWriter,
    SupportsCommitter,
    SupportsWriterState,
    WriterInitContext,
)
from raylink.api.connectors.file_system import (
    BucketAssigner,
    DefaultRollingPolicy,
    Encoder,
    FileEnumeratorProvider,
    FileSink,
    FileSource,
    FileSourceBuilder,
    FileSplitAssignerProvider,
    OnCheckpointRollingPolicy,
    OutputFileConfig,
    RollingPolicy,
    StreamFormat,
)
from raylink.api.connectors.number_seq import NumberSequenceSource

__all__ = [
    "NumberSequenceSource",
    "BucketAssigner",
    "Committer",
    "CommittingSinkWriter",
    "DefaultRollingPolicy",
    "DeliveryGuarantee",
    "Encoder",
    "FileEnumeratorProvider",
    "FileSink",
    "FileSource",
    "FileSourceBuilder",
    "FileSplitAssignerProvider",
    "StreamFormat",
    "OnCheckpointRollingPolicy",
    "OutputFileConfig",
    "RollingPolicy",
    "Sink",
    "SinkWriter",
    "SinkWriterContext",
    "StatefulSinkWriter",
    "SupportsCommitter",
    "SupportsWriterState",
    "WriterInitContext",
]
