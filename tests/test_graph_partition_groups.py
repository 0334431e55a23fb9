"""Partition groups (Flink's FLINK-21110: EdgeManager, ConsumedPartitionGroup, ConsumerVertexGroup,
EdgeManagerBuildUtil) and the group-based deployment descriptors: on random topologies (the
generator of ``test_graph_properties``) every group-based query and every descriptor equals
what the per-edge ExecutionGraph (one ExecutionEdge per partition and consumer) gave; groups
are shared as Flink shares them; offloaded group descriptors load back to the same values."""

from __future__ import annotations

import pickle

import pytest
from hypothesis import given
from hypothesis import strategies as st

from raylink.api import StreamExecutionEnvironment
from raylink.graph.edge_manager import (
    ConsumedPartitionGroup,
    ConsumerVertexGroup,
    EdgeManager,
    ExecutionVertexID,
    IntermediateResultPartitionID,
)
from raylink.graph.edge_manager_build_util import compute_max_edges_to_target_execution_vertex
from raylink.graph.execution_graph import ExecutionGraph, pointwise_sources
from raylink.graph.stream_graph import GraphError
from raylink.runtime.job.deployment import (
    NonOffloaded,
    Offloaded,
    TaskDeploymentDescriptorFactory,
    assign_task_executors,
    create_deployment_descriptors,
    load_big_data,
)
from raylink.tests.test_graph_properties import PROPERTY_SETTINGS, Program, build_all

pytestmark = pytest.mark.timeout(120)


def ident(x):
    return x


# -- the oracle: the per-edge wiring the ExecutionGraph had before partition groups ----------------------
def per_edge_wiring(job_graph) -> tuple[dict, dict]:
    """``reads[(job vertex id, subtask)]``: per input, ``[(partition id, subpartition)]``;
    ``feeds[(data set id, partition)]``: the consumers ``(job vertex id, subtask)`` in
    subpartition order -- one ExecutionEdge per pair, subpartitions numbered as consumers came."""
    reads: dict = {}
    feeds: dict = {}
    for jv in job_graph.get_vertices_sorted_topologically_from_sources():
        for i in range(jv.parallelism):
            reads[(jv.id, i)] = []
        for data_set in jv.produced_data_sets:
            for n in range(jv.parallelism):
                feeds[(data_set.id, n)] = []
        for job_edge in jv.inputs:
            data_set = job_edge.source
            s = data_set.producer.parallelism
            for i in range(jv.parallelism):
                if job_edge.distribution_pattern == "ALL_TO_ALL":
                    sources = list(range(s))
                else:
                    sources = pointwise_sources(i, s, jv.parallelism)
                edges = []
                for n in sources:
                    consumers = feeds[(data_set.id, n)]
                    edges.append((f"{data_set.id}#{n}", len(consumers)))
                    consumers.append((jv.id, i))
                reads[(jv.id, i)].append(edges)
    return reads, feeds


def assert_groups_match_per_edge_wiring(eg: ExecutionGraph) -> None:
    reads, feeds = per_edge_wiring(eg.job_graph)
    for ejv in eg.job_vertices:
        inputs = ejv.job_vertex.inputs
        for ev in ejv.vertices:
            groups = ev.get_consumed_partition_groups()
            assert len(groups) == len(inputs) == ev.get_number_of_inputs()
            by_groups = [[(str(p), g.consumed_subpartition_index(ev.id)) for p in g] for g in groups]
            assert by_groups == reads[ev.id]
            for job_edge, group in zip(inputs, groups):
                assert group.intermediate_data_set_id == job_edge.source.id
                assert group.result_partition_type == job_edge.source.result_partition_type
                assert ev.id in group.get_consumer_vertex_group()
                assert group.get_consumer_vertex_group().get_consumed_partition_group() is group
            # the ExecutionEdge view is the per-edge wiring too
            view = [[(e.source.partition_id, e.subpartition_index) for e in per_input] for per_input in ev.input_edges]
            assert view == reads[ev.id]
            assert all(
                e.target is ev and e.input_number == k and e.job_edge is inputs[k]
                for k, per_input in enumerate(ev.input_edges)
                for e in per_input
            )
    for result in eg.results.values():
        for partition in result.partitions:
            expected = feeds[(result.id, partition.partition_number)]
            (group,) = partition.get_consumer_vertex_groups()
            assert list(group) == expected
            assert partition.number_of_subpartitions == len(expected) == len(group)
            assert [(e.target.id, e.subpartition_index) for e in partition.consumers] == [
                (c, k) for k, c in enumerate(expected)
            ]
            containing = {
                id(g)
                for c in expected
                for g in eg.edge_manager.get_consumed_partition_groups_for_vertex(ExecutionVertexID(*c))
                if partition.id in g
            }
            assert {id(g) for g in partition.get_consumed_partition_groups()} == containing
    edges = [
        {
            "data_set": partition_id.split("#")[0],
            "source": [eg.results[partition_id.split("#")[0]].producer.id, int(partition_id.split("#")[1])],
            "target": [ev.job_vertex.id, ev.subtask_index],
            "subpartition": subpartition,
        }
        for ev in eg.all_vertices()
        for per_input in reads[ev.id]
        for partition_id, subpartition in per_input
    ]
    assert eg.to_dict()["edges"] == edges


def assert_groups_are_shared_as_flink_shares_them(eg: ExecutionGraph) -> None:
    """Per JobEdge: one ConsumedPartitionGroup and one ConsumerVertexGroup for ALL_TO_ALL,
    ``min(S, T)`` of each for POINTWISE -- never one per pair; each partition group paired
    with the consumer group reading it."""
    for ejv in eg.job_vertices:
        for k, job_edge in enumerate(ejv.job_vertex.inputs):
            s, t = job_edge.source.producer.parallelism, ejv.parallelism
            expected = 1 if job_edge.distribution_pattern == "ALL_TO_ALL" else min(s, t)
            consumed = {id(g): g for ev in ejv.vertices for g in [ev.get_consumed_partition_groups()[k]]}
            result = eg.results[job_edge.source.id]
            consumers = {id(g): g for p in result.partitions for g in p.get_consumer_vertex_groups()}
            assert len(consumed) == len(consumers) == expected
            assert {id(g.get_consumer_vertex_group()) for g in consumed.values()} == set(consumers)
            assert sum(len(g) for g in consumed.values()) == s  # every partition in exactly one group
            assert sum(len(g) for g in consumers.values()) == t  # every consumer in exactly one group


@PROPERTY_SETTINGS
@given(st.data())
def test_group_queries_equal_the_per_edge_wiring_on_random_topologies(data):
    env = Program(data).build()
    _sg, _job, eg = build_all(env)
    assert_groups_match_per_edge_wiring(eg)
    assert_groups_are_shared_as_flink_shares_them(eg)


# -- deployment descriptors: the same channels and consumers as per-edge descriptors -------------------
def expected_descriptors(eg: ExecutionGraph, placement: dict) -> dict:
    """Per attempt id, from the per-edge wiring: the gates' ``(type, [(partition, subpartition,
    producer executor)])`` and the produced partitions' ``(id, subpartitions, consumer executors)``."""
    reads, feeds = per_edge_wiring(eg.job_graph)
    out = {}
    for ev in eg.all_vertices():
        inputs = ev.job_vertex.job_vertex.inputs
        gates = []
        for job_edge, per_input in zip(inputs, reads[ev.id]):
            producer = job_edge.source.producer.id
            channels = [(p, sub, placement[(producer, int(p.split("#")[1]))]) for p, sub in per_input]
            gates.append((job_edge.type_number, channels))
        produced = []
        for partition in ev.produced_partitions:
            consumers = feeds[(partition.result.id, partition.partition_number)]
            produced.append((partition.partition_id, len(consumers), [placement[c] for c in consumers]))
        out[ev.current_execution.attempt_id] = (gates, produced)
    return out


def described(tdd) -> tuple:
    gates = [
        (g.type_number, [(c.partition_id, c.subpartition_index, c.producer_executor) for c in g.channels])
        for g in tdd.input_gates
    ]
    produced = [(p.partition_id, p.num_subpartitions, list(p.consumer_executors)) for p in tdd.produced_partitions]
    return gates, produced


class CountingStore:
    """``offload`` / ``fetch`` stand-ins for the object store: counts puts and fetched references."""

    def __init__(self) -> None:
        self.values: list = []
        self.fetched: list = []
        self.fetch_calls = 0

    def put(self, value):
        self.values.append(pickle.dumps(value))
        return len(self.values) - 1

    def get(self, references: list) -> list:
        self.fetch_calls += 1
        self.fetched.extend(references)
        return [pickle.loads(self.values[r]) for r in references]


@PROPERTY_SETTINGS
@given(st.data())
def test_descriptors_equal_the_per_edge_descriptors_inline_and_offloaded(data):
    env = Program(data).build()
    _sg, _job, eg = build_all(env)
    slots = data.draw(st.integers(1, 3))
    executor_of, _count = assign_task_executors(eg, "slot", slots)
    placement = {key: f"te-{i}" for key, i in executor_of.items()}
    expected = expected_descriptors(eg, placement)

    inline = create_deployment_descriptors("job", eg, placement)
    assert {tdd.attempt_id: described(tdd) for tdd in inline} == expected
    # every consumer of a group shares one descriptor object of it
    by_group: dict = {}
    for ev, tdd in zip(eg.all_vertices(), inline):
        for group, gate in zip(ev.get_consumed_partition_groups(), tdd.input_gates):
            assert by_group.setdefault(group.group_id, gate.get_shuffle_descriptors()) is gate.get_shuffle_descriptors()

    store = CountingStore()
    factory = TaskDeploymentDescriptorFactory("job", eg, placement, offload=store.put, offload_min_size=1)
    offloaded = factory.create_deployment_descriptors()
    groups = {g.group_id for ev in eg.all_vertices() for g in ev.get_consumed_partition_groups()}
    consumer_groups = {
        g.group_id for r in eg.results.values() for p in r.partitions for g in p.get_consumer_vertex_groups()
    }
    # each group descriptor and each vertex's chain put once
    assert len(store.values) == factory.num_offloaded == len(groups) + len(consumer_groups) + len(eg.job_vertices)
    assert all(isinstance(g.shuffle_descriptors, Offloaded) for t in offloaded for g in t.input_gates)
    assert all(isinstance(t.task_information, Offloaded) for t in offloaded)
    per_executor: dict = {}
    for tdd in offloaded:
        per_executor.setdefault(placement[(tdd.job_vertex_id, tdd.subtask_index)], []).append(tdd)
    loaded = []
    for tdds in per_executor.values():  # one deploy call per TaskExecutor, through pickle as on Ray
        call = pickle.loads(pickle.dumps(tdds))
        before = len(store.fetched)
        load_big_data(call, store.get)
        fetched = store.fetched[before:]
        assert len(fetched) == len(set(fetched))  # each reference fetched once per call
        loaded.extend(call)
    assert {tdd.attempt_id: described(tdd) for tdd in loaded} == expected
    assert {(t.attempt_id, t.job_vertex.id, t.job_vertex.chain[0].operator_id) for t in loaded} == {
        (t.attempt_id, t.job_vertex.id, t.job_vertex.chain[0].operator_id) for t in inline
    }
    assert store.fetch_calls <= len(per_executor)


# -- Flink's facts, one by one ---------------------------------------------------------------------------
def two_stage(s: int, t: int, partition) -> ExecutionGraph:
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(t)  # the sink chains to the target
    src = env.from_sequence(1, 100).set_parallelism(s)
    partition(src).map(ident).name("target").set_parallelism(t).print()
    return env.get_execution_graph()


def target_vertices(eg: ExecutionGraph):
    return next(v for v in eg.job_vertices if v.name.startswith("target")).vertices


@pytest.mark.parametrize("s,t", [(5, 3), (3, 5), (1, 4), (4, 1), (2, 2)])
def test_all_to_all_one_consumed_partition_group_shared_by_every_consumer(s, t):
    eg = two_stage(s, t, lambda ds: ds.key_by(ident))
    consumers = target_vertices(eg)
    groups = {id(ev.get_consumed_partition_groups()[0]): ev.get_consumed_partition_groups()[0] for ev in consumers}
    (group,) = groups.values()
    assert isinstance(group, ConsumedPartitionGroup)
    assert [p.partition_number for p in group] == list(range(s)) and group.size() == s
    assert group.num_consumers == t
    assert [group.consumed_subpartition_index(ev.id) for ev in consumers] == list(range(t))
    (result,) = eg.job_vertices[0].produced
    vertex_groups = {id(g): g for p in result.partitions for g in p.get_consumer_vertex_groups()}
    (vertex_group,) = vertex_groups.values()
    assert isinstance(vertex_group, ConsumerVertexGroup)
    assert list(vertex_group) == [ev.id for ev in consumers]
    assert vertex_group.get_consumed_partition_group() is group
    assert group.group_id == f"{result.id}[0:{s}]"


@pytest.mark.parametrize(
    "s,t,consumed,consumers",
    [
        # per consumer: the partitions of its group; per partition: the consumers of its group
        (4, 2, [[0, 1], [2, 3]], [[0], [0], [1], [1]]),  # n:1, each consumer its own run of partitions
        (5, 2, [[0, 1], [2, 3, 4]], [[0], [0], [1], [1], [1]]),
        (2, 4, [[0], [0], [1], [1]], [[0, 1], [2, 3]]),  # 1:n, each partition its own run of consumers
        (2, 3, [[0], [0], [1]], [[0, 1], [2]]),
        (3, 2, [[0], [1, 2]], [[0], [1], [1]]),
        (3, 3, [[0], [1], [2]], [[0], [1], [2]]),  # 1:1
    ],
)
def test_pointwise_groups_follow_edge_manager_build_util(s, t, consumed, consumers):
    eg = two_stage(s, t, lambda ds: ds.rescale())
    targets = target_vertices(eg)
    groups = [ev.get_consumed_partition_groups()[0] for ev in targets]
    assert [[p.partition_number for p in g] for g in groups] == consumed
    (result,) = eg.job_vertices[0].produced
    per_partition = [p.get_consumer_vertex_groups() for p in result.partitions]
    assert [[v.subtask_index for v in g] for (g,) in per_partition] == consumers
    # consumers reading the same partitions share one group object; so do partitions read by the same consumers
    assert len({id(g) for g in groups}) == len({tuple(c) for c in consumed}) == min(s, t)
    assert len({id(g) for (g,) in per_partition}) == min(s, t)
    for ev, group in zip(targets, groups):
        assert group.get_consumer_vertex_group().index_of(ev.id) == group.consumed_subpartition_index(ev.id)


def test_edge_manager_allows_a_single_consumer_group_per_partition():
    manager = EdgeManager()
    partition = IntermediateResultPartitionID("ds", 0)
    first = ConsumerVertexGroup("jv", range(0, 2), "PIPELINED_BOUNDED")
    manager.connect_partition_with_consumer_vertex_group(partition, first)
    with pytest.raises(GraphError, match="single consumer for the result partition"):
        manager.connect_partition_with_consumer_vertex_group(partition, ConsumerVertexGroup("jv2", range(1), "x"))
    assert manager.get_consumer_vertex_groups_for_partition(partition) == [first]
    assert manager.get_consumer_vertex_groups_for_partition(IntermediateResultPartitionID("ds", 1)) == []
    with pytest.raises(GraphError, match="not in ConsumerVertexGroup"):
        first.index_of(ExecutionVertexID("jv", 2))


def test_ids_are_the_runtime_keys():
    assert ExecutionVertexID("jv", 3) == ("jv", 3) and hash(ExecutionVertexID("jv", 3)) == hash(("jv", 3))
    assert str(IntermediateResultPartitionID("ds", 7)) == "ds#7"
    eg = two_stage(2, 2, lambda ds: ds.rebalance())
    (result,) = eg.job_vertices[0].produced
    assert [str(p.id) for p in result.partitions] == [p.partition_id for p in result.partitions]
    assert eg.get_result_partition(result.partitions[1].id) is result.partitions[1]
    ev = target_vertices(eg)[1]
    assert eg.get_execution_vertex(ev.id) is ev


@pytest.mark.parametrize(
    "t,s,pattern,edges",
    [(2, 4, "POINTWISE", 2), (2, 5, "POINTWISE", 3), (4, 2, "POINTWISE", 1), (3, 7, "ALL_TO_ALL", 7)],
)
def test_compute_max_edges_to_target_execution_vertex(t, s, pattern, edges):
    assert compute_max_edges_to_target_execution_vertex(t, s, pattern) == edges


def test_offloading_applies_from_the_minimum_size_and_unloaded_descriptors_refuse_use():
    eg = two_stage(3, 2, lambda ds: ds.rebalance())
    placement = {ev.id: "te-0" for ev in eg.all_vertices()}
    store = CountingStore()
    small = TaskDeploymentDescriptorFactory("job", eg, placement, offload=store.put, offload_min_size=4)
    assert not store.values and all(
        isinstance(g.shuffle_descriptors, NonOffloaded)
        for t in small.create_deployment_descriptors()
        for g in t.input_gates
    )
    factory = TaskDeploymentDescriptorFactory("job", eg, placement, offload=store.put, offload_min_size=3)
    tdds = factory.create_deployment_descriptors()
    assert [t.job_vertex.name for t in tdds[-2:]] == ["target -> Sink: Print to Std. Out"] * 2
    consumer = tdds[-1]
    (gate,) = consumer.input_gates
    assert isinstance(gate.shuffle_descriptors, Offloaded) and gate.shuffle_descriptors.key.startswith(
        factory.deployment_id
    )
    with pytest.raises(RuntimeError, match="offloaded: load_big_data"):
        list(gate.channels)
    cache: dict = {}
    consumer.load_big_data(store.get, cache)
    assert [c.partition_id for c in gate.channels] == [
        p.partition_id for p in eg.job_vertices[0].produced[0].partitions
    ]
    (group,) = eg.all_vertices()[-1].get_consumed_partition_groups()
    assert list(cache) == [factory.shuffle_descriptors_cache[group.group_id].key]
    calls = store.fetch_calls
    tdds[-2].load_big_data(store.get, cache)  # the other consumer: from the cache
    assert store.fetch_calls == calls


def test_the_graph_and_the_descriptors_stay_free_of_ray():
    """graph/ and runtime/ never import Ray: the object-store puts live in actors/."""
    import subprocess
    import sys

    code = (
        "import sys, raylink.graph.execution_graph, raylink.graph.edge_manager_build_util, "
        "raylink.runtime.job.deployment, raylink.runtime.job.job_master; "
        "print(sorted(m for m in sys.modules if m == 'ray' or m.startswith('ray.')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "[]"
