"""The interpreter settings of a process that runs task threads (no Flink counterpart: the JVM's
are command-line flags), and where the local target's task threads run.

Two of CPython's process-wide knobs decide how fast task threads run side by side:

* the switch interval: how long a thread holding the GIL keeps it while another waits
  (Python's default 5 ms; ``raylink.taskmanager.switch-interval``, 1 ms);
* the young generation's threshold: allocations between two collections (Python's 700;
  ``raylink.taskmanager.gc-threshold``, 50 k). A task keeps a batch of thousands of records
  alive while it works on it; with 700 every collection traverses that batch again.

A TaskExecutor actor owns its process and sets both for good (:func:`tune_gc`,
:func:`tune_switch_interval`). The ``local`` target runs its TaskExecutor inside the user's
program, so :class:`LocalProcessTuning` sets them only while at least one local job runs and
then puts back what the program had (never freezing the program's objects).

Task threads that share a process run on one CPU (Linux): the local target's
(``raylink.local.pin-task-threads``) and those of a TaskExecutor actor that runs two or more
tasks (``raylink.taskmanager.pin-task-threads``). They take turns on the GIL, so two CPUs
give them no more Python time, but on two CPUs every record one thread makes and the next
reads -- and every reference count both touch -- moves between the CPUs' caches. Measured
on 2 cores: the untyped local word count 27 % (p=1) and 37 % (p=2) less time,
``bench/windows.py`` ~20 %; the untyped word count on Ray at p=2 (two TaskExecutors of two
tasks each) ~9 %. What they lose is overlap of work that releases the GIL in two task
threads at once (e.g. pyarrow writing Parquet while another task runs Python), and threads
a task starts inherit the CPU -- a native library's thread pool too, if a task thread
starts it (an OpenMP team of torch's): such jobs want the option off. The program's own
threads and Ray's are not pinned.

Which CPU: :class:`NodeCpuRegistry`, a small file per user on the node that every pinning
process writes its CPU to (under ``flock``), gives each the allowed CPU that the fewest live
pinned processes use -- so two executors of a node, of one job or of two, spread over its CPUs.
The file is ``pinned-cpus.json`` in the user's private runtime folder
(:mod:`raylink.runtime.runtime_dir`), opened with ``O_NOFOLLOW``; a folder or file another
user could control raises ``UnsafePathError``.

Thread-safety: :class:`LocalProcessTuning` counts running jobs under a lock; the registry is
safe across processes (a file lock); the tuning functions change process-wide state and are
meant for a process's start.
"""

from __future__ import annotations

import contextlib
import gc
import json
import logging
import os
import sys
import threading
from typing import Any, Dict, Iterator, Optional

try:
    import fcntl
except ImportError:  # Windows: no pinning there (no sched_setaffinity either)
    fcntl = None  # type: ignore[assignment]

from raylink.core.options import RaylinkOptions, read_option
from raylink.runtime.runtime_dir import UnsafePathError, open_private_file, runtime_dir


def tune_switch_interval(interval_ms: float) -> None:
    """Let a waiting thread take the GIL after ``interval_ms`` (Python's default: 5 ms).

    A busy task thread holds the GIL until the interval runs out whenever another thread
    wants it: in a TaskExecutor actor those are Ray's threads receiving buffers and credit
    (with 1 ms, ``loadtest wordcount`` flat out went 28-41 -> 7-10 ms p50 latency, and the
    untyped word count at p=2 0.45-0.54 -> 0.61-0.63x the loop); on the local target the
    downstream task thread waiting for the batch just handed over (``bench/windows.py``:
    with the threshold below, ~25 % less time).
    """
    sys.setswitchinterval(interval_ms / 1000.0)


def tune_gc(threshold: int, freeze: bool = True) -> None:
    """Collect the young generation every ``threshold`` allocations (0: Python's default).

    ``freeze``: move what the process holds so far (its imports) out of every collection.
    Cycles are still collected.
    """
    if threshold > 0:
        if freeze:
            gc.freeze()
        _, gen1, gen2 = gc.get_threshold()
        gc.set_threshold(threshold, gen1, gen2)


def pin_current_thread(cpus: Optional[frozenset]) -> None:
    """Run the calling thread (and the threads it starts) on ``cpus`` only (None: as it is)."""
    if cpus:
        os.sched_setaffinity(0, cpus)  # Linux: 0 is the calling thread


class NodeCpuRegistry:
    """Which CPU each pinning process of this node (and user) took: ``{pid: cpu}`` in a JSON
    file, read and written under an exclusive ``flock``; entries of processes that are gone
    are dropped on every claim. The file is ``pinned-cpus.json`` in the user's private runtime
    folder unless ``path`` names another."""

    def __init__(self, path: Optional[str] = None) -> None:
        self._path = path

    @property
    def path(self) -> str:
        """The registry's file (its folder created and checked when it is the runtime folder)."""
        return self._path or os.path.join(runtime_dir(), "pinned-cpus.json")

    def claim(self, pid: Optional[int] = None) -> Optional[frozenset]:
        """Give process ``pid`` (this one) the allowed CPU the fewest live others use, as a
        set; None where threads cannot be pinned (not Linux, one CPU, no registry file).
        Raises ``UnsafePathError`` for a registry another user could control."""
        if fcntl is None or not hasattr(os, "sched_setaffinity"):
            return None
        allowed = sorted(os.sched_getaffinity(0))
        if len(allowed) < 2:
            return None
        pid = os.getpid() if pid is None else pid
        try:
            with self._locked() as claims:
                claims.pop(pid, None)
                used = {cpu: 0 for cpu in allowed}
                for cpu in claims.values():
                    if cpu in used:
                        used[cpu] += 1
                cpu = min(allowed, key=lambda c: (used[c], c))
                claims[pid] = cpu
        except OSError:
            return None
        return frozenset((cpu,))

    def release(self, pid: Optional[int] = None) -> None:
        """Drop ``pid``'s (this process's) claim."""
        if fcntl is None:
            return
        try:
            with self._locked() as claims:
                claims.pop(os.getpid() if pid is None else pid, None)
        except OSError:
            pass

    @contextlib.contextmanager
    def _locked(self) -> Iterator[Dict[int, int]]:
        fd = open_private_file(self.path, os.O_RDWR | os.O_CREAT)  # no symbolic link, only this user's
        with os.fdopen(fd, "r+") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)  # released when the file closes
            try:
                claims = {int(p): int(c) for p, c in json.loads(fh.read() or "{}").items()}
            except (ValueError, AttributeError):
                claims = {}  # a torn or foreign file: start over
            claims = {p: c for p, c in claims.items() if _alive(p)}
            yield claims
            fh.seek(0)
            fh.truncate()
            fh.write(json.dumps({str(p): c for p, c in claims.items()}))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process (a recycled pid): alive
        return True
    return True


class LocalProcessTuning:
    """Applies the TaskExecutor settings to this process while local jobs run: the first
    ``acquire`` saves the program's own settings (and picks the task threads' CPU), the last
    ``release`` restores them."""

    _lock = threading.Lock()
    _running = 0
    _saved: Optional[tuple] = None
    _cpus: Optional[frozenset] = None

    @classmethod
    def acquire(cls, settings: Any) -> Optional[frozenset]:
        """Count one more local job; returns the CPUs its task threads run on (None: any)."""
        with cls._lock:
            if cls._running == 0:
                cls._saved = (sys.getswitchinterval(), gc.get_threshold())
                tune_gc(read_option(settings, RaylinkOptions.GC_THRESHOLD), freeze=False)
                tune_switch_interval(float(read_option(settings, RaylinkOptions.SWITCH_INTERVAL)))
                try:
                    cls._cpus = NodeCpuRegistry().claim()
                except UnsafePathError as exc:  # a foreign runtime folder never stops a local job
                    logging.getLogger(__name__).warning("task threads are not pinned: %s", exc)
                    cls._cpus = None
            cls._running += 1
            return cls._cpus if read_option(settings, RaylinkOptions.LOCAL_PIN_TASK_THREADS) else None

    @classmethod
    def release(cls) -> None:
        with cls._lock:
            if cls._running == 0:
                return
            cls._running -= 1
            if cls._running == 0 and cls._saved is not None:
                interval, threshold = cls._saved
                sys.setswitchinterval(interval)
                gc.set_threshold(*threshold)
                cls._saved = None
                if cls._cpus is not None:
                    NodeCpuRegistry().release()
                    cls._cpus = None
