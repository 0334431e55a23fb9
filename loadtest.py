"""``raylink loadtest``: run a scenario at a target rate (or flat out) and report what it achieved.

A run is one job: a rate-limited :class:`RateLimitedSource` (each subtask paces
itself by wall clock: it emits a small burst, hands it to the chain, then waits
on an ``Event`` until the next burst is due — no busy loop), the scenario's
operators, and a :class:`LatencySink` that measures ``now - emit time`` of the
records (a spread sample of each batch) into a bounded reservoir. Both report through accumulators: the source
its record count and its own elapsed time (the achieved rate), both ends their
per-quarter-second counts (throughput over time). While the job runs, the
driver samples ``JobClient.get_metrics()`` for back pressure, busy time and the
resident memory of every TaskExecutor.

Records on the wire are tuples ``(emit_time_ns, payload)``; every built-in
scenario keeps the emit time in field 0 down to the sink.

User job files (``raylink loadtest path/to/job.py``) define::

    def build(env, source):      # source: DataStream of (emit_time_ns, payload)
        return source.map(...)   # a DataStream whose records keep the stamp in field 0
                                 # (or None: the file adds its own sinks, no latency measured)
    def payload(i): ...          # optional: payload of record i (default: i)

Outputs (``--output DIR``): ``report.json``, ``report.md`` and PNG plots.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any, Callable, Optional

from raylink.api.functions import SinkFunction, SourceFunction

SOURCE_NAME = "LoadSource"
SINK_NAME = "LatencySink"
ACC_SOURCE = "loadtest.source"          # [(subtask, emitted, elapsed_s)]
ACC_SOURCE_BUCKETS = "loadtest.source_buckets"  # [(quarter-second since epoch, records)]
ACC_SINK_BUCKETS = "loadtest.sink_buckets"
ACC_LATENCY = "loadtest.latency_ms"     # reservoir samples, per sink subtask
ACC_SINK_COUNT = "loadtest.sink_count"
BUCKETS_PER_S = 4
RATE_TOLERANCE = 0.95  # a run "held" its rate when it achieved >= 95 % of it


# ---------------------------------------------------------------------------------------------------
# source and sink
# ---------------------------------------------------------------------------------------------------
def _default_payload(i: int) -> int:
    return i


class RateLimitedSource(SourceFunction):
    """Emits ``(time.time_ns(), payload(i))`` at ``rate`` records/s in total (None = flat out),
    for ``duration_s`` seconds and/or ``records`` records in total, split over the subtasks."""

    def __init__(self, rate: Optional[float], duration_s: Optional[float] = None,
                 records: Optional[int] = None, payload: Optional[Callable[[int], Any]] = None,
                 burst_s: float = 0.005, max_burst: int = 1000) -> None:
        if duration_s is None and records is None:
            raise ValueError("a load-test source needs a duration or a record count")
        if rate is not None and rate <= 0:
            raise ValueError(f"rate must be > 0 records/s or None (flat out), got {rate}")
        self.rate = rate
        self.duration_s = duration_s
        self.records = records
        self.payload = payload or _default_payload
        self.burst_s = burst_s
        self.max_burst = max_burst
        self._stop: Optional[threading.Event] = None  # made in open(): the function is pickled
        self.emitted = 0
        self.elapsed_s = 0.0

    def open(self, runtime_context: Any) -> None:
        self.index = runtime_context.get_index_of_this_subtask()
        self.parallelism = runtime_context.get_number_of_parallel_subtasks()
        acc = getattr(runtime_context, "accumulators", None)
        self._acc = acc if acc is not None else {}
        if self._stop is None:
            self._stop = threading.Event()

    def _share(self) -> "tuple[Optional[float], Optional[int]]":
        idx, par = getattr(self, "index", 0), getattr(self, "parallelism", 1)
        rate = self.rate / par if self.rate else None
        records = None
        if self.records is not None:
            records = self.records // par + (1 if idx < self.records % par else 0)
        return rate, records

    def run(self, ctx: Any) -> None:
        if self._stop is None:
            self._stop = threading.Event()
        rate, limit = self._share()
        par = getattr(self, "parallelism", 1)
        i = getattr(self, "index", 0)
        payload = self.payload
        collect = ctx.collect
        collect_batch = getattr(ctx, "collect_batch", None)
        flush = getattr(ctx, "flush", None)
        now_ns = time.time_ns
        clock = time.perf_counter
        stop = self._stop
        burst_s, max_burst = self.burst_s, self.max_burst
        buckets: Counter = Counter()
        emitted = 0
        start = clock()
        end = start + self.duration_s if self.duration_s is not None else math.inf
        while not stop.is_set():
            now = clock()
            if now >= end or (limit is not None and emitted >= limit):
                break
            if rate is not None:
                due = int((now - start) * rate) + 1 - emitted
                if due <= 0:  # ahead of schedule: sleep until the next burst is due
                    stop.wait(max(burst_s, (emitted + 1) / rate - (now - start)))
                    continue
                n = min(due, max_burst)
            else:
                n = max_burst
            if limit is not None:
                n = min(n, limit - emitted)
            if collect_batch is not None:  # raylink: the burst in one call
                collect_batch([(now_ns(), payload(j)) for j in range(i, i + n * par, par)])
                i += n * par
            else:
                for _ in range(n):
                    collect((now_ns(), payload(i)))
                    i += par
            emitted += n
            buckets[int(time.time() * BUCKETS_PER_S)] += n
            if rate is not None and flush is not None:
                flush()  # hand the burst over now rather than when the batch is full
        self.elapsed_s = clock() - start
        self.emitted = emitted
        self._acc.setdefault(ACC_SOURCE, []).append((getattr(self, "index", 0), emitted, self.elapsed_s))
        self._acc.setdefault(ACC_SOURCE_BUCKETS, []).extend(sorted(buckets.items()))

    def cancel(self) -> None:
        if self._stop is not None:
            self._stop.set()


BATCH_SAMPLES = 16  # latency samples taken from each batch that reaches the sink


class LatencySink(SinkFunction):
    """Measures ``now - record[0]`` (ns stamps) into a reservoir of ``max_samples`` per subtask
    (of a batch, ~BATCH_SAMPLES records spread over it are measured).
    ``delay_s`` > 0 makes it a slow sink (sleeps that long per record, in 2 ms naps)."""

    def __init__(self, max_samples: int = 20000, delay_s: float = 0.0,
                 stamp_of: Optional[Callable[[Any], int]] = None) -> None:
        self.max_samples = max_samples
        self.delay_s = delay_s
        self.stamp_of = stamp_of

    def open(self, runtime_context: Any) -> None:
        acc = getattr(runtime_context, "accumulators", None)
        self._acc = acc if acc is not None else {}
        self.samples: list = []
        self._acc[ACC_LATENCY] = self.samples
        self.count = 0
        self._seen = 0  # records offered to the reservoir
        self._owed = 0.0
        self._buckets: Counter = Counter()
        self._rng = random.Random(runtime_context.get_index_of_this_subtask())

    def invoke_batch(self, values: list, context: Any = None) -> None:
        """A batch arrives at one instant: count it once, sample ~``BATCH_SAMPLES`` stamps."""
        n = len(values)
        if not n:
            return
        now = time.time_ns()
        self.count += n
        self._buckets[now * BUCKETS_PER_S // 1_000_000_000] += n
        stamp_of = self.stamp_of
        for value in values[::max(1, n // BATCH_SAMPLES)]:
            self._sample((now - (value[0] if stamp_of is None else stamp_of(value))) / 1e6)
        if self.delay_s:
            self._owed += self.delay_s * n
            if self._owed >= 0.002:
                time.sleep(self._owed)
                self._owed = 0.0

    def _sample(self, latency: float) -> None:
        self._seen += 1
        samples = self.samples
        if len(samples) < self.max_samples:
            samples.append(latency)
        else:
            j = self._rng.randrange(self._seen)
            if j < self.max_samples:
                samples[j] = latency

    def invoke(self, value: Any, context: Any = None) -> None:
        now = time.time_ns()
        stamp = value[0] if self.stamp_of is None else self.stamp_of(value)
        self.count += 1
        self._buckets[now * BUCKETS_PER_S // 1_000_000_000] += 1
        self._sample((now - stamp) / 1e6)
        if self.delay_s:
            self._owed += self.delay_s
            if self._owed >= 0.002:
                time.sleep(self._owed)
                self._owed = 0.0

    def close(self) -> None:
        self._acc[ACC_SINK_COUNT] = self.count
        self._acc.setdefault(ACC_SINK_BUCKETS, []).extend(sorted(self._buckets.items()))


# ---------------------------------------------------------------------------------------------------
# scenarios
# ---------------------------------------------------------------------------------------------------
WORDS = [f"word{i}" for i in range(1000)]
WORDS_PER_LINE = 4


def wordcount_line(i: int) -> str:
    n = len(WORDS)
    return " ".join(WORDS[(i * 7 + k * 13) % n] for k in range(WORDS_PER_LINE))


def _split_stamped(record: tuple) -> list:
    stamp = record[0]
    return [(stamp, w, 1) for w in record[1].split()]


def _word(record: tuple) -> str:
    return record[1]


def _add_keep_latest_stamp(a: tuple, b: tuple) -> tuple:
    return (b[0], b[1], a[2] + b[2])


def _double(record: tuple) -> tuple:
    return (record[0], record[1] * 2)


def _not_div3(record: tuple) -> bool:
    return record[1] % 3 != 0


WIDE_BYTES = 1024
_WIDE = bytes(range(256)) * (WIDE_BYTES // 256)


def wide_payload(_i: int) -> bytes:
    return _WIDE


def _touch(record: tuple) -> tuple:
    return (record[0], record[1][:WIDE_BYTES])


def _identity(record: Any) -> Any:
    return record


@dataclass
class Scenario:
    name: str
    description: str
    build: Callable[[Any, Any], Any]          # (env, source stream) -> stream to measure (or None)
    payload: Callable[[int], Any] = _default_payload
    sink_delay_s: float = 0.0
    available: bool = True
    unavailable_reason: str = ""
    # replaces the rate-limited source: (env, records) -> DataStream of (emit_time_ns, payload)
    make_source: Optional[Callable[[Any, Optional[int]], Any]] = None


def _build_chain(env: Any, source: Any) -> Any:
    return source.map(_double).name("Map").filter(_not_div3).name("Filter")


def _build_wordcount(env: Any, source: Any) -> Any:
    return (source.flat_map(_split_stamped).name("Split")
            .key_by(_word).reduce(_add_keep_latest_stamp).name("Count").slot_sharing_group("keyed"))


def _build_wide(env: Any, source: Any) -> Any:
    return source.rebalance().map(_touch).name("Touch").slot_sharing_group("downstream")


def _build_slowsink(env: Any, source: Any) -> Any:
    return source.map(_identity).name("Map").rebalance().map(_identity).name("Forward").slot_sharing_group("sink")


def _stamp_row(row: Any) -> tuple:
    return (time.time_ns(), row[0])


def _spark_source(env: Any, records: Optional[int]) -> Any:
    """``spark.range(records)`` read through ``env.from_spark`` (RayDP), stamped on ingestion."""
    from raylink.connectors.spark import get_spark

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = get_spark()
    df = spark.range(int(records or 100_000))
    return env.from_spark(df).map(_stamp_row).name("Stamp")


def _spark_available() -> "tuple[bool, str]":
    from raylink.api.stream_execution_environment import StreamExecutionEnvironment

    if not hasattr(StreamExecutionEnvironment, "from_spark"):
        return False, "raylink.connectors offers no env.from_spark yet"
    try:
        import raydp  # noqa: F401
        import pyspark  # noqa: F401
    except Exception as exc:  # noqa: BLE001
        return False, f"Spark on Ray is not importable ({type(exc).__name__}: {exc})"
    return True, ""


SCENARIOS: dict[str, Scenario] = {
    "chain": Scenario("chain", "source -> map -> filter -> sink, all chained in one task", _build_chain),
    "wordcount": Scenario("wordcount", f"lines of {WORDS_PER_LINE} words -> flat_map -> key_by word -> "
                          "rolling count -> sink (keyed exchange between two TaskExecutors)",
                          _build_wordcount, payload=wordcount_line),
    "wide": Scenario("wide", f"records with a {WIDE_BYTES} B payload, rebalanced to another TaskExecutor",
                     _build_wide, payload=wide_payload),
    "slowsink": Scenario("slowsink", "source -> map, rebalanced to a sink that sleeps 100 us per record "
                         "(~10k records/s per subtask): back pressure", _build_slowsink, sink_delay_s=100e-6),
}


def spark_scenario() -> Scenario:
    ok, why = _spark_available()
    return Scenario("spark", "spark.range(--records) via env.from_spark (RayDP), stamped on ingestion, -> map "
                    "-> filter -> sink; flat out only (a bounded DataFrame has no rate); starts Spark on Ray",
                    _build_chain, available=ok, unavailable_reason=why, make_source=_spark_source)


def load_job_file(path: str) -> Scenario:
    import runpy

    namespace = runpy.run_path(path, run_name="raylink_loadtest_job")
    build = namespace.get("build")
    if not callable(build):
        raise SystemExit(f"{path}: a load-test job file must define build(env, source) "
                         "(source: DataStream of (emit_time_ns, payload); return the stream to measure)")
    return Scenario(os.path.basename(path), f"user job {path}", build,
                    payload=namespace.get("payload") or _default_payload)


def resolve_scenario(name: str) -> Scenario:
    if name in SCENARIOS:
        return SCENARIOS[name]
    if name == "spark":
        return spark_scenario()
    if os.path.isfile(name):
        return load_job_file(name)
    raise SystemExit(f"unknown scenario {name!r}: one of {', '.join(list(SCENARIOS) + ['spark'])} "
                     "or the path of a job file defining build(env, source)")


# ---------------------------------------------------------------------------------------------------
# one run
# ---------------------------------------------------------------------------------------------------
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


def run_one(scenario: Scenario, rate: Optional[float], parallelism: int, duration_s: Optional[float],
            records: Optional[int], sample_interval: float = 0.5, progress: bool = False,
            buffer_timeout: Optional[int] = None, latency_samples: int = 20000,
            job_timeout: Optional[float] = None) -> dict:
    """Run ``scenario`` once; a dict with the achieved rate, latency, back pressure and memory."""
    from raylink.runtime.metrics import bottleneck
    from raylink.api import Configuration, StreamExecutionEnvironment

    env = StreamExecutionEnvironment.get_execution_environment(Configuration())
    env.set_parallelism(parallelism)
    if buffer_timeout is not None:
        env.set_buffer_timeout(buffer_timeout)
    if scenario.make_source is not None:
        if rate is not None:
            raise SystemExit(f"scenario {scenario.name!r} runs flat out only: use --rate max")
        source = scenario.make_source(env, records)
    else:
        source = env.add_source(RateLimitedSource(rate, duration_s, records, scenario.payload), SOURCE_NAME)
    out = scenario.build(env, source)
    if out is not None:
        out.add_sink(LatencySink(latency_samples, scenario.sink_delay_s)).name(SINK_NAME)
    label = f"{scenario.name} P={parallelism} rate={'max' if rate is None else f'{rate:,.0f}'}"
    bar = Progress(progress, label, duration_s, records)
    t0 = time.perf_counter()
    client = env.execute_async(f"loadtest {label}")
    started = time.perf_counter()
    samples: list[dict] = []
    max_status: dict[str, str] = {}
    max_bp: dict[str, float] = {}
    max_busy: dict[str, float] = {}
    verdicts: Counter = Counter()
    rss: dict[str, list] = {}
    peak: dict[str, int] = {}
    deadline = None if job_timeout is None else started + job_timeout
    while not client.wait(sample_interval):
        if deadline is not None and time.perf_counter() > deadline:
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
        samples.append({"t": round(t, 3), "vertices": {
            n: {k: a.get(k) for k in ("numRecordsIn", "numRecordsOut", "busyTimeMsPerSecond",
                                     "backPressuredTimeMsPerSecond", "backPressureStatus", "outPoolUsage",
                                     "inPoolUsage")} for n, a in vertices.items()}})
        bar.update(t, src_out, " ".join(f"{n.split(' -> ')[0]}={a['backPressureStatus']}"
                                        for n, a in vertices.items()))
    bar.done()
    result = client.get_job_execution_result(timeout=60)
    wall = time.perf_counter() - t0
    acc = result.accumulators
    src = acc.get(ACC_SOURCE, [])
    emitted = sum(e for _i, e, _s in src)
    src_elapsed = max((s for _i, _e, s in src), default=0.0)
    achieved = emitted / src_elapsed if src_elapsed > 0 else 0.0
    sink_count = acc.get(ACC_SINK_COUNT)
    if not src and sink_count:  # a source of the scenario's own: records at the sink over the job's run time
        emitted, src_elapsed = sink_count, result.net_runtime_ms / 1000.0
        achieved = emitted / src_elapsed if src_elapsed > 0 else 0.0
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
        half = vals[len(vals) // 2:] if vals else []
        memory[ex] = {
            "peakRssBytes": peak.get(ex, 0),
            "rssStartBytes": vals[0] if vals else None,
            "rssEndBytes": vals[-1] if vals else None,
            # growth over the second half of the run: ~0 when memory is flat
            "rssGrowthSecondHalfBytes": (half[-1] - half[0]) if len(half) > 1 else None,
            "rssSeries": series,
        }

    origin = min((b for b, _n in acc.get(ACC_SOURCE_BUCKETS, [])), default=None)

    def series_of(key: str) -> list:  # (seconds since the source's first record, records/s)
        pairs: Counter = Counter()
        for b, n in acc.get(key, []):
            pairs[b] += n
        if not pairs:
            return []
        first = origin if origin is not None else min(pairs)
        return [((b - first) / BUCKETS_PER_S, n * BUCKETS_PER_S) for b, n in sorted(pairs.items())]

    names = list(final_vertices)
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
        "vertices": {n: {"maxBackPressureStatus": max_status.get(n, "OK"),
                         "maxBackPressuredMsPerSecond": round(max_bp.get(n, 0.0), 1),
                         "maxBusyMsPerSecond": round(max_busy.get(n, 0.0), 1),
                         "numRecordsIn": final_vertices[n]["numRecordsIn"],
                         "numRecordsOut": final_vertices[n]["numRecordsOut"],
                         "subtasks": final_vertices[n]["subtasks"]} for n in names},
        "bottleneck": _verdict(verdicts, rate, achieved),
        "bottleneckVotes": dict(verdicts),
        "memory": memory,
        "throughputSeries": {"source": series_of(ACC_SOURCE_BUCKETS), "sink": series_of(ACC_SINK_BUCKETS)},
        "metricSamples": samples,
    }


# ---------------------------------------------------------------------------------------------------
# reports
# ---------------------------------------------------------------------------------------------------
def _mib(n: Optional[int]) -> str:
    return "-" if n is None else f"{n / 2**20:.0f}"


def _rate(r: Optional[float]) -> str:
    return "max" if r is None else f"{r:,.0f}"


def write_markdown(report: dict, path: str) -> None:
    lines = [f"# raylink loadtest: {report['scenario']}", "", report.get("description", ""), "",
             f"{report['host']['cpus']} CPUs, Python {report['host']['python']}, {report['createdAt']}", "",
             "| P | target rec/s | achieved rec/s | held | records | at sink | p50 ms | p95 ms | p99 ms "
             "| bottleneck | max back pressure | peak RSS / TE (MiB) |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in report["runs"]:
        lat = r["latencyMs"]
        bp = ", ".join(f"{n}: {v['maxBackPressureStatus']}" for n, v in r["vertices"].items())
        held = "-" if r["rateHeld"] is None else ("yes" if r["rateHeld"] else "**no**")
        mem = ", ".join(_mib(m["peakRssBytes"]) for m in r["memory"].values()) or "-"
        f = (lambda k: f"{lat[k]:.1f}" if k in lat else "-")
        at_sink = "-" if r["recordsAtSink"] is None else f"{r['recordsAtSink']:,}"
        lines.append(f"| {r['parallelism']} | {_rate(r['targetRate'])} | {r['achievedRate']:,.0f} | {held} | "
                     f"{r['recordsEmitted']:,} | {at_sink} | "
                     f"{f('p50')} | {f('p95')} | {f('p99')} | {r['bottleneck'] or '-'} | {bp} | {mem} |")
    lines += ["", "## Summary", ""] + [f"- {s}" for s in report["summary"]]
    lines += ["", "## Plots", ""] + [f"![{p}]({p})" for p in report["plots"]]
    lines += ["", "Back pressure: Flink's levels over the sampled per-second ratios (OK <= 10 %, LOW <= 50 %, "
              "HIGH above), the worst seen during the run. Bottleneck: the busiest vertex that is not itself "
              "back pressured (`runtime.metrics.bottleneck`), the most frequent verdict over the samples. "
              "Latency: sink time minus the source's emit stamp (reservoir sample per sink subtask)."]
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def write_plots(report: dict, out_dir: str) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = report["runs"]
    written = []

    def save(fig: Any, name: str) -> None:
        fig.tight_layout()
        fig.savefig(os.path.join(out_dir, name), dpi=110)
        plt.close(fig)
        written.append(name)

    fig, ax = plt.subplots(figsize=(8, 4.5))
    for r in runs:
        label = f"P={r['parallelism']} rate={_rate(r['targetRate'])}"
        for end, style in (("source", "-"), ("sink", "--")):
            series = r["throughputSeries"][end]
            if len(series) > 2:  # drop the partial first and last quarter seconds
                series = series[1:-1]
            if series:
                ax.plot([t for t, _ in series], [v for _, v in series], style, label=f"{label} {end}")
        if r["targetRate"]:
            ax.axhline(r["targetRate"], color="grey", lw=0.8, ls=":")
    ax.set_xlabel("time since first record (s)")
    ax.set_ylabel("records/s")
    ax.set_title(f"{report['scenario']}: throughput over time (dotted: target)")
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7)
    save(fig, "throughput.png")

    fig, ax = plt.subplots(figsize=(8, 4.5))
    for p in sorted({r["parallelism"] for r in runs}):
        rs = sorted((r for r in runs if r["parallelism"] == p and r["latencyMs"]), key=lambda r: r["achievedRate"])
        xs = [r["achievedRate"] for r in rs]
        for q, marker in (("p50", "o"), ("p95", "s"), ("p99", "^")):
            ax.plot(xs, [r["latencyMs"][q] for r in rs], marker=marker, label=f"P={p} {q}")
    ax.set_xlabel("achieved throughput (records/s)")
    ax.set_ylabel("end-to-end latency (ms)")
    ax.set_yscale("log")
    ax.set_title(f"{report['scenario']}: latency percentiles vs. rate")
    ax.grid(alpha=0.3, which="both")
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7)
    save(fig, "latency_vs_rate.png")

    fig, ax = plt.subplots(figsize=(8, 4.5))
    for target in sorted({r["targetRate"] or 0 for r in runs}):
        rs = sorted((r for r in runs if (r["targetRate"] or 0) == target), key=lambda r: r["parallelism"])
        ax.plot([r["parallelism"] for r in rs], [r["achievedRate"] for r in rs], marker="o",
                label=f"target {_rate(target or None)}")
    ax.set_xlabel("parallelism")
    ax.set_ylabel("achieved records/s")
    ax.set_title(f"{report['scenario']}: scaling vs. parallelism")
    ax.set_xticks(sorted({r["parallelism"] for r in runs}))
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    save(fig, "scaling.png")

    fig, ax = plt.subplots(figsize=(8, 4.5))
    for r in runs:
        for ex, m in r["memory"].items():
            series = m["rssSeries"]
            if series:
                ax.plot([t for t, _ in series], [v / 2**20 for _, v in series], marker=".",
                        label=f"P={r['parallelism']} rate={_rate(r['targetRate'])} {ex[-4:]}")
    ax.set_xlabel("time since start (s)")
    ax.set_ylabel("TaskExecutor RSS (MiB)")
    ax.set_title(f"{report['scenario']}: TaskExecutor memory")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=6)
    save(fig, "memory.png")
    return written


def summarize(runs: list[dict]) -> list[str]:
    out = []
    for r in runs:
        head = f"P={r['parallelism']}, rate {_rate(r['targetRate'])}:"
        lat = r["latencyMs"]
        latency = (f"latency p50/p95/p99 {lat['p50']:.1f}/{lat['p95']:.1f}/{lat['p99']:.1f} ms"
                   if lat else "no latency measured")
        if r["targetRate"] is None:
            held = f"saturated at {r['achievedRate']:,.0f} records/s"
        elif r["rateHeld"]:
            held = f"rate held ({r['achievedRate']:,.0f} records/s)"
        else:
            held = (f"rate NOT held: {r['achievedRate']:,.0f} of {r['targetRate']:,.0f} records/s "
                    f"({100 * r['achievedRate'] / r['targetRate']:.0f} %)")
        high = [n for n, v in r["vertices"].items() if v["maxBackPressureStatus"] == "HIGH"]
        bp = f"HIGH back pressure on {', '.join(high)}" if high else "no HIGH back pressure"
        growth = [m["rssGrowthSecondHalfBytes"] for m in r["memory"].values()
                  if m["rssGrowthSecondHalfBytes"] is not None]
        mem = (f"peak RSS/TaskExecutor {max(m['peakRssBytes'] for m in r['memory'].values()) / 2**20:.0f} MiB, "
               f"RSS growth over the 2nd half {max(growth) / 2**20:+.1f} MiB" if growth else "")
        out.append(f"{head} {held}; {latency}; bottleneck: {r['bottleneck'] or ('none (rate held)' if r['rateHeld'] else 'none found')}; {bp}"
                   + (f"; {mem}" if mem else ""))
    maxed = [r for r in runs if r["targetRate"] is None]
    if maxed:
        best = max(maxed, key=lambda r: r["achievedRate"])
        out.append(f"saturation point: {best['achievedRate']:,.0f} records/s at parallelism {best['parallelism']}")
    return out


def run_loadtest(scenario_name: str, rates: list, parallelisms: list, duration_s: Optional[float],
                 records: Optional[int], output: str, progress: bool = False, sample_interval: float = 0.5,
                 buffer_timeout: Optional[int] = None, plots: bool = True, out: Any = None) -> dict:
    scenario = resolve_scenario(scenario_name)
    if not scenario.available:
        raise SystemExit(f"scenario {scenario.name!r} is unavailable: {scenario.unavailable_reason}")
    os.makedirs(output, exist_ok=True)
    out = out or sys.stdout
    runs = []
    for p in parallelisms:
        for rate in rates:
            r = run_one(scenario, rate, p, duration_s, records, sample_interval, progress, buffer_timeout)
            runs.append(r)
            print(summarize([r])[0], file=out, flush=True)
    report = {
        "scenario": scenario.name,
        "description": scenario.description,
        "createdAt": time.strftime("%Y-%m-%d %H:%M:%S"),
        "host": {"cpus": os.cpu_count(), "python": sys.version.split()[0]},
        "settings": {"rates": rates, "parallelisms": parallelisms, "durationS": duration_s,
                     "records": records, "bufferTimeoutMs": buffer_timeout},
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


# ---------------------------------------------------------------------------------------------------
# CLI
# ---------------------------------------------------------------------------------------------------
def _parse_rates(text: str) -> list:
    rates = []
    for part in text.split(","):
        part = part.strip().lower()
        if part in ("max", "inf", "unlimited"):
            rates.append(None)
        else:
            value = float(part.replace("_", ""))
            if value <= 0:
                raise argparse.ArgumentTypeError(f"rate must be > 0 or 'max', got {part}")
            rates.append(value)
    return rates


def _parse_parallelisms(text: str) -> list:
    values = [int(p) for p in text.split(",") if p.strip()]
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"parallelism must be >= 1, got {text}")
    return values


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("scenario", help=f"one of {', '.join(list(SCENARIOS) + ['spark'])}, or a job file "
                        "defining build(env, source)")
    parser.add_argument("--rate", type=_parse_rates, default=[None],
                        help="target records/s in total at the source, or 'max' (flat out); comma-separated "
                        "for a sweep, e.g. 50000,100000,max (default max)")
    parser.add_argument("--duration", type=float, default=None, help="seconds per run (default 10 unless --records)")
    parser.add_argument("--records", type=int, default=None, help="records per run (stop at whichever comes first)")
    parser.add_argument("--parallelism", type=_parse_parallelisms, default=[1],
                        help="parallelism, or several comma-separated (default 1)")
    parser.add_argument("--output", default=None, help="report folder (default loadtest-<scenario>-<time>)")
    parser.add_argument("--progress", action="store_true", help="show the progress bar even when not a TTY")
    parser.add_argument("--sample-interval", type=float, default=0.5, help="metrics sampling period (s)")
    parser.add_argument("--buffer-timeout", type=int, default=None, help="execution.buffer-timeout in ms")
    parser.add_argument("--list", action="store_true", help="list the built-in scenarios and exit")


def command(args: argparse.Namespace) -> int:
    if args.list or args.scenario == "list":
        for s in list(SCENARIOS.values()) + [spark_scenario()]:
            state = "" if s.available else f"  [unavailable: {s.unavailable_reason}]"
            print(f"{s.name:<10} {s.description}{state}")
        return 0
    duration = args.duration
    if duration is None and args.records is None:
        duration = 10.0
    output = args.output or f"loadtest-{os.path.basename(args.scenario).replace('.py', '')}-{time.strftime('%Y%m%d-%H%M%S')}"
    scenario = resolve_scenario(args.scenario)  # fail on a bad name before starting Ray
    if not scenario.available:
        raise SystemExit(f"scenario {scenario.name!r} is unavailable: {scenario.unavailable_reason}")
    from raylink.actors.ray_executor import ensure_ray

    ensure_ray()
    run_loadtest(args.scenario, args.rate, args.parallelism, duration, args.records, output,
                 progress=args.progress or sys.stderr.isatty(), sample_interval=args.sample_interval,
                 buffer_timeout=args.buffer_timeout)
    return 0


def register_cli(subparsers: Any) -> None:
    """Add ``loadtest`` to the ``raylink`` CLI's sub-commands."""
    parser = subparsers.add_parser("loadtest", help="run a load-test scenario and write a report",
                                   description=__doc__.split("\n\n")[0])
    add_arguments(parser)
    parser.set_defaults(func=command)


def main(argv: Optional[list] = None) -> int:
    parser = argparse.ArgumentParser(prog="raylink loadtest")
    add_arguments(parser)
    return command(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
