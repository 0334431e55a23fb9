"""The Spark bridge on real RayDP: from_spark → job → sink_to_spark, continuous table
mode, and the error cases. One Ray and one Spark session for the whole test session
(``ray_session`` / ``spark`` in conftest.py)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from datetime import datetime, timedelta, timezone

import cloudpickle
import pytest
import ray

from raylink.api import Configuration, StreamExecutionEnvironment
from raylink.api.functions import KeyedProcessFunction, ProcessFunction
from raylink.api.state import ValueStateDescriptor
from raylink.runtime.client.job_result import JobExecutionException

pytestmark = pytest.mark.timeout(240)

# Test modules are not importable inside Ray workers: ship their functions by value.
for _pickler in (cloudpickle, ray.cloudpickle):
    _pickler.register_pickle_by_value(sys.modules[__name__])

MAX_TS = (1 << 63) - 1
EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
ROWS = 100_000


def new_env(parallelism: int = 2) -> StreamExecutionEnvironment:
    env = StreamExecutionEnvironment.get_execution_environment(Configuration())
    env.set_parallelism(parallelism)
    return env


def assert_same(spark_df, expected_df):
    """Equal as multisets, compared by Spark itself."""
    assert spark_df.columns == expected_df.columns
    spark_df, expected_df = spark_df.cache(), expected_df.cache()
    extra = spark_df.exceptAll(expected_df)
    missing = expected_df.exceptAll(spark_df)
    assert extra.count() == 0, extra.limit(5).collect()
    assert missing.count() == 0, missing.limit(5).collect()


# -- 1. DataFrame -> keyed aggregation -> DataFrame, compared with Spark's groupBy --------------------
MIXED_SQL = """
SELECT id,
       concat('k', cast(id % 97 AS string))                                   AS k,
       CASE WHEN id % 11 = 0 THEN NULL ELSE cast(id % 1000 AS int) END        AS i,
       CASE WHEN id % 13 = 0 THEN NULL ELSE cast(id AS double) * 0.25 END   AS d,
       CASE WHEN id % 17 = 0 THEN NULL ELSE concat('s', cast(id % 5003 AS string)) END AS s,
       timestamp_seconds(1700000000 + id * 7)                                  AS ts,
       CASE WHEN id % 19 = 0 THEN NULL ELSE cast(id / 7 AS decimal(18, 4)) END AS dec
FROM range(0, {rows}, 1, 4)
"""

AGG_SCHEMA = "k string, n bigint, sum_i bigint, max_d double, min_ts timestamp, max_s string, sum_dec decimal(28,4)"


def _max(a, b):
    return b if a is None else a if b is None else max(a, b)


def _min(a, b):
    return b if a is None else a if b is None else min(a, b)


def _add(a, b):
    return b if a is None else a if b is None else a + b


class PerKeyAggregate(KeyedProcessFunction):
    """count, sum(i), max(d), min(ts), max(s), sum(dec) per key, emitted at the end of input."""

    def open(self, runtime_context):
        self.acc = runtime_context.get_state(ValueStateDescriptor("acc"))

    def process_element(self, row, ctx):
        _id, k, i, d, s, ts, dec = row
        acc = self.acc.value()
        if acc is None:
            acc = (k, 0, None, None, None, None, None)
            ctx.timer_service().register_event_time_timer(MAX_TS)
        self.acc.update(
            (k, acc[1] + 1, _add(acc[2], i), _max(acc[3], d), _min(acc[4], ts), _max(acc[5], s), _add(acc[6], dec))
        )

    def on_timer(self, timestamp, ctx):
        yield self.acc.value()


def test_dataframe_keyed_aggregation_round_trip(spark):
    from pyspark.sql import functions as F

    from raylink.connectors.spark import get_spark_dataframe

    df = spark.sql(MIXED_SQL.format(rows=ROWS))
    env = new_env(2)
    stream = env.from_spark(df)
    assert stream.get_parallelism() == 2  # min(4 blocks, parallelism 2)
    assert stream.get_type().names == ("id", "k", "i", "d", "s", "ts", "dec")
    sink = stream.key_by(lambda r: r[1]).process(PerKeyAggregate()).sink_to_spark(schema=AGG_SCHEMA)
    result = env.execute("spark round trip")
    metrics = result.vertex_metrics()
    assert sum(m["numRecordsOut"] for name, m in metrics.items() if name.startswith("Source")) == ROWS
    out = get_spark_dataframe(result, sink)
    expected = df.groupBy("k").agg(
        F.count(F.lit(1)).alias("n"),
        F.sum("i").alias("sum_i"),
        F.max("d").alias("max_d"),
        F.min("ts").alias("min_ts"),
        F.max("s").alias("max_s"),
        F.sum("dec").alias("sum_dec"),
    )
    assert [f.dataType for f in out.schema.fields] == [f.dataType for f in expected.schema.fields]
    assert out.count() == 97
    assert_same(out, expected)


class CheckEventTime(ProcessFunction):
    """Every record's event timestamp is its ``ts`` column in epoch milliseconds."""

    def process_element(self, row, ctx):
        ts = row["ts"]
        expected = None if ts is None else (ts - EPOCH) // timedelta(milliseconds=1)
        if ctx.timestamp() != expected:
            raise AssertionError(f"record {row['id']}: timestamp {ctx.timestamp()} != {expected}")
        yield row


def test_round_trip_is_lossless_for_types_nulls_and_time_zones(spark):
    """Rows pass unchanged: nulls, timestamps (instants, any session zone), decimals,
    64-bit ints beyond double precision, dates, binary, arrays; dict records by name;
    the event-time column becomes each record's timestamp."""
    from raylink.connectors.spark import get_spark_dataframe

    df = spark.sql("""
        SELECT id,
               CASE WHEN id % 3 = 0 THEN NULL ELSE 9007199254740993 + id END          AS big,
               CASE WHEN id % 4 = 0 THEN NULL
                    ELSE to_utc_timestamp(timestamp_seconds(id * 86413), 'America/New_York') END AS ts,
               CASE WHEN id % 5 = 0 THEN NULL ELSE cast(id * 1234567.891 AS decimal(38, 9)) END AS dec,
               date_add(date'2024-02-28', cast(id AS int))                           AS day,
               CASE WHEN id % 6 = 0 THEN NULL ELSE cast(concat('b', id) AS binary) END AS bin,
               array(id, id + 1)                                                      AS arr,
               CASE WHEN id % 7 = 0 THEN NULL ELSE 'x' || id END                      AS str
        FROM range(0, 3000, 1, 3)""")
    zone = spark.conf.get("spark.sql.session.timeZone")
    spark.conf.set("spark.sql.session.timeZone", "Asia/Kolkata")  # blocks carry a non-UTC zone
    try:
        env = new_env(4)
        stream = env.from_spark(df, parallelism=8, record_format="dict", timestamp_column="ts")
        assert stream.get_parallelism() == 3  # min(3 blocks, 8 requested)
        (stream.rebalance().process(CheckEventTime(), output_type=stream.get_type()).sink_to_spark())
        out = get_spark_dataframe(env.execute("lossless"))
    finally:
        spark.conf.set("spark.sql.session.timeZone", zone)
    assert [(f.name, f.dataType.simpleString()) for f in out.schema.fields] == [
        (f.name, f.dataType.simpleString()) for f in df.schema.fields
    ]
    assert_same(out, df)
    assert out.where("big = 9007199254740994").count() == 1  # 2**53 + 1 + 1: no trip through double


# -- 2. continuous: a Parquet table kept current ------------------------------------------------------
CLICK_SCHEMA = "user string, page string, ts timestamp, ms bigint"


def write_clicks(spark, path, start, n, tag):
    rows = spark.sql(f"""
        SELECT concat('u', cast(id % 50 AS string)) AS user, concat('{tag}/', cast(id % 9 AS string)) AS page,
               timestamp_seconds(1700000000 + id) AS ts, id % 1000 AS ms
        FROM range({start}, {start + n}, 1, 1)""")
    rows.write.mode("append").parquet(path)


def test_continuous_table_source_and_sink(spark, tmp_path):
    flush = 4.0
    source_dir = str(tmp_path / "clicks")
    table = "clicks_live"
    write_clicks(spark, source_dir, 0, 1000, "first")
    env = new_env(1)
    (
        env.from_spark_table(source_dir, poll_interval=0.5)
        .filter(lambda r: r[3] >= 0)
        .sink_to_spark(table=table, flush_interval=flush, mode="overwrite")
    )
    client = env.execute_async("continuous clicks")
    try:

        def count(where=None):
            try:
                frame = spark.table(table)
            except Exception:  # not created yet
                return -1
            return (frame.where(where) if where else frame).count()

        deadline = time.monotonic() + 90
        while count() != 1000:  # Spark offers no commit event to wait on: poll with a deadline
            assert time.monotonic() < deadline, f"initial rows not in {table} (count {count()})"
            assert client.get_job_status() == "RUNNING", client.get_job_status()
            time.sleep(0.2)
        write_clicks(spark, source_dir, 1000, 500, "second")  # a new file appears while the job runs
        appended = time.monotonic()
        while count("page LIKE 'second/%'") != 500:
            assert time.monotonic() - appended < 4 * flush, "appended rows never became visible"
            time.sleep(0.1)
        visible_after = time.monotonic() - appended
        print(f"appended rows visible after {visible_after:.2f} s (flush interval {flush} s)")
        assert visible_after <= 2 * flush, f"appended rows took {visible_after:.2f} s (> 2 flush intervals)"
        assert count() == 1500
    finally:
        client.cancel()
        assert client.wait(60)
    assert client.get_job_status() == "CANCELED"
    # everything the job used is released: every TaskExecutor actor is gone
    for handle in client.handles.values():
        with pytest.raises(ray.exceptions.RayActorError):
            ray.get(handle.location.remote(), timeout=30)


def test_bounded_write_to_partitioned_table_overwrites(spark):
    env = new_env(2)
    rows = [(f"u{i % 3}", f"p{i % 4}", i) for i in range(40)]
    (
        env.from_collection(rows)
        .rebalance()
        .sink_to_spark(
            table="pages_by_user", schema="user string, page string, n bigint", mode="overwrite", partition_by="page"
        )
    )
    env.execute("write table")
    first = spark.table("pages_by_user")
    assert first.count() == 40
    env = new_env(2)
    env.from_collection(rows[:10]).sink_to_spark(
        table="pages_by_user", mode="overwrite", schema="user string, page string, n bigint"
    )
    env.execute("overwrite table")
    assert spark.table("pages_by_user").count() == 10
    assert sorted(r.n for r in spark.table("pages_by_user").collect()) == list(range(10))


def test_spark_session_is_shared_and_on_ray(spark):
    from raylink.connectors.spark import get_spark
    from raylink.connectors.spark.session import is_raydp_session

    assert get_spark() is spark  # one session: reused, not started twice
    assert is_raydp_session(spark) and spark.sparkContext.master.startswith("ray://")
    assert spark.conf.get("spark.executor.instances", "1") == "1"
    empty = spark.sql("SELECT 1 AS a WHERE false")
    env = new_env(2)
    env.from_spark(empty).sink_to_spark()
    from raylink.connectors.spark import get_spark_dataframe

    out = get_spark_dataframe(env.execute("empty"))
    assert out.count() == 0 and out.columns == ["a"]


# -- 3. errors -----------------------------------------------------------------------------------------
def test_non_dataframe_argument_is_refused(spark):
    from raylink.connectors.spark import SparkSource

    env = new_env(1)
    with pytest.raises(TypeError, match="from_spark: expected a pyspark.sql.DataFrame .* got builtins.list"):
        env.from_spark([(1, "a")])
    with pytest.raises(TypeError, match="SparkSource: expected a pyspark.sql.DataFrame"):
        SparkSource("select 1")
    with pytest.raises(ValueError, match="timestamp_column 'nope' is not a column"):
        env.from_spark(spark.range(3), timestamp_column="nope")


def test_schema_mismatch_fails_with_operator_field_and_value(spark, tmp_path):
    env = new_env(1)
    rows = [(1, "a"), (2, "b"), ("three", "c")]
    env.from_collection(rows).sink_to_spark(schema="n bigint, name string", name="Numbers Sink")
    with pytest.raises(JobExecutionException) as info:
        env.execute("mismatch")
    text = str(info.value)
    assert "Numbers Sink" in text and "record 2" in text
    assert "field 'n' (bigint) cannot hold 'three'" in text

    env = new_env(1)
    env.from_collection([(1, None)]).sink_to_spark(schema="n bigint, name string NOT NULL")
    with pytest.raises(JobExecutionException, match="field 'name' \\(string, NOT NULL\\) is null"):
        env.execute("null")

    # a parallel write sink: one subtask fails, the other is staged; the job fails, nothing is written
    out = tmp_path / "never"
    env = new_env(2)
    (
        env.from_collection([(i, f"n{i}") for i in range(20)] + [(20, 21)])
        .rebalance()
        .sink_to_spark(path=str(out), schema="n bigint, name string")
    )
    with pytest.raises(JobExecutionException, match="field 'name' \\(string\\) cannot hold 21"):
        env.execute("parallel mismatch")
    assert not out.exists()

    env = new_env(1)
    with pytest.raises(ValueError, match="cannot infer a Spark schema"):
        env.from_collection([1]).map(str).sink_to_spark()
    with pytest.raises(ValueError, match="invalid Spark DDL schema"):
        env.from_collection([1]).sink_to_spark(schema="n bigint,, oops")


@pytest.mark.parametrize("java_home", ["/nonexistent/jdk", None])
def test_spark_without_java_fails_clearly_and_starts_nothing(tmp_path, java_home):
    script = textwrap.dedent("""
        import json, ray, raydp.context
        from raylink.connectors.spark import SparkStartError, get_spark
        try:
            get_spark()
        except SparkStartError as e:
            print(json.dumps({"error": str(e), "ray": ray.is_initialized(),
                              "spark": raydp.context._global_spark_context is not None}))
    """)
    env = {k: v for k, v in os.environ.items() if k not in ("JAVA_HOME", "RAY_ADDRESS")}
    env["PATH"] = os.path.dirname(sys.executable)  # the venv's bin: no java there
    if java_home:
        env["JAVA_HOME"] = java_home
    proc = subprocess.run(
        [sys.executable, "-c", script], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    import json

    report = json.loads(proc.stdout.strip().splitlines()[-1])
    if java_home:
        assert "JAVA_HOME='/nonexistent/jdk' has no executable bin/java" in report["error"]
    else:
        assert "no Java runtime found" in report["error"]
    assert report["ray"] is False and report["spark"] is False
