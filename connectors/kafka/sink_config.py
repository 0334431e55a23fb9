"""PyFlink's ``KafkaSink`` (``pyflink.datastream.connectors.kafka``, Flink's Sink V2
``KafkaSink``) and what configures it: ``KafkaSinkBuilder``, ``KafkaRecordSerializationSchema``
(+ builder), ``KafkaTopicSelector``, ``FlinkKafkaPartitioner`` / ``FlinkFixedPartitioner``,
``ProducerRecord``; ``DeliveryGuarantee`` is :class:`raylink.core.sink.DeliveryGuarantee`.

``KafkaSink.builder().set_bootstrap_servers(...).set_record_serializer(
KafkaRecordSerializationSchema.builder().set_topic(t).set_value_serialization_schema(
SimpleStringSchema()).build()).set_delivery_guarantee(...).build()`` is given to
``stream.sink_to(sink)``. Guarantees (Flink's): ``NONE`` (the default, as in Flink) hands records
to the producer and flushes only at the end of input; ``AT_LEAST_ONCE`` also flushes at every
checkpoint and waits for every acknowledgement; ``EXACTLY_ONCE`` writes each checkpoint's records
in a Kafka transaction committed once the checkpoint completed and needs
``set_transactional_id_prefix`` (as Flink's builder does). The runtime is
:mod:`raylink.connectors.kafka.sink_writer` (``KafkaWriter``) and
:mod:`raylink.connectors.kafka.sink_committer` (``KafkaCommitter``).

Properties (``set_property``) are Kafka producer properties under the Java client's names;
librdkafka shares most (``acks``, ``linger.ms``, ``batch.size``, ``compression.type``,
``transaction.timeout.ms``, ...); Java-only ones (``key.serializer``, ...) are ignored;
``max.block.ms`` (default 60000, the Java producer's) bounds how long the sink waits for the
servers' metadata and for a transaction's start or commit before the job fails naming the
servers. ``transaction.timeout.ms`` defaults to one hour as in Flink's ``KafkaSink``; a broker
whose ``transaction.max.timeout.ms`` is lower fails the job with an error saying so.

Records go to the partition a ``FlinkKafkaPartitioner`` picks when one is set, else to Kafka's
default partitioner (Flink's ``KafkaSink`` default): the key's murmur2 hash as Java's producer
does (librdkafka's ``murmur2_random``), keyless records spread. A record's timestamp (the
stream's, when it has one) becomes the Kafka record's timestamp.

Configuration objects: plain, picklable, read-only once built. Thread-safe.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

from raylink.core.sink import DeliveryGuarantee, Sink, SupportsCommitter, SupportsWriterState, WriterInitContext

#: Flink's KafkaSink default ``transaction.timeout.ms`` (one hour)
DEFAULT_TRANSACTION_TIMEOUT_MS = 3_600_000
#: how long metadata, a transaction's start and its commit may take (Java's ``max.block.ms``)
MAX_BLOCK_MS = "max.block.ms"
DEFAULT_MAX_BLOCK_MS = 60_000
#: Flink's cap on the prefix (``KafkaSinkBuilder.MAXIMUM_PREFIX_BYTES``)
MAXIMUM_PREFIX_BYTES = 64_000


@dataclass
class ProducerRecord:
    """One record for Kafka (Kafka's ``ProducerRecord``): ``partition`` ``None`` lets the producer's
    partitioner choose, ``timestamp`` ``None`` lets the producer stamp it."""

    topic: str
    value: Optional[bytes]
    key: Optional[bytes] = None
    partition: Optional[int] = None
    timestamp: Optional[int] = None
    headers: Optional[list] = None


class KafkaTopicSelector(ABC):
    """Picks the topic of a record (PyFlink's ``KafkaTopicSelector``)."""

    @abstractmethod
    def apply(self, data: Any) -> str:
        """The topic of ``data``."""


class _FunctionTopicSelector(KafkaTopicSelector):
    def __init__(self, function: Callable[[Any], str]) -> None:
        self.function = function

    def apply(self, data: Any) -> str:
        return self.function(data)


class FlinkKafkaPartitioner:
    """Picks a record's partition (Flink's ``FlinkKafkaPartitioner``): override ``partition``."""

    def open(self, parallel_instance_id: int, parallel_instances: int) -> None:
        """Called once per sink subtask before the first record."""

    def partition(
        self, record: Any, key: Optional[bytes], value: Optional[bytes], target_topic: str, partitions: Sequence[int]
    ) -> int:
        raise NotImplementedError(
            f"{type(self).__name__} must implement partition(record, key, value, topic, partitions)"
        )


class FlinkFixedPartitioner(FlinkKafkaPartitioner):
    """Each sink subtask writes to one partition: ``partitions[subtask % len(partitions)]``
    (Flink's ``FlinkFixedPartitioner``)."""

    def __init__(self) -> None:
        self.parallel_instance_id = 0

    def open(self, parallel_instance_id: int, parallel_instances: int) -> None:
        if parallel_instance_id < 0 or parallel_instances <= 0:
            raise ValueError(
                "FlinkFixedPartitioner: id of this subtask cannot be negative and the number of subtasks must be positive"
            )
        self.parallel_instance_id = parallel_instance_id

    def partition(
        self, record: Any, key: Optional[bytes], value: Optional[bytes], target_topic: str, partitions: Sequence[int]
    ) -> int:
        if not partitions:
            raise ValueError(f"FlinkFixedPartitioner: topic {target_topic!r} has no partitions")
        return partitions[self.parallel_instance_id % len(partitions)]


#: the names ``raylink.api.connectors.kafka`` exports them under
KafkaPartitioner = FlinkKafkaPartitioner
FixedPartitioner = FlinkFixedPartitioner


class KafkaRecordSerializationSchema:
    """Turns a stream record into a :class:`ProducerRecord` (Flink's
    ``KafkaRecordSerializationSchema``): subclass and override ``serialize``, or build one from a
    topic and serialization schemas with :meth:`builder`."""

    def open(self, context: Any) -> None:
        """Called once per sink subtask before the first record; ``context`` is the writer's
        ``KafkaSinkContext`` (``parallel_instance_id``, ``number_of_parallel_instances``,
        ``get_partitions_for_topic(topic)``)."""

    def serialize(self, element: Any, context: Any, timestamp: Optional[int]) -> ProducerRecord:
        raise NotImplementedError(f"{type(self).__name__} must implement serialize(element, context, timestamp)")

    @staticmethod
    def builder() -> "KafkaRecordSerializationSchemaBuilder":
        return KafkaRecordSerializationSchemaBuilder()


def _open_schema(schema: Any, context: Any) -> None:
    hook = getattr(schema, "open", None)
    if callable(hook):
        hook(context)


class _BuiltRecordSerializationSchema(KafkaRecordSerializationSchema):
    """The schema :class:`KafkaRecordSerializationSchemaBuilder` builds."""

    def __init__(
        self,
        topic: Optional[str],
        topic_selector: Optional[KafkaTopicSelector],
        key_schema: Any,
        value_schema: Any,
        partitioner: Optional[FlinkKafkaPartitioner],
    ) -> None:
        self.topic = topic
        self.topic_selector = topic_selector
        self.key_schema = key_schema
        self.value_schema = value_schema
        self.partitioner = partitioner

    def open(self, context: Any) -> None:
        _open_schema(self.key_schema, None)
        _open_schema(self.value_schema, None)
        if self.partitioner is not None:
            self.partitioner.open(context.parallel_instance_id, context.number_of_parallel_instances)

    def serialize(self, element: Any, context: Any, timestamp: Optional[int]) -> ProducerRecord:
        topic = self.topic if self.topic_selector is None else self.topic_selector.apply(element)
        if not isinstance(topic, str) or not topic:
            raise ValueError(
                f"KafkaRecordSerializationSchema: the topic selector gave {topic!r} for {element!r}, not a topic name"
            )
        key = None if self.key_schema is None else self.key_schema.serialize(element)
        value = self.value_schema.serialize(element)
        partition = None
        if self.partitioner is not None:
            partition = self.partitioner.partition(element, key, value, topic, context.get_partitions_for_topic(topic))
        stamp = timestamp if timestamp is not None and timestamp >= 0 else None
        return ProducerRecord(topic, value, key, partition, stamp)

    def plain_parts(self) -> Optional[Tuple[str, Any, Any]]:
        """(topic, key schema or None, value schema) when a record's topic is fixed and the
        producer's partitioner chooses its partition -- the writer then produces the schemas'
        bytes directly; else None."""
        if self.topic_selector is not None or self.partitioner is not None or not self.topic:
            return None
        return self.topic, self.key_schema, self.value_schema

    def __repr__(self) -> str:
        where = self.topic if self.topic_selector is None else "<topic selector>"
        return f"KafkaRecordSerializationSchema(topic={where!r}, value={type(self.value_schema).__name__})"


def _check_schema(schema: Any, what: str) -> Any:
    if not callable(getattr(schema, "serialize", None)):
        raise TypeError(
            f"KafkaRecordSerializationSchema: the {what} serialization schema must be a SerializationSchema (e.g. SimpleStringSchema()), got {type(schema).__name__}"
        )
    return schema


class KafkaRecordSerializationSchemaBuilder:
    """PyFlink's ``KafkaRecordSerializationSchemaBuilder``: a topic (fixed or selected per
    record), a value schema (required), optionally a key schema and a partitioner."""

    def __init__(self) -> None:
        self._topic: Optional[str] = None
        self._topic_selector: Optional[KafkaTopicSelector] = None
        self._key_schema: Any = None
        self._value_schema: Any = None
        self._partitioner: Optional[FlinkKafkaPartitioner] = None

    def set_topic(self, topic: str) -> "KafkaRecordSerializationSchemaBuilder":
        if not isinstance(topic, str) or not topic:
            raise ValueError(f"KafkaRecordSerializationSchema: topic must be a non-empty str, got {topic!r}")
        if self._topic_selector is not None:
            raise ValueError("KafkaRecordSerializationSchema: a topic selector is already set")
        self._topic = topic
        return self

    def set_topic_selector(
        self, topic_selector: Union[Callable[[Any], str], KafkaTopicSelector]
    ) -> "KafkaRecordSerializationSchemaBuilder":
        if not isinstance(topic_selector, KafkaTopicSelector) and not callable(topic_selector):
            raise TypeError("topic_selector must be KafkaTopicSelector or a callable")
        if self._topic is not None:
            raise ValueError("KafkaRecordSerializationSchema: a fixed topic is already set")
        if not isinstance(topic_selector, KafkaTopicSelector):
            topic_selector = _FunctionTopicSelector(topic_selector)
        self._topic_selector = topic_selector
        return self

    def set_key_serialization_schema(self, key_serialization_schema: Any) -> "KafkaRecordSerializationSchemaBuilder":
        self._key_schema = _check_schema(key_serialization_schema, "key")
        return self

    def set_value_serialization_schema(
        self, value_serialization_schema: Any
    ) -> "KafkaRecordSerializationSchemaBuilder":
        self._value_schema = _check_schema(value_serialization_schema, "value")
        return self

    def set_partitioner(self, partitioner: FlinkKafkaPartitioner) -> "KafkaRecordSerializationSchemaBuilder":
        if not callable(getattr(partitioner, "partition", None)):
            raise TypeError(
                f"KafkaRecordSerializationSchema: the partitioner must be a FlinkKafkaPartitioner, got {type(partitioner).__name__}"
            )
        self._partitioner = partitioner
        return self

    def build(self) -> KafkaRecordSerializationSchema:
        if self._topic is None and self._topic_selector is None:
            raise ValueError("KafkaRecordSerializationSchema: no topic set (set_topic or set_topic_selector)")
        if self._value_schema is None:
            raise ValueError(
                "KafkaRecordSerializationSchema: no value serialization schema set (set_value_serialization_schema)"
            )
        return _BuiltRecordSerializationSchema(
            self._topic, self._topic_selector, self._key_schema, self._value_schema, self._partitioner
        )


def _guarantee(value: Any) -> DeliveryGuarantee:
    if isinstance(value, DeliveryGuarantee):
        return value
    name = getattr(value, "name", value)
    try:
        return DeliveryGuarantee[str(name).upper()]
    except KeyError:
        raise ValueError(
            f"KafkaSink: unknown delivery guarantee {value!r} (one of {[g.name for g in DeliveryGuarantee]})"
        ) from None


class KafkaSink(Sink, SupportsWriterState, SupportsCommitter):
    """The configured sink (see the module docstring); build it with :meth:`builder`."""

    def __init__(
        self,
        bootstrap_servers: str,
        record_serializer: KafkaRecordSerializationSchema,
        delivery_guarantee: DeliveryGuarantee,
        transactional_id_prefix: Optional[str],
        properties: Dict[str, str],
    ) -> None:
        self.bootstrap_servers = bootstrap_servers
        self.record_serializer = record_serializer
        self.delivery_guarantee = delivery_guarantee
        self.transactional_id_prefix = transactional_id_prefix
        self.properties = dict(properties)

    @staticmethod
    def builder() -> "KafkaSinkBuilder":
        return KafkaSinkBuilder()

    @property
    def max_block_ms(self) -> int:
        return int(self.properties.get(MAX_BLOCK_MS, DEFAULT_MAX_BLOCK_MS))

    @property
    def transaction_timeout_ms(self) -> int:
        return int(self.properties.get("transaction.timeout.ms", DEFAULT_TRANSACTION_TIMEOUT_MS))

    # -- Sink V2 ---------------------------------------------------------------------------------
    def create_writer(self, context: WriterInitContext) -> Any:
        from raylink.connectors.kafka.sink_writer import KafkaWriter

        return KafkaWriter(self, context, [])

    def restore_writer(self, context: WriterInitContext, recovered_state: Sequence[Any]) -> Any:
        from raylink.connectors.kafka.sink_writer import KafkaWriter

        return KafkaWriter(self, context, list(recovered_state))

    def create_committer(self) -> Any:
        from raylink.connectors.kafka.sink_committer import KafkaCommitter

        return KafkaCommitter(self)

    def __repr__(self) -> str:
        return f"KafkaSink({self.bootstrap_servers}, {self.delivery_guarantee.name}, {self.record_serializer!r})"


class KafkaSinkBuilder:
    """PyFlink's ``KafkaSinkBuilder``."""

    def __init__(self) -> None:
        self._bootstrap_servers: Optional[str] = None
        self._record_serializer: Optional[KafkaRecordSerializationSchema] = None
        self._delivery_guarantee = DeliveryGuarantee.NONE
        self._transactional_id_prefix: Optional[str] = None
        self._properties: Dict[str, str] = {}

    def set_bootstrap_servers(self, bootstrap_servers: str) -> "KafkaSinkBuilder":
        if not isinstance(bootstrap_servers, str) or not bootstrap_servers.strip():
            raise ValueError(
                f"KafkaSink: bootstrap servers must be a non-empty 'host:port[,host:port]' str, got {bootstrap_servers!r}"
            )
        self._bootstrap_servers = bootstrap_servers.strip()
        return self

    def set_delivery_guarantee(self, delivery_guarantee: DeliveryGuarantee) -> "KafkaSinkBuilder":
        self._delivery_guarantee = _guarantee(delivery_guarantee)
        return self

    def set_transactional_id_prefix(self, transactional_id_prefix: str) -> "KafkaSinkBuilder":
        if not isinstance(transactional_id_prefix, str) or not transactional_id_prefix:
            raise ValueError(
                f"KafkaSink: the transactional id prefix must be a non-empty str, got {transactional_id_prefix!r}"
            )
        if len(transactional_id_prefix.encode("utf-8")) > MAXIMUM_PREFIX_BYTES:
            raise ValueError(
                f"KafkaSink: the transactional id prefix is longer than {MAXIMUM_PREFIX_BYTES} bytes in UTF-8"
            )
        self._transactional_id_prefix = transactional_id_prefix
        return self

    def set_record_serializer(self, record_serializer: KafkaRecordSerializationSchema) -> "KafkaSinkBuilder":
        if not callable(getattr(record_serializer, "serialize", None)):
            raise TypeError(
                f"KafkaSink: the record serializer must be a KafkaRecordSerializationSchema "
                f"(KafkaRecordSerializationSchema.builder()...build()), got {type(record_serializer).__name__}"
            )
        self._record_serializer = record_serializer
        return self

    def set_property(self, key: str, value: Any) -> "KafkaSinkBuilder":
        self._properties[str(key)] = str(value)
        return self

    def set_properties(self, props: Dict[str, Any]) -> "KafkaSinkBuilder":
        for key, value in dict(props).items():
            self.set_property(key, value)
        return self

    def build(self) -> KafkaSink:
        servers = self._bootstrap_servers or self._properties.get("bootstrap.servers")
        if not servers:
            raise ValueError("KafkaSink: no bootstrap servers set (set_bootstrap_servers)")
        if self._record_serializer is None:
            raise ValueError("KafkaSink: no record serializer set (set_record_serializer)")
        if self._delivery_guarantee is DeliveryGuarantee.EXACTLY_ONCE and not self._transactional_id_prefix:
            raise ValueError(
                "KafkaSink: EXACTLY_ONCE delivery guarantee requires a transactional id prefix "
                "(set_transactional_id_prefix) unique across the sinks writing to the same Kafka cluster"
            )
        for key in ("transaction.timeout.ms", MAX_BLOCK_MS):
            if key in self._properties:
                try:
                    ok = int(self._properties[key]) > 0
                except ValueError:
                    ok = False
                if not ok:
                    raise ValueError(
                        f"KafkaSink: property {key} must be a positive number of milliseconds, got {self._properties[key]!r}"
                    )
        properties = dict(self._properties)
        properties.pop("bootstrap.servers", None)
        return KafkaSink(
            servers, self._record_serializer, self._delivery_guarantee, self._transactional_id_prefix, properties
        )


__all__: List[str] = [
    "DEFAULT_TRANSACTION_TIMEOUT_MS",
    "DeliveryGuarantee",
    "FixedPartitioner",
    "FlinkFixedPartitioner",
    "FlinkKafkaPartitioner",
    "KafkaPartitioner",
    "KafkaRecordSerializationSchema",
    "KafkaRecordSerializationSchemaBuilder",
    "KafkaSink",
    "KafkaSinkBuilder",
    "KafkaTopicSelector",
    "ProducerRecord",
]
