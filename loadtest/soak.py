"""``raylink loadtest SCENARIO --soak DURATION``: one long run at a fixed rate, watching memory.

:func:`run_soak` runs the scenario's job for ``DURATION`` (``60s``, ``30m``, ``8h``:
:func:`parse_duration`) at ``--rate`` and, every ``--sample-interval`` seconds, asks
each TaskExecutor for its memory report
(:meth:`raylink.runtime.task.task_executor.TaskExecutor.memory_report`: RSS, glibc heap,
Python objects by type, tracemalloc sites with ``--tracemalloc``, network buffers in
use, queued buffers per channel, state entries per operator) and the job's vertices
for back pressure. The latency sink keeps a latency histogram per minute (per 10 s in
soaks under 5 minutes). At the end :mod:`raylink.loadtest.soak_report` fits the
memory slope per executor, the latency drift and a verdict, and writes
``report.json``, ``report.md``, ``soak_samples.csv``, ``soak_latency.csv`` and, with
matplotlib (``raylink[plots]``), ``soak_memory.png`` and ``soak_latency.png``.

With ``--kafka`` / ``--kafka-bootstrap-servers`` the records go through a Kafka topic
(:mod:`raylink.loadtest.kafka_driver`), produced at the rate for ``DURATION``; the run samples
on until the job has read them all, and ``kafkaBacklog`` (:func:`backlog_rss`) gives each
executor's RSS while the backlog a slow sink leaves waits in the topic.

Runs on the driver's thread, one job at a time; the memory reports are calls on the
executors (Ray actor calls, or the in-process TaskExecutor with ``execution.target:
local``). No Flink counterpart (Flink's soak tests are external jobs watched through
its metrics).
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
from typing import Any, Callable, Optional, Union

from raylink.loadtest.functions import ACC_LATENCY_WINDOWS, ACC_SOURCE_BUCKETS, SOURCE_NAME
from raylink.loadtest.runner import RATE_TOLERANCE, Progress, _vertex_view, achieved_rate, build_job, throughput_series
from raylink.loadtest.scenarios import Scenario, resolve_scenario
from raylink.loadtest.soak_report import (
    DEFAULT_MAX_DRIFT,
    DEFAULT_MAX_SLOPE_MIB_PER_H,
    analyze,
    latency_windows,
    write_soak_csv,
    write_soak_markdown,
    write_soak_plots,
)

DEFAULT_SAMPLE_INTERVAL_S = 5.0
#: the full reports (objects by type, tracemalloc sites: each walks the heap holding the GIL)
#: come at most this often; the samples between are the cheap ones (RSS, heap, buffers)
FULL_REPORT_INTERVAL_S = 60.0
END_MARGIN_S = 1.0
_UNITS = {"": 1, "s": 1, "m": 60, "min": 60, "h": 3600, "d": 86400}


def parse_duration(text: str) -> float:
    """``"90"``, ``"60s"``, ``"30m"``, ``"8h"``, ``"1h30m"`` -> seconds (> 0)."""
    parts = re.findall(r"(\d+(?:\.\d+)?)\s*(s|min|m|h|d|)", text.strip().lower())
    if not parts or "".join(n + u for n, u in parts) != re.sub(r"\s+", "", text.strip().lower()):
        raise ValueError(f"not a duration: {text!r} (e.g. 60s, 30m, 8h, 1h30m)")
    seconds = sum(float(n) * _UNITS[u] for n, u in parts)
    if seconds <= 0:
        raise ValueError(f"a soak needs a duration > 0, got {text!r}")
    return seconds


def _memory_reporter(client: Any, tracemalloc: bool) -> Callable[[int], list]:
    """How to ask this job's TaskExecutors for their memory report (``top`` 0: the cheap one)."""
    local = getattr(client, "task_executor", None)
    if local is not None:  # execution.target: local (the TaskExecutor of this process)
        return lambda top: [local.memory_report(top, tracemalloc)]
    from raylink.actors.ray_actors import memory_reports

    return lambda top: memory_reports(dict(client.handles), top, tracemalloc, timeout=30.0)


def _sample_row(t: float, report: dict) -> dict:
    """The figures of one executor's report that a soak follows over time."""
    heap = report.get("malloc") or {}
    py = report.get("python") or {}
    channels = report.get("queuedBuffers") or {}
    traced = report.get("tracemalloc") or {}
    return {
        "t": round(t, 2),
        "executor": report.get("executor", "?"),
        "rssBytes": report.get("rssBytes"),
        "rssAnonBytes": report.get("rssAnonBytes"),
        "rssFileBytes": report.get("rssFileBytes"),
        "threads": report.get("threads"),
        "heapInUseBytes": heap.get("inUseBytes"),
        "heapFreeBytes": heap.get("freeBytes"),
        "allocatedBlocks": py.get("allocatedBlocks"),
        "gcObjects": py.get("gcObjects"),
        "tracedBytes": traced.get("tracedBytes"),
        "networkBuffersInUse": (report.get("networkBuffers") or {}).get("inUse"),
        "queuedIn": sum(sum(c["in"]) for c in channels.values()),
        "queuedOut": sum(sum(c["out"]) for c in channels.values()),
        "stateEntries": sum((report.get("stateEntries") or {}).values()),
    }


def backlog_rss(rows: list) -> dict:
    """From ``[(t, executor, rss bytes, committed lag)]``: the largest backlog, each executor's
    peak RSS and its RSS at the largest backlog, and its RSS while the backlog was at least
    half of that (``rssUnderBacklog``: the memory the source holds with records waiting)."""
    rows = [r for r in rows if r[2] is not None]
    if not rows:
        return {"maxCommittedLag": None, "executors": {}}
    top = max(r[3] for r in rows)
    executors: dict = {}
    for t, ex, rss, lag in rows:
        e = executors.setdefault(ex, {"peakRssBytes": 0, "rssAtMaxLagBytes": None, "rssUnderBacklogBytes": []})
        e["peakRssBytes"] = max(e["peakRssBytes"], rss)
        if lag == top and e["rssAtMaxLagBytes"] is None:
            e["rssAtMaxLagBytes"] = rss
        if top > 0 and lag * 2 >= top:
            e["rssUnderBacklogBytes"].append(rss)
    for e in executors.values():
        under = e.pop("rssUnderBacklogBytes")
        e["maxRssUnderBacklogBytes"] = max(under) if under else None
        e["samplesUnderBacklog"] = len(under)
    return {"maxCommittedLag": top, "executors": executors}


def backlog_line(backlog: dict) -> str:
    """One sentence: the largest backlog and the RSS of each executor while it sat in the topic."""
    if backlog.get("maxCommittedLag") is None:
        return "Kafka backlog: no samples"
    parts = [
        f"{ex[-8:]}: peak {e['peakRssBytes'] / 2**20:.0f} MiB, at the largest backlog "
        f"{(e['rssAtMaxLagBytes'] or 0) / 2**20:.0f} MiB, with >= half of it waiting at most "
        f"{(e['maxRssUnderBacklogBytes'] or 0) / 2**20:.0f} MiB ({e['samplesUnderBacklog']} samples)"
        for ex, e in sorted(backlog["executors"].items())
    ]
    return f"Kafka backlog: up to {backlog['maxCommittedLag']:,} records not yet committed; RSS per TaskExecutor: " + (
        "; ".join(parts) or "-"
    )


def run_soak(
    scenario: Union[str, Scenario],
    rate: Optional[float],
    duration_s: float,
    output: str,
    parallelism: int = 1,
    sample_interval: float = DEFAULT_SAMPLE_INTERVAL_S,
    tracemalloc: bool = False,
    top: int = 20,
    buffer_timeout: Optional[int] = None,
    conf: Optional[dict] = None,
    plots: bool = True,
    progress: bool = False,
    max_slope: float = DEFAULT_MAX_SLOPE_MIB_PER_H,
    max_drift: float = DEFAULT_MAX_DRIFT,
    out: Any = None,
    kafka: Any = None,
) -> dict:
    """Run ``scenario`` for ``duration_s`` at ``rate`` (None: flat out), sampling every
    executor's memory; write the soak report into ``output`` and return it. ``kafka`` (a
    :class:`~raylink.loadtest.kafka_driver.KafkaLoad`): the records go through a topic, produced
    for ``duration_s``; the run lasts until the job has read them all (a slow sink leaves a
    backlog in the topic: the report's ``kafkaBacklog`` gives the RSS while it sits there)."""
    if isinstance(scenario, str):
        scenario = resolve_scenario(scenario)
    if not scenario.available:
        raise SystemExit(f"scenario {scenario.name!r} is unavailable: {scenario.unavailable_reason}")
    out = out or sys.stdout
    os.makedirs(output, exist_ok=True)
    window_s = 60 if duration_s >= 300 else 10
    buckets_per_s = 1.0 if duration_s <= 600 else 0.1
    driver = None
    if kafka is not None:
        from raylink.loadtest.kafka_driver import KafkaDriver

        driver = KafkaDriver(kafka, scenario.payload, rate, duration_s, None, buckets_per_s=buckets_per_s)
    try:
        if driver is not None:
            driver.open()
        return _run_soak(
            scenario,
            rate,
            duration_s,
            output,
            parallelism,
            sample_interval,
            tracemalloc,
            top,
            buffer_timeout,
            conf,
            plots,
            progress,
            max_slope,
            max_drift,
            out,
            window_s,
            buckets_per_s,
            driver,
        )
    finally:
        if driver is not None:
            driver.close()


def _run_soak(
    scenario: Scenario,
    rate: Optional[float],
    duration_s: float,
    output: str,
    parallelism: int,
    sample_interval: float,
    tracemalloc: bool,
    top: int,
    buffer_timeout: Optional[int],
    conf: Optional[dict],
    plots: bool,
    progress: bool,
    max_slope: float,
    max_drift: float,
    out: Any,
    window_s: int,
    buckets_per_s: float,
    driver: Any,
) -> dict:
    env = build_job(
        scenario,
        rate,
        parallelism,
        duration_s,
        None,
        buffer_timeout,
        latency_samples=2000,
        conf=conf,
        buckets_per_s=buckets_per_s,
        latency_window_s=window_s,
        kafka=driver,
    )
    label = f"soak {scenario.name} P={parallelism} rate={'max' if rate is None else f'{rate:,.0f}'}"
    bar = Progress(progress, label, duration_s, None)
    client = env.execute_async(f"loadtest {label}")
    started = time.perf_counter()
    print(
        f"{label}: job {client.get_job_id()} for {duration_s:,.0f} s (raylink debug memory "
        f"{client.get_job_id()[:8]} shows what its TaskExecutors hold)",
        file=out,
        flush=True,
    )
    reporter = _memory_reporter(client, tracemalloc)
    full_every = min(FULL_REPORT_INTERVAL_S, max(sample_interval, duration_s / 6))
    last_full = -float("inf")
    samples: list[dict] = []
    first: dict = {}  # executor -> its first report
    middle: dict = {}  # executor -> its first report of the second half
    last: dict = {}  # executor -> its latest report
    back_pressure: dict[str, dict[str, int]] = {}  # vertex -> {status: samples}
    # no samples in the last second: the source ends then and the tasks build their results
    # (a Kafka run lasts until the backlog is read: sampled to its end)
    cutoff = duration_s - END_MARGIN_S if driver is None else float("inf")
    stopping = None
    next_at = started + sample_interval
    while not client.wait(max(0.0, next_at - time.perf_counter())):
        now = time.perf_counter()
        next_at = max(next_at + sample_interval, now + sample_interval / 2)  # slow reports: no catch-up burst
        t = now - started
        if t > cutoff:
            continue
        # full reports: the first, every full_every, the first of the second half, the last
        full = t - last_full >= full_every or (t >= duration_s / 2 and not middle) or t + sample_interval > cutoff
        try:
            reports = reporter(top if full else 0)
            metrics = client.get_metrics()
        except Exception:  # noqa: BLE001 - the job ending under us
            continue
        if client.wait(0):
            break  # these may be partial (tasks already gone)
        if driver is not None:
            if driver.failed:
                client.cancel()
                client.wait(30)
                break
            if not driver.started and any(SOURCE_NAME in str(m.get("vertex_name", "")) for m in metrics):
                driver.start()
            lag = driver.sample(t, metrics)
            if lag is not None:
                for report in reports:
                    if "error" not in report:
                        driver.backlog_rss.append((t, report["executor"], report.get("rssBytes"), lag["committedLag"]))
            if stopping is None and driver.drained():
                stopping = client.stop_with_savepoint(True, driver.savepoint_dir)
            stall = driver.stalled(time.perf_counter()) if stopping is None else None
            if stall:
                client.cancel()
                client.wait(30)
                raise RuntimeError(stall)
        for report in reports:
            if "error" in report:
                continue
            ex = report["executor"]
            samples.append(_sample_row(t, report))
            if full:
                first.setdefault(ex, report)
                if t >= duration_s / 2:
                    middle.setdefault(ex, report)
                last[ex] = report
        if full:
            last_full = t
        vertices = _vertex_view(metrics)
        for name, agg in vertices.items():
            counts = back_pressure.setdefault(name, {})
            counts[agg["backPressureStatus"]] = counts.get(agg["backPressureStatus"], 0) + 1
        rss = " ".join(
            f"{r['executor'][-4:]}={r.get('rssBytes', 0) / 2**20:.0f}MiB" for r in reports if "error" not in r
        )
        bar.update(t, sum(a["numRecordsOut"] for n, a in vertices.items() if SOURCE_NAME in n), rss)
    bar.done()
    if stopping is not None:
        stopping.result(timeout=120)
    kafka_report = driver.finish(time.perf_counter() - started) if driver is not None else None
    result = client.get_job_execution_result(timeout=120)
    emitted, src_elapsed, achieved, sink_count = achieved_rate(result)
    accumulators = result.accumulators
    if driver is not None:  # the source is the producer outside the job
        emitted, src_elapsed = kafka_report["recordsProduced"], kafka_report["produceElapsedS"]
        achieved = kafka_report["produceRate"]
        accumulators = dict(accumulators)
        accumulators[ACC_SOURCE_BUCKETS] = driver.source_buckets()
    windows = latency_windows(result.accumulators.get(ACC_LATENCY_WINDOWS, []), window_s)
    run = {
        "scenario": scenario.name,
        "parallelism": parallelism,
        "targetRate": rate,
        "durationS": duration_s,
        "sampleIntervalS": sample_interval,
        "latencyWindowS": window_s,
        "tracemalloc": tracemalloc,
        "recordsEmitted": emitted,
        "recordsAtSink": sink_count,
        "sourceElapsedS": round(src_elapsed, 3),
        "achievedRate": round(achieved, 1),
        "rateHeld": None if rate is None else achieved >= RATE_TOLERANCE * rate,
        "netRuntimeMs": result.net_runtime_ms,
        "backPressure": back_pressure,
        "throughputSeries": throughput_series(accumulators, buckets_per_s),
    }
    report = {
        "scenario": scenario.name,
        "description": scenario.description,
        "createdAt": time.strftime("%Y-%m-%d %H:%M:%S"),
        "host": {
            "cpus": os.cpu_count(),
            "python": sys.version.split()[0],
            "loadAverage": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
        },
        "settings": {
            "rate": rate,
            "parallelism": parallelism,
            "durationS": duration_s,
            "sampleIntervalS": sample_interval,
            "tracemalloc": tracemalloc,
            "bufferTimeoutMs": buffer_timeout,
            "conf": conf or {},
            "maxSlopeMiBPerHour": max_slope,
            "maxLatencyDrift": max_drift,
        },
        "run": run,
        **analyze(samples, windows, first, middle, last, run, max_slope=max_slope, max_drift=max_drift),
        "samples": samples,
        "latencyWindows": windows,
        "plots": [],
        "files": ["report.json", "report.md", "soak_samples.csv", "soak_latency.csv"],
    }
    if driver is not None:
        report["kafka"] = kafka_report
        report["kafkaBacklog"] = backlog_rss(driver.backlog_rss)
    write_soak_csv(report, output)
    if plots:
        report["plots"], report["plotsNote"] = write_soak_plots(report, output)
    with open(os.path.join(output, "report.json"), "w") as f:
        json.dump(report, f, indent=1, default=str)
    write_soak_markdown(report, os.path.join(output, "report.md"))
    if driver is not None:
        line = backlog_line(report["kafkaBacklog"])
        with open(os.path.join(output, "report.md"), "a") as f:
            f.write(f"\n## Kafka backlog\n\n{line}\n")
        print(line, file=out, flush=True)
    print(report["verdictLine"], file=out, flush=True)
    if report.get("plotsNote"):
        print(report["plotsNote"], file=out)
    print(
        f"report: {os.path.join(output, 'report.md')} (+ {', '.join(report['files'][:1] + report['files'][2:])}"
        f"{', ' + ', '.join(report['plots']) if report['plots'] else ''})",
        file=out,
    )
    return report


__all__ = ["DEFAULT_SAMPLE_INTERVAL_S", "backlog_line", "backlog_rss", "parse_duration", "run_soak"]
