"""What a process's memory is made of, for soak tests and ``raylink debug memory``.

:func:`process_memory_report` answers "what grows?" for the process it runs in (a
TaskExecutor; :meth:`raylink.runtime.task.task_executor.TaskExecutor.memory_report` adds the
executor's buffers, channels and state):

* ``rssBytes`` / ``peakRssBytes``: what the OS sees;
* ``malloc``: glibc's view (``mallinfo2``): ``inUseBytes`` (allocated blocks) and
  ``freeBytes`` (free blocks kept inside the heap). RSS that grows with ``freeBytes``
  while ``inUseBytes`` stays flat is allocator fragmentation, not a leak;
* ``python``: ``sys.getallocatedblocks()`` (every live Python object, tracked by the gc or
  not), the gc-tracked objects by type (``topTypes``) and their growth since the first
  report of this process (``typeGrowth``), the gc's collection statistics;
* ``tracemalloc`` (when asked, or already tracing): the top allocation sites now and the
  sites that grew most since tracing started. Tracing is started on the first request
  (``tracemallocStarted``: it sees only what is allocated from then on, and slows
  allocation down, so it stays off unless asked for).

:func:`trim_heap` hands free heap pages back to the OS (glibc's ``malloc_trim``).

Thread-safe: the gc walk and the snapshots run under the GIL; the baselines are
guarded by a lock. Flink counterpart: the TaskManager's JVM memory metrics
(``Status.JVM.Memory.*``) and a heap dump (``jmap``) — a Python process has
``gc`` and ``tracemalloc`` instead.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import resource
import sys
import threading
import tracemalloc
from collections import Counter
from typing import Any, Optional

#: frames kept per traced allocation: the growth report shows the call path of the top sites
TRACEMALLOC_FRAMES = 8

_lock = threading.Lock()
_baseline_types: Optional[Counter] = None
_baseline_snapshot: Optional[tracemalloc.Snapshot] = None
_libc: Any = None


def _glibc() -> Any:
    global _libc
    if _libc is None:
        _libc = False
        if sys.platform.startswith("linux"):
            try:
                lib = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
                lib.mallinfo2  # glibc >= 2.33
                _libc = lib
            except (OSError, AttributeError):
                pass
    return _libc or None


class _MallInfo2(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in (
            "arena",
            "ordblks",
            "smblks",
            "hblks",
            "hblkhd",
            "usmblks",
            "fsmblks",
            "uordblks",
            "fordblks",
            "keepcost",
        )
    ]


#: /proc/self/status lines -> report keys: the resident set and its parts (anonymous memory,
#: mapped files, shared memory), the OS threads
_STATUS_FIELDS = {
    "VmRSS": "rssBytes",
    "RssAnon": "rssAnonBytes",
    "RssFile": "rssFileBytes",
    "RssShmem": "rssShmemBytes",
    "Threads": "threads",
}


def rss_bytes() -> dict:
    """This process's resident set now (Linux: with its anonymous / file / shared parts and
    the thread count) and at its peak, in bytes."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    out = {"peakRssBytes": peak if sys.platform == "darwin" else peak * 1024}
    try:
        with open("/proc/self/status") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key in _STATUS_FIELDS:
                    parts = value.split()
                    out[_STATUS_FIELDS[key]] = int(parts[0]) * (1024 if len(parts) > 1 else 1)
    except (OSError, ValueError, IndexError):
        pass
    return out


def malloc_stats() -> Optional[dict]:
    """glibc's heap: bytes in use, free inside the heap, mapped directly (None elsewhere)."""
    lib = _glibc()
    if lib is None:
        return None
    lib.mallinfo2.restype = _MallInfo2
    info = lib.mallinfo2()
    return {
        "heapBytes": info.arena + info.hblkhd,
        "inUseBytes": info.uordblks + info.hblkhd,
        "freeBytes": info.fordblks,
        "mmappedBytes": info.hblkhd,
    }


def trim_heap() -> Optional[int]:
    """``malloc_trim(0)``: free heap pages go back to the OS; the RSS change in bytes (None:
    not glibc)."""
    lib = _glibc()
    if lib is None:
        return None
    before = rss_bytes().get("rssBytes", 0)
    lib.malloc_trim(0)
    return rss_bytes().get("rssBytes", 0) - before


def _type_name(t: type) -> str:
    module = getattr(t, "__module__", "") or ""
    return t.__qualname__ if module == "builtins" else f"{module}.{t.__qualname__}"


def object_counts(top: int) -> dict:
    """gc-tracked objects (not frozen ones: what the process imported) by type, the ``top``
    most numerous, and the types that grew most since the first call in this process."""
    global _baseline_types
    blocks = sys.getallocatedblocks()  # before this walk allocates
    counts = Counter(map(type, gc.get_objects()))
    by_name: Counter = Counter()
    for t, n in counts.items():
        by_name[_type_name(t)] += n
    del counts
    with _lock:
        if _baseline_types is None:
            _baseline_types = by_name
        baseline = _baseline_types
    growth = Counter(by_name)
    growth.subtract(baseline)
    return {
        "allocatedBlocks": blocks,
        "gcObjects": sum(by_name.values()),
        "gcFrozen": gc.get_freeze_count(),
        "gcCollections": [s["collections"] for s in gc.get_stats()],
        "topTypes": dict(by_name.most_common(top)),
        "typeGrowth": {name: n for name, n in growth.most_common(top) if n > 0},
    }


def _site(stat: Any) -> dict:
    frame = stat.traceback[-1]  # the allocating line (grouped by line: the only frame)
    return {"site": f"{frame.filename}:{frame.lineno}", "bytes": stat.size, "count": stat.count}


def tracemalloc_report(top: int, start: bool) -> Optional[dict]:
    """Top allocation sites and growth since tracing started (``top`` 0: the traced total
    only, no snapshot); starts tracing when ``start`` and not yet tracing (then there is
    nothing to show yet). None: not tracing."""
    global _baseline_snapshot
    if not tracemalloc.is_tracing():
        if not start:
            return None
        tracemalloc.start(TRACEMALLOC_FRAMES)
        with _lock:
            _baseline_snapshot = tracemalloc.take_snapshot()
        return {"started": True, "tracedBytes": tracemalloc.get_traced_memory()[0], "top": [], "growth": []}
    if top <= 0:
        traced, peak = tracemalloc.get_traced_memory()
        return {"started": False, "tracedBytes": traced, "tracedPeakBytes": peak, "top": [], "growth": []}
    ignore = (tracemalloc.Filter(False, tracemalloc.__file__),)
    snapshot = tracemalloc.take_snapshot().filter_traces(ignore)
    with _lock:
        if _baseline_snapshot is None:
            _baseline_snapshot = snapshot
        baseline = _baseline_snapshot
    growth = []
    for stat in snapshot.compare_to(baseline.filter_traces(ignore), "traceback")[:top]:
        if stat.size_diff <= 0:
            break
        frames = [f"{f.filename}:{f.lineno}" for f in stat.traceback]  # oldest call first
        growth.append(
            {
                "site": frames[-1],
                "bytes": stat.size,
                "growthBytes": stat.size_diff,
                "count": stat.count,
                "growthCount": stat.count_diff,
                "stack": frames,
            }
        )
    traced, peak = tracemalloc.get_traced_memory()
    return {
        "started": False,
        "tracedBytes": traced,
        "tracedPeakBytes": peak,
        "top": [_site(s) for s in snapshot.statistics("lineno")[:top]],
        "growth": growth,
    }


def process_memory_report(top: int = 20, trace: bool = False) -> dict:
    """RSS, glibc heap, Python objects and (when tracing or ``trace``) tracemalloc sites.

    ``top`` 0 is the cheap report a soak takes every few seconds: no walk over the gc's
    objects and no tracemalloc snapshot (each holds the GIL for a while on a big heap)."""
    out: dict = dict(rss_bytes())
    heap = malloc_stats()
    if heap is not None:
        out["malloc"] = heap
    out["python"] = object_counts(top) if top > 0 else {"allocatedBlocks": sys.getallocatedblocks()}
    traced = tracemalloc_report(top, trace)
    if traced is not None:
        out["tracemalloc"] = traced
    return out


__all__ = [
    "TRACEMALLOC_FRAMES",
    "malloc_stats",
    "object_counts",
    "process_memory_report",
    "rss_bytes",
    "trim_heap",
    "tracemalloc_report",
]
