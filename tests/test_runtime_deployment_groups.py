"""Group descriptors offloaded to Ray's object store end to end: with every group descriptor
put once (``OFFLOAD_MIN_SIZE`` 1 in the driver, where the JobMaster builds descriptors), jobs
whose exchanges cross TaskExecutors give the same results -- a keyed count, and a job that
fails once and restores from its checkpoint (its restore handles offloaded too)."""

from __future__ import annotations

import collections

import pytest

from raylink.runtime.job import deployment
from raylink.runtime.job.deployment import Offloaded, TaskDeploymentDescriptorFactory
from raylink.tests.runtime_jobs import make_env
from raylink.tests.test_runtime_checkpointing import N, build, expected_counts

pytestmark = pytest.mark.timeout(180)

LINES = [f"w{i % 7} w{i % 3} w{i % 11}" for i in range(300)]


def split(line):
    return [(w, 1) for w in line.split()]


def word(kv):
    return kv[0]


@pytest.fixture
def offload_everything(ray_session, monkeypatch):
    """Every group descriptor offloaded; the factories the Ray JobMaster made, for inspection."""
    import raylink.actors.ray_executor as ray_executor

    factories: list[TaskDeploymentDescriptorFactory] = []

    class Recording(TaskDeploymentDescriptorFactory):
        def __init__(self, *args, **kwargs) -> None:
            super().__init__(*args, **kwargs)
            factories.append(self)

    monkeypatch.setattr(deployment, "OFFLOAD_MIN_SIZE", 1)
    monkeypatch.setattr(ray_executor, "TaskDeploymentDescriptorFactory", Recording)
    return factories


def test_offloaded_group_descriptors_deploy_a_keyed_job_across_task_executors(offload_everything):
    env = make_env("ray", 3, {"raylink.task-placement": "task"})
    counts = env.from_collection(LINES).flat_map(split).key_by(word).sum(1)
    it = counts.execute_and_collect()
    seen: collections.Counter = collections.Counter()
    expected = []
    for line in LINES:
        for w in line.split():
            seen[w] += 1
            expected.append((w, seen[w]))
    assert sorted(it) == sorted(expected)
    result = it.job_execution_result
    assert len({m["executor"] for m in result.task_metrics}) == len(result.task_metrics) == 7
    assert sum(s["remoteBuffersSent"] for s in result.executor_stats) > 0
    (factory,) = offload_everything
    # every group put once: the two ALL_TO_ALL edges' ConsumedPartitionGroups and ConsumerVertexGroups
    eg = it.job_client.execution_graph
    consumed = {g.group_id for ev in eg.all_vertices() for g in ev.get_consumed_partition_groups()}
    consumers = {g.group_id for r in eg.results.values() for p in r.partitions for g in p.get_consumer_vertex_groups()}
    assert len(consumed) == len(consumers) == 2
    assert factory.num_offloaded == 4 + len(eg.job_vertices)  # and each vertex's chain
    assert set(factory.shuffle_descriptors_cache) == consumed
    assert all(isinstance(d, Offloaded) for d in factory.shuffle_descriptors_cache.values())


@pytest.mark.timeout(240)
def test_a_job_with_offloaded_descriptors_restores_from_its_checkpoint_exactly_once(offload_everything, tmp_path):
    env = make_env(
        "ray",
        2,
        {
            "execution.checkpointing.interval": "300 ms",
            "execution.checkpointing.dir": str(tmp_path / "checkpoints"),
            "restart-strategy.type": "fixed-delay",
            "restart-strategy.fixed-delay.delay": "200 ms",
        },
    )
    out = tmp_path / "out"
    build(env, out, fail_at=N // 3, after_checkpoint=True)
    client = env.execute_async()
    assert client.wait(200), "the job did not finish"
    client.get_job_execution_result(1)
    stats = client.get_checkpoint_stats()
    assert stats["numRestarts"] == 1 and stats["lastRestoredCheckpointId"] is not None
    from raylink.bench.failover import committed_lines

    assert committed_lines(out) == expected_counts()
    first, restarted = offload_everything
    assert all(d.value == {} for d in first.restore_cache.values())  # nothing to restore at first
    assert any(isinstance(d, Offloaded) for d in restarted.restore_cache.values())
