"""PyFlink's ``pyflink.datastream.connectors.kinesis``: the Kinesis connector, one of Flink's
Java connectors, which raylink does not have. Every name PyFlink exports is importable, so a
migrated program loads; constructing or using one raises
:class:`~raylink.api.unsupported.UnsupportedFeatureError` naming the alternative."""

from raylink.api.unsupported import define_unsupported, own_source

_NAMES = [
    "KinesisShardAssigner",
    "KinesisDeserializationSchema",
    "WatermarkTracker",
    "PartitionKeyGenerator",
    "FlinkKinesisConsumer",
    "KinesisStreamsSink",
    "KinesisStreamsSinkBuilder",
    "KinesisFirehoseSink",
    "KinesisFirehoseSinkBuilder",
]

__all__ = define_unsupported(globals(), _NAMES, "the Kinesis connector (Java)", own_source("boto3"))
