"""Keyed state in an embedded RocksDB: Flink's ``RocksDBKeyedStateBackend`` with its native
(``RocksDBIncrementalSnapshotStrategy``) checkpoints, on the ``rocksdict`` binding.

One backend serves one keyed operator of one subtask (like :class:`HeapKeyedStateBackend`,
which it extends: the same states, TTL states, namespaced states and operator fast paths
run over it unchanged). Its state lives in one RocksDB database in a working folder under
``state.backend.rocksdb.localdir`` on the TaskExecutor; every entry's key is
``<key group: 2 bytes><state id: 2 bytes><serialised key>`` (namespaced states: the key
and namespace as one serialised pair), so one key group of one state is one contiguous
range (Flink's key-group prefix) and rescaling restores by key-group range.

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
import pickle
import posixpath
import shutil
import struct
import tempfile
import threading
import uuid
import weakref
from collections.abc import MutableMapping
from dataclasses import dataclass, field
from typing import Any, Dict, Iterator, List, Optional, Tuple

import cloudpickle
import fsspec
import msgpack
import rocksdict

from raylink.core.options import CheckpointingOptions, StateBackendOptions, TaskManagerOptions, read_option
from raylink.state.state_backend import (
    NAMESPACED,
    HeapKeyedStateBackend,
    StateTable,
    _describe,
    _is_namespaced,
    key_group_range_for_subtask,
)

log = logging.getLogger(__name__)

_HEADER = struct.Struct(">HH")  # key group, state id
_PICKLED = 0xC1  # a byte msgpack never starts an object with: the key is pickled
_MISSING = object()
_ABSENT = object()
_SIMPLE = (int, str, bytes, float, bool)
DEFAULT_MEMORY = 128 * 1024 * 1024
_MAX_STATES = 1 << 16


# -- serialisation ------------------------------------------------------------------------------------
def _simple(obj: Any) -> bool:
    t = type(obj)
    return obj is None or t in _SIMPLE or (t is tuple and all(_simple(e) for e in obj))


_pack = msgpack.Packer(use_bin_type=True).pack


def dump_key(obj: Any) -> bytes:
    """A key's bytes: equal keys give equal bytes (msgpack for plain values, else pickle)."""
    t = type(obj)
    if t is int or t is str or _simple(obj):
        try:
            return _pack(obj)
        except (OverflowError, ValueError):
            pass
    return bytes((_PICKLED,)) + pickle.dumps(obj, protocol=5)


def load_key(data: bytes) -> Any:
    if data[0] == _PICKLED:
        return pickle.loads(data[1:])
    return msgpack.unpackb(data, use_list=False, raw=False, strict_map_key=False)


def dump_value(obj: Any) -> bytes:
    try:
        return pickle.dumps(obj, protocol=5)
    except (pickle.PicklingError, AttributeError, TypeError):
        return cloudpickle.dumps(obj)


load_value = pickle.loads


# -- the tables ------------------------------------------------------------------------------------------
class RocksDBMapState(MutableMapping):
    """One state's entries ``key -> value`` in RocksDB, with a write-back cache of Python
    objects (Flink's ``AbstractRocksDBState`` over a ``RocksDBWriteBatchWrapper``)."""

    def __init__(self, backend: "RocksDBKeyedStateBackend", state_id: int) -> None:
        self._backend = backend
        self._cache: Dict[Any, Any] = {}
        self._db_keys: Dict[Any, bytes] = {}  # of cached keys whose bytes are known already
        self._capacity = backend.cache_capacity
        self._key_group_of = backend.key_group_of
        self.bind(backend.db, state_id)

    def bind(self, db: Any, state_id: int) -> None:
        """Use ``db`` and ``state_id`` (after a restore); the cache is dropped."""
        self._cache.clear()
        self._db_keys.clear()
        self._db = db
        self.state_id = state_id
        b = self._backend
        self._prefixes = [_HEADER.pack(kg, state_id) for kg in range(b.start, b.end + 1)]
        self._start = b.start

    # -- keys
    def _db_key(self, key: Any) -> bytes:
        return self._prefixes[self._key_group_of(key) - self._start] + dump_key(key)

    # -- the mapping
    def get(self, key: Any, default: Any = None) -> Any:
        value = self._cache.get(key, _MISSING)
        if value is not _MISSING:
            return value
        db_key = self._db_key(key)
        raw = self._db.get(db_key)
        if raw is None:
            self._db_keys[key] = db_key  # most likely stored next (a key's first record)
            return default
        value = load_value(raw)
        self._remember(key, value)
        self._db_keys[key] = db_key
        return value

    def _remember(self, key: Any, value: Any) -> None:
        cache = self._cache
        if len(cache) >= self._capacity and key not in cache:
            db_key = self._db_keys.get(key)
            self.flush()
            if db_key is not None:
                self._db_keys[key] = db_key
        cache[key] = value

    def __getitem__(self, key: Any) -> Any:
        value = self.get(key, _MISSING)
        if value is _MISSING:
            raise KeyError(key)
        return value

    def __setitem__(self, key: Any, value: Any) -> None:
        self._remember(key, value)

    def pop(self, key: Any, default: Any = _MISSING) -> Any:
        db_key = self._db_keys.pop(key, None) or self._db_key(key)
        value = self._cache.pop(key, _MISSING)
        if value is _MISSING:
            raw = self._db.get(db_key)
            if raw is None:
                if default is _MISSING:
                    raise KeyError(key)
                return default
            value = load_value(raw)
        self._db.delete(db_key)
        return value

    def __delitem__(self, key: Any) -> None:
        self.pop(key)

    def setdefault(self, key: Any, default: Any = None) -> Any:
        value = self.get(key, _MISSING)
        if value is _MISSING:
            self._remember(key, default)
            return default
        return value

    def __contains__(self, key: Any) -> bool:
        return key in self._cache or self._db.get(self._db_key(key)) is not None

    def _raw_items(self) -> Iterator[Tuple[bytes, bytes]]:
        """Every stored (key bytes after the header, value bytes), key group by key group."""
        self.flush()
        db = self._db
        for prefix in self._prefixes:
            it = db.iter()
            it.seek(prefix)
            while it.valid():
                k = it.key()
                if not k.startswith(prefix):
                    break
                yield k[4:], it.value()
                it.next()

    def items(self) -> Any:  # type: ignore[override]
        return [(load_key(k), load_value(v)) for k, v in self._raw_items()]

    def keys(self) -> Any:  # type: ignore[override]
        return [load_key(k) for k, _ in self._raw_items()]

    def values(self) -> Any:  # type: ignore[override]
        return [load_value(v) for _, v in self._raw_items()]

    def __iter__(self) -> Iterator[Any]:
        return iter(self.keys())

    def __len__(self) -> int:
        return sum(1 for _ in self._raw_items())

    def clear(self) -> None:
        self._cache.clear()
        for prefix in self._prefixes:
            self._db.delete_range(prefix, _next_prefix(prefix))

    def flush(self) -> None:
        """Write the cached objects to RocksDB (one batch) and forget them."""
        cache = self._cache
        if not cache:
            self._db_keys.clear()
            return
        batch = rocksdict.WriteBatch(raw_mode=True)
        db_key = self._db_key
        known = self._db_keys.get
        put = batch.put
        dumps = pickle.dumps
        for key, value in cache.items():
            k = known(key)
            try:
                v = dumps(value, 5)
            except (pickle.PicklingError, AttributeError, TypeError):
                v = dump_value(value)
            put(k if k is not None else db_key(key), v)
        self._db.write(batch)
        cache.clear()
        self._db_keys.clear()

    def __repr__(self) -> str:
        return f"RocksDBMapState(state id {self.state_id})"


class RocksDBNamespacedState(RocksDBMapState):
    """A namespaced state: ``namespace -> pane`` where a pane maps ``key -> value`` (the
    layout operators see on the heap); stored per ``(key, namespace)`` under the key's key
    group. The number of entries of every namespace is kept in memory so an empty pane is
    known without a scan."""

    def __init__(self, backend: "RocksDBKeyedStateBackend", state_id: int) -> None:
        self._counts: Dict[Any, int] = {}
        self._panes: Dict[Any, "RocksDBPane"] = {}
        super().__init__(backend, state_id)

    def bind(self, db: Any, state_id: int) -> None:
        super().bind(db, state_id)
        self._counts.clear()
        self._panes.clear()

    def _db_key(self, pair: Any) -> bytes:
        return self._prefixes[self._key_group_of(pair[0]) - self._start] + dump_key(pair)

    def recount(self) -> None:
        """Count the entries of every namespace (after a restore)."""
        counts = self._counts
        counts.clear()
        for k, _ in self._raw_items():
            ns = load_key(k)[1]
            counts[ns] = counts.get(ns, 0) + 1

    # -- entries of (key, namespace)
    def _put(self, pair: Any, value: Any) -> None:
        if pair not in self._cache and self._db.get(self._db_key(pair)) is None:
            ns = pair[1]
            self._counts[ns] = self._counts.get(ns, 0) + 1
        self._remember(pair, value)

    def _pop(self, pair: Any, default: Any) -> Any:
        value = RocksDBMapState.pop(self, pair, _ABSENT)
        if value is _ABSENT:
            return default
        ns = pair[1]
        left = self._counts.get(ns, 1) - 1
        if left > 0:
            self._counts[ns] = left
        else:
            self._counts[ns] = 0
        return value

    # -- namespace -> pane
    def get(self, namespace: Any, default: Any = None) -> Any:  # type: ignore[override]
        if namespace not in self._counts:
            return default
        return self._pane(namespace)

    def _pane(self, namespace: Any) -> "RocksDBPane":
        pane = self._panes.get(namespace)
        if pane is None:
            pane = self._panes[namespace] = RocksDBPane(self, namespace)
        return pane

    def __getitem__(self, namespace: Any) -> Any:
        pane = self.get(namespace)
        if pane is None:
            raise KeyError(namespace)
        return pane

    def __setitem__(self, namespace: Any, pane: Any) -> None:
        self._counts.setdefault(namespace, 0)
        target = self._pane(namespace)
        if pane is not target:
            for key in list(target):
                target.pop(key, None)
            for key, value in dict(pane).items():
                target[key] = value

    def setdefault(self, namespace: Any, default: Any = None) -> Any:
        pane = self.get(namespace)
        if pane is None:
            self[namespace] = default if default is not None else {}
            pane = self._pane(namespace)
        return pane

    def pop(self, namespace: Any, default: Any = _MISSING) -> Any:
        if namespace not in self._counts:
            if default is _MISSING:
                raise KeyError(namespace)
            return default
        pane = self._pane(namespace)
        contents = dict(pane.items()) if self._counts[namespace] else {}
        for key in contents:
            self._pop((key, namespace), None)
        del self._counts[namespace]
        self._panes.pop(namespace, None)
        return contents

    def __delitem__(self, namespace: Any) -> None:
        self.pop(namespace)

    def __contains__(self, namespace: Any) -> bool:
        return namespace in self._counts

    def __iter__(self) -> Iterator[Any]:
        return iter(list(self._counts))

    def __len__(self) -> int:
        return len(self._counts)

    def keys(self) -> Any:  # type: ignore[override]
        return list(self._counts)

    def items(self) -> Any:  # type: ignore[override]
        return [(ns, self._pane(ns)) for ns in list(self._counts)]

    def values(self) -> Any:  # type: ignore[override]
        return [self._pane(ns) for ns in list(self._counts)]

    def pairs(self) -> List[Tuple[Any, Any]]:
        """Every stored ``((key, namespace), value)``."""
        return [(load_key(k), load_value(v)) for k, v in self._raw_items()]

    def clear(self) -> None:
        super().clear()
        self._counts.clear()
        self._panes.clear()


class RocksDBPane(MutableMapping):
    """The entries of one namespace of a :class:`RocksDBNamespacedState`: ``key -> value``."""

    __slots__ = ("_table", "namespace")

    def __init__(self, table: RocksDBNamespacedState, namespace: Any) -> None:
        self._table = table
        self.namespace = namespace

    def get(self, key: Any, default: Any = None) -> Any:
        return RocksDBMapState.get(self._table, (key, self.namespace), default)

    def __getitem__(self, key: Any) -> Any:
        value = self.get(key, _MISSING)
        if value is _MISSING:
            raise KeyError(key)
        return value

    def __setitem__(self, key: Any, value: Any) -> None:
        self._table._put((key, self.namespace), value)

    def pop(self, key: Any, default: Any = _MISSING) -> Any:
        value = self._table._pop((key, self.namespace), _MISSING)
        if value is _MISSING:
            if default is _MISSING:
                raise KeyError(key)
            return default
        return value

    def __delitem__(self, key: Any) -> None:
        self.pop(key)

    def setdefault(self, key: Any, default: Any = None) -> Any:
        value = self.get(key, _MISSING)
        if value is _MISSING:
            self[key] = default
            return default
        return value

    def __contains__(self, key: Any) -> bool:
        return self.get(key, _MISSING) is not _MISSING

    def __len__(self) -> int:
        return self._table._counts.get(self.namespace, 0)

    def __bool__(self) -> bool:
        return self._table._counts.get(self.namespace, 0) > 0

    def items(self) -> Any:  # type: ignore[override]
        ns = self.namespace
        return [(pair[0], value) for pair, value in self._table.pairs() if pair[1] == ns]

    def keys(self) -> Any:  # type: ignore[override]
        return [k for k, _ in self.items()]

    def values(self) -> Any:  # type: ignore[override]
        return [v for _, v in self.items()]

    def __iter__(self) -> Iterator[Any]:
        return iter(self.keys())


def _next_prefix(prefix: bytes) -> bytes:
    """The smallest byte string above every string starting with ``prefix``."""
    value = int.from_bytes(prefix, "big") + 1
    return value.to_bytes(len(prefix), "big")


class RocksDBStateTable(StateTable):
    """A :class:`StateTable` whose ``values`` live in RocksDB."""

    __slots__ = ()

    def num_entries(self) -> int:
        values = self.values
        if isinstance(values, RocksDBNamespacedState):
            return sum(values._counts.values())
        return len(values)


# -- snapshots -------------------------------------------------------------------------------------------
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
        backend: "RocksDBKeyedStateBackend",
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


# -- the backend -----------------------------------------------------------------------------------------
class _Resources:
    """What a backend holds outside Python: its database and working folder."""

    def __init__(self, folder: str) -> None:
        self.folder = folder
        self.db: Any = None

    def release(self) -> None:
        if self.db is not None:
            try:
                self.db.close()
            except Exception:  # pragma: no cover - already closed
                pass
            self.db = None
        shutil.rmtree(self.folder, ignore_errors=True)


@dataclass(frozen=True)
class RocksDBSettings:
    """How a backend is set up (from ``state.backend.rocksdb.*``)."""

    local_directory: str
    memory_bytes: int = DEFAULT_MEMORY
    write_buffer_ratio: float = 0.5
    write_batch_bytes: int = 2 * 1024 * 1024
    incremental: bool = False

    @classmethod
    def from_parameters(cls, parameters: Any, subtask_index: int = 0) -> "RocksDBSettings":
        dirs = read_option(parameters, StateBackendOptions.ROCKSDB_LOCAL_DIRECTORIES)
        if dirs:
            choices = [d.strip() for d in str(dirs).split(",") if d.strip()]
            local = choices[subtask_index % len(choices)]
        else:
            local = os.path.join(tempfile.gettempdir(), "raylink-rocksdb")
        memory = read_option(parameters, StateBackendOptions.ROCKSDB_MEMORY_FIXED_PER_SLOT)
        if not memory:
            process = read_option(parameters, TaskManagerOptions.TOTAL_PROCESS_MEMORY)
            slots = read_option(parameters, TaskManagerOptions.NUM_TASK_SLOTS)
            fraction = read_option(parameters, StateBackendOptions.MANAGED_MEMORY_FRACTION)
            memory = int(process * fraction / max(1, slots)) if process else DEFAULT_MEMORY
        return cls(
            local_directory=local,
            memory_bytes=max(16 * 1024 * 1024, int(memory)),
            write_buffer_ratio=read_option(parameters, StateBackendOptions.ROCKSDB_WRITE_BUFFER_RATIO),
            write_batch_bytes=read_option(parameters, StateBackendOptions.ROCKSDB_WRITE_BATCH_SIZE),
            incremental=bool(read_option(parameters, CheckpointingOptions.INCREMENTAL_CHECKPOINTS)),
        )


def _open_db(path: str, settings: RocksDBSettings, read_only: bool = False) -> Any:
    options = rocksdict.Options(raw_mode=True)
    options.create_if_missing(True)
    cache = rocksdict.Cache(settings.memory_bytes)
    write_buffers = int(settings.memory_bytes * settings.write_buffer_ratio)
    options.set_write_buffer_manager(
        rocksdict.WriteBufferManager.new_write_buffer_manager_with_cache(write_buffers, False, cache)
    )
    options.set_write_buffer_size(max(4 * 1024 * 1024, min(64 * 1024 * 1024, write_buffers // 2)))
    options.set_max_write_buffer_number(2)
    options.set_max_open_files(256)
    options.set_keep_log_file_num(2)
    table = rocksdict.BlockBasedOptions()
    table.set_block_cache(cache)
    table.set_bloom_filter(10, False)
    table.set_cache_index_and_filter_blocks(True)
    options.set_block_based_table_factory(table)
    if read_only:
        return rocksdict.Rdict(path, options, access_type=rocksdict.AccessType.read_only())
    db = rocksdict.Rdict(path, options)
    write = rocksdict.WriteOptions()
    write.disable_wal = True  # Flink's RocksDB backend writes no WAL: checkpoints are the durability
    db.set_write_options(write)
    return db


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
        self.settings = settings or RocksDBSettings(os.path.join(tempfile.gettempdir(), "raylink-rocksdb"))
        self._key_cache_limit = 1 << 18
        self.cache_capacity = max(1024, self.settings.write_batch_bytes // 64)
        self.uid = uuid.uuid4().hex[:16]
        safe = "".join(c if c.isalnum() or c in "-_" else "_" for c in name)[:60]
        os.makedirs(self.settings.local_directory, exist_ok=True)
        folder = tempfile.mkdtemp(prefix=f"{safe}-{self.uid}-", dir=self.settings.local_directory)
        self._resources = _Resources(folder)
        self._finalizer = weakref.finalize(self, self._resources.release)
        self.db = self._resources.db = _open_db(os.path.join(folder, "db"), self.settings)
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
        table.values = (RocksDBNamespacedState if _is_namespaced(kind) else RocksDBMapState)(self, sid)
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
            _download(handle, os.path.join(folder, "db"))
            self.db = self._resources.db = _open_db(os.path.join(folder, "db"), self.settings)
            for name, sid, kind in handle.states:
                names[name] = sid
                kinds[name] = kind
            lo, hi = handle.key_group_range
            if lo < self.start:
                self.db.delete_range(_HEADER.pack(lo, 0), _HEADER.pack(self.start, 0))
            if hi > self.end:
                self.db.delete_range(_HEADER.pack(self.end + 1, 0), (hi + 1).to_bytes(2, "big") + b"\x00\x00")
        else:
            self.db = self._resources.db = _open_db(os.path.join(folder, "db"), self.settings)
            for i, handle in enumerate(overlapping):
                tmp = os.path.join(folder, f"restore-{i}")
                _download(handle, tmp)
                source = _open_db(tmp, self.settings, read_only=True)
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
        it.seek(_HEADER.pack(self.start, 0))
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


def _download(handle: RocksDBStateHandle, target: str) -> None:
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
    (namespaced states: ``{key: {namespace: value}}``): a RocksDB checkpoint restored into the
    hashmap backend."""
    folder = tempfile.mkdtemp(prefix="raylink-rocksdb-read-")
    try:
        _download(handle, folder)
        db = _open_db(folder, settings or RocksDBSettings(folder), read_only=True)
        try:
            names = {sid: (name, kind) for name, sid, kind in handle.states}
            result: Dict[int, Dict[str, Dict[Any, Any]]] = {}
            it = db.iter()
            it.seek_to_first()
            while it.valid():
                k = it.key()
                kg, sid = _HEADER.unpack_from(k)
                name, kind = names.get(sid, (None, None))
                if name is not None:
                    per_state = result.setdefault(kg, {}).setdefault(name, {})
                    key = load_key(k[4:])
                    value = load_value(it.value())
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


__all__ = [
    "NAMESPACED",
    "RocksDBKeyedStateBackend",
    "RocksDBMapState",
    "RocksDBNamespacedState",
    "RocksDBPane",
    "RocksDBSettings",
    "RocksDBSnapshot",
    "RocksDBStateHandle",
    "create_keyed_state_backend",
    "dump_key",
    "handle_to_key_groups",
    "load_key",
]
