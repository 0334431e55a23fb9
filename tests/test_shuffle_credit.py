"""Credit-based flow control: buffers in flight per channel never exceed exclusive + floating."""

import threading

import pytest

from raylink.shuffle.buffer_pool import LocalBufferPool, NetworkBufferPool
from raylink.shuffle.credit import (
    BufferResponse,
    CreditBasedInputChannel,
    CreditBasedSequenceNumberingViewReader,
    CreditProtocolError,
    connect_local,
    create_floating_pool,
)
from raylink.shuffle.elements import END_OF_PARTITION, CheckpointBarrier, EndOfPartition
from raylink.shuffle.input_gate import InputGate, StreamTaskNetworkInput
from raylink.shuffle.record_writer import RecordWriter
from raylink.shuffle.result_partition import ResultPartition
from raylink.shuffle.serializer import RecordDeserializer

pytestmark = pytest.mark.timeout(30)


def credit_gate(subpartitions, exclusive=2, floating=8, network_pool=None):
    pool = create_floating_pool(network_pool, floating)
    channels = [CreditBasedInputChannel(pool, exclusive, network_pool) for _ in subpartitions]
    conns = [connect_local(sp, ch) for sp, ch in zip(subpartitions, channels)]
    gate = InputGate(channels)
    return gate, channels, conns, pool


def network_items(net_input):
    """What a StreamTaskNetworkInput delivers until it is finished, waiting (10 s at most)
    for availability whenever nothing is ready."""
    while True:
        items = net_input.poll_next()
        if items is None:
            if net_input.is_finished():
                return
            net_input.get_available_future().result(timeout=10)
            continue
        yield items


def test_sender_stops_at_credit_and_floating_follows_backlog():
    part = ResultPartition(1, "PIPELINED")
    w = RecordWriter(part, buffer_timeout_ms=-1, buffer_size=64)
    values = ["v%03d" % i + "x" * 20 for i in range(300)]
    w.emit_batch(values)
    w.finish()
    sub = part.subpartitions[0]
    produced = sub.backlog
    assert produced > 50

    gate, (ch,), (conn,), fpool = credit_gate([sub])
    gate.request_partitions()  # initial credit = 2 exclusive buffers
    # 2 sent on exclusive credit; the backlog they carried got 8 floating buffers -> 8 more
    assert ch.buffers_in_flight == 10 and ch.num_floating_buffers == 8
    assert conn.reader.credit == 0
    assert sub.backlog == produced - 10
    assert fpool.num_in_use == 8

    d = RecordDeserializer()
    got = []
    eop = 0
    while True:
        r = gate.poll_next()
        if r is None:
            break
        assert ch.buffers_in_flight <= 10
        assert ch.buffers_in_flight + conn.reader.credit <= 10
        _, boe = r
        if type(boe) is EndOfPartition:
            eop += 1
        else:
            got.extend(x for run in d.feed(boe) for x in run)
    assert got == values and eop == 1
    assert ch.max_buffers_in_flight == 10
    assert gate.is_finished()
    assert fpool.num_in_use == 0  # floating buffers went back to the gate's pool


def test_event_needs_no_credit():
    part = ResultPartition(1, "PIPELINED")
    sub = part.subpartitions[0]
    sub.finish()  # only EndOfPartition queued
    reader = CreditBasedSequenceNumberingViewReader(sub)
    reader.request_subpartition()
    assert reader.credit == 0 and reader.is_available()
    r = reader.poll_next()
    assert r.is_event and r.sequence_number == 0
    sub2 = ResultPartition(1, "PIPELINED").subpartitions[0]
    sub2.add(b"data")
    reader2 = CreditBasedSequenceNumberingViewReader(sub2)
    reader2.request_subpartition()
    assert not reader2.is_available() and reader2.poll_next() is None
    reader2.add_credit(1)
    assert reader2.poll_next().buffer == b"data" and reader2.credit == 0


def test_protocol_errors():
    ch = CreditBasedInputChannel(None, exclusive_buffers=1, announce_credit=lambda n: None)
    ch.on_buffer(BufferResponse(b"a", False, 0, 0))
    with pytest.raises(CreditProtocolError, match="expected buffer #1"):
        ch.on_buffer(BufferResponse(b"b", False, 0, 5))
    with pytest.raises(CreditProtocolError, match="without credit"):
        ch.on_buffer(BufferResponse(b"b", False, 0, 1))


def test_exclusive_buffers_reserved_from_network_pool():
    net = NetworkBufferPool(10)
    part = ResultPartition(2, "PIPELINED")
    gate, channels, _, _ = credit_gate(part.subpartitions, exclusive=2, floating=4, network_pool=net)
    assert net.free_buffers == 6
    for ch in channels:
        ch.release()
    assert net.free_buffers == 10


def test_slow_consumer_bounds_in_flight_buffers_and_stops_producer():
    n_channels = 2
    out_pool = LocalBufferPool(None, 0, 4 * n_channels)
    part = ResultPartition(n_channels, "PIPELINED_BOUNDED", out_pool)
    gate, channels, conns, fpool = credit_gate(part.subpartitions, exclusive=2, floating=8)
    gate.request_partitions()
    net_input = StreamTaskNetworkInput(gate)
    n = 30000
    back_pressured = []
    max_out_in_use = []

    def produce():
        w = RecordWriter(part, buffer_timeout_ms=-1, buffer_size=256)
        for i in range(0, n, 100):
            w.emit_batch([("k", j) for j in range(i, i + 100)])
            max_out_in_use.append(out_pool.num_in_use)
            if not w.is_available():
                back_pressured.append(i)
                w.get_available_future().result(timeout=10)
        w.finish()

    producer = threading.Thread(target=produce)
    producer.start()
    received = []
    max_floating = 0
    for items in network_items(net_input):
        for ch in channels:
            assert ch.buffers_in_flight <= 2 + 8
        max_floating = max(max_floating, fpool.num_in_use)
        for it in items:
            if type(it) is list:
                received.extend(it)
                sum(hash(str(x)) for x in it)  # a slow consumer: real work per record
    producer.join(10)
    assert sorted(v for _, v in received) == list(range(n))
    assert all(ch.max_buffers_in_flight <= 10 for ch in channels)
    assert max_floating <= 8  # the gate's floating buffers are shared by its channels
    assert back_pressured, "the producer never saw back pressure"
    # the producer's pool overdraft is bounded by one emit_batch per suspension
    assert max(max_out_in_use) <= 4 * n_channels + 2 * n_channels
    assert fpool.num_in_use == 0 and out_pool.num_in_use == 0
    assert [c.reader.num_buffers_sent for c in conns] == [c.num_buffers_received for c in channels]


def test_credit_channel_end_of_partition_through_network_input():
    part = ResultPartition(1, "PIPELINED")
    gate, (ch,), _, _ = credit_gate(part.subpartitions, exclusive=1, floating=0)
    gate.request_partitions()
    w = RecordWriter(part, buffer_timeout_ms=0)
    ni = StreamTaskNetworkInput(gate)
    w.emit("one")
    assert ni.poll_next() == [["one"]]
    w.finish()
    assert ni.poll_next() == [END_OF_PARTITION]
    assert ni.is_finished()


def test_channels_waiting_for_floating_buffers_get_them_when_recycled():
    """Two channels compete for 2 floating buffers; listeners are not duplicated."""
    fpool = LocalBufferPool(None, 0, 2)
    a = CreditBasedInputChannel(fpool, 1, announce_credit=lambda n: None)
    b = CreditBasedInputChannel(fpool, 1, announce_credit=lambda n: None)
    a.on_buffer(BufferResponse(b"a0", False, 5, 0))  # backlog 5: wants 6 free, gets both floating
    assert a.num_floating_buffers == 2 and fpool.num_in_use == 2
    b.on_buffer(BufferResponse(b"b0", False, 3, 0))  # nothing left: b waits as a listener
    assert b.num_floating_buffers == 0
    owners = [m.__self__ for m in fpool._listeners]
    assert len(owners) == 2 and set(owners) == {a, b}  # both still want more, once each
    for _ in range(2):  # the sender had 1 exclusive + 2 floating credits for a
        a.on_buffer(BufferResponse(b"a", False, 0, a._expected_sequence))  # backlog now 0
    assert a.buffers_in_flight == 3
    with pytest.raises(CreditProtocolError):
        a.on_buffer(BufferResponse(b"a", False, 0, a._expected_sequence))
    while a.get_next_buffer() is not None:  # a no longer needs its floating buffers
        pass
    assert b.num_floating_buffers == 2  # ...which went to the waiting channel b
    assert a.num_floating_buffers == 0 and fpool.num_in_use == 2
    assert [m.__self__ for m in fpool._listeners] == [b]  # b still wants 4, has 2


def test_many_producers_share_few_floating_buffers_without_deadlock():
    parts = [ResultPartition(1, "PIPELINED_BOUNDED", LocalBufferPool(None, 0, 3)) for _ in range(4)]
    gate, channels, _, fpool = credit_gate([p.subpartitions[0] for p in parts], exclusive=1, floating=3)
    gate.request_partitions()
    n = 3000

    def produce(idx, part):
        w = RecordWriter(part, buffer_timeout_ms=-1, buffer_size=128)
        for i in range(0, n, 50):
            w.emit_batch([(idx, j) for j in range(i, i + 50)])
            if not w.is_available():
                w.get_available_future().result(timeout=10)
        w.finish()

    threads = [threading.Thread(target=produce, args=(i, p)) for i, p in enumerate(parts)]
    for t in threads:
        t.start()
    net_input = StreamTaskNetworkInput(gate)
    got = {i: [] for i in range(4)}
    for items in network_items(net_input):
        assert fpool.num_in_use <= 3
        for it in items:
            if type(it) is list:
                for idx, j in it:
                    got[idx].append(j)
    for t in threads:
        t.join(10)
    assert all(got[i] == list(range(n)) for i in range(4))
    assert all(ch.max_buffers_in_flight <= 1 + 3 for ch in channels)


# -- batching for expensive transports (the Ray transport's settings) --------------------------------
class RecordingConnection:
    """A transport that ships only when the reader says a batch is worth it (or on a flush)."""

    def __init__(self, sub, channel, batch):
        self.reader = CreditBasedSequenceNumberingViewReader(sub, on_available=self.notify)
        self.channel = channel
        self.batch = batch
        self.shipments = []
        channel.announce_credit = self.credits
        channel.request = self.open
        self.announcements = []

    def open(self, initial):
        self.reader.request_subpartition(every_buffer=True)
        self.reader.add_credit(initial)

    def credits(self, n):
        self.announcements.append(n)
        self.reader.add_credit(n)

    def notify(self, reader, flushed):
        if not (flushed or reader.should_send(self.batch)):
            return
        sent = []
        while True:
            r = reader.poll_next()
            if r is None:
                break
            sent.append(r)
        if sent:
            self.shipments.append(len(sent))
            for r in sent:
                self.channel.on_buffer(r)


FULL = ["x" * 62]  # packs to exactly one 64-byte buffer


def batching_setup(batch=4, floating=8, pool_size=16):
    net = NetworkBufferPool(64, 64)
    out_pool = net.create_buffer_pool(pool_size, pool_size)
    part = ResultPartition(1, "PIPELINED_BOUNDED", out_pool)
    writer = RecordWriter(part, buffer_timeout_ms=-1, buffer_size=64)
    channel = CreditBasedInputChannel(
        create_floating_pool(net, floating), 2, net, min_credit=2 * batch, announce_threshold=batch
    )
    conn = RecordingConnection(part.subpartitions[0], channel, batch)
    channel.request_subpartition()
    return writer, channel, conn


def drain(channel):
    got = 0
    while channel.get_next_buffer() is not None:
        got += 1
    return got


def test_batching_channel_starts_with_credit_for_two_batches():
    _writer, channel, conn = batching_setup(batch=4)
    assert conn.reader.credit == 8  # 2 exclusive + 6 floating taken up front
    assert channel.num_floating_buffers == 6


def test_full_buffers_wait_for_a_batch_then_travel_together():
    writer, channel, conn = batching_setup(batch=4)
    writer.emit_batch(FULL * 3)  # 3 full 64-byte buffers
    assert conn.shipments == []  # below a batch, no flush yet: nothing shipped
    writer.emit_batch(FULL * 2)
    assert conn.shipments == [4]  # the batch of 4 went in one shipment
    assert channel.buffers_in_flight == 4


def test_a_flush_ships_what_is_held_at_once():
    writer, channel, conn = batching_setup(batch=4)
    writer.emit_batch(["x" * 30])
    assert conn.shipments == []
    writer.flush_all()
    assert conn.shipments == [1]


def test_a_flush_seen_without_credit_is_kept_until_credit_arrives():
    writer, channel, conn = batching_setup(batch=4)
    writer.emit_batch(FULL * 16)  # 8 shipped on credit, the rest queued
    assert sum(conn.shipments) == 8 and conn.reader.credit == 0
    writer.finish()  # flush + end of partition while the reader has no credit
    queued = conn.reader.subpartition.backlog
    assert queued > 0
    drain(channel)  # consuming announces credit: the pending flush ships everything it allows
    assert sum(conn.shipments) > 8
    while drain(channel):
        pass
    assert conn.reader.subpartition.backlog == 0
    assert channel.buffers_in_flight == 0


def test_credit_is_announced_a_batch_at_a_time():
    writer, channel, conn = batching_setup(batch=4)
    writer.emit_batch(FULL * 8)
    assert conn.shipments == [4, 4] and conn.reader.credit == 0
    while channel.buffers_in_flight:
        before = len(conn.announcements)
        channel.get_next_buffer()
        if channel.buffers_in_flight and len(conn.announcements) > before:
            assert conn.announcements[-1] >= 4  # while data is queued, only whole batches
    assert conn.announcements and conn.reader.credit >= 4


def test_a_drained_channel_keeps_small_credit_while_the_sender_has_enough():
    writer, channel, conn = batching_setup(batch=4)
    writer.emit_batch(FULL * 6)  # one batch of 4 shipped, 2 held back
    assert conn.shipments == [4]
    writer.flush_all()  # the 2 held back travel now
    assert conn.shipments == [4, 2] and conn.reader.credit == 2
    assert drain(channel) == 6
    assert conn.announcements == [4]  # the sender holds 6 >= 4: the last 2 wait
    assert channel.unannounced_credit == 2


def test_a_drained_channel_announces_below_the_threshold_when_the_sender_is_short():
    # only 2 floating buffers: credit for two batches (8) is out of reach, capacity is 4
    writer, channel, conn = batching_setup(batch=4, floating=2)
    assert conn.reader.credit == 4
    writer.emit_batch(FULL * 3)
    writer.flush_all()
    assert conn.shipments == [3] and conn.reader.credit == 1
    assert drain(channel) == 3
    assert conn.announcements == [3]  # queue dry, sender held 1 < 4: all freed credit goes out


def test_an_event_behind_the_last_data_buffer_does_not_hold_credit_back():
    # No floating buffer to be had (a blocked channel of the same gate holds them all while a
    # checkpoint aligns): the 2 exclusive buffers are all the credit. The sender spends them,
    # a barrier follows, and more data waits behind it. Once the data is consumed the credit
    # must go back although the barrier is still queued, or the sender never sends again.
    writer, channel, conn = batching_setup(batch=4, floating=0)
    assert conn.reader.credit == 2
    writer.emit_batch(FULL * 2)
    writer.broadcast_event(CheckpointBarrier(1, 0))
    writer.emit_batch(FULL * 2)
    writer.flush_all()
    assert conn.reader.credit == 0 and conn.reader.subpartition.backlog == 2
    taken = [channel.get_next_buffer() for _ in range(3)]
    assert [is_event for _buf, is_event, *_ in taken] == [False, False, True]
    assert conn.announcements == [2]
    assert conn.reader.subpartition.backlog == 0 and channel.buffers_in_flight == 2
    assert drain(channel) == 2


def test_exhausted_output_pool_ships_held_buffers():
    # a pool of 3 buffers cannot hold a batch of 4: running dry flushes the readers
    writer, channel, conn = batching_setup(batch=4, pool_size=3)
    writer.emit_batch(FULL * 3)
    assert conn.shipments == [3]


def test_a_batching_sender_holds_full_buffers_at_most_the_batch_delay():
    from raylink.shuffle.credit import CreditBasedSequenceNumberingViewReader
    from raylink.shuffle.result_partition import PipelinedSubpartition

    sub = PipelinedSubpartition(0)
    reader = CreditBasedSequenceNumberingViewReader(sub)
    reader.request_subpartition(every_buffer=True)
    reader.add_credit(64)
    assert sub.oldest_ns == 0
    for _ in range(3):
        sub.add(b"x" * 100)
    delay = 20_000_000
    # 3 buffers, a batch is 32 and the credit is plenty: worth waiting for more ...
    assert not reader.should_send(32) and not reader.should_send(32, delay)
    # ... until the oldest of them has waited the batch delay (its clock set back here)
    sub.oldest_ns -= delay
    assert reader.should_send(32, delay) and not reader.should_send(32)
    while reader.poll_next() is not None:
        pass
    assert sub.oldest_ns == 0  # drained
