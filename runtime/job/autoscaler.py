"""The job autoscaler: Flink's ``JobAutoScalerImpl`` with its ``ScalingExecutor``
(``org.apache.flink.autoscaler``), run inside the JobMaster as the standalone autoscaler runs
beside a job, and rescaling through the JobMaster's own rescale path
(:mod:`raylink.runtime.job.rescaling`: a checkpoint, the vertices redeployed at their new
parallelism with their state redistributed, the same job id).

On with ``job.autoscaler.enabled`` (STREAMING jobs; inconsistent options fail the job's submission). Every
``autoscaler.standalone.control-loop.interval`` while the job is RUNNING and not rescaling:

1. **collect** a sample of every vertex (:func:`~raylink.runtime.job.scaling_metrics.collect_sample`).
   A new RUNNING timestamp (a restart or a rescale) clears the samples. Samples taken within
   ``stabilization.interval`` of it do not count; the window is full ``metrics.window`` after
   the first sample that does ("Stabilizing until ...", "Metric window is not full until ...");
2. **evaluate** the window (:func:`~raylink.runtime.job.scaling_metrics.evaluate`): true
   processing rate, target data rate, catch-up rate, lag, thresholds per vertex;
3. **decide** (:mod:`raylink.runtime.job.job_vertex_scaler`): every vertex's recommended
   parallelism (scale-downs delayed by ``scale-down.interval``; vertices tied by a FORWARD edge
   get the same). Nothing happens unless a vertex whose parallelism would change is outside its
   utilization band ("All vertex processing rates are within target.");
4. **report and scale**: a ``ScalingReport`` in Flink's words (``Scaling execution enabled, begin
   scaling vertices:{ Vertex ID <id> | Parallelism 1 -> 4 | Processing capacity 450.00 ->
   1800.00 | Target data rate 1000.00}``), logged and kept; with ``scaling.enabled`` false the
   report says "disabled" and nothing changes. Then the job is rescaled; a refused rescale is an
   ``AutoscalerError`` event and the job runs on as it was. A parallelism the cluster could not
   place (the rescale went back to the old one) is not asked for again.

On Ray the new TaskExecutors are placed as any job's are: when the cluster lacks the CPUs, the
placement waits for Ray's autoscaler to add a node, and the executors a scale-down releases let
it remove idle ones.

:meth:`JobAutoScaler.status` is what the REST API shows (``GET /jobs/:jobid/autoscaler``): the
state line, every vertex's evaluated metrics, the events (reports and errors) and the
parallelism over time.

Not carried over from Flink: the observed true processing rate, scaling-effectiveness
detection, memory tuning, quotas, excluded periods and the observed-scalability fit; the
autoscaler's state is not kept across a JobMaster failover (it starts collecting again).

Thread-safety: one control-loop thread per job; :meth:`JobAutoScaler.status` may be called from
any thread (it copies under the autoscaler's lock).
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import deque
from typing import Any, Optional

from raylink.core.job_status import JobStatus
from raylink.core.options import AutoScalerOptions, IllegalConfigurationError
from raylink.runtime.job.job_vertex_scaler import (
    DelayedScaleDown,
    compute_scale_target_parallelism,
    outside_utilization_bound,
    unify_forward,
)
from raylink.runtime.job.rescaling import RescaleNotPlacedError
from raylink.runtime.job.scaling_metrics import (
    EXPECTED_PROCESSING_RATE,
    RECOMMENDED_PARALLELISM,
    TARGET_DATA_RATE,
    TRUE_PROCESSING_RATE,
    JobTopology,
    Settings,
    collect_sample,
    evaluate,
)

log = logging.getLogger("raylink.autoscaler")

#: how long the control loop waits for the rescale it asked for
RESCALE_TIMEOUT_S = 900.0
#: events and parallelism changes kept for REST
MAX_EVENTS = 100


def _iso(epoch_s: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(epoch_s)) + f".{int(epoch_s * 1000) % 1000:03d}"


def _json_number(value: float) -> Optional[float]:
    return round(value, 3) if isinstance(value, (int, float)) and math.isfinite(value) else None


def scaling_report(vertices: dict[str, dict], enabled: bool) -> str:
    """Flink's ``ScalingReport`` message for ``{vertex id: {"from", "to", metrics}}``."""
    head = (
        "Scaling execution enabled, begin scaling vertices:"
        if enabled
        else "Scaling execution disabled by config job.autoscaler.scaling.enabled:false, recommended parallelism change:"
    )
    parts = [
        f"{{ Vertex ID {vid} | Parallelism {v['from']} -> {v['to']} | Processing capacity "
        f"{v[TRUE_PROCESSING_RATE]:.2f} -> {v[EXPECTED_PROCESSING_RATE]:.2f} | Target data rate "
        f"{v[TARGET_DATA_RATE]:.2f}}}"
        for vid, v in vertices.items()
    ]
    return head + "".join(parts)


class JobAutoScaler:
    """One job's autoscaler (made by the JobMaster when ``job.autoscaler.enabled``)."""

    def __init__(self, master: Any, settings: Optional[Settings] = None, clock: Any = time.time) -> None:
        self.master = master
        self.settings = settings or Settings.of(master.configuration)
        self._clock = clock
        self._lock = threading.Lock()
        self._samples: list[tuple[float, dict]] = []
        self._running_since: Optional[float] = None
        self._delayed = DelayedScaleDown()
        #: per vertex, the lowest parallelism a rescale could not deploy (the cluster could not hold it)
        self._unplaceable: dict[str, int] = {}
        self._state = "Waiting for the job to run"
        self._evaluated: dict[str, dict] = {}
        self._events: deque = deque(maxlen=MAX_EVENTS)
        self._parallelism: deque = deque(maxlen=MAX_EVENTS)  # (epoch ms, {vertex id: parallelism})
        self.num_scalings = 0
        self.num_balanced = 0
        self.num_errors = 0
        self._thread: Optional[threading.Thread] = None

    # -- the control loop ----------------------------------------------------------------------------
    def start(self) -> None:
        self._note_parallelism()
        self._thread = threading.Thread(target=self._loop, name=f"autoscaler {self.master.job_id[:6]}", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        done = self.master._done
        while not done.wait(self.settings.interval_s):
            try:
                self.tick()
            except Exception as exc:  # noqa: BLE001 - an error is an event; the job runs on
                self._event("AutoscalerError", f"{type(exc).__name__}: {exc}")
                self.num_errors += 1
                log.warning("autoscaler of job '%s': %s", self.master.job_name, exc, exc_info=True)

    def _running(self) -> bool:
        master = self.master
        rescaler = getattr(master, "_rescaler", None)
        return (
            master.get_job_status() is JobStatus.RUNNING
            and not master._restarting
            and not (rescaler is not None and rescaler.in_progress)
        )

    def tick(self) -> None:
        """One pass: collect, evaluate, decide, scale."""
        master, settings = self.master, self.settings
        if not self._running():
            self._set_state("Waiting for the job to run")
            return
        now = self._clock()
        running_since = master.status_timestamps.get(JobStatus.RUNNING.value, 0) / 1000.0
        topology = JobTopology.of(master.execution_graph)
        sample = collect_sample(master.get_metrics(), topology, settings.aggregator)
        with self._lock:
            if running_since != self._running_since:  # restarted or rescaled: a new window
                self._running_since = running_since
                self._samples = []
            self._samples.append((now, sample))
            stable_at = running_since + settings.stabilization_s
            counted = [(t, s) for t, s in self._samples if t >= stable_at]
            if now < stable_at:
                self._state = f"Stabilizing until {_iso(stable_at)}"
                return
            full_at = counted[0][0] + settings.window_s
            if now < full_at or len(counted) < 2:
                if len(counted) >= 2:  # shown while the window fills (Flink's upfront evaluation)
                    self._evaluated = evaluate(counted, topology, settings)
                self._state = f"Metric window is not full until {_iso(full_at)}"
                return
            window = [(t, s) for t, s in counted if t >= now - settings.window_s]
            if len(window) < 2:  # ticks further apart than the window: its last two samples
                window = counted[-2:]
            self._samples = window
            evaluated = self._evaluated = evaluate(window, topology, settings)
        self._decide(topology, evaluated, now)

    def _decide(self, topology: JobTopology, evaluated: dict[str, dict], now: float) -> None:
        settings = self.settings
        recommended: dict[str, int] = {}
        outside: set[str] = set()
        for vid, info in topology.vertices.items():
            metrics = evaluated.get(vid)
            if metrics is None or vid in settings.excluded:
                recommended[vid] = info.parallelism
                continue
            new = compute_scale_target_parallelism(info, metrics, settings)
            if vid in self._unplaceable and new >= self._unplaceable[vid]:  # the cluster could not hold it
                new = max(info.parallelism, self._unplaceable[vid] - 1)
            new = self._delayed.apply(vid, info.parallelism, new, now, settings.scale_down_interval_s)
            recommended[vid] = new
            metrics[RECOMMENDED_PARALLELISM] = new
            if outside_utilization_bound(metrics):
                outside.add(vid)
        recommended = unify_forward(topology, recommended)
        changes = {vid: p for vid, p in recommended.items() if p != topology.vertices[vid].parallelism}
        if not changes or not outside & set(changes):
            self.num_balanced += 1
            waiting = [topology.vertices[v].name for v in topology.vertices if self._delayed.waiting_since(v)]
            self._set_state(
                "All vertex processing rates are within target."
                if not waiting
                else f"The scale down of {', '.join(waiting)} is delayed by {settings.scale_down_interval_s:g} s"
            )
            return
        vertices = {}
        for vid, p in changes.items():
            metrics = evaluated.get(vid, {})
            current = topology.vertices[vid].parallelism
            tpr = metrics.get(TRUE_PROCESSING_RATE, math.nan)
            expected = tpr / current * p if math.isfinite(tpr) else math.nan
            metrics[EXPECTED_PROCESSING_RATE] = expected
            vertices[vid] = {
                "name": topology.vertices[vid].name,
                "from": current,
                "to": p,
                TRUE_PROCESSING_RATE: tpr,
                EXPECTED_PROCESSING_RATE: expected,
                TARGET_DATA_RATE: metrics.get(TARGET_DATA_RATE, math.nan),
            }
        report = scaling_report(vertices, settings.scaling_enabled)
        self._event("ScalingReport", report, vertices)
        log.info("autoscaler of job '%s': %s", self.master.job_name, report)
        if not settings.scaling_enabled:
            self._set_state("Scaling is disabled (job.autoscaler.scaling.enabled: false)")
            return
        self._set_state("Rescaling " + ", ".join(f"{v['name']} {v['from']} -> {v['to']}" for v in vertices.values()))
        self._delayed.clear()
        future = self.master.rescale(dict(changes))
        try:
            future.result(RESCALE_TIMEOUT_S)
        except Exception as exc:  # noqa: BLE001 - refused or failed: an event, the job runs on
            if isinstance(exc, RescaleNotPlacedError):  # never asked for again
                for vid, p in changes.items():
                    if p > topology.vertices[vid].parallelism:
                        self._unplaceable[vid] = min(p, self._unplaceable.get(vid, p))
            self.num_errors += 1
            self._set_state(f"The rescale was not carried out: {exc}")
            self._event("AutoscalerError", f"the rescale was not carried out: {exc}")
            log.warning("autoscaler of job '%s': the rescale was not carried out: %s", self.master.job_name, exc)
            return
        self.num_scalings += 1
        self._note_parallelism()

    # -- what it shows ------------------------------------------------------------------------------
    def _set_state(self, state: str) -> None:
        with self._lock:
            self._state = state

    def _event(self, reason: str, message: str, vertices: Optional[dict] = None) -> None:
        event: dict = {"timestamp": int(self._clock() * 1000), "reason": reason, "message": message}
        if vertices is not None:
            event["vertices"] = {
                vid: {k: (_json_number(v) if isinstance(v, float) else v) for k, v in values.items()}
                for vid, values in vertices.items()
            }
        with self._lock:
            self._events.append(event)

    def _note_parallelism(self) -> None:
        graph = self.master.execution_graph
        with self._lock:
            self._parallelism.append(
                (int(self._clock() * 1000), {ejv.id: ejv.parallelism for ejv in graph.job_vertices})
            )

    def status(self) -> dict:
        """The REST view: state, evaluated metrics per vertex, events, parallelism over time."""
        names = {ejv.id: ejv.name for ejv in self.master.execution_graph.job_vertices}
        with self._lock:
            return {
                "enabled": True,
                "scalingEnabled": self.settings.scaling_enabled,
                "state": self._state,
                "scalings": self.num_scalings,
                "balanced": self.num_balanced,
                "errors": self.num_errors,
                "vertices": {
                    vid: {"name": names.get(vid, vid), **{k: _json_number(v) for k, v in metrics.items()}}
                    for vid, metrics in self._evaluated.items()
                },
                "events": list(self._events),
                "parallelism": [{"timestamp": t, "vertices": dict(p)} for t, p in self._parallelism],
            }


def create_autoscaler(master: Any) -> Optional[JobAutoScaler]:
    """The job's autoscaler when ``job.autoscaler.enabled`` (its options checked now; started
    when the job first runs), None otherwise or for a BATCH job (it cannot be rescaled)."""
    if not master.configuration.get(AutoScalerOptions.ENABLED) or master.coordinator is None:
        return None
    try:
        return JobAutoScaler(master, Settings.of(master.configuration))
    except ValueError as exc:
        raise IllegalConfigurationError(str(exc)) from None


__all__ = ["JobAutoScaler", "create_autoscaler", "scaling_report"]
