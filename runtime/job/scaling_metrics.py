"""The autoscaler's metrics: Flink's ``ScalingMetricCollector`` and ``ScalingMetricEvaluator``
(``org.apache.flink.autoscaler``), over the per-subtask metrics the JobMaster already has.

**Topology** (:class:`JobTopology`, Flink's ``JobTopology``): the job's vertices in topological
order with their inputs, parallelism, max parallelism, whether an input is hash-partitioned
(``key_by``) and which neighbours a FORWARD edge ties them to.

**Samples** (:func:`collect_sample`): one per control-loop tick, per vertex: its parallelism, its
LOAD (busy time over the subtasks by ``job.autoscaler.metrics.busy-time.aggregator``, as a
fraction), the accumulated busy ms, the cumulative ``numRecordsIn`` / ``numRecordsOut`` and, for
a source, its LAG (the subtasks' ``pendingRecords`` summed; 0 when the source has no such
gauge). A source vertex counts the records it emits as its input (its chain's ``numRecordsOut``:
raylink counts no records into a source), so a chain that changes the record count after its
source measures in its own output records.

**Evaluation** (:func:`evaluate`) over the samples of the metric window, per vertex, with
Flink's formulas (``rate(m)``: ``(last - first) / seconds`` of a cumulative metric):

- ``LOAD``: the mean sampled load (MAX/MIN aggregators), or ``rate(busy ms) / parallelism /
  1000`` (AVG);
- ``TRUE_PROCESSING_RATE`` = ``rate(numRecordsIn) / LOAD`` (infinite when nothing came in);
- sources: ``TARGET_DATA_RATE`` = ``max(0, rate(numRecordsIn) + rate(LAG))`` (input plus backlog
  growth), ``CATCH_UP_DATA_RATE`` = latest ``LAG / catch-up.duration``;
- other vertices: the sum over their inputs of the input's rate times the edge's output ratio
  (the edge's records per record into the input vertex; ``computeEdgeOutputRatio``);
- ``SCALE_UP_RATE_THRESHOLD`` = :func:`target_capacity` at the utilization's upper bound,
  ``SCALE_DOWN_RATE_THRESHOLD`` at its lower bound with the restart's backlog (both 1.0 / 0.0
  while any source is processing a backlog longer than ``backlog-processing.lag-threshold``).

Pure functions over plain data: thread-safe.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Optional

from raylink.core.options import AutoScalerOptions

PARALLELISM = "PARALLELISM"
MAX_PARALLELISM = "MAX_PARALLELISM"
LOAD = "LOAD"
LAG = "LAG"
NUM_RECORDS_IN_RATE = "NUM_RECORDS_IN_RATE"
TRUE_PROCESSING_RATE = "TRUE_PROCESSING_RATE"
TARGET_DATA_RATE = "TARGET_DATA_RATE"
CATCH_UP_DATA_RATE = "CATCH_UP_DATA_RATE"
SCALE_UP_RATE_THRESHOLD = "SCALE_UP_RATE_THRESHOLD"
SCALE_DOWN_RATE_THRESHOLD = "SCALE_DOWN_RATE_THRESHOLD"
EXPECTED_PROCESSING_RATE = "EXPECTED_PROCESSING_RATE"
RECOMMENDED_PARALLELISM = "RECOMMENDED_PARALLELISM"


@dataclass(frozen=True)
class VertexInfo:
    """One JobVertex as the autoscaler sees it (Flink's ``VertexInfo``)."""

    id: str
    name: str
    parallelism: int
    max_parallelism: int
    inputs: tuple[str, ...] = ()
    hash_input: bool = False  # an input edge is hash-partitioned: align to the key groups
    forward: tuple[str, ...] = ()  # neighbours over a FORWARD edge: the same parallelism

    @property
    def is_source(self) -> bool:
        return not self.inputs


@dataclass
class JobTopology:
    """The job's vertices in topological order (Flink's ``JobTopology``)."""

    vertices: dict[str, VertexInfo] = field(default_factory=dict)

    @staticmethod
    def of(execution_graph: Any) -> "JobTopology":
        """From an ExecutionGraph's job vertices (their JobGraph edges and current parallelism)."""
        vertices: dict[str, VertexInfo] = {}
        forward: dict[str, list[str]] = {}
        for ejv in execution_graph.job_vertices:
            jv = ejv.job_vertex
            inputs, hashed = [], False
            for edge in jv.inputs:
                source = edge.source.producer.id
                inputs.append(source)
                strategy = str(edge.ship_strategy).upper()
                hashed = hashed or strategy == "HASH"
                if strategy == "FORWARD":
                    forward.setdefault(jv.id, []).append(source)
                    forward.setdefault(source, []).append(jv.id)
            vertices[jv.id] = VertexInfo(jv.id, jv.name, jv.parallelism, jv.max_parallelism, tuple(inputs), hashed)
        for vid, neighbours in forward.items():
            info = vertices[vid]
            vertices[vid] = VertexInfo(
                info.id,
                info.name,
                info.parallelism,
                info.max_parallelism,
                info.inputs,
                info.hash_input,
                tuple(neighbours),
            )
        return JobTopology(vertices)

    def outputs(self, vertex_id: str) -> list[str]:
        return [v.id for v in self.vertices.values() if vertex_id in v.inputs]


@dataclass(frozen=True)
class VertexSample:
    """One vertex at one tick (cumulative counts since its subtasks started)."""

    parallelism: int
    load: float  # busy fraction, aggregated over the subtasks
    busy_ms: float  # accumulated busy time, summed over the subtasks
    records_in: float
    records_out: float
    lag: Optional[float] = None  # sources: pendingRecords summed (None: not a source)


def _pending(metrics: Mapping[str, Any]) -> Optional[float]:
    found = None
    for operator in (metrics.get("operators") or {}).values():
        value = operator.get("pendingRecords") if isinstance(operator, dict) else None
        if isinstance(value, (int, float)) and value >= 0:
            found = (found or 0.0) + float(value)
    return found


def collect_sample(task_metrics: Iterable[Mapping[str, Any]], topology: JobTopology, aggregator: str) -> dict:
    """``{vertex id: VertexSample}`` from the per-subtask metrics (Flink's ``ScalingMetrics``)."""
    grouped: dict[str, list[Mapping[str, Any]]] = {}
    for metrics in task_metrics:
        grouped.setdefault(str(metrics.get("vertex", "")), []).append(metrics)
    out = {}
    for vid, info in topology.vertices.items():
        subtasks = grouped.get(vid)
        if not subtasks:
            continue
        busy = [float(m.get("busyTimeMsPerSecond", 0.0) or 0.0) for m in subtasks]
        load = {"max": max, "min": min}.get(aggregator, lambda b: sum(b) / len(b))(busy) / 1000.0
        records_out = float(sum(m.get("numRecordsOut", 0) or 0 for m in subtasks))
        if info.is_source:
            lags = [_pending(m) for m in subtasks]
            lag = sum(x for x in lags if x is not None)
            records_in = records_out
        else:
            lag = None
            records_in = float(sum(m.get("numRecordsIn", 0) or 0 for m in subtasks))
        out[vid] = VertexSample(
            parallelism=len(subtasks),
            load=load,
            busy_ms=float(sum(m.get("accumulateBusyTimeMs", 0.0) or 0.0 for m in subtasks)),
            records_in=records_in,
            records_out=records_out,
            lag=lag,
        )
    return out


def _rate(samples: list[tuple[float, dict]], vertex: str, attr: str) -> float:
    """Per second between the first and the last sample of ``vertex`` (Flink's ``getRate``)."""
    points = [(t, getattr(s[vertex], attr)) for t, s in samples if vertex in s and getattr(s[vertex], attr) is not None]
    if len(points) < 2 or points[-1][0] <= points[0][0]:
        return math.nan
    return (points[-1][1] - points[0][1]) / (points[-1][0] - points[0][0])


def _average(samples: list[tuple[float, dict]], vertex: str, attr: str) -> float:
    values = [getattr(s[vertex], attr) for _t, s in samples if vertex in s]
    values = [v for v in values if v is not None and math.isfinite(v)]
    return sum(values) / len(values) if values else math.nan


@dataclass(frozen=True)
class Settings:
    """The autoscaler's options, read once per job (:meth:`of`)."""

    target_utilization: float = 0.7
    utilization_max: float = 1.0
    utilization_min: float = 0.4
    catch_up_s: float = 1800.0
    restart_s: float = 300.0
    backlog_threshold_s: float = 300.0
    aggregator: str = "max"
    min_parallelism: int = 1
    max_parallelism: int = 200
    max_scale_down_factor: float = 0.6
    max_scale_up_factor: float = 100000.0
    scale_down_interval_s: float = 3600.0
    window_s: float = 900.0
    stabilization_s: float = 300.0
    interval_s: float = 10.0
    scaling_enabled: bool = True
    excluded: frozenset = frozenset()
    history_max_count: int = 3

    @staticmethod
    def of(conf: Any) -> "Settings":
        A = AutoScalerOptions
        target = conf.get(A.TARGET_UTILIZATION)
        boundary = conf.get(A.TARGET_UTILIZATION_BOUNDARY)
        upper, lower = conf.get(A.UTILIZATION_MAX), conf.get(A.UTILIZATION_MIN)
        upper = min(1.0, target + boundary) if upper is None else upper
        lower = max(0.0, target - boundary) if lower is None else lower
        if not lower <= target <= upper:
            raise ValueError(
                f"job.autoscaler.utilization.min ({lower:g}) <= utilization.target ({target:g}) <= "
                f"utilization.max ({upper:g}) does not hold"
            )
        excluded = frozenset(x.strip() for x in (conf.get(A.VERTEX_EXCLUDE_IDS) or "").split(",") if x.strip())
        return Settings(
            target_utilization=target,
            utilization_max=upper,
            utilization_min=lower,
            catch_up_s=conf.get(A.CATCH_UP_DURATION) / 1000.0,
            restart_s=conf.get(A.RESTART_TIME) / 1000.0,
            backlog_threshold_s=conf.get(A.BACKLOG_PROCESSING_LAG_THRESHOLD) / 1000.0,
            aggregator=conf.get(A.BUSY_TIME_AGGREGATOR),
            min_parallelism=conf.get(A.VERTEX_MIN_PARALLELISM),
            max_parallelism=conf.get(A.VERTEX_MAX_PARALLELISM),
            max_scale_down_factor=conf.get(A.MAX_SCALE_DOWN_FACTOR),
            max_scale_up_factor=conf.get(A.MAX_SCALE_UP_FACTOR),
            scale_down_interval_s=conf.get(A.SCALE_DOWN_INTERVAL) / 1000.0,
            window_s=conf.get(A.METRICS_WINDOW) / 1000.0,
            stabilization_s=conf.get(A.STABILIZATION_INTERVAL) / 1000.0,
            interval_s=conf.get(A.CONTROL_LOOP_INTERVAL) / 1000.0,
            scaling_enabled=conf.get(A.SCALING_ENABLED),
            excluded=excluded,
            history_max_count=conf.get(A.HISTORY_MAX_COUNT),
        )


def target_capacity(metrics: Mapping[str, float], settings: Settings, utilization: float, with_restart: bool) -> float:
    """The records/s a vertex must be able to process (Flink's ``getTargetProcessingCapacity``):
    its catch-up rate, the backlog a restart adds (worked off within the catch-up duration), and
    its target rate at ``utilization``."""
    utilization = min(1.0, max(0.0, utilization))
    if utilization == 0.0:
        return math.inf
    target = metrics[TARGET_DATA_RATE]
    restart = target * settings.restart_s / settings.catch_up_s if with_restart and settings.catch_up_s > 0 else 0.0
    return float(round(metrics[CATCH_UP_DATA_RATE] + restart + target / utilization))


def _edge_rate(samples: list, topology: JobTopology, source: str, target: str) -> float:
    """Records/s over the edge ``source -> target`` (Flink's ``computeEdgeDataRate``)."""
    inputs = topology.vertices[target].inputs
    if len(inputs) == 1:
        return _rate(samples, target, "records_in")
    others = [i for i in inputs if i != source]
    if all(len(topology.outputs(o)) == 1 for o in others):
        rate = _rate(samples, target, "records_in") - sum(_rate(samples, o, "records_out") for o in others)
        if math.isfinite(rate):
            return rate
    return _rate(samples, source, "records_out")


def evaluate(samples: list[tuple[float, dict]], topology: JobTopology, settings: Settings) -> dict[str, dict]:
    """``{vertex id: {metric: value}}`` over ``samples`` (``[(epoch seconds, {vertex id:
    VertexSample})]``, oldest first; at least two), in topological order."""
    out: dict[str, dict] = {}
    latest = samples[-1][1]
    backlog = False
    for vid, info in topology.vertices.items():
        if vid not in latest:
            continue
        sample = latest[vid]
        metrics: dict[str, float] = {PARALLELISM: sample.parallelism, MAX_PARALLELISM: info.max_parallelism}
        if settings.aggregator == "avg":
            load = _rate(samples, vid, "busy_ms") / max(sample.parallelism, 1) / 1000.0
        else:
            load = _average(samples, vid, "load")
        metrics[LOAD] = load
        in_rate = _rate(samples, vid, "records_in")
        metrics[NUM_RECORDS_IN_RATE] = in_rate
        if not math.isfinite(load) or not math.isfinite(in_rate):
            tpr = math.nan
        elif in_rate <= 0:
            tpr = math.inf
        elif load <= 0:
            tpr = math.inf
        else:
            tpr = in_rate / load
        metrics[TRUE_PROCESSING_RATE] = tpr
        if info.is_source:
            lag = sample.lag or 0.0
            metrics[LAG] = lag
            lag_rate = _rate(samples, vid, "lag")
            lag_rate = 0.0 if not math.isfinite(lag_rate) else lag_rate
            metrics[TARGET_DATA_RATE] = max(0.0, (in_rate if math.isfinite(in_rate) else 0.0) + lag_rate)
            metrics[CATCH_UP_DATA_RATE] = lag / settings.catch_up_s if settings.catch_up_s > 0 else 0.0
            if in_rate > 0 and lag / in_rate > settings.backlog_threshold_s:
                backlog = True
        else:
            target = catch_up = 0.0
            for source in info.inputs:
                upstream = out.get(source)
                if upstream is None:
                    continue
                source_in = _rate(samples, source, "records_in")
                edge = _edge_rate(samples, topology, source, vid)
                ratio = edge / source_in if source_in > 0 and edge > 0 else 0.0
                target += upstream[TARGET_DATA_RATE] * ratio
                catch_up += upstream[CATCH_UP_DATA_RATE] * ratio
            metrics[TARGET_DATA_RATE] = target
            metrics[CATCH_UP_DATA_RATE] = catch_up
        out[vid] = metrics
    upper, lower = (1.0, 0.0) if backlog else (settings.utilization_max, settings.utilization_min)
    for metrics in out.values():
        metrics[SCALE_UP_RATE_THRESHOLD] = target_capacity(metrics, settings, upper, with_restart=False)
        metrics[SCALE_DOWN_RATE_THRESHOLD] = target_capacity(metrics, settings, lower, with_restart=True)
    return out


__all__ = [
    "CATCH_UP_DATA_RATE",
    "EXPECTED_PROCESSING_RATE",
    "JobTopology",
    "LAG",
    "LOAD",
    "PARALLELISM",
    "RECOMMENDED_PARALLELISM",
    "SCALE_DOWN_RATE_THRESHOLD",
    "SCALE_UP_RATE_THRESHOLD",
    "Settings",
    "TARGET_DATA_RATE",
    "TRUE_PROCESSING_RATE",
    "VertexInfo",
    "VertexSample",
    "collect_sample",
    "evaluate",
    "target_capacity",
]
