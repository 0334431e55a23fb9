"""Fine-grained resources of slot sharing groups on Ray (Flink's ``ResourceProfile`` of a
``SlotSharingGroup``, FLIP-56/169): a group's profile becomes the Ray resources of the
TaskExecutors that run it, and a request no node can ever hold is found before anything waits.

- :func:`ray_resources`: a ``SlotSharingGroup`` with a profile -> a Ray resource request
  (``CPU``: its CPU cores; ``memory``: task heap + task off-heap + managed memory in bytes;
  the external resource ``GPU``/``gpu`` -> ``GPU``; any other external resource -> a Ray custom
  resource of the same name). A group without a profile has none (the default bundle).
- :func:`assign_with_profiles`: which TaskExecutor runs each subtask when some groups have a
  profile. Flink gives each slot of such a group (subtask i of every vertex of the group) a
  slot of exactly the profile; here each such slot is one TaskExecutor of exactly the profile.
  The other groups are placed as without profiles (:func:`assign_task_executors`).
- :func:`placement_verdict` (:func:`unsatisfiable`, :func:`autoscaler_could_add`): does a
  request fit one node (a Ray bundle never spans nodes), of those alive or of the node types
  Ray's autoscaler may start; when the autoscaler runs but does not say which node types it
  has, a request no node holds waits for it (bounded) instead of failing.

Pure functions over plain values (no Ray here: the Ray side passes ``ray.nodes()``'s per-node
resources and the autoscaler's node types in), so thread-safe.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any, Optional

from raylink.errors import RaylinkError
from raylink.runtime.job.deployment import assign_task_executors

#: Ray's resource name of GPUs; Flink's external resource of GPUs is conventionally ``gpu``
GPU = "GPU"


class UnsatisfiableResourcesError(RaylinkError, RuntimeError):
    """A slot sharing group asks for resources no node of the cluster has (nor any node type
    its autoscaler may add): the job fails at once instead of waiting for them."""


def ray_resources(group: Any) -> dict[str, float]:
    """The Ray resource request of one TaskExecutor of ``group`` (a ``SlotSharingGroup``); ``{}``
    when it has no resource profile. Zero amounts are left out (Ray rejects none, but a zero
    request says nothing)."""
    if group is None or not group.has_resources():
        return {}
    request: dict[str, float] = {"CPU": float(group.get_cpu_cores())}
    memory = sum(
        m.get_bytes()
        for m in (group.get_task_heap_memory(), group.get_task_off_heap_memory(), group.get_managed_memory())
        if m is not None
    )
    if memory > 0:
        request["memory"] = int(memory)
    for name, amount in sorted(group.get_external_resources().items()):
        key = GPU if name.lower() == "gpu" else name
        if amount > 0:
            request[key] = request.get(key, 0.0) + float(amount)
    return request


@dataclass(frozen=True)
class ProfiledPlacement:
    """Subtask -> TaskExecutor index, the number of TaskExecutors, and the slot sharing group of
    each executor that runs a profiled group (``None``: a default-bundle executor)."""

    executor_of: dict[tuple[str, int], int]
    count: int
    group_of_executor: list[Optional[str]]
    default_view: Any  # the part of the graph in groups without a profile (``job_vertices``)


def assign_with_profiles(
    graph: Any, placement_mode: str, slots_per_executor: int, cores: int, profiled: set[str]
) -> ProfiledPlacement:
    """Executors ``0..n-1`` run the groups without a profile, placed by
    :func:`assign_task_executors` as if the job had only them; then one executor per slot of
    each profiled group (subtask ``i`` of every vertex of the group shares executor ``i`` of it)."""
    default_vertices = [ejv for ejv in graph.job_vertices if ejv.job_vertex.slot_sharing_group not in profiled]
    view = SimpleNamespace(job_vertices=default_vertices)
    executor_of: dict[tuple[str, int], int] = {}
    count = 0
    if default_vertices:
        executor_of, count = assign_task_executors(view, placement_mode, slots_per_executor, cores)
    groups: list[Optional[str]] = [None] * count
    slot_executor: dict[tuple[str, int], int] = {}
    for ejv in graph.job_vertices:
        group = ejv.job_vertex.slot_sharing_group
        if group not in profiled:
            continue
        for ev in ejv.vertices:
            slot = (group, ev.subtask_index)
            if slot not in slot_executor:
                slot_executor[slot] = count
                groups.append(group)
                count += 1
            executor_of[(ejv.id, ev.subtask_index)] = slot_executor[slot]
    return ProfiledPlacement(executor_of, count, groups, view)


def _fits(request: dict[str, float], node: dict[str, float]) -> bool:
    return all(node.get(name, 0.0) + 1e-9 >= amount for name, amount in request.items())


def unsatisfiable(request: dict[str, float], nodes: list[dict[str, float]]) -> Optional[str]:
    """Why no node of ``nodes`` (each a node's total resources) can hold ``request``, or None
    when one can: the resources no node has at all, else those asked beyond the most any node
    has, else that no single node has them all together."""
    if any(_fits(request, node) for node in nodes):
        return None
    absent = [name for name in request if not any(node.get(name, 0.0) > 0 for node in nodes)]
    if absent:
        return "; ".join(f"no node has resource {name!r}" for name in absent)
    beyond = []
    for name, amount in request.items():
        most = max(node.get(name, 0.0) for node in nodes)
        if most + 1e-9 < amount:
            shown = _amount(name, most)
            beyond.append(f"{name}={_amount(name, amount)} asked, at most {shown} on one node")
    if beyond:
        return "; ".join(beyond)
    return f"no single node has {_describe(request)} together"


def autoscaler_could_add(request: dict[str, float], node_types: list[dict[str, float]]) -> bool:
    """Whether one of the node types Ray's autoscaler may still start (their resources) holds it;
    a node type that declares no ``memory`` gets what its machine has, so any amount may fit."""
    return any(
        _fits({k: v for k, v in request.items() if k != "memory" or "memory" in node}, node) for node in node_types
    )


@dataclass(frozen=True)
class Verdict:
    """Whether a request can be placed: ``reason`` why no node ever will (None: one can, or the
    autoscaler may add one), ``waits_for_autoscaler``: no node holds it now, an autoscaler may."""

    reason: Optional[str]
    waits_for_autoscaler: bool


def placement_verdict(
    request: dict[str, float], nodes: list[dict[str, float]], autoscaler: Optional[list[dict[str, float]]]
) -> Verdict:
    """Can ``request`` be placed on ``nodes`` (each node's total resources)? ``autoscaler``: None
    when no autoscaler runs, else the resources of the node types it may still start -- empty
    when it runs but does not publish them (then any request may wait for it)."""
    reason = unsatisfiable(request, nodes)
    if reason is None:
        return Verdict(None, False)
    if autoscaler is not None and (not autoscaler or autoscaler_could_add(request, autoscaler)):
        return Verdict(None, True)
    if autoscaler is None:
        return Verdict(f"{reason}; no Ray autoscaler runs", False)
    return Verdict(f"{reason}; no node type of Ray's autoscaler has them either", False)


def _amount(name: str, value: float) -> str:
    if name == "memory" or name.endswith("memory"):
        return f"{int(value) >> 20} MiB"
    return f"{value:g}"


def _describe(request: dict[str, float]) -> str:
    return ", ".join(f"{name}={_amount(name, amount)}" for name, amount in request.items())


def describe_request(request: dict[str, float]) -> str:
    """``CPU=2, memory=512 MiB, GPU=1`` (for messages and the progress line)."""
    return _describe(request)


__all__ = [
    "GPU",
    "ProfiledPlacement",
    "Verdict",
    "UnsatisfiableResourcesError",
    "assign_with_profiles",
    "autoscaler_could_add",
    "describe_request",
    "placement_verdict",
    "ray_resources",
    "unsatisfiable",
]
