"""A job as Flink's REST API shows it: the JSON bodies of the WebMonitorEndpoint's handlers.

Each function takes a JobClient of this process (a ``JobMasterBase``: the per-job driver's
``RayJobClient``, a Dispatcher's, or a ``LocalJobClient``) and a
:class:`MetricsSnapshot` of its per-subtask metrics, and returns the body Flink's handler
answers with, field names as Flink spells them (``flink-runtime``'s ``rest/messages``):

=====================================  ===========================================
``multiple_jobs_details``              ``MultipleJobsDetails`` (``/jobs/overview``)
``job_details``                        ``JobDetailsInfo`` (``/jobs/:jobid``)
``job_plan``                           ``JobPlanInfo`` (``/jobs/:jobid/plan``)
``vertex_details``                     ``JobVertexDetailsInfo``
``vertex_back_pressure``               ``JobVertexBackPressureInfo``
``vertex_watermarks``                  ``/vertices/:vertexid/watermarks``
``aggregated_subtask_metrics``         ``AggregatedSubtaskMetricsHandler``
``checkpointing_statistics``           ``CheckpointingStatistics``
``job_exceptions``                     ``JobExceptionsInfoWithHistory``
``job_metrics``                        ``JobMetricsHandler`` (``[{"id", "value"}]``)
``cluster_overview`` / ``task_managers``  ``ClusterOverviewWithVersion`` / ``TaskManagersInfo``
=====================================  ===========================================

Values come from the client's ``get_metrics()`` (per subtask: ``numRecordsIn``,
``busyTimeMsPerSecond``, ...), ``get_checkpoint_stats()``, its ExecutionGraph and its
failure history; per vertex, counts are summed over subtasks and times take the maximum
(:func:`raylink.runtime.metrics.aggregate_by_vertex`, what the CLI shows). Back pressure:
Flink's levels (ratio <= 0.10 ok, <= 0.50 low, else high), in lower case as Flink's JSON.

Pure functions over what they are given: thread-safe as far as the client's getters are.
"""

from __future__ import annotations

import time
import traceback
from dataclasses import dataclass, field
from typing import Any, Iterable, Optional

from raylink.core.job_status import JobStatus
from raylink.runtime.execution_state import ExecutionState
from raylink.runtime.metrics import MAXED, SUMMED, back_pressure_status

#: what the REST API says it is (Flink's ``flink-version``)
RAYLINK_VERSION = "raylink-0.1.0"
#: Flink's ``ExecutionState`` names, as the ``tasks`` / ``status-counts`` objects key them
TASK_STATES = tuple(state.value for state in ExecutionState)


@dataclass
class MetricsSnapshot:
    """One reading of a job's per-subtask metrics, grouped by JobVertex id."""

    subtasks: list[dict]
    taken_ms: int = field(default_factory=lambda: int(time.time() * 1000))

    def of_vertex(self, vertex_id: str) -> list[dict]:
        return sorted((m for m in self.subtasks if m.get("vertex") == vertex_id), key=lambda m: m.get("subtask", 0))


# -- times ------------------------------------------------------------------------------------------
def _wall_ms(client: Any, perf_attr: str) -> int:
    """A ``time.perf_counter()`` reading the JobMaster kept (``_started`` / ``_ended``) as epoch ms; -1 if none."""
    value = getattr(client, perf_attr, None)
    if value is None:
        return -1
    return int(time.time() * 1000 - (time.perf_counter() - value) * 1000)


def job_times(client: Any) -> tuple[int, int, int]:
    """(start-time, end-time, duration) in ms as Flink gives them (end -1 while running)."""
    start = _wall_ms(client, "_started")
    status = JobStatus(client.get_job_status())
    end = _wall_ms(client, "_ended") if status.is_globally_terminal_state() else -1
    duration = (end if end >= 0 else int(time.time() * 1000)) - start
    return start, end, max(0, duration)


# -- vertices ----------------------------------------------------------------------------------------
def _job_vertices(client: Any) -> list[Any]:
    return list(client.execution_graph.job_vertices)


def _task_counts(states: Iterable[str]) -> dict:
    counts = {state: 0 for state in TASK_STATES}
    for state in states:
        counts[str(state)] = counts.get(str(state), 0) + 1
    return counts


def _vertex_state(states: list[str]) -> str:
    """Flink's ``ExecutionJobVertex.getAggregateJobVertexState``, in short."""
    present = set(states)
    if present and present == {"FINISHED"}:
        return "FINISHED"
    for state in ("FAILED", "CANCELING", "CANCELED", "RUNNING", "INITIALIZING", "DEPLOYING", "SCHEDULED"):
        if state in present:
            return state
    return "FINISHED" if "FINISHED" in present else "CREATED"


def vertex_metrics(subtasks: list[dict]) -> dict:
    """Flink's ``IOMetricsInfo`` of a JobVertex (``vertices[].metrics``): counts summed over
    its subtasks, accumulated times the maximum; the ``*-complete`` flags true once every
    subtask reported."""
    total = {key: sum(int(m.get(key, 0) or 0) for m in subtasks) for key in SUMMED}
    complete = bool(subtasks) and all(m.get("state") in ("FINISHED", "CANCELED", "FAILED") for m in subtasks)

    def longest(key: str) -> int:
        return int(max((m.get(key, 0.0) or 0.0 for m in subtasks), default=0.0))

    return {
        "read-bytes": total["numBytesIn"],
        "read-bytes-complete": complete,
        "write-bytes": total["numBytesOut"],
        "write-bytes-complete": complete,
        "read-records": total["numRecordsIn"],
        "read-records-complete": complete,
        "write-records": total["numRecordsOut"],
        "write-records-complete": complete,
        "accumulated-backpressured-time": longest("accumulateBackPressuredTimeMs"),
        "accumulated-idle-time": longest("accumulateIdleTimeMs"),
        "accumulated-busy-time": longest("accumulateBusyTimeMs"),
    }


def _vertex_info(ejv: Any, snapshot: MetricsSnapshot, times: tuple[int, int, int]) -> dict:
    states = [str(ev.current_execution.state) for ev in ejv.vertices]
    start, end, duration = times
    return {
        "id": ejv.id,
        "name": ejv.name,
        "maxParallelism": ejv.max_parallelism,
        "parallelism": ejv.parallelism,
        "status": _vertex_state(states),
        "start-time": start,
        "end-time": end,
        "duration": duration,
        "tasks": _task_counts(states),
        "metrics": vertex_metrics(snapshot.of_vertex(ejv.id)),
    }


def job_plan(client: Any) -> dict:
    """Flink's ``JobPlanInfo``: ``{"plan": {"jid", "name", "type", "nodes": [...]}}``, a node
    per JobVertex with its inputs (``ship_strategy``: the partitioner, e.g. FORWARD, HASH,
    REBALANCE; ``exchange``: pipelined_bounded / blocking)."""
    nodes = []
    for ejv in _job_vertices(client):
        vertex = ejv.job_vertex
        inputs = [
            {
                "num": index,
                "id": edge.source.producer.id,
                "ship_strategy": str(edge.ship_strategy).upper(),
                "exchange": str(edge.source.result_partition_type).lower(),
            }
            for index, edge in enumerate(vertex.inputs)
        ]
        node = {
            "id": vertex.id,
            "parallelism": vertex.parallelism,
            "operator": "",
            "operator_strategy": "",
            "description": vertex.name,
            "optimizer_properties": {},
        }
        if inputs:
            node["inputs"] = inputs
        nodes.append(node)
    graph = client.execution_graph.job_graph
    return {"plan": {"jid": client.job_id, "name": client.job_name, "type": graph.job_type, "nodes": nodes}}


def job_details(client: Any, snapshot: MetricsSnapshot) -> dict:
    """Flink's ``JobDetailsInfo`` (``/jobs/:jobid``)."""
    times = job_times(client)
    start, end, duration = times
    vertices = [_vertex_info(ejv, snapshot, times) for ejv in _job_vertices(client)]
    status = str(client.get_job_status())
    counts = _task_counts(v["status"] for v in vertices)
    return {
        "jid": client.job_id,
        "name": client.job_name,
        "isStoppable": False,
        "state": status,
        "job-type": client.execution_graph.job_graph.job_type,
        "start-time": start,
        "end-time": end,
        "duration": duration,
        "maxParallelism": max((v["maxParallelism"] for v in vertices), default=-1),
        "now": int(time.time() * 1000),
        "timestamps": {status: int(time.time() * 1000) if end < 0 else end, "CREATED": start, "RUNNING": start},
        "vertices": vertices,
        "status-counts": counts,
        "plan": job_plan(client)["plan"],
        "numRestarts": int(getattr(client, "num_restarts", 0)),  # Flink's job metric, shown in the job list
    }


def job_overview(client: Any) -> dict:
    """Flink's ``JobDetails`` (one entry of ``/jobs/overview``)."""
    start, end, duration = job_times(client)
    states = [str(ev.current_execution.state) for ev in client.execution_graph.all_vertices()]
    return {
        "jid": client.job_id,
        "name": client.job_name,
        "state": str(client.get_job_status()),
        "start-time": start,
        "end-time": end,
        "duration": duration,
        "last-modification": end if end >= 0 else start,
        "tasks": {"total": len(states), **{s.lower(): n for s, n in _task_counts(states).items()}},
        "numRestarts": int(getattr(client, "num_restarts", 0)),
    }


def multiple_jobs_details(clients: Iterable[Any]) -> dict:
    """Flink's ``MultipleJobsDetails``: ``{"jobs": [JobDetails, ...]}``, the newest first."""
    jobs = [job_overview(c) for c in clients]
    return {"jobs": sorted(jobs, key=lambda j: j["start-time"], reverse=True)}


def find_vertex(client: Any, vertex_id: str) -> Optional[Any]:
    for ejv in _job_vertices(client):
        if ejv.id == vertex_id:
            return ejv
    return None


def _endpoint(location: Optional[dict]) -> str:
    """Where a TaskExecutor runs: ``<Ray node id prefix>:<pid>``, ``localhost`` in this process."""
    if not location:
        return "localhost"
    return f"{str(location.get('node_id', ''))[:12]}:{location.get('pid', '')}"


def _subtask_metrics(metrics: Optional[dict]) -> dict:
    return vertex_metrics([metrics] if metrics else [])


def vertex_details(client: Any, ejv: Any, snapshot: MetricsSnapshot) -> dict:
    """Flink's ``JobVertexDetailsInfo``: the vertex and one entry per subtask."""
    start, end, duration = job_times(client)
    by_index = {m.get("subtask"): m for m in snapshot.of_vertex(ejv.id)}
    locations = getattr(client, "locations", {}) or {}
    subtasks = []
    for ev in ejv.vertices:
        execution = ev.current_execution
        location = execution.assigned_location or ""
        host = _endpoint(locations.get(location))
        subtasks.append(
            {
                "subtask": ev.subtask_index,
                "status": str(execution.state),
                "attempt": execution.attempt_number,
                "endpoint": host,
                "start-time": start,
                "end-time": end,
                "duration": duration,
                "metrics": _subtask_metrics(by_index.get(ev.subtask_index)),
                "taskmanager-id": location,
            }
        )
    return {
        "id": ejv.id,
        "name": ejv.name,
        "maxParallelism": ejv.max_parallelism,
        "parallelism": ejv.parallelism,
        "now": int(time.time() * 1000),
        "subtasks": subtasks,
    }


def _level(back_pressured_ms_per_second: float) -> str:
    return back_pressure_status(back_pressured_ms_per_second).lower()


def vertex_back_pressure(ejv: Any, snapshot: MetricsSnapshot) -> dict:
    """Flink's ``JobVertexBackPressureInfo``: the vertex's level (its most back-pressured
    subtask's) and per subtask the back-pressured, idle and busy ratios of the last second."""
    by_index = {m.get("subtask"): m for m in snapshot.of_vertex(ejv.id)}
    subtasks = []
    for ev in ejv.vertices:
        m = by_index.get(ev.subtask_index) or {}
        back = float(m.get("backPressuredTimeMsPerSecond", 0.0) or 0.0)
        subtasks.append(
            {
                "subtask": ev.subtask_index,
                "attempt-number": ev.current_execution.attempt_number,
                "backpressure-level": _level(back),
                "ratio": round(back / 1000.0, 3),
                "idleRatio": round(float(m.get("idleTimeMsPerSecond", 0.0) or 0.0) / 1000.0, 3),
                "busyRatio": round(float(m.get("busyTimeMsPerSecond", 0.0) or 0.0) / 1000.0, 3),
            }
        )
    worst = max((s["ratio"] for s in subtasks), default=0.0)
    return {
        "status": "ok",
        "backpressure-level": _level(worst * 1000.0),
        "end-timestamp": snapshot.taken_ms,
        "subtasks": subtasks,
    }


def vertex_watermarks(ejv: Any, snapshot: MetricsSnapshot) -> list[dict]:
    """Flink's ``/vertices/:vertexid/watermarks``: ``[{"id": "<subtask>.currentInputWatermark",
    "value": "<ms>"}]``, the chain's first operator's input watermark per subtask (Flink's
    ``Long.MIN_VALUE`` before the first one)."""
    out = []
    for m in snapshot.of_vertex(ejv.id):
        operators = m.get("operators") or {}
        gauges = next(iter(operators.values()), {}) if operators else {}
        value = gauges.get("currentInputWatermark", -(2**63))
        out.append({"id": f"{m.get('subtask', 0)}.currentInputWatermark", "value": str(value)})
    return out


def _numeric_metrics(m: dict) -> dict:
    """A subtask's numeric metrics by Flink's names (task metrics and ``<operator>.<metric>``)."""
    out = {k: m[k] for k in SUMMED + MAXED if isinstance(m.get(k), (int, float))}
    for key in ("accumulateBusyTimeMs", "accumulateIdleTimeMs", "accumulateBackPressuredTimeMs"):
        if isinstance(m.get(key), (int, float)):
            out[key] = m[key]
    for operator, gauges in (m.get("operators") or {}).items():
        for name, value in gauges.items():
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                out[f"{operator}.{name}"] = value
    return out


def aggregated_subtask_metrics(ejv: Any, snapshot: MetricsSnapshot, get: Optional[list[str]]) -> list[dict]:
    """Flink's ``AggregatedSubtaskMetricsHandler``: without ``get`` the available ids
    (``[{"id"}]``), with it ``[{"id", "min", "max", "avg", "sum", "skew"}]`` over the subtasks."""
    per_subtask = [_numeric_metrics(m) for m in snapshot.of_vertex(ejv.id)]
    names = sorted({k for m in per_subtask for k in m})
    if not get:
        return [{"id": name} for name in names]
    out = []
    for name in get:
        values = [float(m[name]) for m in per_subtask if name in m]
        if not values:
            continue
        avg = sum(values) / len(values)
        skew = 0 if avg == 0 else int(round((max(values) - min(values)) / avg * 100))
        out.append({"id": name, "min": min(values), "max": max(values), "avg": avg, "sum": sum(values), "skew": skew})
    return out


def job_metrics(client: Any, get: Optional[list[str]]) -> list[dict]:
    """Flink's ``JobMetricsHandler``: ``numRestarts`` and the checkpoint gauges Flink reports
    on the job (``lastCheckpointDuration``, ``numberOfCompletedCheckpoints``, ...)."""
    stats = client.get_checkpoint_stats()
    values = {k: v for k, v in stats.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    values["numRestarts"] = int(getattr(client, "num_restarts", 0))
    start, _, duration = job_times(client)
    values["uptime" if str(client.get_job_status()) == "RUNNING" else "downtime"] = duration
    if not get:
        return [{"id": name} for name in sorted(values)]
    return [{"id": name, "value": str(values[name])} for name in get if name in values]


def checkpointing_statistics(client: Any, history: list[dict]) -> dict:
    """Flink's ``CheckpointingStatistics`` from the coordinator's statistics (``history``: the
    completed checkpoints the endpoint saw, newest first)."""
    stats = client.get_checkpoint_stats()
    completed = int(stats.get("numberOfCompletedCheckpoints", 0) or 0)
    failed = int(stats.get("numberOfFailedCheckpoints", 0) or 0)
    in_progress = int(stats.get("numberOfInProgressCheckpoints", 0) or 0)
    restored_id = stats.get("lastRestoredCheckpointId")
    latest = history[0] if history else None
    durations = [h["end_to_end_duration"] for h in history]
    sizes = [h["state_size"] for h in history]

    def summary(values: list) -> dict:
        if not values:
            return {"min": 0, "max": 0, "avg": 0}
        return {"min": min(values), "max": max(values), "avg": sum(values) // len(values)}

    return {
        "counts": {
            "restored": 1 if restored_id is not None else 0,
            "total": completed + failed + in_progress,
            "in_progress": in_progress,
            "completed": completed,
            "failed": failed,
        },
        "summary": {
            "checkpointed_size": summary(sizes),
            "state_size": summary(sizes),
            "end_to_end_duration": summary(durations),
        },
        "latest": {
            "completed": latest,
            "savepoint": None,
            "failed": (
                {"className": "failed", "status": "FAILED", "failure_message": stats["lastCheckpointFailure"]}
                if stats.get("lastCheckpointFailure")
                else None
            ),
            "restored": {"id": restored_id} if restored_id is not None else None,
        },
        "history": list(history),
    }


def completed_checkpoint_entry(stats: dict, seen_ms: int, num_subtasks: int) -> Optional[dict]:
    """Flink's ``CompletedCheckpointStatistics`` of the last completed checkpoint in ``stats``."""
    checkpoint_id = stats.get("lastCheckpointId")
    if checkpoint_id is None or not stats.get("numberOfCompletedCheckpoints"):
        return None
    duration = int(stats.get("lastCheckpointDuration") or 0)
    size = int(stats.get("lastCheckpointSize") or 0)
    return {
        "className": "completed",
        "id": checkpoint_id,
        "status": "COMPLETED",
        "is_savepoint": False,
        "trigger_timestamp": seen_ms - duration,
        "latest_ack_timestamp": seen_ms,
        "checkpointed_size": size,
        "state_size": size,
        "end_to_end_duration": duration,
        "alignment_buffered": 0,
        "processed_data": 0,
        "persisted_data": 0,
        "num_subtasks": num_subtasks,
        "num_acknowledged_subtasks": num_subtasks,
        "checkpoint_type": "CHECKPOINT",
        "alignment_time": stats.get("lastCheckpointAlignmentTime"),
    }


def exception_entry(error: BaseException, timestamp_ms: int, task_name: Optional[str], endpoint: str = "") -> dict:
    """One entry of Flink's ``exceptionHistory``."""
    return {
        "exceptionName": f"{type(error).__module__}.{type(error).__qualname__}",
        "stacktrace": "".join(traceback.format_exception(type(error), error, error.__traceback__)),
        "timestamp": timestamp_ms,
        "taskName": task_name,
        "endpoint": endpoint or None,
        "taskManagerId": endpoint or None,
        "failureLabels": {},
        "concurrentExceptions": [],
    }


def job_exceptions(client: Any, max_entries: int = 20) -> dict:
    """Flink's ``JobExceptionsInfoWithHistory``: the job's failures, newest first, each with the
    task (operator chain) it came from when a task reported it."""
    entries = []
    for record in reversed(list(getattr(client, "exception_history", ()))):
        entries.append(exception_entry(record.error, record.timestamp_ms, record.task_name, record.location or ""))
    truncated = len(entries) > max_entries
    return {"exceptionHistory": {"entries": entries[:max_entries], "truncated": truncated}}


def cluster_overview(clients: list[Any], task_managers: int, slots: int) -> dict:
    """Flink's ``ClusterOverviewWithVersion``."""
    states = [str(c.get_job_status()) for c in clients]
    return {
        "taskmanagers": task_managers,
        "slots-total": slots,
        "slots-available": 0,
        "jobs-running": sum(1 for s in states if not JobStatus(s).is_globally_terminal_state()),
        "jobs-finished": states.count("FINISHED"),
        "jobs-cancelled": states.count("CANCELED"),
        "jobs-failed": states.count("FAILED"),
        "flink-version": RAYLINK_VERSION,
        "flink-commit": "",
    }


def task_managers(clients: list[Any]) -> dict:
    """Flink's ``TaskManagersInfo``: one entry per TaskExecutor hosting a running job's tasks."""
    hosted: dict[str, dict] = {}
    for client in clients:
        locations = getattr(client, "locations", {}) or {}
        for ev in client.execution_graph.all_vertices():
            executor = ev.current_execution.assigned_location
            if executor is None:
                continue
            entry = hosted.setdefault(
                executor,
                {
                    "id": executor,
                    "path": _endpoint(locations.get(executor)),
                    "dataPort": -1,
                    "jmxPort": -1,
                    "timeSinceLastHeartbeat": int(time.time() * 1000),
                    "slotsNumber": 0,
                    "freeSlots": 0,
                    "hardware": {"cpuCores": 0, "physicalMemory": 0, "freeMemory": 0, "managedMemory": 0},
                    "blocked": False,
                },
            )
            entry["slotsNumber"] += 1
    return {"taskmanagers": list(hosted.values())}
