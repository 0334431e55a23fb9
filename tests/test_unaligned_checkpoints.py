"""Unaligned checkpoints, piece by piece and end to end on the in-process runtime: a barrier
overtakes queued buffers in a subpartition and in a credit-based channel (what it overtook is
handed out as channel state), the barrier handler triggers at the first unaligned barrier and
collects the other channels' buffers until their barriers, an aligned barrier with a timeout
switches to unaligned, persisted buffers (with elements split across buffers) replay into exactly
the elements that were in flight, and a job with a back-pressured sink restored from unaligned
checkpoints holding in-flight data commits exactly the output of a failure-free run."""

from __future__ import annotations

import os

import pytest

from raylink.api.functions import CoMapFunction, MapFunction
from raylink.bench.failover import KEYS, committed_lines, reference
from raylink.shuffle.barrier_handler import CheckpointBarrierHandler
from raylink.shuffle.codec import decode_event, encode_event
from raylink.shuffle.credit import CreditBasedInputChannel, connect_local
from raylink.shuffle.elements import CheckpointBarrier
from raylink.shuffle.input_gate import InputGate, LocalInputChannel, StreamTaskNetworkInput
from raylink.shuffle.record_writer import RecordWriter
from raylink.shuffle.result_partition import PRIORITY_EVENT, PipelinedSubpartition, ResultPartition
from raylink.tests.runtime_jobs import make_env, wait_for


# -- the barrier overtakes ------------------------------------------------------------------------------
def test_a_priority_event_overtakes_queued_data_buffers_and_returns_them():
    sub = PipelinedSubpartition(0)
    for b in (b"a", b"b", b"c"):
        sub.add(b)
    first = encode_event(CheckpointBarrier(1, 0, True))
    assert sub.add_priority_event(first) == [b"a", b"b", b"c"]
    second = encode_event(CheckpointBarrier(2, 0, True))
    assert sub.add_priority_event(second) == [b"a", b"b", b"c"]  # behind the first priority event
    polled = []
    while (r := sub.poll_buffer()) is not None:
        polled.append((r.buffer, r.is_event))
    assert polled == [(first, PRIORITY_EVENT), (second, PRIORITY_EVENT), (b"a", False), (b"b", False), (b"c", False)]
    assert sub.add_priority_event(first) == []  # nothing queued: nothing overtaken


def test_a_priority_barrier_overtakes_the_received_buffers_of_a_credit_based_channel():
    sub = PipelinedSubpartition(0)
    channel = CreditBasedInputChannel(exclusive_buffers=4)
    connect_local(sub, channel)
    gate = InputGate([channel])
    gate.request_partitions()
    for b in (b"x1", b"x2", b"x3"):
        sub.add(b)
    assert gate.poll_next() == (0, b"x1")  # x2, x3 are received and wait in the channel
    barrier = CheckpointBarrier(7, 0, True)
    sub.add(b"x4")
    assert sub.add_priority_event(encode_event(barrier)) == []  # x4 was sent at once: it is in the channel
    index, event = gate.poll_next()
    assert (index, event) == (0, barrier)
    assert gate.take_overtaken(0) == [b"x2", b"x3", b"x4"]
    assert gate.take_overtaken(0) == []  # once
    assert [gate.poll_next()[1] for _ in range(3)] == [b"x2", b"x3", b"x4"]


def test_a_queued_aligned_barrier_converts_to_priority_and_hands_out_what_was_ahead_of_it():
    sub = PipelinedSubpartition(0)
    aligned = encode_event(CheckpointBarrier(3, 0, False, 100))
    unaligned = encode_event(CheckpointBarrier(3, 0, True))
    for b in (b"d1", b"d2"):
        sub.add(b)
    sub.add(aligned, True)
    sub.add(b"d3")
    assert sub.convert_to_priority(lambda b: None) is None  # nothing it converts
    assert sub.convert_to_priority(lambda b: unaligned if b == aligned else None) == [b"d1", b"d2"]
    polled = []
    while (r := sub.poll_buffer()) is not None:
        polled.append(r.buffer)
    assert polled == [unaligned, b"d1", b"d2", b"d3"]


def test_a_barrier_whose_alignment_timed_out_overtakes_on_arrival_or_when_converted():
    import time

    sub = PipelinedSubpartition(0)
    channel = CreditBasedInputChannel(exclusive_buffers=4)
    connect_local(sub, channel)
    gate = InputGate([channel])
    gate.request_partitions()
    now = time.time_ns() // 1_000_000
    sub.add(b"a")
    sub.add(b"b")
    sub.add(encode_event(CheckpointBarrier(5, now - 1_000, False, 100)), True)  # timed out already
    assert gate.poll_next() == (0, CheckpointBarrier(5, now - 1_000, True))
    assert gate.take_overtaken(0) == [b"a", b"b"]
    assert [gate.poll_next()[1] for _ in range(2)] == [b"a", b"b"]
    sub.add(b"c")
    later = CheckpointBarrier(6, now + 60_000, False, 100)  # not timed out: queued behind c
    sub.add(encode_event(later), True)
    assert channel.convert_barrier(7) is False
    assert channel.convert_barrier(6) is True  # its checkpoint went unaligned at the task
    assert gate.poll_next() == (0, later.as_unaligned())
    assert gate.take_overtaken(0) == [b"c"]


# -- the barrier handler ----------------------------------------------------------------------------------
class Recorder:
    """Channel state and handler callbacks, recorded in order."""

    def __init__(self) -> None:
        self.calls: list = []

    def start(self, checkpoint_id, channels):
        self.calls.append(("start", checkpoint_id, sorted(channels)))

    def stop(self, checkpoint_id, input_index, channel):
        self.calls.append(("stop", checkpoint_id, (input_index, channel)))

    def finish(self, checkpoint_id):
        self.calls.append(("finish", checkpoint_id))

    def abort(self, checkpoint_id):
        self.calls.append(("abort", checkpoint_id))


def make_handler(counts, recorder, clock=None, **kwargs):
    clock = clock or [0]
    return CheckpointBarrierHandler(
        counts,
        trigger=lambda b: recorder.calls.append(("trigger", b)),
        block=lambda i, c: recorder.calls.append(("block", (i, c))),
        resume=lambda: recorder.calls.append(("resume",)),
        abort=lambda cid, reason: recorder.calls.append(("declined", cid, str(reason))),
        channel_state=recorder,
        wall_clock_ms=lambda: clock[0],
        **kwargs,
    )


def test_the_first_unaligned_barrier_triggers_at_once_and_the_others_end_persisting():
    r = Recorder()
    h = make_handler([2, 1], r)
    barrier = CheckpointBarrier(1, 0, True)
    h.process_barrier(barrier, 0, 1)
    assert r.calls == [
        ("start", 1, [(0, 0), (0, 1), (1, 0)]),
        ("stop", 1, (0, 1)),
        ("trigger", barrier),
    ]
    assert h.is_checkpoint_pending and h.is_unaligned
    h.process_barrier(barrier, 1, 0)
    h.process_end_of_partition(0, 0)  # an ended channel counts as its barrier
    assert r.calls[3:] == [("stop", 1, (1, 0)), ("stop", 1, (0, 0)), ("finish", 1)]
    assert not h.is_checkpoint_pending and not any(c[0] == "block" for c in r.calls)


def test_a_cancel_marker_aborts_an_unaligned_checkpoint_collecting_barriers():
    from raylink.shuffle.elements import CancelCheckpointMarker

    r = Recorder()
    h = make_handler([3], r)
    h.process_barrier(CheckpointBarrier(4, 0, True), 0, 0)
    h.process_cancellation_marker(CancelCheckpointMarker(4), 0, 1)
    assert r.calls[-2][0:2] == ("abort", 4) and r.calls[-1][0:2] == ("declined", 4)
    h.process_barrier(CheckpointBarrier(4, 0, True), 0, 2)  # late barrier of the aborted checkpoint: ignored
    assert r.calls[-1][0:2] == ("declined", 4)


def test_an_aligned_barrier_with_a_timeout_switches_to_unaligned_when_the_alignment_takes_too_long():
    r = Recorder()
    clock = [1_000]
    scheduled = []
    h = make_handler([3], r, clock, schedule_timeout=scheduled.append)
    barrier = CheckpointBarrier(2, 1_000, False, 100)  # started at 1000 ms, timeout 100 ms
    clock[0] = 1_010
    h.process_barrier(barrier, 0, 0)
    assert r.calls == [("block", (0, 0))] and scheduled == [90]
    clock[0] = 1_050
    h.check_alignment_timeout()  # early: asks again
    assert scheduled[-1] == 50 and not any(c[0] == "trigger" for c in r.calls)
    clock[0] = 1_120
    h.check_alignment_timeout()
    assert r.calls[1:] == [
        ("resume",),
        ("start", 2, [(0, 0), (0, 1), (0, 2)]),
        ("stop", 2, (0, 0)),
        ("trigger", barrier.as_unaligned()),
    ]
    h.process_barrier(barrier, 0, 1)  # the others arrive aligned: they end persisting
    h.process_barrier(barrier, 0, 2)
    assert r.calls[-3:] == [("stop", 2, (0, 1)), ("stop", 2, (0, 2)), ("finish", 2)]


def test_a_timed_out_barrier_arriving_first_triggers_unaligned_at_once():
    r = Recorder()
    clock = [5_000]
    h = make_handler([2], r, clock, schedule_timeout=lambda ms: None)
    barrier = CheckpointBarrier(3, 1_000, False, 100)
    h.process_barrier(barrier, 0, 1)
    assert ("trigger", barrier.as_unaligned()) in r.calls and not any(c[0] == "block" for c in r.calls)


def test_without_unaligned_barriers_the_handler_aligns_as_before():
    r = Recorder()
    h = make_handler([2], r)
    barrier = CheckpointBarrier(1, 0)
    h.process_barrier(barrier, 0, 0)
    h.process_barrier(barrier, 0, 1)
    assert r.calls == [("block", (0, 0)), ("trigger", barrier), ("resume",)]


# -- persisted buffers replay into the elements in flight -------------------------------------------------
def records(n):
    return [(i, "v" * (i % 37), i * 0.5) for i in range(n)]


def test_persisted_buffers_with_split_elements_replay_exactly_the_elements_in_flight():
    """Elements span buffers (96-byte buffers): the channel state of a channel taken mid-stream
    (its deserializer's partial element + the buffers read until the barrier + what the barrier
    overtook in the producer's queue) replays into exactly the elements not processed before."""
    partition = ResultPartition(1, "PIPELINED")
    writer = RecordWriter(partition, buffer_timeout_ms=-1, buffer_size=96)
    gate = InputGate([LocalInputChannel(partition.subpartitions[0])])
    gate.request_partitions()
    net = StreamTaskNetworkInput(gate)
    net.track_partial_records = True
    data = records(300)
    for value in data:
        writer.emit(value)
    processed = []

    def take(n_buffers):
        for _ in range(n_buffers):
            for item in net.poll_next() or []:
                if isinstance(item, list):
                    processed.extend(item)

    take(21)  # some elements are done, the last one is split
    before_snapshot = len(processed)
    net.start_persisting(9, [0])
    take(15)  # read after the snapshot, before the barrier: persisted (and processed)
    writer.flush_all()
    overtaken = partition.broadcast_priority_event(encode_event(CheckpointBarrier(9, 0, True)))[0]
    persisted_input = net.stop_persisting(9, 0)
    assert overtaken and persisted_input
    assert type(persisted_input[0]).__name__ == "PartialRecord"  # an element was split at the snapshot
    # restored: a fresh consumer replays the input state, then the producer re-sends its output state
    restored = ResultPartition(1, "PIPELINED")
    gate2 = InputGate([LocalInputChannel(restored.subpartitions[0])])
    gate2.request_partitions()
    net2 = StreamTaskNetworkInput(gate2)
    net2.recover([persisted_input])
    sink = restored.sink(0)
    for buffer in overtaken:
        sink(buffer, False)
    replayed = []
    while (items := net2.poll_next()) is not None:
        for item in items:
            if isinstance(item, list):
                replayed.extend(item)
    as_lists = [list(v) for v in processed[:before_snapshot] + replayed]
    assert as_lists == [list(v) for v in data]


def test_a_decoded_barrier_keeps_its_alignment_and_drain():
    barriers = (
        CheckpointBarrier(1, 2),
        CheckpointBarrier(3, 4, True),
        CheckpointBarrier(5, 6, False, 250),
        CheckpointBarrier(7, 8, drain=True),
    )
    for barrier in barriers:
        decoded = decode_event(encode_event(barrier))
        assert decoded == barrier and decoded.drain == barrier.drain
    assert CheckpointBarrier(7, 8, drain=True) != CheckpointBarrier(7, 8)


# -- end to end on the in-process runtime -------------------------------------------------------------------
class SlowFailOnce(MapFunction):
    """The back-pressured end of the job: ~0.3 ms per record; on its first attempt it fails once
    when ``flag`` exists (the test creates it after an unaligned checkpoint persisted data)."""

    def __init__(self, flag: str) -> None:
        self.flag = flag
        self.attempt = 0
        self.seen = 0

    def open(self, runtime_context) -> None:
        self.attempt = runtime_context.get_attempt_number()

    def map(self, value):
        self.seen += 1
        if self.seen % 3 == 0:
            import time

            time.sleep(0.001)  # the slow sink: the workload, not a wait
        if self.attempt == 0 and self.seen % 64 == 0 and os.path.exists(self.flag):
            raise RuntimeError("injected failure after an unaligned checkpoint with in-flight data")
        return value


def add_counts(a, b):
    return (a[0], a[1] + b[1])


def build_job(env, out_dir, flag, n):
    from raylink.api import Encoder, FileSink, OutputFileConfig, RollingPolicy

    sink = (
        FileSink.for_row_format(str(out_dir), Encoder.simple_string_encoder())
        .with_output_file_config(OutputFileConfig.builder().with_part_prefix("part").build())
        .with_rolling_policy(RollingPolicy.on_checkpoint_rolling_policy())
        .build()
    )
    (
        env.from_sequence(1, n)
        .map(lambda v: (v % KEYS, 1))
        .key_by(lambda kv: kv[0])
        .reduce(add_counts)
        .map(lambda kv: f"{kv[0]},{kv[1]}")
        .map(SlowFailOnce(flag))
        .sink_to(sink)
    )


def unaligned_conf(tmp_path, **extra):
    conf = {
        "execution.checkpointing.interval": "200 ms",
        "execution.checkpointing.dir": str(tmp_path / "checkpoints"),
        "execution.checkpointing.unaligned.enabled": "true",
        "execution.checkpointing.num-retained": 1000,
        "restart-strategy.type": "fixed-delay",
        "restart-strategy.fixed-delay.attempts": 5,
        "restart-strategy.fixed-delay.delay": "100 ms",
    }
    conf.update(extra)
    return conf


def restored_channel_state_bytes(checkpoint_dir, checkpoint_id) -> int:
    """The in-flight bytes stored in checkpoint ``checkpoint_id`` (read back from its files)."""
    import glob

    import cloudpickle

    from raylink.shuffle.channel_state import TaskChannelState
    from raylink.state.checkpoint_storage import load_completed_checkpoint, read_state_handle

    [metadata] = glob.glob(os.path.join(str(checkpoint_dir), "*", f"chk-{checkpoint_id}"))
    completed = load_completed_checkpoint(metadata)
    total = 0
    for by_subtask in completed.operator_states.values():
        for handle in by_subtask.values():
            snapshot = cloudpickle.loads(read_state_handle(handle))
            state = (snapshot or {}).get("channel_state")
            if isinstance(state, TaskChannelState):
                total += state.size_bytes()
    return total


@pytest.mark.timeout(240)
@pytest.mark.parametrize("parallelism, timeout", [(1, 0), (2, 0), (2, 30)])
def test_restored_from_unaligned_checkpoints_with_in_flight_data_the_output_is_exactly_once(
    tmp_path, parallelism, timeout
):
    """timeout > 0: checkpoints start aligned and switch once their alignment takes longer."""
    n = 20_000
    flag = str(tmp_path / "fail-now")
    extra = {"execution.checkpointing.aligned-checkpoint-timeout": f"{timeout} ms"}
    env = make_env("local", parallelism, unaligned_conf(tmp_path, **extra))
    out = tmp_path / "out"
    build_job(env, out, flag, n)
    client = env.execute_async("unaligned, back-pressured")
    assert wait_for(
        lambda: (client.get_checkpoint_stats().get("lastCheckpointPersistedData") or 0) > 0 or client.wait(0),
        client,
        timeout=120,
    ), "no unaligned checkpoint persisted in-flight data"
    stats = client.get_checkpoint_stats()
    assert stats["lastCheckpointUnaligned"] is True
    open(flag, "w").close()  # the slow operator fails now (once)
    assert wait_for(
        lambda: client.get_checkpoint_stats()["lastRestoredCheckpointId"] is not None or client.wait(0),
        client,
        timeout=120,
    )
    restored = client.get_checkpoint_stats()["lastRestoredCheckpointId"]
    assert restored is not None
    # read while the job runs (a finished job's checkpoints are deleted)
    assert restored_channel_state_bytes(tmp_path / "checkpoints", restored) > 0, "restored without in-flight data"
    assert client.wait(200), "the job did not finish"
    assert client.get_job_status() == "FINISHED", client.get_job_status()
    assert client.get_checkpoint_stats()["numRestarts"] == 1
    assert committed_lines(out) == reference(n)


def test_unaligned_checkpoints_with_at_least_once_mode_are_a_configuration_error(tmp_path):
    env = make_env("local", 1, unaligned_conf(tmp_path, **{"execution.checkpointing.mode": "at_least_once"}))
    env.from_sequence(1, 10).add_sink(lambda v: None)
    with pytest.raises(Exception) as info:
        env.execute_async()
    message = str(info.value)
    assert "execution.checkpointing.unaligned.enabled" in message and "exactly_once" in message


def test_pyflink_checkpoint_config_switches_unaligned_checkpoints():
    from raylink.api import StreamExecutionEnvironment
    from raylink.api.checkpoint_config import CheckpointConfig
    from raylink.core.time import Duration

    env = StreamExecutionEnvironment.get_execution_environment()
    config = env.get_checkpoint_config()
    assert isinstance(config, CheckpointConfig) and not config.is_unaligned_checkpoints_enabled()
    config.enable_unaligned_checkpoints()
    config.set_aligned_checkpoint_timeout(Duration.of_seconds(2))
    assert config.is_unaligned_checkpoints_enabled()
    assert config.get_aligned_checkpoint_timeout() == Duration.of_millis(2000)
    config.disable_unaligned_checkpoints()
    assert not config.is_unaligned_checkpoints_enabled()


@pytest.mark.timeout(240)
def test_savepoints_stay_aligned_and_in_flight_data_is_not_restored_at_another_parallelism(tmp_path):
    """A savepoint of a job with unaligned checkpoints is aligned (no channel state); the retained
    unaligned checkpoint of the cancelled job holds in-flight data and restoring it at parallelism 3
    is refused, naming the operator and suggesting a savepoint."""
    flag = str(tmp_path / "never")
    env = make_env("local", 2, unaligned_conf(tmp_path, **{"restart-strategy.type": "none"}))
    build_job(env, tmp_path / "out", flag, 10**7)
    client = env.execute_async("unaligned, then a savepoint")
    try:
        persisted = lambda: (client.get_checkpoint_stats().get("lastCheckpointPersistedData") or 0) > 0  # noqa: E731
        assert wait_for(lambda: persisted() or client.wait(0), client, timeout=120)
        savepoint = client.trigger_savepoint(str(tmp_path / "savepoints")).result(120)
        stats = client.get_checkpoint_stats()
        assert stats["lastCheckpointUnaligned"] is False and stats["lastCheckpointPersistedData"] == 0
        after = stats["lastCheckpointId"]
        assert wait_for(
            lambda: client.get_checkpoint_stats()["lastCheckpointId"] > after and persisted() or client.wait(0),
            client,
            timeout=120,
        )
    finally:
        client.cancel()
        client.wait(60)
    assert savepoint
    job_folder = tmp_path / "checkpoints" / client.get_job_id()
    kept = sorted(
        (p for p in job_folder.iterdir() if p.name.startswith("chk-") and (p / "_metadata").exists()),
        key=lambda p: int(p.name[4:]),
    )
    with_data = [p for p in kept if restored_channel_state_bytes(tmp_path / "checkpoints", int(p.name[4:])) > 0]
    assert with_data, kept
    env3 = make_env(
        "local",
        3,
        unaligned_conf(tmp_path, **{"execution.savepoint.path": str(with_data[-1]), "restart-strategy.type": "none"}),
    )
    build_job(env3, tmp_path / "out3", flag, 1000)
    client3 = env3.execute_async("rescaled")
    assert client3.wait(120)
    assert client3.get_job_status() == "FAILED"
    with pytest.raises(Exception) as info:
        client3.get_job_execution_result(1)
    message = str(info.value)
    assert "unaligned" in message and "in-flight" in message and "savepoint" in message, message
    assert "parallelism 2" in message and "parallelism 3" in message, message


class BothToPairs(CoMapFunction):
    def map1(self, value):
        return (value % KEYS, 1)

    def map2(self, value):
        return (value % KEYS, 1)


@pytest.mark.timeout(240)
def test_a_two_input_task_restores_the_channel_state_of_both_inputs_exactly_once(tmp_path):
    """Two sources connected into a two-input task (the barrier handler numbers the channels of
    both inputs), keyed on into the slow end; restored from an unaligned checkpoint with
    in-flight data, the committed output is a failure-free run's."""
    from raylink.api import Encoder, FileSink, OutputFileConfig, RollingPolicy

    n = 20_000
    flag = str(tmp_path / "fail-now")
    env = make_env("local", 2, unaligned_conf(tmp_path))
    sink = (
        FileSink.for_row_format(str(tmp_path / "out"), Encoder.simple_string_encoder())
        .with_output_file_config(OutputFileConfig.builder().with_part_prefix("part").build())
        .with_rolling_policy(RollingPolicy.on_checkpoint_rolling_policy())
        .build()
    )
    first = env.from_sequence(1, n // 2)
    second = env.from_sequence(n // 2 + 1, n)
    (
        first.connect(second)
        .map(BothToPairs())
        .key_by(lambda kv: kv[0])
        .reduce(add_counts)
        .map(lambda kv: f"{kv[0]},{kv[1]}")
        .map(SlowFailOnce(flag))
        .sink_to(sink)
    )
    client = env.execute_async("two inputs, unaligned")
    assert wait_for(
        lambda: (client.get_checkpoint_stats().get("lastCheckpointPersistedData") or 0) > 0 or client.wait(0),
        client,
        timeout=120,
    )
    open(flag, "w").close()
    assert wait_for(
        lambda: client.get_checkpoint_stats()["lastRestoredCheckpointId"] is not None or client.wait(0),
        client,
        timeout=120,
    )
    restored = client.get_checkpoint_stats()["lastRestoredCheckpointId"]
    assert restored is not None
    assert restored_channel_state_bytes(tmp_path / "checkpoints", restored) > 0
    assert client.wait(200), "the job did not finish"
    assert client.get_job_status() == "FINISHED", client.get_job_status()
    assert committed_lines(tmp_path / "out") == reference(n)
