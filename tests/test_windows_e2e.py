"""End to end: windowed jobs checked row by row (key, start, end, aggregate and output
timestamp) against a brute-force reference computed here from the input."""

from __future__ import annotations

import itertools
import random
import sys
import zlib
from collections import defaultdict

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from raylink.api import (
    AggregateFunction,
    AllWindowFunction,
    Duration,
    EventTimeSessionWindows,
    OutputTag,
    ProcessAllWindowFunction,
    ProcessFunction,
    ProcessWindowFunction,
    SlidingEventTimeWindows,
    Time,
    TumblingEventTimeWindows,
    TumblingProcessingTimeWindows,
    WatermarkStrategy,
    WindowFunction,
)
from raylink.api.functions import SourceFunction
from raylink.tests.runtime_jobs import make_env, reset_signal, signal

pytestmark = pytest.mark.timeout(120)

LONG_MAX = (1 << 63) - 1


def env_for(target, parallelism, **config):
    if target == "ray":  # this module's functions travel by value to the Ray workers
        import cloudpickle
        import ray

        for pickler in (cloudpickle, ray.cloudpickle):
            pickler.register_pickle_by_value(sys.modules[__name__])
    return make_env(target, parallelism, config)


# -- the reference ------------------------------------------------------------------------------------
ASSIGNERS = {
    "tumbling": dict(kind="tumbling", size=40, offset=7),
    "sliding": dict(kind="sliding", size=60, slide=25, offset=5),
    "session": dict(kind="session", gap=15),
}


def make_assigner(spec):
    if spec["kind"] == "tumbling":
        return TumblingEventTimeWindows.of(Time.milliseconds(spec["size"]), Time.milliseconds(spec["offset"]))
    if spec["kind"] == "sliding":
        return SlidingEventTimeWindows.of(
            Time.milliseconds(spec["size"]), Time.milliseconds(spec["slide"]), Time.milliseconds(spec["offset"])
        )
    return EventTimeSessionWindows.with_gap(Time.milliseconds(spec["gap"]))


def reference_panes(events, spec, keyed):
    """(key, start, end) -> elements, by brute force over the definitions."""
    panes = defaultdict(list)
    groups = defaultdict(list)
    for e in events:
        groups[e[0] if keyed else None].append(e)
    for key, elements in groups.items():
        if spec["kind"] == "session":
            ordered = sorted(elements, key=lambda e: e[2])
            start = end = None
            members = []
            for e in ordered:
                if start is not None and e[2] <= end:  # [ts, ts + gap) intersects (touching included)
                    end = max(end, e[2] + spec["gap"])
                    members.append(e)
                else:
                    if members:
                        panes[(key, start, end)] = members
                    start, end, members = e[2], e[2] + spec["gap"], [e]
            if members:
                panes[(key, start, end)] = members
            continue
        size = spec["size"]
        slide = spec.get("slide", size)
        for e in elements:
            ts = e[2]
            for start in range(ts - size + 1, ts + 1):  # every window containing ts, by definition
                if (start - spec["offset"]) % slide == 0:
                    panes[(key, start, start + size)].append(e)
    return panes


FUNCTION_KINDS = ["reduce", "reduce_window", "aggregate", "aggregate_window", "apply", "process"]


def reference_rows(events, spec, kind, keyed):
    """Sorted (row, output timestamp) of a windowed job of ``kind`` over ``events``."""
    out = []
    for (key, start, end), elements in reference_panes(events, spec, keyed).items():
        total = sum(e[1] for e in elements)
        values = sorted(e[1] for e in elements)
        if kind == "reduce":
            row = (key if keyed else "*", total, max(e[2] for e in elements))
        elif kind == "reduce_window":
            row = (key, start, end, total)
        elif kind == "aggregate":
            row = (key if keyed else "*", total, len(elements))
        elif kind == "aggregate_window":
            row = (key, start, end, total, len(elements))
        elif kind == "apply":
            row = (key, start, end, values)
        else:
            row = (key, start, end, values, end - 1)
        out.append((row, end - 1))
    return sorted(out, key=repr)


# -- the job ------------------------------------------------------------------------------------------
def reduce_sum(a, b):
    return (a[0] if a[0] == b[0] else "*", a[1] + b[1], max(a[2], b[2]))


class SumCount(AggregateFunction):
    def create_accumulator(self):
        return (None, 0, 0)

    def add(self, value, acc):
        key = value[0] if acc[0] in (None, value[0]) else "*"
        return (key, acc[1] + value[1], acc[2] + 1)

    def get_result(self, acc):
        return acc

    def merge(self, a, b):
        key = a[0] if a[0] == b[0] or b[0] is None else (b[0] if a[0] is None else "*")
        return (key, a[1] + b[1], a[2] + b[2])


class KeyedAggWindow(WindowFunction):
    def apply(self, key, window, inputs):
        ((_k, total, count),) = inputs
        yield (key, window.start, window.end, total, count)


class AllAggWindow(AllWindowFunction):
    def apply(self, window, inputs):
        ((_k, total, count),) = inputs
        yield (None, window.start, window.end, total, count)


class KeyedReduceProcess(ProcessWindowFunction):
    def process(self, key, context, elements):
        (reduced,) = elements
        yield (key, context.window().start, context.window().end, reduced[1])


class AllReduceProcess(ProcessAllWindowFunction):
    def process(self, context, elements):
        (reduced,) = elements
        yield (None, context.window().start, context.window().end, reduced[1])


class KeyedApply(WindowFunction):
    def apply(self, key, window, inputs):
        yield (key, window.start, window.end, sorted(e[1] for e in inputs))


class AllApply(AllWindowFunction):
    def apply(self, window, inputs):
        yield (None, window.start, window.end, sorted(e[1] for e in inputs))


class KeyedProcess(ProcessWindowFunction):
    def process(self, key, context, elements):
        yield (
            key,
            context.window().start,
            context.window().end,
            sorted(e[1] for e in elements),
            context.window().max_timestamp(),
        )


class AllProcess(ProcessAllWindowFunction):
    def process(self, context, elements):
        w = context.window()
        yield (None, w.start, w.end, sorted(e[1] for e in elements), w.max_timestamp())


class WithTimestamp(ProcessFunction):
    def process_element(self, value, ctx):
        yield value, ctx.timestamp()


def event_timestamp(event, record_timestamp):
    return event[2]


def identity(v):
    return v


def first(v):
    return v[0]


def apply_kind(windowed, kind, keyed):
    if kind == "reduce":
        return windowed.reduce(reduce_sum)
    if kind == "reduce_window":
        return windowed.reduce(reduce_sum, KeyedReduceProcess() if keyed else AllReduceProcess())
    if kind == "aggregate":
        return windowed.aggregate(SumCount())
    if kind == "aggregate_window":
        return windowed.aggregate(SumCount(), KeyedAggWindow() if keyed else AllAggWindow())
    if kind == "apply":
        return windowed.apply(KeyedApply() if keyed else AllApply())
    return windowed.process(KeyedProcess() if keyed else AllProcess())


def run_windowed_job(target, parallelism, events, spec, kind, keyed, disorder):
    env = env_for(target, parallelism)
    stream = env.from_collection(events)
    if parallelism > 1:  # watermarks of several channels meet at the window operator
        stream = stream.rebalance().map(identity)
    stream = stream.assign_timestamps_and_watermarks(
        WatermarkStrategy.for_bounded_out_of_orderness(Duration.of_millis(disorder)).with_timestamp_assigner(
            event_timestamp
        )
    )
    windowed = stream.key_by(first).window(make_assigner(spec)) if keyed else stream.window_all(make_assigner(spec))
    result = apply_kind(windowed, kind, keyed).process(WithTimestamp())
    got = list(result.execute_and_collect())
    if kind in ("reduce", "aggregate") and not keyed:  # the key field of all-window rows: "*"
        got = [(("*",) + tuple(row[1:]), ts) for row, ts in got]
    return sorted(got, key=repr)


def bounded_disorder_events(seed, n, keys, disorder, spread=4):
    rnd = random.Random(seed)
    events = []
    base = 0
    for i in range(n):
        base += rnd.randint(0, spread)
        events.append((rnd.choice(keys), rnd.randint(1, 50), base))
    # shuffle within the bound: each event moves earlier than later ones by at most `disorder`
    events.sort(key=lambda e: e[2] + rnd.uniform(0, disorder))
    return events


@pytest.mark.parametrize("parallelism", [1, 2, 3, 4])
@pytest.mark.parametrize("keyed", [True, False], ids=["keyed", "all"])
@pytest.mark.parametrize("kind", FUNCTION_KINDS)
@pytest.mark.parametrize("assigner", sorted(ASSIGNERS))
def test_windows_match_the_brute_force_reference_on_local(assigner, kind, keyed, parallelism):
    events = bounded_disorder_events(zlib.crc32(f"{assigner}/{kind}".encode()), 300, ["a", "b", "c", "d", "e"], 20)
    spec = ASSIGNERS[assigner]
    got = run_windowed_job("local", parallelism, events, spec, kind, keyed, 20)
    assert got == reference_rows(events, spec, kind, keyed)
    assert got  # windows fired


#: every assigner x every window function kind on Ray, each once: keyed and all-window alternate
#: (per kind across the assigners too), the parallelism goes round 1-4
RAY_SHAPES = [
    (assigner, kind, (i // len(FUNCTION_KINDS) + i) % 2 == 0, 1 + i % 4)
    for i, (assigner, kind) in enumerate(itertools.product(sorted(ASSIGNERS), FUNCTION_KINDS))
]


@pytest.mark.parametrize("assigner,kind,keyed,parallelism", RAY_SHAPES)
def test_windows_match_the_brute_force_reference_on_ray(ray_session, assigner, kind, keyed, parallelism):
    events = bounded_disorder_events(11, 300, ["a", "b", "c", "d"], 20)
    spec = ASSIGNERS[assigner]
    got = run_windowed_job("ray", parallelism, events, spec, kind, keyed, 20)
    assert got == reference_rows(events, spec, kind, keyed)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 10_000),
    n=st.integers(1, 120),
    disorder=st.integers(0, 30),
    assigner=st.sampled_from(sorted(ASSIGNERS)),
    kind=st.sampled_from(FUNCTION_KINDS),
    keyed=st.booleans(),
    parallelism=st.integers(1, 3),
)
def test_property_random_bounded_disorder_streams_match_the_reference(
    seed, n, disorder, assigner, kind, keyed, parallelism
):
    events = bounded_disorder_events(seed, n, ["x", "y", "z"], disorder, spread=6)
    spec = ASSIGNERS[assigner]
    got = run_windowed_job("local", parallelism, events, spec, kind, keyed, disorder)
    assert got == reference_rows(events, spec, kind, keyed)


# -- count windows (Flink's Java definition) ----------------------------------------------------------
def count_reference(events, size, slide, keyed):
    """Rows (key, values) in firing order per key: tumbling fires every `size` elements with
    exactly them; sliding fires every `slide` elements with the last <= `size` of them."""
    groups = defaultdict(list)
    for e in events:
        groups[e[0] if keyed else None].append(e[1])
    rows = []
    for key, values in groups.items():
        if slide == 0:
            for i in range(size, len(values) + 1, size):
                rows.append((key, values[i - size : i]))
        else:
            for i in range(slide, len(values) + 1, slide):
                rows.append((key, values[max(0, i - size) : i]))
    return rows


class CountApply(WindowFunction):
    """(key, values, n): n counts the firings of this subtask (orders them per key)."""

    def __init__(self):
        self.n = 0

    def apply(self, key, window, inputs):
        self.n += 1
        yield (key, [e[1] for e in inputs], self.n)


class CountApplyAll(AllWindowFunction):
    def __init__(self):
        self.n = 0

    def apply(self, window, inputs):
        self.n += 1
        yield (None, [e[1] for e in inputs], self.n)


@pytest.mark.parametrize("size,slide", [(3, 0), (4, 2), (2, 3)])
@pytest.mark.parametrize("keyed", [True, False], ids=["keyed", "all"])
def test_count_windows_follow_flink_java(size, slide, keyed):
    events = [(k, i, 0) for i, k in enumerate("abcab" * 7)]
    env = env_for("local", 2)
    stream = env.from_collection(events)
    windowed = stream.key_by(first).count_window(size, slide) if keyed else stream.count_window_all(size, slide)
    got = list(
        windowed.apply(CountApply() if keyed else CountApplyAll()).process(WithTimestamp()).execute_and_collect()
    )
    assert {ts for _row, ts in got} == {LONG_MAX}  # global windows emit at Long.MAX_VALUE
    expected = count_reference(events, size, slide, keyed)
    by_key = defaultdict(list)
    for (key, values, n), _ts in sorted(got, key=lambda r: r[0][2]):
        by_key[key].append((key, values))
    assert sorted(by_key) == sorted({r[0] for r in expected}, key=repr)
    for key, rows in by_key.items():  # per key, the firings in Flink's order
        assert rows == [r for r in expected if r[0] == key]


# -- count windows x every window function kind, against the brute-force reference -------------------
#: (size, slide): slide 0 is a tumbling count window (Flink: GlobalWindows + PurgingTrigger(CountTrigger(size))),
#: otherwise sliding (GlobalWindows + CountEvictor(size) + CountTrigger(slide)); slide > size skips elements
COUNT_SHAPES = [(3, 0), (1, 0), (5, 2), (4, 2), (2, 3), (3, 3), (1, 1)]
COUNT_FUNCTION_KINDS = [
    "reduce",
    "reduce+window_function",
    "reduce+process_window_function",
    "aggregate",
    "aggregate+window_function",
    "aggregate+process_window_function",
    "apply",
    "process",
]


def count_events(seed, n, keys):
    """``(key, (value,), arrival index)`` with distinct values, so a firing's contents name it."""
    rnd = random.Random(seed)
    values = rnd.sample(range(-1000, 1000), n)
    return [(rnd.choice(keys), (v,), i) for i, v in enumerate(values)]


def count_window_reference(events, size, slide, kind, keyed):
    """Sorted (row, output timestamp) of a count-window job, by brute force: per key (one group for
    ``count_window_all``), in arrival order, every ``slide``-th element (``size``-th when tumbling)
    fires the last ``size`` elements so far, at ``Long.MAX_VALUE`` (the global window's end)."""
    groups = defaultdict(list)
    for e in events:
        groups[e[0] if keyed else None].append(e)
    every = slide or size
    out = []
    for key, elements in groups.items():
        for i in range(every, len(elements) + 1, every):
            fired = elements[max(0, i - size) : i]
            values = tuple(v for e in fired for v in e[1])
            if kind in ("reduce", "aggregate"):  # the reduced / aggregated element itself
                row = (fired[0][0], values, fired[-1][2])
            else:
                row = (kind, key, values, LONG_MAX)
            out.append((row, LONG_MAX))
    return sorted(out, key=repr)


def concat_values(a, b):
    """ReduceFunction: the first element's key, the values in arrival order, the last index."""
    return (a[0], a[1] + b[1], b[2])


class ConcatValues(AggregateFunction):
    def create_accumulator(self):
        return (None, (), -1)

    def add(self, value, acc):
        return (value[0] if acc[0] is None else acc[0], acc[1] + value[1], value[2])

    def get_result(self, acc):
        return acc

    def merge(self, a, b):
        return (a[0] if a[0] is not None else b[0], a[1] + b[1], b[2])


def _count_row(kind, key, window, inputs):
    return (kind, key, tuple(v for e in inputs for v in e[1]), window.max_timestamp())


class CountWindowRows(WindowFunction):
    def __init__(self, kind):
        self.kind = kind

    def apply(self, key, window, inputs):
        yield _count_row(self.kind, key, window, inputs)


class CountAllWindowRows(AllWindowFunction):
    def __init__(self, kind):
        self.kind = kind

    def apply(self, window, inputs):
        yield _count_row(self.kind, None, window, inputs)


class CountProcessRows(ProcessWindowFunction):
    def __init__(self, kind):
        self.kind = kind

    def process(self, key, context, elements):
        yield _count_row(self.kind, key, context.window(), elements)


class CountProcessAllRows(ProcessAllWindowFunction):
    def __init__(self, kind):
        self.kind = kind

    def process(self, context, elements):
        yield _count_row(self.kind, None, context.window(), elements)


def apply_count_kind(windowed, kind, keyed):
    window_function = CountWindowRows(kind) if keyed else CountAllWindowRows(kind)
    process_function = CountProcessRows(kind) if keyed else CountProcessAllRows(kind)
    if kind == "reduce":
        return windowed.reduce(concat_values)
    if kind == "reduce+window_function":
        return windowed.reduce(concat_values, window_function)
    if kind == "reduce+process_window_function":
        return windowed.reduce(concat_values, process_function)
    if kind == "aggregate":
        return windowed.aggregate(ConcatValues())
    if kind == "aggregate+window_function":
        return windowed.aggregate(ConcatValues(), window_function)
    if kind == "aggregate+process_window_function":
        return windowed.aggregate(ConcatValues(), process_function)
    if kind == "apply":
        return windowed.apply(window_function)
    return windowed.process(process_function)


def arrival_timestamp(event, record_timestamp):
    return event[2]


def run_count_window_job(target, parallelism, events, shapes, kind, keyed, timestamps):
    """One job, a count-window branch per (size, slide) of ``shapes``, the rows tagged by shape.

    Count windows follow the arrival order per key, so it is made deterministic: one source
    subtask; keyed at parallelism > 1 the elements first go through a keyed map (the window
    subtasks then read several channels, but every key comes through one, in order). A
    ``rebalance`` would interleave a key's elements in any order, in Flink as well."""
    env = env_for(target, parallelism)
    source = env.from_collection(events)
    if timestamps:  # elements with timestamps (and watermarks, which global windows ignore)
        source = source.assign_timestamps_and_watermarks(
            WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(arrival_timestamp)
        )
    if keyed and parallelism > 1:
        source = source.key_by(first).map(identity)
    branches = []
    for size, slide in shapes:
        windowed = source.key_by(first).count_window(size, slide) if keyed else source.count_window_all(size, slide)
        rows = apply_count_kind(windowed, kind, keyed).process(WithTimestamp())
        branches.append(rows.map(lambda r, shape=(size, slide): (shape,) + r))
    got = branches[0].union(*branches[1:]) if len(branches) > 1 else branches[0]
    return sorted(got.execute_and_collect(), key=repr)


def count_window_expected(events, shapes, kind, keyed):
    return sorted(
        (
            ((size, slide),) + row
            for size, slide in shapes
            for row in count_window_reference(events, size, slide, kind, keyed)
        ),
        key=repr,
    )


def test_count_window_reference_is_flinks_definition():
    """The reference on the issue's example: a key whose inputs are 88, 42, -22, -18."""
    events = [("k", (v,), i) for i, v in enumerate((88, 42, -22, -18))]
    assert [r[0][2] for r in count_window_reference(events, 5, 2, "apply", True)] == [(88, 42), (88, 42, -22, -18)]
    assert count_window_reference(events, 2, 3, "reduce", True) == [(("k", (42, -22), 2), LONG_MAX)]
    assert count_window_reference(events, 3, 0, "apply", False) == [
        (("apply", None, (88, 42, -22), LONG_MAX), LONG_MAX)
    ]


@pytest.mark.timeout(180)
@pytest.mark.parametrize("parallelism", [1, 2, 3, 4])
@pytest.mark.parametrize("keyed", [True, False], ids=["keyed", "all"])
@pytest.mark.parametrize("kind", COUNT_FUNCTION_KINDS)
def test_count_windows_match_the_brute_force_reference_on_local(kind, keyed, parallelism):
    """Every count-window shape x every window function kind; elements carry timestamps at even
    parallelism."""
    events = count_events(zlib.crc32(f"count/{kind}/{keyed}".encode()), 120, ["a", "b", "c", "d", "e"])
    got = run_count_window_job("local", parallelism, events, COUNT_SHAPES, kind, keyed, parallelism % 2 == 0)
    assert got == count_window_expected(events, COUNT_SHAPES, kind, keyed)
    assert got  # windows fired


#: every window function kind on Ray once: keyed and all-window alternate, the parallelism goes round 1-4
COUNT_RAY_SHAPES = [(kind, i % 2 == 0, 1 + i % 4) for i, kind in enumerate(COUNT_FUNCTION_KINDS)]


@pytest.mark.timeout(180)
@pytest.mark.parametrize("kind,keyed,parallelism", COUNT_RAY_SHAPES)
def test_count_windows_match_the_brute_force_reference_on_ray(ray_session, kind, keyed, parallelism):
    events = count_events(29, 80, ["a", "b", "c", "d"])
    got = run_count_window_job("ray", parallelism, events, COUNT_SHAPES, kind, keyed, True)
    assert got == count_window_expected(events, COUNT_SHAPES, kind, keyed)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 10_000),
    n=st.integers(0, 60),
    keys=st.integers(1, 4),
    size=st.integers(1, 6),
    slide=st.integers(0, 7),
    kind=st.sampled_from(COUNT_FUNCTION_KINDS),
    keyed=st.booleans(),
    parallelism=st.integers(1, 3),
    timestamps=st.booleans(),
)
def test_property_random_count_windows_match_the_reference(
    seed, n, keys, size, slide, kind, keyed, parallelism, timestamps
):
    events = count_events(seed, n, ["k%d" % i for i in range(keys)])
    got = run_count_window_job("local", parallelism, events, [(size, slide)], kind, keyed, timestamps)
    assert got == count_window_expected(events, [(size, slide)], kind, keyed)


# -- late data, made deterministic by a source that emits its own watermarks ---------------------------
class ScriptedSource(SourceFunction):
    """Emits ("value", key, v, ts) records with timestamps and ("wm", ts) watermarks, in order."""

    def __init__(self, script):
        self.script = script

    def run(self, ctx):
        for step in self.script:
            if step[0] == "wm":
                ctx.emit_watermark(step[1])
            else:
                _, key, value, ts = step
                ctx.collect_with_timestamp((key, value, ts), ts)


LATE_SCRIPT = [
    ("rec", "a", 1, 5),
    ("rec", "a", 2, 8),
    ("rec", "b", 10, 12),
    ("wm", 9),  # [0, 10) fires: a=3
    ("rec", "a", 4, 3),  # late for [0, 10)
    ("rec", "a", 8, 15),
    ("wm", 14),  # cleanup of [0, 10) when lateness is 5
    ("rec", "a", 16, 2),  # late even with 5 ms allowed lateness
    ("rec", "b", 32, 19),
    ("wm", 19),  # [10, 20) fires: a=8, b=42
]


def late_job(target, lateness, with_tag):
    env = env_for(target, 2)
    tag = OutputTag("late")
    source = env.add_source(ScriptedSource(LATE_SCRIPT)).set_parallelism(1)
    windowed = source.key_by(first).window(TumblingEventTimeWindows.of(Time.milliseconds(10)))
    if lateness:
        windowed = windowed.allowed_lateness(lateness)
    if with_tag:
        windowed = windowed.side_output_late_data(tag)
    main = windowed.reduce(reduce_sum)
    tagged = main.process(WithTimestamp()).map(lambda r: ("main",) + r)
    if with_tag:
        tagged = tagged.union(main.get_side_output(tag).process(WithTimestamp()).map(lambda r: ("late",) + r))
    return sorted(tagged.execute_and_collect(), key=repr)


def test_late_elements_are_dropped_without_a_side_output(target):
    assert late_job(target, 0, False) == sorted(
        [
            ("main", ("a", 3, 8), 9),
            ("main", ("b", 42, 19), 19),
            ("main", ("a", 8, 15), 19),
        ],
        key=repr,
    )


def test_late_elements_go_to_the_side_output_with_their_timestamps(state_backend):
    assert late_job("local", 0, True) == sorted(
        [
            ("main", ("a", 3, 8), 9),
            ("main", ("b", 42, 19), 19),
            ("main", ("a", 8, 15), 19),
            ("late", ("a", 4, 3), 3),
            ("late", ("a", 16, 2), 2),
        ],
        key=repr,
    )


def test_allowed_lateness_refires_the_window_and_drops_after_cleanup(state_backend):
    assert late_job("local", 5, True) == sorted(
        [
            ("main", ("a", 3, 8), 9),
            ("main", ("a", 7, 8), 9),  # re-fired with the late element
            ("main", ("b", 42, 19), 19),
            ("main", ("a", 8, 15), 19),
            ("late", ("a", 16, 2), 2),  # after the cleanup at watermark 14
        ],
        key=repr,
    )


SESSION_SCRIPT = [
    ("rec", "u", 1, 0),
    ("rec", "u", 2, 30),  # two sessions with gap 10: [0, 10) and [30, 40)
    ("wm", 5),
    ("rec", "u", 4, 20),  # [20, 30) touches [30, 40): [20, 40)
    ("rec", "u", 8, 10),  # [10, 20) bridges everything: [0, 40)
    ("wm", 100),
]


def test_out_of_order_elements_bridge_sessions_end_to_end(state_backend):
    env = env_for("local", 3)
    got = list(
        env.add_source(ScriptedSource(SESSION_SCRIPT))
        .set_parallelism(1)
        .key_by(first)
        .window(EventTimeSessionWindows.with_gap(Time.milliseconds(10)))
        .process(KeyedProcess())
        .process(WithTimestamp())
        .execute_and_collect()
    )
    assert got == [(("u", 0, 40, [1, 2, 4, 8], 39), 39)]


# -- processing time ----------------------------------------------------------------------------------
class UntilCounted(SourceFunction):
    def __init__(self, name, n):
        self.name = name
        self.n = n

    def run(self, ctx):
        for i in range(self.n):
            ctx.collect(("k%d" % (i % 3), 1))
        signal(self.name).wait(30)  # until every element was counted in a fired window


class CountsFired(ProcessFunction):
    def __init__(self, name, n):
        self.name = name
        self.n = n
        self.total = 0

    def process_element(self, value, ctx):
        self.total += value[3]
        if self.total >= self.n:
            signal(self.name).set()
        yield value, ctx.timestamp()


class CountProcessing(ProcessWindowFunction):
    def process(self, key, context, elements):
        yield (key, context.window().start, context.window().end, len(list(elements)))


def test_processing_time_windows_count_every_element_once(state_backend):
    name = "test_windows_e2e.processing"
    reset_signal(name)
    n = 500
    env = env_for("local", 2)
    got = list(
        env.add_source(UntilCounted(name, n))
        .set_parallelism(1)
        .key_by(first)
        .window(TumblingProcessingTimeWindows.of(Time.milliseconds(50)))
        .process(CountProcessing())
        .process(CountsFired(name, n))
        .set_parallelism(1)
        .execute_and_collect()
    )
    assert signal(name).is_set()
    assert sum(row[3] for row, _ts in got) == n
    for (key, start, end, _count), ts in got:
        assert end - start == 50 and start % 50 == 0 and ts == end - 1
    assert len({(row[0], row[1]) for row, _ts in got}) == len(got)  # each pane fired once
