"""Delta Lake and Iceberg tables through RayDP's Spark: ``sink_to_spark(format="delta" |
"iceberg")`` commits each checkpoint once (Delta's ``txnAppId``/``txnVersion``, Iceberg's
snapshot summary), ``from_spark_table(format=...)`` reads a snapshot (time travel), and bad
input fails before any row is written. Expected rows come from the input itself; Spark reads
the tables back. One Spark session for the whole test session (``spark`` in conftest.py)."""

from __future__ import annotations

import os
import sys
import threading
import uuid
from collections import Counter

import cloudpickle
import pytest
import ray

from raylink.api import StreamExecutionEnvironment
from raylink.api.functions import SourceFunction
from raylink.connectors.spark.sink import SparkSink
from raylink.core.checkpointing import CheckpointedFunction, CheckpointListener
from raylink.tests.runtime_jobs import make_env
from raylink.tests.test_runtime_checkpointing import Paced, checkpointing_env
from raylink.tests.test_runtime_exactly_once_sinks import kill_task_executors_while_running

pytestmark = pytest.mark.timeout(300)

for _pickler in (cloudpickle, ray.cloudpickle):
    _pickler.register_pickle_by_value(sys.modules[__name__])

N = 3_000
SCHEMA = "id bigint, name string"


def rows(n: int = N):
    return [(i, f"n{i % 7}") for i in range(n)]


def env_with(checkpointing: bool, tmp_path, parallelism: int = 2) -> StreamExecutionEnvironment:
    conf = {"execution.checkpointing.interval": "400 ms", "execution.checkpointing.dir": str(tmp_path / "chk")}
    return make_env("ray", parallelism, conf if checkpointing else None)


def target_args(kind: str, tmp_path) -> dict:
    name = f"t_{uuid.uuid4().hex[:8]}"
    if kind == "delta-path":
        return {"path": str(tmp_path / name), "format": "delta"}
    if kind == "delta-table":
        return {"table": name, "format": "delta"}
    return {"table": f"db.{name}", "format": "iceberg"}


def read_back(spark, sink: SparkSink) -> Counter:
    if sink.target.format == "delta":
        df = spark.read.format("delta").load(sink.location) if sink.path else spark.table(sink.table)
    else:
        df = spark.table(sink.target.name)
    return Counter(tuple(r) for r in df.collect())


def commits_per_checkpoint(spark, sink: SparkSink) -> Counter:
    """How many table commits each checkpoint id made (read from the table's own history)."""
    if sink.target.format == "iceberg":
        return Counter(
            s["summary"]["flink.max-committed-checkpoint-id"]
            for s in sink.target.history(spark)
            if s["summary"].get("flink.job-id") == sink.sink_id
        )
    log = spark.read.json(os.path.join(sink.target.location(spark), "_delta_log", "*.json"))
    if "txn" not in log.columns:
        return Counter()
    return Counter(r["version"] for r in log.where(f"txn.appId = '{sink.sink_id}'").select("txn.version").collect())


class HalvesAcrossACheckpoint(SourceFunction, CheckpointedFunction, CheckpointListener):
    """``changes`` in two halves with a completed checkpoint between them: the first half is
    emitted, then the source waits (60 s at most) until a checkpoint taken after it completes,
    then emits the rest. So the sink commits at least twice, whatever the machine's speed."""

    def __init__(self, changes: list) -> None:
        self.changes = changes
        self.emitted = 0
        self.after_first_half = None  # the first checkpoint taken after the first half
        self.completed = None

    def initialize_state(self, context) -> None:
        self.completed = threading.Event()

    def snapshot_state(self, context) -> None:
        if self.after_first_half is None and self.emitted == len(self.changes) // 2:
            self.after_first_half = context.get_checkpoint_id()

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        if self.after_first_half is not None and checkpoint_id >= self.after_first_half:
            self.completed.set()

    def run(self, ctx) -> None:
        half = len(self.changes) // 2
        for bounds in ((0, half), (half, len(self.changes))):
            with ctx.get_checkpoint_lock():
                for change in self.changes[bounds[0] : bounds[1]]:
                    ctx.collect(change)
                self.emitted = bounds[1]
            if bounds[0] == 0 and not self.completed.wait(60):
                raise RuntimeError("no checkpoint completed within 60 s after the first half")

    def cancel(self) -> None:
        self.completed.set()


@pytest.mark.parametrize("kind", ["delta-path", "delta-table", "iceberg"])
def test_bounded_job_with_checkpoints_commits_each_checkpoint_once(spark, tmp_path, kind):
    env = env_with(True, tmp_path)
    sink = SparkSink(schema="v bigint", **target_args(kind, tmp_path))
    halves = env.add_source(HalvesAcrossACheckpoint(list(range(N))), "halves").set_parallelism(1)
    halves.rebalance().sink_to(sink)  # at least two checkpoints commit
    env.execute()
    expected = Counter((v,) for v in range(N))
    assert read_back(spark, sink) == expected
    per_checkpoint = commits_per_checkpoint(spark, sink)
    assert len(per_checkpoint) >= 2 and max(per_checkpoint.values()) == 1, per_checkpoint
    # the committer replayed with the last checkpoint's id (a restore's replay): nothing added
    last = max(int(c) for c in per_checkpoint)
    replay = spark.createDataFrame([(v,) for v in range(5)], "v bigint")
    assert sink.target.commit(spark, replay, "append", sink.sink_id, last) == "duplicate"
    assert read_back(spark, sink) == expected
    assert commits_per_checkpoint(spark, sink) == per_checkpoint


@pytest.mark.parametrize("kind", ["delta-path", "iceberg"])
def test_bounded_job_without_checkpoints_makes_one_commit(spark, tmp_path, kind):
    env = env_with(False, tmp_path)
    sink = SparkSink(schema=SCHEMA, mode="overwrite", **target_args(kind, tmp_path))
    env.from_collection(rows()).sink_to(sink)
    env.execute()
    assert read_back(spark, sink) == Counter(rows())
    assert len(sink.target.history(spark)) == 1


def test_time_travel_reads_a_delta_version_and_an_iceberg_snapshot(spark, tmp_path):
    path = str(tmp_path / "tt_delta")
    first, second = rows(10), [(i, "later") for i in range(10, 15)]
    spark.createDataFrame(first, SCHEMA).write.format("delta").save(path)
    spark.createDataFrame(second, SCHEMA).write.format("delta").mode("append").save(path)
    iceberg = f"iceberg.db.tt_{uuid.uuid4().hex[:8]}"
    spark.sql("CREATE NAMESPACE IF NOT EXISTS iceberg.db")
    spark.createDataFrame(first, SCHEMA).writeTo(iceberg).create()
    snapshot = spark.sql(f"SELECT snapshot_id FROM {iceberg}.snapshots").collect()[0][0]
    spark.createDataFrame(second, SCHEMA).writeTo(iceberg).append()

    def collect(**kwargs) -> Counter:
        env = env_with(False, tmp_path, 1)
        out = SparkSink(schema=SCHEMA)
        env.from_spark_table(**kwargs).sink_to(out)
        result = env.execute()
        return Counter(tuple(r) for r in out.get_dataframe(result).collect())

    assert collect(path_or_table=path, format="delta", version_as_of=0) == Counter(first)
    assert collect(path_or_table=path, format="delta") == Counter(first + second)
    assert collect(path_or_table=iceberg, format="iceberg", snapshot_id=snapshot) == Counter(first)
    assert collect(path_or_table=iceberg, format="iceberg") == Counter(first + second)


def test_bad_input_fails_naming_what_is_wrong_before_any_row_is_written(spark, tmp_path):
    env = env_with(True, tmp_path)
    plain = tmp_path / "plain"
    spark.createDataFrame(rows(3), SCHEMA).write.parquet(str(plain))
    before = sorted(os.listdir(plain))
    with pytest.raises(ValueError, match=r"plain is not a Delta table \(the folder exists and has no _delta_log\)"):
        env.from_collection(rows()).sink_to_spark(path=str(plain), schema=SCHEMA, format="delta")
    assert sorted(os.listdir(plain)) == before
    table = f"typed_{uuid.uuid4().hex[:8]}"
    spark.sql(f"CREATE TABLE {table} (id string, name string) USING delta")
    with pytest.raises(ValueError, match=rf"column 'id' of Delta table {table} is string, the stream's is bigint"):
        env.from_collection(rows()).sink_to_spark(table=table, schema=SCHEMA, format="delta")
    assert spark.table(table).count() == 0
    with pytest.raises(ValueError, match=r"Delta table no_such_table_45 does not exist"):
        env.from_spark_table("no_such_table_45", format="delta")
    with pytest.raises(ValueError, match=r"Iceberg table iceberg.db.no_such_table_45 does not exist"):
        env.from_spark_table("db.no_such_table_45", format="iceberg")
    with pytest.raises(ValueError, match=r"plain is not a Delta table"):
        env.from_spark_table(str(plain), format="delta")


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.parametrize("kind", ["delta-path", "delta-table", "iceberg"])
def test_delta_and_iceberg_sinks_survive_sigkills_exactly_once(spark, tmp_path, kind):
    total = 16_000
    env = checkpointing_env("ray", 2, tmp_path, **{"execution.checkpointing.interval": "1 s"})
    sink = SparkSink(schema="v bigint", **target_args(kind, tmp_path))
    env.from_sequence(0, total - 1).map(Paced(-1)).sink_to(sink)
    client = env.execute_async()
    kills = kill_task_executors_while_running(client)
    assert client.wait(600), "the job did not finish"
    assert client.get_job_status() == "FINISHED", client.get_job_status()
    failures = [f"{r.task_name}: {r.error!r}"[:400] for r in getattr(client, "exception_history", [])]
    assert client.get_checkpoint_stats()["numRestarts"] == kills >= 3, failures
    assert read_back(spark, sink) == Counter((v,) for v in range(total))
    per_checkpoint = commits_per_checkpoint(spark, sink)
    assert per_checkpoint and max(per_checkpoint.values()) == 1, per_checkpoint


@pytest.mark.parametrize("kind", ["delta-path", "iceberg"])
def test_a_part_handed_in_before_a_restore_is_committed_once_with_its_checkpoint(spark, tmp_path, kind):
    """The driver's committer alone: subtask 0 hands in checkpoint 1's files, then is restored
    from a later checkpoint whose state no longer lists them (it deletes its stale staged files);
    subtask 1's part completes checkpoint 1: ONE commit holding both parts' rows, and parts
    handed in again (a replay after a restore) add nothing."""
    import pyarrow as pa

    from raylink.connectors.spark.files import PartFileWriter

    sink = SparkSink(schema="v bigint", **target_args(kind, tmp_path))

    def stage(subtask: int, values) -> dict:
        writer = PartFileWriter(sink.staging, sink.file_schema, subtask)
        writer.write_table(pa.table({"v": pa.array(values, pa.int64())}, schema=sink.file_schema))
        files = writer.roll()
        return {"checkpoint": 1, "subtask": subtask, "parallelism": 2, "final": False, "files": files, "rows": 3}

    first, second = stage(0, [0, 1, 2]), stage(1, [3, 4, 5])
    assert sink.commit_checkpoint(first) == "staged"
    PartFileWriter(sink.staging, sink.file_schema, 0).delete_stale([])  # the restored subtask 0
    assert sink.commit_checkpoint(second) in ("delta", "iceberg")
    assert sink.commit_checkpoint(first) == "duplicate" and sink.commit_checkpoint(second) == "duplicate"
    assert read_back(spark, sink) == Counter((v,) for v in range(6))
    assert commits_per_checkpoint(spark, sink) == Counter({1: 1} if kind == "delta-path" else {"1": 1})
