"""The continuous Delta/Iceberg source's view of a table's commits
(``from_spark_table(..., continuous=True)``, :mod:`raylink.connectors.spark.table_log`): where it
starts (Spark's ``startingVersion`` / ``startingTimestamp``, Flink's ``starting-strategy`` /
``start-snapshot-id``), which files each commit added (read back by Spark: the same rows),
compaction skipped, and commits that remove rows refused naming the table and the version
unless ``ignoreDeletes`` / ``skipChangeCommits`` (Delta) or
``streaming-skip-overwrite-snapshots`` (Iceberg) skip them. One Spark session for the whole test
session (``spark`` in conftest.py); no job runs here (the end-to-end follow is in
``test_spark_table_source_failover.py``)."""

from __future__ import annotations

import uuid
from collections import Counter

import pyarrow.parquet as pq
import pytest

from raylink.connectors.spark.table_log import APPEND, REFUSE, SKIP, DeltaTableLog, IcebergTableLog

pytestmark = [pytest.mark.timeout(300), pytest.mark.spark, pytest.mark.ray]

SCHEMA = "v bigint, p string"


def batch(spark, start: int, n: int = 10):
    return spark.createDataFrame([(v, f"p{v % 2}") for v in range(start, start + n)], SCHEMA).repartition(2)


def rows_of(commits) -> Counter:
    """The rows of the files the appends added (``v`` read from each file)."""
    out = Counter()
    for commit in commits:
        if commit.action == APPEND:
            for path, _partition in commit.files:
                out.update(pq.read_table(path.removeprefix("file:"), columns=["v"]).column("v").to_pylist())
    return out


@pytest.fixture
def delta_table(spark, tmp_path):
    """Versions 0 and 1 append 0..9 and 10..19 (partitioned by ``p``), 2 is OPTIMIZE, 3 a
    DELETE, 4 appends 20..29."""
    path = str(tmp_path / f"d_{uuid.uuid4().hex[:6]}")
    batch(spark, 0).write.format("delta").partitionBy("p").save(path)
    batch(spark, 10).write.format("delta").mode("append").save(path)
    spark.sql(f"OPTIMIZE delta.`{path}`")
    spark.sql(f"DELETE FROM delta.`{path}` WHERE v = 3")
    batch(spark, 20).write.format("delta").mode("append").save(path)
    return path


def delta_log(spark, path, **options) -> DeltaTableLog:
    return DeltaTableLog(spark, path, f"Delta table at {path}", {k: str(v) for k, v in options.items()})


def test_delta_commits_are_appends_compaction_is_skipped_and_a_delete_is_refused(spark, delta_table):
    log = delta_log(spark, delta_table)
    commits = log.commits_after(None)
    assert [(c.id, c.action) for c in commits] == [(0, APPEND), (1, APPEND), (2, SKIP), (3, REFUSE), (4, APPEND)]
    assert commits[2].operation == "OPTIMIZE"
    assert f"Delta table at {delta_table}: version 3 (DELETE) removes rows" in commits[3].reason
    assert "set option skipChangeCommits to skip such commits" in commits[3].reason  # it rewrote a file
    assert rows_of(commits) == Counter(range(30))
    # partition values come from the log (Delta's files do not hold them)
    assert {p["p"] for c in commits[:2] for _f, p in c.files} == {"p0", "p1"}
    assert [c.id for c in log.commits_after(2)] == [3, 4]
    # the deleting commit rewrote a file (removes and adds): only skipChangeCommits skips it
    assert [c.action for c in delta_log(spark, delta_table, ignoreDeletes=True).commits_after(2)] == [REFUSE, APPEND]
    assert [c.action for c in delta_log(spark, delta_table, skipChangeCommits=True).commits_after(2)] == [SKIP, APPEND]


def test_delta_starting_positions(spark, delta_table):
    latest = 4
    log = delta_log(spark, delta_table)
    assert log.start() == (latest, latest)  # the latest snapshot, then later commits
    expected = Counter(v for v in range(30) if v != 3)
    assert (
        rows_of([log.initial(latest)])
        == expected
        == Counter(r[0] for r in spark.read.format("delta").load(delta_table).collect())
    )
    assert delta_log(spark, delta_table, startingVersion=1).start() == (None, 0)
    assert delta_log(spark, delta_table, startingVersion="latest").start() == (None, latest)
    first = spark.sql(f"DESCRIBE HISTORY delta.`{delta_table}`").where("version = 4").collect()[0]["timestamp"]
    assert delta_log(spark, delta_table, startingTimestamp=str(first)).start() == (None, 3)
    with pytest.raises(
        ValueError, match=r"startingVersion 9 of Delta table at .* is not between 0 and its latest version 4"
    ):
        delta_log(spark, delta_table, startingVersion=9).start()
    with pytest.raises(ValueError, match=r"startingTimestamp '2999-01-01' is after the latest commit"):
        delta_log(spark, delta_table, startingTimestamp="2999-01-01").start()


def test_iceberg_appends_are_read_replace_is_skipped_and_a_delete_is_refused(spark):
    name = f"iceberg.db.s_{uuid.uuid4().hex[:6]}"
    spark.sql("CREATE NAMESPACE IF NOT EXISTS iceberg.db")
    batch(spark, 0).writeTo(name).create()
    batch(spark, 10).writeTo(name).append()
    spark.sql(
        f"CALL iceberg.system.rewrite_data_files(table => '{name.split('.', 1)[1]}', "
        "options => map('min-input-files', '2'))"
    )
    spark.sql(f"DELETE FROM {name} WHERE v < 10")  # rewrites the compacted file: an 'overwrite' snapshot
    batch(spark, 20).writeTo(name).append()
    description = f"Iceberg table {name}"
    log = IcebergTableLog(spark, name, description, {})
    commits = log.commits_after(None)
    assert [(c.operation, c.action) for c in commits] == [
        ("append", APPEND),
        ("append", APPEND),
        ("replace", SKIP),
        ("overwrite", REFUSE),
        ("append", APPEND),
    ]
    assert f"{description}: snapshot {commits[3].id} is an 'overwrite' snapshot" in commits[3].reason
    assert "set option streaming-skip-overwrite-snapshots" in commits[3].reason
    assert rows_of(commits) == Counter(range(30))
    skipping = IcebergTableLog(spark, name, description, {"streaming-skip-overwrite-snapshots": "true"})
    assert [c.action for c in skipping.commits_after(commits[2].id)] == [SKIP, APPEND]
    # starting positions: the current snapshot whole, then later ones; or from a snapshot on
    assert log.start() == (commits[-1].id, commits[-1].id)
    assert rows_of([log.initial(commits[-1].id)]) == Counter(range(10, 30))
    from_second = IcebergTableLog(spark, name, description, {"start-snapshot-id": str(commits[1].id)})
    assert from_second.start() == (None, commits[0].id)
    earliest = IcebergTableLog(spark, name, description, {"starting-strategy": "INCREMENTAL_FROM_EARLIEST_SNAPSHOT"})
    assert earliest.start() == (None, None)
    with pytest.raises(ValueError, match=r"start-snapshot-id 42 is not an ancestor of the current snapshot"):
        IcebergTableLog(spark, name, description, {"start-snapshot-id": "42"}).start()


def test_bad_options_fail_naming_the_option_before_the_job_starts(spark, delta_table):
    from raylink.api import StreamExecutionEnvironment

    env = StreamExecutionEnvironment.get_execution_environment()
    with pytest.raises(ValueError, match=r"unknown option 'start-snapshot-id' for the continuous delta source"):
        env.from_spark_table(delta_table, format="delta", continuous=True, options={"start-snapshot-id": 1})
    with pytest.raises(ValueError, match=r"continuous=True and options need format='delta' or 'iceberg'"):
        env.from_spark_table(delta_table, continuous=True)
    with pytest.raises(ValueError, match=r"the continuous source starts with options startingVersion"):
        env.from_spark_table(delta_table, format="delta", continuous=True, version_as_of=1)
    with pytest.raises(ValueError, match=r"startingVersion must be a version number or 'latest', got 'x'"):
        env.from_spark_table(delta_table, format="delta", continuous=True, options={"startingVersion": "x"})
