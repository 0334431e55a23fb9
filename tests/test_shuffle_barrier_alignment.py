"""Aligned checkpoint barriers, without Ray: channel blocking in the input gates and the
``CheckpointBarrierHandler`` over real ResultPartitions, RecordWriters, local channels
and credit-based channels (driven in-process).

The property under test everywhere: when the snapshot (``trigger``) runs, the task has
processed every record written before the barrier on every channel and no record
written after it; afterwards every record arrives exactly once, in channel order.
"""

import threading
from typing import List

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from raylink.shuffle.barrier_handler import CheckpointBarrierHandler, CheckpointFailureReason
from raylink.shuffle.buffer_pool import LocalBufferPool
from raylink.shuffle.codec import decode_event, encode_event
from raylink.shuffle.credit import CreditBasedInputChannel, connect_local, create_floating_pool
from raylink.shuffle.elements import (
    CancelCheckpointMarker,
    CheckpointBarrier,
    TimestampedRecords,
    is_control,
)
from raylink.shuffle.input_gate import InputGate, LocalInputChannel, StreamTaskNetworkInput, UnionInputGate
from raylink.shuffle.record_writer import RecordWriter
from raylink.shuffle.result_partition import ResultPartition
from raylink.shuffle.serializer import RecordDeserializer, RecordSerializer

pytestmark = pytest.mark.timeout(60)

WAIT = 10.0  # seconds any wait may take before the test fails


def barrier(cid: int) -> CheckpointBarrier:
    return CheckpointBarrier(cid, 0)


class Task:
    """A consumer loop like ``StreamTask._default_action`` + ``_process_items``: polls its
    network inputs one buffer at a time, hands events to a barrier handler and records
    what it processed; ``trigger`` takes a snapshot of the records processed so far."""

    def __init__(self, inputs: List[StreamTaskNetworkInput], **handler_kwargs) -> None:
        self.inputs = inputs
        self.processed: list = []  # (input, channel, record)
        self.snapshots: list = []  # (checkpoint id, records processed at the trigger)
        self.aborted: list = []  # (checkpoint id, reason)
        self.alignment_ns: list = []
        self.ended = [False] * len(inputs)
        self.fail_snapshot = False
        self._next = 0
        self.handler = CheckpointBarrierHandler.for_inputs(
            inputs, self._trigger, lambda cid, reason: self.aborted.append((cid, reason)), **handler_kwargs
        )

    def _trigger(self, b: CheckpointBarrier) -> None:
        if self.fail_snapshot:
            raise RuntimeError("snapshot failed")
        self.snapshots.append((b.checkpoint_id, list(self.processed)))
        self.alignment_ns.append(self.handler.alignment_duration_ns)

    def step(self) -> bool:
        """Process one buffer/event of some input; False if none had anything."""
        n = len(self.inputs)
        for k in range(n):
            i = (self._next + k) % n
            if self.ended[i]:
                continue
            inp = self.inputs[i]
            items = inp.poll_next()
            if items is None:
                self.ended[i] = inp.is_finished()
                continue
            self._next = (i + 1) % n
            ch = inp.last_channel
            for it in items:
                if type(it) is list:
                    self.processed.extend((i, ch, r) for r in it)
                elif type(it) is TimestampedRecords:
                    self.processed.extend((i, ch, r) for r in it.values)
                else:
                    self.handler.process_event(it, i, ch)
            return True
        return False

    def drain(self) -> None:
        """Process until nothing is available right now."""
        while self.step():
            pass

    def run_to_end(self) -> None:
        """Process until every input is finished, waiting for data (WAIT s at most)."""
        while True:
            if self.step():
                continue
            if all(self.ended):
                return
            futures = [inp.get_available_future() for inp, e in zip(self.inputs, self.ended) if not e]
            if not any(f.done() for f in futures):
                done = threading.Event()
                for f in futures:
                    f.add_done_callback(lambda _f: done.set())
                assert done.wait(WAIT), f"no input became available; handler: {self.handler!r}"

    def records(self, processed=None):
        return [r for _, _, r in (self.processed if processed is None else processed)]


def local_gate(partitions) -> InputGate:
    gate = InputGate([LocalInputChannel(p.subpartitions[0]) for p in partitions])
    gate.request_partitions()
    return gate


def pre(p, n):
    return [(p, "pre", i) for i in range(n)]


def post(p, n):
    return [(p, "post", i) for i in range(n)]


# -- the marker travels as an event ------------------------------------------------------------
def test_cancel_checkpoint_marker_is_an_event_through_writer_and_gate():
    m = CancelCheckpointMarker(41)
    assert decode_event(encode_event(m)) == m and is_control(m)
    part = ResultPartition(1, "PIPELINED")
    w = RecordWriter(part, buffer_timeout_ms=-1)
    w.emit("a")
    w.broadcast_event(m)
    w.finish()
    ni = StreamTaskNetworkInput(local_gate([part]))
    assert ni.poll_next() == [["a"]]
    assert ni.poll_next() == [m]
    s = RecordSerializer(64)
    s.add_event(CancelCheckpointMarker(3))
    assert s.take_full_buffers() == [(encode_event(CancelCheckpointMarker(3)), True)]


# -- gate blocking ----------------------------------------------------------------------------
def test_blocked_channel_returns_nothing_and_data_arriving_meanwhile_does_not_wake_the_gate():
    parts = [ResultPartition(1, "PIPELINED") for _ in range(2)]
    writers = [RecordWriter(p, buffer_timeout_ms=0) for p in parts]
    gate = local_gate(parts)
    writers[0].emit("a0")
    writers[1].emit("b0")
    gate.block_channel(0)  # queued: taken out of the queue
    assert gate.is_blocked(0) and gate.num_blocked_channels == 1
    ch, buf = gate.poll_next()
    assert ch == 1
    assert gate.poll_next() is None
    fut = gate.get_available_future()
    writers[0].emit("a1")  # its notification is dropped while blocked
    assert not fut.done() and gate.poll_next() is None
    gate.resume_consumption()
    assert fut.done() and not gate.is_blocked(0) and gate.num_blocked_channels == 0
    d = RecordDeserializer()
    got = []
    while (r := gate.poll_next()) is not None:
        assert r[0] == 0
        got.extend(x for run in d.feed(r[1]) for x in run)
    assert got == ["a0", "a1"]
    # an empty resumed channel is not queued, and its next data wakes the gate normally
    gate.block_channel(0)
    gate.unblock_all()
    fut = gate.get_available_future()
    assert not fut.done()
    writers[0].emit("a2")
    assert fut.done() and gate.poll_next()[0] == 0


def test_resume_one_channel_and_errors_name_the_channel():
    parts = [ResultPartition(1, "PIPELINED") for _ in range(3)]
    writers = [RecordWriter(p, buffer_timeout_ms=0) for p in parts]
    gate = local_gate(parts)
    for w in writers:
        w.emit(1)
    gate.block_channel(0)
    gate.block_channel(2)
    gate.block_channel(2)  # already blocked: no-op
    assert gate.num_blocked_channels == 2
    gate.resume_consumption(2)
    assert [gate.poll_next()[0] for _ in range(2)] == [1, 2] and gate.poll_next() is None
    with pytest.raises(IndexError, match="no channel 3"):
        gate.block_channel(3)
    union = UnionInputGate([local_gate([ResultPartition(1, "PIPELINED")]), gate])
    with pytest.raises(IndexError, match="no channel 4"):
        union.block_channel(4)


def test_union_gate_blocks_by_flattened_index():
    parts = [ResultPartition(1, "PIPELINED") for _ in range(4)]
    writers = [RecordWriter(p, buffer_timeout_ms=0) for p in parts]
    union = UnionInputGate([local_gate(parts[:2]), local_gate(parts[2:])])
    for i, w in enumerate(writers):
        w.emit(i)
    union.block_channel(1)
    union.block_channel(2)
    assert union.is_blocked(1) and union.gates[1].is_blocked(0) and union.num_blocked_channels == 2
    seen = []
    while (r := union.poll_next()) is not None:
        seen.append(r[0])
    assert sorted(seen) == [0, 3]
    assert not union.get_available_future().done()
    union.resume_consumption()
    while (r := union.poll_next()) is not None:
        seen.append(r[0])
    assert sorted(seen) == [0, 1, 2, 3]


# -- the handler on real gates ----------------------------------------------------------------
def test_slow_channel_blocks_fast_ones_and_nothing_after_the_barrier_is_processed_before_the_snapshot():
    parts = [ResultPartition(1, "PIPELINED") for _ in range(3)]
    writers = [RecordWriter(p, buffer_timeout_ms=-1, buffer_size=64) for p in parts]
    task = Task([StreamTaskNetworkInput(local_gate(parts))])
    for p in (0, 1):  # fast: pre-barrier records, the barrier, post-barrier records
        writers[p].emit_batch(pre(p, 50))
        writers[p].broadcast_event(barrier(1))
        writers[p].emit_batch(post(p, 50))
        writers[p].finish()
    writers[2].emit_batch(pre(2, 50))  # slow: no barrier yet
    writers[2].flush_all()
    task.drain()
    gate = task.inputs[0].gate
    assert sorted(task.handler.blocked_channels) == [(0, 0), (0, 1)]
    assert gate.is_blocked(0) and gate.is_blocked(1) and not gate.is_blocked(2)
    assert task.snapshots == []
    assert sorted(task.records()) == sorted(pre(0, 50) + pre(1, 50) + pre(2, 50))
    assert task.handler.is_checkpoint_pending and task.handler.current_checkpoint_id == 1
    assert task.handler.alignment_duration_ns > 0  # alignment in progress

    writers[2].emit_batch(pre(2, 100)[50:])
    writers[2].broadcast_event(barrier(1))
    writers[2].emit_batch(post(2, 30))
    writers[2].finish()
    task.run_to_end()
    assert [cid for cid, _ in task.snapshots] == [1]
    snap = task.snapshots[0][1]
    assert sorted(r for _, _, r in snap) == sorted(pre(0, 50) + pre(1, 50) + pre(2, 100))
    assert gate.num_blocked_channels == 0 and task.handler.blocked_channels == []
    assert not task.handler.is_checkpoint_pending
    assert task.alignment_ns[0] > 0 and task.handler.alignment_duration_ns == task.alignment_ns[0]
    everything = pre(0, 50) + post(0, 50) + pre(1, 50) + post(1, 50) + pre(2, 100) + post(2, 30)
    assert sorted(task.records()) == sorted(everything)  # each exactly once
    for p in range(3):  # channel order kept
        assert [r for _, ch, r in task.processed if ch == p] == [r for r in everything if r[0] == p]
    assert task.aborted == []


@pytest.mark.timeout(30)
def test_blocked_local_channels_back_pressure_their_producers_threads():
    """Producers in their own threads with bounded output pools: a fast producer whose
    channel is blocked stops once its pool is exhausted; the snapshot sees exactly the
    pre-barrier records; then everything arrives."""
    pool_size, n_pre, n_post, batch = 4, 300, 3000, 20
    pools = [LocalBufferPool(None, 0, pool_size) for _ in range(3)]
    parts = [ResultPartition(1, "PIPELINED_BOUNDED", pools[i]) for i in range(3)]
    task = Task([StreamTaskNetworkInput(local_gate(parts))])
    stalled = [threading.Event(), threading.Event()]
    release_slow = threading.Event()
    emitted_post = [0, 0]  # post-barrier records a fast producer has emitted so far
    errors = []

    def emit_all(w, records, p=None):
        for i in range(0, len(records), batch):
            if p is not None:
                emitted_post[p] = i + batch
            w.emit_batch(records[i : i + batch])
            if not w.is_available():
                if p is not None:
                    stalled[p].set()
                w.get_available_future().result(timeout=WAIT)

    def fast(p):
        try:
            w = RecordWriter(parts[p], buffer_timeout_ms=-1, buffer_size=128)
            emit_all(w, pre(p, n_pre))
            w.broadcast_event(barrier(7))
            emit_all(w, post(p, n_post), p)
            w.finish()
        except BaseException as e:  # pragma: no cover - surfaced below
            errors.append(e)

    def slow():
        try:
            w = RecordWriter(parts[2], buffer_timeout_ms=-1, buffer_size=128)
            emit_all(w, pre(2, n_pre))
            w.flush_all()
            assert release_slow.wait(WAIT)
            w.broadcast_event(barrier(7))
            emit_all(w, post(2, n_post))
            w.finish()
        except BaseException as e:  # pragma: no cover
            errors.append(e)

    threads = [
        threading.Thread(target=fast, args=(0,)),
        threading.Thread(target=fast, args=(1,)),
        threading.Thread(target=slow),
    ]
    for t in threads:
        t.start()
    gate = task.inputs[0].gate
    try:
        while True:
            if task.step():
                continue
            if all(task.ended):
                break
            if not release_slow.is_set() and gate.num_blocked_channels == 2 and len(task.records()) == 3 * n_pre:
                # both fast channels are aligned and the slow one has delivered all it has
                assert stalled[0].wait(WAIT) and stalled[1].wait(WAIT), "a blocked producer never stopped"
                assert task.snapshots == []
                assert not any(r[1] == "post" for r in task.records())
                for p in (0, 1):
                    # the producer stopped within its pool (+ one batch of overdraft): what it
                    # emitted after the barrier fits in a few buffers, the rest is not produced
                    assert emitted_post[p] < n_post // 10
                    assert parts[p].subpartitions[0].backlog <= pool_size + 3
                    assert pools[p].num_in_use <= pool_size + 3
                release_slow.set()
                continue
            gate.get_available_future().result(timeout=WAIT)
    finally:
        release_slow.set()
        for t in threads:
            t.join(WAIT)
    assert not errors, errors
    assert [cid for cid, _ in task.snapshots] == [7]
    snap = task.records(task.snapshots[0][1])
    assert sorted(snap) == sorted(pre(0, n_pre) + pre(1, n_pre) + pre(2, n_pre))
    everything = [r for p in range(3) for r in pre(p, n_pre) + post(p, n_post)]
    assert sorted(task.records()) == sorted(everything)
    assert all(p.num_in_use == 0 for p in pools)


def credit_gate(partitions, exclusive, floating):
    fpool = create_floating_pool(None, floating)
    channels = [CreditBasedInputChannel(fpool, exclusive) for _ in partitions]
    conns = [connect_local(p.subpartitions[0], ch) for p, ch in zip(partitions, channels)]
    gate = InputGate(channels)
    gate.request_partitions()
    return gate, channels, conns, fpool


def test_credit_accounting_while_channels_are_blocked():
    """Credit-based channels driven in-process: a blocked channel keeps its received
    buffers, announces no credit, so its sender stops with the rest in its subpartition;
    the slow channel still gets through on its exclusive buffers although the blocked
    ones hold every floating buffer; after the snapshot all records arrive once."""
    exclusive, floating = 2, 4
    parts = [ResultPartition(1, "PIPELINED") for _ in range(3)]
    writers = [RecordWriter(p, buffer_timeout_ms=-1, buffer_size=64) for p in parts]
    gate, channels, conns, fpool = credit_gate(parts, exclusive, floating)
    task = Task([StreamTaskNetworkInput(gate)])

    def check_credit():
        total = 0
        for ch, conn in zip(channels, conns):
            assert ch.buffers_in_flight + conn.reader.credit <= exclusive + ch.num_floating_buffers
            assert conn.reader.num_buffers_sent == ch.num_buffers_received
            total += ch.buffers_in_flight + conn.reader.credit
        assert total <= len(channels) * exclusive + floating
        assert fpool.num_in_use <= floating

    for p in (0, 1):
        writers[p].emit_batch(pre(p, 40))
        writers[p].broadcast_event(barrier(3))
        writers[p].emit_batch(post(p, 400))  # far more buffers than credit
        writers[p].finish()
    while task.step():
        check_credit()
    assert gate.num_blocked_channels == 2 and task.snapshots == []
    for p in (0, 1):
        ch, conn = channels[p], conns[p]
        assert conn.reader.credit == 0  # the sender used its credit up ...
        assert ch.buffers_in_flight > 0  # ... on buffers that now wait, unconsumed
        assert parts[p].subpartitions[0].backlog > 50  # the rest stays with the sender
    assert channels[0].num_floating_buffers + channels[1].num_floating_buffers == floating
    sent_before = [c.reader.num_buffers_sent for c in conns[:2]]

    # the slow channel: many buffers, through its exclusive credit alone
    writers[2].emit_batch(pre(2, 300))
    writers[2].broadcast_event(barrier(3))
    writers[2].emit_batch(post(2, 30))
    writers[2].finish()
    assert parts[2].subpartitions[0].backlog > 2 * exclusive
    while not task.snapshots:
        assert task.step(), "the slow channel stalled while the others were blocked"
        check_credit()
        assert [c.reader.num_buffers_sent for c in conns[:2]] == sent_before  # blocked senders stay stopped
    snap = task.records(task.snapshots[0][1])
    assert sorted(snap) == sorted(pre(0, 40) + pre(1, 40) + pre(2, 300))
    while task.step():
        check_credit()
    assert all(task.ended)
    everything = [r for p in range(3) for r in pre(p, [40, 40, 300][p]) + post(p, [400, 400, 30][p])]
    assert sorted(task.records()) == sorted(everything)
    for p in range(3):
        assert [r for _, ch, r in task.processed if ch == p] == [r for r in everything if r[0] == p]
    assert fpool.num_in_use == 0
    assert [c.reader.num_buffers_sent for c in conns] == [c.num_buffers_received for c in channels]


def _scripted_gate(n):
    parts = [ResultPartition(1, "PIPELINED") for _ in range(n)]
    writers = [RecordWriter(p, buffer_timeout_ms=0) for p in parts]
    task = Task([StreamTaskNetworkInput(local_gate(parts))])
    return writers, task


def test_newer_barrier_aborts_the_older_checkpoint_and_late_barriers_are_ignored():
    writers, task = _scripted_gate(3)
    gate = task.inputs[0].gate
    writers[0].broadcast_event(barrier(1))
    writers[0].emit("0-after-1")
    task.drain()
    assert gate.is_blocked(0) and task.records() == []
    writers[1].broadcast_event(barrier(2))  # newer: checkpoint 1 is subsumed
    task.drain()
    assert task.aborted == [(1, CheckpointFailureReason.CHECKPOINT_DECLINED_SUBSUMED)]
    assert task.aborted[0][1] == "CHECKPOINT_DECLINED_SUBSUMED"
    assert task.handler.current_checkpoint_id == 2
    assert "0-after-1" in task.records()  # channel 0 was released with the abort
    assert gate.is_blocked(1) and not gate.is_blocked(0)
    writers[2].broadcast_event(barrier(1))  # late barrier of the aborted checkpoint: ignored
    writers[2].emit("2-after-1")
    task.drain()
    assert not gate.is_blocked(2) and "2-after-1" in task.records()
    writers[1].emit("1-after-2")
    for w in (writers[0], writers[2]):
        w.broadcast_event(barrier(2))
    task.drain()
    assert [cid for cid, _ in task.snapshots] == [2]
    assert task.records(task.snapshots[0][1]) == ["0-after-1", "2-after-1"]
    assert task.records()[-1] == "1-after-2" and gate.num_blocked_channels == 0
    assert len(task.aborted) == 1


def test_cancellation_marker_aborts_the_aligning_checkpoint():
    writers, task = _scripted_gate(3)
    gate = task.inputs[0].gate
    writers[0].broadcast_event(barrier(5))
    writers[0].emit("x")
    task.drain()
    assert gate.is_blocked(0)
    writers[1].broadcast_event(CancelCheckpointMarker(5))
    task.drain()
    assert task.aborted == [(5, CheckpointFailureReason.CHECKPOINT_DECLINED_ON_CANCELLATION_BARRIER)]
    assert not gate.is_blocked(0) and task.records() == ["x"]
    assert task.handler.alignment_duration_ns == 0  # reset by the abort
    for w in writers[1:]:  # the rest of checkpoint 5 is ignored
        w.broadcast_event(barrier(5))
        w.emit("y")
    task.drain()
    assert task.snapshots == [] and gate.num_blocked_channels == 0 and task.records().count("y") == 2
    writers[2].broadcast_event(CancelCheckpointMarker(5))  # a repeated marker: nothing more
    task.drain()
    assert len(task.aborted) == 1
    for w in writers:  # the next checkpoint aligns normally
        w.broadcast_event(barrier(6))
    task.drain()
    assert [cid for cid, _ in task.snapshots] == [6]


def test_cancellation_marker_of_a_newer_checkpoint_also_declines_the_aligning_one():
    writers, task = _scripted_gate(2)
    writers[0].broadcast_event(barrier(1))
    task.drain()
    writers[1].broadcast_event(CancelCheckpointMarker(2))
    task.drain()
    assert task.aborted == [
        (1, CheckpointFailureReason.CHECKPOINT_DECLINED_SUBSUMED),
        (2, CheckpointFailureReason.CHECKPOINT_DECLINED_ON_CANCELLATION_BARRIER),
    ]
    writers[1].broadcast_event(barrier(2))
    writers[0].broadcast_event(barrier(2))
    task.drain()
    assert task.snapshots == [] and task.inputs[0].gate.num_blocked_channels == 0


def test_end_of_partition_of_the_last_missing_channel_triggers_the_checkpoint():
    writers, task = _scripted_gate(3)
    gate = task.inputs[0].gate
    for w in writers[:2]:
        w.emit("pre")
        w.broadcast_event(barrier(1))
        w.emit("post")
    writers[2].emit("last")
    task.drain()
    assert gate.num_blocked_channels == 2 and task.snapshots == []
    writers[2].finish()  # ends without barrier 1: it no longer needs to deliver it
    task.drain()
    assert [cid for cid, _ in task.snapshots] == [1]
    assert sorted(task.records(task.snapshots[0][1])) == ["last", "pre", "pre"]
    assert task.records().count("post") == 2 and task.aborted == []
    assert task.handler.num_open_channels == 2
    for w in writers[:2]:  # the finished channel is not waited for any more
        w.broadcast_event(barrier(2))
    task.drain()
    assert [cid for cid, _ in task.snapshots] == [1, 2]


def test_end_of_partition_during_alignment_can_decline_instead():
    parts = [ResultPartition(1, "PIPELINED") for _ in range(2)]
    writers = [RecordWriter(p, buffer_timeout_ms=0) for p in parts]
    task = Task([StreamTaskNetworkInput(local_gate(parts))], checkpoint_after_tasks_finished=False)
    writers[0].broadcast_event(barrier(1))
    writers[1].finish()
    task.drain()
    assert task.aborted == [(1, CheckpointFailureReason.CHECKPOINT_DECLINED_INPUT_END_OF_STREAM)]
    assert task.snapshots == [] and task.inputs[0].gate.num_blocked_channels == 0


def test_single_channel_triggers_at_once_without_blocking():
    blocked, triggered = [], []
    h = CheckpointBarrierHandler(
        [1],
        triggered.append,
        lambda i, c: blocked.append((i, c)),
        lambda: blocked.append("resume"),
        lambda cid, r: None,
    )
    h.process_barrier(CheckpointBarrier(1, 0), 0, 0)
    assert triggered == [CheckpointBarrier(1, 0)] and blocked == []
    assert h.alignment_duration_ns == 0 and not h.is_checkpoint_pending
    h.process_barrier(CheckpointBarrier(1, 0), 0, 0)  # duplicate: ignored
    assert len(triggered) == 1


def test_start_delay_and_alignment_time_use_the_clocks():
    now = [1_000]
    wall = [5_000]
    triggered = []
    h = CheckpointBarrierHandler(
        [2],
        lambda b: triggered.append(h.alignment_duration_ns),
        lambda i, c: None,
        lambda: None,
        lambda cid, r: None,
        clock_ns=lambda: now[0],
        wall_clock_ms=lambda: wall[0],
    )
    h.process_barrier(CheckpointBarrier(1, 4_990), 0, 0)
    assert h.checkpoint_start_delay_ns == 10_000_000
    now[0] += 700
    assert h.alignment_duration_ns == 700
    now[0] += 300
    h.process_barrier(CheckpointBarrier(1, 4_990), 0, 1)
    assert triggered == [1_000] and h.alignment_duration_ns == 1_000


def test_two_input_task_aligns_across_both_inputs():
    """Input 0 is a union of two gates (flattened channels), input 1 a single gate."""
    parts = [ResultPartition(1, "PIPELINED") for _ in range(5)]
    writers = [RecordWriter(p, buffer_timeout_ms=0) for p in parts]
    in0 = StreamTaskNetworkInput(UnionInputGate([local_gate(parts[0:1]), local_gate(parts[1:3])]), 0)
    in1 = StreamTaskNetworkInput(local_gate(parts[3:5]), 1)
    task = Task([in0, in1])
    assert task.handler.num_channels_per_input == (3, 2)
    for p in range(4):  # every channel but input 1's second
        writers[p].emit(("pre", p))
        writers[p].broadcast_event(barrier(9))
        writers[p].emit(("post", p))
    writers[4].emit(("pre", 4))
    task.drain()
    assert sorted(task.handler.blocked_channels) == [(0, 0), (0, 1), (0, 2), (1, 0)]
    assert [in0.gate.is_blocked(c) for c in range(3)] == [True, True, True]
    assert in1.gate.is_blocked(0) and not in1.gate.is_blocked(1)
    assert task.snapshots == [] and all(r[0] == "pre" for r in task.records())
    writers[4].broadcast_event(barrier(9))
    writers[4].emit(("post", 4))
    task.drain()
    assert [cid for cid, _ in task.snapshots] == [9]
    assert sorted(task.records(task.snapshots[0][1])) == [("pre", p) for p in range(5)]
    assert sorted(task.records()) == sorted([("pre", p) for p in range(5)] + [("post", p) for p in range(5)])
    assert in0.gate.num_blocked_channels == 0 and in1.gate.num_blocked_channels == 0
    # which input a record came from is kept
    assert {(i, r) for i, _, r in task.processed if r[0] == "post"} == {
        (0, ("post", 0)),
        (0, ("post", 1)),
        (0, ("post", 2)),
        (1, ("post", 3)),
        (1, ("post", 4)),
    }


def test_bad_arguments_name_the_problem():
    noop = lambda *a: None  # noqa: E731
    with pytest.raises(ValueError, match="at least one input"):
        CheckpointBarrierHandler([], noop, noop, noop, noop)
    with pytest.raises(ValueError, match="input 1 must have at least one channel"):
        CheckpointBarrierHandler([2, 0], noop, noop, noop, noop, task_name="Map")
    h = CheckpointBarrierHandler([2, 1], noop, noop, noop, noop, task_name="Join")
    with pytest.raises(IndexError, match="Join: input 1 has no channel 1"):
        h.process_barrier(barrier(1), 1, 1)
    with pytest.raises(IndexError, match="Join: no input 2"):
        h.process_end_of_partition(2, 0)


def test_a_failing_snapshot_still_releases_the_blocked_channels():
    writers, task = _scripted_gate(2)
    task.fail_snapshot = True
    writers[0].broadcast_event(barrier(1))
    writers[0].emit("after")
    task.drain()
    writers[1].broadcast_event(barrier(1))
    with pytest.raises(RuntimeError, match="snapshot failed"):
        task.drain()
    assert task.inputs[0].gate.num_blocked_channels == 0 and not task.handler.is_checkpoint_pending


# -- random interleavings -----------------------------------------------------------------------
@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_random_interleavings_snapshot_exactly_the_pre_barrier_records(data):
    n = data.draw(st.integers(1, 4), label="channels")
    k = data.draw(st.integers(1, 3), label="checkpoints")
    credit = data.draw(st.booleans(), label="credit-based")
    # a script per channel: runs of records between barriers 1..b_c, then the end
    scripts = []
    for c in range(n):
        b_c = data.draw(st.integers(0, k), label=f"barriers of {c}")
        script, seq = [], 0
        for j in range(b_c + 1):
            for _ in range(data.draw(st.integers(0, 4))):
                batch = data.draw(st.integers(1, 6))
                script.append(("records", [(c, seq + i) for i in range(batch)]))
                seq += batch
            script.append(("barrier", j + 1) if j < b_c else ("end", None))
        scripts.append(script)

    parts = [ResultPartition(1, "PIPELINED") for _ in range(n)]
    writers = [RecordWriter(p, buffer_timeout_ms=-1, buffer_size=24) for p in parts]
    if credit:
        gate, channels, conns, fpool = credit_gate(parts, exclusive=1, floating=1)
    else:
        gate = local_gate(parts)
    task = Task([StreamTaskNetworkInput(gate)])

    # expected snapshot of checkpoint j: records before barrier j on each channel
    # (all records of a channel that ends before barrier j)
    expected = {}
    for j in range(1, k + 1):
        exp = []
        for script in scripts:
            for kind, arg in script:
                if kind == "barrier" and arg == j:
                    break
                if kind == "records":
                    exp.extend(arg)
        expected[j] = sorted(exp)
    last = max((sum(1 for kind, _ in s if kind == "barrier") for s in scripts), default=0)

    pos = [0] * n
    while any(p < len(s) for p, s in zip(pos, scripts)):
        live = [c for c in range(n) if pos[c] < len(scripts[c])]
        action = data.draw(st.sampled_from(live + ["poll", "flush"]))  # writing first: shrinks to finite
        if action == "poll":
            task.step()
        elif action == "flush":
            for w in writers:
                if not w.partition.subpartitions[0].is_finished:
                    w.flush_all()
        else:
            kind, arg = scripts[action][pos[action]]
            pos[action] += 1
            w = writers[action]
            if kind == "records":
                w.emit_batch(arg)
            elif kind == "barrier":
                w.broadcast_event(CheckpointBarrier(arg, 0))
            else:
                w.finish()
        if credit:
            assert sum(ch.buffers_in_flight for ch in channels) <= n * 1 + 1
            assert fpool.num_in_use <= 1
    task.run_to_end()

    assert task.aborted == []
    assert [cid for cid, _ in task.snapshots] == list(range(1, last + 1))
    for cid, processed in task.snapshots:
        assert sorted(task.records(processed)) == expected[cid], f"checkpoint {cid}"
    everything = [r for s in scripts for kind, arg in s if kind == "records" for r in arg]
    assert sorted(task.records()) == sorted(everything)  # exactly once
    for c in range(n):
        assert [r for r in task.records() if r[0] == c] == [r for r in everything if r[0] == c]
    assert gate.num_blocked_channels == 0
    if credit:
        assert fpool.num_in_use == 0
