"""The Spark bridge (RayDP): Spark DataFrames and tables in and out of raylink jobs.

Public API::

    from raylink.connectors.spark import get_spark, stop, get_spark_dataframe, SparkSink, SparkSource

    spark = get_spark()                       # the user's raydp session, or one raylink starts
    stream = env.from_spark(df)               # bounded source over the DataFrame's Ray blocks
    stream = env.from_spark_table("db.t", poll_interval=1.0)   # unbounded: new Parquet files
    stream.sink_to_spark()                    # -> get_spark_dataframe(env.execute())
    stream.sink_to_spark(table="t", mode="overwrite")          # one Spark write at the end
    stream.sink_to_spark(path="/x", flush_interval=5.0)        # one append per interval
    stop()                                    # release what raylink started

See :mod:`.session`, :mod:`.source`, :mod:`.sink` and :mod:`.bridge`.
"""

from raylink.connectors.spark.bridge import CommitError
from raylink.connectors.spark.session import SparkStartError, active_spark, get_spark, stop
from raylink.connectors.spark.sink import (
    SparkSchemaError,
    SparkSink,
    get_spark_dataframe,
    result_rows,
    result_sinks,
)
from raylink.connectors.spark.source import SparkSource
from raylink.connectors.spark.types import SparkRowType

__all__ = [
    "CommitError",
    "SparkRowType",
    "SparkSchemaError",
    "SparkSink",
    "SparkSource",
    "SparkStartError",
    "active_spark",
    "get_spark",
    "get_spark_dataframe",
    "result_rows",
    "result_sinks",
    "stop",
]
