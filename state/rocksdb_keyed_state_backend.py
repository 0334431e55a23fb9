"""Keyed state in an embedded RocksDB: Flink's ``RocksDBKeyedStateBackend`` with its native
(``RocksDBIncrementalSnapshotStrategy``) checkpoints, on the ``rocksdict`` binding.

One backend serves one keyed operator of one subtask (like :class:`HeapKeyedStateBackend`,
which it extends: the same states, TTL states, namespaced states and operator fast paths
run over it unchanged). Its state lives in one RocksDB database in a working folder under
``state.backend.rocksdb.localdir`` on the TaskExecutor; every entry's key is
``<key group: 2 bytes><state id: 2 bytes><serialised key>`` (namespaced states: the key
and namespace as one serialised pair; map states: one entry per user key, ``<serialised
key><serialised user key>``, :mod:`raylink.state.rocksdb_map_state`), so one key group of one
state is one contiguous range (Flink's key-group prefix) and rescaling restores by key-group
range.

Values are Python objects between RocksDB and the operators: a table's ``values`` is a
mutable mapping (:class:`RocksDBMapState`) whose write-back cache hands out the stored
objects, so operators and states that change a list, map or accumulator in place keep
working; the cache is written to RocksDB in one ``WriteBatch`` when it holds
``state.backend.rocksdb.write-batch-size`` worth of entries and before every snapshot
(Flink's ``RocksDBWriteBatchWrapper``). Keys are serialised with msgpack (ints, strings,
bytes, floats and tuples of them) or pickle, values with pickle (cloudpickle when pickle
cannot). Timers stay on the heap (Flink's ``state.backend.rocksdb.timer-service.factory:
HEAP``) and are snapshotted with the operator as before.

A snapshot (on the task thread) flushes the cache and takes a RocksDB checkpoint (hard
links to the immutable SST files, Flink's native checkpoint); its asynchronous part
(:meth:`RocksDBSnapshot.materialize`, on the TaskExecutor's checkpoint writer thread)
uploads the SST files into the checkpoint storage's ``shared/`` folder -- with
``execution.checkpointing.incremental`` only those the last *completed* checkpoint did not
upload already -- and returns a small :class:`RocksDBStateHandle` (the SST files it refers
to, the few other files of the checkpoint inline). The storage counts references to the
shared files (:mod:`raylink.state.checkpoint_storage`).

Memory: one block cache and one write buffer manager charged to it per backend
(``state.backend.rocksdb.memory.fixed-per-slot`` or the managed memory fraction), so a
backend's native memory stays within a fixed bound whatever the number of keys.

Not thread-safe: a backend belongs to its task thread; :meth:`RocksDBSnapshot.materialize`
runs on one other thread and touches only the snapshot's own folder and the backend's
upload bookkeeping (under a lock).
"""

from __future__ import annotations

import logging
import os
import shutil
import threading
import uuid
import weakref
from typing import Any, Dict, List, Optional, Tuple

import rocksdict

from raylink.core.folder_ownership import OwnedFolder, remove_unowned_folders
from raylink.core.types import declared_type
from raylink.state.rocksdb_map_state import RocksDBMapEntries, RocksDBUserMapState
from raylink.state.rocksdb_options import RocksDBSettings, default_local_directory, open_db
from raylink.state.rocksdb_snapshots import RocksDBSnapshot, RocksDBStateHandle, download_handle, handle_to_key_groups
from raylink.state.rocksdb_state import (
    KEY_HEADER,
    RocksDBMapState,
    RocksDBNamespacedState,
    RocksDBStateTable,
    dump_key,
    load_key,
)
from raylink.state.state_backend import (
    NAMESPACED,
    HeapKeyedStateBackend,
    StateTable,
    _describe,
    _is_namespaced,
    key_group_range_for_subtask,
)
from raylink.state.ttl_state import ttl_config_of

log = logging.getLogger(__name__)


_MAX_STATES = 1 << 16


#: the working folders' prefix; each is an :class:`OwnedFolder` (locked by its backend's process)
_FOLDER_PREFIX = "rocksdb-"


def _remove_orphaned_folders(local_directory: str) -> None:
    """Delete the working folders of backends whose process is gone (a SIGKILLed TaskExecutor
    never ran its cleanup): those whose owner lock nobody holds
    (:func:`raylink.core.folder_ownership.remove_unowned_folders`)."""
    remove_unowned_folders(local_directory, _FOLDER_PREFIX)


class _Resources:
    """What a backend holds outside Python: its database and working folder."""

    def __init__(self, owned: OwnedFolder) -> None:
        self.owned = owned
        self.folder = owned.path
        self.db: Any = None

    def release(self) -> None:
        if self.db is not None:
            try:
                self.db.close()
            except Exception:  # pragma: no cover - already closed
                pass
            self.db = None
        self.owned.release(remove=True)


class RocksDBKeyedStateBackend(HeapKeyedStateBackend):
    """Keyed state of one operator subtask in an embedded RocksDB (see the module doc)."""

    def __init__(
        self,
        key_group_range: Any,
        max_parallelism: int,
        settings: Optional[RocksDBSettings] = None,
        name: str = "keyed",
    ) -> None:
        super().__init__(key_group_range, max_parallelism)
        self.settings = settings or RocksDBSettings(default_local_directory())
        self._key_cache_limit = 1 << 18
        self.cache_capacity = max(1024, self.settings.write_batch_bytes // 64)
        self.uid = uuid.uuid4().hex[:16]
        safe = "".join(c if c.isalnum() or c in "-_" else "_" for c in name)[:60]
        os.makedirs(self.settings.local_directory, exist_ok=True)
        _remove_orphaned_folders(self.settings.local_directory)
        owned = OwnedFolder.create(self.settings.local_directory, f"{_FOLDER_PREFIX}{safe}-{self.uid}-")
        folder = owned.path
        self._resources = _Resources(owned)
        self._finalizer = weakref.finalize(self, self._resources.release)
        self.db = self._resources.db = open_db(os.path.join(folder, "db"), self.settings)
        self._state_ids: Dict[str, int] = {}
        self._snapshot_seq = 0
        self._lock = threading.Lock()
        self._pending: Dict[int, Dict[str, Tuple[str, str, int]]] = {}
        self._confirmed: Dict[str, Tuple[str, str, int]] = {}
        self._heap_restored: Dict[str, Dict[Any, Any]] = {}

    @classmethod
    def for_subtask(  # type: ignore[override]
        cls, max_parallelism: int, parallelism: int, subtask_index: int, settings: Optional[RocksDBSettings] = None
    ) -> "RocksDBKeyedStateBackend":
        return cls(key_group_range_for_subtask(max_parallelism, parallelism, subtask_index), max_parallelism, settings)

    # -- tables ------------------------------------------------------------------------------
    def _state_id(self, name: str) -> int:
        sid = self._state_ids.get(name)
        if sid is None:
            sid = len(self._state_ids) + 1
            if sid >= _MAX_STATES:
                raise ValueError(f"too many states in one operator ({_MAX_STATES - 1} at most)")
            self._state_ids[name] = sid
        return sid

    def get_table(self, name: str, kind: str = "value") -> StateTable:
        table = self._tables.get(name)
        if table is not None and table.kind is not None:
            if table.kind != kind:
                raise ValueError(f"state {name!r} is a {_describe(table.kind)} state, not a {_describe(kind)} state")
            return table
        sid = self._state_id(name)
        if table is None:
            table = self._tables[name] = RocksDBStateTable(name, kind)
        table.kind = kind
        if _is_namespaced(kind):
            table.values = RocksDBNamespacedState(self, sid)
        elif kind == "map":  # one entry per user key (Flink's RocksDBMapState)
            table.values = RocksDBMapEntries(self, sid)
        else:
            table.values = RocksDBMapState(self, sid)
        if _is_namespaced(kind):
            table.values.recount()
        restored = self._heap_restored.pop(name, None)
        if restored:  # a heap snapshot's entries of this state: key first, {key: {ns: v}} if namespaced
            values = table.values
            for key, value in restored.items():
                if _is_namespaced(kind):
                    for ns, v in value.items():
                        values._put((key, ns), v)
                else:
                    values[key] = value
        return table

    def get_or_create_state(self, descriptor: Any, expected_kind: Optional[str] = None) -> Any:
        name = descriptor.name
        if (
            descriptor.kind == "map"
            and expected_kind in (None, "map")
            and name not in self._states
            and ttl_config_of(descriptor) is None
            and getattr(self, "_new_state_error", None) is None
        ):  # a map state reads and writes one entry per user key; the checks below stay the base's
            self._states[name] = RocksDBUserMapState(self, self.get_table(name, "map"))
        state = super().get_or_create_state(descriptor, expected_kind)
        table = self._tables.get(descriptor.name)
        if (
            table is not None
            and isinstance(table.values, RocksDBMapState)
            and declared_type(getattr(descriptor, "type_info", None)) is not None
        ):
            table.values.use_stream_codec()  # a declared type: the stream's codec, not pickle
        return state

    # -- snapshot / restore ----------------------------------------------------------------------
    def flush(self) -> None:
        for table in self._tables.values():
            if isinstance(table.values, RocksDBMapState):
                table.values.flush()

    def _states_meta(self) -> List[Tuple[str, int, Optional[str]]]:
        return [
            (name, sid, self._tables[name].kind if name in self._tables else None)
            for name, sid in self._state_ids.items()
        ]

    def snapshot(self, checkpoint_id: Optional[int] = None) -> RocksDBSnapshot:  # type: ignore[override]
        """Synchronous part: flush, then a RocksDB checkpoint into a local folder (hard links)."""
        self.flush()
        self._snapshot_seq += 1
        cid = self._snapshot_seq if checkpoint_id is None else checkpoint_id
        path = os.path.join(self._resources.folder, f"chk-{cid}-{self._snapshot_seq}")
        rocksdict.Checkpoint(self.db).create_checkpoint(path)
        with self._lock:
            previous = dict(self._confirmed) if self.settings.incremental else {}
        return RocksDBSnapshot(self, cid, path, self._states_meta(), previous)

    def _uploaded(self, checkpoint_id: int, sst: Dict[str, Tuple[str, str, int]]) -> None:
        with self._lock:
            self._pending[checkpoint_id] = sst

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        """The files checkpoint ``checkpoint_id`` uploaded are what the next incremental one
        may refer to (Flink: the last completed checkpoint's SST files)."""
        with self._lock:
            sst = self._pending.pop(checkpoint_id, None)
            if sst is not None:
                self._confirmed = sst
            for older in [c for c in self._pending if c < checkpoint_id]:
                del self._pending[older]

    def restore(self, snapshot: Any) -> None:
        self.restore_snapshots([snapshot])

    def restore_snapshots(self, snapshots: List[Any]) -> None:
        """Replace all state by the key groups of this range in ``snapshots`` (RocksDB handles
        of the old subtasks, or heap snapshots ``{key group: {name: entries}}``)."""
        handles = [s for s in snapshots if isinstance(s, RocksDBStateHandle)]
        heap = [s for s in snapshots if not isinstance(s, RocksDBStateHandle)]
        overlapping = [h for h in handles if h.key_group_range[0] <= self.end and h.key_group_range[1] >= self.start]
        folder = self._resources.folder
        self._close_db()
        shutil.rmtree(os.path.join(folder, "db"), ignore_errors=True)
        names: Dict[str, int] = {}
        kinds: Dict[str, Optional[str]] = {}
        if (
            len(overlapping) == 1
            and overlapping[0].key_group_range[0] <= self.start <= self.end <= overlapping[0].key_group_range[1]
        ):
            handle = overlapping[0]
            download_handle(handle, os.path.join(folder, "db"))
            self.db = self._resources.db = open_db(os.path.join(folder, "db"), self.settings)
            for name, sid, kind in handle.states:
                names[name] = sid
                kinds[name] = kind
            lo, hi = handle.key_group_range
            if lo < self.start:
                self.db.delete_range(KEY_HEADER.pack(lo, 0), KEY_HEADER.pack(self.start, 0))
            if hi > self.end:
                self.db.delete_range(KEY_HEADER.pack(self.end + 1, 0), (hi + 1).to_bytes(2, "big") + b"\x00\x00")
        else:
            self.db = self._resources.db = open_db(os.path.join(folder, "db"), self.settings)
            for i, handle in enumerate(overlapping):
                tmp = os.path.join(folder, f"restore-{i}")
                download_handle(handle, tmp)
                source = open_db(tmp, self.settings, read_only=True)
                try:
                    remap = {}
                    for name, sid, kind in handle.states:
                        if name not in names:
                            names[name] = len(names) + 1
                            kinds[name] = kind
                        remap[sid] = names[name].to_bytes(2, "big")
                    self._copy_range(source, remap)
                finally:
                    source.close()
                    shutil.rmtree(tmp, ignore_errors=True)
        # states registered before the restore keep their objects, bound to the restored ids
        self._state_ids = dict(names)
        for name, table in self._tables.items():
            sid = self._state_id(name)
            if isinstance(table.values, RocksDBMapState):
                table.values.bind(self.db, sid)
                if isinstance(table.values, RocksDBNamespacedState):
                    table.values.recount()
        for name, kind in kinds.items():
            if name not in self._tables:
                self._tables[name] = RocksDBStateTable(name, None)
        self._heap_restored = {}
        for snapshot in heap:
            for kg, states in snapshot.items():
                if self.start <= kg <= self.end:
                    for name, entries in states.items():
                        self._heap_restored.setdefault(name, {}).update(entries)
                        for k in entries:
                            self._kg_cache[k] = kg
        for name in list(self._heap_restored):
            table = self._tables.get(name)
            if table is not None and table.kind is not None:
                self.get_table(name, table.kind)
            elif table is None:
                self._tables[name] = RocksDBStateTable(name, None)
        for name, table in self._tables.items():
            if table.kind is None and name in kinds and kinds[name] is not None and name not in self._heap_restored:
                self.get_table(name, kinds[name])  # type: ignore[arg-type]
        with self._lock:  # the first checkpoint after a restore uploads everything (Flink's NO_CLAIM)
            self._confirmed = {}
            self._pending.clear()

    def _copy_range(self, source: Any, remap: Dict[int, bytes]) -> None:
        it = source.iter()
        it.seek(KEY_HEADER.pack(self.start, 0))
        end = (self.end + 1).to_bytes(2, "big")
        batch = rocksdict.WriteBatch(raw_mode=True)
        count = 0
        while it.valid():
            k = it.key()
            if k[:2] >= end:
                break
            new_sid = remap.get(int.from_bytes(k[2:4], "big"))
            if new_sid is not None:
                batch.put(k[:2] + new_sid + k[4:], it.value())
                count += 1
                if count % 10000 == 0:
                    self.db.write(batch)
                    batch = rocksdict.WriteBatch(raw_mode=True)
            it.next()
        if count % 10000:
            self.db.write(batch)

    def _close_db(self) -> None:
        if self.db is not None:
            self.db.close()
        self.db = self._resources.db = None

    # -- figures ---------------------------------------------------------------------------------
    def num_state_entries(self) -> int:
        """Entries over all states (RocksDB's estimate plus the cached ones)."""
        cached = sum(len(t.values._cache) for t in self._tables.values() if isinstance(t.values, RocksDBMapState))
        return int(self.db.property_int_value("rocksdb.estimate-num-keys") or 0) + cached

    def state_size_bytes(self) -> int:
        """Bytes of state: SST files on disk plus memtables."""
        db = self.db
        total = 0
        for prop in ("rocksdb.total-sst-files-size", "rocksdb.cur-size-all-mem-tables"):
            total += int(db.property_int_value(prop) or 0)
        return total

    def dispose(self) -> None:
        super().dispose()
        self._finalizer()
        self.db = None


def create_keyed_state_backend(runtime_context: Any) -> RocksDBKeyedStateBackend:
    """The RocksDB backend of the operator ``runtime_context`` belongs to, for its subtask's
    key groups, set up from the job's ``state.backend.rocksdb.*`` parameters."""
    rc = runtime_context
    parameters = getattr(rc, "job_parameters", None) or {}
    settings = RocksDBSettings.from_parameters(parameters, rc.subtask_index)
    name = f"{getattr(rc, 'operator_id', '') or getattr(rc, 'operator_name', '') or 'keyed'}-{rc.subtask_index}"
    key_groups = key_group_range_for_subtask(rc.max_parallelism, rc.parallelism, rc.subtask_index)
    return RocksDBKeyedStateBackend(key_groups, rc.max_parallelism, settings, name=name)


__all__ = [
    "NAMESPACED",
    "RocksDBKeyedStateBackend",
    "RocksDBMapState",
    "RocksDBNamespacedState",
    "RocksDBSettings",
    "RocksDBSnapshot",
    "RocksDBStateHandle",
    "create_keyed_state_backend",
    "dump_key",
    "handle_to_key_groups",
    "load_key",
]
