"""Recovery time as the records show it, for ``bench/failover.py`` and ``bench/checkpoint.py``.

The job status says RUNNING again as soon as the JobMaster has redeployed the tasks, before
they have loaded their state or read a record. The honest figure is when the restored tasks
emit their first record again: :class:`FirstRecordAfterRestore` is an identity map placed
after the stateful operator that, in every attempt after the first
(``get_attempt_number() > 0``), writes the wall time (``time.time()``) of the first record it
sees into ``<folder>/<attempt>-<subtask>``. The tasks run in TaskExecutor processes on this
machine, so a file in a folder the bench made is the channel back, and ``time.time()`` is the
same clock in every process here.
"""

from __future__ import annotations

import os
import statistics
import time
from typing import Callable, Optional, Sequence

from raylink.api import MapFunction


class FirstRecordAfterRestore(MapFunction):
    """Identity map: records when the first record of each restored attempt passes."""

    def __init__(self, folder: str) -> None:
        self.folder = folder
        self.pending = False

    def open(self, runtime_context) -> None:
        self.attempt = runtime_context.get_attempt_number()
        self.subtask = runtime_context.get_index_of_this_subtask()
        self.pending = self.attempt > 0

    def map(self, value):
        if self.pending:
            self.pending = False
            now = time.time()
            path = os.path.join(self.folder, f"{self.attempt}-{self.subtask}")
            with open(path + ".tmp", "w") as fh:
                fh.write(repr(now))
            os.replace(path + ".tmp", path)  # the bench never reads half a number
        return value


def first_records(folder: str, after_attempt: int) -> list:
    """Wall times of the first records of every attempt above ``after_attempt`` seen so far."""
    found = []
    for name in os.listdir(folder):
        attempt, _, subtask = name.partition("-")
        if subtask.isdigit() and attempt.isdigit() and int(attempt) > after_attempt:
            with open(os.path.join(folder, name)) as fh:
                found.append(float(fh.read()))
    return found


def wait_first_record(
    folder: str, after_attempt: int, done: Callable[[], bool], timeout: float = 120
) -> Optional[float]:
    """The earliest first record of an attempt above ``after_attempt`` (wall time), waiting for
    one; None if the job ended (``done()``) or none came within ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = first_records(folder, after_attempt)
        if found:
            return min(found)
        if done():
            return None
        time.sleep(0.005)
    return None


def recovery_table(title: str, running: Sequence[float], first: Sequence[float]) -> str:
    """Both figures side by side: per column the median over the kills (min – max below), and
    the first record's time as a ratio to the status's (the same run's baseline)."""
    lines = [title]
    lines.append(f"{'kill ->':<34}{'median s':>9}{'min s':>8}{'max s':>8}{'vs RUNNING':>12}")
    rows = [("job status RUNNING (baseline)", running), ("first record after the restore", first)]
    base = statistics.median(running) if running else float("nan")
    for label, values in rows:
        if not values:
            lines.append(f"{label:<34}{'-':>9}{'-':>8}{'-':>8}{'-':>12}")
            continue
        median = statistics.median(values)
        lines.append(f"{label:<34}{median:>9.2f}{min(values):>8.2f}{max(values):>8.2f}{median / base:>11.2f}x")
    return "\n".join(lines)
