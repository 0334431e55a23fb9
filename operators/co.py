"""Two-input operators: Flink's ``CoStreamMap``, ``CoStreamFlatMap``, ``CoProcessOperator``
and ``KeyedCoProcessOperator``.

The function is either a pair ``(f1, f2)`` of callables or one object with the
two methods (``map1/map2``, ``flat_map1/flat_map2``, ``process_element1/2``).
The operator watermark is the minimum of the two inputs' watermarks; keyed
co-process fires its event-time timers when that minimum advances. On keyed
``ConnectedStreams`` a co-map / co-flat-map whose function may use keyed state
(``runtime_context.may_use_keyed_state``) runs as ``KeyedCoStreamMap`` /
``KeyedCoStreamFlatMap``, which set each record's key (from its input's key
selector) before the call while the function holds keyed state
(``runtime_context.holds_keyed_state``); the factory picks them, so other functions
pay nothing.
Single-threaded (the task thread).
"""

from __future__ import annotations

from itertools import chain
from typing import Any, List

from raylink.operators.base import EmittingMixin, TwoInputUdfStreamOperator, resolve_key_selector
from raylink.operators.process import KeyedTimersMixin, ProcessContextImpl, process_timestamped_run
from raylink.operators.runtime_context import holds_keyed_state
from raylink.operators.timer_service import NonKeyedTimerService
from raylink.state.state_backend import keyed_backend_for

_from_iterable = chain.from_iterable


class CoStreamMap(TwoInputUdfStreamOperator):
    def open(self) -> None:
        self._map1, self._map2 = self._resolve_pair("map1", "map2")
        self._open_functions()

    def process_element1(self, value: Any) -> None:
        self._collect(self._map1(value))

    def process_element2(self, value: Any) -> None:
        self._collect(self._map2(value))

    def process_batch1(self, values: List[Any]) -> None:
        if values:
            self._collect_batch(list(map(self._map1, values)))

    def process_batch2(self, values: List[Any]) -> None:
        if values:
            self._collect_batch(list(map(self._map2, values)))


class CoStreamFlatMap(TwoInputUdfStreamOperator):
    def open(self) -> None:
        self._flat_map1, self._flat_map2 = self._resolve_pair("flat_map1", "flat_map2")
        self._open_functions()

    def process_element1(self, value: Any) -> None:
        collect = self._collect
        for out in self._flat_map1(value):
            collect(out)

    def process_element2(self, value: Any) -> None:
        collect = self._collect
        for out in self._flat_map2(value):
            collect(out)

    def process_batch1(self, values: List[Any]) -> None:
        out = list(_from_iterable(map(self._flat_map1, values)))
        if out:
            self._collect_batch(out)

    def process_batch2(self, values: List[Any]) -> None:
        out = list(_from_iterable(map(self._flat_map2, values)))
        if out:
            self._collect_batch(out)


class CoProcessOperator(EmittingMixin, TwoInputUdfStreamOperator):
    """``CoProcessFunction`` (or a pair of ``callable(value, ctx)``) on non-keyed streams."""

    def open(self) -> None:
        self._process1, self._process2 = self._resolve_pair("process_element1", "process_element2")
        timer_service = NonKeyedTimerService(self, self.runtime_context.processing_time_service)
        self._ctx = ProcessContextImpl(self, timer_service)
        self._open_functions()

    def process_element1(self, value: Any) -> None:
        result = self._process1(value, self._ctx)
        if result is not None:
            self._emit(result)

    def process_element2(self, value: Any) -> None:
        result = self._process2(value, self._ctx)
        if result is not None:
            self._emit(result)

    def process_timestamped_batch1(self, values: List[Any], timestamps: List[Any]) -> None:
        process_timestamped_run(self, values, timestamps, self._process1, None)

    def process_timestamped_batch2(self, values: List[Any], timestamps: List[Any]) -> None:
        process_timestamped_run(self, values, timestamps, self._process2, None)


class KeyedCoProcessOperator(KeyedTimersMixin, CoProcessOperator):
    """``KeyedCoProcessFunction``: keyed state, ``ctx.get_current_key()``, timers."""

    def __init__(
        self, function: Any, key_selector1: Any, key_selector2: Any, name: str = "", operator_id: str = ""
    ) -> None:
        super().__init__(function, name, operator_id)
        self.key_selector1 = key_selector1
        self.key_selector2 = key_selector2

    def setup(self, output: Any, runtime_context: Any) -> None:
        super().setup(output, runtime_context)
        self._setup_keyed()

    def open(self) -> None:
        if self.key_selector1 is None or self.key_selector2 is None:
            raise ValueError(f"keyed operator {self.name!r} needs key_selector1 and key_selector2")
        self._key_of1 = resolve_key_selector(self.key_selector1, self.name)
        self._key_of2 = resolve_key_selector(self.key_selector2, self.name)
        self._process1, self._process2 = self._resolve_pair("process_element1", "process_element2")
        self._resolve_on_timer()
        self._open_functions()

    def process_element1(self, value: Any) -> None:
        self.keyed_state_backend.set_current_key(self._key_of1(value))
        result = self._process1(value, self._ctx)
        if result is not None:
            self._emit(result)

    def process_element2(self, value: Any) -> None:
        self.keyed_state_backend.set_current_key(self._key_of2(value))
        result = self._process2(value, self._ctx)
        if result is not None:
            self._emit(result)

    def process_timestamped_batch1(self, values: List[Any], timestamps: List[Any]) -> None:
        process_timestamped_run(self, values, timestamps, self._process1, self._key_of1)

    def process_timestamped_batch2(self, values: List[Any], timestamps: List[Any]) -> None:
        process_timestamped_run(self, values, timestamps, self._process2, self._key_of2)


class _KeyedTwoInput:
    """Keyed backend + the two inputs' key selectors of the keyed co-map / co-flat-map;
    ``_sets_key`` is decided after the function's ``open`` (``holds_keyed_state``)."""

    name: str

    def __init__(
        self, function: Any, key_selector1: Any, key_selector2: Any, name: str = "", operator_id: str = ""
    ) -> None:
        super().__init__(function, name, operator_id)  # type: ignore[call-arg]
        self.key_selector1 = key_selector1
        self.key_selector2 = key_selector2
        self._sets_key = True

    def setup(self, output: Any, runtime_context: Any) -> None:
        super().setup(output, runtime_context)  # type: ignore[misc]
        self.keyed_state_backend = keyed_backend_for(runtime_context)

    def open(self) -> None:
        if self.key_selector1 is None or self.key_selector2 is None:
            raise ValueError(f"keyed operator {self.name!r} needs key_selector1 and key_selector2")
        self._key_of1 = resolve_key_selector(self.key_selector1, self.name)
        self._key_of2 = resolve_key_selector(self.key_selector2, self.name)
        super().open()  # type: ignore[misc]
        self._sets_key = holds_keyed_state(self)


class KeyedCoStreamMap(_KeyedTwoInput, CoStreamMap):
    """Co-map of keyed ``ConnectedStreams`` whose function may use keyed state."""

    def process_element1(self, value: Any) -> None:
        if self._sets_key:
            self.keyed_state_backend.set_current_key(self._key_of1(value))
        self._collect(self._map1(value))

    def process_element2(self, value: Any) -> None:
        if self._sets_key:
            self.keyed_state_backend.set_current_key(self._key_of2(value))
        self._collect(self._map2(value))

    def _batch(self, values: List[Any], key_of: Any, fn: Any) -> None:
        if not values:
            return
        if not self._sets_key:
            self._collect_batch(list(map(fn, values)))
            return
        out: List[Any] = []
        append = out.append
        set_key = self.keyed_state_backend.set_current_key
        for value in values:
            set_key(key_of(value))
            append(fn(value))
        self._collect_batch(out)

    def process_batch1(self, values: List[Any]) -> None:
        self._batch(values, self._key_of1, self._map1)

    def process_batch2(self, values: List[Any]) -> None:
        self._batch(values, self._key_of2, self._map2)


class KeyedCoStreamFlatMap(_KeyedTwoInput, CoStreamFlatMap):
    """Co-flat-map of keyed ``ConnectedStreams`` whose function may use keyed state."""

    def process_element1(self, value: Any) -> None:
        if self._sets_key:
            self.keyed_state_backend.set_current_key(self._key_of1(value))
        collect = self._collect
        for out in self._flat_map1(value):
            collect(out)

    def process_element2(self, value: Any) -> None:
        if self._sets_key:
            self.keyed_state_backend.set_current_key(self._key_of2(value))
        collect = self._collect
        for out in self._flat_map2(value):
            collect(out)

    def _batch(self, values: List[Any], key_of: Any, fn: Any) -> None:
        if not self._sets_key:
            out = list(_from_iterable(map(fn, values)))
        else:
            out = []
            extend = out.extend
            set_key = self.keyed_state_backend.set_current_key
            for value in values:
                set_key(key_of(value))
                extend(fn(value))
        if out:
            self._collect_batch(out)

    def process_batch1(self, values: List[Any]) -> None:
        self._batch(values, self._key_of1, self._flat_map1)

    def process_batch2(self, values: List[Any]) -> None:
        self._batch(values, self._key_of2, self._flat_map2)


__all__ = [
    "CoStreamMap",
    "CoStreamFlatMap",
    "CoProcessOperator",
    "KeyedCoProcessOperator",
    "KeyedCoStreamMap",
    "KeyedCoStreamFlatMap",
]
