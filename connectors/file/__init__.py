"""raylink.connectors.file: the file connector, whole — its API classes and their runtime side.

* ``sink`` (``FileSink``), ``sink_config`` (``Encoder``, ``OutputFileConfig``,
  ``RollingPolicy``, ``BucketAssigner``) and ``sink_writer`` (its ``SinkWriter`` and
  ``Committer``: Flink's ``FileWriter`` and ``FileCommitter``);
* ``source`` (``FileSource``, ``StreamFormat``) and ``source_operator`` (the operator that
  reads the files).

PyFlink programs import these from ``raylink.api.connectors.file_system`` (PyFlink's
``pyflink.datastream.connectors.file_system``). Each API module imports its runtime module,
never the other way round.
"""

from raylink.connectors.file.sink import FileSink
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
    Boundedness,
    BulkFormat,
    FileEnumeratorProvider,
    FileSource,
    FileSourceBuilder,
    FileSplitAssignerProvider,
    StreamFormat,
)

__all__ = [
    "BasePathBucketAssigner",
    "Boundedness",
    "BucketAssigner",
    "BucketAssignerContext",
    "BulkFormat",
    "DateTimeBucketAssigner",
    "DefaultRollingPolicy",
    "Encoder",
    "FileEnumeratorProvider",
    "FileSink",
    "FileSource",
    "FileSourceBuilder",
    "FileSplitAssignerProvider",
    "OnCheckpointRollingPolicy",
    "OutputFileConfig",
    "RollingPolicy",
    "SimpleStringEncoder",
    "StreamFormat",
]
