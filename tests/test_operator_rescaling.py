"""Operators' own state shared out at another parallelism (a savepoint restored at a new
parallelism): checked against brute force -- every number / file / committable of the old
subtasks goes to exactly one new subtask, and nothing else does."""

from __future__ import annotations

from collections import Counter
from types import SimpleNamespace

from hypothesis import given, settings
from hypothesis import strategies as st

from raylink.operators.sink_writer import SinkWriterOperator
from raylink.operators.sources import SequenceSourceOperator, rescaled_file_queues, sequence_split
from raylink.tests.harness import AbstractStreamOperatorTestHarness


def _source(start, end, subtask, parallelism):
    harness = AbstractStreamOperatorTestHarness(
        SequenceSourceOperator(start, end), subtask_index=subtask, parallelism=parallelism
    )
    return harness.open().operator


def _numbers(ranges):
    return [v for lo, hi in ranges for v in range(lo, hi)]


@settings(max_examples=150, deadline=None)
@given(
    end=st.integers(0, 300),
    old=st.integers(1, 6),
    new=st.integers(1, 6),
    progress=st.lists(st.integers(0, 400), min_size=6, max_size=6),
)
def test_a_sequence_source_shares_out_exactly_its_remaining_numbers(end, old, new, progress):
    states, remaining = [], []
    for i in range(old):  # each old subtask emitted some of its split
        split = sequence_split(1, end, i, old)
        next_value = min(split.stop, split.start + progress[i]) if split else split.start
        states.append({"next": next_value} if i % 2 else {"ranges": [[next_value, split.stop]] if split else []})
        remaining.extend(range(next_value, split.stop))
    shares = []
    for j in range(new):
        source = _source(1, end, j, new)
        source.restore_rescaled_operator_state(states, j, new)
        shares.append(_numbers(source._ranges))
    assert sorted(v for share in shares for v in share) == sorted(remaining)
    sizes = [len(s) for s in shares]
    assert max(sizes) - min(sizes) <= 1  # evenly


@settings(max_examples=150, deadline=None)
@given(
    owners=st.lists(st.integers(0, 4), max_size=10),  # file i was discovered by old subtask owners[i]
    old=st.integers(1, 5),
    emitted=st.lists(st.integers(0, 9), min_size=5, max_size=5),
    new=st.integers(1, 6),
)
def test_file_sources_share_out_every_unread_file_once_and_see_every_file(owners, old, emitted, new):
    files = [[f"file-{i}" for i, owner in enumerate(owners) if owner % old == j] for j in range(old)]
    states = [
        {"seen": sorted(set(q) | {"seen-" + str(i)}), "queue": q, "emitted": emitted[i]} for i, q in enumerate(files)
    ]
    results = [rescaled_file_queues(states, j, new, "emitted") for j in range(new)]
    assert Counter(f for _seen, queue, _skips in results for f in queue) == Counter(f for q in files for f in q)
    every_seen = {f for s in states for f in s["seen"]}
    assert all(seen == every_seen for seen, _queue, _skips in results)
    resumed = {f: n for _seen, _queue, skips in results for f, n in skips.items()}
    assert resumed == {q[0]: emitted[i] for i, q in enumerate(files) if q and emitted[i]}


class _Collector:
    def __init__(self):
        self.added = []

    def restore(self, snapshots):
        self.added.extend(snapshots)


@given(old=st.integers(1, 7), new=st.integers(1, 7))
def test_a_sink_writer_commits_each_old_subtasks_committables_once(old, new):
    states = [{"writer": [f"w{i}"], "committables": [(1, [f"c{i}"])]} for i in range(old)]
    restored = []
    for j in range(new):
        operator = SinkWriterOperator(SimpleNamespace(create_writer=lambda context: "fresh"))
        operator.runtime_context = SimpleNamespace(
            subtask_index=j, parallelism=new, attempt_number=0, processing_time_service=None
        )
        operator.collector = _Collector()
        operator._commit = lambda checkpoint_id: None
        operator.restore_rescaled_operator_state(states, j, new)
        restored.extend(operator.collector.added)
    assert sorted(restored) == sorted(s["committables"] for s in states)
