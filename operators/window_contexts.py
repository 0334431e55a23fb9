"""The contexts the window operator hands out: Flink's ``WindowOperator.Context`` (what
triggers see), ``WindowContext`` (what process window functions see, with per-window
and global state stores), and the assigner and evictor contexts.

One instance of each per operator, reused: the operator sets ``key`` / ``window``
before every call. Not thread-safe (the task thread only).
"""

from __future__ import annotations

from typing import Any, List, Optional

from raylink.core.evictors import Evictor
from raylink.core.functions import KeyedStateStore, WindowContext
from raylink.core.triggers import Trigger
from raylink.core.window_assigners import WindowAssigner


class AssignerContext(WindowAssigner.WindowAssignerContext):
    __slots__ = ("_operator",)

    def __init__(self, operator: Any) -> None:
        self._operator = operator

    def get_current_processing_time(self) -> int:
        return self._operator.timer_service.current_processing_time()

    def get_runtime_context(self) -> Any:
        return self._operator.runtime_context


class TriggerContext(Trigger.OnMergeContext):
    """Flink's ``WindowOperator.Context``: timers and state of ``key`` / ``window``."""

    def __init__(self, operator: Any) -> None:
        self._operator = operator
        self._timers = operator.timer_service
        self._backend = operator.keyed_state_backend
        self.key: Any = None
        self.window: Any = None
        self.merged_windows: Optional[List[Any]] = None

    def get_current_processing_time(self) -> int:
        return self._timers.current_processing_time()

    def get_metric_group(self) -> Any:
        return self._operator.runtime_context.get_metrics_group()

    def get_current_watermark(self) -> int:
        return self._timers.current_watermark

    def register_processing_time_timer(self, time: int) -> None:
        self._timers.register_processing_time_timer(self.key, time, self.window)

    def register_event_time_timer(self, time: int) -> None:
        self._timers.register_event_time_timer(self.key, time, self.window)

    def delete_processing_time_timer(self, time: int) -> None:
        self._timers.delete_processing_time_timer(self.key, time, self.window)

    def delete_event_time_timer(self, time: int) -> None:
        self._timers.delete_event_time_timer(self.key, time, self.window)

    def get_partitioned_state(self, state_descriptor: Any) -> Any:
        state = self._backend.get_or_create_namespaced_state(state_descriptor)
        state.set_current_namespace(self.window)
        return state

    def merge_partitioned_state(self, state_descriptor: Any) -> None:
        if self.merged_windows:
            state = self._backend.get_or_create_namespaced_state(state_descriptor)
            state.merge_namespaces(self.window, self.merged_windows)


class _StateStore(KeyedStateStore):
    def _state(self, descriptor: Any, kind: str) -> Any:
        raise NotImplementedError

    def get_state(self, state_descriptor: Any) -> Any:
        return self._state(state_descriptor, "value")

    def get_list_state(self, state_descriptor: Any) -> Any:
        return self._state(state_descriptor, "list")

    def get_map_state(self, state_descriptor: Any) -> Any:
        return self._state(state_descriptor, "map")

    def get_reducing_state(self, state_descriptor: Any) -> Any:
        return self._state(state_descriptor, "reducing")

    def get_aggregating_state(self, state_descriptor: Any) -> Any:
        return self._state(state_descriptor, "aggregating")


def _check_kind(descriptor: Any, kind: str) -> None:
    if getattr(descriptor, "kind", None) != kind:
        raise ValueError(f"descriptor {descriptor!r} is not a {kind} state descriptor")


class PerWindowStateStore(_StateStore):
    """``context.window_state()``: state of the current key and window."""

    def __init__(self, operator: Any) -> None:
        self._operator = operator
        self.window: Any = None

    def _state(self, descriptor: Any, kind: str) -> Any:
        _check_kind(descriptor, kind)
        if self._operator.merging:
            raise RuntimeError("Per-window state is not allowed when using merging windows.")
        state = self._operator.keyed_state_backend.get_or_create_namespaced_state(descriptor)
        state.set_current_namespace(self.window)
        return state


class GlobalStateStore(_StateStore):
    """``context.global_state()``: state of the current key, across windows."""

    def __init__(self, backend: Any) -> None:
        self._backend = backend

    def _state(self, descriptor: Any, kind: str) -> Any:
        return self._backend.get_or_create_state(descriptor, kind)


class ProcessWindowContext(WindowContext):
    """The ``context`` of process window functions (Flink's ``WindowContext``)."""

    def __init__(self, operator: Any) -> None:
        self._operator = operator
        self._window: Any = None
        self._window_state = PerWindowStateStore(operator)
        self._global_state = GlobalStateStore(operator.keyed_state_backend)

    def window(self) -> Any:
        return self._window

    def current_processing_time(self) -> int:
        return self._operator.timer_service.current_processing_time()

    def current_watermark(self) -> int:
        return self._operator.timer_service.current_watermark

    def window_state(self) -> KeyedStateStore:
        self._window_state.window = self._window
        return self._window_state

    def global_state(self) -> KeyedStateStore:
        return self._global_state

    def output(self, output_tag: Any, value: Any) -> None:
        self._operator._emit_side(output_tag, value)


class EvictorContext(Evictor.EvictorContext):
    def __init__(self, operator: Any) -> None:
        self._operator = operator

    def get_current_processing_time(self) -> int:
        return self._operator.timer_service.current_processing_time()

    def get_metric_group(self) -> Any:
        return self._operator.runtime_context.get_metrics_group()

    def get_current_watermark(self) -> int:
        return self._operator.timer_service.current_watermark


__all__ = [
    "AssignerContext",
    "TriggerContext",
    "PerWindowStateStore",
    "GlobalStateStore",
    "ProcessWindowContext",
    "EvictorContext",
]
