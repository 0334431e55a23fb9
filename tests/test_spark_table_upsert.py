"""Upserts and schemas of ``sink_to_spark(format="delta" | "iceberg")`` through RayDP's Spark:
``upsert_keys`` applies each commit's changes with one ``MERGE INTO`` (the last change per key
wins, a ``DELETE`` row removes its key, an ``UPDATE_BEFORE`` is dropped), idempotently per
checkpoint; ``merge_schema`` adds nullable columns; a record or a table that does not fit
fails naming the table, the column and the value. Expected tables are computed by applying the
input's changes one by one in Python; Spark reads the tables back."""

from __future__ import annotations

import random
import sys
import uuid
from collections import Counter

import cloudpickle
import pytest
import ray

from raylink.connectors.spark.sink import SparkSink
from raylink.core.row import Row, RowKind
from raylink.runtime.client.job_result import JobExecutionException
from raylink.tests.test_runtime_checkpointing import Paced, checkpointing_env
from raylink.tests.test_runtime_exactly_once_sinks import kill_task_executors_while_running
from raylink.tests.test_spark_delta_iceberg import (
    HalvesAcrossACheckpoint,
    commits_per_checkpoint,
    env_with,
    read_back,
    target_args,
)

pytestmark = pytest.mark.timeout(600)

for _pickler in (cloudpickle, ray.cloudpickle):
    _pickler.register_pickle_by_value(sys.modules[__name__])

SCHEMA = "k string, c bigint"
KEYS = 40


def changelog(steps: int, seed: int = 45) -> "tuple[list, dict]":
    """A changelog of ``steps`` changes over KEYS keys (inserts, ``-U``/``+U`` pairs, deletes)
    and the table it leaves, applied one by one."""
    rnd = random.Random(seed)
    table: dict = {}
    out = []
    for _ in range(steps):
        k = f"k{rnd.randrange(KEYS)}"
        if k not in table:
            table[k] = rnd.randrange(1000)
            out.append(Row.of_kind(RowKind.INSERT, k=k, c=table[k]))
        elif rnd.random() < 0.2:
            out.append(Row.of_kind(RowKind.DELETE, k=k, c=table.pop(k)))
        else:
            out.append(Row.of_kind(RowKind.UPDATE_BEFORE, k=k, c=table[k]))
            table[k] = rnd.randrange(1000)
            out.append(Row.of_kind(RowKind.UPDATE_AFTER, k=k, c=table[k]))
    return out, table


@pytest.mark.parametrize("kind", ["delta-path", "delta-table", "iceberg"])
def test_a_changelog_upserted_with_checkpoints_leaves_the_final_table_once_per_checkpoint(spark, tmp_path, kind):
    changes, final = changelog(5000)
    env = env_with(True, tmp_path)
    sink = SparkSink(schema=SCHEMA, upsert_keys=["k"], **target_args(kind, tmp_path))
    env.add_source(HalvesAcrossACheckpoint(changes), "changelog").key_by(lambda r: r[0]).sink_to(sink)
    env.execute()
    assert read_back(spark, sink) == Counter(final.items())
    per_checkpoint = commits_per_checkpoint(spark, sink)
    assert len(per_checkpoint) >= 2 and max(per_checkpoint.values()) == 1, per_checkpoint
    # the committer replayed with the last checkpoint's id (a restore's replay): nothing changes
    last = max(int(c) for c in per_checkpoint)
    replay = spark.createDataFrame(
        [("k0", -1, False, 0)], "k string, c bigint, __raylink_delete boolean, __raylink_seq bigint"
    )
    assert sink.target.merge(spark, lambda _s: replay, sink.spark_schema(), ["k"], sink.sink_id, last) == "duplicate"
    assert read_back(spark, sink) == Counter(final.items())


@pytest.mark.parametrize("kind", ["delta-path", "iceberg"])
def test_without_checkpoints_a_bounded_upsert_is_one_merge_into_an_existing_table(spark, tmp_path, kind):
    args = target_args(kind, tmp_path)
    first = SparkSink(schema=SCHEMA, upsert_keys="k", **args)
    env = env_with(False, tmp_path)
    env.from_collection([("k1", 1), ("k2", 2), ("k1", 3), ("k3", 30)]).sink_to(first)
    env.execute()
    assert read_back(spark, first) == Counter({("k1", 3): 1, ("k2", 2): 1, ("k3", 30): 1})
    before = len(first.target.history(spark))
    second = SparkSink(schema=SCHEMA, upsert_keys=["k"], **args)
    env = env_with(False, tmp_path)
    gone = Row.of_kind(RowKind.DELETE, k="k2", c=2)
    env.from_collection([Row(k="k3", c=31), gone, Row(k="k4", c=4)]).sink_to(second)
    env.execute()
    assert read_back(spark, second) == Counter({("k1", 3): 1, ("k3", 31): 1, ("k4", 4): 1})
    assert len(second.target.history(spark)) == before + 1  # one MERGE


def test_upsert_options_that_cannot_work_fail_naming_them(spark, tmp_path):
    env = env_with(False, tmp_path)
    stream = env.from_collection([("k1", 1)])
    with pytest.raises(ValueError, match=r"upsert_keys column\(s\) \['key'\] not in the schema \['k', 'c'\]"):
        stream.sink_to_spark(path=str(tmp_path / "u1"), schema=SCHEMA, format="delta", upsert_keys=["key"])
    with pytest.raises(ValueError, match=r"upsert_keys must be a non-empty list of column names"):
        stream.sink_to_spark(path=str(tmp_path / "u2"), schema=SCHEMA, format="delta", upsert_keys=[])
    with pytest.raises(
        ValueError, match=r"upsert_keys merges into the table .* mode must be 'append', got 'overwrite'"
    ):
        stream.sink_to_spark(
            path=str(tmp_path / "u3"), schema=SCHEMA, format="delta", upsert_keys=["k"], mode="overwrite"
        )
    with pytest.raises(ValueError, match=r"upsert_keys needs format='delta' or format='iceberg', got 'parquet'"):
        stream.sink_to_spark(path=str(tmp_path / "u4"), schema=SCHEMA, format="parquet", upsert_keys=["k"])
    with pytest.raises(ValueError, match=r"merge_schema needs format='delta' or format='iceberg', got None"):
        stream.sink_to_spark(path=str(tmp_path / "u5"), schema=SCHEMA, merge_schema=True)


@pytest.mark.parametrize("kind", ["delta-path", "iceberg"])
def test_a_null_upsert_key_fails_the_job_naming_the_column_and_the_table(spark, tmp_path, kind):
    env = env_with(False, tmp_path, 1)
    sink = SparkSink(schema=SCHEMA, upsert_keys=["k"], **target_args(kind, tmp_path))
    env.from_collection([("k1", 1), (None, 2)]).sink_to(sink)
    with pytest.raises(
        JobExecutionException, match=r"record 1 has a null upsert key column 'k' \(writing to (Delta|Iceberg) table"
    ):
        env.execute()
    assert not sink.target.exists(spark)  # nothing was committed


@pytest.mark.parametrize("kind", ["delta-path", "delta-table", "iceberg"])
def test_merge_schema_adds_a_nullable_column_and_without_it_the_column_is_named(spark, tmp_path, kind):
    args = target_args(kind, tmp_path)
    seed = SparkSink(schema=SCHEMA, **args)
    env = env_with(False, tmp_path)
    env.from_collection([("k1", 1)]).sink_to(seed)
    env.execute()
    wider = "k string, c bigint, note string"
    with pytest.raises(ValueError, match=r"has no column 'note' .*merge_schema=True adds it"):
        SparkSink(schema=wider, **args)
    with pytest.raises(
        ValueError, match=r"merge_schema adds nullable columns only, and column 'note' \(string NOT NULL\)"
    ):
        SparkSink(schema="k string, c bigint, note string NOT NULL", merge_schema=True, **args)
    for upsert in (None, ["k"]):
        sink = SparkSink(schema=wider, merge_schema=True, upsert_keys=upsert, **args)
        env = env_with(False, tmp_path)
        env.from_collection([("k2", 2, "two")] if upsert is None else [("k1", 10, "ten")]).sink_to(sink)
        env.execute()
    assert read_back(spark, sink) == Counter({("k1", 10, "ten"): 1, ("k2", 2, "two"): 1})


@pytest.mark.parametrize("kind", ["delta-path", "iceberg"])
def test_a_record_that_does_not_fit_fails_naming_the_table_the_column_and_the_value(spark, tmp_path, kind):
    env = env_with(False, tmp_path, 1)
    sink = SparkSink(schema=SCHEMA, **target_args(kind, tmp_path))
    env.from_collection([("k1", 1), ("k2", "many")]).sink_to(sink)
    with pytest.raises(
        JobExecutionException,
        match=r"record 1 does not fit the schema: field 'c' \(bigint\) cannot hold 'many' .*"
        r"\(writing to (Delta|Iceberg) table",
    ):
        env.execute()
    assert not sink.target.exists(spark)


def test_deltas_schema_enforcement_reaches_the_user_naming_the_column(spark, tmp_path):
    table = f"enforced_{uuid.uuid4().hex[:8]}"
    spark.sql(f"CREATE TABLE {table} (k string, c bigint NOT NULL) USING delta")
    spark.sql(f"ALTER TABLE {table} ADD CONSTRAINT positive CHECK (c > 0)")
    for bad, says in (
        ((("k1", -5),), r"CHECK constraint positive \(c > 0\) violated .*c : -5"),
        ((("k2", None),), r"CHECK constraint positive \(c > 0\) violated .*c : null"),
    ):
        env = env_with(False, tmp_path, 1)
        env.from_collection(list(bad)).sink_to_spark(table=table, schema="k string, c bigint", format="delta")
        with pytest.raises(JobExecutionException, match=says):
            env.execute()
    assert spark.table(table).count() == 0


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.parametrize("kind", ["delta-path", "iceberg"])
def test_a_keyed_rolling_count_upserted_survives_sigkills_with_the_final_counts(spark, tmp_path, kind):
    """word -> keyed rolling count -> ``upsert_keys=["word"]`` at p=2 on Ray, three TaskExecutor
    SIGKILLs: the table holds each word's final count, one MERGE per checkpoint at most."""
    total, words = 16_000, 50
    env = checkpointing_env("ray", 2, tmp_path, **{"execution.checkpointing.interval": "1 s"})
    sink = SparkSink(schema="word string, cnt bigint", upsert_keys=["word"], **target_args(kind, tmp_path))
    (
        env.from_sequence(0, total - 1)
        .map(Paced(-1))
        .map(lambda v: (f"w{(v * 7919) % words}", 1))
        .key_by(lambda t: t[0])
        .reduce(lambda a, b: (a[0], a[1] + b[1]))
        .sink_to(sink)
    )
    client = env.execute_async()
    kills = kill_task_executors_while_running(client)
    assert client.wait(600), "the job did not finish"
    assert client.get_job_status() == "FINISHED", client.get_job_status()
    assert client.get_checkpoint_stats()["numRestarts"] == kills >= 3
    expected = Counter(f"w{(v * 7919) % words}" for v in range(total))
    assert read_back(spark, sink) == Counter(expected.items())
    per_checkpoint = commits_per_checkpoint(spark, sink)
    assert per_checkpoint and max(per_checkpoint.values()) == 1, per_checkpoint
