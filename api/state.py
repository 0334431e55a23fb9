"""PyFlink's ``pyflink.datastream.state``: state descriptors and interfaces, TTL config
(``raylink.core.state``, ``raylink.core.state_ttl``).

Only re-exports: the implementation lives on a lower floor."""

from raylink.core.state import (
    AggregatingState,
    AggregatingStateDescriptor,
    AppendingState,
    BroadcastState,
    ListState,
    ListStateDescriptor,
    MapState,
    MapStateDescriptor,
    MergingState,
    OperatorStateStore,
    ReadOnlyBroadcastState,
    ReducingState,
    ReducingStateDescriptor,
    State,
    StateDescriptor,
    ValueState,
    ValueStateDescriptor,
)
from raylink.core.state_ttl import (
    StateTtlConfig,
)

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
