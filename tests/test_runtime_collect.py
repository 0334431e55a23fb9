"""``execute_and_collect`` as in PyFlink: the collect sink runs at parallelism 1, records keep
their upstream order per channel, ``limit=n`` gives the list of the first ``n``."""

from __future__ import annotations

import pytest

from raylink.operators.sources import sequence_split
from raylink.tests.runtime_jobs import TagSubtask, make_env

pytestmark = pytest.mark.timeout(120)

N = 3000


def _per_channel(records):
    channels: dict = {}
    for value, channel in records:
        channels.setdefault(channel, []).append(value)
    return channels


def test_a_parallelism_1_pipeline_collects_in_order(target):
    env = make_env(target, 1)
    values = [(i * 7919) % 1009 for i in range(N)]  # not sorted: the order is the source's
    with env.from_collection(values).map(lambda v: v * 3).execute_and_collect() as results:
        got = list(results)
    assert got == [v * 3 for v in values]


def test_limit_returns_a_list_of_the_first_n_records(target):
    env = make_env(target, 1)
    values = [(i * 31) % 97 for i in range(N)]
    got = env.from_collection(values).map(lambda v: v + 1).execute_and_collect(limit=17)
    assert isinstance(got, list)
    assert got == [v + 1 for v in values[:17]]
    assert got.job_client.wait(10)
    assert got.job_client.get_job_status() in ("FINISHED", "CANCELED")


@pytest.mark.parametrize(
    "parallel_sink, shape",
    [
        (True, {"Source: Sequence Source -> Map -> Sink: Collect Sink": 2}),  # chained: no exchange of its own
        (False, {"Source: Sequence Source -> Map": 2, "Sink: Collect Sink": 1}),  # Flink's CollectStreamSink
    ],
)
def test_the_collect_sink_keeps_order_per_channel_chained_or_at_parallelism_1(target, parallel_sink, shape):
    env = make_env(target, 2, {"raylink.collect.parallel-sink": parallel_sink})
    stream = env.from_sequence(1, N).map(TagSubtask())
    with stream.execute_and_collect("collect p2") as results:
        got = list(results)
    subtasks: dict = {}
    for ev in results.job_client.execution_graph.all_vertices():
        subtasks.setdefault(ev.job_vertex.job_vertex.name, []).append(ev.subtask_index)
    assert {name: len(s) for name, s in subtasks.items()} == shape
    channels = _per_channel(got)
    assert channels == {i: list(sequence_split(1, N, i, 2)) for i in range(2)}


def test_after_a_partitioning_the_collect_sink_is_one_subtask(target):
    env = make_env(target, 2)
    stream = env.from_sequence(1, N).map(TagSubtask()).rebalance()
    with stream.execute_and_collect() as results:
        got = list(results)
    shape = {
        ev.job_vertex.job_vertex.name: ev.job_vertex.parallelism
        for ev in results.job_client.execution_graph.all_vertices()
    }
    assert shape == {"Source: Sequence Source -> Map": 2, "Sink: Collect Sink": 1}
    assert _per_channel(got) == {i: list(sequence_split(1, N, i, 2)) for i in range(2)}


def test_limit_on_a_parallel_pipeline_is_a_prefix_of_every_channel(target):
    env = make_env(target, 2)
    got = env.from_sequence(1, N).map(TagSubtask()).execute_and_collect(limit=100)
    assert len(got) == 100
    for channel, values in _per_channel(got).items():
        full = list(sequence_split(1, N, channel, 2))
        assert values == full[: len(values)], f"channel {channel}"


@pytest.mark.parametrize("limit", [0, -1, 1.5, True])
def test_a_bad_limit_is_refused(limit):
    env = make_env("local", 1)
    with pytest.raises(ValueError, match=r"execute_and_collect: limit must be greater than 0"):
        env.from_collection([1, 2]).execute_and_collect(limit=limit)


def test_a_for_loop_and_next_share_one_cursor_and_close_ends_both():
    env = make_env("local", 1)
    with env.from_sequence(1, N).execute_and_collect() as results:
        head = []
        for value in results:  # the loop's iterator reads a batch at a time
            head.append(value)
            if len(head) == 10:
                break
        assert head == list(range(1, 11))
        assert next(results) == 11  # next() goes on where the loop broke off
        body = []
        for value in results:
            body.append(value)
            if value == 20:
                assert next(results) == 21  # a next() in the loop's body moves the loop on too
            if value == 100:
                results.close()  # no record after close, not even the rest of a batch
        assert body == [v for v in range(12, 101) if v != 21]
        assert list(results) == []
