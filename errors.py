"""The root of raylink's own exceptions (Flink's ``FlinkException`` / ``FlinkRuntimeException``).

Every error raylink raises on purpose derives from :class:`RaylinkError`, so a program can
catch them all with one ``except RaylinkError``; each also keeps the built-in base it had
(``ValueError`` for bad arguments, ``RuntimeError`` for a failed job, ...), so ``except
ValueError`` still works. The classes live next to the code that raises them; the ones
several packages raise (:class:`IllegalStateTransitionError`) live here. This module
imports nothing of raylink, so any package may import it. Stateless and thread-safe.

Not under the root, on purpose: ``CancelTaskException`` (a ``BaseException`` that unwinds a
cancelled task, so that a user function's ``except Exception`` cannot swallow it) and the
CLI's private control-flow exceptions.
"""


class RaylinkError(Exception):
    """Base class of every exception raylink raises on purpose (Flink's ``FlinkException``)."""


class SuppressRestartsError(RaylinkError, RuntimeError):
    """A failure no restart can mend (Flink's ``SuppressRestartsException``): the job fails at
    once instead of restarting, e.g. state that cannot be restored into this program."""


def suppresses_restarts(error: BaseException) -> bool:
    """Whether ``error`` or one of its causes is a :class:`SuppressRestartsError`."""
    seen = set()
    while error is not None and id(error) not in seen:
        if isinstance(error, SuppressRestartsError):
            return True
        seen.add(id(error))
        error = error.__cause__ or error.__context__
    return False


class IllegalStateTransitionError(RaylinkError, RuntimeError):
    """A job or an execution was asked to move between two states Flink never moves between
    (Flink's ``IllegalStateException`` of its state machines); names both states."""

    def __init__(self, kind: str, old: str, new: str) -> None:
        super().__init__(f"illegal {kind} transition {old} -> {new}")
        self.kind = kind
        self.old = old
        self.new = new

    def __reduce__(self):
        return (IllegalStateTransitionError, (self.kind, self.old, self.new))
