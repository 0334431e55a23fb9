"""``raylink debug memory JOB_ID``: what the TaskExecutors of a running job hold in memory.

Connects to the Ray cluster the job runs on (``--address``, else ``$RAY_ADDRESS``, else
the local cluster), finds the job's TaskExecutor actors by their names
(:func:`raylink.actors.ray_actors.find_task_executors`; ``JOB_ID`` is the raylink job id
``raylink run`` prints, or a unique prefix of it) and asks each for its
:meth:`~raylink.runtime.task.task_executor.TaskExecutor.memory_report`: RSS, glibc heap in
use / free, Python objects by type (and their growth since the executor's first
report), network buffers, queued buffers per channel, state entries per operator and
the top allocation sites. The first call starts ``tracemalloc`` in the executors (it
says so: sites show from the next call on, and allocation is slower from then on);
``--no-tracemalloc`` only counts objects. ``--trim`` first hands the executors' free heap
pages back to the OS (``malloc_trim``) and prints how much RSS that released: RSS that
drops is allocator fragmentation, RSS that stays is held. ``--json`` prints the reports
as JSON.

Not thread-safe (a command line runs once per process). Flink counterpart: a heap dump
of a TaskManager (``jmap``) and its ``Status.JVM.Memory`` metrics.
"""

from __future__ import annotations

import json
import os
from typing import Any

from raylink.cli.common import EXIT_NO_SUCH_JOB, EXIT_OK, EXIT_UNREACHABLE, EXIT_USAGE, CliError, err, reject_extra

MIB = 2**20


def _connect(address: Any) -> bool:
    """Connect to the job's Ray cluster; True when this call connected (and so disconnects)."""
    from raylink.actors.cluster import connect_to, ray_connected

    if ray_connected():
        return False
    address = address or os.environ.get("RAY_ADDRESS") or "auto"
    if address == "local":
        raise CliError(
            EXIT_USAGE,
            "raylink debug memory: RAY_ADDRESS=local starts a new Ray; give the address of "
            "the cluster the job runs on (--address HEAD:6379, or auto)",
        )
    try:
        connect_to(address)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        cause = exc.__cause__
        hint = (
            " (the cluster uses token authentication: set RAY_AUTH_TOKEN or RAY_AUTH_TOKEN_PATH)"
            if cause is not None and type(cause).__name__ == "AuthenticationError"
            else ""
        )
        raise CliError(
            EXIT_UNREACHABLE, f"raylink debug memory: cannot reach a Ray cluster at {address}: {exc}{hint}"
        ) from None
    return True


def _mib(n: Any) -> str:
    return "-" if n is None else f"{n / MIB:,.1f} MiB"


def format_report(report: dict, top: int) -> list[str]:
    """One executor's memory report as text lines."""
    ex = report.get("executor", "?")
    if "error" in report:
        return [f"== {ex}: no report ({report['error']})"]
    heap = report.get("malloc") or {}
    py = report.get("python") or {}
    net = report.get("networkBuffers") or {}
    trimmed = report.get("trimmedRssBytes")
    lines = [
        f"== TaskExecutor {ex} ({report.get('tasks', 0)} tasks): RSS {_mib(report.get('rssBytes'))} "
        f"(peak {_mib(report.get('peakRssBytes'))}), heap in use {_mib(heap.get('inUseBytes'))}, "
        f"free in heap {_mib(heap.get('freeBytes'))}, Python blocks {py.get('allocatedBlocks', 0):,}, "
        f"gc objects {py.get('gcObjects', 0):,}",
        f"   network buffers in use {net.get('inUse', 0)}/{net.get('total', 0)}",
    ]
    if "trimmedRssBytes" in report:
        lines.insert(
            1,
            "   malloc_trim: "
            + (
                "not glibc, nothing done"
                if trimmed is None
                else f"RSS {trimmed / MIB:+,.1f} MiB (what drops was fragmentation)"
            ),
        )
    for task, ch in (report.get("queuedBuffers") or {}).items():
        lines.append(f"   queued buffers {task}: in {ch['in']} out {ch['out']}")
    state_bytes = report.get("stateBytes") or {}
    for op, n in (report.get("stateEntries") or {}).items():
        size = state_bytes.get(op)
        lines.append(f"   state entries {op}: {n:,}" + ("" if size is None else f", keyed state {_mib(size)}"))
    if state_bytes:
        lines.append(f"   keyed state of this TaskExecutor: {_mib(sum(state_bytes.values()))}")
    growth = py.get("typeGrowth") or {}
    lines.append("   objects by type (gc-tracked; + growth since this executor's first report):")
    for name, n in list((py.get("topTypes") or {}).items())[:top]:
        grew = growth.get(name)
        lines.append(f"     {n:>12,}  {name}" + (f"  (+{grew:,})" if grew else ""))
    traced = report.get("tracemalloc")
    if traced is None:
        lines.append("   tracemalloc: off (run without --no-tracemalloc to see allocation sites)")
    elif traced.get("started"):
        lines.append(
            "   tracemalloc: started now in this TaskExecutor; allocation sites show from the next "
            "call on (allocation is slower while tracing)"
        )
    else:
        lines.append(f"   tracemalloc: {_mib(traced.get('tracedBytes'))} traced; top allocation sites:")
        lines += [
            f"     {s['bytes'] / MIB:>9,.2f} MiB {s['count']:>10,} blocks  {s['site']}" for s in traced["top"][:top]
        ]
        if traced.get("growth"):
            lines.append("   grew most since tracing started:")
            for g in traced["growth"][:top]:
                lines.append(f"     {g['growthBytes'] / MIB:>+9,.2f} MiB {g['growthCount']:>+10,} blocks  {g['site']}")
                lines += [f"         from {frame}" for frame in g["stack"][-4:-1][::-1]]
    return lines


def cmd_debug_memory(args: Any) -> int:
    reject_extra(args, "debug memory")
    if args.top < 1:
        raise CliError(EXIT_USAGE, f"raylink debug memory: --top must be >= 1, got {args.top}")
    connected = _connect(args.address)
    try:
        from raylink.actors.ray_actors import find_task_executors, memory_reports, trim_heaps

        try:
            handles = find_task_executors(args.job_id)
        except LookupError as exc:
            raise CliError(EXIT_NO_SUCH_JOB, f"raylink debug memory: {exc}") from None
        trimmed = trim_heaps(handles, args.timeout) if args.trim else {}
        reports = memory_reports(handles, args.top, not args.no_tracemalloc, timeout=args.timeout)
    finally:
        if connected:
            from raylink.actors.cluster import shutdown_ray

            shutdown_ray()
    for report in reports:
        if report.get("executor") in trimmed:
            report["trimmedRssBytes"] = trimmed[report["executor"]]
    if args.json:
        print(json.dumps(reports, indent=1, default=str))
        return EXIT_OK
    started = [r["executor"] for r in reports if (r.get("tracemalloc") or {}).get("started")]
    print(f"raylink debug memory: job {args.job_id}: {len(reports)} TaskExecutor(s)")
    if started:
        err(
            f"raylink debug memory: started tracemalloc in {', '.join(started)}; call again to see the "
            "allocation sites (and what grew since now)"
        )
    for report in reports:
        print("\n".join(format_report(report, args.top)))
    missing = sorted(set(handles) - {r.get("executor") for r in reports})
    if missing:
        err(f"raylink debug memory: no answer within {args.timeout:g} s from {', '.join(missing)}")
    return EXIT_OK


__all__ = ["cmd_debug_memory", "format_report"]
