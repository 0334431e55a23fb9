"""ResultPartition + RecordWriter + InputGate with local channels: flush rules, end of
partition, blocking partitions, back pressure, union gates, network input."""

import threading

import pytest

from raylink.shuffle.buffer_pool import LocalBufferPool, NetworkBufferPool
from raylink.shuffle.elements import (
    END_OF_PARTITION,
    CheckpointBarrier,
    EndOfPartition,
    TimestampedRecords,
    Watermark,
    WatermarkStatus,
)
from raylink.shuffle.input_gate import InputGate, LocalInputChannel, StreamTaskNetworkInput, UnionInputGate
from raylink.shuffle.partitioners import BroadcastPartitioner, KeyGroupStreamPartitioner, create_partitioner
from raylink.shuffle.record_writer import RecordWriter
from raylink.shuffle.result_partition import (
    PartitionReleasedError,
    ResultPartition,
    ResultPartitionType,
)
from raylink.shuffle.serializer import RecordDeserializer

pytestmark = pytest.mark.timeout(30)


def local_gate(partition, indices=None):
    indices = range(partition.num_subpartitions) if indices is None else indices
    gate = InputGate([LocalInputChannel(partition.subpartitions[i]) for i in indices])
    gate.request_partitions()
    return gate


def drain(net_input, timeout=5.0):
    """Run a consumer loop (like StreamTask.processInput) until end of input."""
    records, others = [], []
    while True:
        items = net_input.poll_next()
        if items is None:
            if net_input.is_finished():
                return records, others
            net_input.get_available_future().result(timeout=timeout)
            continue
        for it in items:
            if type(it) is list:
                records.extend(it)
            elif type(it) is TimestampedRecords:
                records.extend(zip(it.values, it.timestamps))
            else:
                others.append((net_input.last_channel, it))


def test_partition_types():
    t = ResultPartitionType
    assert t.PIPELINED_BOUNDED.is_pipelined and t.PIPELINED_BOUNDED.is_bounded
    assert t.PIPELINED.is_pipelined and not t.PIPELINED.is_bounded
    assert t.BLOCKING.is_blocking and not t.BLOCKING.is_pipelined and not t.BLOCKING.is_bounded
    assert t.of("blocking") is t.BLOCKING


def test_end_to_end_two_producers_two_threads():
    net = NetworkBufferPool(64)
    parts = [ResultPartition(1, "PIPELINED_BOUNDED", net.create_buffer_pool(1, 4)) for _ in range(2)]
    gate = InputGate([LocalInputChannel(p.subpartitions[0]) for p in parts])
    gate.request_partitions()
    n = 20000

    def produce(idx, part):
        w = RecordWriter(part, buffer_timeout_ms=-1, buffer_size=512)
        for i in range(0, n, 250):
            w.emit_batch([(idx, j, "v%d" % j) for j in range(i, i + 250)])
            while not w.is_available():  # back pressure: suspend on the output future
                w.get_available_future().result(timeout=5)
        w.finish()

    threads = [threading.Thread(target=produce, args=(i, p)) for i, p in enumerate(parts)]
    for t in threads:
        t.start()
    records, others = drain(StreamTaskNetworkInput(gate))
    for t in threads:
        t.join(5)
    for idx in range(2):
        mine = [r for r in records if r[0] == idx]
        assert mine == [(idx, j, "v%d" % j) for j in range(n)]  # per-channel order kept
    assert sorted(ch for ch, it in others if it is END_OF_PARTITION) == [0, 1]
    assert gate.is_finished() and gate.get_available_future().done()
    assert gate.num_buffers_in > 2 * 20 and gate.num_bytes_in > 0
    assert all(p.buffer_pool.num_in_use == 0 for p in parts)  # every permit recycled


def test_flush_always_delivers_each_record_immediately():
    part = ResultPartition(2, "PIPELINED")
    w = RecordWriter(part, create_partitioner("GLOBAL"), buffer_timeout_ms=0)
    gate = local_gate(part)
    d = RecordDeserializer()
    for i in range(5):
        fut = gate.get_available_future()
        assert not fut.done()
        w.emit(("rec", i))
        assert fut.done()
        ch, buf = gate.poll_next()
        assert ch == 0 and d.feed(buf) == [[("rec", i)]]
        assert gate.poll_next() is None


def test_partial_buffer_only_on_flush_and_full_buffer_without_flush():
    part = ResultPartition(1, "PIPELINED")
    w = RecordWriter(part, buffer_timeout_ms=100, buffer_size=64)
    gate = local_gate(part)
    w.emit("small")
    assert gate.poll_next() is None and not gate.get_available_future().done()
    w.flush_all()
    ch, buf = gate.poll_next()
    assert RecordDeserializer().feed(buf) == [["small"]]

    d = RecordDeserializer()
    w.emit_batch(["x" * 20] * 4)  # ~84 bytes: one full 64-byte buffer, the rest waits
    ch, buf = gate.poll_next()
    assert len(buf) == 64
    assert gate.poll_next() is None
    got = d.feed(buf)
    w.flush_all()
    got += d.feed(gate.poll_next()[1])
    assert [v for run in got for v in run] == ["x" * 20] * 4


def test_output_flusher_flushes_periodically():
    part = ResultPartition(1, "PIPELINED")
    w = RecordWriter(part, buffer_timeout_ms=20)
    gate = local_gate(part)
    flusher = w.start_output_flusher()  # flush_all from the flusher thread (nothing else writes now)
    try:
        fut = gate.get_available_future()
        w.emit("late")
        fut.result(timeout=2)  # completed by the flusher, not by a full buffer
        assert RecordDeserializer().feed(gate.poll_next()[1]) == [["late"]]
        assert flusher.num_flushes >= 1
    finally:
        w.close()
    assert not flusher.is_alive()
    assert RecordWriter(part, buffer_timeout_ms=-1).start_output_flusher() is None
    assert RecordWriter(part, buffer_timeout_ms=0).start_output_flusher() is None


def test_events_flush_and_travel_alone_to_every_channel():
    part = ResultPartition(2, "PIPELINED")
    w = RecordWriter(part, create_partitioner("RESCALE"), buffer_timeout_ms=-1)
    gate = local_gate(part)
    net_input = StreamTaskNetworkInput(gate)
    w.emit_batch([1, 2, 3, 4])
    w.broadcast_event(CheckpointBarrier(5, 99))
    seen = []
    while (items := net_input.poll_next()) is not None:
        seen.append((net_input.last_channel, items))
    assert [items for c, items in seen if c == 0] == [[[1, 3]], [CheckpointBarrier(5, 99)]]
    assert [items for c, items in seen if c == 1] == [[[2, 4]], [CheckpointBarrier(5, 99)]]
    # per channel: the data before the barrier comes first
    for ch in (0, 1):
        kinds = [type(items[0]) for c, items in seen if c == ch]
        assert kinds == [list, CheckpointBarrier]


def test_finish_sends_end_of_partition_to_all_subpartitions():
    part = ResultPartition(3, "PIPELINED")
    w = RecordWriter(part, create_partitioner("HASH", key_selector=lambda v: v, max_parallelism=128))
    gate = local_gate(part)
    w.emit_batch(["k%d" % i for i in range(100)])
    w.finish()
    records, others = drain(StreamTaskNetworkInput(gate))
    assert sorted(records) == sorted("k%d" % i for i in range(100))
    assert sorted(ch for ch, it in others if it is END_OF_PARTITION) == [0, 1, 2]
    assert all(s.is_finished for s in part.subpartitions)
    with pytest.raises(RuntimeError):
        part.subpartitions[0].add(b"late", False)


def test_keyed_exchange_routes_each_key_to_one_consumer():
    part = ResultPartition(4, "PIPELINED")
    w = RecordWriter(part, KeyGroupStreamPartitioner(lambda v: v[0], 128), buffer_timeout_ms=-1)
    gates = [local_gate(part, [i]) for i in range(4)]
    values = [("key%d" % (i % 37), i) for i in range(2000)]
    w.emit_batch(values[:1000])
    for v in values[1000:]:
        w.emit(v)
    w.finish()
    owner = {}
    total = 0
    for i, g in enumerate(gates):
        recs, _ = drain(StreamTaskNetworkInput(g))
        total += len(recs)
        for k, _ in recs:
            assert owner.setdefault(k, i) == i
    assert total == 2000 and len(set(owner.values())) == 4


def test_broadcast_writer_sends_everything_everywhere():
    part = ResultPartition(3, "PIPELINED")
    w = RecordWriter(part, BroadcastPartitioner())
    gates = [local_gate(part, [i]) for i in range(3)]
    w.emit_batch([1, 2])
    w.emit(3)
    w.emit_watermark(10)
    w.finish()
    for g in gates:
        recs, others = drain(StreamTaskNetworkInput(g))
        assert recs == [1, 2, 3]
        assert [it for _, it in others] == [Watermark(10), END_OF_PARTITION]


def test_blocking_subpartition_readable_only_after_finish():
    part = ResultPartition(1, "BLOCKING")
    w = RecordWriter(part, buffer_size=64)
    notified = threading.Event()
    view = part.create_subpartition_view(0, notified.set)
    w.emit_batch(["r%d" % i for i in range(50)])
    w.flush_all()
    assert view.poll_buffer() is None and not notified.is_set()
    w.finish()
    assert notified.is_set()

    def read(v):
        d = RecordDeserializer()
        out = []
        while (r := v.poll_buffer()) is not None:
            if r.is_event:
                out.append("EOP")
            else:
                out.extend(x for run in d.feed(r.buffer) for x in run)
        return out

    expect = ["r%d" % i for i in range(50)] + ["EOP"]
    assert read(view) == expect
    assert read(part.create_subpartition_view(0, lambda: None)) == expect  # re-readable


def test_blocking_partition_through_gate():
    part = ResultPartition(2, ResultPartitionType.BLOCKING)
    w = RecordWriter(part, create_partitioner("REBALANCE"))
    gate = local_gate(part)
    w.emit_batch(list(range(10)))
    assert gate.poll_next() is None
    w.finish()
    recs, _ = drain(StreamTaskNetworkInput(gate))
    assert sorted(recs) == list(range(10))


def test_back_pressure_on_exhausted_output_pool():
    pool = LocalBufferPool(None, 0, 2)
    part = ResultPartition(1, "PIPELINED_BOUNDED", pool)
    w = RecordWriter(part, buffer_timeout_ms=-1, buffer_size=64)
    gate = local_gate(part)
    w.emit_batch(["y" * 30] * 6)  # ~186 bytes -> 2 full buffers
    assert not w.is_available()
    fut = w.get_available_future()
    assert not fut.done()
    assert part.usage() == 1.0
    gate.poll_next()  # the consumer takes a buffer -> its permit is recycled
    assert fut.done() and w.is_available()


def test_subpartition_backlog_and_poll_fields():
    part = ResultPartition(1, "PIPELINED")
    sub = part.subpartitions[0]
    sub.add(b"a", False)
    sub.add(b"b", False)
    sub.add(b"e", True)
    assert sub.backlog == 2
    r = sub.poll_buffer()
    assert (r.buffer, r.is_event, r.backlog, r.more_available, r.next_is_event) == (b"a", False, 1, True, False)
    r = sub.poll_buffer()
    assert (r.backlog, r.more_available, r.next_is_event) == (0, True, True)
    r = sub.poll_buffer()
    assert r.is_event and not r.more_available
    assert sub.poll_buffer() is None


def test_listener_called_once_per_empty_to_non_empty_transition():
    part = ResultPartition(1, "PIPELINED")
    calls = []
    sub = part.subpartitions[0]
    sub.create_read_view(lambda: calls.append(1))
    sub.add(b"1")
    sub.add(b"2")
    assert calls == [1]
    sub.poll_buffer()
    sub.poll_buffer()
    sub.add(b"3")
    assert calls == [1, 1]


def test_released_partition_fails_reader():
    pool = LocalBufferPool(None, 0, 4)
    part = ResultPartition(1, "PIPELINED_BOUNDED", pool)
    w = RecordWriter(part, buffer_size=64)
    gate = local_gate(part)
    w.emit_batch(["z" * 40] * 4)
    assert pool.num_in_use > 0
    part.release()
    assert pool.num_in_use == 0
    with pytest.raises(PartitionReleasedError):
        gate.poll_next()


def test_union_gate_reads_all_and_finishes():
    parts = [ResultPartition(1, "PIPELINED") for _ in range(3)]
    g1 = InputGate([LocalInputChannel(parts[0].subpartitions[0])])
    g2 = InputGate([LocalInputChannel(p.subpartitions[0]) for p in parts[1:]])
    union = UnionInputGate([g1, g2])
    union.request_partitions()
    assert union.num_channels == 3 and union.channel_offsets == [0, 1]
    fut = union.get_available_future()
    assert not fut.done()
    writers = [RecordWriter(p, buffer_timeout_ms=0) for p in parts]
    writers[2].emit("c")
    assert fut.done()
    writers[0].emit("a")
    writers[1].emit("b")
    for w in writers:
        w.finish()
    recs, others = drain(StreamTaskNetworkInput(union))
    assert sorted(recs) == ["a", "b", "c"]
    assert sorted(ch for ch, it in others if type(it) is EndOfPartition) == [0, 1, 2]
    assert union.is_finished() and union.get_available_future().done()
    assert union.gate_of_channel(2) == (1, 1)


def test_network_input_aligns_watermarks_and_statuses():
    parts = [ResultPartition(1, "PIPELINED") for _ in range(2)]
    gate = InputGate([LocalInputChannel(p.subpartitions[0]) for p in parts])
    gate.request_partitions()
    ni = StreamTaskNetworkInput(gate)
    w0, w1 = (RecordWriter(p, buffer_timeout_ms=0) for p in parts)

    def step():
        out = []
        while (items := ni.poll_next()) is not None:
            out.extend(items)
        return out

    w0.emit_watermark(5)
    assert step() == []  # channel 1 still at Long.MIN
    w1.emit_watermark(3)
    assert step() == [Watermark(3)]
    w1.emit_timestamped("late", 4)
    w1.emit_watermark(10)
    assert step() == [TimestampedRecords(["late"], [4]), Watermark(5)]
    w0.broadcast_emit(WatermarkStatus.IDLE)
    assert step() == [Watermark(10)]
    w1.broadcast_emit(WatermarkStatus.IDLE)
    assert step() == [WatermarkStatus.IDLE]


def test_consumed_pipelined_partition_returns_its_pool_to_the_network():
    net = NetworkBufferPool(16)
    part = ResultPartition(2, "PIPELINED_BOUNDED", net.create_buffer_pool(4, 8))
    assert net.free_buffers == 12
    w = RecordWriter(part, create_partitioner("REBALANCE"), buffer_size=64)
    gate = local_gate(part)
    w.emit_batch(["q" * 30] * 20)
    w.finish()
    drain(StreamTaskNetworkInput(gate))
    assert part.is_consumed and net.free_buffers == 16


def test_release_returns_pool_of_blocking_partition():
    net = NetworkBufferPool(8)
    part = ResultPartition(1, "BLOCKING", net.create_buffer_pool(2, 4))
    assert net.free_buffers == 6
    part.release()
    assert part.is_released and net.free_buffers == 8


@pytest.mark.parametrize("stamps", [7, "per-record"])
def test_timestamped_batches_through_a_keyed_writer(stamps):
    part = ResultPartition(3, "PIPELINED")
    w = RecordWriter(part, create_partitioner("HASH", key_selector=lambda v: v[0], max_parallelism=128))
    gates = [local_gate(part, [i]) for i in range(3)]
    values = [("k%d" % (i % 11), i) for i in range(500)]
    ts = 7 if stamps == 7 else [1000 + i for i in range(500)]
    w.emit_timestamped_batch(values, ts)
    w.finish()
    seen = []
    for g in gates:
        recs, _ = drain(StreamTaskNetworkInput(g))
        seen.extend(recs)
    expect = [(v, 7 if stamps == 7 else 1000 + v[1]) for v in values]
    assert sorted(seen, key=lambda r: r[0][1]) == expect


def test_objects_handed_over_through_a_bounded_keyed_exchange_arrive_in_order_with_watermarks():
    net = NetworkBufferPool(64)
    part = ResultPartition(2, "PIPELINED_BOUNDED", net.create_buffer_pool(1, 4))
    w = RecordWriter(part, KeyGroupStreamPartitioner(lambda v: v[0], 128), buffer_timeout_ms=-1)
    w.hand_over_objects()
    assert all(s.hand_over_objects for s in w._serializers)
    gates = [local_gate(part, [i]) for i in range(2)]
    values = [(f"key{i % 37}", i) for i in range(4000)]
    results = [None, None]

    def consume(i):
        results[i] = drain(StreamTaskNetworkInput(gates[i]))

    threads = [threading.Thread(target=consume, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for start in range(0, 4000, 500):  # runs of ~250 per channel: each an object buffer taking a permit
        w.emit_timestamped_batch(values[start : start + 500], start)
        w.emit_watermark(start)
    w.finish()
    for t in threads:
        t.join(10)
    received = sorted(r for recs, _ in results for r in recs)
    assert received == sorted((v, i // 500 * 500) for i, v in enumerate(values))
    for recs, others in results:
        assert [v[1] for v, _ in recs] == sorted(v[1] for v, _ in recs)  # each channel in order
        assert [it for _, it in others][-1] is END_OF_PARTITION
    assert part.buffer_pool.num_in_use == 0


@pytest.mark.parametrize("kind", ["broadcast", "blocking"])
def test_broadcast_and_blocking_partitions_keep_encoding(kind):
    if kind == "broadcast":
        w = RecordWriter(ResultPartition(3, "PIPELINED"), BroadcastPartitioner())
    else:
        w = RecordWriter(ResultPartition(2, "BLOCKING"))
    w.hand_over_objects()  # their buffers are read by several readers, or several times
    assert not any(s.hand_over_objects for s in w._serializers)


def test_only_the_named_subpartitions_hand_objects_over():
    """A TaskExecutor on Ray names the subpartitions whose readers it hosts; the others
    (read by other processes) keep encoding."""
    w = RecordWriter(ResultPartition(3, "PIPELINED"), KeyGroupStreamPartitioner(lambda v: v, 128))
    w.hand_over_objects(i for i in (0, 2))
    assert [s.hand_over_objects for s in w._serializers] == [True, False, True]


def test_a_writer_s_serializers_share_packers_and_a_reader_drops_its_unpackers_at_end_of_partition():
    part = ResultPartition(3, "PIPELINED")
    w = RecordWriter(part, create_partitioner("REBALANCE"), buffer_timeout_ms=-1, buffer_size=64)
    assert len({id(s._bpacker) for s in w._serializers}) == 1
    values = [("v", i, [i] * (i % 4)) for i in range(300)]  # lists: packed by the shared msgpack packers
    w.emit_batch(values[:150])
    for v in values[150:]:
        w.emit(v)
    w.finish()
    net_input = StreamTaskNetworkInput(local_gate(part))
    records, others = drain(net_input)
    assert sorted(records, key=lambda r: r[1]) == values
    assert sorted(ch for ch, it in others if it is END_OF_PARTITION) == [0, 1, 2]
    assert all(d._unpacker is None for d in net_input._deserializers)  # gone with their streams
