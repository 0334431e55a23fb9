"""Result readers of the Spark sink: the DataFrame a result-mode ``sink_to_spark()`` produced in a job.

A Spark sink with no path or table leaves its Arrow IPC blocks *by value* in the job's
accumulators (``spark-sink:<sink id>``, plus ``#rows``, ``#schema``, ``#name``; see
:mod:`.sink`). :func:`get_spark_dataframe` puts those bytes in the object store from
the driver (so the driver owns them, not the TaskExecutors that die with the job) and
turns them into one Spark DataFrame (RayDP's ``ray_dataset_to_spark_dataframe``, the
core of ``ray.data.from_arrow_refs(refs).to_spark(spark)``); RayDP's master actor keeps
the refs alive for the lifetime of the Spark session. :func:`result_sinks` and
:func:`result_rows` read the accumulators without Spark.

Importing this module registers :func:`get_spark_dataframe` as the ``"spark"`` reader
of :class:`raylink.runtime.client.job_result.JobExecutionResult` (its
``get_spark_dataframe``), so the runtime never imports a connector. Driver only; the
functions are stateless except :data:`_KEPT` (refs held for this process when RayDP's
master cannot hold them). No Flink counterpart (Flink's ``CollectSinkFunction`` result
reading plays a similar part for ``executeAndCollect``).
"""

from __future__ import annotations

import json
import uuid
from typing import Any, Dict, List

import ray

from raylink.connectors.spark.arrow import blocks_to_dataframe
from raylink.connectors.spark.session import get_spark, spark_namespace
from raylink.runtime.client.job_result import register_result_reader

#: accumulator keys of a result-mode Spark sink (``spark-sink:<sink id>`` and its ``#rows``,
#: ``#schema``, ``#name``), written by :mod:`.sink`
RESULT_PREFIX = "spark-sink:"


def _keep_alive(spark: Any, refs: List[Any]) -> None:
    """Keep block refs alive as long as the Spark session (RayDP's master holds them,
    as RayDP does for its own conversions); else for the life of this process."""
    try:
        from raydp.spark.ray_cluster_master import RAYDP_SPARK_MASTER_SUFFIX

        holder = ray.get_actor(spark.sparkContext.appName + RAYDP_SPARK_MASTER_SUFFIX, namespace=spark_namespace())
        ray.get(holder.add_objects.remote(uuid.uuid4().hex, list(refs)))
    except Exception:
        _KEPT.append(list(refs))


_KEPT: List[list] = []


def result_sinks(result: Any) -> Dict[str, str]:
    """``{sink_id: sink name}`` of the Spark result sinks in a ``JobExecutionResult``."""
    accumulators = result.accumulators if hasattr(result, "accumulators") else dict(result)
    return {
        key[len(RESULT_PREFIX) : -len("#name")]: value
        for key, value in accumulators.items()
        if key.startswith(RESULT_PREFIX) and key.endswith("#name")
    }


def get_spark_dataframe(result: Any, sink: Any = None, spark: Any = None) -> Any:
    """The Spark DataFrame a result-mode Spark sink produced in the job of ``result``.

    ``sink``: the ``SparkSink``, the ``DataStreamSink`` returned by ``sink_to_spark``,
    a sink name, or ``None`` when the job has exactly one Spark result sink.
    """
    accumulators = result.accumulators
    sinks = result_sinks(result)
    sink_id = None
    if sink is None:
        if len(sinks) != 1:
            raise ValueError(
                f"get_spark_dataframe: the job has {len(sinks)} Spark result sinks "
                f"({sorted(sinks.values())}); say which one"
            )
        sink_id = next(iter(sinks))
    else:
        function = getattr(getattr(getattr(sink, "_transformation", None), "operator", None), "function", None)
        if _is_spark_sink(function):
            sink = function
        if _is_spark_sink(sink):
            sink_id = sink.sink_id
        elif isinstance(sink, str):
            matches = [i for i, n in sinks.items() if n == sink]
            if len(matches) != 1:
                raise ValueError(f"get_spark_dataframe: {len(matches)} Spark result sinks are named {sink!r}")
            sink_id = matches[0]
        if sink_id not in sinks:
            raise ValueError(
                "get_spark_dataframe: that Spark sink produced no result in this job (it writes to a "
                "path/table, belongs to another job, or the job did not finish)"
            )
    key = RESULT_PREFIX + sink_id
    from pyspark.sql.types import StructType

    schema = StructType.fromJson(json.loads(accumulators[key + "#schema"]))
    spark = spark or get_spark()
    refs = [ray.put(block) for block in accumulators.get(key, []) if block]
    if refs:
        _keep_alive(spark, refs)
    return blocks_to_dataframe(spark, refs, schema)


def _is_spark_sink(value: Any) -> bool:
    """A ``SparkSink`` (:mod:`.sink`, which imports this module): it has a ``sink_id``."""
    return isinstance(getattr(value, "sink_id", None), str) and not isinstance(value, str)


def result_rows(result: Any, sink: Any = None) -> int:
    """Rows a Spark result sink produced (without building the DataFrame)."""
    sinks = result_sinks(result)
    ids = list(sinks) if sink is None else [getattr(sink, "sink_id", sink)]
    return sum(result.accumulators.get(RESULT_PREFIX + i + "#rows", 0) for i in ids)


register_result_reader("spark", get_spark_dataframe)

__all__ = ["RESULT_PREFIX", "get_spark_dataframe", "result_rows", "result_sinks"]
