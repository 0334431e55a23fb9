"""Flink's ``TaskInterrupter`` and ``TaskCancelerWatchDog`` (``Task.cancelExecution``).

Cancelling a task posts a cancel mail, which the task sees between two mails or
input steps. A task busy inside one long step (a slow user function over a whole
buffer, a generator source waiting for its next item) is *interrupted*:
:class:`InterruptibleThreads` raises the task's cancel exception in each of its
threads at the next Python bytecode (CPython's ``PyThreadState_SetAsyncExc``,
Python's nearest thing to ``Thread.interrupt``) — at once, then every
``task.cancellation.interval`` ms. An exception that lands inside lock code leaves
the lock taken, so a thread is only interrupted while it runs code that is not the
standard library's, Ray's or raylink's runtime (user functions, raylink's operator
loops): the canceler retries every few milliseconds until it finds the thread
there; entering any other function checks for the pending exception first, so it
is raised before that function takes a lock. A thread blocked inside C (``time.sleep``, a
socket read) sees it only when that call returns. If the task has not ended
``task.cancellation.timeout`` ms after the cancel, the watchdog reports it FAILED
with the stack it is stuck in, as Flink's watchdog fails the TaskManager: on Ray
the JobMaster then kills the TaskExecutor process; on the local target the stuck
daemon thread is abandoned (a Python thread cannot be killed).

Thread-safety: a task thread marks the span in which it may be interrupted with
``enter``/``leave``; ``leave`` also clears an interrupt still pending, so the
exception never lands in the task's cleanup or its final report. ``TaskCanceler``
runs on its own daemon thread.
"""

from __future__ import annotations

import ctypes
import importlib.util
import os
import sys
import sysconfig
import threading
import traceback
from typing import Callable, Optional

from raylink.errors import RaylinkError

_SET_ASYNC_EXC = ctypes.pythonapi.PyThreadState_SetAsyncExc  # (thread id, exception or NULL)
SAFE_POINT_RETRY_S = 0.005  # how often to look for a thread in interruptible code
#: raylink's packages whose code holds locks and is never interrupted (operators/ is)
RUNTIME_PACKAGES = ("core", "graph", "shuffle", "runtime", "actors", "connectors", "api", "cli", "loadtest")
#: raylink's operator code, interrupted like the user code it calls: the operators and the
#: keyed/operator state they keep (but not where checkpoints are stored, nor a sink's committables)
OPERATOR_PACKAGES = ("operators", "state")
NEVER_INTERRUPTED_FILES = (
    os.path.join("state", "checkpoint_storage.py"),
    os.path.join("operators", "committable_collector.py"),
)


def _runtime_prefixes() -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Code never interrupted (stdlib, Ray, raylink), and raylink's operators (interruptible)."""
    raylink_root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    prefixes = [sysconfig.get_paths()["stdlib"]]
    prefixes += [os.path.join(raylink_root, part) + os.sep for part in RUNTIME_PACKAGES]
    prefixes += [os.path.join(raylink_root, path) for path in NEVER_INTERRUPTED_FILES]
    for name in ("ray", "msgpack", "msgspec"):
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.submodule_search_locations:
            prefixes.extend(list(spec.submodule_search_locations))
    operators = tuple(os.path.join(raylink_root, part) + os.sep for part in OPERATOR_PACKAGES)
    return tuple(prefixes), operators


_RUNTIME_PREFIXES, _OPERATORS_PREFIXES = _runtime_prefixes()
_NEVER_INTERRUPTED = tuple(p for p in _RUNTIME_PREFIXES if p.endswith(".py"))


def at_safe_point(frame) -> bool:
    """True if a thread whose innermost frame is ``frame`` may be interrupted now."""
    filename = frame.f_code.co_filename
    if filename.startswith(_OPERATORS_PREFIXES) and not filename.startswith(_NEVER_INTERRUPTED):
        return True
    return not filename.startswith(_RUNTIME_PREFIXES)


class TaskCancellationTimeoutError(RaylinkError, RuntimeError):
    """A cancelled task did not end within ``task.cancellation.timeout``."""


class InterruptibleThreads:
    """The threads of one task that an interrupt may hit, and the interrupt itself."""

    def __init__(self, exception_type: type) -> None:
        self._exception_type = exception_type
        self._lock = threading.Lock()
        self._threads: set[int] = set()

    def enter(self) -> None:
        """The calling thread may be interrupted from now on."""
        with self._lock:
            self._threads.add(threading.get_ident())

    def leave(self) -> None:
        """The calling thread may not be interrupted any more; a pending interrupt is dropped."""
        ident = threading.get_ident()
        with self._lock:
            self._threads.discard(ident)
            _SET_ASYNC_EXC(ctypes.c_ulong(ident), None)  # None is NULL: clears a pending one

    def interrupt(self) -> int:
        """Raise the exception in every interruptible thread that is at a safe point;
        how many threads are interruptible but were not (retry soon)."""
        with self._lock:
            frames = sys._current_frames()
            missed = 0
            for ident in self._threads:
                frame = frames.get(ident)
                if frame is not None and at_safe_point(frame):
                    _SET_ASYNC_EXC(ctypes.c_ulong(ident), ctypes.py_object(self._exception_type))
                else:
                    missed += 1
            return missed

    def stacks(self) -> str:
        """Where the interruptible threads are now (for the watchdog's error)."""
        frames = sys._current_frames()
        with self._lock:
            idents = list(self._threads)
        parts = []
        for ident in idents:
            frame = frames.get(ident)
            if frame is not None:
                parts.append("".join(traceback.format_stack(frame, limit=8)))
        return "\n".join(parts)


class TaskCanceler(threading.Thread):
    """Interrupts a cancelled task now (retrying until its threads were at a safe point)
    and every ``interval_ms``; after ``timeout_ms`` (0: never) calls ``on_timeout``
    unless ``done`` was set first."""

    def __init__(
        self,
        name: str,
        done: threading.Event,
        interrupt: Callable[[], int],
        on_timeout: Callable[[], None],
        interval_ms: int,
        timeout_ms: int,
    ) -> None:
        super().__init__(name=f"Canceler for {name}", daemon=True)
        self._done = done
        self._interrupt = interrupt
        self._on_timeout = on_timeout
        self._interval = max(interval_ms, 1) / 1000.0
        self._timeout: Optional[float] = timeout_ms / 1000.0 if timeout_ms > 0 else None

    def run(self) -> None:
        import time

        deadline = None if self._timeout is None else time.monotonic() + self._timeout
        missed = self._interrupt()
        while True:
            wait = SAFE_POINT_RETRY_S if missed else self._interval
            if deadline is not None:
                wait = min(wait, max(0.0, deadline - time.monotonic()))
            if self._done.wait(wait):
                return
            if deadline is not None and time.monotonic() >= deadline:
                self._on_timeout()
                return
            missed = self._interrupt()


__all__ = [
    "InterruptibleThreads",
    "TaskCanceler",
    "TaskCancellationTimeoutError",
]
