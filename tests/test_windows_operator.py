"""The window operator in one process: Flink's WindowOperator / EvictingWindowOperator
semantics (firing, output timestamps, lateness, merging, triggers, evictors, state)."""

import pickle
import random

import pytest

from raylink.api import (
    AggregateFunction,
    AllWindowFunction,
    ContinuousEventTimeTrigger,
    CountEvictor,
    CountTrigger,
    EventTimeSessionWindows,
    EventTimeTrigger,
    GlobalWindow,
    GlobalWindows,
    OutputTag,
    ProcessAllWindowFunction,
    ProcessingTimeSessionWindows,
    ProcessWindowFunction,
    PurgingTrigger,
    SlidingEventTimeWindows,
    StreamExecutionEnvironment,
    Time,
    TimeEvictor,
    TimeWindow,
    TumblingEventTimeWindows,
    TumblingProcessingTimeWindows,
    ValueStateDescriptor,
    WindowFunction,
)
from raylink.api.configuration import Configuration
from raylink.api.window import DynamicEventTimeSessionWindows, NeverTrigger
from raylink.core.functions import NullByteKeySelector
from raylink.core.key_groups import assign_to_key_group
from raylink.operators import ManualProcessingTimeService
from raylink.operators.base import MAX_WATERMARK
from raylink.operators.window import (
    CONTENTS_STATE,
    MERGING_SET_STATE,
    MergingWindowSet,
    WindowOperatorDescriptor,
    create_window_operator,
)
from raylink.operators.window_sessions import process_sessions_pure
from raylink.tests.harness import KeyedOneInputStreamOperatorTestHarness

pytestmark = pytest.mark.timeout(60)


def first(v):
    return v[0]


def add_values(a, b):
    return (a[0], a[1] + b[1])


class SumAgg(AggregateFunction):
    def create_accumulator(self):
        return 0

    def add(self, value, acc):
        return acc + value[1]

    def get_result(self, acc):
        return acc

    def merge(self, a, b):
        return a + b


def start(
    assigner,
    contents="reducing",
    trigger=None,
    evictor=None,
    lateness=0,
    tag=None,
    kind="pass",
    fn=None,
    reduce=add_values,
    agg=None,
    key=first,
    clock=None,
    backend_snapshot=None,
):
    desc = WindowOperatorDescriptor(
        assigner=assigner,
        trigger=trigger or assigner.get_default_trigger(),
        evictor=evictor,
        allowed_lateness=lateness,
        late_data_output_tag=tag,
        contents=contents,
        reduce_function=reduce if contents == "reducing" else None,
        aggregate_function=agg if contents == "aggregating" else None,
        window_function=fn,
        function_kind=kind,
    )
    harness = KeyedOneInputStreamOperatorTestHarness(
        create_window_operator(desc, key), task_name="", operator_name="", processing_time_service=clock
    ).setup()
    if backend_snapshot is not None:
        harness.keyed_state_backend.restore(backend_snapshot)
    harness.open()
    return harness.operator, harness.output


def feed(op, elements):
    """``elements``: ``(value, timestamp)`` pairs, one network run."""
    op.process_timestamped_batch([v for v, _ in elements], [t for _, t in elements])


def rows(out):
    """(record, timestamp) pairs by timestamp, then record."""
    return sorted(zip(out.records, out.timestamps), key=lambda r: (r[1], repr(r[0])))


# -- firing, output timestamps, cleanup ---------------------------------------------------------------
def test_tumbling_reduce_fires_at_the_watermark_with_the_window_max_timestamp():
    op, out = start(TumblingEventTimeWindows.of(Time.seconds(5)))
    feed(op, [(("a", 1), 1000), (("b", 2), 1500), (("a", 3), 4999), (("a", 4), 5000)])
    assert op.timer_service.num_event_time_timers() == 3
    op.process_watermark(4998)
    assert out.records == [] and out.watermarks == [4998]
    op.process_watermark(4999)
    assert rows(out) == [(("a", 4), 4999), (("b", 2), 4999)]
    assert out.watermarks == [4998, 4999]
    op.process_watermark(MAX_WATERMARK)
    assert out.records[-1] == ("a", 4) and out.timestamps[-1] == 9999
    assert op.keyed_state_backend.get_namespaced_table(CONTENTS_STATE, "reducing").values == {}
    assert op.timer_service.num_event_time_timers() == 0


class _SlowEventTimeTrigger(EventTimeTrigger):
    """Behaves as EventTimeTrigger but is not it: forces the general (per-window trigger) path."""


@pytest.mark.parametrize(
    "assigner",
    [
        TumblingEventTimeWindows.of(Time.milliseconds(10), Time.milliseconds(3)),
        SlidingEventTimeWindows.of(Time.milliseconds(10), Time.milliseconds(4)),
    ],
)
@pytest.mark.parametrize("contents", ["reducing", "aggregating", "list"])
@pytest.mark.parametrize("lateness", [0, 7])
@pytest.mark.parametrize("order", ["random", "ascending"])
def test_fast_path_and_general_path_agree(assigner, contents, lateness, order):
    rnd = random.Random(7)
    events = []
    for i in range(300):
        events.append(((rnd.choice("abc"), rnd.randint(1, 9)), rnd.randint(-20, 100)))
    watermarks = sorted(rnd.sample(range(-30, 110), 12))
    if order == "ascending":  # 4 ms per run of 25: most runs fall in one window (the one-pane loop)
        events = [(value, i // 6 - 20) for i, (value, _) in enumerate(events)]
        watermarks = [ts - 2 for _, ts in events[24::25]]
    kind = "window" if contents == "list" else "pass"
    fn = (lambda k, w, xs: [(k, w.start, w.end, sorted(x[1] for x in xs))]) if contents == "list" else None
    results = []
    for trigger in (EventTimeTrigger(), _SlowEventTimeTrigger()):
        tag = OutputTag("late")
        op, out = start(assigner, contents, trigger=trigger, lateness=lateness, tag=tag, kind=kind, fn=fn, agg=SumAgg())
        assert op._fast == (type(trigger) is EventTimeTrigger)
        one_pane_runs = []
        op._process_in_window = _counting(op._process_in_window, one_pane_runs)
        chunks = [events[i : i + 25] for i in range(0, len(events), 25)]
        for chunk, wm in zip(chunks, watermarks):
            feed(op, chunk)
            op.process_watermark(wm)
        op.process_watermark(MAX_WATERMARK)
        results.append((rows(out), sorted(out.side_outputs.get("late", []))))
        if op._fast and not op._sliding:
            assert bool(one_pane_runs) == (order == "ascending")
    assert results[0] == results[1]
    assert results[0][0]  # something fired


def _counting(method, calls):
    def counted(*args):
        calls.append(len(args[0]))
        return method(*args)

    return counted


def test_element_batch_and_timestamped_batch_paths_agree():
    assigner = SlidingEventTimeWindows.of(Time.milliseconds(6), Time.milliseconds(2))
    data = [(("k", i), i * 3 % 17) for i in range(40)]
    outs = []
    for mode in ("element", "batch", "timestamped"):
        op, out = start(assigner)
        rc = op.record_context
        for value, ts in data:
            if mode == "element":
                rc.timestamp = ts
                op.process_element(value)
            elif mode == "batch":
                rc.timestamp = ts
                op.process_batch([value])
            else:
                feed(op, [(value, ts)])
        op.process_watermark(MAX_WATERMARK)
        outs.append(rows(out))
    assert outs[0] == outs[1] == outs[2]


def test_missing_timestamp_is_a_clear_error():
    op, _ = start(TumblingEventTimeWindows.of(Time.seconds(1)))
    with pytest.raises(RuntimeError, match="did you forget to call 'data_stream.assign_timestamps_and_watermarks"):
        op.process_batch([("a", 1)])


# -- lateness -----------------------------------------------------------------------------------------
def test_late_elements_are_dropped_and_counted_without_a_side_output():
    op, out = start(TumblingEventTimeWindows.of(Time.milliseconds(10)))
    feed(op, [(("a", 1), 5)])
    op.process_watermark(9)
    feed(op, [(("a", 2), 3), (("a", 4), 10)])  # 3 is late: its window [0, 10) is done
    op.process_watermark(MAX_WATERMARK)
    assert rows(out) == [(("a", 1), 9), (("a", 4), 19)]
    assert op.num_late_records_dropped.get_count() == 1


def test_late_elements_go_to_the_side_output_with_their_timestamp():
    tag = OutputTag("late-data")
    op, out = start(TumblingEventTimeWindows.of(Time.milliseconds(10)), tag=tag)
    feed(op, [(("a", 1), 5)])
    op.process_watermark(12)
    feed(op, [(("a", 2), 3), (("b", 7), 12)])
    assert out.side_outputs == {"late-data": [("a", 2)]}
    assert op.num_late_records_dropped.get_count() == 0


def test_allowed_lateness_refires_with_the_late_element_then_cleans_up():
    op, out = start(TumblingEventTimeWindows.of(Time.milliseconds(10)), lateness=5, tag=OutputTag("late"))
    feed(op, [(("a", 1), 5)])
    op.process_watermark(9)
    assert out.records == [("a", 1)]
    feed(op, [(("a", 2), 4)])  # late but within the allowed lateness: fires again at once
    assert out.records == [("a", 1), ("a", 3)] and out.timestamps == [9, 9]
    op.process_watermark(13)
    feed(op, [(("a", 4), 1)])
    assert out.records[-1] == ("a", 7)
    op.process_watermark(14)  # cleanup time 9 + 5: the pane is dropped
    assert op.keyed_state_backend.get_namespaced_table(CONTENTS_STATE, "reducing").values == {}
    feed(op, [(("a", 8), 2)])  # 2 + 5 <= 14: late
    assert out.side_outputs == {"late": [("a", 8)]}
    assert out.records == [("a", 1), ("a", 3), ("a", 7)]


def test_sliding_element_with_only_some_windows_late_is_not_late():
    op, out = start(SlidingEventTimeWindows.of(Time.milliseconds(10), Time.milliseconds(5)), tag=OutputTag("late"))
    op.process_watermark(9)
    feed(op, [(("a", 1), 7)])  # windows [0, 10) (late) and [5, 15)
    op.process_watermark(MAX_WATERMARK)
    assert rows(out) == [(("a", 1), 14)]
    assert out.side_outputs == {}


# -- merging windows ----------------------------------------------------------------------------------
def test_session_windows_merge_when_a_bridging_element_arrives_out_of_order():
    op, out = start(EventTimeSessionWindows.with_gap(Time.milliseconds(10)))
    feed(op, [(("a", 1), 0), (("a", 2), 18), (("b", 5), 100)])
    sets = op.keyed_state_backend.get_table(MERGING_SET_STATE, "map").values
    assert sets["a"] == {TimeWindow(0, 10): TimeWindow(0, 10), TimeWindow(18, 28): TimeWindow(18, 28)}
    feed(op, [(("a", 4), 9)])  # [9, 19) touches both sessions: one session [0, 28)
    assert list(sets["a"]) == [TimeWindow(0, 28)]
    state_window = sets["a"][TimeWindow(0, 28)]
    assert state_window in (TimeWindow(0, 10), TimeWindow(18, 28))
    assert op.keyed_state_backend.get_namespaced_table(CONTENTS_STATE, "reducing").values[state_window] == {
        "a": ("a", 7)
    }
    assert op.timer_service.num_event_time_timers() == 2  # the merged session's and b's
    op.process_watermark(27)
    assert rows(out) == [(("a", 7), 27)]
    assert "a" not in sets
    op.process_watermark(MAX_WATERMARK)
    assert rows(out) == [(("a", 7), 27), (("b", 5), 109)]


def _session_state(op):
    """The operator's keyed state and timers by key group, as a checkpoint holds them."""
    backend = dict(op.keyed_state_backend.snapshot())
    timers = {kg: sorted(t["event"], key=repr) for kg, t in op.timer_service.snapshot().items() if t["event"]}
    return backend, timers


@pytest.mark.parametrize("contents", ["reducing", "aggregating", "list"])
@pytest.mark.parametrize("seed", range(4))
def test_session_fast_path_leaves_the_general_paths_state_and_output(contents, seed):
    """Sessions through window_sessions' loop and through its pure twin (MergingWindowSet element
    by element): the same sets, contents and timers after every run and watermark (each read as a
    checkpoint does, which leaves copy-on-write layers under the next run), the same firings and
    late elements; a checkpoint of the loop restored into an operator whose trigger keeps it on
    the general path goes on the same."""
    rnd = random.Random(seed)
    events, ts = [], 0
    for _ in range(400):
        ts += rnd.randint(0, 4)
        # mostly in order; some arrive up to 60 ms late (bridging sessions, late elements)
        events.append(((rnd.choice("abcd"), rnd.randint(1, 9)), ts - (rnd.randint(0, 60) if rnd.random() < 0.2 else 0)))
    cuts = [0, *sorted(rnd.sample(range(1, len(events)), 40)), len(events)]  # runs of 1 to ~60
    chunks = [events[a:b] for a, b in zip(cuts, cuts[1:])]
    watermarks = [max(t for _, t in chunk) - 12 for chunk in chunks]
    kind = "window" if contents == "list" else "pass"
    fn = (lambda k, w, xs: [(k, w.start, w.end, sorted(x[1] for x in xs))]) if contents == "list" else None
    assigner = EventTimeSessionWindows.with_gap(Time.milliseconds(10))

    def started(trigger, backend_snapshot=None):
        tag = OutputTag("late")
        op, out = start(
            assigner,
            contents,
            trigger=trigger,
            tag=tag,
            kind=kind,
            fn=fn,
            agg=SumAgg(),
            backend_snapshot=backend_snapshot,
        )
        assert op._sessions == (type(trigger) is EventTimeTrigger)
        return op, out

    fast, fast_out = started(EventTimeTrigger())
    general, general_out = started(EventTimeTrigger())
    general._process_fast = lambda values, timestamps: process_sessions_pure(general, values, timestamps)
    halfway = len(chunks) // 2
    for i, (chunk, wm) in enumerate(zip(chunks, watermarks)):
        for op in (fast, general):
            feed(op, chunk)
        assert _session_state(fast) == _session_state(general)
        for op in (fast, general):
            op.process_watermark(wm)
        assert _session_state(fast) == _session_state(general)
        if i == halfway:  # the fast path's checkpoint goes on in the general path
            backend, timers = fast.keyed_state_backend.snapshot(), fast.timer_service.snapshot()
            restored, restored_out = started(_SlowEventTimeTrigger(), backend)
            restored.timer_service.restore(timers)
            restored.process_watermark(wm)  # (a restored task's watermark starts over: as before here)
            restored_out.records.extend(fast_out.records)
            restored_out.timestamps.extend(fast_out.timestamps)
        elif i > halfway:
            feed(restored, chunk)
            restored.process_watermark(wm)
    for op in (fast, general, restored):
        op.process_watermark(MAX_WATERMARK)
    late = sorted(fast_out.side_outputs.get("late", []))
    assert rows(fast_out) == rows(general_out) == rows(restored_out)
    assert late == sorted(general_out.side_outputs.get("late", [])) and late  # some were late
    assert len(rows(fast_out)) > 4


def test_touching_sessions_merge_and_count_trigger_state_merges():
    op, out = start(EventTimeSessionWindows.with_gap(Time.milliseconds(10)), trigger=CountTrigger.of(3))
    feed(op, [(("a", 1), 0), (("a", 1), 20)])  # [0, 10) and [20, 30): one count each
    assert out.records == []
    feed(op, [(("a", 1), 10)])  # [10, 20) touches both: counts merge to 2, this element makes 3
    assert out.records == [("a", 3)] and out.timestamps == [29]


def test_dynamic_gap_sessions():
    op, out = start(DynamicEventTimeSessionWindows.with_dynamic_gap(lambda v: v[1]))
    feed(op, [(("a", 5), 0), (("a", 1), 5), (("a", 20), 100)])  # [0, 5) touches [5, 6)
    op.process_watermark(MAX_WATERMARK)
    assert rows(out) == [(("a", 6), 5), (("a", 20), 119)]


def test_merging_window_set_keeps_the_first_state_window():
    assigner = EventTimeSessionWindows.with_gap(Time.milliseconds(10))
    merges = []
    mws = MergingWindowSet(assigner, {})
    record = lambda *args: merges.append(args)  # noqa: E731
    assert mws.add_window(TimeWindow(0, 10), record) == TimeWindow(0, 10)
    assert mws.add_window(TimeWindow(30, 40), record) == TimeWindow(30, 40)
    assert merges == []
    assert mws.add_window(TimeWindow(5, 15), record) == TimeWindow(0, 15)  # extends [0, 10)
    assert merges == [(TimeWindow(0, 15), [TimeWindow(0, 10)], TimeWindow(0, 10), [])]
    assert mws.add_window(TimeWindow(14, 31), record) == TimeWindow(0, 40)
    assert merges[-1][0] == TimeWindow(0, 40) and merges[-1][2] == TimeWindow(0, 10)
    assert merges[-1][3] == [TimeWindow(30, 40)]
    assert mws.mapping == {TimeWindow(0, 40): TimeWindow(0, 10)}
    assert mws.add_window(TimeWindow(2, 8), record) == TimeWindow(0, 40)  # inside: no merge callback
    assert len(merges) == 2
    with pytest.raises(RuntimeError, match="not in in-flight window set"):
        mws.retire_window(TimeWindow(1, 2))


# -- processing time ----------------------------------------------------------------------------------
def test_processing_time_windows_fire_on_the_clock():
    clock = ManualProcessingTimeService(start=1005)
    op, out = start(TumblingProcessingTimeWindows.of(Time.milliseconds(100)), clock=clock)
    op.process_batch([("a", 1), ("b", 1), ("a", 2)])  # no timestamps needed
    clock.set_current_time(1098)
    assert out.records == []
    clock.set_current_time(1099)
    assert rows(out) == [(("a", 3), 1099), (("b", 1), 1099)]
    clock.set_current_time(1150)
    op.process_batch([("a", 5)])
    clock.set_current_time(1250)
    assert out.records[-1] == ("a", 5) and out.timestamps[-1] == 1199
    op.process_watermark(MAX_WATERMARK)  # watermarks do not fire processing-time windows
    assert len(out.records) == 3


def test_processing_time_sessions():
    clock = ManualProcessingTimeService(start=0)
    op, out = start(ProcessingTimeSessionWindows.with_gap(Time.milliseconds(10)), clock=clock)
    op.process_batch([("a", 1)])
    clock.set_current_time(5)
    op.process_batch([("a", 2)])  # [5, 15) merges with [0, 10)
    clock.set_current_time(14)
    assert out.records == [("a", 3)] and out.timestamps == [14]


# -- triggers and evictors ----------------------------------------------------------------------------
def test_continuous_event_time_trigger_fires_every_interval_and_at_the_end():
    op, out = start(
        TumblingEventTimeWindows.of(Time.milliseconds(100)),
        trigger=ContinuousEventTimeTrigger.of(Time.milliseconds(30)),
    )
    feed(op, [(("a", 1), 5)])
    op.process_watermark(30)
    assert out.records == [("a", 1)]
    feed(op, [(("a", 2), 40)])
    op.process_watermark(99)  # fires at 60, 90 and at the window end 99
    assert out.records == [("a", 1), ("a", 3), ("a", 3), ("a", 3)]
    assert set(out.timestamps) == {99}
    assert op.timer_service.num_event_time_timers() == 0


def test_purging_count_trigger_on_global_windows_is_a_tumbling_count_window():
    op, out = start(GlobalWindows.create(), trigger=PurgingTrigger.of(CountTrigger.of(2)))
    op.process_batch([("a", 1), ("a", 2), ("b", 5), ("a", 3), ("a", 4), ("a", 5)])
    assert out.records == [("a", 3), ("a", 7)]
    assert out.timestamps == [MAX_WATERMARK, MAX_WATERMARK]  # Long.MAX_VALUE for global windows
    op.process_watermark(MAX_WATERMARK)  # the default NeverTrigger would never fire; neither does this
    assert len(out.records) == 2


def test_global_windows_never_fire_by_default():
    op, out = start(GlobalWindows.create())
    assert isinstance(op.trigger, NeverTrigger)
    op.process_batch([("a", 1)])
    op.process_watermark(MAX_WATERMARK)
    assert out.records == []


def test_count_evictor_keeps_the_last_elements_flink_sliding_count_window():
    op, out = start(
        GlobalWindows.create(),
        contents="list",
        trigger=CountTrigger.of(2),
        evictor=CountEvictor.of(3),
        kind="window",
        fn=lambda k, w, xs: [(k, [x[1] for x in xs])],
    )
    op.process_batch([("a", i) for i in range(1, 8)])
    assert out.records == [("a", [1, 2]), ("a", [2, 3, 4]), ("a", [4, 5, 6])]
    contents = op.keyed_state_backend.get_namespaced_table(CONTENTS_STATE, "list").values
    assert [v[1] for v, _t in contents[GlobalWindow()]["a"]] == [4, 5, 6, 7]


def test_time_evictor_and_evict_after_with_reduce():
    op, out = start(TumblingEventTimeWindows.of(Time.milliseconds(100)), evictor=TimeEvictor.of(Time.milliseconds(10)))
    feed(op, [(("a", 1), 1), (("a", 2), 50), (("a", 4), 55), (("a", 8), 60)])
    op.process_watermark(MAX_WATERMARK)
    assert out.records == [("a", 12)]  # keeps ts > 60 - 10: the elements of 55 and 60
    op2, out2 = start(
        GlobalWindows.create(),
        trigger=CountTrigger.of(3),
        evictor=CountEvictor.of(1, True),
        contents="aggregating",
        agg=SumAgg(),
    )
    op2.process_batch([("a", 1), ("a", 2), ("a", 3), ("a", 10), ("a", 20)])
    assert out2.records == [6]  # all 3 in the function, then all but the last evicted
    op2.process_batch([("a", 30)])
    assert out2.records == [6, 3 + 10 + 20 + 30]  # the one kept after the first firing, and 3 new


# -- count windows x every window function kind, against a brute-force reference -----------------------
def concat_values(a, b):
    """ReduceFunction: the first element's key and the values in arrival order."""
    return (a[0], a[1] + b[1])


class ConcatValues(AggregateFunction):
    def create_accumulator(self):
        return (None, ())

    def add(self, value, acc):
        return (value[0] if acc[0] is None else acc[0], acc[1] + value[1])

    def get_result(self, acc):
        return acc

    def merge(self, a, b):
        return (a[0] if a[0] is not None else b[0], a[1] + b[1])


def _values(inputs):
    return tuple(v for e in inputs for v in e[1])


class CountRows(WindowFunction):
    def apply(self, key, window, inputs):
        yield ("window", key, _values(inputs), window.max_timestamp())


class CountAllRows(AllWindowFunction):
    def apply(self, window, inputs):
        yield ("window", None, _values(inputs), window.max_timestamp())


class CountProcessRows(ProcessWindowFunction):
    def process(self, key, context, elements):
        yield ("process", key, _values(elements), context.window().max_timestamp())


class CountProcessAllRows(ProcessAllWindowFunction):
    def process(self, context, elements):
        yield ("process", None, _values(elements), context.window().max_timestamp())


#: window function kind -> (WindowedStream method, its arguments keyed, its arguments for all-windows)
COUNT_KINDS = {
    "reduce": ("reduce", (concat_values,), (concat_values,)),
    "reduce+window_function": ("reduce", (concat_values, CountRows()), (concat_values, CountAllRows())),
    "reduce+process_window_function": (
        "reduce",
        (concat_values, CountProcessRows()),
        (concat_values, CountProcessAllRows()),
    ),
    "aggregate": ("aggregate", (ConcatValues(),), (ConcatValues(),)),
    "aggregate+window_function": ("aggregate", (ConcatValues(), CountRows()), (ConcatValues(), CountAllRows())),
    "aggregate+process_window_function": (
        "aggregate",
        (ConcatValues(), CountProcessRows()),
        (ConcatValues(), CountProcessAllRows()),
    ),
    "apply": ("apply", (CountRows(),), (CountAllRows(),)),
    "process": ("process", (CountProcessRows(),), (CountProcessAllRows(),)),
}
COUNT_SHAPES = [(3, 0), (1, 0), (5, 2), (4, 2), (2, 3), (3, 3), (1, 1), (2, 1)]


def count_window_operator(size, slide, kind, keyed, backend_snapshot=None, timers=None):
    """The window operator ``count_window(size, slide).<kind>(...)`` builds (``count_window_all``
    when not keyed), set up and opened; restored from the snapshots when given."""
    env = StreamExecutionEnvironment(Configuration().set_string("execution.target", "local"))
    stream = env.from_collection([("a", (0,))])
    windowed = stream.key_by(first).count_window(size, slide) if keyed else stream.count_window_all(size, slide)
    method, keyed_args, all_args = COUNT_KINDS[kind]
    spec = getattr(windowed, method)(*(keyed_args if keyed else all_args)).get_transformation().operator
    harness = KeyedOneInputStreamOperatorTestHarness(
        create_window_operator(spec.function, spec.key_selector), task_name="", operator_name=""
    ).setup()
    if backend_snapshot is not None:
        harness.keyed_state_backend.restore(backend_snapshot)
        harness.operator.timer_service.restore(timers)
    harness.open()
    return harness.operator, harness.output


def count_window_firings(events, size, slide, keyed):
    """By brute force, in firing order: (key, fired elements, arrival index of the firing). Per key
    (one group for all-windows), in arrival order, every ``slide``-th element (``size``-th when
    tumbling) fires the last ``size`` elements so far."""
    seen = {}
    every = slide or size
    firings = []
    for i, e in enumerate(events):
        key = e[0] if keyed else None
        elements = seen.setdefault(key, [])
        elements.append(e)
        if len(elements) % every == 0:
            firings.append((key, elements[max(0, len(elements) - size) :], i))
    return firings, seen


def count_window_rows(firings, kind):
    rows = []
    for key, fired, _i in firings:
        if kind in ("reduce", "aggregate"):
            rows.append((fired[0][0], _values(fired)))
        else:
            rows.append(("process" if "process" in kind else "window", key, _values(fired), MAX_WATERMARK))
    return rows


def feed_in_runs(op, events, first_index, rnd):
    """``events`` in random runs, each through one of the operator's input paths (one element at a
    time, a batch of one timestamp, a run with a timestamp per element: the arrival index)."""
    i = 0
    while i < len(events):
        run = events[i : i + rnd.randint(1, 7)]
        path = rnd.choice(("element", "batch", "timestamped"))
        if path == "element":
            for e in run:
                op.process_element(e)
        elif path == "batch":
            op.process_batch(run)
        else:
            op.process_timestamped_batch(run, [first_index + i + j for j in range(len(run))])
        i += len(run)


@pytest.mark.parametrize("keyed", [True, False], ids=["keyed", "all"])
@pytest.mark.parametrize("kind", sorted(COUNT_KINDS))
@pytest.mark.parametrize("size,slide", COUNT_SHAPES)
def test_count_windows_fire_flinks_contents_for_every_window_function_kind(size, slide, kind, keyed):
    """Flink's count windows (GlobalWindows + PurgingTrigger(CountTrigger(size)) tumbling,
    GlobalWindows + CountEvictor(size) + CountTrigger(slide) sliding): the firings in order, each with
    the last ``size`` elements of its key (reduced / aggregated over exactly those), at Long.MAX_VALUE;
    the operator state is snapshotted and restored half-way."""
    rnd = random.Random(f"{size}/{slide}/{kind}/{keyed}")
    values = rnd.sample(range(-100, 100), 60)
    events = [(rnd.choice("abc"), (v,)) for v in values]
    half = len(events) // 2
    op, out = count_window_operator(size, slide, kind, keyed)
    feed_in_runs(op, events[:half], 0, rnd)
    snapshot = pickle.loads(pickle.dumps((op.keyed_state_backend.snapshot(), op.timer_service.snapshot())))
    restored, out2 = count_window_operator(size, slide, kind, keyed, *snapshot)
    feed_in_runs(restored, events[half:], half, rnd)
    restored.process_watermark(MAX_WATERMARK)  # global windows do not fire at the end of time
    firings, seen = count_window_firings(events, size, slide, keyed)
    assert out.records + out2.records == count_window_rows(firings, kind)
    assert set(out.timestamps + out2.timestamps) <= {MAX_WATERMARK}
    assert len(out.records) == sum(1 for f in firings if f[2] < half)
    if slide:  # FIRE, not FIRE_AND_PURGE: a key keeps the last `size` elements of its last firing and newer ones
        contents = restored.keyed_state_backend.get_namespaced_table(CONTENTS_STATE, "list").values
        kept = {key: [v for v, _ts in elements] for key, elements in contents.get(GlobalWindow(), {}).items()}
        last = {key: len(elements) - len(elements) % slide for key, elements in seen.items()}
        expected = {key: elements[max(0, last[key] - size) :] for key, elements in seen.items()}
        assert kept == {(0 if key is None else key): e for key, e in expected.items() if e}


# -- window functions ---------------------------------------------------------------------------------
class WithState(ProcessWindowFunction):
    def __init__(self):
        self.cleared = 0

    def process(self, key, context, elements):
        window_count = context.window_state().get_state(ValueStateDescriptor("fired"))
        window_count.update((window_count.value() or 0) + 1)
        total = context.global_state().get_state(ValueStateDescriptor("total"))
        total.update((total.value() or 0) + sum(e[1] for e in elements))
        yield (key, context.window().start, window_count.value(), total.value(), context.current_watermark())

    def clear(self, context):
        context.window_state().get_state(ValueStateDescriptor("fired")).clear()
        self.cleared += 1


def test_process_window_function_with_window_and_global_state_and_clear():
    fn = WithState()
    op, out = start(
        TumblingEventTimeWindows.of(Time.milliseconds(10)), contents="list", kind="process", fn=fn, lateness=20
    )
    feed(op, [(("a", 1), 1), (("a", 2), 12)])
    op.process_watermark(9)
    feed(op, [(("a", 4), 3)])  # re-fires [0, 10)
    op.process_watermark(MAX_WATERMARK)
    assert out.records == [("a", 0, 1, 1, 9), ("a", 0, 2, 6, 9), ("a", 10, 1, 8, MAX_WATERMARK)]
    assert fn.cleared == 2
    backend = op.keyed_state_backend
    assert backend.get_namespaced_table("fired", "value").values == {}  # cleared per window
    assert backend.get_table("total").values == {"a": 8}


def test_per_window_state_is_refused_for_merging_windows():
    op, _ = start(
        EventTimeSessionWindows.with_gap(Time.milliseconds(5)), contents="list", kind="process", fn=WithState()
    )
    feed(op, [(("a", 1), 1)])
    with pytest.raises(RuntimeError, match="Per-window state is not allowed when using merging windows"):
        op.process_watermark(MAX_WATERMARK)


def test_reduce_and_aggregate_with_window_functions_and_all_window_kinds():
    op, out = start(
        TumblingEventTimeWindows.of(Time.milliseconds(10)),
        kind="window",
        fn=lambda key, w, xs: [(key, w.end, list(xs))],
    )
    feed(op, [(("a", 1), 1), (("a", 2), 2)])
    op.process_watermark(MAX_WATERMARK)
    assert out.records == [("a", 10, [("a", 3)])]

    class Avg(ProcessWindowFunction):
        def process(self, key, context, averages):
            yield key, context.window().max_timestamp(), list(averages)

    op, out = start(
        TumblingEventTimeWindows.of(Time.milliseconds(10)),
        contents="aggregating",
        agg=SumAgg(),
        kind="process",
        fn=Avg(),
    )
    feed(op, [(("a", 1), 1), (("a", 2), 2)])
    op.process_watermark(MAX_WATERMARK)
    assert out.records == [("a", 9, [3])]

    op, out = start(
        TumblingEventTimeWindows.of(Time.milliseconds(10)),
        contents="list",
        kind="all_window",
        fn=lambda w, xs: [(w.start, len(xs))],
        key=NullByteKeySelector(),
    )
    feed(op, [(("a", 1), 1), (("b", 2), 2), (("c", 2), 12)])
    op.process_watermark(MAX_WATERMARK)
    assert out.records == [(0, 2), (10, 1)]


# -- state by key group -------------------------------------------------------------------------------
def test_window_contents_and_timers_are_snapshotted_by_key_group_and_restored():
    assigner = TumblingEventTimeWindows.of(Time.milliseconds(10))
    op, _ = start(assigner)
    feed(op, [(("a", 1), 1), (("b", 2), 2), (("a", 3), 15)])
    snapshot = op.keyed_state_backend.snapshot()
    kg_a = assign_to_key_group("a", 128)
    assert snapshot[kg_a][CONTENTS_STATE] == {"a": {TimeWindow(0, 10): ("a", 1), TimeWindow(10, 20): ("a", 3)}}
    timers = op.timer_service.snapshot()
    assert timers[kg_a]["event"] == [(9, "a", TimeWindow(0, 10)), (19, "a", TimeWindow(10, 20))]
    op2, out2 = start(assigner, backend_snapshot=snapshot)
    op2.timer_service.restore(timers)
    op2.process_watermark(MAX_WATERMARK)
    assert rows(out2) == [(("a", 1), 9), (("b", 2), 9), (("a", 3), 19)]


# -- API checks ---------------------------------------------------------------------------------------
def test_windowed_stream_rejects_bad_arguments():
    env = StreamExecutionEnvironment(Configuration().set_string("execution.target", "local"))
    keyed = env.from_collection([("a", 1)]).key_by(first)
    sessions = keyed.window(EventTimeSessionWindows.with_gap(Time.seconds(1)))
    with pytest.raises(TypeError, match="merging window assigner cannot be used with a trigger"):
        sessions.trigger(PurgingTrigger.of(type("T", (NeverTrigger,), {"can_merge": lambda self: False})()))
    with pytest.raises(TypeError, match="Cannot use a merging WindowAssigner with an Evictor"):
        sessions.evictor(CountEvictor.of(2))
    with pytest.raises(TypeError, match=r"Window Aggregate over merging windows: expected an object with merge\(\)"):
        sessions.aggregate(
            type("A", (), {"create_accumulator": lambda s: 0, "add": lambda s, v, a: a, "get_result": lambda s, a: a})()
        )
    tumbling = keyed.window(TumblingEventTimeWindows.of(Time.seconds(1)))
    with pytest.raises(ValueError, match="The allowed lateness cannot be negative"):
        tumbling.allowed_lateness(-1)
    with pytest.raises(TypeError, match="side_output_late_data: expected an OutputTag"):
        tumbling.side_output_late_data("late")
    with pytest.raises(TypeError, match="Window Process: expected a ProcessWindowFunction"):
        tumbling.process(lambda k, c, e: e)
    with pytest.raises(TypeError, match="window: expected a WindowAssigner"):
        keyed.window(5)
    with pytest.raises(ValueError, match="count_window: size must be positive"):
        keyed.count_window(0)
    with pytest.raises(ValueError, match="TumblingEventTimeWindows parameters must satisfy abs"):
        TumblingEventTimeWindows.of(Time.seconds(1), Time.seconds(2))
    with pytest.raises(ValueError, match="SlidingEventTimeWindows parameters must satisfy abs"):
        SlidingEventTimeWindows.of(Time.seconds(10), Time.seconds(1), Time.seconds(1))
    with pytest.raises(ValueError, match="EventTimeSessionWindows parameters must satisfy 0 < size"):
        EventTimeSessionWindows.with_gap(Time.seconds(0))
    all_windowed = env.from_collection([1]).window_all(GlobalWindows.create()).apply(lambda w, xs: xs)
    assert all_windowed.get_parallelism() == 1
    from raylink.api import GraphError

    with pytest.raises(GraphError, match="parallelism of non parallel operator must be 1"):
        all_windowed.set_parallelism(2)


def test_namespaced_state_snapshots_key_first_and_restores_before_or_after_registration():
    from raylink.api import ListStateDescriptor
    from raylink.state.state_backend import HeapKeyedStateBackend, key_group_range_for_subtask

    backend = HeapKeyedStateBackend((0, 127), 128)
    state = backend.get_or_create_namespaced_state(ListStateDescriptor("l"))
    keys = [f"k{i}" for i in range(20)]
    for key in keys:
        backend.set_current_key(key)
        for ns in ("w1", "w2"):
            state.set_current_namespace(ns)
            state.add((key, ns))
    state.set_current_namespace("w1")
    backend.set_current_key("k0")
    state.merge_namespaces("w1", ["w2"])
    assert state.get() == [("k0", "w1"), ("k0", "w2")]
    snapshot = backend.snapshot()
    kg = assign_to_key_group("k3", 128)
    assert snapshot[kg]["l"]["k3"] == {"w1": [("k3", "w1")], "w2": [("k3", "w2")]}
    restored = {}
    for i in range(2):
        part = HeapKeyedStateBackend(key_group_range_for_subtask(128, 2, i), 128)
        if i == 0:
            part.restore(snapshot)  # before the state is registered: turned around on registration
            part_state = part.get_or_create_namespaced_state(ListStateDescriptor("l"))
        else:
            part_state = part.get_or_create_namespaced_state(ListStateDescriptor("l"))
            part.restore(snapshot)
        for key in part.keys("l"):
            part.set_current_key(key)
            for ns in ("w1", "w2"):
                part_state.set_current_namespace(ns)
                if part_state.get():
                    restored[(key, ns)] = part_state.get()
    expected = {(k, ns): [(k, ns)] for k in keys for ns in ("w1", "w2")}
    expected[("k0", "w1")] = [("k0", "w1"), ("k0", "w2")]
    del expected[("k0", "w2")]
    assert restored == expected
