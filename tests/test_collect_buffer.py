"""The collect sink's buffer when its reader is in another process (``encode=True``): batches
are encoded as they are added and taken as one bytes that decodes to the records in order;
the record and the byte bound both hold the writer back until the reader takes; a reader
waiting on the shared condition is woken when records start to queue and when half a bound
is queued, not for every batch."""

from __future__ import annotations

import threading

import pytest

from raylink.core.row import Row
from raylink.operators.collect import CollectBuffer
from raylink.shuffle.collect_codec import decode_records

pytestmark = pytest.mark.timeout(60)


def blocked_add(buffer: CollectBuffer, values: list) -> threading.Event:
    """``buffer.add(values)`` in a thread; the event is set once it returned."""
    added = threading.Event()

    def writer():
        buffer.add(values)
        added.set()

    threading.Thread(target=writer, daemon=True).start()
    return added


def test_an_encoded_buffer_hands_over_one_bytes_of_every_batch_in_order():
    buffer = CollectBuffer(max_records=1000, encode=True)
    batches = [[("a", 1), ("b", 2)], [Row(x=1), {"k": [1]}], [3, 4.5, None], [("c", 2**80)]]
    for batch in batches:
        buffer.add(batch)
    assert len(buffer) == 8 and buffer.queued_bytes > 0
    data, closed = buffer.take()
    assert type(data) is bytes and not closed
    assert decode_records(data) == [r for b in batches for r in b]
    assert buffer.take() == ([], False) and len(buffer) == 0 and buffer.queued_bytes == 0


def test_close_hands_over_the_rest_decoded():
    buffer = CollectBuffer(max_records=1000, encode=True)
    buffer.add([("a", 1)])
    buffer.add([Row(y=2)])
    assert buffer.close() == [("a", 1), Row(y=2)]
    assert buffer.take() == ([], True)
    buffer.add([5])  # after close: dropped, never blocks
    assert len(buffer) == 0


@pytest.mark.parametrize("bound", ["records", "bytes"])
def test_either_bound_blocks_the_writer_until_the_reader_takes(bound):
    if bound == "records":
        buffer = CollectBuffer(max_records=4, encode=True)
        first = [1, 2, 3, 4]
    else:
        buffer = CollectBuffer(max_records=10**6, encode=True, max_bytes=1000)
        first = ["x" * 2000]
    buffer.add(first)
    added = blocked_add(buffer, [5])
    assert not added.wait(0.2), "add() did not block on a full buffer"
    data, _ = buffer.take()
    assert decode_records(data) == first
    assert added.wait(5)
    assert buffer.close() == [5]


def test_release_wakes_a_blocked_writer_and_drops_its_records():
    buffer = CollectBuffer(max_records=1, encode=True)
    buffer.add([1])
    added = blocked_add(buffer, [2])
    assert not added.wait(0.1)
    buffer.release()
    assert added.wait(5)
    assert buffer.close() == [1]


class CountingCondition(threading.Condition):
    def __init__(self) -> None:
        super().__init__()
        self.notified = 0

    def notify_all(self) -> None:
        self.notified += 1
        super().notify_all()


@pytest.mark.parametrize("encode", [False, True])
def test_the_reader_is_woken_when_records_start_to_queue_and_at_half_a_bound(encode):
    cond = CountingCondition()
    buffer = CollectBuffer(cond, max_records=100, encode=encode)
    buffer.add([0])
    assert cond.notified == 1  # no longer empty: a waiting reader starts its linger
    for i in range(1, 49):
        buffer.add([i])
    assert cond.notified == 1 and not buffer.half_full()  # 49 queued: nobody woken per batch
    buffer.add([49])
    assert buffer.half_full() and cond.notified == 2  # half the bound: the reader takes now
    records, _ = buffer.take()
    assert (decode_records(records) if encode else records) == list(range(50))


def test_bad_bounds_are_refused_naming_them():
    with pytest.raises(ValueError, match="raylink.collect.max-buffered-records must be >= 1"):
        CollectBuffer(max_records=0)
    with pytest.raises(ValueError, match="max_bytes must be >= 1"):
        CollectBuffer(max_bytes=0)
