"""PyFlink's ``pyflink.datastream.connectors.kafka``: the Kafka connector, one of Flink's Java
connectors, which raylink does not have. Every name PyFlink exports is importable, so a
migrated program loads; constructing or using one raises
:class:`~raylink.api.unsupported.UnsupportedFeatureError` naming the alternative."""

from raylink.api.unsupported import define_unsupported, own_source

_NAMES = [
    "FlinkKafkaConsumer",
    "FlinkKafkaProducer",
    "KafkaSource",
    "KafkaSourceBuilder",
    "KafkaSink",
    "KafkaSinkBuilder",
    "Semantic",
    "KafkaTopicPartition",
    "KafkaOffsetsInitializer",
    "KafkaOffsetResetStrategy",
    "KafkaRecordSerializationSchema",
    "KafkaRecordSerializationSchemaBuilder",
    "KafkaTopicSelector",
]

__all__ = define_unsupported(
    globals(), _NAMES, "the Kafka connector (Java)", own_source("a Kafka client (confluent-kafka, kafka-python)")
)
