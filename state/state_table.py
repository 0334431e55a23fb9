"""A heap state's values with copy-on-write snapshots: Flink's ``CopyOnWriteStateTable`` /
``CopyOnWriteStateMap`` and their snapshots, in layers of plain dicts.

A :class:`StateTable` holds one registered state of a ``HeapKeyedStateBackend``: ``key ->
value``, or for a namespaced state (window contents, trigger and per-window state) ``namespace
-> {key -> value}`` (a *pane* per namespace). Its entries live in layers:

* ``live`` -- the dict every write goes to (hot operators write into it directly);
* ``lower`` -- older layers, newest first, never written by the task thread: each is the
  ``live`` dict of an earlier checkpoint, frozen by :meth:`freeze`, and the last one (the
  *base*) holds everything older.

A read looks in ``live`` first and then down ``lower``; a removal of an entry a lower layer
holds writes the tombstone :data:`REMOVED` into ``live``. A checkpoint's synchronous phase
(:meth:`freeze`) moves ``live`` to the front of ``lower`` and starts an empty ``live``: O(1)
per state, whatever its size. The frozen layers are then only read -- by the snapshot's
asynchronous part, which groups them by key group on the TaskExecutor's checkpoint writer
thread -- until :meth:`merge_frozen` folds them into the base there, once no earlier snapshot
still needs the base as it was (``merged`` tells the task thread which layers it may drop).

Values that operators change in place (list, map and aggregating states: ``copy_value``) are
copied into ``live`` the first time they are read for a change after a checkpoint
(:meth:`lookup` with ``promote``), so a frozen layer never sees a later change -- Flink's
copy-on-write of entries that a snapshot shares.

Thread-safety: the task thread calls everything except :meth:`merge_frozen` and a
snapshot's reading of its layers, which run on one other thread under the
:class:`SnapshotRegistry`'s lock; dict reads and writes are atomic under the GIL, and the task
thread reads a whole table (:meth:`flat_items`, the views) from copies of the layers' items
taken in one C call each, as the base may be merged into meanwhile.
"""

from __future__ import annotations

import contextlib
import gc
import threading
import weakref
from collections.abc import Mapping, MutableMapping
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Tuple


class _Removed:
    """The type of :data:`REMOVED` (pickled by reference: change files hold tombstones)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "REMOVED"

    def __reduce__(self) -> str:
        return "REMOVED"


#: an entry removed since a lower layer was frozen (a tombstone in ``live``)
REMOVED: Any = _Removed()
#: at most this many layers per table: beyond, layers are merged even if an incremental
#: checkpoint would have written them apart (its next checkpoint is a full one)
MAX_LAYERS = 8
_MISSING = object()
NAMESPACED = "ns:"  # kind prefix of namespaced tables


def _same(value: Any) -> Any:
    return value


@contextlib.contextmanager
def without_cyclic_gc() -> Iterator[None]:
    """No cyclic garbage collection in the block (a barrier's few allocations could set off a
    full collection of a large state's objects there; it runs at a later allocation instead)."""
    collecting = gc.isenabled()
    if collecting:
        gc.disable()
    try:
        yield
    finally:
        if collecting:
            gc.enable()


class StateTable:
    """One state's values in copy-on-write layers (see the module docstring); ``values`` is a
    mapping view over them (``key -> value``, or ``namespace -> {key -> value}``) for the
    descriptor states and for readers that do not care about layers."""

    __slots__ = (
        "name",
        "kind",
        "values",
        "_live",
        "lower",
        "frozen_at",
        "merged",
        "dropped",
        "snapshot_filter",
        "copy_value",
    )

    def __init__(self, name: str, kind: Optional[str], copy_value: Callable[[Any], Any] = _same) -> None:
        self.name = name
        self.kind = kind
        # another backend's table (a subclass) keeps its entries in its ``values`` mapping
        self._live: Optional[dict] = {} if type(self) is StateTable else None
        self.lower: Tuple[dict, ...] = ()
        self.frozen_at: Dict[int, int] = {}  # id() of a lower layer -> the snapshot that froze it
        self.merged: Dict[int, bool] = {}  # id() of lower layers folded into the base (droppable)
        self.dropped: List[dict] = []  # folded layers the task dropped, emptied on the snapshot's thread
        # (value, now_ms) -> what a snapshot keeps of it, None: nothing (TTL states)
        self.snapshot_filter: Optional[Callable[[Any, int], Any]] = None
        self.copy_value = copy_value
        self.values: Any = NamespacedView(self) if self.namespaced else FlatView(self)

    # -- layers ----------------------------------------------------------------------------------
    @property
    def live(self) -> Any:
        """The layer writes go to (another backend's table: its one mapping)."""
        live = self._live
        return self.values if live is None else live

    @property
    def namespaced(self) -> bool:
        return self.kind is not None and self.kind.startswith(NAMESPACED)

    def set_kind(self, kind: str, copy_value: Callable[[Any], Any]) -> None:
        """The kind of a table restored before its state was registered."""
        self.kind = kind
        self.copy_value = copy_value
        self.values = NamespacedView(self) if self.namespaced else FlatView(self)

    def freeze(self, seq: int) -> Tuple[dict, ...]:
        """The synchronous part of snapshot ``seq``: ``live`` becomes the newest lower layer
        (layers merged into the base meanwhile are dropped first). Returns the layers the
        snapshot reads, newest first."""
        lower = self.lower
        merged = self.merged
        if merged:  # (the snapshot's thread only adds to ``merged``: no entry is lost)
            kept = []
            for layer in lower:
                if merged.pop(id(layer), False):
                    self.frozen_at.pop(id(layer), None)
                    self.dropped.append(layer)  # (freeing a big dict here would hold the task)
                else:
                    kept.append(layer)
            lower = tuple(kept)
        live = self._live
        if live:
            self.frozen_at[id(live)] = seq
            lower = (live,) + lower
            self._live = {}
        self.lower = lower
        return lower

    def reset(self) -> None:
        """Drop every entry (restore)."""
        self._live = None if self._live is None else {}
        self.lower = ()
        self.frozen_at = {}
        self.merged = {}
        self.dropped = []

    # -- flat tables -----------------------------------------------------------------------------
    def lookup(self, key: Any, default: Any = None, promote: bool = False) -> Any:
        """The value of ``key``; with ``promote`` a value found in a lower layer is copied into
        ``live`` first (it is about to be changed in place)."""
        live = self._live  # (the ``live`` property, inline: every state read comes here)
        if live is None:
            live = self.values
        value = live.get(key, _MISSING)
        if value is _MISSING:
            for layer in self.lower:
                value = layer.get(key, _MISSING)
                if value is not _MISSING:
                    break
            else:
                return default
            if value is REMOVED:
                return default
            if promote and self.copy_value is not _same:
                value = live[key] = self.copy_value(value)
            return value
        return default if value is REMOVED else value

    def _in_lower(self, key: Any) -> bool:
        for layer in self.lower:
            value = layer.get(key, _MISSING)
            if value is not _MISSING:
                return value is not REMOVED
        return False

    def remove(self, key: Any, default: Any = None) -> Any:
        """Remove ``key``; returns its value (``default`` when it had none)."""
        value = self.lookup(key, _MISSING)
        if value is _MISSING:
            return default
        if self.lower and self._in_lower(key):
            self.live[key] = REMOVED
        else:
            self.live.pop(key, None)
        return value

    # -- namespaced tables -----------------------------------------------------------------------
    def lower_get(self, namespace: Any, key: Any, default: Any = None, promote: bool = False) -> Any:
        """The value of ``key`` in ``namespace`` in the lower layers only (the caller looked in
        ``live`` already); with ``promote`` a copy, to be written into ``live`` by the caller."""
        for layer in self.lower:
            pane = layer.get(namespace)
            if pane is not None:
                value = pane.get(key, _MISSING)
                if value is not _MISSING:
                    if value is REMOVED:
                        return default
                    return self.copy_value(value) if promote else value
        return default

    def ns_lookup(self, namespace: Any, key: Any, default: Any = None, promote: bool = False) -> Any:
        """The value of ``key`` in ``namespace``; with ``promote`` see :meth:`lookup`."""
        live = self.live
        pane = live.get(namespace)
        if pane is not None:
            value = pane.get(key, _MISSING)
            if value is not _MISSING:
                return default if value is REMOVED else value
        if not self.lower:
            return default
        value = self.lower_get(namespace, key, _MISSING, promote)
        if value is _MISSING:
            return default
        if promote and self.copy_value is not _same:
            self.live_pane(namespace)[key] = value
        return value

    def live_pane(self, namespace: Any) -> Any:
        """``namespace``'s pane in ``live`` (created empty if absent)."""
        live = self.live
        pane = live.get(namespace)
        if pane is None:
            pane = live.setdefault(namespace, {})
        return pane

    def ns_put(self, namespace: Any, key: Any, value: Any) -> None:
        self.live_pane(namespace)[key] = value

    def ns_remove(self, namespace: Any, key: Any, default: Any = None) -> Any:
        """Remove ``key`` from ``namespace``; returns its value (``default`` when none). A pane
        left empty is dropped (with lower layers: when they are merged)."""
        live = self.live
        if not self.lower:
            pane = live.get(namespace)
            if pane is None:
                return default
            value = pane.pop(key, default)
            if not pane:
                del live[namespace]
            return value
        value = self.ns_lookup(namespace, key, _MISSING)
        if value is _MISSING:
            return default
        if self.lower_get(namespace, key, _MISSING) is not _MISSING:
            self.live_pane(namespace)[key] = REMOVED
        else:
            live[namespace].pop(key, None)
        return value

    # -- whole-table reads -----------------------------------------------------------------------
    def layers(self) -> Tuple[Any, ...]:
        """Every layer, newest first."""
        return (self.live,) + self.lower

    def flat_items(self) -> Iterator[Tuple[Any, Any]]:
        """The entries of a flat table, each key once (task thread: the base may be merged into
        meanwhile, so each layer is read from a copy of its items, taken atomically)."""
        return flat_items(tuple(list(layer.items()) for layer in self.layers()))

    def namespaced_items(self) -> Iterator[Tuple[Any, Any, Any]]:
        """``(namespace, key, value)`` of a namespaced table, each pair once (read as
        :meth:`flat_items` reads)."""
        layers = tuple([(ns, list(pane.items())) for ns, pane in list(layer.items())] for layer in self.layers())
        return namespaced_items(layers)

    def num_entries(self) -> int:
        """Entries (a namespaced state's: its (key, namespace) pairs); with lower layers an upper
        bound (an entry rewritten since a checkpoint counts once per layer)."""
        if self.namespaced:
            return sum(len(pane) for layer in self.layers() for pane in list(layer.values()))
        return sum(len(layer) for layer in self.layers())

    # -- the snapshot's thread -------------------------------------------------------------------
    def merge_frozen(self, limit: Optional[int]) -> None:
        """Fold lower layers into the base (the last layer), oldest first, up to the layer frozen
        by snapshot ``limit`` (None: all): no snapshot taken before a layer was frozen may be
        outstanding, and with incremental checkpoints a layer stays apart until a checkpoint
        that wrote it completed. Runs on the snapshot's thread under the snapshot lock; the
        task thread drops the folded layers at its next :meth:`freeze`."""
        dropped = self.dropped
        while dropped:  # emptied a slice at a time: freeing a big dict at once holds the GIL long
            layer = dropped.pop()
            popitem = layer.popitem
            for _ in range(len(layer)):
                popitem()
        lower, frozen_at, merged = self.lower, self.frozen_at, self.merged
        if len(lower) < 2:
            return
        base = lower[-1]
        for layer in reversed(lower[:-1]):
            if id(layer) in merged:
                continue
            seq = frozen_at.get(id(layer))
            if seq is None or (limit is not None and limit < seq):
                return  # a snapshot from before this layer still reads the base, or it is unwritten
            if self.namespaced:
                for ns, pane in layer.items():
                    target = base.get(ns)
                    if target is None:
                        target = {}
                    for key, value in pane.items():
                        if value is REMOVED:
                            target.pop(key, None)
                        else:
                            target[key] = value
                    if target:
                        base[ns] = target
                    else:
                        base.pop(ns, None)
            else:
                for key, value in layer.items():
                    if value is REMOVED:
                        base.pop(key, None)
                    else:
                        base[key] = value
            merged[id(layer)] = True


class FlatView(MutableMapping):
    """``key -> value`` over a flat table's layers, for the descriptor states: ``get`` and
    ``setdefault`` hand out a value that may be changed in place (copied into ``live`` first)."""

    __slots__ = ("_table",)

    def __init__(self, table: StateTable) -> None:
        self._table = table

    def get(self, key: Any, default: Any = None) -> Any:
        return self._table.lookup(key, default, True)

    def __getitem__(self, key: Any) -> Any:
        value = self._table.lookup(key, _MISSING, True)
        if value is _MISSING:
            raise KeyError(key)
        return value

    def __contains__(self, key: Any) -> bool:
        return self._table.lookup(key, _MISSING) is not _MISSING

    def __setitem__(self, key: Any, value: Any) -> None:
        self._table.live[key] = value

    def __delitem__(self, key: Any) -> None:
        if self._table.remove(key, _MISSING) is _MISSING:
            raise KeyError(key)

    def pop(self, key: Any, default: Any = _MISSING) -> Any:
        value = self._table.remove(key, _MISSING)
        if value is _MISSING:
            if default is _MISSING:
                raise KeyError(key)
            return default
        return value

    def setdefault(self, key: Any, default: Any = None) -> Any:
        value = self._table.lookup(key, _MISSING, True)
        if value is _MISSING:
            self._table.live[key] = value = default
        return value

    def __iter__(self) -> Iterator[Any]:
        return iter([key for key, _ in self._table.flat_items()])

    def __len__(self) -> int:
        if not self._table.lower:
            return len(self._table.live)
        return sum(1 for _ in self._table.flat_items())

    def __bool__(self) -> bool:
        table = self._table
        return bool(table.live) or any(table.lower)

    def clear(self) -> None:
        self._table.reset()

    def __repr__(self) -> str:
        return f"{dict(self._table.flat_items())!r}"


class NamespacedView(MutableMapping):
    """``namespace -> {key -> value}`` over a namespaced table's layers: each pane a
    :class:`PaneView`, for readers and writers that do not care about layers (tests, other
    backends' callers); the window operator and the namespaced states use the table's methods."""

    __slots__ = ("_table",)

    def __init__(self, table: StateTable) -> None:
        self._table = table

    def _namespaces(self) -> List[Any]:
        return list(dict.fromkeys(ns for ns, _, _ in self._table.namespaced_items()))

    def get(self, namespace: Any, default: Any = None) -> Any:
        return PaneView(self._table, namespace) if namespace in self else default

    def __contains__(self, namespace: Any) -> bool:
        return next(iter(PaneView(self._table, namespace)), _MISSING) is not _MISSING

    def __getitem__(self, namespace: Any) -> "PaneView":
        if namespace not in self:
            raise KeyError(namespace)
        return PaneView(self._table, namespace)

    def setdefault(self, namespace: Any, default: Any = None) -> "PaneView":
        pane = PaneView(self._table, namespace)
        if default:
            pane.update(default)
        return pane

    def __setitem__(self, namespace: Any, pane: Any) -> None:
        del self[namespace]
        PaneView(self._table, namespace).update(pane)

    def __delitem__(self, namespace: Any) -> None:
        pane = PaneView(self._table, namespace)
        for key in list(pane):
            del pane[key]

    def __iter__(self) -> Iterator[Any]:
        return iter(self._namespaces())

    def __len__(self) -> int:
        return len(self._namespaces())

    def clear(self) -> None:
        self._table.reset()

    def __repr__(self) -> str:
        return f"{ {ns: dict(PaneView(self._table, ns)) for ns in self._namespaces()}!r}"


class PaneView(MutableMapping):
    """One namespace's ``key -> value`` over a namespaced table's layers."""

    __slots__ = ("_table", "_namespace")

    def __init__(self, table: StateTable, namespace: Any) -> None:
        self._table = table
        self._namespace = namespace

    def get(self, key: Any, default: Any = None) -> Any:
        return self._table.ns_lookup(self._namespace, key, default, True)

    def __getitem__(self, key: Any) -> Any:
        value = self._table.ns_lookup(self._namespace, key, _MISSING, True)
        if value is _MISSING:
            raise KeyError(key)
        return value

    def __setitem__(self, key: Any, value: Any) -> None:
        self._table.ns_put(self._namespace, key, value)

    def __delitem__(self, key: Any) -> None:
        if self._table.ns_remove(self._namespace, key, _MISSING) is _MISSING:
            raise KeyError(key)

    def pop(self, key: Any, default: Any = _MISSING) -> Any:
        value = self._table.ns_remove(self._namespace, key, _MISSING)
        if value is _MISSING:
            if default is _MISSING:
                raise KeyError(key)
            return default
        return value

    def __iter__(self) -> Iterator[Any]:
        ns = self._namespace
        layers = tuple({ns: layer[ns]} for layer in self._table.layers() if ns in layer)
        return iter([key for _, key, _ in namespaced_items(layers)])

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def __repr__(self) -> str:
        return f"{dict(self.items())!r}"


class SnapshotRegistry:
    """The outstanding snapshots of a group of tables (a keyed backend's states, a timer
    service's queues): numbers them, and once one has been read folds the layers no
    outstanding snapshot needs apart into the tables' bases (:meth:`StateTable.merge_frozen`).
    ``lock`` serialises the snapshots' reads of the layers with those merges; the task thread
    never takes it except to iterate a whole table."""

    def __init__(self) -> None:
        self.seq = 0
        self.outstanding: Dict[int, bool] = {}
        self.lock = threading.Lock()
        #: None, or the last snapshot whose layers may be merged (incremental checkpoints: the
        #: last completed one); ``overflowed``: layers beyond it were merged (:data:`MAX_LAYERS`)
        self.merge_limit: Optional[int] = None
        self.overflowed = False

    def begin(self) -> int:
        """A new snapshot's number (task thread, at the barrier)."""
        self.seq += 1
        self.outstanding[self.seq] = True
        return self.seq

    def forget(self, seq: int) -> None:
        """Snapshot ``seq`` was dropped unread: its layers are merged with the next one's."""
        self.outstanding.pop(seq, None)

    def release(self, seq: int, tables: Iterable[StateTable]) -> None:
        """Snapshot ``seq`` has been read: merge what may be merged (the snapshot's thread)."""
        self.outstanding.pop(seq, None)
        with self.lock:
            self._merge(list(tables))

    def _merge(self, tables: List[StateTable]) -> None:
        limit = min(self.outstanding, default=None)
        if self.merge_limit is not None:
            if any(len(table.lower) > MAX_LAYERS for table in tables):
                self.overflowed = True
            else:
                limit = self.merge_limit if limit is None else min(limit, self.merge_limit)
        for table in tables:
            table.merge_frozen(limit)

    def compact(self, tables: Iterable[StateTable]) -> None:
        """At a barrier (task thread): when snapshots were dropped unread for long, so that
        nothing merged their layers, merge them here -- only if no snapshot's thread is at work."""
        tables = list(tables)
        if any(len(table.lower) > 2 * MAX_LAYERS for table in tables) and self.lock.acquire(blocking=False):
            try:
                self._merge(tables)
            finally:
                self.lock.release()


class LazySnapshot(Mapping):
    """A snapshot's ``{key_group: ...}`` mapping, built from frozen layers by ``build`` on first
    access, once (thread-safe; on the TaskExecutor's checkpoint writer thread, while the task
    goes on), which then releases the layers (``tables`` of ``registry``). It pickles key group
    by key group (no long hold of the GIL) and loads as the plain dict."""

    def __init__(
        self, registry: SnapshotRegistry, seq: int, build: Callable[[], Dict[int, Any]], tables: Callable[[], Iterable]
    ) -> None:
        self._registry = registry
        self._seq = seq
        self._build: Optional[Callable[[], Dict[int, Any]]] = build
        self._tables = tables
        self._lock = threading.Lock()
        self._built: Optional[Dict[int, Any]] = None
        self._forget = weakref.finalize(self, registry.forget, seq)

    def _get(self) -> Dict[int, Any]:
        with self._lock:
            if self._built is None:
                build = self._build
                if build is None:
                    raise RuntimeError("this snapshot's layers were read and released already")
                with self._registry.lock:
                    built = build()
                self._built = dict(sorted(built.items()))
                self._release()
            return self._built

    def _read(self, build: Callable[[], Dict[int, Any]]) -> Dict[int, Any]:
        """``build()`` over the frozen layers instead of the whole mapping (once; the layers
        are released after it)."""
        with self._lock:
            if self._build is None:
                raise RuntimeError("this snapshot's layers were read and released already")
            with self._registry.lock:
                part = build()
            self._release()
            return part

    def _release(self) -> None:
        self._build = None
        self._forget.detach()
        self._registry.release(self._seq, self._tables())

    def __getitem__(self, key_group: int) -> Any:
        return self._get()[key_group]

    def __iter__(self) -> Iterator[int]:
        return iter(self._get())

    def __len__(self) -> int:
        return len(self._get())

    def __reduce__(self) -> tuple:
        import cloudpickle

        return (_load_key_groups, ({kg: cloudpickle.dumps(part) for kg, part in self._get().items()},))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._get()!r})"


def _load_key_groups(pickled: Dict[int, bytes]) -> Dict[int, Any]:
    """A pickled :class:`LazySnapshot`, loaded: the plain dict."""
    import pickle

    return {kg: pickle.loads(data) for kg, data in pickled.items()}


def _items(layer: Any) -> Any:
    """A layer's (or pane's) items: a dict's, or a list of pairs already copied."""
    return layer if type(layer) is list else layer.items()


def flat_items(layers: Tuple[Any, ...], keep_removed: bool = False) -> Iterator[Tuple[Any, Any]]:
    """The entries of a flat table's ``layers`` (newest first), each key once, removed ones left
    out (``keep_removed``: given as :data:`REMOVED`)."""
    if len(layers) == 1:
        for key, value in _items(layers[0]):
            if keep_removed or value is not REMOVED:
                yield key, value
        return
    seen: set = set()
    for layer in layers:
        for key, value in _items(layer):
            if key not in seen:
                seen.add(key)
                if keep_removed or value is not REMOVED:
                    yield key, value


def namespaced_items(layers: Tuple[Any, ...], keep_removed: bool = False) -> Iterator[Tuple[Any, Any, Any]]:
    """``(namespace, key, value)`` of a namespaced table's ``layers`` (newest first), each pair
    once (``keep_removed``: see :func:`flat_items`)."""
    if len(layers) == 1:
        for ns, pane in _items(layers[0]):
            for key, value in _items(pane):
                if keep_removed or value is not REMOVED:
                    yield ns, key, value
        return
    seen: set = set()
    for layer in layers:
        for ns, pane in _items(layer):
            for key, value in _items(pane):
                pair = (ns, key)
                if pair not in seen:
                    seen.add(pair)
                    if keep_removed or value is not REMOVED:
                        yield ns, key, value


def group_by_key_group(
    parts: List[Tuple[str, bool, Tuple[dict, ...], Optional[Callable[[Any, int], Any]]]],
    now: int,
    key_group_of: Callable[[Any], int],
    keep_removed: bool = False,
) -> Dict[int, Dict[str, Dict[Any, Any]]]:
    """``{key_group: {state name: {key: value}}}`` (a namespaced state's value: ``{namespace:
    value}``) of the frozen layers of each state in ``parts`` (name, namespaced, layers newest
    first, TTL filter); ``keep_removed``: removed and expired entries as :data:`REMOVED` (a
    change set)."""
    result: Dict[int, Dict[str, Dict[Any, Any]]] = {}
    for name, namespaced, layers, live in parts:
        if namespaced:
            entries = namespaced_items(layers, keep_removed)
        else:
            entries = ((None, key, value) for key, value in flat_items(layers, keep_removed))
        for ns, key, value in entries:
            if live is not None and value is not REMOVED:
                value = live(value, now)
                if value is None:
                    if not keep_removed:
                        continue
                    value = REMOVED
            kg = key_group_of(key)
            per_kg = result.get(kg)
            if per_kg is None:
                per_kg = result[kg] = {}
            per_state = per_kg.get(name)
            if per_state is None:
                per_state = per_kg[name] = {}
            if namespaced:
                per_key = per_state.get(key)
                if per_key is None:
                    per_key = per_state[key] = {}
                per_key[ns] = value
            else:
                per_state[key] = value
    return result


__all__ = [
    "FlatView",
    "LazySnapshot",
    "MAX_LAYERS",
    "NAMESPACED",
    "NamespacedView",
    "PaneView",
    "REMOVED",
    "SnapshotRegistry",
    "StateTable",
    "flat_items",
    "group_by_key_group",
    "namespaced_items",
    "without_cyclic_gc",
]
