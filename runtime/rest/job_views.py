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
``checkpoint_details``                 ``CheckpointStatistics`` (``/checkpoints/details/:id``)
``task_checkpoint_details``            ``TaskCheckpointStatisticsWithSubtaskDetails``
``job_exceptions``                     ``JobExceptionsInfoWithHistory``
``job_metrics``                        ``JobMetricsHandler`` (``[{"id", "value"}]``)
``cluster_overview`` / ``task_managers``  ``ClusterOverviewWithVersion`` / ``TaskManagersInfo``
=====================================  ===========================================

Values come from the client's ``get_metrics()`` (per subtask: ``numRecordsIn``,
``busyTimeMsPerSecond``, ..., and ``startTime`` / ``endTime``: the task's own clock when its
thread began and ended), ``get_checkpoint_statistics()`` (what the checkpoint coordinator
measured, kept by it for ``web.checkpoints.history`` checkpoints), its ExecutionGraph, the
epoch ms the job entered each status, its failure history and its TaskExecutors (slots, last
heartbeat, hardware as each reported it when it registered); per vertex, counts are summed over
subtasks and times take the maximum (:func:`raylink.runtime.metrics.aggregate_by_vertex`, what
the CLI shows). Back pressure: Flink's levels (ratio <= 0.10 ok, <= 0.50 low, else high), in
lower case as Flink's JSON.

**Measured or absent.** A figure raylink does not measure is left out of the body rather than
filled in: no ``alignment_buffered`` / ``processed_data`` (bytes processed during alignment),
no ``start_delay`` of a source subtask (no barrier reaches it), no ``discarded``, no ``managedMemory``, no ``failureLabels`` /
``concurrentExceptions``; a TaskExecutor in this process (the local target) has no heartbeat
and shows none; a size that could not be read (a shared file's) is left out of its entry.

Pure functions over what they are given: thread-safe as far as the client's getters are.
"""

from __future__ import annotations

import time
import traceback
from dataclasses import dataclass, field
from typing import Any, Iterable, Optional

from raylink.core.job_status import JobStatus
from raylink.runtime.execution_state import ExecutionState
from raylink.runtime.hardware import hardware_description
from raylink.runtime.job.checkpoint_stats import (
    CheckpointStatsEntry,
    CheckpointStatsSnapshot,
    CheckpointStatsStatus,
    StatsSummary,
    SubtaskStateStats,
)
from raylink.runtime.job.deployment import assign_slots
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


def subtask_times(metrics: Optional[dict], now_ms: int) -> tuple[int, int, int]:
    """(start-time, end-time, duration) of a subtask from its own clock (``startTime`` /
    ``endTime`` it reports): -1 for what has not happened (or was not reported yet); the
    duration runs to now while the subtask runs."""
    start = int((metrics or {}).get("startTime", -1) or -1)
    end = int((metrics or {}).get("endTime", -1) or -1)
    if start < 0:
        return -1, end, -1
    return start, end, max(0, (end if end >= 0 else now_ms) - start)


def vertex_times(ejv: Any, snapshot: MetricsSnapshot, now_ms: int) -> tuple[int, int, int]:
    """A vertex's times as Flink's: its first subtask's start, its last subtask's end (once
    every subtask ended; -1 before)."""
    by_index = {m.get("subtask"): m for m in snapshot.of_vertex(ejv.id)}
    times = [subtask_times(by_index.get(ev.subtask_index), now_ms) for ev in ejv.vertices]
    starts = [t[0] for t in times if t[0] >= 0]
    start = min(starts) if starts else -1
    ends = [t[1] for t in times]
    end = max(ends) if ends and all(e >= 0 for e in ends) else -1
    if start < 0:
        return -1, end, -1
    return start, end, max(0, (end if end >= 0 else now_ms) - start)


def _vertex_info(ejv: Any, snapshot: MetricsSnapshot, now_ms: int) -> dict:
    states = [str(ev.current_execution.state) for ev in ejv.vertices]
    start, end, duration = vertex_times(ejv, snapshot, now_ms)
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
    start, end, duration = job_times(client)
    now = int(time.time() * 1000)
    vertices = [_vertex_info(ejv, snapshot, now) for ejv in _job_vertices(client)]
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
        "now": now,
        # the epoch ms the job last entered each status it reached (none for the others)
        "timestamps": dict(getattr(client, "status_timestamps", {})),
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
        # when the job last changed status (Flink's JobDetails.lastUpdateTime)
        "last-modification": max(getattr(client, "status_timestamps", {}).values(), default=start),
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
    now = int(time.time() * 1000)
    by_index = {m.get("subtask"): m for m in snapshot.of_vertex(ejv.id)}
    locations = getattr(client, "locations", {}) or {}
    subtasks = []
    for ev in ejv.vertices:
        execution = ev.current_execution
        location = execution.assigned_location or ""
        host = _endpoint(locations.get(location))
        start, end, duration = subtask_times(by_index.get(ev.subtask_index), now)
        subtasks.append(
            {
                "subtask": ev.subtask_index,
                "status": str(execution.state),
                "attempt": execution.attempt_number,
                "endpoint": host,
                "host": str((locations.get(location) or {}).get("host", "localhost")),
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
        "slotSharingGroup": ejv.job_vertex.slot_sharing_group,
        "resources": vertex_resources(client, ejv),
        "now": now,
        "subtasks": subtasks,
    }


def vertex_resources(client: Any, ejv: Any) -> dict:
    """The Ray resources of each TaskExecutor running the vertex: its slot sharing group's
    profile (``profile``: true), else the default bundle; ``{}`` off Ray."""
    group = ejv.job_vertex.slot_sharing_group
    profiled = (getattr(client, "group_resources", None) or {}).get(group)
    if profiled:
        return {"profile": True, **profiled}
    default = getattr(client, "default_resources", None) or {}
    return {"profile": False, **default} if default else {}


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


#: the percentiles of Flink's ``StatsSummaryDto``
_PERCENTILES = (("p50", 0.5), ("p90", 0.9), ("p95", 0.95), ("p99", 0.99), ("p999", 0.999))


def _summary(summary: StatsSummary) -> dict:
    """Flink's ``StatsSummaryDto``: min / max / avg over every completed checkpoint, percentiles
    over the last ones."""
    out = {"min": summary.minimum, "max": summary.maximum, "avg": summary.average}
    for (name, _), value in zip(_PERCENTILES, summary.quantiles(tuple(q for _, q in _PERCENTILES))):
        out[name] = value
    return out


def _present(body: dict) -> dict:
    """``body`` without the figures that were not measured (None)."""
    return {key: value for key, value in body.items() if value is not None}


def _task_entry(entry: CheckpointStatsEntry, vertex_id: str) -> dict:
    """Flink's ``TaskCheckpointStatistics``: one JobVertex's part of a checkpoint."""
    subtasks = list(entry.tasks.get(vertex_id, {}).values())
    sizes = [s.state_size for s in subtasks]
    return _present(
        {
            "id": entry.checkpoint_id,
            "status": str(entry.status),
            "latest_ack_timestamp": max((s.ack_timestamp for s in subtasks), default=-1),
            "checkpointed_size": sum(s.checkpointed_size for s in subtasks),
            "state_size": None if None in sizes else sum(sizes),
            "end_to_end_duration": max((s.end_to_end_duration(entry.trigger_timestamp) for s in subtasks), default=-1),
            "persisted_data": sum(s.persisted_data for s in subtasks),
            "num_subtasks": entry.parallelism.get(vertex_id, 0),
            "num_acknowledged_subtasks": len(subtasks),
        }
    )


def checkpoint_entry(entry: CheckpointStatsEntry, with_tasks: bool = True) -> dict:
    """Flink's ``CheckpointStatistics`` (``className`` completed / failed / in_progress) of one
    checkpoint, as the coordinator measured it."""
    body = {
        "className": {"COMPLETED": "completed", "FAILED": "failed"}.get(str(entry.status), "in_progress"),
        "id": entry.checkpoint_id,
        "status": str(entry.status),
        "is_savepoint": entry.is_savepoint,
        "trigger_timestamp": entry.trigger_timestamp,
        "latest_ack_timestamp": entry.latest_ack_timestamp,
        "checkpointed_size": entry.checkpointed_size,
        "state_size": entry.state_size,
        "end_to_end_duration": entry.end_to_end_duration,
        "persisted_data": entry.persisted_data,
        "num_subtasks": entry.num_subtasks,
        "num_acknowledged_subtasks": entry.num_acknowledged_subtasks,
        "checkpoint_type": str(entry.checkpoint_type),
        "tasks": {vertex_id: _task_entry(entry, vertex_id) for vertex_id in entry.parallelism} if with_tasks else {},
    }
    if entry.status is CheckpointStatsStatus.COMPLETED:
        body["external_path"] = entry.external_path
    elif entry.status is CheckpointStatsStatus.FAILED:
        body["failure_timestamp"] = entry.failure_timestamp
        body["failure_message"] = entry.failure_message
    return _present(body)


def checkpointing_statistics(stats: CheckpointStatsSnapshot) -> dict:
    """Flink's ``CheckpointingStatistics`` from what the coordinator kept (``stats``): counts
    since the job started, summaries over the completed checkpoints, the latest of each kind
    and the last ``web.checkpoints.history`` checkpoints, newest first."""
    restored = stats.latest_restored
    return {
        "counts": {
            "restored": stats.num_restored,
            "total": stats.num_triggered,
            "in_progress": stats.num_in_progress,
            "completed": stats.num_completed,
            "failed": stats.num_failed,
        },
        "summary": {name: _summary(summary) for name, summary in stats.summaries.items()},
        "latest": {
            "completed": checkpoint_entry(stats.latest_completed, False) if stats.latest_completed else None,
            "savepoint": checkpoint_entry(stats.latest_savepoint, False) if stats.latest_savepoint else None,
            "failed": checkpoint_entry(stats.latest_failed, False) if stats.latest_failed else None,
            "restored": (
                {
                    "id": restored.checkpoint_id,
                    "restore_timestamp": restored.restore_timestamp,
                    "is_savepoint": restored.is_savepoint,
                    "external_path": restored.external_path,
                }
                if restored is not None
                else None
            ),
        },
        "history": [checkpoint_entry(entry, False) for entry in stats.history],
    }


def checkpoint_details(stats: CheckpointStatsSnapshot, checkpoint_id: int) -> Optional[dict]:
    """Flink's ``/checkpoints/details/:checkpointid``: one checkpoint with its tasks; None when
    the history no longer holds it."""
    entry = stats.find(checkpoint_id)
    return None if entry is None else checkpoint_entry(entry, True)


def _subtask_entry(entry: CheckpointStatsEntry, index: int, sub: Optional[SubtaskStateStats]) -> dict:
    """Flink's ``SubtaskCheckpointStatistics``: ``completed`` with the subtask's figures, or
    ``pending_or_failed`` when it has not acknowledged."""
    if sub is None:
        return {"index": index, "status": "pending_or_failed"}
    return _present(
        {
            "index": index,
            "status": "completed",
            "ack_timestamp": sub.ack_timestamp,
            "end_to_end_duration": sub.end_to_end_duration(entry.trigger_timestamp),
            "checkpointed_size": sub.checkpointed_size,
            "state_size": sub.state_size,
            "checkpoint": {"sync": sub.sync_duration_ms, "async": sub.async_duration_ms},
            "alignment": {"persisted": sub.persisted_data, "duration": sub.alignment_duration_ms},
            "start_delay": sub.start_delay_ms,
            "unaligned_checkpoint": sub.unaligned,
        }
    )


def task_checkpoint_details(stats: CheckpointStatsSnapshot, checkpoint_id: int, vertex_id: str) -> Optional[dict]:
    """Flink's ``TaskCheckpointStatisticsWithSubtaskDetails``: one JobVertex's part of a
    checkpoint, a summary over its subtasks and each subtask's acknowledgement."""
    entry = stats.find(checkpoint_id)
    if entry is None or vertex_id not in entry.parallelism:
        return None
    acked = entry.tasks.get(vertex_id, {})
    subtasks = list(acked.values())

    def summary(values: list) -> Optional[dict]:
        if None in values:
            return None
        done = StatsSummary()
        for value in values:
            done = done.add(int(value))
        return _summary(done)

    body = _task_entry(entry, vertex_id)
    body["summary"] = _present(
        {
            "checkpointed_size": summary([s.checkpointed_size for s in subtasks]),
            "state_size": summary([s.state_size for s in subtasks]),
            "end_to_end_duration": summary([s.end_to_end_duration(entry.trigger_timestamp) for s in subtasks]),
            "checkpoint_duration": {
                "sync": summary([s.sync_duration_ms for s in subtasks]),
                "async": summary([s.async_duration_ms for s in subtasks]),
            },
            "alignment": {
                "persisted": summary([s.persisted_data for s in subtasks]),
                "duration": summary([s.alignment_duration_ms for s in subtasks]),
            },
            "start_delay": summary([s.start_delay_ms for s in subtasks]) if subtasks else None,
        }
    )
    parallelism = max(entry.parallelism[vertex_id], max(acked, default=-1) + 1)
    body["subtasks"] = [_subtask_entry(entry, index, acked.get(index)) for index in range(parallelism)]
    return body


def exception_entry(error: BaseException, timestamp_ms: int, task_name: Optional[str], endpoint: str = "") -> dict:
    """One entry of Flink's ``exceptionHistory``."""
    return {
        "exceptionName": f"{type(error).__module__}.{type(error).__qualname__}",
        "stacktrace": "".join(traceback.format_exception(type(error), error, error.__traceback__)),
        "timestamp": timestamp_ms,
        "taskName": task_name,
        "endpoint": endpoint or None,
        "taskManagerId": endpoint or None,
    }


def job_exceptions(client: Any, max_entries: int = 20) -> dict:
    """Flink's ``JobExceptionsInfoWithHistory``: the job's failures, newest first, each with the
    task (operator chain) it came from when a task reported it."""
    entries = []
    for record in reversed(list(getattr(client, "exception_history", ()))):
        entries.append(exception_entry(record.error, record.timestamp_ms, record.task_name, record.location or ""))
    truncated = len(entries) > max_entries
    return {"exceptionHistory": {"entries": entries[:max_entries], "truncated": truncated}}


def cluster_overview(clients: list[Any], managers: list[dict]) -> dict:
    """Flink's ``ClusterOverviewWithVersion`` over the TaskExecutors of :func:`task_managers`."""
    states = [str(c.get_job_status()) for c in clients]
    return {
        "taskmanagers": len(managers),
        "slots-total": sum(m["slotsNumber"] for m in managers),
        "slots-available": sum(m["freeSlots"] for m in managers),
        "jobs-running": sum(1 for s in states if not JobStatus(s).is_globally_terminal_state()),
        "jobs-finished": states.count("FINISHED"),
        "jobs-cancelled": states.count("CANCELED"),
        "jobs-failed": states.count("FAILED"),
        "flink-version": RAYLINK_VERSION,
        "flink-commit": "",
    }


def _slot_of(client: Any) -> dict:
    """(JobVertex id, subtask) -> the job's slot (slot sharing: subtask i of a group's vertices
    share the group's slot i)."""
    return assign_slots(client.execution_graph, 1)[0]


def task_managers(clients: list[Any]) -> dict:
    """Flink's ``TaskManagersInfo``: one entry per TaskExecutor hosting a running job's tasks.

    ``slotsNumber`` is the slots the TaskExecutor offers (``taskmanager.numberOfTaskSlots``
    when the job placed whole slots on it, else the slots whose tasks it was started for),
    ``freeSlots`` those none of the job's subtasks occupy; ``timeSinceLastHeartbeat`` (as in
    Flink, the epoch ms of the last heartbeat) when the TaskExecutor runs apart and answered;
    ``hardware`` what it reported when it registered (this process's for the local target)."""
    hosted: dict[str, dict] = {}
    local_hardware: Optional[dict] = None
    for client in clients:
        if JobStatus(client.get_job_status()).is_globally_terminal_state():
            continue
        locations = getattr(client, "locations", {}) or {}
        heartbeats = getattr(client, "last_heartbeats", {}) or {}
        capacity = getattr(client, "executor_slot_capacity", {}) or {}
        slot_of = _slot_of(client)
        used: dict[str, set] = {}
        for ev in client.execution_graph.all_vertices():
            executor = ev.current_execution.assigned_location
            if executor is not None:
                used.setdefault(executor, set()).add(slot_of[(ev.job_vertex.id, ev.subtask_index)])
        for executor, slots in used.items():
            location = locations.get(executor)
            hardware = (location or {}).get("hardware")
            if location is None:  # in this process
                local_hardware = local_hardware if local_hardware is not None else hardware_description()
                hardware = local_hardware
            total = max(int(capacity.get(executor, len(slots))), len(slots))
            entry = {
                "id": executor,
                "path": _endpoint(location),
                "slotsNumber": total,
                "freeSlots": total - len(slots),
                "hardware": dict(hardware or {}),
                "blocked": False,
            }
            if executor in heartbeats:
                entry["timeSinceLastHeartbeat"] = int(heartbeats[executor])
            hosted[executor] = entry
    return {"taskmanagers": list(hosted.values())}
