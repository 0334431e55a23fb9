"""Triggers: Flink's ``Trigger`` / ``TriggerResult`` and the built-in triggers
(``EventTimeTrigger``, ``ProcessingTimeTrigger``, ``CountTrigger``, ``PurgingTrigger``,
``ContinuousEventTimeTrigger``, ``ContinuousProcessingTimeTrigger``, ``NeverTrigger``).

A trigger decides per element and per timer whether a pane fires and/or is purged.
Triggers keep no state of their own (one instance serves every key and window):
what they remember lives in partitioned state of the trigger context, so it merges
with session windows and is snapshotted with the keyed state. Import them from
``raylink.api.window``.
"""

from __future__ import annotations

from enum import Enum
from typing import Any

from raylink.core.state import ReducingStateDescriptor
from raylink.core.time import to_millis
from raylink.core.window_types import _Generic


class TriggerResult(Enum):
    """What to do with a window: ``(fire, purge)``."""

    CONTINUE = (False, False)
    FIRE_AND_PURGE = (True, True)
    FIRE = (True, False)
    PURGE = (False, True)

    def is_fire(self) -> bool:
        return self.value[0]

    def is_purge(self) -> bool:
        return self.value[1]


class Trigger(_Generic):
    """Decides when a window (one key's pane) is evaluated (Flink's ``Trigger``)."""

    class TriggerContext:
        """Timers and partitioned state of the current key and window."""

        def get_current_processing_time(self) -> int:
            raise NotImplementedError

        def get_metric_group(self) -> Any:
            raise NotImplementedError

        def get_current_watermark(self) -> int:
            raise NotImplementedError

        def register_processing_time_timer(self, time: int) -> None:
            raise NotImplementedError

        def register_event_time_timer(self, time: int) -> None:
            raise NotImplementedError

        def delete_processing_time_timer(self, time: int) -> None:
            raise NotImplementedError

        def delete_event_time_timer(self, time: int) -> None:
            raise NotImplementedError

        def get_partitioned_state(self, state_descriptor: Any) -> Any:
            raise NotImplementedError

    class OnMergeContext(TriggerContext):
        def merge_partitioned_state(self, state_descriptor: Any) -> None:
            raise NotImplementedError

    def on_element(self, element: Any, timestamp: int, window: Any, ctx: "Trigger.TriggerContext") -> TriggerResult:
        raise NotImplementedError

    def on_processing_time(self, time: int, window: Any, ctx: "Trigger.TriggerContext") -> TriggerResult:
        raise NotImplementedError

    def on_event_time(self, time: int, window: Any, ctx: "Trigger.TriggerContext") -> TriggerResult:
        raise NotImplementedError

    def can_merge(self) -> bool:
        return False

    def on_merge(self, window: Any, ctx: "Trigger.OnMergeContext") -> None:
        raise TypeError(f"{type(self).__name__} does not support merging windows")

    def clear(self, window: Any, ctx: "Trigger.TriggerContext") -> None:
        """Delete the timers and state this trigger keeps for ``window``."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class EventTimeTrigger(Trigger):
    """Fires once the watermark passes the window's end (at once for late elements)."""

    @staticmethod
    def create() -> "EventTimeTrigger":
        return EventTimeTrigger()

    def on_element(self, element: Any, timestamp: int, window: Any, ctx: Any) -> TriggerResult:
        max_ts = window.max_timestamp()
        if max_ts <= ctx.get_current_watermark():
            return TriggerResult.FIRE  # the watermark passed the window already: fire now
        ctx.register_event_time_timer(max_ts)
        return TriggerResult.CONTINUE

    def on_processing_time(self, time: int, window: Any, ctx: Any) -> TriggerResult:
        return TriggerResult.CONTINUE

    def on_event_time(self, time: int, window: Any, ctx: Any) -> TriggerResult:
        return TriggerResult.FIRE if time == window.max_timestamp() else TriggerResult.CONTINUE

    def can_merge(self) -> bool:
        return True

    def on_merge(self, window: Any, ctx: Any) -> None:
        max_ts = window.max_timestamp()
        if max_ts > ctx.get_current_watermark():
            ctx.register_event_time_timer(max_ts)

    def clear(self, window: Any, ctx: Any) -> None:
        ctx.delete_event_time_timer(window.max_timestamp())


class ProcessingTimeTrigger(Trigger):
    """Fires once the processing-time clock passes the window's end."""

    @staticmethod
    def create() -> "ProcessingTimeTrigger":
        return ProcessingTimeTrigger()

    def on_element(self, element: Any, timestamp: int, window: Any, ctx: Any) -> TriggerResult:
        ctx.register_processing_time_timer(window.max_timestamp())
        return TriggerResult.CONTINUE

    def on_processing_time(self, time: int, window: Any, ctx: Any) -> TriggerResult:
        return TriggerResult.FIRE

    def on_event_time(self, time: int, window: Any, ctx: Any) -> TriggerResult:
        return TriggerResult.CONTINUE

    def can_merge(self) -> bool:
        return True

    def on_merge(self, window: Any, ctx: Any) -> None:
        max_ts = window.max_timestamp()
        if max_ts > ctx.get_current_processing_time():
            ctx.register_processing_time_timer(max_ts)

    def clear(self, window: Any, ctx: Any) -> None:
        ctx.delete_processing_time_timer(window.max_timestamp())


def _sum(a: int, b: int) -> int:
    return a + b


def _min(a: int, b: int) -> int:
    return a if a <= b else b


class CountTrigger(Trigger):
    """Fires when the window holds ``count`` elements since the last firing."""

    def __init__(self, count: int) -> None:
        if not isinstance(count, int) or isinstance(count, bool) or count <= 0:
            raise ValueError(f"CountTrigger: count must be a positive int, got {count!r}")
        self.count = count
        self.state_desc = ReducingStateDescriptor("count", _sum)

    @staticmethod
    def of(count: int) -> "CountTrigger":
        return CountTrigger(count)

    def on_element(self, element: Any, timestamp: int, window: Any, ctx: Any) -> TriggerResult:
        state = ctx.get_partitioned_state(self.state_desc)
        state.add(1)
        if state.get() >= self.count:
            state.clear()
            return TriggerResult.FIRE
        return TriggerResult.CONTINUE

    def on_processing_time(self, time: int, window: Any, ctx: Any) -> TriggerResult:
        return TriggerResult.CONTINUE

    def on_event_time(self, time: int, window: Any, ctx: Any) -> TriggerResult:
        return TriggerResult.CONTINUE

    def can_merge(self) -> bool:
        return True

    def on_merge(self, window: Any, ctx: Any) -> None:
        ctx.merge_partitioned_state(self.state_desc)

    def clear(self, window: Any, ctx: Any) -> None:
        ctx.get_partitioned_state(self.state_desc).clear()

    def __repr__(self) -> str:
        return f"CountTrigger({self.count})"


class PurgingTrigger(Trigger):
    """Turns every FIRE of ``nested_trigger`` into FIRE_AND_PURGE."""

    def __init__(self, nested_trigger: Trigger) -> None:
        if not callable(getattr(nested_trigger, "on_element", None)):
            raise TypeError(f"PurgingTrigger: expected a Trigger, got {nested_trigger!r}")
        self.nested_trigger = nested_trigger

    @staticmethod
    def of(nested_trigger: Trigger) -> "PurgingTrigger":
        return PurgingTrigger(nested_trigger)

    @staticmethod
    def _purging(result: TriggerResult) -> TriggerResult:
        return TriggerResult.FIRE_AND_PURGE if result.is_fire() else result

    def on_element(self, element: Any, timestamp: int, window: Any, ctx: Any) -> TriggerResult:
        return self._purging(self.nested_trigger.on_element(element, timestamp, window, ctx))

    def on_event_time(self, time: int, window: Any, ctx: Any) -> TriggerResult:
        return self._purging(self.nested_trigger.on_event_time(time, window, ctx))

    def on_processing_time(self, time: int, window: Any, ctx: Any) -> TriggerResult:
        return self._purging(self.nested_trigger.on_processing_time(time, window, ctx))

    def can_merge(self) -> bool:
        return self.nested_trigger.can_merge()

    def on_merge(self, window: Any, ctx: Any) -> None:
        self.nested_trigger.on_merge(window, ctx)

    def clear(self, window: Any, ctx: Any) -> None:
        self.nested_trigger.clear(window, ctx)

    def __repr__(self) -> str:
        return f"PurgingTrigger({self.nested_trigger!r})"


class _ContinuousTrigger(Trigger):
    def __init__(self, interval: Any) -> None:
        self.interval = to_millis(interval, f"{type(self).__name__}: interval")
        if self.interval <= 0:
            raise ValueError(f"{type(self).__name__}: interval must be positive, got {self.interval} ms")
        self.state_desc = ReducingStateDescriptor("fire-time", _min)

    def _register_next_fire(self, time: int, window: Any, ctx: Any, state: Any) -> None:
        next_fire = min(time + self.interval, window.max_timestamp())
        state.add(next_fire)
        self._register(ctx, next_fire)

    def _register(self, ctx: Any, time: int) -> None:
        raise NotImplementedError

    def can_merge(self) -> bool:
        return True

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.interval})"


class ContinuousEventTimeTrigger(_ContinuousTrigger):
    """Fires every ``interval`` of event time (aligned to the interval) and at the window's end."""

    @staticmethod
    def of(interval: Any) -> "ContinuousEventTimeTrigger":
        return ContinuousEventTimeTrigger(interval)

    def _register(self, ctx: Any, time: int) -> None:
        ctx.register_event_time_timer(time)

    def on_element(self, element: Any, timestamp: int, window: Any, ctx: Any) -> TriggerResult:
        if window.max_timestamp() <= ctx.get_current_watermark():
            return TriggerResult.FIRE
        ctx.register_event_time_timer(window.max_timestamp())
        state = ctx.get_partitioned_state(self.state_desc)
        if state.get() is None:
            self._register_next_fire(timestamp - timestamp % self.interval, window, ctx, state)
        return TriggerResult.CONTINUE

    def on_event_time(self, time: int, window: Any, ctx: Any) -> TriggerResult:
        if time == window.max_timestamp():
            return TriggerResult.FIRE
        state = ctx.get_partitioned_state(self.state_desc)
        if state.get() == time:
            state.clear()
            self._register_next_fire(time, window, ctx, state)
            return TriggerResult.FIRE
        return TriggerResult.CONTINUE

    def on_processing_time(self, time: int, window: Any, ctx: Any) -> TriggerResult:
        return TriggerResult.CONTINUE

    def on_merge(self, window: Any, ctx: Any) -> None:
        ctx.merge_partitioned_state(self.state_desc)
        next_fire = ctx.get_partitioned_state(self.state_desc).get()
        if next_fire is not None:
            ctx.register_event_time_timer(next_fire)

    def clear(self, window: Any, ctx: Any) -> None:
        state = ctx.get_partitioned_state(self.state_desc)
        next_fire = state.get()
        if next_fire is not None:
            ctx.delete_event_time_timer(next_fire)
            state.clear()


class ContinuousProcessingTimeTrigger(_ContinuousTrigger):
    """Fires every ``interval`` of processing time (aligned to the interval)."""

    @staticmethod
    def of(interval: Any) -> "ContinuousProcessingTimeTrigger":
        return ContinuousProcessingTimeTrigger(interval)

    def _register(self, ctx: Any, time: int) -> None:
        ctx.register_processing_time_timer(time)

    def on_element(self, element: Any, timestamp: int, window: Any, ctx: Any) -> TriggerResult:
        state = ctx.get_partitioned_state(self.state_desc)
        now = ctx.get_current_processing_time()
        if state.get() is None:
            self._register_next_fire(now - now % self.interval, window, ctx, state)
        return TriggerResult.CONTINUE

    def on_processing_time(self, time: int, window: Any, ctx: Any) -> TriggerResult:
        state = ctx.get_partitioned_state(self.state_desc)
        if state.get() == time:
            state.clear()
            self._register_next_fire(time, window, ctx, state)
            return TriggerResult.FIRE
        return TriggerResult.CONTINUE

    def on_event_time(self, time: int, window: Any, ctx: Any) -> TriggerResult:
        return TriggerResult.CONTINUE

    def on_merge(self, window: Any, ctx: Any) -> None:
        ctx.merge_partitioned_state(self.state_desc)
        next_fire = ctx.get_partitioned_state(self.state_desc).get()
        if next_fire is not None:
            ctx.register_processing_time_timer(next_fire)

    def clear(self, window: Any, ctx: Any) -> None:
        state = ctx.get_partitioned_state(self.state_desc)
        next_fire = state.get()
        if next_fire is not None:
            ctx.delete_processing_time_timer(next_fire)
            state.clear()


class NeverTrigger(Trigger):
    """Never fires (the default trigger of ``GlobalWindows``)."""

    def on_element(self, element: Any, timestamp: int, window: Any, ctx: Any) -> TriggerResult:
        return TriggerResult.CONTINUE

    def on_processing_time(self, time: int, window: Any, ctx: Any) -> TriggerResult:
        return TriggerResult.CONTINUE

    def on_event_time(self, time: int, window: Any, ctx: Any) -> TriggerResult:
        return TriggerResult.CONTINUE

    def can_merge(self) -> bool:
        return True

    def on_merge(self, window: Any, ctx: Any) -> None:
        pass


__all__ = [
    "TriggerResult",
    "Trigger",
    "EventTimeTrigger",
    "ProcessingTimeTrigger",
    "CountTrigger",
    "PurgingTrigger",
    "ContinuousEventTimeTrigger",
    "ContinuousProcessingTimeTrigger",
    "NeverTrigger",
]
