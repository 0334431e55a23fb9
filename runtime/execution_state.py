"""The states of one task attempt (Flink's ``org.apache.flink.runtime.execution.ExecutionState``).

Both views of an attempt use them: the StreamTask's own (Flink's ``Task``: CREATED →
DEPLOYING → INITIALIZING → RUNNING → FINISHED / CANCELED / FAILED) and the JobMaster's
``Execution`` (CREATED → SCHEDULED → DEPLOYING → INITIALIZING → RUNNING → ...).

``ExecutionState`` is string-valued, so a state compares equal to its name, prints as it,
goes to JSON (the per-task ``state`` metric) and pickles by name. :meth:`transition_to`
checks a move against the ones Flink's ``Task`` and ``Execution`` make and raises
:class:`~raylink.errors.IllegalStateTransitionError` for any other (the same state: a
no-op). Immutable, so thread-safe.
"""

from __future__ import annotations

from enum import Enum

from raylink.errors import IllegalStateTransitionError

__all__ = ["ExecutionState"]


class ExecutionState(str, Enum):
    """CREATED: not started. SCHEDULED: given a slot. DEPLOYING: being set up on its
    TaskExecutor. INITIALIZING: restoring state and opening its operators. RUNNING:
    processing. FINISHED / CANCELED / FAILED: terminal. CANCELING: asked to stop.
    RECONCILING: a restored attempt whose state a new JobMaster reconciles."""

    CREATED = "CREATED"
    SCHEDULED = "SCHEDULED"
    DEPLOYING = "DEPLOYING"
    RUNNING = "RUNNING"
    FINISHED = "FINISHED"
    CANCELING = "CANCELING"
    CANCELED = "CANCELED"
    FAILED = "FAILED"
    RECONCILING = "RECONCILING"
    INITIALIZING = "INITIALIZING"

    __str__ = str.__str__  # "RUNNING", not "ExecutionState.RUNNING" (also in f-strings)
    __format__ = str.__format__

    def is_terminal(self) -> bool:
        """FINISHED, CANCELED or FAILED."""
        return self in _TERMINAL

    def can_transition_to(self, new: "ExecutionState") -> bool:
        """Whether Flink moves an attempt from this state to ``new`` (the same state: yes)."""
        return new == self or new in _TRANSITIONS[self]

    def transition_to(self, new: "ExecutionState | str") -> "ExecutionState":
        """``new`` as an ExecutionState, after checking the move; raises
        :class:`~raylink.errors.IllegalStateTransitionError` naming both states."""
        new = ExecutionState(new)
        if not self.can_transition_to(new):
            raise IllegalStateTransitionError("execution state", self.value, new.value)
        return new


_TERMINAL = frozenset({ExecutionState.FINISHED, ExecutionState.CANCELED, ExecutionState.FAILED})

_S = ExecutionState
_ENDS = frozenset({_S.CANCELING, _S.CANCELED, _S.FAILED})  # cancel or fail: from any live state
#: state -> the states Flink's Task / Execution move an attempt to from there
_TRANSITIONS: dict[ExecutionState, frozenset[ExecutionState]] = {
    _S.CREATED: frozenset({_S.SCHEDULED, _S.DEPLOYING, _S.CANCELED, _S.FAILED}),
    _S.SCHEDULED: frozenset({_S.DEPLOYING, _S.CANCELED, _S.FAILED}),
    # a task may finish before its RUNNING update arrives (Execution.markFinished)
    _S.DEPLOYING: _ENDS | {_S.INITIALIZING, _S.FINISHED},
    _S.INITIALIZING: _ENDS | {_S.RUNNING, _S.FINISHED},
    _S.RUNNING: _ENDS | {_S.FINISHED},
    _S.CANCELING: frozenset({_S.CANCELED, _S.FAILED}),
    _S.RECONCILING: _ENDS | {_S.INITIALIZING, _S.RUNNING, _S.FINISHED},
    _S.FINISHED: frozenset(),
    _S.CANCELED: frozenset(),
    _S.FAILED: frozenset(),
}
del _S, _ENDS
