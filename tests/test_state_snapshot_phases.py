"""A heap backend's checkpoint in Flink's two phases: ``snapshot()`` at the barrier copies the
entries (the task goes on at once); grouping by key group and pickling happen later, off the
task thread, and see the state as it was at the barrier whatever the task did since. The
reference is the state computed in the test, key by key."""

from __future__ import annotations

import pickle
import threading

import cloudpickle
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from raylink.core.key_groups import assign_to_key_group
from raylink.core.state import ListStateDescriptor, MapStateDescriptor, ValueStateDescriptor
from raylink.state.state_backend import HeapKeyedStateBackend, KeyedStateSnapshot

pytestmark = pytest.mark.timeout(60)


def _backend():
    backend = HeapKeyedStateBackend((0, 127), 128)
    value = backend.get_or_create_state(ValueStateDescriptor("value", None))
    items = backend.get_or_create_state(ListStateDescriptor("list", None))
    mapping = backend.get_or_create_state(MapStateDescriptor("map", None, None))
    return backend, value, items, mapping


def _expected(values: dict, lists: dict, maps: dict) -> dict:
    """``{key_group: {state: {key: value}}}`` of the given contents, built without the backend."""
    out: dict = {}
    for name, contents in (("value", values), ("list", lists), ("map", maps)):
        for k, v in contents.items():
            out.setdefault(assign_to_key_group(k, 128), {}).setdefault(name, {})[k] = v
    return dict(sorted(out.items()))


@settings(max_examples=60, deadline=None)
@given(
    first=st.dictionaries(st.text(max_size=4), st.integers(), max_size=30),
    then=st.dictionaries(st.text(max_size=4), st.one_of(st.none(), st.integers()), max_size=30),
)
def test_the_snapshot_is_the_state_at_the_barrier_whatever_comes_after(first, then):
    backend, value, items, mapping = _backend()
    for k, v in first.items():
        backend.set_current_key(k)
        value.update(v)
        items.add(v)
        mapping.put("m", v)
    snapshot = backend.snapshot()
    assert isinstance(snapshot, KeyedStateSnapshot)
    for k, v in then.items():  # the task goes on: updates, clears, in-place changes, new keys
        backend.set_current_key(k)
        if v is None:
            value.clear()
            items.clear()
            mapping.clear()
        else:
            value.update(v + 1)
            items.add(v)
            mapping.put("m", -v)
    expected = _expected(first, {k: [v] for k, v in first.items()}, {k: {"m": v} for k, v in first.items()})
    restored = pickle.loads(cloudpickle.dumps(snapshot))
    assert type(restored) is dict and restored == expected
    assert dict(snapshot) == expected


def test_grouping_runs_once_on_the_writer_thread_while_the_task_changes_the_state():
    backend, value, _items, _mapping = _backend()
    for i in range(20_000):
        backend.set_current_key(i)
        value.update(i)
    snapshot = backend.snapshot()
    pickled: list = []
    writer = threading.Thread(target=lambda: pickled.append(cloudpickle.dumps(snapshot)))
    writer.start()
    for i in range(20_000):  # the task thread meanwhile
        backend.set_current_key(i)
        value.update(-i)
    writer.join(30)
    restored = pickle.loads(pickled[0])
    assert sum(len(states["value"]) for states in restored.values()) == 20_000
    assert all(v == k for states in restored.values() for k, v in states["value"].items())


def test_a_restore_from_the_snapshot_gives_back_every_value():
    backend, value, items, _ = _backend()
    for k in range(100):
        backend.set_current_key(k)
        value.update(k * k)
        items.add(k)
    snapshot = pickle.loads(cloudpickle.dumps(backend.snapshot()))
    other, other_value, other_items, _ = _backend()
    other.restore(snapshot)
    for k in range(100):
        other.set_current_key(k)
        assert other_value.value() == k * k and other_items.get() == [k]
