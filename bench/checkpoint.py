"""What checkpoints cost, on Ray: the word count with and without checkpoints (same run,
interleaved), the duration of a checkpoint of 1 M keys of keyed state and how long it paused
the keyed task (the synchronous phase, the longest of any subtask), and recovery time
from the checkpoint of those keys after a SIGKILL of a TaskExecutor process, ``--kills``
times in one job: until the job status says RUNNING again, and until the restored keyed
task emits its first record (its 1 M keys loaded; ``bench/recovery.py``), medians.

The word count is the program as people write it (no declared types, ``reduce`` with a
Python function, default placement) — the baseline is the same job without checkpoints.

Aligned vs unaligned checkpoints under back pressure: a keyed job (p=2) whose sink end is
slow, so its source task is back-pressured (its ``backPressuredTimeMsPerSecond``, shown) and
the keyed exchange is full; the in-flight data is varied through the buffer debloating target
(``taskmanager.network.memory.buffer-debloat.target``: how long the data buffered before a
task takes it to process). Each row is the median duration of ``--checkpoints`` checkpoints;
"queued MB" is what was sent and not yet read when they completed, "persisted MB" what an
unaligned checkpoint wrote of it as channel state. The last row starts aligned and
switches to unaligned 200 ms into a checkpoint (``aligned-checkpoint-timeout``). The baseline ("time to write the state") is the same
job with a sink that is not slowed: nothing queues, a checkpoint is its state's write. An
aligned checkpoint waits until the barrier has passed the queued data; an unaligned one
overtakes it and writes it.

    python bench/checkpoint.py [--words 2000000] [--repeat 3] [--keys 1000000] [--kills 3]
    python bench/checkpoint.py --only back-pressure [--checkpoints 3]
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import tempfile
import time
from typing import Optional

from raylink.api.functions import MapFunction
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


PAYLOAD = "x" * 100  # ~100-byte records: the queued bytes are not millions of tiny records


def keyed_record(v: int) -> tuple:
    return (v % 64, PAYLOAD)


def first_field(kv: tuple) -> int:
    return kv[0]


def keep_last(a: tuple, b: tuple) -> tuple:
    return b


class SlowEnd(MapFunction):
    """The sink end: 1 ms every ``every`` records (0: not slowed) — the workload, not a wait."""

    def __init__(self, every: int) -> None:
        self.every = every
        self.seen = 0

    def map(self, value):
        self.seen += 1
        if self.every and self.seen % self.every == 0:
            time.sleep(0.001)
        return value


def checkpoints_under_back_pressure(
    unaligned: bool, target_ms: int, slow_every: int, checkpoints: int, timeout_ms: int = 0
) -> dict:
    """Median checkpoint duration (s) of the keyed job, the in-flight bytes an unaligned one
    persisted, the source task's back pressure (ms/s) and the slowest subtask's state write
    (sync + async ms) while it ran."""
    from raylink.api import Configuration, StreamExecutionEnvironment

    conf = (
        Configuration()
        .set_string("taskmanager.network.memory.buffer-debloat.target", f"{target_ms} ms")
        .set_string("execution.checkpointing.timeout", "10 min")
        .set_boolean("execution.checkpointing.unaligned.enabled", unaligned)
        .set_string("execution.checkpointing.aligned-checkpoint-timeout", f"{timeout_ms} ms")
    )
    env = StreamExecutionEnvironment.get_execution_environment(conf)
    env.set_parallelism(2)
    env.enable_checkpointing(200)
    with tempfile.TemporaryDirectory() as tmp:
        env.get_checkpoint_config().set_checkpoint_storage_dir(tmp)
        (
            env.from_sequence(0, 10**10)
            .map(keyed_record)
            .key_by(first_field)
            .reduce(keep_last)
            .map(SlowEnd(slow_every))
            .add_sink(discard)
        )
        client = env.execute_async("checkpoints under back pressure" if slow_every else "checkpoints, no back pressure")
        durations, persisted, pressure, writes, queued = [], [], [], [], []
        try:
            started = time.monotonic()
            while time.monotonic() < started + 60:  # the exchange fills up (not slowed: the job warms up)
                back = source_back_pressure(client)
                ready = back is not None and back >= 900 if slow_every else time.monotonic() > started + 3
                if ready or client.wait(0.2):
                    break
            seen = client.get_checkpoint_stats()["numberOfCompletedCheckpoints"] + 1  # one already under way
            deadline = time.monotonic() + 600
            while len(durations) < checkpoints and time.monotonic() < deadline:
                if client.wait(0.05):
                    raise RuntimeError(f"the job ended: {client.get_job_status()}")
                stats = client.get_checkpoint_stats()
                if stats["numberOfCompletedCheckpoints"] > seen:
                    seen = stats["numberOfCompletedCheckpoints"]
                    durations.append(stats["lastCheckpointDuration"] / 1000)
                    persisted.append(stats.get("lastCheckpointPersistedData") or 0)
                    subtasks = stats.get("lastCheckpointSubtasks", {}).values()
                    writes.append(max((s.get("sync_ms", 0.0) + s.get("async_ms", 0.0) for s in subtasks), default=0.0))
                    pressure.append(source_back_pressure(client) or 0.0)
                    queued.append(bytes_in_flight(client))
        finally:
            client.cancel()
            client.wait(60)
    return {
        "checkpoint_s": statistics.median(durations),
        "in_flight": statistics.median(persisted),
        "back_pressure": statistics.median(pressure),
        "write_ms": statistics.median(writes),
        "queued": statistics.median(queued),
    }


def bytes_in_flight(client) -> int:
    """Bytes the tasks sent and no task has read yet: queued in subpartitions, in transit and in
    input channels (every task's numBytesOut minus every task's numBytesIn)."""
    metrics = client.get_metrics()
    return sum(m.get("numBytesOut", 0) for m in metrics) - sum(m.get("numBytesIn", 0) for m in metrics)


def source_back_pressure(client) -> Optional[float]:
    """The source task's back-pressured ms per second (the slowest of its subtasks), or None."""
    values = [m.get("backPressuredTimeMsPerSecond") for m in client.get_metrics() if m["task"].startswith("Source")]
    values = [v for v in values if v is not None]
    return min(values) if values else None


DEBLOAT_TARGETS_MS = (250, 1000, 4000)  # taskmanager.network.memory.buffer-debloat.target
ALIGNED_TIMEOUT_MS = 200  # execution.checkpointing.aligned-checkpoint-timeout of the last row


def back_pressure_table(checkpoints: int) -> str:
    """Aligned vs unaligned checkpoints of the back-pressured keyed job, next to the baseline."""
    slow = 10  # 1 ms per 10 records at the sink end: far below what the source offers
    base = checkpoints_under_back_pressure(False, DEBLOAT_TARGETS_MS[1], 0, checkpoints)
    rows = [("sink not slowed, aligned (baseline: the state's write)", base)]
    for target in DEBLOAT_TARGETS_MS:
        rows.append(
            (f"aligned, debloat target {target} ms", checkpoints_under_back_pressure(False, target, slow, checkpoints))
        )
        rows.append(
            (f"unaligned, debloat target {target} ms", checkpoints_under_back_pressure(True, target, slow, checkpoints))
        )
    timed = checkpoints_under_back_pressure(True, DEBLOAT_TARGETS_MS[-1], slow, checkpoints, ALIGNED_TIMEOUT_MS)
    rows.append((f"aligned, unaligned after {ALIGNED_TIMEOUT_MS} ms, target {DEBLOAT_TARGETS_MS[-1]} ms", timed))
    lines = [
        f"checkpoints under back pressure (keyed job, p=2, Ray; medians of {checkpoints} checkpoints each)",
        f"{'variant':<56}{'source bp ms/s':>15}{'queued MB':>11}{'persisted MB':>14}{'checkpoint s':>14}"
        f"{'vs baseline':>13}",
    ]
    for label, r in rows:
        lines.append(
            f"{label:<56}{r['back_pressure']:>15.0f}{r['queued'] / 1e6:>11.2f}{r['in_flight'] / 1e6:>14.2f}"
            f"{r['checkpoint_s']:>14.3f}{r['checkpoint_s'] / base['checkpoint_s']:>12.2f}x"
        )
    lines.append(
        "queued MB: sent and not yet read when a checkpoint completed (numBytesOut - numBytesIn over all tasks); "
        "persisted MB: the in-flight data an unaligned checkpoint wrote as channel state"
    )
    return "\n".join(lines)


def main(argv: Optional[list] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--words", type=int, default=2_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--keys", type=int, default=1_000_000)
    parser.add_argument("--kills", type=int, default=3, help="recoveries measured (one job, one kill each)")
    parser.add_argument("--checkpoints", type=int, default=3, help="checkpoints per row of the back-pressure table")
    parser.add_argument("--only", choices=("back-pressure",), help="run only that part")
    args = parser.parse_args(argv)
    num_lines = args.words // WORDS_PER_LINE

    from raylink.actors.cluster import ensure_ray, shutdown_ray
    from raylink.bench.recovery import recovery_table

    ensure_ray()
    if args.only == "back-pressure":
        print(back_pressure_table(max(1, args.checkpoints)))
        shutdown_ray()
        return
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
    print()
    print(back_pressure_table(max(1, args.checkpoints)))
    shutdown_ray()


if __name__ == "__main__":
    main()
