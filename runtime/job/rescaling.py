"""Rescaling a running job: the rescale path of Flink's ``AdaptiveScheduler`` behind FLIP-291's
``PUT /jobs/:jobid/resource-requirements`` (``JobResourceRequirements``,
``JobVertexResourceRequirements.Parallelism``).

**Requirements.** Per JobVertex a parallelism with a lower and an upper bound
(:class:`ParallelismBounds`), as FLIP-291's body ``{"<vertexId>": {"parallelism":
{"lowerBound": 1, "upperBound": 3}}}`` gives them. Ray places whatever a job asks for (or
waits for its autoscaler), so a vertex runs at its upper bound; the lower bound is checked
(1 <= lower <= upper) and kept for ``GET``. A vertex is named by its id, its name, the
``uid(...)`` of one of its operators, or the name of one of them when that is unique
(:func:`find_job_vertex`). Vertices not named keep their parallelism. Refused before anything
happens, the job untouched (:class:`RescaleRequestError`, HTTP 400): an unknown or ambiguous
vertex, a parallelism below 1 or above the vertex's max parallelism (key groups cannot
follow), a forward edge whose two ends would differ in parallelism, and a vertex whose state
cannot be redistributed -- an operator keeping state of its own that it cannot share out at
another parallelism (no ``restore_rescaled_operator_state``: e.g. an iterable source) --
named with its operator; a job that is not RUNNING refuses too (:class:`RescaleRefusedError`).
A request that comes while the job is being rescaled is started once that rescale ended (the
latest requirements win, as in Flink: a request it replaces before it started is refused as
superseded).

**The rescale** (:func:`rescale`; Flink's ``AdaptiveScheduler`` goes Executing -> Restarting
-> WaitingForResources -> CreatingExecutionGraph -> Executing, restoring the latest
checkpoint, and rescales up once the new slots are there). Here the JobMaster first reserves
the resources the new parallelism needs beyond what the job holds and waits for them while the
job runs on (``reserve_resources``: on Ray a placement group of the extra TaskExecutors'
bundles, for which Ray's autoscaler adds a node; given back just before the new deployment
places); when they cannot be had, the rescale fails as not placed and the job was never
stopped. Then it takes a fresh checkpoint with aligned barriers
(``CheckpointCoordinator.trigger_checkpoint_now``; no periodic checkpoint is triggered after
it, so it is the latest) -- Flink would restore the latest completed checkpoint and replay
what came after it; a fresh one shortens that replay to the records in flight while the old
tasks are cancelled. A failed checkpoint fails the rescale and the job runs on as it was.
Then the job goes RESTARTING: the tasks are cancelled and their executors released, the
JobGraph's vertices take their new parallelism, a new ExecutionGraph is built (the attempt
numbers go on), every subtask is deployed restored from that checkpoint -- keyed state by key
group, operator list state split or union, sources' splits and sinks' committables through
their ``restore_rescaled_operator_state`` as a savepoint restored at another parallelism --
and the job is RUNNING again, with the same job id. Records after the checkpoint are replayed
from the sources; two-phase-commit sinks commit each record once (what the old tasks wrote
after the checkpoint was never committed). A redeploy that fails at the new parallelism (the
cluster cannot place its TaskExecutors) is tried once more at the old one, from the same
checkpoint: the job runs on as it was and the rescale fails naming the cause; when that fails
too, it is a failure of the job (its restart strategy decides). The restart strategy is not asked for the rescale itself
and ``numRestarts`` does not count it; ``num_rescales`` does. A job without periodic
checkpoints is rescaled the same way; a later failover restores the rescale's checkpoint.
:func:`rescale` (``JobMasterBase.rescale``) is the call an autoscaler makes.

Thread-safety: :func:`rescale` may be called from any thread; the rescale itself runs on a
thread of its own, one at a time per job, under the JobMaster's lock where it changes the
job's bookkeeping (as a failover does).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, Mapping, Optional, Union

from raylink.core.job_status import JobStatus
from raylink.errors import RaylinkError
from raylink.graph.execution_graph import ExecutionGraph, ExecutionJobVertex, build_execution_graph
from raylink.graph.hashing import hash_uid
from raylink.runtime.client.job_result import collect_ids
from raylink.runtime.job.state_assignment import OPERATORS_PROPERTY, operator_properties

log = logging.getLogger(__name__)

#: how long the rescale's checkpoint may take before the rescale gives up (the job runs on)
CHECKPOINT_TIMEOUT_S = 600.0


class RescaleRequestError(RaylinkError, ValueError):
    """A rescale request the job cannot follow (HTTP 400): names the vertex and why."""


class RescaleRefusedError(RaylinkError, RuntimeError):
    """The job cannot be rescaled now (not RUNNING, rescaling already, a BATCH job)."""


class RescaleNotPlacedError(RescaleRefusedError):
    """The job could not be deployed at the new parallelism and runs on at its previous one."""


@dataclass(frozen=True)
class ParallelismBounds:
    """Flink's ``JobVertexResourceRequirements.Parallelism``: 1 <= lower <= upper."""

    lower_bound: int
    upper_bound: int

    def to_json(self) -> dict:
        return {"parallelism": {"lowerBound": self.lower_bound, "upperBound": self.upper_bound}}


Requirement = Union[int, ParallelismBounds, Mapping[str, Any]]


def _bounds(vertex: str, value: Requirement) -> ParallelismBounds:
    """``value`` (a parallelism, bounds or FLIP-291's ``{"parallelism": {...}}``) as bounds."""
    if isinstance(value, ParallelismBounds):
        lower, upper = value.lower_bound, value.upper_bound
    elif isinstance(value, Mapping):
        inner = value.get("parallelism")
        if not isinstance(inner, Mapping) or "upperBound" not in inner:
            raise RescaleRequestError(
                f'vertex {vertex!r}: expected {{"parallelism": {{"lowerBound": int, "upperBound": int}}}}, '
                f"got {value!r}"
            )
        upper = inner["upperBound"]
        lower = inner.get("lowerBound", 1)
    else:
        lower = upper = value
    for name, bound in (("lowerBound", lower), ("upperBound", upper)):
        if isinstance(bound, bool) or not isinstance(bound, int):
            raise RescaleRequestError(f"vertex {vertex!r}: the parallelism's {name} {bound!r} is not an integer")
        if bound < 1:
            raise RescaleRequestError(f"vertex {vertex!r}: the parallelism's {name} {bound} is below 1")
    if lower > upper:
        raise RescaleRequestError(
            f"vertex {vertex!r}: the parallelism's lowerBound {lower} is above its upperBound {upper}"
        )
    return ParallelismBounds(lower, upper)


def find_job_vertex(graph: ExecutionGraph, key: str) -> ExecutionJobVertex:
    """The vertex ``key`` names: its id, its name, the ``uid(...)`` of one operator of its chain,
    or the name of one (with or without its ``Source: `` / ``Sink: `` prefix) when that is
    unique in the job; :class:`RescaleRequestError` naming it otherwise."""
    if not isinstance(key, str):
        raise RescaleRequestError(f"vertex {key!r}: a vertex is named by its id or name (a string)")
    for ejv in graph.job_vertices:
        if ejv.id == key:
            return ejv
    matches = [ejv for ejv in graph.job_vertices if ejv.name == key]
    if not matches:  # an operator's uid(...) or name
        uid_hash = hash_uid(key).hex()
        matches = [ejv for ejv in graph.job_vertices if uid_hash in ejv.job_vertex.operator_ids]
    if not matches:
        names = (key, f"Source: {key}", f"Sink: {key}")
        matches = [ejv for ejv in graph.job_vertices if any(c.operator_name in names for c in ejv.job_vertex.chain)]
    if len(matches) == 1:
        return matches[0]
    known = "; ".join(f"{ejv.id} ({ejv.name!r})" for ejv in graph.job_vertices)
    if matches:
        raise RescaleRequestError(f"vertex {key!r} is ambiguous: {len(matches)} vertices match; give its id ({known})")
    raise RescaleRequestError(f"vertex {key!r} not found in the job; its vertices: {known}")


def _operator_of(config: Any) -> Any:
    """A fresh instance of the operator of ``config`` (None when it cannot be made here)."""
    from raylink.operators.factory import create_operator

    try:
        return create_operator(config.operator)
    except Exception:  # noqa: BLE001 - a connector that needs its node: its restore decides
        return None


def _keeps_unsplittable_state(operator: Any) -> bool:
    """Whether ``operator`` keeps state of its own that it cannot share out at another
    parallelism (see :func:`raylink.state.snapshots.initialize_operator`)."""
    snapshot = getattr(operator, "snapshot_operator_state", None)
    if snapshot is None or callable(getattr(operator, "restore_rescaled_operator_state", None)):
        return False
    if getattr(type(operator).snapshot_operator_state, "__annotations__", {}).get("return") in (None, "None"):
        return False  # declared to keep nothing (it flushes before the barrier)
    function = getattr(operator, "function", None)
    run = getattr(function, "run", None)
    if callable(run) and not isinstance(function, type):
        return False  # a SourceFunction: its state is in list states, which are redistributed
    return True


def check_rescalable(graph: ExecutionGraph, parallelism: Mapping[str, int]) -> None:
    """Refuse (:class:`RescaleRequestError`) a change of ``parallelism`` (vertex id -> new
    parallelism) the job's state or edges cannot follow; nothing is changed."""
    new = {ejv.id: parallelism.get(ejv.id, ejv.parallelism) for ejv in graph.job_vertices}
    for ejv in graph.job_vertices:
        p = new[ejv.id]
        if p > ejv.max_parallelism:
            raise RescaleRequestError(
                f"vertex {ejv.name!r} ({ejv.id}): parallelism {p} is above its max parallelism "
                f"{ejv.max_parallelism} (set_max_parallelism; key groups cannot be split further)"
            )
        for edge in ejv.job_vertex.inputs:
            producer = edge.source.producer
            if edge.partitioner.is_forward and new[producer.id] != p:
                raise RescaleRequestError(
                    f"vertex {ejv.name!r} ({ejv.id}) reads vertex {producer.name!r} ({producer.id}) over a forward "
                    f"edge, which does not allow a change of parallelism ({new[producer.id]} -> {p}); rescale both "
                    f"to the same parallelism"
                )
        if p == ejv.parallelism:
            continue
        for config in ejv.job_vertex.chain:
            operator = _operator_of(config)
            if operator is not None and _keeps_unsplittable_state(operator):
                raise RescaleRequestError(
                    f"vertex {ejv.name!r} ({ejv.id}) cannot be rescaled: operator {config.operator_name!r} "
                    f"({type(operator).__name__}) keeps state of its own that cannot be redistributed to another "
                    f"parallelism"
                )


def resolve(graph: ExecutionGraph, requirements: Mapping[str, Requirement]) -> dict[str, ParallelismBounds]:
    """``requirements`` by vertex id, checked (see the module docstring)."""
    if not isinstance(requirements, Mapping) or not requirements:
        raise RescaleRequestError(
            f"expected the requirements as a non-empty mapping {{vertex id or name: parallelism}}, got {requirements!r}"
        )
    resolved: dict[str, ParallelismBounds] = {}
    for key, value in requirements.items():
        ejv = find_job_vertex(graph, key)
        if ejv.id in resolved:
            raise RescaleRequestError(f"vertex {ejv.name!r} ({ejv.id}) is named twice")
        resolved[ejv.id] = _bounds(str(key), value)
    check_rescalable(graph, {v: b.upper_bound for v, b in resolved.items()})
    return resolved


class Rescaler:
    """One job's rescales and current requirements (kept by its JobMaster)."""

    def __init__(self, master: Any) -> None:
        self.master = master
        self.requirements: dict[str, ParallelismBounds] = {
            ejv.id: ParallelismBounds(1, ejv.parallelism) for ejv in master.execution_graph.job_vertices
        }
        self.in_progress = False
        #: a request that came while rescaling: (its requirements, its future), started next
        self._queued: Optional[tuple[dict, Future]] = None
        self.num_rescales = 0
        self.last_duration_ms: Optional[int] = None
        #: the last rescale's phases in ms: resources (the extra ones reserved while the job ran),
        #: checkpoint, cancel (tasks cancelled, executors released), deploy (the new graph
        #: deployed and started)
        self.last_phases: dict[str, int] = {}
        #: what ``master.reserve_resources`` reserved for the rescale under way, until it deploys
        self._reservation: Any = None

    def resource_requirements(self) -> dict:
        """FLIP-291's body: ``{vertex id: {"parallelism": {"lowerBound", "upperBound"}}}``."""
        return {vertex: bounds.to_json() for vertex, bounds in self.requirements.items()}

    def rescale(self, requirements: Mapping[str, Requirement]) -> Future:
        master = self.master
        result: Future = Future()
        try:
            if master.coordinator is None:
                raise RescaleRefusedError(f"job '{master.job_name}' runs in BATCH mode and cannot be rescaled")
            resolved = resolve(master.execution_graph, requirements)
            with master._lock:
                if self.in_progress:  # Flink: the latest requirements win; this one follows the current
                    superseded, self._queued = self._queued, (resolved, result)
                    self.requirements.update(resolved)
                else:
                    self._refuse_unless_running()
                    superseded = None
                    self._start(resolved, result)
        except (RescaleRequestError, RescaleRefusedError) as exc:
            result.set_exception(exc)
            return result
        if superseded is not None:
            superseded[1].set_exception(RescaleRefusedError("superseded by a later rescale request"))
        return result

    def _refuse_unless_running(self) -> None:
        """Under the JobMaster's lock. A job whose every task has reported its end is still RUNNING
        until the JobMaster finishes it, but is ending: restarting it now would be RESTARTING ->
        FINISHED, so it is refused like a job that is no longer running."""
        master = self.master
        status = master.get_job_status()
        if status is not JobStatus.RUNNING or master._restarting or master._cancel_requested:
            raise RescaleRefusedError(f"job '{master.job_name}' is {status.value}, not RUNNING: not rescaled")
        if master._every_task_reported():
            raise RescaleRefusedError(
                f"job '{master.job_name}' is ending (every task has ended), not RUNNING: not rescaled"
            )

    def _start(self, resolved: dict[str, ParallelismBounds], result: Future) -> None:
        """Under the JobMaster's lock: the rescale's thread."""
        self.in_progress = True
        previous = dict(self.requirements)
        self.requirements.update(resolved)  # GET answers what was asked for (Flink)
        threading.Thread(
            target=self._run,
            args=(resolved, previous, result),
            name=f"rescale {self.master.job_id[:6]}",
            daemon=True,
        ).start()

    def _next(self) -> None:
        """The rescale ended: start the one asked for meanwhile (or refuse it)."""
        with self.master._lock:
            self.in_progress = False
            queued, self._queued = self._queued, None
            if queued is None:
                return
            try:
                self._refuse_unless_running()
                self._start(*queued)
                return
            except RescaleRefusedError as exc:
                error = exc
        queued[1].set_exception(error)

    def _run(self, resolved: dict[str, ParallelismBounds], previous: dict, result: Future) -> None:
        master = self.master
        started = time.monotonic()
        try:
            try:  # the resources first, while the job runs on (Flink's WaitingForResources)
                self._reservation = master.reserve_resources({v: b.upper_bound for v, b in resolved.items()})
            except BaseException as exc:  # noqa: BLE001 - the job runs on as it was
                raise RescaleNotPlacedError(
                    f"job '{master.job_name}' could not be deployed at the new parallelism ({exc}); "
                    "it runs on at its previous parallelism"
                ) from exc
            self.last_phases = {"resources": int((time.monotonic() - started) * 1000)}
            try:  # Flink restores the latest checkpoint; a fresh one shortens the replay
                checkpoint = master.coordinator.trigger_checkpoint_now(suspend_periodic=True).result(
                    CHECKPOINT_TIMEOUT_S
                )
            except BaseException as exc:  # noqa: BLE001 - the job runs on as it was
                with master._lock:  # the checkpoint failed as the job ended: say that it ended
                    self._refuse_unless_running()
                raise RescaleRefusedError(
                    f"job '{master.job_name}' was not rescaled: its checkpoint failed ({exc})"
                ) from exc
            self.last_phases["checkpoint"] = int((time.monotonic() - started) * 1000) - self.last_phases["resources"]
            with master._lock:  # it may have finished (or failed) while the checkpoint ran
                self._refuse_unless_running()
                master._restarting = True
                master._transition(JobStatus.RESTARTING)
        except BaseException as exc:  # noqa: BLE001
            self._release_reservation()
            with master._lock:
                if self._queued is None:
                    self.requirements = previous  # not rescaled: the job runs at what it ran at
            result.set_exception(exc)
            self._next()
            return
        try:
            self._redeploy(resolved, checkpoint)
        except BaseException as exc:  # noqa: BLE001 - back to the old parallelism, else a failure of the job
            self._release_reservation()
            if self._revert(resolved, previous, checkpoint, exc):
                result.set_exception(
                    RescaleNotPlacedError(
                        f"job '{master.job_name}' could not be deployed at the new parallelism ({exc}); "
                        "it runs on at its previous parallelism"
                    )
                )
            else:
                with master._lock:
                    master._restarting = False
                result.set_exception(exc)
                master._on_failure(exc)
            self._next()
            return
        self.num_rescales += 1
        self.last_duration_ms = int((time.monotonic() - started) * 1000)
        log.info(
            "job '%s' rescaled to %s in %d ms from checkpoint %d (ms: %s)",
            master.job_name,
            {master.execution_graph.get_job_vertex(v).name: b.upper_bound for v, b in resolved.items()},
            self.last_duration_ms,
            checkpoint.checkpoint_id,
            ", ".join(f"{phase} {ms}" for phase, ms in self.last_phases.items()),
        )
        result.set_result(self.resource_requirements())
        self._next()

    def _revert(self, resolved: dict, previous: dict, checkpoint: Any, cause: BaseException) -> bool:
        """The redeploy at the new parallelism failed (e.g. the cluster could not place its
        TaskExecutors): deploy the job again at the parallelism it ran at, from the same
        checkpoint. True when it runs again."""
        master = self.master
        with master._lock:
            if master._cancel_requested or master._done.is_set():
                return False
        log.warning(
            "job '%s' could not be deployed at the new parallelism (%s); deploying it at its previous one",
            master.job_name,
            cause,
        )
        try:
            master._release_executors()
            back = {vertex: previous[vertex] for vertex in resolved if vertex in previous}
            self._redeploy(back, checkpoint)
        except BaseException:  # noqa: BLE001 - the caller fails the job with the first cause
            log.warning("job '%s' could not be deployed at its previous parallelism either", master.job_name)
            return False
        with master._lock:
            self.requirements.update(back)
        return True

    def _release_reservation(self) -> None:
        reservation, self._reservation = self._reservation, None
        self.master.release_reservation(reservation)

    def _redeploy(self, resolved: dict[str, ParallelismBounds], checkpoint: Any) -> None:
        """Cancel, rebuild the ExecutionGraph at the new parallelism and deploy it restored from
        ``checkpoint`` (the failover's steps, with a new graph); under RESTARTING."""
        master = self.master
        teardown = time.monotonic()
        master.coordinator.stop("rescaling")
        try:
            master._cancel_all_tasks()
        except Exception:  # noqa: BLE001 - executors already gone
            pass
        master._release_executors()
        self._release_reservation()  # the new deployment places where it was reserved
        cancelled_at = time.monotonic()
        with master._lock:
            if master._cancel_requested:  # cancelled meanwhile: the job ends CANCELED
                master._restarting = False
                cancelled = True
            else:
                cancelled = False
                old = master.execution_graph
                next_attempt = max((len(ev.executions) for ev in old.all_vertices()), default=0)
                job_graph = old.job_graph
                for vertex_id, bounds in resolved.items():
                    job_graph.get_vertex(vertex_id).parallelism = bounds.upper_bound
                graph = build_execution_graph(job_graph)
                for ev in graph.all_vertices():  # attempt numbers go on from the old graph's
                    ev.current_execution.attempt_number = next_attempt
                master.execution_graph = graph
                master.executions = {ev.current_execution.attempt_id: ev for ev in graph.all_vertices()}
                master._reports = {}
                master._collect_ids = {
                    a: ids for a, ev in master.executions.items() if (ids := collect_ids(ev.job_vertex.job_vertex))
                }
                master._open_collectors = set(master._collect_ids)
                master._closed_collectors = deque()
                master.coordinator.properties[OPERATORS_PROPERTY] = operator_properties(job_graph)
                if not master.periodic_checkpointing:  # a later failover restores this one
                    master.restored_from = checkpoint
        if cancelled:
            master._finish()
            return
        master._report_restored(checkpoint)
        master._deploy(checkpoint)
        with master._lock:
            master._restarting = False
            cancelled = master._cancel_requested
            if not cancelled:
                master._transition(JobStatus.RUNNING)
                master._mark_running()
        if cancelled:
            master._finish()
            return
        master._start_tasks()
        master._start_checkpointing()
        self.last_phases["cancel"] = int((cancelled_at - teardown) * 1000)
        self.last_phases["deploy"] = int((time.monotonic() - cancelled_at) * 1000)


def rescaler_of(master: Any) -> Rescaler:
    """The :class:`Rescaler` of ``master`` (made on first use)."""
    with master._lock:
        rescaler = getattr(master, "_rescaler", None)
        if rescaler is None:
            rescaler = master._rescaler = Rescaler(master)
        return rescaler


def rescale(master: Any, requirements: Mapping[str, Requirement]) -> Future:
    """Rescale ``master``'s running job to ``requirements`` ({vertex id or name: parallelism,
    :class:`ParallelismBounds` or FLIP-291's ``{"parallelism": {...}}``}); a future of the new
    requirements (FLIP-291's body) once the job runs at them again. A bad request or a job that
    cannot be rescaled now: a future failed at once with :class:`RescaleRequestError` /
    :class:`RescaleRefusedError`, the job untouched."""
    return rescaler_of(master).rescale(requirements)


__all__ = [
    "ParallelismBounds",
    "RescaleNotPlacedError",
    "RescaleRefusedError",
    "RescaleRequestError",
    "Rescaler",
    "check_rescalable",
    "find_job_vertex",
    "rescale",
    "rescaler_of",
    "resolve",
]
