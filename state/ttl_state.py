"""Heap keyed state with a time-to-live: Flink's ``TtlStateFactory`` with ``TtlValueState``,
``TtlListState``, ``TtlMapState``, ``TtlReducingState``, ``TtlAggregatingState``,
``TtlIncrementalCleanup`` and the TTL snapshot transformer.

A TTL state keeps its values in a ``StateTable`` of kind ``"ttl:<kind>"`` of the
``HeapKeyedStateBackend``, each user value wrapped as ``(value, last_access_ms)``
(Flink's ``TtlValue``): the whole value for value/reducing/aggregating state, every
element of a list, every entry of a map. A value is expired once
``last_access + ttl <= now``; ``now`` is the backend's ``ttl_time_provider()``
(wall-clock ms, Flink's ``TtlTimeProvider``; tests swap in a fake clock). The
timestamps travel in checkpoints with the values, so a restored state keeps its
expiry times. Cleanup: on read; ``incremental`` (``cleanup_size`` entries of the
table checked per access of the state and, with ``run_cleanup_for_every_record``, per
record); in snapshots (``snapshot_filter`` of the table drops expired values).

Not thread-safe: like the backend, a TTL state belongs to one task thread.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

from raylink.core.state import AggregatingState, ListState, MapState, ReducingState, ValueState
from raylink.core.state_ttl import StateTtlConfig

TTL = "ttl:"  # kind prefix of the tables of TTL states
_LIST_NULL = "You cannot add null to a ListState."


def wall_clock_millis() -> int:
    """Flink's ``TtlTimeProvider.DEFAULT``: the current time in epoch milliseconds."""
    return time.time_ns() // 1_000_000


def is_ttl_kind(kind: Optional[str]) -> bool:
    return kind is not None and kind.startswith(TTL)


# -- what is still alive of a stored value at ``now`` (None: nothing) ----------------------------
def _live_single(ttl: int) -> Callable[[Any, int], Any]:
    def live(stored: Any, now: int) -> Any:
        return stored if stored[1] + ttl > now else None

    return live


def _live_list(ttl: int) -> Callable[[Any, int], Any]:
    def live(stored: Any, now: int) -> Any:
        kept = [e for e in stored if e[1] + ttl > now]
        if len(kept) == len(stored):
            return stored
        return kept or None

    return live


def _live_map(ttl: int) -> Callable[[Any, int], Any]:
    def live(stored: Any, now: int) -> Any:
        kept = {k: e for k, e in stored.items() if e[1] + ttl > now}
        if len(kept) == len(stored):
            return stored
        return kept or None

    return live


_LIVE = {
    "value": _live_single,
    "reducing": _live_single,
    "aggregating": _live_single,
    "list": _live_list,
    "map": _live_map,
}


class IncrementalCleanup:
    """Flink's ``TtlIncrementalCleanup`` for the heap: a lazy walk over the table's keys,
    ``size`` keys per call, dropping what expired (for lists and maps: the expired elements)."""

    __slots__ = ("_values", "_live", "_now", "_size", "_pending")

    def __init__(
        self, values: Dict[Any, Any], live: Callable[[Any, int], Any], now: Callable[[], int], size: int
    ) -> None:
        self._values = values
        self._live = live
        self._now = now
        self._size = size
        self._pending: Iterator[Any] = iter(())

    def run(self) -> None:
        values = self._values
        if not values:
            return
        now = self._now()
        live = self._live
        for _ in range(self._size):
            key = next(self._pending, _END)
            if key is _END:  # one round done: the next one walks the keys present now
                self._pending = iter(list(values))
                key = next(self._pending, _END)
                if key is _END:
                    return
            stored = values.get(key, _END)
            if stored is _END:
                continue
            kept = live(stored, now)
            if kept is None:
                del values[key]
            elif kept is not stored:
                values[key] = kept


_END = object()


class _TtlState:
    """Shared TTL bookkeeping; ``self._values`` maps key -> stored (wrapped) value."""

    __slots__ = ("_backend", "_values", "name", "_ttl", "_update_on_read", "_return_expired", "_cleanup")

    def __init__(self, backend: Any, table: Any, config: StateTtlConfig, cleanup: Optional[IncrementalCleanup]) -> None:
        self._backend = backend
        self._values = table.values
        self.name = table.name
        self._ttl = config.get_ttl_millis()
        self._update_on_read = config.get_update_type() is StateTtlConfig.UpdateType.OnReadAndWrite
        self._return_expired = (
            config.get_state_visibility() is StateTtlConfig.StateVisibility.ReturnExpiredIfNotCleanedUp
        )
        self._cleanup = cleanup

    def _key(self) -> Any:
        """The current key, after the incremental cleanup step of this access."""
        key = self._backend.current_key
        if key is None:
            raise RuntimeError(f"state {self.name!r} accessed with no current key set")
        if self._cleanup is not None:
            self._cleanup.run()
        return key

    def _now(self) -> int:
        return self._backend.ttl_time_provider()

    def _read_single(self) -> Tuple[Any, int]:
        """(user value or None, now) of a single-value state, with expiry and read update."""
        key = self._key()
        stored = self._values.get(key)
        now = self._now()
        if stored is None:
            return None, now
        if stored[1] + self._ttl <= now:
            del self._values[key]
            return (stored[0] if self._return_expired else None), now
        if self._update_on_read:
            self._values[key] = (stored[0], now)
        return stored[0], now

    def _unexpired_single(self) -> Tuple[Any, int]:
        """(stored user value if not expired else None, now), for read-modify-write."""
        key = self._key()
        stored = self._values.get(key)
        now = self._now()
        if stored is None or stored[1] + self._ttl <= now:
            return None, now
        return stored[0], now

    def clear(self) -> None:
        self._values.pop(self._key(), None)


class TtlValueState(_TtlState, ValueState):
    __slots__ = ()

    def value(self) -> Any:
        return self._read_single()[0]

    def update(self, value: Any) -> None:
        key = self._key()
        if value is None:
            self._values.pop(key, None)
        else:
            self._values[key] = (value, self._now())


class TtlListState(_TtlState, ListState):
    __slots__ = ()

    def get(self) -> List[Any]:
        key = self._key()
        stored = self._values.get(key)
        if not stored:
            return []
        now = self._now()
        ttl = self._ttl
        kept = [e for e in stored if e[1] + ttl > now]
        result = [e[0] for e in (stored if self._return_expired else kept)]
        if self._update_on_read and kept:
            kept = [(e[0], now) for e in kept]
            self._values[key] = kept
        elif not kept:
            del self._values[key]
        elif len(kept) != len(stored):
            self._values[key] = kept
        return result

    def add(self, value: Any) -> None:
        key = self._key()
        if value is None:
            raise ValueError(_LIST_NULL)
        entry = (value, self._now())
        stored = self._values.get(key)
        if stored is None:
            self._values[key] = [entry]
        else:
            stored.append(entry)

    def _wrapped(self, values: Any) -> List[Tuple[Any, int]]:
        values = list(values)
        if any(v is None for v in values):
            raise ValueError(_LIST_NULL)
        now = self._now()
        return [(v, now) for v in values]

    def add_all(self, values: Any) -> None:
        key = self._key()
        wrapped = self._wrapped(values)
        if wrapped:
            self._values.setdefault(key, []).extend(wrapped)

    def update(self, values: Any) -> None:
        key = self._key()
        wrapped = self._wrapped(values)
        if wrapped:
            self._values[key] = wrapped
        else:
            self._values.pop(key, None)


class TtlMapState(_TtlState, MapState):
    __slots__ = ()

    def _lookup(self, user_key: Any) -> Any:
        """The entry's stored tuple after the TTL check (None: absent or hidden)."""
        key = self._key()
        user_map = self._values.get(key)
        if user_map is None:
            return None
        stored = user_map.get(user_key)
        if stored is None:
            return None
        now = self._now()
        if stored[1] + self._ttl <= now:
            del user_map[user_key]
            if not user_map:
                del self._values[key]
            return stored if self._return_expired else None
        if self._update_on_read:
            user_map[user_key] = (stored[0], now)
        return stored

    def get(self, key: Any) -> Any:
        stored = self._lookup(key)
        return None if stored is None else stored[0]

    def contains(self, key: Any) -> bool:
        return self._lookup(key) is not None

    def put(self, key: Any, value: Any) -> None:
        current = self._key()
        self._values.setdefault(current, {})[key] = (value, self._now())

    def put_all(self, mapping: Any) -> None:
        current = self._key()
        mapping = dict(mapping)
        if mapping:
            now = self._now()
            self._values.setdefault(current, {}).update({k: (v, now) for k, v in mapping.items()})

    def remove(self, key: Any) -> None:
        current = self._key()
        user_map = self._values.get(current)
        if user_map is not None:
            user_map.pop(key, None)
            if not user_map:
                del self._values[current]

    def _entries(self) -> List[Tuple[Any, Any]]:
        """The visible entries; expired ones are removed (returned once if so configured)."""
        key = self._key()
        user_map = self._values.get(key)
        if not user_map:
            return []
        now = self._now()
        ttl = self._ttl
        result = []
        expired = []
        for user_key, stored in user_map.items():
            if stored[1] + ttl <= now:
                expired.append(user_key)
                if self._return_expired:
                    result.append((user_key, stored[0]))
            else:
                result.append((user_key, stored[0]))
        for user_key in expired:
            del user_map[user_key]
        if self._update_on_read:
            for user_key, value in result:
                if user_key in user_map:
                    user_map[user_key] = (value, now)
        if not user_map:
            del self._values[key]
        return result

    def items(self) -> Iterator[Tuple[Any, Any]]:
        return iter(self._entries())

    def keys(self) -> Iterator[Any]:
        return iter([k for k, _ in self._entries()])

    def values(self) -> Iterator[Any]:
        return iter([v for _, v in self._entries()])

    def is_empty(self) -> bool:
        return not self._entries()


class TtlReducingState(_TtlState, ReducingState):
    __slots__ = ("_reduce",)

    def __init__(
        self,
        backend: Any,
        table: Any,
        config: StateTtlConfig,
        cleanup: Optional[IncrementalCleanup],
        reduce_function: Any,
    ) -> None:
        super().__init__(backend, table, config, cleanup)
        self._reduce: Callable[[Any, Any], Any] = getattr(reduce_function, "reduce", None) or reduce_function

    def get(self) -> Any:
        return self._read_single()[0]

    def add(self, value: Any) -> None:
        current, now = self._unexpired_single()
        self._values[self._backend.current_key] = (value if current is None else self._reduce(current, value), now)


class TtlAggregatingState(_TtlState, AggregatingState):
    __slots__ = ("_function",)

    def __init__(
        self,
        backend: Any,
        table: Any,
        config: StateTtlConfig,
        cleanup: Optional[IncrementalCleanup],
        aggregate_function: Any,
    ) -> None:
        super().__init__(backend, table, config, cleanup)
        self._function = aggregate_function

    def get(self) -> Any:
        acc = self._read_single()[0]
        return None if acc is None else self._function.get_result(acc)

    def add(self, value: Any) -> None:
        acc, now = self._unexpired_single()
        if acc is None:
            acc = self._function.create_accumulator()
        self._values[self._backend.current_key] = (self._function.add(value, acc), now)


_CLASSES = {"value": TtlValueState, "list": TtlListState, "map": TtlMapState}


def ttl_config_of(descriptor: Any) -> Optional[StateTtlConfig]:
    """The descriptor's enabled TTL configuration, else ``None``."""
    config = getattr(descriptor, "_ttl_config", None)
    return config if config is not None and config.is_enabled() else None


def create_ttl_state(backend: Any, descriptor: Any, config: StateTtlConfig) -> Any:
    """Flink's ``TtlStateFactory.createStateAndWrapWithTtlIfEnabled`` for the heap backend:
    registers the ``"ttl:<kind>"`` table (with its snapshot filter and cleanup) and returns
    the state."""
    kind = descriptor.kind
    make_live = _LIVE.get(kind)
    if make_live is None:
        raise ValueError(f"unsupported state kind {kind!r}")
    table = backend.get_table(descriptor.name, TTL + kind)
    live = make_live(config.get_ttl_millis())
    strategies = config.get_cleanup_strategies()
    if strategies.in_full_snapshot() or strategies.is_cleanup_in_background():
        table.snapshot_filter = live
    incremental = strategies.get_incremental_cleanup_strategy()
    cleanup = None
    if incremental is not None and incremental.get_cleanup_size() > 0:
        cleanup = IncrementalCleanup(
            table.values, live, lambda: backend.ttl_time_provider(), incremental.get_cleanup_size()
        )
        if incremental.run_cleanup_for_every_record():
            backend.add_per_record_cleanup(cleanup.run)
    if kind == "reducing":
        return TtlReducingState(backend, table, config, cleanup, descriptor.reduce_function)
    if kind == "aggregating":
        return TtlAggregatingState(backend, table, config, cleanup, descriptor.aggregate_function)
    return _CLASSES[kind](backend, table, config, cleanup)


__all__ = [
    "TTL",
    "IncrementalCleanup",
    "TtlAggregatingState",
    "TtlListState",
    "TtlMapState",
    "TtlReducingState",
    "TtlValueState",
    "create_ttl_state",
    "is_ttl_kind",
    "ttl_config_of",
    "wall_clock_millis",
]
