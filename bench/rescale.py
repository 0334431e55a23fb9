"""Rescaling a running keyed job on a real local Ray: 2 -> 4 -> 2 with ``JobClient.rescale``
(FLIP-291, :mod:`raylink.runtime.job.rescaling`: an aligned checkpoint, the tasks redeployed at
the new parallelism from it, same job) against the baseline of doing it by hand as before
(``stop_with_savepoint``, then a new job from the savepoint at the new parallelism).

The job: a sequence of ``2 * keys`` numbers -> ``(v % keys, 1)`` -> keyed rolling count -> the
exactly-once FileSink, so every one of ``--keys`` keys (1 M) has state when the job is
rescaled. The first round of keys runs at full speed; the second is paced (2 ms every 10 records) until
the rescales are done, then released. Each step is timed from the request until the job runs
at the new parallelism (RUNNING) and until its first checkpoint after that completed (every
task restored its share of the state and runs); the committed output of each run is compared
with the rolling counts computed here (lost / duplicated lines). Runs alternate (rescale,
baseline, rescale, ...); the table quotes medians and the baseline's time over the rescale's.

    python bench/rescale.py [--keys 1000000] [--rounds 1] [--target ray|local]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from collections import Counter
from typing import Any, Callable, Optional

STEPS = ((2, 4), (4, 2))
POLL_S = 0.02


class Gate:
    """Passes the first ``keys`` numbers at full speed, then 2 ms every 10 records until
    ``release`` exists (checked every 100 records): the job runs while it is rescaled, then ends
    (a source's batch stays short, so a checkpoint's trigger waits little for it)."""

    def __init__(self, keys: int, release: str) -> None:
        self.keys = keys
        self.release = release
        self.released = False

    def __call__(self, value: int) -> int:
        if value > self.keys and not self.released:
            if value % 100 == 0:
                self.released = os.path.exists(self.release)
            if value % 10 == 0:
                time.sleep(0.002)  # pacing: the workload, not a wait
        return value


def add(a: tuple, b: tuple) -> tuple:
    return (a[0], a[1] + b[1])


def reference(keys: int) -> Counter:
    """The rolling counts of two rounds of ``keys`` keys: ``k,1`` and ``k,2`` for every key."""
    return Counter({f"{k},{c}": 1 for k in range(keys) for c in (1, 2)})


def committed(folders: list) -> Counter:
    from raylink.bench.failover import committed_lines

    total: Counter = Counter()
    for folder in folders:
        total.update(committed_lines(folder))
    return total


#: ``execution.target`` of the bench's jobs (``--target``)
TARGET = {"value": "ray"}


def start_job(keys: int, parallelism: int, folder: str, out: str, savepoint: Optional[str] = None) -> Any:
    from raylink.api import Configuration, Encoder, FileSink, RollingPolicy, StreamExecutionEnvironment

    conf = Configuration().set_string("execution.checkpointing.interval", "500 ms")
    conf.set_string("execution.target", TARGET["value"])
    conf.set_string("execution.checkpointing.dir", os.path.join(folder, "checkpoints"))
    conf.set_string("execution.checkpointing.timeout", "10 min")
    if savepoint:
        conf.set_string("execution.savepoint.path", savepoint)
    env = StreamExecutionEnvironment.get_execution_environment(conf)
    env.set_parallelism(parallelism)
    sink = (
        FileSink.for_row_format(out, Encoder.simple_string_encoder())
        .with_rolling_policy(RollingPolicy.on_checkpoint_rolling_policy())
        .build()
    )
    gate = Gate(keys, os.path.join(folder, "release"))
    (
        env.from_sequence(1, 2 * keys)
        .uid("numbers")
        .map(gate)
        .uid("gate")
        .map(lambda v: (v % keys, 1))
        .uid("pairs")
        .key_by(lambda kv: kv[0])
        .reduce(add)
        .uid("count")
        .map(lambda kv: f"{kv[0]},{kv[1]}")
        .uid("format")
        .sink_to(sink)
        .uid("files")
    )
    return env.execute_async("rescale bench")


def wait_until(condition: Callable[[], bool], client: Any, what: str, timeout: float = 900.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if client.wait(POLL_S) and not condition():
            raise RuntimeError(f"the job ended {client.get_job_status()} while waiting for {what}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"no {what} within {timeout:.0f} s")


def restored_and_checkpointed(client: Any) -> bool:
    """RUNNING with a checkpoint completed after the one it was restored from."""
    stats = client.get_checkpoint_stats()
    last, restored = stats.get("lastCheckpointId"), stats.get("lastRestoredCheckpointId")
    return client.get_job_status() == "RUNNING" and last is not None and restored is not None and last > restored


def first_round_done(client: Any, keys: int) -> bool:
    counted = sum(m.get("numRecordsIn", 0) for m in client.get_metrics() if "Reduce" in str(m.get("vertex_name")))
    return counted >= keys


def run_rescale(keys: int, folder: str) -> dict:
    from raylink.runtime.job.rescaling import rescaler_of

    out = os.path.join(folder, "out")
    client = start_job(keys, 2, folder, out)
    wait_until(lambda: first_round_done(client, keys), client, "the first round of keys")
    job_id, steps = client.job_id, []
    for _old, new in STEPS:
        started = time.monotonic()
        client.rescale({"count": new, "numbers": new}).result(900)
        running = time.monotonic() - started
        wait_until(lambda: restored_and_checkpointed(client), client, "a checkpoint after the rescale")
        steps.append((running, time.monotonic() - started, dict(rescaler_of(client).last_phases)))
    open(os.path.join(folder, "release"), "w").close()
    client.wait(900)
    got, want = committed([out]), reference(keys)
    return {
        "steps": steps,
        "status": str(client.get_job_status()),
        "same_job": client.job_id == job_id,
        "lost": sum((want - got).values()),
        "duplicated": sum((got - want).values()),
    }


def run_baseline(keys: int, folder: str) -> dict:
    outs = [os.path.join(folder, "out-0")]
    client = start_job(keys, 2, folder, outs[0])
    wait_until(lambda: first_round_done(client, keys), client, "the first round of keys")
    steps = []
    for index, (_old, new) in enumerate(STEPS, start=1):
        started = time.monotonic()
        path = client.stop_with_savepoint(False, os.path.join(folder, "savepoints")).result(900)
        client.wait(900)
        outs.append(os.path.join(folder, f"out-{index}"))
        client = start_job(keys, new, folder, outs[-1], savepoint=path)
        wait_until(lambda: client.get_job_status() == "RUNNING", client, "the new job")
        running = time.monotonic() - started
        wait_until(lambda: restored_and_checkpointed(client), client, "a checkpoint of the new job")
        steps.append((running, time.monotonic() - started, {}))
    open(os.path.join(folder, "release"), "w").close()
    client.wait(900)
    got, want = committed(outs), reference(keys)
    return {
        "steps": steps,
        "status": str(client.get_job_status()),
        "same_job": False,
        "lost": sum((want - got).values()),
        "duplicated": sum((got - want).values()),
    }


def table(keys: int, rescales: list, baselines: list) -> str:
    lines = [
        f"rescaling a keyed job with {keys:,} keys (medians of {len(rescales)} run(s) each; seconds)",
        f"{'step':<8} {'method':<26} {'to RUNNING':>11} {'to a checkpoint':>16} {'baseline / this':>16}"
        "  rescale's checkpoint / cancel / deploy (ms)",
    ]
    for index, (old, new) in enumerate(STEPS):
        medians = {}
        for name, runs in (("JobClient.rescale", rescales), ("stop-with-savepoint + job", baselines)):
            medians[name] = (
                statistics.median(r["steps"][index][0] for r in runs),
                statistics.median(r["steps"][index][1] for r in runs),
            )
        base = medians["stop-with-savepoint + job"][1]
        phases = {
            phase: int(statistics.median(r["steps"][index][2].get(phase, 0) for r in rescales))
            for phase in ("checkpoint", "cancel", "deploy")
        }
        for name, (running, checkpointed) in medians.items():
            ratio = f"{base / checkpointed:.2f}x" if checkpointed > 0 else "-"
            shown = " / ".join(str(phases[p]) for p in phases) if name == "JobClient.rescale" else ""
            lines.append(
                f"{f'{old} -> {new}':<8} {name:<26} {running:>11.2f} {checkpointed:>16.2f} {ratio:>16}  {shown}"
            )
    for name, runs in (("JobClient.rescale", rescales), ("stop-with-savepoint + job", baselines)):
        lost, duplicated = sum(r["lost"] for r in runs), sum(r["duplicated"] for r in runs)
        status = ", ".join(sorted({r["status"] for r in runs}))
        same = "same job id" if all(r["same_job"] for r in runs) else "new jobs"
        lines.append(f"{name}: lost {lost}, duplicated {duplicated} lines of {2 * keys:,} per run; {status}; {same}")
    return "\n".join(lines)


def main(argv: Optional[list] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--target", choices=("ray", "local"), default="ray", help="execution.target (ray)")
    args = parser.parse_args(argv)
    TARGET["value"] = args.target

    from raylink.actors.cluster import ensure_ray, shutdown_ray

    if args.target == "ray":
        ensure_ray()
    rescales, baselines = [], []
    try:
        for _ in range(args.rounds):  # interleaved
            with tempfile.TemporaryDirectory() as folder:
                rescales.append(run_rescale(args.keys, folder))
            with tempfile.TemporaryDirectory() as folder:
                baselines.append(run_baseline(args.keys, folder))
        print(f"execution.target = {args.target}")
        print(table(args.keys, rescales, baselines))
    finally:
        if args.target == "ray":
            shutdown_ray()


if __name__ == "__main__":
    main()
