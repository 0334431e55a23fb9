"""Unaligned checkpoints on a real local Ray: a keyed rolling count whose sink end is slow (the
exchange before it is back-pressured, so buffers are in flight in the producers' subpartitions and
in the consumers' credit-based channels) takes unaligned checkpoints that persist those buffers;
TaskExecutor processes are SIGKILLed after such checkpoints completed, the job restores from them
(in-flight data replayed, not re-read from the source), and the exactly-once FileSink's committed
output equals a failure-free run computed in the test."""

from __future__ import annotations

import os
import signal as os_signal
import time

import pytest

from raylink.api import Encoder, FileSink, OutputFileConfig, RollingPolicy
from raylink.api.functions import MapFunction
from raylink.bench.failover import KEYS, committed_lines, reference
from raylink.tests.runtime_jobs import make_env, wait_for


class SlowEnd(MapFunction):
    """The slow end of the job: 1 ms every 3 records (the workload, not a wait)."""

    def __init__(self) -> None:
        self.seen = 0

    def map(self, value):
        self.seen += 1
        if self.seen % 3 == 0:
            time.sleep(0.001)
        return value


def add_counts(a, b):
    return (a[0], a[1] + b[1])


def to_pair(v):
    return (v % KEYS, 1)


def first_of(kv):
    return kv[0]


def to_line(kv):
    return f"{kv[0]},{kv[1]}"


def build(env, out_dir, n):
    sink = (
        FileSink.for_row_format(str(out_dir), Encoder.simple_string_encoder())
        .with_output_file_config(OutputFileConfig.builder().with_part_prefix("part").build())
        .with_rolling_policy(RollingPolicy.on_checkpoint_rolling_policy())
        .build()
    )
    (
        env.from_sequence(1, n)
        .map(to_pair)
        .uid("pairs")
        .key_by(first_of)
        .reduce(add_counts)
        .uid("counts")
        .map(to_line)
        .map(SlowEnd())
        .uid("slow end")
        .sink_to(sink)
        .uid("files")
    )


def conf(tmp_path, **extra):
    values = {
        "execution.checkpointing.interval": "300 ms",
        "execution.checkpointing.dir": str(tmp_path / "checkpoints"),
        "execution.checkpointing.unaligned.enabled": "true",
        "execution.checkpointing.num-retained": 1000,
        "restart-strategy.type": "fixed-delay",
        "restart-strategy.fixed-delay.attempts": 10,
        "restart-strategy.fixed-delay.delay": "200 ms",
    }
    values.update(extra)
    return values


def channel_state_bytes(checkpoint_dir, checkpoint_id) -> tuple:
    """(input, output) bytes of in-flight data checkpoint ``checkpoint_id`` stored (read back)."""
    import glob

    import cloudpickle

    from raylink.shuffle.channel_state import TaskChannelState, buffer_size
    from raylink.state.checkpoint_storage import load_completed_checkpoint, read_state_handle

    [folder] = glob.glob(os.path.join(str(checkpoint_dir), "*", f"chk-{checkpoint_id}"))
    completed = load_completed_checkpoint(folder)
    inputs = outputs = 0
    for by_subtask in completed.operator_states.values():
        for handle in by_subtask.values():
            state = (cloudpickle.loads(read_state_handle(handle)) or {}).get("channel_state")
            if isinstance(state, TaskChannelState):
                inputs += sum(buffer_size(b) for channels in state.inputs for items in channels for b in items)
                outputs += sum(buffer_size(b) for subs in state.outputs for items in subs for b in items)
    return inputs, outputs


def executor_pids(client) -> list[int]:
    import ray

    return [ray.get(h.location.remote(), timeout=10)["pid"] for h in client.handles.values()]


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_sigkilled_task_executors_restore_unaligned_checkpoints_with_in_flight_data_exactly_once(ray_session, tmp_path):
    n = 100_000
    env = make_env("ray", 2, conf(tmp_path))
    out = tmp_path / "out"
    build(env, out, n)
    client = env.execute_async("unaligned under back pressure")
    kills, restored = 0, []
    try:
        for round_ in range(3):
            completed = client.get_checkpoint_stats()["numberOfCompletedCheckpoints"]

            def persisted_after_restart():
                stats = client.get_checkpoint_stats()
                return (
                    client.get_job_status() == "RUNNING"
                    and stats["numberOfCompletedCheckpoints"] > completed + 1
                    and (stats.get("lastCheckpointPersistedData") or 0) > 0
                )

            assert wait_for(lambda: persisted_after_restart() or client.wait(0), client, timeout=120)
            if client.wait(0):
                break
            assert client.get_checkpoint_stats()["lastCheckpointUnaligned"] is True
            pids = executor_pids(client)
            os.kill(pids[round_ % len(pids)], os_signal.SIGKILL)
            kills += 1
            assert wait_for(
                lambda: client.get_checkpoint_stats()["numRestarts"] >= kills or client.wait(0), client, timeout=120
            )
            restored_id = client.get_checkpoint_stats()["lastRestoredCheckpointId"]
            if restored_id is not None and not client.wait(0):
                restored.append(channel_state_bytes(tmp_path / "checkpoints", restored_id))  # while it is kept
        assert client.wait(400), "the job did not finish"
    finally:
        if not client.wait(0):
            client.cancel()
    assert client.get_job_status() == "FINISHED", client.get_job_status()
    assert committed_lines(out) == reference(n)
    assert client.get_checkpoint_stats()["numRestarts"] == kills >= 2
    assert restored and all(i + o > 0 for i, o in restored), restored  # every restore replayed in-flight data
    assert any(i > 0 for i, _ in restored), restored  # some of it was in the consumers' input channels
