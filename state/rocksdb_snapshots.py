"""RocksDB checkpoints of a keyed backend in the checkpoint storage: Flink's
``RocksDBIncrementalSnapshotStrategy`` and ``IncrementalRemoteKeyedStateHandle``.

:class:`RocksDBSnapshot` is the synchronous part (a RocksDB checkpoint in a local folder: hard
links to the immutable SST files); :meth:`RocksDBSnapshot.materialize`, on the TaskExecutor's
checkpoint writer thread, uploads the SST files into the storage's ``shared/`` folder -- with
incremental checkpoints only those the last completed checkpoint did not upload -- and returns a
:class:`RocksDBStateHandle`: the SST files it refers to and the checkpoint's few other files
inline. :func:`download_handle` lays a handle's files out as a database folder again (hard
links on a local filesystem); :func:`handle_to_key_groups` reads one as a heap snapshot.

Thread-safety: a snapshot is materialized by one thread; its backend's bookkeeping of uploads
takes its own lock.
"""

from __future__ import annotations

import logging
import os
import posixpath
import shutil
import tempfile
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

import fsspec

from raylink.state.rocksdb_map_state import split_key
from raylink.state.rocksdb_options import RocksDBSettings, open_db
from raylink.state.rocksdb_state import (
    KEY_HEADER,
    load_key,
    load_value,
)
from raylink.state.state_backend import (
    _is_namespaced,
)

log = logging.getLogger(__name__)


@dataclass
class RocksDBStateHandle:
    """A RocksDB checkpoint in the checkpoint storage (Flink's
    ``IncrementalRemoteKeyedStateHandle``): the SST files (``sst``: local name -> (shared
    file name, path when written, size)) and the other, small files inline (``private``),
    with the states' ids and kinds and the key groups it holds. ``resolved`` maps a shared
    file name to where it is now (set when loaded from a checkpoint that was moved)."""

    backend_uid: str
    checkpoint_id: int
    key_group_range: Tuple[int, int]
    states: List[Tuple[str, int, Optional[str]]]
    sst: Dict[str, Tuple[str, str, int]]
    private: Dict[str, bytes] = field(repr=False)
    resolved: Dict[str, str] = field(default_factory=dict)

    @property
    def shared_paths(self) -> List[str]:
        return [path for _, path, _ in self.sst.values()]

    def path_of(self, local_name: str) -> str:
        shared_name, path, _ = self.sst[local_name]
        return self.resolved.get(shared_name, path)


class RocksDBSnapshot:
    """The synchronous part of a RocksDB backend's snapshot: a RocksDB checkpoint in a local
    folder. :meth:`materialize` (the asynchronous part) uploads it."""

    def __init__(
        self,
        backend: Any,
        checkpoint_id: int,
        local_path: str,
        states: List[Tuple[str, int, Optional[str]]],
        previous: Dict[str, Tuple[str, str, int]],
    ) -> None:
        self._backend = backend
        self.checkpoint_id = checkpoint_id
        self.local_path = local_path
        self.states = states
        self.previous = previous
        self.key_group_range = (backend.start, backend.end)
        self.backend_uid = backend.uid

    def materialize(self, storage: Any, checkpoint_id: int) -> Tuple[RocksDBStateHandle, int]:
        """Upload the checkpoint's new SST files to ``storage``'s shared folder; returns the
        handle and the bytes written. Blocking I/O: the checkpoint writer thread."""
        written = 0
        sst: Dict[str, Tuple[str, str, int]] = {}
        private: Dict[str, bytes] = {}
        try:
            for name in sorted(os.listdir(self.local_path)):
                local = os.path.join(self.local_path, name)
                if name.endswith(".sst"):
                    reused = self.previous.get(name)
                    if reused is not None:
                        sst[name] = reused
                        continue
                    path, size = storage.write_shared_file(checkpoint_id, local, f"{self.backend_uid}-{name}")
                    sst[name] = (posixpath.basename(path), path, size)
                    written += size
                else:
                    with open(local, "rb") as f:
                        private[name] = f.read()
                    written += len(private[name])
        finally:
            shutil.rmtree(self.local_path, ignore_errors=True)
        self._backend._uploaded(checkpoint_id, sst)
        handle = RocksDBStateHandle(self.backend_uid, checkpoint_id, self.key_group_range, self.states, sst, private)
        return handle, written

    def discard(self) -> None:
        shutil.rmtree(self.local_path, ignore_errors=True)

    def __reduce__(self) -> tuple:
        raise TypeError("a RocksDB snapshot is uploaded by materialize() before it is stored")


def download_handle(handle: RocksDBStateHandle, target: str) -> None:
    """The files of ``handle`` into folder ``target`` (a RocksDB checkpoint to open)."""
    os.makedirs(target, exist_ok=True)
    for local_name in handle.sst:
        path = handle.path_of(local_name)
        fs, fs_path = fsspec.core.url_to_fs(path)
        local = os.path.join(target, local_name)
        try:
            if "file" in ((fs.protocol,) if isinstance(fs.protocol, str) else tuple(fs.protocol)):
                try:
                    os.link(fs_path, local)  # same filesystem: a hard link, no copy
                    continue
                except OSError:
                    pass
            fs.get_file(fs_path, local)
        except FileNotFoundError:
            from raylink.state.checkpoint_storage import CheckpointStorageError

            raise CheckpointStorageError(
                f"shared state file {path!r} of a RocksDB checkpoint (checkpoint {handle.checkpoint_id}) is missing",
                path,
            ) from None
    for name, data in handle.private.items():
        with open(os.path.join(target, name), "wb") as f:
            f.write(data)


def handle_to_key_groups(
    handle: RocksDBStateHandle, settings: Optional[RocksDBSettings] = None
) -> Dict[int, Dict[str, Dict[Any, Any]]]:
    """A RocksDB handle's state as a heap snapshot ``{key group: {name: {key: value}}}``
    (namespaced states: ``{key: {namespace: value}}``, map states ``{key: {user key: value}}``): a RocksDB checkpoint restored into the
    hashmap backend."""
    folder = tempfile.mkdtemp(prefix="raylink-rocksdb-read-")
    try:
        download_handle(handle, folder)
        db = open_db(folder, settings or RocksDBSettings(folder), read_only=True)
        try:
            names = {sid: (name, kind) for name, sid, kind in handle.states}
            result: Dict[int, Dict[str, Dict[Any, Any]]] = {}
            it = db.iter()
            it.seek_to_first()
            while it.valid():
                k = it.key()
                kg, sid = KEY_HEADER.unpack_from(k)
                name, kind = names.get(sid, (None, None))
                if name is not None:
                    per_state = result.setdefault(kg, {}).setdefault(name, {})
                    value = load_value(it.value())
                    if kind == "map":  # one entry per user key: <key><user key>
                        key, cut = split_key(k[4:])
                        per_state.setdefault(key, {})[load_key(k[4 + cut :])] = value
                    else:
                        key = load_key(k[4:])
                        if _is_namespaced(kind):
                            per_state.setdefault(key[0], {})[key[1]] = value
                        else:
                            per_state[key] = value
                it.next()
            return result
        finally:
            db.close()
    finally:
        shutil.rmtree(folder, ignore_errors=True)


__all__ = ["RocksDBSnapshot", "RocksDBStateHandle", "download_handle", "handle_to_key_groups"]
