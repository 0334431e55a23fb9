"""The heap broadcast state: Flink's ``HeapBroadcastState`` and its read-only view.

A broadcast state is operator state (one map per operator subtask, no key): the
``OperatorStateStore`` (:mod:`raylink.state.snapshots`) creates it with
``get_broadcast_state(descriptor)``, snapshots its items under mode ``"broadcast"`` and,
on restore, gives new subtask ``i`` the copy of old subtask ``i % old parallelism``
(Flink's ``RoundRobinOperatorStateRepartitioner``). The broadcast operators
(:mod:`raylink.operators.broadcast`) hand the writable state to
``process_broadcast_element`` and the read-only view to ``process_element``.

Not thread-safe: a state belongs to its task thread. Values are not copied on read
(as in Flink): user code must not modify them.
"""

from __future__ import annotations

from typing import Any, Dict, Iterable, Iterator, Tuple

from raylink.core.state import BroadcastState, ReadOnlyBroadcastState

#: the snapshot mode of broadcast states in an ``OperatorStateStore`` (Flink's ``OperatorStateHandle.Mode.BROADCAST``)
BROADCAST = "broadcast"


class HeapBroadcastState(BroadcastState):
    """A broadcast state held in a dict."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._map: Dict[Any, Any] = {}
        self._read_only = ReadOnlyBroadcastStateView(self._map)

    # -- read --------------------------------------------------------------------------
    def get(self, key: Any) -> Any:
        return self._map.get(key)

    def contains(self, key: Any) -> bool:
        return key in self._map

    def items(self) -> Iterable[Tuple[Any, Any]]:
        return list(self._map.items())

    def keys(self) -> Iterable[Any]:
        return list(self._map)

    def values(self) -> Iterable[Any]:
        return list(self._map.values())

    def is_empty(self) -> bool:
        return not self._map

    def __len__(self) -> int:
        return len(self._map)

    # -- write -------------------------------------------------------------------------
    def put(self, key: Any, value: Any) -> None:
        self._map[key] = value

    def put_all(self, dict_value: Any) -> None:
        self._map.update(dict_value)

    def remove(self, key: Any) -> None:
        self._map.pop(key, None)

    def clear(self) -> None:
        self._map.clear()

    def read_only(self) -> "ReadOnlyBroadcastStateView":
        """The read-only view of this state (one object, shared)."""
        return self._read_only

    def __repr__(self) -> str:
        return f"HeapBroadcastState({self.name!r}, {len(self._map)} entries)"


class ReadOnlyBroadcastStateView(ReadOnlyBroadcastState):
    """Read access to a broadcast state's map; writing fails, naming the rule."""

    def __init__(self, backing: Dict[Any, Any]) -> None:
        self._map = backing

    def get(self, key: Any) -> Any:
        return self._map.get(key)

    def contains(self, key: Any) -> bool:
        return key in self._map

    def items(self) -> Iterable[Tuple[Any, Any]]:
        return list(self._map.items())

    def keys(self) -> Iterable[Any]:
        return list(self._map)

    def values(self) -> Iterable[Any]:
        return list(self._map.values())

    def is_empty(self) -> bool:
        return not self._map

    def __len__(self) -> int:
        return len(self._map)

    def __iter__(self) -> Iterator[Any]:
        return iter(list(self._map))

    def clear(self) -> None:
        raise TypeError(_READ_ONLY)

    def put(self, key: Any, value: Any) -> None:
        raise TypeError(_READ_ONLY)

    def remove(self, key: Any) -> None:
        raise TypeError(_READ_ONLY)

    def __setitem__(self, key: Any, value: Any) -> None:
        raise TypeError(_READ_ONLY)

    def __delitem__(self, key: Any) -> None:
        raise TypeError(_READ_ONLY)


_READ_ONLY = (
    "The broadcast state is read-only on the non-broadcast side: only process_broadcast_element "
    "may modify it (every parallel instance sees every broadcast element, so the copies stay equal)."
)


__all__ = ["BROADCAST", "HeapBroadcastState", "ReadOnlyBroadcastStateView"]
