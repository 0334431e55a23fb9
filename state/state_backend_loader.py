"""Which keyed state backend a task runs on, and the steps of a keyed snapshot that depend on
it: Flink's ``StateBackendLoader`` plus the asynchronous part of a snapshot
(``SnapshotStrategy.asyncSnapshot``) and the restore of keyed state.

* the backend itself comes from ``state_backend.keyed_backend_for``: ``state.backend.type``
  ``hashmap`` (:class:`HeapKeyedStateBackend`) or ``rocksdb``
  (:class:`RocksDBKeyedStateBackend`, ``rocksdb_keyed_state_backend.create_keyed_state_backend``).
* :func:`materialize_snapshot` runs on the TaskExecutor's checkpoint writer thread before an
  operator's snapshot is serialised: a RocksDB snapshot uploads its files and becomes a small
  handle; it returns the shared files the snapshot refers to, which the checkpoint storage
  counts references to.
* :func:`bind_shared_files` tells a loaded snapshot where its shared files are now (the
  checkpoint may have been moved or be a savepoint with its own copies).
* :func:`restore_keyed_state` gives a backend the keyed snapshots of all old subtasks; a
  hashmap backend reads a RocksDB checkpoint too and the other way round (switching
  backends from a checkpoint or savepoint).

Thread-safety: ``materialize_snapshot`` on the writer thread, the rest on the task thread.
"""

from __future__ import annotations

import sys
from typing import Any, List, Optional, Tuple

from raylink.state.heap_incremental import HeapIncrementalSnapshot, HeapStateHandle, handle_to_key_groups

_SNAPSHOTS = "raylink.state.rocksdb_snapshots"
_BACKEND = "raylink.state.rocksdb_keyed_state_backend"


def _rocksdb(module: str) -> Optional[Any]:
    """A RocksDB module when this process imported it, else None: no RocksDB backend,
    snapshot or handle (unpickling one imports its module) can exist without it, so a job on
    the heap never loads RocksDB or the filesystem layer for it."""
    return sys.modules.get(module)


def materialize_snapshot(snapshot: Any, storage: Any, checkpoint_id: int) -> Tuple[Any, Tuple[str, ...], int]:
    """An operator's snapshot ready to serialise: a RocksDB keyed snapshot uploaded (its new
    files into ``storage``'s shared folder), or an incremental heap snapshot written as the next
    file of its chain, and replaced by its handle. Returns the snapshot, the shared files it
    refers to and the bytes uploaded."""
    keyed = snapshot.get("keyed") if isinstance(snapshot, dict) else None
    rocksdb = _rocksdb(_SNAPSHOTS)
    if not isinstance(keyed, HeapIncrementalSnapshot) and (
        rocksdb is None or not isinstance(keyed, rocksdb.RocksDBSnapshot)
    ):
        return snapshot, (), 0
    handle, written = keyed.materialize(storage, checkpoint_id)
    return dict(snapshot, keyed=handle), tuple(handle.shared_paths), written


def discard_snapshot(snapshot: Any) -> None:
    """Drop the local files of a snapshot that will not be written (a declined checkpoint)."""
    keyed = snapshot.get("keyed") if isinstance(snapshot, dict) else None
    rocksdb = _rocksdb(_SNAPSHOTS)
    if rocksdb is not None and isinstance(keyed, rocksdb.RocksDBSnapshot):
        keyed.discard()


def bind_shared_files(snapshot: Any, state_handle: Any) -> Any:
    """``snapshot`` (loaded from ``state_handle``) told where its shared files are now: the
    handle's ``shared`` paths, resolved where its ``_metadata`` lies."""
    keyed = snapshot.get("keyed") if isinstance(snapshot, dict) else None
    shared = getattr(state_handle, "shared", ())
    if shared and hasattr(keyed, "resolved") and hasattr(keyed, "shared_paths"):  # a RocksDB or heap handle
        keyed.resolved = {path.rstrip("/").rsplit("/", 1)[-1]: path for path in shared}
    return snapshot


def restore_keyed_state(backend: Any, snapshots: List[Any]) -> None:
    """Restore ``backend`` from the keyed snapshots of the old subtasks (rescaling: each
    backend keeps the key groups of its range)."""
    snapshots = [  # an incremental heap checkpoint: its chain replayed, this range only
        handle_to_key_groups(s, (backend.start, backend.end)) if isinstance(s, HeapStateHandle) else s
        for s in snapshots
    ]
    rocksdb_backend = _rocksdb(_BACKEND)
    if rocksdb_backend is not None and isinstance(backend, rocksdb_backend.RocksDBKeyedStateBackend):
        backend.restore_snapshots(snapshots)
        return
    rocksdb = _rocksdb(_SNAPSHOTS)
    merged: dict = {}
    for snapshot in snapshots:
        if rocksdb is not None and isinstance(snapshot, rocksdb.RocksDBStateHandle):
            lo, hi = snapshot.key_group_range
            if hi < backend.start or lo > backend.end:
                continue
            snapshot = rocksdb.handle_to_key_groups(snapshot)
        merged.update(snapshot)  # key groups are disjoint between old subtasks
    backend.restore(merged)


__all__ = [
    "bind_shared_files",
    "discard_snapshot",
    "materialize_snapshot",
    "restore_keyed_state",
]
