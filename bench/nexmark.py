"""Nexmark on raylink vs. a plain Python loop and PyFlink 2.3 (same events, same run).

Every query of ``raylink.bench.nexmark.queries`` (but q12, whose processing-time windows have no
reproducible answer) over the same ``--events`` Nexmark events, untuned as a user writes it:
``env.from_source(NexmarkSource(...), watermark_strategy())`` -> ``qN`` -> a discarding sink, at
p=1 and p=2 on Ray with the default configuration. Next to it, in the same run:

* the plain Python loop of the query (``raylink.bench.nexmark.loops``: dicts, no framework) over
  the same events in this process: the per-core ceiling of Python code, timed before any result
  list is built and with a discarding ``emit``;
* PyFlink 2.3's DataStream API running the same ``qN`` functions (``bench/nexmark/pyflink_run.py``
  in the venv ``--pyflink-python`` names; the column is skipped, saying why, without it) at p=2;
* with ``--sql FLINK_LIB --nexmark CHECKOUT``, Flink's own SQL of the query on the JVM (through
  ``flink_check``'s launcher, BATCH mode, over the same events as JSON) as a row for scale.

The events are generated once and replayed (``NexmarkSource(replay=...)``): the Python generator
costs far more per event than most queries, and every column would otherwise time it; a warm-up
job per parallelism has the processes read the events, as the loop has them in memory. Each
round times, per query, the loop, then p=1, then p=2 (interleaved, so a slow spell of the machine
hits all); "run" is the job's tasks-running time (its net runtime), "wall" the driver's clock from
``execute`` (deploy included) to the job's end. Ratios are to the loop of the same round; the
table shows medians over the rounds. "equal": the job's output at p=2 (read back with
``execute_and_collect()`` after the timed rounds; updating queries: the last row per key) equals
the loop's.

    python bench/nexmark.py [--events 50000] [--repeat 3] [--queries q0,q5,...] [--rate 1000]
        [--pyflink-python /tmp/pyflink-venv/bin/python] [--sql FLINK_LIB --nexmark CHECKOUT]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import tempfile
import time
from collections import Counter
from typing import Any, Dict, List, Optional

PYFLINK_PYTHON = "/tmp/pyflink-venv/bin/python"
#: updating queries: how many leading columns are the key (None: q19's auction and rank_number)
UPDATING: Dict[str, Optional[int]] = {"q4": 1, "q9": 1, "q15": 1, "q16": 2, "q17": 2, "q18": 2, "q19": None}


def discard(_value: Any) -> None:
    return None


def final_values(rows: List[tuple], query: str) -> Counter:
    """The rows as a multiset; an updating query's: the last row per key."""
    if query not in UPDATING:
        return Counter(rows)
    key_columns, last = UPDATING[query], {}
    for row in rows:
        last[row[:key_columns] if key_columns else (row[0], row[-1])] = row
    return Counter(last.values())


def time_loop(query: str, evs: List[Any]) -> float:
    from raylink.bench.nexmark.loops import LOOPS

    start = time.perf_counter()
    LOOPS[query](evs, discard)
    return time.perf_counter() - start


def _stream(env: Any, config: Any, replay: str) -> Any:
    from raylink.bench.nexmark import NexmarkSource
    from raylink.bench.nexmark.queries import watermark_strategy

    return env.from_source(NexmarkSource(config, replay=replay), watermark_strategy(), "nexmark")


def _env(parallelism: int, target: str) -> Any:
    from raylink.api import Configuration, StreamExecutionEnvironment

    env = StreamExecutionEnvironment.get_execution_environment(Configuration().set_string("execution.target", target))
    env.set_parallelism(parallelism)
    return env


def time_job(query: str, config: Any, replay: str, parallelism: int, target: str) -> tuple:
    """``(seconds its tasks ran, wall-clock seconds incl. deploy)`` of the query's job."""
    from raylink.bench.nexmark.queries import QUERIES

    env = _env(parallelism, target)
    QUERIES[query](_stream(env, config, replay)).add_sink(discard)
    start = time.perf_counter()
    result = env.execute(f"nexmark {query} p={parallelism}")
    wall = time.perf_counter() - start
    return min(wall, result.net_runtime_ms / 1000), wall


def job_rows(query: str, config: Any, replay: str, parallelism: int, target: str) -> List[tuple]:
    from raylink.bench.nexmark.queries import QUERIES

    env = _env(parallelism, target)
    with QUERIES[query](_stream(env, config, replay)).execute_and_collect() as results:
        return [tuple(row) for row in results]


def loop_rows(query: str, evs: List[Any]) -> List[tuple]:
    from raylink.bench.nexmark.loops import LOOPS

    rows: List[tuple] = []
    LOOPS[query](evs, rows.append)
    return rows


def pyflink_times(python: str, replay_tuples: str, config: Any, queries: List[str], parallelism: int) -> tuple:
    """``({query: (run s, wall s)}, reason)``: PyFlink 2.3 running the queries in a subprocess of
    its venv; ``reason`` says why there are none (no venv, a failure) or which queries failed."""
    if not os.path.exists(python):
        return (
            {},
            f"no PyFlink venv at {python} (python3.11 -m venv /tmp/pyflink-venv && pip install apache-flink==2.3.0)",
        )
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "nexmark", "pyflink_run.py")
    command = [python, script, "--replay", replay_tuples, "--events", str(config.events)]
    command += ["--parallelism", str(parallelism), "--queries", ",".join(queries)]
    path = os.path.dirname(python) + os.pathsep + os.environ.get("PATH", "")
    done = subprocess.run(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        timeout=7200,
        env=dict(os.environ, PATH=path),
    )
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        return {}, f"PyFlink run failed (exit {done.returncode}): {done.stderr.strip()[-400:]}"
    failed = lines[0].get("failed", {}) if len(lines) > 1 else {}
    reason = "; ".join(f"{q} failed: {error}" for q, error in failed.items())
    return {q: tuple(v) for q, v in lines[-1].items()}, reason


def sql_times(flink_lib: str, nexmark: str, config: Any, queries: List[str]) -> tuple:
    """``({query: wall s}, reason)``: Flink's SQL of each query on the JVM, BATCH mode, over the
    events written as JSON (``flink_check``'s launcher); JVM start and planning included."""
    from pathlib import Path

    from raylink.bench.nexmark import flink_check

    if not (flink_lib and nexmark):
        return {}, "no --sql FLINK_LIB --nexmark CHECKOUT given"
    out: Dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="nexmark-sql-") as work:
        work_path = Path(work)
        events_dir = work_path / "events"
        events_dir.mkdir()
        flink_check.write_events(config, events_dir / "events.json")
        for query in queries:
            if query not in flink_check.DEFAULT_QUERIES:
                continue
            script = flink_check.query_script(Path(nexmark), query, events_dir, work_path / f"out-{query}")
            mode = "streaming" if query in flink_check.STREAMING else "batch"
            start = time.perf_counter()
            try:
                flink_check.run_flink(script, Path(flink_lib), work_path, mode)
            except (RuntimeError, subprocess.SubprocessError) as exc:
                return out, f"Flink SQL failed at {query}: {str(exc)[:300]}"
            out[query] = time.perf_counter() - start
    return out, ""


def _median(values: List[float]) -> float:
    return statistics.median(values)


def run(
    num_events: int,
    queries: List[str],
    repeat: int = 3,
    rate: int = 1000,
    target: str = "ray",
    pyflink_python: Optional[str] = PYFLINK_PYTHON,
    flink_lib: str = "",
    nexmark: str = "",
    pyflink_queries: Optional[List[str]] = None,
) -> str:
    """Time everything and return the table (see the module doc)."""
    from raylink.bench.nexmark import NexmarkConfig, events
    from raylink.bench.nexmark.source import write_replay

    config = NexmarkConfig(events=num_events, events_per_second=rate)
    sample = min(num_events, 2000)
    generated = time.perf_counter()
    events(sample, config)
    generated = (time.perf_counter() - generated) / sample
    evs = cached_events(config)
    work = tempfile.mkdtemp(prefix="raylink-nexmark-bench-")
    replay = os.path.join(work, "events.pickle")
    write_replay(config, replay, evs)
    if target == "ray":
        from raylink.actors.cluster import ensure_ray

        ensure_ray()
    secs: Dict[str, Dict[str, list]] = {q: {k: [] for k in ("loop", "p1", "p1 wall", "p2", "p2 wall")} for q in queries}
    lines: List[str] = []
    try:
        for p in (2, 1):  # warm up: worker processes, imports, the replayed events loaded (p=2 first:
            # a job at p=1 runs on part of its TaskExecutors and gives them back for the next one)
            time_job("q2", config, replay, p, target)
        for _ in range(max(1, repeat)):
            for query in queries:
                s = secs[query]
                s["loop"].append(time_loop(query, evs))
                for p in (1, 2):
                    run_s, wall_s = time_job(query, config, replay, p, target)
                    s[f"p{p}"].append(run_s)
                    s[f"p{p} wall"].append(wall_s)
        equal = {}
        for query in queries:  # after the timed rounds: result lists are built from here on
            expected = final_values(loop_rows(query, evs), query)
            got = final_values(job_rows(query, config, replay, 2, target), query)
            equal[query] = (got == expected, sum(expected.values()))
            del expected, got
        pyflink, pyflink_reason = {}, "not asked for"
        if pyflink_python:
            tuples = os.path.join(work, "events-tuples.pickle")
            _write_tuples(evs, tuples)
            asked = [q for q in queries if pyflink_queries is None or q in pyflink_queries]
            pyflink, pyflink_reason = pyflink_times(pyflink_python, tuples, config, asked, 2)
        sql, sql_reason = sql_times(flink_lib, nexmark, config, queries)
    finally:
        if target == "ray":
            from raylink.actors.cluster import shutdown_ray

            shutdown_ray()
        for name in os.listdir(work):
            os.remove(os.path.join(work, name))
        os.rmdir(work)

    n = num_events
    lines.append(
        f"Nexmark, {n:,} events ({rate:,}/s of event time), target {target}; medians of {repeat} rounds; "
        f"events/s and x the plain loop of the same round"
    )
    lines.append(f"  (the generator alone: {1 / generated:,.0f} events/s in this process; the jobs replay its events)")
    header = (
        f"{'query':<6}{'loop ev/s':>11}{'p=1 run':>10}{'x':>6}{'p=1 wall':>10}{'x':>6}"
        f"{'p=2 run':>10}{'x':>6}{'p=2 wall':>10}{'x':>6}{'PyFlink p=2':>12}{'x':>7}{'p2/PyF':>8}"
        f"{'SQL wall':>10}{'rows':>9}  equal"
    )
    lines.append(header)
    for query in queries:
        s = secs[query]
        loop = _median(s["loop"])
        cells = f"{query:<6}{n / loop:>11,.0f}"
        for key in ("p1", "p1 wall", "p2", "p2 wall"):
            ratio = _median([a / b for a, b in zip(s["loop"], s[key])])
            cells += f"{n / _median(s[key]):>10,.0f}{ratio:>5.2f}x"
        if query in pyflink:
            run_s = pyflink[query][0]
            cells += f"{n / run_s:>12,.0f}{loop / run_s:>6.3f}x{run_s / _median(s['p2']):>7.1f}x"
        else:
            cells += f"{'-':>12}{'-':>7}{'-':>8}"
        cells += f"{n / sql[query]:>10,.0f}" if query in sql else f"{'-':>10}"
        same, rows = equal[query]
        cells += f"{rows:>9,}  {'yes' if same else 'NO'}"
        lines.append(cells)
    if not pyflink:
        lines.append(f"PyFlink column skipped: {pyflink_reason}")
    else:
        if pyflink_reason:
            lines.append(f"PyFlink: {pyflink_reason}")
        lines.append(
            "PyFlink: its job's net runtime (its Python workers' start included), one run per query at p=2 "
            "(x: vs the median loop; p2/PyF: PyFlink's time over raylink's p=2 run)"
        )
    if not sql:
        lines.append(f"Flink SQL column skipped: {sql_reason}")
    else:
        lines.append("SQL wall: Flink's SQL on the JVM, BATCH mode, JVM start and planning included (for scale)")
    return "\n".join(lines)


def cached_events(config: Any) -> List[Any]:
    """``config``'s events, generated once and kept in the temp folder for the next runs."""
    import hashlib
    import pickle

    from raylink.bench.nexmark import events

    digest = hashlib.sha256(repr(config).encode()).hexdigest()[:16]
    path = os.path.join(tempfile.gettempdir(), f"raylink-nexmark-events-{digest}.pickle")
    try:
        with open(path, "rb") as data:
            evs = pickle.load(data)
        if len(evs) == config.events:
            return evs
    except (OSError, EOFError, pickle.UnpicklingError):
        pass
    evs = events(config.events, config)
    with open(path + ".tmp", "wb") as out:
        pickle.dump(evs, out, protocol=pickle.HIGHEST_PROTOCOL)
    os.replace(path + ".tmp", path)
    return evs


def _write_tuples(evs: List[Any], path: str) -> None:
    """The events as nested tuples (PyFlink's workers have no raylink ``Row``): same values."""
    import pickle

    plain = [tuple(tuple(part) if part is not None and not isinstance(part, int) else part for part in e) for e in evs]
    with open(path, "wb") as out:
        pickle.dump(plain, out, protocol=pickle.HIGHEST_PROTOCOL)


def main(argv: Optional[list] = None) -> None:
    from raylink.bench.nexmark.loops import LOOPS

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=50_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--rate", type=int, default=1000, help="events per second of event time")
    parser.add_argument("--queries", default=",".join(sorted(LOOPS, key=lambda q: int(q[1:]))))
    parser.add_argument("--target", choices=("ray", "local"), default="ray")
    parser.add_argument("--pyflink-python", default=PYFLINK_PYTHON, help="'' to skip the PyFlink column")
    parser.add_argument("--pyflink-queries", default="", help="the queries PyFlink runs (default: all)")
    parser.add_argument("--sql", default="", metavar="FLINK_LIB", help="Flink's jars (e.g. PyFlink's pyflink/lib)")
    parser.add_argument("--nexmark", default="", help="a checkout of github.com/nexmark/nexmark (for --sql)")
    args = parser.parse_args(argv)
    queries = [q for q in args.queries.split(",") if q]
    unknown = [q for q in queries if q not in LOOPS]
    if unknown:
        parser.error(f"--queries: no loop for {', '.join(unknown)} (known: {', '.join(LOOPS)})")
    print(
        run(
            args.events,
            queries,
            args.repeat,
            args.rate,
            args.target,
            args.pyflink_python,
            args.sql,
            args.nexmark,
            [q for q in args.pyflink_queries.split(",") if q] or None,
        ),
        flush=True,
    )


if __name__ == "__main__":
    main()
