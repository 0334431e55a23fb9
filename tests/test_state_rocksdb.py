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
        assert len(left) == 1 and left[0].startswith(f"rocksdb-pid{child.pid}-")
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(30)
    backend = make("rocksdb", tmp_path)  # the next backend on this folder cleans up
    assert os.listdir(local) == [os.path.basename(backend._resources.folder)]
