"""Keyed operators: rolling reduce / aggregations, keyed state, timers, key checks."""

from collections import namedtuple

import pytest

from raylink.api import OutputTag, Types
from raylink.api.functions import KeyedCoProcessFunction, KeyedProcessFunction, ReduceFunction, TimeDomain
from raylink.api.state import (
    ListStateDescriptor,
    MapStateDescriptor,
    ReducingStateDescriptor,
    ValueStateDescriptor,
)
from raylink.core.key_groups import assign_to_key_group
from raylink.operators.co import KeyedCoProcessOperator
from raylink.operators.process import KeyedProcessOperator
from raylink.operators.reduce import StreamGroupedAggregateOperator, StreamGroupedReduceOperator
from raylink.state.state_backend import HeapKeyedStateBackend, key_group_range_for_subtask
from raylink.tests.harness import KeyedOneInputStreamOperatorTestHarness, KeyedTwoInputStreamOperatorTestHarness

pytestmark = pytest.mark.timeout(30)


def run_both_paths(make, data):
    """Feed ``data`` record by record and as batches; both must give the same output."""
    one_by_one = KeyedOneInputStreamOperatorTestHarness(make()).open()
    for v in data:
        one_by_one.process_element(v)
    batched = KeyedOneInputStreamOperatorTestHarness(make()).open()
    batched.process_elements(data[:2])
    batched.process_elements(data[2:])
    assert one_by_one.extract_output_values() == batched.extract_output_values()
    return one_by_one.extract_output_values()


def first(v):
    return v[0]


# -- rolling reduce -----------------------------------------------------------------


def test_reduce_emits_running_value_per_key_first_record_as_is():
    class Concat(ReduceFunction):
        def reduce(self, a, b):
            return (a[0], a[1] + b[1])

    data = [("a", "1"), ("b", "x"), ("a", "2"), ("a", "3"), ("b", "y")]
    got = run_both_paths(lambda: StreamGroupedReduceOperator(Concat(), first), data)
    assert got == [("a", "1"), ("b", "x"), ("a", "12"), ("a", "123"), ("b", "xy")]


def test_reduce_with_plain_callables_and_key_selector_object():
    class ByParity:
        def get_key(self, v):
            return v % 2

    got = run_both_paths(lambda: StreamGroupedReduceOperator(lambda a, b: a + b, ByParity()), [1, 2, 3, 4, 5])
    assert got == [1, 2, 4, 6, 9]


# -- aggregations (Flink SumAggregator / ComparableAggregator semantics) --------------


def agg(kind, field, key=first):
    return lambda: StreamGroupedAggregateOperator(kind, field, key)


def test_sum_keeps_first_records_other_fields():
    data = [("a", 1, "x"), ("a", 2, "y"), ("b", 5, "z"), ("a", 3, "w")]
    assert run_both_paths(agg("sum", 1), data) == [("a", 1, "x"), ("a", 3, "x"), ("b", 5, "z"), ("a", 6, "x")]


def test_sum_of_pairs_leaves_its_fast_path_when_a_key_starts_with_another_shape():
    op = agg("sum", 1)()
    out = KeyedOneInputStreamOperatorTestHarness(op).open().output
    op.process_batch([("a", 1), ("b", 2), ("a", 3)])
    op.process_batch([("a", 1), ("c", 5, "x"), ("b", 1), ("c", 1, "y"), ["d", 2]])
    op.process_batch([("d", 3), ("a", 1)])
    assert out.records == [
        ("a", 1),
        ("b", 2),
        ("a", 4),
        ("a", 5),
        ("c", 5, "x"),
        ("b", 3),
        ("c", 6, "x"),
        ["d", 2],
        ["d", 5],
        ("a", 6),
    ]


def test_min_and_max_replace_only_the_field():
    data = [("a", 3, "x"), ("a", 1, "y"), ("a", 2, "z"), ("a", 0, "w")]
    assert run_both_paths(agg("min", 1), data) == [("a", 3, "x"), ("a", 1, "x"), ("a", 1, "x"), ("a", 0, "x")]
    data = [("a", 1, "x"), ("a", 3, "y"), ("a", 2, "z"), ("a", 4, "w")]
    assert run_both_paths(agg("max", 1), data) == [("a", 1, "x"), ("a", 3, "x"), ("a", 3, "x"), ("a", 4, "x")]


def test_min_by_and_max_by_return_whole_record_first_on_ties():
    data = [("a", 3, "x"), ("a", 1, "y"), ("a", 1, "z"), ("a", 2, "w"), ("a", 0, "v")]
    assert run_both_paths(agg("min_by", 1), data) == [
        ("a", 3, "x"),
        ("a", 1, "y"),
        ("a", 1, "y"),
        ("a", 1, "y"),
        ("a", 0, "v"),
    ]
    data = [("a", 1, "x"), ("a", 3, "y"), ("a", 3, "z"), ("a", 2, "w")]
    assert run_both_paths(agg("max_by", 1), data) == [("a", 1, "x"), ("a", 3, "y"), ("a", 3, "y"), ("a", 3, "y")]


def test_aggregations_on_dicts_do_not_mutate_emitted_records():
    data = [{"k": "a", "v": 1, "t": "x"}, {"k": "a", "v": 2, "t": "y"}, {"k": "b", "v": 7, "t": "z"}]
    key = lambda d: d["k"]  # noqa: E731
    got = run_both_paths(agg("sum", "v", key), data)
    assert got == [{"k": "a", "v": 1, "t": "x"}, {"k": "a", "v": 3, "t": "x"}, {"k": "b", "v": 7, "t": "z"}]
    assert data[0] == {"k": "a", "v": 1, "t": "x"}  # input untouched
    assert got[0] is not got[1]
    got = run_both_paths(agg("max", "v", key), data)
    assert got == [{"k": "a", "v": 1, "t": "x"}, {"k": "a", "v": 2, "t": "x"}, {"k": "b", "v": 7, "t": "z"}]
    got = run_both_paths(agg("min_by", "v", key), [{"k": "a", "v": 2, "t": "x"}, {"k": "a", "v": 1, "t": "y"}])
    assert got == [{"k": "a", "v": 2, "t": "x"}, {"k": "a", "v": 1, "t": "y"}]


def test_aggregations_on_lists_namedtuples_and_bare_values():
    got = run_both_paths(agg("sum", 1), [["a", 1], ["a", 2], ["a", 4]])
    assert got == [["a", 1], ["a", 3], ["a", 7]]
    P = namedtuple("P", "k v t")
    got = run_both_paths(agg("sum", "v", lambda p: p.k), [P("a", 1, "x"), P("a", 2, "y")])
    assert got == [P("a", 1, "x"), P("a", 3, "x")] and type(got[1]) is P
    got = run_both_paths(agg("sum", 1), [P("a", 1, "x"), P("a", 2, "y")])
    assert got == [P("a", 1, "x"), P("a", 3, "x")] and type(got[1]) is P
    parity = lambda v: v % 2  # noqa: E731
    assert run_both_paths(agg("sum", None, parity), [1, 2, 3, 4, 5]) == [1, 2, 4, 6, 9]
    assert run_both_paths(agg("min", None, parity), [5, 4, 3, 6, 1]) == [5, 4, 3, 4, 1]
    assert run_both_paths(agg("max_by", None, parity), [5, 4, 3, 6, 7]) == [5, 4, 5, 6, 7]


def test_unknown_aggregation_is_rejected():
    with pytest.raises(ValueError, match="unknown aggregation 'avg'"):
        StreamGroupedAggregateOperator("avg", 0, first)


def test_position_zero_of_a_basic_value_is_the_value_itself():
    parity = lambda v: v % 2  # noqa: E731
    assert run_both_paths(agg("sum", 0, parity), [1, 2, 3, 4, 5]) == [1, 2, 4, 6, 9]
    assert run_both_paths(agg("max", 0, parity), [5, 4, 3, 6, 7]) == [5, 4, 5, 6, 7]
    assert run_both_paths(agg("min_by", 0, len), ["b", "a", "cc", "c"]) == ["b", "a", "cc", "a"]


@pytest.mark.parametrize("kind", ["sum", "min", "max", "min_by", "max_by"])
def test_a_field_a_keys_first_record_lacks_is_an_error_naming_operator_and_field(kind):
    cases = [
        (2, [("a", 1)], r"field position 2 is out of bounds: the record has 2 fields \(\('a', 1\)\)"),
        (3, [["a", 1, 2]], r"field position 3 is out of bounds: the record has 3 fields \(\['a', 1, 2\]\)"),
        (1, [7], r"field position 1 is out of bounds: the record is a basic value \(int\), whose only position is 0"),
        (0, [{"k": 1}], r"field position 0 is out of bounds: the record is a mapping without that key"),
        ("v", [{"k": 1}], r"field 'v' does not exist: the record is a dict without that key"),
        ("v", [("a", 1)], r"field 'v' does not exist: a record of type tuple has no such attribute"),
    ]
    for field, records, why in cases:
        for batched in (False, True):
            op = StreamGroupedAggregateOperator(kind, field, lambda v: 0, name="Totals")
            out = KeyedOneInputStreamOperatorTestHarness(op).open().output
            with pytest.raises(ValueError, match=f"^{kind} 'Totals': {why}"):
                op.process_batch(records) if batched else op.process_element(records[0])
            assert out.records == []


def test_the_field_is_checked_on_the_first_record_of_every_key_also_on_the_pair_fast_path():
    op = StreamGroupedAggregateOperator("sum", 1, first, name="Counts")
    out = KeyedOneInputStreamOperatorTestHarness(op).open().output
    op.process_batch([("a", 1), ("b", 2), ("a", 3)])  # the (key, count) fast path
    with pytest.raises(
        ValueError,
        match=r"sum 'Counts': field position 1 is out of bounds: "
        r"the record has 1 field \(\('c',\)\)",
    ):
        op.process_batch([("b", 1), ("c",)])
    assert out.records == [("a", 1), ("b", 2), ("a", 4), ("b", 3)]
    op = agg("sum", 2)()
    out = KeyedOneInputStreamOperatorTestHarness(op).open().output
    with pytest.raises(ValueError, match="field position 2 is out of bounds: the record has 2 fields"):
        op.process_batch([(1, 10), (1, 20)])  # was (1, 10), (2, 10): the key summed
    assert out.records == []


# -- None keys ------------------------------------------------------------------------


def test_none_key_is_rejected_everywhere():
    ops = [
        StreamGroupedReduceOperator(lambda a, b: a, lambda v: None),
        StreamGroupedAggregateOperator("sum", None, lambda v: None),
        KeyedProcessOperator(lambda v, ctx: None, lambda v: None),
    ]
    for op in ops:
        KeyedOneInputStreamOperatorTestHarness(op).open()
        with pytest.raises(ValueError, match="^Assigned key must not be null!$"):
            op.process_element(1)
        with pytest.raises(ValueError, match="^Assigned key must not be null!$"):
            op.process_batch([1, 2])


# -- keyed state ------------------------------------------------------------------------


class StatefulCounter(KeyedProcessFunction):
    def open(self, runtime_context):
        self.count = runtime_context.get_state(ValueStateDescriptor("count"))
        self.seen = runtime_context.get_list_state(ListStateDescriptor("seen"))
        self.per_value = runtime_context.get_map_state(MapStateDescriptor("per_value"))
        self.total = runtime_context.get_reducing_state(ReducingStateDescriptor("total", lambda a, b: a + b))

    def process_element(self, value, ctx):
        key, n = value
        assert ctx.get_current_key() == key
        c = (self.count.value() or 0) + 1
        self.count.update(c)
        self.seen.add(n)
        self.per_value.put(n, (self.per_value.get(n) or 0) + 1)
        self.total.add(n)
        yield key, c, list(self.seen.get()), self.total.get(), sorted(self.per_value.items())


def test_keyed_state_is_isolated_per_key_and_snapshotted_by_key_group():
    op = KeyedProcessOperator(StatefulCounter(), first)
    harness = KeyedOneInputStreamOperatorTestHarness(op).open()
    out = harness.output
    op.process_batch([("a", 1), ("b", 10)])
    op.process_element(("a", 1))
    op.process_element(("a", 2))
    assert out.records == [
        ("a", 1, [1], 1, [(1, 1)]),
        ("b", 1, [10], 10, [(10, 1)]),
        ("a", 2, [1, 1], 2, [(1, 2)]),
        ("a", 3, [1, 1, 2], 4, [(1, 2), (2, 1)]),
    ]
    backend = op.keyed_state_backend
    assert harness.runtime_context.keyed_state_backend is backend is harness.keyed_state_backend
    kg_a, kg_b = assign_to_key_group("a", 128), assign_to_key_group("b", 128)
    snap = backend.snapshot()
    expected_a = {"count": {"a": 3}, "seen": {"a": [1, 1, 2]}, "per_value": {"a": {1: 2, 2: 1}}, "total": {"a": 4}}
    expected_b = {"count": {"b": 1}, "seen": {"b": [10]}, "per_value": {"b": {10: 1}}, "total": {"b": 10}}
    if kg_a == kg_b:
        assert snap == {kg_a: {name: {**expected_a[name], **expected_b[name]} for name in expected_a}}
    else:
        assert snap == {kg_a: expected_a, kg_b: expected_b}
    # the snapshot does not change with the state (copy-on-write): taken before these records,
    # read after them
    later = backend.snapshot()
    op.process_element(("a", 5))
    op.process_element(("b", 7))
    assert later[kg_a]["seen"]["a"] == [1, 1, 2]
    assert later[kg_a]["per_value"]["a"] == {1: 2, 2: 1}
    assert later[kg_b]["seen"]["b"] == [10]
    assert backend.snapshot()[kg_a]["seen"]["a"] == [1, 1, 2, 5]


def test_state_clear_and_map_state_api():
    backend = HeapKeyedStateBackend((0, 127), 128)
    value = backend.get_or_create_state(ValueStateDescriptor("v"))
    mstate = backend.get_or_create_state(MapStateDescriptor("m"))
    lstate = backend.get_or_create_state(ListStateDescriptor("l"))
    assert backend.get_or_create_state(ValueStateDescriptor("v")) is value
    with pytest.raises(ValueError, match="'v' is a value state"):
        backend.get_or_create_state(ListStateDescriptor("v"))
    with pytest.raises(RuntimeError, match="no current key"):
        value.value()
    backend.set_current_key("k1")
    value.update(5)
    mstate.put_all({"x": 1, "y": 2})
    lstate.update([1, 2])
    backend.set_current_key("k2")
    assert value.value() is None and mstate.is_empty() and lstate.get() == []
    backend.set_current_key("k1")
    assert value.value() == 5 and mstate.contains("x") and sorted(mstate.keys()) == ["x", "y"]
    assert sorted(mstate.values()) == [1, 2]
    mstate.remove("x")
    mstate.remove("y")
    assert mstate.is_empty()
    value.clear()
    lstate.update([])
    assert value.value() is None and lstate.get() == []
    assert backend.snapshot() == {}
    with pytest.raises(ValueError, match="cannot add null"):
        lstate.add(None)


def test_snapshot_restore_rescales_by_key_group():
    keys = [f"key{i}" for i in range(50)]
    whole = HeapKeyedStateBackend((0, 127), 128)
    state = whole.get_or_create_state(ValueStateDescriptor("v"))
    for k in keys:
        whole.set_current_key(k)
        state.update(k.upper())
    snap = whole.snapshot()
    assert sum(len(s["v"]) for s in snap.values()) == 50
    restored = {}
    for i in range(3):
        start_kg, end_kg = key_group_range_for_subtask(128, 3, i)
        part = HeapKeyedStateBackend((start_kg, end_kg), 128)
        part.restore(snap)
        part_state = part.get_or_create_state(ValueStateDescriptor("v"))
        for kg, states in part.snapshot().items():
            assert start_kg <= kg <= end_kg
            for k in states["v"]:
                part.set_current_key(k)
                restored[k] = part_state.value()
    assert restored == {k: k.upper() for k in keys}


def test_key_outside_the_subtask_range_is_reported():
    kg = assign_to_key_group("a", 128)
    other = (kg + 1) % 128
    backend = HeapKeyedStateBackend((other, other), 128)
    with pytest.raises(ValueError, match=f"Key group {kg} is not in KeyGroupRange"):
        backend.set_current_key("a")


def test_key_group_ranges_cover_max_parallelism_exactly_once():
    for p in (1, 2, 3, 7, 128):
        covered = []
        for i in range(p):
            s, e = key_group_range_for_subtask(128, p, i)
            covered.extend(range(s, e + 1))
        assert covered == list(range(128))


# -- timers ---------------------------------------------------------------------------------


class TimerFn(KeyedProcessFunction):
    def process_element(self, value, ctx):
        key, ts = value
        ctx.timer_service().register_event_time_timer(ts)
        ctx.timer_service().register_event_time_timer(ts)  # deduplicated
        if key == "drop":
            ctx.timer_service().delete_event_time_timer(ts)
        return None

    def on_timer(self, timestamp, ctx):
        yield (
            "fired",
            ctx.get_current_key(),
            timestamp,
            ctx.timestamp(),
            ctx.time_domain(),
            ctx.timer_service().current_watermark(),
        )


def test_event_time_timers_fire_on_watermark_in_order_with_their_key():
    op = KeyedProcessOperator(TimerFn(), first)
    harness = KeyedOneInputStreamOperatorTestHarness(op).open()
    out = harness.output
    op.process_batch([("a", 30), ("b", 10), ("a", 20), ("c", 20), ("drop", 5)])
    harness.record_context.timestamp = 1234
    op.process_watermark(15)
    op.process_watermark(25)
    assert out.records == [
        ("fired", "b", 10, 10, TimeDomain.EVENT_TIME, 15),
        ("fired", "a", 20, 20, TimeDomain.EVENT_TIME, 25),
        ("fired", "c", 20, 20, TimeDomain.EVENT_TIME, 25),
    ]
    assert out.timestamps == [10, 20, 20]  # on_timer output carries the timer timestamp
    assert harness.record_context.timestamp == 1234  # restored afterwards
    assert out.watermarks == [15, 25]
    assert harness.num_event_time_timers() == 1
    snap = op.timer_service.snapshot()
    assert snap == {assign_to_key_group("a", 128): {"event": [(30, "a")], "processing": []}}
    op.process_watermark(100)
    assert out.records[-1] == ("fired", "a", 30, 30, TimeDomain.EVENT_TIME, 100)
    assert op.timer_service.num_event_time_timers() == 0


def test_watermark_is_emitted_after_the_timers_it_fires():
    events = []

    class Out:
        def collect(self, v):
            events.append(("record", v))

        def collect_batch(self, vs):
            events.extend(("record", v) for v in vs)

        def collect_side(self, tag, v):
            pass

        def emit_watermark(self, ts):
            events.append(("watermark", ts))

    class Fn(KeyedProcessFunction):
        def process_element(self, value, ctx):
            ctx.timer_service().register_event_time_timer(value)

        def on_timer(self, timestamp, ctx):
            yield timestamp

    op = KeyedProcessOperator(Fn(), lambda v: v)
    KeyedOneInputStreamOperatorTestHarness(op, output=lambda _record_context: Out()).open()
    op.process_element(3)
    op.process_watermark(5)
    assert events == [("record", 3), ("watermark", 5)]


def test_processing_time_timers_with_manual_clock():
    class Fn(KeyedProcessFunction):
        def process_element(self, value, ctx):
            key, delay = value
            ts = ctx.timer_service()
            ts.register_processing_time_timer(ts.current_processing_time() + delay)

        def on_timer(self, timestamp, ctx):
            yield ctx.get_current_key(), timestamp, ctx.time_domain(), ctx.timestamp()
            if ctx.get_current_key() == "again" and timestamp < 300:
                ctx.timer_service().register_processing_time_timer(timestamp + 100)

    op = KeyedProcessOperator(Fn(), first)
    harness = KeyedOneInputStreamOperatorTestHarness(op).open()
    out, clock = harness.output, harness.processing_time_service
    clock.set_current_time(100)
    op.process_element(("a", 50))
    op.process_element(("b", 20))
    op.process_element(("again", 100))
    assert clock.num_pending() == 1  # only the earliest timer is registered physically
    clock.set_current_time(149)
    assert out.records == [("b", 120, TimeDomain.PROCESSING_TIME, 120)]
    assert out.timestamps == [None]
    clock.set_current_time(400)
    assert out.records[1:] == [
        ("a", 150, TimeDomain.PROCESSING_TIME, 150),
        ("again", 200, TimeDomain.PROCESSING_TIME, 200),
        ("again", 300, TimeDomain.PROCESSING_TIME, 300),
    ]
    assert op.timer_service.num_processing_time_timers() == 0
    assert clock.num_pending() == 0


def test_deleted_processing_timer_does_not_fire_and_close_cancels():
    class Fn(KeyedProcessFunction):
        def process_element(self, value, ctx):
            ctx.timer_service().register_processing_time_timer(value[1])
            if value[0] == "x":
                ctx.timer_service().delete_processing_time_timer(value[1])

        def on_timer(self, timestamp, ctx):
            yield ctx.get_current_key()

    op = KeyedProcessOperator(Fn(), first)
    harness = KeyedOneInputStreamOperatorTestHarness(op).open()
    out = harness.output
    harness.process_elements([("x", 10), ("y", 20), ("z", 50)])
    harness.set_processing_time(30)
    assert out.records == ["y"]
    harness.close()
    harness.set_processing_time(100)
    assert out.records == ["y"]


class _RunningCount(KeyedProcessFunction):
    """Per key: none, one or two results per record, each naming the record's timestamp and key;
    odd values also go to a side output."""

    def open(self, runtime_context):
        self.count = runtime_context.get_state(ValueStateDescriptor("count", Types.PICKLED_BYTE_ARRAY()))

    def process_element(self, value, ctx):
        count = (self.count.value() or 0) + 1
        self.count.update(count)
        if value[1] % 2:
            ctx.output(ODD, value)
        for i in range(value[1] % 3):
            yield (ctx.get_current_key(), value[1], count, ctx.timestamp(), i)


ODD = OutputTag("odd")


def test_a_timestamped_run_through_a_keyed_process_function_gives_what_record_by_record_gives():
    """Every result with its record's timestamp, in order; side outputs, state and the current
    key as record by record."""
    data = [(k, v) for v, k in enumerate("abcabbacbbcaaa" * 3)]
    stamps = [1000 + 7 * i for i in range(len(data))]
    per_record = KeyedOneInputStreamOperatorTestHarness(KeyedProcessOperator(_RunningCount(), first)).open()
    for value, ts in zip(data, stamps):
        per_record.process_element(value, timestamp=ts)
    batched = KeyedOneInputStreamOperatorTestHarness(KeyedProcessOperator(_RunningCount(), first)).open()
    batched.process_timestamped(list(zip(data[:9], stamps[:9])))
    batched.process_timestamped(list(zip(data[9:], stamps[9:])))
    expected = []
    counts = {}
    for (key, v), ts in zip(data, stamps):
        counts[key] = counts.get(key, 0) + 1
        expected += [((key, v, counts[key], ts, i), ts) for i in range(v % 3)]
    assert batched.extract_output_with_timestamps() == per_record.extract_output_with_timestamps() == expected
    assert batched.side_output(ODD.tag_id) == per_record.side_output(ODD.tag_id) == [d for d in data if d[1] % 2]
    assert batched.record_context.timestamp is None  # restored after the run


class _Join(KeyedCoProcessFunction):
    def open(self, runtime_context):
        self.left = runtime_context.get_list_state(ListStateDescriptor("left", Types.PICKLED_BYTE_ARRAY()))

    def process_element1(self, value, ctx):
        self.left.add(value[1])

    def process_element2(self, value, ctx):
        for left in self.left.get() or ():
            yield (ctx.get_current_key(), left, value[1], ctx.timestamp())


def test_timestamped_runs_on_both_inputs_of_a_keyed_co_process_function_give_what_record_by_record_gives():
    lefts = [(k, v) for v, k in enumerate("abcab")]
    rights = [(k, 100 + v) for v, k in enumerate("bacca")]
    outs = []
    for batched in (False, True):
        op = KeyedCoProcessOperator(_Join(), first, first)
        harness = KeyedTwoInputStreamOperatorTestHarness(op).open()
        if batched:
            op.process_timestamped_batch1(lefts, [10 + i for i in range(5)])
            op.process_timestamped_batch2(rights, [50 + i for i in range(5)])
        else:
            for i, value in enumerate(lefts):
                harness.process_element1(value, timestamp=10 + i)
            for i, value in enumerate(rights):
                harness.process_element2(value, timestamp=50 + i)
        outs.append(harness.extract_output_with_timestamps())
    expected = [
        ((key, left, right, 50 + i), 50 + i) for i, (key, right) in enumerate(rights) for k, left in lefts if k == key
    ]
    assert outs[0] == outs[1] == expected
