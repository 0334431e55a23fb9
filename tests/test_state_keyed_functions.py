"""Keyed state from the functions of a keyed stream, at the operator level: which operator a
function gets (only functions that can reach their runtime context pay for setting the
key), the record-at-a-time and batch paths agreeing, every state kind (with and without a
TTL) surviving snapshot -> restore, also rescaled, and the state API PyFlink programs use
(``in``, ``[]``, ``del``, iteration, ``AggregatingState``)."""

from __future__ import annotations

import cloudpickle
import pytest

import raylink.api as api
import raylink.api.functions as api_functions
import raylink.api.state as api_state
from raylink.api.functions import (
    AggregateFunction,
    CoFlatMapFunction,
    CoMapFunction,
    FilterFunction,
    FlatMapFunction,
    MapFunction,
    ReduceFunction,
)
from raylink.api.state import (
    AggregatingStateDescriptor,
    ListStateDescriptor,
    MapStateDescriptor,
    ReducingStateDescriptor,
    StateTtlConfig,
    ValueStateDescriptor,
)
from raylink.api.time import Time
from raylink.core.key_groups import assign_to_key_group
from raylink.graph.operator_spec import OperatorSpec
from raylink.operators.basic import (
    KeyedStreamFilter,
    KeyedStreamFlatMap,
    KeyedStreamMap,
    StreamFilter,
    StreamFlatMap,
    StreamMap,
)
from raylink.operators.co import CoStreamFlatMap, CoStreamMap, KeyedCoStreamFlatMap, KeyedCoStreamMap
from raylink.operators.factory import create_operator
from raylink.operators.reduce import StreamGroupedReduceOperator, StreamGroupedReduceOperatorWithKeyedState
from raylink.state.state_backend import HeapKeyedStateBackend, key_group_range_for_subtask
from raylink.tests.harness import KeyedOneInputStreamOperatorTestHarness, KeyedTwoInputStreamOperatorTestHarness
from raylink.tests.runtime_jobs import cause_chain, make_env

pytestmark = pytest.mark.timeout(60)


def first(value):
    return value[0]


class Counting(MapFunction):
    def open(self, runtime_context):
        self.count = runtime_context.get_state(ValueStateDescriptor("count"))

    def map(self, value):
        count = (self.count.value() or 0) + 1
        self.count.update(count)
        return (value[0], count)


class PlainMap(MapFunction):  # no open of its own: cannot reach keyed state
    def map(self, value):
        return value


class Stateful:
    """Duck-typed functions with an ``open`` of their own (they may use keyed state)."""

    def open(self, runtime_context):
        pass

    def flat_map(self, value):
        return [value]

    def filter(self, value):
        return True

    def reduce(self, a, b):
        return a

    def map1(self, value):
        return value

    map2 = map1
    flat_map1 = flat_map2 = flat_map


# -- which operator a function gets --------------------------------------------------------------


@pytest.mark.parametrize(
    "kind, plain, keyed",
    [
        ("map", StreamMap, KeyedStreamMap),
        ("flat_map", StreamFlatMap, KeyedStreamFlatMap),
        ("filter", StreamFilter, KeyedStreamFilter),
    ],
)
def test_only_functions_that_can_reach_keyed_state_get_the_key_setting_operator(kind, plain, keyed):
    stateful = Counting() if kind == "map" else Stateful()
    assert type(create_operator(OperatorSpec(kind, stateful, key_selector=first))) is keyed
    for function in (lambda v: v, PlainMap(), len):
        assert type(create_operator(OperatorSpec(kind, function, key_selector=first))) is plain
    assert type(create_operator(OperatorSpec(kind, stateful))) is plain  # not keyed: no key to set


def test_reduce_and_keyed_co_functions_pick_their_variant_the_same_way():
    assert (
        type(create_operator(OperatorSpec("reduce", Stateful(), key_selector=first)))
        is StreamGroupedReduceOperatorWithKeyedState
    )
    assert (
        type(create_operator(OperatorSpec("reduce", lambda a, b: a, key_selector=first))) is StreamGroupedReduceOperator
    )
    keyed = {"key_selector1": first, "key_selector2": first}
    assert type(create_operator(OperatorSpec("co_map", Stateful(), params=keyed))) is KeyedCoStreamMap
    assert type(create_operator(OperatorSpec("co_flat_map", Stateful(), params=keyed))) is KeyedCoStreamFlatMap
    assert type(create_operator(OperatorSpec("co_map", (len, len), params=keyed))) is CoStreamMap
    assert type(create_operator(OperatorSpec("co_flat_map", Stateful()))) is CoStreamFlatMap


def test_a_stateful_function_on_a_stream_that_is_not_keyed_fails_naming_keyed_streams():
    env = make_env("local", 1)
    with pytest.raises(Exception) as info:
        list(env.from_collection([("a", 1)]).map(Counting()).execute_and_collect())
    messages = " ".join(str(e) for e in cause_chain(info.value))
    assert "Keyed state can only be used on a 'keyed stream'" in messages


class OpensWithoutState(MapFunction):
    def open(self, runtime_context):
        self.subtask = runtime_context.get_index_of_this_subtask()

    def map(self, value):
        return (value[0], self.subtask)


class GetsStateLazily(MapFunction):
    def open(self, runtime_context):
        self.runtime_context = runtime_context
        self.count = None

    def map(self, value):
        if self.count is None:
            self.count = self.runtime_context.get_state(ValueStateDescriptor("count"))
        count = (self.count.value() or 0) + 1
        self.count.update(count)
        return (value[0], count)


class HidesItsContext(MapFunction):
    def open(self, runtime_context):
        self.get_state = runtime_context.get_state  # a bound method, not the context itself

    def map(self, value):
        return self.get_state(ValueStateDescriptor("late")).value()


def test_after_open_the_key_is_set_only_for_functions_holding_state_or_their_context():
    plain = KeyedOneInputStreamOperatorTestHarness(KeyedStreamMap(OpensWithoutState(), first)).open()
    plain.process_elements([("a", 1), ("b", 2)])
    assert not plain.operator._sets_key and plain.extract_output_values() == [("a", 0), ("b", 0)]

    lazy = KeyedOneInputStreamOperatorTestHarness(KeyedStreamMap(GetsStateLazily(), first)).open()
    lazy.process_elements([("a", 1), ("b", 1), ("a", 1)])
    assert lazy.operator._sets_key and lazy.extract_output_values() == [("a", 1), ("b", 1), ("a", 2)]

    hidden = KeyedOneInputStreamOperatorTestHarness(KeyedStreamMap(HidesItsContext(), first, name="Hidden Map"))
    hidden.open()
    with pytest.raises(
        RuntimeError,
        match=r"operator 'Hidden Map': keyed state 'late' was requested after "
        r"open\(\) .* get keyed state in open\(\)",
    ):
        hidden.process_element(("a", 1))


# -- the per-record and batch paths agree ----------------------------------------------------------


class Dedup(FilterFunction):
    def open(self, runtime_context):
        self.seen = runtime_context.get_map_state(MapStateDescriptor("seen"))

    def filter(self, value):
        if value[1] in self.seen:
            return False
        self.seen[value[1]] = True
        return True


class Windowed(FlatMapFunction):
    def open(self, runtime_context):
        self.items = runtime_context.get_list_state(ListStateDescriptor("items"))

    def flat_map(self, value):
        self.items.add(value[1])
        items = list(self.items)
        if len(items) == 2:
            self.items.clear()
            yield (value[0], tuple(items))


class CountBoth(CoMapFunction):
    def open(self, runtime_context):
        self.count = runtime_context.get_state(ValueStateDescriptor("count"))

    def _next(self, key, side):
        count = (self.count.value() or 0) + 1
        self.count.update(count)
        return (side, key, count)

    def map1(self, value):
        return self._next(value[0], 1)

    def map2(self, value):
        return self._next(value[0], 2)


class CountBothFlat(CoFlatMapFunction):
    def open(self, runtime_context):
        self.count = runtime_context.get_reducing_state(ReducingStateDescriptor("n", lambda a, b: a + b))

    def flat_map1(self, value):
        self.count.add(1)
        yield (value[0], self.count.get())

    def flat_map2(self, value):
        self.count.add(10)
        yield (value[0], self.count.get())


DATA = [("a", 1), ("b", 1), ("a", 1), ("a", 2), ("b", 3), ("c", 1), ("a", 3), ("b", 1)]


def run_one_input(make):
    one_by_one = KeyedOneInputStreamOperatorTestHarness(make()).open()
    for v in DATA:
        one_by_one.process_element(v)
    batched = KeyedOneInputStreamOperatorTestHarness(make()).open()
    batched.process_elements(DATA[:3])
    batched.process_elements(DATA[3:])
    assert one_by_one.extract_output_values() == batched.extract_output_values()
    return one_by_one.extract_output_values()


def test_keyed_map_flat_map_and_filter_see_their_keys_state_record_by_record_and_in_batches():
    assert run_one_input(lambda: KeyedStreamMap(Counting(), first)) == [
        ("a", 1),
        ("b", 1),
        ("a", 2),
        ("a", 3),
        ("b", 2),
        ("c", 1),
        ("a", 4),
        ("b", 3),
    ]
    assert run_one_input(lambda: KeyedStreamFilter(Dedup(), first)) == [
        ("a", 1),
        ("b", 1),
        ("a", 2),
        ("b", 3),
        ("c", 1),
        ("a", 3),
    ]
    assert run_one_input(lambda: KeyedStreamFlatMap(Windowed(), first)) == [("a", (1, 1)), ("b", (1, 3)), ("a", (2, 3))]


def test_keyed_co_map_and_co_flat_map_share_a_keys_state_between_both_inputs():
    for make, want in [
        (
            lambda: KeyedCoStreamMap(CountBoth(), first, first),
            [(1, "a", 1), (1, "b", 1), (2, "a", 2), (2, "b", 2), (1, "a", 3)],
        ),
        (
            lambda: KeyedCoStreamFlatMap(CountBothFlat(), first, first),
            [("a", 1), ("b", 1), ("a", 11), ("b", 11), ("a", 12)],
        ),
    ]:
        one_by_one = KeyedTwoInputStreamOperatorTestHarness(make()).open()
        one_by_one.process_element1(("a", 0))
        one_by_one.process_element1(("b", 0))
        one_by_one.process_element2(("a", 0))
        one_by_one.process_element2(("b", 0))
        one_by_one.process_element1(("a", 0))
        batched = KeyedTwoInputStreamOperatorTestHarness(make()).open()
        batched.process_elements1([("a", 0), ("b", 0)])
        batched.process_elements2([("a", 0), ("b", 0)])
        batched.process_elements1([("a", 0)])
        assert one_by_one.extract_output_values() == want
        assert batched.extract_output_values() == want


# -- every state kind through a checkpoint ------------------------------------------------------------


class Average(AggregateFunction):
    def create_accumulator(self):
        return [0, 0]

    def add(self, value, accumulator):
        accumulator[0] += value  # mutates the accumulator in place: snapshots must copy it
        accumulator[1] += 1
        return accumulator

    def get_result(self, accumulator):
        return accumulator[0] / accumulator[1]

    def merge(self, a, b):
        return [a[0] + b[0], a[1] + b[1]]


def long_ttl():
    return StateTtlConfig.new_builder(Time.hours(1)).cleanup_full_snapshot().build()


class EveryKind(MapFunction):
    """Writes ``value`` into all five state kinds (each with and without a TTL); a record
    ``(key, None)`` only reads them: the output is what the key's states hold."""

    def open(self, runtime_context):
        self.states = []
        for ttl in (False, True):
            suffix = "-ttl" if ttl else ""
            descriptors = [
                ValueStateDescriptor("value" + suffix),
                ListStateDescriptor("list" + suffix),
                MapStateDescriptor("map" + suffix),
                ReducingStateDescriptor("reducing" + suffix, lambda a, b: a + b),
                AggregatingStateDescriptor("aggregating" + suffix, Average()),
            ]
            if ttl:
                for descriptor in descriptors:
                    descriptor.enable_time_to_live(long_ttl())
            ctx = runtime_context
            self.states.append(
                (
                    ctx.get_state(descriptors[0]),
                    ctx.get_list_state(descriptors[1]),
                    ctx.get_map_state(descriptors[2]),
                    ctx.get_reducing_state(descriptors[3]),
                    ctx.get_aggregating_state(descriptors[4]),
                )
            )

    def map(self, record):
        key, value = record
        seen = []
        for value_state, list_state, map_state, reducing, aggregating in self.states:
            if value is not None:
                value_state.update(value)
                list_state.add(value)
                map_state[value % 3] = value
                reducing.add(value)
                aggregating.add(value)
            seen.append(
                (value_state.value(), list(list_state), sorted(map_state.items()), reducing.get(), aggregating.get())
            )
        assert seen[0] == seen[1], "a long TTL changes nothing"
        return (key, seen[0])


def model_of(records):
    """What EveryKind reports for each key after ``records``."""
    state = {}
    for key, value in records:
        values = state.setdefault(key, [])
        values.append(value)
    report = {}
    for key, values in state.items():
        report[key] = (
            values[-1],
            list(values),
            sorted({v % 3: v for v in values}.items()),
            sum(values),
            sum(values) / len(values),
        )
    return report


RECORDS = [(f"k{i % 9}", (i * 7) % 13 + 1) for i in range(60)]


@pytest.mark.parametrize("parallelism, new_parallelism", [(1, 1), (2, 3), (3, 1)])
def test_every_state_kind_with_and_without_ttl_survives_snapshot_and_restore(parallelism, new_parallelism):
    def subtask_of(key, p):
        kg = assign_to_key_group(key, 128)
        return next(
            i
            for i in range(p)
            if key_group_range_for_subtask(128, p, i)[0] <= kg <= key_group_range_for_subtask(128, p, i)[1]
        )

    ops = [
        KeyedOneInputStreamOperatorTestHarness(
            KeyedStreamMap(EveryKind(), first), subtask_index=i, parallelism=parallelism
        ).open()
        for i in range(parallelism)
    ]
    cut = 40
    for record in RECORDS[:cut]:
        ops[subtask_of(record[0], parallelism)].process_element(record)
    snapshots = [cloudpickle.loads(cloudpickle.dumps(harness.snapshot(1))) for harness in ops]
    for record in RECORDS[cut : cut + 5]:  # after the checkpoint: lost by the failover
        ops[subtask_of(record[0], parallelism)].process_element(record)

    restored = [
        KeyedOneInputStreamOperatorTestHarness(
            KeyedStreamMap(EveryKind(), first), subtask_index=i, parallelism=new_parallelism
        ).open(restore=snapshots)
        for i in range(new_parallelism)
    ]
    keys = sorted({k for k, _ in RECORDS})
    for key in keys:  # read only
        restored[subtask_of(key, new_parallelism)].process_element((key, None))
    for record in RECORDS[cut:]:
        restored[subtask_of(record[0], new_parallelism)].process_element(record)
    first_reports, last_reports = {}, {}
    for harness in restored:
        for key, report in harness.extract_output_values():
            first_reports.setdefault(key, report)
            last_reports[key] = report
    assert first_reports == model_of(RECORDS[:cut])  # what the checkpoint held, on any subtask
    assert last_reports == model_of(RECORDS)  # and the records after it carry on from there


# -- the state API ---------------------------------------------------------------------------------


def test_map_and_list_state_speak_pythons_container_protocols():
    backend = HeapKeyedStateBackend((0, 127), 128)
    backend.set_current_key("k")
    m = backend.get_or_create_state(MapStateDescriptor("m"))
    m["x"] = 1
    m.put("y", 2)
    assert "x" in m and "z" not in m and m["y"] == 2 and sorted(m) == ["x", "y"]
    del m["x"]
    assert list(m.items()) == [("y", 2)] and not m.is_empty()
    lst = backend.get_or_create_state(ListStateDescriptor("l"))
    lst.add_all([1, 2])
    assert list(lst) == [1, 2]
    backend.set_current_key("other")
    assert list(m) == [] and m.is_empty() and list(lst) == []


def test_descriptors_and_state_classes_are_where_pyflink_has_them():
    descriptor = AggregatingStateDescriptor("avg", Average(), None)
    assert descriptor.get_name() == "avg" and isinstance(descriptor.get_agg_function(), Average)
    assert ReducingStateDescriptor("r", max).get_reduce_function() is max
    with pytest.raises(TypeError, match="needs a create_accumulator"):
        AggregatingStateDescriptor("bad", object())
    for name in (
        "StateTtlConfig",
        "AggregatingStateDescriptor",
        "AggregatingState",
        "MapState",
        "ValueState",
        "ListState",
        "ReducingState",
        "ReducingStateDescriptor",
    ):
        assert getattr(api, name) is getattr(api_state, name)
    assert api.AggregateFunction is api_functions.AggregateFunction is AggregateFunction
    assert issubclass(ReduceFunction, api_functions.Function)
