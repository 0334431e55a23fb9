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
back with :meth:`TaskStateEvent.failure_cause`. Pickling drops tracebacks and causes, so
the task's traceback travels beside it as text and comes back as the ``__cause__`` of the
error's innermost exception (a :class:`RemoteTraceback`, as ``concurrent.futures`` does;
Flink's ``SerializedThrowable`` keeps the stack trace as text the same way): the driver
shows the user's own exception — ``ValueError: no key for 300`` inside the key selector —
under "Could not extract key from 300". An event is built by one thread and then
only read (the JobMaster decodes the error once).
"""

from __future__ import annotations

import traceback
from dataclasses import dataclass, field
from typing import Optional, Union

import cloudpickle

from raylink.errors import RaylinkError
from raylink.runtime.execution_state import ExecutionState

__all__ = [
    "TaskStateEvent",
    "AcknowledgeCheckpoint",
    "DeclineCheckpoint",
    "FinalCheckpointRequest",
    "CheckpointEvent",
    "TaskEvent",
    "portable_error",
    "RemoteTraceback",
]

MAX_TRACEBACK_CHARS = 64 * 1024  # a deep recursion's traceback keeps its head and its tail


class RemoteTraceback(RaylinkError, RuntimeError):
    """The traceback, as text, of an error raised in a TaskExecutor (only ever a cause)."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text

    def __str__(self) -> str:
        return f'\n"""\n{self.text}"""'


def _with_remote_traceback(error: BaseException, text: str) -> BaseException:
    """Unpickling: ``text`` becomes the cause of the innermost exception of ``error``."""
    innermost, seen = error, {id(error)}
    while innermost.__cause__ is not None and id(innermost.__cause__) not in seen:
        innermost = innermost.__cause__
        seen.add(id(innermost))
    innermost.__cause__ = RemoteTraceback(text)
    return error


class _ErrorWithTraceback:
    """Pickles as ``error`` with its traceback text attached when unpickled."""

    def __init__(self, error: BaseException, text: str) -> None:
        self.error, self.text = error, text

    def __reduce__(self):
        return _with_remote_traceback, (self.error, self.text)


def _traceback_text(error: BaseException) -> Optional[str]:
    """The formatted traceback of ``error`` (or, for a wrapper never raised itself such as
    ``OperatorError``, of its cause) with its chain of causes; None if nothing was raised."""
    source = error
    if error.__traceback__ is None and error.__cause__ is not None:
        source = error.__cause__
    if source.__traceback__ is None:
        return None
    text = "".join(traceback.format_exception(source))
    if len(text) > MAX_TRACEBACK_CHARS:
        half = MAX_TRACEBACK_CHARS // 2
        text = f"{text[:half]}\n[... {len(text) - 2 * half} characters left out ...]\n{text[-half:]}"
    return text


def portable_error(error: Optional[BaseException]) -> Optional[bytes]:
    """The error as cloudpickle bytes (the same pickler that shipped the user's code, so the
    driver gets back its own exception classes) with its traceback as text, or a
    RuntimeError with its text."""
    if error is None:
        return None
    try:
        text = _traceback_text(error)
        data = cloudpickle.dumps(error if text is None else _ErrorWithTraceback(error, text))
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
