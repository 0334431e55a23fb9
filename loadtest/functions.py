"""The load-test job's own functions: the rate-limited source, the latency sink and the scenarios' UDFs.

Records on the wire are tuples ``(emit_time_ns, payload)``. :class:`RateLimitedSource`
(Flink's legacy ``SourceFunction`` shape) emits them at a target rate: each subtask
paces itself by wall clock, emits a small burst, hands it to the chain, then waits on
an ``Event`` until the next burst is due (no busy loop). :class:`LatencySink`
measures ``now - emit time`` of a spread sample of each batch into a bounded
reservoir. Both report through accumulators (the ``ACC_*`` keys): the source its
record count and elapsed time (the achieved rate), both ends their counts per
``1 / buckets_per_s`` seconds (throughput over time: a quarter second by default, coarser
in a soak so hours of buckets stay small), the sink its latency samples, a latency
histogram per ``window_s`` (a minute by default; :func:`latency_bucket`: 5 % wide log
buckets, mergeable over subtasks, so a soak reports percentiles per minute) and its
record count.

The map/filter/key functions below are plain module functions, so Ray workers import
them by reference. A source or sink instance belongs to one subtask (one task thread);
``cancel`` may come from another thread (it only sets an ``Event``).
"""

from __future__ import annotations

import math
import random
import threading
import time
from collections import Counter
from typing import Any, Callable, Optional

from raylink.core.functions import SinkFunction, SourceFunction

SOURCE_NAME = "LoadSource"
SINK_NAME = "LatencySink"
ACC_SOURCE = "loadtest.source"  # [(subtask, emitted, elapsed_s)]
ACC_SOURCE_BUCKETS = "loadtest.source_buckets"  # [(quarter-second since epoch, records)]
ACC_SINK_BUCKETS = "loadtest.sink_buckets"
ACC_LATENCY = "loadtest.latency_ms"  # reservoir samples, per sink subtask
ACC_SINK_COUNT = "loadtest.sink_count"
ACC_LATENCY_WINDOWS = "loadtest.latency_windows"  # [(window since epoch, latency bucket, samples)]
BUCKETS_PER_S = 4
LATENCY_BUCKET_MIN_MS = 0.01
LATENCY_BUCKET_GROWTH = 1.05
_LOG_GROWTH = math.log(LATENCY_BUCKET_GROWTH)


def latency_bucket(ms: float) -> int:
    """The histogram bucket of a latency: ``[0.01 ms * 1.05**b, 0.01 ms * 1.05**(b + 1))``."""
    return int(math.log(ms / LATENCY_BUCKET_MIN_MS) / _LOG_GROWTH) if ms > LATENCY_BUCKET_MIN_MS else 0


def bucket_latency(bucket: int) -> float:
    """The middle (geometric) of a latency bucket, in ms."""
    return LATENCY_BUCKET_MIN_MS * LATENCY_BUCKET_GROWTH ** (bucket + 0.5)


def histogram_percentiles(histogram: "dict[int, int]", ps: tuple = (50, 95, 99)) -> dict:
    """Percentiles (ms, within 2.5 %) of a ``{bucket: samples}`` latency histogram."""
    total = sum(histogram.values())
    out: dict = {"count": total}
    if not total:
        return out
    order = sorted(histogram.items())
    for p in ps:
        rank = max(1, math.ceil(total * p / 100.0))
        seen = 0
        for bucket, n in order:
            seen += n
            if seen >= rank:
                out[f"p{p}"] = round(bucket_latency(bucket), 3)
                break
    out["max"] = round(bucket_latency(order[-1][0]), 3)
    return out


# -- source and sink ---------------------------------------------------------------------------------
def default_payload(i: int) -> int:
    return i


class RateLimitedSource(SourceFunction):
    """Emits ``(time.time_ns(), payload(i))`` at ``rate`` records/s in total (None = flat out),
    for ``duration_s`` seconds and/or ``records`` records in total, split over the subtasks."""

    def __init__(
        self,
        rate: Optional[float],
        duration_s: Optional[float] = None,
        records: Optional[int] = None,
        payload: Optional[Callable[[int], Any]] = None,
        burst_s: float = 0.005,
        max_burst: int = 1000,
        buckets_per_s: float = BUCKETS_PER_S,
    ) -> None:
        if duration_s is None and records is None:
            raise ValueError("a load-test source needs a duration or a record count")
        if rate is not None and rate <= 0:
            raise ValueError(f"rate must be > 0 records/s or None (flat out), got {rate}")
        self.rate = rate
        self.duration_s = duration_s
        self.records = records
        self.payload = payload or default_payload
        self.burst_s = burst_s
        self.max_burst = max_burst
        self.buckets_per_s = buckets_per_s
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
        bucket_ns = int(1e9 / getattr(self, "buckets_per_s", BUCKETS_PER_S))
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
            buckets[now_ns() // bucket_ns] += n
            if rate is not None and flush is not None:
                flush()  # hand the burst over now rather than when the batch is full
        self.elapsed_s = clock() - start
        self.emitted = emitted
        self._acc.setdefault(ACC_SOURCE, []).append((getattr(self, "index", 0), emitted, self.elapsed_s))
        self._acc.setdefault(ACC_SOURCE_BUCKETS, []).extend(sorted(buckets.items()))

    def cancel(self) -> None:
        if self._stop is not None:
            self._stop.set()


class StampedPayload:
    """The load test's records from a ``DataGeneratorSource`` (``--rate-steps``): index ``i`` ->
    ``(emit time ns, payload(i))``, Flink's ``GeneratorFunction``."""

    def __init__(self, payload: Optional[Callable[[int], Any]] = None) -> None:
        self.payload = payload or default_payload

    def map(self, index: int) -> tuple:
        return (time.time_ns(), self.payload(index))


BATCH_SAMPLES = 16  # latency samples taken from each batch that reaches the sink


class LatencySink(SinkFunction):
    """Measures ``now - record[0]`` (ns stamps) into a reservoir of ``max_samples`` per subtask
    (of a batch, ~BATCH_SAMPLES records spread over it are measured).
    ``delay_s`` > 0 makes it a slow sink (sleeps that long per record, in 2 ms naps)."""

    def __init__(
        self,
        max_samples: int = 20000,
        delay_s: float = 0.0,
        stamp_of: Optional[Callable[[Any], int]] = None,
        buckets_per_s: float = BUCKETS_PER_S,
        window_s: int = 60,
    ) -> None:
        self.max_samples = max_samples
        self.window_s = window_s
        self.delay_s = delay_s
        self.stamp_of = stamp_of
        self.buckets_per_s = buckets_per_s

    def open(self, runtime_context: Any) -> None:
        acc = getattr(runtime_context, "accumulators", None)
        self._acc = acc if acc is not None else {}
        self.samples: list = []
        self._acc[ACC_LATENCY] = self.samples
        self.count = 0
        self._seen = 0  # records offered to the reservoir
        self._owed = 0.0
        self._buckets: Counter = Counter()
        self._bucket_ns = int(1e9 / self.buckets_per_s)
        self._window_ns = int(self.window_s * 1e9)
        self._windows: Counter = Counter()  # (window, latency bucket) -> samples
        self._rng = random.Random(runtime_context.get_index_of_this_subtask())
        # the p99 of the last whole second, live (a gauge: a rescale ends this instance, its
        # accumulators with it, while the samples of the gauge are the runner's)
        self._second = 0
        self._second_histogram: Counter = Counter()
        self._last_p99: Optional[float] = None
        group = getattr(runtime_context, "get_metrics_group", None)
        if callable(group):
            group().gauge("latencyP99Ms", lambda: self._last_p99)

    def invoke_batch(self, values: list, context: Any = None) -> None:
        """A batch arrives at one instant: count it once, sample ~``BATCH_SAMPLES`` stamps."""
        n = len(values)
        if not n:
            return
        now = time.time_ns()
        self.count += n
        self._buckets[now // self._bucket_ns] += n
        stamp_of = self.stamp_of
        window = now // self._window_ns
        for value in values[:: max(1, n // BATCH_SAMPLES)]:
            self._sample((now - (value[0] if stamp_of is None else stamp_of(value))) / 1e6, window)
        if self.delay_s:
            self._owed += self.delay_s * n
            if self._owed >= 0.002:
                time.sleep(self._owed)
                self._owed = 0.0

    def _sample(self, latency: float, window: int) -> None:
        bucket = latency_bucket(latency)
        self._windows[(window, bucket)] += 1
        second = time.time_ns() // 1_000_000_000
        if second != self._second:
            if self._second_histogram:
                self._last_p99 = histogram_percentiles(self._second_histogram, (99,))["p99"]
            self._second, self._second_histogram = second, Counter()
        self._second_histogram[bucket] += 1
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
        self._buckets[now // self._bucket_ns] += 1
        self._sample((now - stamp) / 1e6, now // self._window_ns)
        if self.delay_s:
            self._owed += self.delay_s
            if self._owed >= 0.002:
                time.sleep(self._owed)
                self._owed = 0.0

    def close(self) -> None:
        self._acc[ACC_SINK_COUNT] = self.count
        self._acc.setdefault(ACC_SINK_BUCKETS, []).extend(sorted(self._buckets.items()))
        self._acc.setdefault(ACC_LATENCY_WINDOWS, []).extend(
            (window, bucket, n) for (window, bucket), n in sorted(self._windows.items())
        )


# -- the scenarios' functions ------------------------------------------------------------------------
WORDS = [f"word{i}" for i in range(1000)]
WORDS_PER_LINE = 4


def wordcount_line(i: int) -> str:
    n = len(WORDS)
    return " ".join(WORDS[(i * 7 + k * 13) % n] for k in range(WORDS_PER_LINE))


def split_stamped(record: tuple) -> list:
    stamp = record[0]
    return [(stamp, w, 1) for w in record[1].split()]


def word_of(record: tuple) -> str:
    return record[1]


def add_keep_latest_stamp(a: tuple, b: tuple) -> tuple:
    return (b[0], b[1], a[2] + b[2])


def double(record: tuple) -> tuple:
    return (record[0], record[1] * 2)


def not_div3(record: tuple) -> bool:
    return record[1] % 3 != 0


WIDE_BYTES = 1024
_WIDE = bytes(range(256)) * (WIDE_BYTES // 256)


def wide_payload(_i: int) -> bytes:
    return _WIDE


def touch(record: tuple) -> tuple:
    return (record[0], record[1][:WIDE_BYTES])


def identity(record: Any) -> Any:
    return record


def stamp_row(row: Any) -> tuple:
    """A Spark row's first column, stamped with the time it enters the job."""
    return (time.time_ns(), row[0])
