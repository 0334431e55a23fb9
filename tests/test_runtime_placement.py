"""Which TaskExecutor process runs which subtask (``raylink.task-placement``): Flink's slots,
one process per subtask, and the default that sizes the processes to the cluster's CPUs."""

from __future__ import annotations

import collections

import pytest

from raylink.api import StreamExecutionEnvironment
from raylink.graph.execution_graph import build_execution_graph
from raylink.runtime.job.deployment import assign_slots, assign_task_executors

pytestmark = pytest.mark.timeout(60)


def split(line):
    return [(w, 1) for w in line.split()]


def first(kv):
    return kv[0]


def add(a, b):
    return (a[0], a[1] + b[1])


def word_count_graph(parallelism: int, stages: int = 2):
    """source -> flat_map | key_by -> reduce (-> | rebalance -> map)*: ``stages`` chains."""
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(parallelism)
    stream = env.from_sequence(0, 9).map(str).flat_map(split).key_by(first).reduce(add)
    for _ in range(stages - 2):
        stream = stream.rebalance().map(lambda x: x)
    stream.print()
    return build_execution_graph(env.get_job_graph())


@pytest.mark.parametrize("parallelism", [1, 2, 3])
@pytest.mark.parametrize("cores", [1, 2, 4, 16])
def test_auto_placement_keeps_every_core_busy_and_no_more(parallelism, cores):
    graph = word_count_graph(parallelism)
    tasks = 2 * parallelism
    placement, count = assign_task_executors(graph, "auto", 1, cores)
    assert set(placement) == {(ejv.id, ev.subtask_index) for ejv in graph.job_vertices for ev in ejv.vertices}
    assert sorted(set(placement.values())) == list(range(count))  # every process runs something
    if tasks <= cores:  # one process per subtask: the pipeline's stages run on their own cores
        assert count == tasks and len(set(placement.values())) == tasks
    elif parallelism >= cores:  # enough slots to fill the cores: Flink's placement
        assert (placement, count) == assign_slots(graph, 1)
    else:  # fewer slots than cores: the subtasks are dealt over one process per core
        assert count == cores
        sizes = collections.Counter(placement.values())
        assert max(sizes.values()) - min(sizes.values()) <= 1


def test_auto_placement_puts_consecutive_stages_of_a_pipeline_in_different_processes():
    graph = word_count_graph(1, stages=3)
    placement, count = assign_task_executors(graph, "auto", 1, 2)
    assert count == 2
    order = [placement[(ejv.id, 0)] for ejv in graph.job_vertices]
    assert order == [0, 1, 0]


def test_slot_and_task_placement_are_unchanged_by_the_cores():
    graph = word_count_graph(2)
    for cores in (1, 2, 64):
        assert assign_task_executors(graph, "slot", 1, cores) == assign_slots(graph, 1)
        placement, count = assign_task_executors(graph, "task", 1, cores)
        assert count == 4 and sorted(placement.values()) == [0, 1, 2, 3]


def test_an_unknown_placement_names_the_option_and_the_choices():
    with pytest.raises(ValueError, match="raylink.task-placement must be auto, task or slot, got 'tasks'"):
        assign_task_executors(word_count_graph(1), "tasks", 1, 2)
