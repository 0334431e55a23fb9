"""Flink's ``CheckpointStatsTracker`` and ``CheckpointStatsHistory``: what the coordinator
measured about each checkpoint, kept whether or not anyone asks.

The :class:`~raylink.runtime.job.checkpoint_coordinator.CheckpointCoordinator` reports every
checkpoint as it goes: triggered (:meth:`CheckpointStatsTracker.report_pending`: its id, the
wall-clock time it was triggered, its type), each subtask's acknowledgement
(:meth:`~CheckpointStatsTracker.report_subtask`: the coordinator's clock when the ack arrived
and the figures the task measured), then completed or failed; restores are counted too
(:meth:`~CheckpointStatsTracker.report_restored`). The tracker keeps

* the counts (triggered, in progress, completed, failed, restored) since the job started;
* the last ``web.checkpoints.history`` checkpoints (Flink's default 10) of any status, newest
  first (Flink's ``CheckpointStatsHistory``): the REST API's ``history``;
* the latest completed checkpoint, savepoint, failed checkpoint and restore;
* summaries (min / max / avg and percentiles) over the completed checkpoints' sizes,
  durations and persisted in-flight data (Flink's ``CompletedCheckpointStatsSummary``; the
  percentiles over the last :data:`SUMMARY_WINDOW` values, as Flink's histogram window).

Figures: ``checkpointed_size`` is what a checkpoint wrote (for an incremental checkpoint, its
new files only), ``state_size`` its full size (with the shared files it refers to);
``persisted_data`` the bytes of in-flight data an unaligned checkpoint stored as channel
state. The type is ``SAVEPOINT`` for a savepoint, ``SYNC_SAVEPOINT`` for a stop-with-savepoint,
``UNALIGNED_CHECKPOINT`` when a subtask's barrier overtook in-flight data, else
``CHECKPOINT`` (Flink's ``RestAPICheckpointType``).

Thread-safety: every method may be called from any thread (one lock); :meth:`snapshot`
returns copies that stay as they were.
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Optional

#: values per summary kept for percentiles (Flink's ``CompletedCheckpointStatsSummary`` window)
SUMMARY_WINDOW = 10_000


class CheckpointType(str, Enum):
    """Flink's ``RestAPICheckpointType``."""

    CHECKPOINT = "CHECKPOINT"
    UNALIGNED_CHECKPOINT = "UNALIGNED_CHECKPOINT"
    SAVEPOINT = "SAVEPOINT"
    SYNC_SAVEPOINT = "SYNC_SAVEPOINT"

    def __str__(self) -> str:
        return self.value


class CheckpointStatsStatus(str, Enum):
    """Flink's ``CheckpointStatsStatus``."""

    IN_PROGRESS = "IN_PROGRESS"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class SubtaskStateStats:
    """One subtask's acknowledgement (Flink's ``SubtaskStateStats``): ``ack_timestamp`` is the
    coordinator's epoch ms when the ack arrived; the durations and sizes the task measured."""

    subtask_index: int
    ack_timestamp: int
    sync_duration_ms: int
    async_duration_ms: int
    alignment_duration_ms: int
    checkpointed_size: int
    state_size: Optional[int]  # None: a shared file's size could not be read
    persisted_data: int
    unaligned: bool
    #: the first barrier's arrival minus its creation (None: a task without inputs, which gets no barrier)
    start_delay_ms: Optional[int] = None

    def end_to_end_duration(self, trigger_timestamp: int) -> int:
        return max(0, self.ack_timestamp - trigger_timestamp)


@dataclass(frozen=True)
class CheckpointStatsEntry:
    """One checkpoint as the tracker knows it (Flink's ``Pending``/``Completed``/``FailedCheckpointStats``).

    ``tasks`` maps JobVertex id -> subtask index -> :class:`SubtaskStateStats` of the subtasks
    that acknowledged; ``parallelism`` JobVertex id -> its number of subtasks."""

    checkpoint_id: int
    trigger_timestamp: int
    is_savepoint: bool
    stop: bool
    parallelism: dict
    status: CheckpointStatsStatus = CheckpointStatsStatus.IN_PROGRESS
    tasks: dict = field(default_factory=dict)
    #: the full size of a completed checkpoint (what a restore reads)
    completed_state_size: Optional[int] = None
    completion_timestamp: Optional[int] = None
    external_path: Optional[str] = None
    failure_timestamp: Optional[int] = None
    failure_message: Optional[str] = None

    # -- aggregates over the acknowledged subtasks ---------------------------------------------------
    def subtasks(self) -> list[SubtaskStateStats]:
        return [s for by_index in self.tasks.values() for s in by_index.values()]

    @property
    def num_subtasks(self) -> int:
        return sum(self.parallelism.values())

    @property
    def num_acknowledged_subtasks(self) -> int:
        return len(self.subtasks())

    @property
    def checkpoint_type(self) -> CheckpointType:
        if self.is_savepoint:
            return CheckpointType.SYNC_SAVEPOINT if self.stop else CheckpointType.SAVEPOINT
        if any(s.unaligned for s in self.subtasks()):
            return CheckpointType.UNALIGNED_CHECKPOINT
        return CheckpointType.CHECKPOINT

    @property
    def latest_ack_timestamp(self) -> int:
        return max((s.ack_timestamp for s in self.subtasks()), default=-1)

    @property
    def checkpointed_size(self) -> int:
        return sum(s.checkpointed_size for s in self.subtasks())

    @property
    def state_size(self) -> Optional[int]:
        """The full size (None when a part of it could not be measured)."""
        if self.status is CheckpointStatsStatus.COMPLETED:
            return self.completed_state_size
        sizes = [s.state_size for s in self.subtasks()]
        return None if None in sizes else sum(sizes)

    @property
    def persisted_data(self) -> int:
        return sum(s.persisted_data for s in self.subtasks())

    @property
    def end_to_end_duration(self) -> int:
        """Trigger to completion (or failure, or the latest ack while in progress), in ms."""
        end = self.completion_timestamp or self.failure_timestamp or self.latest_ack_timestamp
        return max(0, end - self.trigger_timestamp) if end and end > 0 else 0


@dataclass(frozen=True)
class StatsSummary:
    """Flink's ``StatsSummary``: count, min, max, sum over every value; percentiles over the
    last :data:`SUMMARY_WINDOW` values."""

    count: int = 0
    minimum: int = 0
    maximum: int = 0
    total: int = 0
    window: tuple = ()

    def add(self, value: int) -> "StatsSummary":
        window = (self.window + (value,))[-SUMMARY_WINDOW:]
        if self.count == 0:
            return StatsSummary(1, value, value, value, window)
        return StatsSummary(
            self.count + 1, min(self.minimum, value), max(self.maximum, value), self.total + value, window
        )

    @property
    def average(self) -> int:
        return self.total // self.count if self.count else 0

    def quantiles(self, qs: tuple) -> list[float]:
        """The quantiles ``qs`` of the window (linear interpolation); 0 when empty."""
        if not self.window:
            return [0.0 for _ in qs]
        values = sorted(self.window)
        out = []
        for q in qs:
            position = q * (len(values) - 1)
            low = int(position)
            high = min(low + 1, len(values) - 1)
            out.append(float(values[low] + (values[high] - values[low]) * (position - low)))
        return out


@dataclass(frozen=True)
class RestoredCheckpointStats:
    """Flink's ``RestoredCheckpointStats``: which checkpoint a deployment started from."""

    checkpoint_id: int
    restore_timestamp: int
    is_savepoint: bool
    external_path: Optional[str]


@dataclass(frozen=True)
class CheckpointStatsSnapshot:
    """A consistent copy of the tracker (Flink's ``CheckpointStatsSnapshot``)."""

    num_triggered: int
    num_in_progress: int
    num_completed: int
    num_failed: int
    num_restored: int
    history: tuple  # CheckpointStatsEntry, newest first
    latest_completed: Optional[CheckpointStatsEntry]
    latest_savepoint: Optional[CheckpointStatsEntry]
    latest_failed: Optional[CheckpointStatsEntry]
    latest_restored: Optional[RestoredCheckpointStats]
    summaries: dict  # "checkpointed_size" / "state_size" / "end_to_end_duration" / "persisted_data"

    def find(self, checkpoint_id: int) -> Optional[CheckpointStatsEntry]:
        """The checkpoint ``checkpoint_id`` if the history (or a latest) still holds it."""
        for entry in (*self.history, self.latest_completed, self.latest_savepoint, self.latest_failed):
            if entry is not None and entry.checkpoint_id == checkpoint_id:
                return entry
        return None


SUMMARY_NAMES = ("checkpointed_size", "state_size", "end_to_end_duration", "persisted_data")


class CheckpointStatsTracker:
    """Flink's ``CheckpointStatsTracker`` (see the module docstring)."""

    def __init__(self, history_size: int = 10) -> None:
        if history_size < 0:
            raise ValueError(f"web.checkpoints.history must be >= 0, got {history_size}")
        self.history_size = history_size
        self._lock = threading.Lock()
        self._entries: dict[int, CheckpointStatsEntry] = {}  # in progress, and the history's
        self._order: deque[int] = deque()  # ids in the history, newest first
        self._pending: set[int] = set()
        self._num_triggered = 0
        self._num_completed = 0
        self._num_failed = 0
        self._num_restored = 0
        self._latest_completed: Optional[CheckpointStatsEntry] = None
        self._latest_savepoint: Optional[CheckpointStatsEntry] = None
        self._latest_failed: Optional[CheckpointStatsEntry] = None
        self._latest_restored: Optional[RestoredCheckpointStats] = None
        self._summaries = {name: StatsSummary() for name in SUMMARY_NAMES}

    def _remember(self, entry: CheckpointStatsEntry) -> None:
        """Under the lock: put ``entry`` into the history (newest first, bounded)."""
        self._entries[entry.checkpoint_id] = entry
        if entry.checkpoint_id not in self._order:
            self._order.appendleft(entry.checkpoint_id)  # ids grow with each trigger: newest first
        while len(self._order) > self.history_size:
            dropped = self._order.pop()
            if dropped not in self._pending:
                self._entries.pop(dropped, None)

    def report_pending(
        self, checkpoint_id: int, trigger_timestamp: int, parallelism: dict, savepoint: bool = False, stop: bool = False
    ) -> None:
        """Checkpoint ``checkpoint_id`` was triggered at ``trigger_timestamp`` (epoch ms);
        ``parallelism``: JobVertex id -> the subtasks expected to acknowledge it."""
        entry = CheckpointStatsEntry(checkpoint_id, int(trigger_timestamp), savepoint, stop, dict(parallelism))
        with self._lock:
            self._num_triggered += 1
            self._pending.add(checkpoint_id)
            self._remember(entry)

    def report_subtask(self, checkpoint_id: int, vertex_id: str, stats: SubtaskStateStats) -> None:
        """A subtask of JobVertex ``vertex_id`` acknowledged ``checkpoint_id``."""
        with self._lock:
            entry = self._entries.get(checkpoint_id)
            if entry is None or entry.status is not CheckpointStatsStatus.IN_PROGRESS:
                return
            tasks = dict(entry.tasks)
            tasks[vertex_id] = {**tasks.get(vertex_id, {}), stats.subtask_index: stats}
            self._entries[checkpoint_id] = replace(entry, tasks=tasks)

    def report_completed(
        self, checkpoint_id: int, completion_timestamp: int, state_size: Optional[int], external_path: Optional[str]
    ) -> None:
        """``checkpoint_id`` is complete: ``state_size`` its full size, ``external_path`` where it lies."""
        with self._lock:
            entry = self._entries.get(checkpoint_id)
            if entry is None or checkpoint_id not in self._pending:
                return
            self._pending.discard(checkpoint_id)
            entry = replace(
                entry,
                status=CheckpointStatsStatus.COMPLETED,
                completion_timestamp=int(completion_timestamp),
                completed_state_size=None if state_size is None else int(state_size),
                external_path=external_path,
            )
            self._num_completed += 1
            if entry.is_savepoint:
                self._latest_savepoint = entry
            else:
                self._latest_completed = entry
            for name in SUMMARY_NAMES:
                value = getattr(entry, name)
                if value is not None:
                    self._summaries[name] = self._summaries[name].add(int(value))
            self._entries[checkpoint_id] = entry
            if checkpoint_id not in self._order:  # pushed out of the history while in progress
                self._entries.pop(checkpoint_id)

    def report_failed(self, checkpoint_id: int, failure_timestamp: int, message: str) -> None:
        """``checkpoint_id`` failed: declined, expired, not finalised, or aborted because its
        tasks went away (Flink counts each of them failed)."""
        with self._lock:
            entry = self._entries.get(checkpoint_id)
            if entry is None or checkpoint_id not in self._pending:
                return
            self._pending.discard(checkpoint_id)
            entry = replace(
                entry,
                status=CheckpointStatsStatus.FAILED,
                failure_timestamp=int(failure_timestamp),
                failure_message=message,
            )
            self._num_failed += 1
            self._latest_failed = entry
            self._entries[checkpoint_id] = entry
            if checkpoint_id not in self._order:
                self._entries.pop(checkpoint_id)

    def report_restored(
        self, checkpoint_id: int, restore_timestamp: int, is_savepoint: bool, external_path: Optional[str]
    ) -> None:
        """A deployment was restored from ``checkpoint_id`` (Flink counts every restore)."""
        with self._lock:
            self._num_restored += 1
            self._latest_restored = RestoredCheckpointStats(
                checkpoint_id, int(restore_timestamp), is_savepoint, external_path
            )

    def snapshot(self) -> CheckpointStatsSnapshot:
        with self._lock:
            return CheckpointStatsSnapshot(
                num_triggered=self._num_triggered,
                num_in_progress=len(self._pending),
                num_completed=self._num_completed,
                num_failed=self._num_failed,
                num_restored=self._num_restored,
                history=tuple(self._entries[i] for i in self._order),
                latest_completed=self._latest_completed,
                latest_savepoint=self._latest_savepoint,
                latest_failed=self._latest_failed,
                latest_restored=self._latest_restored,
                summaries=dict(self._summaries),
            )


__all__ = [
    "CheckpointStatsEntry",
    "CheckpointStatsSnapshot",
    "CheckpointStatsStatus",
    "CheckpointStatsTracker",
    "CheckpointType",
    "RestoredCheckpointStats",
    "StatsSummary",
    "SUMMARY_WINDOW",
    "SubtaskStateStats",
]
