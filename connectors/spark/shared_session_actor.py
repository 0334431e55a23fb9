"""The session cluster's warm Spark session, on its keeper's side: the detached actor that starts it
and holds it (:class:`SharedSparkActor`, ``raylink-spark`` in the session cluster's namespace), and
:func:`start_shared_spark` / :func:`stop_shared_spark` (``raylink cluster start --spark`` / ``stop``).

Drivers attach to it through :mod:`raylink.connectors.spark.shared_session` (see there for how, and
the limits). Thread-safety: the actor runs one call at a time.
"""

from __future__ import annotations

import os
import time
from typing import Any, Dict, Optional

import ray

from raylink.connectors.spark.session import get_spark, stop, wait_driver_connected
from raylink.connectors.spark.shared_session import (
    SHARED_SPARK_NAME,
    SHARED_SPARK_NAMESPACE,
    find_shared_spark,
    shared_spark_info,
)
from raylink.core.configuration import Configuration
from raylink.core.options import SparkConnectorOptions


@ray.remote(num_cpus=0)
class SharedSparkActor:
    """Holds the session cluster's Spark session in its process (see the module docstring)."""

    def __init__(self) -> None:
        self._spark: Any = None
        self._started_at = 0.0
        self._start_s = 0.0

    def start(self, options: Dict[str, Any]) -> dict:
        """Start Spark on Ray here (``get_spark`` keywords) and wait until its driver JVM is
        connected to Ray (what ``from_spark`` needs); returns :meth:`info`."""
        started = time.perf_counter()
        configuration = Configuration()
        configuration.set(SparkConnectorOptions.USE_SESSION_CLUSTER, False)  # this is it
        self._spark = get_spark(configuration=configuration, **options)
        wait_driver_connected()
        self._start_s = time.perf_counter() - started
        self._started_at = time.time()
        return self.info()

    def info(self) -> dict:
        """Where the driver JVM's gateway listens, and the application's figures."""
        from pyspark import SparkContext

        if self._spark is None:
            return {"running": False}
        sc = self._spark.sparkContext
        gateway = SparkContext._gateway.gateway_parameters
        return {
            "running": True,
            "stopped": bool(sc._jsc.sc().isStopped()),
            "nodeIp": ray.util.get_node_ip_address(),
            "gatewayPort": gateway.port,
            "gatewaySecret": gateway.auth_token,
            "namespace": ray.get_runtime_context().namespace,  # RayDP's actors live in it
            "applicationId": sc.applicationId,
            "appName": sc.appName,
            "master": sc.master,
            "warehouse": self._spark.conf.get("spark.sql.warehouse.dir"),
            "executors": int(sc.getConf().get("spark.executor.instances", "0") or 0),
            "startS": round(self._start_s, 2),
            "upS": round(time.time() - self._started_at, 1),
            "driverPid": os.getpid(),
        }

    def stop(self) -> None:
        """Stop the Spark session (its executors and RayDP's master) and the driver JVM."""
        if self._spark is not None:
            self._spark = None
            stop(shutdown_ray=False)


def start_shared_spark(options: Optional[Dict[str, Any]] = None) -> dict:
    """Start the warm Spark session (a detached named actor); returns its :meth:`~SharedSparkActor.info`.
    ``RuntimeError`` when one is already running or Spark fails to start (the actor is then killed)."""
    if find_shared_spark() is not None:
        raise RuntimeError(
            f"a shared Spark session is already running (actor {SHARED_SPARK_NAME!r} in namespace "
            f"{SHARED_SPARK_NAMESPACE!r})"
        )
    holder = SharedSparkActor.options(
        name=SHARED_SPARK_NAME, namespace=SHARED_SPARK_NAMESPACE, lifetime="detached"
    ).remote()
    try:
        return ray.get(holder.start.remote(dict(options or {})))
    except BaseException as exc:
        ray.kill(holder, no_restart=True)
        cause = getattr(exc, "cause", None) or exc
        raise RuntimeError(f"the shared Spark session failed to start: {cause}") from None


def stop_shared_spark() -> Optional[dict]:
    """Stop the warm Spark session and kill its actor; returns its last info (None: none ran)."""
    holder = find_shared_spark()
    if holder is None:
        return None
    try:
        info = shared_spark_info(holder)
        ray.get(holder.stop.remote(), timeout=120)
    except Exception:  # noqa: BLE001 - a broken holder is killed all the same
        info = {"running": False}
    ray.kill(holder, no_restart=True)
    return info


__all__ = ["SharedSparkActor", "start_shared_spark", "stop_shared_spark"]
