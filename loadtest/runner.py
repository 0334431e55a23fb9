"""Running a load-test scenario: one job at a target rate (or flat out), sampled while it runs.

:func:`run_one` builds the job (the scenario's source, or a
:class:`~raylink.loadtest.functions.RateLimitedSource`, then the scenario's operators
and a :class:`~raylink.loadtest.functions.LatencySink`), submits it with
``execute_async`` and, while it runs, samples ``JobClient.get_metrics()`` for back
pressure, busy time and the resident memory of every TaskExecutor; at the end it
reads the accumulators (achieved rate, latency reservoir, throughput buckets) and
returns one run's dict. With ``kafka`` the records go through a Kafka topic instead
(:mod:`raylink.loadtest.kafka_driver`: a producer outside the job, the job's ``KafkaSource``,
lag samples; the job is stopped with a drained savepoint once its group has committed every
record). :func:`run_loadtest` sweeps rates x parallelisms and writes
``report.json``, ``report.md`` and the plots (:mod:`raylink.loadtest.report`).

Runs on the driver's thread, one job at a time; :class:`Progress` draws on stderr.
No Flink counterpart (its metrics are Flink's: ``busyTimeMsPerSecond``,
``backPressuredTimeMsPerSecond``, the back-pressure levels).
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
from collections import Counter
from typing import Any, Optional

from raylink.loadtest.functions import (
    ACC_LATENCY,
    ACC_SINK_BUCKETS,
    ACC_SINK_COUNT,
    ACC_SOURCE,
    ACC_SOURCE_BUCKETS,
    BUCKETS_PER_S,
    SINK_NAME,
    SOURCE_NAME,
    LatencySink,
    RateLimitedSource,
    StampedPayload,
)
from raylink.loadtest.report import require_plots, summarize, write_markdown, write_plots
from raylink.loadtest.scenarios import Scenario, resolve_scenario

RATE_TOLERANCE = 0.95  # a run "held" its rate when it achieved >= 95 % of it


def percentiles(samples: list, ps: tuple = (50, 95, 99)) -> dict:
    if not samples:
        return {}
    s = sorted(samples)
    n = len(s)
    out = {f"p{p}": s[min(n - 1, int(math.ceil(n * p / 100.0)) - 1)] for p in ps}
    out.update(count=n, max=s[-1], mean=sum(s) / n)
    return out


STATUS_ORDER = {"OK": 0, "LOW": 1, "HIGH": 2}


class Progress:
    """A one-line progress bar on stderr (only when enabled)."""

    def __init__(self, enabled: bool, label: str, total_s: Optional[float], total_records: Optional[int]) -> None:
        self.enabled = enabled
        self.label = label
        self.total_s = total_s
        self.total_records = total_records

    def update(self, elapsed: float, records: int, bp: str) -> None:
        if not self.enabled:
            return
        frac = None
        if self.total_s:
            frac = min(1.0, elapsed / self.total_s)
        if self.total_records:
            frac = max(frac or 0.0, min(1.0, records / self.total_records))
        width = 24
        bar = ("#" * int((frac or 0) * width)).ljust(width) if frac is not None else "?" * width
        sys.stderr.write(f"\r{self.label} [{bar}] {elapsed:5.1f}s {records:>11,} rec  bp: {bp:<40.40}")
        sys.stderr.flush()

    def done(self) -> None:
        if self.enabled:
            sys.stderr.write("\n")
            sys.stderr.flush()


def _vertex_view(task_metrics: list[dict]) -> dict:
    from raylink.runtime.metrics import aggregate_by_vertex

    vertices = aggregate_by_vertex(task_metrics)
    for m in task_metrics:  # watermarks: the minimum over subtasks, as Flink shows them
        name = m.get("vertex_name") or m.get("task", "?")
        for key in ("currentInputWatermark", "currentOutputWatermark"):
            if key in m and name in vertices:
                prev = vertices[name].get(key)
                vertices[name][key] = m[key] if prev is None else min(prev, m[key])
    return vertices


def _verdict(verdicts: Counter, rate: Optional[float], achieved: float) -> Optional[str]:
    """The vertex ``runtime.metrics.bottleneck`` named most often. A held target rate has no
    bottleneck: the source's pacing waits count as busy time (its run() owns the task, as in
    Flink's legacy sources), so the busiest-vertex rule would just name the source."""
    if rate is not None and achieved >= RATE_TOLERANCE * rate:
        return None
    return verdicts.most_common(1)[0][0] if verdicts else None


def _latency_sink(max_samples: int, delay_s: float, buckets_per_s: float, window_s: int) -> LatencySink:
    return LatencySink(max_samples, delay_s, buckets_per_s=buckets_per_s, window_s=window_s)


def build_job(
    scenario: Scenario,
    rate: Optional[float],
    parallelism: int,
    duration_s: Optional[float],
    records: Optional[int],
    buffer_timeout: Optional[int] = None,
    latency_samples: int = 20000,
    conf: Optional[dict] = None,
    buckets_per_s: float = BUCKETS_PER_S,
    latency_window_s: int = 60,
    kafka: Any = None,
    rate_steps: Optional[list] = None,
) -> Any:
    """The scenario's job (load source, its operators, latency sink) in a new environment
    (``conf``: configuration keys over ``RAYLINK_CONF``); ``kafka``: a
    :class:`~raylink.loadtest.kafka_driver.KafkaDriver` whose topic is the source."""
    from raylink.api import Configuration, StreamExecutionEnvironment

    configuration = Configuration()
    for key, value in (conf or {}).items():
        configuration.set_string(key, str(value))
    env = StreamExecutionEnvironment.get_execution_environment(configuration)
    env.set_parallelism(parallelism)
    if buffer_timeout is not None:
        env.set_buffer_timeout(buffer_timeout)
    if kafka is not None:
        source = kafka.source(env)
    elif rate_steps is not None:  # a rate that changes while the job runs: Flink's DataGeneratorSource
        from raylink.api import WatermarkStrategy
        from raylink.api.connectors import DataGeneratorSource, RateLimiterStrategy

        strategy = RateLimiterStrategy.steps_of(rate_steps)
        count = int(strategy.due(duration_s)) if duration_s is not None else records
        if records is not None:
            count = min(count, records)
        source = env.from_source(
            DataGeneratorSource(StampedPayload(scenario.payload), count, strategy),
            WatermarkStrategy.no_watermarks(),
            SOURCE_NAME,
        )
    elif scenario.make_paced_source is not None:
        source = scenario.make_paced_source(env, rate, duration_s, records, buckets_per_s)
    elif scenario.make_source is not None:
        if rate is not None:
            raise SystemExit(f"scenario {scenario.name!r} runs flat out only: use --rate max")
        source = scenario.make_source(env, records)
    else:
        source = env.add_source(
            RateLimitedSource(rate, duration_s, records, scenario.payload, buckets_per_s=buckets_per_s), SOURCE_NAME
        )
    out = scenario.build(env, source)
    if out is not None:
        make_sink = scenario.make_sink or _latency_sink
        out.add_sink(make_sink(latency_samples, scenario.sink_delay_s, buckets_per_s, latency_window_s)).name(SINK_NAME)
    return env


def throughput_series(accumulators: dict, buckets_per_s: float = BUCKETS_PER_S) -> dict:
    """``{"source": [(s since the source's first record, records/s)], "sink": [...]}``."""
    origin = min((b for b, _n in accumulators.get(ACC_SOURCE_BUCKETS, [])), default=None)

    def series_of(key: str) -> list:
        pairs: Counter = Counter()
        for b, n in accumulators.get(key, []):
            pairs[b] += n
        if not pairs:
            return []
        first = origin if origin is not None else min(pairs)
        return [((b - first) / buckets_per_s, n * buckets_per_s) for b, n in sorted(pairs.items())]

    return {"source": series_of(ACC_SOURCE_BUCKETS), "sink": series_of(ACC_SINK_BUCKETS)}


def achieved_rate(result: Any) -> "tuple[int, float, float, Optional[int]]":
    """(records emitted, source seconds, records/s, records at the sink) of a finished run."""
    acc = result.accumulators
    src = acc.get(ACC_SOURCE, [])
    emitted = sum(e for _i, e, _s in src)
    src_elapsed = max((s for _i, _e, s in src), default=0.0)
    sink_count = acc.get(ACC_SINK_COUNT)
    if not src and sink_count:  # a source of the scenario's own: records at the sink over the job's run time
        emitted, src_elapsed = sink_count, result.net_runtime_ms / 1000.0
    achieved = emitted / src_elapsed if src_elapsed > 0 else 0.0
    return emitted, src_elapsed, achieved, sink_count


def run_one(
    scenario: Scenario,
    rate: Optional[float],
    parallelism: int,
    duration_s: Optional[float],
    records: Optional[int],
    sample_interval: float = 0.5,
    progress: bool = False,
    buffer_timeout: Optional[int] = None,
    latency_samples: int = 20000,
    job_timeout: Optional[float] = None,
    conf: Optional[dict] = None,
    kafka: Any = None,
    rate_steps: Optional[list] = None,
) -> dict:
    """Run ``scenario`` once; a dict with the achieved rate, latency, back pressure and memory
    (``kafka``: a :class:`~raylink.loadtest.kafka_driver.KafkaLoad`, the records go through a
    topic; the dict gains a ``kafka`` section with the lag over time; ``rate_steps``: ``[(s,
    records/s)]``, the source's rate changes at those times, the dict gains the parallelism, the
    source's ``pendingRecords`` and the sink's p99 latency per sample and the autoscaler's decisions)."""
    driver = None
    if kafka is not None:
        from raylink.loadtest.kafka_driver import KafkaDriver

        driver = KafkaDriver(kafka, scenario.payload, rate, duration_s, records)
    try:
        if driver is not None:
            driver.open()
        return _run_one(
            scenario,
            rate,
            parallelism,
            duration_s,
            records,
            sample_interval,
            progress,
            buffer_timeout,
            latency_samples,
            job_timeout,
            conf,
            driver,
            rate_steps,
        )
    finally:
        if driver is not None:
            driver.close()


def _run_one(
    scenario: Scenario,
    rate: Optional[float],
    parallelism: int,
    duration_s: Optional[float],
    records: Optional[int],
    sample_interval: float,
    progress: bool,
    buffer_timeout: Optional[int],
    latency_samples: int,
    job_timeout: Optional[float],
    conf: Optional[dict],
    driver: Any,
    rate_steps: Optional[list] = None,
) -> dict:
    from raylink.runtime.metrics import bottleneck

    env = build_job(
        scenario,
        rate,
        parallelism,
        duration_s,
        records,
        buffer_timeout,
        latency_samples,
        conf,
        kafka=driver,
        rate_steps=rate_steps,
    )
    if rate_steps is not None:
        label = f"{scenario.name} P={parallelism} rate steps " + ", ".join(f"{t:g}s:{r:,.0f}" for t, r in rate_steps)
    else:
        label = f"{scenario.name} P={parallelism} rate={'max' if rate is None else f'{rate:,.0f}'}"
    if driver is not None:
        label += f" via Kafka {driver.topic}"
    bar = Progress(progress, label, duration_s, records)
    t0 = time.perf_counter()
    client = env.execute_async(f"loadtest {label}")
    started = time.perf_counter()
    stopping = None  # the stop-with-savepoint that ends a Kafka run (its source is unbounded)
    samples: list[dict] = []
    max_status: dict[str, str] = {}
    max_bp: dict[str, float] = {}
    max_busy: dict[str, float] = {}
    verdicts: Counter = Counter()
    rss: dict[str, list] = {}
    peak: dict[str, int] = {}
    deadline = None if job_timeout is None else started + job_timeout
    while not client.wait(sample_interval):
        if (deadline is not None and time.perf_counter() > deadline) or (driver is not None and driver.failed):
            client.cancel()
            client.wait(30)
            break
        try:
            metrics = client.get_metrics()
        except Exception:  # noqa: BLE001 - a job ending under us
            continue
        if client.wait(0):
            break  # these may be partial (tasks already gone)
        t = time.perf_counter() - started
        if driver is not None:
            if not driver.started and any(SOURCE_NAME in str(m.get("vertex_name", "")) for m in metrics):
                driver.start()  # the source runs: produce now
            driver.sample(t, metrics)
            if stopping is None and driver.drained():  # every record went through: end the job
                stopping = client.stop_with_savepoint(True, driver.savepoint_dir)
            stall = driver.stalled(time.perf_counter()) if stopping is None else None
            if stall:
                client.cancel()
                client.wait(30)
                raise RuntimeError(stall)
        vertices = _vertex_view(metrics)
        for name, agg in vertices.items():
            status = agg["backPressureStatus"]
            if STATUS_ORDER[status] > STATUS_ORDER.get(max_status.get(name, "OK"), 0) or name not in max_status:
                max_status[name] = status
            max_bp[name] = max(max_bp.get(name, 0.0), agg["backPressuredTimeMsPerSecond"])
            max_busy[name] = max(max_busy.get(name, 0.0), agg["busyTimeMsPerSecond"])
        if t > 1.0:  # past the first second the per-second rates are steady
            verdict = bottleneck(metrics)
            if verdict:
                verdicts[verdict] += 1
        for m in metrics:
            ex = m.get("executor")
            if ex and "rssBytes" in m:
                series = rss.setdefault(ex, [])
                if not series or series[-1][0] != round(t, 3):
                    series.append((round(t, 3), m["rssBytes"]))
                peak[ex] = max(peak.get(ex, 0), m.get("peakRssBytes", 0))
        src_out = sum(a["numRecordsOut"] for n, a in vertices.items() if SOURCE_NAME in n)
        operators = [op for m in metrics for op in (m.get("operators") or {}).values()]
        p99s = [op["latencyP99Ms"] for op in operators if op.get("latencyP99Ms") is not None]
        samples.append(
            {
                "t": round(t, 3),
                "parallelism": {n: a["subtasks"] for n, a in vertices.items()},
                "pendingRecords": sum(op.get("pendingRecords", 0) or 0 for op in operators),
                "latencyP99Ms": max(p99s) if p99s else None,
                "vertices": {
                    n: {
                        k: a.get(k)
                        for k in (
                            "numRecordsIn",
                            "numRecordsOut",
                            "busyTimeMsPerSecond",
                            "backPressuredTimeMsPerSecond",
                            "backPressureStatus",
                            "outPoolUsage",
                            "inPoolUsage",
                        )
                    }
                    for n, a in vertices.items()
                },
            }
        )
        bar.update(t, src_out, " ".join(f"{n.split(' -> ')[0]}={a['backPressureStatus']}" for n, a in vertices.items()))
    bar.done()
    autoscaler = client.get_autoscaler_status() if callable(getattr(client, "get_autoscaler_status", None)) else {}
    if stopping is not None:
        stopping.result(timeout=120)  # the savepoint's folder, or the failure that ended the job
    kafka_report = driver.finish(time.perf_counter() - started) if driver is not None else None
    result = client.get_job_execution_result(timeout=60)
    wall = time.perf_counter() - t0
    acc = result.accumulators
    emitted, src_elapsed, achieved, sink_count = achieved_rate(result)
    if driver is not None:  # the source is the producer outside the job
        emitted, src_elapsed = kafka_report["recordsProduced"], kafka_report["produceElapsedS"]
        achieved = kafka_report["produceRate"]
        acc = dict(acc)
        acc[ACC_SOURCE_BUCKETS] = driver.source_buckets()
    latency = percentiles(acc.get(ACC_LATENCY, []))
    final_vertices = _vertex_view(result.task_metrics)
    for name, agg in final_vertices.items():  # runs shorter than a sample: lifetime ratios
        max_status.setdefault(name, agg["backPressureStatus"])
        max_bp.setdefault(name, agg["backPressuredTimeMsPerSecond"])
        max_busy.setdefault(name, agg["busyTimeMsPerSecond"])
    if not verdicts:
        final = bottleneck(result.task_metrics)
        if final:
            verdicts[final] += 1
    for st in getattr(result, "executor_stats", []) or []:
        ex = st.get("executor")
        if ex:
            peak[ex] = max(peak.get(ex, 0), st.get("peakRssBytes", 0))
    memory = {}
    for ex in sorted(set(peak) | set(rss)):
        series = rss.get(ex, [])
        vals = [v for _t, v in series]
        half = vals[len(vals) // 2 :] if vals else []
        memory[ex] = {
            "peakRssBytes": peak.get(ex, 0),
            "rssStartBytes": vals[0] if vals else None,
            "rssEndBytes": vals[-1] if vals else None,
            # growth over the second half of the run: ~0 when memory is flat
            "rssGrowthSecondHalfBytes": (half[-1] - half[0]) if len(half) > 1 else None,
            "rssSeries": series,
        }

    names = list(final_vertices)
    extra: dict = {}
    if kafka_report is not None:
        extra["kafka"] = kafka_report
    if scenario.run_info:
        extra["scenarioSettings"] = dict(scenario.run_info)
    if rate_steps is not None:
        extra["rateSteps"] = [list(step) for step in rate_steps]
    if autoscaler.get("enabled"):
        extra["autoscaler"] = {k: autoscaler[k] for k in ("events", "parallelism", "scalings", "errors")}
    return {
        "scenario": scenario.name,
        "parallelism": parallelism,
        "targetRate": rate,
        "durationS": duration_s,
        "recordsLimit": records,
        "recordsEmitted": emitted,
        "recordsAtSink": sink_count,
        "sourceElapsedS": round(src_elapsed, 3),
        "achievedRate": round(achieved, 1),
        "rateHeld": None if rate is None else achieved >= RATE_TOLERANCE * rate,
        "latencyMs": latency,
        "wallClockS": round(wall, 3),
        "netRuntimeMs": result.net_runtime_ms,
        "vertices": {
            n: {
                "maxBackPressureStatus": max_status.get(n, "OK"),
                "maxBackPressuredMsPerSecond": round(max_bp.get(n, 0.0), 1),
                "maxBusyMsPerSecond": round(max_busy.get(n, 0.0), 1),
                "numRecordsIn": final_vertices[n]["numRecordsIn"],
                "numRecordsOut": final_vertices[n]["numRecordsOut"],
                "subtasks": final_vertices[n]["subtasks"],
            }
            for n in names
        },
        "bottleneck": _verdict(verdicts, rate, achieved),
        "bottleneckVotes": dict(verdicts),
        "memory": memory,
        "throughputSeries": throughput_series(acc),
        "metricSamples": samples,
        **extra,
    }


def run_loadtest(
    scenario_name: Any,
    rates: list,
    parallelisms: list,
    duration_s: Optional[float],
    records: Optional[int],
    output: str,
    progress: bool = False,
    sample_interval: float = 0.5,
    buffer_timeout: Optional[int] = None,
    plots: bool = True,
    out: Any = None,
    conf: Optional[dict] = None,
    kafka: Any = None,
    rate_steps: Optional[list] = None,
) -> dict:
    """Run ``scenario_name`` (a name, job file or :class:`Scenario`) at every rate x parallelism
    (``kafka``: a :class:`~raylink.loadtest.kafka_driver.KafkaLoad`, through a topic) and write
    ``report.json``, ``report.md`` and the plots into ``output``."""
    scenario = scenario_name if isinstance(scenario_name, Scenario) else resolve_scenario(scenario_name)
    if not scenario.available:
        raise SystemExit(f"scenario {scenario.name!r} is unavailable: {scenario.unavailable_reason}")
    if plots:
        require_plots()  # before the runs, not after them
    os.makedirs(output, exist_ok=True)
    out = out or sys.stdout
    runs = []
    for p in parallelisms:
        for rate in rates:
            r = run_one(
                scenario,
                rate,
                p,
                duration_s,
                records,
                sample_interval,
                progress,
                buffer_timeout,
                conf=conf,
                kafka=kafka,
                rate_steps=rate_steps,
            )
            runs.append(r)
            print(summarize([r])[0], file=out, flush=True)
    report = {
        "scenario": scenario.name,
        "description": scenario.description,
        "createdAt": time.strftime("%Y-%m-%d %H:%M:%S"),
        "host": {"cpus": os.cpu_count(), "python": sys.version.split()[0]},
        "settings": {
            "rates": rates,
            "parallelisms": parallelisms,
            "durationS": duration_s,
            "records": records,
            "bufferTimeoutMs": buffer_timeout,
            "kafka": None if kafka is None else dict(vars(kafka)),
            "rateSteps": rate_steps,
        },
        "runs": runs,
        "summary": summarize(runs),
        "plots": [],
    }
    if plots:
        report["plots"] = write_plots(report, output)
    with open(os.path.join(output, "report.json"), "w") as f:
        json.dump(report, f, indent=1, default=str)
    write_markdown(report, os.path.join(output, "report.md"))
    if len(runs) > 1:
        print(f"saturation / summary: {report['summary'][-1]}", file=out)
    print(f"report: {os.path.join(output, 'report.md')} (+ report.json, {', '.join(report['plots'])})", file=out)
    return report


__all__ = [
    "RATE_TOLERANCE",
    "Progress",
    "achieved_rate",
    "build_job",
    "percentiles",
    "run_loadtest",
    "run_one",
    "throughput_series",
]
