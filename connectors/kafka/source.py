"""PyFlink's ``KafkaSource`` (``pyflink.datastream.connectors.kafka``, Flink's FLIP-27
``KafkaSource``): records of Kafka topics for ``env.from_source(source, watermark_strategy, name)``.

``KafkaSource.builder().set_bootstrap_servers(...).set_topics(...)
.set_value_only_deserializer(SimpleStringSchema()).build()`` reads every partition of the
topics: each partition is a split owned by one source subtask (Flink's
``KafkaSourceEnumerator`` assignment), read from the starting offsets
(``set_starting_offsets``, default ``KafkaOffsetsInitializer.earliest()``) on, forever
(``CONTINUOUS_UNBOUNDED``) or up to the stopping offsets (``set_bounded`` / ``set_unbounded``).
How it runs is :mod:`raylink.connectors.kafka.source_reader`.

Properties (``set_property`` / ``set_properties``) are Kafka consumer properties under the Java
client's names -- librdkafka shares most of them (``isolation.level``, ``fetch.max.bytes``,
``max.partition.fetch.bytes``, ...); ``group.id`` / ``client.id.prefix`` have setters; the
connector's own: ``partition.discovery.interval.ms`` (default 300000 when unbounded, none when
bounded; <= 0 disables), ``commit.offsets.on.checkpoint`` (default true when a group id is set),
``default.api.timeout.ms`` (how long metadata and offset look-ups may take before the job fails,
default 60000). Java-only settings (``key.deserializer``, ``max.poll.records``, ...) are ignored.
``isolation.level`` defaults to ``read_uncommitted`` as in the Java client (set ``read_committed``
to read only committed transactions); ``auto.offset.reset`` follows the starting offsets'
reset strategy, as in Flink.

These classes are configuration: plain, picklable, read-only once built. Thread-safe.
"""

from __future__ import annotations

import re
from typing import Any, Dict, Iterable, List, Optional

from raylink.connectors.kafka.client import CLIENT_ID_PREFIX
from raylink.connectors.kafka.offsets import (
    Boundedness,
    ConsumerRecord,
    KafkaOffsetResetStrategy,
    KafkaOffsetsInitializer,
    KafkaTopicPartition,
)
from raylink.operators.connector import CONNECTOR_SOURCE


class KafkaRecordDeserializationSchema:
    """Turns a :class:`ConsumerRecord` into the stream's record (Flink's
    ``KafkaRecordDeserializationSchema``): subclass and override ``deserialize(record)``, or wrap
    a value ``DeserializationSchema`` with :meth:`value_only`."""

    def open(self, context: Any = None) -> None:
        """Called once per subtask before the first record."""

    def deserialize(self, record: ConsumerRecord) -> Any:
        raise NotImplementedError(f"{type(self).__name__} must implement deserialize(record)")

    @staticmethod
    def value_only(value_deserializer: Any) -> "KafkaRecordDeserializationSchema":
        """Only the record's value, through ``value_deserializer.deserialize(bytes)``."""
        return ValueOnlyDeserializationSchema(value_deserializer)


class ValueOnlyDeserializationSchema(KafkaRecordDeserializationSchema):
    """:meth:`KafkaRecordDeserializationSchema.value_only`'s schema."""

    def __init__(self, value_deserializer: Any) -> None:
        if not callable(getattr(value_deserializer, "deserialize", None)):
            raise TypeError(
                f"KafkaSource: the value deserializer must be a DeserializationSchema "
                f"(e.g. SimpleStringSchema()), got {type(value_deserializer).__name__}"
            )
        self.value_deserializer = value_deserializer

    def open(self, context: Any = None) -> None:
        hook = getattr(self.value_deserializer, "open", None)
        if callable(hook):
            hook(context)

    def deserialize(self, record: ConsumerRecord) -> Any:
        return self.value_deserializer.deserialize(record.value)

    def get_produced_type(self) -> Any:
        """The value schema's declared type (a row format's ``Types.ROW``), else None."""
        produced = getattr(self.value_deserializer, "get_produced_type", None)
        return produced() if callable(produced) else None

    def __repr__(self) -> str:
        return f"value_only({type(self.value_deserializer).__name__})"


#: the connector's own properties (not given to the Kafka client)
PARTITION_DISCOVERY_INTERVAL_MS = "partition.discovery.interval.ms"
COMMIT_OFFSETS_ON_CHECKPOINT = "commit.offsets.on.checkpoint"
DEFAULT_API_TIMEOUT_MS = "default.api.timeout.ms"
DEFAULT_DISCOVERY_INTERVAL_MS = 300_000
DEFAULT_API_TIMEOUT = 60_000


def _truthy(value: Any) -> bool:
    return str(value).strip().lower() in ("true", "1", "yes")


class KafkaSource:
    """The configured source (see the module docstring); build it with :meth:`builder`."""

    def __init__(
        self,
        bootstrap_servers: str,
        topics: Optional[List[str]],
        topic_pattern: Optional[str],
        partitions: Optional[List[KafkaTopicPartition]],
        deserializer: KafkaRecordDeserializationSchema,
        starting_offsets: KafkaOffsetsInitializer,
        stopping_offsets: Optional[KafkaOffsetsInitializer],
        boundedness: Boundedness,
        properties: Dict[str, str],
    ) -> None:
        self.bootstrap_servers = bootstrap_servers
        self.topics = topics
        self.topic_pattern = topic_pattern
        self.partitions = partitions
        self.deserializer = deserializer
        self.starting_offsets = starting_offsets
        self.stopping_offsets = stopping_offsets
        self.boundedness = boundedness
        self.properties = dict(properties)

    @staticmethod
    def builder() -> "KafkaSourceBuilder":
        return KafkaSourceBuilder()

    def get_boundedness(self) -> Boundedness:
        return self.boundedness

    def get_produced_type(self) -> Any:
        """The stream's type (Flink's ``KafkaSource.getProducedType``): the deserializer's, e.g.
        the ``Types.ROW`` of a JSON/CSV/Avro row schema, so ``print()`` writes PyFlink's
        ``+I[1,hi]``; None (untyped) for a schema that declares none."""
        produced = getattr(self.deserializer, "get_produced_type", None)
        return produced() if callable(produced) else None

    # -- derived settings ------------------------------------------------------------------------
    @property
    def group_id(self) -> Optional[str]:
        return self.properties.get("group.id") or None

    @property
    def discovery_interval_ms(self) -> Optional[int]:
        """Milliseconds between partition discoveries; None: discover once."""
        value = self.properties.get(PARTITION_DISCOVERY_INTERVAL_MS)
        if value is None:
            return None if self.boundedness is Boundedness.BOUNDED else DEFAULT_DISCOVERY_INTERVAL_MS
        interval = int(value)
        return interval if interval > 0 else None

    @property
    def commit_offsets_on_checkpoint(self) -> bool:
        value = self.properties.get(COMMIT_OFFSETS_ON_CHECKPOINT)
        return self.group_id is not None and (value is None or _truthy(value))

    @property
    def api_timeout_ms(self) -> int:
        return int(self.properties.get(DEFAULT_API_TIMEOUT_MS, DEFAULT_API_TIMEOUT))

    def describe_subscription(self) -> str:
        if self.topics is not None:
            return f"topics {self.topics}"
        if self.topic_pattern is not None:
            return f"topic pattern {self.topic_pattern!r}"
        return f"partitions {self.partitions}"

    # -- the runtime side ------------------------------------------------------------------------
    def _raylink_source_spec(self) -> tuple:
        """(operator kind, function, parameters, non-parallel) for ``env.from_source``."""
        return CONNECTOR_SOURCE, self, {}, False

    def create_operator(self, spec: Any) -> Any:
        from raylink.connectors.kafka.source_reader import KafkaSourceOperator  # the client: where it runs

        return KafkaSourceOperator(self)

    def __repr__(self) -> str:
        return f"KafkaSource({self.bootstrap_servers!r}, {self.describe_subscription()}, {self.boundedness.name})"


class KafkaSourceBuilder:
    """Configures a :class:`KafkaSource` (PyFlink's ``KafkaSourceBuilder``)."""

    def __init__(self) -> None:
        self._bootstrap_servers: Optional[str] = None
        self._topics: Optional[List[str]] = None
        self._topic_pattern: Optional[str] = None
        self._partitions: Optional[List[KafkaTopicPartition]] = None
        self._deserializer: Optional[KafkaRecordDeserializationSchema] = None
        self._starting = KafkaOffsetsInitializer.earliest()
        self._stopping: Optional[KafkaOffsetsInitializer] = None
        self._boundedness = Boundedness.CONTINUOUS_UNBOUNDED
        self._properties: Dict[str, str] = {}

    def set_bootstrap_servers(self, bootstrap_servers: str) -> "KafkaSourceBuilder":
        return self.set_property("bootstrap.servers", bootstrap_servers)

    def set_group_id(self, group_id: str) -> "KafkaSourceBuilder":
        return self.set_property("group.id", group_id)

    def _subscribe(self, topics: Any = None, pattern: Any = None, partitions: Any = None) -> "KafkaSourceBuilder":
        if sum(x is not None for x in (self._topics, self._topic_pattern, self._partitions)):
            raise ValueError(
                "KafkaSource: a subscription is already set; use one of set_topics, set_topic_pattern, set_partitions"
            )
        self._topics, self._topic_pattern, self._partitions = topics, pattern, partitions
        return self

    def set_topics(self, *topics: str) -> "KafkaSourceBuilder":
        names = [t for group in topics for t in ([group] if isinstance(group, str) else list(group))]
        if not names or any(not isinstance(t, str) or not t for t in names):
            raise ValueError(f"KafkaSource.set_topics: expected topic names, got {topics!r}")
        return self._subscribe(topics=names)

    def set_topic_pattern(self, topic_pattern: str) -> "KafkaSourceBuilder":
        try:
            re.compile(topic_pattern)
        except (re.error, TypeError) as exc:
            raise ValueError(f"KafkaSource.set_topic_pattern: {topic_pattern!r} is not a regular expression: {exc}")
        return self._subscribe(pattern=topic_pattern)

    def set_partitions(self, partitions: Iterable[KafkaTopicPartition]) -> "KafkaSourceBuilder":
        chosen = list(partitions)
        if not chosen or any(not isinstance(p, KafkaTopicPartition) for p in chosen):
            raise ValueError(f"KafkaSource.set_partitions: expected KafkaTopicPartition objects, got {chosen!r}")
        return self._subscribe(partitions=sorted(set(chosen), key=lambda p: (p.topic, p.partition)))

    def set_starting_offsets(self, starting_offsets_initializer: KafkaOffsetsInitializer) -> "KafkaSourceBuilder":
        self._starting = _initializer(starting_offsets_initializer, "set_starting_offsets")
        return self

    def set_unbounded(self, stopping_offsets_initializer: KafkaOffsetsInitializer) -> "KafkaSourceBuilder":
        """Stop at these offsets, still ``CONTINUOUS_UNBOUNDED``."""
        self._stopping = _initializer(stopping_offsets_initializer, "set_unbounded")
        self._boundedness = Boundedness.CONTINUOUS_UNBOUNDED
        return self

    def set_bounded(self, stopping_offsets_initializer: KafkaOffsetsInitializer) -> "KafkaSourceBuilder":
        """Stop at these offsets: a ``BOUNDED`` source."""
        self._stopping = _initializer(stopping_offsets_initializer, "set_bounded")
        self._boundedness = Boundedness.BOUNDED
        return self

    def set_value_only_deserializer(self, deserialization_schema: Any) -> "KafkaSourceBuilder":
        self._deserializer = KafkaRecordDeserializationSchema.value_only(deserialization_schema)
        return self

    def set_deserializer(self, record_deserializer: KafkaRecordDeserializationSchema) -> "KafkaSourceBuilder":
        if not callable(getattr(record_deserializer, "deserialize", None)):
            raise TypeError(
                f"KafkaSource.set_deserializer: expected a KafkaRecordDeserializationSchema, "
                f"got {type(record_deserializer).__name__}"
            )
        self._deserializer = record_deserializer
        return self

    def set_client_id_prefix(self, prefix: str) -> "KafkaSourceBuilder":
        return self.set_property(CLIENT_ID_PREFIX, prefix)

    def set_property(self, key: str, value: Any) -> "KafkaSourceBuilder":
        if not isinstance(key, str) or not key:
            raise ValueError(f"KafkaSource.set_property: the key must be a non-empty str, got {key!r}")
        self._properties[key] = str(value)
        return self

    def set_properties(self, props: Dict[str, Any]) -> "KafkaSourceBuilder":
        for key, value in dict(props).items():
            self.set_property(key, value)
        return self

    def build(self) -> KafkaSource:
        servers = self._properties.get("bootstrap.servers")
        if not servers:
            raise ValueError("KafkaSource: no bootstrap servers; call set_bootstrap_servers('host:port')")
        if self._topics is None and self._topic_pattern is None and self._partitions is None:
            raise ValueError("KafkaSource: no subscription; call set_topics, set_topic_pattern or set_partitions")
        if self._deserializer is None:
            raise ValueError(
                "KafkaSource: no deserializer; call set_value_only_deserializer(SimpleStringSchema()) or set_deserializer"
            )
        if self._starting.kind == "committed" or (self._stopping and self._stopping.kind == "committed"):
            if not self._properties.get("group.id"):
                raise ValueError("KafkaSource: committed_offsets() needs a group id; call set_group_id")
        for key in (PARTITION_DISCOVERY_INTERVAL_MS, DEFAULT_API_TIMEOUT_MS):
            if key in self._properties:
                try:
                    int(self._properties[key])
                except ValueError:
                    raise ValueError(
                        f"KafkaSource: property {key!r} must be milliseconds, got {self._properties[key]!r}"
                    )
        return KafkaSource(
            servers,
            self._topics,
            self._topic_pattern,
            self._partitions,
            self._deserializer,
            self._starting,
            self._stopping,
            self._boundedness,
            self._properties,
        )


def _initializer(value: Any, method: str) -> KafkaOffsetsInitializer:
    if not isinstance(value, KafkaOffsetsInitializer):
        raise TypeError(f"KafkaSource.{method}: expected a KafkaOffsetsInitializer, got {type(value).__name__}")
    return value


__all__ = [
    "Boundedness",
    "ConsumerRecord",
    "KafkaOffsetResetStrategy",
    "KafkaOffsetsInitializer",
    "KafkaRecordDeserializationSchema",
    "KafkaSource",
    "KafkaSourceBuilder",
    "KafkaTopicPartition",
    "ValueOnlyDeserializationSchema",
]
