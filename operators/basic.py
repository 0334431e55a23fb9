"""Stateless one-input operators: Flink's ``StreamMap``, ``StreamFlatMap``, ``StreamFilter``.

Per record: one call of the resolved user callable and one call of the output.
Per batch: ``map()`` / ``filter()`` / ``chain.from_iterable`` over the list and a
single ``collect_batch`` (empty results are not emitted).
"""

from __future__ import annotations

from itertools import chain
from typing import Any, List

from raylink.operators.base import AbstractUdfStreamOperator

_from_iterable = chain.from_iterable


class StreamMap(AbstractUdfStreamOperator):
    """``MapFunction.map`` or ``callable(value) -> value``."""

    def open(self) -> None:
        self._map = self._resolve(self.function, "map")
        self._open_functions()

    def process_element(self, value: Any) -> None:
        self._collect(self._map(value))

    def process_batch(self, values: List[Any]) -> None:
        if values:
            self._collect_batch(list(map(self._map, values)))


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


class StreamFilter(AbstractUdfStreamOperator):
    """``FilterFunction.filter`` or ``callable(value) -> bool``: keeps truthy results."""

    def open(self) -> None:
        self._filter = self._resolve(self.function, "filter")
        self._open_functions()

    def process_element(self, value: Any) -> None:
        if self._filter(value):
            self._collect(value)

    def process_batch(self, values: List[Any]) -> None:
        out = list(filter(self._filter, values))
        if out:
            self._collect_batch(out)


__all__ = ["StreamMap", "StreamFlatMap", "StreamFilter"]
