"""Source operators driven through emit_next()."""

import threading

import pytest

from raylink.api.functions import SourceFunction
from raylink.operators import MAX_WATERMARK
from raylink.operators.sources import (
    CollectionSourceOperator,
    SequenceSourceOperator,
    SourceFunctionOperator,
    sequence_split,
)
from raylink.shuffle.elements import Watermark
from raylink.tests.harness import AbstractStreamOperatorTestHarness

pytestmark = pytest.mark.timeout(30)


def start(op, subtask_index=0, parallelism=1):
    return AbstractStreamOperatorTestHarness(
        op, task_name="src", subtask_index=subtask_index, parallelism=parallelism
    ).open()


def drain(op, max_records):
    calls = 0
    while op.emit_next(max_records):
        calls += 1
        assert calls < 10_000
    return calls + 1


def test_sequence_split_over_three_subtasks_covers_range_exactly_once():
    seen = []
    for i in range(3):
        op = SequenceSourceOperator(1, 100)
        out = start(op, subtask_index=i, parallelism=3).output
        calls = drain(op, 7)
        assert out.records == list(sequence_split(1, 100, i, 3))
        assert out.watermarks == [MAX_WATERMARK]
        assert calls == -(-len(out.records) // 7)  # the last batch already returns False
        seen.extend(out.records)
    assert sorted(seen) == list(range(1, 101))
    assert [len(sequence_split(1, 100, i, 3)) for i in range(3)] == [33, 33, 34]
    assert not op.emit_next(5)


def test_sequence_with_more_subtasks_than_numbers():
    outs = []
    for i in range(4):
        op = SequenceSourceOperator(5, 6)
        out = start(op, subtask_index=i, parallelism=4).output
        drain(op, 10)
        outs.append(out.records)
    assert outs == [[], [5], [], [6]]


def test_collection_source_emits_in_batches_then_max_watermark():
    op = CollectionSourceOperator(["a", "b", "c", "d", "e"])
    out = start(op).output
    assert op.emit_next(2) is True
    assert out.records == ["a", "b"] and out.batches == 1
    assert op.emit_next(2) is True
    assert op.emit_next(2) is False
    assert out.records == ["a", "b", "c", "d", "e"] and out.batches == 3
    assert out.watermarks == [MAX_WATERMARK]
    assert op.emit_next(2) is False and out.watermarks == [MAX_WATERMARK]


def test_collection_source_is_non_parallel():
    with pytest.raises(ValueError, match="non-parallel"):
        start(CollectionSourceOperator([1]), subtask_index=0, parallelism=2)


def test_empty_collection():
    op = CollectionSourceOperator([])
    out = start(op).output
    assert op.emit_next(10) is False
    assert out.records == [] and out.watermarks == [MAX_WATERMARK]


class Numbers(SourceFunction):
    """Emits subtask-specific numbers with timestamps and watermarks."""

    def __init__(self):
        self.running = True
        self.opened_with = None

    def open(self, runtime_context):
        self.opened_with = runtime_context.get_index_of_this_subtask()

    def run(self, ctx):
        index = ctx.get_runtime_context().get_index_of_this_subtask()
        for i in range(5):
            ctx.collect(index * 100 + i)
        ctx.collect_with_timestamp("t1", 10)
        ctx.collect_with_timestamp("t2", 10)
        ctx.emit_watermark(Watermark(10))
        ctx.collect_with_timestamp("t3", 11)
        ctx.emit_watermark(12)
        ctx.collect("plain")


def test_source_function_runs_inline_with_timestamps_and_watermarks():
    fn = Numbers()
    op = SourceFunctionOperator(fn)
    harness = start(op, subtask_index=2, parallelism=3)
    out, rc = harness.output, harness.runtime_context
    assert fn.opened_with == 2
    assert op.emit_next(2) is False
    assert out.records == [200, 201, 202, 203, 204, "t1", "t2", "t3", "plain"]
    assert out.timestamps == [None] * 5 + [10, 10, 11, None]
    assert out.watermarks == [10, 12, MAX_WATERMARK]
    assert out.batches == 6  # [200,201] [202,203] [204] [t1,t2] [t3] [plain]
    assert rc.record_context.timestamp is None


def test_source_function_cancel_from_another_thread_stops_run():
    class Endless(SourceFunction):
        def __init__(self):
            self.running = True
            self.started = threading.Event()

        def run(self, ctx):
            i = 0
            while self.running:
                ctx.collect(i)
                i += 1
                if i == 50:
                    self.started.set()

        def cancel(self):
            self.running = False

    fn = Endless()
    op = SourceFunctionOperator(fn)
    out = start(op).output
    flushed = []
    op.on_batch_flushed = lambda: flushed.append(len(out.records))
    canceller = threading.Thread(target=lambda: (fn.started.wait(10), op.cancel()))
    canceller.start()
    assert op.emit_next(10) is False
    canceller.join()
    assert op.cancelled and not fn.running
    assert out.records == list(range(len(out.records)))
    assert len(out.records) % 10 == 0 and len(out.records) >= 40
    assert flushed == list(range(10, len(out.records) + 1, 10))
    assert out.watermarks == []  # a cancelled source does not end event time
    assert op.emit_next(10) is False


def test_iterable_and_callable_sources():
    op = SourceFunctionOperator(range(5))
    out = start(op).output
    assert op.emit_next(2) and op.emit_next(2)
    assert op.emit_next(2) is False
    assert out.records == [0, 1, 2, 3, 4] and out.watermarks == [MAX_WATERMARK]

    def gen():
        yield from "abc"

    op = SourceFunctionOperator(gen)
    out = start(op).output
    assert op.emit_next(3) is True  # exactly max_records: not known to be done yet
    assert op.emit_next(3) is False
    assert out.records == ["a", "b", "c"] and out.batches == 1

    op = SourceFunctionOperator(42, name="bad source")
    with pytest.raises(TypeError, match="bad source"):
        start(op)


def test_cancelled_iterator_source_stops():
    op = SourceFunctionOperator(iter(range(100)))
    out = start(op).output
    assert op.emit_next(10)
    op.cancel()
    assert op.emit_next(10) is False
    assert out.records == list(range(10)) and out.watermarks == []


def test_collect_batch_emits_like_collect_in_order():
    from raylink.api.functions import SourceContext

    class Bursts(SourceFunction):
        def run(self, ctx):
            ctx.collect_batch([1, 2, 3])
            ctx.collect(4)
            ctx.collect_batch([5, 6])

    op = SourceFunctionOperator(Bursts())
    out = start(op).output
    drain(op, 4)
    assert out.records == [1, 2, 3, 4, 5, 6]

    class ListContext(SourceContext):  # the API default: one collect per value
        def __init__(self):
            self.got = []

        def collect(self, value):
            self.got.append(value)

    ctx = ListContext()
    ctx.collect_batch([7, 8])
    assert ctx.got == [7, 8]
