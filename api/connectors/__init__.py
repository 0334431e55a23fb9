"""Connectors of the DataStream API (PyFlink's ``pyflink.datastream.connectors``).

``raylink.api.connectors.base`` has Flink's Sink V2 interfaces (``Sink``, ``SinkWriter``,
``Committer``, ...: :mod:`raylink.core.sink`); ``raylink.api.connectors.file_system`` the
exactly-once ``FileSink``, the ``FileSource`` and what configures them (the file connector,
:mod:`raylink.connectors.file`); ``raylink.api.connectors.kafka`` the ``KafkaSource`` and
``KafkaSink`` (:mod:`raylink.connectors.kafka`); ``raylink.api.connectors.datagen`` Flink's
``DataGeneratorSource`` with its ``RateLimiterStrategy`` (:mod:`raylink.connectors.datagen`). Each connector lives whole in
``raylink.connectors``; Flink's other Java connectors (``jdbc``, ``pulsar``, ...) are stand-ins
(:mod:`raylink.api.pyflink_compat`).
"""

from raylink.api.connectors.datagen import DataGeneratorSource, RateLimiterStrategy
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
from raylink.core.sink import (
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

__all__ = [
    "DataGeneratorSource",
    "NumberSequenceSource",
    "RateLimiterStrategy",
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
