"""The DataGen source's operator (Flink's ``DataGeneratorSource`` reader with its
``RateLimitedSourceReader``), run in each source subtask.

It is :class:`~raylink.operators.sources.SequenceSourceOperator` over ``0 .. count - 1`` (the same
split, the same ranges in the checkpoint, the same sharing out on a rescaled restore) with the
generator applied to each index, plus the rate schedule:

- Subtask ``k`` is responsible for ``share_k = (emitted_k + remaining_k) / count`` of the
  records; it may have emitted ``due(now - start) * share_k`` of them (``due``: the schedule's
  integral). Ahead of that it waits -- its availability future (:meth:`get_available_future`)
  completes on a processing-time timer (a mail), and the task counts the wait as idle.
- ``pendingRecords`` (Flink's source metric) is what is due and not emitted yet: summed over the
  subtasks, the source's backlog against its schedule.
- The checkpoint holds ``emitted`` and ``start`` besides the ranges. Restored at another
  parallelism, what the old subtasks emitted is attributed to the new ones in proportion to the
  records they take over (so the shares still add up to the whole), and the schedule keeps the
  earliest start.

Thread-safety: the task thread only (the timer's callback runs as a mail).
"""

from __future__ import annotations

import math
import time
from concurrent.futures import Future
from typing import Any, List, Optional

from raylink.operators.sources import DEFAULT_BATCH_SIZE, SequenceSourceOperator
from raylink.runtime.task.mailbox import IDLE


class DataGeneratorSourceOperator(SequenceSourceOperator):
    """``generator(i)`` for this subtask's indices, at its share of the source's rate."""

    #: the task counts a wait for this operator's availability future as idle time
    availability_kind = IDLE

    def __init__(self, source: Any, name: str = "", operator_id: str = "") -> None:
        super().__init__(0, source.count - 1, name, operator_id)
        function = source.generator_function
        self._generate = function.map if callable(getattr(function, "map", None)) else function
        self._strategy = source.rate_limiter_strategy
        self._count = source.count
        self._emitted = 0.0
        self._start: Optional[float] = None  # epoch seconds the schedule started
        self._available: Optional[Future] = None
        self._timer: Any = None

    def open(self) -> None:
        super().open()
        group = getattr(self.runtime_context, "metrics_group", None)
        if group is not None and self._strategy.limited:
            group.gauge("pendingRecords", self.pending_records)

    # -- the schedule --------------------------------------------------------------------------------
    def _remaining_count(self) -> int:
        return sum(hi - lo for lo, hi in self._ranges)

    def _allowed(self, now: float) -> float:
        """How many of its records this subtask may have emitted by ``now`` (epoch seconds)."""
        if self._start is None:
            self._start = now
        total = self._emitted + self._remaining_count()
        return self._strategy.due(now - self._start) * total / self._count if self._count else 0.0

    def pending_records(self) -> int:
        """Records the schedule made due that this subtask has not emitted (Flink's ``pendingRecords``)."""
        if self._start is None or self.finished:
            return 0
        return max(0, min(self._remaining_count(), math.floor(self._allowed(time.time()) - self._emitted)))

    def get_available_future(self) -> Optional[Future]:
        """Not done while the subtask is ahead of its schedule (the task waits, idle)."""
        available = self._available
        if available is None or available.done():
            return None
        return available

    def _wait_until_due(self, now: float) -> None:
        total = self._emitted + self._remaining_count()
        share = total / self._count
        due_at = self._start + self._strategy.time_of((math.floor(self._emitted) + 1) / share)
        available = self._available = Future()
        service = self.runtime_context.processing_time_service
        delay_ms = max(1, math.ceil((due_at - now) * 1000))
        self._timer = service.register_timer(
            service.current_processing_time() + delay_ms, lambda _ts: available.set_result(None)
        )

    # -- emitting ------------------------------------------------------------------------------------
    def emit_next(self, max_records: int = DEFAULT_BATCH_SIZE) -> bool:
        if self.finished or self.cancelled:
            return False
        ranges = self._ranges
        if self._strategy.limited and ranges:
            now = time.time()
            allowed = math.floor(self._allowed(now) - self._emitted)
            if allowed <= 0:
                self._wait_until_due(now)
                return True
            max_records = min(max_records, allowed)
        indices = self._take(max_records)
        if indices:
            generate = self._generate
            self.record_context.timestamp = None
            self._collect_batch([generate(i) for i in indices])
            self._emitted += len(indices)
        if not ranges:
            self._finish()
            return False
        return True

    def cancel(self) -> None:
        super().cancel()
        timer, self._timer = self._timer, None
        if timer is not None:
            timer.cancel()

    # -- checkpoints ---------------------------------------------------------------------------------
    def snapshot_operator_state(self, checkpoint_id: int) -> dict:
        state = super().snapshot_operator_state(checkpoint_id)
        state["emitted"] = self._emitted
        state["start"] = self._start
        return state

    def restore_operator_state(self, state: dict) -> None:
        super().restore_operator_state(state)
        self._emitted = float(state.get("emitted", 0.0))
        self._start = state.get("start")

    def restore_rescaled_operator_state(self, states: List[Optional[dict]], subtask: int, parallelism: int) -> None:
        super().restore_rescaled_operator_state(states, subtask, parallelism)
        old = [s for s in states if s is not None]
        remaining_before = sum(
            hi - lo for i, s in enumerate(states) if s for lo, hi in self._remaining(s, i, len(states))
        )
        emitted_before = sum(float(s.get("emitted", 0.0)) for s in old)
        mine = self._remaining_count()
        self._emitted = emitted_before * mine / remaining_before if remaining_before else 0.0
        starts = [s["start"] for s in old if s.get("start") is not None]
        self._start = min(starts) if starts else None


__all__ = ["DataGeneratorSourceOperator"]
