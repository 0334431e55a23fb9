"""The Kafka sink's writer (Flink's ``KafkaWriter``, ``TransactionalIdFactory`` and
``TransactionAborter``): one per sink subtask, on its task thread.

Records become :class:`~raylink.connectors.kafka.sink_config.ProducerRecord` through the sink's
``KafkaRecordSerializationSchema`` (with the record's timestamp) and go to a confluent-kafka
``Producer``; with the builder's schema, a fixed topic and no partitioner the schemas' bytes go
to ``Producer.produce`` directly, a batch at a time (:meth:`KafkaWriter.write_batch`), and
delivery reports come for failed records only (``delivery.report.only.error``). By delivery
guarantee:

* ``NONE``: handed to the producer; flushed only at the end of input.
* ``AT_LEAST_ONCE``: also flushed at every checkpoint (``flush(False)``, before the snapshot),
  which waits for every acknowledgement; a record Kafka did not take fails the job.
* ``EXACTLY_ONCE``: each checkpoint period's records go into one Kafka transaction whose
  transactional id is ``<prefix>-<subtask>-<n>`` (``n`` = the id of the checkpoint before it
  + 1, as Flink's ``TransactionalIdFactory``; each producer, so each producer id and epoch,
  carries one transaction only: a commit repeated with an old producer id and epoch can never
  end a later transaction -- a later ``init_transactions`` on the id fences it). At
  the checkpoint's barrier the writer flushes, and ``prepare_commit`` gives a
  :class:`~raylink.connectors.kafka.sink_committer.KafkaCommittable` (id, producer id, epoch --
  the broker's, read with ``DescribeTransactions`` right after ``init_transactions``) that the
  checkpoint stores; the committer commits it once the checkpoint completed. The next
  period's transaction gets a fresh producer (librdkafka fixes the transactional id per
  producer; two are prepared ahead on background threads). A period without records gives no
  committable.

Recovery (EXACTLY_ONCE), before the first transaction of a writer: transactions of the prefix
(and of the prefixes in the restored states) still open on the cluster (``ListTransactions``)
that belong to this subtask (``<subtask of the id> % parallelism == this subtask``, as Flink's
``TransactionAborter`` hands ids out after a rescale) and were opened after the restored
checkpoint (``n`` > its id: their records are replayed) are aborted by ``init_transactions``
on their id (which also fences a zombie producer of an earlier attempt); those of the restored
checkpoint or before are the committables the committer commits. The restored checkpoint's id
is in the writer state (:class:`KafkaWriterState`). Listing open transactions instead of probing
ids one by one (Flink's ``TransactionAborter``) also finds ids left after gaps in checkpoint ids.
The writer touches Kafka only at its first record, flush or snapshot: the sink operator opens a
fresh writer before it restores one, and that one must not abort the restored transactions.

Bad input: servers that do not answer within ``max.block.ms`` fail the job naming them; a
``transaction.timeout.ms`` above the broker's ``transaction.max.timeout.ms`` fails it saying so;
a record the serializer cannot turn into a Kafka record fails it naming the record (the task
adds the operator's name); a record Kafka refuses fails it naming topic and error.

Not thread-safe: one task thread (confluent-kafka serves delivery reports on it in ``poll``).
"""

from __future__ import annotations

import re
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Tuple

from raylink.connectors.kafka.client import KafkaConnectorError
from raylink.connectors.kafka.sink_committer import (
    KafkaCommittable,
    TransactionAdmin,
    forget_producers,
    register_producer,
)
from raylink.core.sink import (
    CommittingSinkWriter,
    DeliveryGuarantee,
    SinkWriterContext,
    StatefulSinkWriter,
    WriterInitContext,
)

#: Java producer settings librdkafka does not have: not passed on
JAVA_ONLY_PRODUCER_PROPERTIES = frozenset(
    {
        "key.serializer",
        "value.serializer",
        "max.block.ms",
        "buffer.memory",
        "client.dns.lookup",
        "interceptor.classes",
        "metric.reporters",
        "partitioner.class",
        "partitioner.ignore.keys",
        "partitioner.adaptive.partitioning.enable",
        "partitioner.availability.timeout.ms",
        "max.request.size",
        "send.buffer.bytes",
        "receive.buffer.bytes",
        "metadata.max.idle.ms",
    }
)
#: Java's delivery.timeout.ms default, used as librdkafka's message.timeout.ms unless set
DEFAULT_DELIVERY_TIMEOUT_MS = 120_000
_POLL_EVERY = 1024  # records between serving delivery reports
#: transactions prepared ahead (EXACTLY_ONCE): a producer's init_transactions takes 50-500 ms
PREFETCHED_TRANSACTIONS = 2


@dataclass(frozen=True)
class KafkaWriterState:
    """What a writer's snapshot holds (Flink's ``KafkaWriterState``): its prefix, subtask and the
    checkpoint it belongs to (a restore aborts this subtask's transactions opened after it)."""

    transactional_id_prefix: str
    subtask_id: int
    checkpoint_id: int


def transactional_id(prefix: str, subtask_id: int, number: int) -> str:
    """Flink's ``TransactionalIdFactory.buildTransactionalId``."""
    return f"{prefix}-{subtask_id}-{number}"


def producer_config(sink: Any, transactional: Optional[str] = None) -> Dict[str, Any]:
    """librdkafka producer settings from the sink's properties (see the module docstring)."""
    config: Dict[str, Any] = {k: v for k, v in sink.properties.items() if k not in JAVA_ONLY_PRODUCER_PROPERTIES}
    config["bootstrap.servers"] = sink.bootstrap_servers
    config.setdefault("partitioner", "murmur2_random")  # Java's default partitioner (the key's murmur2)
    config.setdefault("log_level", 3)  # errors only: no connection-refused warnings
    # delivery reports of failed records only: no Python call per acknowledged record (flush
    # still waits for every acknowledgement)
    config.setdefault("delivery.report.only.error", True)
    if "delivery.timeout.ms" not in config and "message.timeout.ms" not in config:
        config["message.timeout.ms"] = DEFAULT_DELIVERY_TIMEOUT_MS
    if transactional is not None:
        timeout = int(sink.transaction_timeout_ms)
        config["transactional.id"] = transactional
        config["transaction.timeout.ms"] = timeout
        for key in ("delivery.timeout.ms", "message.timeout.ms"):
            if key in config:
                config[key] = min(int(config[key]), timeout)
    else:
        config.pop("transaction.timeout.ms", None)
        config.pop("transactional.id", None)
    return config


def _error_text(exc: Exception) -> str:
    err = exc.args[0] if exc.args else None
    return err.str() if hasattr(err, "str") else str(exc)


class KafkaSinkContext:
    """What a record serializer learns (Flink's ``KafkaRecordSerializationSchema.KafkaSinkContext``)."""

    def __init__(self, subtask_id: int, parallelism: int, metadata: Any, timeout_s: float, servers: str) -> None:
        self.parallel_instance_id = subtask_id
        self.number_of_parallel_instances = parallelism
        self._metadata = metadata
        self._timeout_s = timeout_s
        self._servers = servers
        self._partitions: Dict[str, List[int]] = {}

    def get_partitions_for_topic(self, topic: str) -> List[int]:
        """The partition numbers of ``topic``, sorted (fetched once per topic)."""
        found = self._partitions.get(topic)
        if found is None:
            try:
                metadata = self._metadata.list_topics(topic, timeout=self._timeout_s)
            except Exception as exc:
                raise KafkaConnectorError(
                    f"KafkaSink: no metadata for topic {topic!r} from {self._servers} within "
                    f"{self._timeout_s:g} s (max.block.ms): {_error_text(exc)}"
                ) from None
            described = metadata.topics.get(topic)
            if described is None or described.error is not None or not described.partitions:
                raise KafkaConnectorError(f"KafkaSink: topic {topic!r} does not exist on {self._servers}")
            found = self._partitions[topic] = sorted(described.partitions)
        return found


class TransactionAborter:
    """Aborts the lingering transactions of one subtask (see the module docstring)."""

    def __init__(self, sink: Any, admin: TransactionAdmin, subtask_id: int, parallelism: int, timeout_s: float) -> None:
        self.sink = sink
        self.admin = admin
        self.subtask_id = subtask_id
        self.parallelism = parallelism
        self.timeout_s = timeout_s

    def lingering(self, prefixes: Sequence[str], restored_checkpoint_id: int) -> List[str]:
        """Open transactions of ``prefixes`` this subtask owns, opened after the checkpoint."""
        pattern = re.compile("(%s)-(\\d+)-(\\d+)" % "|".join(re.escape(p) for p in sorted(set(prefixes))))
        owned = []
        for txid in self.admin.list_open():
            match = pattern.fullmatch(txid)
            if match is None:
                continue
            subtask, number = int(match.group(2)), int(match.group(3))
            if subtask % self.parallelism == self.subtask_id and number > restored_checkpoint_id:
                owned.append(txid)
        return owned

    def abort_lingering(self, prefixes: Sequence[str], restored_checkpoint_id: int) -> List[str]:
        aborted = self.lingering(prefixes, restored_checkpoint_id)
        for txid in aborted:
            producer = _init_transactional(self.sink, txid, self.timeout_s)
            producer.close()  # no transaction of its own: nothing else to end
        return aborted


def _init_transactional(sink: Any, txid: str, timeout_s: float, on_delivery: Any = None) -> Any:
    """A transactional producer for ``txid`` after ``init_transactions`` (which aborts an open
    transaction of that id and fences its producer)."""
    from confluent_kafka import KafkaError, KafkaException, Producer

    config = producer_config(sink, txid)
    if on_delivery is not None:
        config["on_delivery"] = on_delivery
    producer = Producer(config)
    try:
        producer.init_transactions(timeout_s)
    except KafkaException as exc:
        err = exc.args[0] if exc.args else None
        code = err.code() if err is not None and hasattr(err, "code") else None
        if code == KafkaError.INVALID_TRANSACTION_TIMEOUT:
            raise KafkaConnectorError(
                f"KafkaSink: transaction.timeout.ms={sink.transaction_timeout_ms} is larger than the broker's "
                f"transaction.max.timeout.ms on {sink.bootstrap_servers}; raise transaction.max.timeout.ms on "
                f"the broker or give the sink a lower transaction.timeout.ms (set_property)"
            ) from None
        raise KafkaConnectorError(
            f"KafkaSink: starting transactions for {txid} on {sink.bootstrap_servers} failed within "
            f"{timeout_s:g} s (max.block.ms): {_error_text(exc)}"
        ) from None
    return producer


class KafkaWriter(CommittingSinkWriter, StatefulSinkWriter):
    """Writes one sink subtask's records (see the module docstring)."""

    def __init__(self, sink: Any, context: WriterInitContext, recovered_states: Sequence[KafkaWriterState]) -> None:
        self.sink = sink
        self.guarantee: DeliveryGuarantee = sink.delivery_guarantee
        self.exactly_once = self.guarantee is DeliveryGuarantee.EXACTLY_ONCE
        self.subtask_id = context.subtask_id
        self.parallelism = context.number_of_parallel_subtasks
        self.timeout_s = int(sink.max_block_ms) / 1000.0
        self.prefix: str = sink.transactional_id_prefix or "kafka-sink"
        self.recovered_states = list(recovered_states)
        self.restored_checkpoint_id = max((s.checkpoint_id for s in self.recovered_states), default=0)
        self._next_number = self.restored_checkpoint_id + 1
        self._started = False
        self._end_of_input = False
        self._producer: Any = None
        self._transaction: Optional[KafkaCommittable] = None
        self._records_in_transaction = 0
        self._unpolled = 0
        self._unflushed = 0  # records handed to the producer since its last flush
        self._errors: List[str] = []
        self._prepared: List[str] = []
        self._metadata: Any = None
        self._admin: Optional[TransactionAdmin] = None
        self._prefetcher: Optional[ThreadPoolExecutor] = None
        self._prefetch: Dict[int, Any] = {}  # transaction number -> future of (producer, committable)
        self._describe_lock = threading.Lock()
        self.sink_context: Optional[KafkaSinkContext] = None
        self.aborted: List[str] = []  # lingering transactions this writer aborted at its start
        self._serialize = sink.record_serializer.serialize
        #: (topic, key schema, value schema) when the serializer is the builder's with a fixed topic
        #: and no partitioner: write_batch produces directly
        parts = getattr(sink.record_serializer, "plain_parts", None)
        self._plain = parts() if callable(parts) else None

    # -- start -----------------------------------------------------------------------------------
    def _start(self) -> None:
        from confluent_kafka.admin import AdminClient

        sink = self.sink
        self._metadata = AdminClient({"bootstrap.servers": sink.bootstrap_servers, "log_level": 0})
        try:
            metadata = self._metadata.list_topics(timeout=self.timeout_s)
            reachable = bool(metadata.brokers)
        except Exception:
            reachable = False
        if not reachable:
            raise KafkaConnectorError(
                f"KafkaSink: no answer from the bootstrap servers {sink.bootstrap_servers} within "
                f"{self.timeout_s:g} s (max.block.ms)"
            )
        self.sink_context = KafkaSinkContext(
            self.subtask_id, self.parallelism, self._metadata, self.timeout_s, sink.bootstrap_servers
        )
        hook = getattr(sink.record_serializer, "open", None)
        if callable(hook):
            hook(self.sink_context)
        if self.exactly_once:
            self._admin = TransactionAdmin(sink.bootstrap_servers, int(sink.max_block_ms))
            prefixes = [self.prefix] + [s.transactional_id_prefix for s in self.recovered_states]
            aborter = TransactionAborter(sink, self._admin, self.subtask_id, self.parallelism, self.timeout_s)
            self.aborted = aborter.abort_lingering(prefixes, self.restored_checkpoint_id)
        self._started = True

    def _ensure_producer(self) -> None:
        if not self._started:
            self._start()
        if self._producer is not None:
            return
        if not self.exactly_once:
            from confluent_kafka import Producer

            self._producer = Producer(self._config(None))
            return
        producer, transaction = self._take_transaction(self._next_number)
        producer.begin_transaction()
        self._producer = producer
        self._transaction = transaction
        self._records_in_transaction = 0
        if not self._end_of_input:  # the next periods', assuming barriers n, n + 1, ... come next
            if self._prefetcher is None:
                self._prefetcher = ThreadPoolExecutor(PREFETCHED_TRANSACTIONS, thread_name_prefix="kafka-sink-prefetch")
            for number in range(self._next_number + 1, self._next_number + 1 + PREFETCHED_TRANSACTIONS):
                if number not in self._prefetch:
                    self._prefetch[number] = self._prefetcher.submit(self._create_transaction, number)

    def _create_transaction(self, number: int) -> Tuple[Any, KafkaCommittable]:
        """A producer of transactional id ``number`` after ``init_transactions``, and its
        committable (the producer id and epoch the broker gave it, read right away: they stay
        the same for the transaction it begins next). Runs on the prefetch threads or, when no
        prefetched one fits, on the task thread."""
        txid = transactional_id(self.prefix, self.subtask_id, number)
        producer = _init_transactional(self.sink, txid, self.timeout_s, self._on_delivery)
        assert self._admin is not None
        with self._describe_lock:
            described = self._admin.describe(txid)
        if described is None:
            raise KafkaConnectorError(
                f"KafkaSink: the broker {self.sink.bootstrap_servers} does not know transaction {txid} after its start"
            )
        return producer, KafkaCommittable(txid, described[1], described[2])

    def _take_transaction(self, number: int) -> Tuple[Any, KafkaCommittable]:
        """The prefetched producer if it was made for ``number``, else a new one; prefetched ones
        of lower numbers are closed (they began no transaction)."""
        self._drop_prefetch(below=number)
        future = self._prefetch.pop(number, None)
        if future is not None:
            try:
                return future.result()
            except Exception:  # the task thread tries again and reports the error
                pass
        return self._create_transaction(number)

    def _drop_prefetch(self, below: Optional[int] = None) -> None:
        for number in sorted(self._prefetch):
            if below is None or number < below:
                try:
                    producer, _ = self._prefetch.pop(number).result()
                except Exception:  # nothing was made
                    continue
                producer.close()

    def _config(self, txid: Optional[str]) -> Dict[str, Any]:
        config = producer_config(self.sink, txid)
        config["on_delivery"] = self._on_delivery
        return config

    def _on_delivery(self, err: Any, msg: Any) -> None:
        if err is not None and len(self._errors) < 10:
            self._errors.append(f"topic {msg.topic()!r} partition {msg.partition()}: {err.str()}")

    def _raise_errors(self) -> None:
        if self._errors:
            raise KafkaConnectorError(
                f"KafkaSink: Kafka on {self.sink.bootstrap_servers} did not take {len(self._errors)}"
                f"{'+' if len(self._errors) >= 10 else ''} record(s): " + "; ".join(self._errors)
            )

    # -- records ---------------------------------------------------------------------------------
    def write_batch(self, elements: List[Any], context: Optional[SinkWriterContext] = None) -> None:
        """``write`` for each of ``elements`` (one timestamp, the context's), with no per-record
        Python beyond the schemas' ``serialize`` and ``Producer.produce`` when the serializer is
        the builder's with a fixed topic and no partitioner; otherwise, and to name a record
        that cannot be serialized or produced, record by record through :meth:`write`."""
        plain = self._plain
        if plain is None or not elements:
            for element in elements:
                self.write(element, context)
            return
        if self._producer is None:
            self._ensure_producer()
        topic, key_schema, value_schema = plain
        try:
            values = [value_schema.serialize(e) for e in elements]
            keys = None if key_schema is None else [key_schema.serialize(e) for e in elements]
        except Exception:  # write() names the record
            for element in elements:
                self.write(element, context)
            return
        timestamp = None if context is None else context.timestamp
        timestamp = timestamp if timestamp is not None and timestamp > 0 else 0
        producer = self._producer
        produce = producer.produce
        done, n = 0, len(values)
        while done < n:
            try:
                if keys is None and not timestamp:
                    for value in values[done:] if done else values:
                        produce(topic, value)
                        done += 1
                else:
                    for i in range(done, n):
                        produce(topic, values[i], None if keys is None else keys[i], -1, None, timestamp)
                        done += 1
            except BufferError:  # the producer's queue is full: let it deliver (back pressure)
                producer.poll(0.05)
                self._raise_errors()
            except Exception:  # write() names the record and the error
                self._records_in_transaction += done
                self._unflushed += done
                self._unpolled += done
                for element in elements[done:]:
                    self.write(element, context)
                return
        self._records_in_transaction += n
        self._unflushed += n
        self._unpolled += n
        if self._unpolled >= _POLL_EVERY:
            self._unpolled = 0
            producer.poll(0)
            self._raise_errors()

    def write(self, element: Any, context: Optional[SinkWriterContext] = None) -> None:
        if self._producer is None:
            self._ensure_producer()
        timestamp = None if context is None else context.timestamp
        plain = self._plain
        if plain is not None:  # the schemas' bytes straight to the producer
            try:
                value = plain[2].serialize(element)
                key = None if plain[1] is None else plain[1].serialize(element)
            except Exception:  # the record serializer's path below names the record
                pass
            else:
                stamp = timestamp if timestamp is not None and timestamp > 0 else 0
                try:
                    self._producer.produce(plain[0], value, key, -1, None, stamp)
                except Exception:  # a full queue or a Kafka error: waited for / named there
                    self._send(plain[0], value, key, None, stamp, None)
                    return
                self._records_in_transaction += 1
                self._unflushed += 1
                self._unpolled += 1
                if self._unpolled >= _POLL_EVERY:
                    self._unpolled = 0
                    self._producer.poll(0)
                    self._raise_errors()
                return
        try:
            record = self._serialize(element, self.sink_context, timestamp)
        except KafkaConnectorError:
            raise
        except Exception as exc:
            raise KafkaConnectorError(
                f"KafkaSink: the record serializer {self.sink.record_serializer!r} could not serialize "
                f"the record {element!r:.200}: {type(exc).__name__}: {exc}"
            ) from exc
        self._produce(record)

    def _produce(self, record: Any) -> None:
        self._send(record.topic, record.value, record.key, record.partition, record.timestamp, record.headers)

    def _send(
        self, topic: str, value: Any, key: Any, partition: Optional[int], timestamp: Optional[int], headers: Any
    ) -> None:
        from confluent_kafka import KafkaException

        producer = self._producer
        partition = -1 if partition is None else partition
        timestamp = timestamp or 0
        while True:
            try:
                if headers:
                    producer.produce(topic, value, key, partition, timestamp=timestamp, headers=headers)
                else:
                    producer.produce(topic, value, key, partition, timestamp=timestamp)
                break
            except BufferError:  # the producer's queue is full: let it deliver (back pressure)
                producer.poll(0.05)
                self._raise_errors()
            except KafkaException as exc:
                raise KafkaConnectorError(
                    f"KafkaSink: Kafka on {self.sink.bootstrap_servers} refused a record for topic "
                    f"{topic!r}: {_error_text(exc)}"
                ) from None
            except TypeError as exc:
                raise KafkaConnectorError(
                    f"KafkaSink: the record serializer gave a record Kafka cannot take (key and value must be "
                    f"bytes or None) for topic {topic!r}: {exc}"
                ) from None
        self._records_in_transaction += 1
        self._unflushed += 1
        self._unpolled += 1
        if self._unpolled >= _POLL_EVERY:
            self._unpolled = 0
            producer.poll(0)
            self._raise_errors()

    def flush(self, end_of_input: bool) -> None:
        if end_of_input:
            self._end_of_input = True
        elif self.guarantee is DeliveryGuarantee.NONE:
            return
        if self._producer is None:
            if not self._started:
                self._ensure_producer()
            return
        self._flush_producer()

    def _flush_producer(self) -> None:
        """Waits until Kafka acknowledged every record written since the last flush (none
        written: no wait, so a checkpoint's flush and its prepare_commit wait once)."""
        if self._unflushed:
            while self._producer.flush(1.0) > 0:
                self._raise_errors()
            self._unflushed = 0
        self._raise_errors()

    # -- checkpoints (EXACTLY_ONCE) --------------------------------------------------------------
    def prepare_commit(self) -> List[KafkaCommittable]:
        if not self.exactly_once:
            return []
        if not self._started:
            self._start()  # aborts lingering transactions even if no record came
        if self._producer is None or self._records_in_transaction == 0:
            return []  # nothing to commit
        self._flush_producer()
        committable = self._transaction
        assert committable is not None
        register_producer(committable.transactional_id, self._producer)
        self._prepared.append(committable.transactional_id)
        if len(self._prepared) > 64:
            self._prepared = self._prepared[-64:]
        self._producer = None
        self._transaction = None
        return [committable]

    def snapshot_state(self, checkpoint_id: int) -> List[KafkaWriterState]:
        if self.exactly_once:
            # the next period's transaction is numbered checkpoint_id + 1, also when this period
            # wrote nothing: a restore from this checkpoint must see it as opened after it
            idle, self._producer = self._producer, None
            if idle is not None:
                idle.close()  # began no transaction on the broker: it wrote nothing
            self._next_number = checkpoint_id + 1
            if not self._end_of_input:
                self._ensure_producer()
        elif not self._started:
            self._ensure_producer()
        return [KafkaWriterState(self.prefix, self.subtask_id, checkpoint_id)]

    # -- end -------------------------------------------------------------------------------------
    def close(self) -> None:
        from confluent_kafka import KafkaException

        producer, self._producer = self._producer, None
        if producer is not None:
            try:
                if self.exactly_once:
                    producer.close()  # aborts the open transaction: its records were in no checkpoint
                else:
                    producer.purge(True, True, False)  # a failing job: what was not flushed is replayed
                    producer.close()
            except KafkaException:  # fenced by a newer attempt, or the broker is gone: nothing to end here
                pass
        forget_producers(self._prepared)  # prepared transactions stay open for a committer
        self._prepared = []
        self._drop_prefetch()
        if self._prefetcher is not None:
            self._prefetcher.shutdown(wait=True)
            self._prefetcher = None
        if self._admin is not None:
            self._admin.close()
            self._admin = None
        self._metadata = None


__all__ = [
    "JAVA_ONLY_PRODUCER_PROPERTIES",
    "KafkaSinkContext",
    "KafkaWriter",
    "KafkaWriterState",
    "TransactionAborter",
    "producer_config",
    "transactional_id",
]
