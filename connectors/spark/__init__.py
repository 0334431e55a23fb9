"""raylink.connectors.spark: the Spark bridge (RayDP), Spark DataFrames and tables in and out of raylink jobs.

Public API::

    from raylink.connectors.spark import get_spark, stop, get_spark_dataframe, SparkSink, SparkSource

    spark = get_spark()                       # the user's raydp session, or one raylink starts
    stream = env.from_spark(df)               # bounded source over the DataFrame's Ray blocks
    stream = env.from_spark_table("db.t", poll_interval=1.0)   # unbounded: new Parquet files
    stream.sink_to_spark()                    # -> get_spark_dataframe(env.execute())
    stream.sink_to_spark(table="t", mode="overwrite")          # one Spark write at the end
    stream.sink_to_spark(path="/x", flush_interval=5.0)        # one append per interval
    stop()                                    # release what raylink started

Holds, one role per module: :mod:`.session` (Spark on Ray), :mod:`.shared_session` (attaching
to the session cluster's warm Spark session) and :mod:`.shared_session_actor` (the actor keeping
it), :mod:`.bridge` (the driver's bridge actor and commit thread), :mod:`.errors` (the start-up
error, Java messages), :mod:`.types` (schemas between Spark, Arrow and streams),
:mod:`.identifiers` (table names quoted for SQL), :mod:`.files` (where files go: the filesystem
of a location, staging, commits), :mod:`.arrow` (records ⇄ Arrow, blocks → Spark DataFrame),
:mod:`.sink` (``sink_to_spark``), :mod:`.results` (the result DataFrame of a sink),
:mod:`.dataframe_source` (``from_spark``) and :mod:`.table_source` (``from_spark_table``).

Needs the ``raylink[spark]`` extra (``pyspark``, ``raydp``): importing this package
without it raises :class:`raylink.extras.MissingExtraError` naming the extra.

May import: Ray, pyspark, raydp, and ``actors`` (to connect to Ray) and every floor below it
(``runtime``, ``operators``, ``state``, ``shuffle``, ``graph``, ``core``); never ``api``. Nothing in ``runtime``/``actors`` imports it (the
result reader registers itself with :mod:`raylink.runtime.client.job_result`); the DataStream
API (``env.from_spark``, ``stream.sink_to_spark``) imports it lazily when called.
"""

from raylink.extras import require_extra

require_extra("spark", "the Spark bridge")

from raylink.connectors.spark.arrow import SparkSchemaError  # noqa: E402
from raylink.connectors.spark.bridge import CommitError  # noqa: E402
from raylink.connectors.spark.dataframe_source import SparkSource  # noqa: E402
from raylink.connectors.spark.results import get_spark_dataframe, result_rows, result_sinks  # noqa: E402
from raylink.connectors.spark.session import SparkStartError, active_spark, get_spark, stop  # noqa: E402
from raylink.connectors.spark.sink import SparkSink  # noqa: E402
from raylink.connectors.spark.types import SparkRowType  # noqa: E402

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
