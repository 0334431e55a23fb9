"""The DataStream API surface a PyFlink program touches, checked against what PyFlink 2.3 does
(the expected values were taken from the same programs run under PyFlink 2.3.0): the
operator setters and the execution plan (names, descriptions, parallelism, partitioners,
``force_non_parallel``, ``project``, slot sharing groups), ``cache()``, collecting a keyed
stream, ``ExecutionConfig``, and the record-level behaviours of PyFlink's DataStream tests
(state in keyed functions, timers, side outputs, rolling and batch aggregations, errors) on
the local target. The runtime tests (``test_runtime_*``) cover the same on Ray."""

from __future__ import annotations

import datetime
import decimal
import json
from collections import defaultdict

import pytest

from raylink.api import (
    CachedDataStream,
    Configuration,
    ExecutionConfig,
    KeyedStream,
    MemorySize,
    OutputTag,
    Row,
    RuntimeExecutionMode,
    SlotSharingGroup,
    StreamExecutionEnvironment,
    Types,
    WatermarkStrategy,
)
from raylink.api.functions import (
    FlatMapFunction,
    KeyedCoProcessFunction,
    KeyedProcessFunction,
    KeySelector,
    MapFunction,
    ProcessFunction,
    ReduceFunction,
)
from raylink.api.pyflink_compat.unsupported import UnsupportedFeatureError
from raylink.api.state import (
    ListStateDescriptor,
    MapStateDescriptor,
    ReducingStateDescriptor,
    ValueStateDescriptor,
)
from raylink.api.watermark_strategy import TimestampAssigner
from raylink.graph.stream_graph import GraphError
from raylink.runtime.client.job_result import JobExecutionException
from raylink.tests.runtime_jobs import cause_chain, make_env

pytestmark = pytest.mark.timeout(120)

PAIR = Types.TUPLE([Types.STRING(), Types.INT()])
ROW_PAIR = Types.ROW([Types.STRING(), Types.INT()])


def plan_env(parallelism: int = 2) -> StreamExecutionEnvironment:
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(parallelism)
    return env


def plan_nodes(env: StreamExecutionEnvironment) -> list:
    return json.loads(env.get_execution_plan())["nodes"]


def collect(stream) -> list:
    with stream.execute_and_collect() as results:
        return list(results)


# -- the execution plan ------------------------------------------------------------------------------
def test_name_parallelism_and_max_parallelism_show_in_the_plan():
    env = plan_env(8)
    src = env.from_collection([(7, "x"), (8, "y")]).name("numbers")
    assert src.get_name() == "numbers"
    src.map(lambda r: r).set_parallelism(3).set_max_parallelism(6).print()
    nodes = plan_nodes(env)
    assert [(n["type"], n["parallelism"]) for n in nodes] == [
        ("Source: numbers", 1),
        ("Map", 3),
        ("Sink: Print to Std. Out", 8),
    ]
    assert env.get_stream_graph().get_stream_node(2).max_parallelism == 6


def test_force_non_parallel_pins_an_operator_to_one_subtask_for_good():
    env = plan_env(8)
    mapped = env.from_collection([1, 2]).map(lambda v: v)
    assert mapped.force_non_parallel() is mapped
    mapped.print()
    assert [n["parallelism"] for n in plan_nodes(env)] == [1, 1, 8]
    assert env.get_stream_graph().get_stream_node(2).max_parallelism == 1
    with pytest.raises(GraphError, match="The parallelism of non parallel operator must be 1"):
        mapped.set_parallelism(3)
    mapped.set_parallelism(1)  # 1 stays allowed
    with pytest.raises(GraphError, match="Set force non-parallel for KeyedStream is not supported."):
        mapped.key_by(lambda v: v).force_non_parallel()


def test_set_description_becomes_the_plan_contents_of_operators_and_sinks():
    env = plan_env(2)
    mapped = env.from_collection([1]).map(lambda v: v).name("double").set_description("doubles every value")
    mapped.print().set_description("prints the doubled values")
    assert [(n["type"], n["contents"]) for n in plan_nodes(env)] == [
        ("Source: Collection Source", "Source: Collection Source"),
        ("double", "doubles every value"),
        ("Sink: Print to Std. Out", "prints the doubled values"),
    ]


@pytest.mark.parametrize("method", ["broadcast", "rebalance", "rescale", "shuffle"])
def test_partitioning_methods_name_the_ship_strategy_in_the_plan(method):
    env = plan_env(2)
    getattr(env.from_collection([1, 2, 3]), method)().map(lambda v: v + 1).set_parallelism(3).print()
    assert plan_nodes(env)[1]["predecessors"][0]["ship_strategy"] == method.upper()


def test_a_union_reads_every_source_and_a_union_of_keyed_streams_is_a_plain_stream():
    env = plan_env(2)
    a, b, c = (env.from_collection(list(r)) for r in ((1, 2), (3, 4), (5, 6)))
    c.union(a, b).map(lambda v: v * 10).print()
    nodes = plan_nodes(env)
    sources = sorted(n["id"] for n in nodes if n["pact"] == "Data Source")
    mapper = next(n for n in nodes if n["type"] == "Map")
    assert sorted(p["id"] for p in mapper["predecessors"]) == sources

    env = make_env("local", 2)
    keyed_union = env.from_collection([1, 2]).key_by(lambda v: v).union(env.from_collection([3]).key_by(lambda v: v))
    assert not isinstance(keyed_union, KeyedStream)
    assert sorted(collect(keyed_union)) == [1, 2, 3]


def test_project_keeps_the_chosen_fields_of_a_tuple_stream_in_the_given_order():
    quad = Types.TUPLE([Types.INT(), Types.STRING(), Types.INT(), Types.STRING()])
    env = make_env("local", 2)
    ds = env.from_collection([(1, "a", 10, "x"), (2, "b", 20, "y")], type_info=quad)
    projected = ds.project(3, 0)
    assert projected.get_type() == Types.TUPLE([Types.STRING(), Types.INT()])
    assert sorted(collect(projected)) == [("x", 1), ("y", 2)]
    assert sorted(collect(ds.key_by(lambda r: r[1]).project(2))) == [(10,), (20,)]

    plan = plan_env(2)
    plan.from_collection([(1, "a", 10, "x")], type_info=quad).project(1, 2).print()
    assert plan_nodes(plan)[1]["type"] == "Projection"


def test_project_refuses_streams_that_are_not_tuples_and_fields_they_lack():
    env = plan_env(2)
    for ds in (env.from_collection([1, 2]), env.from_collection([("a", 1)], type_info=ROW_PAIR)):
        with pytest.raises(TypeError, match="only Tuple DataStreams can be projected"):
            ds.project(0)
    pairs = env.from_collection([("a", 1)], type_info=PAIR)
    with pytest.raises(IndexError, match="field index 2 is out of bounds"):
        pairs.project(0, 2)
    with pytest.raises(ValueError, match="at least one field"):
        pairs.project()


def test_a_keyed_stream_refuses_what_pyflink_refuses_on_it():
    keyed = plan_env(2).from_collection([("a", 1)], type_info=PAIR).key_by(lambda r: r[0])
    refusals = {
        "Get name of KeyedStream is not supported.": keyed.get_name,
        "Set name for KeyedStream is not supported.": lambda: keyed.name("k"),
        "Set uid hash for KeyedStream is not supported.": lambda: keyed.set_uid_hash("ab12"),
        "Set buffer timeout for KeyedStream is not supported.": lambda: keyed.set_buffer_timeout(5),
        "Set description for KeyedStream is not supported.": lambda: keyed.set_description("d"),
        "Cache for KeyedStream is not supported.": keyed.cache,
        "Cannot override partitioning for KeyedStream.": keyed.shuffle,
    }
    for message, call in refusals.items():
        with pytest.raises(GraphError) as info:
            call()
        assert str(info.value) == message
    assert [m.name for m in KeyedStream.AccumulateType] == ["MIN", "MAX", "MIN_BY", "MAX_BY", "SUM"]


# -- slot sharing groups ------------------------------------------------------------------------------
def test_memory_size_reads_and_prints_as_flinks():
    size = MemorySize.of_mebi_bytes(300)
    assert (size.get_bytes(), size.get_kibi_bytes(), size.get_mebi_bytes(), size.get_gibi_bytes()) == (
        314572800,
        307200,
        300,
        0,
    )
    assert [str(MemorySize(bytes_size=b)) for b in (300 << 20, 2 << 30, 2560, 0)] == [
        "300 mb",
        "2 gb",
        "2560 bytes",
        "0 bytes",
    ]
    assert MemorySize.of_mebi_bytes(2) == MemorySize(bytes_size=2 << 20)
    assert MemorySize.of_mebi_bytes(1) < MemorySize.of_mebi_bytes(2) <= MemorySize.of_mebi_bytes(2)
    with pytest.raises(TypeError, match="Does not support comparison with non-MemorySize 7"):
        MemorySize.of_mebi_bytes(1) < 7
    with pytest.raises(ValueError, match="bytes must be >= 0"):
        MemorySize(bytes_size=-3)


def test_a_slot_sharing_group_keeps_its_resources_and_checks_them_as_flink():
    group = (
        SlotSharingGroup.builder("heavy")
        .set_cpu_cores(2.5)
        .set_task_heap_memory_mb(256)
        .set_managed_memory(MemorySize.of_mebi_bytes(64))
        .set_external_resource("gpu", 1)
        .build()
    )
    assert group.get_name() == "heavy"
    assert group.get_cpu_cores() == 2.5
    assert [str(m) for m in (group.get_task_heap_memory(), group.get_task_off_heap_memory())] == ["256 mb", "0 bytes"]
    assert str(group.get_managed_memory()) == "64 mb"
    assert group.get_external_resources() == {"gpu": 1.0}
    plain = SlotSharingGroup.builder("light").build()
    assert (plain.get_cpu_cores(), plain.get_task_heap_memory(), plain.get_external_resources()) == (None, None, {})
    assert plain == SlotSharingGroup.builder("light").build() != group

    required = "The cpu cores and task heap memory are required"
    for build, message in [
        (lambda b: b.set_cpu_cores(1.0), required),
        (lambda b: b.set_managed_memory_mb(16), required),
        (lambda b: b.set_external_resource("gpu", 1.0), required),
        (lambda b: b.set_cpu_cores(0.0), "The cpu cores should be positive."),
        (lambda b: b.set_task_heap_memory_mb(0), "The task heap memory should be positive."),
    ]:
        with pytest.raises(ValueError, match=message):
            build(SlotSharingGroup.builder("x")).build()


def test_operators_join_slot_sharing_groups_given_by_name_or_as_a_group():
    env = plan_env(2)
    heavy = SlotSharingGroup.builder("heavy").set_cpu_cores(1.0).set_task_heap_memory_mb(100).build()
    light = SlotSharingGroup.builder("light").build()
    assert env.register_slot_sharing_group(light) is env
    src = env.from_collection([1, 2]).name("src").slot_sharing_group(heavy)
    src.map(lambda v: v).name("work").slot_sharing_group("light").print().name("out")
    groups = {n.operator_name: n.slot_sharing_group for n in env.get_stream_graph().get_stream_nodes()}
    assert groups == {"Source: src": "heavy", "work": "light", "Sink: out": "light"}
    assert env.get_slot_sharing_groups() == {"heavy": heavy, "light": light}
    with pytest.raises(TypeError, match="a name \\(str\\) or a SlotSharingGroup"):
        src.slot_sharing_group(3)


# -- cache -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("mode", [RuntimeExecutionMode.STREAMING, RuntimeExecutionMode.BATCH])
def test_a_cached_stream_gives_the_same_records_in_every_job_that_uses_it(mode):
    env = make_env("local", 2)
    env.set_runtime_mode(mode)
    cached = env.from_collection([1, 2, 3]).map(lambda v: v * 2).cache()
    assert isinstance(cached, CachedDataStream)
    assert sorted(collect(cached)) == [2, 4, 6]
    assert sorted(collect(cached.map(lambda v: v + 1))) == [3, 5, 7]
    cached.invalidate()
    assert sorted(collect(cached)) == [2, 4, 6]


def test_a_cached_stream_cannot_be_configured_any_more():
    cached = plan_env(2).from_collection([1]).map(lambda v: v).cache()
    for message, call in {
        "Set parallelism for CachedDataStream is not supported.": lambda: cached.set_parallelism(2),
        "Set name for CachedDataStream is not supported.": lambda: cached.name("c"),
        "Get name of CachedDataStream is not supported.": cached.get_name,
        "Set uid for CachedDataStream is not supported.": lambda: cached.uid("c"),
        "Disable chaining for CachedDataStream is not supported.": cached.disable_chaining,
        "Setting slot sharing group for CachedDataStream is not supported.": lambda: cached.slot_sharing_group("g"),
    }.items():
        with pytest.raises(GraphError) as info:
            call()
        assert str(info.value) == message


# -- ExecutionConfig -----------------------------------------------------------------------------------
def test_execution_config_has_flinks_defaults():
    config = plan_env(2).get_config()
    assert (config.PARALLELISM_DEFAULT, config.PARALLELISM_UNKNOWN) == (-1, -2)
    assert config.get_auto_watermark_interval() == 200
    assert config.get_latency_tracking_interval() == 0
    assert (config.get_parallelism(), config.get_max_parallelism()) == (2, -1)
    assert (config.get_task_cancellation_interval(), config.get_task_cancellation_timeout()) == (30000, 180000)
    assert config.get_global_job_parameters() == {}
    assert config.is_closure_cleaner_enabled() and config.has_auto_generated_uids_enabled()
    assert not config.is_object_reuse_enabled() and not config.is_use_snapshot_compression()


def test_execution_config_setters_are_the_configuration_options_and_the_environments_settings():
    env = plan_env(2)
    config = env.get_config()
    returned = (
        config.set_auto_watermark_interval(50)
        .set_latency_tracking_interval(100)
        .set_task_cancellation_interval(1000)
        .set_task_cancellation_timeout(0)
        .enable_object_reuse()
        .disable_closure_cleaner()
        .disable_auto_generated_uids()
        .set_use_snapshot_compression(True)
        .set_global_job_parameters({"region": "eu", "limit": 5})
        .set_parallelism(5)
        .set_max_parallelism(64)
    )
    assert isinstance(returned, ExecutionConfig)
    assert env.get_parallelism() == 5 and env.get_max_parallelism() == 64
    env.set_parallelism(3)
    assert env.get_config().get_parallelism() == 3
    fresh = env.get_config()
    assert (fresh.get_auto_watermark_interval(), fresh.get_latency_tracking_interval()) == (50, 100)
    assert (fresh.get_task_cancellation_interval(), fresh.get_task_cancellation_timeout()) == (1000, 0)
    assert fresh.is_object_reuse_enabled() and fresh.is_use_snapshot_compression()
    assert not fresh.is_closure_cleaner_enabled() and not fresh.has_auto_generated_uids_enabled()
    assert fresh.get_global_job_parameters() == {"region": "eu", "limit": "5"}
    settings = env.configuration.to_dict()
    assert settings["pipeline.auto-watermark-interval"] == "50 ms"
    assert settings["metrics.latency.interval"] == "100 ms"
    assert settings["task.cancellation.interval"] == "1000 ms"
    assert settings["pipeline.object-reuse"] == "true"
    assert settings["pipeline.closure-cleaner-level"] == "none"
    assert settings["execution.checkpointing.snapshot-compression"] == "true"
    config.set_parallelism(ExecutionConfig.PARALLELISM_DEFAULT)
    assert env.get_parallelism() == 1  # back to parallelism.default
    assert env.from_collection([1]).get_execution_config().get_parallelism() == 1


def test_execution_config_reads_options_from_the_configuration():
    conf = Configuration()
    for key, value in {
        "pipeline.object-reuse": "true",
        "pipeline.global-job-parameters": "team:data,tier:2",
        "metrics.latency.interval": "7 ms",
        "pipeline.auto-watermark-interval": "1 s",
        "task.cancellation.interval": "2 s",
        "task.cancellation.timeout": "3 s",
    }.items():
        conf.set_string(key, value)
    config = StreamExecutionEnvironment.get_execution_environment(conf).get_config()
    assert config.is_object_reuse_enabled()
    assert config.get_global_job_parameters() == {"team": "data", "tier": "2"}
    assert config.get_latency_tracking_interval() == 7
    assert config.get_auto_watermark_interval() == 1000
    assert (config.get_task_cancellation_interval(), config.get_task_cancellation_timeout()) == (2000, 3000)


def test_execution_config_refuses_bad_values_and_java_serializers():
    config = plan_env(2).get_config()
    for call, error, message in [
        (lambda: config.set_parallelism(0), ValueError, "Parallelism must be at least one"),
        (lambda: config.set_max_parallelism(0), ValueError, "The maximum parallelism must be greater than 0."),
        (lambda: config.set_task_cancellation_timeout(-1), ValueError, "Timeout needs to be >= 0."),
        (lambda: config.set_auto_watermark_interval(-1), ValueError, "must not be negative"),
        (lambda: config.set_global_job_parameters(["a"]), TypeError, "expected a dict"),
    ]:
        with pytest.raises(error, match=message):
            call()
    for method in ("enable_force_kryo", "disable_generic_types", "enable_force_avro", "get_registered_kryo_types"):
        with pytest.raises(UnsupportedFeatureError, match=f"ExecutionConfig.{method}: Kryo/Avro serializer"):
            getattr(config, method)()


class ReadJobParameters(MapFunction):
    def open(self, runtime_context):
        self.region = runtime_context.get_job_parameter("region", "none")
        self.missing = runtime_context.get_job_parameter("absent", "fallback")

    def map(self, value):
        return value, self.region, self.missing


def test_global_job_parameters_reach_every_function():
    env = make_env("local", 2)
    env.get_config().set_global_job_parameters({"region": "eu"})
    assert sorted(collect(env.from_collection([1, 2]).map(ReadJobParameters()))) == [
        (1, "eu", "fallback"),
        (2, "eu", "fallback"),
    ]


# -- collecting ---------------------------------------------------------------------------------------
def test_collecting_a_keyed_stream_yields_rows_of_key_and_record_in_order():
    env = make_env("local", 2)
    data = [("kiwi", 3), ("fig", 1), ("kiwi", 4), ("plum", 9)]
    keyed = env.from_collection(data, type_info=PAIR).key_by(lambda r: r[0], Types.STRING())
    assert collect(keyed) == [Row(f0=k, f1=(k, v)) for k, v in data]
    first = keyed.execute_and_collect(limit=2)
    assert first == [Row(f0="kiwi", f1=("kiwi", 3)), Row(f0="fig", f1=("fig", 1))]
    assert repr(first[0]) == "Row(f0='kiwi', f1=('kiwi', 3))"


def test_collected_values_of_every_type_come_back_as_they_went_in():
    env = make_env("local", 2)
    untyped = [
        (
            3,
            None,
            False,
            -32768,
            2.75,
            bytearray(b"raw"),
            "text",
            datetime.date(2020, 2, 29),
            datetime.time(23, 59, 58, 250000),
            datetime.datetime(2019, 12, 31, 23, 59, 59, 999000),
            [4, 5],
            [["x"], ["y", "z"]],
            decimal.Decimal("12345678901234567890.125"),
        )
    ]
    assert collect(env.from_collection(untyped)) == untyped
    arrays = [[7, 8, 9], [10]]
    assert sorted(collect(env.from_collection(arrays, type_info=Types.PRIMITIVE_ARRAY(Types.INT())))) == arrays
    objects = [(["p", None], [0.5, 1.5])]
    object_type = Types.TUPLE([Types.OBJECT_ARRAY(Types.STRING()), Types.OBJECT_ARRAY(Types.DOUBLE())])
    assert collect(env.from_collection(objects, type_info=object_type)) == objects


class Reading:
    """A plain user class travelling between operators."""

    def __init__(self, sensor, count):
        self.sensor = sensor
        self.count = count


def test_user_objects_travel_between_operators():
    env = make_env("local", 2)
    ds = env.from_collection([("s1", 2), ("s2", 0), ("s3", 1)], type_info=ROW_PAIR)
    names = ds.map(lambda r: Reading(r[0], r[1])).flat_map(lambda reading: [reading.sensor] * reading.count)
    assert sorted(collect(names)) == ["s1", "s1", "s3"]


def test_a_failing_function_fails_the_job_with_its_error():
    env = make_env("local", 2)

    def explode(value):
        raise ValueError(f"cannot handle {value[0]}")
        yield value

    stream = env.from_collection([("q", 1)], type_info=ROW_PAIR).key_by(lambda r: r[1]).flat_map(explode)
    with pytest.raises(JobExecutionException) as info:
        collect(stream)
    assert any("cannot handle q" in str(e) for e in cause_chain(info.value))


# -- keyed state, timers and side outputs end to end ------------------------------------------------------
class Column1Timestamp(TimestampAssigner):
    def extract_timestamp(self, value, record_timestamp):
        return int(value[1])


class Remember(KeyedProcessFunction):
    """Reports the key's value, list and map state before adding the record to them."""

    def open(self, runtime_context):
        self.last = runtime_context.get_state(ValueStateDescriptor("last", Types.INT()))
        self.seen = runtime_context.get_list_state(ListStateDescriptor("seen", Types.INT()))
        self.by_id = runtime_context.get_map_state(MapStateDescriptor("by_id", Types.INT(), Types.STRING()))

    def process_element(self, value, ctx):
        before = (ctx.get_current_key(), self.last.value(), list(self.seen.get()), dict(self.by_id.items()))
        self.last.update(value[0])
        self.seen.add(value[0])
        self.by_id.put(value[0], value[2])
        yield f"{before} ts={ctx.timestamp()} value={value}"


def test_a_keyed_process_function_sees_value_list_and_map_state_of_its_key():
    env = make_env("local", 2)
    row = Types.ROW([Types.INT(), Types.STRING(), Types.STRING()])
    data = [(1, "1000", "red"), (2, "2000", "blue"), (3, "3000", "red"), (4, "4000", "red")]
    stamped = env.from_collection(data, type_info=row).assign_timestamps_and_watermarks(
        WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(Column1Timestamp())
    )
    out = stamped.key_by(lambda r: r[2], key_type=Types.STRING()).process(Remember(), output_type=Types.STRING())
    assert sorted(collect(out)) == [
        "('blue', None, [], {}) ts=2000 value=Row(f0=2, f1='2000', f2='blue')",
        "('red', 1, [1], {1: 'red'}) ts=3000 value=Row(f0=3, f1='3000', f2='red')",
        "('red', 3, [1, 3], {1: 'red', 3: 'red'}) ts=4000 value=Row(f0=4, f1='4000', f2='red')",
        "('red', None, [], {}) ts=1000 value=Row(f0=1, f1='1000', f2='red')",
    ]


class IntTimestamp(TimestampAssigner):
    def extract_timestamp(self, value, record_timestamp):
        return value[1]


class CountBothSides(KeyedCoProcessFunction):
    """Counts the key's records of both inputs; the first record of input 1 sets an event-time timer."""

    def open(self, runtime_context):
        self.count = runtime_context.get_state(ValueStateDescriptor("count", Types.INT()))

    def _bump(self, value):
        count = (self.count.value() or 0) + 1
        self.count.update(count)
        return [Row(value[0], count)]

    def process_element1(self, value, ctx):
        ctx.timer_service().register_event_time_timer(5)
        return self._bump(value)

    def process_element2(self, value, ctx):
        return self._bump(value)

    def on_timer(self, timestamp, ctx):
        return [Row("timer:" + ctx.get_current_key(), timestamp)]


def test_a_keyed_co_process_function_counts_per_key_and_fires_event_time_timers():
    env = make_env("local", 1)
    strategy = WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(IntTimestamp())
    left = env.from_collection([("p", 1), ("q", 2)], type_info=ROW_PAIR).assign_timestamps_and_watermarks(strategy)
    right = env.from_collection([("q", 3), ("r", 4)], type_info=ROW_PAIR).assign_timestamps_and_watermarks(strategy)
    out = left.connect(right).key_by(lambda r: r[0], lambda r: r[0]).process(CountBothSides())
    assert sorted(collect(out.map(lambda r: (r[0], r[1])))) == [
        ("p", 1),
        ("q", 1),
        ("q", 2),
        ("r", 1),
        ("timer:p", 5),
        ("timer:q", 5),
    ]


SUMS = OutputTag("sums", Types.INT())


class RunningSum(KeyedProcessFunction):
    def open(self, runtime_context):
        self.total = runtime_context.get_reducing_state(
            ReducingStateDescriptor("total", lambda a, b: a + b, Types.INT())
        )

    def process_element(self, value, ctx):
        yield value[0]
        self.total.add(value[1])
        yield SUMS, self.total.get()


class Tally(KeyedCoProcessFunction):
    def open(self, runtime_context):
        self.seen = runtime_context.get_reducing_state(ReducingStateDescriptor("seen", lambda a, b: a + b, Types.INT()))

    def process_element1(self, value, ctx):
        self.seen.add(1)
        yield ctx.get_current_key(), value[1]
        yield SUMS, self.seen.get()

    def process_element2(self, value, ctx):
        self.seen.add(1)
        yield ctx.get_current_key(), value[0]
        yield SUMS, self.seen.get()


def test_keyed_functions_emit_side_outputs_built_from_their_state():
    env = make_env("local", 2)
    ds = env.from_collection([("u", 2), ("v", 3), ("u", 5), ("v", 7)], type_info=ROW_PAIR)
    main = ds.key_by(lambda r: r[0]).process(RunningSum(), output_type=Types.STRING())
    assert sorted(collect(main.get_side_output(SUMS))) == [2, 3, 7, 10]

    env = make_env("local", 2)
    left = env.from_collection([("u", 1), ("v", 2)], type_info=ROW_PAIR)
    right = env.from_collection([(9, "u")], type_info=Types.ROW([Types.INT(), Types.STRING()]))
    both = left.key_by(lambda r: r[0]).connect(right.key_by(lambda r: r[1])).process(Tally(), output_type=PAIR)
    assert sorted(collect(both.get_side_output(SUMS))) == [1, 1, 2]


class MainAndDouble(ProcessFunction):
    def process_element(self, value, ctx):
        yield value
        yield SUMS, value * 2


def test_one_output_tag_serves_several_operators():
    env = make_env("local", 2)
    first = env.from_collection([1, 2, 3], type_info=Types.INT()).process(MainAndDouble())
    second = first.map(lambda v: v * 10).process(MainAndDouble())
    both = first.get_side_output(SUMS).union(second.get_side_output(SUMS))
    assert sorted(collect(both)) == [2, 4, 6, 20, 40, 60]


class SecondField(KeySelector):
    def get_key(self, value):
        return value[1]


class ConcatWithState(ReduceFunction):
    """Concatenates the names; checks its own keyed state counts the reductions of the key."""

    def open(self, runtime_context):
        self.calls = runtime_context.get_state(ValueStateDescriptor("calls", Types.INT()))

    def reduce(self, a, b):
        calls = (self.calls.value() or 0) + 1
        self.calls.update(calls)
        merged = a[0] + b[0]
        assert len(merged) == calls + 1, (merged, calls)
        return Row(merged, a[1])


@pytest.mark.parametrize(
    "mode, expected",
    [
        (RuntimeExecutionMode.STREAMING, ["+I[m, 0]", "+I[mo, 0]", "+I[n, 1]", "+I[np, 1]", "+I[npq, 1]"]),
        (RuntimeExecutionMode.BATCH, ["+I[mo, 0]", "+I[npq, 1]"]),
    ],
)
def test_a_keyed_reduce_with_state_rolls_in_streaming_and_emits_final_values_in_batch(mode, expected):
    env = make_env("local", 2)
    env.set_runtime_mode(mode)
    ds = env.from_collection([("m", 0), ("n", 1), ("p", 1), ("o", 0), ("q", 1)], type_info=ROW_PAIR)
    out = ds.key_by(SecondField(), key_type=Types.INT()).reduce(ConcatWithState())
    assert sorted(f"+I[{r[0]}, {r[1]}]" for r in collect(out)) == expected


def test_key_by_twice_repartitions_by_the_second_key():
    env = make_env("local", 2)
    ds = env.from_collection([("a", 0), ("b", 0), ("c", 1)], type_info=ROW_PAIR)
    twice = ds.key_by(SecondField()).key_by(lambda r: r[0])
    assert sorted(collect(twice), key=repr) == [
        Row(f0="a", f1=Row(f0="a", f1=0)),
        Row(f0="b", f1=Row(f0="b", f1=0)),
        Row(f0="c", f1=Row(f0="c", f1=1)),
    ]


@pytest.mark.parametrize(
    "mode, expected",
    [
        (RuntimeExecutionMode.STREAMING, [(2, 1), (10, 1), (31, 1), (4, 2), (20, 2)]),
        (RuntimeExecutionMode.BATCH, [(13, 1), (12, 2)]),
    ],
)
def test_rolling_sums_by_name_position_and_default_field(mode, expected):
    env = make_env("local", 1)
    env.set_runtime_mode(mode)
    ds = env.from_collection(
        [(1, 2), (1, 4), (1, 7), (2, 4), (2, 8)], type_info=Types.ROW_NAMED(["k", "v"], [Types.INT(), Types.INT()])
    )
    out = (
        ds.key_by(lambda r: r[0])
        .sum("v")
        .key_by(lambda r: r[0])
        .sum(1)
        .map(lambda r: (r[1], r[0]), output_type=Types.TUPLE([Types.INT(), Types.INT()]))
        .key_by(lambda r: r[1])
        .sum()
    )
    assert collect(out) == expected


def test_min_by_max_min_and_max_by_chain_on_named_rows():
    env = make_env("local", 1)
    ds = env.from_collection(
        [("a", 4, 0), ("a", 2, 1), ("b", 6, 0), ("b", 5, 1)],
        type_info=Types.ROW_NAMED(["k", "v", "w"], [Types.STRING(), Types.INT(), Types.INT()]),
    )
    out = (
        ds.key_by(lambda r: r[0])
        .min_by("v")
        .map(lambda r: (r[0], r[1], r[2]), output_type=Types.TUPLE([Types.STRING(), Types.INT(), Types.INT()]))
        .key_by(lambda r: r[2])
        .max(1)
        .key_by(lambda r: r[2])
        .min()
        .map(lambda r: r[0], output_type=Types.STRING())
        .key_by(lambda v: v)
        .max_by()
    )
    assert collect(out) == ["a", "a", "a", "a"]


class Flagged(FlatMapFunction):
    """Keeps one flag per key in state: emits a key's record only the first time."""

    def open(self, runtime_context):
        self.flag = runtime_context.get_map_state(MapStateDescriptor("flag", Types.STRING(), Types.BOOLEAN()))

    def flat_map(self, value):
        if value[0] not in self.flag:
            self.flag[value[0]] = True
            yield value[0]


def test_keyed_state_in_flat_map_keeps_one_entry_per_key():
    env = make_env("local", 2)
    ds = env.from_collection([("x", 1), ("y", 1), ("x", 2), ("z", 3)], type_info=ROW_PAIR)
    seen = defaultdict(int)
    for name in collect(ds.key_by(lambda r: r[0]).flat_map(Flagged(), output_type=Types.STRING())):
        seen[name] += 1
    assert dict(seen) == {"x": 1, "y": 1, "z": 1}
