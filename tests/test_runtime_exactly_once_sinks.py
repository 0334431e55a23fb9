"""Exactly-once on every sink path, proven by killing real processes.

* The Spark sink with checkpointing is a two-phase-commit sink (Flink's Sink V2 writer +
  committer): TaskExecutor worker processes are SIGKILLed three times while a job writes
  to a Parquet path (source: ``from_sequence``) and to a Parquet table (source:
  ``from_spark``); Spark reads back every expected row exactly once.
* Sinks end as in FLIP-147: a failure injected after one sink subtask has ended its input
  (and committed through its final checkpoint) ends in the same committed output as a
  failure-free run, for the FileSink and the Spark sink.
* The FileSink with a bulk format (Parquet, Avro) under the same SIGKILLs: every record once.
"""

from __future__ import annotations

import os
import signal as os_signal
from collections import Counter

import pytest

from raylink.api import Encoder, FileSink, OutputFileConfig
from raylink.api.functions import MapFunction, SourceFunction
from raylink.bench.failover import committed_lines
from raylink.tests.runtime_jobs import wait_for
from raylink.tests.test_runtime_checkpointing import Paced, checkpointing_env, executor_pids

N = 24_000


def kill_task_executors_while_running(client, kills: int = 3) -> int:
    """SIGKILL a TaskExecutor process after each of ``kills`` newly completed checkpoints
    (each time the job restores); returns how many were killed."""
    killed = 0
    for round_ in range(kills):
        completed_before = client.get_checkpoint_stats()["numberOfCompletedCheckpoints"]
        wait_for(
            lambda: (
                client.get_job_status() == "RUNNING"
                and client.get_checkpoint_stats()["numberOfCompletedCheckpoints"] > completed_before
            ),
            client,
            timeout=120,
        )
        if client.wait(0):
            break
        pids = executor_pids(client)
        os.kill(pids[round_ % len(pids)], os_signal.SIGKILL)
        killed += 1
        assert wait_for(
            lambda: client.get_checkpoint_stats()["numRestarts"] >= killed or client.wait(0), client, timeout=120
        )
    return killed


def spark_values(spark, path: str = None, table: str = None) -> Counter:
    df = spark.read.parquet(path) if path is not None else spark.table(table)
    return Counter(row[0] for row in df.collect())


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_spark_sink_to_a_path_survives_sigkills_exactly_once(spark, tmp_path):
    env = checkpointing_env("ray", 2, tmp_path)
    out = str(tmp_path / "out")
    env.from_sequence(0, N - 1).map(Paced(-1)).sink_to_spark(path=out, schema="v bigint", mode="append")
    client = env.execute_async()
    kills = kill_task_executors_while_running(client)
    assert client.wait(300), "the job did not finish"
    assert client.get_job_status() == "FINISHED", client.get_job_status()
    assert client.get_checkpoint_stats()["numRestarts"] == kills >= 2
    assert spark_values(spark, path=out) == Counter(range(N))
    assert not os.path.exists(tmp_path / ".raylink-staging") or not os.listdir(tmp_path / ".raylink-staging")


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_spark_dataframe_into_a_table_survives_sigkills_exactly_once(spark, tmp_path):
    """``from_spark`` (its read position in the checkpoints) into ``sink_to_spark(table=...)``."""
    env = checkpointing_env("ray", 2, tmp_path)
    df = spark.range(0, N, 1, 6).selectExpr("id AS v")
    table = "exactly_once_kills"
    spark.sql(f"DROP TABLE IF EXISTS {table}")
    env.from_spark(df).map(PacedRow()).sink_to_spark(table=table, schema="v bigint", mode="overwrite")
    client = env.execute_async()
    kills = kill_task_executors_while_running(client)
    assert client.wait(300), "the job did not finish"
    assert client.get_job_status() == "FINISHED", client.get_job_status()
    assert client.get_checkpoint_stats()["numRestarts"] == kills >= 2
    assert spark_values(spark, table=table) == Counter(range(N))


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_continuous_spark_table_source_survives_sigkills_exactly_once(spark, tmp_path):
    """``from_spark_table`` (files seen and row reached in its checkpoints) never ends: the
    job runs until Spark sees every row of the source folder committed, then is cancelled."""
    source = str(tmp_path / "source")
    for start in range(0, N, N // 4):  # four Parquet writes, several files
        spark.range(start, start + N // 4, 1, 2).selectExpr("id AS v").write.mode("append").parquet(source)
    env = checkpointing_env("ray", 2, tmp_path)
    out = str(tmp_path / "out")
    env.from_spark_table(source, poll_interval=0.2).map(PacedRow()).sink_to_spark(path=out, schema="v bigint")
    client = env.execute_async()
    try:
        kills = kill_task_executors_while_running(client)

        def committed_rows() -> int:
            return spark.read.parquet(out).count() if os.path.isdir(out) else 0

        assert wait_for(lambda: committed_rows() >= N, client, timeout=240, interval=0.5), committed_rows()
    finally:
        client.cancel()
        assert client.wait(60)
    assert client.get_checkpoint_stats()["numRestarts"] == kills >= 2
    assert spark_values(spark, path=out) == Counter(range(N))


class PacedRow(MapFunction):
    """``Paced`` for Spark rows (a tuple of one value)."""

    def __init__(self) -> None:
        self.paced = Paced(-1)

    def map(self, row):
        return self.paced.map(row[0])


# -- failover after one sink subtask ended its input (FLIP-147) ------------------------------------------
SHORT, LONG = 400, 6000
FAIL_AFTER = SHORT + 1000  # subtask 1's records; it fails at the first one after subtask 0 committed


class Uneven(SourceFunction):
    """Subtask 0 emits 0..SHORT-1, subtask 1 emits SHORT..SHORT+LONG-1 (checkpointed position)."""

    def __init__(self) -> None:
        self.next = 0
        self.running = True

    def open(self, runtime_context) -> None:
        self.subtask = runtime_context.get_index_of_this_subtask()

    def initialize_state(self, context):
        from raylink.api.state import ListStateDescriptor

        self.state = context.get_operator_state_store().get_list_state(ListStateDescriptor("next"))
        restored = list(self.state.get())
        if restored:
            self.next = restored[0]

    def snapshot_state(self, context):
        self.state.update([self.next])

    def run(self, ctx):
        first, count = (0, SHORT) if self.subtask == 0 else (SHORT, LONG)
        while self.running and self.next < count:
            with ctx.get_checkpoint_lock():
                ctx.collect(first + self.next)
                self.next += 1

    def cancel(self):
        self.running = False


class FailAfterSubtaskZeroCommitted(MapFunction):
    """Paced; on subtask 1's first attempt it fails once at the first record after
    FAIL_AFTER for which sink subtask 0 has committed its output (so it ended its input and
    its final checkpoint completed). Never blocks: subtask 0 needs this task's
    acknowledgement for that checkpoint."""

    def __init__(self, committed_marker) -> None:
        self.committed_marker = committed_marker
        self.paced = Paced(-1)

    def open(self, runtime_context) -> None:
        self.attempt = runtime_context.get_attempt_number()

    def map(self, value):
        self.paced.map(value)
        if value >= FAIL_AFTER and self.attempt == 0 and self.committed_marker():
            raise RuntimeError(f"injected failure at {value}, after sink subtask 0 ended")
        return value


def _file_sink_committed(out: str):
    def committed() -> bool:  # in any bucket folder
        return any(name.startswith("part-0-") for _dir, _subdirs, names in os.walk(out) for name in names)

    return committed


def _spark_sink_committed(out: str):
    def committed() -> bool:
        return os.path.isdir(out) and any(name.startswith("part-00000-") for name in os.listdir(out))

    return committed


@pytest.mark.timeout(240)
def test_file_sink_failover_after_one_subtask_ended_is_exactly_once(target, tmp_path):
    env = checkpointing_env(target, 2, tmp_path)
    out = str(tmp_path / "out")
    sink = (
        FileSink.for_row_format(out, Encoder.simple_string_encoder())
        .with_output_file_config(OutputFileConfig.builder().with_part_prefix("part").build())
        .build()
    )
    env.add_source(Uneven(), "uneven").map(FailAfterSubtaskZeroCommitted(_file_sink_committed(out))).map(str).sink_to(
        sink
    )
    client = env.execute_async()
    assert client.wait(200), "the job did not finish"
    assert client.get_job_status() == "FINISHED", client.get_job_status()
    assert client.get_checkpoint_stats()["numRestarts"] == 1
    assert committed_lines(tmp_path / "out") == Counter(str(v) for v in range(SHORT + LONG))


@pytest.mark.timeout(300)
def test_spark_sink_failover_after_one_subtask_ended_is_exactly_once(spark, tmp_path):
    env = checkpointing_env("ray", 2, tmp_path)
    out = str(tmp_path / "out")
    env.add_source(Uneven(), "uneven").map(FailAfterSubtaskZeroCommitted(_spark_sink_committed(out))).sink_to_spark(
        path=out, schema="v bigint"
    )
    client = env.execute_async()
    assert client.wait(240), "the job did not finish"
    assert client.get_job_status() == "FINISHED", client.get_job_status()
    assert client.get_checkpoint_stats()["numRestarts"] == 1
    assert spark_values(spark, path=out) == Counter(range(SHORT + LONG))


@pytest.mark.timeout(240)
def test_spark_result_dataframe_survives_a_failover_exactly_once(spark, tmp_path):
    """No target: the blocks are in the checkpoints, so the result DataFrame holds each row once."""
    from raylink.connectors.spark import get_spark_dataframe

    env = checkpointing_env("ray", 2, tmp_path)
    env.add_source(Uneven(), "uneven").map(FailAfterSubtaskZeroCommitted(lambda: True)).sink_to_spark(schema="v bigint")
    result = env.execute()
    df = get_spark_dataframe(result)
    assert Counter(row[0] for row in df.collect()) == Counter(range(SHORT + LONG))


class SlowThenFails(MapFunction):
    """On its first attempt, at record ``at``: slow for a second (checkpoint triggers queue up
    in the task's mailbox meanwhile), then it fails."""

    def __init__(self, at: int) -> None:
        self.at = at

    def open(self, runtime_context) -> None:
        self.attempt = runtime_context.get_attempt_number()

    def map(self, value):
        if value == self.at and self.attempt == 0:
            import time

            time.sleep(1.0)  # the slow call is the workload under test
            raise RuntimeError(f"injected failure at {value}")
        return value


@pytest.mark.timeout(120)
def test_a_legacy_source_whose_chain_failed_takes_no_checkpoint_past_the_lost_records(target, tmp_path):
    """A SourceFunction's records fail inside its chain on the source thread: a checkpoint
    triggered before the task saw the failure must not be taken (it would hold the source's
    position after records that never reached the sink)."""
    env = checkpointing_env(target, 1, tmp_path)
    out = str(tmp_path / "out")
    sink = FileSink.for_row_format(out, Encoder.simple_string_encoder()).build()
    env.add_source(Uneven(), "uneven").map(SlowThenFails(SHORT // 2)).map(str).sink_to(sink)
    client = env.execute_async()
    assert client.wait(100), "the job did not finish"
    assert client.get_job_status() == "FINISHED", client.get_job_status()
    assert client.get_checkpoint_stats()["numRestarts"] == 1
    assert committed_lines(tmp_path / "out") == Counter(str(v) for v in range(SHORT))


# -- the FileSink with a bulk format (Parquet, Avro) -------------------------------------------------------
def _bulk_file_sink_job_survives_sigkills(tmp_path, writer_factory, suffix: str, record, output_type=None) -> str:
    """A job of N records into ``FileSink.for_bulk_format(out, writer_factory)`` (part files roll
    at every checkpoint) on Ray, whose TaskExecutors are SIGKILLed three times; returns ``out``
    once the job FINISHED after >= 2 restores."""
    from raylink.api import BucketAssigner

    out = str(tmp_path / "out")
    sink = (
        FileSink.for_bulk_format(out, writer_factory)
        .with_bucket_assigner(BucketAssigner.base_path_bucket_assigner())
        .with_output_file_config(OutputFileConfig.builder().with_part_suffix(suffix).build())
        .build()
    )
    env = checkpointing_env("ray", 2, tmp_path)
    env.from_sequence(0, N - 1).map(Paced(-1)).map(record, output_type=output_type).sink_to(sink)
    client = env.execute_async()
    kills = kill_task_executors_while_running(client)
    assert client.wait(300), "the job did not finish"
    assert client.get_job_status() == "FINISHED", client.get_job_status()
    assert client.get_checkpoint_stats()["numRestarts"] == kills >= 2
    return out


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_parquet_file_sink_survives_sigkills_exactly_once_and_spark_reads_it(spark, tmp_path):
    """``FileSink.for_bulk_format(path, ParquetBulkWriters.for_row_type(...))``: part files roll
    at every checkpoint; three TaskExecutor SIGKILLs; Spark reads every row once, with the
    declared schema."""
    from raylink.api import Types
    from raylink.api.formats.parquet import ParquetBulkWriters

    row_type = Types.ROW_NAMED(["v", "name"], [Types.LONG(), Types.STRING()])
    out = _bulk_file_sink_job_survives_sigkills(
        tmp_path, ParquetBulkWriters.for_row_type(row_type), ".parquet", lambda v: (v, f"n{v}")
    )
    df = spark.read.parquet(out)
    assert [(f.name, f.dataType.simpleString()) for f in df.schema.fields] == [("v", "bigint"), ("name", "string")]
    rows = Counter((r["v"], r["name"]) for r in df.collect())
    assert rows == Counter((v, f"n{v}") for v in range(N))


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_an_avro_file_sink_survives_sigkills_exactly_once(ray_session, tmp_path):
    """``FileSink.for_bulk_format(path, AvroBulkWriters.for_generic_record(schema))`` under the
    same three SIGKILLs: the committed Avro files hold every record once. They are read back with
    fastavro: Spark reads Avro only through the spark-avro package, which comes from Maven, and
    this machine reaches no Maven repository."""
    import fastavro

    from raylink.api.formats.avro import AvroBulkWriters, AvroSchema, GenericRecordAvroTypeInfo

    schema = AvroSchema.parse_string(
        '{"type": "record", "name": "Numbered", "fields": [{"name": "v", "type": "long"}, '
        '{"name": "name", "type": "string"}]}'
    )
    out = _bulk_file_sink_job_survives_sigkills(
        tmp_path,
        AvroBulkWriters.for_generic_record(schema),
        ".avro",
        lambda v: {"v": v, "name": f"n{v}"},
        GenericRecordAvroTypeInfo(schema),
    )
    records: Counter = Counter()
    for name in os.listdir(out):
        if not name.startswith((".", "_")):
            with open(os.path.join(out, name), "rb") as f:
                records.update((r["v"], r["name"]) for r in fastavro.reader(f))
    assert records == Counter((v, f"n{v}") for v in range(N))
