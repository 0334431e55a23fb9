"""Keyed state descriptors and state interfaces (PyFlink's ``pyflink.datastream.state``).

Descriptors mirror Flink's ``StateDescriptor`` subclasses (``ValueStateDescriptor``,
``ListStateDescriptor``, ``MapStateDescriptor``, ``ReducingStateDescriptor``,
``AggregatingStateDescriptor``): pure data naming a state and its kind. The
interfaces mirror Flink's ``ValueState``, ``ListState``, ``MapState``,
``ReducingState`` and ``AggregatingState``; the heap implementations live
in ``raylink.state.state_backend``. Obtain a state from inside a keyed
function with ``runtime_context.get_state(descriptor)`` (and friends); every
access is scoped to the key of the record (or timer) being processed. Keyed state
is available to every function of a keyed stream: ``map``/``flat_map``/``filter``/
``reduce``/``process`` of a ``KeyedStream`` and the functions of keyed
``ConnectedStreams``. ``descriptor.enable_time_to_live(StateTtlConfig...)`` gives a
state a time-to-live (``raylink.core.state_ttl``). ``BroadcastState`` /
``ReadOnlyBroadcastState`` are the operator states of a broadcast process function
(``DataStream.broadcast(MapStateDescriptor)``), one map per operator subtask. Descriptors
are plain data, safe to share; a state object belongs to one task thread.
"""

from __future__ import annotations

from typing import Any, Iterable, Iterator, Optional, Tuple

from raylink.core.state_ttl import StateTtlConfig


class StateDescriptor:
    """Names a keyed state; ``kind`` is "value" | "list" | "map" | "reducing" | "aggregating"."""

    kind: str = ""

    def __init__(self, name: str, type_info: Any = None) -> None:
        if not isinstance(name, str) or not name:
            raise ValueError("state name must be a non-empty string")
        self.name = name
        self.type_info = type_info
        self._ttl_config: Optional[StateTtlConfig] = None

    def get_name(self) -> str:
        return self.name

    def enable_time_to_live(self, ttl_config: StateTtlConfig) -> None:
        """Give the state a time-to-live (see ``StateTtlConfig``)."""
        if not isinstance(ttl_config, StateTtlConfig):
            raise TypeError(
                f"{type(self).__name__} {self.name!r}: enable_time_to_live expects a StateTtlConfig, "
                f"got {type(ttl_config).__name__}"
            )
        self._ttl_config = ttl_config

    def get_ttl_config(self) -> Optional[StateTtlConfig]:
        """The TTL configuration, ``None`` when TTL was never enabled."""
        return self._ttl_config

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and other.name == self.name  # type: ignore[attr-defined]

    def __hash__(self) -> int:
        return hash((self.kind, self.name))


class ValueStateDescriptor(StateDescriptor):
    kind = "value"

    def __init__(self, name: str, value_type_info: Any = None) -> None:
        super().__init__(name, value_type_info)
        self.value_type_info = value_type_info


class ListStateDescriptor(StateDescriptor):
    kind = "list"

    def __init__(self, name: str, elem_type_info: Any = None) -> None:
        super().__init__(name, elem_type_info)
        self.elem_type_info = elem_type_info


class MapStateDescriptor(StateDescriptor):
    kind = "map"

    def __init__(self, name: str, key_type_info: Any = None, value_type_info: Any = None) -> None:
        super().__init__(name, value_type_info)
        self.key_type_info = key_type_info
        self.value_type_info = value_type_info


class ReducingStateDescriptor(StateDescriptor):
    """``reduce_function``: a ``ReduceFunction`` or a plain ``callable(a, b)``."""

    kind = "reducing"

    def __init__(self, name: str, reduce_function: Any, type_info: Any = None) -> None:
        super().__init__(name, type_info)
        if not (callable(getattr(reduce_function, "reduce", None)) or callable(reduce_function)):
            raise TypeError(
                f"ReducingStateDescriptor {name!r}: the reduce function must be a ReduceFunction or a "
                f"callable, got {type(reduce_function).__name__}"
            )
        self.reduce_function = reduce_function

    def get_reduce_function(self) -> Any:
        return self.reduce_function


class AggregatingStateDescriptor(StateDescriptor):
    """``aggregate_function``: an ``AggregateFunction`` (``create_accumulator``, ``add``,
    ``get_result``, ``merge``)."""

    kind = "aggregating"

    def __init__(self, name: str, agg_function: Any, state_type_info: Any = None) -> None:
        super().__init__(name, state_type_info)
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


class AppendingState(State):
    """A state that values are added to and that can be read as a whole (``get``)."""

    def get(self) -> Any:
        raise NotImplementedError

    def add(self, value: Any) -> None:
        raise NotImplementedError


class MergingState(AppendingState):
    """An ``AppendingState`` whose values of several namespaces can be merged (windows)."""


class ListState(MergingState):
    def get(self) -> Iterable[Any]:
        """The list for the current key (empty if unset)."""
        raise NotImplementedError

    def add(self, value: Any) -> None:
        raise NotImplementedError

    def add_all(self, values: Iterable[Any]) -> None:
        raise NotImplementedError

    def update(self, values: Iterable[Any]) -> None:
        raise NotImplementedError

    def __iter__(self) -> Iterator[Any]:
        return iter(self.get())


class MapState(State):
    """A map per key; also ``in``, ``state[k]``, ``state[k] = v``, ``del state[k]`` and
    iteration over the map's keys."""

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

    def __getitem__(self, key: Any) -> Any:
        return self.get(key)

    def __setitem__(self, key: Any, value: Any) -> None:
        self.put(key, value)

    def __delitem__(self, key: Any) -> None:
        self.remove(key)

    def __contains__(self, key: Any) -> bool:
        return self.contains(key)

    def __iter__(self) -> Iterator[Any]:
        return iter(self.keys())


class ReducingState(MergingState):
    """Values added are combined with the descriptor's reduce function."""

    def get(self) -> Any:
        """The reduced value for the current key, ``None`` if unset."""
        raise NotImplementedError

    def add(self, value: Any) -> None:
        raise NotImplementedError


class AggregatingState(MergingState):
    """Values added go into an accumulator of the descriptor's ``AggregateFunction``."""

    def get(self) -> Any:
        """``get_result`` of the accumulator for the current key, ``None`` if unset."""
        raise NotImplementedError

    def add(self, value: Any) -> None:
        raise NotImplementedError


class ReadOnlyBroadcastState(State):
    """Flink's ``ReadOnlyBroadcastState``: what the non-broadcast side of a broadcast
    process function (and ``on_timer``) sees of a broadcast state — ``get``, ``contains``,
    ``items``, ``keys``, ``values``, ``is_empty``, ``state[k]``, ``k in state`` and
    iteration over the keys. Values are not copied: do not modify them."""

    def get(self, key: Any) -> Any:
        """The value of ``key``, ``None`` if there is none."""
        raise NotImplementedError

    def contains(self, key: Any) -> bool:
        raise NotImplementedError

    def items(self) -> Iterable[Tuple[Any, Any]]:
        raise NotImplementedError

    def keys(self) -> Iterable[Any]:
        raise NotImplementedError

    def values(self) -> Iterable[Any]:
        raise NotImplementedError

    def is_empty(self) -> bool:
        raise NotImplementedError

    def __getitem__(self, key: Any) -> Any:
        return self.get(key)

    def __contains__(self, key: Any) -> bool:
        return self.contains(key)

    def __iter__(self) -> Iterator[Any]:
        return iter(self.keys())


class OperatorStateStore:
    """Flink's ``OperatorStateStore`` as PyFlink exposes it: the operator (non-keyed) states of
    one operator subtask. ``get_broadcast_state`` is what the broadcast operators use; the
    runtime's store (``raylink.state.snapshots``) also has the list states of a
    ``CheckpointedFunction``."""

    def get_broadcast_state(self, state_descriptor: "MapStateDescriptor") -> "BroadcastState":
        """The ``BroadcastState`` described by the ``MapStateDescriptor`` (read-write)."""
        raise NotImplementedError


class BroadcastState(ReadOnlyBroadcastState):
    """Flink's ``BroadcastState``: a map every parallel instance of the operator holds in
    full, written only by ``process_broadcast_element`` (every instance sees every broadcast
    element, so the copies stay the same as long as the function is deterministic).
    Checkpointed by every subtask; on restore with another parallelism each new subtask
    gets one of the old copies."""

    def put(self, key: Any, value: Any) -> None:
        raise NotImplementedError

    def put_all(self, dict_value: Any) -> None:
        raise NotImplementedError

    def remove(self, key: Any) -> None:
        raise NotImplementedError

    def __setitem__(self, key: Any, value: Any) -> None:
        self.put(key, value)

    def __delitem__(self, key: Any) -> None:
        self.remove(key)


__all__ = [
    "AggregatingStateDescriptor",
    "AggregatingState",
    "BroadcastState",
    "OperatorStateStore",
    "ReadOnlyBroadcastState",
    "AppendingState",
    "MergingState",
    "StateTtlConfig",
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
