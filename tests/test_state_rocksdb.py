"""The RocksDB keyed backend against plain dicts, and its checkpoints in the checkpoint storage.

Every state kind (value, list, map, reducing, aggregating, namespaced window contents) is
driven by random operations on both backends and checked against a dict reference computed
here; snapshots are restored at other key-group ranges (rescaling) and into the other backend;
incremental checkpoints upload only new files, shared files live as long as a retained
checkpoint names them, deleting a retained checkpoint never breaks a later one, and a
copied job folder or a savepoint restores on its own. No Ray.
"""

from __future__ import annotations

import os
import random
import shutil

import pytest

from raylink.core.state import (
    AggregatingStateDescriptor,
    ListStateDescriptor,
    MapStateDescriptor,
    ReducingStateDescriptor,
    ValueStateDescriptor,
)
from raylink.state.checkpoint_storage import CheckpointStorage, load_completed_checkpoint
from raylink.state.rocksdb_keyed_state_backend import RocksDBKeyedStateBackend, RocksDBSettings
from raylink.state.state_backend import HeapKeyedStateBackend, key_group_range_for_subtask
from raylink.state.state_backend_loader import bind_shared_files, materialize_snapshot, restore_keyed_state

pytestmark = pytest.mark.timeout(120)

MAX_P = 128


class Avg:
    def create_accumulator(self):
        return (0, 0)

    def add(self, value, acc):
        return (acc[0] + value, acc[1] + 1)

    def get_result(self, acc):
        return acc[0] / acc[1]

    def merge(self, a, b):
        return (a[0] + b[0], a[1] + b[1])


def make(kind, tmp_path, key_groups=(0, MAX_P - 1), incremental=True):
    if kind == "heap":
        return HeapKeyedStateBackend(key_groups, MAX_P)
    return RocksDBKeyedStateBackend(
        key_groups, MAX_P, RocksDBSettings(str(tmp_path / "local"), incremental=incremental, write_batch_bytes=4096)
    )


def descriptors():
    return {
        "value": ValueStateDescriptor("v", None),
        "list": ListStateDescriptor("l", None),
        "map": MapStateDescriptor("m", None, None),
        "reducing": ReducingStateDescriptor("r", lambda a, b: a + b, None),
        "aggregating": AggregatingStateDescriptor("a", Avg(), None),
    }


def drive(backend, ops):
    """Apply ``ops`` through the descriptor states; returns what the reads returned."""
    states = {kind: backend.get_or_create_state(d) for kind, d in descriptors().items()}
    window = backend.get_namespaced_table("window-contents", "reducing").values
    reads = []
    for op, key, arg in ops:
        backend.set_current_key(key)
        if op == "value":
            states["value"].update(arg)
        elif op == "list":
            states["list"].add(arg)
        elif op == "map":
            states["map"].put(arg % 5, arg)
        elif op == "map-remove":
            states["map"].remove(arg % 5)
        elif op == "reducing":
            states["reducing"].add(arg)
        elif op == "aggregating":
            states["aggregating"].add(arg)
        elif op == "clear":
            states["list"].clear()
        elif op == "window":  # the window operator's fast path: panes per namespace
            pane = window.get(arg % 3)
            if pane is None:
                pane = window.setdefault(arg % 3, {})
            current = pane.get(key)
            pane[key] = arg if current is None else current + arg
        elif op == "fire":
            pane = window.get(arg % 3)
            if pane is not None:
                reads.append(("fired", key, arg % 3, pane.pop(key, None)))
                if not pane:
                    del window[arg % 3]
        reads.append(
            (
                key,
                states["value"].value(),
                list(states["list"].get()),
                sorted(states["map"].items()),
                states["reducing"].get(),
                states["aggregating"].get(),
            )
        )
    return reads


def reference(ops):
    """The same reads from plain dicts."""
    value, lists, maps, red, agg, window = {}, {}, {}, {}, {}, {}
    reads = []
    for op, key, arg in ops:
        if op == "value":
            value[key] = arg
        elif op == "list":
            lists.setdefault(key, []).append(arg)
        elif op == "map":
            maps.setdefault(key, {})[arg % 5] = arg
        elif op == "map-remove":
            maps.get(key, {}).pop(arg % 5, None)
        elif op == "reducing":
            red[key] = red.get(key, 0) + arg
        elif op == "aggregating":
            s, n = agg.get(key, (0, 0))
            agg[key] = (s + arg, n + 1)
        elif op == "clear":
            lists.pop(key, None)
        elif op == "window":
            window[(key, arg % 3)] = window.get((key, arg % 3), 0) + arg
        elif op == "fire":
            if any(ns == arg % 3 for _, ns in window):
                reads.append(("fired", key, arg % 3, window.pop((key, arg % 3), None)))
        s, n = agg.get(key, (0, 0))
        reads.append(
            (
                key,
                value.get(key),
                list(lists.get(key, [])),
                sorted(maps.get(key, {}).items()),
                red.get(key),
                (s / n) if n else None,
            )
        )
    return reads, {"value": value, "list": lists, "map": maps, "reducing": red, "window": window}


OPS = ["value", "list", "map", "map-remove", "reducing", "aggregating", "clear", "window", "fire"]


def random_ops(seed, n=3000, keys=200):
    rng = random.Random(seed)
    return [(rng.choice(OPS), rng.randrange(keys), rng.randrange(1, 100)) for _ in range(n)]


def contents(backend):
    """Every state's entries of ``backend``, read through the descriptor states."""
    out = {"value": {}, "list": {}, "map": {}, "reducing": {}, "window": {}}
    states = {kind: backend.get_or_create_state(d) for kind, d in descriptors().items()}
    for kind in ("value", "list", "map", "reducing"):
        for key in backend.keys(descriptors()[kind].name):
            backend.set_current_key(key)
            state = states[kind]
            if kind == "value":
                out[kind][key] = state.value()
            elif kind == "map":
                if not state.is_empty():
                    out[kind][key] = dict(state.items())
            else:
                out[kind][key] = list(state.get()) if kind == "list" else state.get()
    window = backend.get_namespaced_table("window-contents", "reducing").values
    for ns, pane in list(window.items()):
        for key, v in pane.items():
            out["window"][(key, ns)] = v
    return out


def expected_contents(state, key_groups=None):
    def mine(key):
        if key_groups is None:
            return True
        from raylink.core.key_groups import assign_to_key_group

        return key_groups[0] <= assign_to_key_group(key, MAX_P) <= key_groups[1]

    return {
        "value": {k: v for k, v in state["value"].items() if mine(k)},
        "list": {k: v for k, v in state["list"].items() if mine(k) and v},
        "map": {k: v for k, v in state["map"].items() if mine(k) and v},
        "reducing": {k: v for k, v in state["reducing"].items() if mine(k)},
        "window": {k: v for k, v in state["window"].items() if mine(k[0])},
    }


def checkpoint(backend, storage, checkpoint_id):
    """The backend's checkpoint ``checkpoint_id`` written and completed, as the runtime does."""
    snapshot, shared, written = materialize_snapshot({"keyed": backend.snapshot(checkpoint_id)}, storage, checkpoint_id)
    import cloudpickle

    handle = storage.write_state(checkpoint_id, "op", 0, cloudpickle.dumps(snapshot), shared=shared)
    completed = storage.finalize(checkpoint_id, {"op": {0: handle}})
    backend.notify_checkpoint_complete(checkpoint_id)
    return completed, written


def loaded_keyed(completed):
    import cloudpickle

    from raylink.state.checkpoint_storage import read_state_handle

    handle = completed.get_state("op", 0)
    return bind_shared_files(cloudpickle.loads(read_state_handle(handle)), handle)["keyed"]


@pytest.mark.parametrize("kind", ["heap", "rocksdb"])
def test_every_state_kind_reads_what_a_dict_reference_reads(kind, tmp_path):
    ops = random_ops(1)
    backend = make(kind, tmp_path)
    expected_reads, state = reference(ops)
    assert drive(backend, ops) == expected_reads
    assert contents(backend) == expected_contents(state)


@pytest.mark.parametrize("target_kind", ["heap", "rocksdb"])
@pytest.mark.parametrize("new_parallelism", [1, 2, 3])
def test_a_rocksdb_checkpoint_restores_at_any_parallelism_into_either_backend(target_kind, new_parallelism, tmp_path):
    ops = random_ops(2)
    _, state = reference(ops)
    storage = CheckpointStorage(str(tmp_path / "chk"), "job")
    old = [make("rocksdb", tmp_path, key_group_range_for_subtask(MAX_P, 2, i)) for i in range(2)]
    handles = []
    for i, backend in enumerate(old):
        from raylink.core.key_groups import assign_to_key_group

        drive(backend, [op for op in ops if backend.start <= assign_to_key_group(op[1], MAX_P) <= backend.end])
        storage_i = CheckpointStorage(str(tmp_path / f"chk{i}"), "job")
        completed, _ = checkpoint(backend, storage_i, 1)
        handles.append(loaded_keyed(completed))
    del storage
    for i in range(new_parallelism):
        groups = key_group_range_for_subtask(MAX_P, new_parallelism, i)
        backend = make(target_kind, tmp_path, groups)
        restore_keyed_state(backend, handles)
        assert contents(backend) == expected_contents(state, groups)


def test_a_heap_snapshot_restores_into_rocksdb(tmp_path):
    ops = random_ops(3)
    _, state = reference(ops)
    heap = make("heap", tmp_path)
    drive(heap, ops)
    snapshot = dict(heap.snapshot())
    for i in range(2):
        groups = key_group_range_for_subtask(MAX_P, 2, i)
        backend = make("rocksdb", tmp_path, groups)
        restore_keyed_state(backend, [snapshot])
        assert contents(backend) == expected_contents(state, groups)


def test_incremental_checkpoints_upload_only_new_files_and_share_the_rest(tmp_path):
    backend = make("rocksdb", tmp_path)
    table = backend.get_table("_op_state", "value").values
    for key in range(20000):
        table[key] = (key, 0)
    storage = CheckpointStorage(str(tmp_path / "chk"), "job", num_retained=3)
    first, full = checkpoint(backend, storage, 1)
    for key in range(0, 20000, 100):  # 1% of the keys change
        table[key] = (key, 1)
    second, incremental = checkpoint(backend, storage, 2)
    assert incremental < full * 0.2
    shared_first = set(first.get_state("op", 0).shared)
    shared_second = set(second.get_state("op", 0).shared)
    assert shared_first < shared_second  # the first checkpoint's files are shared, not copied
    restored = make("rocksdb", tmp_path)
    restore_keyed_state(restored, [loaded_keyed(second)])
    values = restored.get_table("_op_state", "value").values
    assert dict(values.items()) == {k: (k, 1 if k % 100 == 0 else 0) for k in range(20000)}


def test_without_incremental_every_checkpoint_uploads_everything(tmp_path):
    backend = make("rocksdb", tmp_path, incremental=False)
    table = backend.get_table("_op_state", "value").values
    for key in range(5000):
        table[key] = key
    storage = CheckpointStorage(str(tmp_path / "chk"), "job", num_retained=2)
    first, full = checkpoint(backend, storage, 1)
    second, again = checkpoint(backend, storage, 2)
    assert not set(first.get_state("op", 0).shared) & set(second.get_state("op", 0).shared)
    assert again >= full * 0.9


def shared_files(storage):
    folder = os.path.join(storage.checkpoints_dir, storage.job_id, "shared")
    return {os.path.join(folder, name) for name in os.listdir(folder)} if os.path.isdir(folder) else set()


def test_shared_files_live_as_long_as_a_retained_checkpoint_names_them(tmp_path):
    backend = make("rocksdb", tmp_path)
    table = backend.get_table("_op_state", "value").values
    storage = CheckpointStorage(str(tmp_path / "chk"), "job", num_retained=2)
    rng = random.Random(4)
    expected = {}
    completed = []
    for checkpoint_id in range(1, 9):
        for _ in range(3000):
            key = rng.randrange(50000)
            expected[key] = checkpoint_id
            table[key] = checkpoint_id
        if checkpoint_id == 5:
            backend.db.compact_range(None, None)  # compaction replaces files the older checkpoints share
        completed.append(checkpoint(backend, storage, checkpoint_id)[0])
        retained = completed[-2:]
        named = set().union(*(set(c.get_state("op", 0).shared) for c in retained))
        assert shared_files(storage) == named  # nothing a retained checkpoint names is gone, nothing else is left
    restored = make("rocksdb", tmp_path)
    restore_keyed_state(restored, [loaded_keyed(storage.latest_completed())])
    assert dict(restored.get_table("_op_state", "value").values.items()) == expected


def test_deleting_a_retained_checkpoint_never_breaks_a_later_one(tmp_path):
    backend = make("rocksdb", tmp_path)
    table = backend.get_table("_op_state", "value").values
    storage = CheckpointStorage(str(tmp_path / "chk"), "job", num_retained=3)
    for checkpoint_id in range(1, 4):
        for key in range(checkpoint_id * 1000):
            table[key] = checkpoint_id
        checkpoint(backend, storage, checkpoint_id)
    expected = dict(table.items())
    # a user deletes the older retained checkpoints' folders; the newest still restores
    shutil.rmtree(os.path.join(storage.checkpoints_dir, "job", "chk-1"))
    shutil.rmtree(os.path.join(storage.checkpoints_dir, "job", "chk-2"))
    reopened = CheckpointStorage(str(tmp_path / "chk"), "job", num_retained=3)
    latest = reopened.latest_completed()
    assert latest.checkpoint_id == 3
    restored = make("rocksdb", tmp_path)
    restore_keyed_state(restored, [loaded_keyed(latest)])
    assert dict(restored.get_table("_op_state", "value").values.items()) == expected
    # and later checkpoints of the reopened store subsume the deleted ones without harm
    for key in range(100):
        table[key] = 4
    checkpoint(backend, reopened, 4)
    checkpoint(backend, reopened, 5)
    checkpoint(backend, reopened, 6)
    restored = make("rocksdb", tmp_path)
    restore_keyed_state(restored, [loaded_keyed(reopened.latest_completed())])
    assert dict(restored.get_table("_op_state", "value").values.items()) == {**expected, **{k: 4 for k in range(100)}}


def test_a_copied_job_folder_and_a_savepoint_restore_on_their_own(tmp_path):
    backend = make("rocksdb", tmp_path)
    table = backend.get_table("_op_state", "value").values
    storage = CheckpointStorage(str(tmp_path / "chk"), "job", num_retained=2)
    for checkpoint_id in range(1, 4):
        for key in range(checkpoint_id * 2000):
            table[key] = (checkpoint_id, key)
        completed = checkpoint(backend, storage, checkpoint_id)[0]
    expected = dict(table.items())
    savepoint = storage.write_savepoint(completed, str(tmp_path / "savepoints"))
    shutil.copytree(tmp_path / "chk" / "job", tmp_path / "elsewhere" / "job")
    shutil.rmtree(tmp_path / "chk")  # the original is gone
    for path in (str(tmp_path / "elsewhere" / "job" / "chk-3"), savepoint):
        restored = make("rocksdb", tmp_path)
        restore_keyed_state(restored, [loaded_keyed(load_completed_checkpoint(path))])
        assert dict(restored.get_table("_op_state", "value").values.items()) == expected
    shutil.rmtree(tmp_path / "elsewhere" / "job" / "shared")
    with pytest.raises(Exception, match="shared state file .* is missing"):
        load_completed_checkpoint(str(tmp_path / "elsewhere" / "job" / "chk-3"))


def test_rocksdb_backend_releases_its_working_folder(tmp_path):
    backend = make("rocksdb", tmp_path)
    backend.get_table("_op_state", "value").values[1] = 1
    folder = backend._resources.folder
    assert os.path.isdir(folder)
    backend.dispose()
    assert not os.path.exists(folder)


def test_files_of_a_checkpoint_that_never_completes_are_deleted(tmp_path):
    backend = make("rocksdb", tmp_path)
    table = backend.get_table("_op_state", "value").values
    storage = CheckpointStorage(str(tmp_path / "chk"), "job", num_retained=1)
    for key in range(3000):
        table[key] = key
    completed = checkpoint(backend, storage, 1)[0]
    kept = set(completed.get_state("op", 0).shared)
    for checkpoint_id in (2, 3):  # uploaded, then aborted (2) or overtaken by a later one (3)
        for key in range(checkpoint_id * 1000):
            table[key] = -checkpoint_id
        materialize_snapshot({"keyed": backend.snapshot(checkpoint_id)}, storage, checkpoint_id)
        storage.write_state(checkpoint_id, "op", 0, b"never completes")
        if checkpoint_id == 2:
            storage.abort(2)
            assert shared_files(storage) == kept
    latest = checkpoint(backend, storage, 4)[0]
    assert shared_files(storage) == set(latest.get_state("op", 0).shared)
    restored = make("rocksdb", tmp_path)
    restore_keyed_state(restored, [loaded_keyed(latest)])
    assert dict(restored.get_table("_op_state", "value").values.items()) == dict(table.items())


def test_values_of_a_state_with_a_declared_type_use_the_streams_codec_not_pickle(tmp_path):
    from raylink.core.types import Types
    from raylink.shuffle import codec

    backend = make("rocksdb", tmp_path)
    typed = backend.get_or_create_state(ValueStateDescriptor("typed", Types.TUPLE([Types.STRING(), Types.INT()])))
    listed = backend.get_or_create_state(ListStateDescriptor("listed", Types.INT()))
    untyped = backend.get_or_create_state(ValueStateDescriptor("untyped", Types.PICKLED_BYTE_ARRAY()))
    for key in range(50):
        backend.set_current_key(key)
        typed.update((f"k{key}", key))
        listed.add(key)
        listed.add(-key)
        untyped.update({key})
    backend.flush()
    kinds = {"typed": "value", "listed": "list", "untyped": "value"}
    stored = {name: list(backend.get_table(name, kind).values._raw_items()) for name, kind in kinds.items()}
    typed_bytes = [v for _, v in stored["typed"]]
    assert len(typed_bytes) == 50 and all(
        codec.decode(v[1:]) == (f"k{k}", k)
        for k, v in zip(sorted(range(50), key=lambda k: backend.key_group_of(k)), typed_bytes)
    )
    assert all(v[0] == 0xC1 for _, v in stored["listed"])
    assert all(v[:1] == b"\x80" for _, v in stored["untyped"])  # pickle
    restored = make("rocksdb", tmp_path)
    storage = CheckpointStorage(str(tmp_path / "chk"), "job")
    restore_keyed_state(restored, [loaded_keyed(checkpoint(backend, storage, 1)[0])])
    for key in range(50):
        restored.set_current_key(key)
        assert restored.get_or_create_state(ValueStateDescriptor("typed", None)).value() == (f"k{key}", key)
        assert restored.get_or_create_state(ListStateDescriptor("listed", None)).get() == [key, -key]
        assert restored.get_or_create_state(ValueStateDescriptor("untyped", None)).value() == {key}


def test_working_folders_of_a_killed_process_are_removed_by_the_next_backend(tmp_path):
    import signal
    import subprocess
    import sys

    local = tmp_path / "local"
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from raylink.state.rocksdb_keyed_state_backend import *;"
            f"b = RocksDBKeyedStateBackend((0, 127), 128, RocksDBSettings({str(local)!r}));"
            "b.get_table('_op_state', 'value').values[1] = 1; b.flush(); print('ready', flush=True); time.sleep(600)",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout.readline().strip() == "ready"
        left = os.listdir(local)
        assert len(left) == 1 and left[0].startswith("rocksdb-")
        alive = make("rocksdb", tmp_path)  # a backend started while the child lives leaves its folder
        assert sorted(os.listdir(local)) == sorted(left + [os.path.basename(alive._resources.folder)])
        alive.dispose()
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(30)
    backend = make("rocksdb", tmp_path)  # the next backend on this folder cleans up
    assert os.listdir(local) == [os.path.basename(backend._resources.folder)]


# -- map state: one RocksDB entry per user key -------------------------------------------------------------
MAP_KEYS = [0, 7, 42, "k", ("t", 1), frozenset({1, 2}), 2**70]  # frozenset, 2**70: pickled keys
USER_KEYS = [0, 1, -3, "a", "", ("u", 2), frozenset({3}), 2**80, 1.5]
MAP_OPS = ["get", "put", "put_all", "remove", "contains", "keys", "values", "items", "is_empty", "clear"]
MAP_OPS += ["setitem", "getitem", "delitem", "in", "iter", "flush", "restore"]


def map_ops(seed, n=1500):
    rng = random.Random(seed)
    ops = []
    for _ in range(n):
        op = rng.choice(MAP_OPS + ["put"] * 4)
        arg = {uk: rng.randrange(100) for uk in rng.sample(USER_KEYS, 3)} if op == "put_all" else rng.choice(USER_KEYS)
        ops.append((op, rng.choice(MAP_KEYS), arg, rng.randrange(1000)))
    return ops


def run_map_ops(backend, ops, restore):
    """``ops`` through a MapState (``restore(backend) -> backend`` at a "restore"); what each returned."""
    descriptor = MapStateDescriptor("user-map", None, None)
    state = backend.get_or_create_state(descriptor)
    reads = []
    for op, key, arg, value in ops:
        if op == "restore":
            backend = restore(backend)
            state = backend.get_or_create_state(descriptor)
            continue
        if op == "flush":
            getattr(backend, "flush", lambda: None)()
            continue
        backend.set_current_key(key)
        if op == "put":
            state.put(arg, value)
        elif op == "setitem":
            state[arg] = value
        elif op == "put_all":
            state.put_all(arg)
        elif op == "remove":
            state.remove(arg)
        elif op == "delitem":
            del state[arg]
        elif op == "clear":
            state.clear()
        elif op == "getitem":
            reads.append(state[arg])
        elif op in ("keys", "values", "items", "iter"):
            got = list(state) if op == "iter" else list(getattr(state, op)())
            reads.append(sorted(map(repr, got)))
        elif op == "in":
            reads.append(arg in state)
        else:
            reads.append(getattr(state, op)() if op == "is_empty" else getattr(state, op)(arg))
    return backend, reads


def map_reference(ops):
    maps, reads = {}, []
    for op, key, arg, value in ops:
        m = maps.setdefault(key, {})
        if op in ("put", "setitem"):
            m[arg] = value
        elif op == "put_all":
            m.update(arg)
        elif op in ("remove", "delitem"):
            m.pop(arg, None)
        elif op == "clear":
            m.clear()
        elif op in ("get", "getitem"):
            reads.append(m.get(arg))
        elif op in ("contains", "in"):
            reads.append(arg in m)
        elif op in ("keys", "iter"):
            reads.append(sorted(map(repr, m)))
        elif op == "values":
            reads.append(sorted(map(repr, m.values())))
        elif op == "items":
            reads.append(sorted(map(repr, m.items())))
        elif op == "is_empty":
            reads.append(not m)
    return reads, {k: m for k, m in maps.items() if m}


def map_contents(backend):
    state = backend.get_or_create_state(MapStateDescriptor("user-map", None, None))
    out = {}
    for key in backend.keys("user-map"):
        backend.set_current_key(key)
        if not state.is_empty():
            out[key] = dict(state.items())
    return out


def through_checkpoint(backend, tmp_path, target_kind, key_groups=(0, MAX_P - 1), checkpoint_id=1):
    """``backend``'s state through a completed checkpoint (a heap snapshot as it is) into a new
    backend of ``target_kind`` holding ``key_groups``."""
    if isinstance(backend, RocksDBKeyedStateBackend):
        storage = CheckpointStorage(str(tmp_path / f"chk-{checkpoint_id}"), "job")
        completed, _ = checkpoint(backend, storage, checkpoint_id)
        snapshot = loaded_keyed(completed)
    else:
        snapshot = dict(backend.snapshot())
    restored = make(target_kind, tmp_path, key_groups)
    restore_keyed_state(restored, [snapshot])
    return restored


@pytest.mark.parametrize("kind", ["heap", "rocksdb"])
def test_every_map_state_method_reads_what_a_dict_reference_reads(kind, tmp_path):
    ops = map_ops(4)
    expected_reads, expected = map_reference(ops)
    restores = iter(range(2, 1000))

    def restore(backend):  # into the other backend and back, alternately
        other = "heap" if isinstance(backend, RocksDBKeyedStateBackend) else "rocksdb"
        return through_checkpoint(backend, tmp_path, other, checkpoint_id=next(restores))

    backend, reads = run_map_ops(make(kind, tmp_path), ops, restore)
    assert reads == expected_reads
    assert map_contents(backend) == expected


@pytest.mark.parametrize("source_kind", ["heap", "rocksdb"])
@pytest.mark.parametrize("target_kind", ["heap", "rocksdb"])
def test_map_state_restores_rescaled_between_the_backends(source_kind, target_kind, tmp_path):
    ops = [op for op in map_ops(5) if op[0] != "restore"]
    _, expected = map_reference(ops)
    old = []
    for i in range(2):
        groups = key_group_range_for_subtask(MAX_P, 2, i)
        from raylink.core.key_groups import assign_to_key_group

        mine = [op for op in ops if groups[0] <= assign_to_key_group(op[1], MAX_P) <= groups[1]]
        backend, _ = run_map_ops(make(source_kind, tmp_path, groups), mine, None)
        old.append(backend)
    snapshots = []
    for i, backend in enumerate(old):
        if source_kind == "rocksdb":
            completed, _ = checkpoint(backend, CheckpointStorage(str(tmp_path / f"old{i}"), "job"), 1)
            snapshots.append(loaded_keyed(completed))
        else:
            snapshots.append(dict(backend.snapshot()))
    got = {}
    for i in range(3):
        backend = make(target_kind, tmp_path, key_group_range_for_subtask(MAX_P, 3, i))
        restore_keyed_state(backend, snapshots)
        part = map_contents(backend)
        assert not set(part) & set(got)
        got.update(part)
    assert got == expected


def test_a_map_with_many_user_keys_is_one_rocksdb_entry_per_user_key(tmp_path, monkeypatch):
    """A get, put, remove or contains on a big map reads and writes one entry, never the map."""
    from raylink.state import rocksdb_map_state

    backend = make("rocksdb", tmp_path)
    state = backend.get_or_create_state(MapStateDescriptor("big", None, None))
    backend.set_current_key("k")
    n = 50_000
    state.put_all({i: ("v", i) for i in range(n)})
    table = backend.get_table("big", "map").values
    assert table._pending <= backend.cache_capacity  # written as they came, not held in memory
    backend.flush()
    assert sum(1 for _ in table._raw_items()) == n  # one RocksDB entry per user key
    loads = []
    real = rocksdb_map_state.load_value
    monkeypatch.setattr(rocksdb_map_state, "load_value", lambda raw: loads.append(1) or real(raw))
    assert state.get(123) == ("v", 123) and state.contains(n - 1) and not state.contains(n)
    state.put(n, "new")
    state.remove(7)
    assert not state.is_empty()
    assert len(loads) <= 2  # the get and the removed entry's value, nothing else
    backend.flush()
    assert sum(1 for _ in table._raw_items()) == n
    items = state.items()
    first = next(items)  # iteration is lazy: one entry read
    assert first == (0, ("v", 0)) and len(loads) <= 3
    assert dict(state.items()) == {**{i: ("v", i) for i in range(n) if i != 7}, n: "new"}
    state.clear()
    assert state.is_empty() and list(state.keys()) == []
    backend.flush()
    assert sum(1 for _ in table._raw_items()) == 0


def test_index_and_filter_blocks_are_inside_the_memory_bound(tmp_path):
    """RocksDB's index and filter blocks live in the backend's block cache (as in Flink with
    managed memory): the open files hold next to nothing outside it, the cache stays within the
    bound, and point lookups still find exactly the stored keys (bench/rocksdb_memory.py
    measures the same at 10 M keys)."""
    import struct

    import rocksdict

    from raylink.state.rocksdb_options import open_db

    bound = 16 * 1024 * 1024
    db = open_db(str(tmp_path / "db"), RocksDBSettings(local_directory=str(tmp_path), memory_bytes=bound))
    keys = 400_000
    try:
        for first in range(0, keys, 10_000):
            batch = rocksdict.WriteBatch(raw_mode=True)
            for i in range(first, first + 10_000):
                batch.put(struct.pack(">Q", 2 * i), b"v" * 16)  # the even numbers are stored
            db.write(batch)
        db.flush()
        rng = random.Random(7)
        probes = [rng.randrange(2 * keys) for _ in range(20_000)]
        found = [p for p in probes if db.get(struct.pack(">Q", p)) is not None]
        assert found == [p for p in probes if p % 2 == 0]
        assert db.property_int_value("rocksdb.total-sst-files-size") > 2 * 1024 * 1024  # lookups read files
        readers = db.property_int_value("rocksdb.estimate-table-readers-mem")
        assert readers < 64 * 1024, readers  # outside the cache: ~12 bits a key (~450 KB here) before
        assert db.property_int_value("rocksdb.block-cache-usage") <= bound
    finally:
        db.close()


def test_the_rocksdb_memory_bench_runs_and_finds_exactly_the_stored_keys(capsys):
    """bench/rocksdb_memory.py at a tiny size, in its own process as it runs (it raises when a
    lookup misses a stored key or finds an absent one)."""
    from raylink.bench import rocksdb_memory

    rocksdb_memory.main(["--keys", "20000", "--memory", "16", "--lookups", "2000"])
    rows = [line.split() for line in capsys.readouterr().out.splitlines() if line.strip().startswith("20,000")]
    assert len(rows) == 1 and rows[0][1] == "16"
    assert float(rows[0][-1]) <= 1.0  # (block cache + readers) / bound


@pytest.mark.skipif(os.getuid() != 0, reason="making a folder of another user needs root (CI runs as root)")
def test_a_default_working_folder_another_user_holds_is_passed_over(tmp_path, monkeypatch):
    """``<temp>/raylink-rocksdb-<uid>`` made first by another user (uid 65534, mode 0700) does not
    stop a backend without ``localdir``: it works in a private folder of its own instead."""
    from raylink.state import rocksdb_options
    from raylink.state.rocksdb_options import default_local_directory

    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    monkeypatch.setattr(rocksdb_options, "_fallback_directory", [])
    squatted = tmp_path / f"raylink-rocksdb-{os.getuid()}"
    squatted.mkdir(mode=0o700)
    os.chown(squatted, 65534, 65534)
    folder = default_local_directory()
    assert folder != str(squatted) and os.stat(folder).st_uid == os.getuid()
    assert os.stat(folder).st_mode & 0o077 == 0
    backend = RocksDBKeyedStateBackend(key_group_range_for_subtask(128, 1, 0), 128)
    backend.get_table("_op_state", "value").values[1] = 41
    assert backend._resources.folder.startswith(folder)
    assert os.listdir(squatted) == []
    backend.dispose()


def test_the_default_working_folder_is_this_users_and_private(tmp_path, monkeypatch):
    from raylink.state.rocksdb_options import default_local_directory

    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    folder = default_local_directory()
    assert folder == str(tmp_path / f"raylink-rocksdb-{os.getuid()}")
    assert os.stat(folder).st_mode & 0o777 == 0o700
    assert default_local_directory() == folder
