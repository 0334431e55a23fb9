"""PyFlink's ``pyflink.datastream.connectors.file_system``: the ``FileSink`` and ``FileSource``
and what configures them (``raylink.connectors.file``).

Only re-exports: the implementation lives on a lower floor."""

from raylink.connectors.file.sink import (
    FileSink,
)
from raylink.connectors.file.sink_config import (
    BasePathBucketAssigner,
    BucketAssigner,
    BucketAssignerContext,
    DateTimeBucketAssigner,
    DefaultRollingPolicy,
    Encoder,
    OnCheckpointRollingPolicy,
    OutputFileConfig,
    RollingPolicy,
    SimpleStringEncoder,
)
from raylink.connectors.file.source import (
    BulkFormat,
    FileEnumeratorProvider,
    FileSource,
    FileSourceBuilder,
    FileSplitAssignerProvider,
    StreamFormat,
)

__all__ = [
    "BulkFormat",
    "FileEnumeratorProvider",
    "FileSource",
    "FileSourceBuilder",
    "FileSplitAssignerProvider",
    "StreamFormat",
    "BasePathBucketAssigner",
    "BucketAssigner",
    "BucketAssignerContext",
    "DateTimeBucketAssigner",
    "DefaultRollingPolicy",
    "Encoder",
    "FileSink",
    "OnCheckpointRollingPolicy",
    "OutputFileConfig",
    "RollingPolicy",
    "SimpleStringEncoder",
]
