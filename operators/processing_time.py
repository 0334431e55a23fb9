"""Processing-time services: Flink's ``ProcessingTimeService`` family.

A service offers ``current_processing_time() -> int`` (ms) and
``register_timer(timestamp_ms, callback) -> handle``; ``callback(timestamp)``
runs once the clock reaches ``timestamp`` (the registered timestamp is passed,
as in Flink's ``ProcessingTimeCallback.onProcessingTime``); ``handle.cancel()``
prevents a pending callback.

Threading rule (Flink's mailbox model): operator callbacks must run on the
task thread. ``SystemProcessingTimeService`` fires on ``threading.Timer``
threads, so the task passes ``mail_executor`` (e.g. ``mailbox.put``): a fired
timer then only *enqueues* ``callback(timestamp)`` as a mail and the mailbox
loop runs it between records. Without an executor the callback runs on the
timer thread (only safe when nothing else touches the operator).
``ManualProcessingTimeService`` is for tests: time moves only via
``set_current_time`` / ``advance``, which fire due callbacks synchronously.
"""

from __future__ import annotations

import heapq
import threading
import time
from typing import Any, Callable, List, Optional, Tuple

TimerCallback = Callable[[int], None]
MailExecutor = Callable[[Callable[[], None]], Any]


class TimerHandle:
    """Cancel handle of a registered processing-time callback."""

    __slots__ = ("timestamp", "callback", "cancelled", "done", "_timer")

    def __init__(self, timestamp: int, callback: TimerCallback) -> None:
        self.timestamp = timestamp
        self.callback = callback
        self.cancelled = False
        self.done = False
        self._timer: Optional[threading.Timer] = None

    def cancel(self) -> bool:
        """Cancel; returns False when the callback already ran."""
        if self.done:
            return False
        self.cancelled = True
        if self._timer is not None:
            self._timer.cancel()
        return True

    def run(self) -> None:
        """Run the callback unless cancelled (at most once)."""
        if self.cancelled or self.done:
            return
        self.done = True
        self.callback(self.timestamp)


class ProcessingTimeService:
    """Protocol (the task supplies the real implementation)."""

    def current_processing_time(self) -> int:
        raise NotImplementedError

    def register_timer(self, timestamp: int, callback: TimerCallback) -> TimerHandle:
        raise NotImplementedError

    def shutdown(self) -> None:
        """Cancel everything pending."""


class SystemProcessingTimeService(ProcessingTimeService):
    """Wall clock + ``threading.Timer``; fired callbacks go through ``mail_executor``."""

    def __init__(self, mail_executor: Optional[MailExecutor] = None) -> None:
        self._mail_executor = mail_executor
        self._lock = threading.Lock()
        self._pending: "set[TimerHandle]" = set()
        self._shutdown = False

    def current_processing_time(self) -> int:
        return time.time_ns() // 1_000_000

    def register_timer(self, timestamp: int, callback: TimerCallback) -> TimerHandle:
        handle = TimerHandle(timestamp, callback)
        delay = max(0.0, (timestamp - self.current_processing_time()) / 1000.0)
        timer = threading.Timer(delay, self._fire, args=(handle,))
        timer.daemon = True
        handle._timer = timer
        with self._lock:
            if self._shutdown:
                handle.cancelled = True
                return handle
            self._pending.add(handle)
        timer.start()
        return handle

    def _fire(self, handle: TimerHandle) -> None:
        with self._lock:
            self._pending.discard(handle)
            if self._shutdown:
                return
        if self._mail_executor is None:
            handle.run()
        else:
            self._mail_executor(handle.run)

    def num_pending(self) -> int:
        with self._lock:
            return len(self._pending)

    def shutdown(self) -> None:
        with self._lock:
            self._shutdown = True
            pending, self._pending = self._pending, set()
        for handle in pending:
            handle.cancel()


class ManualProcessingTimeService(ProcessingTimeService):
    """A clock moved by hand; due callbacks fire synchronously, in timestamp order."""

    def __init__(self, start: int = 0) -> None:
        self._now = start
        self._queue: List[Tuple[int, int, TimerHandle]] = []
        self._seq = 0

    def current_processing_time(self) -> int:
        return self._now

    def register_timer(self, timestamp: int, callback: TimerCallback) -> TimerHandle:
        handle = TimerHandle(timestamp, callback)
        self._seq += 1
        heapq.heappush(self._queue, (timestamp, self._seq, handle))
        return handle

    def set_current_time(self, timestamp: int) -> None:
        """Move the clock (never backwards) and fire every callback due by then."""
        if timestamp > self._now:
            self._now = timestamp
        queue = self._queue
        while queue and queue[0][0] <= self._now:
            _, _, handle = heapq.heappop(queue)
            handle.run()

    def advance(self, delta_ms: int) -> None:
        self.set_current_time(self._now + delta_ms)

    def num_pending(self) -> int:
        return sum(1 for _, _, h in self._queue if not h.cancelled)

    def shutdown(self) -> None:
        for _, _, handle in self._queue:
            handle.cancel()
        self._queue.clear()


__all__ = [
    "TimerHandle",
    "ProcessingTimeService",
    "SystemProcessingTimeService",
    "ManualProcessingTimeService",
]
