"""Where ``DataStream.print()`` lines go when the print sink runs away from the driver's
terminal: a per-process, bounded queue of lines that the process hosting the tasks (a Ray
TaskExecutor) hands to the driver with its task reports, and the driver writes to its own
stdout. (Flink's ``PrintSinkFunction`` writes to the TaskManager's stdout; PyFlink's
``python job.py`` runs a local MiniCluster, so its lines reach the terminal: raylink keeps
that when the TaskExecutors are other processes.)

Without an installed channel (the ``local`` target: tasks are threads of the driver) the print
sink writes to ``sys.stdout`` / ``sys.stderr`` itself. :func:`install` puts a
:class:`PrintChannel` in place for the whole process; the print sink looks it up per batch.

Order: one queue per process, so the lines of one subtask keep their order; the host takes
its task reports *before* the lines (:meth:`PrintChannel.take`), so every line a task wrote
before it reported FINISHED reaches the driver no later than that report.

Back pressure: ``put`` blocks while :data:`MAX_QUEUED_LINES` lines wait (the driver takes them
at least every long poll, 0.5 s); after :data:`PUT_TIMEOUT_S` without a reader (none is polling,
e.g. the job is being torn down) the lines go to the process's own stdout instead of being lost.

Thread-safety: every method takes the channel's condition; any number of task threads put,
one reader takes.
"""

from __future__ import annotations

import sys
import threading
from typing import Optional

#: lines queued before a printing task waits for the driver
MAX_QUEUED_LINES = 50_000
#: how long a printing task waits for room before writing to its own process's stdout
PUT_TIMEOUT_S = 10.0


class PrintChannel:
    """The queue of ``(to_stderr, text)`` chunks (``text`` holds whole lines) for the driver."""

    def __init__(self, max_lines: int = MAX_QUEUED_LINES) -> None:
        self._cond = threading.Condition()
        self._chunks: list[tuple[bool, str]] = []
        self._lines = 0
        self.max_lines = max_lines

    def put(self, to_stderr: bool, text: str, lines: int) -> None:
        """Queue ``text`` (``lines`` whole lines); waits while the queue is full (see the module
        doc for what happens when nobody reads)."""
        with self._cond:
            if self._lines >= self.max_lines and not self._cond.wait_for(
                lambda: self._lines < self.max_lines, PUT_TIMEOUT_S
            ):
                stream = sys.stderr if to_stderr else sys.stdout
                stream.write(text)
                stream.flush()
                return
            self._chunks.append((to_stderr, text))
            self._lines += lines

    def take(self) -> list[tuple[bool, str]]:
        """Everything queued, oldest first; frees the room."""
        with self._cond:
            chunks, self._chunks, self._lines = self._chunks, [], 0
            if chunks:
                self._cond.notify_all()
            return chunks


_installed: Optional[PrintChannel] = None


def install(channel: Optional[PrintChannel] = None) -> PrintChannel:
    """Make ``channel`` (a new one by default; the installed one if there is one) where this
    process's print sinks write; returns it."""
    global _installed
    if _installed is None:
        _installed = channel if channel is not None else PrintChannel()
    return _installed


def installed() -> Optional[PrintChannel]:
    """The process's channel, None when print sinks write to the terminal themselves."""
    return _installed


def write_chunks(chunks: list[tuple[bool, str]]) -> None:
    """The driver's side: write taken chunks to this process's stdout / stderr, in order (a
    stdout that can no longer be written drops them: the job does not fail for its reader)."""
    if not chunks:
        return
    try:
        for to_stderr, text in chunks:
            (sys.stderr if to_stderr else sys.stdout).write(text)
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError):  # a closed or broken stdout (``| head``): the job goes on
        pass


__all__ = ["MAX_QUEUED_LINES", "PUT_TIMEOUT_S", "PrintChannel", "install", "installed", "write_chunks"]
