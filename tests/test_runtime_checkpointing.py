"""Checkpoints and failover end to end: a keyed rolling count into the exactly-once
FileSink survives failures — a user function failing once (both targets) and TaskExecutor
worker processes SIGKILLed on a real local Ray — and the visible part files hold every
expected rolling count exactly once, as a failure-free run computed in the test does."""

from __future__ import annotations

import os
import signal as os_signal
import time
from collections import Counter

import pytest

from raylink.api import CheckpointedFunction, CheckpointingMode, Encoder, FileSink, OutputFileConfig, RollingPolicy
from raylink.api.functions import CoMapFunction, MapFunction, SourceFunction
from raylink.bench.failover import KEYS, committed_lines, reference
from raylink.tests.runtime_jobs import make_env, wait_for

N = 6000


def expected_counts(n: int = N) -> Counter:
    """The rolling counts of a failure-free run, computed here without raylink."""
    return reference(n)


class Paced(MapFunction):
    """1 ms every 2 records (the job runs for a few seconds); on its first attempt it fails
    once at ``fail_at`` (0: never). With ``after_checkpoint``, subtask 0 fails instead at its
    first record after both its ``fail_at // 2``-th record and a completed checkpoint: a job that
    must restore from a checkpoint does not depend on the machine's speed for having one."""

    def __init__(self, fail_at: int = 0, after_checkpoint: bool = False) -> None:
        self.fail_at = fail_at
        self.after_checkpoint = after_checkpoint
        self.attempt = 0
        self.subtask = 0
        self.seen = 0
        self.checkpointed = False

    def open(self, runtime_context) -> None:
        self.attempt = runtime_context.get_attempt_number()
        self.subtask = runtime_context.get_index_of_this_subtask()

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        self.checkpointed = True

    def map(self, value):
        if value % 2 == 0:
            time.sleep(0.001)  # pacing: the workload, not a wait
        self.seen += 1
        if self.attempt == 0 and self.fail_at:
            if self.after_checkpoint:
                fail = self.subtask == 0 and self.checkpointed and self.seen >= self.fail_at // 2
            else:
                fail = value == self.fail_at
            if fail:
                raise RuntimeError(f"injected failure at record {value}")
        return value


def add_counts(a, b):
    return (a[0], a[1] + b[1])


def build(env, out_dir, fail_at: int = 0, n: int = N, after_checkpoint: bool = False):
    sink = (
        FileSink.for_row_format(str(out_dir), Encoder.simple_string_encoder())
        .with_output_file_config(OutputFileConfig.builder().with_part_prefix("part").build())
        .with_rolling_policy(RollingPolicy.on_checkpoint_rolling_policy())
        .build()
    )
    (
        env.from_sequence(1, n)
        .map(Paced(fail_at, after_checkpoint))
        .map(lambda v: (v % KEYS, 1))
        .key_by(lambda kv: kv[0])
        .reduce(add_counts)
        .map(lambda kv: f"{kv[0]},{kv[1]}")
        .sink_to(sink)
    )


def checkpointing_env(target, parallelism, tmp_path, **extra):
    conf = {
        "execution.checkpointing.interval": "300 ms",
        "execution.checkpointing.dir": str(tmp_path / "checkpoints"),
        "restart-strategy.type": "fixed-delay",
        "restart-strategy.fixed-delay.attempts": 25,
        "restart-strategy.fixed-delay.delay": "200 ms",
    }
    conf.update(extra)
    return make_env(target, parallelism, conf)


@pytest.mark.timeout(180)
def test_a_failing_function_restarts_from_the_checkpoint_and_the_output_is_exactly_once(
    target, tmp_path, state_backend
):
    env = make_env(target, 2, {"restart-strategy.type": "fixed-delay", "restart-strategy.fixed-delay.delay": "200 ms"})
    env.enable_checkpointing(300, CheckpointingMode.EXACTLY_ONCE)  # PyFlink's API for the same keys
    env.get_checkpoint_config().set_checkpoint_storage_dir(str(tmp_path / "checkpoints"))
    out = tmp_path / "out"
    build(env, out, fail_at=N // 3, after_checkpoint=True)
    client = env.execute_async()
    assert client.wait(150), "the job did not finish"
    result = client.get_job_execution_result(1)
    stats = client.get_checkpoint_stats()
    assert stats["numRestarts"] == 1
    assert stats["numberOfCompletedCheckpoints"] >= 1
    assert stats["lastRestoredCheckpointId"] is not None
    per_subtask = stats["lastCheckpointSubtasks"]  # the subtasks that took part in the last one
    assert per_subtask and set(per_subtask) <= {ev.name for ev in client.executions.values()}
    assert all({"sync_ms", "async_ms", "alignment_ms", "size"} <= set(s) for s in per_subtask.values())
    got = committed_lines(out)
    want = expected_counts()
    assert got == want, (sum(got.values()), sum(want.values()), len(set(got) - set(want)))
    assert result.job_name


@pytest.mark.timeout(120)
def test_without_checkpointing_the_default_is_no_restart(target, tmp_path):
    env = make_env(target, 1)
    build(env, tmp_path / "out", fail_at=100)
    client = env.execute_async()
    assert client.wait(60)
    assert client.get_job_status() == "FAILED"
    assert client.get_checkpoint_stats()["numRestarts"] == 0


def executor_pids(client) -> list[int]:
    import ray

    return [ray.get(h.location.remote(), timeout=10)["pid"] for h in client.handles.values()]


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_sigkilled_task_executors_on_ray_lose_nothing_and_duplicate_nothing(ray_session, tmp_path):
    """TaskExecutor worker processes are SIGKILLed three times while the job runs; after each
    the job restores from its latest checkpoint; the committed output equals the reference."""
    env = checkpointing_env("ray", 2, tmp_path)
    out = tmp_path / "out"
    n = 4 * N
    build(env, out, n=n)
    client = env.execute_async()
    kills = 0
    for round_ in range(3):
        completed_before = client.get_checkpoint_stats()["numberOfCompletedCheckpoints"]
        wait_for(
            lambda: (
                client.get_job_status() == "RUNNING"
                and client.get_checkpoint_stats()["numberOfCompletedCheckpoints"] > completed_before
            ),
            client,
            timeout=120,
        )
        if client.wait(0):
            break
        pids = executor_pids(client)
        os.kill(pids[round_ % len(pids)], os_signal.SIGKILL)
        kills += 1
        assert wait_for(
            lambda: client.get_checkpoint_stats()["numRestarts"] >= kills or client.wait(0), client, timeout=120
        )
    assert client.wait(300), "the job did not finish"
    assert client.get_job_status() == "FINISHED", client.get_job_status()
    assert client.get_checkpoint_stats()["numRestarts"] == kills >= 2
    assert committed_lines(out) == expected_counts(n)


class LockHolder(MapFunction):
    """Keeps a lock in its checkpointed operator state: the state cannot be serialised."""

    def initialize_state(self, context):
        from raylink.api.state import ListStateDescriptor

        self.state = context.get_operator_state_store().get_list_state(ListStateDescriptor("locks"))

    def snapshot_state(self, context):
        import threading

        self.state.update([threading.Lock()])

    def map(self, value):
        return value


@pytest.mark.timeout(120)
def test_state_that_cannot_be_serialised_declines_the_checkpoint_naming_the_operator(target, tmp_path):
    env = checkpointing_env(target, 1, tmp_path, **{"restart-strategy.type": "none"})
    env.from_sequence(1, 10**9).map(Paced()).map(LockHolder()).name("holds a lock").add_sink(lambda v: None)
    client = env.execute_async()
    assert client.wait(60), "the job should fail once the checkpoint is declined"
    assert client.get_job_status() == "FAILED"
    with pytest.raises(Exception) as info:
        client.get_job_execution_result(1)
    message = str(info.value)
    assert "tolerable-failed-checkpoints" in message
    assert "holds a lock" in message and "cannot be serialised" in message
    assert client.get_checkpoint_stats()["numberOfFailedCheckpoints"] >= 1


def test_checkpoint_storage_that_is_not_writable_fails_at_submission_naming_it(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    env = checkpointing_env("local", 1, tmp_path, **{"execution.checkpointing.dir": str(blocker / "chk")})
    env.from_sequence(1, 10).add_sink(lambda v: None)
    with pytest.raises(Exception) as info:
        env.execute_async()
    assert "a-file" in str(info.value)


NODE_LOSS_SCRIPT = """
import json, sys, time
import ray
from ray.cluster_utils import Cluster
from raylink.tests.test_runtime_checkpointing import build, checkpointing_env, committed_lines, expected_counts, N
from pathlib import Path

tmp = Path(sys.argv[1])
cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
worker = cluster.add_node(num_cpus=1)
cluster.wait_for_nodes()
ray.init(address=cluster.address)
report = {}
try:
    env = checkpointing_env("ray", 2, tmp)
    build(env, tmp / "out", n=4 * N)
    client = env.execute_async("node loss")
    report["nodes"] = len({loc["node_id"] for loc in client.locations.values()})
    deadline = time.monotonic() + 120
    while client.get_checkpoint_stats()["numberOfCompletedCheckpoints"] < 1 and time.monotonic() < deadline:
        client.wait(0.05)
    cluster.remove_node(worker)
    report["finished"] = client.wait(240)
    report["status"] = client.get_job_status()
    report["restarts"] = client.get_checkpoint_stats()["numRestarts"]
    report["exactly_once"] = committed_lines(tmp / "out") == expected_counts(4 * N)
finally:
    print(json.dumps(report))
    ray.shutdown()
    cluster.shutdown()
"""


@pytest.mark.slow
@pytest.mark.timeout(400)
@pytest.mark.multinode
def test_a_lost_ray_node_fails_over_to_the_remaining_one_exactly_once(tmp_path):
    import json
    import subprocess
    import sys

    script = tmp_path / "node_loss.py"
    script.write_text(NODE_LOSS_SCRIPT)
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS",) and not k.startswith("RAYLINK_")}
    proc = subprocess.run(
        [sys.executable, str(script), str(tmp_path)], capture_output=True, text=True, timeout=380, env=env
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["nodes"] == 2, report
    assert report["finished"] and report["status"] == "FINISHED", report
    assert report["restarts"] >= 1, report
    assert report["exactly_once"], report


class UnevenCounter(SourceFunction, CheckpointedFunction):
    """Subtask 0 emits 400 records, subtask 1 3,000 (paced): one source finishes long before the
    other. Its position is operator state, emitted and updated under the checkpoint lock."""

    def __init__(self) -> None:
        self.running = True
        self.next = 0
        self.index = 0

    def open(self, runtime_context) -> None:
        self.index = runtime_context.get_index_of_this_subtask()

    def initialize_state(self, context) -> None:
        from raylink.api.state import ListStateDescriptor

        self.state = context.get_operator_state_store().get_list_state(ListStateDescriptor("next"))
        restored = self.state.get()
        self.next = restored[0] if restored else 0

    def snapshot_state(self, context) -> None:
        self.state.update([self.next])

    def run(self, ctx) -> None:
        count = 400 if self.index == 0 else 3000
        lock = ctx.get_checkpoint_lock()
        while self.running and self.next < count:
            with lock:
                ctx.collect((self.index, self.next))
                self.next += 1
            if self.next % 2 == 0:
                time.sleep(0.001)  # pacing: the workload

    def cancel(self) -> None:
        self.running = False


class FailOnce(MapFunction):
    def open(self, runtime_context) -> None:
        self.attempt = runtime_context.get_attempt_number()

    def map(self, value):
        if value == (1, 2000) and self.attempt == 0:
            raise RuntimeError("injected failure after the short source finished")
        return value


@pytest.mark.timeout(180)
@pytest.mark.parametrize("fail", [False, True], ids=["no-failure", "failure-after-one-source-ended"])
def test_final_checkpoints_let_uneven_sources_finish_exactly_once(target, tmp_path, fail):
    """Flink 2's final checkpoint: a source that ends waits for a checkpoint that holds its end,
    then finishes; later checkpoints carry its state, so a restore does not replay it."""
    env = checkpointing_env(target, 2, tmp_path)
    out = tmp_path / "out"
    sink = FileSink.for_row_format(str(out), Encoder.simple_string_encoder()).build()
    stream = env.add_source(UnevenCounter(), "uneven")
    if fail:
        stream = stream.map(FailOnce())
    (
        stream.map(lambda r: (r[0], 1))
        .key_by(lambda kv: kv[0])
        .reduce(add_counts)
        .map(lambda kv: f"{kv[0]},{kv[1]}")
        .sink_to(sink)
    )
    client = env.execute_async()
    assert client.wait(150), "the job did not finish"
    assert client.get_job_status() == "FINISHED", client.get_job_status()
    stats = client.get_checkpoint_stats()
    assert stats["numRestarts"] == (1 if fail else 0)
    want = Counter([f"0,{i}" for i in range(1, 401)] + [f"1,{i}" for i in range(1, 3001)])
    assert committed_lines(out) == want


class AlwaysFails(MapFunction):
    def map(self, value):
        raise RuntimeError("this function always fails")


@pytest.mark.timeout(120)
def test_when_the_strategy_gives_up_the_job_fails_with_the_cause_and_the_restart_count(target, tmp_path):
    env = checkpointing_env(
        target,
        1,
        tmp_path,
        **{"restart-strategy.fixed-delay.attempts": 2, "restart-strategy.fixed-delay.delay": "50 ms"},
    )
    env.from_sequence(1, 100).map(AlwaysFails()).add_sink(lambda v: None)
    client = env.execute_async()
    assert client.wait(90)
    assert client.get_job_status() == "FAILED"
    with pytest.raises(Exception) as info:
        client.get_job_execution_result(1)
    assert "after 2 restarts" in str(info.value) and "this function always fails" in str(info.value)


class Tag(CoMapFunction):
    """Two-input (co-map) side: tags each record with its input."""

    def map1(self, value):
        return ("a", value)

    def map2(self, value):
        return ("b", value)


@pytest.mark.timeout(180)
def test_a_two_input_task_aligns_barriers_across_both_inputs_exactly_once(target, tmp_path):
    """connect + CoMap (a two-input task, barriers aligned over both gates), a failure, a restore:
    the committed rolling counts per input equal the reference."""
    env = checkpointing_env(target, 2, tmp_path)
    out = tmp_path / "out"
    sink = FileSink.for_row_format(str(out), Encoder.simple_string_encoder()).build()
    left = env.from_sequence(1, 3000).map(Paced())
    right = env.from_sequence(1, 2000).map(Paced(fail_at=1500))
    (
        left.connect(right)
        .map(Tag())
        .map(lambda kv: (kv[0], 1))
        .key_by(lambda kv: kv[0])
        .reduce(add_counts)
        .map(lambda kv: f"{kv[0]},{kv[1]}")
        .sink_to(sink)
    )
    client = env.execute_async()
    assert client.wait(150), "the job did not finish"
    assert client.get_job_status() == "FINISHED", client.get_job_status()
    assert client.get_checkpoint_stats()["numRestarts"] == 1
    want = Counter([f"a,{i}" for i in range(1, 3001)] + [f"b,{i}" for i in range(1, 2001)])
    assert committed_lines(out) == want
