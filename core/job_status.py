"""The states of a job (PyFlink's ``pyflink.common.job_status.JobStatus``, Flink's ``JobStatus``).

``JobStatus`` is string-valued (``class JobStatus(str, Enum)``): a status compares equal to
its name (``client.get_job_status() == "FAILED"``), prints as its name, goes to JSON as its
name and pickles by name across Ray. :meth:`JobStatus.transition_to` checks a move against
the transitions Flink's schedulers make (``DefaultScheduler`` / ``ExecutionGraph``, the
``AdaptiveScheduler``'s states, the ``Dispatcher`` for INITIALIZING) and raises
:class:`~raylink.errors.IllegalStateTransitionError` for any other; moving to the state a
job is in is a no-op (a second failure while FAILING). Immutable, so thread-safe.
"""

from __future__ import annotations

from enum import Enum

from raylink.errors import IllegalStateTransitionError

__all__ = ["JobStatus"]


class JobStatus(str, Enum):
    """Possible states of a job once the dispatcher accepted it.

    INITIALIZING: received, its JobMaster not created yet. CREATED: no task started yet.
    RUNNING: some tasks are scheduled or running. FAILING: failed, waiting for the tasks to
    be cancelled. FAILED: failed for good (globally terminal). CANCELLING: being cancelled.
    CANCELED: cancelled (globally terminal). FINISHED: every task finished (globally
    terminal). RESTARTING: being reset for a restart. SUSPENDED: stopped but kept for
    recovery (locally terminal). RECONCILING: a new JobMaster reconciles its running tasks.
    """

    INITIALIZING = "INITIALIZING"
    CREATED = "CREATED"
    RUNNING = "RUNNING"
    FAILING = "FAILING"
    FAILED = "FAILED"
    CANCELLING = "CANCELLING"
    CANCELED = "CANCELED"
    FINISHED = "FINISHED"
    RESTARTING = "RESTARTING"
    SUSPENDED = "SUSPENDED"
    RECONCILING = "RECONCILING"

    __str__ = str.__str__  # "FAILED", not "JobStatus.FAILED" (also in f-strings)
    __format__ = str.__format__

    def is_globally_terminal_state(self) -> bool:
        """FINISHED, CANCELED or FAILED: the job is over in the whole cluster and will not
        be recovered."""
        return self in _GLOBALLY_TERMINAL

    def is_terminal_state(self) -> bool:
        """Globally terminal, or SUSPENDED (over for this JobMaster, another may recover it)."""
        return self in _GLOBALLY_TERMINAL or self is JobStatus.SUSPENDED

    def can_transition_to(self, new: "JobStatus") -> bool:
        """Whether Flink moves a job from this state to ``new`` (the same state: yes)."""
        return new == self or new in _TRANSITIONS[self]

    def transition_to(self, new: "JobStatus | str") -> "JobStatus":
        """``new`` as a JobStatus, after checking the move; raises
        :class:`~raylink.errors.IllegalStateTransitionError` naming both states."""
        new = JobStatus(new)
        if not self.can_transition_to(new):
            raise IllegalStateTransitionError("job status", self.value, new.value)
        return new


_GLOBALLY_TERMINAL = frozenset({JobStatus.FINISHED, JobStatus.CANCELED, JobStatus.FAILED})

_S = JobStatus
#: state -> the states Flink's schedulers move a job to from there
_TRANSITIONS: dict[JobStatus, frozenset[JobStatus]] = {
    _S.INITIALIZING: frozenset({_S.CREATED, _S.FAILED, _S.CANCELED, _S.SUSPENDED}),
    _S.CREATED: frozenset(
        {_S.RUNNING, _S.FAILING, _S.FAILED, _S.CANCELLING, _S.CANCELED, _S.SUSPENDED, _S.RECONCILING}
    ),
    _S.RUNNING: frozenset({_S.FAILING, _S.CANCELLING, _S.FINISHED, _S.RESTARTING, _S.SUSPENDED}),
    _S.FAILING: frozenset({_S.FAILED, _S.RESTARTING, _S.CANCELLING, _S.SUSPENDED}),
    # a failure while cancelling fails the job (the ExecutionGraph's failGlobal)
    _S.CANCELLING: frozenset({_S.CANCELED, _S.FAILING, _S.SUSPENDED}),
    _S.RESTARTING: frozenset({_S.RUNNING, _S.CREATED, _S.FAILING, _S.FAILED, _S.CANCELLING, _S.CANCELED, _S.SUSPENDED}),
    _S.RECONCILING: frozenset({_S.RUNNING, _S.FAILING, _S.CANCELLING, _S.FINISHED, _S.RESTARTING, _S.SUSPENDED}),
    _S.SUSPENDED: frozenset(),
    _S.FAILED: frozenset(),
    _S.CANCELED: frozenset(),
    _S.FINISHED: frozenset(),
}
del _S
