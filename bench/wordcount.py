"""Word count across two TaskExecutor actors vs. a plain Python loop (same functions, same run).

The shared job: lines generated from an integer sequence, ``flat_map`` to
``(word, 1)``, ``key_by`` word, rolling ``sum(1)``, a discarding sink. The source
chain and the keyed chain sit in different slot sharing groups, so they run in
different TaskExecutors and every record crosses the Ray transport.

    python bench/wordcount.py [--words 2000000] [--parallelism 1] [--repeat 3]
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


def raylink_job(num_lines: int, parallelism: int, buffer_timeout: int = 100,
                typed: bool = True) -> tuple[float, object]:
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
    parser.add_argument("--repeat", type=int, default=3,
                        help="alternate loop and job this many times; medians are reported")
    args = parser.parse_args(argv)
    num_lines = args.words // WORDS_PER_LINE
    words = num_lines * WORDS_PER_LINE

    import ray
    from raylink.actors.ray_executor import ensure_ray

    ensure_ray()
    raylink_job(2000, args.parallelism)  # warm up: worker processes, imports
    loops, walls, nets, untyped_nets = [], [], [], []
    result = None
    for _ in range(max(1, args.repeat)):  # interleaved, so a slow spell of the machine hits both
        loops.append(plain_loop(num_lines))
        wall, result = raylink_job(num_lines, args.parallelism)
        walls.append(wall)
        nets.append(result.net_runtime_ms / 1000)
        untyped_nets.append(raylink_job(num_lines, args.parallelism, typed=False)[1].net_runtime_ms / 1000)
    loop_s, job_s, net, untyped = _median(loops), _median(walls), _median(nets), _median(untyped_nets)
    executors = {m["executor"] for m in result.task_metrics}
    sent = sum(s.get("remoteBuffersSent", 0) for s in result.executor_stats)
    calls = sum(s.get("remoteCalls", 0) for s in result.executor_stats)
    credit_calls = sum(s.get("remoteCreditCalls", 0) for s in result.executor_stats)
    print(f"word count, {words:,} words, parallelism {args.parallelism}, {len(executors)} TaskExecutors, "
          f"{sent} remote buffers in {calls} calls (+{credit_calls} credit calls); "
          f"medians of {len(loops)} interleaved runs")
    print(f"{'variant':<48}{'seconds':>9}{'words/s':>14}{'vs loop':>9}")
    rows = [
        ("plain Python loop (1 process, baseline)", loop_s),
        ("raylink on Ray, tasks running", net),
        ("raylink on Ray, tasks running, no output_type", untyped),
        ("raylink on Ray, wall clock incl. deploy", job_s),
    ]
    for label, secs in rows:
        print(f"{label:<48}{secs:>9.2f}{words / secs:>14,.0f}{loop_s / secs:>8.2f}x")
    print("end-to-end latency from latency markers (every 50 ms, source -> sink):")
    for timeout in (0, 100):
        if timeout == 100:
            res = result
        else:
            _s, res = raylink_job(num_lines, args.parallelism, buffer_timeout=timeout)
        lat = [m["latencyMs"] for m in res.task_metrics if m.get("latencyMs")]
        if lat:
            worst = max(lat, key=lambda l: l["p99"])
            print(f"  buffer timeout {timeout:>3} ms: p50 {worst['p50']:7.1f} ms  p99 {worst['p99']:7.1f} ms"
                  f"  ({sum(l['count'] for l in lat)} markers)")
    for m in result.task_metrics:
        print(f"  {m['task']:<60} in {m['numRecordsIn']:>9,} out {m['numRecordsOut']:>9,} "
              f"busy {m['busyTimeMsPerSecond']:>6.0f} idle {m['idleTimeMsPerSecond']:>6.0f} "
              f"backpressured {m['backPressuredTimeMsPerSecond']:>6.0f} ms/s")
    ray.shutdown()


if __name__ == "__main__":
    main()
