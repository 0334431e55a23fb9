"""The KafkaSource's split offsets in checkpoints, proven end to end: a keyed rolling count from a
4-partition topic into the exactly-once FileSink survives SIGKILLed TaskExecutors on Ray, and a
stop-with-savepoint at p=2 resumed at p=3 (splits shared out again) counts every record once.
The reference is computed from the records the test produced (acknowledged by the broker)."""

from __future__ import annotations

from collections import Counter

import pytest

from raylink.api import Encoder, FileSink, OutputFileConfig, RollingPolicy, WatermarkStrategy
from raylink.api.connectors.kafka import KafkaOffsetsInitializer, KafkaSource
from raylink.api.serialization import SimpleStringSchema
from raylink.bench.failover import committed_lines
from raylink.tests.kafka_util import new_topic, produce
from raylink.tests.test_runtime_checkpointing import Paced, checkpointing_env
from raylink.tests.test_runtime_exactly_once_sinks import kill_task_executors_while_running
from raylink.tests.test_runtime_savepoints import stop_after_a_checkpoint

KEYS = 7


def _topic_with_numbers(servers: str, n: int) -> tuple:
    topic = new_topic(servers, 4)
    # 1..n: Paced fails at its fail_at unless that is 0
    acked = produce(servers, topic, [(i % 4, None, str(i).encode(), None) for i in range(1, n + 1)])
    return topic, [int(v) for v in acked.values()]


def _reference(values) -> Counter:
    """Every rolling count a keyed count emits when each value is counted once."""
    per_key = Counter(v % KEYS for v in values)
    return Counter(f"{k},{c}" for k, total in per_key.items() for c in range(1, total + 1))


class FailAfterACheckpoint(Paced):
    """Paced; on the first attempt a subtask fails at its first record after a checkpoint completed
    (so the restore has split offsets to go back to)."""

    def open(self, runtime_context) -> None:
        super().open(runtime_context)
        self.checkpointed = False

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        self.checkpointed = True

    def map(self, value):
        if self.attempt == 0 and self.checkpointed:
            raise RuntimeError(f"injected failure at record {value}")
        return super().map(value)


def _build(env, servers: str, topic: str, out, fail: bool = False) -> None:
    source = (
        KafkaSource.builder()
        .set_bootstrap_servers(servers)
        .set_topics(topic)
        .set_group_id("count-" + topic)
        .set_value_only_deserializer(SimpleStringSchema())
        .set_bounded(KafkaOffsetsInitializer.latest())
        .build()
    )
    sink = (
        FileSink.for_row_format(str(out), Encoder.simple_string_encoder())
        .with_output_file_config(OutputFileConfig.builder().with_part_prefix("part").build())
        .with_rolling_policy(RollingPolicy.on_checkpoint_rolling_policy())
        .build()
    )
    (
        env.from_source(source, WatermarkStrategy.no_watermarks(), "kafka")
        .uid("kafka")
        .map(int)
        .uid("parse")
        .map(FailAfterACheckpoint() if fail else Paced())
        .uid("paced")
        .map(lambda v: (v % KEYS, 1))
        .uid("pairs")
        .key_by(lambda kv: kv[0])
        .reduce(lambda a, b: (a[0], a[1] + b[1]))
        .uid("count")
        .map(lambda kv: f"{kv[0]},{kv[1]}")
        .uid("format")
        .sink_to(sink)
        .uid("files")
    )


@pytest.mark.timeout(300)
def test_a_failing_function_restarts_the_kafka_source_at_its_checkpointed_offsets(kafka_broker, tmp_path):
    servers = kafka_broker.bootstrap_servers
    topic, values = _topic_with_numbers(servers, 12_000)
    env = checkpointing_env("local", 2, tmp_path)
    out = tmp_path / "out"
    _build(env, servers, topic, out, fail=True)
    client = env.execute_async()
    assert client.wait(200), "the job did not finish"
    assert client.get_job_status() == "FINISHED", client.get_job_status()
    # it failed once, after a checkpoint had committed part files: a restart from the topic's start
    # would count those records twice, so equal output proves the restore went back to the splits' offsets
    assert client.get_checkpoint_stats()["numRestarts"] >= 1  # both subtasks may fail in the same failover
    assert committed_lines(out) == _reference(values)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_keyed_count_from_kafka_survives_sigkilled_task_executors_exactly_once(ray_session, kafka_broker, tmp_path):
    servers = kafka_broker.bootstrap_servers
    topic, values = _topic_with_numbers(servers, 40_000)  # ~10 s per subtask: room for three kills
    env = checkpointing_env("ray", 2, tmp_path)
    out = tmp_path / "out"
    _build(env, servers, topic, out)
    client = env.execute_async()
    kills = kill_task_executors_while_running(client)
    assert client.wait(300), "the job did not finish"
    assert client.get_job_status() == "FINISHED", client.get_job_status()
    failures = [f"{r.task_name}: {r.error!r}"[:500] for r in getattr(client, "exception_history", [])]
    assert client.get_checkpoint_stats()["numRestarts"] == kills >= 2, failures
    assert committed_lines(out) == _reference(values)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_stop_with_savepoint_at_p2_and_resume_at_p3_counts_every_record_once(ray_session, kafka_broker, tmp_path):
    servers = kafka_broker.bootstrap_servers
    topic, values = _topic_with_numbers(servers, 16_000)
    first, second = tmp_path / "out-1", tmp_path / "out-2"
    env = checkpointing_env("ray", 2, tmp_path)
    _build(env, servers, topic, first)
    client = env.execute_async()
    path = stop_after_a_checkpoint(client, tmp_path / "savepoints")
    stopped = committed_lines(first)
    assert 0 < sum(stopped.values()) < len(values), "the first run was not stopped part-way"

    env = checkpointing_env("ray", 3, tmp_path, **{"execution.savepoint.path": path})
    _build(env, servers, topic, second)
    restored = env.execute_async()
    assert restored.wait(300), "the restored job did not finish"
    assert restored.get_job_status() == "FINISHED", restored.get_job_status()
    assert restored.get_checkpoint_stats()["lastRestoredCheckpointId"] is not None
    assert stopped + committed_lines(second) == _reference(values), "counts lost or repeated across the savepoint"


@pytest.mark.timeout(300)
def test_stop_with_savepoint_at_p3_and_resume_at_p2_on_the_local_target_counts_every_record_once(
    kafka_broker, tmp_path
):
    """The splits of three old subtasks pooled and shared out to two (in-process, quick)."""
    servers = kafka_broker.bootstrap_servers
    topic, values = _topic_with_numbers(servers, 12_000)
    first, second = tmp_path / "out-1", tmp_path / "out-2"
    env = checkpointing_env("local", 3, tmp_path)
    _build(env, servers, topic, first)
    client = env.execute_async()
    path = stop_after_a_checkpoint(client, tmp_path / "savepoints")
    stopped = committed_lines(first)
    assert 0 < sum(stopped.values()) < len(values), "the first run was not stopped part-way"

    env = checkpointing_env("local", 2, tmp_path, **{"execution.savepoint.path": path})
    _build(env, servers, topic, second)
    restored = env.execute_async()
    assert restored.wait(200), "the restored job did not finish"
    assert restored.get_job_status() == "FINISHED", restored.get_job_status()
    assert stopped + committed_lines(second) == _reference(values), "counts lost or repeated across the savepoint"
