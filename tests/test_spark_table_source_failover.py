"""A continuous job follows a Delta table and an Iceberg table (``from_spark_table(...,
continuous=True)``) while Spark appends to it and once compacts it: every appended row reaches an
exactly-once FileSink once, across 2 SIGKILLs of TaskExecutor processes and a stop-with-savepoint
at parallelism 2 resumed at 3. The expected rows are every value the test appended (brute
force); Spark writes the table, raylink's readers read its files. One Spark session for the whole
test session (``spark`` in conftest.py)."""

from __future__ import annotations

import sys
import uuid
from collections import Counter

import cloudpickle
import pytest
import ray

from raylink.tests.runtime_jobs import wait_for
from raylink.tests.test_checkpoint_storage_faults import committed_lines
from raylink.tests.test_runtime_checkpointing import checkpointing_env
from raylink.tests.test_runtime_exactly_once_sinks import PacedRow, kill_task_executors_while_running
from raylink.tests.test_runtime_savepoints import _values_to_files, stop_after_a_checkpoint

pytestmark = [pytest.mark.spark, pytest.mark.ray, pytest.mark.slow]

for _pickler in (cloudpickle, ray.cloudpickle):
    _pickler.register_pickle_by_value(sys.modules[__name__])

BATCH = 400  # rows of one Spark append (two files)


class Table:
    """The followed table: appends of consecutive values, one compaction."""

    def __init__(self, spark, fmt: str, tmp_path) -> None:
        self.spark, self.fmt, self.next = spark, fmt, 0
        if fmt == "delta":
            self.name = str(tmp_path / f"followed_{uuid.uuid4().hex[:6]}")
        else:
            spark.sql("CREATE NAMESPACE IF NOT EXISTS iceberg.db")
            self.name = f"iceberg.db.followed_{uuid.uuid4().hex[:6]}"

    def append(self) -> None:
        df = self.spark.range(self.next, self.next + BATCH, 1, 2).selectExpr("id AS v")
        self.next += BATCH
        if self.fmt == "delta":
            df.write.format("delta").mode("append").save(self.name)
        elif self.next == BATCH:
            df.writeTo(self.name).create()
        else:
            df.writeTo(self.name).append()

    def compact(self) -> None:
        if self.fmt == "delta":
            self.spark.sql(f"OPTIMIZE delta.`{self.name}`")
        else:
            self.spark.sql(
                f"CALL iceberg.system.rewrite_data_files(table => '{self.name.split('.', 1)[1]}', "
                "options => map('min-input-files', '2'))"
            )


def follow(env, table: Table, out) -> None:
    stream = env.from_spark_table(table.name, format=table.fmt, continuous=True, poll_interval=0.2)
    _values_to_files(stream.uid("table").map(PacedRow()).uid("paced"), out)


@pytest.mark.timeout(900)
@pytest.mark.parametrize("fmt", ["delta", "iceberg"])
def test_a_followed_table_emits_every_appended_row_once_across_kills_and_a_rescaling_savepoint(spark, tmp_path, fmt):
    table = Table(spark, fmt, tmp_path)
    table.append()  # the initial snapshot
    first, second = tmp_path / "out-1", tmp_path / "out-2"
    env = checkpointing_env("ray", 2, tmp_path)
    follow(env, table, first)
    client = env.execute_async()
    table.append()
    table.compact()  # rewrites the files read so far: never emitted again
    table.append()
    kills = kill_task_executors_while_running(client, kills=2)
    assert kills == 2 and client.get_checkpoint_stats()["numRestarts"] >= 2
    table.append()
    path = stop_after_a_checkpoint(client, tmp_path / "savepoints", out=first)
    stopped = committed_lines(first)
    table.append()  # while no job runs
    env = checkpointing_env("ray", 3, tmp_path, **{"execution.savepoint.path": path})
    follow(env, table, second)
    client = env.execute_async()
    try:
        table.append()
        assert wait_for(
            lambda: sum(stopped.values()) + sum(committed_lines(second).values()) >= table.next,
            client,
            timeout=300,
            interval=0.3,
        ), (sum(stopped.values()), sum(committed_lines(second).values()), table.next)
    finally:
        client.cancel()
        assert client.wait(60)
    assert stopped + committed_lines(second) == Counter(str(v) for v in range(table.next))
