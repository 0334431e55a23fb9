"""The soak report: memory slope per TaskExecutor, latency drift, a verdict, CSV, Markdown and plots.

Input: the per-executor samples :func:`raylink.loadtest.soak.run_soak` took (RSS, glibc
heap in use and free, Python allocated blocks and gc objects, buffers, state), the
executors' first / mid-run / last memory reports, and the sink's latency histograms
per window. :func:`analyze` fits, per executor, the least-squares slope (MiB per
hour) of each figure over the second half of the run, and says what grows:

* RSS **and** the heap in use (Python blocks, gc objects) grow: objects are kept —
  a leak; ``typeGrowthSecondHalf`` and the tracemalloc growth sites name them;
* RSS and the heap's *free* bytes grow, the heap in use does not: allocator
  fragmentation (``MALLOC_ARENA_MAX``, ``malloc_trim``);
* RSS and Python's allocated blocks grow, malloc's heap does not: Python objects in
  pymalloc's own arenas;
* RSS grows, nothing else does: memory outside malloc (thread stacks, Ray's or Arrow's
  buffers, mmap).

An executor's memory is ``flat`` when its RSS slope is at most ``max_slope`` MiB/h,
``grows`` when it is above and the fitted growth over the second half exceeds
:data:`NOISE_FLOOR_MIB` (RSS moves by a page run or an arena at a time), else
``too short to tell``. Latency drift: p99 of the last complete window over the first.
The verdict is PASS (every executor flat, drift within ``max_drift``), FAIL (one grows,
or the drift is above) or INCONCLUSIVE (too short to tell).

Pure functions of their arguments (matplotlib's Agg backend for the plots, which are
skipped with a note when matplotlib, the ``raylink[plots]`` extra, is missing). No
Flink counterpart.
"""

from __future__ import annotations

import csv
import os
import statistics
from collections import Counter
from typing import Any, Optional

from raylink.loadtest.functions import histogram_percentiles

DEFAULT_MAX_SLOPE_MIB_PER_H = 5.0
DEFAULT_MAX_DRIFT = 0.20
#: RSS growth (MiB, fitted over the second half) below which a slope is noise
NOISE_FLOOR_MIB = 2.0
SAMPLE_FIELDS = (
    "t",
    "executor",
    "rssBytes",
    "rssAnonBytes",
    "rssFileBytes",
    "threads",
    "heapInUseBytes",
    "heapFreeBytes",
    "allocatedBlocks",
    "gcObjects",
    "tracedBytes",
    "networkBuffersInUse",
    "queuedIn",
    "queuedOut",
    "stateEntries",
)
MIB = 2**20
HOUR = 3600.0


def slope_per_hour(points: list) -> Optional[float]:
    """Least-squares slope of ``[(seconds, value)]`` in value per hour (None: < 3 points)."""
    points = [(t, v) for t, v in points if v is not None]
    if len(points) < 3 or points[0][0] == points[-1][0]:
        return None
    xs, ys = zip(*points)
    return statistics.linear_regression(xs, ys).slope * HOUR


def latency_windows(entries: list, window_s: int) -> list[dict]:
    """``[(window, bucket, samples)]`` from the sinks -> percentiles per window, oldest first.
    A window is ``complete`` unless it is the first or last (partly outside the run) or holds
    under half the median window's samples."""
    by_window: dict[int, Counter] = {}
    for window, bucket, n in entries:
        by_window.setdefault(window, Counter())[bucket] += n
    if not by_window:
        return []
    order = sorted(by_window)
    counts = [sum(by_window[w].values()) for w in order]
    median = statistics.median(counts)
    out = []
    for i, w in enumerate(order):
        stats = histogram_percentiles(by_window[w])
        stats["startS"] = (w - order[0]) * window_s
        stats["complete"] = 0 < i < len(order) - 1 and counts[i] >= median / 2
        out.append(stats)
    return out


def _by_executor(samples: list) -> dict[str, list]:
    out: dict[str, list] = {}
    for s in samples:
        out.setdefault(s["executor"], []).append(s)
    return out


def _type_growth(middle: Optional[dict], last: Optional[dict], top: int = 10) -> dict:
    """gc-tracked objects by type: growth from the first report of the second half to the last."""
    if not middle or not last:
        return {}
    before = (middle.get("python") or {}).get("typeGrowth", {})
    after = (last.get("python") or {}).get("typeGrowth", {})
    growth = Counter({k: v - before.get(k, 0) for k, v in after.items()})
    return {k: n for k, n in growth.most_common(top) if n > 0}


def _diagnosis(
    rss: Optional[float], in_use: Optional[float], free: Optional[float], blocks: Optional[float], max_slope: float
) -> str:
    """What grows, from the slopes (MiB/h; Python blocks per hour) of one executor."""
    if rss is None:
        return "too few samples"
    if rss <= max_slope:
        return "flat"
    if in_use is not None and in_use >= 0.4 * rss:
        return "objects are kept (the heap in use grows): a leak, see typeGrowthSecondHalf / tracemallocGrowth"
    if free is not None and free >= 0.4 * rss:
        return "free memory kept in the heap grows: allocator fragmentation"
    if blocks is not None and blocks > 0:
        return (
            "Python objects grow (pymalloc arenas, outside malloc's heap): see typeGrowthSecondHalf / tracemallocGrowth"
        )
    if in_use is not None:
        return "memory outside malloc's heap grows (thread stacks, Ray's or Arrow's buffers, mmap)"
    return "RSS grows"


def analyze(
    samples: list,
    windows: list,
    first: dict,
    middle: dict,
    last: dict,
    run: dict,
    max_slope: float = DEFAULT_MAX_SLOPE_MIB_PER_H,
    max_drift: float = DEFAULT_MAX_DRIFT,
) -> dict:
    """``{"memory": per executor, "latency": drift, "verdict", "verdictLine"}``."""
    memory = {}
    for ex, rows in sorted(_by_executor(samples).items()):
        t0, t1 = rows[0]["t"], rows[-1]["t"]
        half = [r for r in rows if r["t"] >= (t0 + t1) / 2]

        def slope(key: str, scale: float = 1.0) -> Optional[float]:
            value = slope_per_hour([(r["t"], r[key] / scale if r[key] is not None else None) for r in half])
            return None if value is None else round(value, 2)

        rss = slope("rssBytes", MIB)
        span_h = (half[-1]["t"] - half[0]["t"]) / HOUR if half else 0.0
        growth = None if rss is None else rss * span_h
        if rss is None:
            status = "too short to tell"
        elif rss <= max_slope:
            status = "flat"
        elif growth >= NOISE_FLOOR_MIB:
            status = "grows"
        else:
            status = "too short to tell"
        heap_in_use, heap_free = slope("heapInUseBytes", MIB), slope("heapFreeBytes", MIB)
        blocks = slope("allocatedBlocks")
        last_report = last.get(ex) or {}
        traced = last_report.get("tracemalloc") or {}
        memory[ex] = {
            "status": status,
            "slopeMiBPerHour": rss,
            "growthSecondHalfMiB": None if growth is None else round(growth, 2),
            "rssStartMiB": round(rows[0]["rssBytes"] / MIB, 1) if rows[0]["rssBytes"] else None,
            "rssEndMiB": round(rows[-1]["rssBytes"] / MIB, 1) if rows[-1]["rssBytes"] else None,
            "rssMaxMiB": round(max(r["rssBytes"] or 0 for r in rows) / MIB, 1),
            "heapInUseSlopeMiBPerHour": heap_in_use,
            "heapFreeSlopeMiBPerHour": heap_free,
            "allocatedBlocksSlopePerHour": blocks,
            "gcObjectsSlopePerHour": slope("gcObjects"),
            "networkBuffersInUseMax": max((r["networkBuffersInUse"] or 0 for r in rows), default=0),
            "queuedBuffersMax": max((r["queuedIn"] + r["queuedOut"] for r in rows), default=0),
            "stateEntries": [rows[0]["stateEntries"], rows[-1]["stateEntries"]],
            "diagnosis": _diagnosis(rss, heap_in_use, heap_free, blocks, max_slope),
            "samples": len(rows),
            "typeGrowthSecondHalf": _type_growth(middle.get(ex), last_report),
            "topTypes": (last_report.get("python") or {}).get("topTypes", {}),
            "tracemallocGrowth": traced.get("growth", []),
            "tracemallocTop": traced.get("top", []),
        }
    complete = [w for w in windows if w.get("complete") and "p99" in w]
    latency: dict = {"windowS": run.get("latencyWindowS"), "completeWindows": len(complete)}
    if len(complete) >= 2:
        a, b = complete[0], complete[-1]
        drift = b["p99"] / a["p99"] - 1 if a["p99"] else None
        latency.update(
            firstP99Ms=a["p99"],
            lastP99Ms=b["p99"],
            firstP50Ms=a["p50"],
            lastP50Ms=b["p50"],
            p99Drift=None if drift is None else round(drift, 3),
        )
        latency["status"] = "stable" if drift is not None and drift <= max_drift else "drifts"
    else:
        latency["p99Drift"] = None
        latency["status"] = "too short to tell"
    return {"memory": memory, "latency": latency, **_verdict(memory, latency, run, max_slope, max_drift)}


def _verdict(memory: dict, latency: dict, run: dict, max_slope: float, max_drift: float) -> dict:
    failures, unsure = [], []
    for ex, m in memory.items():
        if m["status"] == "grows":
            failures.append(f"{ex} grows {m['slopeMiBPerHour']:+.1f} MiB/h > {max_slope:g} ({m['diagnosis']})")
        elif m["status"] != "flat":
            unsure.append(f"{ex}: memory {m['status']}")
    if not memory:
        unsure.append("no memory samples")
    if latency["status"] == "drifts":
        failures.append(
            f"p99 latency {latency['firstP99Ms']:.1f} -> {latency['lastP99Ms']:.1f} ms "
            f"({100 * latency['p99Drift']:+.0f} % > {100 * max_drift:.0f} %)"
        )
    elif latency["status"] != "stable":
        unsure.append(f"latency drift {latency['status']} (needs 2 complete windows)")
    slopes = ", ".join(
        f"{ex} {m['slopeMiBPerHour']:+.1f}" if m["slopeMiBPerHour"] is not None else f"{ex} -"
        for ex, m in memory.items()
    )
    drift = (
        "-"
        if latency.get("p99Drift") is None
        else f"{latency['firstP99Ms']:.1f} -> {latency['lastP99Ms']:.1f} ms ({100 * latency['p99Drift']:+.0f} %)"
    )
    held = "flat out" if run.get("targetRate") is None else "rate held" if run.get("rateHeld") else "rate NOT held"
    verdict = "FAIL" if failures else ("INCONCLUSIVE" if unsure else "PASS")
    why = "; ".join(failures or unsure) or (f"memory flat (<= {max_slope:g} MiB/h), p99 within {100 * max_drift:.0f} %")
    line = (
        f"verdict: {verdict}: {why} | RSS slope MiB/h: {slopes} | p99 first -> last window: {drift} | "
        f"{held} ({run.get('achievedRate', 0):,.0f} records/s)"
    )
    return {"verdict": verdict, "verdictLine": line}


def write_soak_csv(report: dict, out_dir: str) -> None:
    """``soak_samples.csv`` (a row per executor per sample) and ``soak_latency.csv``."""
    with open(os.path.join(out_dir, "soak_samples.csv"), "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=SAMPLE_FIELDS, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(report["samples"])
    with open(os.path.join(out_dir, "soak_latency.csv"), "w", newline="") as f:
        fields = ("startS", "count", "p50", "p95", "p99", "max", "complete")
        writer = csv.DictWriter(f, fieldnames=fields, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(report["latencyWindows"])


def _mib(v: Any) -> str:
    return "-" if v is None else f"{v:+.1f}"


def write_soak_markdown(report: dict, path: str) -> None:
    run, s = report["run"], report["settings"]
    rate = "max" if s["rate"] is None else f"{s['rate']:,.0f}"
    load = report["host"].get("loadAverage")
    lines = [
        f"# raylink loadtest --soak: {report['scenario']}",
        "",
        report.get("description", ""),
        "",
        f"{report['host']['cpus']} CPUs, Python {report['host']['python']}, {report['createdAt']}"
        + (f", load average at the end {load[0]:.1f}" if load else ""),
        "",
        f"**{report['verdictLine']}**",
        "",
        f"Rate {rate} records/s for {s['durationS']:,.0f} s at parallelism {s['parallelism']}: achieved "
        f"{run['achievedRate']:,.0f} records/s, {run['recordsEmitted']:,} records; memory sampled every "
        f"{s['sampleIntervalS']:g} s" + (" (tracemalloc on)" if s["tracemalloc"] else "") + ".",
        "",
        "## Memory per TaskExecutor (slopes: least squares over the second half, per hour)",
        "",
        "| executor | status | RSS start / end / max MiB | RSS MiB/h | heap in use MiB/h | heap free MiB/h "
        "| Python blocks/h | gc objects/h | net buffers max | queued max | state entries |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for ex, m in report["memory"].items():
        blocks = m["allocatedBlocksSlopePerHour"]
        objs = m["gcObjectsSlopePerHour"]
        lines.append(
            f"| {ex} | {m['status']} | {m['rssStartMiB']} / {m['rssEndMiB']} / {m['rssMaxMiB']} | "
            f"{_mib(m['slopeMiBPerHour'])} | {_mib(m['heapInUseSlopeMiBPerHour'])} | "
            f"{_mib(m['heapFreeSlopeMiBPerHour'])} | {'-' if blocks is None else f'{blocks:+,.0f}'} | "
            f"{'-' if objs is None else f'{objs:+,.0f}'} | {m['networkBuffersInUseMax']} | "
            f"{m['queuedBuffersMax']} | {m['stateEntries'][0]:,} -> {m['stateEntries'][1]:,} |"
        )
    for ex, m in report["memory"].items():
        lines += ["", f"### {ex}: {m['diagnosis']}", ""]
        if m["typeGrowthSecondHalf"]:
            lines.append(
                "gc-tracked objects that grew over the second half: "
                + ", ".join(f"`{k}` +{v:,}" for k, v in m["typeGrowthSecondHalf"].items())
            )
        lines.append(
            "most numerous gc-tracked objects at the end: "
            + ", ".join(f"`{k}` {v:,}" for k, v in list(m["topTypes"].items())[:10])
        )
        if m["tracemallocGrowth"]:
            lines += ["", "allocation sites that grew most since tracing started:", ""]
            lines += [
                f"- `{g['site']}` {g['growthBytes'] / 2**10:+,.0f} KiB ({g['growthCount']:+,} blocks)"
                for g in m["tracemallocGrowth"][:10]
            ]
    lat = report["latency"]
    lines += [
        "",
        f"## Latency per {lat['windowS']} s window (sink histogram, 5 % buckets)",
        "",
        "| from s | samples | p50 ms | p95 ms | p99 ms | max ms |",
        "|---|---|---|---|---|---|",
    ]
    windows = report["latencyWindows"]
    step = max(1, len(windows) // 60)  # at most ~60 rows (an 8 h soak has 480 minutes)
    for i, w in enumerate(windows):
        if i % step and i != len(windows) - 1:
            continue
        mark = "" if w["complete"] else " (partial)"
        lines.append(
            f"| {w['startS']}{mark} | {w['count']:,} | {w.get('p50', '-')} | {w.get('p95', '-')} | "
            f"{w.get('p99', '-')} | {w.get('max', '-')} |"
        )
    bp = ", ".join(
        f"{v}: " + "/".join(f"{k} {n}" for k, n in sorted(c.items())) for v, c in run["backPressure"].items()
    )
    lines += ["", "## Back pressure (samples per status)", "", bp or "-"]
    if report["plots"] or report.get("plotsNote"):
        lines += ["", "## Plots", ""] + [f"![{p}]({p})" for p in report["plots"]]
        if report.get("plotsNote"):
            lines.append(report["plotsNote"])
    lines += [
        "",
        "Files: " + ", ".join(report["files"] + report["plots"]) + ".",
        "",
        "Memory status: flat when the RSS slope is at most the threshold; grows when above it and the "
        f"fitted growth over the second half exceeds {NOISE_FLOOR_MIB:g} MiB; otherwise too short to tell. "
        "Figures taken on a busy machine are noisy: compare soaks of the same length on the same host.",
    ]
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def write_soak_plots(report: dict, out_dir: str) -> "tuple[list[str], str]":
    """``soak_memory.png`` and ``soak_latency.png``; without matplotlib none, and a note saying so."""
    try:
        import matplotlib
    except ImportError:
        return [], (
            "plots skipped: matplotlib is not installed (pip install 'raylink[plots]'); "
            "the figures are in soak_samples.csv and soak_latency.csv"
        )
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []
    fig, (ax, ax2) = plt.subplots(2, 1, figsize=(9, 6.5), sharex=True)
    for ex, rows in _by_executor(report["samples"]).items():
        ts = [r["t"] / 60 for r in rows]
        ax.plot(ts, [(r["rssBytes"] or 0) / MIB for r in rows], label=f"{ex} RSS")
        if rows[0]["heapInUseBytes"] is not None:
            ax.plot(ts, [r["heapInUseBytes"] / MIB for r in rows], ls="--", label=f"{ex} heap in use")
        ax2.plot(ts, [r["allocatedBlocks"] or 0 for r in rows], label=f"{ex} Python blocks")
    ax.set_ylabel("MiB")
    ax.set_title(f"{report['scenario']} soak: TaskExecutor memory ({report['verdict']})")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    ax2.set_xlabel("minutes since start")
    ax2.set_ylabel("Python allocated blocks")
    ax2.grid(alpha=0.3)
    ax2.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(os.path.join(out_dir, "soak_memory.png"), dpi=110)
    plt.close(fig)
    written.append("soak_memory.png")

    fig, ax = plt.subplots(figsize=(9, 4.5))
    windows = [w for w in report["latencyWindows"] if "p99" in w]
    for q in ("p50", "p95", "p99"):
        ax.plot([w["startS"] / 60 for w in windows], [w[q] for w in windows], marker=".", label=q)
    ax.set_xlabel("minutes since the first window")
    ax.set_ylabel("end-to-end latency (ms)")
    ax.set_yscale("log")
    ax.set_title(f"{report['scenario']} soak: latency per {report['latency']['windowS']} s")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(os.path.join(out_dir, "soak_latency.png"), dpi=110)
    plt.close(fig)
    written.append("soak_latency.png")
    return written, ""


__all__ = [
    "DEFAULT_MAX_DRIFT",
    "DEFAULT_MAX_SLOPE_MIB_PER_H",
    "NOISE_FLOOR_MIB",
    "analyze",
    "latency_windows",
    "slope_per_hour",
    "write_soak_csv",
    "write_soak_markdown",
    "write_soak_plots",
]
