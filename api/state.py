"""Keyed state descriptors and state interfaces (PyFlink's ``pyflink.datastream.state``).

Descriptors mirror Flink's ``StateDescriptor`` subclasses (``ValueStateDescriptor``,
``ListStateDescriptor``, ``MapStateDescriptor``, ``ReducingStateDescriptor``,
``AggregatingStateDescriptor``): pure data naming a state and its kind. The
interfaces mirror Flink's ``ValueState``, ``ListState``, ``MapState``,
``ReducingState`` and ``AggregatingState``; the heap implementations live
in ``raylink.operators.state_backend``. Obtain a state from inside a keyed
function with ``runtime_context.get_state(descriptor)`` (and friends); every
access is scoped to the key of the record (or timer) being processed.
"""

from __future__ import annotations

from typing import Any, Iterable, Iterator, Tuple


class StateDescriptor:
    """Names a keyed state; ``kind`` is "value" | "list" | "map" | "reducing" | "aggregating"."""

    kind: str = ""

    def __init__(self, name: str) -> None:
        if not isinstance(name, str) or not name:
            raise ValueError("state name must be a non-empty string")
        self.name = name

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and other.name == self.name  # type: ignore[attr-defined]

    def __hash__(self) -> int:
        return hash((self.kind, self.name))


class ValueStateDescriptor(StateDescriptor):
    kind = "value"

    def __init__(self, name: str, value_type_info: Any = None) -> None:
        super().__init__(name)
        self.value_type_info = value_type_info


class ListStateDescriptor(StateDescriptor):
    kind = "list"

    def __init__(self, name: str, elem_type_info: Any = None) -> None:
        super().__init__(name)
        self.elem_type_info = elem_type_info


class MapStateDescriptor(StateDescriptor):
    kind = "map"

    def __init__(self, name: str, key_type_info: Any = None, value_type_info: Any = None) -> None:
        super().__init__(name)
        self.key_type_info = key_type_info
        self.value_type_info = value_type_info


class ReducingStateDescriptor(StateDescriptor):
    """``reduce_function``: a ``ReduceFunction`` or a plain ``callable(a, b)``."""

    kind = "reducing"

    def __init__(self, name: str, reduce_function: Any, type_info: Any = None) -> None:
        super().__init__(name)
        if reduce_function is None:
            raise ValueError("ReducingStateDescriptor needs a reduce function")
        self.reduce_function = reduce_function
        self.type_info = type_info


class AggregatingStateDescriptor(StateDescriptor):
    """``aggregate_function``: an ``AggregateFunction`` (``create_accumulator``, ``add``,
    ``get_result``, ``merge``)."""

    kind = "aggregating"

    def __init__(self, name: str, agg_function: Any, state_type_info: Any = None) -> None:
        super().__init__(name)
        for method in ("create_accumulator", "add", "get_result"):
            if not callable(getattr(agg_function, method, None)):
                raise TypeError(
                    f"AggregatingStateDescriptor {name!r}: the aggregate function needs a {method}() method, "
                    f"got {type(agg_function).__name__}"
                )
        self.aggregate_function = agg_function
        self.state_type_info = state_type_info

    def get_agg_function(self) -> Any:
        return self.aggregate_function


class State:
    """Base of all keyed states."""

    def clear(self) -> None:
        raise NotImplementedError


class ValueState(State):
    def value(self) -> Any:
        """The value for the current key, ``None`` if unset."""
        raise NotImplementedError

    def update(self, value: Any) -> None:
        raise NotImplementedError


class ListState(State):
    def get(self) -> Iterable[Any]:
        """The list for the current key (empty if unset)."""
        raise NotImplementedError

    def add(self, value: Any) -> None:
        raise NotImplementedError

    def add_all(self, values: Iterable[Any]) -> None:
        raise NotImplementedError

    def update(self, values: Iterable[Any]) -> None:
        raise NotImplementedError


class MapState(State):
    def get(self, key: Any) -> Any:
        raise NotImplementedError

    def put(self, key: Any, value: Any) -> None:
        raise NotImplementedError

    def put_all(self, mapping: Any) -> None:
        raise NotImplementedError

    def remove(self, key: Any) -> None:
        raise NotImplementedError

    def contains(self, key: Any) -> bool:
        raise NotImplementedError

    def keys(self) -> Iterator[Any]:
        raise NotImplementedError

    def values(self) -> Iterator[Any]:
        raise NotImplementedError

    def items(self) -> Iterator[Tuple[Any, Any]]:
        raise NotImplementedError

    def is_empty(self) -> bool:
        raise NotImplementedError


class ReducingState(State):
    def get(self) -> Any:
        """The reduced value for the current key, ``None`` if unset."""
        raise NotImplementedError

    def add(self, value: Any) -> None:
        raise NotImplementedError


class AggregatingState(State):
    def get(self) -> Any:
        """``get_result`` of the accumulator for the current key, ``None`` if unset."""
        raise NotImplementedError

    def add(self, value: Any) -> None:
        raise NotImplementedError


__all__ = [
    "AggregatingStateDescriptor",
    "AggregatingState",
    "StateDescriptor",
    "ValueStateDescriptor",
    "ListStateDescriptor",
    "MapStateDescriptor",
    "ReducingStateDescriptor",
    "State",
    "ValueState",
    "ListState",
    "MapState",
    "ReducingState",
]
