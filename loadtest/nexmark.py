"""``raylink loadtest nexmark --query qN``: a Nexmark query (:mod:`raylink.bench.nexmark.queries`)
between a rate-paced Nexmark source and a latency sink, with the harness's usual measurements.

The events are Nexmark's generator's (:func:`raylink.bench.nexmark.generator.event_at`: the same
events, in the same order over the subtasks, as :class:`raylink.bench.nexmark.NexmarkSource`
gives for the same :class:`~raylink.bench.nexmark.NexmarkConfig`). The config's
``events_per_second`` is ``--rate`` and its ``base_time`` is a wall-clock instant (epoch ms)
the harness picks ``start_delay_s`` after building the job, so an event's ``dateTime`` **is**
the wall-clock instant it is due: :class:`NexmarkLoadSource` waits until then and emits it (all
subtasks walk one timeline, subtask ``i`` of ``p`` the events ``i, i + p, ...``, as
``NexmarkSource`` does; Flink nexmark's generator maps event time to wall time the same way
when it paces). A source behind its schedule emits what is due at once.

Latency (:class:`EventTimeLatencySink`) is the sink's wall clock minus the output record's
timestamp: for a per-event query (q0-q2, q14, q21, q22) the event's ``dateTime``, i.e. its
generation instant; for a windowed one the window's last millisecond, so the figure includes
the watermark's 4 s out-of-orderness bound (Nexmark's ``WATERMARK ... - INTERVAL '4' SECOND``)
that holds every window back; for a join, the timestamp the join gives its output. With
``--rate max`` the events are emitted flat out (``dateTime`` spaced at Nexmark's default 10,000
events/s) and no latency is measured. The start delay keeps the job's deployment out of the
figures (events are due only once it has passed); a job slower to start shows it as latency.

The source and sink run in TaskExecutors (one instance per subtask, one task thread); the
scenario is built on the driver. No Flink counterpart (Flink nexmark reports throughput only).
"""

from __future__ import annotations

import math
import threading
import time
from collections import Counter
from typing import TYPE_CHECKING, Any, Optional

from raylink.core.functions import SourceFunction
from raylink.loadtest.functions import ACC_SOURCE, ACC_SOURCE_BUCKETS, BUCKETS_PER_S, SOURCE_NAME, LatencySink

if TYPE_CHECKING:
    from raylink.bench.nexmark.generator import NexmarkConfig

#: events/s of the event times when flat out (Nexmark's default firstEventRate)
UNPACED_EVENTS_PER_SECOND = 10_000
DEFAULT_START_DELAY_S = 3.0


def nexmark_config(
    rate: Optional[float], duration_s: Optional[float], records: Optional[int], base_time_ms: int
) -> "tuple[NexmarkConfig, int]":
    """(config, number of events) of a run: ``records``, else rate x duration (the fewer)."""
    counts = []
    if records is not None:
        counts.append(records)
    if rate is not None and duration_s is not None:
        counts.append(int(rate * duration_s))
    if not counts:
        raise SystemExit("nexmark at --rate max needs --records N (its events are a fixed number)")
    from raylink.bench.nexmark.generator import NexmarkConfig

    events = min(counts)
    eps = UNPACED_EVENTS_PER_SECOND if rate is None else max(1, int(round(rate)))
    config = NexmarkConfig(events=events, events_per_second=eps, base_time=base_time_ms, max_emit_speed=rate is None)
    return config, events


class NexmarkLoadSource(SourceFunction):
    """Emits Nexmark's events ``0..events-1`` (subtask ``i`` of ``p``: ``i, i + p, ...``), each at
    its ``dateTime`` as wall-clock time (flat out with ``max_emit_speed``); reports its count,
    elapsed time and throughput buckets through the load test's accumulators."""

    def __init__(
        self,
        config: "NexmarkConfig",
        max_burst: int = 1000,
        max_wait_s: float = 0.05,
        buckets_per_s: float = BUCKETS_PER_S,
    ) -> None:
        self.config = config
        self.max_burst = max_burst
        self.max_wait_s = max_wait_s
        self.buckets_per_s = buckets_per_s
        self._stop: Optional[threading.Event] = None

    def open(self, runtime_context: Any) -> None:
        self.index = runtime_context.get_index_of_this_subtask()
        self.parallelism = runtime_context.get_number_of_parallel_subtasks()
        acc = getattr(runtime_context, "accumulators", None)
        self._acc = acc if acc is not None else {}
        if self._stop is None:
            self._stop = threading.Event()

    def run(self, ctx: Any) -> None:
        from raylink.bench.nexmark.generator import event_at

        if self._stop is None:
            self._stop = threading.Event()
        stop = self._stop
        config = self.config
        paced = not config.max_emit_speed
        limit = config.max_events
        i, stride = getattr(self, "index", 0), getattr(self, "parallelism", 1)
        collect_batch = getattr(ctx, "collect_batch", None)
        flush = getattr(ctx, "flush", None)
        due_ms = config.timestamp_for_event
        bucket_ns = int(1e9 / self.buckets_per_s)
        buckets: Counter = Counter()
        emitted = 0
        begin = config.base_time / 1000.0 if paced else time.time()
        if paced and begin > time.time():
            stop.wait(begin - time.time())  # the start delay: event 0 is due at base_time
        while not stop.is_set() and i < limit:
            batch = []
            if paced:
                now_ms = time.time() * 1000.0
                while i < limit and len(batch) < self.max_burst and due_ms(config.adjusted_event_number(i)) <= now_ms:
                    batch.append(event_at(config, i))
                    i += stride
                if not batch:
                    wait = due_ms(config.adjusted_event_number(i)) / 1000.0 - time.time()
                    stop.wait(min(self.max_wait_s, max(0.0005, wait)))
                    continue
            else:
                end = min(limit, i + self.max_burst * stride)
                batch = [event_at(config, j) for j in range(i, end, stride)]
                i += len(batch) * stride
            if collect_batch is not None:
                collect_batch(batch)
            else:
                for event in batch:
                    ctx.collect(event)
            emitted += len(batch)
            buckets[time.time_ns() // bucket_ns] += len(batch)
            if paced and flush is not None:
                flush()  # hand the events over now rather than when the batch is full
        elapsed = max(1e-9, time.time() - begin)
        self._acc.setdefault(ACC_SOURCE, []).append((getattr(self, "index", 0), emitted, elapsed))
        self._acc.setdefault(ACC_SOURCE_BUCKETS, []).extend(sorted(buckets.items()))

    def cancel(self) -> None:
        if self._stop is not None:
            self._stop.set()


class EventTimeLatencySink(LatencySink):
    """A :class:`LatencySink` measuring ``now - the record's timestamp`` (epoch ms: event time that
    is wall time, see the module docstring) per record; ``measure`` False only counts."""

    invoke_batch = None  # each record has its own timestamp: the per-record path

    def __init__(self, *args: Any, measure: bool = True, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.measure = measure

    def invoke(self, value: Any, context: Any = None) -> None:
        now = time.time_ns()
        self.count += 1
        self._buckets[now // self._bucket_ns] += 1
        stamp = context.timestamp() if context is not None and self.measure else None
        if stamp is not None and stamp > -(2**62):
            self._sample(max(0.0, (now - stamp * 1_000_000) / 1e6), now // self._window_ns)
        if self.delay_s:
            self._owed += self.delay_s
            if self._owed >= 0.002:
                time.sleep(self._owed)
                self._owed = 0.0


def query_names() -> list:
    from raylink.bench.nexmark.queries import QUERIES

    return list(QUERIES)


def nexmark_scenario(query: str, start_delay_s: float = DEFAULT_START_DELAY_S) -> Any:
    """The ``nexmark`` scenario running ``query`` (``q0`` .. ``q22``)."""
    from raylink.bench.nexmark.queries import QUERIES, watermark_strategy
    from raylink.loadtest.scenarios import Scenario

    if query not in QUERIES:
        raise SystemExit(f"unknown Nexmark query {query!r}: one of {', '.join(QUERIES)}")
    if not (start_delay_s >= 0 and math.isfinite(start_delay_s)):
        raise SystemExit(f"--start-delay must be >= 0 s, got {start_delay_s}")
    run_info: dict = {}

    def make_source(
        env: Any, rate: Optional[float], duration_s: Optional[float], records: Optional[int], buckets_per_s: float
    ) -> Any:
        base = int((time.time() + start_delay_s) * 1000)
        config, events = nexmark_config(rate, duration_s, records, base)
        run_info.clear()
        run_info.update(
            query=query,
            events=events,
            eventsPerSecond=config.events_per_second,
            baseTimeMs=base,
            paced=not config.max_emit_speed,
            startDelayS=start_delay_s,
        )
        source = env.add_source(NexmarkLoadSource(config, buckets_per_s=buckets_per_s), SOURCE_NAME)
        return source.assign_timestamps_and_watermarks(watermark_strategy())

    def make_sink(max_samples: int, delay_s: float, buckets_per_s: float, window_s: int) -> Any:
        return EventTimeLatencySink(
            max_samples,
            delay_s,
            buckets_per_s=buckets_per_s,
            window_s=window_s,
            measure=bool(run_info.get("paced", True)),
        )

    def build(_env: Any, events: Any) -> Any:
        return QUERIES[query](events)

    return Scenario(
        f"nexmark-{query}",
        f"Nexmark {query} (raylink.bench.nexmark.queries) over Nexmark's generated events emitted at their "
        f"dateTime as wall-clock time; latency: sink time minus the output record's event time",
        build,
        make_paced_source=make_source,
        make_sink=make_sink,
        run_info=run_info,
    )


__all__ = [
    "DEFAULT_START_DELAY_S",
    "EventTimeLatencySink",
    "NexmarkLoadSource",
    "nexmark_config",
    "nexmark_scenario",
    "query_names",
]
