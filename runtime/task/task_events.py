"""What a TaskExecutor reports to the JobMaster about its tasks.

* :class:`TaskStateEvent` — a task reached a final state (Flink's ``TaskExecutionState``,
  sent by ``TaskExecutor.updateTaskExecutionState``), with its accumulators and last metrics;
* :class:`AcknowledgeCheckpoint` / :class:`DeclineCheckpoint` — a task's part of a
  checkpoint is written / cannot be taken (Flink's messages of the same names);
* :class:`FinalCheckpointRequest` — a task reached the end of its input, its operators
  finished, and it waits for a checkpoint to complete before it ends (Flink 2's final
  checkpoint, FLIP-147).

Plain dataclasses: they cross Ray inside the TaskExecutor's cloudpickled long-poll answer.
A failed task's error travels as cloudpickle bytes (:func:`portable_error`: an exception
that cannot be pickled becomes a RuntimeError with its text) and the JobMaster turns it
back with :meth:`TaskStateEvent.failure_cause`. An event is built by one thread and then
only read (the JobMaster decodes the error once).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional, Union

import cloudpickle

from raylink.runtime.execution_state import ExecutionState

__all__ = [
    "TaskStateEvent",
    "AcknowledgeCheckpoint",
    "DeclineCheckpoint",
    "FinalCheckpointRequest",
    "CheckpointEvent",
    "TaskEvent",
    "portable_error",
]


def portable_error(error: Optional[BaseException]) -> Optional[bytes]:
    """The error as cloudpickle bytes (the same pickler that shipped the user's code, so the
    driver gets back its own exception classes), or a RuntimeError with its text."""
    if error is None:
        return None
    try:
        data = cloudpickle.dumps(error)
        cloudpickle.loads(data)
        return data
    except Exception as exc:
        return cloudpickle.dumps(
            RuntimeError(f"{type(error).__name__}: {error} (the error itself could not be shipped: {exc!r})")
        )


@dataclass
class TaskStateEvent:
    """A task attempt reached FINISHED, CANCELED or FAILED (Flink's ``TaskExecutionState``).

    ``error``: the failure as :func:`portable_error` bytes (None unless FAILED);
    ``accumulators``: the task's accumulators when FINISHED (a collect sink's unread
    records among them); ``metrics``: its last per-task metrics."""

    attempt_id: str
    task: str
    state: ExecutionState
    error: Union[bytes, BaseException, None] = None
    accumulators: dict = field(default_factory=dict)
    metrics: dict = field(default_factory=dict)

    def failure_cause(self) -> Optional[BaseException]:
        """The error as an exception (decoded once, then kept)."""
        if isinstance(self.error, bytes):
            self.error = cloudpickle.loads(self.error)
        return self.error


@dataclass(frozen=True)
class AcknowledgeCheckpoint:
    """A task wrote its snapshots of checkpoint ``checkpoint_id``: ``handles`` is
    ``{operator id: {subtask index: state handle}}``, ``stats`` its sync / async /
    alignment times and size."""

    attempt_id: str
    checkpoint_id: int
    handles: dict
    stats: Optional[dict] = None


@dataclass(frozen=True)
class DeclineCheckpoint:
    """A task cannot take checkpoint ``checkpoint_id``; ``reason`` says why (its name, the
    operator and the cause)."""

    attempt_id: str
    checkpoint_id: int
    reason: str


@dataclass(frozen=True)
class FinalCheckpointRequest:
    """A task's input has ended and its operators finished; it ends once a checkpoint completes."""

    attempt_id: str


CheckpointEvent = Union[AcknowledgeCheckpoint, DeclineCheckpoint, FinalCheckpointRequest]
TaskEvent = Union[TaskStateEvent, CheckpointEvent]
