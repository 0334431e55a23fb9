"""JobGraph -> ExecutionGraph (Flink's EdgeManagerBuildUtil): POINTWISE wiring for 1:1, n:1 and 1:n
(even and uneven), ALL_TO_ALL, partitions and subpartitions, names, attempts, schema."""

from __future__ import annotations

import math
import re

import pytest

from raylink.api import StreamExecutionEnvironment
from raylink.graph.execution_graph import ExecutionGraph, build_execution_graph, pointwise_sources

pytestmark = pytest.mark.timeout(60)


def ident(x):
    return x


def split(line):
    return [(w, 1) for w in line.split()]


def first(kv):
    return kv[0]


def two_stage(source_parallelism: int, target_parallelism: int, partition) -> ExecutionGraph:
    """from_sequence(S) -> partition -> map(T); the only JobEdge is S -> T."""
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(target_parallelism)
    src = env.from_sequence(1, 100).set_parallelism(source_parallelism)
    partition(src).map(ident).name("target").set_parallelism(target_parallelism).print()
    return env.get_execution_graph()


def consumer_reads(eg: ExecutionGraph) -> list[list[int]]:
    """For the 'target' vertex: per consumer subtask, the producer partitions it reads."""
    target = next(v for v in eg.job_vertices if v.name.startswith("target"))
    assert all(len(ev.input_edges) == 1 for ev in target.vertices)
    return [[e.source.partition_number for e in ev.input_edges[0]] for ev in target.vertices]


def partition_feeds(eg: ExecutionGraph) -> list[list[int]]:
    """For the source vertex: per producer partition, the consumer subtasks it feeds."""
    source = eg.job_vertices[0]
    (result,) = source.produced
    return [[e.target.subtask_index for e in p.consumers] for p in result.partitions]


# -- EdgeManagerBuildUtil: POINTWISE ----------------------------------------------------------------
@pytest.mark.parametrize(
    "s,t,reads",
    [
        (4, 2, [[0, 1], [2, 3]]),  # n:1, even
        (3, 2, [[0], [1, 2]]),  # n:1, uneven
        (2, 4, [[0], [0], [1], [1]]),  # 1:n, even
        (2, 3, [[0], [0], [1]]),  # 1:n, uneven
        (3, 3, [[0], [1], [2]]),  # 1:1
        (1, 3, [[0], [0], [0]]),
        (5, 2, [[0, 1], [2, 3, 4]]),
    ],
)
def test_pointwise_rescale_wiring(s, t, reads):
    eg = two_stage(s, t, lambda ds: ds.rescale())
    (job_edge,) = [e for v in eg.job_graph.vertices.values() for e in v.inputs]
    assert (job_edge.ship_strategy, job_edge.distribution_pattern) == ("RESCALE", "POINTWISE")
    assert consumer_reads(eg) == reads
    # every partition is consumed, each once per reading consumer, and feeds the mirror set
    feeds = partition_feeds(eg)
    assert sorted(p for r in reads for p in r) == sorted(p for p, consumers in enumerate(feeds) for _ in consumers)
    assert len(eg.edges()) == max(s, t)


def test_pointwise_2_to_3_partition_view():
    # EdgeManagerBuildUtil: two partitions, three consumers -> one partition feeds 2, the other 1
    assert partition_feeds(two_stage(2, 3, lambda ds: ds.rescale())) == [[0, 1], [2]]


def test_pointwise_3_to_2_partition_view():
    assert partition_feeds(two_stage(3, 2, lambda ds: ds.rescale())) == [[0], [1], [1]]


@pytest.mark.parametrize("s", range(1, 9))
@pytest.mark.parametrize("t", range(1, 9))
def test_pointwise_sources_formula(s, t):
    per_consumer = [pointwise_sources(i, s, t) for i in range(t)]
    if s == t:
        assert per_consumer == [[i] for i in range(t)]
    elif s > t:
        assert per_consumer == [list(range(i * s // t, (i + 1) * s // t)) for i in range(t)]
    else:
        for j in range(s):
            lo, hi = math.ceil(j * t / s), math.ceil((j + 1) * t / s)
            assert [i for i in range(t) if per_consumer[i] == [j]] == list(range(lo, hi))
        assert all(len(p) == 1 for p in per_consumer)


def test_forward_is_one_to_one():
    eg = two_stage(3, 3, lambda ds: ds.forward().set_shuffle_mode("BATCH"))
    assert consumer_reads(eg) == [[0], [1], [2]]
    (result,) = eg.job_vertices[0].produced
    assert result.result_partition_type == "BLOCKING"
    assert [p.number_of_subpartitions for p in result.partitions] == [1, 1, 1]


# -- ALL_TO_ALL ---------------------------------------------------------------------------
@pytest.mark.parametrize("s,t", [(1, 2), (2, 3), (3, 2), (4, 4), (2, 1)])
@pytest.mark.parametrize("partition", ["rebalance", "shuffle", "broadcast", "key_by", "global_"])
def test_all_to_all_connects_everything(s, t, partition):
    part = (lambda ds: ds.key_by(ident)) if partition == "key_by" else (lambda ds: getattr(ds, partition)())
    eg = two_stage(s, t, part)
    (job_edge,) = [e for v in eg.job_graph.vertices.values() for e in v.inputs]
    assert job_edge.distribution_pattern == "ALL_TO_ALL"
    assert len(eg.edges()) == s * t
    assert consumer_reads(eg) == [list(range(s))] * t
    # every partition has one subpartition per consumer, indexed by consumer subtask
    (result,) = eg.job_vertices[0].produced
    for partition_obj in result.partitions:
        assert partition_obj.number_of_subpartitions == t
        assert [(e.subpartition_index, e.target.subtask_index) for e in partition_obj.consumers] == [
            (i, i) for i in range(t)
        ]


def test_pointwise_subpartition_indices_are_dense():
    eg = two_stage(2, 5, lambda ds: ds.rescale())
    (result,) = eg.job_vertices[0].produced
    for partition in result.partitions:
        assert [e.subpartition_index for e in partition.consumers] == list(range(len(partition.consumers)))
    assert [p.number_of_subpartitions for p in result.partitions] == [3, 2]


# -- the WordCount ExecutionGraph -----------------------------------------------------------
def word_count_eg() -> ExecutionGraph:
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    env.from_collection(["a b"]).flat_map(split).key_by(first).sum(1).print()
    return env.get_execution_graph("wc")


def test_word_count_execution_graph():
    eg = word_count_eg()
    assert [(v.name, v.parallelism) for v in eg.job_vertices] == [
        ("Source: Collection Source", 1),
        ("Flat Map", 2),
        ("Keyed Aggregation -> Sink: Print to Std. Out", 2),
    ]
    assert [ev.name for ev in eg.all_vertices()] == [
        "Source: Collection Source (1/1)",
        "Flat Map (1/2)",
        "Flat Map (2/2)",
        "Keyed Aggregation -> Sink: Print to Std. Out (1/2)",
        "Keyed Aggregation -> Sink: Print to Std. Out (2/2)",
    ]
    assert len(eg.edges()) == 1 * 2 + 2 * 2
    assert len(eg.results) == 2
    src, flat, agg = eg.job_vertices
    assert [len(r.partitions) for r in src.produced + flat.produced] == [1, 2]
    assert agg.produced == []
    assert [p.partition_id for p in flat.produced[0].partitions] == [
        f"{flat.produced[0].id}#0",
        f"{flat.produced[0].id}#1",
    ]
    assert all(ev.produced_partitions == [] for ev in agg.vertices)
    assert eg.state == "CREATED"


def test_execution_graph_to_dict_schema():
    eg = word_count_eg()
    d = eg.to_dict()
    assert set(d) == {"vertices", "edges"}
    jv = [v.id for v in eg.job_vertices]
    assert d["vertices"][0] == {"job_vertex": jv[0], "subtask_index": 0, "name": "Source: Collection Source (1/1)"}
    assert [(v["job_vertex"], v["subtask_index"]) for v in d["vertices"]] == [
        (jv[0], 0),
        (jv[1], 0),
        (jv[1], 1),
        (jv[2], 0),
        (jv[2], 1),
    ]
    for e in d["edges"]:
        assert set(e) == {"data_set", "source", "target", "subpartition"}
    data_sets = [r.id for r in eg.job_vertices[0].produced + eg.job_vertices[1].produced]
    assert [(e["data_set"], e["source"], e["target"], e["subpartition"]) for e in d["edges"]] == [
        (data_sets[0], [jv[0], 0], [jv[1], 0], 0),
        (data_sets[0], [jv[0], 0], [jv[1], 1], 1),
        (data_sets[1], [jv[1], 0], [jv[2], 0], 0),
        (data_sets[1], [jv[1], 1], [jv[2], 0], 0),
        (data_sets[1], [jv[1], 0], [jv[2], 1], 1),
        (data_sets[1], [jv[1], 1], [jv[2], 1], 1),
    ]


def test_attempts_and_attempt_ids():
    eg = word_count_eg()
    vertices = eg.all_vertices()
    assert all(len(ev.executions) == 1 for ev in vertices)
    assert all(ev.current_execution.attempt_number == 0 for ev in vertices)
    assert all(ev.current_execution.state == "CREATED" for ev in vertices)
    first_ids = [ev.current_execution.attempt_id for ev in vertices]
    retry = vertices[1].new_attempt()
    assert retry.attempt_number == 1 and vertices[1].current_execution is retry
    assert retry.vertex is vertices[1]
    all_ids = first_ids + [retry.attempt_id] + [word_count_eg().all_vertices()[0].current_execution.attempt_id]
    assert len(set(all_ids)) == len(all_ids) == 7


def test_execution_graph_from_job_graph_directly_and_lookup():
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(3)
    env.from_sequence(1, 10).rebalance().map(ident).print()
    job = env.get_job_graph()
    eg = build_execution_graph(job)
    assert eg.job_graph is job
    for ejv in eg.job_vertices:
        assert eg.get_job_vertex(ejv.id) is ejv
        assert ejv.max_parallelism == 128
    assert [ev.subtask_index for ev in eg.job_vertices[1].vertices] == [0, 1, 2]


def test_topological_order_of_vertices():
    # create_chain builds vertices depth-first, consumers before producers, so the
    # JobGraph's own vertex dict is not in topological order; to_dict / the
    # ExecutionGraph must sort them (Kahn, ties by head node id)
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    late = env.from_sequence(1, 5).rebalance().map(ident).name("late-map")
    early = env.from_sequence(1, 5).map(ident).name("early")
    early.union(late).map(ident).name("join").print()
    late.key_by(ident).sum(0).print()
    job = env.get_job_graph()
    d = job.to_dict()
    order = [v["id"] for v in d["vertices"]]
    assert list(job.vertices) != order
    assert sorted(v["name"] for v in d["vertices"]) == sorted(
        [
            "Source: Sequence Source",
            "late-map",
            "Source: Sequence Source -> early",
            "join -> Sink: Print to Std. Out",
            "Keyed Aggregation -> Sink: Print to Std. Out",
        ]
    )
    assert [v["name"] for v in d["vertices"]][:2] == ["Source: Sequence Source", "Source: Sequence Source -> early"]
    assert all(order.index(e["source"]) < order.index(e["target"]) for e in d["edges"])
    eg = env.get_execution_graph()
    eg_order = [v["job_vertex"] for v in eg.to_dict()["vertices"]]
    assert list(dict.fromkeys(eg_order)) == order
    assert all(re.fullmatch(r".+ \(\d+/2\)", v["name"]) for v in eg.to_dict()["vertices"])
