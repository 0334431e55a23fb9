"""Stateless operators, process functions, sinks and the factory, driven directly."""

from types import SimpleNamespace

import pytest

from raylink.api.functions import (
    FilterFunction,
    FlatMapFunction,
    MapFunction,
    ProcessFunction,
    SinkFunction,
)
from raylink.operators import MIN_WATERMARK, CollectingOutput, create_operator
from raylink.operators.basic import StreamFilter, StreamFlatMap, StreamMap
from raylink.operators.process import ProcessOperator
from raylink.operators.sinks import CollectSinkOperator, PrintSinkOperator, StreamSink, print_prefix
from raylink.tests.harness import OneInputStreamOperatorTestHarness

pytestmark = pytest.mark.timeout(30)


class Tag:
    """Stand-in for graph.output_tag.OutputTag (duck-typed marker)."""

    _is_output_tag = True

    def __init__(self, tag_id):
        self.tag_id = tag_id
        self.type_info = None


def start(op, **kwargs):
    return OneInputStreamOperatorTestHarness(op, **kwargs).open()


def spec(kind, function=None, params=None, key_selector=None, name="op"):
    return SimpleNamespace(
        kind=kind,
        function=function,
        params=params or {},
        key_selector=key_selector,
        name=name,
        operator_id="id-" + name,
    )


DATA = list(range(10))


@pytest.mark.parametrize(
    "make, expected",
    [
        (lambda: StreamMap(lambda x: x * 3), [x * 3 for x in DATA]),
        (lambda: StreamFlatMap(lambda x: [x] * (x % 3)), [x for x in DATA for _ in range(x % 3)]),
        (lambda: StreamFilter(lambda x: x % 4), [x for x in DATA if x % 4]),
    ],
    ids=["map", "flat_map", "filter"],
)
def test_record_and_batch_paths_agree(make, expected):
    per_record = start(make())
    for v in DATA:
        per_record.process_element(v)
    batched = start(make())
    batched.process_elements(DATA[:4])
    batched.process_elements([])
    batched.process_elements(DATA[4:])
    assert per_record.extract_output_values() == expected
    assert batched.extract_output_values() == expected
    assert batched.output.batches == 2  # empty input/results produce no batch


def test_function_classes_are_resolved_and_opened_once():
    events = []

    class Times(MapFunction):
        def open(self, runtime_context):
            events.append(("open", runtime_context.get_index_of_this_subtask()))
            self.factor = 10

        def map(self, value):
            return value * self.factor

        def close(self):
            events.append(("close",))

    class Split(FlatMapFunction):
        def flat_map(self, value):
            yield from value.split()

    class Long(FilterFunction):
        def filter(self, value):
            return len(value) > 2

    harness = start(StreamMap(Times()), subtask_index=1, parallelism=2)
    harness.process_elements([1, 2])
    harness.process_element(3)
    harness.close()
    harness.close()
    assert harness.extract_output_values() == [10, 20, 30]
    assert events == [("open", 1), ("close",)]

    harness = start(StreamFlatMap(Split()))
    harness.process_element("a bb ccc")
    harness.process_elements(["dd e", ""])
    assert harness.extract_output_values() == ["a", "bb", "ccc", "dd", "e"]

    harness = start(StreamFilter(Long()))
    harness.process_elements(["a", "abc", "abcd"])
    harness.process_element("xyz")
    assert harness.extract_output_values() == ["abc", "abcd", "xyz"]


def test_bad_function_names_the_operator():
    op = StreamMap(42, name="my map")
    with pytest.raises(TypeError, match="my map"):
        start(op)


@pytest.mark.parametrize(
    "make, kept",
    [(lambda: StreamMap(lambda x: x * 3), DATA), (lambda: StreamFilter(lambda x: x % 4), [x for x in DATA if x % 4])],
    ids=["map", "filter"],
)
def test_a_run_of_records_with_their_own_timestamps_keeps_each_records_timestamp(make, kept):
    """A run from a chained timestamp assigner (``process_timestamped_batch``): the same results
    as record by record, each with its input record's timestamp."""
    per_record, batched = start(make()), start(make())
    for v in DATA:
        per_record.process_element(v, timestamp=100 + v)
    batched.process_timestamped([(v, 100 + v) for v in DATA])
    batched.process_timestamped([(v, 7) for v in (0, 4, 8)] if 0 not in kept else [])
    assert batched.extract_output_with_timestamps() == per_record.extract_output_with_timestamps()
    values = per_record.extract_output_values()
    assert [t for _, t in batched.extract_output_with_timestamps()] == [100 + DATA[v] for v in kept] != []
    assert len(values) == len(kept)


def test_a_flat_map_over_a_timestamped_run_gives_every_result_its_records_timestamp():
    """None, one or two results per record: each result carries its own input's timestamp, as
    record by record."""
    make = lambda: StreamFlatMap(lambda x: [(x, i) for i in range(x % 3)])  # noqa: E731
    per_record, batched = start(make()), start(make())
    for v in DATA:
        per_record.process_element(v, timestamp=100 + v)
    batched.process_timestamped([(v, 100 + v) for v in DATA])
    expected = [((x, i), 100 + x) for x in DATA for i in range(x % 3)]
    assert batched.extract_output_with_timestamps() == per_record.extract_output_with_timestamps() == expected


class _WithTimestamp(ProcessFunction):
    def process_element(self, value, ctx):
        yield value, ctx.timestamp()


def test_a_timestamped_stream_read_by_two_chained_operators_reaches_each_whole():
    """The timestamp assigner's runs go to a chained filter and a chained map, each as a batch of
    its own: every record reaches both with its timestamp (a filter dropping records from its
    batch takes nothing from the map's)."""
    from raylink.api import WatermarkStrategy
    from raylink.tests.runtime_jobs import make_env

    env = make_env("local", 1)
    data = list(range(1, 2001))
    stream = env.from_collection(data).assign_timestamps_and_watermarks(
        WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(lambda v, _: 1000 + v)
    )
    odd, negated = stream.filter(lambda v: v % 2 == 1), stream.map(lambda v: -v)
    got = sorted(odd.union(negated).process(_WithTimestamp()).execute_and_collect())
    expected = sorted([(v, 1000 + v) for v in data if v % 2 == 1] + [(-v, 1000 + v) for v in data])
    assert got == expected


def test_watermarks_and_latency_markers_are_forwarded_and_timestamps_untouched():
    op = StreamMap(lambda x: x + 1)
    harness = start(op)
    out = harness.output
    harness.process_element(1, timestamp=5)
    harness.process_elements([2, 3], timestamp=5)
    harness.process_element(4)
    harness.process_watermark(7)
    op.process_latency_marker("marker")
    assert out.records == [2, 3, 4, 5]
    assert out.timestamps == [5, 5, 5, None]
    assert out.watermarks == [7]
    assert out.latency_markers == ["marker"]
    assert op.current_watermark == 7


def test_process_function_side_outputs_and_timestamps():
    late = Tag("late")
    errors = Tag("errors")

    class Router(ProcessFunction):
        def process_element(self, value, ctx):
            ts = ctx.timestamp()
            if value < 0:
                yield errors, (value, ts)
            elif ts is not None and ts < 100:
                yield late, value
            else:
                yield value, ts  # a plain 2-tuple stays on the main output
            if value == 0:
                ctx.output(late, "zero")

    harness = start(ProcessOperator(Router()))
    out = harness.output
    harness.process_element(1, timestamp=50)
    harness.process_element(2, timestamp=200)
    harness.process_elements([3, -1, 0], timestamp=200)
    harness.process_element(4)
    assert out.records == [(2, 200), (3, 200), (0, 200), (4, None)]
    assert out.side_outputs == {"late": [1, "zero"], "errors": [(-1, 200)]}
    assert out.timestamps == [200, 200, 200, None]
    # the same records as one run with a timestamp each: the same outputs
    run = start(ProcessOperator(Router()))
    run.process_timestamped([(1, 50), (2, 200), (3, 200), (-1, 200), (0, 200)])
    assert run.extract_output_with_timestamps() == [((2, 200), 200), ((3, 200), 200), ((0, 200), 200)]
    assert run.output.side_outputs == {"late": [1, "zero"], "errors": [(-1, 200)]}


def test_process_plain_callable_returning_list_or_none():
    harness = start(ProcessOperator(lambda v, ctx: [v, v] if v % 2 else None))
    harness.process_elements([1, 2, 3])
    harness.process_element(5)
    assert harness.extract_output_values() == [1, 1, 3, 3, 5, 5]


def test_process_errors_name_the_operator():
    class NoTagId:
        _is_output_tag = True

    op = ProcessOperator(lambda v, ctx: [(NoTagId(), v)], name="router")
    start(op)
    with pytest.raises(ValueError, match="router"):
        op.process_element(1)

    op = ProcessOperator(lambda v, ctx: 42, name="bad return")
    start(op)
    with pytest.raises(TypeError, match="bad return"):
        op.process_element(1)


def test_non_keyed_process_has_clocks_but_no_timers():
    seen = []

    def fn(value, ctx):
        ts = ctx.timer_service()
        seen.append((ts.current_processing_time(), ts.current_watermark()))
        ts.register_event_time_timer(10)

    op = ProcessOperator(fn)
    start(op)
    with pytest.raises(RuntimeError, match="keyed streams"):
        op.process_element(1)
    assert seen == [(0, MIN_WATERMARK)]


def test_user_exceptions_propagate_unwrapped():
    def boom(v):
        raise ZeroDivisionError("boom")

    op = StreamMap(boom)
    start(op)
    with pytest.raises(ZeroDivisionError, match="boom"):
        op.process_batch([1])


def test_sink_callable_and_sink_function_with_context():
    got = []
    op = StreamSink(got.append)
    out = start(op).output
    op.process_element(1)
    op.process_batch([2, 3])
    op.process_latency_marker("m")
    assert got == [1, 2, 3]
    assert out.records == [] and out.latency_markers == []
    assert op.last_latency_marker == "m"

    calls = []

    class Recorder(SinkFunction):
        def invoke(self, value, context):
            calls.append((value, context.timestamp(), context.current_watermark(), context.current_processing_time()))

    harness = start(StreamSink(Recorder()))
    harness.set_processing_time(1000)
    harness.process_element("a", timestamp=9)
    harness.process_watermark(8)
    harness.process_elements(["b", "c"], timestamp=9)
    assert calls == [("a", 9, MIN_WATERMARK, 1000), ("b", 9, 8, 1000), ("c", 9, 8, 1000)]
    harness.process_timestamped([("d", 4), ("e", 5)])  # each record's own timestamp ...
    assert harness.record_context.timestamp == 9  # ... and the context's back after the run
    harness.process_element("f", timestamp=6)
    assert calls[3:] == [("d", 4, 8, 1000), ("e", 5, 8, 1000), ("f", 6, 8, 1000)]

    got.clear()
    start(op).process_timestamped([(4, 10), (5, 11)])  # a plain callable gets the values
    assert got == [4, 5]


@pytest.mark.parametrize(
    "prefix, parallelism, subtask, expected",
    [
        (None, 1, 0, ""),
        ("", 1, 0, ""),
        ("out", 1, 0, "out> "),
        (None, 3, 1, "2> "),
        ("out", 3, 2, "out:3> "),
    ],
)
def test_print_prefix(prefix, parallelism, subtask, expected):
    assert print_prefix(prefix, subtask, parallelism) == expected


def test_print_sink_output_format(capsys):
    op = PrintSinkOperator("sensor")
    start(op, subtask_index=1, parallelism=2)
    op.process_element(("a", 1))
    op.process_batch([1, "x"])
    op.close()
    op2 = PrintSinkOperator(None)
    start(op2)
    op2.process_element({"k": 1})
    op2.process_batch([2.5])
    op3 = PrintSinkOperator(None, to_stderr=True)
    start(op3, subtask_index=0, parallelism=4)
    op3.process_element("err")
    captured = capsys.readouterr()
    assert captured.out == "sensor:2> ('a', 1)\nsensor:2> 1\nsensor:2> x\n{'k': 1}\n2.5\n"
    assert captured.err == "1> err\n"


def test_collect_sink_appends_to_accumulator():
    op = CollectSinkOperator("c1")
    rc = start(op).runtime_context
    op.process_element(1)
    op.process_batch([2, 3])
    op2 = CollectSinkOperator("c1")
    op2.setup(CollectingOutput(), rc.derive("other"))
    op2.open()
    op2.process_element(4)
    assert rc.accumulators == {"c1": [1, 2, 3, 4]}


class _ConnectorSource:
    """A connector object as the Spark bridge passes it: it builds its own operator."""

    def create_operator(self, spec):
        from raylink.operators.sources import CollectionSourceOperator

        return CollectionSourceOperator([1])


class _ConnectorSink:
    def create_operator(self, spec):
        from raylink.operators.sinks import StreamSink

        return StreamSink(print)


def _watermark_strategy():
    from raylink.api.watermark_strategy import WatermarkStrategy

    return WatermarkStrategy.for_monotonous_timestamps()


def _window_descriptor():
    from raylink.api.window import GlobalWindows, NeverTrigger
    from raylink.operators.window import WindowOperatorDescriptor

    return WindowOperatorDescriptor(GlobalWindows(), NeverTrigger(), None, 0, None, "reducing", reduce_function=max)


def _file_sink():
    from raylink.api.connectors.file_system import Encoder, FileSink

    return FileSink.for_row_format("memory://factory-test", Encoder.simple_string_encoder()).build()


def _rules():
    from raylink.api.state import MapStateDescriptor

    return MapStateDescriptor("rules")


def _async_function():
    from raylink.api.functions import AsyncFunction

    class Echo(AsyncFunction):
        async def async_invoke(self, value):
            return [value]

    return Echo()


def test_factory_builds_every_kind_with_name_and_id():
    kinds = {
        "source_collection": spec("source_collection", params={"elements": [1]}),
        "source_sequence": spec("source_sequence", params={"start": 1, "end": 2}),
        "source_function": spec("source_function", function=[1, 2]),
        "map": spec("map", str),
        "flat_map": spec("flat_map", list),
        "filter": spec("filter", bool),
        "map_batches": spec("map_batches", str, params={"batch_format": "pandas"}),
        "process": spec("process", lambda v, c: None),
        "keyed_process": spec("keyed_process", lambda v, c: None, key_selector=lambda v: v),
        "reduce": spec("reduce", lambda a, b: a, key_selector=lambda v: v),
        "aggregate": spec("aggregate", params={"agg": "sum", "field": 1}, key_selector=lambda v: v),
        "co_map": spec("co_map", (str, str)),
        "co_flat_map": spec("co_flat_map", (list, list)),
        "co_process": spec("co_process", (print, print)),
        "keyed_co_process": spec(
            "keyed_co_process", (print, print), params={"key_selector1": str, "key_selector2": str}
        ),
        "timestamps": spec("timestamps", _watermark_strategy()),
        "async_wait": spec("async_wait", _async_function(), params={"timeout_ms": 10, "capacity": 3}),
        "co_broadcast_process": spec(
            "co_broadcast_process", (print, print), params={"broadcast_state_descriptors": [_rules()]}
        ),
        "keyed_co_broadcast_process": spec(
            "keyed_co_broadcast_process",
            (print, print),
            params={"broadcast_state_descriptors": [_rules()]},
            key_selector=lambda v: v,
        ),
        "window": spec("window", _window_descriptor(), key_selector=lambda v: v),
        "sink": spec("sink", print),
        "print": spec("print", params={"prefix": "p"}),
        "collect": spec("collect", params={"collect_id": "x"}),
        "sink_v2": spec("sink_v2", params={"sink": _file_sink()}),
        "source_connector": spec("source_connector", _ConnectorSource()),
        "sink_connector": spec("sink_connector", _ConnectorSink()),
    }
    from raylink.operators import OPERATOR_KINDS, chaining_strategy_for_kind

    assert set(kinds) == set(OPERATOR_KINDS)
    for kind, s in kinds.items():
        s.name = f"{kind} op"
        op = create_operator(s)
        assert op.name == f"{kind} op"
        assert op.operator_id == "id-op"
        expected = "HEAD" if kind.startswith("source") else "ALWAYS"
        assert op.chaining_strategy == expected == chaining_strategy_for_kind(kind)
        assert op.num_inputs == (0 if kind.startswith("source") else 2 if kind.startswith(("co_", "keyed_co")) else 1)
    with pytest.raises(ValueError, match="unknown operator kind 'nope'"):
        create_operator(spec("nope"))
    with pytest.raises(ValueError, match="params\\['collect_id'\\]"):
        create_operator(spec("collect"))


def test_factory_operators_run_end_to_end():
    m = create_operator(spec("map", lambda x: x + 1))
    f = create_operator(spec("filter", lambda x: x % 2 == 0))
    harness = start(f)
    out, rc = harness.output, harness.runtime_context
    m.setup(  # chained in front of f: f's input is m's output
        SimpleNamespace(collect=f.process_element, collect_batch=f.process_batch, collect_side=None), rc.derive("m")
    )
    m.open()
    m.process_batch([1, 2, 3])
    m.process_element(5)
    assert out.records == [2, 4, 6]
