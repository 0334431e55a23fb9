"""``DataStream.map_batches`` on real RayDP: from_spark → map_batches → sink_to_spark with Arrow
batches end to end (pyarrow and pandas), rows gathered into batches and batches exploded into
rows around row functions, bad returns failing by operator name, and exactly-once under
SIGKILLs. One Ray and one Spark session for the whole test session (conftest.py)."""

from __future__ import annotations

import sys
import time
from collections import Counter

import cloudpickle
import pyarrow as pa
import pyarrow.compute as pc
import pytest
import ray

from raylink.api import Configuration, StreamExecutionEnvironment
from raylink.runtime.client.job_result import JobExecutionException

pytestmark = pytest.mark.timeout(240)

for _pickler in (cloudpickle, ray.cloudpickle):
    _pickler.register_pickle_by_value(sys.modules[__name__])

ROWS = 20_000
GATHER = 100  # map_batches' batch_size: gathered row batches are never larger


def new_env(parallelism: int = 2) -> StreamExecutionEnvironment:
    env = StreamExecutionEnvironment.get_execution_environment(Configuration())
    env.set_parallelism(parallelism)
    return env


def frame(spark, rows: int = ROWS, partitions: int = 4):
    return spark.range(0, rows, 1, partitions).selectExpr("cast(id AS int) AS k", "cast(id AS double) * 0.5 AS v")


def double_and_count(batch: pa.RecordBatch) -> pa.RecordBatch:
    """(k, v * 2, rows in the batch the function got)."""
    n = pa.array([batch.num_rows] * batch.num_rows, pa.int64())
    return pa.RecordBatch.from_arrays(
        [batch.column("k"), pc.multiply(batch.column("v"), 2.0), n], names=["k", "v", "n"]
    )


def test_from_spark_map_batches_pyarrow_into_a_path(spark, tmp_path):
    out = str(tmp_path / "out")
    env = new_env(2)
    env.from_spark(frame(spark)).map_batches(double_and_count, batch_size=GATHER).sink_to_spark(
        path=out, schema="k int, v double, n bigint", mode="overwrite"
    )
    env.execute("map_batches pyarrow")
    rows = spark.read.parquet(out).collect()
    assert sorted((r.k, r.v) for r in rows) == [(i, i * 0.5 * 2.0) for i in range(ROWS)]
    # Spark's own Arrow batches reached the function whole (gathered rows would be <= GATHER)
    assert max(r.n for r in rows) > GATHER


def add_one_pandas(df):
    return df.assign(v=df["v"] + 1.0, tag=df["k"].astype(str) + "!")


def test_from_spark_map_batches_pandas_into_a_result_dataframe(spark):
    from raylink.connectors.spark import get_spark_dataframe

    env = new_env(2)
    sink = (
        env.from_spark(frame(spark, 5000, 3))
        .map_batches(add_one_pandas, batch_format="pandas")
        .sink_to_spark(schema="k int, v double, tag string")
    )
    out = get_spark_dataframe(env.execute("map_batches pandas"), sink).collect()
    assert sorted(tuple(r) for r in out) == [(i, i * 0.5 + 1.0, f"{i}!") for i in range(5000)]


def square_v(batch: pa.RecordBatch) -> pa.RecordBatch:
    if batch.num_rows > GATHER:
        raise AssertionError(f"a gathered batch of {batch.num_rows} rows (batch_size {GATHER})")
    return pa.RecordBatch.from_arrays(
        [batch.column(0), pc.multiply(batch.column(1), batch.column(1))], names=["k", "v2"]
    )


def test_rows_into_map_batches_and_its_batches_into_a_row_map(spark):
    from raylink.connectors.spark import get_spark_dataframe

    n = 1234
    env = new_env(2)
    sink = (
        env.from_collection([(i, i % 17) for i in range(n)])
        .map(lambda r: (r[0], r[1] + 1))  # a row function before: rows gathered into batches
        .map_batches(square_v, batch_size=GATHER)
        .map(lambda r: (r[0], r[1] - 1, f"k{r[0]}"))  # a row function after: batches exploded
        .sink_to_spark(schema="k bigint, v bigint, name string")
    )
    out = get_spark_dataframe(env.execute("rows and batches"), sink).collect()
    expected = [(i, (i % 17 + 1) ** 2 - 1, f"k{i}") for i in range(n)]
    assert sorted(tuple(r) for r in out) == expected


def not_a_batch(batch):
    return batch.to_pylist()


def not_a_frame(df):
    return df.to_dict("records")


def wrong_columns(batch):
    return pa.RecordBatch.from_arrays([batch.column(0)], names=["oops"])


def test_a_bad_return_fails_naming_the_operator(spark, tmp_path):
    env = new_env(1)
    env.from_spark(frame(spark, 100, 1)).map_batches(not_a_batch).sink_to_spark(
        path=str(tmp_path / "a"), schema="k int, v double"
    )
    with pytest.raises(JobExecutionException, match="map_batches 'Map Batches'.*returned builtins.list"):
        env.execute("not a batch")

    env = new_env(1)
    env.from_spark(frame(spark, 100, 1)).map_batches(not_a_frame, batch_format="pandas").sink_to_spark(
        path=str(tmp_path / "b"), schema="k int, v double"
    )
    with pytest.raises(JobExecutionException, match="returned builtins.list; expected a pandas.DataFrame"):
        env.execute("not a frame")

    env = new_env(1)
    env.from_spark(frame(spark, 100, 1)).map_batches(wrong_columns).sink_to_spark(
        path=str(tmp_path / "c"), schema="k int, v double", name="Batch Sink"
    )
    with pytest.raises(JobExecutionException, match="Batch Sink.*columns \\['oops'\\].*missing \\['k', 'v'\\]"):
        env.execute("wrong schema")
    assert not (tmp_path / "c").exists()

    env = new_env(1)
    with pytest.raises(ValueError, match="batch_format must be"):
        env.from_spark(frame(spark, 10, 1)).map_batches(square_v, batch_format="numpy")


class PacedBatches:
    """``v`` unchanged, 1 ms per 4 rows (the job runs for a few seconds under checkpoints)."""

    def __call__(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        time.sleep(batch.num_rows / 4000)  # pacing: the workload, not a wait
        return batch


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_from_spark_map_batches_into_a_path_survives_sigkills_exactly_once(spark, tmp_path):
    from raylink.tests.test_runtime_checkpointing import checkpointing_env
    from raylink.tests.test_runtime_exactly_once_sinks import kill_task_executors_while_running

    n = 24_000
    env = checkpointing_env("ray", 2, tmp_path)
    out = str(tmp_path / "out")
    df = spark.range(0, n, 1, 24).selectExpr("id AS v")  # 1000-row partitions: many positions to resume at
    env.from_spark(df).map_batches(PacedBatches()).sink_to_spark(path=out, schema="v bigint", mode="append")
    client = env.execute_async()
    kills = kill_task_executors_while_running(client)
    assert client.wait(300), "the job did not finish"
    assert client.get_job_status() == "FINISHED", client.get_job_status()
    assert client.get_checkpoint_stats()["numRestarts"] == kills >= 2
    assert Counter(r[0] for r in spark.read.parquet(out).collect()) == Counter(range(n))


def test_gathered_rows_flush_at_size_timer_checkpoint_and_end():
    """The operator alone: rows gathered ``batch_size`` at a time, the rest at the flush timer,
    before a checkpoint's snapshot and at the end of input; batch elements pass whole; rows out
    (no chained batch consumer)."""
    from raylink.operators.map_batches import FLUSH_AFTER_MS, MapBatchesOperator
    from raylink.tests.test_operators_basic import start

    sizes = []

    def plus_one(batch):
        sizes.append(batch.num_rows)
        return pa.RecordBatch.from_arrays([pc.add(batch.column("a"), 1)], names=["a"])

    op = MapBatchesOperator(plus_one, batch_size=3, input_names=("a",))
    harness = start(op)
    out, rc = harness.output, harness.runtime_context
    op.process_batch([(1,), (2,), (3,), (4,)])
    assert out.records == [(2,), (3,), (4,)] and sizes == [3]
    rc.processing_time_service.advance(FLUSH_AFTER_MS)  # the flush timer of row (4,)
    assert out.records[3:] == [(5,)] and sizes == [3, 1]
    op.process_element((5,))
    assert op.snapshot_operator_state(1) is None  # nothing kept: the row went out before the barrier
    assert out.records[4:] == [(6,)]
    op.process_element(pa.RecordBatch.from_pylist([{"a": 10}, {"a": 20}]))
    op.process_element((7,))
    op.end_input()
    assert out.records[5:] == [(11,), (21,), (8,)] and sizes == [3, 1, 1, 2, 1]
