"""Word count on raylink vs. a plain Python loop (same functions, same run).

Headline rows: the job as a new user writes it: ``from_sequence`` -> ``map(make_line)`` ->
``flat_map`` into ``(word, 1)`` -> ``key_by(lambda ...)`` -> ``reduce`` with a Python
function -> a sink; no declared types, no slot sharing groups, default configuration;
at parallelism 1 and 2, and with the results read back through ``execute_and_collect()``.
Then the tuned shape: a declared output type, the built-in ``sum(1)`` and the two halves
in their own slot sharing groups.

    python bench/wordcount.py [--words 2000000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Optional

WORDS_PER_LINE = 10
VOCABULARY = [f"word{i}" for i in range(1000)]


def make_line(i: int) -> str:
    v = VOCABULARY
    n = len(v)
    return " ".join(v[(i * 7 + k * 13) % n] for k in range(WORDS_PER_LINE))


def split(line: str) -> list:
    return [(w, 1) for w in line.split()]


def word_of(pair: tuple) -> str:
    return pair[0]


def discard(_value) -> None:
    return None


def plain_loop(num_lines: int) -> float:
    counts: dict = {}
    start = time.perf_counter()
    for i in range(num_lines):
        for pair in split(make_line(i)):
            key = word_of(pair)
            total = counts.get(key, 0) + pair[1]
            counts[key] = total
            discard((key, total))
    return time.perf_counter() - start


def ordinary_job(num_lines: int, parallelism: int, collect: bool = False) -> float:
    """The job as a new user writes it; seconds its tasks ran (with ``collect``: seconds
    until the driver has read every result)."""
    from raylink.api import StreamExecutionEnvironment

    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(parallelism)
    counts = (
        env.from_sequence(0, num_lines - 1)
        .map(make_line)
        .flat_map(lambda line: [(w, 1) for w in line.split()])
        .key_by(lambda pair: pair[0])
        .reduce(lambda a, b: (a[0], a[1] + b[1]))
    )
    if collect:  # the tasks run until the driver has read every result (a full buffer blocks them)
        start = time.perf_counter()
        with counts.execute_and_collect() as results:
            for _ in results:
                pass
            result = results.job_execution_result
        return min(time.perf_counter() - start, result.net_runtime_ms / 1000)
    counts.add_sink(discard)
    start = time.perf_counter()
    result = env.execute("ordinary wordcount")
    wall = time.perf_counter() - start
    return min(wall, result.net_runtime_ms / 1000)


def raylink_job(
    num_lines: int, parallelism: int, buffer_timeout: int = 100, typed: bool = True
) -> tuple[float, object]:
    """Run the job on Ray; ``typed``: declare ``flat_map``'s output type as PyFlink programs do."""
    from raylink.api import Configuration, StreamExecutionEnvironment, Types

    conf = Configuration().set_integer("metrics.latency.interval", 50)
    env = StreamExecutionEnvironment.get_execution_environment(conf)
    env.set_parallelism(parallelism)
    env.set_buffer_timeout(buffer_timeout)
    pairs = Types.TUPLE([Types.STRING(), Types.INT()]) if typed else None
    (
        env.from_sequence(0, num_lines - 1)
        .slot_sharing_group("source")
        .map(make_line)
        .flat_map(split, output_type=pairs)
        .key_by(word_of)
        .sum(1)
        .slot_sharing_group("keyed")
        .add_sink(discard)
    )
    start = time.perf_counter()
    result = env.execute("wordcount bench")
    return time.perf_counter() - start, result


def _median(xs: list) -> float:
    return statistics.median(xs)


def main(argv: Optional[list] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--words", type=int, default=2_000_000)
    parser.add_argument("--parallelism", type=int, default=1)
    parser.add_argument(
        "--repeat", type=int, default=3, help="alternate loop and job this many times; medians are reported"
    )
    args = parser.parse_args(argv)
    num_lines = args.words // WORDS_PER_LINE
    words = num_lines * WORDS_PER_LINE

    from raylink.actors.cluster import ensure_ray, shutdown_ray

    ensure_ray()
    raylink_job(2000, args.parallelism)  # warm up: worker processes, imports
    ordinary_job(2000, 1)
    loops, walls, nets, untyped_nets = [], [], [], []
    ordinary: dict = {"p1": [], "p2": [], "p2 collect": []}
    result = None
    for _ in range(max(1, args.repeat)):  # interleaved, so a slow spell of the machine hits all
        loops.append(plain_loop(num_lines))
        ordinary["p1"].append(ordinary_job(num_lines, 1))
        ordinary["p2"].append(ordinary_job(num_lines, 2))
        ordinary["p2 collect"].append(ordinary_job(num_lines, 2, collect=True))
        wall, result = raylink_job(num_lines, args.parallelism)
        walls.append(wall)
        nets.append(result.net_runtime_ms / 1000)
        untyped_nets.append(raylink_job(num_lines, args.parallelism, typed=False)[1].net_runtime_ms / 1000)
    loop_s, job_s, net, untyped = _median(loops), _median(walls), _median(nets), _median(untyped_nets)
    executors = {m["executor"] for m in result.task_metrics}
    sent = sum(s.get("remoteBuffersSent", 0) for s in result.executor_stats)
    calls = sum(s.get("remoteCalls", 0) for s in result.executor_stats)
    credit_calls = sum(s.get("remoteCreditCalls", 0) for s in result.executor_stats)
    print(f"word count, {words:,} words; medians of {len(loops)} interleaved runs")
    print(f"{'variant':<64}{'seconds':>9}{'words/s':>14}{'vs loop':>9}")
    rows = [
        ("plain Python loop (1 process, baseline)", loop_s),
        ("as written: untyped, reduce(lambda), defaults, p=1, tasks running", _median(ordinary["p1"])),
        ("as written: untyped, reduce(lambda), defaults, p=2, tasks running", _median(ordinary["p2"])),
        ("as written, p=2, results read through execute_and_collect()", _median(ordinary["p2 collect"])),
        (f"tuned: typed, sum(1), 2 slot sharing groups, p={args.parallelism}, tasks running", net),
        (f"tuned without output_type, p={args.parallelism}, tasks running", untyped),
        (f"tuned, p={args.parallelism}, wall clock incl. deploy", job_s),
    ]
    for label, secs in rows:
        print(f"{label:<64}{secs:>9.2f}{words / secs:>14,.0f}{loop_s / secs:>8.2f}x")
    print(
        f"collect vs discarding sink (p=2): {_median(ordinary['p2']) / _median(ordinary['p2 collect']):.2f}x; "
        f"tuned job: {len(executors)} TaskExecutors, {sent} remote buffers in {calls} calls "
        f"(+{credit_calls} credit calls)"
    )
    print("end-to-end latency from latency markers (every 50 ms, source -> sink):")
    for timeout in (0, 100):
        if timeout == 100:
            res = result
        else:
            _s, res = raylink_job(num_lines, args.parallelism, buffer_timeout=timeout)
        lat = [m["latencyMs"] for m in res.task_metrics if m.get("latencyMs")]
        if lat:
            worst = max(lat, key=lambda l: l["p99"])
            print(
                f"  buffer timeout {timeout:>3} ms: p50 {worst['p50']:7.1f} ms  p99 {worst['p99']:7.1f} ms"
                f"  ({sum(l['count'] for l in lat)} markers)"
            )
    for m in result.task_metrics:
        print(
            f"  {m['task']:<60} in {m['numRecordsIn']:>9,} out {m['numRecordsOut']:>9,} "
            f"busy {m['busyTimeMsPerSecond']:>6.0f} idle {m['idleTimeMsPerSecond']:>6.0f} "
            f"backpressured {m['backPressuredTimeMsPerSecond']:>6.0f} ms/s"
        )
    shutdown_ray()


if __name__ == "__main__":
    main()
