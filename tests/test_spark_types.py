"""Every Spark type the bridge supports survives ``from_spark -> job -> sink_to_spark`` exactly:
ints of every width, floats (NaN, infinities), decimals up to 38 digits, strings, binary,
booleans, dates (year 1 to 9999), timestamps in a non-UTC session zone (before 1900 too),
``timestamp_ntz``, nulls everywhere, nested arrays, maps, structs. Checked against Spark
reading the written data back, row by row, on each way Spark gets the rows: Parquet files
moved into a path, into a managed table, and Spark's own write (ORC, partitioned)."""

from __future__ import annotations

import datetime as dt
import decimal
import math
import sys

import cloudpickle
import pytest
import ray

from raylink.api import Configuration, StreamExecutionEnvironment
from raylink.api.functions import MapFunction
from raylink.core.row import Row

pytestmark = pytest.mark.timeout(300)

for _pickler in (cloudpickle, ray.cloudpickle):  # the test's functions travel by value to Ray workers
    _pickler.register_pickle_by_value(sys.modules[__name__])

ROWS = 3000
ALL_TYPES_SQL = f"""
SELECT id,
       CAST(id % 128 AS tinyint)                                                  AS b,
       CAST(id * 7 % 32768 AS smallint)                                           AS sh,
       CASE WHEN id % 5 = 0 THEN NULL ELSE CAST(id * 7919 - 2147483 AS int) END   AS i,
       CASE WHEN id % 3 = 0 THEN NULL ELSE 9007199254740993 * (id % 1000) - id END AS big,
       CAST(id / 3.0 AS float)                                                    AS f,
       CASE WHEN id % 97 = 1 THEN double('NaN') WHEN id % 97 = 2 THEN double('Infinity')
            WHEN id % 97 = 3 THEN double('-Infinity') WHEN id % 4 = 0 THEN NULL
            ELSE id * 1e300 / 7 END                                               AS d,
       CAST(id * 1.25 AS decimal(10, 2))                                          AS dec_small,
       CASE WHEN id % 6 = 0 THEN NULL
            ELSE CAST(id * 1234567.891234567 AS decimal(38, 18)) END              AS dec_38_18,
       CAST('-12345678901234567890123456789012345678' AS decimal(38, 0)) + id     AS dec_38_0,
       CASE WHEN id % 7 = 0 THEN NULL WHEN id % 7 = 1 THEN ''
            ELSE concat('ü✓', cast(id AS string), '😀') END                       AS s,
       CASE WHEN id % 8 = 0 THEN NULL WHEN id % 8 = 1 THEN X''
            ELSE cast(concat('b', cast(id AS string)) AS binary) END              AS bin,
       CASE WHEN id % 9 = 0 THEN NULL ELSE id % 2 = 0 END                         AS flag,
       CASE WHEN id % 11 = 0 THEN date'9999-12-31' WHEN id % 13 = 0 THEN date'0001-01-01'
            WHEN id % 17 = 0 THEN date'1582-10-04' WHEN id % 19 = 0 THEN NULL
            ELSE date_add(date'2024-02-28', cast(id AS int)) END                  AS day,
       CASE WHEN id % 23 = 0 THEN NULL WHEN id % 29 = 0 THEN timestamp'1850-06-01 12:34:56.789'
            WHEN id % 31 = 0 THEN timestamp'2024-03-10 02:30:00'
            ELSE timestamp_micros(1700000000123456 + id * 86413000017) END        AS ts,
       CASE WHEN id % 37 = 0 THEN NULL
            ELSE CAST(timestamp_micros(1710037800000000 + id * 3600000001) AS timestamp_ntz) END AS ts_ntz,
       CASE WHEN id % 10 = 0 THEN NULL ELSE array(id, NULL, id + 1) END           AS arr,
       array(array(concat('a', cast(id AS string))), array(), NULL)               AS nested_arr,
       CASE WHEN id % 12 = 0 THEN NULL
            ELSE map(concat('k', cast(id AS string)), id, 'none', NULL) END       AS m,
       map(id, array(cast(id AS double), NULL))                                   AS m_int,
       CASE WHEN id % 14 = 0 THEN NULL
            ELSE named_struct('x', id, 'y', named_struct('z', concat('s', cast(id AS string)),
                                                         'w', array(1.5d, NULL))) END AS st,
       array(named_struct('a', id, 'mm', map('q', cast(id AS string))))           AS arr_st
FROM range(0, {ROWS}, 1, 3)
"""


def new_env(parallelism: int = 2) -> StreamExecutionEnvironment:
    env = StreamExecutionEnvironment.get_execution_environment(Configuration())
    env.set_parallelism(parallelism)
    return env


def normalized(value):
    """A value comparable with ``==``: NaN as a marker, Rows/dicts/lists recursively."""
    if isinstance(value, float) and math.isnan(value):
        return "NaN"
    if hasattr(value, "asDict"):
        return {k: normalized(v) for k, v in value.asDict().items()}
    if isinstance(value, dict):
        return {normalized(k): normalized(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [normalized(v) for v in value]
    if isinstance(value, bytearray):
        return bytes(value)
    return value


def assert_rows_equal(got_df, expected_df):
    """Same schema (Spark types) and the same rows, value by value, read by Spark."""
    assert [(f.name, f.dataType.simpleString()) for f in got_df.schema.fields] == [
        (f.name, f.dataType.simpleString()) for f in expected_df.schema.fields
    ]
    got = [normalized(r) for r in got_df.orderBy("id").collect()]
    expected = [normalized(r) for r in expected_df.orderBy("id").collect()]
    assert len(got) == len(expected) == ROWS
    for g, e in zip(got, expected):
        assert g == e, {k: (g[k], e[k]) for k in e if g[k] != e[k]}


@pytest.fixture
def all_types(spark):
    """The DataFrame of every type, read with a non-UTC session time zone (restored after)."""
    zone = spark.conf.get("spark.sql.session.timeZone")
    spark.conf.set("spark.sql.session.timeZone", "America/Los_Angeles")
    try:
        yield spark.sql(ALL_TYPES_SQL).cache()
    finally:
        spark.conf.set("spark.sql.session.timeZone", zone)


def commits_of(sink):
    return sink._transformation.operator.function.commits


class CheckValues(MapFunction):
    """Records arrive as the Python values PyFlink gives those types; passes them on unchanged."""

    def __init__(self, record_format: str):
        self.record_format = record_format

    def map(self, record):
        if self.record_format == "row":
            assert isinstance(record, Row), type(record)
            value = record.as_dict()
        elif self.record_format == "dict":
            value = record
        else:
            assert type(record) is tuple, type(record)
            value = dict(
                zip(
                    (
                        "id",
                        "b",
                        "sh",
                        "i",
                        "big",
                        "f",
                        "d",
                        "dec_small",
                        "dec_38_18",
                        "dec_38_0",
                        "s",
                        "bin",
                        "flag",
                        "day",
                        "ts",
                        "ts_ntz",
                        "arr",
                        "nested_arr",
                        "m",
                        "m_int",
                        "st",
                        "arr_st",
                    ),
                    record,
                )
            )
        assert isinstance(value["dec_38_0"], decimal.Decimal)
        assert value["day"] is None or isinstance(value["day"], dt.date)
        assert value["ts"] is None or value["ts"].tzinfo is not None  # an instant
        assert value["ts_ntz"] is None or value["ts_ntz"].tzinfo is None  # a wall-clock time
        assert value["m"] is None or isinstance(value["m"], dict)  # a MAP arrives as a dict
        assert isinstance(value["m_int"], dict) and isinstance(value["arr_st"][0]["mm"], dict)
        assert value["bin"] is None or isinstance(value["bin"], bytes)
        return record


@pytest.mark.parametrize("record_format", ["tuple", "row"])
def test_every_type_round_trips_through_a_parquet_path(spark, all_types, tmp_path, record_format):
    out = str(tmp_path / "all_types")
    env = new_env(2)
    stream = env.from_spark(all_types, record_format=record_format)
    sink = stream.map(CheckValues(record_format), output_type=stream.get_type()).sink_to_spark(
        out, mode="overwrite", format="parquet"
    )
    env.execute(f"all types -> path ({record_format})")
    assert [c["how"] for c in commits_of(sink)] == ["files"]  # pyarrow's files, moved in
    assert_rows_equal(spark.read.parquet(out), all_types)
    assert not (tmp_path / ".raylink-staging").exists()  # nothing left behind


@pytest.mark.slow
def test_every_type_round_trips_through_a_table_and_appends(spark, all_types):
    table = "all_types_table"
    spark.sql(f"DROP TABLE IF EXISTS {table}")
    for mode in ("overwrite", "append"):
        env = new_env(3)
        stream = env.from_spark(all_types, record_format="dict")
        sink = (
            stream.rebalance()
            .map(CheckValues("dict"), output_type=stream.get_type())
            .sink_to_spark(table=table, mode=mode)
        )
        env.execute(f"all types -> table ({mode})")
        assert [c["how"] for c in commits_of(sink)] == ["files"]
    frame = spark.table(table)
    assert frame.count() == 2 * ROWS  # the append added every row once more
    assert_rows_equal(frame.dropDuplicates(["id"]), all_types)
    assert frame.groupBy("id").count().where("count != 2").count() == 0


def test_every_type_round_trips_through_sparks_own_writes(spark, all_types, tmp_path):
    """Formats and layouts Spark owns (ORC, partitioned Parquet): ONE Spark write of the staged files."""
    orc = str(tmp_path / "orc")
    partitioned = str(tmp_path / "partitioned")
    env = new_env(2)
    stream = env.from_spark(all_types)
    orc_sink = stream.sink_to_spark(orc, mode="overwrite", format="orc")
    partitioned_sink = stream.sink_to_spark(partitioned, mode="overwrite", partition_by="flag")
    # Spark's own Parquet writer refuses dates before 1582 unless told which calendar to write
    calendars = ("spark.sql.parquet.datetimeRebaseModeInWrite", "spark.sql.parquet.int96RebaseModeInWrite")
    for key in calendars:
        spark.conf.set(key, "CORRECTED")
    try:
        env.execute("all types -> Spark writes")
    finally:
        for key in calendars:
            spark.conf.unset(key)
    assert [c["how"] for c in commits_of(orc_sink)] == ["spark"]
    assert [c["how"] for c in commits_of(partitioned_sink)] == ["spark"]
    assert_rows_equal(spark.read.orc(orc), all_types)
    back = spark.read.schema(all_types.schema).parquet(partitioned)  # (Spark infers `flag=true` as a string)
    assert_rows_equal(back.select(*all_types.columns), all_types)  # (the partition column comes last)


def test_a_failed_job_leaves_the_target_as_it_was(spark, tmp_path):
    """Two-phase: the staged files of a failed job are never committed."""
    out = str(tmp_path / "kept")
    spark.range(5).selectExpr("id AS n").write.parquet(out)
    env = new_env(2)
    (
        env.from_collection(list(range(100)) + ["boom"])
        .rebalance()
        .map(lambda n: (int(n),))
        .sink_to_spark(out, schema="n bigint", mode="overwrite")
    )
    with pytest.raises(Exception, match="boom"):
        env.execute("fails")
    assert sorted(r.n for r in spark.read.parquet(out).collect()) == [0, 1, 2, 3, 4]
