"""Processing-time services: Flink's ``ProcessingTimeService`` family.

A service offers ``current_processing_time() -> int`` (ms) and
``register_timer(timestamp_ms, callback) -> handle``; ``callback(timestamp)``
runs once the clock reaches ``timestamp`` (the registered timestamp is passed,
as in Flink's ``ProcessingTimeCallback.onProcessingTime``); ``handle.cancel()``
prevents a pending callback.

Threading rule (Flink's mailbox model): operator callbacks must run on the
task thread. ``SystemProcessingTimeService`` fires on one timer thread per
service (Flink's single-threaded ``ScheduledThreadPoolExecutor``; it runs only
while timers are pending), so the task passes ``mail_executor`` (e.g.
``mailbox.put``): a fired timer then only *enqueues* ``callback(timestamp)`` as a
mail and the mailbox loop runs it between records. Without an executor the
callback runs on the timer thread (only safe when nothing else touches the
operator). A cancelled timer leaves the service's queue (no thread, no entry kept
for a timer that will never fire).
``ManualProcessingTimeService`` is for tests: time moves only via
``set_current_time`` / ``advance``, which fire due callbacks synchronously.
"""

from __future__ import annotations

import heapq
import logging
import threading
import time
from typing import Any, Callable, List, Optional, Tuple

TimerCallback = Callable[[int], None]
MailExecutor = Callable[[Callable[[], None]], Any]


class TimerHandle:
    """Cancel handle of a registered processing-time callback."""

    __slots__ = ("timestamp", "callback", "cancelled", "done", "_service")

    def __init__(self, timestamp: int, callback: TimerCallback) -> None:
        self.timestamp = timestamp
        self.callback = callback
        self.cancelled = False
        self.done = False
        #: the SystemProcessingTimeService whose queue holds this timer (None once fired)
        self._service: Optional["SystemProcessingTimeService"] = None

    def cancel(self) -> bool:
        """Cancel; returns False when the callback already ran."""
        if self.done:
            return False
        self.cancelled = True
        service, self._service = self._service, None
        if service is not None:
            service._on_cancel()
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
    """Wall clock + one timer thread; fired callbacks go through ``mail_executor``.

    Timers wait in a heap by timestamp; the thread sleeps until the earliest is due and
    exits when none is left (the next ``register_timer`` starts it again), so a service
    nobody shuts down leaves no thread behind. Cancelled timers are dropped from the
    heap when they come due or reach its head (the thread is woken for them), or all at once
    when they outnumber the live ones."""

    def __init__(self, mail_executor: Optional[MailExecutor] = None) -> None:
        self._mail_executor = mail_executor
        self._cond = threading.Condition()
        self._queue: List[Tuple[int, int, TimerHandle]] = []
        self._seq = 0
        self._num_cancelled = 0  # cancelled timers still in the heap
        self._thread: Optional[threading.Thread] = None
        self._shutdown = False

    def current_processing_time(self) -> int:
        return time.time_ns() // 1_000_000

    def register_timer(self, timestamp: int, callback: TimerCallback) -> TimerHandle:
        handle = TimerHandle(timestamp, callback)
        with self._cond:
            if self._shutdown:
                handle.cancelled = True
                return handle
            handle._service = self
            self._seq += 1
            heapq.heappush(self._queue, (timestamp, self._seq, handle))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="Time Trigger", daemon=True)
                self._thread.start()
            elif self._queue[0][2] is handle:
                self._cond.notify()  # earlier than what the thread waits for
        return handle

    def _on_cancel(self) -> None:
        with self._cond:
            self._num_cancelled += 1
            if self._num_cancelled > 64 and 2 * self._num_cancelled > len(self._queue):
                self._queue[:] = [entry for entry in self._queue if not entry[2].cancelled]  # in place
                heapq.heapify(self._queue)
                self._num_cancelled = 0
            if not self._queue or self._queue[0][2].cancelled:
                # the thread may sleep until the timer cancelled now: it drops it (and ends when none is left)
                self._cond.notify()

    def _next_due(self) -> Optional[TimerHandle]:
        """The next timer once it is due (None: shut down or nothing left; the thread ends)."""
        queue = self._queue
        with self._cond:
            while True:
                if self._shutdown or not queue:
                    self._thread = None
                    return None
                timestamp, _, handle = queue[0]
                if handle.cancelled:
                    heapq.heappop(queue)
                    self._num_cancelled = max(0, self._num_cancelled - 1)
                    continue
                delay = timestamp - self.current_processing_time()
                if delay <= 0:
                    heapq.heappop(queue)
                    handle._service = None
                    return handle
                self._cond.wait(delay / 1000.0)

    def _run(self) -> None:
        while True:
            handle = self._next_due()
            if handle is None:
                return
            try:
                self._fire(handle)
            except Exception:  # noqa: BLE001 - one callback must not stop the others
                logging.getLogger(__name__).exception("processing-time callback failed")

    def _fire(self, handle: TimerHandle) -> None:
        if self._mail_executor is None:
            handle.run()
        else:
            self._mail_executor(handle.run)

    def num_pending(self) -> int:
        with self._cond:
            return sum(1 for _, _, h in self._queue if not h.cancelled)

    def shutdown(self) -> None:
        with self._cond:
            self._shutdown = True
            pending = list(self._queue)
            self._queue.clear()
            self._num_cancelled = 0
            self._cond.notify()
        for _, _, handle in pending:
            handle._service = None
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
