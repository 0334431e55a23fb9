"""The unbounded ``KafkaSource`` while a job runs: offsets committed to the group when checkpoints
complete, and split-level watermarks -- per partition, combined by minimum, an idle partition
released by ``with_idleness`` and holding event time back without it."""

from __future__ import annotations

import queue
import threading
import time

import pytest

from raylink.api import Duration, Time, WatermarkStrategy
from raylink.api.connectors.kafka import KafkaOffsetsInitializer, KafkaSource
from raylink.api.functions import MapFunction, SinkFunction
from raylink.api.serialization import SimpleStringSchema
from raylink.api.window import TumblingEventTimeWindows
from raylink.tests.kafka_util import committed, new_topic, produce
from raylink.tests.runtime_jobs import make_env, wait_for

pytestmark = pytest.mark.timeout(180)


def _unbounded(servers, topic, group=None, **properties):
    builder = (
        KafkaSource.builder()
        .set_bootstrap_servers(servers)
        .set_topics(topic)
        .set_value_only_deserializer(SimpleStringSchema())
        .set_properties(properties)
    )
    if group:
        builder.set_group_id(group)
    return builder.build()


class _Drain:
    """Pulls a running job's collected records on a thread into a queue (so a test can wait
    for the next one with a timeout)."""

    def __init__(self, stream):
        self.stream = stream
        self.records: "queue.Queue" = queue.Queue()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        try:
            for record in self.stream:
                self.records.put(record)
        except Exception as exc:  # the job failed: the test sees it
            self.records.put(exc)

    def next(self, timeout):
        item = self.records.get(timeout=timeout)
        if isinstance(item, Exception):
            raise item
        return item

    def close(self):
        self.stream.close()
        self.thread.join(30)
        assert not self.thread.is_alive()


@pytest.mark.parametrize("commit", [True, False])
def test_offsets_of_a_completed_checkpoint_are_committed_to_the_group(kafka_broker, tmp_path, commit):
    servers = kafka_broker.bootstrap_servers
    topic = new_topic(servers, 2)
    acked = produce(servers, topic, [(i % 2, None, f"m{i}".encode(), None) for i in range(30)])
    ends = {p: 1 + max(o for (q, o) in acked if q == p) for p in (0, 1)}
    group = "commit-" + topic
    env = make_env(
        "local",
        2,
        {"execution.checkpointing.interval": "200 ms", "execution.checkpointing.dir": str(tmp_path / "cp")},
    )
    source = _unbounded(servers, topic, group, **{"commit.offsets.on.checkpoint": str(commit).lower()})
    drain = _Drain(env.from_source(source, WatermarkStrategy.no_watermarks(), "k").execute_and_collect())
    try:
        got = sorted(drain.next(60) for _ in range(30))
        assert got == sorted(v.decode() for v in acked.values())
        deadline = time.monotonic() + (60 if commit else 3)  # without commits: three seconds of checkpoints
        offsets = committed(servers, group, topic, 2)
        while offsets != ends and time.monotonic() < deadline:
            time.sleep(0.1)  # polling the group's offsets with a deadline
            offsets = committed(servers, group, topic, 2)
        assert offsets == (ends if commit else {0: -1001, 1: -1001})
    finally:
        drain.close()


def _windowed_counts(servers, topic, strategy):
    env = make_env("local", 1)
    return (
        env.from_source(_unbounded(servers, topic), strategy, "k")
        .map(lambda v: (v.split(":")[0], 1))
        .key_by(lambda kv: kv[0])
        .window(TumblingEventTimeWindows.of(Time.seconds(1)))
        .reduce(lambda a, b: (a[0], a[1] + b[1]))
        .execute_and_collect()
    )


@pytest.fixture
def one_idle_partition(kafka_broker):
    """Partition 0: ten records in event second 0 and one in second 5; partition 1: none. (A
    timestamp of 0 would mean 'now' to the producer.)"""
    servers = kafka_broker.bootstrap_servers
    topic = new_topic(servers, 2)
    produce(
        servers, topic, [(0, None, f"a:{i}".encode(), 1 + i * 100) for i in range(10)] + [(0, None, b"a:late", 5000)]
    )
    return servers, topic


def test_an_idle_partition_does_not_hold_back_the_windows_with_idleness(one_idle_partition):
    servers, topic = one_idle_partition
    strategy = WatermarkStrategy.for_monotonous_timestamps().with_idleness(Duration.of_millis(300))
    drain = _Drain(_windowed_counts(servers, topic, strategy))
    try:
        assert drain.next(60) == ("a", 10)  # the window [0, 1000) fired while the job runs
    finally:
        drain.close()


def test_a_partition_without_records_holds_the_windows_back_until_it_catches_up(one_idle_partition):
    servers, topic = one_idle_partition
    drain = _Drain(_windowed_counts(servers, topic, WatermarkStrategy.for_monotonous_timestamps()))
    try:
        with pytest.raises(queue.Empty):
            drain.next(3)  # partition 1's watermark is still Long.MIN_VALUE: nothing may fire
        produce(servers, topic, [(1, None, b"b:0", 6000)])
        assert drain.next(60) == ("a", 10)  # both partitions past 999 now
    finally:
        drain.close()


class _Slow(MapFunction):
    def map(self, value):
        time.sleep(0.002)  # the workload: a slow operator that back-pressures the source
        return len(value)


class _Discard(SinkFunction):
    def invoke(self, value, context=None):
        pass


def test_under_back_pressure_the_reader_holds_no_more_than_its_prefetch_bound(kafka_broker):
    servers = kafka_broker.bootstrap_servers
    topic = new_topic(servers, 1)
    n, size = 30_000, 1000  # 30 MB in the topic
    produce(servers, topic, [(0, None, b"%09d" % i + b"x" * (size - 9), None) for i in range(n)])
    queued_kib, fetch = 1024, 1 << 20
    source = (
        KafkaSource.builder()
        .set_bootstrap_servers(servers)
        .set_topics(topic)
        .set_value_only_deserializer(SimpleStringSchema())
        .set_properties(
            {
                "queued.max.messages.kbytes": queued_kib,
                "fetch.max.bytes": fetch,
                "max.partition.fetch.bytes": fetch,
                "statistics.interval.ms": 200,
            }
        )
        .build()
    )
    env = make_env("local", 1)
    env.from_source(source, WatermarkStrategy.no_watermarks(), "kafka").map(_Slow()).add_sink(_Discard())
    client = env.execute_async()
    samples = []

    def sample() -> bool:
        for task in client.get_metrics():
            for metrics in task.get("operators", {}).values():
                if "KafkaConsumer.fetchQueueBytes" in metrics:
                    samples.append((metrics["KafkaConsumer.fetchQueueBytes"], metrics["pendingRecords"]))
        return len(samples) >= 20 and any(queued for queued, _ in samples)

    try:
        assert wait_for(lambda: sample() or False, client, timeout=60, interval=0.2), samples
    finally:
        client.cancel()
        assert client.wait(60)
    bound = queued_kib * 1024 + fetch + size  # the queue, one fetch on top, one record's rounding
    assert max(queued for queued, _ in samples) <= bound, samples
    assert max(pending for _, pending in samples[-5:]) > n // 2, samples  # most of the topic still unread


#: opened by the test once it has seen the reader paused (local jobs run their tasks in this process)
_GATE = threading.Event()
_ARRIVED: list = []


class _Gated(MapFunction):
    """A downstream that takes nothing until the test opens the gate: the source's output fills
    up and stays blocked (back pressure)."""

    def map(self, value):
        _GATE.wait(120)
        return value


class _Collect(SinkFunction):
    def invoke(self, value, context=None):
        _ARRIVED.append(value)


def test_under_back_pressure_the_reader_pauses_its_partitions_and_resumes_without_loss(kafka_broker):
    servers = kafka_broker.bootstrap_servers
    topic = new_topic(servers, 2)
    n, size = 20_000, 1000  # 20 MB in the topic, 20x the pre-fetch bound
    values = [b"%09d" % i + b"x" * (size - 9) for i in range(n)]
    produce(servers, topic, [(i % 2, None, v, None) for i, v in enumerate(values)])
    queued_kib, fetch = 1024, 1 << 20
    source = (
        KafkaSource.builder()
        .set_bootstrap_servers(servers)
        .set_topics(topic)
        .set_starting_offsets(KafkaOffsetsInitializer.earliest())
        .set_bounded(KafkaOffsetsInitializer.latest())
        .set_value_only_deserializer(SimpleStringSchema())
        .set_properties(
            {
                "queued.max.messages.kbytes": queued_kib,
                "fetch.max.bytes": fetch,
                "max.partition.fetch.bytes": fetch,
                "statistics.interval.ms": 100,
            }
        )
        .build()
    )
    _GATE.clear()
    _ARRIVED.clear()
    env = make_env("local", 1)
    (
        env.from_source(source, WatermarkStrategy.no_watermarks(), "kafka")
        .map(_Gated())
        .disable_chaining()  # its own task: the source's output buffers fill while it waits
        .add_sink(_Collect())
    )
    client = env.execute_async()
    samples = []

    def paused() -> bool:
        for task in client.get_metrics():
            for metrics in task.get("operators", {}).values():
                if "KafkaSourceReader.paused" in metrics:
                    samples.append(
                        (
                            metrics["KafkaSourceReader.paused"],
                            metrics["KafkaSourceReader.pauses"],
                            metrics["KafkaConsumer.fetchQueueBytes"],
                            metrics["pendingRecords"],
                        )
                    )
        return bool(samples) and samples[-1][0] == 1 and samples[-1][1] >= 1

    try:
        # the output stays blocked: the reader pauses its partitions (librdkafka then drops what
        # it pre-fetched and fetches nothing more) while most of the topic still waits in Kafka
        assert wait_for(paused, client, timeout=60, interval=0.1), samples[-10:]
        assert samples[-1][3] > n // 2, samples[-1]
        # before the pause, at most librdkafka's pre-fetch bound per partition was held
        bound = 2 * (queued_kib * 1024 + fetch + size)
        assert max(queued for _, _, queued, _ in samples) <= bound, samples
    finally:
        _GATE.set()
    assert client.wait(120), "the job did not end after the downstream went on"
    client.get_job_execution_result(10)  # raises if the job failed
    # resumed: every record arrived, each exactly once
    assert sorted(_ARRIVED) == sorted(v.decode() for v in values)
