"""Keyed timers: Flink's ``InternalTimerServiceImpl`` (plus the user-facing ``TimerService``).

Timers are ``(timestamp, key, namespace)`` triples, deduplicated (registering
twice = one timer), kept in two priority queues (event time, processing time).
Ties on the timestamp fire in registration order. The namespace is ``None`` for
the timers of process functions and the window for the window operator (Flink's
``InternalTimer.getNamespace``).

* Event time: ``advance_watermark(ts)`` fires every timer with timestamp <= ts,
  in timestamp order, each with its key set as the backend's current key.
* Processing time: only the earliest timer holds a physical registration with
  the ``ProcessingTimeService`` (re-registered when an earlier timer arrives or
  after firing), exactly like Flink. The physical callback must run on the task
  thread: the task's service routes it through the mailbox.

The ``triggerable`` (the operator) gets ``on_event_time(ts, key, namespace)`` and
``on_processing_time(ts, key, namespace)``. Snapshots list ``(ts, key)`` for timers
without a namespace and ``(ts, key, namespace)`` otherwise.

The registered timers of each domain are a ``StateTable`` (``timer -> True``, Flink's
``HeapPriorityQueueSet`` keyed by timer) so a snapshot is copy-on-write like the keyed
state's: the barrier freezes the live layer (O(1)), and sorting and grouping the timers by
key group happens when the snapshot is first read, on the checkpoint writer thread. The
heaps only order the timers; an entry the set no longer holds is skipped when it surfaces.
Not thread-safe: the task thread only (the snapshot's reading excepted).
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping
from typing import Any, Dict, List, Optional, Tuple

from raylink.core.functions import TimerService
from raylink.operators.base import MIN_WATERMARK
from raylink.state.state_table import LazySnapshot, SnapshotRegistry, StateTable, flat_items, without_cyclic_gc

_MISSING = object()


def _holds(timers: StateTable, entry: Any) -> bool:
    """Whether the set ``timers`` holds ``entry`` (the live layer first, then the frozen ones)."""
    present = timers.live.get(entry, _MISSING)
    if present is _MISSING:
        return bool(timers.lower) and timers.lookup(entry, _MISSING) is not _MISSING
    return present is True


def _discard(timers: StateTable, entry: Any) -> bool:
    """Remove ``entry`` from the set ``timers``; whether it held it."""
    if timers.lower:
        return timers.remove(entry, _MISSING) is not _MISSING
    return timers.live.pop(entry, None) is True


_Entry = Tuple[int, int, Any, Any]  # (timestamp, sequence, key, namespace)


class InternalTimerService:
    """Event- and processing-time timers of one keyed operator."""

    def __init__(self, backend: Any, processing_time_service: Any, triggerable: Any) -> None:
        self._backend = backend
        self._pts = processing_time_service
        self._triggerable = triggerable
        self._event_queue: List[_Entry] = []
        self._event_set = StateTable("event-time timers", "value")
        # heap entry's timer -> the later timer it stands in for (queued when it surfaces), and back
        self._moved: Dict[Any, _Entry] = {}
        self._stand_in_of: Dict[Any, Any] = {}
        self._proc_queue: List[_Entry] = []
        self._proc_set = StateTable("processing-time timers", "value")
        self._snapshots = SnapshotRegistry()
        self._seq = 0
        self._next_timer: Any = None
        self._next_timer_ts: Optional[int] = None
        self.current_watermark = MIN_WATERMARK
        self._closed = False

    # -- clocks ---------------------------------------------------------------------
    def current_processing_time(self) -> int:
        return self._pts.current_processing_time()

    # -- registration ---------------------------------------------------------------
    def register_event_time_timer(self, key: Any, timestamp: int, namespace: Any = None) -> None:
        entry = (timestamp, key, namespace)
        if not _holds(self._event_set, entry):
            self._backend.key_group_of(key)  # validates the key
            self._event_set.live[entry] = True
            self._seq += 1
            heapq.heappush(self._event_queue, (timestamp, self._seq, key, namespace))

    def delete_event_time_timer(self, key: Any, timestamp: int, namespace: Any = None) -> None:
        _discard(self._event_set, (timestamp, key, namespace))  # the heap entry is skipped lazily

    def move_event_time_timer(
        self, key: Any, timestamp: int, namespace: Any, new_timestamp: int, new_namespace: Any
    ) -> None:
        """``delete_event_time_timer(key, timestamp, namespace)``, then
        ``register_event_time_timer(key, new_timestamp, new_namespace)``: a session that grew.

        A timer moved later is not pushed: the heap entry of the timer it replaced (or that one's
        own stand-in) stands in for it and puts it on the heap when it surfaces -- a session
        growing with every element would otherwise leave a dead heap entry per element."""
        old, entry = (timestamp, key, namespace), (new_timestamp, key, new_namespace)
        timers = self._event_set
        live = timers.live
        if timers.lower:  # a checkpoint's layers below the live one
            had = _discard(timers, old)
            if _holds(timers, entry):
                return
            live[entry] = True
        else:
            had = live.pop(old, None) is True
            if entry in live:
                return
            live[entry] = True
        self._seq += 1
        queued = (new_timestamp, self._seq, key, new_namespace)
        origin = self._stand_in_of.pop(old, old) if had else None
        standing = self._moved.get(origin) if origin is not None else None
        # (a heap entry stands in for one timer: the one moved now, or none yet)
        if (
            origin is not None
            and origin[0] <= new_timestamp
            and (standing is None or (standing[0], standing[2], standing[3]) == old)
        ):
            self._moved[origin] = queued
            self._stand_in_of[entry] = origin
        else:
            heapq.heappush(self._event_queue, queued)

    def register_processing_time_timer(self, key: Any, timestamp: int, namespace: Any = None) -> None:
        entry = (timestamp, key, namespace)
        if _holds(self._proc_set, entry):
            return
        self._backend.key_group_of(key)
        self._proc_set.live[entry] = True
        self._seq += 1
        heapq.heappush(self._proc_queue, (timestamp, self._seq, key, namespace))
        if self._next_timer_ts is None or timestamp < self._next_timer_ts:
            self._schedule(timestamp)

    def delete_processing_time_timer(self, key: Any, timestamp: int, namespace: Any = None) -> None:
        _discard(self._proc_set, (timestamp, key, namespace))

    def _schedule(self, timestamp: int) -> None:
        if self._closed:
            return
        if self._next_timer is not None:
            self._next_timer.cancel()
        self._next_timer_ts = timestamp
        self._next_timer = self._pts.register_timer(timestamp, self.on_processing_time)

    @staticmethod
    def _head(queue: List[_Entry], live: StateTable) -> Optional[_Entry]:
        while queue:
            head = queue[0]
            if _holds(live, (head[0], head[2], head[3])):
                return head
            heapq.heappop(queue)  # deleted or already fired
        return None

    # -- firing ---------------------------------------------------------------------
    def advance_watermark(self, timestamp: int) -> None:
        """Fire every event-time timer <= ``timestamp`` (Flink: advanceWatermark)."""
        self.current_watermark = timestamp
        queue, live = self._event_queue, self._event_set
        if not queue or queue[0][0] > timestamp:
            return
        set_key = self._backend.set_current_key
        fire = self._triggerable.on_event_time
        heappop = heapq.heappop
        # one layer (none appears while timers fire): a timer is removed from it directly
        only = live.live if not live.lower and type(live.live) is dict else None
        moved = self._moved
        while queue and queue[0][0] <= timestamp:
            ts, _, key, namespace = heappop(queue)
            entry = (ts, key, namespace)
            if moved:
                target = moved.pop(entry, None)
                if target is not None:  # the timer this entry stands in for goes on the heap
                    self._stand_in_of.pop((target[0], target[2], target[3]), None)
                    heapq.heappush(queue, target)
            if (only.pop(entry, None) is True) if only is not None else _discard(live, entry):
                set_key(key)
                fire(ts, key, namespace)

    def on_processing_time(self, time: int) -> None:
        """Physical timer callback: fire every processing-time timer <= ``time``."""
        self._next_timer = None
        self._next_timer_ts = None
        if self._closed:
            return
        queue, live = self._proc_queue, self._proc_set
        set_key = self._backend.set_current_key
        fire = self._triggerable.on_processing_time
        while True:
            head = self._head(queue, live)
            if head is None or head[0] > time:
                break
            heapq.heappop(queue)
            ts, _, key, namespace = head
            _discard(live, (ts, key, namespace))
            set_key(key)
            fire(ts, key, namespace)
        head = self._head(queue, live)
        if head is not None and self._next_timer is None:
            self._schedule(head[0])

    # -- inspection / snapshot ------------------------------------------------------
    def num_event_time_timers(self) -> int:
        return len(self._event_set.values)

    def num_processing_time_timers(self) -> int:
        return len(self._proc_set.values)

    def snapshot(self) -> Mapping[int, Dict[str, List[Tuple[Any, ...]]]]:
        """``{key_group: {"event": [(ts, key[, namespace])...], "processing": [...]}}``, sorted
        by timestamp; the namespace is left out when it is ``None``. Taken copy-on-write: the
        barrier freezes the timer sets, the mapping is built when first read."""
        with without_cyclic_gc():
            self._snapshots.compact((self._event_set, self._proc_set))
            seq = self._snapshots.begin()
            domains = (("event", self._event_set.freeze(seq)), ("processing", self._proc_set.freeze(seq)))
        kg_of = self._backend.key_group_of

        def build() -> Dict[int, Dict[str, List[Tuple[Any, ...]]]]:
            result: Dict[int, Dict[str, List[Tuple[Any, ...]]]] = {}
            for domain, layers in domains:
                timers = sorted((timer for timer, _ in flat_items(layers)), key=lambda e: e[0])
                for ts, key, namespace in timers:
                    timer = (ts, key) if namespace is None else (ts, key, namespace)
                    result.setdefault(kg_of(key), {"event": [], "processing": []})[domain].append(timer)
            return result

        return LazySnapshot(self._snapshots, seq, build, lambda: (self._event_set, self._proc_set))

    def restore(self, snapshot: Dict[int, Dict[str, List[Tuple[Any, ...]]]]) -> None:
        """Re-register the timers of the key groups this backend owns."""
        backend = self._backend
        for kg, domains in snapshot.items():
            if not backend.start <= kg <= backend.end:
                continue
            for timer in domains.get("event", ()):
                self.register_event_time_timer(timer[1], timer[0], timer[2] if len(timer) > 2 else None)
            for timer in domains.get("processing", ()):
                self.register_processing_time_timer(timer[1], timer[0], timer[2] if len(timer) > 2 else None)

    def close(self) -> None:
        self._closed = True
        if self._next_timer is not None:
            self._next_timer.cancel()
            self._next_timer = None
            self._next_timer_ts = None


class KeyedTimerService(TimerService):
    """What ``ctx.timer_service()`` returns on keyed streams: timers for the current key."""

    __slots__ = ("_internal", "_backend")

    def __init__(self, internal: InternalTimerService, backend: Any) -> None:
        self._internal = internal
        self._backend = backend

    def current_processing_time(self) -> int:
        return self._internal.current_processing_time()

    def current_watermark(self) -> int:
        return self._internal.current_watermark

    def register_event_time_timer(self, timestamp: int) -> None:
        self._internal.register_event_time_timer(self._backend.current_key, timestamp)

    def register_processing_time_timer(self, timestamp: int) -> None:
        self._internal.register_processing_time_timer(self._backend.current_key, timestamp)

    def delete_event_time_timer(self, timestamp: int) -> None:
        self._internal.delete_event_time_timer(self._backend.current_key, timestamp)

    def delete_processing_time_timer(self, timestamp: int) -> None:
        self._internal.delete_processing_time_timer(self._backend.current_key, timestamp)


_TIMERS_NEED_KEYS = "Setting timers is only supported on a keyed streams."


class NonKeyedTimerService(TimerService):
    """Timer service of non-keyed process functions: clocks only (as in Flink)."""

    __slots__ = ("_operator", "_pts")

    def __init__(self, operator: Any, processing_time_service: Any) -> None:
        self._operator = operator
        self._pts = processing_time_service

    def current_processing_time(self) -> int:
        return self._pts.current_processing_time()

    def current_watermark(self) -> int:
        return self._operator.current_watermark

    def register_event_time_timer(self, timestamp: int) -> None:
        raise RuntimeError(_TIMERS_NEED_KEYS)

    def register_processing_time_timer(self, timestamp: int) -> None:
        raise RuntimeError(_TIMERS_NEED_KEYS)

    def delete_event_time_timer(self, timestamp: int) -> None:
        raise RuntimeError(_TIMERS_NEED_KEYS)

    def delete_processing_time_timer(self, timestamp: int) -> None:
        raise RuntimeError(_TIMERS_NEED_KEYS)


__all__ = ["InternalTimerService", "KeyedTimerService", "NonKeyedTimerService"]
