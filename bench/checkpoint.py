"""What checkpoints cost, on Ray: the word count with and without checkpoints (same run,
interleaved), the duration of a checkpoint of 1 M keys of keyed state and how long it paused
the keyed task (the synchronous phase, the longest of any subtask), and recovery time
from the checkpoint of those keys after a SIGKILL of a TaskExecutor process, ``--kills``
times in one job: until the job status says RUNNING again, and until the restored keyed
task emits its first record (its 1 M keys loaded; ``bench/recovery.py``), medians.

The word count is the program as people write it (no declared types, ``reduce`` with a
Python function, default placement) — the baseline is the same job without checkpoints.

    python bench/checkpoint.py [--words 2000000] [--repeat 3] [--keys 1000000] [--kills 3]
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


def state_checkpoint_and_recovery(keys: int, checkpoint_dir: str, kills: int) -> dict:
    """A job holding ``keys`` keys: the duration and size of its checkpoints, and ``kills``
    recoveries from them. After each restore the state holds every key again and the source
    emits them all once more (it keeps no position); each kill waits for a checkpoint that
    started after the keys went through."""
    from raylink.actors.cluster import task_executor_pids
    from raylink.api import Configuration, StreamExecutionEnvironment
    from raylink.bench.recovery import FirstRecordAfterRestore, wait_first_record

    conf = (
        Configuration()
        .set_string("restart-strategy.type", "fixed-delay")
        .set_string("restart-strategy.fixed-delay.delay", "0 ms")
        .set_integer("restart-strategy.fixed-delay.attempts", kills + 2)
    )
    env = StreamExecutionEnvironment.get_execution_environment(conf)
    env.enable_checkpointing(2000)
    env.get_checkpoint_config().set_checkpoint_storage_dir(checkpoint_dir)
    probe = os.path.join(checkpoint_dir, "first-records")
    os.makedirs(probe)
    (
        env.add_source(DistinctKeys(keys))
        .key_by(lambda kv: kv[0])
        .reduce(add)
        .map(FirstRecordAfterRestore(probe))
        .add_sink(discard)
    )
    client = env.execute_async("1M keys")

    def keyed_records() -> int:
        return sum(m["numRecordsIn"] for m in client.get_metrics() if "Keyed" in m["task"] or "Reduce" in m["task"])

    durations, sizes, paused, running, first = [], [], [], [], []
    try:
        for _ in range(kills):
            deadline = time.monotonic() + 300
            while keyed_records() < keys and time.monotonic() < deadline and not client.wait(0.2):
                pass  # every key went through the keyed task (after a restore: the state has them already)
            completed = client.get_checkpoint_stats()["numberOfCompletedCheckpoints"]
            while client.get_checkpoint_stats()["numberOfCompletedCheckpoints"] <= completed + 1:
                if client.wait(0.2):
                    raise RuntimeError(f"the job ended: {client.get_job_status()}")
            stats = client.get_checkpoint_stats()  # a checkpoint that started after every key was in state
            durations.append(stats["lastCheckpointDuration"] / 1000)
            sizes.append(stats["lastCheckpointSize"])
            subtasks = stats.get("lastCheckpointSubtasks", {}).values()
            paused.append(max((s.get("sync_ms", 0.0) for s in subtasks), default=0.0) / 1000)
            pid = task_executor_pids(client)[-1]
            restarts = stats["numRestarts"]  # = the attempt number running now
            killed = time.time()  # wall time: the probe's clock in the TaskExecutor processes
            os.kill(pid, signal.SIGKILL)
            while not (
                client.get_checkpoint_stats()["numRestarts"] > restarts and client.get_job_status() == "RUNNING"
            ):
                if client.wait(0.01):
                    raise RuntimeError(f"the job ended: {client.get_job_status()}")
            running.append(time.time() - killed)
            first_record = wait_first_record(probe, restarts, lambda: client.wait(0))
            if first_record is not None:
                first.append(first_record - killed)
    finally:
        client.cancel()
        client.wait(30)
    return {
        "checkpoint_s": statistics.median(durations),
        "size": statistics.median(sizes),
        "paused_s": statistics.median(paused),
        "running_s": running,
        "first_record_s": first,
    }


def main(argv: Optional[list] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--words", type=int, default=2_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--keys", type=int, default=1_000_000)
    parser.add_argument("--kills", type=int, default=3, help="recoveries measured (one job, one kill each)")
    args = parser.parse_args(argv)
    num_lines = args.words // WORDS_PER_LINE

    from raylink.actors.cluster import ensure_ray, shutdown_ray
    from raylink.bench.recovery import recovery_table

    ensure_ray()
    word_count(2000, None)  # warm up: worker processes, imports
    plain, checkpointed = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(max(1, args.repeat)):  # interleaved: a slow spell of the machine hits both
            plain.append(word_count(num_lines, None))
            checkpointed.append(word_count(num_lines, os.path.join(tmp, f"wc-{i}")))
        state = state_checkpoint_and_recovery(args.keys, os.path.join(tmp, "keys"), max(1, args.kills))
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
        f"checkpoint of {args.keys:,} keys of keyed state: {state['checkpoint_s']:.2f} s, {state['size'] / 1e6:.1f} MB, "
        f"the task paused {state['paused_s']:.3f} s for it (its synchronous phase; median of {len(state['running_s'])})"
    )
    print()
    print(
        recovery_table(
            f"recovery from that checkpoint after a SIGKILL of a TaskExecutor, medians of {len(state['running_s'])} kills",
            state["running_s"],
            state["first_record_s"],
        )
    )
    shutdown_ray()


if __name__ == "__main__":
    main()
