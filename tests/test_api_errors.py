"""Bad programs fail when the program or its graph is built, with a message that names
the operator (DESIGN "Faults are visible"; Flink's own messages where Flink has one)."""

from __future__ import annotations

import pytest

from raylink.api import (
    Configuration,
    GraphError,
    KeyedStream,
    OutputTag,
    StreamExecutionEnvironment,
    Types,
)

pytestmark = pytest.mark.timeout(60)


def ident(x):
    return x


def route(value, ctx):
    return [value]


def env_with(parallelism: int = 2) -> StreamExecutionEnvironment:
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(parallelism)
    return env


# -- forward with a change of parallelism ----------------------------------------------------
def test_forward_with_changed_parallelism():
    env = env_with(2)
    env.from_sequence(1, 10).map(ident).name("narrow").forward().map(ident).name("wide").set_parallelism(3)
    with pytest.raises(GraphError) as info:
        env.get_job_graph()
    msg = str(info.value)
    assert msg.startswith("Forward partitioning does not allow change of parallelism.")
    assert "Upstream operation: narrow parallelism: 2" in msg
    assert "downstream operation: wide parallelism: 3" in msg
    assert "such as broadcast, rebalance, shuffle or global" in msg


def test_forward_from_non_parallel_source():
    env = env_with(2)
    env.from_collection([1, 2]).forward().map(ident).print()
    with pytest.raises(
        GraphError,
        match=r"Upstream operation: Source: Collection Source parallelism: 1, "
        r"downstream operation: Map parallelism: 2",
    ):
        env.get_stream_graph()


def test_forward_error_also_from_execution_plan():
    env = env_with(1)
    env.from_sequence(1, 3).forward().map(ident).set_parallelism(2).print()
    with pytest.raises(GraphError, match="Forward partitioning does not allow change of parallelism"):
        env.get_execution_plan()


# -- parallelism bounds --------------------------------------------------------------------
@pytest.mark.parametrize("bad", [0, -1, 1.5, "2", True])
def test_operator_parallelism_below_one_or_not_int(bad):
    env = env_with(1)
    m = env.from_sequence(1, 3).map(ident).name("my-map")
    with pytest.raises(GraphError, match=r"must be at least 1 \(operator 'my-map' \(transformation 2\)"):
        m.set_parallelism(bad)


@pytest.mark.parametrize("bad", [0, -3])
def test_env_parallelism_below_one(bad):
    with pytest.raises(GraphError, match="must be at least 1"):
        StreamExecutionEnvironment.get_execution_environment().set_parallelism(bad)
    conf = Configuration().set_integer("parallelism.default", bad)
    with pytest.raises(GraphError, match=r"parallelism\.default"):
        StreamExecutionEnvironment.get_execution_environment(conf)


def test_parallelism_above_operator_max_parallelism():
    env = env_with(1)
    env.from_sequence(1, 3).map(ident).name("big").set_max_parallelism(2).set_parallelism(4).print()
    with pytest.raises(
        GraphError,
        match=r"The parallelism \(4\) of operator 'big' \(transformation 2\) is "
        r"higher than its max parallelism \(2\)",
    ):
        env.get_job_graph()


def test_parallelism_above_env_max_parallelism():
    env = env_with(4)
    env.set_max_parallelism(3)
    env.from_sequence(1, 3).map(ident).print()
    with pytest.raises(
        GraphError,
        match=r"The parallelism \(4\) of operator 'Map' \(transformation 2\) .* max "
        r"parallelism \(3\)",
    ):
        env.get_stream_graph()


@pytest.mark.parametrize("bad", [0, -1, (1 << 15) + 1])
def test_max_parallelism_out_of_range(bad):
    env = env_with(1)
    m = env.from_sequence(1, 3).map(ident).name("m")
    with pytest.raises(
        GraphError,
        match=r"maximum parallelism must be at least 1 and smaller than or equal to "
        r"32768 \(operator 'm'",
    ):
        m.set_max_parallelism(bad)
    with pytest.raises(GraphError, match="maximum parallelism"):
        env.set_max_parallelism(bad)


def test_max_parallelism_upper_bound_is_allowed():
    env = env_with(1)
    env.from_sequence(1, 3).map(ident).set_max_parallelism(1 << 15).start_new_chain().print()
    vertices = env.get_job_graph().get_vertices_sorted_topologically_from_sources()
    assert [(v.name, v.max_parallelism, v.max_parallelism_configured) for v in vertices] == [
        ("Source: Sequence Source", 128, False),
        ("Map -> Sink: Print to Std. Out", 1 << 15, True),
    ]


def test_non_parallel_source_with_parallelism_two():
    env = env_with(1)
    src = env.from_collection([1, 2, 3])
    with pytest.raises(GraphError, match=r"non parallel operator must be 1 \(operator 'Collection Source'"):
        src.set_parallelism(2)
    src.set_parallelism(1)  # allowed
    assert src.get_parallelism() == 1


def test_non_parallel_source_stays_at_one_under_env_parallelism():
    env = env_with(4)
    src = env.from_collection([1, 2, 3])
    assert src.get_parallelism() == 1


# -- functions and key selectors ------------------------------------------------------------
@pytest.mark.parametrize("bad", [42, None, "upper"])
def test_key_by_non_callable(bad):
    env = env_with(1)
    with pytest.raises(
        TypeError,
        match=r"^key_by: key_selector must be a callable or an object with a "
        r"'get_key' method, got ",
    ):
        env.from_sequence(1, 3).key_by(bad)


@pytest.mark.parametrize(
    "call,operator",
    [
        (lambda s: s.map(42), "Map"),
        (lambda s: s.flat_map(42), "Flat Map"),
        (lambda s: s.filter(42), "Filter"),
        (lambda s: s.process(42), "Process"),
        (lambda s: s.key_by(ident).reduce(42), "Keyed Reduce"),
        (lambda s: s.key_by(ident).process(42), "KeyedProcess"),
        (lambda s: s.add_sink(42), "Sink"),
    ],
)
def test_non_callable_function_names_the_operator(call, operator):
    env = env_with(1)
    with pytest.raises(
        TypeError,
        match=rf"^{operator}: .* must be a callable or an object with a '\w+' method, "
        rf"got int$",
    ):
        call(env.from_sequence(1, 3))
    assert env.transformations == []


def test_function_objects_are_accepted():
    class Doubler:
        def map(self, value):
            return value * 2

    class ByFirst:
        def get_key(self, value):
            return value

    env = env_with(1)
    keyed = env.from_sequence(1, 3).map(Doubler()).key_by(ByFirst())
    assert isinstance(keyed, KeyedStream)
    assert keyed.get_key_selector()(7) == 7


def test_co_map_needs_a_pair():
    env = env_with(1)
    a, b = env.from_sequence(1, 3), env.from_sequence(1, 3)
    with pytest.raises(TypeError, match="Co-Map: expected an object with 'map1' and 'map2'"):
        a.connect(b).map(ident)
    with pytest.raises(TypeError, match="Co-Process"):
        a.connect(b).process((ident, 3))


# -- KeyedStream restrictions (PyFlink's messages) --------------------------------------------
@pytest.mark.parametrize("method", ["forward", "rebalance", "rescale", "shuffle", "broadcast", "global_"])
def test_repartitioning_keyed_stream(method):
    keyed = env_with(1).from_sequence(1, 3).key_by(ident)
    with pytest.raises(GraphError, match=r"^Cannot override partitioning for KeyedStream\.$"):
        getattr(keyed, method)()


def test_partition_custom_on_keyed_stream():
    keyed = env_with(1).from_sequence(1, 3).key_by(ident)
    with pytest.raises(GraphError, match=r"^Cannot override partitioning for KeyedStream\.$"):
        keyed.partition_custom(lambda k, n: 0, ident)


@pytest.mark.parametrize(
    "call,message",
    [
        (lambda k: k.set_parallelism(2), "Set parallelism for KeyedStream is not supported."),
        (lambda k: k.set_max_parallelism(8), "Set max parallelism for KeyedStream is not supported."),
        (lambda k: k.name("x"), "Set name for KeyedStream is not supported."),
        (lambda k: k.uid("x"), "Set uid for KeyedStream is not supported."),
        (lambda k: k.slot_sharing_group("x"), "Setting slot sharing group for KeyedStream is not supported."),
        (lambda k: k.start_new_chain(), "Start new chain for KeyedStream is not supported."),
        (lambda k: k.disable_chaining(), "Disable chaining for KeyedStream is not supported."),
    ],
)
def test_keyed_stream_setters_refused(call, message):
    keyed = env_with(1).from_sequence(1, 3).key_by(ident)
    with pytest.raises(GraphError) as info:
        call(keyed)
    assert str(info.value) == message


# -- side outputs -----------------------------------------------------------------------------
def test_side_output_same_id_two_types():
    env = env_with(1)
    p = env.from_sequence(1, 3).process(route).name("splitter")
    p.get_side_output(OutputTag("late", Types.INT()))
    with pytest.raises(GraphError) as info:
        p.get_side_output(OutputTag("late", Types.STRING()))
    msg = str(info.value)
    assert "matching id ('late')" in msg
    assert "operator 'splitter' (transformation 2)" in msg
    assert "(INT vs STRING)" in msg
    assert msg.endswith("side output ids need to be unique.")


def test_side_output_same_id_on_two_operators_is_fine():
    env = env_with(1)
    s = env.from_sequence(1, 3)
    s.process(route).get_side_output(OutputTag("late", Types.INT())).print()
    s.process(route).get_side_output(OutputTag("late", Types.STRING())).print()
    assert len([e for e in env.get_stream_graph().edges() if e.output_tag]) == 2


def test_bad_output_tags():
    with pytest.raises(ValueError, match="OutputTag id must be a non-empty string"):
        OutputTag("")
    with pytest.raises(ValueError):
        OutputTag(5)
    env = env_with(1)
    with pytest.raises(TypeError, match="get_side_output: expected an OutputTag, got str"):
        env.from_sequence(1, 3).process(route).get_side_output("late")


# -- virtual streams and other misuse ----------------------------------------------------------
@pytest.mark.parametrize(
    "call",
    [
        lambda s: s.set_parallelism(2),
        lambda s: s.name("x"),
        lambda s: s.uid("x"),
        lambda s: s.slot_sharing_group("x"),
        lambda s: s.start_new_chain(),
        lambda s: s.disable_chaining(),
    ],
)
def test_operator_setters_on_partitioned_stream(call):
    rebalanced = env_with(1).from_sequence(1, 3).rebalance()
    with pytest.raises(GraphError, match=r"is only supported on operators, not on the partition 'Partition'"):
        call(rebalanced)


def test_set_shuffle_mode_misuse():
    env = env_with(1)
    m = env.from_sequence(1, 3).map(ident).name("m")
    with pytest.raises(GraphError, match=r"set_shuffle_mode\(\) applies to a partitioned stream .* not to 'm'"):
        m.set_shuffle_mode("BATCH")
    with pytest.raises(ValueError, match="shuffle_mode must be one of"):
        m.forward().set_shuffle_mode("SOMETIMES")


def test_union_and_connect_type_checks():
    s = env_with(1).from_sequence(1, 3)
    with pytest.raises(TypeError, match="union: expected DataStreams, got list"):
        s.union([s])
    with pytest.raises(TypeError, match="connect: expected a DataStream, got int"):
        s.connect(3)


def test_no_operators_defined():
    env = env_with(1)
    env.from_sequence(1, 3)  # a source alone is not registered, as in Flink
    with pytest.raises(RuntimeError, match=r"^No operators defined in streaming topology\. Cannot execute\.$"):
        env.get_job_graph()


def test_buffer_timeout_validation():
    env = env_with(1)
    with pytest.raises(ValueError, match="Timeout parameter must be greater than or equal to -1"):
        env.set_buffer_timeout(-2)
    with pytest.raises(ValueError, match="Timeout parameter"):
        env.from_sequence(1, 3).map(ident).set_buffer_timeout(-5)


def test_bad_sources():
    env = env_with(1)
    with pytest.raises(TypeError, match="from_collection: collection must be a list"):
        env.from_collection("abc")
    with pytest.raises(ValueError, match=r"from_sequence: start \(5\) must be <= end \(1\)"):
        env.from_sequence(5, 1)
    with pytest.raises(TypeError, match="add_source: source_func must be"):
        env.add_source(42)


def test_parallelism_above_the_upper_bound_of_default_max_parallelism():
    env = env_with(1)
    env.from_sequence(1, 3).map(ident).name("huge").set_parallelism(40000).print()
    with pytest.raises(
        GraphError,
        match=r"The parallelism \(40000\) of operator 'huge' is higher than its max "
        r"parallelism \(32768\)",
    ):
        env.get_job_graph()


@pytest.mark.parametrize("parallelism,default_max", [(1, 128), (85, 128), (86, 256), (200, 512), (30000, 32768)])
def test_default_max_parallelism_flink_formula(parallelism, default_max):
    # KeyGroupRangeAssignment.computeDefaultMaxParallelism: roundUpToPowerOfTwo(p + p/2) in [128, 32768]
    env = env_with(1)
    env.from_sequence(1, 3).map(ident).name("m").set_parallelism(parallelism).start_new_chain().print()
    vertex = next(v for v in env.get_job_graph().vertices.values() if v.name.startswith("m"))
    assert (vertex.max_parallelism, vertex.max_parallelism_configured) == (default_max, False)
