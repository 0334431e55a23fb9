"""One-input operators: Flink's ``StreamMap``, ``StreamFlatMap``, ``StreamFilter``.

Per record: one call of the resolved user callable and one call of the output.
Per batch: ``map()`` / ``filter()`` / ``chain.from_iterable`` over the list and a
single ``collect_batch`` (empty results are not emitted).

On a ``KeyedStream`` whose function may use keyed state (it has an ``open`` of its
own: ``runtime_context.may_use_keyed_state``) the factory builds the ``Keyed*``
variant instead, which sets the record's key on the keyed state backend before each
call (PyFlink runs these functions in a keyed operator) — unless, after ``open``, the
function turns out to hold no keyed state and no runtime context
(``runtime_context.holds_keyed_state``). Other functions of a keyed stream keep the
plain operators and pay nothing for it. The keyed variants' batch loops run compiled when
the compiled per-record path is built (``shuffle.hotpath``); ``keyed_*_batch_pure`` here are
their pure-Python twins. Single-threaded (the task thread), like every operator.
"""

from __future__ import annotations

from functools import partial
from itertools import chain, compress
from typing import Any, List

from raylink.core.field_selectors import field_comparison, field_getter
from raylink.operators.base import AbstractUdfStreamOperator, resolve_key_selector
from raylink.operators.runtime_context import holds_keyed_state
from raylink.shuffle.hotpath import NATIVE
from raylink.state.state_backend import keyed_backend_for

_from_iterable = chain.from_iterable


def _as_list(values: Any) -> List[Any]:
    return values if type(values) is list else list(values)


def keyed_map_batch_pure(values: List[Any], key_of: Any, set_key: Any, fn: Any) -> List[Any]:
    """``[fn(v) for v in values]``, the backend's current key set to ``key_of(v)`` before each."""
    out: List[Any] = []
    append = out.append
    for value in values:
        set_key(key_of(value))
        append(fn(value))
    return out


def keyed_flat_map_batch_pure(values: List[Any], key_of: Any, set_key: Any, fn: Any) -> List[Any]:
    """Every result of ``fn(v)`` in order, each iterable consumed before the next key is set."""
    out: List[Any] = []
    extend = out.extend
    for value in values:
        set_key(key_of(value))
        extend(fn(value))
    return out


def keyed_filter_batch_pure(values: List[Any], key_of: Any, set_key: Any, fn: Any) -> List[Any]:
    """The values whose ``fn(v)`` is truthy, the current key set to ``key_of(v)`` before each."""
    out: List[Any] = []
    append = out.append
    for value in values:
        set_key(key_of(value))
        if fn(value):
            append(value)
    return out


if NATIVE is None:
    keyed_map_batch, keyed_flat_map_batch, keyed_filter_batch = (
        keyed_map_batch_pure,
        keyed_flat_map_batch_pure,
        keyed_filter_batch_pure,
    )
else:
    keyed_map_batch, keyed_flat_map_batch, keyed_filter_batch = (
        NATIVE.keyed_map_batch,
        NATIVE.keyed_flat_map_batch,
        NATIVE.keyed_filter_batch,
    )


class StreamMap(AbstractUdfStreamOperator):
    """``MapFunction.map`` or ``callable(value) -> value``; a function that only reads fields
    (``lambda e: (e[0], e[2])``) runs as the ``operator.itemgetter`` doing that (:func:`field_getter`)."""

    def open(self) -> None:
        self._map = field_getter(self._resolve(self.function, "map"))
        self._open_functions()

    def process_element(self, value: Any) -> None:
        self._collect(self._map(value))

    def process_batch(self, values: List[Any]) -> None:
        if values:
            self._collect_batch(list(map(self._map, values)))

    def process_timestamped_batch(self, values: List[Any], timestamps: List[Any]) -> None:
        """Records with a timestamp each (a chained timestamp assigner's or window's run): mapped
        as one batch, each result keeping its record's timestamp (no per-record frames)."""
        if values:
            self._collect_timestamped(list(map(self._map, values)), timestamps)


class StreamFlatMap(AbstractUdfStreamOperator):
    """``FlatMapFunction.flat_map`` or ``callable(value) -> iterable``."""

    def open(self) -> None:
        self._flat_map = self._resolve(self.function, "flat_map")
        self._open_functions()

    def process_element(self, value: Any) -> None:
        collect = self._collect
        for out in self._flat_map(value):
            collect(out)

    def process_batch(self, values: List[Any]) -> None:
        out = list(_from_iterable(map(self._flat_map, values)))
        if out:
            self._collect_batch(out)

    def process_timestamped_batch(self, values: List[Any], timestamps: List[Any]) -> None:
        """Records with a timestamp each: every result keeps its record's timestamp, all of
        them one batch (no per-record frames)."""
        out: List[Any] = []
        stamps: List[Any] = []
        extend, flat_map = out.extend, self._flat_map
        for value, timestamp in zip(values, timestamps):
            before = len(out)
            extend(flat_map(value))
            if len(out) > before:
                stamps.extend([timestamp] * (len(out) - before))
        if out:
            self._collect_timestamped(out, stamps)


class StreamFilter(AbstractUdfStreamOperator):
    """``FilterFunction.filter`` or ``callable(value) -> bool``: keeps truthy results; one that
    compares a field with a constant runs as C over each batch (:func:`field_comparison`)."""

    def open(self) -> None:
        self._filter = self._resolve(self.function, "filter")
        # a comparison of one field (``lambda e: e[0] == BID``) runs in C over a batch
        self._compared = field_comparison(self._filter)
        self._results = self._compared or partial(map, self._filter)
        self._open_functions()

    def process_element(self, value: Any) -> None:
        if self._filter(value):
            self._collect(value)

    def process_batch(self, values: List[Any]) -> None:
        compared = self._compared
        out = list(filter(self._filter, values) if compared is None else compress(values, compared(values)))
        if out:
            self._collect_batch(out)

    def process_timestamped_batch(self, values: List[Any], timestamps: List[Any]) -> None:
        """Records with a timestamp each: the kept ones as one batch, with their timestamps."""
        keep = list(self._results(values))
        out = list(compress(values, keep))
        if out:
            self._collect_timestamped(out, list(compress(timestamps, keep)))


class _KeyedContext:
    """Keyed backend + key selector of the ``Keyed*`` variants. ``_sets_key`` is decided once,
    after the function's ``open`` (``holds_keyed_state``): a function that got no keyed state
    and kept no runtime context runs as on a stream that is not keyed."""

    name: str
    runtime_context: Any

    def __init__(self, function: Any, key_selector: Any, name: str = "", operator_id: str = "") -> None:
        super().__init__(function, name, operator_id)  # type: ignore[call-arg]
        self.key_selector = key_selector
        self._sets_key = True

    def setup(self, output: Any, runtime_context: Any) -> None:
        super().setup(output, runtime_context)  # type: ignore[misc]
        self.keyed_state_backend = keyed_backend_for(runtime_context)

    def open(self) -> None:
        if self.key_selector is None:
            raise ValueError(f"keyed operator {self.name!r} has no key selector")
        self._key_of = resolve_key_selector(self.key_selector, self.name)
        super().open()  # type: ignore[misc]
        self._sets_key = holds_keyed_state(self)


class KeyedStreamMap(_KeyedContext, StreamMap):
    """``map`` of a ``KeyedStream`` whose function may use keyed state."""

    process_timestamped_batch = None  # type: ignore[assignment]  # each record sets its key first

    def process_element(self, value: Any) -> None:
        if self._sets_key:
            self.keyed_state_backend.set_current_key(self._key_of(value))
        self._collect(self._map(value))

    def process_batch(self, values: List[Any]) -> None:
        if not self._sets_key:
            StreamMap.process_batch(self, values)
            return
        if not values:
            return
        out = keyed_map_batch(_as_list(values), self._key_of, self.keyed_state_backend.set_current_key, self._map)
        self._collect_batch(out)


class KeyedStreamFlatMap(_KeyedContext, StreamFlatMap):
    """``flat_map`` of a ``KeyedStream`` whose function may use keyed state."""

    process_timestamped_batch = None  # type: ignore[assignment]  # each record sets its key first

    def process_element(self, value: Any) -> None:
        if self._sets_key:
            self.keyed_state_backend.set_current_key(self._key_of(value))
        collect = self._collect
        for out in self._flat_map(value):
            collect(out)

    def process_batch(self, values: List[Any]) -> None:
        if not self._sets_key:
            StreamFlatMap.process_batch(self, values)
            return
        set_key = self.keyed_state_backend.set_current_key
        out = keyed_flat_map_batch(_as_list(values), self._key_of, set_key, self._flat_map)
        if out:
            self._collect_batch(out)


class KeyedStreamFilter(_KeyedContext, StreamFilter):
    """``filter`` of a ``KeyedStream`` whose function may use keyed state."""

    process_timestamped_batch = None  # type: ignore[assignment]  # each record sets its key first

    def process_element(self, value: Any) -> None:
        if self._sets_key:
            self.keyed_state_backend.set_current_key(self._key_of(value))
        if self._filter(value):
            self._collect(value)

    def process_batch(self, values: List[Any]) -> None:
        if not self._sets_key:
            StreamFilter.process_batch(self, values)
            return
        set_key = self.keyed_state_backend.set_current_key
        out = keyed_filter_batch(_as_list(values), self._key_of, set_key, self._filter)
        if out:
            self._collect_batch(out)


__all__ = [
    "StreamMap",
    "StreamFlatMap",
    "StreamFilter",
    "KeyedStreamMap",
    "KeyedStreamFlatMap",
    "KeyedStreamFilter",
    "keyed_map_batch_pure",
    "keyed_flat_map_batch_pure",
    "keyed_filter_batch_pure",
]
