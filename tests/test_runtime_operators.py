"""End to end: jobs of the DataStream operators, checked against plain Python on the same data."""

from __future__ import annotations

from collections import Counter, defaultdict

import pytest

from raylink.api import OutputTag
from raylink.api.functions import (
    CoMapFunction,
    FlatMapFunction,
    KeyedCoProcessFunction,
    MapFunction,
    ProcessFunction,
)
from raylink.api.state import ValueStateDescriptor
from raylink.tests.runtime_jobs import make_env

pytestmark = pytest.mark.timeout(60)


def per_key(records, key=lambda r: r[0]):
    """key -> records of that key in the order they were collected."""
    grouped = defaultdict(list)
    for r in records:
        grouped[key(r)].append(r)
    return dict(grouped)


# -- streaming word count -------------------------------------------------------------------------------
VOCAB = ["to", "be", "or", "not", "that", "is", "the", "question", "whether", "tis", "nobler", "in", "mind"]
NUM_LINES = 700


def make_line(i):
    return " ".join(VOCAB[(i * 7 + j * 5 + j * j) % len(VOCAB)] for j in range(1 + i % 6))


class Tokenizer(FlatMapFunction):
    def flat_map(self, line):
        for word in line.split():
            yield (word, 1)


@pytest.mark.parametrize("parallelism", [1, 2, 3, 4])
def test_streaming_word_count_emits_every_rolling_count_once(target, parallelism):
    env = make_env(target, parallelism)
    counts = (
        env.from_sequence(0, NUM_LINES - 1).map(make_line).flat_map(Tokenizer()).key_by(lambda pair: pair[0]).sum(1)
    )
    out = list(counts.execute_and_collect())

    totals = Counter(w for i in range(NUM_LINES) for w in make_line(i).split())
    assert sum(totals.values()) == len(out)
    got = per_key(out)
    assert sorted(got) == sorted(totals)
    for word, n in totals.items():
        # all counts of a key come from one subtask, in order: (w, 1), (w, 2), …, (w, n)
        assert got[word] == [(word, c) for c in range(1, n + 1)], word


# -- stateless chains ---------------------------------------------------------------------------------------
class Offset(MapFunction):
    """A function object with a lifecycle: ``open`` must run before the first record."""

    def __init__(self, offset):
        self.offset = offset
        self.opened = False

    def open(self, runtime_context):
        self.opened = True

    def map(self, value):
        assert self.opened, "map() before open()"
        return value + self.offset


def fan_out(x):
    return [x, -x] if x % 4 == 0 else [x]


@pytest.mark.parametrize("chaining", [True, False], ids=["chained", "unchained"])
def test_map_filter_flat_map_chain(target, chaining):
    env = make_env(target, 2)
    if not chaining:
        env.disable_operator_chaining()
    out = list(
        env.from_sequence(1, 5000)
        .map(lambda x: x * 3)
        .filter(lambda x: x % 2 == 0)
        .flat_map(fan_out)
        .map(Offset(1))
        .execute_and_collect()
    )
    expected = [y + 1 for x in range(1, 5001) if (x * 3) % 2 == 0 for y in fan_out(x * 3)]
    assert sorted(out) == sorted(expected)


def test_chain_across_parallelism_changes(target):
    env = make_env(target, 2)
    out = list(
        env.from_sequence(0, 2999)
        .map(lambda x: (x % 10, x))
        .set_parallelism(3)
        .filter(lambda t: t[0] != 3)
        .set_parallelism(1)
        .flat_map(lambda t: [t[1]] * (t[0] % 3))
        .set_parallelism(4)
        .map(lambda x: x * 2)
        .execute_and_collect()
    )
    expected = [x * 2 for x in range(3000) if x % 10 != 3 for _ in range((x % 10) % 3)]
    assert sorted(out) == sorted(expected)


# -- side outputs -------------------------------------------------------------------------------------------
FIZZ = OutputTag("fizz")
BUZZ = OutputTag("buzz")


class FizzBuzz(ProcessFunction):
    """Multiples of 3 to FIZZ (yielded tag pairs), of 5 to BUZZ (ctx.output); the rest main."""

    def process_element(self, value, ctx):
        if value % 3 == 0:
            yield FIZZ, value
        if value % 5 == 0:
            ctx.output(BUZZ, value)
        if value % 3 and value % 5:
            yield value


def test_process_with_side_outputs_consumed_downstream(target):
    env = make_env(target, 2)
    split = env.from_sequence(1, 3000).process(FizzBuzz()).name("fizzbuzz")
    fizz = split.get_side_output(FIZZ).map(lambda v: ("fizz", v))
    buzz = split.get_side_output(BUZZ).rebalance().map(lambda v: ("buzz", v)).set_parallelism(3)
    main = split.key_by(lambda v: v % 4).map(lambda v: ("main", v))
    out = list(fizz.union(buzz, main).execute_and_collect())

    expected = (
        [("fizz", v) for v in range(1, 3001) if v % 3 == 0]
        + [("buzz", v) for v in range(1, 3001) if v % 5 == 0]
        + [("main", v) for v in range(1, 3001) if v % 3 and v % 5]
    )
    assert Counter(out) == Counter(expected)


def test_unconsumed_side_output_is_dropped(target):
    env = make_env(target, 2)
    out = list(env.from_sequence(1, 300).process(FizzBuzz()).execute_and_collect())
    assert sorted(out) == [v for v in range(1, 301) if v % 3 and v % 5]


# -- union / connect ------------------------------------------------------------------------------------------
def test_union_of_three_streams(target):
    env = make_env(target, 2)
    a = env.from_sequence(1, 500)
    b = env.from_collection([f"s{i}" for i in range(300)])
    c = env.from_sequence(1000, 1400).map(lambda x: -x).set_parallelism(3)
    out = list(a.union(b, c).map(lambda v: ("v", v)).execute_and_collect())
    expected = [("v", v) for v in list(range(1, 501)) + [f"s{i}" for i in range(300)] + [-x for x in range(1000, 1401)]]
    assert Counter(out) == Counter(expected)


class IntOrWord(CoMapFunction):
    def map1(self, value):
        return ("int", value * 2)

    def map2(self, value):
        return ("str", value.upper())


WORDS = [f"w{i % 17}x{i}" for i in range(400)]


def test_connect_co_map(target):
    env = make_env(target, 2)
    ints = env.from_sequence(1, 600)
    words = env.from_collection(WORDS)
    out = list(ints.connect(words).map(IntOrWord()).execute_and_collect())
    expected = [("int", x * 2) for x in range(1, 601)] + [("str", w.upper()) for w in WORDS]
    assert Counter(out) == Counter(expected)


def test_connect_co_flat_map_with_a_pair_of_callables(target):
    env = make_env(target, 3)
    ints = env.from_sequence(1, 600)
    words = env.from_collection(WORDS).rebalance().map(lambda w: w).set_parallelism(2)
    out = list(ints.connect(words).flat_map((lambda x: [x] * (x % 3), lambda w: list(w[:2]))).execute_and_collect())
    expected = [x for x in range(1, 601) for _ in range(x % 3)] + [ch for w in WORDS for ch in w[:2]]
    assert Counter(out) == Counter(expected)


class CountBothSides(KeyedCoProcessFunction):
    """Per key: a running count and sum over both inputs, kept in keyed state."""

    def open(self, runtime_context):
        self.count = runtime_context.get_state(ValueStateDescriptor("count"))
        self.total = runtime_context.get_state(ValueStateDescriptor("total"))

    def _add(self, amount, side, ctx):
        count = (self.count.value() or 0) + 1
        total = (self.total.value() or 0) + amount
        self.count.update(count)
        self.total.update(total)
        yield (ctx.get_current_key(), side, count, total)

    def process_element1(self, value, ctx):
        return self._add(value[1], "L", ctx)

    def process_element2(self, value, ctx):
        return self._add(int(value.split(":")[1]), "R", ctx)


def test_keyed_connect_with_keyed_co_process_function_state(target):
    env = make_env(target, 3)
    left = env.from_sequence(0, 699).map(lambda x: (f"k{x % 7}", x)).set_parallelism(2)
    right = env.from_collection([f"k{i % 5}:{i}" for i in range(400)])
    out = list(
        left.connect(right)
        .key_by(lambda t: t[0], lambda s: s.split(":")[0])
        .process(CountBothSides())
        .execute_and_collect()
    )

    lefts = Counter(f"k{x % 7}" for x in range(700))
    rights = Counter(f"k{i % 5}" for i in range(400))
    sums = Counter()
    for x in range(700):
        sums[f"k{x % 7}"] += x
    for i in range(400):
        sums[f"k{i % 5}"] += i
    got = per_key(out)
    assert sorted(got) == sorted(set(lefts) | set(rights))
    for key, records in got.items():
        n = lefts[key] + rights[key]
        assert [r[2] for r in records] == list(range(1, n + 1)), key  # one count per record, in order
        assert Counter(r[1] for r in records) == Counter(
            {"L": lefts[key], "R": rights[key]} if rights[key] else {"L": lefts[key]}
        )
        assert records[-1][3] == sums[key]  # the last running sum is the key's total, in any order


# -- keyed reduce and aggregations ------------------------------------------------------------------------------
SHUFFLED = [(i * 7919) % 1000 for i in range(1000)]


@pytest.mark.parametrize("parallelism", [1, 3])
def test_keyed_reduce_emits_running_sums_per_key(target, parallelism):
    env = make_env(target, parallelism)
    out = list(
        env.from_collection(SHUFFLED)
        .map(lambda x: (x % 7, x))
        .set_parallelism(1)  # keep the collection's order up to key_by
        .key_by(lambda t: t[0])
        .reduce(lambda a, b: (a[0], a[1] + b[1]))
        .execute_and_collect()
    )
    expected = defaultdict(list)
    running = Counter()
    for x in SHUFFLED:
        running[x % 7] += x
        expected[x % 7].append((x % 7, running[x % 7]))
    assert per_key(out) == dict(expected)


TUPLES = [(f"k{i % 4}", (i * 37) % 101, i) for i in range(400)]


def reference_aggregation(agg, records, pos=1):
    """Flink's SumAggregator / ComparableAggregator on tuple position ``pos``."""
    state = {}
    out = defaultdict(list)
    for r in records:
        key = r[0]
        acc = state.get(key)
        if acc is None:
            acc = r
        elif agg == "sum":
            acc = acc[:pos] + (acc[pos] + r[pos],) + acc[pos + 1 :]
        elif agg == "min":
            acc = acc if acc[pos] <= r[pos] else acc[:pos] + (r[pos],) + acc[pos + 1 :]
        elif agg == "max":
            acc = acc if acc[pos] >= r[pos] else acc[:pos] + (r[pos],) + acc[pos + 1 :]
        elif agg == "min_by":
            acc = acc if acc[pos] <= r[pos] else r
        elif agg == "max_by":
            acc = acc if acc[pos] >= r[pos] else r
        state[key] = acc
        out[key].append(acc)
    return dict(out)


@pytest.mark.parametrize("agg", ["sum", "min", "max", "min_by", "max_by"])
def test_keyed_aggregations_on_tuples(target, agg):
    env = make_env(target, 3)
    keyed = env.from_collection(TUPLES).key_by(lambda t: t[0])
    out = list(getattr(keyed, agg)(1).execute_and_collect())
    assert per_key(out) == reference_aggregation(agg, TUPLES)


def test_reference_aggregation_tie_and_field_semantics():
    rows = [("a", 5, 0), ("a", 3, 1), ("a", 3, 2), ("a", 9, 3)]
    assert reference_aggregation("min", rows)["a"][-1] == ("a", 3, 0)  # other fields of the first record
    assert reference_aggregation("min_by", rows)["a"][-1] == ("a", 3, 1)  # first record holding the min
    assert reference_aggregation("max_by", rows)["a"][-1] == ("a", 9, 3)
    assert reference_aggregation("sum", rows)["a"][-1] == ("a", 20, 0)
