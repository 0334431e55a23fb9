"""Event time: Duration/Time, WatermarkStrategy generators, TimestampsAndWatermarksOperator
(periodic emission through the processing-time service, end of input), and watermarks
through the runtime."""

from datetime import timedelta

import pytest

from raylink.api import (
    CoProcessFunction,
    Duration,
    ProcessFunction,
    StreamExecutionEnvironment,
    Time,
    TimestampAssigner,
    WatermarkGenerator,
    WatermarkStrategy,
)
from raylink.api.configuration import Configuration
from raylink.api.functions import SourceFunction
from raylink.api.time import parse_duration_ms, to_millis
from raylink.api.watermark_strategy import WatermarksWithIdleness
from raylink.operators.base import MAX_WATERMARK, MIN_WATERMARK
from raylink.operators.timestamps import TimestampsAndWatermarksOperator
from raylink.tests.harness import OneInputStreamOperatorTestHarness
from raylink.tests.runtime_jobs import make_env, reset_signal, signal

pytestmark = pytest.mark.timeout(60)


# -- Duration / Time ---------------------------------------------------------------------------------
def test_duration_and_time_units():
    assert Duration.of_seconds(5).to_milliseconds() == 5000
    assert Duration.of_minutes(2).to_millis() == 120_000
    assert Duration.of_hours(1).to_millis() == 3_600_000
    assert Duration.of_days(1).to_millis() == 86_400_000
    assert Duration.of_nanos(1_500_000).to_millis() == 1
    assert Duration.of_millis(7) == Duration.of_nanos(7_000_000)
    assert Time.seconds(3).to_milliseconds() == 3000
    assert Time.minutes(1) == Time.milliseconds(60_000)
    assert Time.hours(2).to_milliseconds() == 7_200_000 and Time.days(1).to_milliseconds() == 86_400_000
    assert to_millis(timedelta(seconds=2)) == 2000 and to_millis(42) == 42
    with pytest.raises(TypeError, match="allowed_lateness must be a Time"):
        to_millis("5", "allowed_lateness")
    assert parse_duration_ms("200 ms") == 200 and parse_duration_ms("2 s") == 2000 and parse_duration_ms(50) == 50
    with pytest.raises(ValueError, match="'pipeline.auto-watermark-interval': 'soon' is not a duration"):
        parse_duration_ms("soon", "pipeline.auto-watermark-interval")


# -- generators --------------------------------------------------------------------------------------
class _Out:
    def __init__(self):
        self.watermarks = []
        self.idle = []

    def emit_watermark(self, wm):
        self.watermarks.append(wm)

    def mark_idle(self):
        self.idle.append(True)

    def mark_active(self):
        self.idle.append(False)


def test_bounded_out_of_orderness_generator():
    gen = WatermarkStrategy.for_bounded_out_of_orderness(Duration.of_millis(10)).create_watermark_generator()
    out = _Out()
    gen.on_periodic_emit(out)
    assert out.watermarks == [MIN_WATERMARK]  # nothing seen yet: no underflow
    gen.on_event("x", 100, out)
    gen.on_event("y", 90, out)  # out of order: the maximum stays
    gen.on_periodic_emit(out)
    gen.on_timestamps(["a", "b"], [130, 95], out)
    gen.on_periodic_emit(out)
    assert out.watermarks == [MIN_WATERMARK, 89, 119]
    mono = WatermarkStrategy.for_monotonous_timestamps().create_watermark_generator()
    mono.on_event("x", 50, out)
    mono.on_periodic_emit(out)
    assert out.watermarks[-1] == 49
    with pytest.raises(ValueError, match="cannot be negative"):
        WatermarkStrategy.for_bounded_out_of_orderness(Duration.of_millis(-1))


def test_idleness_marks_idle_after_the_timeout_without_records():
    now = [0]
    strategy = WatermarkStrategy.for_monotonous_timestamps().with_idleness(Duration.of_millis(100))
    gen = strategy.create_watermark_generator(clock=lambda: now[0])
    assert isinstance(gen, WatermarksWithIdleness)
    out = _Out()
    gen.on_event("x", 10, out)
    gen.on_periodic_emit(out)  # activity since the last check
    now[0] = 50
    gen.on_periodic_emit(out)  # first check without activity starts the inactivity period
    now[0] = 151
    gen.on_periodic_emit(out)  # 101 ms inactive > 100: idle, no watermark
    assert out.watermarks == [9, 9] and out.idle == [True]
    gen.on_timestamps(["y"], [20], out)
    gen.on_periodic_emit(out)
    assert out.watermarks[-1] == 19 and gen.idle is False


def test_strategy_configures_itself_like_pyflink_and_rejects_bad_arguments():
    strategy = WatermarkStrategy.for_monotonous_timestamps()
    assert strategy.with_timestamp_assigner(lambda v: v[1]) is strategy  # PyFlink returns the same object
    assert strategy.create_timestamp_assigner().extract_timestamp(("a", 7), MIN_WATERMARK) == 7
    with pytest.raises(TypeError, match="with_timestamp_assigner: expected a TimestampAssigner"):
        strategy.with_timestamp_assigner(5)
    with pytest.raises(ValueError, match="idle_timeout must be positive"):
        strategy.with_idleness(Duration.of_millis(0))
    with pytest.raises(NotImplementedError, match="with_watermark_alignment is not supported"):
        strategy.with_watermark_alignment("g", Duration.of_seconds(1))
    assert not WatermarkStrategy.no_watermarks().emits_watermarks()


# -- the operator ------------------------------------------------------------------------------------
def start_operator(strategy, interval=None):
    params = {} if interval is None else {"pipeline.auto-watermark-interval": interval}
    harness = OneInputStreamOperatorTestHarness(
        TimestampsAndWatermarksOperator(strategy),
        task_name="",
        operator_name="",
        processing_time=1000,
        job_parameters=params,
    )
    return harness.open()


class ByField(TimestampAssigner):
    def extract_timestamp(self, value, record_timestamp):
        return value[1]


def test_operator_assigns_timestamps_and_emits_periodically_on_the_clock():
    strategy = WatermarkStrategy.for_bounded_out_of_orderness(Duration.of_millis(5)).with_timestamp_assigner(ByField())
    harness = start_operator(strategy)
    out = harness.output
    assert harness.operator.watermark_interval == 200
    harness.process_elements([("a", 100), ("b", 90)])
    harness.process_element(("c", 120), timestamp=7)
    assert harness.record_context.timestamp == 7  # restored
    harness.process_timestamped([(("d", 110), 3)])
    assert out.records == [("a", 100), ("b", 90), ("c", 120), ("d", 110)]
    assert out.timestamps == [100, 90, 120, 110]
    assert out.watermarks == []  # only periodically
    harness.advance_processing_time(199)
    assert out.watermarks == []
    harness.advance_processing_time(1)
    assert out.watermarks == [114]
    harness.advance_processing_time(200)  # no progress: nothing emitted
    assert out.watermarks == [114]
    harness.process_element(("e", 200), timestamp=7)
    harness.advance_processing_time(200)
    assert out.watermarks == [114, 194]
    harness.process_watermark(500)  # upstream watermarks are swallowed ...
    assert out.watermarks == [114, 194]
    harness.process_watermark(MAX_WATERMARK)  # ... except the end of input
    assert out.watermarks == [114, 194, MAX_WATERMARK]
    harness.end_input()
    harness.close()
    assert harness.processing_time_service.num_pending() == 0


class ByFieldInTwoSteps(TimestampAssigner):
    """ByField's result, in a body that is not only a field read (so not rewritten)."""

    def extract_timestamp(self, value, record_timestamp):
        ts = value[1]
        return ts


def _assigned(assigner, batches):
    """What the operator emits for ``batches`` (plain, then carrying timestamps), or the error."""
    harness = start_operator(WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(assigner))
    try:
        for batch in batches:
            harness.process_elements(batch)
            harness.process_timestamped([(value, 1) for value in batch])
    except Exception as e:  # noqa: BLE001 - the same error is the point
        return ("raised", type(e), str(e))
    return ("ok", harness.output.records, harness.output.timestamps)


@pytest.mark.parametrize(
    "batches",
    [
        [[("a", 100), ("b", 90)], [("c", 120)]],
        [[("a", 100), ("b", 1.5)]],  # not an int: the record is named
        [[("a", 100), ("b",)]],  # no such field
        [[{"x": 1}]],  # not indexable by 1
    ],
    ids=["ints", "float", "short", "dict"],
)
def test_an_assigner_that_reads_a_field_runs_as_its_itemgetter_with_the_same_outcome(batches):
    import operator

    harness = start_operator(WatermarkStrategy.no_watermarks().with_timestamp_assigner(ByField()))
    assert isinstance(harness.operator._field, operator.itemgetter)
    slow = start_operator(WatermarkStrategy.no_watermarks().with_timestamp_assigner(ByFieldInTwoSteps()))
    assert slow.operator._field is None
    assert _assigned(ByField(), batches) == _assigned(ByFieldInTwoSteps(), batches)


def test_operator_keeps_record_timestamps_without_an_assigner_and_final_emit_at_end_of_input():
    harness = start_operator(WatermarkStrategy.for_monotonous_timestamps(), interval="0 ms")
    assert harness.processing_time_service.num_pending() == 0  # interval 0: no periodic emission
    harness.process_elements(["x", "y"], timestamp=40)
    harness.process_timestamped([("z", 60)])
    assert harness.output.timestamps == [40, 40, 60]
    harness.end_input()  # Flink's finish(): one last periodic emit
    assert harness.output.watermarks == [59]


def test_operator_rejects_non_int_timestamps_naming_the_record():
    harness = start_operator(
        WatermarkStrategy.no_watermarks().with_timestamp_assigner(lambda v: v // 2 if v % 2 == 0 else v / 2)
    )
    with pytest.raises(TypeError, match=r"returned 1.5 \(float\) for record 3; timestamps must be int"):
        harness.process_elements([2, 3])


def test_custom_generator_for_punctuated_watermarks():
    class EveryMarker(WatermarkGenerator):
        def on_event(self, event, event_timestamp, output):
            if event == "mark":
                output.emit_watermark(event_timestamp)

        def on_periodic_emit(self, output):
            pass

    strategy = WatermarkStrategy.for_generator(EveryMarker).with_timestamp_assigner(lambda v, ts: ts)
    harness = start_operator(strategy)
    harness.process_timestamped([("a", 5), ("mark", 10), ("b", 12), ("mark", 9), ("mark", 20)])
    assert harness.output.watermarks == [10, 20]  # 9 does not advance


# -- through the runtime -----------------------------------------------------------------------------
def test_get_config_sets_the_auto_watermark_interval_option():
    env = StreamExecutionEnvironment(Configuration().set_string("execution.target", "local"))
    assert env.get_config().get_auto_watermark_interval() == 200
    assert env.get_config().set_auto_watermark_interval(25).get_auto_watermark_interval() == 25
    assert env.configuration.get_string("pipeline.auto-watermark-interval") == "25 ms"
    assert env.get_config().get_string("execution.target") == "local"  # still the Configuration
    with pytest.raises(ValueError, match="must not be negative"):
        env.get_config().set_auto_watermark_interval(-1)


class _TickingSource(SourceFunction):
    """Emits timestamped records, then one record every 10 ms until downstream saw a
    periodic watermark covering them (bounded: at most ~20 s)."""

    def __init__(self, name):
        self.name = name

    def run(self, ctx):
        for i in range(10):
            ctx.collect_with_timestamp(i, 1000 + i)
        for _ in range(2000):
            if signal(self.name).wait(0.01):
                return
            ctx.collect_with_timestamp(-1, 1000)


class _SeesWatermark(ProcessFunction):
    def __init__(self, name):
        self.name = name

    def process_element(self, value, ctx):
        wm = ctx.timer_service().current_watermark()
        if wm >= 1008:
            signal(self.name).set()
        yield value, wm


def test_periodic_watermarks_flow_through_the_runtime_before_end_of_input():
    name = "test_watermarks.periodic"
    reset_signal(name)
    env = make_env("local", 1)
    env.get_config().set_auto_watermark_interval(10)
    rows = list(
        env.add_source(_TickingSource(name))
        .assign_timestamps_and_watermarks(WatermarkStrategy.for_monotonous_timestamps())
        .process(_SeesWatermark(name))
        .execute_and_collect()
    )
    assert signal(name).is_set()  # a periodic watermark, not the end-of-input one, released the source
    assert max(wm for _v, wm in rows) == 1008
    assert [v for v, _wm in rows[:10]] == list(range(10))


class _OneIdleSubtask(SourceFunction):
    """Subtask 0 emits timestamped events; subtask 1 emits nothing. Both then wait (bounded)
    for the window result: only idleness lets the watermark pass the idle subtask."""

    def __init__(self, name):
        self.name = name

    def run(self, ctx):
        if ctx.get_runtime_context().get_index_of_this_subtask() == 0:
            for ts in (1, 2, 12, 40):
                ctx.collect(("k", ts))
        if signal(self.name).wait(20):
            signal(self.name + ".released").set()


class _SignalsOutput(ProcessFunction):
    def __init__(self, name):
        self.name = name

    def process_element(self, value, ctx):
        signal(self.name).set()
        yield value


def test_an_idle_source_subtask_does_not_stall_event_time_windows():
    from raylink.api import TumblingEventTimeWindows

    name = "test_watermarks.idle"
    reset_signal(name)
    reset_signal(name + ".released")
    env = make_env("local", 1)
    env.get_config().set_auto_watermark_interval(10)
    strategy = (
        WatermarkStrategy.for_monotonous_timestamps()
        .with_timestamp_assigner(lambda v, ts: v[1])
        .with_idleness(Duration.of_millis(30))
    )
    rows = list(
        env.add_source(_OneIdleSubtask(name))
        .set_parallelism(2)
        .assign_timestamps_and_watermarks(strategy)
        .key_by(lambda v: v[0])
        .window(TumblingEventTimeWindows.of(Time.milliseconds(10)))
        .reduce(lambda a, b: (a[0], a[1] + b[1]))
        .process(_SignalsOutput(name))
        .execute_and_collect()
    )
    assert signal(name + ".released").is_set()  # a window fired while both source subtasks ran
    assert rows == [("k", 3), ("k", 12), ("k", 40)]


def test_watermark_gauges_of_the_operator_move():
    strategy = WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(ByField())
    harness = start_operator(strategy)
    gauges = harness.runtime_context.get_metrics_group().gauges
    assert gauges["currentOutputWatermark"]() == MIN_WATERMARK
    harness.process_elements([("a", 50)])
    harness.advance_processing_time(200)
    harness.process_watermark(7)  # upstream: seen, not forwarded
    assert gauges["currentOutputWatermark"]() == 49
    assert gauges["currentInputWatermark"]() == 7


class _StampedSource(SourceFunction):
    """Emits ``(tag, ts)`` records, each followed by the watermark ``ts`` (punctuated), once
    ``start_after`` is signalled (if given); with ``hold_after`` it then waits for that signal
    before its last record."""

    def __init__(self, tag, stamps, start_after=None, hold_after=None):
        self.tag, self.stamps, self.start_after, self.hold_after = tag, stamps, start_after, hold_after

    def run(self, ctx):
        if self.start_after and not signal(self.start_after).wait(20):
            raise TimeoutError(f"{self.start_after} was never signalled")
        *first, last = self.stamps
        for ts in first:
            ctx.collect_with_timestamp((self.tag, ts), ts)
            ctx.emit_watermark(ts)
        if self.hold_after and not signal(self.hold_after).wait(20):
            raise TimeoutError(f"{self.hold_after} was never signalled")
        ctx.collect_with_timestamp((self.tag, last), last)
        ctx.emit_watermark(last)


def _seen(name, value, ctx):
    """(value, the operator's watermark when it arrived); signals ``name.<tag><ts>``."""
    signal(f"{name}.{value[0]}{value[1]}").set()
    return value, ctx.timer_service().current_watermark()


class _UnionSees(ProcessFunction):
    def __init__(self, name):
        self.name = name

    def process_element(self, value, ctx):
        yield _seen(self.name, value, ctx)


class _BothSee(CoProcessFunction):
    def __init__(self, name):
        self.name = name

    def process_element1(self, value, ctx):
        yield _seen(self.name, value, ctx)

    def process_element2(self, value, ctx):
        yield _seen(self.name, value, ctx)


@pytest.mark.parametrize("shape", ["union", "connect"])
def test_the_watermark_of_a_union_or_a_two_input_operator_is_the_minimum_of_its_inputs(shape):
    """B holds at watermark 10 until the operator has seen A's last record: every record of A
    arrives at a watermark <= 10 (B's, or none yet), never at A's own (up to 49)."""
    name = f"test_watermarks.minimum.{shape}"
    for suffix in ("b10", "a50"):
        reset_signal(f"{name}.{suffix}")
    env = make_env("local", 1)
    slow = env.add_source(_StampedSource("b", [10, 60], hold_after=f"{name}.a50"))
    fast = env.add_source(_StampedSource("a", list(range(1, 51)), start_after=f"{name}.b10"))
    if shape == "union":
        rows = list(fast.union(slow).process(_UnionSees(name)).execute_and_collect())
    else:
        rows = list(fast.connect(slow).process(_BothSee(name)).execute_and_collect())
    seen = dict(rows)
    assert len(seen) == 52
    assert all(seen[("a", ts)] <= 10 for ts in range(1, 51))  # not A's own (ts - 1), not the latest input's
    assert seen[("a", 50)] in (MIN_WATERMARK, 10)
    assert seen[("b", 60)] <= 10  # B's records come before B's own watermark
