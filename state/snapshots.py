"""What one operator puts into a checkpoint and how it gets it back — Flink's
``StreamOperatorStateHandler`` with the heap ``OperatorStateBackend`` for the list
states of a ``CheckpointedFunction``.

An operator's snapshot is a plain dict (only the parts it has):

* ``"keyed"``: its keyed backend's state by key group (``HeapKeyedStateBackend.snapshot``),
* ``"timers"``: its timer service's timers by key group,
* ``"operator"``: ``{name: (mode, [values])}``, the list states of its function's
  ``OperatorStateStore`` (mode ``"split"`` or ``"union"``) and the operator's broadcast
  states (mode ``"broadcast"``, the values are the map's items),
* ``"custom"``: what the operator's own ``snapshot_operator_state()`` returns (source
  positions, a sink writer's pending files),
* ``"channel_state"`` (:data:`CHANNEL_STATE`, the head operator of a task only): the
  task's in-flight buffers of an unaligned checkpoint
  (``shuffle.channel_state.TaskChannelState``); restored by the task, never rescaled.

Restoring hands every operator the snapshots of *all* its old subtasks, so key groups
go where they belong now (rescaling), union list states reach everyone and split
ones are redistributed evenly when the parallelism changed (Flink's round-robin
repartitioner), else each subtask gets its own back; a broadcast state of new subtask
``i`` is old subtask ``i % old parallelism``'s copy. An operator's own (``"custom"``) state
goes back to its old subtask at the same parallelism; at another one the operator shares it
out itself (``restore_rescaled_operator_state``: the sequence, file and Spark sources, the Sink
V2 writer), and one that cannot is refused with a :class:`StateRestoreError` naming it.

Thread-safety: the task thread only. The dicts returned share no mutable container
with live state (the backend copies), so they may be serialised on another thread.
"""

from __future__ import annotations

from typing import Any, Dict, Iterable, List, Optional

from raylink.core.checkpointing import FunctionInitializationContext, FunctionSnapshotContext
from raylink.core.state import ListState
from raylink.core.state import OperatorStateStore as OperatorStateStoreInterface
from raylink.errors import SuppressRestartsError
from raylink.state.broadcast_state import BROADCAST, HeapBroadcastState
from raylink.state.state_backend_loader import restore_keyed_state


class StateRestoreError(SuppressRestartsError, ValueError):
    """Checkpointed state cannot be restored into this program (Flink's "Failed to rollback to
    checkpoint/savepoint"): names the operator and why."""


class OperatorListState(ListState):
    """A list state of the operator (not of a key)."""

    def __init__(self) -> None:
        self.values: List[Any] = []

    def get(self) -> List[Any]:
        return list(self.values)

    def add(self, value: Any) -> None:
        if value is None:
            raise ValueError("You cannot add null to a ListState.")
        self.values.append(value)

    def add_all(self, values: Iterable[Any]) -> None:
        for value in values:
            self.add(value)

    def update(self, values: Iterable[Any]) -> None:
        self.values = []
        self.add_all(values)

    def clear(self) -> None:
        self.values = []

    def __iter__(self):
        return iter(list(self.values))


class OperatorStateStore(OperatorStateStoreInterface):
    """Flink's ``OperatorStateStore``: named list states and broadcast states of one operator subtask."""

    def __init__(self) -> None:
        self._states: Dict[str, tuple] = {}
        self._restored: Dict[str, tuple] = {}

    def _get(self, descriptor: Any, mode: str) -> OperatorListState:
        name = descriptor.name if hasattr(descriptor, "name") else str(descriptor)
        entry = self._states.get(name)
        if entry is not None:
            if entry[0] != mode:
                raise ValueError(f"operator state {name!r} was registered as {entry[0]} list state, not {mode}")
            return entry[1]
        state = OperatorListState()
        restored = self._restored.pop(name, None)
        if restored is not None:
            state.values = list(restored[1])
        self._states[name] = (mode, state)
        return state

    def get_list_state(self, descriptor: Any) -> OperatorListState:
        return self._get(descriptor, "split")

    def get_union_list_state(self, descriptor: Any) -> OperatorListState:
        return self._get(descriptor, "union")

    def get_broadcast_state(self, descriptor: Any) -> HeapBroadcastState:
        """The broadcast state named by a ``MapStateDescriptor`` (mode ``"broadcast"``: its
        snapshot lists the map's items)."""
        name = descriptor.name
        entry = self._states.get(name)
        if entry is not None:
            if entry[0] != BROADCAST:
                raise ValueError(f"operator state {name!r} was registered as {entry[0]} list state, not broadcast")
            return entry[1]
        state = HeapBroadcastState(name)
        restored = self._restored.pop(name, None)
        if restored is not None:
            state.put_all(dict(restored[1]))
        self._states[name] = (BROADCAST, state)
        return state

    def snapshot(self) -> Dict[str, tuple]:
        return {
            name: (mode, list(state.items()) if mode == BROADCAST else list(state.values))
            for name, (mode, state) in self._states.items()
        }

    def restore(self, per_subtask: List[Optional[Dict[str, tuple]]], subtask_index: int, parallelism: int) -> None:
        names = {name for snapshot in per_subtask if snapshot for name in snapshot}
        for name in names:
            entries = [s[name] for s in per_subtask if s and name in s]
            mode = entries[0][0]
            if mode == "union":
                values = [v for entry in entries for v in entry[1]]
            elif mode == BROADCAST:  # Flink: new subtask i reads the copy of old subtask i % old parallelism
                own = per_subtask[subtask_index % len(per_subtask)] or {}
                values = list(own.get(name, entries[0])[1])
            elif len(per_subtask) == parallelism:
                own = per_subtask[subtask_index] or {}
                values = list(own.get(name, (mode, []))[1])
            else:
                every = [v for entry in entries for v in entry[1]]
                lo = subtask_index * len(every) // parallelism
                hi = (subtask_index + 1) * len(every) // parallelism
                values = every[lo:hi]
            self._restored[name] = (mode, values)


def _functions(operator: Any) -> List[Any]:
    found = []
    for candidate in [getattr(operator, "function", None), *getattr(operator, "_lifecycle", ())]:
        if candidate is not None and all(candidate is not f for f in found):
            found.append(candidate)
    return found


def _checkpointed(function: Any) -> bool:
    return (
        callable(getattr(function, "snapshot_state", None))
        and callable(getattr(function, "initialize_state", None))
        and not isinstance(function, type)
    )


def initialize_operator(operator: Any, per_subtask: Optional[List[Optional[dict]]]) -> None:
    """After ``open``, before any record: restore ``operator`` from the snapshots of all its
    old subtasks (None: a fresh start) and call its functions' ``initialize_state``."""
    rc = operator.runtime_context
    store = OperatorStateStore()
    operator.operator_state_store = store
    if per_subtask:
        subtask, parallelism = rc.subtask_index, rc.parallelism
        backend = getattr(rc, "keyed_state_backend", None)
        keyed = [s["keyed"] for s in per_subtask if s and "keyed" in s]
        if backend is not None and keyed:
            restore_keyed_state(backend, keyed)
        timers = getattr(operator, "timer_service", None)
        for snapshot in per_subtask:
            if snapshot and "timers" in snapshot and timers is not None:
                timers.restore(snapshot["timers"])
        store.restore([s.get("operator") if s else None for s in per_subtask], subtask, parallelism)
        _restore_custom(operator, [s.get("custom") if s else None for s in per_subtask], subtask, parallelism)
    context = FunctionInitializationContext(store, bool(per_subtask))
    for function in _functions(operator):
        if _checkpointed(function):
            function.initialize_state(context)


def _restore_custom(operator: Any, custom: List[Any], subtask: int, parallelism: int) -> None:
    """An operator's own state (source positions, a sink's pending commits): its old subtask's
    at the same parallelism; at another one, ``restore_rescaled_operator_state(states, subtask,
    parallelism)`` shares out every old subtask's (Flink's split reassignment), and an operator
    without it cannot be rescaled: the job fails naming it, without restarting."""
    if not any(c is not None for c in custom):
        return
    if len(custom) == parallelism:
        restore = getattr(operator, "restore_operator_state", None)
        if restore is not None and custom[subtask] is not None:
            restore(custom[subtask])
        return
    rescaled = getattr(operator, "restore_rescaled_operator_state", None)
    if rescaled is None:
        raise StateRestoreError(
            f"operator {operator.name!r} ({type(operator).__name__}) cannot be restored at parallelism "
            f"{parallelism} from the state of {len(custom)} subtasks: its state cannot be redistributed; "
            f"restore it at parallelism {len(custom)}"
        )
    rescaled(custom, subtask, parallelism)


def snapshot_operator(operator: Any, checkpoint_id: int, timestamp: int) -> dict:
    """The operator's part of checkpoint ``checkpoint_id`` (taken between two records)."""
    state: dict = {}
    context = FunctionSnapshotContext(checkpoint_id, timestamp)
    for function in _functions(operator):
        if _checkpointed(function):
            function.snapshot_state(context)
    store = getattr(operator, "operator_state_store", None)
    if store is not None:
        lists = store.snapshot()
        if lists:
            state["operator"] = lists
    backend = getattr(operator.runtime_context, "keyed_state_backend", None)
    if backend is not None:
        state["keyed"] = backend.snapshot(checkpoint_id)
    timers = getattr(operator, "timer_service", None)
    if timers is not None and hasattr(timers, "snapshot"):
        state["timers"] = timers.snapshot()
    custom = getattr(operator, "snapshot_operator_state", None)
    if custom is not None:
        state["custom"] = custom(checkpoint_id)
    return state


def notify_checkpoint_complete(operator: Any, checkpoint_id: int) -> None:
    hook = getattr(operator, "notify_checkpoint_complete", None)
    if hook is not None:
        hook(checkpoint_id)
    backend = getattr(getattr(operator, "runtime_context", None), "keyed_state_backend", None)
    backend_hook = getattr(backend, "notify_checkpoint_complete", None)
    if backend_hook is not None:  # the RocksDB backend: what its next incremental checkpoint may share
        backend_hook(checkpoint_id)
    for function in _functions(operator):
        listener = getattr(function, "notify_checkpoint_complete", None)
        if callable(listener) and not isinstance(function, type):
            listener(checkpoint_id)


def notify_checkpoint_aborted(operator: Any, checkpoint_id: int) -> None:
    hook = getattr(operator, "notify_checkpoint_aborted", None)
    if hook is not None:
        hook(checkpoint_id)
    for function in _functions(operator):
        listener = getattr(function, "notify_checkpoint_aborted", None)
        if callable(listener) and not isinstance(function, type):
            listener(checkpoint_id)


#: the key of a task's channel state (unaligned checkpoints) in its head operator's snapshot
CHANNEL_STATE = "channel_state"

__all__ = [
    "CHANNEL_STATE",
    "OperatorListState",
    "OperatorStateStore",
    "StateRestoreError",
    "initialize_operator",
    "notify_checkpoint_aborted",
    "notify_checkpoint_complete",
    "snapshot_operator",
]
