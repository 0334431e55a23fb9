"""Copy-on-write snapshots of the heap keyed backend and the timers (Flink's
``CopyOnWriteStateTable``): the barrier only freezes each state's live layer; a snapshot read
later -- after more records changed the state, on another thread, or never -- still holds the
state at its barrier, and restoring it gives exactly that state back. Checked against plain
dict references computed in the tests."""

import copy
import gc
import os
import pickle
import random
import threading

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from raylink.api import (
    AggregateFunction,
    AggregatingStateDescriptor,
    ListStateDescriptor,
    MapStateDescriptor,
    ReducingStateDescriptor,
    SlidingEventTimeWindows,
    StateTtlConfig,
    Time,
    TumblingEventTimeWindows,
    ValueStateDescriptor,
)
from raylink.core.key_groups import assign_to_key_group
from raylink.operators.base import MAX_WATERMARK
from raylink.operators.reduce import StreamGroupedReduceOperator
from raylink.operators.window import WindowOperatorDescriptor, create_window_operator
from raylink.state.state_backend import HeapKeyedStateBackend
from raylink.tests.harness import KeyedOneInputStreamOperatorTestHarness

pytestmark = pytest.mark.timeout(300)

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
KEYS = ["a", "b", "c", "d", 7, 8]


class MutatingAvg(AggregateFunction):
    """An accumulator changed in place (what a copy-on-write snapshot must not see)."""

    def create_accumulator(self):
        return [0, 0]

    def add(self, value, acc):
        acc[0] += value
        acc[1] += 1
        return acc

    def get_result(self, acc):
        return (acc[0], acc[1])

    def merge(self, a, b):
        return [a[0] + b[0], a[1] + b[1]]


def _ttl(descriptor):
    descriptor.enable_time_to_live(StateTtlConfig.new_builder(Time.days(1)).build())
    return descriptor


def _states(backend):
    return {
        "value": backend.get_or_create_state(ValueStateDescriptor("value", None)),
        "list": backend.get_or_create_state(ListStateDescriptor("list", None)),
        "map": backend.get_or_create_state(MapStateDescriptor("map", None, None)),
        "reducing": backend.get_or_create_state(ReducingStateDescriptor("reducing", lambda a, b: a + b, None)),
        "aggregating": backend.get_or_create_state(AggregatingStateDescriptor("aggregating", MutatingAvg(), None)),
        "ttl-list": backend.get_or_create_state(_ttl(ListStateDescriptor("ttl-list", None))),
        "ttl-map": backend.get_or_create_state(_ttl(MapStateDescriptor("ttl-map", None, None))),
        "pane-list": backend.get_or_create_namespaced_state(ListStateDescriptor("pane-list", None)),
        "pane-agg": backend.get_or_create_namespaced_state(AggregatingStateDescriptor("pane-agg", MutatingAvg(), None)),
    }


def _apply(states, backend, op, key, arg):
    backend.set_current_key(key)
    ns = arg % 3
    states["pane-list"].set_current_namespace(ns)
    states["pane-agg"].set_current_namespace(ns)
    if op == "value":
        states["value"].update(arg)
    elif op == "value-clear":
        states["value"].clear()
    elif op == "list":
        states["list"].add(arg)
        states["ttl-list"].add(arg)
    elif op == "list-clear":
        states["list"].clear()
        states["ttl-list"].clear()
    elif op == "map":
        states["map"].put(arg % 4, arg)
        states["ttl-map"].put(arg % 4, arg)
    elif op == "map-remove":
        states["map"].remove(arg % 4)
        states["ttl-map"].remove(arg % 4)
    elif op == "reducing":
        states["reducing"].add(arg)
    elif op == "aggregating":
        states["aggregating"].add(arg)
    elif op == "pane":
        states["pane-list"].add(arg)
        states["pane-agg"].add(arg)
    elif op == "pane-clear":
        states["pane-list"].clear()
        states["pane-agg"].clear()


def _reference_apply(ref, op, key, arg):
    ns = arg % 3
    if op == "value":
        ref["value"][key] = arg
    elif op == "value-clear":
        ref["value"].pop(key, None)
    elif op == "list":
        ref["list"].setdefault(key, []).append(arg)
    elif op == "list-clear":
        ref["list"].pop(key, None)
    elif op == "map":
        ref["map"].setdefault(key, {})[arg % 4] = arg
    elif op == "map-remove":
        m = ref["map"].get(key)
        if m is not None:
            m.pop(arg % 4, None)
            if not m:
                del ref["map"][key]
    elif op == "reducing":
        ref["reducing"][key] = ref["reducing"].get(key, 0) + arg
    elif op == "aggregating":
        s, n = ref["aggregating"].get(key, (0, 0))
        ref["aggregating"][key] = (s + arg, n + 1)
    elif op == "pane":
        ref["pane-list"].setdefault((key, ns), []).append(arg)
        s, n = ref["pane-agg"].get((key, ns), (0, 0))
        ref["pane-agg"][(key, ns)] = (s + arg, n + 1)
    elif op == "pane-clear":
        ref["pane-list"].pop((key, ns), None)
        ref["pane-agg"].pop((key, ns), None)


def _empty_reference():
    return {name: {} for name in ("value", "list", "map", "reducing", "aggregating", "pane-list", "pane-agg")}


def _snapshot_view(snapshot):
    """A snapshot's contents as the reference's shape (TTL values unwrapped)."""
    view = _empty_reference()
    for kg, states in snapshot.items():
        for name, entries in states.items():
            for key, value in entries.items():
                assert assign_to_key_group(key, 128) == kg
                if name in ("value", "list", "map", "reducing"):
                    view[name][key] = value
                elif name == "aggregating":
                    view[name][key] = tuple(value)
                elif name == "ttl-list":
                    assert [v for v, _ in value] == snapshot[kg]["list"][key]
                elif name == "ttl-map":
                    assert {k: v for k, (v, _) in value.items()} == snapshot[kg]["map"][key]
                else:
                    for ns, pane_value in value.items():
                        view[name][(key, ns)] = tuple(pane_value) if name == "pane-agg" else pane_value
    return view


def _read_all(backend, states):
    """Every state of every key through the states' reads, in the reference's shape."""
    view = _empty_reference()
    for key in KEYS:
        backend.set_current_key(key)
        if states["value"].value() is not None:
            view["value"][key] = states["value"].value()
        if states["list"].get():
            view["list"][key] = list(states["list"].get())
            assert list(states["ttl-list"].get()) == view["list"][key]
        if not states["map"].is_empty():
            view["map"][key] = dict(states["map"].items())
            assert dict(states["ttl-map"].items()) == view["map"][key]
        if states["reducing"].get() is not None:
            view["reducing"][key] = states["reducing"].get()
        if states["aggregating"].get() is not None:
            view["aggregating"][key] = states["aggregating"].get()
        for ns in range(3):
            states["pane-list"].set_current_namespace(ns)
            states["pane-agg"].set_current_namespace(ns)
            if states["pane-list"].get():
                view["pane-list"][(key, ns)] = list(states["pane-list"].get())
            if states["pane-agg"].get() is not None:
                view["pane-agg"][(key, ns)] = states["pane-agg"].get()
    return view


OPS = [
    "value",
    "value-clear",
    "list",
    "list-clear",
    "map",
    "map-remove",
    "reducing",
    "aggregating",
    "pane",
    "pane-clear",
]
steps = st.lists(
    st.one_of(
        st.tuples(st.sampled_from(OPS), st.sampled_from(KEYS), st.integers(-50, 50)),
        st.tuples(st.sampled_from(["snapshot", "read", "drop"]), st.just(None), st.integers(0, 5)),
    ),
    max_size=120,
)


@SETTINGS
@given(steps)
def test_a_snapshot_read_later_holds_the_state_at_its_barrier(program):
    backend = HeapKeyedStateBackend((0, 127), 128)
    backend.ttl_time_provider = lambda: 1_000  # TTL states that never expire here
    states = _states(backend)
    reference = _empty_reference()
    pending = []  # (snapshot, reference at its barrier)
    taken = []
    for op, key, arg in program:
        if op == "snapshot":
            pending.append((backend.snapshot(), copy.deepcopy(reference)))
        elif op == "read" and pending:
            snapshot, expected = pending.pop(arg % len(pending))
            assert _snapshot_view(snapshot) == expected
            taken.append((snapshot, expected))
        elif op == "drop" and pending:
            pending.pop(arg % len(pending))  # an aborted checkpoint: never read
            gc.collect()
        elif op not in ("snapshot", "read", "drop"):
            _apply(states, backend, op, key, arg)
            _reference_apply(reference, op, key, arg)
    assert _read_all(backend, states) == reference
    for snapshot, expected in pending:
        assert _snapshot_view(snapshot) == expected
        taken.append((snapshot, expected))
    assert _snapshot_view(backend.snapshot()) == reference
    for snapshot, expected in taken[-2:]:  # restored (through pickle, as from a checkpoint file)
        restored = HeapKeyedStateBackend((0, 127), 128)
        restored.ttl_time_provider = lambda: 1_000
        restored.restore(pickle.loads(pickle.dumps(snapshot)))
        assert _read_all(restored, _states(restored)) == expected


def test_the_barrier_freezes_the_live_layer_without_copying_it():
    backend = HeapKeyedStateBackend((0, 127), 128)
    table = backend.get_table("_op_state", "value")
    for k in range(1000):
        table.live[k] = k
    live = table.live
    snapshot = backend.snapshot()
    assert table.lower[0] is live  # the same dict: nothing was copied at the barrier
    assert table.live == {}
    table.live[1] = "changed"
    assert dict(snapshot[assign_to_key_group(1, 128)]["_op_state"])[1] == 1
    assert table.lookup(1) == "changed" and table.lookup(2) == 2


@pytest.mark.timeout(120)
def test_a_snapshot_read_on_another_thread_while_the_task_writes_holds_its_barrier():
    """The checkpoint writer thread groups the snapshot (and merges the layers) while the task
    thread keeps updating and inserting keys and takes the next snapshot."""
    backend = HeapKeyedStateBackend((0, 127), 128)
    table = backend.get_table("_op_state", "value")
    reference = {}
    for k in range(60_000):
        table.live[k] = reference[k] = k
    snapshots = []
    for round_ in range(3):
        snapshot = backend.snapshot()
        expected = dict(reference)
        result = {}
        reader = threading.Thread(target=lambda s=snapshot: result.update(view=dict(_flat(s))))
        reader.start()
        rnd = random.Random(round_)
        live = table.live
        for k in rnd.sample(range(90_000), 30_000):  # updates and new keys, as the reduce does
            current = live.get(k)
            if current is None:
                current = table.lookup(k)
            live[k] = reference[k] = (0 if current is None else current) + 1_000_000
        reader.join(timeout=60)
        assert not reader.is_alive()
        assert result["view"] == expected
        snapshots.append(snapshot)
    final = backend.snapshot()
    assert dict(_flat(final)) == reference
    assert {k: table.lookup(k) for k in reference} == reference
    assert len(table.lower) <= 2  # the layers of read snapshots were merged into the base


def _flat(snapshot):
    for states in snapshot.values():
        yield from states["_op_state"].items()


def _reduce_operator(snapshot=None):
    harness = KeyedOneInputStreamOperatorTestHarness(
        StreamGroupedReduceOperator(lambda a, b: (a[0], a[1] + b[1]), lambda v: v[0], "sum"),
        task_name="",
        operator_name="",
    ).setup()
    if snapshot is not None:  # the backend's own snapshot (not the operator's)
        harness.keyed_state_backend.restore(snapshot)
    harness.open()
    return harness.operator, harness.output


@SETTINGS
@given(
    st.lists(st.tuples(st.sampled_from(KEYS), st.integers(0, 9)), min_size=1, max_size=200),
    st.lists(st.integers(0, 200), max_size=6),
)
def test_rolling_reduce_across_snapshots_restores_the_running_sums(records, barriers):
    """The reduce's loop (compiled or pure) reads keys from frozen layers after a barrier; a
    job restored from any snapshot continues with the sums up to its barrier."""
    op, out = _reduce_operator()
    cuts = sorted(set(b % len(records) for b in barriers))
    snapshots = []
    start = 0
    for cut in cuts + [len(records)]:
        if cut > start:
            op.process_batch(records[start:cut])
        start = max(start, cut)
        if cut < len(records):
            snapshots.append((cut, op.keyed_state_backend.snapshot()))
    sums, expected = {}, []
    for key, n in records:
        sums[key] = sums.get(key, 0) + n
        expected.append((key, sums[key]))
    assert out.records == expected
    for cut, snapshot in snapshots:
        restored, out2 = _reduce_operator(pickle.loads(pickle.dumps(snapshot)))
        restored.process_batch(records[cut:])
        assert out2.records == expected[cut:]


def _window_operator(assigner, contents, backend_snapshot=None, timers=None):
    desc = WindowOperatorDescriptor(
        assigner=assigner,
        trigger=assigner.get_default_trigger(),
        evictor=None,
        allowed_lateness=0,
        late_data_output_tag=None,
        contents=contents,
        reduce_function=(lambda a, b: (a[0], a[1] + b[1])) if contents == "reducing" else None,
        aggregate_function=MutatingAvg2() if contents == "aggregating" else None,
        window_function=(lambda key, w, xs: [(key, w.start, sorted(v for _, v in xs))]) if contents == "list" else None,
        function_kind="window" if contents == "list" else "pass",
    )
    harness = KeyedOneInputStreamOperatorTestHarness(
        create_window_operator(desc, lambda v: v[0]), task_name="", operator_name=""
    ).setup()
    if backend_snapshot is not None:
        harness.keyed_state_backend.restore(backend_snapshot)
    harness.open()
    if timers is not None:
        harness.operator.timer_service.restore(timers)
    return harness.operator, harness.output


class MutatingAvg2(MutatingAvg):
    def add(self, value, acc):
        return MutatingAvg.add(self, value[1], acc)


@SETTINGS
@given(
    st.sampled_from(["tumbling", "sliding"]),
    st.sampled_from(["reducing", "aggregating", "list"]),
    st.lists(st.tuples(st.sampled_from(KEYS[:4]), st.integers(0, 9), st.integers(0, 60)), min_size=1, max_size=80),
    st.integers(0, 79),
    st.integers(1, 10),
)
def test_windows_restored_from_a_snapshot_read_late_fire_like_an_uninterrupted_run(kind, contents, events, cut, run):
    """Window contents and timers snapshotted at a barrier, read only after more elements and
    watermarks changed them, restore into an operator that fires what the uninterrupted
    operator fires after the barrier."""
    assigner = (
        TumblingEventTimeWindows.of(Time.milliseconds(10))
        if kind == "tumbling"
        else SlidingEventTimeWindows.of(Time.milliseconds(20), Time.milliseconds(10))
    )
    events = sorted(events, key=lambda e: e[2])
    cut = cut % (len(events) + 1)

    def feed(op, part):
        for i in range(0, len(part), run):
            chunk = part[i : i + run]
            op.process_timestamped_batch([(k, v) for k, v, _ in chunk], [t for _, _, t in chunk])
            op.process_watermark(chunk[-1][2] - 5)  # watermarks trail the events

    whole, out = _window_operator(assigner, contents)
    feed(whole, events[:cut])
    emitted = len(out.records)
    snapshot = (whole.keyed_state_backend.snapshot(), whole.timer_service.snapshot())
    feed(whole, events[cut:])  # changes state and fires timers before the snapshot is read
    whole.process_watermark(MAX_WATERMARK)
    snapshot = pickle.loads(pickle.dumps(snapshot))
    restored, out2 = _window_operator(assigner, contents, *snapshot)
    if cut:
        restored.process_watermark(events[cut - 1][2] - 5)  # the watermark at the barrier
    feed(restored, events[cut:])
    restored.process_watermark(MAX_WATERMARK)
    assert sorted(map(repr, out.records[emitted:])) == sorted(map(repr, out2.records))


# -- incremental checkpoints of the heap backend -------------------------------------------------
def _checkpoint(backend, storage, checkpoint_id, complete=True):
    """Checkpoint ``checkpoint_id`` of ``backend`` written as the TaskExecutor writes it; completed
    (finalized, the backend notified) or aborted."""
    import cloudpickle

    from raylink.state.state_backend_loader import materialize_snapshot

    snapshot, shared, written = materialize_snapshot({"keyed": backend.snapshot(checkpoint_id)}, storage, checkpoint_id)
    handle = storage.write_state(checkpoint_id, "op", 0, cloudpickle.dumps(snapshot), shared=shared)
    if not complete:
        storage.abort(checkpoint_id)
        return None, written
    completed = storage.finalize(checkpoint_id, {"op": {0: handle}})
    backend.notify_checkpoint_complete(checkpoint_id)
    return completed, written


def _loaded_keyed(completed, subtask=0):
    import cloudpickle

    from raylink.state.checkpoint_storage import read_state_handle
    from raylink.state.state_backend_loader import bind_shared_files

    handle = completed.get_state("op", subtask)
    return bind_shared_files(cloudpickle.loads(read_state_handle(handle)), handle)["keyed"]


def _incremental_backend(key_groups=(0, 127)):
    backend = HeapKeyedStateBackend(key_groups, 128)
    backend.ttl_time_provider = lambda: 1_000
    backend.enable_incremental_checkpoints()
    return backend


def _restored(snapshots, key_groups=(0, 127)):
    from raylink.state.state_backend_loader import restore_keyed_state

    backend = HeapKeyedStateBackend(key_groups, 128)
    backend.ttl_time_provider = lambda: 1_000
    restore_keyed_state(backend, snapshots)
    return backend


incremental_steps = st.lists(
    st.one_of(
        st.tuples(st.sampled_from(OPS), st.sampled_from(KEYS), st.integers(-50, 50)),
        st.tuples(st.sampled_from(["checkpoint", "checkpoint", "abort", "drop"]), st.just(None), st.just(0)),
    ),
    max_size=100,
)


@SETTINGS
@given(incremental_steps)
def test_incremental_heap_checkpoints_restore_exactly_what_each_completed_one_held(tmp_path_factory, program):
    """Every state kind, with checkpoints that complete, are aborted after writing their file,
    or are never written: the latest two retained checkpoints restore (through the files of
    their chains, a full one first) exactly the state at their barriers."""
    from raylink.state.checkpoint_storage import CheckpointStorage
    from raylink.state.heap_incremental import HeapStateHandle

    storage = CheckpointStorage(str(tmp_path_factory.mktemp("chk")), "job", num_retained=2)
    backend = _incremental_backend()
    states = _states(backend)
    reference = _empty_reference()
    completed = []
    checkpoint_id = 0
    for op, key, arg in program + [("checkpoint", None, 0)]:
        if op in ("checkpoint", "abort"):
            checkpoint_id += 1
            done, _ = _checkpoint(backend, storage, checkpoint_id, complete=op == "checkpoint")
            if done is not None:
                completed.append((done, copy.deepcopy(reference)))
        elif op == "drop":
            checkpoint_id += 1
            backend.snapshot(checkpoint_id)  # declined before it was written
            gc.collect()
        else:
            _apply(states, backend, op, key, arg)
            _reference_apply(reference, op, key, arg)
    for done, expected in completed[-2:]:
        handle = _loaded_keyed(done)
        assert isinstance(handle, HeapStateHandle) and handle.files[0][3]  # a chain, full first
        restored = _restored([handle])
        assert _read_all(restored, _states(restored)) == expected
    assert _read_all(backend, states) == reference


def test_an_incremental_heap_checkpoint_writes_the_changes_and_shares_the_rest(tmp_path):
    from raylink.state.checkpoint_storage import CheckpointStorage

    storage = CheckpointStorage(str(tmp_path / "chk"), "job", num_retained=2)
    backend = _incremental_backend()
    table = backend.get_table("_op_state", "value")
    for k in range(20_000):
        table.live[k] = (k, 1)
    first, full = _checkpoint(backend, storage, 1)
    for k in range(0, 20_000, 100):  # 1% of the keys change
        table.live[k] = (k, 2)
    second, changes = _checkpoint(backend, storage, 2)
    assert changes < 0.05 * full
    files = _loaded_keyed(second).files
    assert [f[3] for f in files] == [True, False] and files[0] == _loaded_keyed(first).files[0]
    restored = _restored([_loaded_keyed(second)])
    expected = {k: (k, 2 if k % 100 == 0 else 1) for k in range(20_000)}
    assert {k: restored.get_table("_op_state", "value").lookup(k) for k in expected} == expected


def test_deleting_retained_heap_checkpoints_never_breaks_a_later_one(tmp_path):
    """Older checkpoints' folders deleted by hand; the newest restores, and so does a copy of
    the job folder elsewhere and a savepoint of it, each on its own."""
    from raylink.state.checkpoint_storage import CheckpointStorage, load_completed_checkpoint

    storage = CheckpointStorage(str(tmp_path / "chk"), "job", num_retained=3)
    backend = _incremental_backend()
    table = backend.get_table("_op_state", "value")
    expected = {}
    for checkpoint_id in range(1, 12):  # long enough for the chain to start again
        for key in range(checkpoint_id * 100, checkpoint_id * 100 + 300):
            table.live[key] = expected[key] = checkpoint_id
        table.remove(checkpoint_id)
        expected.pop(checkpoint_id, None)
        done, _ = _checkpoint(backend, storage, checkpoint_id)
    for old in (9, 10):
        import shutil

        shutil.rmtree(os.path.join(storage.checkpoints_dir, "job", f"chk-{old}"))
    latest = CheckpointStorage(str(tmp_path / "chk"), "job", num_retained=3).latest_completed()
    assert latest.checkpoint_id == 11
    assert dict(_restored([_loaded_keyed(latest)]).get_table("_op_state", "value").flat_items()) == expected
    savepoint = storage.write_savepoint(done, str(tmp_path / "savepoints"))
    import shutil

    shutil.copytree(tmp_path / "chk" / "job", tmp_path / "elsewhere" / "job")
    shutil.rmtree(tmp_path / "chk")
    for path in (str(tmp_path / "elsewhere" / "job" / "chk-11"), savepoint):
        restored = _restored([_loaded_keyed(load_completed_checkpoint(path))])
        assert dict(restored.get_table("_op_state", "value").flat_items()) == expected


@pytest.mark.parametrize("new_parallelism", [1, 3])
def test_incremental_heap_checkpoints_restore_rescaled_and_into_rocksdb(new_parallelism, tmp_path):
    from raylink.state.checkpoint_storage import CheckpointStorage
    from raylink.state.rocksdb_keyed_state_backend import RocksDBKeyedStateBackend, RocksDBSettings
    from raylink.state.state_backend import key_group_range_for_subtask
    from raylink.state.state_backend_loader import restore_keyed_state

    storage = CheckpointStorage(str(tmp_path / "chk"), "job")
    old = [_incremental_backend(key_group_range_for_subtask(128, 2, i)) for i in range(2)]
    expected = {}
    for round_ in range(3):
        for backend in old:
            table = backend.get_table("_op_state", "value")
            for key in range(400):
                if backend.start <= assign_to_key_group(key, 128) <= backend.end and key % (round_ + 1) == 0:
                    table.live[key] = expected[key] = (key, round_)
        handles = {}
        for i, backend in enumerate(old):
            import cloudpickle

            from raylink.state.state_backend_loader import materialize_snapshot

            snapshot, shared, _ = materialize_snapshot({"keyed": backend.snapshot(round_ + 1)}, storage, round_ + 1)
            handles[i] = storage.write_state(round_ + 1, "op", i, cloudpickle.dumps(snapshot), shared=shared)
        done = storage.finalize(round_ + 1, {"op": handles})
        for backend in old:
            backend.notify_checkpoint_complete(round_ + 1)
    keyed = [_loaded_keyed(done, i) for i in range(2)]
    for i in range(new_parallelism):
        key_groups = key_group_range_for_subtask(128, new_parallelism, i)
        heap = _restored(keyed, key_groups)
        rocks = RocksDBKeyedStateBackend(key_groups, 128, RocksDBSettings(str(tmp_path / f"local{i}")))
        restore_keyed_state(rocks, keyed)
        mine = {k: v for k, v in expected.items() if key_groups[0] <= assign_to_key_group(k, 128) <= key_groups[1]}
        assert dict(heap.get_table("_op_state", "value").flat_items()) == mine
        assert dict(rocks.get_table("_op_state", "value").values.items()) == mine
        rocks.dispose()


def test_snapshots_dropped_unread_for_long_do_not_pile_up_layers():
    """Checkpoints declined before their snapshots were read (nothing merges their layers):
    a later barrier merges them, and the state reads the same."""
    backend = HeapKeyedStateBackend((0, 127), 128)
    table = backend.get_table("_op_state", "value")
    expected = {}
    for round_ in range(40):
        for k in range(round_, round_ + 50):
            table.live[k] = expected[k] = round_
        table.remove(round_)
        expected.pop(round_)
        backend.snapshot()  # dropped unread
        gc.collect()
        assert len(table.lower) <= 17
    assert dict(table.flat_items()) == expected
    assert dict(_flat(backend.snapshot())) == expected
