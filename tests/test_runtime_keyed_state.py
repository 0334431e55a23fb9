"""Keyed state end to end, from every function of a keyed stream (PyFlink's programs): a
``MapFunction`` / ``FlatMapFunction`` / ``FilterFunction`` / ``ReduceFunction`` of a
``KeyedStream`` and the functions of keyed ``ConnectedStreams`` get value, list, map,
reducing and aggregating state through ``runtime_context`` in ``open``, scoped to the
record's key; state with a time-to-live expires on the wall clock. Every result is
compared with plain Python computed here on the same records."""

from __future__ import annotations

import threading
import time
from collections import Counter, defaultdict

import pytest

from raylink.api import (
    AggregateFunction,
    AggregatingStateDescriptor,
    CoFlatMapFunction,
    CoMapFunction,
    FilterFunction,
    FlatMapFunction,
    ListStateDescriptor,
    MapFunction,
    MapStateDescriptor,
    ReduceFunction,
    ReducingStateDescriptor,
    StateTtlConfig,
    Time,
    Types,
    ValueStateDescriptor,
)
from raylink.tests.runtime_jobs import make_env

pytestmark = pytest.mark.timeout(120)

KEYS = [f"k{i}" for i in range(7)]
RECORDS = [(KEYS[(i * 5 + i // 3) % len(KEYS)], (i * 37) % 11) for i in range(240)]


def first(record):
    return record[0]


def per_key_in_order(records):
    grouped = defaultdict(list)
    for key, value in records:
        grouped[key].append(value)
    return grouped


# -- map / flat_map / filter of a KeyedStream -------------------------------------------------------------


class CountPerKey(MapFunction):
    def open(self, runtime_context):
        self.count = runtime_context.get_state(ValueStateDescriptor("count", Types.INT()))

    def map(self, value):
        count = (self.count.value() or 0) + 1
        self.count.update(count)
        return ("map", value[0], count)


class SumOfEveryThird(FlatMapFunction):
    """Buffers a key's values in a ListState; every third one emits their sum and starts over."""

    def open(self, runtime_context):
        self.buffer = runtime_context.get_list_state(ListStateDescriptor("buffer", Types.INT()))

    def flat_map(self, value):
        self.buffer.add(value[1])
        values = list(self.buffer.get())
        if len(values) == 3:
            self.buffer.clear()
            yield ("flat_map", value[0], sum(values))


class FirstOccurrence(FilterFunction):
    """Keeps a record the first time its value shows up for its key (a MapState as a set)."""

    def open(self, runtime_context):
        self.seen = runtime_context.get_map_state(MapStateDescriptor("seen", Types.INT(), Types.BOOLEAN()))

    def filter(self, value):
        if value[1] in self.seen:
            return False
        self.seen[value[1]] = True
        return True


def expected_map_flat_map_filter(records):
    out = []
    for key, values in per_key_in_order(records).items():
        out += [("map", key, n) for n in range(1, len(values) + 1)]
        out += [("flat_map", key, sum(values[i : i + 3])) for i in range(0, len(values) - 2, 3)]
        seen = set()
        for v in values:
            if v not in seen:
                seen.add(v)
                out.append(("filter", key, v))
    return Counter(out)


def test_map_flat_map_and_filter_of_a_keyed_stream_use_state_of_the_records_key(target, state_backend):
    env = make_env(target, 2)
    keyed = env.from_collection(RECORDS).key_by(first)
    mapped = keyed.map(CountPerKey())
    flat = keyed.flat_map(SumOfEveryThird())
    kept = keyed.filter(FirstOccurrence()).map(lambda r: ("filter", r[0], r[1]))
    got = Counter(mapped.union(flat, kept).execute_and_collect())
    assert got == expected_map_flat_map_filter(RECORDS)


# -- reduce with its own state ---------------------------------------------------------------------------


class Average(AggregateFunction):
    def create_accumulator(self):
        return (0, 0)

    def add(self, value, accumulator):
        return (accumulator[0] + value, accumulator[1] + 1)

    def get_result(self, accumulator):
        return accumulator[0] / accumulator[1]

    def merge(self, a, b):
        return (a[0] + b[0], a[1] + b[1])


class SumWithStatistics(ReduceFunction):
    """Rolling sum; also the average (AggregatingState) and maximum (ReducingState) of the
    values it was handed as the second argument, per key."""

    def open(self, runtime_context):
        self.average = runtime_context.get_aggregating_state(
            AggregatingStateDescriptor("average", Average(), Types.PICKLED_BYTE_ARRAY())
        )
        self.maximum = runtime_context.get_reducing_state(ReducingStateDescriptor("maximum", max, Types.INT()))

    def reduce(self, a, b):
        self.average.add(b[1])
        self.maximum.add(b[1])
        return (a[0], a[1] + b[1], self.average.get(), self.maximum.get())


def test_a_reduce_function_keeps_aggregating_and_reducing_state_per_key(target, state_backend):
    env = make_env(target, 2)
    got = (
        env.from_collection([(key, value, None, None) for key, value in RECORDS])
        .key_by(first)
        .reduce(SumWithStatistics())
        .execute_and_collect()
    )
    want = []
    for key, values in per_key_in_order(RECORDS).items():
        want.append((key, values[0], None, None))  # a key's first record is emitted as it is
        for n in range(1, len(values)):
            later = values[1 : n + 1]
            want.append((key, sum(values[: n + 1]), sum(later) / len(later), max(later)))
    assert Counter(got) == Counter(want)


# -- keyed ConnectedStreams -----------------------------------------------------------------------------


class SharedCount(CoMapFunction):
    """One count per key over both inputs."""

    def open(self, runtime_context):
        self.count = runtime_context.get_state(ValueStateDescriptor("count", Types.INT()))

    def _next(self):
        count = (self.count.value() or 0) + 1
        self.count.update(count)
        return count

    def map1(self, value):
        return (value[0], self._next())

    def map2(self, value):
        return (value[0], self._next())


class SharedList(CoFlatMapFunction):
    """Input 1 adds a key's values to a list; input 2 emits how many there are so far and
    their sum plus the running count of all records of the key (a second state)."""

    def open(self, runtime_context):
        self.values = runtime_context.get_list_state(ListStateDescriptor("values", Types.INT()))
        self.count = runtime_context.get_state(ValueStateDescriptor("count", Types.INT()))

    def _count(self):
        count = (self.count.value() or 0) + 1
        self.count.update(count)
        return count

    def flat_map1(self, value):
        self.values.add(value[1])
        yield ("values", value[0], self._count())

    def flat_map2(self, value):
        yield ("probe", value[0], self._count())


OTHER = [(f"{key}", i) for i, key in enumerate(KEYS * 5)]  # keys of the second input: the same keys


def test_connected_keyed_streams_share_one_state_per_key_across_both_inputs(target):
    env = make_env(target, 2)
    left = env.from_collection(RECORDS)
    right = env.from_collection(OTHER)
    counts = left.key_by(first).connect(right.key_by(first)).map(SharedCount())
    flat = left.connect(right).key_by(first, first).flat_map(SharedList())
    got = list(counts.union(flat.map(lambda r: (r[1], r[2]))).execute_and_collect())
    # whatever the interleaving of the two inputs, a key's counts are 1..n (n: its records on both)
    n = Counter(k for k, _ in RECORDS) + Counter(k for k, _ in OTHER)
    want = Counter((key, c) for key, total in n.items() for c in range(1, total + 1))
    assert Counter(got) == want + want


# -- state TTL on the wall clock --------------------------------------------------------------------------

TTL_MS = 30


class RemembersForAWhile(MapFunction):
    """A short-TTL and a long-TTL value per key. On a key's ``"write"`` record both are
    written; on its ``"read"`` record it first waits until the short TTL has passed on the
    TTL clock (the wall clock), then reads both."""

    def open(self, runtime_context):
        short = StateTtlConfig.new_builder(Time.milliseconds(TTL_MS)).cleanup_full_snapshot().build()
        long = (
            StateTtlConfig.new_builder(Time.hours(1))
            .set_update_type(StateTtlConfig.UpdateType.OnReadAndWrite)
            .set_state_visibility(StateTtlConfig.StateVisibility.NeverReturnExpired)
            .cleanup_incrementally(10, True)
            .build()
        )
        short_descriptor = ValueStateDescriptor("short", Types.STRING())
        short_descriptor.enable_time_to_live(short)
        long_descriptor = MapStateDescriptor("long", Types.STRING(), Types.STRING())
        long_descriptor.enable_time_to_live(long)
        self.short = runtime_context.get_state(short_descriptor)
        self.long = runtime_context.get_map_state(long_descriptor)
        self.written_at = {}

    def map(self, value):
        key, action = value
        if action == "write":
            self.short.update(f"short-{key}")
            self.long[key] = f"long-{key}"
            # read the clock after the write: the state's last access is at or before it
            self.written_at[key] = time.time_ns() // 1_000_000
            return (key, "written")
        # the expiry time is a point on the clock: wait for the clock to pass it (no signal to wait on)
        due = self.written_at[key] + TTL_MS
        while time.time_ns() // 1_000_000 < due:
            threading.Event().wait((due - time.time_ns() // 1_000_000) / 1000)
        return (key, self.short.value(), self.long.get(key), sorted(self.long.items()))


def test_state_with_a_ttl_expires_on_the_wall_clock_and_long_lived_state_stays(target, state_backend):
    env = make_env(target, 2)
    records = [(key, "write") for key in KEYS[:3]] + [(key, "read") for key in KEYS[:3]]
    got = env.from_collection(records).key_by(first).map(RemembersForAWhile()).execute_and_collect()
    want = [(key, "written") for key in KEYS[:3]]
    want += [(key, None, f"long-{key}", [(key, f"long-{key}")]) for key in KEYS[:3]]
    assert sorted(got, key=repr) == sorted(want, key=repr)
