"""PyFlink's ``pyflink.datastream.connectors.dynamic_kafka``: the dynamic Kafka connector, one
of Flink's Java connectors, which raylink does not have. Every name PyFlink exports is
importable, so a migrated program loads; constructing or using one raises
:class:`~raylink.api.unsupported.UnsupportedFeatureError` naming the alternative."""

from raylink.api.unsupported import define_unsupported, own_source

_NAMES = [
    "DynamicKafkaSource",
    "DynamicKafkaSourceBuilder",
    "KafkaMetadataService",
    "KafkaRecordDeserializationSchema",
    "KafkaStreamSetSubscriber",
    "KafkaStreamSubscriber",
    "StreamPatternSubscriber",
    "SingleClusterTopicMetadataService",
]

__all__ = define_unsupported(
    globals(),
    _NAMES,
    "the dynamic Kafka connector (Java)",
    own_source("a Kafka client (confluent-kafka, kafka-python)"),
)
