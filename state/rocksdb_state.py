"""The states of the RocksDB keyed backend as the mappings operators use on the heap: Flink's
``AbstractRocksDBState`` family over a ``RocksDBWriteBatchWrapper``.

A state's entries live under ``<key group: 2 bytes><state id: 2 bytes><serialised key>``
(:data:`KEY_HEADER`; a namespaced state's key is the serialised ``(key, namespace)`` pair), so one
key group of one state is one contiguous range of RocksDB's keys. :class:`RocksDBMapState` is a
mutable mapping ``key -> value`` with a write-back cache of Python objects: what it hands out is
the stored object, so states and operators that change a list, map or accumulator in place keep
working, and the cache is written in one ``WriteBatch`` when full and before every snapshot.
:class:`RocksDBNamespacedState` maps ``namespace -> pane`` (:class:`RocksDBPane`: ``key ->
value``), the layout the window operator uses on the heap, with the number of entries of every
namespace in memory so an empty pane is known without a scan.

The keyed rolling reduce calls :meth:`RocksDBMapState.reduce_batch` / ``sum_pairs_batch`` once per
batch of records (the contract of ``operators.reduce``'s pure loops): the key selector runs once
per record, the batch's keys not cached get their key groups and bytes at once and are fetched
with one multi-get; the operator's own loop then runs over the cache with the keys already known.
The cache is written in key order (RocksDB inserts a sorted batch into its memtable several times
faster). The key and write steps run compiled (``shuffle._hotpath``: ``state_db_keys``,
``state_entries``) or as their pure twins here.

Keys are serialised with msgpack (ints, strings, bytes, floats and tuples of them: equal keys give
equal bytes) or else pickle. Values: with the stream's codec (``shuffle.codec``, tagged) when the
state's descriptor declares a type; else plain values (None, scalars of exact built-in types and
tuples of them) with msgpack, read back as they were (arrays as tuples), and anything else with
pickle (cloudpickle when pickle cannot). The first byte tells them apart: pickle's ``0x80``, the
codec's tag ``0xC1`` (msgpack never writes either: it packs no dicts here).

Not thread-safe: a state belongs to its backend's task thread.
"""

from __future__ import annotations

import logging
import pickle
import struct
from collections import deque
from collections.abc import MutableMapping
from functools import partial
from itertools import chain, filterfalse
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

import cloudpickle
import msgpack
import rocksdict

from raylink.core.key_groups import assign_key_groups
from raylink.shuffle import codec
from raylink.shuffle.hotpath import NATIVE
from raylink.state.state_backend import (
    StateTable,
)

log = logging.getLogger(__name__)


KEY_HEADER = struct.Struct(">HH")  # key group, state id
_PICKLED = 0xC1  # a byte msgpack never starts an object with: the key is pickled
_MISSING = object()
_ABSENT = object()
_SIMPLE = (int, str, bytes, float, bool)


#: msgpack's nesting limit: a deeper value is not plain (it is pickled), as in the compiled twin
_PLAIN_DEPTH = 511


def _simple(obj: Any, depth: int = 0) -> bool:
    """None, a scalar of an exact built-in type, or a tuple of such up to msgpack's nesting limit
    (the pure twin of the compiled ``_plain_value``)."""
    t = type(obj)
    if obj is None or t in _SIMPLE:
        return True
    if t is not tuple or depth >= _PLAIN_DEPTH:
        return False
    for e in obj:  # a loop, not all(<generator>): one frame per level, as deep as msgpack goes
        if not _simple(e, depth + 1):
            return False
    return True


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


def dump_codec_value(obj: Any) -> bytes:
    """A value of a state with a declared type: the stream's codec (msgpack), tagged."""
    return _CODEC_TAG + codec.encode(obj)


_PICKLE_START = 0x80  # pickle's PROTO opcode: every pickle of protocol 2 and above starts with it
_unpack_plain = partial(msgpack.unpackb, use_list=False, raw=False)


def load_value(data: bytes) -> Any:
    """A stored value: pickle, the stream's codec when tagged so, else a plain value (msgpack)."""
    first = data[0]
    if first == _PICKLE_START:
        return pickle.loads(data)
    if first == _PICKLED:
        return codec.decode(data[1:])
    return _unpack_plain(data)


_CODEC_TAG = bytes((_PICKLED,))  # pickle never starts with it either


# -- the batch steps' pure twins (compiled: ``shuffle._hotpath``) --------------------------------
def state_db_keys_pure(
    keys: List[Any],
    max_parallelism: int,
    prefix_of_group: List[Optional[bytes]],
    known_groups: Dict[Any, int],
    known_limit: int,
    pack: Callable[[Any], bytes],
) -> Optional[List[bytes]]:
    """``[prefix_of_group[key group of k] + pack(k) for k in keys]`` for keys of exact type int
    or str, their key groups remembered in ``known_groups`` (cleared first when it would pass
    ``known_limit``); None when a key is of another type, cannot be packed, or its key group has
    no prefix (not this backend's): the caller takes the generic path."""
    if not set(map(type, keys)) <= _INT_OR_STR:
        return None
    groups = assign_key_groups(keys, max_parallelism)
    prefixes = list(map(prefix_of_group.__getitem__, groups))
    if None in prefixes:
        return None
    try:
        dumped = list(map(pack, keys))
    except (OverflowError, ValueError):
        return None
    if len(known_groups) + len(keys) > known_limit:
        known_groups.clear()
    known_groups.update(zip(keys, groups))
    return list(map(bytes.__add__, prefixes, dumped))


_INT_OR_STR = {int, str}


def state_entries_pure(
    cache: Dict[Any, Any],
    db_keys: Dict[Any, bytes],
    db_key: Callable[[Any], bytes],
    pack: Optional[Callable[[Any], bytes]],
    dump: Callable[[Any], bytes],
) -> Tuple[List[bytes], List[bytes]]:
    """Every cached entry as ``(key bytes list, value bytes list)`` in key order: the key's bytes
    from ``db_keys`` (else ``db_key(key)``); a plain value (:func:`_simple`) packed with ``pack``
    unless ``pack`` is None or raises, any other value through ``dump``."""
    keys = list(cache)
    known = list(map(db_keys.get, keys))
    if None in known:
        known = [k if k is not None else db_key(key) for key, k in zip(keys, known)]
    values = list(cache.values())
    blobs: Optional[List[bytes]] = None
    if pack is not None and _all_plain(values):
        try:
            blobs = list(map(pack, values))
        except (OverflowError, ValueError):
            blobs = None
    if blobs is None:
        blobs = [_plain_or_dumped(value, pack, dump) for value in values]
    entries = dict(zip(known, blobs))
    ordered = sorted(entries)  # the keys alone: three times faster than sorting (key, value) pairs
    return ordered, list(map(entries.__getitem__, ordered))


_SCALAR_TYPES = frozenset(_SIMPLE + (type(None),))  # what _simple takes as a scalar, None included


def _all_plain(values: List[Any]) -> bool:
    """Whether every value is plain (:func:`_simple`); scalars and flat tuples checked by type
    at C speed, anything else value by value."""
    types = set(map(type, values))
    if types <= _SCALAR_TYPES:
        return True
    if types == {tuple} and set(map(type, chain.from_iterable(values))) <= _SCALAR_TYPES:
        return True
    return all(map(_simple, values))


def _plain_or_dumped(value: Any, pack: Optional[Callable[[Any], bytes]], dump: Callable[[Any], bytes]) -> bytes:
    if pack is not None and _simple(value):
        try:
            return pack(value)
        except (OverflowError, ValueError):
            pass
    return dump(value)


if NATIVE is None:
    _state_db_keys, _state_entries = state_db_keys_pure, state_entries_pure
else:
    _state_db_keys, _state_entries = NATIVE.state_db_keys, NATIVE.state_entries


# -- the tables ------------------------------------------------------------------------------------------
class RocksDBMapState(MutableMapping):
    """One state's entries ``key -> value`` in RocksDB, with a write-back cache of Python
    objects (Flink's ``AbstractRocksDBState`` over a ``RocksDBWriteBatchWrapper``)."""

    def __init__(self, backend: Any, state_id: int) -> None:
        self._backend = backend
        self._cache: Dict[Any, Any] = {}
        self._db_keys: Dict[Any, bytes] = {}  # of cached keys whose bytes are known already
        self._capacity = backend.cache_capacity
        self._dump: Any = None  # values: pickle; dump_codec_value for a state with a declared type
        self._key_group_of = backend.key_group_of
        self.bind(backend.db, state_id)

    def bind(self, db: Any, state_id: int) -> None:
        """Use ``db`` and ``state_id`` (after a restore); the cache is dropped."""
        self._cache.clear()
        self._db_keys.clear()
        self._db = db
        self.state_id = state_id
        b = self._backend
        self._prefixes = [KEY_HEADER.pack(kg, state_id) for kg in range(b.start, b.end + 1)]
        self._start = b.start
        # key group -> prefix, None outside the backend's range (the batch paths index it by key group)
        self._prefix_of_group: List[Optional[bytes]] = (
            [None] * b.start + self._prefixes + [None] * (b.max_parallelism - 1 - b.end)
        )

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
            self._db.delete_range(prefix, next_prefix(prefix))

    def flush(self) -> None:
        """Write the cached objects to RocksDB (one batch, in key order: RocksDB inserts a sorted
        batch into its memtable several times faster than one in hash order) and forget them."""
        cache = self._cache
        if not cache:
            self._db_keys.clear()
            return
        dump = self._dump
        if dump is None:
            entries = _state_entries(cache, self._db_keys, self._db_key, _pack, dump_value)
        else:
            entries = _state_entries(cache, self._db_keys, self._db_key, None, dump)
        batch = rocksdict.WriteBatch(raw_mode=True)
        deque(map(batch.put, *entries), maxlen=0)
        self._db.write(batch)
        cache.clear()
        self._db_keys.clear()

    # -- batches (the keyed rolling reduce's loops, one call per batch of records)
    def _fetch(self, keys: List[Any]) -> None:
        """Bring the stored values of those of ``keys`` not cached yet into the cache: their
        key groups and bytes computed for all at once, one multi-get. A key that cannot be
        stored here (None, another subtask's key group) is left out: the caller's first-record
        check raises for it in order."""
        cache = self._cache
        missing = list(filterfalse(cache.__contains__, dict.fromkeys(keys)))
        if not missing:
            return
        if len(cache) + len(missing) > self._capacity:
            self.flush()
            missing = list(dict.fromkeys(keys))
        b = self._backend
        db_keys = _state_db_keys(
            missing, b.max_parallelism, self._prefix_of_group, b._kg_cache, b._key_cache_limit, _pack
        )
        if db_keys is None:
            planned = self._db_keys_generic(missing)
            if planned is None:
                return
            missing, db_keys = planned
        self._db_keys.update(zip(missing, db_keys))
        raws = self._db.get(db_keys)
        if raws.count(None) != len(raws):
            for key, raw in zip(missing, raws):
                if raw is not None:
                    cache[key] = load_value(raw)

    def _db_keys_generic(self, missing: List[Any]) -> Optional[Tuple[List[Any], List[bytes]]]:
        """``(keys, their bytes)`` of the keys of ``missing`` this backend stores, for keys of
        any type; None if there are none."""
        groups = self._key_groups(missing)
        if groups is None:  # some key is not ours (or None): only the others are looked up
            checked = [(k, g) for k, g in zip(missing, map(self._checked_group, missing)) if g is not None]
            if not checked:
                return None
            missing = [k for k, _ in checked]
            groups = [g for _, g in checked]
        db_keys = list(map(bytes.__add__, map(self._prefix_of_group.__getitem__, groups), map(dump_key, missing)))
        return missing, db_keys

    def _key_groups(self, keys: List[Any]) -> Optional[List[int]]:
        """The key groups of ``keys`` (all at once), remembered by the backend for its key
        check; None when one of them is None or not in this backend's range."""
        b = self._backend
        try:
            groups = assign_key_groups(keys, b.max_parallelism)
        except (ValueError, TypeError):
            return None
        if min(groups) < b.start or max(groups) > b.end:
            return None
        known = b._kg_cache
        if len(known) + len(keys) > b._key_cache_limit:
            known.clear()
        known.update(zip(keys, groups))
        return groups

    def _checked_group(self, key: Any) -> Optional[int]:
        try:
            return self._key_group_of(key)
        except (ValueError, TypeError):
            return None

    def reduce_batch(
        self, values: List[Any], key_of: Callable[[Any], Any], reduce: Any, on_miss: Any, loop: Callable[..., Any]
    ) -> List[Any]:
        """The rolling reduce of a batch: the batch's keys (the key selector runs once per
        record), those not cached fetched with one multi-get, then ``loop``
        (``operators.reduce.reduce_batch``: per record in order ``v = reduce(stored, record)``,
        or ``v = on_miss(key, record)`` for a key with no stored value; ``v`` stored and
        returned) over the cache with those keys."""
        keys = list(map(key_of, values))
        self._fetch(keys)
        return loop(values, key_of, self._cache, reduce, on_miss, keys=keys)

    def sum_pairs_batch(
        self, values: List[Any], key_of: Callable[[Any], Any], on_miss: Any, loop: Callable[..., Any]
    ) -> Tuple[List[Any], int]:
        """``sum(1)`` over ``(key, count)`` pairs with ``loop`` (``operators.reduce.sum_pairs_batch``)
        as :meth:`reduce_batch`: ``(results, stop)``; ``stop < len(values)`` is the first record
        that is its key's first and not an exact 2-tuple (nothing of it stored)."""
        keys = list(map(key_of, values))
        self._fetch(keys)
        return loop(values, key_of, self._cache, on_miss, keys=keys)

    def use_stream_codec(self) -> None:
        """Store values with the stream's codec (msgpack) instead of pickle: the state's
        descriptor declares a type."""
        self._dump = dump_codec_value

    def __repr__(self) -> str:
        return f"RocksDBMapState(state id {self.state_id})"


class RocksDBNamespacedState(RocksDBMapState):
    """A namespaced state: ``namespace -> pane`` where a pane maps ``key -> value`` (the
    layout operators see on the heap); stored per ``(key, namespace)`` under the key's key
    group. The number of entries of every namespace is kept in memory so an empty pane is
    known without a scan."""

    def __init__(self, backend: Any, state_id: int) -> None:
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


def next_prefix(prefix: bytes) -> bytes:
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


__all__ = [
    "KEY_HEADER",
    "RocksDBMapState",
    "RocksDBNamespacedState",
    "RocksDBPane",
    "RocksDBStateTable",
    "dump_key",
    "dump_codec_value",
    "dump_value",
    "load_key",
    "load_value",
    "next_prefix",
    "state_db_keys_pure",
    "state_entries_pure",
]
