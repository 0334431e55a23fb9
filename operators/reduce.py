"""Keyed rolling reduce: Flink's ``StreamGroupedReduceOperator`` (also backs the
built-in ``sum/min/max/min_by/max_by`` aggregations).

For every record: the first record of a key is stored and emitted as is;
later records are combined with ``reduce(stored, record)``, stored and the
result emitted. The per-key value lives in the keyed backend's table
``"_op_state"`` (a plain dict per key group; the dict for a key is cached), so
it is snapshotted by key group like any other keyed state.

The first record of a key is checked once (``_first_of_key``): its key (a valid
key group) and, for an aggregation, that it has the aggregated field
(``aggregation.field_check``), so later records of the key take the fast path
unchecked. A reduce function that may use keyed state itself (it has an ``open`` of
its own: ``runtime_context.may_use_keyed_state``) runs in
``StreamGroupedReduceOperatorWithKeyedState``, which also sets the backend's current
key per record while the function holds keyed state (the factory picks it; other
functions skip that step).
The batch loops (``reduce_batch_pure`` and ``sum_pairs_batch_pure``) run compiled when the
compiled per-record path is built (``shuffle.hotpath``); the functions here are their
pure-Python twins and reference.
Single-threaded (the task thread), like every operator.
"""

from __future__ import annotations

from typing import Any, List, Optional

from raylink.operators.aggregation import field_check, make_aggregator
from raylink.operators.base import AbstractUdfStreamOperator, resolve_key_selector
from raylink.operators.runtime_context import holds_keyed_state
from raylink.shuffle.hotpath import NATIVE
from raylink.state.state_backend import keyed_backend_for
from raylink.state.state_table import REMOVED

_MISSING = object()


_NO_TOMBSTONE = object()


def _keys_of(values: List[Any], key_of: Any, keys: Optional[List[Any]]) -> Any:
    """The records' keys: ``keys`` (checked against ``values``), else ``key_of`` of each, lazily."""
    if keys is None:
        return map(key_of, values)
    if len(keys) != len(values):
        raise ValueError(f"{len(values)} values but {len(keys)} keys")
    return keys


def reduce_batch_pure(
    values: List[Any],
    key_of: Any,
    state: dict,
    reduce: Any,
    on_miss: Any,
    lower: tuple = (),
    removed: Any = _NO_TOMBSTONE,
    keys: Optional[List[Any]] = None,
    emit: bool = True,
) -> Optional[List[Any]]:
    """The rolling reduce of a batch: per record, its key's stored value combined with it
    (``reduce(stored, record)``), or ``on_miss(key, record)`` for a key with no value (its
    first record); each result stored (in ``state``) and returned in order. A key ``state``
    misses is looked up in the older layers ``lower`` (newest first, copy-on-write
    snapshots); ``removed`` marks a key removed since one. ``keys``: the records' keys when
    the caller has them already (``key_of`` is then not called). ``emit`` False: nothing
    returned (None), only stored (a window's pane)."""
    out: Optional[List[Any]] = [] if emit else None
    append = out.append if emit else None
    get = state.get
    missing = _MISSING
    for value, key in zip(values, _keys_of(values, key_of, keys)):
        current = get(key, missing)
        if current is missing:
            for layer in lower:
                current = layer.get(key, missing)
                if current is not missing:
                    break
        if current is missing or current is removed:
            value = on_miss(key, value)
        else:
            value = reduce(current, value)
        state[key] = value
        if emit:
            append(value)
    return out


def sum_pairs_batch_pure(
    values: List[Any],
    key_of: Any,
    state: dict,
    on_miss: Any,
    lower: tuple = (),
    removed: Any = _NO_TOMBSTONE,
    keys: Optional[List[Any]] = None,
) -> "tuple[List[Any], int]":
    """``sum(1)`` over ``(key, count)`` pairs: ``(results, stop)``; ``stop < len(values)`` is the
    first record of a key with no value that is not an exact pair (nothing of it was stored);
    such a key stores ``on_miss(key, record)``. ``lower``, ``removed`` and ``keys`` as in
    :func:`reduce_batch_pure`."""
    out: List[Any] = []
    append = out.append
    get = state.get
    missing = _MISSING
    tuple_ = tuple
    for index, (value, key) in enumerate(zip(values, _keys_of(values, key_of, keys))):
        current = get(key, missing)
        if current is missing:
            for layer in lower:
                current = layer.get(key, missing)
                if current is not missing:
                    break
        if current is missing or current is removed:
            if type(value) is not tuple_ or len(value) != 2:
                return out, index
            value = on_miss(key, value)
        else:  # the accumulator's fields, field 1 replaced by the running sum
            value = (current[0], current[1] + value[1])
        state[key] = value
        append(value)
    return out, len(values)


if NATIVE is None:
    reduce_batch, sum_pairs_batch = reduce_batch_pure, sum_pairs_batch_pure
else:
    reduce_batch, sum_pairs_batch = NATIVE.reduce_batch, NATIVE.sum_pairs_batch


class StreamGroupedReduceOperator(AbstractUdfStreamOperator):
    """``ReduceFunction.reduce`` or ``callable(a, b)`` applied per key."""

    STATE_NAME = "_op_state"

    def __init__(self, function: Any, key_selector: Any, name: str = "", operator_id: str = "") -> None:
        super().__init__(function, name, operator_id)
        self.key_selector = key_selector

    def setup(self, output: Any, runtime_context: Any) -> None:
        super().setup(output, runtime_context)
        self.keyed_state_backend = keyed_backend_for(runtime_context)
        self._table = table = self.keyed_state_backend.get_table(self.STATE_NAME, "value")
        # the compiled loops take a dict; another backend's table (RocksDB's mapping) runs its own
        # batch loops when it has them (same contract, without the state argument), else the pure ones
        mapping = table.live
        if type(mapping) is dict:
            self._reduce_batch, self._sum_pairs_batch = reduce_batch, sum_pairs_batch
        elif hasattr(mapping, "reduce_batch") and hasattr(mapping, "sum_pairs_batch"):
            # (no older layers: such a table snapshots itself; it runs these loops over its cache)
            self._reduce_batch = lambda values, key_of, state, reduce, on_miss, lower, removed: state.reduce_batch(
                values, key_of, reduce, on_miss, reduce_batch
            )
            self._sum_pairs_batch = lambda values, key_of, state, on_miss, lower, removed: state.sum_pairs_batch(
                values, key_of, on_miss, sum_pairs_batch
            )
        else:
            self._reduce_batch, self._sum_pairs_batch = reduce_batch_pure, sum_pairs_batch_pure

    def open(self) -> None:
        if self.key_selector is None:
            raise ValueError(f"keyed operator {self.name!r} has no key selector")
        self._key_of = resolve_key_selector(self.key_selector, self.name)
        self._reduce = self._resolve(self.function, "reduce")
        self._key_group_of = self.keyed_state_backend.key_group_of
        self._open_functions()

    def _first_of_key(self, key: Any, value: Any) -> None:
        """Checks the first record of a key (its key group)."""
        self._key_group_of(key)

    def _first_record(self, key: Any, value: Any) -> Any:
        """A key's first record, checked once (the batch loops' ``on_miss``: they look in the
        older layers themselves)."""
        self._first_of_key(key, value)
        return value

    def _on_miss(self, key: Any, value: Any) -> Any:
        """What to store for a record whose key the live layer does not hold: combined with the
        value an older layer holds (copy-on-write snapshots), else the key's first record,
        checked once."""
        table = self._table
        if table.lower:
            current = table.lookup(key, _MISSING)
            if current is not _MISSING:
                return self._reduce(current, value)
        self._first_of_key(key, value)
        return value

    def process_element(self, value: Any) -> None:
        key = self._key_of(value)
        live = self._table.live
        current = live.get(key, _MISSING)
        value = self._on_miss(key, value) if current is _MISSING else self._reduce(current, value)
        live[key] = value
        self._collect(value)

    def process_batch(self, values: List[Any]) -> None:
        if type(values) is not list:
            values = list(values)
        table = self._table
        out = self._reduce_batch(
            values, self._key_of, table.live, self._reduce, self._first_record, table.lower, REMOVED
        )
        if out:
            self._collect_batch(out)


class StreamGroupedReduceOperatorWithKeyedState(StreamGroupedReduceOperator):
    """The rolling reduce for a ``ReduceFunction`` that may read or write keyed state through
    its runtime context: the record's key is the backend's current key while ``reduce`` runs
    (unless, after ``open``, the function holds no keyed state: ``holds_keyed_state``)."""

    def open(self) -> None:
        super().open()
        self._sets_key = holds_keyed_state(self)

    def process_element(self, value: Any) -> None:
        if not self._sets_key:
            StreamGroupedReduceOperator.process_element(self, value)
            return
        key = self._key_of(value)
        self.keyed_state_backend.set_current_key(key)  # validates the key as well
        table = self._table
        current = table.lookup(key, _MISSING)
        if current is not _MISSING:
            value = self._reduce(current, value)
        table.live[key] = value
        self._collect(value)

    def process_batch(self, values: List[Any]) -> None:
        if not self._sets_key:
            StreamGroupedReduceOperator.process_batch(self, values)
            return
        out: List[Any] = []
        append = out.append
        key_of = self._key_of
        set_key = self.keyed_state_backend.set_current_key  # validates the key as well
        reduce = self._reduce
        table = self._table
        state = table.live
        get = state.get if not table.lower else table.lookup
        missing = _MISSING
        for value in values:
            key = key_of(value)
            set_key(key)
            current = get(key, missing)
            if current is not missing:
                value = reduce(current, value)
            state[key] = value
            append(value)
        if out:
            self._collect_batch(out)


class StreamGroupedAggregateOperator(StreamGroupedReduceOperator):
    """Built-in aggregation ``agg`` in sum/min/max/min_by/max_by on ``field``."""

    def __init__(self, agg: str, field: Any, key_selector: Any, name: str = "", operator_id: str = "") -> None:
        super().__init__(make_aggregator(agg, field), key_selector, name, operator_id)
        self.agg = agg
        self.field = field
        # sum(1) over (key, count) pairs, the word-count shape, while every stored
        # accumulator is an exact 2-tuple (checked once per key, when it is first stored)
        self._sum_of_pairs = agg == "sum" and type(field) is int and field == 1

    def open(self) -> None:
        super().open()
        self._has_field = field_check(self.agg, self.field, self.name)

    def _first_of_key(self, key: Any, value: Any) -> None:
        self._key_group_of(key)
        self._has_field(value)  # a field beyond the record's arity fails here, not silently later

    def process_batch(self, values: List[Any]) -> None:
        if not self._sum_of_pairs:
            super().process_batch(values)
            return
        if type(values) is not list:
            values = list(values)
        table = self._table
        out, stop = self._sum_pairs_batch(values, self._key_of, table.live, self._first_record, table.lower, REMOVED)
        if out:
            self._collect_batch(out)
        if stop < len(values):  # not a pair: the generic path from here on
            self._sum_of_pairs = False
            super().process_batch(values[stop:])


__all__ = [
    "StreamGroupedReduceOperator",
    "StreamGroupedReduceOperatorWithKeyedState",
    "StreamGroupedAggregateOperator",
    "reduce_batch_pure",
    "sum_pairs_batch_pure",
]
