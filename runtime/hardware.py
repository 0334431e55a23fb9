"""Flink's ``HardwareDescription``: the CPU cores and memory of the process a TaskExecutor runs in.

:func:`hardware_description` reads them once, when a TaskExecutor registers (as Flink's
TaskManager does at start-up): ``cpuCores`` the CPUs this process may run on,
``physicalMemory`` the machine's memory, ``freeMemory`` the memory available on the machine at
that moment (Flink reports the JVM's maximum heap, which a Python process does not have). Read
with psutil when it is installed (Ray ships it), else from ``os``; a figure that cannot be read
is left out, never guessed.

Pure function; thread-safe.
"""

from __future__ import annotations

import os


def hardware_description() -> dict:
    """``{"cpuCores", "physicalMemory", "freeMemory"}`` of this process's machine (bytes), each
    present only when it could be read."""
    out: dict = {}
    try:
        out["cpuCores"] = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count()
        if cores:
            out["cpuCores"] = cores
    try:
        import psutil

        memory = psutil.virtual_memory()
        out["physicalMemory"] = int(memory.total)
        out["freeMemory"] = int(memory.available)
    except (ImportError, OSError):
        try:
            out["physicalMemory"] = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
            out["freeMemory"] = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")
        except (AttributeError, ValueError, OSError):
            pass
    return out


__all__ = ["hardware_description"]
