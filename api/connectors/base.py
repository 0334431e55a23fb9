"""PyFlink's ``pyflink.datastream.connectors.base``: Flink's Sink V2 interfaces (``raylink.core.sink``).

Only re-exports: the implementation lives on a lower floor."""

from raylink.core.sink import (
    Committer,
    CommittingSinkWriter,
    DeliveryGuarantee,
    ProcessingTimeService,
    Sink,
    SinkWriter,
    SinkWriterContext,
    StatefulSinkWriter,
    SupportsCommitter,
    SupportsWriterState,
    SystemClock,
    WriterInitContext,
)

__all__ = [
    "Committer",
    "CommittingSinkWriter",
    "DeliveryGuarantee",
    "ProcessingTimeService",
    "Sink",
    "SinkWriter",
    "SinkWriterContext",
    "StatefulSinkWriter",
    "SupportsCommitter",
    "SupportsWriterState",
    "SystemClock",
    "WriterInitContext",
]
