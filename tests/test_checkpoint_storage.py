"""Checkpoint storage (raylink.state.checkpoint_storage): layout, _metadata, retention,
fallback past unusable checkpoints, clear errors — on a local folder and on fsspec's memory://."""

from __future__ import annotations

import logging
import os
import pickle
import shutil
import struct
import tempfile
import uuid
from concurrent.futures import ThreadPoolExecutor

import fsspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from raylink.api.configuration import Configuration
from raylink.state.checkpoint_storage import (
    METADATA_VERSION,
    ByteStreamStateHandle,
    CheckpointStorage,
    CheckpointStorageError,
    FileStateHandle,
)

JOB = "0123456789abcdef0123456789abcdef"


@pytest.fixture(params=["local", "memory"])
def root(request, tmp_path):
    """A checkpoints directory: a local folder, or a fresh memory:// root (removed after)."""
    if request.param == "local":
        yield str(tmp_path / "checkpoints")
        return
    url = f"memory://ckpt-{uuid.uuid4().hex}"
    yield url
    fs, path = fsspec.core.url_to_fs(url)
    if fs.exists(path):
        fs.rm(path, recursive=True)


def _fs(url):
    return fsspec.core.url_to_fs(url)


def _names(url):
    fs, path = _fs(url)
    return sorted(os.path.basename(p.rstrip("/")) for p in fs.ls(path, detail=False)) if fs.exists(path) else []


def _complete(storage, checkpoint_id, blobs, properties=None):
    """Writes ``blobs`` ({operator: {subtask: bytes}}) and finalizes the checkpoint."""
    handles = {
        op: {i: storage.write_state(checkpoint_id, op, i, data) for i, data in subtasks.items()}
        for op, subtasks in blobs.items()
    }
    return storage.finalize(checkpoint_id, handles, properties or {}, trigger_timestamp=1000 + checkpoint_id)


def test_round_trip_layout_and_metadata(root):
    storage = CheckpointStorage(root, JOB, inline_threshold=16)
    storage.initialize_base_locations()
    blobs = {"op-a": {0: b"x" * 100, 1: b"small"}, "op-b": {0: b"", 3: bytes(range(256)) * 10}}
    done = _complete(storage, 7, blobs, {"type": "checkpoint", "parallelism": 4})

    # layout: <dir>/<job>/chk-7/ with the state files and _metadata, nothing half-written left
    assert _names(root) == [JOB]
    chk_names = _names(f"{root}/{JOB}/chk-7")
    assert "_metadata" in chk_names
    assert not [n for n in chk_names if n.startswith(".")]
    file_handles = [
        h for subs in done.operator_states.values() for h in subs.values() if isinstance(h, FileStateHandle)
    ]
    assert sorted(os.path.basename(h.path) for h in file_handles) == sorted(n for n in chk_names if n != "_metadata")
    assert isinstance(done.get_state("op-a", 1), ByteStreamStateHandle)  # below the inline threshold
    assert isinstance(done.get_state("op-a", 0), FileStateHandle)

    # a fresh store (a restarted JobMaster) finds it and reads every blob back
    restored = CheckpointStorage(root, JOB).latest_completed()
    assert restored is not None
    assert restored.checkpoint_id == 7 and restored.job_id == JOB
    assert restored.trigger_timestamp == 1007
    assert restored.completion_timestamp >= restored.trigger_timestamp
    assert restored.properties == {"type": "checkpoint", "parallelism": 4}
    assert restored.metadata_version == METADATA_VERSION
    assert restored.external_pointer == f"{root}/{JOB}/chk-7"
    assert restored.metadata_path.endswith(f"{JOB}/chk-7/_metadata")
    assert restored.operator_states == done.operator_states
    assert restored.state_size == sum(len(d) for subs in blobs.values() for d in subs.values())
    reader = CheckpointStorage(root, JOB)
    for op, subtasks in blobs.items():
        for i, data in subtasks.items():
            assert reader.read_state(restored.get_state(op, i)) == data
    assert restored.get_state("op-a", 5) is None


def test_no_checkpoint_yet_is_none(root):
    assert CheckpointStorage(root, JOB).latest_completed() is None


def test_retention_keeps_num_retained_and_drops_subsumed(root):
    storage = CheckpointStorage(root, JOB, num_retained=2)
    for n in range(1, 6):
        _complete(storage, n, {"op": {0: b"state-%d" % n}})
    assert storage.completed_checkpoint_ids() == [4, 5]
    assert _names(f"{root}/{JOB}") == ["chk-4", "chk-5"]

    # an unfinished lower checkpoint is subsumed when a newer one completes
    storage.write_state(6, "op", 0, b"never finalized")
    _complete(storage, 7, {"op": {0: b"state-7"}})
    assert _names(f"{root}/{JOB}") == ["chk-5", "chk-7"]

    # the default retains one
    single = CheckpointStorage(root, "other-job")
    for n in (1, 2, 3):
        _complete(single, n, {"op": {0: b"s"}})
    assert _names(f"{root}/other-job") == ["chk-3"]


def test_a_savepoint_never_subsumes_the_latest_checkpoint_unless_the_job_stops(root):
    """Flink's CheckpointSubsumeHelper (FLINK-21351): savepoints count towards num-retained,
    but the latest checkpoint that is not a savepoint stays (later incremental checkpoints
    build on it) unless the job stopped with the savepoint."""
    storage = CheckpointStorage(root, JOB, num_retained=1)
    _complete(storage, 1, {"op": {0: b"c1"}})
    storage.finalize(2, {"op": {0: storage.write_state(2, "op", 0, b"s2")}}, savepoint=True)
    assert storage.completed_checkpoint_ids() == [1, 2]
    storage.finalize(3, {"op": {0: storage.write_state(3, "op", 0, b"s3")}}, savepoint=True)
    assert storage.completed_checkpoint_ids() == [1, 3]  # the older savepoint goes, checkpoint 1 stays
    _complete(storage, 4, {"op": {0: b"c4"}})
    assert storage.completed_checkpoint_ids() == [4]
    storage.finalize(5, {"op": {0: storage.write_state(5, "op", 0, b"s5")}}, savepoint=True, synchronous=True)
    assert storage.completed_checkpoint_ids() == [5]  # stop-with-savepoint: no checkpoint follows
    assert _names(f"{root}/{JOB}") == ["chk-5"]


def test_retention_counts_checkpoints_of_an_earlier_run(root):
    first = CheckpointStorage(root, JOB, num_retained=2)
    for n in (1, 2):
        _complete(first, n, {"op": {0: b"a"}})
    second = CheckpointStorage(root, JOB, num_retained=2)  # a restarted JobMaster
    _complete(second, 3, {"op": {0: b"b"}})
    assert _names(f"{root}/{JOB}") == ["chk-2", "chk-3"]


def test_abort_deletes_the_folder_but_never_a_completed_checkpoint(root):
    storage = CheckpointStorage(root, JOB)
    _complete(storage, 1, {"op": {0: b"kept"}})
    storage.write_state(2, "op", 0, b"x" * 10)
    assert "chk-2" in _names(f"{root}/{JOB}")
    storage.abort(2)
    storage.abort(3)  # nothing there: no error
    storage.abort(1)  # completed: kept
    assert _names(f"{root}/{JOB}") == ["chk-1"]
    assert storage.latest_completed().checkpoint_id == 1


def test_finalize_twice_is_an_error(root):
    storage = CheckpointStorage(root, JOB)
    _complete(storage, 1, {})
    with pytest.raises(CheckpointStorageError, match="already complete"):
        storage.finalize(1, {})


def _corrupt(root, checkpoint_id, how):
    fs, path = _fs(f"{root}/{JOB}/chk-{checkpoint_id}")
    meta = path + "/_metadata"
    if how == "garbage":
        fs.pipe_file(meta, b"this is not metadata at all")
    elif how == "truncated":
        fs.pipe_file(meta, fs.cat_file(meta)[:-7])
    elif how == "bit-flip":
        raw = bytearray(fs.cat_file(meta))
        raw[-3] ^= 0xFF
        fs.pipe_file(meta, bytes(raw))
    elif how == "future-version":
        raw = fs.cat_file(meta)
        fs.pipe_file(meta, raw[:4] + struct.pack(">I", METADATA_VERSION + 1) + raw[8:])
    elif how == "empty":
        fs.pipe_file(meta, b"")
    elif how == "missing-metadata":
        fs.rm_file(meta)
    elif how in ("missing-state", "truncated-state"):
        state = [p for p in fs.ls(path, detail=False) if not p.endswith("_metadata")][0]
        if how == "missing-state":
            fs.rm_file(state)
        else:
            fs.pipe_file(state, fs.cat_file(state)[:5])
    return meta


CORRUPTIONS = [
    "garbage",
    "truncated",
    "bit-flip",
    "future-version",
    "empty",
    "missing-metadata",
    "missing-state",
    "truncated-state",
]


@pytest.mark.parametrize("how", CORRUPTIONS)
def test_unusable_newest_checkpoint_falls_back_with_a_warning(root, how, caplog):
    storage = CheckpointStorage(root, JOB, num_retained=2)
    _complete(storage, 1, {"op": {0: b"one" * 20}})
    _complete(storage, 2, {"op": {0: b"two" * 20}})
    _corrupt(root, 2, how)
    for store in (storage, CheckpointStorage(root, JOB, num_retained=2)):  # same JobMaster and a new one
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="raylink.state.checkpoint_storage"):
            restored = store.latest_completed()
        assert restored is not None and restored.checkpoint_id == 1
        assert store.read_state(restored.get_state("op", 0)) == b"one" * 20
        assert any("chk-2" in r.getMessage() for r in caplog.records), caplog.text
    # the next checkpoint id skips the unusable folder
    assert storage.next_checkpoint_id() == 3


@pytest.mark.parametrize("how", CORRUPTIONS)
def test_no_usable_checkpoint_is_an_error_naming_the_file(root, how):
    storage = CheckpointStorage(root, JOB)
    _complete(storage, 1, {"op": {0: b"one" * 20}})
    meta = _corrupt(root, 1, how)
    with pytest.raises(CheckpointStorageError) as err:
        storage.latest_completed()
    assert f"{JOB}/chk-1/" in str(err.value)
    if how.endswith("metadata") or how in ("garbage", "truncated", "bit-flip", "future-version", "empty"):
        assert meta.split("://")[-1].lstrip("/") in str(err.value)
    assert err.value.path is not None and f"{JOB}/chk-1/" in err.value.path


def test_folder_without_metadata_of_an_earlier_run_counts_as_never_completed(root):
    CheckpointStorage(root, JOB).write_state(1, "op", 0, b"written, never finalized")
    assert CheckpointStorage(root, JOB).latest_completed() is None


def test_failed_metadata_write_leaves_no_metadata(root, monkeypatch):
    storage = CheckpointStorage(root, JOB, num_retained=2)
    _complete(storage, 1, {"op": {0: b"one"}})
    fs = storage._fs

    def broken_mv(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(fs, "mv", broken_mv)
    with pytest.raises(CheckpointStorageError, match="disk full"):
        _complete(storage, 2, {"op": {0: b"two"}})
    monkeypatch.undo()
    assert _names(f"{root}/{JOB}/chk-2") and "_metadata" not in _names(f"{root}/{JOB}/chk-2")
    assert not [n for n in _names(f"{root}/{JOB}/chk-2") if n.startswith(".")]
    assert CheckpointStorage(root, JOB).latest_completed().checkpoint_id == 1


def test_vanished_state_file_is_named(root):
    storage = CheckpointStorage(root, JOB)
    handle = storage.write_state(1, "op", 0, b"payload" * 10)
    fs = storage._fs
    fs.rm_file(handle.path)
    with pytest.raises(CheckpointStorageError, match="missing") as err:
        storage.read_state(handle)
    assert handle.path.lstrip("/") in str(err.value)


def _check_not_writable(locked: str) -> None:
    storage = CheckpointStorage(locked, JOB)
    with pytest.raises(CheckpointStorageError) as err:
        storage.initialize_base_locations()
    assert locked in str(err.value)
    assert "execution.checkpointing.dir" in str(err.value) and "state.checkpoints.dir" in str(err.value)
    with pytest.raises(CheckpointStorageError, match="not writable"):
        storage.write_state(1, "op", 0, b"x" * 100)


def test_not_writable_directory_is_a_clear_error(tmp_path):
    """A checkpoint directory this user cannot write fails with an error naming it and the option.
    Root ignores permission bits, so as root the check runs in a forked child that has become
    uid 65534 (another local user) and finds the directory root's, mode 0755."""
    if os.getuid() != 0:
        locked = tmp_path / "locked"
        locked.mkdir()
        locked.chmod(0o500)
        try:
            _check_not_writable(str(locked))
        finally:
            locked.chmod(0o700)
        return
    reachable = tempfile.mkdtemp(prefix="raylink-unwritable-")  # in the shared temp dir: the other user reaches it
    try:
        os.chmod(reachable, 0o755)
        _check_as_another_user(os.path.join(reachable, "locked"))
    finally:
        shutil.rmtree(reachable, ignore_errors=True)


def _check_as_another_user(locked: str) -> None:
    os.mkdir(locked, 0o755)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: become another user, check, report, exit without running pytest's cleanup
        status = 1
        try:
            os.close(read)
            os.setgid(65534)
            os.setuid(65534)
            _check_not_writable(locked)
            status = 0
        except BaseException as e:  # the parent shows it
            os.write(write, repr(e).encode()[:4000])
        finally:
            os._exit(status)
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        failure = pipe.read().decode()
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, failure
    assert os.listdir(locked) == []


def test_from_configuration_reads_flink_keys():
    folder = tempfile.mkdtemp()
    config = Configuration()
    config.set_string("state.checkpoints.dir", folder)  # Flink 1's key still works
    config.set_string("state.checkpoints.num-retained", "3")
    config.set_string("execution.checkpointing.data-inline-threshold", "1kb")
    storage = CheckpointStorage.from_configuration(config, JOB)
    assert (storage.checkpoints_dir, storage.num_retained, storage.inline_threshold) == (folder, 3, 1024)
    assert CheckpointStorage.from_configuration(Configuration(), JOB, default_directory=folder).num_retained == 1
    with pytest.raises(CheckpointStorageError, match="execution.checkpointing.dir"):
        CheckpointStorage.from_configuration(Configuration(), JOB)
    bad = Configuration().set_string("execution.checkpointing.num-retained", "0")
    with pytest.raises(ValueError, match="execution.checkpointing.num-retained"):
        CheckpointStorage.from_configuration(bad, JOB, default_directory=folder)


def test_pickled_copy_writes_state_the_original_finalizes(root):
    storage = CheckpointStorage(root, JOB)
    remote = pickle.loads(pickle.dumps(storage))  # what a TaskExecutor gets
    handle = remote.write_state(1, "op", 2, b"from a task" * 10)
    storage.finalize(1, {"op": {2: handle}})
    assert CheckpointStorage(root, JOB).read_state(storage.latest_completed().get_state("op", 2)) == b"from a task" * 10


def test_concurrent_writes(root):
    storage = CheckpointStorage(root, JOB)
    blobs = {(op, i): os.urandom(50 + i) for op in ("a", "b", "c") for i in range(8)}
    with ThreadPoolExecutor(4) as pool:
        futures = {key: pool.submit(storage.write_state, 1, key[0], key[1], data) for key, data in blobs.items()}
        handles = {key: f.result() for key, f in futures.items()}
    by_op: dict = {}
    for (op, i), handle in handles.items():
        by_op.setdefault(op, {})[i] = handle
    storage.finalize(1, by_op)
    restored = CheckpointStorage(root, JOB).latest_completed()
    for (op, i), data in blobs.items():
        assert storage.read_state(restored.get_state(op, i)) == data


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    blobs=st.dictionaries(
        st.text("abcdef0123456789", min_size=1, max_size=12),
        st.dictionaries(st.integers(0, 64), st.binary(max_size=3000), max_size=4),
        max_size=4,
    ),
    inline_threshold=st.sampled_from([0, 1, 64, 1024]),
    use_memory=st.booleans(),
)
def test_random_state_blobs_round_trip(blobs, inline_threshold, use_memory):
    with tempfile.TemporaryDirectory() as folder:
        root = f"memory://hyp-{uuid.uuid4().hex}" if use_memory else folder
        try:
            storage = CheckpointStorage(root, JOB, inline_threshold=inline_threshold)
            _complete(storage, 1, blobs)
            restored = CheckpointStorage(root, JOB).latest_completed()
            assert restored is not None
            assert set(restored.operator_states) == set(blobs)
            for op, subtasks in blobs.items():
                assert set(restored.operator_states[op]) == set(subtasks)
                for i, data in subtasks.items():
                    handle = restored.get_state(op, i)
                    assert isinstance(handle, ByteStreamStateHandle) == (len(data) < inline_threshold)
                    assert storage.read_state(handle) == data
        finally:
            if use_memory:
                fs, path = _fs(root)
                if fs.exists(path):
                    fs.rm(path, recursive=True)


def test_directory_below_a_file_is_a_clear_error(tmp_path):
    """Not writable even for root: the configured folder lies below a regular file."""
    blocker = tmp_path / "a-file"
    blocker.write_bytes(b"")
    storage = CheckpointStorage(str(blocker / "checkpoints"), JOB)
    with pytest.raises(CheckpointStorageError) as err:
        storage.initialize_base_locations()
    assert str(blocker / "checkpoints") in str(err.value)
    assert "execution.checkpointing.dir" in str(err.value)
    with pytest.raises(CheckpointStorageError, match="not writable"):
        storage.write_state(1, "op", 0, b"x" * 100)


def test_unreadable_storage_is_an_error_not_a_fallback(root, monkeypatch):
    storage = CheckpointStorage(root, JOB)
    _complete(storage, 1, {"op": {0: b"one"}})
    fresh = CheckpointStorage(root, JOB)

    def denied(*args, **kwargs):
        raise PermissionError("access denied")

    monkeypatch.setattr(fresh._fs, "ls", denied)
    with pytest.raises(CheckpointStorageError, match="access denied") as err:
        fresh.latest_completed()
    assert f"{JOB}" in str(err.value)
