"""PyFlink's ``KafkaSource`` against a real broker: bounded reads of every partition, the starting
offsets variants, Flink's split ownership, record timestamps and the errors a user gets for
unreachable servers, unknown topics and unreadable records. Expected values come from what the
test produced with confluent-kafka directly."""

from __future__ import annotations

import time

import pytest

from raylink.api import WatermarkStrategy
from raylink.api.connectors.kafka import (
    KafkaOffsetResetStrategy,
    KafkaOffsetsInitializer,
    KafkaRecordDeserializationSchema,
    KafkaSource,
    KafkaTopicPartition,
)
from raylink.api.serialization import DeserializationSchema, SimpleStringSchema
from raylink.connectors.kafka.client import java_string_hash, split_owner
from raylink.tests.kafka_util import add_partitions, new_topic, produce
from raylink.tests.runtime_jobs import cause_chain, make_env, multiset

pytestmark = pytest.mark.timeout(180)


def _source(servers, topic, **kw):
    builder = (
        KafkaSource.builder()
        .set_bootstrap_servers(servers)
        .set_topics(topic)
        .set_value_only_deserializer(SimpleStringSchema())
        .set_bounded(kw.pop("stop", KafkaOffsetsInitializer.latest()))
    )
    if "start" in kw:
        builder.set_starting_offsets(kw.pop("start"))
    builder.set_properties(kw.pop("props", {}))
    return builder.build()


@pytest.fixture
def four(kafka_broker):
    """A 4-partition topic with 400 records (values repeat across partitions) and what was acked."""
    servers = kafka_broker.bootstrap_servers
    topic = new_topic(servers, 4)
    acked = produce(servers, topic, [(i % 4, None, f"v{i % 150}".encode(), None) for i in range(400)])
    return servers, topic, acked


def test_a_bounded_source_reads_exactly_the_records_of_every_partition(target, four):
    servers, topic, acked = four
    env = make_env(target, 3)
    ds = env.from_source(_source(servers, topic), WatermarkStrategy.no_watermarks(), "kafka")
    got = list(ds.map(lambda v: v).execute_and_collect())
    assert multiset(got) == multiset(v.decode() for v in acked.values())


def test_starting_offsets_pick_where_each_partition_begins(kafka_broker):
    servers = kafka_broker.bootstrap_servers
    topic = new_topic(servers, 2)
    base = 1_700_000_000_000
    acked = produce(servers, topic, [(i % 2, None, f"r{i}".encode(), base + i * 10) for i in range(40)])
    by_partition = {p: sorted((o, v.decode()) for (q, o), v in acked.items() if q == p) for p in (0, 1)}

    def read(start, stop=KafkaOffsetsInitializer.latest()):
        env = make_env("local", 2)
        ds = env.from_source(_source(servers, topic, start=start, stop=stop), WatermarkStrategy.no_watermarks(), "k")
        return multiset(ds.execute_and_collect())

    everything = multiset(v.decode() for v in acked.values())
    assert read(KafkaOffsetsInitializer.earliest()) == everything
    assert read(KafkaOffsetsInitializer.latest()) == {}
    # records whose timestamp is >= base + 200: i >= 20
    assert read(KafkaOffsetsInitializer.timestamp(base + 200)) == multiset(f"r{i}" for i in range(20, 40))
    given = {KafkaTopicPartition(topic, 0): 15, KafkaTopicPartition(topic, 1): 3}
    expected = [v for o, v in by_partition[0] if o >= 15] + [v for o, v in by_partition[1] if o >= 3]
    assert read(KafkaOffsetsInitializer.offsets(given)) == multiset(expected)
    # an offset out of range falls back to the reset strategy (here: latest -> nothing of partition 1)
    out_of_range = {KafkaTopicPartition(topic, 0): 18, KafkaTopicPartition(topic, 1): 10_000}
    assert read(KafkaOffsetsInitializer.offsets(out_of_range, KafkaOffsetResetStrategy.LATEST)) == multiset(
        v for o, v in by_partition[0] if o >= 18
    )
    # stopping offsets bound the read too
    stop = KafkaOffsetsInitializer.offsets({KafkaTopicPartition(topic, 0): 2, KafkaTopicPartition(topic, 1): 1})
    assert read(KafkaOffsetsInitializer.earliest(), stop) == multiset(
        [v for o, v in by_partition[0] if o < 2] + [v for o, v in by_partition[1] if o < 1]
    )


def test_committed_offsets_start_where_the_group_left_and_need_a_reset_strategy_without_one(kafka_broker):
    from confluent_kafka import Consumer, TopicPartition

    servers = kafka_broker.bootstrap_servers
    topic = new_topic(servers, 1)
    acked = produce(servers, topic, [(0, None, f"c{i}".encode(), None) for i in range(10)])
    group = "g-" + topic
    consumer = Consumer({"bootstrap.servers": servers, "group.id": group})
    consumer.commit(offsets=[TopicPartition(topic, 0, 6)], asynchronous=False)
    consumer.close()

    def source(start, group_id):
        return (
            KafkaSource.builder()
            .set_bootstrap_servers(servers)
            .set_topics(topic)
            .set_group_id(group_id)
            .set_value_only_deserializer(SimpleStringSchema())
            .set_starting_offsets(start)
            .set_bounded(KafkaOffsetsInitializer.latest())
            .build()
        )

    env = make_env("local", 1)
    ds = env.from_source(
        source(KafkaOffsetsInitializer.committed_offsets(), group), WatermarkStrategy.no_watermarks(), "k"
    )
    assert multiset(ds.execute_and_collect()) == multiset(v.decode() for (p, o), v in acked.items() if o >= 6)
    env = make_env("local", 1)
    fresh = "fresh-" + topic
    ds = env.from_source(
        source(KafkaOffsetsInitializer.committed_offsets(), fresh), WatermarkStrategy.no_watermarks(), "k"
    )
    with pytest.raises(Exception) as info:
        list(ds.execute_and_collect())
    assert any(
        f"partition {topic}-0 has no committed offset" in str(e) and fresh in str(e) for e in cause_chain(info.value)
    ), info.value
    env = make_env("local", 1)
    reset = KafkaOffsetsInitializer.committed_offsets(KafkaOffsetResetStrategy.EARLIEST)
    ds = env.from_source(source(reset, fresh), WatermarkStrategy.no_watermarks(), "k")
    assert multiset(ds.execute_and_collect()) == multiset(v.decode() for v in acked.values())


class _RecordDetails(KafkaRecordDeserializationSchema):
    def deserialize(self, record):
        return (record.topic, record.partition, record.offset, record.timestamp, record.key, record.value.decode())


def test_records_keep_their_kafka_timestamps_and_each_partition_is_read_by_its_flink_owner(kafka_broker):
    servers = kafka_broker.bootstrap_servers
    topic = new_topic(servers, 5)
    base = 1_600_000_000_000
    records = [(i % 5, f"k{i}".encode(), f"v{i}".encode(), base + i) for i in range(50)]
    acked = produce(servers, topic, records)
    env = make_env("local", 3)
    source = (
        KafkaSource.builder()
        .set_bootstrap_servers(servers)
        .set_topics(topic)
        .set_deserializer(_RecordDetails())
        .set_bounded(KafkaOffsetsInitializer.latest())
        .build()
    )

    from raylink.api.functions import ProcessFunction

    class WithContext(ProcessFunction):
        def process_element(self, value, ctx):
            yield value + (ctx.timestamp(), self.subtask)

        def open(self, runtime_context):
            self.subtask = runtime_context.get_index_of_this_subtask()

    got = list(
        env.from_source(source, WatermarkStrategy.no_watermarks(), "k").process(WithContext()).execute_and_collect()
    )
    assert len(got) == len(acked)
    for t, partition, offset, timestamp, key, value, element_ts, subtask in got:
        i = int(value[1:])
        assert (t, partition, key, timestamp, element_ts) == (topic, i % 5, f"k{i}".encode(), base + i, base + i)
        assert acked[(partition, offset)] == value.encode()
        assert subtask == split_owner(topic, partition, 3)
    # Flink's formula over Java's String.hashCode
    assert java_string_hash("hello") == 99162322
    start = ((java_string_hash(topic) * 31) & 0x7FFFFFFF) % 3
    assert [split_owner(topic, p, 3) for p in range(5)] == [(start + p) % 3 for p in range(5)]


def test_an_unknown_topic_and_unreachable_servers_fail_the_job_naming_them(kafka_broker):
    servers = kafka_broker.bootstrap_servers
    env = make_env("local", 1)
    ds = env.from_source(_source(servers, "no-such-topic-x"), WatermarkStrategy.no_watermarks(), "k")
    with pytest.raises(Exception) as info:
        list(ds.execute_and_collect())
    assert any("topic 'no-such-topic-x' does not exist" in str(e) for e in cause_chain(info.value)), info.value

    from raylink.connectors.kafka.broker import free_ports

    dead = f"127.0.0.1:{free_ports(1)[0]}"
    env = make_env("local", 1)
    source = _source(dead, "t", props={"default.api.timeout.ms": "3000"})
    ds = env.from_source(source, WatermarkStrategy.no_watermarks(), "k")
    started = time.monotonic()
    with pytest.raises(Exception) as info:
        list(ds.execute_and_collect())
    assert time.monotonic() - started < 60
    assert any(f"no answer from the bootstrap servers {dead} within 3 s" in str(e) for e in cause_chain(info.value))


class _Strict(DeserializationSchema):
    def deserialize(self, message):
        return int(message.decode())


def test_a_record_the_deserializer_cannot_read_fails_the_job_naming_topic_partition_and_offset(kafka_broker):
    servers = kafka_broker.bootstrap_servers
    topic = new_topic(servers, 2)
    acked = produce(servers, topic, [(1, None, b"1", None), (1, None, b"2", None), (1, None, b"three", None)])
    bad_offset = next(o for (p, o), v in acked.items() if v == b"three")
    env = make_env("local", 1)
    source = (
        KafkaSource.builder()
        .set_bootstrap_servers(servers)
        .set_topics(topic)
        .set_value_only_deserializer(_Strict())
        .set_bounded(KafkaOffsetsInitializer.latest())
        .build()
    )
    ds = env.from_source(source, WatermarkStrategy.no_watermarks(), "strict")
    with pytest.raises(Exception) as info:
        list(ds.execute_and_collect())
    expected = f"cannot read the record at topic {topic!r}, partition 1, offset {bad_offset}: ValueError"
    assert any(expected in str(e) for e in cause_chain(info.value)), info.value


def test_stopping_offsets_past_the_log_end_wait_for_the_records_up_to_them(kafka_broker):
    """As Flink's SpecifiedOffsetsInitializer: a given stopping offset is kept even when the
    partition does not reach it yet; the bounded job reads what is produced until it and ends."""
    servers = kafka_broker.bootstrap_servers
    topic = new_topic(servers, 1)
    produce(servers, topic, [(0, None, b"r0", None), (0, None, b"r1", None)])
    stop = KafkaOffsetsInitializer.offsets({KafkaTopicPartition(topic, 0): 5})
    env = make_env("local", 1)
    source = _source(servers, topic, start=KafkaOffsetsInitializer.earliest(), stop=stop)
    stream = env.from_source(source, WatermarkStrategy.no_watermarks(), "k").execute_and_collect()
    try:
        got = [next(stream), next(stream)]
        produce(servers, topic, [(0, None, f"r{i}".encode(), None) for i in range(2, 8)])
        got.extend(stream)  # ends at offset 5: r2..r4 and nothing after
    finally:
        stream.close()
    assert got == ["r0", "r1", "r2", "r3", "r4"]


def test_partitions_added_while_the_job_runs_are_discovered_and_read_from_their_start(kafka_broker):
    servers = kafka_broker.bootstrap_servers
    topic = new_topic(servers, 1)
    produce(servers, topic, [(0, None, b"first", None)])
    env = make_env("local", 2)
    source = (
        KafkaSource.builder()
        .set_bootstrap_servers(servers)
        .set_topics(topic)
        .set_value_only_deserializer(SimpleStringSchema())
        .set_property("partition.discovery.interval.ms", "200")
        .build()
    )
    stream = env.from_source(source, WatermarkStrategy.no_watermarks(), "k").execute_and_collect()
    got = []
    try:
        got.append(next(stream))
        add_partitions(servers, topic, 3)
        produce(servers, topic, [(1, None, b"second", None), (2, None, b"third", None)])
        got.extend([next(stream), next(stream)])
    finally:
        stream.close()
    assert sorted(got) == ["first", "second", "third"]


def test_bad_builder_arguments_are_refused_naming_the_setter():
    with pytest.raises(ValueError, match="no bootstrap servers"):
        KafkaSource.builder().set_topics("t").set_value_only_deserializer(SimpleStringSchema()).build()
    with pytest.raises(ValueError, match="no deserializer"):
        KafkaSource.builder().set_bootstrap_servers("x:1").set_topics("t").build()
    with pytest.raises(ValueError, match="a subscription is already set"):
        KafkaSource.builder().set_topics("t").set_topic_pattern("t.*")
    with pytest.raises(ValueError, match="committed_offsets\\(\\) needs a group id"):
        (
            KafkaSource.builder()
            .set_bootstrap_servers("x:1")
            .set_topics("t")
            .set_value_only_deserializer(SimpleStringSchema())
            .set_starting_offsets(KafkaOffsetsInitializer.committed_offsets())
            .build()
        )
    with pytest.raises(TypeError, match="set_starting_offsets: expected a KafkaOffsetsInitializer"):
        KafkaSource.builder().set_starting_offsets("earliest")


def test_the_deprecated_flink_kafka_consumer_and_producer_run_on_the_same_connector(kafka_broker):
    from raylink.api.connectors.kafka import FlinkKafkaConsumer, FlinkKafkaProducer, KafkaSink, Semantic
    from raylink.tests.kafka_util import committed

    servers = kafka_broker.bootstrap_servers
    source_topic, out_topic = new_topic(servers, 2), new_topic(servers, 1)
    acked = produce(servers, source_topic, [(i % 2, None, f"w{i}".encode(), None) for i in range(20)])
    group = "legacy-" + source_topic
    properties = {"bootstrap.servers": servers, "group.id": group, "auto.offset.reset": "earliest"}
    with pytest.warns(DeprecationWarning):
        consumer = FlinkKafkaConsumer(source_topic, SimpleStringSchema(), properties)
    producer = FlinkKafkaProducer(out_topic, SimpleStringSchema(), {"bootstrap.servers": servers})
    assert isinstance(producer, KafkaSink) and producer.delivery_guarantee.name == "AT_LEAST_ONCE"
    exactly = FlinkKafkaProducer(
        out_topic, SimpleStringSchema(), {"bootstrap.servers": servers}, semantic=Semantic.EXACTLY_ONCE
    )
    assert exactly.transactional_id_prefix == f"{out_topic}-flink-kafka-producer"

    env = make_env("local", 2)
    env.add_source(consumer).map(str.upper).add_sink(producer)
    client = env.execute_async()
    from confluent_kafka import Consumer, TopicPartition

    reader = Consumer({"bootstrap.servers": servers, "group.id": "check-" + out_topic})
    reader.assign([TopicPartition(out_topic, 0, 0)])
    got = []
    try:
        deadline = time.monotonic() + 60
        while len(got) < len(acked) and time.monotonic() < deadline:
            got.extend(m.value().decode() for m in reader.consume(50, 0.5) if m.error() is None)
    finally:
        reader.close()
        client.cancel()
        assert client.wait(60), "the job did not end after cancel"
    assert sorted(got) == sorted(v.decode().upper() for v in acked.values())
    assert committed(servers, group, source_topic, 2) == {0: -1001, 1: -1001}  # no checkpoints: nothing committed


def test_read_committed_reads_only_committed_transactions_and_ends_past_their_markers(kafka_broker):
    from confluent_kafka import Producer

    servers = kafka_broker.bootstrap_servers
    topic = new_topic(servers, 1)
    producer = Producer({"bootstrap.servers": servers, "transactional.id": "tx-" + topic})
    producer.init_transactions(30)
    for values, commit in (([b"c1", b"c2"], True), ([b"a1", b"a2"], False), ([b"c3"], True), ([b"a3"], False)):
        producer.begin_transaction()
        for value in values:
            producer.produce(topic, value=value, partition=0)
        assert producer.flush(30) == 0  # written before an abort (which drops what is still queued)
        (producer.commit_transaction if commit else producer.abort_transaction)(30)

    def read(isolation):
        env = make_env("local", 1)
        source = _source(servers, topic, props={"isolation.level": isolation})
        return sorted(env.from_source(source, WatermarkStrategy.no_watermarks(), "k").execute_and_collect())

    # the topic ends with an abort marker: the bounded read must end past it all the same
    assert read("read_committed") == ["c1", "c2", "c3"]
    assert read("read_uncommitted") == ["a1", "a2", "a3", "c1", "c2", "c3"]  # the Java client's default


def _native_threads() -> int:
    import os

    return len(os.listdir(f"/proc/{os.getpid()}/task"))


def test_failed_and_cancelled_jobs_release_their_consumers(kafka_broker):
    """librdkafka runs native threads per consumer: after a job fails on a bad record or is
    cancelled, this process has no more threads than before it (every consumer was closed)."""
    import gc

    servers = kafka_broker.bootstrap_servers
    topic = new_topic(servers, 2)
    produce(servers, topic, [(i % 2, None, b"1" if i < 50 else b"x", None) for i in range(60)])

    def stream(deserializer, bounded=True):
        builder = (
            KafkaSource.builder()
            .set_bootstrap_servers(servers)
            .set_topics(topic)
            .set_value_only_deserializer(deserializer)
        )
        if bounded:
            builder.set_bounded(KafkaOffsetsInitializer.latest())
        return make_env("local", 2).from_source(builder.build(), WatermarkStrategy.no_watermarks(), "k")

    gc.collect()
    before = _native_threads()
    with pytest.raises(Exception, match="cannot read the record"):
        list(stream(_Strict()).execute_and_collect())
    records = stream(SimpleStringSchema(), bounded=False).execute_and_collect()
    assert next(records) in ("1", "x")
    records.close()
    gc.collect()
    deadline = time.monotonic() + 30
    while _native_threads() > before and time.monotonic() < deadline:
        time.sleep(0.05)  # threads end a moment after their close; polled with a deadline
    assert _native_threads() <= before
