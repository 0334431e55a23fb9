"""Word count on raylink vs. a plain Python loop (same functions, same run).

Headline rows: the job as a new user writes it: ``from_sequence`` -> ``map(make_line)`` ->
``flat_map`` into ``(word, 1)`` -> ``key_by(lambda ...)`` -> ``reduce`` with a Python
function -> a sink; no declared types, no slot sharing groups, default configuration;
at parallelism 1 and 2, and with the results read back through ``execute_and_collect()``.
Then the tuned shape: a declared output type, the built-in ``sum(1)`` and the two halves
in their own slot sharing groups. A first row times the as-written job's own functions called
one after the other with nothing between them: the ceiling of any engine running that program
in one process (the plain loop adds in place, without the lambdas' calls and tuples).

Each row on the compiled per-record path and on its pure-Python twins (``RAYLINK_PURE_PYTHON=1``),
next to each other: every round runs in a fresh process with its own local Ray (the path is chosen
per process), compiled and pure rounds alternate, and each round's ratios are to the plain loop
timed in that same round; the table shows the medians. "tasks running" is the job's net runtime,
"wall clock" the driver's time from ``execute`` (deploy included) until the job ended or, for
``execute_and_collect()``, until the driver had read every result. Wall clocks move with
whatever else runs on the machine; the CPU time the as-written p=2 job's TaskExecutors used,
against the loop's CPU time, hardly does.

    python bench/wordcount.py [--words 2000000] [--repeat 3] [--path both|compiled|pure]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
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


def functions_only(num_lines: int) -> float:
    """The as-written job's own functions called as its p=1 tasks call them, with no framework
    between them (``make_line``, the ``flat_map`` lambda, the key selector once per pair -- as
    raylink runs it, an ``operator.itemgetter``, since it only reads a field --, the ``reduce``
    lambda from a key's second pair on, the sink function): the ceiling of any engine running
    that program in one process (the plain loop adds in place, without the lambdas' calls and
    tuples)."""
    from raylink.core.field_selectors import field_getter

    flat_map = lambda line: [(w, 1) for w in line.split()]  # noqa: E731 -- as the job is written
    key_of = field_getter(lambda pair: pair[0])
    reduce = lambda a, b: (a[0], a[1] + b[1])  # noqa: E731
    state: dict = {}
    get = state.get
    start = time.perf_counter()
    for i in range(num_lines):
        for pair in flat_map(make_line(i)):
            key = key_of(pair)
            current = get(key)
            value = pair if current is None else reduce(current, pair)
            state[key] = value
            discard(value)
    return time.perf_counter() - start


def task_executor_cpu(num_lines: int, collect: bool = False) -> "tuple[float, float]":
    """CPU seconds (user + system, every thread) the TaskExecutor processes of the as-written
    job at p=2 used until it ended, and the driver's process (``execute_and_collect()``: until it
    had read every result): unlike their wall clock, hardly moved by other work on the machine."""
    import psutil

    from raylink.actors.cluster import task_executor_pids
    from raylink.api import StreamExecutionEnvironment

    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    counts = (
        env.from_sequence(0, num_lines - 1)
        .map(make_line)
        .flat_map(lambda line: [(w, 1) for w in line.split()])
        .key_by(lambda pair: pair[0])
        .reduce(lambda a, b: (a[0], a[1] + b[1]))
    )
    driver_start = time.process_time()
    if collect:
        results = counts.execute_and_collect()
        client = results.job_client
    else:
        counts.add_sink(discard)
        client = env.execute_async("ordinary wordcount (CPU)")
    deadline = time.monotonic() + 120
    pids: list = []
    while not pids:  # the job's TaskExecutors, once deployed
        try:
            pids = task_executor_pids(client)
        except ValueError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.02)
    procs = [psutil.Process(pid) for pid in pids]

    def used() -> list:
        out = []
        for proc in procs:
            try:
                t = proc.cpu_times()
                out.append(t.user + t.system)
            except psutil.Error:  # gone: its last reading stands
                out.append(None)
        return out

    start = used()
    last = list(start)
    if collect:  # read every result, sampling now and then (the job ends with the last one)
        for i, _ in enumerate(results):
            if not i & 0xFFFF:
                last = [new if new is not None else old for new, old in zip(used(), last)]
        results.close()
    while not client.wait(0.05):  # sampled until the job ends (its processes are released then)
        last = [new if new is not None else old for new, old in zip(used(), last)]
    client.get_job_execution_result()
    driver = time.process_time() - driver_start
    return sum(b - a for a, b in zip(start, last) if a is not None and b is not None), driver


def ordinary_job(num_lines: int, parallelism: int, collect: bool = False) -> tuple[float, float]:
    """The job as a new user writes it: ``(seconds its tasks ran, wall-clock seconds incl.
    deploy)``; with ``collect`` both until the driver has read every result."""
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
        wall = time.perf_counter() - start
        return min(wall, result.net_runtime_ms / 1000), wall
    counts.add_sink(discard)
    start = time.perf_counter()
    result = env.execute("ordinary wordcount")
    wall = time.perf_counter() - start
    return min(wall, result.net_runtime_ms / 1000), wall


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


def _path_of_task_executors() -> str:
    """Which per-record path the TaskExecutors run (``raylink.shuffle.hotpath.ACTIVE`` there)."""
    from raylink.api import StreamExecutionEnvironment

    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(1)
    stream = env.from_collection([0]).map(lambda _: __import__("raylink.shuffle.hotpath", fromlist=["_"]).ACTIVE)
    with stream.execute_and_collect() as results:
        return ", ".join(sorted(set(results)))


#: row key -> label (each is measured on both paths)
ROWS = [
    ("functions", "the job's own functions alone, no framework (p=1's ceiling)"),
    ("p1", "as written: untyped, reduce(lambda), defaults, p=1, tasks running"),
    ("p2", "as written, p=2, tasks running"),
    ("p2 wall", "as written, p=2, wall clock incl. deploy"),
    ("p2 collect", "as written, p=2, execute_and_collect(), tasks running"),
    ("p2 collect wall", "as written, p=2, execute_and_collect(), wall clock incl. deploy"),
    ("tuned", "tuned: typed, sum(1), 2 slot sharing groups, tasks running"),
    ("untyped", "tuned without output_type, tasks running"),
    ("tuned wall", "tuned, wall clock incl. deploy"),
]


def one_round(num_lines: int, parallelism: int) -> dict:
    """One interleaved round in this process (its own local Ray): seconds of every row, the
    plain loop's, the path the TaskExecutors ran and the tuned job's metrics."""
    from raylink.actors.cluster import ensure_ray, shutdown_ray

    ensure_ray()
    try:
        raylink_job(2000, parallelism)  # warm up: worker processes, imports
        ordinary_job(2000, 1)
        secs: dict = {"loop": plain_loop(num_lines)}
        secs["functions"] = functions_only(num_lines)
        secs["p1"] = ordinary_job(num_lines, 1)[0]
        secs["p2"], secs["p2 wall"] = ordinary_job(num_lines, 2)
        cpu_start = time.process_time()
        plain_loop(num_lines)
        secs["loop cpu"] = time.process_time() - cpu_start
        secs["p2 cpu"], secs["p2 driver cpu"] = task_executor_cpu(num_lines)
        secs["p2 collect"], secs["p2 collect wall"] = ordinary_job(num_lines, 2, collect=True)
        secs["p2 collect cpu"], secs["p2 collect driver cpu"] = task_executor_cpu(num_lines, collect=True)
        wall, result = raylink_job(num_lines, parallelism)
        secs["tuned"], secs["tuned wall"] = result.net_runtime_ms / 1000, wall
        secs["untyped"] = raylink_job(num_lines, parallelism, typed=False)[1].net_runtime_ms / 1000
        latency = {}
        for timeout in (0, 100):
            res = result if timeout == 100 else raylink_job(num_lines, parallelism, buffer_timeout=timeout)[1]
            lat = [m["latencyMs"] for m in res.task_metrics if m.get("latencyMs")]
            if lat:
                worst = max(lat, key=lambda l: l["p99"])
                latency[timeout] = (worst["p50"], worst["p99"], sum(l["count"] for l in lat))
        return {
            "secs": secs,
            "path": _path_of_task_executors(),
            "latency": latency,
            "executors": len({m["executor"] for m in result.task_metrics}),
            "remote": [
                sum(s.get(k, 0) for s in result.executor_stats)
                for k in ("remoteBuffersSent", "remoteCalls", "remoteCreditCalls")
            ],
            "tasks": [
                (
                    m["task"],
                    m["numRecordsIn"],
                    m["numRecordsOut"],
                    m["busyTimeMsPerSecond"],
                    m["idleTimeMsPerSecond"],
                    m["backPressuredTimeMsPerSecond"],
                )
                for m in result.task_metrics
            ],
        }
    finally:
        shutdown_ray()


def _round_in_subprocess(path: str, argv: list) -> dict:
    env = dict(os.environ, RAYLINK_PURE_PYTHON="1" if path == "pure" else "")
    out = subprocess.run(
        [sys.executable, os.path.abspath(__file__), "--round", *argv],
        env=env,
        stdout=subprocess.PIPE,
        text=True,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


_CPU_KEYS = ("p2 cpu", "p2 driver cpu", "p2 collect cpu", "p2 collect driver cpu")


def _cpu_of(round_: dict, job: str) -> float:
    """CPU seconds of the TaskExecutors and the driver in one round's ``job`` (p2 or p2 collect)."""
    return round_["secs"][f"{job} cpu"] + round_["secs"][f"{job} driver cpu"]


def main(argv: Optional[list] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--words", type=int, default=2_000_000)
    parser.add_argument("--parallelism", type=int, default=1, help="of the tuned job")
    parser.add_argument("--repeat", type=int, default=3, help="rounds per path, alternated; medians are reported")
    parser.add_argument("--path", choices=("both", "compiled", "pure"), default="both")
    parser.add_argument("--round", action="store_true", help=argparse.SUPPRESS)  # one round, as JSON
    args = parser.parse_args(argv)
    num_lines = args.words // WORDS_PER_LINE
    words = num_lines * WORDS_PER_LINE
    if args.round:
        print(json.dumps(one_round(num_lines, args.parallelism)))
        return
    paths = ("compiled", "pure") if args.path == "both" else (args.path,)
    child_argv = ["--words", str(args.words), "--parallelism", str(args.parallelism)]
    rounds: dict = {p: [] for p in paths}
    for _ in range(max(1, args.repeat)):  # alternated, so a slow spell of the machine hits both paths
        for path in paths:
            rounds[path].append(_round_in_subprocess(path, child_argv))
    print(f"word count, {words:,} words; medians of {args.repeat} rounds per path, alternated")
    for path in paths:
        loops = [r["secs"]["loop"] for r in rounds[path]]
        print(
            f"  {path} rounds: TaskExecutors ran {rounds[path][-1]['path']}; plain loop {words / _median(loops):,.0f} words/s"
        )
    loop_s = _median([r["secs"]["loop"] for p in paths for r in rounds[p]])
    print(f"{'variant [per-record path]':<78}{'seconds':>9}{'words/s':>12}{'vs loop':>9}")
    print(f"{'plain Python loop (1 process, baseline)':<78}{loop_s:>9.2f}{words / loop_s:>12,.0f}{1.0:>8.2f}x")
    for key, label in ROWS:
        for path in paths:
            secs = _median([r["secs"][key] for r in rounds[path]])
            ratio = _median([r["secs"]["loop"] / r["secs"][key] for r in rounds[path]])
            print(f"{label + ' [' + path + ']':<78}{secs:>9.2f}{words / secs:>12,.0f}{ratio:>8.2f}x")
    for path in paths:
        cpu = _median([r["secs"]["p2 cpu"] / r["secs"]["loop cpu"] for r in rounds[path]])
        print(
            f"{path}: as written, p=2: the TaskExecutors' CPU time {cpu:.2f}x the loop's "
            f"({_median([r['secs']['p2 cpu'] for r in rounds[path]]) / words * 1e6:.2f} µs per word; "
            f"1.0x the loop at p=2 on 2 cores needs <= 2.0x)"
        )
    for path in paths:
        collect = _median([r["secs"]["p2"] / r["secs"]["p2 collect"] for r in rounds[path]])
        last = rounds[path][-1]
        sent, calls, credit_calls = last["remote"]
        print(
            f"{path}: collect vs discarding sink (p=2, tasks running) {collect:.2f}x; tuned job: {last['executors']} "
            f"TaskExecutors, {sent} remote buffers in {calls} calls (+{credit_calls} credit calls)"
        )
        cpu = {k: _median([r["secs"][k] for r in rounds[path]]) for k in _CPU_KEYS}
        ratio = _median([_cpu_of(r, "p2") / _cpu_of(r, "p2 collect") for r in rounds[path]])
        print(
            f"{path}: collect vs discarding sink, CPU time of the TaskExecutors + the driver {ratio:.2f}x "
            f"(discarding: {cpu['p2 cpu']:.2f} + {cpu['p2 driver cpu']:.2f} s; collect: {cpu['p2 collect cpu']:.2f} "
            f"+ {cpu['p2 collect driver cpu']:.2f} s, {cpu['p2 collect driver cpu'] / words * 1e6:.2f} µs per word "
            "in the driver)"
        )
        for timeout, (p50, p99, count) in sorted(last["latency"].items(), key=lambda kv: int(kv[0])):
            print(
                f"  latency, buffer timeout {int(timeout):>3} ms: p50 {p50:7.1f} ms  p99 {p99:7.1f} ms  ({count} markers)"
            )
        for task, rin, rout, busy, idle, bp in last["tasks"]:
            print(
                f"  {task:<60} in {rin:>9,} out {rout:>9,} busy {busy:>6.0f} idle {idle:>6.0f} backpressured {bp:>6.0f} ms/s"
            )


if __name__ == "__main__":
    main()
