"""The part of Flink's ``JobMaster`` that is the same wherever tasks run.

It owns the ExecutionGraph, moves every ``Execution`` through Flink's
:class:`~raylink.runtime.execution_state.ExecutionState` s (CREATED → SCHEDULED →
DEPLOYING → INITIALIZING → RUNNING → FINISHED / CANCELED / FAILED) and the job through
its :class:`~raylink.core.job_status.JobStatus` (CREATED → RUNNING → FINISHED, or FAILING →
FAILED, CANCELLING → CANCELED, RESTARTING → RUNNING), every move checked against Flink's
transitions and made under the JobMaster's lock; runs the ``CheckpointCoordinator`` of a
streaming job (periodic checkpoints when ``execution.checkpointing.interval`` is set), and turns the final task reports
(:class:`~raylink.runtime.task.task_events.TaskStateEvent`) into a ``JobExecutionResult``.

Failover (Flink's restart-all strategy): on a task failure or a lost TaskExecutor
the restart strategy decides. If it allows a restart the job goes RESTARTING: the
remaining tasks are cancelled, the deployment's executors released, and after the
strategy's backoff every subtask gets a new attempt, deployed afresh and restored
from the latest completed checkpoint (none: from the start); then RUNNING again.
Otherwise the job ends FAILED with the cause. Reports of earlier attempts are
ignored.

A job configured with ``execution.savepoint.path`` starts from that savepoint (or retained
checkpoint), checked against the program first (``runtime.job.state_assignment``); a failover
before its own first checkpoint restores that savepoint again. ``trigger_savepoint`` /
``stop_with_savepoint`` are PyFlink's JobClient calls (futures of the savepoint's folder); as in
Flink every streaming job takes them, with or without ``execution.checkpointing.interval``
(without it a failover restarts from the start, or from the savepoint the job started from, as
before: savepoints are not for recovery). A
failure that ``suppresses_restarts`` (state that cannot be restored into this program) fails
the job without asking the restart strategy.

Subclasses place and start the tasks (in this process, or on Ray actors):
``_deploy(restore)``, ``_start_tasks()``, ``_cancel_all_tasks()``,
``_release_executors()``, ``_trigger_checkpoint`` / ``_notify_checkpoint``, and
call ``on_task_event`` with what the TaskExecutors report.
"""

from __future__ import annotations

import os
import threading
import time
import uuid
from collections import deque
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, Optional

from raylink.core.checkpointing import DEFAULT_CHECKPOINTS_DIR
from raylink.core.job_status import JobStatus
from raylink.core.options import (
    CheckpointingOptions,
    ExecutionOptions,
    MetricOptions,
    RestOptions,
    SavepointConfigOptions,
)
from raylink.errors import suppresses_restarts
from raylink.graph.execution_graph import ExecutionGraph, build_execution_graph
from raylink.runtime.client.executors import PipelineExecutor
from raylink.runtime.client.job_result import (
    CloseableIterator,
    JobExecutionException,
    JobExecutionResult,
    collect_ids,
    collected_records,
)
from raylink.runtime.execution_state import ExecutionState
from raylink.runtime.job.autoscaler import JobAutoScaler, create_autoscaler
from raylink.runtime.job.checkpoint_coordinator import CheckpointCoordinator, CheckpointException
from raylink.runtime.job.checkpoint_stats import CheckpointStatsSnapshot
from raylink.runtime.job.restart_strategy import create_restart_strategy
from raylink.runtime.job.state_assignment import (
    OPERATORS_PROPERTY,
    check_state_assignment,
    first_checkpoint_id,
    operator_properties,
)
from raylink.runtime.metrics import MetricsHttpServer, aggregate_by_vertex
from raylink.runtime.task.task_events import (
    AcknowledgeCheckpoint,
    FinalCheckpointRequest,
    TaskEvent,
    TaskStateEvent,
)
from raylink.state.checkpoint_storage import CheckpointStorage, CompletedCheckpoint, load_completed_checkpoint
from raylink.state.savepoint_targets import check_restorable, state_file_paths


def _failed_future(error: BaseException) -> Future:
    """A future that failed with ``error`` (Flink's JobClient answers a bad request so)."""
    future: Future = Future()
    future.set_exception(error)
    return future


@dataclass(frozen=True)
class FailureRecord:
    """One failure of the job (Flink's ``ExceptionHistoryEntry``): when, from which task, where."""

    error: BaseException
    timestamp_ms: int
    task_name: Optional[str] = None
    location: Optional[str] = None


def merge_accumulators(per_task: list[dict]) -> dict:
    """Lists are concatenated (subtask order), numbers summed, anything else: last wins."""
    merged: dict = {}
    for accumulators in per_task:
        for name, value in accumulators.items():
            if name not in merged:
                merged[name] = list(value) if isinstance(value, list) else value
            elif isinstance(value, list):
                merged[name].extend(value)
            elif isinstance(value, (int, float)) and isinstance(merged[name], (int, float)):
                merged[name] += value
            else:
                merged[name] = value
    return merged


class JobMasterBase:
    """Execution-state bookkeeping and the JobClient API shared by the executors."""

    def __init__(self, env: Any, job_name: Optional[str]) -> None:
        # a recovered job keeps its id (high availability: its checkpoints and HA entries are under it)
        self.job_id = getattr(env, "job_id", None) or uuid.uuid4().hex
        job_graph = env.get_job_graph(job_name)
        self.job_name = job_graph.job_name
        self.configuration = env.configuration
        self.execution_graph: ExecutionGraph = build_execution_graph(job_graph)
        self.executions = {ev.current_execution.attempt_id: ev for ev in self.execution_graph.all_vertices()}
        self._lock = threading.RLock()
        self._reported = threading.Condition(self._lock)  # a task report arrived / the job ended
        self._status = JobStatus.CREATED
        #: epoch ms the job last entered each status it reached (Flink's ``getStatusTimestamp``)
        self.status_timestamps: dict[str, int] = {JobStatus.CREATED.value: int(time.time() * 1000)}
        self._failure: Optional[BaseException] = None
        self._cancel_requested = False
        self._done = threading.Event()
        self._reports: dict[str, TaskStateEvent] = {}
        # execute_and_collect: the collect ids of every subtask with a collect sink whose
        # reader has not seen it close, and those closed whose last records are not read yet
        self._collect_ids: dict[str, list[str]] = {
            attempt_id: ids
            for attempt_id, ev in self.executions.items()
            if (ids := collect_ids(ev.job_vertex.job_vertex))
        }
        self._open_collectors: set[str] = set(self._collect_ids)
        self._closed_collectors: deque[str] = deque()  # popped from the left: O(1) per sink
        self._started = time.perf_counter()
        self._ended: Optional[float] = None
        self.metrics_server: Any = None  # optional Prometheus endpoint (``metrics.port``)
        self.rest_endpoint: Any = None  # the driver's REST API and dashboard (``rest.port``)
        self.exception_history: deque[FailureRecord] = deque(maxlen=64)  # the REST API's exceptionHistory
        # fault tolerance
        conf = self.configuration
        self.restart_strategy = create_restart_strategy(conf)
        self.num_restarts = 0
        self._restarting = False
        self._wake = threading.Event()  # cuts a restart backoff short (cancel)
        # execution.savepoint.path: the savepoint (or retained checkpoint) the job starts from,
        # checked against this program before anything is deployed
        self.restored_from: Optional[CompletedCheckpoint] = None
        savepoint_path = conf.get(SavepointConfigOptions.SAVEPOINT_PATH)
        if savepoint_path:
            self.restored_from = load_completed_checkpoint(savepoint_path)  # reads no pickle
            # its state files are unpickled on restore: none another user could have written
            check_restorable(savepoint_path, state_file_paths(self.restored_from))
            allow = bool(conf.get(SavepointConfigOptions.SAVEPOINT_IGNORE_UNCLAIMED_STATE))
            check_state_assignment(self.restored_from, job_graph, allow)
        self.checkpoint_storage: Optional[CheckpointStorage] = None
        self.coordinator: Optional[CheckpointCoordinator] = None
        #: execution.checkpointing.interval is set: periodic checkpoints, restarts restore the latest
        self.periodic_checkpointing = bool(conf.get(CheckpointingOptions.CHECKPOINTING_INTERVAL))
        # Flink: every streaming job has a CheckpointCoordinator (savepoints are taken whether or not
        # periodic checkpoints are on); BATCH jobs have none. Without an interval nothing is
        # written until a savepoint is taken (its state is staged in the checkpoint directory).
        if job_graph.job_type != "BATCH":
            self.checkpoint_storage = CheckpointStorage.from_configuration(
                conf, self.job_id, default_directory=os.path.abspath(DEFAULT_CHECKPOINTS_DIR)
            )
            if self.periodic_checkpointing:
                self.checkpoint_storage.initialize_base_locations()  # not writable: fail now, naming it
            self.coordinator = CheckpointCoordinator(
                self.checkpoint_storage,
                conf,
                self._trigger_checkpoint,
                lambda cid: self._notify_checkpoint(cid, True),
                lambda cid: self._notify_checkpoint(cid, False),
                self._checkpointing_failed,
                properties={OPERATORS_PROPERTY: operator_properties(job_graph)},
                first_checkpoint_id=first_checkpoint_id(self.restored_from),
            )
            if self.restored_from is not None:
                self._report_restored(self.restored_from)
        #: job.autoscaler.enabled: the autoscaler (its options checked now, started once RUNNING)
        self.autoscaler: Optional[JobAutoScaler] = create_autoscaler(self)

    # -- to be provided by an executor ---------------------------------------------------------------
    def _cancel_all_tasks(self) -> None:
        raise NotImplementedError

    def _release_resources(self) -> None:
        """Free every actor / partition the job used (called once, when it ends)."""

    def _release_executors(self) -> None:
        """Free the executors of the current deployment (before a restart)."""

    def _deploy(self, restore: Any) -> None:
        """Place and deploy every subtask's current attempt (restored from ``restore``)."""
        raise NotImplementedError

    def reserve_resources(self, parallelism: dict) -> Any:
        """Before a rescale stops the job: reserve what its executors at ``parallelism`` ({job
        vertex id: parallelism}) need beyond what it holds, and wait for it (an exception when it
        cannot be had); a reservation for :meth:`release_reservation`, or None. In-process
        executors need nothing."""
        return None

    def release_reservation(self, reservation: Any) -> None:
        """Give back what :meth:`reserve_resources` reserved."""

    def _start_tasks(self) -> None:
        raise NotImplementedError

    def _trigger_checkpoint(self, checkpoint_id: int, timestamp: int, stop: Optional[str] = None) -> None:
        raise NotImplementedError

    def _notify_checkpoint(self, checkpoint_id: int, complete: bool) -> None:
        raise NotImplementedError

    def _live_metrics(self) -> list[dict]:
        return []

    # -- state machine -------------------------------------------------------------------------------
    def _transition(self, status: JobStatus) -> None:
        """Move the job to ``status`` (a move Flink does not make raises); under ``_lock``."""
        self._status = self._status.transition_to(status)
        self.status_timestamps[self._status.value] = int(time.time() * 1000)

    def _report_restored(self, restore: CompletedCheckpoint) -> None:
        """A deployment starts from ``restore``: the checkpoint statistics count it (as Flink's)."""
        if self.coordinator is None:
            return
        self.coordinator.stats.last_restored_id = restore.checkpoint_id
        self.coordinator.stats_tracker.report_restored(
            restore.checkpoint_id,
            int(time.time() * 1000),
            bool(restore.properties.get("savepoint")),
            restore.external_pointer,
        )

    def _set_all(self, *states: ExecutionState) -> None:
        """Move every current attempt that has not ended through ``states``, in order."""
        for ev in self.executions.values():
            execution = ev.current_execution
            state = ExecutionState(execution.state)
            if not state.is_terminal():
                for new in states:
                    state = state.transition_to(new)
                execution.state = state

    def _mark_running(self) -> None:
        """The deployed attempts are being started: INITIALIZING, then RUNNING (the
        TaskExecutors report final states only). Under ``_lock``, before the tasks start,
        so that no final report is overwritten."""
        self._set_all(ExecutionState.INITIALIZING, ExecutionState.RUNNING)

    def _job_running(self) -> None:
        port = self.configuration.get(MetricOptions.PORT)
        if port >= 0 and self.metrics_server is None:
            try:
                self.metrics_server = MetricsHttpServer(self.get_metrics, self.job_name, port)
            except OSError as exc:  # metrics.port busy: the job never runs; free every actor it holds
                self._failure = exc
                self._finish()
                raise
        with self._lock:
            self._transition(JobStatus.RUNNING)
            self._started = time.perf_counter()
            self._mark_running()
        if self.autoscaler is not None:
            self.autoscaler.start()

    def _start_checkpointing(self) -> None:
        if self.coordinator is not None:
            vertex_of = {a: (ev.job_vertex.id, ev.subtask_index) for a, ev in self.executions.items()}
            self.coordinator.start(set(self.executions), vertex_of)

    def _checkpointing_failed(self, error: BaseException) -> None:
        self._on_failure(error, finish_now=False)

    def _take_collected(self, timeout: float) -> list[tuple[str, str, list, bool]]:
        """``TaskExecutor.take_collected`` over every executor hosting an open collect sink."""
        raise NotImplementedError

    def _request_collected(self) -> None:
        """Ask every executor hosting an open collect sink for its next records now, ahead of
        the next ``_take_collected`` (remote executors: while the reader works on these)."""

    def on_task_event(self, event: TaskEvent) -> None:
        """A task reached FINISHED / CANCELED / FAILED, or acknowledged / declined a checkpoint,
        or asks for its final checkpoint."""
        attempt_id = event.attempt_id
        if not isinstance(event, TaskStateEvent):
            coordinator = self.coordinator
            if coordinator is None or attempt_id not in self.executions:
                return
            if isinstance(event, FinalCheckpointRequest):
                coordinator.request_checkpoint()
            elif isinstance(event, AcknowledgeCheckpoint):
                coordinator.receive_ack(attempt_id, event.checkpoint_id, event.handles, event.stats)
            else:
                coordinator.receive_decline(attempt_id, event.checkpoint_id, event.reason)
            return
        error = event.failure_cause()
        state = ExecutionState(event.state)
        with self._lock:
            if attempt_id in self._reports or attempt_id not in self.executions or self._restarting:
                return  # a duplicate, an earlier attempt's, or one of a deployment being torn down
            self._reports[attempt_id] = event
            self._reported.notify_all()
            execution = self.executions[attempt_id].current_execution
            execution.state = ExecutionState(execution.state).transition_to(state)
            execution.failure_cause = error
            last = self._every_task_reported()
        if state is ExecutionState.FINISHED and self.coordinator is not None:
            self.coordinator.task_finished(attempt_id)
        if state is ExecutionState.FAILED:
            cause = error or RuntimeError(f"task {event.task} failed")
            self.exception_history.append(
                FailureRecord(cause, int(time.time() * 1000), event.task, execution.assigned_location)
            )
            self._on_failure(cause, finish_now=last)
        elif last:
            self._finish()

    def fail(self, error: BaseException) -> None:
        """A TaskExecutor was lost (or the job cannot go on): fail over, or fail the job now."""
        self.exception_history.append(FailureRecord(error, int(time.time() * 1000)))
        self._on_failure(error, finish_now=True)

    def _on_failure(self, error: BaseException, finish_now: bool = False) -> None:
        """Restart from the latest checkpoint if the restart strategy allows, else fail the job
        (at once with ``finish_now``, else when the cancelled tasks have reported)."""
        with self._lock:
            if self._done.is_set() or self._restarting:
                return
            if self._failure is None and not self._cancel_requested and not suppresses_restarts(error):
                strategy = self.restart_strategy
                strategy.notify_failure(int(time.time() * 1000))
                if strategy.can_restart():
                    self._restarting = True
                    self._transition(JobStatus.RESTARTING)
                    threading.Thread(
                        target=self._restart, args=(error,), name=f"failover {self.job_id[:6]}", daemon=True
                    ).start()
                    return
            if self._failure is None:
                self._failure = error
            self._transition(JobStatus.FAILING)
        try:
            if self.coordinator is not None:
                self.coordinator.stop("the job is failing")
            self._cancel_all_tasks()
        finally:
            if finish_now:
                self._finish()

    def _restart(self, cause: BaseException) -> None:
        """Failover thread: tear the deployment down, wait the backoff, deploy new attempts
        restored from the latest completed checkpoint."""
        try:
            if self.coordinator is not None:
                self.coordinator.stop("failover")
            try:
                self._cancel_all_tasks()
            except Exception:  # executors already gone
                pass
            self._release_executors()
            self._wake.wait(self.restart_strategy.backoff_time_ms() / 1000.0)
            with self._lock:
                if self._cancel_requested:
                    self._restarting = False
                    cancelled = True
                else:
                    cancelled = False
                    for ev in self.execution_graph.all_vertices():
                        ev.new_attempt()
                    self.executions = {
                        ev.current_execution.attempt_id: ev for ev in self.execution_graph.all_vertices()
                    }
                    self._reports = {}
                    self._collect_ids = {
                        a: ids for a, ev in self.executions.items() if (ids := collect_ids(ev.job_vertex.job_vertex))
                    }
                    self._open_collectors = set(self._collect_ids)
                    self._closed_collectors = deque()
                    self.num_restarts += 1
            if cancelled:
                self._finish()
                return
            restore = None
            if self.checkpoint_storage is not None and self.periodic_checkpointing:  # savepoints alone: none
                restore = self.checkpoint_storage.latest_completed()
            if restore is None:  # no checkpoint of its own yet: the savepoint it started from
                restore = self.restored_from
            if restore is not None:
                self._report_restored(restore)
            self._deploy(restore)
            with self._lock:
                self._restarting = False
                cancelled = self._cancel_requested
                if not cancelled:
                    self._transition(JobStatus.RUNNING)
                    self._mark_running()
            if cancelled:  # cancelled while deploying: the new attempts never start
                self._finish()
                return
            self._start_tasks()
            self._start_checkpointing()
        except BaseException as exc:  # noqa: BLE001 - a failed restart is one more failure
            with self._lock:
                self._restarting = False
            exc.__cause__ = exc.__cause__ or cause
            self._on_failure(exc)

    def _every_task_reported(self) -> bool:
        """Under the lock: every task of this deployment has reported its end (the job is ending,
        though its status says RUNNING until :meth:`_finish`)."""
        return len(self._reports) == len(self.executions)

    def _finish(self) -> None:
        if self.coordinator is not None:
            self.coordinator.stop("the job has ended")
        with self._lock:
            if self._done.is_set():
                return
            self._ended = time.perf_counter()
            if self._failure is not None:
                self._transition(JobStatus.FAILED)
            elif self._cancel_requested:
                self._transition(JobStatus.CANCELED)
            else:
                self._transition(JobStatus.FINISHED)
        try:
            self._release_resources()
            if self.periodic_checkpointing:
                discard = self._status is JobStatus.FINISHED  # nothing left to restore (Flink's default)
            else:  # the copies of the savepoints it took (none: nothing was written)
                discard = self.coordinator is not None and self.coordinator.stats.num_completed > 0
            if self.checkpoint_storage is not None and discard:
                self.checkpoint_storage.shutdown(discard=True)
        finally:
            if self.metrics_server is not None:
                self.metrics_server.close()
            if self.rest_endpoint is not None:
                self.rest_endpoint.close()
            with self._lock:
                self._done.set()
                self._reported.notify_all()

    # -- JobClient --------------------------------------------------------------------------------------
    def get_job_id(self) -> str:
        return self.job_id

    def get_job_status(self) -> JobStatus:
        """The job's status (a str: ``get_job_status() == "RUNNING"`` works)."""
        return self._status

    def cancel(self) -> None:
        """Cancel the job's tasks; it ends CANCELED (FAILED if it was already failing or a
        task fails while cancelling)."""
        with self._lock:
            self._cancel_requested = True
            self._wake.set()
            if self._done.is_set() or self._status.is_globally_terminal_state():
                return  # ended meanwhile (its resources may still be being released)
            if self._status is not JobStatus.FAILING:  # a failing job is being torn down already
                self._transition(JobStatus.CANCELLING)
        if self.coordinator is not None:
            self.coordinator.stop("the job is cancelled")
        self._cancel_all_tasks()

    def wait(self, timeout: Optional[float] = None) -> bool:
        return self._done.wait(timeout)

    def fetch_collected(self, timeout: float = 0.5) -> Optional[list]:
        """The next records of the job's collect sinks, ``[]`` if none came within ``timeout``
        seconds, ``None`` once every collect sink has ended and all its records were read.
        One reader at a time (the CloseableIterator)."""
        chunks = self.fetch_collected_chunks(timeout)
        return None if chunks is None else collected_records(chunks)

    def fetch_collected_chunks(self, timeout: float = 0.5) -> Optional[list]:
        """``fetch_collected``'s records as they came: chunks of records, each a list or the
        bytes a remote TaskExecutor pickled them into (``collected_records`` reads them), so
        a Dispatcher passes them on to its client without unpickling and pickling again."""
        if self._closed_collectors:  # a closed sink's last records come with its task's report
            attempt_id = self._closed_collectors[0]
            with self._lock:
                if attempt_id not in self._reports and not self._done.is_set():
                    self._reported.wait(timeout)
                report = self._reports.get(attempt_id)
                if report is None and not self._done.is_set():
                    return []
            self._closed_collectors.popleft()
            accumulators = report.accumulators if report is not None else {}
            return [[r for cid in self._collect_ids[attempt_id] for r in accumulators.get(cid, ())]]
        if not self._open_collectors:
            return None
        done = self._done.is_set()  # before the take: what it returns is then all there is
        out: list = []
        for attempt_id, _collect_id, records, closed in self._take_collected(timeout):
            if records:
                out.append(records)
            if closed and attempt_id in self._open_collectors:
                self._open_collectors.discard(attempt_id)
                self._closed_collectors.append(attempt_id)
        if done and not out:
            # Every task has reported, so every sink has closed and its last records are in its
            # task's report. A sink whose closing no take saw (its executor was reset for the
            # session's pool first) would otherwise be asked forever, answered with nothing.
            for attempt_id in [a for a in self._collect_ids if a in self._open_collectors]:
                self._open_collectors.discard(attempt_id)
                self._closed_collectors.append(attempt_id)
            return out
        self._request_collected()
        return out

    @property
    def collect_sinks_open(self) -> bool:
        """Some collect sink has not been seen to close: its reader is still expected."""
        return bool(self._open_collectors)

    @property
    def collected_unread(self) -> bool:
        """Some collect sink's records are not read yet (open, or closed with its last records)."""
        return bool(self._open_collectors or self._closed_collectors)

    def collect(self, limit: Optional[int] = None) -> CloseableIterator:
        """The records of the job's collect sink as they arrive."""
        return CloseableIterator(self, limit)

    def get_job_execution_result(self, timeout: Optional[float] = None) -> JobExecutionResult:
        if not self._done.wait(timeout):
            raise TimeoutError(f"job '{self.job_name}' did not finish within {timeout} s")
        if self._status is not JobStatus.FINISHED:
            raise JobExecutionException(
                self.job_name, self._status, self._failure, self.num_restarts
            ) from self._failure
        ordered = [self._reports[a] for a in self.executions if a in self._reports]
        return JobExecutionResult(
            job_id=self.job_id,
            job_name=self.job_name,
            net_runtime_ms=int(((self._ended or time.perf_counter()) - self._started) * 1000),
            accumulators=merge_accumulators([r.accumulators for r in ordered]),
            task_metrics=[r.metrics for r in ordered if r.metrics],
        )

    def _savepoint_target(self, savepoint_directory: Optional[str], what: str) -> str:
        coordinator = self.coordinator
        if coordinator is None:
            raise CheckpointException(f"{what}: job '{self.job_name}' runs in BATCH mode, which takes no savepoints")
        target = savepoint_directory or self.configuration.get(SavepointConfigOptions.SAVEPOINT_DIRECTORY)
        if not target:
            raise CheckpointException(
                f"{what}: no savepoint directory given and none configured "
                f"({SavepointConfigOptions.SAVEPOINT_DIRECTORY.key} / state.savepoints.dir)"
            )
        target = str(target)
        return target if "://" in target else os.path.abspath(target)

    def trigger_savepoint(self, savepoint_directory: Optional[str] = None, formatType: Any = None) -> Future:
        """PyFlink's ``JobClient.trigger_savepoint``: a future of the savepoint's folder (a new
        ``savepoint-<job id prefix>-<random>`` folder under ``savepoint_directory``, else under
        ``execution.checkpointing.savepoint-dir``); the job keeps running."""
        try:
            target = self._savepoint_target(savepoint_directory, "trigger_savepoint")
        except CheckpointException as exc:
            return _failed_future(exc)
        return self.coordinator.trigger_savepoint(target)

    def stop_with_savepoint(
        self,
        advance_to_end_of_event_time: bool = False,
        savepoint_directory: Optional[str] = None,
        formatType: Any = None,
    ) -> Future:
        """PyFlink's ``JobClient.stop_with_savepoint``: the sources stop (after emitting the end
        of event time with ``advance_to_end_of_event_time``, so event-time windows and timers
        fire), the savepoint is taken, two-phase-commit sinks commit it, then every task ends
        and the job is FINISHED. The future completes with the savepoint's folder once the job
        ended (or with the failure; a failed savepoint leaves the job running, as in Flink)."""
        try:
            target = self._savepoint_target(savepoint_directory, "stop_with_savepoint")
        except CheckpointException as exc:
            return _failed_future(exc)
        taken = self.coordinator.trigger_savepoint(target, "drain" if advance_to_end_of_event_time else "suspend")
        result: Future = Future()

        def job_ended(path: str) -> None:
            self._done.wait()
            if self._status is JobStatus.FINISHED:
                result.set_result(path)
            else:
                result.set_exception(
                    CheckpointException(
                        f"stop_with_savepoint: savepoint {path!r} was taken, but job '{self.job_name}' ended "
                        f"{self._status.value}" + (f": {self._failure}" if self._failure else "")
                    )
                )

        def taken_done(future: Future) -> None:
            error = future.exception()
            if error is not None:
                result.set_exception(error)
            else:
                threading.Thread(target=job_ended, args=(future.result(),), daemon=True).start()

        taken.add_done_callback(taken_done)
        return result

    def rescale(self, requirements: Any) -> Future:
        """Rescale the running job (Flink's adaptive scheduler, FLIP-291): ``requirements``
        maps vertex ids or names to a parallelism (or ``ParallelismBounds``); a checkpoint is
        taken and every task redeployed at the new parallelism from it, same job id. A future
        of the new requirements; failed at once for a bad request
        (:mod:`raylink.runtime.job.rescaling`)."""
        from raylink.runtime.job.rescaling import rescale

        return rescale(self, requirements)

    def get_resource_requirements(self) -> dict:
        """FLIP-291's ``{vertex id: {"parallelism": {"lowerBound", "upperBound"}}}`` of the job."""
        from raylink.runtime.job.rescaling import rescaler_of

        return rescaler_of(self).resource_requirements()

    def get_autoscaler_status(self) -> dict:
        """The autoscaler's state, evaluated metrics per vertex, events and parallelism over time
        (``{"enabled": False}`` without ``job.autoscaler.enabled``; :mod:`raylink.runtime.job.autoscaler`)."""
        return {"enabled": False} if self.autoscaler is None else self.autoscaler.status()

    def get_checkpoint_stats(self) -> dict:
        """Flink's checkpoint statistics plus ``numRestarts`` (Flink's job metric); the last
        completed checkpoint's per-subtask figures under ``lastCheckpointSubtasks`` (task name ->
        sync / async / alignment ms and bytes)."""
        if self.coordinator is None:
            return {"numRestarts": self.num_restarts}
        stats = self.coordinator.stats.to_dict()
        stats["numRestarts"] = self.num_restarts
        names = {a: ev.name for a, ev in self.executions.items()}
        stats["lastCheckpointSubtasks"] = {
            names.get(a, a): dict(s) for a, s in self.coordinator.stats.per_subtask.items()
        }
        return stats

    def get_checkpoint_statistics(self) -> Optional[CheckpointStatsSnapshot]:
        """What the checkpoint coordinator measured (counts, history, latest, summaries; Flink's
        ``CheckpointStatsSnapshot``), None for a BATCH job (it takes no checkpoints)."""
        return None if self.coordinator is None else self.coordinator.stats_tracker.snapshot()

    def get_vertex_metrics(self) -> dict:
        """Per JobVertex, as Flink's web UI aggregates them (with back-pressure status)."""
        return aggregate_by_vertex(self.get_metrics())

    def get_metrics(self) -> list[dict]:
        """Per-subtask metrics: live while running, the final reports afterwards."""
        if self._done.is_set():
            return [r.metrics for r in self._reports.values() if r.metrics]
        return self._live_metrics()


class JobExecutor(PipelineExecutor):
    """Flink's ``PipelineExecutor`` for one JobClient class: each job gets a new client
    (its JobMaster), which deploys and starts it."""

    def __init__(self, client_class: type) -> None:
        self.client_class = client_class

    def execute_async(self, env: Any, job_name: Optional[str] = None) -> Any:
        client = self.client_class(env, job_name)
        env.transformations.clear()  # Flink clears the program once it is submitted
        conf = client.configuration  # Flink's MiniCluster has no web UI unless asked: local jobs only when set
        if conf.get(ExecutionOptions.TARGET) == "ray" or conf.contains_key(RestOptions.ENABLED.key):
            from raylink.runtime.rest.rest_server import start_job_endpoint  # aiohttp: only when served

            try:
                client.rest_endpoint = start_job_endpoint(client)  # closed when the job ends (_finish)
            except (OSError, ValueError) as exc:  # no port, a bind refused, bad TLS files: free every actor
                client._failure = exc
                client._finish()
                raise
        try:
            return client.start()
        except BaseException:
            if client.rest_endpoint is not None:
                client.rest_endpoint.close()
            raise
