"""Map state in RocksDB with one entry per user key: Flink's ``RocksDBMapState``.

A map state's entry ``key -> {user key -> value}`` is stored as one RocksDB entry per user key,
``<key group: 2 bytes><state id: 2 bytes><serialised key><serialised user key>`` (both serialised
as every RocksDB key is: msgpack, or a tag byte and pickle; either encoding ends where its object
ends, so the entries of a key are exactly the range its ``<header><serialised key>`` starts).
``MapState.get/put/remove/contains`` touch one entry; ``keys/values/items/is_empty`` iterate
the key's range, lazily; a map with a million user keys is never (de)serialised whole.

:class:`RocksDBMapEntries` is the table's ``values``: for the backend and the readers that do
not care about the layout (restore from a heap snapshot, ``backend.keys``, the window operator's
merging-window sets) it is the mapping ``key -> map`` the heap has, a key's map being a live
:class:`RocksDBUserMap` view of its entries (present while it has one). Writes go through a
write-back cache of ``(key, user key) -> value`` (removals as tombstones) written in one sorted
``WriteBatch`` when full, before a snapshot and before a key's entries are iterated; a value
read by ``get`` is cached too, so a value changed in place is kept, as on the heap.
:class:`RocksDBUserMapState` is the ``MapState`` of the backend's current key.

Not thread-safe: a state belongs to its backend's task thread.
"""

from __future__ import annotations

import io
import pickle
from collections.abc import MutableMapping
from typing import Any, Dict, Iterator, List, Optional, Tuple

import msgpack
import rocksdict

from raylink.core.state import MapState
from raylink.state.rocksdb_state import _PICKLED, RocksDBMapState, dump_key, dump_value, load_key, load_value

_MISSING = object()
_REMOVED: Any = type("Removed", (), {"__repr__": lambda self: "REMOVED"})()


def split_key(data: bytes) -> Tuple[Any, int]:
    """The key serialised at the start of ``data`` and where its bytes end (the rest is the user
    key of a map entry)."""
    if data[0] == _PICKLED:
        stream = io.BytesIO(data)
        stream.seek(1)
        key = pickle.Unpickler(stream).load()
        return key, stream.tell()
    unpacker = msgpack.Unpacker(use_list=False, raw=False, strict_map_key=False)
    unpacker.feed(data)
    key = unpacker.unpack()
    return key, unpacker.tell()


class RocksDBMapEntries(RocksDBMapState):
    """The entries of one map state: ``key -> map`` over one RocksDB entry per user key (see the
    module doc). ``_cache`` holds ``key -> {user key -> value or a tombstone}`` not written yet."""

    def bind(self, db: Any, state_id: int) -> None:
        super().bind(db, state_id)
        self._pending = 0  # cached (key, user key) entries

    def _key_prefix(self, key: Any) -> bytes:
        prefix = self._db_keys.get(key)
        if prefix is None:
            prefix = self._db_keys[key] = self._db_key(key)
        return prefix

    # -- one user key
    def entry_get(self, key: Any, user_key: Any, default: Any = None) -> Any:
        cached = self._cache.get(key)
        if cached is not None:
            value = cached.get(user_key, _MISSING)
            if value is not _MISSING:
                return default if value is _REMOVED else value
        raw = self._db.get(self._key_prefix(key) + dump_key(user_key))
        if raw is None:
            return default
        value = load_value(raw)
        self.entry_put(key, user_key, value)  # handed out: a change in place is written back
        return value

    def entry_contains(self, key: Any, user_key: Any) -> bool:
        cached = self._cache.get(key)
        if cached is not None:
            value = cached.get(user_key, _MISSING)
            if value is not _MISSING:
                return value is not _REMOVED
        return self._db.get(self._key_prefix(key) + dump_key(user_key)) is not None

    def entry_put(self, key: Any, user_key: Any, value: Any) -> None:
        cached = self._cache.get(key)
        if cached is None:
            cached = self._cache[key] = {}
        if user_key not in cached:
            if self._pending >= self._capacity:  # full (a big map's puts too): written first
                self.flush()
                cached = self._cache[key] = {}
            self._pending += 1
        cached[user_key] = value

    def entry_remove(self, key: Any, user_key: Any) -> Any:
        """Remove one user key; returns its value (``_MISSING`` when it had none)."""
        value = self.entry_get(key, user_key, _MISSING)
        if value is not _MISSING:
            self.entry_put(key, user_key, _REMOVED)
        return value

    # -- a key's whole map
    def _flush_key(self, key: Any) -> None:
        cached = self._cache.pop(key, None)
        if cached:
            self._pending -= len(cached)
            self._write({self._key_prefix(key) + dump_key(uk): v for uk, v in cached.items()})

    def entry_items(self, key: Any) -> Iterator[Tuple[Any, Any]]:
        """The key's ``(user key, value)`` in the order of their bytes, read lazily from the
        database as it is now (RocksDB's iterator: what is written later is not seen)."""
        self._flush_key(key)
        prefix = self._key_prefix(key)
        it = self._db.iter()
        it.seek(prefix)
        return _entries_of(it, prefix)

    def has_entries(self, key: Any) -> bool:
        cached = self._cache.get(key)
        if cached:
            for value in cached.values():
                if value is not _REMOVED:
                    return True
            self._flush_key(key)
        prefix = self._key_prefix(key)
        it = self._db.iter()
        it.seek(prefix)
        return it.valid() and it.key().startswith(prefix)

    def clear_key(self, key: Any) -> None:
        """Remove every user key of ``key`` (one delete per entry, as Flink's ``clear``)."""
        cached = self._cache.pop(key, None)
        if cached:
            self._pending -= len(cached)
        prefix = self._key_prefix(key)
        batch = rocksdict.WriteBatch(raw_mode=True)
        it = self._db.iter()
        it.seek(prefix)
        while it.valid():
            k = it.key()
            if not k.startswith(prefix):
                break
            batch.delete(k)
            it.next()
        if len(batch):
            self._db.write(batch)

    # -- key -> map (the heap's layout)
    def get(self, key: Any, default: Any = None) -> Any:
        return RocksDBUserMap(self, key) if self.has_entries(key) else default

    def __getitem__(self, key: Any) -> Any:
        if not self.has_entries(key):
            raise KeyError(key)
        return RocksDBUserMap(self, key)

    def __contains__(self, key: Any) -> bool:
        return self.has_entries(key)

    def __setitem__(self, key: Any, user_map: Any) -> None:
        if isinstance(user_map, RocksDBUserMap) and user_map._table is self and user_map.key == key:
            return  # the key's own view: its entries are written already
        user_map = dict(user_map)
        self.clear_key(key)
        for user_key, value in user_map.items():
            self.entry_put(key, user_key, value)

    def setdefault(self, key: Any, default: Any = None) -> Any:
        if not self.has_entries(key):
            self[key] = default or {}
        return RocksDBUserMap(self, key)

    def pop(self, key: Any, default: Any = _MISSING) -> Any:
        contents = dict(self.entry_items(key))
        if not contents:
            if default is _MISSING:
                raise KeyError(key)
            return default
        self.clear_key(key)
        return contents

    def _grouped(self) -> Iterator[Tuple[Any, List[Tuple[bytes, bytes]]]]:
        """``(key, [(user key bytes, value bytes)])`` of every key, key group by key group."""
        current: Optional[bytes] = None
        key: Any = None
        entries: List[Tuple[bytes, bytes]] = []
        for k, v in self._raw_items():
            if current is None or not k.startswith(current):
                if current is not None:
                    yield key, entries
                key, cut = split_key(k)
                current, entries = k[:cut], []
            entries.append((k[len(current) :], v))
        if current is not None:
            yield key, entries

    def keys(self) -> Any:  # type: ignore[override]
        return [key for key, _ in self._grouped()]

    def items(self) -> Any:  # type: ignore[override]
        return [(key, RocksDBUserMap(self, key)) for key, _ in self._grouped()]

    def values(self) -> Any:  # type: ignore[override]
        return [RocksDBUserMap(self, key) for key, _ in self._grouped()]

    def maps(self) -> Iterator[Tuple[Any, Dict[Any, Any]]]:
        """Every ``(key, {user key: value})`` (copies), key group by key group."""
        for key, entries in self._grouped():
            yield key, {load_key(u): load_value(v) for u, v in entries}

    def __len__(self) -> int:
        return sum(1 for _ in self._grouped())

    def clear(self) -> None:
        super().clear()
        self._pending = 0

    # -- writing
    def flush(self) -> None:
        cache = self._cache
        if cache:
            key_prefix = self._key_prefix
            self._write(
                {key_prefix(key) + dump_key(uk): v for key, cached in cache.items() for uk, v in cached.items()}
            )
            cache.clear()
        self._pending = 0
        self._db_keys.clear()

    def _write(self, entries: Dict[bytes, Any]) -> None:
        """Put (or, for a tombstone, delete) ``entries`` in one batch, in key order."""
        dump = self._dump
        batch = rocksdict.WriteBatch(raw_mode=True)
        put, delete = batch.put, batch.delete
        for db_key in sorted(entries):
            value = entries[db_key]
            if value is _REMOVED:
                delete(db_key)
            elif dump is not None:
                put(db_key, dump(value))
            else:
                try:
                    put(db_key, pickle.dumps(value, 5))
                except (pickle.PicklingError, AttributeError, TypeError):
                    put(db_key, dump_value(value))
        self._db.write(batch)

    def reduce_batch(self, *args: Any) -> Any:  # a map state's table is no rolling reduce's
        raise TypeError("a map state's table has no rolling reduce")

    sum_pairs_batch = reduce_batch

    def __repr__(self) -> str:
        return f"RocksDBMapEntries(state id {self.state_id})"


def _entries_of(it: Any, prefix: bytes) -> Iterator[Tuple[Any, Any]]:
    cut = len(prefix)
    while it.valid():
        k = it.key()
        if not k.startswith(prefix):
            break
        yield load_key(k[cut:]), load_value(it.value())
        it.next()


class RocksDBUserMap(MutableMapping):
    """The map of one key of a :class:`RocksDBMapEntries`: ``user key -> value``, each a RocksDB
    entry; iteration reads the key's range (a copy of its keys: changing the map while
    iterating is safe)."""

    __slots__ = ("_table", "key")

    def __init__(self, table: RocksDBMapEntries, key: Any) -> None:
        self._table = table
        self.key = key

    def get(self, user_key: Any, default: Any = None) -> Any:
        return self._table.entry_get(self.key, user_key, default)

    def __getitem__(self, user_key: Any) -> Any:
        value = self._table.entry_get(self.key, user_key, _MISSING)
        if value is _MISSING:
            raise KeyError(user_key)
        return value

    def __contains__(self, user_key: Any) -> bool:
        return self._table.entry_contains(self.key, user_key)

    def __setitem__(self, user_key: Any, value: Any) -> None:
        self._table.entry_put(self.key, user_key, value)

    def __delitem__(self, user_key: Any) -> None:
        if self._table.entry_remove(self.key, user_key) is _MISSING:
            raise KeyError(user_key)

    def pop(self, user_key: Any, default: Any = _MISSING) -> Any:
        value = self._table.entry_remove(self.key, user_key)
        if value is _MISSING:
            if default is _MISSING:
                raise KeyError(user_key)
            return default
        return value

    def __iter__(self) -> Iterator[Any]:
        return iter([uk for uk, _ in self._table.entry_items(self.key)])

    def __len__(self) -> int:
        return sum(1 for _ in self._table.entry_items(self.key))

    def __bool__(self) -> bool:
        return self._table.has_entries(self.key)

    def items(self) -> Any:  # type: ignore[override]
        return list(self._table.entry_items(self.key))

    def values(self) -> Any:  # type: ignore[override]
        return [v for _, v in self._table.entry_items(self.key)]

    def keys(self) -> Any:  # type: ignore[override]
        return [uk for uk, _ in self._table.entry_items(self.key)]

    def __repr__(self) -> str:
        return f"{dict(self.items())!r}"


class RocksDBUserMapState(MapState):
    """``MapState`` of the backend's current key over :class:`RocksDBMapEntries`."""

    __slots__ = ("_backend", "_table", "name")

    def __init__(self, backend: Any, table: Any) -> None:
        self._backend = backend
        self._table = table
        self.name = table.name

    def _key(self) -> Any:
        key = self._backend.current_key
        if key is None:
            raise RuntimeError(f"state {self.name!r} accessed with no current key set")
        return key

    @property
    def _entries(self) -> RocksDBMapEntries:
        return self._table.values  # (rebound objects after a restore keep this table)

    def get(self, key: Any) -> Any:
        return self._entries.entry_get(self._key(), key)

    def put(self, key: Any, value: Any) -> None:
        self._entries.entry_put(self._key(), key, value)

    def put_all(self, mapping: Any) -> None:
        current = self._key()
        entries = self._entries
        for user_key, value in dict(mapping).items():
            entries.entry_put(current, user_key, value)

    def remove(self, key: Any) -> None:
        self._entries.entry_remove(self._key(), key)

    def contains(self, key: Any) -> bool:
        return self._entries.entry_contains(self._key(), key)

    def keys(self) -> Iterator[Any]:
        return (uk for uk, _ in self._entries.entry_items(self._key()))

    def values(self) -> Iterator[Any]:
        return (v for _, v in self._entries.entry_items(self._key()))

    def items(self) -> Iterator[Tuple[Any, Any]]:
        return self._entries.entry_items(self._key())

    def is_empty(self) -> bool:
        return not self._entries.has_entries(self._key())

    def clear(self) -> None:
        self._entries.clear_key(self._key())


__all__ = ["RocksDBMapEntries", "RocksDBUserMap", "RocksDBUserMapState", "split_key"]
