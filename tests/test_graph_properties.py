"""Property tests over random topologies: chains of map/filter/flat_map/process with random
parallelism, random partitioning, unions, connects, side outputs, sinks, chaining
strategies and slot sharing groups. Each generated program must compile through all
three graph layers and keep the layers' invariants."""

from __future__ import annotations

import re
from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from raylink.api import Configuration, OutputTag, StreamExecutionEnvironment, Types
from raylink.graph.chaining import is_chainable
from raylink.graph.execution_graph import build_execution_graph
from raylink.graph.job_graph_generator import create_job_graph

pytestmark = pytest.mark.timeout(60)


# -- user functions ---------------------------------------------------------------------------
def ident(x):
    return x


def keep(x):
    return True


def explode(x):
    return [x]


def route(value, ctx):
    return [value]


def add(a, b):
    return a + b


def pick(key, num_partitions):
    return 0


ONE_INPUT = ("map", "filter", "flat_map", "process")
PARTITIONS = (
    "none",
    "none",
    "none",
    "none",
    "none",
    "forward",
    "forward",
    "rebalance",
    "rescale",
    "shuffle",
    "broadcast",
    "global",
    "custom",
    "key_by",
)
GROUPS = ("default", "g1", "g2")


class Program:
    """Builds a random but valid program; remembers what it expects of the graphs."""

    def __init__(self, data) -> None:
        self.data = data
        conf = Configuration()
        if self.draw(st.integers(0, 19)) == 0:
            conf.set_string("execution.shuffle-mode", "batch")
        self.env = StreamExecutionEnvironment.get_execution_environment(conf)
        self.env.set_parallelism(self.draw(st.integers(1, 4)))
        if self.draw(st.integers(0, 7)) == 0:
            self.env.disable_operator_chaining()
        # each entry: (DataStream, parallelism of its one physical producer or None)
        self.streams: list[tuple] = []
        self.uids = 0
        self.tags = 0
        self.chaining_requests = 0

    def draw(self, strategy):
        return self.data.draw(strategy)

    def parallelism(self):
        p = self.draw(st.sampled_from([None, None, None, 1, 2, 3, 4]))
        return self.env.get_parallelism() if p is None else p

    # -- pieces ------------------------------------------------------------------------
    def source(self):
        if self.draw(st.booleans()):
            p = self.parallelism()
            ds = self.env.from_sequence(1, 10).set_parallelism(p)
        else:
            ds, p = self.env.from_collection([1, 2, 3]), 1
        self.configure(ds)
        self.streams.append((ds, p))

    def partition(self, entry, allow_forward=True):
        """Returns (stream to consume, required consumer parallelism or None, keyed?)."""
        ds, producer_p = entry
        choice = self.draw(st.sampled_from(PARTITIONS))
        if choice == "forward" and (producer_p is None or not allow_forward):
            choice = "rebalance"
        required = None
        if choice == "none":
            out = ds
        elif choice == "forward":
            out, required = ds.forward(), producer_p
        elif choice == "global":
            out = ds.global_()
        elif choice == "custom":
            out = ds.partition_custom(pick, ident)
        elif choice == "key_by":
            out = ds.key_by(ident)
        else:
            out = getattr(ds, choice)()
        if choice != "none" and self.draw(st.integers(0, 9)) == 0:
            out.set_shuffle_mode("BATCH")
        return out, required, choice == "key_by"

    def configure(self, op):
        """Random chaining strategy / slot sharing group / uid on a physical operator."""
        if self.draw(st.integers(0, 7)) == 0:
            op.start_new_chain()
            self.chaining_requests += 1
        if self.draw(st.integers(0, 9)) == 0:
            op.disable_chaining()
            self.chaining_requests += 1
        if self.draw(st.integers(0, 6)) == 0:
            op.slot_sharing_group(self.draw(st.sampled_from(GROUPS)))
        if self.draw(st.integers(0, 5)) == 0:
            self.uids += 1
            op.uid(f"uid-{self.uids}")

    def one_input(self, entry=None):
        if entry is None:
            entry = self.streams[self.draw(st.integers(0, len(self.streams) - 1))]
        stream, required, keyed = self.partition(entry)
        if keyed:
            kind = self.draw(st.sampled_from(["reduce", "sum", "map", "process"]))
            op = {
                "reduce": lambda: stream.reduce(add),
                "sum": lambda: stream.sum(0),
                "map": lambda: stream.map(ident),
                "process": lambda: stream.process(route),
            }[kind]()
        else:
            kind = self.draw(st.sampled_from(ONE_INPUT))
            fn = {"map": ident, "filter": keep, "flat_map": explode, "process": route}[kind]
            op = getattr(stream, kind)(fn)
        p = required if required is not None else self.parallelism()
        op.set_parallelism(p)
        self.configure(op)
        self.streams.append((op, p))

    def union(self):
        count = self.draw(st.integers(1, 3))
        picks = [self.streams[self.draw(st.integers(0, len(self.streams) - 1))] for _ in range(count)]
        inputs = [self.partition(e, allow_forward=False)[0] for e in picks]
        inputs = [s for s in inputs if not hasattr(s, "get_key_selector")]  # keep unions unkeyed
        if not inputs:
            return
        self.streams.append((inputs[0].union(*inputs[1:]), None))
        if self.draw(st.booleans()):
            self.one_input(self.streams[-1])

    def connect(self):
        a = self.streams[self.draw(st.integers(0, len(self.streams) - 1))]
        b = self.streams[self.draw(st.integers(0, len(self.streams) - 1))]
        if self.draw(st.booleans()):
            op = a[0].connect(b[0]).key_by(ident, ident).process((route, route))
        else:
            left = self.partition(a, allow_forward=False)[0]
            right = self.partition(b, allow_forward=False)[0]
            op = left.connect(right).map((ident, ident))
        p = self.parallelism()
        op.set_parallelism(p)
        self.configure(op)
        self.streams.append((op, p))

    def side_output(self):
        producers = [e for e in self.streams if e[1] is not None]
        ds, p = producers[self.draw(st.integers(0, len(producers) - 1))]
        if self.tags and self.draw(st.booleans()):
            tag_id = f"tag-{self.draw(st.integers(1, self.tags))}"  # reuse with the same type
        else:
            self.tags += 1
            tag_id = f"tag-{self.tags}"
        self.streams.append((ds.get_side_output(OutputTag(tag_id, Types.INT())), p))
        if self.draw(st.booleans()):
            self.one_input(self.streams[-1])

    def sink(self):
        entry = self.streams[self.draw(st.integers(0, len(self.streams) - 1))]
        stream, required, _ = self.partition(entry)
        sink = stream.print()
        sink.set_parallelism(required if required is not None else self.parallelism())
        self.configure(sink)

    def build(self):
        for _ in range(self.draw(st.integers(1, 2))):
            self.source()
        self.one_input()
        for _ in range(self.draw(st.integers(0, 10))):
            action = self.draw(
                st.sampled_from(["one", "one", "one", "one", "union", "connect", "side", "side", "sink", "source"])
            )
            {
                "one": self.one_input,
                "union": self.union,
                "connect": self.connect,
                "side": self.side_output,
                "sink": self.sink,
                "source": self.source,
            }[action]()
        self.sink()
        return self.env


def build_all(env):
    sg = env.get_stream_graph()
    job = create_job_graph(sg)
    eg = build_execution_graph(job)
    return sg, job, eg


PROPERTY_SETTINGS = settings(
    max_examples=80,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@PROPERTY_SETTINGS
@given(st.data())
def test_every_stream_node_in_exactly_one_job_vertex(data):
    env = Program(data).build()
    sg, job, eg = build_all(env)
    placed = [c.node_id for v in job.vertices.values() for c in v.chain]
    assert Counter(placed) == Counter(list(sg.nodes))  # all nodes, none twice
    d = job.to_dict()
    op_ids = [op["id"] for v in d["vertices"] for op in v["operators"]]
    assert len(op_ids) == len(set(op_ids)) == len(sg.nodes)
    # the head of each vertex is its first operator; every source heads a vertex
    assert all(v.chain[0].node_id == v.head_node_id and v.chain[0].is_chain_start for v in job.vertices.values())
    heads = {v.head_node_id for v in job.vertices.values()}
    assert set(sg.get_source_ids()) <= heads


@PROPERTY_SETTINGS
@given(st.data())
def test_chains_follow_is_chainable_and_share_parallelism_and_group(data):
    env = Program(data).build()
    sg, job, eg = build_all(env)
    vertex_of = {c.node_id: v for v in job.vertices.values() for c in v.chain}
    for v in job.vertices.values():
        for c in v.chain:
            node = sg.nodes[c.node_id]
            assert node.parallelism == v.parallelism
            assert node.slot_sharing_group == v.slot_sharing_group
    crossing = []
    for edge in sg.edges():
        same = vertex_of[edge.source_id] is vertex_of[edge.target_id]
        assert same == is_chainable(edge, sg), edge
        if not same:
            crossing.append(edge)
    job_edges = [e for v in job.vertices.values() for e in v.inputs]
    assert sorted(id(e.stream_edge) for e in job_edges) == sorted(id(e) for e in crossing)
    for e in job_edges:
        assert e.source.producer is vertex_of[e.stream_edge.source_id]
        assert e.target is vertex_of[e.stream_edge.target_id]
        assert e.target.head_node_id == e.stream_edge.target_id  # a crossing edge enters at the head
    # chained vertex name: "a -> b ..." starts with the head operator's name
    for v in job.vertices.values():
        assert v.name.startswith(sg.nodes[v.head_node_id].operator_name)
        if "(" not in v.name:  # no fan-out: "a -> b -> c"
            assert v.name.split(" -> ") == [c.operator_name for c in v.chain]
        else:
            assert all(c.operator_name in v.name for c in v.chain)


@PROPERTY_SETTINGS
@given(st.data())
def test_job_edges_strategy_pattern_and_partition_type_agree(data):
    env = Program(data).build()
    sg, job, eg = build_all(env)
    for v in job.vertices.values():
        for e in v.inputs:
            expected = "POINTWISE" if e.ship_strategy in ("FORWARD", "RESCALE") else "ALL_TO_ALL"
            assert e.distribution_pattern == expected
            assert e.ship_strategy == e.stream_edge.partitioner.ship_strategy
            blocking = e.stream_edge.shuffle_mode == "BATCH"
            assert e.source.result_partition_type == ("BLOCKING" if blocking else "PIPELINED_BOUNDED")
            if e.ship_strategy == "FORWARD":
                assert e.source.producer.parallelism == e.target.parallelism
    for edge in sg.edges():
        if edge.partitioner.ship_strategy == "FORWARD":
            assert sg.nodes[edge.source_id].parallelism == sg.nodes[edge.target_id].parallelism


@PROPERTY_SETTINGS
@given(st.data())
def test_execution_graph_edge_counts_names_and_order(data):
    env = Program(data).build()
    sg, job, eg = build_all(env)
    d = job.to_dict()
    order = [v["id"] for v in d["vertices"]]
    assert sorted(order) == sorted(job.vertices)
    assert all(order.index(e["source"]) < order.index(e["target"]) for e in d["edges"])
    assert [ejv.id for ejv in eg.job_vertices] == order

    per_job_edge = Counter(id(e.job_edge) for e in eg.edges())
    for v in job.vertices.values():
        for e in v.inputs:
            s, t = e.source.producer.parallelism, e.target.parallelism
            expected = s * t if e.distribution_pattern == "ALL_TO_ALL" else max(s, t)
            assert per_job_edge[id(e)] == expected
    assert sum(per_job_edge.values()) == len(eg.to_dict()["edges"])

    names = eg.to_dict()["vertices"]
    assert len(names) == sum(v.parallelism for v in job.vertices.values())
    for ejv in eg.job_vertices:
        assert [ev.subtask_index for ev in ejv.vertices] == list(range(ejv.parallelism))
        for ev in ejv.vertices:
            m = re.fullmatch(r"(.+) \((\d+)/(\d+)\)", ev.name)
            assert m and m.groups() == (ejv.name, str(ev.subtask_index + 1), str(ejv.parallelism))
            assert len(ev.input_edges) == len(ejv.job_vertex.inputs)
            assert len(ev.produced_partitions) == len(ejv.job_vertex.produced_data_sets)
    # partitions: one per producer subtask, subpartitions numbered densely
    for result in eg.results.values():
        assert len(result.partitions) == result.producer.parallelism
        for partition in result.partitions:
            assert partition.number_of_subpartitions >= 1
            assert [e.subpartition_index for e in partition.consumers] == list(range(partition.number_of_subpartitions))
    attempt_ids = [ev.current_execution.attempt_id for ev in eg.all_vertices()]
    assert len(set(attempt_ids)) == len(attempt_ids)


@PROPERTY_SETTINGS
@given(st.data())
def test_side_outputs_and_slot_sharing_groups_survive_to_the_job_graph(data):
    program = Program(data)
    env = program.build()
    sg, job, eg = build_all(env)
    tagged = sorted(e.output_tag.tag_id for e in sg.edges() if e.output_tag is not None)
    # every side-output edge keeps its tag on the JobEdge or on a chained output
    in_job = [
        e.stream_edge.output_tag.tag_id
        for v in job.vertices.values()
        for e in v.inputs
        if e.stream_edge.output_tag is not None
    ]
    chained = [
        e.output_tag.tag_id
        for v in job.vertices.values()
        for c in v.chain
        for e in c.chained_outputs
        if e.output_tag is not None
    ]
    assert sorted(in_job + chained) == tagged
    assert sorted(x["side_output"] for x in job.to_dict()["edges"] if x["side_output"]) == sorted(in_job)
    # slot sharing: a node without a group of its own has its inputs' common group, else "default"
    for t in env.transformations:
        node = sg.nodes.get(t.id)
        if node is None or t.slot_sharing_group is not None:
            assert node is None or node.slot_sharing_group == t.slot_sharing_group
            continue
        input_groups = {sg.nodes[e.source_id].slot_sharing_group for e in node.in_edges}
        assert node.slot_sharing_group == (input_groups.pop() if len(input_groups) == 1 else "default")
    # building again yields the same JobGraph, ids included
    assert create_job_graph(env.get_stream_graph()).to_dict() == job.to_dict()
