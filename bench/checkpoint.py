"""What checkpoints cost, on Ray: the word count with and without checkpoints (same run,
interleaved), the duration of a checkpoint of 1 M keys of keyed state, and recovery time
(SIGKILL of a TaskExecutor process -> every task RUNNING again from the checkpoint).

The word count is the program as people write it (no declared types, ``reduce`` with a
Python function, default placement) — the baseline is the same job without checkpoints.

    python bench/checkpoint.py [--words 2000000] [--repeat 3] [--keys 1000000]
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import tempfile
import time
from typing import Optional

from raylink.bench.wordcount import WORDS_PER_LINE, discard, make_line, split, word_of


def add(a: tuple, b: tuple) -> tuple:
    return (a[0], a[1] + b[1])


def word_count(num_lines: int, checkpoint_dir: Optional[str]) -> float:
    """Seconds the tasks ran (the job's net runtime)."""
    from raylink.api import StreamExecutionEnvironment

    env = StreamExecutionEnvironment.get_execution_environment()
    if checkpoint_dir is not None:
        env.enable_checkpointing(1000)
        env.get_checkpoint_config().set_checkpoint_storage_dir(checkpoint_dir)
    (env.from_sequence(0, num_lines - 1).map(make_line).flat_map(split).key_by(word_of).reduce(add).add_sink(discard))
    result = env.execute("checkpointed word count" if checkpoint_dir else "word count")
    return result.net_runtime_ms / 1000


class DistinctKeys:
    """Emits ``count`` distinct keys once, then stays up (its job is cancelled)."""

    def __init__(self, count: int) -> None:
        self.count = count
        self.running = True

    def run(self, ctx) -> None:
        step = 10_000
        for lo in range(0, self.count, step):
            ctx.collect_batch([(k, 1) for k in range(lo, min(lo + step, self.count))])
        while self.running:
            time.sleep(0.05)  # idle source: nothing more to emit until cancelled

    def cancel(self) -> None:
        self.running = False


def state_checkpoint_and_recovery(keys: int, checkpoint_dir: str) -> dict:
    from raylink.actors.cluster import task_executor_pids
    from raylink.api import Configuration, StreamExecutionEnvironment

    conf = (
        Configuration()
        .set_string("restart-strategy.type", "fixed-delay")
        .set_string("restart-strategy.fixed-delay.delay", "0 ms")
        .set_integer("restart-strategy.fixed-delay.attempts", 3)
    )
    env = StreamExecutionEnvironment.get_execution_environment(conf)
    env.enable_checkpointing(2000)
    env.get_checkpoint_config().set_checkpoint_storage_dir(checkpoint_dir)
    (env.add_source(DistinctKeys(keys)).key_by(lambda kv: kv[0]).reduce(add).add_sink(discard))
    client = env.execute_async("1M keys")

    def keyed_records() -> int:
        return sum(m["numRecordsIn"] for m in client.get_metrics() if "Keyed" in m["task"] or "Reduce" in m["task"])

    deadline = time.monotonic() + 300
    while keyed_records() < keys and time.monotonic() < deadline:
        client.wait(0.2)
    completed = client.get_checkpoint_stats()["numberOfCompletedCheckpoints"]
    while client.get_checkpoint_stats()["numberOfCompletedCheckpoints"] <= completed + 1:
        client.wait(0.2)  # a checkpoint that started after every key was in state
    stats = client.get_checkpoint_stats()
    pid = task_executor_pids(client)[-1]
    killed = time.monotonic()
    os.kill(pid, signal.SIGKILL)
    while not (client.get_checkpoint_stats()["numRestarts"] >= 1 and client.get_job_status() == "RUNNING"):
        client.wait(0.01)
    running = time.monotonic() - killed
    while keyed_records() < 1:  # restored tasks report metrics again
        client.wait(0.01)
    client.cancel()
    client.wait(30)
    return {
        "checkpoint_s": stats["lastCheckpointDuration"] / 1000,
        "size": stats["lastCheckpointSize"],
        "recovery_s": running,
    }


def main(argv: Optional[list] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--words", type=int, default=2_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--keys", type=int, default=1_000_000)
    args = parser.parse_args(argv)
    num_lines = args.words // WORDS_PER_LINE

    from raylink.actors.cluster import ensure_ray, shutdown_ray

    ensure_ray()
    word_count(2000, None)  # warm up: worker processes, imports
    plain, checkpointed = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(max(1, args.repeat)):  # interleaved: a slow spell of the machine hits both
            plain.append(word_count(num_lines, None))
            checkpointed.append(word_count(num_lines, os.path.join(tmp, f"wc-{i}")))
        state = state_checkpoint_and_recovery(args.keys, os.path.join(tmp, "keys"))
    base, chk = statistics.median(plain), statistics.median(checkpointed)
    words = num_lines * WORDS_PER_LINE
    print(
        f"word count, {words:,} words (untyped, reduce with a Python function, default placement); "
        f"medians of {len(plain)} interleaved runs"
    )
    print(f"{'variant':<52}{'seconds':>9}{'words/s':>14}{'vs baseline':>13}")
    print(f"{'no checkpoints (baseline)':<52}{base:>9.2f}{words / base:>14,.0f}{1.0:>12.2f}x")
    print(f"{'checkpoint every 1 s':<52}{chk:>9.2f}{words / chk:>14,.0f}{base / chk:>12.2f}x")
    print(
        f"checkpoint of {args.keys:,} keys of keyed state: {state['checkpoint_s']:.2f} s, {state['size'] / 1e6:.1f} MB"
    )
    print(f"recovery (SIGKILL of a TaskExecutor -> all tasks RUNNING from the checkpoint): {state['recovery_s']:.2f} s")
    shutdown_ray()


if __name__ == "__main__":
    main()
