"""The session cluster's warm Spark session: one Spark-on-Ray application that jobs share.

Starting Spark on Ray takes ~10 s (the driver JVM, RayDP's master and its executors), more
than a small job. ``raylink cluster start --spark`` therefore keeps one warm, as Flink's
session mode keeps its TaskManagers: a detached named actor (``SharedSparkActor``,
``raylink-spark`` in the session cluster's namespace) starts it with
:func:`~raylink.connectors.spark.session.get_spark` in its own process and keeps it. A
driver's ``get_spark()`` then **attaches** to it instead of starting its own (:func:`attach`):
pyspark connects to the actor's driver JVM through its py4j gateway (what pyspark does with
``PYSPARK_GATEWAY_PORT`` in a notebook), wraps the JVM's running ``SparkContext`` and default
``SparkSession``, and so sees the same catalog, tables and executors as every other job.
Leaving (:func:`detach`, from ``stop()``) closes the connection and leaves the session running.
This module is the drivers' side (find, info, attach, detach); the actor and starting or
stopping the session are in :mod:`raylink.connectors.spark.shared_session_actor`.

A program's own ``spark.stop()`` leaves the session too (it does not stop it for everyone).
Limits, said where they apply: the gateway accepts connections from its own node only, so a
driver on another node gets a clear error (and ``raylink.spark.use-session-cluster=false``
starts a session of its own); should the JVM's context be stopped anyway (through the JVM),
``raylink cluster status`` says so and ``get_spark()`` refuses to attach.

Thread-safety: :func:`attach`/:func:`detach` are called under ``session.py``'s lock.
"""

from __future__ import annotations

import os
import sys
from typing import Any, Optional

import ray

from raylink.actors.session_cluster import SESSION_NAMESPACE
from raylink.connectors.spark.errors import SparkStartError

#: the actor's name; its namespace is the session cluster's
SHARED_SPARK_NAME = "raylink-spark"
SHARED_SPARK_NAMESPACE = SESSION_NAMESPACE
INFO_TIMEOUT_S = 30.0


# -- driver side -------------------------------------------------------------------------------------
def find_shared_spark() -> Optional[Any]:
    """The session cluster's Spark holder on the connected Ray, else None."""
    try:
        return ray.get_actor(SHARED_SPARK_NAME, namespace=SHARED_SPARK_NAMESPACE)
    except ValueError:
        return None


def shared_spark_info(holder: Optional[Any] = None) -> Optional[dict]:
    """The warm Spark session's :meth:`~SharedSparkActor.info`, else None (none is running)."""
    holder = holder or find_shared_spark()
    return None if holder is None else ray.get(holder.info.remote(), timeout=INFO_TIMEOUT_S)


def attach(info: dict) -> Any:
    """(driver, under session.py's lock) A ``SparkSession`` of this process on the shared
    session's driver JVM; refuses with ``SparkStartError`` what cannot work."""
    from pyspark import SparkConf, SparkContext
    from pyspark.java_gateway import launch_gateway
    from pyspark.sql import SparkSession

    if info.get("stopped"):
        raise SparkStartError(
            f"the session cluster's Spark session ({info.get('applicationId')}) was stopped; "
            "restart it: raylink cluster stop, then raylink cluster start --spark"
        )
    here = ray.util.get_node_ip_address()
    if info["nodeIp"] != here:
        raise SparkStartError(
            f"the session cluster's Spark session runs its driver on node {info['nodeIp']}, and its "
            f"gateway accepts connections from that node only (this driver is on {here}): run the "
            "program there, or set raylink.spark.use-session-cluster=false to start a Spark session of its own"
        )
    if SparkContext._active_spark_context is not None or SparkContext._gateway is not None:
        raise SparkStartError(
            "this process already runs a Spark driver of its own; it cannot also attach to the "
            "session cluster's Spark session (set raylink.spark.use-session-cluster=false)"
        )
    saved = {key: os.environ.get(key) for key in ("PYSPARK_GATEWAY_PORT", "PYSPARK_GATEWAY_SECRET")}
    os.environ["PYSPARK_GATEWAY_PORT"] = str(info["gatewayPort"])
    os.environ["PYSPARK_GATEWAY_SECRET"] = info["gatewaySecret"]
    try:
        gateway = launch_gateway()  # connects to the running JVM (pyspark's own imports included)
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    jvm = gateway.jvm
    jsc = jvm.org.apache.spark.api.java.JavaSparkContext.fromSparkContext(
        jvm.org.apache.spark.SparkContext.getOrCreate()
    )
    sc = SparkContext(conf=SparkConf(_jconf=jsc.getConf()), gateway=gateway, jsc=jsc)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    return SparkSession(sc)  # the JVM's default session: the shared catalog (session.py makes its
    # stop() leave the shared session instead of stopping it for every other program)


def detach(spark: Any) -> None:
    """(driver) Leave the shared session running: close this process's side of it only."""
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    sc = spark.sparkContext
    with SparkContext._lock:
        server = getattr(sc, "_accumulatorServer", None)
        if server is not None:
            server.shutdown()
            server.server_close()
            sc._accumulatorServer = None
        SparkContext._active_spark_context = None
        gateway, SparkContext._gateway, SparkContext._jvm = SparkContext._gateway, None, None
    SparkSession._instantiatedSession = None
    SparkSession._activeSession = None
    if gateway is not None:
        try:
            gateway.close()
        except Exception:  # noqa: BLE001 - the JVM went away
            pass


__all__ = [
    "SHARED_SPARK_NAME",
    "SHARED_SPARK_NAMESPACE",
    "attach",
    "detach",
    "find_shared_spark",
    "shared_spark_info",
]
