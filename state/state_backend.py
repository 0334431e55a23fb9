"""Heap keyed state, snapshotted by key group: Flink's ``HeapKeyedStateBackend`` / ``StateTable``.

A backend serves one keyed operator of one subtask and owns the key groups
``[start, end]`` of that subtask (Flink's ``KeyGroupRange``). Every registered
state is a ``StateTable`` (``raylink.state.state_table``: plain dicts ``key -> value`` in
copy-on-write layers); state is snapshotted, restored and rescaled by key group, the key
group of each key being derived when a snapshot is read (Flink keeps one ``StateMap`` per key
group; one dict saves the hot path a lookup per record). A key's key group is
computed once (``assign_to_key_group`` from ``raylink.core.key_groups``; its compiled twin in
``shuffle._hotpath`` where built), validated against the range and cached.

Two access paths:

* descriptor states (``get_or_create_state``) read the backend's current key,
  set (and validated) per record / timer by the operator (``set_current_key``);
* hot operators (reduce, aggregate, windows) keep the per-key value directly in the
  table's ``live`` dict -- one dict lookup per record -- and look below it
  (``StateTable.lookup``) only for a key ``live`` misses; they validate a key with
  ``backend.key_group_of`` the first time they store it.

Namespaced state (Flink's ``InternalKvState`` with a namespace: window contents,
trigger and per-window state) lives in tables of kind ``"ns:<kind>"`` whose
layers map ``namespace -> {key -> value}`` (namespace first: the window
operator finds a window's pane once per batch, then touches keys only); an empty
namespace has no entry. Snapshots list them key first, ``{key_group: {name: {key:
{namespace: value}}}}``, so they are by key group like every other state, and a
table restored before it is registered is turned around when it is. Descriptor
states over them come from ``get_or_create_namespaced_state`` and read the
namespace set with ``set_current_namespace``; the window operator's fast path
uses the table itself.

States whose descriptor enables a time-to-live (``StateTtlConfig``) are built by
``raylink.state.ttl_state`` (Flink's ``TtlStateFactory``) over tables of kind
``"ttl:<kind>"`` holding ``(value, last_access_ms)``; ``ttl_time_provider`` is their
clock, and a table's ``snapshot_filter`` leaves expired values out of snapshots.

A snapshot is taken in Flink's two phases, copy-on-write: at the barrier ``snapshot()``
freezes each table's live layer (O(1) per state, whatever its size; values changed in place
-- list, map, aggregating -- are copied when next written instead); the
:class:`KeyedStateSnapshot` it returns groups the frozen layers by key group when first
read, i.e. when the TaskExecutor's checkpoint writer thread pickles it (key group by key
group), while the task goes on, and then folds them into the base layer
(``python -m raylink.bench.state``: the worst synchronous phase). Not thread-safe: a backend
belongs to one task thread; a ``KeyedStateSnapshot`` may be read from any thread.
"""

from __future__ import annotations

import copy
import importlib
import itertools
import sys
import uuid
from functools import partial
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Tuple

from raylink.core.key_groups import assign_to_key_group, stable_hash
from raylink.core.options import CheckpointingOptions, StateBackendOptions, read_option
from raylink.core.reprs import record_repr
from raylink.core.state import AggregatingState, ListState, MapState, ReducingState, State, ValueState
from raylink.shuffle.hotpath import NATIVE
from raylink.state.heap_incremental import HeapIncrementalSnapshot
from raylink.state.state_table import (
    NAMESPACED,
    LazySnapshot,
    SnapshotRegistry,
    StateTable,
    _same,
    flat_items,
    group_by_key_group,
    namespaced_items,
    without_cyclic_gc,
)
from raylink.state.ttl_state import TTL, create_ttl_state, ttl_config_of, wall_clock_millis

NULL_KEY_MESSAGE = "Assigned key must not be null!"
#: ``(key, max_parallelism) -> key group``: compiled for str, int and tuple keys where the build has it
_assign_key_group = assign_to_key_group if NATIVE is None else partial(NATIVE.assign_to_key_group, stable_hash)
_MAX_KEY_CACHE = 1 << 20  # cached key -> key group entries before the cache is reset

Snapshot = Dict[int, Dict[str, Dict[Any, Any]]]


def key_group_range_for_subtask(max_parallelism: int, parallelism: int, subtask_index: int) -> Tuple[int, int]:
    """Flink's ``computeKeyGroupRangeForOperatorIndex``: inclusive ``(start, end)``."""
    if not 0 < parallelism <= max_parallelism:
        raise ValueError(f"parallelism {parallelism} must be in 1..max parallelism {max_parallelism}")
    start = (subtask_index * max_parallelism + parallelism - 1) // parallelism
    end = ((subtask_index + 1) * max_parallelism - 1) // parallelism
    return start, end


def _normalize_range(key_group_range: Any) -> Tuple[int, int]:
    if isinstance(key_group_range, range):
        return key_group_range.start, key_group_range.stop - 1
    if isinstance(key_group_range, tuple) and len(key_group_range) == 2:
        return int(key_group_range[0]), int(key_group_range[1])
    for start_attr, end_attr in (("start_key_group", "end_key_group"), ("start", "end")):
        if hasattr(key_group_range, start_attr) and hasattr(key_group_range, end_attr):
            return int(getattr(key_group_range, start_attr)), int(getattr(key_group_range, end_attr))
    raise TypeError(f"not a key group range: {key_group_range!r} (use (start, end) inclusive)")


def _copy_list(v: Any) -> Any:
    return list(v)


def _copy_map(v: Any) -> Any:
    return dict(v)


_COPY = {"list": _copy_list, "map": _copy_map, "aggregating": copy.deepcopy}
_COPY.update(
    {
        prefix + kind: _COPY.get(kind, _same)
        for prefix in (NAMESPACED, TTL)
        for kind in ("value", "list", "map", "reducing", "aggregating")
    }
)


def _is_namespaced(kind: Optional[str]) -> bool:
    return kind is not None and kind.startswith(NAMESPACED)


def _namespace_first(key_first: Dict[Any, Dict[Any, Any]]) -> Dict[Any, Dict[Any, Any]]:
    """``{key: {ns: v}}`` -> ``{ns: {key: v}}``."""
    result: Dict[Any, Dict[Any, Any]] = {}
    for key, namespaces in key_first.items():
        for ns, value in namespaces.items():
            per_ns = result.get(ns)
            if per_ns is None:
                per_ns = result[ns] = {}
            per_ns[key] = value
    return result


class _HeapState:
    __slots__ = ("_backend", "_values", "name")

    def __init__(self, backend: "HeapKeyedStateBackend", table: StateTable) -> None:
        self._backend = backend
        self._values = table.values
        self.name = table.name

    def _map(self) -> Dict[Any, Any]:
        if self._backend.current_key is None:
            raise RuntimeError(f"state {self.name!r} accessed with no current key set")
        return self._values

    def clear(self) -> None:
        self._map().pop(self._backend.current_key, None)


class HeapValueState(_HeapState, ValueState):
    __slots__ = ()

    def value(self) -> Any:
        key = self._backend.current_key
        if key is None:
            self._map()  # raises, naming the state
        return self._values.get(key)

    def update(self, value: Any) -> None:
        key = self._backend.current_key
        if value is None or key is None:  # Flink: update(null) clears (no key: _map raises)
            self.clear()
        else:
            self._values[key] = value


class HeapListState(_HeapState, ListState):
    __slots__ = ()

    def get(self) -> List[Any]:
        return self._map().get(self._backend.current_key) or []

    def add(self, value: Any) -> None:
        if value is None:
            raise ValueError("You cannot add null to a ListState.")
        m = self._map()
        key = self._backend.current_key
        lst = m.get(key)
        if lst is None:
            m[key] = [value]
        else:
            lst.append(value)

    def add_all(self, values: Iterable[Any]) -> None:
        values = list(values)
        if any(v is None for v in values):
            raise ValueError("You cannot add null to a ListState.")
        if values:
            m = self._map()
            m.setdefault(self._backend.current_key, []).extend(values)

    def update(self, values: Iterable[Any]) -> None:
        values = list(values)
        if any(v is None for v in values):
            raise ValueError("You cannot add null to a ListState.")
        if values:
            self._map()[self._backend.current_key] = values
        else:
            self.clear()


class _MapStateReads:
    """The read side of a MapState over ``self._user_map()`` (the current key's, or the
    current key and namespace's, map): shared by the heap and the namespaced MapState."""

    __slots__ = ()

    def contains(self, key: Any) -> bool:
        return key in self._user_map()

    def keys(self) -> Iterator[Any]:
        return iter(list(self._user_map().keys()))

    def values(self) -> Iterator[Any]:
        return iter(list(self._user_map().values()))

    def items(self) -> Iterator[Tuple[Any, Any]]:
        return iter(list(self._user_map().items()))

    def is_empty(self) -> bool:
        return not self._user_map()


class HeapMapState(_MapStateReads, _HeapState, MapState):
    __slots__ = ()

    def _user_map(self) -> Dict[Any, Any]:
        return self._map().get(self._backend.current_key) or {}

    def get(self, key: Any) -> Any:
        return self._user_map().get(key)

    def put(self, key: Any, value: Any) -> None:
        self._map().setdefault(self._backend.current_key, {})[key] = value

    def put_all(self, mapping: Any) -> None:
        mapping = dict(mapping)
        if mapping:
            self._map().setdefault(self._backend.current_key, {}).update(mapping)

    def remove(self, key: Any) -> None:
        m = self._map()
        current = self._backend.current_key
        user_map = m.get(current)
        if user_map is not None:
            user_map.pop(key, None)
            if not user_map:  # Flink's HeapMapState drops the empty map
                del m[current]


class HeapReducingState(_HeapState, ReducingState):
    __slots__ = ("_reduce",)

    def __init__(self, backend: "HeapKeyedStateBackend", table: StateTable, reduce_function: Any) -> None:
        super().__init__(backend, table)
        self._reduce: Callable[[Any, Any], Any] = getattr(reduce_function, "reduce", None) or reduce_function

    def get(self) -> Any:
        return self._map().get(self._backend.current_key)

    def add(self, value: Any) -> None:
        m = self._map()
        key = self._backend.current_key
        old = m.get(key)
        m[key] = value if old is None else self._reduce(old, value)


class HeapAggregatingState(_HeapState, AggregatingState):
    """``AggregatingState``: an accumulator per key, ``get()`` is ``get_result(acc)``."""

    __slots__ = ("_function",)

    def __init__(self, backend: "HeapKeyedStateBackend", table: StateTable, aggregate_function: Any) -> None:
        super().__init__(backend, table)
        self._function = aggregate_function

    def get(self) -> Any:
        acc = self._map().get(self._backend.current_key)
        return None if acc is None else self._function.get_result(acc)

    def add(self, value: Any) -> None:
        m = self._map()
        key = self._backend.current_key
        acc = m.get(key)
        if acc is None:
            acc = self._function.create_accumulator()
        m[key] = self._function.add(value, acc)


_STATE_CLASSES = {"value": HeapValueState, "list": HeapListState, "map": HeapMapState}


# -- namespaced states ------------------------------------------------------------------------------
class NamespacedState:
    """Base of descriptor states under a namespace: the table's ``namespace -> {key -> value}``."""

    __slots__ = ("_backend", "_table", "name", "namespace")

    def __init__(self, backend: "HeapKeyedStateBackend", table: StateTable) -> None:
        self._backend = backend
        self._table = table
        self.name = table.name
        self.namespace: Any = None

    def set_current_namespace(self, namespace: Any) -> None:
        self.namespace = namespace

    def _key(self) -> Any:
        key = self._backend.current_key
        if key is None:
            raise RuntimeError(f"state {self.name!r} accessed with no current key set")
        return key

    def _get(self, promote: bool = False) -> Any:
        """The value under the current key and namespace; with ``promote`` one that may be
        changed in place (copy-on-write)."""
        return self._table.ns_lookup(self.namespace, self._key(), None, promote)

    def _put(self, value: Any) -> None:
        key = self._key()
        table = self._table
        pane = table.live.get(self.namespace)
        if pane is None:
            self._backend.key_group_of(key)  # validates the key
            pane = table.live_pane(self.namespace)
        pane[key] = value

    def _pop(self, namespace: Any) -> Any:
        return self._table.ns_remove(namespace, self._key(), None)

    def clear(self) -> None:
        self._pop(self.namespace)

    def _merge(self, a: Any, b: Any) -> Any:
        raise TypeError(f"state {self.name!r} cannot merge namespaces")

    def merge_namespaces(self, target: Any, sources: Iterable[Any]) -> None:
        """Move the values of ``sources`` into ``target`` (Flink's ``mergeNamespaces``)."""
        merged = None
        for source in sources:
            value = self._pop(source)
            if value is not None:
                merged = value if merged is None else self._merge(merged, value)
        if merged is not None:
            saved = self.namespace
            self.namespace = target
            try:
                current = self._get()
                self._put(merged if current is None else self._merge(current, merged))
            finally:
                self.namespace = saved


class NamespacedValueState(NamespacedState, ValueState):
    __slots__ = ()

    def value(self) -> Any:
        return self._get()

    def update(self, value: Any) -> None:
        if value is None:
            self.clear()
        else:
            self._put(value)


class NamespacedListState(NamespacedState, ListState):
    __slots__ = ()

    def get(self) -> List[Any]:
        return self._get() or []

    def add(self, value: Any) -> None:
        if value is None:
            raise ValueError("You cannot add null to a ListState.")
        current = self._get(True)
        if current is None:
            self._put([value])
        else:
            current.append(value)

    def add_all(self, values: Iterable[Any]) -> None:
        values = list(values)
        if any(v is None for v in values):
            raise ValueError("You cannot add null to a ListState.")
        if values:
            current = self._get(True)
            if current is None:
                self._put(values)
            else:
                current.extend(values)

    def update(self, values: Iterable[Any]) -> None:
        values = list(values)
        if any(v is None for v in values):
            raise ValueError("You cannot add null to a ListState.")
        if values:
            self._put(values)
        else:
            self.clear()

    def _merge(self, a: Any, b: Any) -> Any:
        return a + b


class NamespacedMapState(_MapStateReads, NamespacedState, MapState):
    __slots__ = ()

    def _user_map(self) -> Dict[Any, Any]:
        return self._get() or {}

    def get(self, key: Any) -> Any:
        return self._user_map().get(key)

    def put(self, key: Any, value: Any) -> None:
        current = self._get(True)
        if current is None:
            self._put({key: value})
        else:
            current[key] = value

    def put_all(self, mapping: Any) -> None:
        mapping = dict(mapping)
        if mapping:
            current = self._get(True)
            if current is None:
                self._put(mapping)
            else:
                current.update(mapping)

    def remove(self, key: Any) -> None:
        current = self._get(True)
        if current is not None:
            current.pop(key, None)
            if not current:
                self.clear()


class NamespacedReducingState(NamespacedState, ReducingState):
    __slots__ = ("_reduce",)

    def __init__(self, backend: "HeapKeyedStateBackend", table: StateTable, reduce_function: Any) -> None:
        super().__init__(backend, table)
        self._reduce: Callable[[Any, Any], Any] = getattr(reduce_function, "reduce", None) or reduce_function

    def get(self) -> Any:
        return self._get()

    def add(self, value: Any) -> None:
        current = self._get()
        self._put(value if current is None else self._reduce(current, value))

    def _merge(self, a: Any, b: Any) -> Any:
        return self._reduce(a, b)


class NamespacedAggregatingState(NamespacedState, AggregatingState):
    __slots__ = ("_function",)

    def __init__(self, backend: "HeapKeyedStateBackend", table: StateTable, aggregate_function: Any) -> None:
        super().__init__(backend, table)
        self._function = aggregate_function

    def get(self) -> Any:
        acc = self._get()
        return None if acc is None else self._function.get_result(acc)

    def add(self, value: Any) -> None:
        acc = self._get(True)
        if acc is None:
            acc = self._function.create_accumulator()
        self._put(self._function.add(value, acc))

    def _merge(self, a: Any, b: Any) -> Any:
        return self._function.merge(a, b)


_NAMESPACED_CLASSES = {"value": NamespacedValueState, "list": NamespacedListState, "map": NamespacedMapState}


class KeyedStateSnapshot(LazySnapshot):
    """A heap backend's keyed state at a checkpoint (see :meth:`HeapKeyedStateBackend.snapshot`):
    a read-only ``{key_group: {state name: {key: value}}}`` mapping over the layers frozen at the
    barrier, grouped by key group when first read (:class:`LazySnapshot`)."""


class HeapKeyedStateBackend:
    """Keyed state of one operator subtask, for the key groups ``key_group_range``.

    ``key_group_range``: ``(start, end)`` inclusive, a ``range``, or an object with
    ``start_key_group``/``end_key_group`` (or ``start``/``end``) attributes.
    """

    def __init__(self, key_group_range: Any, max_parallelism: int) -> None:
        self._assign = _assign_key_group
        self.start, self.end = _normalize_range(key_group_range)
        if not 0 <= self.start <= self.end < max_parallelism:
            raise ValueError(f"key group range [{self.start}, {self.end}] not within max parallelism {max_parallelism}")
        self.max_parallelism = max_parallelism
        self.current_key: Any = None
        self.current_index: int = 0  # current key group - start
        self._kg_cache: Dict[Any, int] = {}
        self._key_cache_limit = _MAX_KEY_CACHE
        self._tables: Dict[str, StateTable] = {}
        self._states: Dict[str, State] = {}
        self._ns_states: Dict[str, NamespacedState] = {}
        #: the clock of TTL states, epoch ms (Flink's TtlTimeProvider; tests may replace it)
        self.ttl_time_provider: Callable[[], int] = wall_clock_millis
        self._per_record_cleanups: List[Callable[[], None]] = []
        self._new_state_error: Optional[str] = None  # set: registering a new state fails with it
        self.snapshots = SnapshotRegistry()  # snapshots not read yet (their layers stay apart)
        #: incremental checkpoints (``execution.checkpointing.incremental``): set before the
        #: first snapshot by :meth:`enable_incremental_checkpoints`
        self.incremental = False
        self.uid = uuid.uuid4().hex[:8]
        self._chain: Optional[list] = None  # the files of the last completed incremental checkpoint
        self._pending_chains: Dict[int, list] = {}  # checkpoint id -> its files, until it completes
        self._checkpoint_seqs: Dict[int, int] = {}  # checkpoint id -> its snapshot's number

    @classmethod
    def for_subtask(cls, max_parallelism: int, parallelism: int, subtask_index: int) -> "HeapKeyedStateBackend":
        return cls(key_group_range_for_subtask(max_parallelism, parallelism, subtask_index), max_parallelism)

    # -- keys -----------------------------------------------------------------------
    def key_group_of(self, key: Any) -> int:
        """Key group of ``key``; raises for ``None`` and for keys outside this range."""
        kg = self._kg_cache.get(key)
        if kg is None:
            if key is None:
                raise ValueError(NULL_KEY_MESSAGE)
            kg = self._assign(key, self.max_parallelism)
            if not self.start <= kg <= self.end:
                raise ValueError(
                    f"Key group {kg} is not in KeyGroupRange{{startKeyGroup={self.start}, "
                    f"endKeyGroup={self.end}}} (key {record_repr(key)}). This is most likely caused by a "
                    "non-deterministic key or records that were not partitioned by key."
                )
            if len(self._kg_cache) >= self._key_cache_limit:
                self._kg_cache.clear()
            self._kg_cache[key] = kg
        return kg

    def set_current_key(self, key: Any) -> None:
        kg = self._kg_cache.get(key)
        if kg is None:
            kg = self.key_group_of(key)
        self.current_key = key
        self.current_index = kg - self.start

    def get_current_key(self) -> Any:
        return self.current_key

    def refuse_new_states(self, message: str) -> None:
        """From now on registering a state fails with ``message`` (``{name!r}``: the state's
        name): its operator decided not to set the current key per record."""
        self._new_state_error = message

    def add_per_record_cleanup(self, cleanup: Callable[[], None]) -> None:
        """Run ``cleanup`` whenever the current key is set (TTL's ``run_cleanup_for_every_record``);
        backends without one keep the plain ``set_current_key``."""
        self._per_record_cleanups.append(cleanup)
        if len(self._per_record_cleanups) == 1:
            plain = self.set_current_key
            cleanups = self._per_record_cleanups

            def set_current_key_and_clean_up(key: Any) -> None:
                plain(key)
                for run in cleanups:
                    run()

            self.set_current_key = set_current_key_and_clean_up  # type: ignore[method-assign]

    def get_current_key_group(self) -> Optional[int]:
        return None if self.current_key is None else self.start + self.current_index

    # -- states ---------------------------------------------------------------------
    def get_table(self, name: str, kind: str = "value") -> StateTable:
        """The raw table of a state (created on first use), for operators' fast paths."""
        table = self._tables.get(name)
        if table is None:
            table = self._tables[name] = StateTable(name, kind, _COPY.get(kind, _same))
        elif table.kind is None:  # restored before first registration
            restored = dict(table.flat_items())
            table.set_kind(kind, _COPY.get(kind, _same))
            if _is_namespaced(kind):  # restored key first: namespace first from now on
                restored = _namespace_first(restored)
            table.reset()
            table.live.update(restored)
        elif table.kind != kind:
            raise ValueError(f"state {name!r} is a {_describe(table.kind)} state, not a {_describe(kind)} state")
        return table

    def get_or_create_state(self, descriptor: Any, expected_kind: Optional[str] = None) -> State:
        kind = descriptor.kind
        if expected_kind is not None and kind != expected_kind:
            raise ValueError(f"descriptor {descriptor!r} is a {kind} state descriptor, expected {expected_kind}")
        name = descriptor.name
        ttl = ttl_config_of(descriptor)
        table_kind = kind if ttl is None else TTL + kind
        state = self._states.get(name)
        if state is not None:
            if self._tables[name].kind != table_kind:
                raise ValueError(
                    f"state {name!r} is a {_describe(self._tables[name].kind)} state, "
                    f"not a {_describe(table_kind)} state"
                )
            return state
        if self._new_state_error is not None:
            raise RuntimeError(self._new_state_error.format(name=name))
        if ttl is not None:
            state = create_ttl_state(self, descriptor, ttl)
            self._states[name] = state
            return state
        table = self.get_table(name, kind)
        if kind == "reducing":
            state = HeapReducingState(self, table, descriptor.reduce_function)
        elif kind == "aggregating":
            state = HeapAggregatingState(self, table, descriptor.aggregate_function)
        else:
            cls = _STATE_CLASSES.get(kind)
            if cls is None:
                raise ValueError(f"unsupported state kind {kind!r}")
            state = cls(self, table)
        self._states[name] = state
        return state

    def get_namespaced_table(self, name: str, kind: str) -> StateTable:
        """The raw table ``key -> {namespace -> value}`` of a namespaced state."""
        return self.get_table(name, NAMESPACED + kind)

    def get_or_create_namespaced_state(self, descriptor: Any) -> NamespacedState:
        """A descriptor state under a namespace (set it with ``set_current_namespace``);
        one object per state name, shared by its callers."""
        name = descriptor.name
        kind = descriptor.kind
        state = self._ns_states.get(name)
        if state is not None:
            if self._tables[name].kind != NAMESPACED + kind:
                raise ValueError(f"state {name!r} is a {self._tables[name].kind} state, not a namespaced {kind} state")
            return state
        table = self.get_namespaced_table(name, kind)
        if kind == "reducing":
            state = NamespacedReducingState(self, table, descriptor.reduce_function)
        elif kind == "aggregating":
            state = NamespacedAggregatingState(self, table, descriptor.aggregate_function)
        else:
            cls = _NAMESPACED_CLASSES.get(kind)
            if cls is None:
                raise ValueError(f"unsupported state kind {kind!r}")
            state = cls(self, table)
        self._ns_states[name] = state
        return state

    def state_names(self) -> List[str]:
        return list(self._tables)

    def descriptor_state_names(self) -> List[str]:
        """Names of the states user functions obtained through descriptors (not the
        operators' own tables)."""
        return list(self._states) + list(self._ns_states)

    def keys(self, state_name: str) -> Iterator[Any]:
        """All keys holding a value in ``state_name``, key group by key group."""
        table = self._tables.get(state_name)
        if table is None:
            return iter(())
        if _is_namespaced(table.kind):
            keys = {k for _, k, _ in table.namespaced_items()}
        else:
            keys = {k for k, _ in table.flat_items()}
        return iter(sorted(keys, key=self.key_group_of))

    # -- snapshot / restore -------------------------------------------------------------
    def snapshot(self, checkpoint_id: Optional[int] = None) -> "KeyedStateSnapshot":
        """The keyed state as ``{key_group: {state name: {key: value}}}`` for every non-empty key
        group (the value of a namespaced state is ``{namespace: value}``), taken in Flink's two
        phases: here, between two records, each table's ``live`` layer is frozen (O(1) per state,
        :meth:`StateTable.freeze`: copy-on-write from now on); grouping the frozen layers by
        key group waits for the first read of the :class:`KeyedStateSnapshot` -- its pickling
        on the TaskExecutor's checkpoint writer thread, while the task goes on."""
        with without_cyclic_gc():
            return self._snapshot(checkpoint_id)

    def _snapshot(self, checkpoint_id: Optional[int]) -> "KeyedStateSnapshot":
        registry = self.snapshots
        registry.compact(self._tables.values())
        seq = registry.begin()
        parts = [
            (name, _is_namespaced(table.kind), table.freeze(seq), table.snapshot_filter)
            for name, table in self._tables.items()
        ]
        now = self.ttl_time_provider()
        cached, assign, max_p = self._kg_cache.get, self._assign, self.max_parallelism

        def key_group_of(key: Any) -> int:  # (the snapshot's thread: reads the cache only)
            kg = cached(key)
            return assign(key, max_p) if kg is None else kg

        def build_full() -> Snapshot:
            return group_by_key_group(parts, now, key_group_of)

        if not self.incremental:
            return KeyedStateSnapshot(registry, seq, build_full, lambda: list(self._tables.values()))
        if checkpoint_id is not None:
            self._checkpoint_seqs[checkpoint_id] = seq
        if registry.overflowed:  # layers of unwritten changes were merged: start a new chain
            registry.overflowed = False
            self._chain = None
        written = registry.merge_limit or 0  # layers up to this one are in the chain's files
        changes = [
            (
                name,
                namespaced,
                tuple(layer for layer in layers if self._tables[name].frozen_at.get(id(layer), 0) > written),
                live,
            )
            for name, namespaced, layers, live in parts
        ]
        return HeapIncrementalSnapshot(
            self,
            seq,
            build_full,
            lambda: group_by_key_group(changes, now, key_group_of, keep_removed=True),
            [name for name, namespaced, _, _ in parts if namespaced],
            self._chain,
        )

    def enable_incremental_checkpoints(self) -> None:
        """Checkpoints write what changed since the last completed one (``heap_incremental``):
        layers stay apart until a checkpoint that wrote them completes."""
        self.incremental = True
        self.snapshots.merge_limit = 0

    def _materialized(self, checkpoint_id: int, files: list) -> None:
        """Checkpoint ``checkpoint_id`` wrote its file: ``files`` is its chain (writer thread)."""
        self._pending_chains[checkpoint_id] = files

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        """An incremental checkpoint completed: the next one refers to its files, and the layers
        it wrote may be merged."""
        if not self.incremental:
            return
        files = self._pending_chains.pop(checkpoint_id, None)
        seq = self._checkpoint_seqs.get(checkpoint_id)
        if files is not None and seq is not None:
            self._chain = files
            self.snapshots.merge_limit = max(self.snapshots.merge_limit or 0, seq)
        for older in [c for c in self._checkpoint_seqs if c <= checkpoint_id]:
            self._checkpoint_seqs.pop(older, None)
            self._pending_chains.pop(older, None)

    def restore(self, snapshot: Snapshot) -> None:
        """Replace all state by the key groups of ``snapshot`` that belong to this range
        (snapshots of several old subtasks may be merged before: rescaling)."""
        for table in self._tables.values():
            table.reset()
        self._chain = None  # the next incremental checkpoint is a full one
        self._pending_chains.clear()
        self._checkpoint_seqs.clear()
        if self.incremental:
            self.snapshots.merge_limit = self.snapshots.seq
        for kg, states in snapshot.items():
            if not self.start <= kg <= self.end:
                continue
            for name, entries in states.items():
                table = self._tables.get(name)
                if table is None:
                    table = self._tables[name] = StateTable(name, None)
                copy = table.copy_value
                live = table.live
                if _is_namespaced(table.kind):
                    for k, namespaces in entries.items():
                        for ns, v in namespaces.items():
                            pane = live.get(ns)
                            if pane is None:
                                pane = live[ns] = {}
                            pane[k] = copy(v)
                else:  # (a namespaced table not registered yet stays key first until it is)
                    live.update({k: copy(v) for k, v in entries.items()} if copy is not _same else entries)
                for k in entries:
                    self._kg_cache[k] = kg

    # -- figures ---------------------------------------------------------------------------
    def num_state_entries(self) -> int:
        """Entries over all states (a namespaced state's: its (key, namespace) pairs); between a
        checkpoint and the merge of its layers an upper bound."""
        return sum(table.num_entries() for table in list(self._tables.values()))

    def state_size_bytes(self, sample: int = 64) -> int:
        """Estimated bytes of the states' Python objects: a sample of each table's entries
        measured (``sys.getsizeof`` of key and value plus a dict slot) times its entries."""
        total = 0
        for table in list(self._tables.values()):
            try:  # (a metrics thread: the task may change the live layer meanwhile)
                if _is_namespaced(table.kind):
                    entries = [(k, v) for _, k, v in itertools.islice(namespaced_items(table.layers()), sample)]
                else:
                    entries = list(itertools.islice(flat_items(table.layers()), sample))
            except RuntimeError:
                continue
            count = table.num_entries()
            if entries:
                measured = sum(sys.getsizeof(k) + _deep_size(v) + 3 * 8 for k, v in entries)
                total += measured * count // len(entries)
        return total

    def dispose(self) -> None:
        self._tables.clear()
        self._states.clear()
        self._ns_states.clear()
        self._kg_cache.clear()
        self.current_key = None


def _deep_size(value: Any, sample: int = 64) -> int:
    """``sys.getsizeof`` of ``value`` and, one level down, of a container's elements (of a
    ``sample`` of them, scaled to all: a list state of a million entries is not walked)."""
    size = sys.getsizeof(value)
    if isinstance(value, (list, tuple, set, dict)):
        n = len(value)
        if isinstance(value, dict):
            measured = sum(sys.getsizeof(k) + sys.getsizeof(v) for k, v in itertools.islice(value.items(), sample))
        else:
            measured = sum(map(sys.getsizeof, itertools.islice(value, sample)))
        size += measured if n <= sample else measured * n // sample
    return size


def _describe(kind: Optional[str]) -> str:
    """A table kind in words: "ttl:map" -> "map (with TTL)"."""
    if kind is not None and kind.startswith(TTL):
        return f"{kind[len(TTL) :]} (with TTL)"
    if kind is not None and kind.startswith(NAMESPACED):
        return f"namespaced {kind[len(NAMESPACED) :]}"
    return str(kind)


__all__ = [
    "HeapKeyedStateBackend",
    "KeyedStateSnapshot",
    "StateTable",
    "HeapValueState",
    "HeapListState",
    "HeapMapState",
    "HeapReducingState",
    "HeapAggregatingState",
    "NamespacedState",
    "NamespacedValueState",
    "NamespacedListState",
    "NamespacedMapState",
    "NamespacedReducingState",
    "NamespacedAggregatingState",
    "NAMESPACED",
    "key_group_range_for_subtask",
    "NULL_KEY_MESSAGE",
    "keyed_backend_for",
    "KEYED_BACKEND_MODULES",
    "KEYED_STATE_ENTRIES",
    "KEYED_STATE_SIZE",
]


def keyed_backend_for(runtime_context: Any) -> HeapKeyedStateBackend:
    """The runtime context's keyed backend; creates (and installs) one of the job's
    ``state.backend.type`` for the subtask's key group range when the task did not provide
    it: the heap backend here, others from the module :data:`KEYED_BACKEND_MODULES` names
    (Flink's ``StateBackendLoader`` loads a backend's factory by name likewise)."""
    backend = runtime_context.keyed_state_backend
    if backend is None:
        rc = runtime_context
        backend_type = read_option(getattr(rc, "job_parameters", None) or {}, StateBackendOptions.STATE_BACKEND)
        module = KEYED_BACKEND_MODULES.get(backend_type)
        if module is None:
            backend = HeapKeyedStateBackend.for_subtask(rc.max_parallelism, rc.parallelism, rc.subtask_index)
            if read_option(getattr(rc, "job_parameters", None) or {}, CheckpointingOptions.INCREMENTAL_CHECKPOINTS):
                backend.enable_incremental_checkpoints()
        else:
            backend = importlib.import_module(module).create_keyed_state_backend(rc)
        runtime_context.keyed_state_backend = backend
        group = getattr(rc, "metrics_group", None)
        if group is not None:  # read from other threads: the figures tolerate a table changing meanwhile
            group.gauge(KEYED_STATE_ENTRIES, _tolerant(backend.num_state_entries))
            group.gauge(KEYED_STATE_SIZE, _tolerant(backend.state_size_bytes))
    return backend


#: the operator metrics of its keyed state: entries, and bytes (heap: estimated from a sample;
#: RocksDB: SST files plus memtables)
KEYED_STATE_ENTRIES = "keyedStateEntries"
KEYED_STATE_SIZE = "keyedStateSizeBytes"


def _tolerant(read: Callable[[], int]) -> Callable[[], Optional[int]]:
    """``read`` from a thread other than the task's: None when the state changed under it."""

    def gauge() -> Optional[int]:
        try:
            return read()
        except (RuntimeError, AttributeError, ValueError):
            return None

    return gauge


#: ``state.backend.type`` -> the module whose ``create_keyed_state_backend(runtime_context)``
#: builds that backend (``hashmap``: this module)
KEYED_BACKEND_MODULES = {"rocksdb": "raylink.state.rocksdb_keyed_state_backend"}
