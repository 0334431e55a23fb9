"""Tumbling event-time windows summing per key vs. a plain Python loop (same events, same run).

The events: ``(key, timestamp, value)`` from ``make_event(i)``, 1,000 keys, ten
events per millisecond (monotonous timestamps). The job, as a PyFlink user writes it::

    env.from_sequence(0, n - 1).map(make_event)
       .assign_timestamps_and_watermarks(
           WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(EventTimestamp()))
       .key_by(key_of)
       .window(TumblingEventTimeWindows.of(Time.seconds(10)))
       .reduce(sum_values)
       .add_sink(discard)

The baseline loop makes the same events, buckets them by ``(key, window start)`` in a
dict and emits every bucket whose window end the watermark (the latest timestamp)
passed. Both produce the same per-window sums (checked on every run). A first row runs
the loop's buckets through the job's own functions (the timestamp assigner, ``key_of``,
``sum_values``, the sink), with nothing between them: the ceiling of any engine running the
program in one process, as the loop adds in place without those calls and tuples.

On the local target the table also compares CPU time (this process's, every thread's, against
the loop's): on a machine other processes load, wall-clock ratios swing with their load, CPU
time much less.

    python bench/windows.py [--events 2000000] [--repeat 3] [--target local]
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Optional

NUM_KEYS = 1000
EVENTS_PER_MS = 10
WINDOW_MS = 10_000
KEYS = [f"key{i}" for i in range(NUM_KEYS)]


def make_event(i: int) -> tuple:
    return (KEYS[(i * 7919) % NUM_KEYS], i // EVENTS_PER_MS, i % 100)


def key_of(event: tuple) -> str:
    return event[0]


def sum_values(a: tuple, b: tuple) -> tuple:
    return (a[0], a[1], a[2] + b[2])


def discard(_value) -> None:
    return None


def plain_loop(n: int) -> tuple[float, int]:
    """Seconds, and the total of all emitted window sums."""
    buckets: dict = {}
    emitted = 0
    start = time.perf_counter()
    next_end = WINDOW_MS
    for i in range(n):
        key, ts, value = make_event(i)
        if ts >= next_end:  # the watermark passed a window end: emit those windows
            for bucket in [b for b in buckets if b[1] + WINDOW_MS <= ts]:
                emitted += buckets.pop(bucket)
            next_end = ts - ts % WINDOW_MS + WINDOW_MS
        window = (key, ts - ts % WINDOW_MS)
        buckets[window] = buckets.get(window, 0) + value
    for bucket in list(buckets):  # end of input
        emitted += buckets.pop(bucket)
    return time.perf_counter() - start, emitted


class EventTimestamp:
    def extract_timestamp(self, value: tuple, record_timestamp: int) -> int:
        return value[1]


def functions_only(n: int) -> tuple[float, int]:
    """The loop's buckets, but through the job's own functions as its tasks call them (the
    timestamp assigner, the key selector as raylink runs it, ``sum_values`` from a window's
    second event on, the sink per fired window), with no framework between them: the ceiling
    of any engine running that program in one process. Seconds, and the total emitted."""
    from raylink.core.field_selectors import field_getter

    extract, get_key, sink = EventTimestamp().extract_timestamp, field_getter(key_of), Total()
    sink.total = 0
    buckets: dict = {}
    get = buckets.get
    start = time.perf_counter()
    next_end = WINDOW_MS
    for i in range(n):
        event = make_event(i)
        ts = extract(event, None)
        if ts >= next_end:
            for bucket in [b for b in buckets if b[1] + WINDOW_MS <= ts]:
                sink.invoke(buckets.pop(bucket), None)
            next_end = ts - ts % WINDOW_MS + WINDOW_MS
        window = (get_key(event), ts - ts % WINDOW_MS)
        current = get(window)
        buckets[window] = event if current is None else sum_values(current, event)
    for bucket in list(buckets):
        sink.invoke(buckets.pop(bucket), None)
    return time.perf_counter() - start, sink.total


class Total:
    """Sink that adds the window sums into an accumulator (to check them against the loop)."""

    def open(self, runtime_context) -> None:
        self.total = 0
        self.accumulators = runtime_context.accumulators

    def invoke(self, value: tuple, context) -> None:
        self.total += value[2]

    def close(self) -> None:
        self.accumulators["window_total"] = self.accumulators.get("window_total", 0) + self.total


def raylink_job(n: int, target: str, parallelism: int = 1) -> tuple[float, float, float, int, object]:
    """(wall seconds, seconds the tasks ran, CPU seconds of this process (every thread; on Ray
    only the driver's), total of the window sums, the job's result).

    The program as written, untuned on either target: on Ray the default task placement gives
    the source chain and the window chain a TaskExecutor each while the machine has a CPU for
    each, and every record crosses the Ray transport."""
    from raylink.api import (
        Configuration,
        StreamExecutionEnvironment,
        Time,
        TumblingEventTimeWindows,
        WatermarkStrategy,
    )

    env = StreamExecutionEnvironment.get_execution_environment(Configuration().set_string("execution.target", target))
    env.set_parallelism(parallelism)
    source = env.from_sequence(0, n - 1)
    windowed = (
        source.map(make_event)
        .assign_timestamps_and_watermarks(
            WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(EventTimestamp())
        )
        .key_by(key_of)
        .window(TumblingEventTimeWindows.of(Time.milliseconds(WINDOW_MS)))
        .reduce(sum_values)
    )
    windowed.add_sink(Total())
    start, cpu = time.perf_counter(), time.process_time()
    result = env.execute("windows bench")
    wall = time.perf_counter() - start
    cpu = time.process_time() - cpu
    return wall, result.net_runtime_ms / 1000, cpu, result.accumulators.get("window_total", 0), result


def main(argv: Optional[list] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=2_000_000)
    parser.add_argument(
        "--repeat", type=int, default=3, help="alternate loop and job this many times; medians are reported"
    )
    parser.add_argument("--target", default="local", choices=["local", "ray"])
    args = parser.parse_args(argv)
    n = args.events

    if args.target == "ray":
        from raylink.actors.cluster import ensure_ray

        ensure_ray()
    raylink_job(20_000, args.target)  # warm up: imports (and Ray workers)
    loops, walls, nets, loop_cpus, job_cpus, ceilings = [], [], [], [], [], []
    result = None
    for _ in range(max(1, args.repeat)):  # interleaved, so a slow spell of the machine hits both
        cpu = time.process_time()
        loop_s, expected = plain_loop(n)
        loop_cpus.append(time.process_time() - cpu)
        wall, net, job_cpu, total, result = raylink_job(n, args.target)
        job_cpus.append(job_cpu)
        if total != expected:
            raise SystemExit(f"window sums differ: raylink {total} vs loop {expected}")
        ceiling, ceiling_total = functions_only(n)
        if ceiling_total != expected:
            raise SystemExit(f"window sums differ: the functions alone {ceiling_total} vs loop {expected}")
        ceilings.append(ceiling)
        loops.append(loop_s)
        walls.append(wall)
        nets.append(net)
    loop_s, wall, net = statistics.median(loops), statistics.median(walls), statistics.median(nets)
    loop_cpu, job_cpu = statistics.median(loop_cpus), statistics.median(job_cpus)
    print(
        f"tumbling event-time windows ({WINDOW_MS // 1000} s), sum per key: {n:,} events, {NUM_KEYS:,} keys, "
        f"target {args.target}, parallelism 1; medians of {len(loops)} interleaved runs"
    )
    print(f"{'variant':<52}{'seconds':>9}{'events/s':>14}{'vs loop':>9}")
    for label, secs in [
        ("the job's own functions alone (p=1's ceiling)", statistics.median(ceilings)),
        ("raylink, untuned program, tasks running", net),
        ("raylink, untuned program, wall clock incl. deploy", wall),
        ("plain Python loop (dict of (key, window) sums)", loop_s),
    ]:
        print(f"{label:<52}{secs:>9.2f}{n / secs:>14,.0f}{loop_s / secs:>8.2f}x")
    if args.target == "local":  # on a shared machine: CPU time, which other processes' load barely moves
        for label, secs in [
            ("raylink, CPU time of this process (all its threads)", job_cpu),
            ("plain Python loop, CPU time", loop_cpu),
        ]:
            print(f"{label:<52}{secs:>9.2f}{n / secs:>14,.0f}{loop_cpu / secs:>8.2f}x")
    for m in getattr(result, "task_metrics", None) or []:
        print(
            f"  {m['task'][:58]:<58} in {m['numRecordsIn']:>9,} out {m['numRecordsOut']:>9,} "
            f"busy {m.get('busyTimeMsPerSecond', 0):>5.0f} idle {m.get('idleTimeMsPerSecond', 0):>5.0f} "
            f"backpressured {m.get('backPressuredTimeMsPerSecond', 0):>5.0f} ms/s"
        )
    if args.target == "ray":
        from raylink.actors.cluster import shutdown_ray

        shutdown_ray()


if __name__ == "__main__":
    main()
