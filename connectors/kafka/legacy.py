"""PyFlink's deprecated ``FlinkKafkaConsumer`` / ``FlinkKafkaProducer`` (and ``Semantic``), mapped
onto the same runtime as ``KafkaSource`` / ``KafkaSink``: ``env.add_source(FlinkKafkaConsumer(
topics, schema, properties))`` is an unbounded ``KafkaSource``, ``stream.add_sink(
FlinkKafkaProducer(topic, schema, config))`` a ``KafkaSink``.

Consumer: starts from the group's committed offsets, else ``auto.offset.reset`` (``latest`` by
default) -- Flink's ``setStartFromGroupOffsets``; ``set_start_from_earliest`` / ``_latest`` /
``_timestamp`` / ``_group_offsets`` choose; offsets are committed on checkpoints
(``set_commit_offsets_on_checkpoints``, with a ``group.id``); partitions are discovered every
``flink.partition-discovery.interval-millis`` when that property is set (off by default).
Producer: ``Semantic.AT_LEAST_ONCE`` by default, ``EXACTLY_ONCE`` with transactional ids
prefixed by ``transactional.id`` of the config or ``<topic>-flink-kafka-producer``; each sink
subtask writes to one partition (Flink's default ``FlinkFixedPartitioner``).

Plain configuration, picklable; thread-safe once built.
"""

from __future__ import annotations

import enum
import warnings
from typing import Any, Dict, List, Optional, Union

from raylink.connectors.kafka.offsets import KafkaOffsetResetStrategy, KafkaOffsetsInitializer
from raylink.connectors.kafka.sink_config import (
    DeliveryGuarantee,
    FlinkFixedPartitioner,
    KafkaRecordSerializationSchema,
    KafkaSink,
)
from raylink.connectors.kafka.source import KafkaSource

#: the legacy consumer's discovery property (Flink's ``KEY_PARTITION_DISCOVERY_INTERVAL_MILLIS``)
LEGACY_DISCOVERY_INTERVAL = "flink.partition-discovery.interval-millis"


class FlinkKafkaConsumer:
    """An unbounded Kafka source the legacy way (see the module docstring)."""

    def __init__(self, topics: Union[str, List[str]], deserialization_schema: Any, properties: Dict) -> None:
        warnings.warn("Deprecated in 1.16. Use KafkaSource instead.", DeprecationWarning, stacklevel=2)
        self._topics = [topics] if isinstance(topics, str) else list(topics)
        self._schema = deserialization_schema
        self._properties = {str(k): str(v) for k, v in dict(properties).items()}
        reset = self._properties.get("auto.offset.reset", "latest").lower()
        strategy = (
            KafkaOffsetResetStrategy.EARLIEST if reset in ("earliest", "smallest") else KafkaOffsetResetStrategy.LATEST
        )
        self._start = KafkaOffsetsInitializer.committed_offsets(strategy)
        self._commit_on_checkpoints = True

    def set_commit_offsets_on_checkpoints(self, commit_on_checkpoints: bool) -> "FlinkKafkaConsumer":
        self._commit_on_checkpoints = bool(commit_on_checkpoints)
        return self

    def set_start_from_earliest(self) -> "FlinkKafkaConsumer":
        self._start = KafkaOffsetsInitializer.earliest()
        return self

    def set_start_from_latest(self) -> "FlinkKafkaConsumer":
        self._start = KafkaOffsetsInitializer.latest()
        return self

    def set_start_from_timestamp(self, startup_offsets_timestamp: int) -> "FlinkKafkaConsumer":
        self._start = KafkaOffsetsInitializer.timestamp(startup_offsets_timestamp)
        return self

    def set_start_from_group_offsets(self) -> "FlinkKafkaConsumer":
        reset = self._properties.get("auto.offset.reset", "latest").lower()
        strategy = (
            KafkaOffsetResetStrategy.EARLIEST if reset in ("earliest", "smallest") else KafkaOffsetResetStrategy.LATEST
        )
        self._start = KafkaOffsetsInitializer.committed_offsets(strategy)
        return self

    def disable_filter_restored_partitions_with_subscribed_topics(self) -> "FlinkKafkaConsumer":
        """Restored partitions are always those of the checkpoint here."""
        return self

    def get_produced_type(self) -> Any:
        getter = getattr(self._schema, "get_produced_type", None)
        return getter() if callable(getter) else None

    def to_kafka_source(self) -> KafkaSource:
        """The ``KafkaSource`` this consumer runs as."""
        properties = dict(self._properties)
        interval = properties.pop(LEGACY_DISCOVERY_INTERVAL, None)
        properties["partition.discovery.interval.ms"] = interval if interval is not None else "0"
        properties["commit.offsets.on.checkpoint"] = "true" if self._commit_on_checkpoints else "false"
        start = self._start
        if not properties.get("group.id") and start.kind == "committed":  # no group: its reset strategy
            start = KafkaOffsetsInitializer(
                "earliest" if start.reset_strategy is KafkaOffsetResetStrategy.EARLIEST else "latest"
            )
        return (
            KafkaSource.builder()
            .set_topics(*self._topics)
            .set_value_only_deserializer(self._schema)
            .set_properties(properties)
            .set_starting_offsets(start)
            .build()
        )

    # -- the runtime side: env.add_source / from_source --------------------------------------------
    def _raylink_source_spec(self) -> tuple:
        return self.to_kafka_source()._raylink_source_spec()

    def get_boundedness(self) -> Any:
        return self.to_kafka_source().get_boundedness()

    def __repr__(self) -> str:
        return f"FlinkKafkaConsumer({self._topics}, {self._properties.get('bootstrap.servers')!r})"


class Semantic(enum.Enum):
    """The legacy producer's guarantee (PyFlink's ``Semantic``)."""

    EXACTLY_ONCE = 0
    AT_LEAST_ONCE = 1
    NONE = 2


class FlinkKafkaProducer(KafkaSink):
    """A ``KafkaSink`` built the legacy way (see the module docstring)."""

    def __init__(
        self,
        topic: str,
        serialization_schema: Any,
        producer_config: Dict,
        kafka_producer_pool_size: int = 5,
        semantic: Semantic = Semantic.AT_LEAST_ONCE,
    ) -> None:
        config = {str(k): str(v) for k, v in dict(producer_config).items()}
        servers = config.pop("bootstrap.servers", None)
        if not servers:
            raise ValueError("FlinkKafkaProducer: producer_config needs 'bootstrap.servers'")
        if not isinstance(semantic, Semantic):
            raise TypeError(f"FlinkKafkaProducer: semantic must be a Semantic, got {semantic!r}")
        serializer = (
            KafkaRecordSerializationSchema.builder()
            .set_topic(topic)
            .set_value_serialization_schema(serialization_schema)
            .set_partitioner(FlinkFixedPartitioner())
            .build()
        )
        prefix: Optional[str] = None
        if semantic is Semantic.EXACTLY_ONCE:
            prefix = config.pop("transactional.id", None) or f"{topic}-flink-kafka-producer"
        super().__init__(servers, serializer, DeliveryGuarantee[semantic.name], prefix, config)
        self.kafka_producer_pool_size = kafka_producer_pool_size

    def ignore_failures_after_transaction_timeout(self) -> "FlinkKafkaProducer":
        return self

    def set_log_failures_only(self, log_failures_only: bool) -> "FlinkKafkaProducer":
        if log_failures_only:
            raise ValueError(
                "FlinkKafkaProducer.set_log_failures_only(True): raylink never drops a record silently; "
                "a failed write fails the job"
            )
        return self

    def set_flush_on_checkpoint(self, flush_on_checkpoint: bool) -> "FlinkKafkaProducer":
        return self

    def set_write_timestamp_to_kafka(self, write_timestamp_to_kafka: bool) -> "FlinkKafkaProducer":
        return self


__all__ = ["FlinkKafkaConsumer", "FlinkKafkaProducer", "Semantic"]
