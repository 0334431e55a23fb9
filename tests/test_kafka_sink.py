"""PyFlink's ``KafkaSink`` against a real broker: bounded jobs into a topic with each delivery
guarantee, keys partitioned as Java's producer does, a partitioner, record timestamps, the
exactly-once recovery pieces (lingering transactions aborted at start, a dead producer's
transaction committed by producer id and epoch, idempotently) and the errors a user gets.
Output is read back with confluent-kafka (``isolation.level=read_committed``); what a test
expects is computed from its input."""

from __future__ import annotations

import subprocess
import sys
import time
from collections import Counter

import pytest

from raylink.api import WatermarkStrategy
from raylink.api.connectors.kafka import (
    DeliveryGuarantee,
    FixedPartitioner,
    KafkaPartitioner,
    KafkaRecordSerializationSchema,
    KafkaSink,
)
from raylink.api.serialization import SerializationSchema, SimpleStringSchema
from raylink.core.watermark_strategy import TimestampAssigner
from raylink.tests.kafka_util import new_topic
from raylink.tests.runtime_jobs import cause_chain, make_env

pytestmark = pytest.mark.timeout(240)


def read_committed(
    servers: str,
    topic: str,
    expected: int,
    timeout: float = 60.0,
    settle: float = 1.0,
    isolation: str = "read_committed",
) -> list:
    """Every record a ``read_committed`` consumer of all of ``topic``'s partitions (assigned, from
    their start) sees as (partition, key, value, timestamp) once ``expected`` arrived and nothing
    more came for ``settle`` s (polled with a deadline); stops at ``timeout``."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": servers,
            "group.id": f"check-{topic}-{time.monotonic_ns()}",
            "isolation.level": isolation,
            "enable.auto.commit": False,
        }
    )
    partitions = consumer.list_topics(topic, timeout=30).topics[topic].partitions
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
    got: list = []
    deadline = time.monotonic() + timeout
    quiet_since = None
    try:
        while time.monotonic() < deadline:
            batch = [m for m in consumer.consume(10_000, 0.2) if m.error() is None]
            got.extend(
                (m.partition(), m.key().decode() if m.key() is not None else None, m.value().decode(), m.timestamp())
                for m in batch
            )
            if batch or len(got) < expected:
                quiet_since = None
            elif quiet_since is None:
                quiet_since = time.monotonic()
            elif time.monotonic() - quiet_since >= settle:
                break
    finally:
        consumer.close()
    return got


def values(records: list) -> Counter:
    return Counter(r[2] for r in records)


def string_sink(servers: str, topic: str, guarantee: DeliveryGuarantee, prefix: str = "", **props) -> KafkaSink:
    builder = (
        KafkaSink.builder()
        .set_bootstrap_servers(servers)
        .set_record_serializer(
            KafkaRecordSerializationSchema.builder()
            .set_topic(topic)
            .set_key_serialization_schema(KeyOf())
            .set_value_serialization_schema(SimpleStringSchema())
            .build()
        )
        .set_delivery_guarantee(guarantee)
        .set_properties(props)
    )
    if prefix:
        builder.set_transactional_id_prefix(prefix)
    return builder.build()


class KeyOf(SerializationSchema):
    """The key of ``"<key>:<n>"`` records."""

    def serialize(self, element):
        return element.split(":")[0].encode()


def checkpointing(target: str, parallelism: int, tmp_path, interval: str = "200 ms"):
    return make_env(
        target,
        parallelism,
        {"execution.checkpointing.interval": interval, "execution.checkpointing.dir": str(tmp_path / "ck")},
    )


def murmur2_partition(key: bytes, partitions: int) -> int:
    """Java's default partitioner for a keyed record (kafka-python's twin of Java's murmur2)."""
    from kafka.partitioner.default import murmur2

    return (murmur2(key) & 0x7FFFFFFF) % partitions


N = 3000


@pytest.mark.parametrize("guarantee", list(DeliveryGuarantee), ids=lambda g: g.name)
def test_a_bounded_job_writes_every_record_once_with_each_guarantee_keys_partitioned_as_java_does(
    kafka_broker, tmp_path, guarantee
):
    servers = kafka_broker.bootstrap_servers
    topic = new_topic(servers, 3)
    env = checkpointing("local", 2, tmp_path)
    env.from_sequence(0, N - 1).map(lambda v: f"k{v % 17}:{v}").sink_to(
        string_sink(servers, topic, guarantee, prefix=f"tx-{topic}")
    )
    env.execute("kafka sink")
    got = read_committed(servers, topic, N)
    assert values(got) == Counter(f"k{v % 17}:{v}" for v in range(N))
    assert all(partition == murmur2_partition(key.encode(), 3) for partition, key, _, _ in got)


def test_exactly_once_without_checkpointing_commits_at_the_end_of_input(kafka_broker):
    servers = kafka_broker.bootstrap_servers
    topic = new_topic(servers, 2)
    env = make_env("local", 2)
    env.from_sequence(0, 499).map(lambda v: f"k:{v}").sink_to(
        string_sink(servers, topic, DeliveryGuarantee.EXACTLY_ONCE, prefix=f"tx-{topic}")
    )
    env.execute("kafka sink")
    assert values(read_committed(servers, topic, 500)) == Counter(f"k:{v}" for v in range(500))


class ValueAsTimestamp(TimestampAssigner):
    def extract_timestamp(self, value, record_timestamp):
        return 1_700_000_000_000 + value


class ModuloPartitioner(KafkaPartitioner):
    def partition(self, record, key, value, target_topic, partitions):
        return partitions[int(record.split(":")[1]) % len(partitions)]


def test_record_timestamps_and_a_partitioner_reach_kafka(kafka_broker, tmp_path):
    from confluent_kafka import TIMESTAMP_CREATE_TIME

    servers = kafka_broker.bootstrap_servers
    topic = new_topic(servers, 4)
    strategy = WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(ValueAsTimestamp())
    schema = (
        KafkaRecordSerializationSchema.builder()
        .set_topic(topic)
        .set_value_serialization_schema(SimpleStringSchema())
        .set_partitioner(ModuloPartitioner())
        .build()
    )
    sink = KafkaSink.builder().set_bootstrap_servers(servers).set_record_serializer(schema).build()
    env = make_env("local", 2)
    env.from_sequence(0, 399).assign_timestamps_and_watermarks(strategy).map(lambda v: f"x:{v}").sink_to(sink)
    env.execute("kafka sink")
    got = read_committed(servers, topic, 400)
    assert sorted((p, v, ts) for p, _, v, ts in got) == sorted(
        (v % 4, f"x:{v}", (TIMESTAMP_CREATE_TIME, 1_700_000_000_000 + v)) for v in range(400)
    )


def test_the_fixed_partitioner_and_a_topic_selector(kafka_broker):
    servers = kafka_broker.bootstrap_servers
    even, odd = new_topic(servers, 3), new_topic(servers, 3)
    schema = (
        KafkaRecordSerializationSchema.builder()
        .set_topic_selector(lambda v: even if int(v.split(":")[1]) % 2 == 0 else odd)
        .set_value_serialization_schema(SimpleStringSchema())
        .set_partitioner(FixedPartitioner())
        .build()
    )
    sink = KafkaSink.builder().set_bootstrap_servers(servers).set_record_serializer(schema).build()
    env = make_env("local", 1)
    env.from_sequence(0, 199).map(lambda v: f"s:{v}").sink_to(sink)
    env.execute("kafka sink")
    got_even, got_odd = read_committed(servers, even, 100), read_committed(servers, odd, 100)
    assert values(got_even) == Counter(f"s:{v}" for v in range(0, 200, 2))
    assert values(got_odd) == Counter(f"s:{v}" for v in range(1, 200, 2))
    assert {p for p, *_ in got_even + got_odd} == {0}  # subtask 0 of 1: partitions[0 % 3]


# -- exactly-once recovery pieces ------------------------------------------------------------------
_OPEN_TRANSACTION = """
import os, sys
from confluent_kafka import Producer
servers, topic, txid, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
p = Producer({"bootstrap.servers": servers, "transactional.id": txid, "transaction.timeout.ms": 600000})
p.init_transactions(60)
p.begin_transaction()
for i in range(n):
    p.produce(topic, value=b"%s:%d" % (txid.encode(), i))
assert p.flush(60) == 0
print("open", flush=True)
os.kill(os.getpid(), 9)  # dies with its transaction open
"""


def open_transaction_and_die(servers: str, topic: str, txid: str, n: int) -> None:
    """A process that writes ``n`` records in transaction ``txid`` and is SIGKILLed before it ends."""
    run = subprocess.run(
        [sys.executable, "-c", _OPEN_TRANSACTION, servers, topic, txid, str(n)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.stdout.strip() == "open" and run.returncode == -9, run.stderr[-2000:]


def test_lingering_transactions_of_the_prefix_are_aborted_when_the_sink_starts(kafka_broker, tmp_path):
    from raylink.connectors.kafka.sink_committer import TransactionAdmin

    servers = kafka_broker.bootstrap_servers
    topic = new_topic(servers, 2)
    prefix = f"linger-{topic}"
    # an earlier run's transactions left open: subtask 1's, and subtask 3's of a run at parallelism 4
    # (owned by subtask 3 % 2 = 1 now); another prefix's open transaction is not the sink's to end
    for txid in (f"{prefix}-1-7", f"{prefix}-3-2", f"other-{topic}-0-1"):
        open_transaction_and_die(servers, topic, txid, 5)
    admin = TransactionAdmin(servers, 30_000)
    try:
        assert {t for t in admin.list_open() if topic in t} == {f"{prefix}-1-7", f"{prefix}-3-2", f"other-{topic}-0-1"}
        env = checkpointing("local", 2, tmp_path)
        env.from_sequence(0, 999).map(lambda v: f"k{v % 5}:{v}").sink_to(
            string_sink(servers, topic, DeliveryGuarantee.EXACTLY_ONCE, prefix=prefix)
        )
        env.execute("kafka sink")
        # the sink aborted its prefix's lingering transactions (open ones would hold read_committed
        # readers back for up to their timeout); the other prefix's is ended here, as its owner would
        assert {t for t in admin.list_open() if topic in t} == {f"other-{topic}-0-1"}
        for txid in (f"{prefix}-1-7", f"{prefix}-3-2"):
            assert admin.describe(txid)[0] in ("COMPLETE_ABORT", "EMPTY")
        state, pid, epoch = admin.describe(f"other-{topic}-0-1")
        assert admin.end_transaction(f"other-{topic}-0-1", pid, epoch, False) == "NoError"
        got = read_committed(servers, topic, 1000)
        assert values(got) == Counter(f"k{v % 5}:{v}" for v in range(1000))
    finally:
        admin.close()


def test_a_dead_producers_transaction_is_committed_by_producer_id_and_epoch_exactly_once(kafka_broker):
    """The committer's recovery path: the producer that wrote a prepared transaction died; the
    committable (id, producer id, epoch) commits it from another process; committing it again
    (a restore from the same checkpoint) is a no-op, also after its live producer committed it;
    a transaction Kafka aborted is reported lost."""
    from raylink.connectors.kafka.sink_committer import KafkaCommittable, KafkaCommitter, TransactionAdmin

    servers = kafka_broker.bootstrap_servers
    topic = new_topic(servers, 1)
    sink = string_sink(
        servers, topic, DeliveryGuarantee.EXACTLY_ONCE, prefix=f"dead-{topic}", **{"max.block.ms": "20000"}
    )
    admin = TransactionAdmin(servers, 20_000)
    committer = KafkaCommitter(sink)
    try:
        txid = f"dead-{topic}-0-1"
        open_transaction_and_die(servers, topic, txid, 50)
        state, pid, epoch = admin.describe(txid)
        assert state == "ONGOING"
        committable = KafkaCommittable(txid, pid, epoch)
        committer.commit([committable])
        committer.commit([committable])  # again, as after a restore from the same checkpoint
        assert committer.lost == []
        assert values(read_committed(servers, topic, 50)) == Counter(f"{txid}:{i}" for i in range(50))

        aborted = f"dead-{topic}-0-2"
        open_transaction_and_die(servers, topic, aborted, 10)
        state, pid, epoch = admin.describe(aborted)
        assert admin.end_transaction(aborted, pid, epoch, False) == "NoError"  # as a timeout would
        committer.commit([KafkaCommittable(aborted, pid, epoch)])
        assert committer.lost == [aborted]
        assert values(read_committed(servers, topic, 50)) == Counter(f"{txid}:{i}" for i in range(50))

        # committed by its live producer, then again by id and epoch after a restore: Kafka answers
        # INVALID_TXN_STATE, which DescribeTransactions (CompleteCommit, same producer id) tells apart
        from confluent_kafka import Producer

        live = f"dead-{topic}-0-3"
        producer = Producer({"bootstrap.servers": servers, "transactional.id": live})
        producer.init_transactions(30)
        producer.begin_transaction()
        producer.produce(topic, value=f"{live}:0".encode())
        assert producer.flush(30) == 0
        state, pid, epoch = admin.describe(live)
        producer.commit_transaction(30)
        producer.close()
        committer.commit([KafkaCommittable(live, pid, epoch)])
        assert committer.lost == [aborted]
        assert values(read_committed(servers, topic, 51)) == Counter([f"{txid}:{i}" for i in range(50)] + [f"{live}:0"])
    finally:
        committer.close()
        admin.close()


# -- bad input -------------------------------------------------------------------------------------
def test_unreachable_servers_fail_the_job_within_max_block_ms_naming_them(tmp_path):
    from raylink.connectors.kafka.broker import free_ports

    dead = f"127.0.0.1:{free_ports(1)[0]}"
    for guarantee in (DeliveryGuarantee.AT_LEAST_ONCE, DeliveryGuarantee.EXACTLY_ONCE):
        env = make_env("local", 1)
        env.from_sequence(0, 9).map(lambda v: f"k:{v}").sink_to(
            string_sink(dead, "t", guarantee, prefix="p", **{"max.block.ms": "2000"})
        )
        started = time.monotonic()
        with pytest.raises(Exception) as info:
            env.execute("kafka sink")
        assert time.monotonic() - started < 60
        assert any(
            f"no answer from the bootstrap servers {dead} within 2 s" in str(e) for e in cause_chain(info.value)
        ), info.value


class Strict(SerializationSchema):
    def serialize(self, element):
        if element == "k:7":
            raise ValueError("seven is not allowed")
        return element.encode()


def test_a_record_the_serializer_cannot_write_fails_the_job_naming_the_operator_and_record(kafka_broker):
    servers = kafka_broker.bootstrap_servers
    topic = new_topic(servers, 1)
    schema = KafkaRecordSerializationSchema.builder().set_topic(topic).set_value_serialization_schema(Strict()).build()
    sink = KafkaSink.builder().set_bootstrap_servers(servers).set_record_serializer(schema).build()
    env = make_env("local", 1)
    env.from_sequence(0, 20).map(lambda v: f"k:{v}").sink_to(sink)
    with pytest.raises(Exception) as info:
        env.execute("kafka sink")
    text = " | ".join(str(e) for e in cause_chain(info.value))
    assert "KafkaSink" in text and "could not serialize the record 'k:7': ValueError: seven is not allowed" in text


def test_a_transaction_timeout_above_the_brokers_maximum_fails_the_job_saying_so(kafka_broker):
    servers = kafka_broker.bootstrap_servers
    topic = new_topic(servers, 1)
    env = make_env("local", 1)
    env.from_sequence(0, 9).map(lambda v: f"k:{v}").sink_to(
        string_sink(
            servers,
            topic,
            DeliveryGuarantee.EXACTLY_ONCE,
            prefix=f"big-{topic}",
            **{"transaction.timeout.ms": "7200000"},
        )
    )
    with pytest.raises(Exception) as info:
        env.execute("kafka sink")
    assert any(
        "transaction.timeout.ms=7200000 is larger than the broker's transaction.max.timeout.ms" in str(e)
        for e in cause_chain(info.value)
    ), info.value


def test_bad_builder_arguments_are_refused_naming_the_setter():
    schema = (
        KafkaRecordSerializationSchema.builder().set_topic("t").set_value_serialization_schema(SimpleStringSchema())
    )
    with pytest.raises(ValueError, match="EXACTLY_ONCE delivery guarantee requires a transactional id prefix"):
        KafkaSink.builder().set_bootstrap_servers("h:1").set_record_serializer(schema.build()).set_delivery_guarantee(
            DeliveryGuarantee.EXACTLY_ONCE
        ).build()
    with pytest.raises(ValueError, match="no value serialization schema"):
        KafkaRecordSerializationSchema.builder().set_topic("t").build()
    with pytest.raises(ValueError, match="no topic set"):
        KafkaRecordSerializationSchema.builder().set_value_serialization_schema(SimpleStringSchema()).build()
    with pytest.raises(ValueError, match="no bootstrap servers"):
        KafkaSink.builder().set_record_serializer(schema.build()).build()
    with pytest.raises(ValueError, match="transaction.timeout.ms must be a positive"):
        KafkaSink.builder().set_bootstrap_servers("h:1").set_record_serializer(schema.build()).set_property(
            "transaction.timeout.ms", "soon"
        ).build()
    default = KafkaSink.builder().set_bootstrap_servers("h:1").set_record_serializer(schema.build()).build()
    assert default.delivery_guarantee is DeliveryGuarantee.NONE  # PyFlink's default
    assert default.transaction_timeout_ms == 3_600_000  # Flink's KafkaSink default


def test_a_restored_writer_aborts_what_was_written_after_its_checkpoint_also_after_an_idle_period(kafka_broker):
    """The writer and committer driven as the sink operator drives them: checkpoint 1 holds a
    transaction, checkpoint 2's period wrote nothing, records written after checkpoint 2 are in a
    transaction of a writer that then dies (not closed); a writer restored from checkpoint 2 aborts
    that transaction before its own, and a read_committed reader sees checkpoint 1's and the
    restored writer's records only."""
    from raylink.core.sink import SinkWriterContext, WriterInitContext

    servers = kafka_broker.bootstrap_servers
    topic = new_topic(servers, 2)
    sink = string_sink(servers, topic, DeliveryGuarantee.EXACTLY_ONCE, prefix=f"idle-{topic}")
    committer = sink.create_committer()
    context = SinkWriterContext()
    first = sink.create_writer(WriterInitContext(0, 1))
    first.write("a:1", context)
    first.flush(False)
    checkpoint_1 = first.prepare_commit()
    first.snapshot_state(1)
    committer.commit(checkpoint_1)
    first.flush(False)
    assert first.prepare_commit() == []  # an idle period
    checkpoint_2 = first.snapshot_state(2)
    first.write("b:lost", context)
    first.flush(False)  # sent in an open transaction; the writer dies before checkpoint 3
    restored = sink.restore_writer(WriterInitContext(0, 1), checkpoint_2)
    restored.write("c:2", context)
    assert restored.aborted == [f"idle-{topic}-0-3"]
    restored.flush(True)
    committer.commit(restored.prepare_commit())
    restored.close()
    first.close()
    assert values(read_committed(servers, topic, 2)) == Counter({"a:1": 1, "c:2": 1})


def test_a_record_kafka_refuses_fails_an_at_least_once_job_naming_topic_and_error(kafka_broker, tmp_path):
    """The broker refuses a 2 MB record (its message.max.bytes is 1 MB; the client's is raised so
    the record leaves it): the delivery report fails the job at the next flush."""
    servers = kafka_broker.bootstrap_servers
    topic = new_topic(servers, 1)
    env = make_env(
        "local",
        1,
        {
            "execution.checkpointing.interval": "200 ms",
            "execution.checkpointing.dir": str(tmp_path / "ck"),
            "restart-strategy.type": "none",
        },
    )
    env.from_sequence(0, 9).map(lambda v: f"k:{v}" + ("x" * 2_000_000 if v == 5 else "")).sink_to(
        string_sink(servers, topic, DeliveryGuarantee.AT_LEAST_ONCE, **{"message.max.bytes": "5000000"})
    )
    with pytest.raises(Exception) as info:
        env.execute("kafka sink")
    text = " | ".join(str(e) for e in cause_chain(info.value))
    assert f"did not take 1 record(s): topic {topic!r} partition 0" in text and "too large" in text, text


def test_exactly_once_records_are_invisible_to_read_committed_until_the_checkpoint_commits(kafka_broker):
    from raylink.core.sink import SinkWriterContext, WriterInitContext

    servers = kafka_broker.bootstrap_servers
    topic = new_topic(servers, 1)
    sink = string_sink(servers, topic, DeliveryGuarantee.EXACTLY_ONCE, prefix=f"vis-{topic}")
    writer, committer = sink.create_writer(WriterInitContext(0, 1)), sink.create_committer()
    try:
        for v in range(20):
            writer.write(f"k:{v}", SinkWriterContext())
        writer.flush(False)
        committables = writer.prepare_commit()
        writer.snapshot_state(1)
        assert len(read_committed(servers, topic, 20, timeout=30, isolation="read_uncommitted")) == 20
        assert read_committed(servers, topic, 0, timeout=10, settle=3) == []  # written, not committed
        committer.commit(committables)
        assert values(read_committed(servers, topic, 20)) == Counter(f"k:{v}" for v in range(20))
    finally:
        writer.close()
