"""Operator state for checkpoints (``state/snapshots.py``): what an operator snapshots —
keyed state by key group, timers, a CheckpointedFunction's list states, source positions —
comes back exactly in a fresh operator, at the same parallelism and rescaled."""

from __future__ import annotations

import cloudpickle
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from raylink.api.functions import MapFunction
from raylink.api.state import ListStateDescriptor
from raylink.core.checkpointing import CheckpointedFunction, CheckpointListener
from raylink.operators.basic import StreamMap
from raylink.operators.reduce import StreamGroupedReduceOperator
from raylink.operators.sources import SequenceSourceOperator, SourceFunctionOperator
from raylink.tests.harness import (
    AbstractStreamOperatorTestHarness,
    KeyedOneInputStreamOperatorTestHarness,
    OneInputStreamOperatorTestHarness,
)

pytestmark = pytest.mark.timeout(60)


def shipped(snapshot):
    """What a task writes and a restored one reads: a pickled copy."""
    return cloudpickle.loads(cloudpickle.dumps(snapshot))


def add(a, b):
    return (a[0], a[1] + b[1])


def counts_reference(records):
    out, totals = [], {}
    for key, n in records:
        totals[key] = totals.get(key, 0) + n
        out.append((key, totals[key]))
    return out


@settings(max_examples=40, deadline=None)
@given(
    records=st.lists(st.tuples(st.sampled_from("abcdefg"), st.integers(0, 9)), max_size=60),
    cut=st.integers(0, 60),
    parallelism=st.integers(1, 4),
    new_parallelism=st.integers(1, 4),
)
def test_keyed_reduce_resumes_from_a_snapshot_as_if_never_stopped(records, cut, parallelism, new_parallelism):
    """Rolling counts split over ``parallelism`` subtasks, snapshotted after ``cut`` records and
    restored into ``new_parallelism`` subtasks (rescaling), equal the uninterrupted counts."""
    from raylink.core.key_groups import assign_to_key_group, compute_operator_index_for_key_group

    def owner(key, p):
        return compute_operator_index_for_key_group(128, p, assign_to_key_group(key, 128))

    cut = min(cut, len(records))
    first = [
        KeyedOneInputStreamOperatorTestHarness(
            StreamGroupedReduceOperator(add, lambda r: r[0]), subtask_index=i, parallelism=parallelism
        ).open()
        for i in range(parallelism)
    ]
    for record in records[:cut]:
        first[owner(record[0], parallelism)].process_element(record)
    snapshots = [shipped(harness.snapshot(1)) for harness in first]
    second = [
        KeyedOneInputStreamOperatorTestHarness(
            StreamGroupedReduceOperator(add, lambda r: r[0]), subtask_index=i, parallelism=new_parallelism
        ).open(restore=snapshots)
        for i in range(new_parallelism)
    ]
    for record in records[cut:]:
        second[owner(record[0], new_parallelism)].process_element(record)
    got = sorted(r for harness in first + second for r in harness.extract_output_values())
    assert got == sorted(counts_reference(records))


class BufferingMap(MapFunction, CheckpointedFunction, CheckpointListener):
    """Keeps every value in operator list state; remembers completed checkpoints."""

    def __init__(self, union=False):
        self.union = union
        self.seen = []
        self.completed = []
        self.restored = None

    def initialize_state(self, context):
        store = context.get_operator_state_store()
        descriptor = ListStateDescriptor("seen")
        self.state = store.get_union_list_state(descriptor) if self.union else store.get_list_state(descriptor)
        self.restored = context.is_restored()
        self.seen = list(self.state.get())

    def snapshot_state(self, context):
        self.state.update(self.seen)

    def notify_checkpoint_complete(self, checkpoint_id):
        self.completed.append(checkpoint_id)

    def map(self, value):
        self.seen.append(value)
        return value


@pytest.mark.parametrize("union", [False, True], ids=["split", "union"])
@pytest.mark.parametrize("old,new", [(2, 2), (2, 3), (3, 1)])
def test_operator_list_state_is_redistributed_like_flink(union, old, new):
    harnesses = [
        OneInputStreamOperatorTestHarness(StreamMap(BufferingMap(union)), subtask_index=i, parallelism=old)
        for i in range(old)
    ]
    for i, harness in enumerate(harnesses):
        harness.open()
        assert harness.operator.function.restored is False
        harness.process_elements([f"{i}-{n}" for n in range(5)])
    snapshots = [shipped(harness.snapshot(7)) for harness in harnesses]
    everything = sorted(v for i in range(old) for v in (f"{i}-{n}" for n in range(5)))
    restored = [StreamMap(BufferingMap(union)) for _ in range(new)]
    for i, op in enumerate(restored):
        OneInputStreamOperatorTestHarness(op, subtask_index=i, parallelism=new).open(restore=snapshots)
        assert op.function.restored is True
    states = [sorted(op.function.seen) for op in restored]
    if union:
        assert all(s == everything for s in states)
    else:
        assert sorted(v for s in states for v in s) == everything
        if old == new:
            assert states == [sorted(f"{i}-{n}" for n in range(5)) for i in range(new)]


def test_checkpoint_listeners_hear_of_completed_checkpoints():
    harness = OneInputStreamOperatorTestHarness(StreamMap(BufferingMap())).open()
    harness.notify_of_completed_checkpoint(3)
    assert harness.operator.function.completed == [3]


def test_sequence_source_resumes_after_its_snapshot():
    first = AbstractStreamOperatorTestHarness(SequenceSourceOperator(1, 100)).open()
    first.operator.emit_next(30)
    snapshot = shipped(first.snapshot(1))
    second = AbstractStreamOperatorTestHarness(SequenceSourceOperator(1, 100)).open(restore=[snapshot])
    while second.operator.emit_next(16):
        pass
    assert first.extract_output_values() + second.extract_output_values() == list(range(1, 101))


def test_iterable_source_resumes_by_skipping_what_it_had_read():
    first = AbstractStreamOperatorTestHarness(SourceFunctionOperator(lambda: iter(range(50)))).open()
    first.operator.emit_next(20)
    snapshot = shipped(first.snapshot(1))
    second = AbstractStreamOperatorTestHarness(SourceFunctionOperator(lambda: iter(range(50)))).open(restore=[snapshot])
    while second.operator.emit_next(7):
        pass
    assert first.extract_output_values() + second.extract_output_values() == list(range(50))


def test_a_one_shot_iterator_source_cannot_be_restored_and_says_why():
    first = AbstractStreamOperatorTestHarness(SourceFunctionOperator(iter(range(10)))).open()
    first.operator.emit_next(3)
    snapshot = shipped(first.snapshot(1))
    with pytest.raises(ValueError, match="one-shot iterator"):
        AbstractStreamOperatorTestHarness(SourceFunctionOperator(iter(range(10)))).open(restore=[snapshot])


def test_spark_table_source_resumes_mid_file_after_its_snapshot(tmp_path):
    """The Parquet-directory source behind ``from_spark_table`` checkpoints the files it has
    seen and its row in the file being read; a restored copy emits every row exactly once."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from raylink.connectors.spark.table_source import ParquetDirectorySourceOperator, SparkTableSource

    schema = pa.schema([("k", pa.int64())])
    for f in range(3):
        pq.write_table(
            pa.table({"k": list(range(f * 100, f * 100 + 100))}, schema=schema), str(tmp_path / f"part-{f}.parquet")
        )
    source = SparkTableSource(str(tmp_path), schema, 0.01, "tuple", None, None, "earliest", "test table")

    def drain(op, out, until):
        for _ in range(1000):
            if len(out.records) >= until:
                return
            op.emit_next(7)

    first = AbstractStreamOperatorTestHarness(ParquetDirectorySourceOperator(source)).open()
    out = first.output
    drain(first.operator, out, 150)  # in the middle of the second file
    snapshot = shipped(first.snapshot(1))
    assert 0 < snapshot["custom"]["offset"] < 100
    second = AbstractStreamOperatorTestHarness(ParquetDirectorySourceOperator(source)).open(restore=[snapshot])
    out2 = second.output
    drain(second.operator, out2, 300 - len(out.records))
    got = [r[0] for r in out.records + out2.records]
    assert sorted(got) == list(range(300)) and len(got) == 300
