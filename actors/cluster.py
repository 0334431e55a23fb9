"""The driver's handle on the Ray cluster for scripts: connect, shut down, ship a module, find TaskExecutors.

Benchmarks, examples and demo scripts run jobs on Ray but never import Ray
themselves (Ray lives in ``actors/``); they use these few helpers instead:

* :func:`ensure_ray` / :func:`shutdown_ray`: connect to ``RAY_ADDRESS`` (else start
  or reuse a local Ray, with raylink's system config), and disconnect; :func:`connect_to`
  an existing cluster, :func:`ray_connected`, :func:`gcs_address` (the CLI's admin commands);
* :func:`available_cpus`: the cluster's CPUs (0 when not connected);
* :func:`release_warm_executors`: end the TaskExecutors finished jobs left warm for the next;
* :func:`ship_by_value`: pickle a module's functions by value (both ``cloudpickle``
  and Ray's vendored copy), for a script whose module Ray workers cannot import;
* :func:`task_executor_pids`: the process ids of a running job's TaskExecutor actors
  (what Flink's chaos tests kill to exercise failover).

Driver-side only; the functions are as thread-safe as the Ray calls behind them.
No Flink counterpart (Flink's ``MiniClusterResource`` plays this part in its tests).
"""

from __future__ import annotations

from types import ModuleType
from typing import Any, Optional

import ray

from raylink.actors.local_ray import on_loopback, single_node_ray
from raylink.actors.ray_executor import ensure_ray, init_ray


def ray_connected() -> bool:
    """True when this process is connected to a Ray cluster."""
    return ray.is_initialized()


def connect_to(address: str, node_ip_address: Optional[str] = None) -> None:
    """Connect this process to the Ray cluster at ``address`` (``auto``: the one on this machine),
    without Ray's log lines; the exception ``ray.init`` raises when it cannot. ``node_ip_address``
    names this host's Ray node when several nodes share the machine's process table (Ray would
    otherwise attach a driver to the head's raylet if it runs here, whatever its network)."""
    with single_node_ray(on_loopback(address)):  # a Ray at 127.0.0.1 is reached there (Ray would use the node's IP)
        ray.init(address=address, log_to_driver=False, configure_logging=False, _node_ip_address=node_ip_address)


def release_warm_executors() -> None:
    """End this program's warm TaskExecutors now (those its finished jobs left for its next
    job, ``resourcemanager.taskmanager-timeout``): the next job starts its own processes."""
    from raylink.actors.warm_executors import WARM_EXECUTORS

    if ray.is_initialized():
        WARM_EXECUTORS.release()


def gcs_address() -> str:
    """The address of the connected Ray cluster's GCS (``HOST:PORT``)."""
    return ray.get_runtime_context().gcs_address


def shutdown_ray() -> None:
    """Disconnect from Ray (stopping a local Ray this process started); no-op when not connected."""
    if ray.is_initialized():
        ray.shutdown()


def available_cpus() -> float:
    """CPUs of the connected Ray cluster (0.0 when not connected)."""
    if not ray.is_initialized():
        return 0.0
    return float(ray.cluster_resources().get("CPU", 0.0))


def alive_nodes() -> int:
    """How many nodes the connected Ray cluster counts alive (0 when not connected)."""
    if not ray.is_initialized():
        return 0
    return sum(1 for node in ray.nodes() if node.get("Alive"))


def ship_by_value(module: ModuleType) -> None:
    """Pickle ``module``'s functions and classes by value (Ray workers need not import it)."""
    import cloudpickle
    import ray.cloudpickle

    for pickler in (cloudpickle, ray.cloudpickle):
        pickler.register_pickle_by_value(module)


def task_executor_pids(client: Any) -> list[int]:
    """Process ids of the TaskExecutor actors of a running job (a Ray ``JobClient``), in deployment order."""
    handles = list(getattr(client, "handles", {}).values())
    if not handles:
        raise ValueError(
            "task_executor_pids: the job has no TaskExecutor actors (not running on Ray, not deployed yet, or ended)"
        )
    return [location["pid"] for location in ray.get([h.location.remote() for h in handles])]


__all__ = [
    "alive_nodes",
    "available_cpus",
    "connect_to",
    "ensure_ray",
    "gcs_address",
    "init_ray",
    "ray_connected",
    "release_warm_executors",
    "ship_by_value",
    "shutdown_ray",
    "task_executor_pids",
]
