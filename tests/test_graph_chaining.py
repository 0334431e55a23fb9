"""StreamGraph -> JobGraph: virtual nodes, default partitioners, the nine chaining
conditions of StreamingJobGraphGenerator.isChainable, chained names, slot sharing groups and the
WordCount example."""

from __future__ import annotations

import json

import pytest

from raylink.api import Configuration, OutputTag, StreamExecutionEnvironment, Types
from raylink.graph.chaining import is_chainable
from raylink.graph.job_graph_generator import create_job_graph
from raylink.graph.operator_spec import OperatorSpec, PartitionerSpec
from raylink.graph.stream_graph import StreamEdge, StreamGraph, StreamNode

pytestmark = pytest.mark.timeout(60)


# -- user functions --------------------------------------------------------------------
def ident(x):
    return x


def keep(x):
    return True


def split(line):
    return [(w, 1) for w in line.split()]


def first(kv):
    return kv[0]


def add(a, b):
    return a + b


def route(value, ctx):
    return [value]


def co1(x):
    return x


def co2(x):
    return x


# -- helpers ---------------------------------------------------------------------------
def new_env(parallelism: int = 1, conf: dict | None = None) -> StreamExecutionEnvironment:
    c = Configuration()
    for key, value in (conf or {}).items():
        c.set_string(key, value)
    env = StreamExecutionEnvironment.get_execution_environment(c)
    env.set_parallelism(parallelism)
    return env


def jg(env):
    return env.get_job_graph().to_dict()


def names(env):
    return [v["name"] for v in jg(env)["vertices"]]


def edges(env):
    d = jg(env)
    name = {v["id"]: v["name"] for v in d["vertices"]}
    return [
        (
            name[e["source"]],
            name[e["target"]],
            e["ship_strategy"],
            e["distribution_pattern"],
            e["result_partition_type"],
        )
        for e in d["edges"]
    ]


def abc_pipeline(env, configure=lambda a, b, c: None, between=None):
    """Source -> a -> [between] -> b -> c -> print, all with the env parallelism."""
    a = env.from_sequence(1, 10).map(ident).name("a")
    upstream = between(a) if between else a
    b = upstream.map(ident).name("b")
    c = b.filter(keep).name("c")
    configure(a, b, c)
    c.print()
    return env


SRC = "Source: Sequence Source"
SINK = "Sink: Print to Std. Out"


# -- Flink's streaming WordCount ----------------------------------------------------
@pytest.mark.parametrize(
    "make_source,source_name",
    [
        (lambda env: env.from_collection(["to be or not to be", "that is"]), "Source: Collection Source"),
        (lambda env: env.from_sequence(1, 100).set_parallelism(1), "Source: Sequence Source"),
    ],
)
def test_seed_003_word_count_job_graph(make_source, source_name):
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    counts = make_source(env).flat_map(split).key_by(first).sum(1)
    counts.print()

    job = env.get_job_graph("Streaming WordCount")
    d = job.to_dict()
    assert d["job_name"] == "Streaming WordCount"
    assert [v["name"] for v in d["vertices"]] == [
        source_name,
        "Flat Map",
        "Keyed Aggregation -> Sink: Print to Std. Out",
    ]
    assert [v["parallelism"] for v in d["vertices"]] == [1, 2, 2]
    ids = [v["id"] for v in d["vertices"]]
    assert [
        (
            e["source"],
            e["target"],
            e["ship_strategy"],
            e["distribution_pattern"],
            e["result_partition_type"],
            e["side_output"],
        )
        for e in d["edges"]
    ] == [
        (ids[0], ids[1], "REBALANCE", "ALL_TO_ALL", "PIPELINED_BOUNDED", None),
        (ids[1], ids[2], "HASH", "ALL_TO_ALL", "PIPELINED_BOUNDED", None),
    ]
    # the chain KeyedAgg(index 0) -> Sink(index 1), as Flink builds it
    by_name = {v.name: v for v in job.vertices.values()}
    agg = by_name["Keyed Aggregation -> Sink: Print to Std. Out"]
    assert [(c.operator_name, c.chain_index, c.is_chain_start, c.is_chain_end) for c in agg.chain] == [
        ("Keyed Aggregation", 0, True, False),
        ("Sink: Print to Std. Out", 1, False, True),
    ]
    assert [by_name[n].invokable for n in [source_name, "Flat Map"]] == ["SourceStreamTask", "OneInputStreamTask"]
    assert agg.invokable == "OneInputStreamTask"
    # one IntermediateDataSet per vertex that has a consumer
    assert [len(by_name[n].produced_data_sets) for n in [source_name, "Flat Map", agg.name]] == [1, 1, 0]
    assert agg.head_config.in_edges[0].partitioner.ship_strategy == "HASH"


def test_word_count_stream_graph_and_execution_plan():
    env = new_env(2)
    env.from_collection(["a b"]).flat_map(split).key_by(first).sum(1).print()
    sg = env.get_stream_graph()
    # key_by is virtual: 4 physical nodes, ids from the transformation counter
    assert [(n.id, n.operator_name, n.parallelism) for n in sg.get_stream_nodes()] == [
        (1, "Source: Collection Source", 1),
        (2, "Flat Map", 2),
        (4, "Keyed Aggregation", 2),
        (5, "Sink: Print to Std. Out", 2),
    ]
    assert sg.virtual_partition_nodes and all(v[0] == 2 for v in sg.virtual_partition_nodes.values())
    plan = json.loads(env.get_execution_plan())
    nodes = plan["nodes"]
    assert [(n["id"], n["type"], n["pact"], n["contents"], n["parallelism"]) for n in nodes] == [
        (1, "Source: Collection Source", "Data Source", "Source: Collection Source", 1),
        (2, "Flat Map", "Operator", "Flat Map", 2),
        (4, "Keyed Aggregation", "Operator", "Keyed Aggregation", 2),
        (5, "Sink: Print to Std. Out", "Data Sink", "Sink: Print to Std. Out", 2),
    ]
    assert "predecessors" not in nodes[0]
    assert [[(p["id"], p["ship_strategy"]) for p in n["predecessors"]] for n in nodes[1:]] == [
        [(1, "REBALANCE")],
        [(2, "HASH")],
        [(4, "FORWARD")],
    ]


def test_execution_plan_two_input_predecessors():
    env = new_env(2)
    a = env.from_sequence(1, 5)
    b = env.from_sequence(1, 5).set_parallelism(1)
    a.connect(b.broadcast()).map((co1, co2)).print()
    plan = json.loads(env.get_execution_plan())
    co = next(n for n in plan["nodes"] if n["type"] == "Co-Map")
    assert [(p["id"], p["ship_strategy"]) for p in co["predecessors"]] == [(1, "FORWARD"), (2, "BROADCAST")]


# -- the baseline chain and each condition flipped -------------------------------------
def test_baseline_everything_chains():
    env = abc_pipeline(new_env(2))
    assert names(env) == [f"{SRC} -> a -> b -> c -> {SINK}"]
    assert edges(env) == []
    job = env.get_job_graph()
    (vertex,) = job.vertices.values()
    assert [c.chain_index for c in vertex.chain] == [0, 1, 2, 3, 4]
    assert [c.is_chain_end for c in vertex.chain] == [False] * 4 + [True]


def test_condition_in_degree_union_target_does_not_chain():
    env = new_env(2)
    a = env.from_sequence(1, 10).map(ident).name("a")
    b = env.from_sequence(1, 10).map(ident).name("b")
    a.union(b).map(ident).name("u").print()
    assert names(env) == [f"{SRC} -> a", f"{SRC} -> b", f"u -> {SINK}"]
    assert edges(env) == [
        (f"{SRC} -> a", f"u -> {SINK}", "FORWARD", "POINTWISE", "PIPELINED_BOUNDED"),
        (f"{SRC} -> b", f"u -> {SINK}", "FORWARD", "POINTWISE", "PIPELINED_BOUNDED"),
    ]


def test_condition_in_degree_union_with_single_input_chains():
    env = new_env(2)
    env.from_sequence(1, 10).map(ident).name("a").union().map(ident).name("u").print()
    assert names(env) == [f"{SRC} -> a -> u -> {SINK}"]


def test_condition_in_degree_connect_target_does_not_chain():
    env = new_env(2)
    a = env.from_sequence(1, 10).map(ident).name("a")
    b = env.from_sequence(1, 10).map(ident).name("b")
    a.connect(b).map((co1, co2)).print()
    assert names(env) == [f"{SRC} -> a", f"{SRC} -> b", f"Co-Map -> {SINK}"]
    job = env.get_job_graph()
    co = next(v for v in job.vertices.values() if v.name.startswith("Co-Map"))
    assert co.invokable == "TwoInputStreamTask"
    assert [e.type_number for e in co.inputs] == [1, 2]


def test_condition_same_slot_sharing_group():
    env = abc_pipeline(new_env(2), lambda a, b, c: b.slot_sharing_group("other"))
    # b starts a new chain; c inherits "other" from b and chains with it
    d = jg(env)
    assert [(v["name"], v["slot_sharing_group"]) for v in d["vertices"]] == [
        (f"{SRC} -> a", "default"),
        (f"b -> c -> {SINK}", "other"),
    ]
    assert edges(env) == [(f"{SRC} -> a", f"b -> c -> {SINK}", "FORWARD", "POINTWISE", "PIPELINED_BOUNDED")]


def test_condition_same_slot_sharing_group_set_equal_keeps_chain():
    env = abc_pipeline(new_env(2), lambda a, b, c: b.slot_sharing_group("default"))
    assert names(env) == [f"{SRC} -> a -> b -> c -> {SINK}"]


def test_condition_downstream_never_breaks_both_sides():
    env = abc_pipeline(new_env(2), lambda a, b, c: b.disable_chaining())
    assert names(env) == [f"{SRC} -> a", "b", f"c -> {SINK}"]


def test_condition_downstream_head_breaks_but_own_outputs_chain():
    env = abc_pipeline(new_env(2), lambda a, b, c: b.start_new_chain())
    assert names(env) == [f"{SRC} -> a", f"b -> c -> {SINK}"]


def test_condition_upstream_never_breaks():
    env = abc_pipeline(new_env(2), lambda a, b, c: a.disable_chaining())
    assert names(env) == [SRC, "a", f"b -> c -> {SINK}"]


def test_condition_upstream_head_chains_source_is_head():
    env = new_env(2)
    src = env.from_sequence(1, 10)
    assert src.get_transformation().chaining_strategy == "HEAD"
    src.map(ident).name("a").print()
    assert names(env) == [f"{SRC} -> a -> {SINK}"]


def test_source_disable_chaining_breaks():
    env = new_env(2)
    env.from_sequence(1, 10).disable_chaining().map(ident).name("a").print()
    assert names(env) == [SRC, f"a -> {SINK}"]


@pytest.mark.parametrize(
    "partition,strategy,pattern",
    [
        (lambda s: s.rebalance(), "REBALANCE", "ALL_TO_ALL"),
        (lambda s: s.rescale(), "RESCALE", "POINTWISE"),
        (lambda s: s.shuffle(), "SHUFFLE", "ALL_TO_ALL"),
        (lambda s: s.broadcast(), "BROADCAST", "ALL_TO_ALL"),
        (lambda s: s.global_(), "GLOBAL", "ALL_TO_ALL"),
        (lambda s: s.key_by(ident), "HASH", "ALL_TO_ALL"),
        (lambda s: s.partition_custom(lambda key, n: 0, ident), "CUSTOM", "ALL_TO_ALL"),
    ],
)
def test_condition_forward_partitioner(partition, strategy, pattern):
    env = abc_pipeline(new_env(3), between=partition)
    assert names(env) == [f"{SRC} -> a", f"b -> c -> {SINK}"]
    assert edges(env) == [(f"{SRC} -> a", f"b -> c -> {SINK}", strategy, pattern, "PIPELINED_BOUNDED")]


def test_condition_explicit_forward_keeps_chain():
    env = abc_pipeline(new_env(3), between=lambda s: s.forward())
    assert names(env) == [f"{SRC} -> a -> b -> c -> {SINK}"]


def test_condition_shuffle_mode_batch_breaks_and_blocks():
    env = abc_pipeline(new_env(2), between=lambda s: s.forward().set_shuffle_mode("BATCH"))
    assert names(env) == [f"{SRC} -> a", f"b -> c -> {SINK}"]
    assert edges(env) == [(f"{SRC} -> a", f"b -> c -> {SINK}", "FORWARD", "POINTWISE", "BLOCKING")]
    stream_edge = next(e for e in env.get_stream_graph().edges() if e.shuffle_mode == "BATCH")
    assert (stream_edge.source_id, stream_edge.target_id) == (2, 4)


def test_condition_shuffle_mode_pipelined_keeps_chain():
    env = abc_pipeline(new_env(2), between=lambda s: s.forward().set_shuffle_mode("PIPELINED"))
    assert names(env) == [f"{SRC} -> a -> b -> c -> {SINK}"]


def test_condition_shuffle_mode_from_env_configuration():
    env = abc_pipeline(new_env(2, {"execution.shuffle-mode": "batch"}))
    assert names(env) == [SRC, "a", "b", "c", SINK]
    assert {e[2:] for e in edges(env)} == {("FORWARD", "POINTWISE", "BLOCKING")}
    assert len(edges(env)) == 4


def test_condition_shuffle_mode_pipelined_configuration_chains():
    env = abc_pipeline(new_env(2, {"execution.shuffle-mode": "pipelined"}))
    assert names(env) == [f"{SRC} -> a -> b -> c -> {SINK}"]


def test_condition_equal_parallelism_default_partitioner_breaks():
    env = abc_pipeline(new_env(2), lambda a, b, c: (b.set_parallelism(3), c.set_parallelism(3)))
    # a(2) -> b(3): REBALANCE; b(3) -> c(3): chained; c(3) -> sink(2): REBALANCE
    assert names(env) == [f"{SRC} -> a", "b -> c", SINK]
    assert [v["parallelism"] for v in jg(env)["vertices"]] == [2, 3, 2]
    assert edges(env) == [
        (f"{SRC} -> a", "b -> c", "REBALANCE", "ALL_TO_ALL", "PIPELINED_BOUNDED"),
        ("b -> c", SINK, "REBALANCE", "ALL_TO_ALL", "PIPELINED_BOUNDED"),
    ]


def test_condition_chaining_disabled_on_env():
    env = abc_pipeline(new_env(2))
    env.disable_operator_chaining()
    assert not env.is_chaining_enabled()
    assert names(env) == [SRC, "a", "b", "c", SINK]
    assert [e[2:] for e in edges(env)] == [("FORWARD", "POINTWISE", "PIPELINED_BOUNDED")] * 4


def test_condition_chaining_disabled_by_configuration():
    env = abc_pipeline(new_env(2, {"pipeline.operator-chaining": "false"}))
    assert names(env) == [SRC, "a", "b", "c", SINK]


# -- is_chainable on a hand-built StreamGraph: each of the nine conditions alone --------
def _two_node_graph():
    graph = StreamGraph("t")
    up = graph.add_node(StreamNode(1, "up", OperatorSpec("map", chaining_strategy="ALWAYS"), 2))
    down = graph.add_node(StreamNode(2, "down", OperatorSpec("map", chaining_strategy="ALWAYS"), 2))
    edge = StreamEdge(1, 2, 0, PartitionerSpec("FORWARD"))
    up.out_edges.append(edge)
    down.in_edges.append(edge)
    return graph, up, down, edge


def _flip_in_degree(g, up, down, edge):
    extra = g.add_node(StreamNode(3, "other", OperatorSpec("map"), 2))
    e2 = StreamEdge(3, 2, 0, PartitionerSpec("FORWARD"))
    extra.out_edges.append(e2)
    down.in_edges.append(e2)


def _set(obj, attr, value):
    setattr(obj, attr, value)


FLIPS = {
    "1 in-degree": _flip_in_degree,
    "2 downstream operator": lambda g, up, down, e: _set(down, "operator", None),
    "3 upstream operator": lambda g, up, down, e: _set(up, "operator", None),
    "4 slot sharing group": lambda g, up, down, e: _set(down, "slot_sharing_group", "x"),
    "5 downstream HEAD": lambda g, up, down, e: _set(down.operator, "chaining_strategy", "HEAD"),
    "5 downstream NEVER": lambda g, up, down, e: _set(down.operator, "chaining_strategy", "NEVER"),
    "6 upstream NEVER": lambda g, up, down, e: _set(up.operator, "chaining_strategy", "NEVER"),
    "7 partitioner": lambda g, up, down, e: _set(e, "partitioner", PartitionerSpec("RESCALE")),
    "8 shuffle mode": lambda g, up, down, e: _set(e, "shuffle_mode", "BATCH"),
    "9 parallelism": lambda g, up, down, e: _set(down, "parallelism", 3),
    "10 chaining disabled": lambda g, up, down, e: _set(g, "chaining_enabled", False),
}


def test_is_chainable_baseline_and_upstream_head():
    graph, up, down, edge = _two_node_graph()
    assert is_chainable(edge, graph) is True
    up.operator.chaining_strategy = "HEAD"
    assert is_chainable(edge, graph) is True
    edge.shuffle_mode = "PIPELINED"
    assert is_chainable(edge, graph) is True


@pytest.mark.parametrize("flip", sorted(FLIPS))
def test_is_chainable_each_condition_flipped(flip):
    graph, up, down, edge = _two_node_graph()
    FLIPS[flip](graph, up, down, edge)
    assert is_chainable(edge, graph) is False


# -- default partitioner, virtual nodes and side outputs ----------------------------------
def test_default_partitioner_forward_or_rebalance():
    env = new_env(2)
    src = env.from_sequence(1, 10)
    src.map(ident).name("same").print()
    src.map(ident).name("wider").set_parallelism(4).print()
    sg = env.get_stream_graph()
    by_target = {
        sg.nodes[e.target_id].operator_name: e.partitioner.ship_strategy for e in sg.edges() if e.source_id == 1
    }
    assert by_target == {"same": "FORWARD", "wider": "REBALANCE"}


def test_closest_partitioner_to_downstream_wins():
    env = new_env(2)
    env.from_sequence(1, 10).shuffle().rebalance().map(ident).print()
    (edge,) = [e for e in env.get_stream_graph().edges() if e.source_id == 1]
    assert edge.partitioner.ship_strategy == "REBALANCE"


def test_nested_partitions_seed_001_add_edge_internal():
    # StreamGraph.addEdgeInternal: the partitioner closest to the downstream node is kept
    # ("if (partitioner == null)"), the shuffle mode is overwritten on every virtual
    # partition node, so the one furthest upstream ends up on the edge
    env = new_env(2)
    env.from_sequence(1, 10).forward().set_shuffle_mode("BATCH").rebalance().map(ident).print()
    (edge,) = [e for e in env.get_stream_graph().edges() if e.source_id == 1]
    assert (edge.partitioner.ship_strategy, edge.shuffle_mode) == ("REBALANCE", "BATCH")


def test_side_output_tag_carried_onto_stream_edge_and_chained():
    env = new_env(2)
    tag = OutputTag("late", Types.INT())
    main = env.from_sequence(1, 10).process(route).name("p")
    main.get_side_output(tag).map(ident).name("late-map").print()
    main.print()
    sg = env.get_stream_graph()
    p_id = next(n.id for n in sg.get_stream_nodes() if n.operator_name == "p")
    out = {sg.nodes[e.target_id].operator_name: e for e in sg.nodes[p_id].out_edges}
    assert out["late-map"].output_tag == tag and out["late-map"].output_tag.type_info == Types.INT()
    assert out["late-map"].partitioner.ship_strategy == "FORWARD"
    assert out[SINK].output_tag is None
    assert sg.virtual_side_output_nodes and list(sg.virtual_side_output_nodes.values())[0][0] == p_id
    # a forward side output chains (Flink chains side outputs too)
    assert names(env) == [f"{SRC} -> p -> (late-map -> {SINK}, {SINK})"]
    job = env.get_job_graph()
    (vertex,) = job.vertices.values()
    p_config = next(c for c in vertex.chain if c.operator_name == "p")
    assert [(e.output_tag.tag_id if e.output_tag else None) for e in p_config.chained_outputs] == ["late", None]


def test_side_output_then_rebalance():
    env = new_env(2)
    tag = OutputTag("late", Types.INT())
    main = env.from_sequence(1, 10).process(route).name("p")
    main.get_side_output(tag).rebalance().map(ident).name("m").print()
    main.print()
    d = jg(env)
    assert [v["name"] for v in d["vertices"]] == [f"{SRC} -> p -> {SINK}", f"m -> {SINK}"]
    assert [(e["ship_strategy"], e["distribution_pattern"], e["side_output"]) for e in d["edges"]] == [
        ("REBALANCE", "ALL_TO_ALL", "late")
    ]


def test_side_output_key_by_and_parallelism_change():
    env = new_env(2)
    tag = OutputTag("late", Types.STRING())
    main = env.from_sequence(1, 10).process(route).name("p")
    main.get_side_output(tag).key_by(ident).reduce(add).print()
    main.get_side_output(tag).map(ident).name("narrow").set_parallelism(1).print()
    sg = env.get_stream_graph()
    tagged = sorted(
        (sg.nodes[e.target_id].operator_name, e.partitioner.ship_strategy, e.output_tag.tag_id)
        for e in sg.edges()
        if e.output_tag is not None
    )
    assert tagged == [("Keyed Reduce", "HASH", "late"), ("narrow", "REBALANCE", "late")]


def test_partition_then_side_output_resolves_through_both_virtual_nodes():
    env = new_env(2)
    tag = OutputTag("late", Types.INT())
    main = env.from_sequence(1, 10).process(route).name("p")
    main.rescale().get_side_output(tag).map(ident).name("m").print()
    sg = env.get_stream_graph()
    (edge,) = [e for e in sg.edges() if sg.nodes[e.target_id].operator_name == "m"]
    assert (sg.nodes[edge.source_id].operator_name, edge.partitioner.ship_strategy, edge.output_tag.tag_id) == (
        "p",
        "RESCALE",
        "late",
    )


def test_union_of_side_output_and_main_output():
    env = new_env(2)
    tag = OutputTag("late", Types.INT())
    main = env.from_sequence(1, 10).process(route).name("p")
    main.get_side_output(tag).union(main).map(ident).name("u").print()
    d = jg(env)
    assert [v["name"] for v in d["vertices"]] == [f"{SRC} -> p", f"u -> {SINK}"]
    assert sorted((e["ship_strategy"], e["side_output"] or "") for e in d["edges"]) == [
        ("FORWARD", ""),
        ("FORWARD", "late"),
    ]


def test_same_side_output_tag_and_type_twice_is_allowed():
    env = new_env(1)
    main = env.from_sequence(1, 10).process(route)
    main.get_side_output(OutputTag("late", Types.INT())).print()
    main.get_side_output(OutputTag("late", Types.INT())).print()
    tags = [e.output_tag.tag_id for e in env.get_stream_graph().edges() if e.output_tag]
    assert tags == ["late", "late"]


# -- slot sharing group inheritance ---------------------------------------------------------
def _two_groups(env, g1, g2):
    a = env.from_sequence(1, 10).slot_sharing_group(g1).map(ident).name("a")
    b = env.from_sequence(1, 10).slot_sharing_group(g2).map(ident).name("b")
    return a, b


def _groups(env):
    return {n.operator_name: n.slot_sharing_group for n in env.get_stream_graph().get_stream_nodes()}


def test_slot_sharing_group_inherited_from_single_input_through_virtual_nodes():
    env = new_env(2)
    a, _ = _two_groups(env, "g1", "g2")
    a.rebalance().map(ident).name("after-rebalance").print()
    groups = _groups(env)
    assert groups["a"] == "g1"
    assert groups["after-rebalance"] == "g1"
    assert groups[SINK] == "g1"


def test_slot_sharing_group_union_of_different_groups_is_default():
    env = new_env(2)
    a, b = _two_groups(env, "g1", "g2")
    a.union(b).map(ident).name("u").print()
    groups = _groups(env)
    assert (groups["a"], groups["b"], groups["u"], groups[SINK]) == ("g1", "g2", "default", "default")


def test_slot_sharing_group_connect_of_different_groups_is_default():
    env = new_env(2)
    a, b = _two_groups(env, "g1", "g2")
    a.connect(b.rebalance()).map((co1, co2)).print()
    assert _groups(env)["Co-Map"] == "default"


def test_slot_sharing_group_inputs_agree():
    env = new_env(2)
    a, b = _two_groups(env, "g1", "g1")
    a.connect(b).map((co1, co2)).print()
    a.union(b).map(ident).name("u").print()
    groups = _groups(env)
    assert (groups["Co-Map"], groups["u"]) == ("g1", "g1")


def test_slot_sharing_group_user_setting_wins():
    env = new_env(2)
    a, b = _two_groups(env, "g1", "g1")
    a.union(b).map(ident).name("u").slot_sharing_group("mine").print()
    groups = _groups(env)
    assert (groups["u"], groups[SINK]) == ("mine", "mine")
    assert [(v["name"], v["slot_sharing_group"]) for v in jg(env)["vertices"]][-1] == (f"u -> {SINK}", "mine")


# -- names --------------------------------------------------------------------------------
def test_operator_and_vertex_names():
    env = new_env(1)
    env.disable_operator_chaining()
    words = env.from_collection([("a", 1)])
    words.key_by(first).sum(1).print()
    words.key_by(first).reduce(add).print()
    words.key_by(first).max(1).print()
    env.from_sequence(1, 3).name("numbers").map(ident).add_sink(print).name("out")
    assert names(env) == [
        "Source: Collection Source",
        "Source: numbers",
        "Keyed Aggregation",
        "Keyed Reduce",
        "Keyed Aggregation",
        "Map",
        SINK,
        SINK,
        SINK,
        "Sink: out",
    ]


def test_fan_out_chained_name():
    env = new_env(2)
    a = env.from_sequence(1, 10).map(ident).name("a")
    a.map(ident).name("b").print()
    c = a.filter(keep).name("c")
    c.map(ident).name("d").print()
    c.print()
    assert names(env) == [f"{SRC} -> a -> (b -> {SINK}, c -> (d -> {SINK}, {SINK}))"]
    (vertex,) = env.get_job_graph().vertices.values()
    assert [c.operator_name for c in vertex.chain][:2] == [SRC, "a"]
    assert sorted(c.node_id for c in vertex.chain) == sorted(env.get_stream_graph().nodes)


def test_repeated_builds_are_identical():
    env = new_env(2)
    env.from_collection(["a b"]).flat_map(split).key_by(first).sum(1).print()
    assert jg(env) == jg(env)
    assert env.get_execution_plan() == env.get_execution_plan()


def test_stream_graph_for_job_graph_generator_directly():
    env = abc_pipeline(new_env(2), lambda a, b, c: b.start_new_chain())
    job = create_job_graph(env.get_stream_graph("direct"))
    assert job.job_name == "direct"
    assert [v.name for v in job.get_vertices_sorted_topologically_from_sources()] == [
        f"{SRC} -> a",
        f"b -> c -> {SINK}",
    ]
