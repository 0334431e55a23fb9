"""PyFlink's ``pyflink.datastream.connectors.kafka``: the ``KafkaSource`` and ``KafkaSink`` and
what configures them (the Kafka connector, :mod:`raylink.connectors.kafka`).

Only re-exports: the implementation lives on a lower floor."""

from raylink.connectors.kafka.legacy import FlinkKafkaConsumer, FlinkKafkaProducer, Semantic
from raylink.connectors.kafka.sink_config import (
    DeliveryGuarantee,
    FixedPartitioner,
    KafkaPartitioner,
    KafkaRecordSerializationSchema,
    KafkaRecordSerializationSchemaBuilder,
    KafkaSink,
    KafkaSinkBuilder,
    KafkaTopicSelector,
)
from raylink.connectors.kafka.source import (
    ConsumerRecord,
    KafkaOffsetResetStrategy,
    KafkaOffsetsInitializer,
    KafkaRecordDeserializationSchema,
    KafkaSource,
    KafkaSourceBuilder,
    KafkaTopicPartition,
)

__all__ = [
    "ConsumerRecord",
    "DeliveryGuarantee",
    "FixedPartitioner",
    "FlinkKafkaConsumer",
    "FlinkKafkaProducer",
    "KafkaOffsetResetStrategy",
    "KafkaOffsetsInitializer",
    "KafkaPartitioner",
    "KafkaRecordDeserializationSchema",
    "KafkaRecordSerializationSchema",
    "KafkaRecordSerializationSchemaBuilder",
    "KafkaSink",
    "KafkaSinkBuilder",
    "KafkaSource",
    "KafkaSourceBuilder",
    "KafkaTopicPartition",
    "KafkaTopicSelector",
    "Semantic",
]
