"""State time-to-live (``StateTtlConfig`` + ``enable_time_to_live``) on the heap keyed backend,
with a fake clock: expiry per value / list element / map entry, the update types, the
visibilities, the cleanups (on read, incremental, per record, in full snapshots) and
snapshot -> restore keeping the TTL timestamps. A brute-force model written here (no
cleanup at all, expiry checked on every read) is the reference for random operation
sequences."""

from __future__ import annotations

import cloudpickle
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from raylink.api import AggregateFunction as ApiAggregateFunction
from raylink.api import StateTtlConfig as ApiStateTtlConfig
from raylink.api import Time
from raylink.api.functions import AggregateFunction
from raylink.api.state import (
    AggregatingStateDescriptor,
    ListStateDescriptor,
    MapStateDescriptor,
    ReducingStateDescriptor,
    StateTtlConfig,
    ValueStateDescriptor,
)
from raylink.api.time import Duration
from raylink.state.state_backend import HeapKeyedStateBackend

pytestmark = pytest.mark.timeout(60)

TTL_MS = 10
UpdateType = StateTtlConfig.UpdateType
Visibility = StateTtlConfig.StateVisibility


class Clock:
    """A fake TTL time provider: time moves only when the test says so."""

    def __init__(self, now: int = 1_000) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


def backend_with(clock: Clock, max_parallelism: int = 16) -> HeapKeyedStateBackend:
    backend = HeapKeyedStateBackend((0, max_parallelism - 1), max_parallelism)
    backend.ttl_time_provider = clock
    return backend


def ttl(update=UpdateType.OnCreateAndWrite, visibility=Visibility.NeverReturnExpired, ms=TTL_MS):
    return StateTtlConfig.new_builder(Time.milliseconds(ms)).set_update_type(update).set_state_visibility(visibility)


def with_ttl(descriptor, builder):
    descriptor.enable_time_to_live(builder.build())
    return descriptor


class Average(AggregateFunction):
    def create_accumulator(self):
        return [0, 0]

    def add(self, value, acc):
        return [acc[0] + value, acc[1] + 1]

    def get_result(self, acc):
        return acc[0] / acc[1]

    def merge(self, a, b):
        return [a[0] + b[0], a[1] + b[1]]


def plus(a, b):
    return a + b


# -- the configuration ----------------------------------------------------------------------------


def test_builder_defaults_and_getters_are_flinks():
    config = StateTtlConfig.new_builder(Time.seconds(1)).build()
    assert config.get_update_type() is UpdateType.OnCreateAndWrite
    assert config.get_state_visibility() is Visibility.NeverReturnExpired
    assert config.get_ttl_time_characteristic() is StateTtlConfig.TtlTimeCharacteristic.ProcessingTime
    assert config.get_ttl() == Time.seconds(1) and config.get_ttl_millis() == 1000
    assert config.is_enabled()
    strategies = config.get_cleanup_strategies()
    assert strategies.is_cleanup_in_background() and not strategies.in_full_snapshot()
    assert strategies.get_incremental_cleanup_strategy().get_cleanup_size() == 5

    config = (
        StateTtlConfig.new_builder(Duration.of_millis(1500))
        .update_ttl_on_read_and_write()
        .return_expired_if_not_cleaned_up()
        .use_processing_time()
        .cleanup_full_snapshot()
        .cleanup_incrementally(10, True)
        .cleanup_in_rocksdb_compact_filter(1000, Duration.of_days(1))
        .disable_cleanup_in_background()
        .build()
    )
    assert config.get_update_type() is UpdateType.OnReadAndWrite
    assert config.get_state_visibility() is Visibility.ReturnExpiredIfNotCleanedUp
    assert config.get_ttl_millis() == 1500
    strategies = config.get_cleanup_strategies()
    assert strategies.in_full_snapshot() and not strategies.is_cleanup_in_background()
    incremental = strategies.get_incremental_cleanup_strategy()
    assert (incremental.get_cleanup_size(), incremental.run_cleanup_for_every_record()) == (10, True)
    rocks = strategies.get_rocksdb_compact_filter_cleanup_strategy()
    assert rocks.get_query_time_after_num_entries() == 1000
    assert not StateTtlConfig.new_builder(Time.seconds(1)).set_update_type(UpdateType.Disabled).build().is_enabled()
    assert ApiStateTtlConfig is StateTtlConfig and ApiAggregateFunction is AggregateFunction


def test_bad_configurations_fail_with_clear_errors():
    with pytest.raises(ValueError, match="TTL is expected to be positive"):
        StateTtlConfig.new_builder(Time.milliseconds(0)).build()
    with pytest.raises(TypeError, match="StateTtlConfig.UpdateType"):
        StateTtlConfig.new_builder(Time.seconds(1)).set_update_type("OnReadAndWrite")
    with pytest.raises(TypeError, match="enable_time_to_live expects a StateTtlConfig"):
        ValueStateDescriptor("v", None).enable_time_to_live(StateTtlConfig.new_builder(Time.seconds(1)))


def test_a_state_name_keeps_its_ttl_setting():
    clock = Clock()
    backend = backend_with(clock)
    backend.set_current_key("k")
    backend.get_or_create_state(ValueStateDescriptor("v"))
    with pytest.raises(ValueError, match=r"state 'v' is a value state, not a value \(with TTL\) state"):
        backend.get_or_create_state(with_ttl(ValueStateDescriptor("v"), ttl()))


# -- expiry per state kind ------------------------------------------------------------------------


def test_value_state_expires_ttl_after_the_last_write_and_update_on_read_prolongs_it():
    clock = Clock()
    backend = backend_with(clock)
    on_write = backend.get_or_create_state(with_ttl(ValueStateDescriptor("w"), ttl()))
    on_read = backend.get_or_create_state(with_ttl(ValueStateDescriptor("r"), ttl(UpdateType.OnReadAndWrite)))
    backend.set_current_key("k")
    on_write.update("x")
    on_read.update("y")
    clock.now += TTL_MS - 1
    assert (on_write.value(), on_read.value()) == ("x", "y")  # the read prolongs "r" only
    clock.now += 1  # exactly ttl after the write: expired (last access + ttl <= now)
    assert on_write.value() is None
    assert on_read.value() == "y"
    clock.now += TTL_MS
    assert on_read.value() is None
    on_write.update("z")
    assert on_write.value() == "z"
    on_write.update(None)  # Flink: update(null) clears
    assert on_write.value() is None


def test_return_expired_if_not_cleaned_up_returns_an_expired_value_once():
    clock = Clock()
    backend = backend_with(clock)
    state = backend.get_or_create_state(
        with_ttl(
            ValueStateDescriptor("v"),
            ttl(visibility=Visibility.ReturnExpiredIfNotCleanedUp).disable_cleanup_in_background(),
        )
    )
    backend.set_current_key("k")
    state.update(1)
    clock.now += TTL_MS
    assert state.value() == 1  # expired but not cleaned up yet: returned, and cleaned up
    assert state.value() is None


def test_list_state_expires_element_by_element():
    clock = Clock()
    backend = backend_with(clock)
    state = backend.get_or_create_state(with_ttl(ListStateDescriptor("l"), ttl()))
    backend.set_current_key("k")
    state.add(1)
    clock.now += 4
    state.add_all([2, 3])
    clock.now += 4
    state.add(4)
    assert list(state) == [1, 2, 3, 4]
    clock.now += 2  # element 1 written 10 ms ago
    assert state.get() == [2, 3, 4]
    clock.now += 4
    assert state.get() == [4]
    state.update([7, 8])
    clock.now += TTL_MS - 1
    assert state.get() == [7, 8]
    clock.now += 1
    assert state.get() == []
    assert backend.get_table("l", "ttl:list").values == {}  # nothing left: the key is gone
    with pytest.raises(ValueError, match="You cannot add null to a ListState"):
        state.add(None)


def test_list_state_with_return_expired_returns_the_expired_elements_once():
    clock = Clock()
    backend = backend_with(clock)
    state = backend.get_or_create_state(
        with_ttl(
            ListStateDescriptor("l"),
            ttl(visibility=Visibility.ReturnExpiredIfNotCleanedUp).disable_cleanup_in_background(),
        )
    )
    backend.set_current_key("k")
    state.add("old")
    clock.now += TTL_MS
    state.add("new")
    assert state.get() == ["old", "new"]
    assert state.get() == ["new"]


def test_map_state_expires_entry_by_entry_and_supports_pythons_mapping_syntax():
    clock = Clock()
    backend = backend_with(clock)
    state = backend.get_or_create_state(with_ttl(MapStateDescriptor("m"), ttl(UpdateType.OnReadAndWrite)))
    backend.set_current_key("k")
    state["a"] = 1
    clock.now += 5
    state.put_all({"b": 2, "c": 3})
    clock.now += 4
    assert state["a"] == 1  # read at +9: prolonged to +19
    clock.now += 2
    assert sorted(state.items()) == [("a", 1), ("b", 2), ("c", 3)]  # every entry read: prolonged
    clock.now += TTL_MS - 1
    assert "b" in state and sorted(state) == ["a", "b", "c"]
    del state["b"]
    clock.now += TTL_MS
    assert state.is_empty() and state.get("a") is None and "c" not in state
    assert list(state.keys()) == [] and list(state.values()) == []


def test_reducing_and_aggregating_state_start_over_once_expired():
    clock = Clock()
    backend = backend_with(clock)
    total = backend.get_or_create_state(with_ttl(ReducingStateDescriptor("sum", plus), ttl()))
    average = backend.get_or_create_state(with_ttl(AggregatingStateDescriptor("avg", Average()), ttl()))
    backend.set_current_key("k")
    for v in (1, 2, 3):
        total.add(v)
        average.add(v)
        clock.now += 3
    assert (total.get(), average.get()) == (6, 2.0)
    clock.now += TTL_MS - 3  # the last add was ttl ago
    assert (total.get(), average.get()) == (None, None)
    total.add(10)
    average.add(10)
    assert (total.get(), average.get()) == (10, 10.0)


def test_disabled_update_type_means_no_ttl():
    clock = Clock()
    backend = backend_with(clock)
    state = backend.get_or_create_state(with_ttl(ValueStateDescriptor("v"), ttl(UpdateType.Disabled)))
    backend.set_current_key("k")
    state.update(1)
    clock.now += 100 * TTL_MS
    assert state.value() == 1
    assert backend.get_table("v", "value").values == {"k": 1}


# -- cleanups ---------------------------------------------------------------------------------------


def fill(backend, state, keys, value="v"):
    for key in keys:
        backend.set_current_key(key)
        state.update(value)


def test_incremental_cleanup_removes_other_keys_expired_values_on_access():
    clock = Clock()
    backend = backend_with(clock)
    state = backend.get_or_create_state(with_ttl(ValueStateDescriptor("v"), ttl().cleanup_incrementally(3, False)))
    fill(backend, state, range(9))
    table = backend.get_table("v", "ttl:value")
    clock.now += TTL_MS
    backend.set_current_key(100)
    state.value()  # one access checks 3 entries
    assert len(table.values) == 6
    state.value()
    state.value()
    assert table.values == {}


def test_cleanup_for_every_record_runs_when_the_key_is_set():
    clock = Clock()
    backend = backend_with(clock)
    state = backend.get_or_create_state(with_ttl(ValueStateDescriptor("v"), ttl().cleanup_incrementally(2, True)))
    fill(backend, state, range(4))
    table = backend.get_table("v", "ttl:value")
    clock.now += TTL_MS
    backend.set_current_key(0)
    backend.set_current_key(1)
    assert table.values == {}


def test_snapshots_leave_expired_values_out_and_keep_the_timestamps_of_the_others():
    clock = Clock()
    backend = backend_with(clock)
    value = backend.get_or_create_state(with_ttl(ValueStateDescriptor("v"), ttl().cleanup_full_snapshot()))
    items = backend.get_or_create_state(with_ttl(ListStateDescriptor("l"), ttl()))
    entries = backend.get_or_create_state(with_ttl(MapStateDescriptor("m"), ttl()))
    backend.set_current_key("old")
    value.update(1)
    items.add("x")
    entries["e"] = 1
    clock.now += 6
    backend.set_current_key("new")
    value.update(2)
    items.add("y")
    backend.set_current_key("old")
    items.add("z")
    entries["f"] = 2
    clock.now += 4  # everything written at the start expired just now
    snapshot = cloudpickle.loads(cloudpickle.dumps(backend.snapshot()))
    flat = {
        (name, key): v for per_kg in snapshot.values() for name, per_key in per_kg.items() for key, v in per_key.items()
    }
    assert flat == {
        ("v", "new"): (2, 1006),
        ("l", "new"): [("y", 1006)],
        ("l", "old"): [("z", 1006)],
        ("m", "old"): {"f": (2, 1006)},
    }

    restored = backend_with(clock)
    value2 = restored.get_or_create_state(with_ttl(ValueStateDescriptor("v"), ttl().cleanup_full_snapshot()))
    items2 = restored.get_or_create_state(with_ttl(ListStateDescriptor("l"), ttl()))
    entries2 = restored.get_or_create_state(with_ttl(MapStateDescriptor("m"), ttl()))
    restored.restore(snapshot)
    restored.set_current_key("new")
    assert (value2.value(), items2.get()) == (2, ["y"])
    restored.set_current_key("old")
    assert (items2.get(), dict(entries2.items())) == (["z"], {"f": 2})
    clock.now += 6  # restored values keep their write time: 1006 + 10 <= 1016
    restored.set_current_key("new")
    assert (value2.value(), items2.get()) == (None, [])


def test_without_any_background_cleanup_a_snapshot_keeps_expired_values_hidden():
    clock = Clock()
    backend = backend_with(clock)
    state = backend.get_or_create_state(with_ttl(ValueStateDescriptor("v"), ttl().disable_cleanup_in_background()))
    fill(backend, state, ["k"])
    clock.now += TTL_MS
    snapshot = backend.snapshot()
    assert [per_kg["v"] for per_kg in snapshot.values()] == [{"k": ("v", 1000)}]
    restored = backend_with(clock)
    state2 = restored.get_or_create_state(with_ttl(ValueStateDescriptor("v"), ttl().disable_cleanup_in_background()))
    restored.restore(snapshot)
    restored.set_current_key("k")
    assert state2.value() is None


# -- random operation sequences against a model ----------------------------------------------------


class Model:
    """Flink's TTL semantics with NeverReturnExpired, no cleanup but on read."""

    def __init__(self, on_read: bool) -> None:
        self.on_read = on_read
        self.value = {}
        self.list = {}
        self.map = {}
        self.sum = {}

    def live(self, entry, now):
        return entry is not None and entry[1] + TTL_MS > now

    def run(self, op, key, arg, now):
        if op == "value.update":
            self.value[key] = (arg, now)
        elif op == "value.get":
            entry = self.value.get(key)
            if not self.live(entry, now):
                self.value.pop(key, None)
                return None
            if self.on_read:
                self.value[key] = (entry[0], now)
            return entry[0]
        elif op == "list.add":
            self.list.setdefault(key, []).append((arg, now))
        elif op == "list.get":
            kept = [e for e in self.list.get(key, []) if self.live(e, now)]
            if self.on_read:
                kept = [(e[0], now) for e in kept]
            self.list[key] = kept
            return [e[0] for e in kept]
        elif op == "map.put":
            self.map.setdefault(key, {})[arg] = (arg * 10, now)
        elif op == "map.get":
            entry = self.map.get(key, {}).get(arg)
            if not self.live(entry, now):
                self.map.get(key, {}).pop(arg, None)
                return None
            if self.on_read:
                self.map[key][arg] = (entry[0], now)
            return entry[0]
        elif op == "map.items":
            kept = {k: e for k, e in self.map.get(key, {}).items() if self.live(e, now)}
            if self.on_read:
                kept = {k: (e[0], now) for k, e in kept.items()}
            self.map[key] = kept
            return sorted((k, e[0]) for k, e in kept.items())
        elif op == "map.remove":
            self.map.get(key, {}).pop(arg, None)
        elif op == "sum.add":
            entry = self.sum.get(key)
            self.sum[key] = ((entry[0] + arg) if self.live(entry, now) else arg, now)
        elif op == "sum.get":
            entry = self.sum.get(key)
            if not self.live(entry, now):
                self.sum.pop(key, None)
                return None
            if self.on_read:
                self.sum[key] = (entry[0], now)
            return entry[0]
        return None


def descriptors(builder):
    return {
        "value": with_ttl(ValueStateDescriptor("value"), builder),
        "list": with_ttl(ListStateDescriptor("list"), builder),
        "map": with_ttl(MapStateDescriptor("map"), builder),
        "sum": with_ttl(ReducingStateDescriptor("sum", plus), builder),
    }


def run_on_states(states, op, arg):
    kind, action = op.split(".")
    state = states[kind]
    if op == "value.update":
        state.update(arg)
    elif op in ("value.get", "sum.get"):
        return state.get() if kind == "sum" else state.value()
    elif op in ("list.add", "sum.add"):
        state.add(arg)
    elif op == "list.get":
        return list(state.get())
    elif op == "map.put":
        state[arg] = arg * 10
    elif op == "map.get":
        return state.get(arg)
    elif op == "map.items":
        return sorted(state.items())
    elif op == "map.remove":
        del state[arg]
    return None


OPS = {
    "value": ["value.update", "value.get"],
    "list": ["list.add", "list.get"],
    "map": ["map.put", "map.get", "map.items", "map.remove"],
    "sum": ["sum.add", "sum.get"],
}
CLEANUPS = {
    "default": lambda b: b,
    "full snapshot": lambda b: b.cleanup_full_snapshot(),
    "incremental": lambda b: b.cleanup_incrementally(2, False),
    "every record": lambda b: b.cleanup_incrementally(1, True),
    "none": lambda b: b.disable_cleanup_in_background(),
}


STEPS = st.lists(
    st.tuples(
        st.sampled_from([0, 1, 2, 3]),
        st.sampled_from("ab"),
        st.integers(1, 2),
        st.integers(0, 6),
        st.integers(0, 9).map(lambda n: n == 0),
    ),
    max_size=50,
)


@pytest.mark.parametrize("kind", sorted(OPS))
@settings(max_examples=150, deadline=None)
@given(steps=STEPS, on_read=st.booleans(), cleanup=st.sampled_from(sorted(CLEANUPS)))
def test_random_operations_see_what_the_model_sees_across_snapshots(kind, steps, on_read, cleanup):
    """Steps: (operation on the ``kind`` state, key, argument, ms to advance first, checkpoint
    and restore first?)."""
    clock = Clock()
    update = UpdateType.OnReadAndWrite if on_read else UpdateType.OnCreateAndWrite
    builder = CLEANUPS[cleanup](ttl(update))

    def fresh():
        backend = backend_with(clock)
        return backend, {kind: backend.get_or_create_state(d) for kind, d in descriptors(builder).items()}

    backend, states = fresh()
    model = Model(on_read)
    ops = OPS[kind]
    for op_index, key, arg, advance, checkpoint in steps:
        op = ops[op_index % len(ops)]
        clock.now += advance
        if checkpoint:  # a checkpoint and a restore into a fresh backend (a failover)
            snapshot = cloudpickle.loads(cloudpickle.dumps(backend.snapshot()))
            backend, states = fresh()
            backend.restore(snapshot)
        backend.set_current_key(key)
        assert run_on_states(states, op, arg) == model.run(op, key, arg, clock.now), (op, key, clock.now)
