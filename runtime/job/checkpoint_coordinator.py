"""Flink's ``CheckpointCoordinator``: triggers checkpoints, collects acknowledgements,
completes, expires and declines them, and tells every task the outcome.

The JobMaster owns one per deployment of the job. Every
``execution.checkpointing.interval`` ms (after ``min-pause`` since the last one ended,
with at most ``max-concurrent-checkpoints`` in flight) it calls ``trigger(id,
timestamp)``, which sends the trigger to the source tasks. Each task acknowledges
with the handles of its state (``receive_ack``) or declines (``receive_decline``).
When every task of the deployment acknowledged, the checkpoint is finalised in the
``CheckpointStorage`` (its ``_metadata`` is written last) and ``notify_complete(id)``
reaches every task (two-phase-commit sinks commit there). A checkpoint still pending
after ``execution.checkpointing.timeout`` expires; an expired or declined checkpoint
is aborted (``notify_aborted``) and counted, and more consecutive failures than
``execution.checkpointing.tolerable-failed-checkpoints`` fail the job over.

Savepoints (``trigger_savepoint``) are checkpoints that ignore the pause and concurrency
limits, taken whether or not periodic checkpoints are on (interval unset: the coordinator only
takes savepoints); when one completes its folder is copied into a self-contained savepoint
folder and its future completes with that folder's path. As in Flink, the tasks hear of a
completed savepoint (``notify_complete``: two-phase-commit sinks commit) only when it stops the
job; a plain savepoint's output is committed by the next checkpoint (or at the end of input). A failed savepoint fails its future, never the
job. A stop-with-savepoint (``stop`` "suspend" / "drain") suspends periodic checkpoints
(none may commit output past it) until it completes, or resumes them if it fails.
Savepoints reach the tasks with ``stop`` "savepoint" when they do not stop the job, so
the sources inject aligned barriers for them even with unaligned checkpoints on (Flink:
savepoints are always aligned). ``trigger_checkpoint_now`` takes a checkpoint at once with
aligned barriers and a future of it (a rescale restores it at another parallelism; no periodic
checkpoint follows it until the next deployment starts). Unaligned checkpoints
(``execution.checkpointing.unaligned.enabled``) need ``execution.checkpointing.mode``
exactly_once: with at_least_once the coordinator refuses to start
(``IllegalConfigurationError``); the in-flight bytes a checkpoint persisted are
``lastCheckpointPersistedData``.

Every checkpoint is reported as it goes to a
:class:`~raylink.runtime.job.checkpoint_stats.CheckpointStatsTracker` (``stats_tracker``:
trigger time, type, each subtask's acknowledgement with the coordinator's clock when it came,
sizes written and full, persisted in-flight data), which keeps the last
``web.checkpoints.history`` of them for the REST API whether or not anyone asks. A subtask's
full state size adds to its handles' bytes the shared files they refer to (sizes read once per
file from the storage: shared files never change); when one cannot be read the size is
unknown (None), never guessed.

With high availability (``use_high_availability``) every checkpoint id is written to the job's
``CheckpointIDCounter`` before the trigger leaves, and a completed checkpoint's pointer to its
``CompletedCheckpointStore`` before it counts (before any task hears it completed), so a
recovered JobMaster restores exactly what sinks may have committed
(:mod:`raylink.runtime.job.high_availability`).

Thread-safety: all methods may be called from any thread; one lock guards the
pending checkpoints. Callbacks run without the lock held.
"""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from raylink.core.options import CheckpointingOptions, IllegalConfigurationError, WebOptions, read_option
from raylink.errors import RaylinkError
from raylink.runtime.job.checkpoint_stats import CheckpointStatsTracker, SubtaskStateStats
from raylink.runtime.task.channel_state_handling import SAVEPOINT

log = logging.getLogger(__name__)


class CheckpointException(RaylinkError, RuntimeError):
    """A checkpoint failed (declined, expired, not finalised) or too many did."""


@dataclass
class SavepointRequest:
    """A savepoint asked for (Flink's ``CheckpointProperties`` of a savepoint): where its folder
    goes, whether the job stops with it ("suspend", "drain" or None) and the future its path
    completes."""

    target_directory: str
    stop: Optional[str]
    future: Future


@dataclass
class PendingCheckpoint:
    checkpoint_id: int
    trigger_timestamp: int
    started: float
    not_yet_acknowledged: set
    handles: dict = field(default_factory=dict)  # operator id -> {subtask: handle}
    task_stats: dict = field(default_factory=dict)  # attempt id -> stats
    savepoint: Optional[SavepointRequest] = None


@dataclass
class CheckpointStats:
    """Flink's checkpoint statistics (the last completed one and the counts)."""

    num_completed: int = 0
    num_failed: int = 0
    num_in_progress: int = 0
    last_checkpoint_id: Optional[int] = None
    last_duration_ms: Optional[int] = None
    last_size: Optional[int] = None
    last_full_size: Optional[int] = None
    last_alignment_ms: Optional[float] = None
    last_persisted_data: Optional[int] = None
    last_unaligned: Optional[bool] = None
    last_restored_id: Optional[int] = None
    last_failure: Optional[str] = None
    per_subtask: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {
            "numberOfCompletedCheckpoints": self.num_completed,
            "numberOfFailedCheckpoints": self.num_failed,
            "numberOfInProgressCheckpoints": self.num_in_progress,
            "lastCheckpointId": self.last_checkpoint_id,
            "lastCheckpointDuration": self.last_duration_ms,
            "lastCheckpointSize": self.last_size,
            "lastCheckpointFullSize": self.last_full_size,
            "lastCheckpointAlignmentTime": self.last_alignment_ms,
            "lastCheckpointPersistedData": self.last_persisted_data,
            "lastCheckpointUnaligned": self.last_unaligned,
            "lastRestoredCheckpointId": self.last_restored_id,
            "lastCheckpointFailure": self.last_failure,
        }


class CheckpointCoordinator:
    #: high availability (``use_high_availability``): the job's CheckpointIDCounter and CompletedCheckpointStore
    _id_counter: Any = None
    _completed_store: Any = None

    def __init__(
        self,
        storage: Any,
        settings: Any,
        trigger: Callable[[int, int, Optional[str]], None],
        notify_complete: Callable[[int], None],
        notify_aborted: Callable[[int], None],
        fail_job: Callable[[BaseException], None],
        stats: Optional[CheckpointStats] = None,
        properties: Optional[dict] = None,
        first_checkpoint_id: int = 1,
    ) -> None:
        self.storage = storage
        self.interval_ms = read_option(settings, CheckpointingOptions.CHECKPOINTING_INTERVAL) or 0
        self.timeout_ms = read_option(settings, CheckpointingOptions.CHECKPOINTING_TIMEOUT)
        self.min_pause_ms = read_option(settings, CheckpointingOptions.MIN_PAUSE_BETWEEN_CHECKPOINTS)
        self.max_concurrent = read_option(settings, CheckpointingOptions.MAX_CONCURRENT_CHECKPOINTS)
        self.tolerable_failures = read_option(settings, CheckpointingOptions.TOLERABLE_FAILURE_NUMBER)
        self.unaligned = bool(read_option(settings, CheckpointingOptions.ENABLE_UNALIGNED))
        if self.unaligned and read_option(settings, CheckpointingOptions.CHECKPOINTING_MODE) != "exactly_once":
            raise IllegalConfigurationError(
                f"{CheckpointingOptions.ENABLE_UNALIGNED.key}: unaligned checkpoints can only be enabled with "
                f"{CheckpointingOptions.CHECKPOINTING_MODE.key} exactly_once (it is at_least_once); set the mode to "
                f"exactly_once or turn unaligned checkpoints off"
            )
        self._trigger = trigger
        self._notify_complete = notify_complete
        self._notify_aborted = notify_aborted
        self._fail_job = fail_job
        self.stats = stats if stats is not None else CheckpointStats()
        self.stats_tracker = CheckpointStatsTracker(read_option(settings, WebOptions.CHECKPOINTS_HISTORY_SIZE))
        self._vertex_of: dict = {}  # attempt id -> (JobVertex id, subtask index)
        self._shared_sizes: dict[str, int] = {}  # shared file -> its size (they never change)
        self._lock = threading.Condition()
        self._pending: dict[int, PendingCheckpoint] = {}
        self._tasks: set = set()
        # Flink 2 (FLIP-147): finished tasks no longer acknowledge; their last state is carried
        # into later checkpoints. attempt id -> (checkpoint id, {operator id: {subtask: handle}})
        self._last_handles: dict = {}
        self._finished: set = set()
        # checkpoint ids go on from a restored savepoint's (Flink): a sink's committables are kept by id
        self._next_id = max(storage.next_checkpoint_id(), first_checkpoint_id)
        self.properties = dict(properties or {})  # stored in every checkpoint's _metadata
        self._stopping = False  # a stop-with-savepoint was triggered: no more periodic checkpoints
        #: checkpoints of trigger_checkpoint_now: id -> (future of the CompletedCheckpoint, suspends periodic)
        self._waiting: dict[int, tuple[Future, bool]] = {}
        self._last_end = 0.0
        self._consecutive_failures = 0
        self._running = False
        self._requested = False  # a task at the end of its input asks for its final checkpoint
        self._thread: Optional[threading.Thread] = None

    # -- lifecycle -------------------------------------------------------------------------------------
    def start(self, tasks_to_ack: set, vertex_of: Optional[dict] = None) -> None:
        """Begin periodic checkpoints of a deployment whose tasks are ``tasks_to_ack``
        (``vertex_of``: attempt id -> (JobVertex id, subtask index), for the statistics)."""
        with self._lock:
            self._tasks = set(tasks_to_ack)
            self._vertex_of = dict(vertex_of or {a: (str(a), 0) for a in tasks_to_ack})
            self._last_handles, self._finished = {}, set()
            self._running = True
            self._stopping = False  # a new deployment: a stop or rescale of the last one is over
            self._last_end = time.monotonic()
            # created and started under the lock: a task failing at once calls stop() from its own
            # thread, which must never find a thread that is set but not started yet
            if self.interval_ms > 0 and self._thread is None:
                self._thread = threading.Thread(target=self._periodic, name="CheckpointCoordinator", daemon=True)
                self._thread.start()

    def stop(self, reason: str = "the job is stopping") -> None:
        """No more triggers; pending checkpoints are aborted (their tasks are going away)."""
        with self._lock:
            self._running = False
            pending, self._pending = list(self._pending.values()), {}
            self.stats.num_in_progress = 0
            self._lock.notify_all()
            thread, self._thread = self._thread, None
        for checkpoint in pending:
            self._abort_quietly(checkpoint.checkpoint_id, reason, count=False)
            if checkpoint.savepoint is not None and not checkpoint.savepoint.future.done():
                checkpoint.savepoint.future.set_exception(
                    CheckpointException(f"savepoint {checkpoint.checkpoint_id} failed: {reason}")
                )
        if thread is not None and thread is not threading.current_thread():
            thread.join(5)

    def task_finished(self, attempt_id: str) -> None:
        """A task ended (after its final checkpoint): later checkpoints go on without it and
        carry its last state; pending ones stop waiting for it. Triggers stop when all ended."""
        completed, moot = [], []
        with self._lock:
            self._finished.add(attempt_id)
            if self._finished >= self._tasks:
                self._running = False
                self._lock.notify_all()
            for checkpoint in list(self._pending.values()):
                checkpoint.not_yet_acknowledged.discard(attempt_id)
                if not checkpoint.not_yet_acknowledged:
                    del self._pending[checkpoint.checkpoint_id]
                    # no task took part (all ended first): nothing new to keep
                    (completed if checkpoint.task_stats else moot).append(checkpoint)
            self.stats.num_in_progress = len(self._pending)
        for checkpoint in completed:
            self._complete(checkpoint)
        for checkpoint in moot:
            self._abort_quietly(checkpoint.checkpoint_id, "every task had finished", count=False)

    # -- triggering ------------------------------------------------------------------------------------
    def _periodic(self) -> None:
        interval = self.interval_ms / 1000.0
        next_at = time.monotonic() + interval
        while True:
            with self._lock:
                while self._running and not self._stopping:
                    now = time.monotonic()
                    self._expire_locked(now)
                    if self._requested and not self._pending:
                        break
                    wait = next_at - now
                    if wait <= 0:
                        break
                    self._lock.wait(min(wait, 0.1))
                if not self._running or self._thread is not threading.current_thread():
                    return  # stopped, or stopped and restarted with a new thread
                if self._stopping:  # until a failed stop-with-savepoint lets the job go on
                    self._expire_locked(time.monotonic())  # the stop's savepoint may expire too
                    self._lock.wait(0.1)
                    continue
                self._requested = False
            self.trigger_checkpoint()
            next_at = time.monotonic() + interval

    def request_checkpoint(self) -> None:
        """A task reached the end of its input: take its final checkpoint as soon as the
        limits allow instead of at the next interval (a bounded job ends sooner)."""
        with self._lock:
            self._requested = True
            self._lock.notify_all()

    def trigger_checkpoint(self) -> Optional[int]:
        """Start a checkpoint now if the limits allow; its id, or None."""
        with self._lock:
            now = time.monotonic()
            if not self._running or len(self._pending) >= self.max_concurrent:
                return None
            if self.min_pause_ms and (now - self._last_end) * 1000 < self.min_pause_ms:
                return None
            checkpoint_id = self._next_id
            self._next_id += 1
            timestamp = int(time.time() * 1000)
            self._pending[checkpoint_id] = PendingCheckpoint(
                checkpoint_id, timestamp, now, self._tasks - self._finished
            )
            self.stats.num_in_progress = len(self._pending)
            self._report_pending(self._pending[checkpoint_id])
        self._send_trigger(checkpoint_id, timestamp, None)
        return checkpoint_id

    def trigger_checkpoint_now(self, suspend_periodic: bool = False) -> Future:
        """A checkpoint now, past the pause and concurrency limits, with aligned barriers (it
        can be restored at another parallelism: no in-flight data); the future completes with
        its ``CompletedCheckpoint`` (or a ``CheckpointException``). The tasks hear of it
        completing as of any checkpoint (sinks commit). ``suspend_periodic``: no periodic
        checkpoint is triggered after it (a rescale restores it as the latest) until the next
        :meth:`start`, or until it fails."""
        future: Future = Future()
        with self._lock:
            if not self._running or self._stopping:
                why = "it is stopping with a savepoint" if self._running else "it is not running"
                future.set_exception(CheckpointException(f"no checkpoint can be taken now: {why}"))
                return future
            self._stopping = self._stopping or suspend_periodic
            checkpoint_id = self._next_id
            self._next_id += 1
            timestamp = int(time.time() * 1000)
            self._pending[checkpoint_id] = PendingCheckpoint(
                checkpoint_id, timestamp, time.monotonic(), self._tasks - self._finished
            )
            self._waiting[checkpoint_id] = (future, suspend_periodic)
            self.stats.num_in_progress = len(self._pending)
            self._report_pending(self._pending[checkpoint_id])
        self._send_trigger(checkpoint_id, timestamp, SAVEPOINT)  # aligned, as a savepoint's
        return future

    def _report_pending(self, checkpoint: PendingCheckpoint) -> None:
        """Under the lock: the tracker learns of a triggered checkpoint."""
        parallelism: dict = {}
        for attempt_id in checkpoint.not_yet_acknowledged:
            vertex_id = self._vertex_of.get(attempt_id, (str(attempt_id), 0))[0]
            parallelism[vertex_id] = parallelism.get(vertex_id, 0) + 1
        savepoint = checkpoint.savepoint
        self.stats_tracker.report_pending(
            checkpoint.checkpoint_id,
            checkpoint.trigger_timestamp,
            parallelism,
            savepoint=savepoint is not None,
            stop=savepoint is not None and savepoint.stop is not None,
        )

    def _shared_size(self, path: str) -> Optional[int]:
        """The size of shared file ``path`` (read once: shared files never change), None if unknown."""
        size = self._shared_sizes.get(path)
        if size is None:
            try:
                size = int(self.storage._fs.size(path))
            except Exception as exc:  # unknown, never guessed (the figure is left out)
                log.warning("size of shared state file %s unknown: %s", path, exc)
                return None
            self._shared_sizes[path] = size
        return size

    def _full_size(self, handles: list) -> Optional[int]:
        """Bytes of ``handles`` with every shared file they refer to (each counted once)."""
        total = sum(int(h.state_size) for h in handles)
        for path in {p for h in handles for p in getattr(h, "shared", ())}:
            size = self._shared_size(path)
            if size is None:
                return None
            total += size
        return total

    def use_high_availability(self, counter: Any, completed_store: Any) -> None:
        """Keep checkpoint ids in ``counter`` (a ``CheckpointIDCounter``: ids go on from a
        recovered JobMaster's) and record every completed checkpoint in ``completed_store``
        (a ``CompletedCheckpointStore``) before it counts (:mod:`raylink.runtime.job.high_availability`)."""
        with self._lock:
            self._id_counter, self._completed_store = counter, completed_store
            self._next_id = max(self._next_id, counter.get())

    def _send_trigger(self, checkpoint_id: int, timestamp: int, stop: Optional[str]) -> None:
        try:
            if self._id_counter is not None:  # stored before any task sees the id
                self._id_counter.set_count(checkpoint_id + 1)
            self._trigger(checkpoint_id, timestamp, stop)
        except Exception as exc:  # the sources could not be reached: the checkpoint fails
            self.receive_decline(None, checkpoint_id, f"trigger failed: {type(exc).__name__}: {exc}")

    def trigger_savepoint(self, target_directory: str, stop: Optional[str] = None) -> Future:
        """Take a savepoint now (Flink's ``triggerSavepoint`` / ``stopWithSavepoint``): a
        checkpoint that ignores the pause and concurrency limits, copied when it completes into
        a self-contained folder under ``target_directory``; the future completes with that
        folder (or the failure). With ``stop`` ("suspend" / "drain") no periodic checkpoint
        follows it, and the tasks end once it completed."""
        future: Future = Future()
        with self._lock:
            if not self._running:
                future.set_exception(
                    CheckpointException("the job is not running (or all its tasks finished): no savepoint can be taken")
                )
                return future
            if self._stopping:
                future.set_exception(CheckpointException("the job is already stopping with a savepoint"))
                return future
            if stop is not None:
                self._stopping = True
            checkpoint_id = self._next_id
            self._next_id += 1
            timestamp = int(time.time() * 1000)
            self._pending[checkpoint_id] = PendingCheckpoint(
                checkpoint_id,
                timestamp,
                time.monotonic(),
                self._tasks - self._finished,
                savepoint=SavepointRequest(str(target_directory), stop, future),
            )
            self.stats.num_in_progress = len(self._pending)
            self._report_pending(self._pending[checkpoint_id])
        self._send_trigger(checkpoint_id, timestamp, stop if stop is not None else SAVEPOINT)
        return future

    def _expire_locked(self, now: float) -> None:
        for checkpoint in list(self._pending.values()):
            if (now - checkpoint.started) * 1000 >= self.timeout_ms:
                threading.Thread(
                    target=self._failed,
                    daemon=True,
                    args=(
                        checkpoint.checkpoint_id,
                        f"Checkpoint expired before completing (execution.checkpointing.timeout {self.timeout_ms} ms)",
                        checkpoint.savepoint,
                    ),
                ).start()
                del self._pending[checkpoint.checkpoint_id]

    # -- acknowledgements ----------------------------------------------------------------------------
    def receive_ack(
        self, attempt_id: str, checkpoint_id: int, handles: dict, task_stats: Optional[dict] = None
    ) -> None:
        with self._lock:
            checkpoint = self._pending.get(checkpoint_id)
            if checkpoint is None or attempt_id not in checkpoint.not_yet_acknowledged:
                return  # late (expired / aborted) or a duplicate
            checkpoint.not_yet_acknowledged.discard(attempt_id)
            for operator_id, by_subtask in handles.items():
                checkpoint.handles.setdefault(operator_id, {}).update(by_subtask)
            checkpoint.task_stats[attempt_id] = task_stats or {}
            self._last_handles[attempt_id] = (checkpoint_id, handles)
            vertex_id, subtask = self._vertex_of.get(attempt_id, (str(attempt_id), 0))
            acknowledged_at = int(time.time() * 1000)
            last = not checkpoint.not_yet_acknowledged
            if last:
                del self._pending[checkpoint_id]
                self.stats.num_in_progress = len(self._pending)
        # outside the lock (a shared file's size may be read from the storage), before completing
        figures = self._subtask_stats(subtask, acknowledged_at, handles, task_stats or {})
        self.stats_tracker.report_subtask(checkpoint_id, vertex_id, figures)
        if last:
            self._complete(checkpoint)

    def _subtask_stats(self, subtask: int, acknowledged_at: int, handles: dict, task_stats: dict) -> SubtaskStateStats:
        """A subtask's acknowledgement as the tracker keeps it: the coordinator's clock when it
        came, the figures the task measured (sync / async / alignment ms, bytes written,
        channel state) and its full size."""
        own = [h for by_subtask in handles.values() for h in by_subtask.values()]
        return SubtaskStateStats(
            subtask_index=subtask,
            ack_timestamp=acknowledged_at,
            sync_duration_ms=int(task_stats.get("sync_ms", 0.0)),
            async_duration_ms=int(task_stats.get("async_ms", 0.0)),
            alignment_duration_ms=int(task_stats.get("alignment_ms", 0.0)),
            checkpointed_size=int(task_stats.get("size", 0)),
            state_size=self._full_size(own),
            persisted_data=int(task_stats.get("persisted_bytes", 0)),
            unaligned=bool(task_stats.get("unaligned")),
            start_delay_ms=int(task_stats["start_delay_ms"]) if "start_delay_ms" in task_stats else None,
        )

    def _carry_finished_state(self, checkpoint: PendingCheckpoint) -> dict:
        """Copy the last state of tasks that finished before ``checkpoint`` into it (their
        older checkpoint folders are deleted by retention); returns the copies by attempt, the
        tasks' last state once ``checkpoint`` completed."""
        with self._lock:
            carried = [
                (a, self._last_handles[a])
                for a in self._finished
                if a in self._last_handles and a not in checkpoint.task_stats
            ]
        copies: dict = {}
        for attempt_id, (_old_id, handles) in carried:
            for operator_id, by_subtask in handles.items():
                for subtask, handle in by_subtask.items():
                    data = self.storage.read_state(handle)
                    # the copy still names its shared files: retention keeps them while it is retained
                    copy = self.storage.write_state(
                        checkpoint.checkpoint_id, operator_id, subtask, data, shared=handle.shared
                    )
                    checkpoint.handles.setdefault(operator_id, {})[subtask] = copy
                    copies.setdefault(attempt_id, {}).setdefault(operator_id, {})[subtask] = copy
        return copies

    def _complete(self, checkpoint: PendingCheckpoint) -> None:
        savepoint = checkpoint.savepoint
        try:
            carried = self._carry_finished_state(checkpoint)
            completed = self.storage.finalize(
                checkpoint.checkpoint_id,
                checkpoint.handles,
                self.properties,
                trigger_timestamp=checkpoint.trigger_timestamp,
                savepoint=savepoint is not None,
                synchronous=savepoint is not None and savepoint.stop is not None,
            )
            with self._lock:  # finished tasks' state lives on in this checkpoint (retention drops the older)
                for attempt_id, handles in carried.items():
                    self._last_handles[attempt_id] = (checkpoint.checkpoint_id, handles)
            path = self.storage.write_savepoint(completed, savepoint.target_directory) if savepoint else None
            if savepoint is None and self._completed_store is not None:
                # high availability: in the store before it counts (before any sink commits it)
                self._completed_store.add_checkpoint(checkpoint.checkpoint_id, completed.external_pointer)
        except Exception as exc:
            self._failed(checkpoint.checkpoint_id, f"could not finalise: {type(exc).__name__}: {exc}", savepoint)
            return
        handles = [h for by_subtask in completed.operator_states.values() for h in by_subtask.values()]
        full_size = self._full_size(handles)  # outside the lock: a shared file's size may be read
        referenced = {p for h in handles for p in getattr(h, "shared", ())}
        # later checkpoints refer to these or to new files: the sizes of the others are not needed again
        self._shared_sizes = {p: n for p, n in self._shared_sizes.items() if p in referenced}
        with self._lock:
            self._last_end = time.monotonic()
            self._consecutive_failures = 0
            stats = self.stats
            stats.num_completed += 1
            stats.last_checkpoint_id = checkpoint.checkpoint_id
            stats.last_duration_ms = int((self._last_end - checkpoint.started) * 1000)
            stats.last_size = sum(int(s.get("size", 0)) for s in checkpoint.task_stats.values())
            stats.last_full_size = full_size
            alignments = [s.get("alignment_ms", 0.0) for s in checkpoint.task_stats.values()]
            stats.last_alignment_ms = max(alignments, default=0.0)
            stats.last_persisted_data = sum(s.get("persisted_bytes", 0) for s in checkpoint.task_stats.values())
            stats.last_unaligned = any(s.get("unaligned") for s in checkpoint.task_stats.values())
            stats.per_subtask = dict(checkpoint.task_stats)
            self._lock.notify_all()  # a final-checkpoint request may have waited for this one
        self.stats_tracker.report_completed(
            checkpoint.checkpoint_id,
            completed.completion_timestamp,
            stats.last_full_size,
            path if path is not None else completed.external_pointer,
        )
        if savepoint is not None:
            log.info("savepoint %d of the job written to %s", checkpoint.checkpoint_id, path)
        if savepoint is None or savepoint.stop is not None:
            # Flink (FLINK-25191): a savepoint commits no side effects (no notifyCheckpointComplete),
            # except a stop-with-savepoint's, whose tasks end once it completed; the next checkpoint
            # (or the end of input) commits what a savepoint kept
            self._notify_complete(checkpoint.checkpoint_id)
        if savepoint is not None:
            savepoint.future.set_result(path)
        with self._lock:
            waiting = self._waiting.pop(checkpoint.checkpoint_id, None)
        if waiting is not None:
            waiting[0].set_result(completed)

    def receive_decline(self, attempt_id: Optional[str], checkpoint_id: int, reason: str) -> None:
        with self._lock:
            checkpoint = self._pending.pop(checkpoint_id, None)
            self.stats.num_in_progress = len(self._pending)
        self._failed(checkpoint_id, reason, checkpoint.savepoint if checkpoint is not None else None)

    def _failed(self, checkpoint_id: int, reason: str, savepoint: Optional[SavepointRequest] = None) -> None:
        if savepoint is not None:  # Flink: a failed savepoint fails its request, not the job
            with self._lock:
                if savepoint.stop is not None:
                    self._stopping = False
            self._abort_quietly(checkpoint_id, reason, count=False)
            savepoint.future.set_exception(CheckpointException(f"savepoint {checkpoint_id} failed: {reason}"))
            return
        self._abort_quietly(checkpoint_id, reason, count=True)

    def _abort_quietly(self, checkpoint_id: int, reason: str, count: bool) -> None:
        log.warning("checkpoint %d failed: %s", checkpoint_id, reason)
        with self._lock:
            waiting = self._waiting.pop(checkpoint_id, None)
            if waiting is not None and waiting[1]:
                self._stopping = False  # periodic checkpoints go on
        if waiting is not None:
            waiting[0].set_exception(CheckpointException(f"checkpoint {checkpoint_id} failed: {reason}"))
        self.stats_tracker.report_failed(checkpoint_id, int(time.time() * 1000), reason)
        too_many = False
        if count:  # counted before the tasks hear of it: the figures hold when they react
            with self._lock:
                self.stats.num_failed += 1
                self.stats.last_failure = reason
                self._consecutive_failures += 1
                self._last_end = time.monotonic()
                too_many = self._consecutive_failures > self.tolerable_failures
        try:
            self.storage.abort(checkpoint_id)
        except Exception:  # cleaning up is best effort
            pass
        try:
            self._notify_aborted(checkpoint_id)
        except Exception:
            pass
        if too_many:
            self._fail_job(
                CheckpointException(
                    f"Exceeded checkpoint tolerable failure threshold "
                    f"(execution.checkpointing.tolerable-failed-checkpoints = {self.tolerable_failures}); "
                    f"last failure of checkpoint {checkpoint_id}: {reason}"
                )
            )


__all__ = ["CheckpointCoordinator", "CheckpointException", "CheckpointStats", "PendingCheckpoint", "SavepointRequest"]
