"""Flink's mailbox task model: ``TaskMailbox`` + ``MailboxProcessor``.

One thread per task runs ``run_mailbox_loop``: first every pending mail
(timers, flushes, control), then one step of the *default action* (process one
batch of input, or emit one batch from a source). When the default action has
nothing to do (no input, no output buffer) it suspends itself; the thread then
blocks on the mailbox until some future completes and posts a resume mail — no
polling. Time spent blocked is accounted as *idle* (waiting for input) or
*back-pressured* (waiting for an output buffer), the rest is *busy*, as in
Flink's ``TaskIOMetricGroup``.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from typing import Callable, Optional

from raylink.errors import RaylinkError

IDLE = "idle"
BACK_PRESSURE = "backpressure"
SOURCE_THREAD = "source"  # a legacy source thread works while the mailbox thread waits: not idle
OPERATOR = "operator"  # an operator takes no input until its own work is done (async wait): busy


class MailboxClosedError(RaylinkError, RuntimeError):
    pass


class TaskMailbox:
    """A thread-safe FIFO of mails (callables) with a blocking take."""

    def __init__(self) -> None:
        self._queue: deque = deque()
        self._cond = threading.Condition(threading.Lock())
        self._open = True

    def put(self, mail: Callable[[], None]) -> None:
        with self._cond:
            if not self._open:
                return  # late timers/futures after the task ended are dropped
            self._queue.append(mail)
            self._cond.notify()

    def has_mail(self) -> bool:
        return bool(self._queue)

    def try_take(self) -> Optional[Callable[[], None]]:
        try:
            return self._queue.popleft()
        except IndexError:
            return None

    def take(self, timeout: Optional[float] = None) -> Optional[Callable[[], None]]:
        """Block until a mail arrives (or ``timeout`` seconds pass)."""
        with self._cond:
            if not self._queue:
                self._cond.wait(timeout)
            return self._queue.popleft() if self._queue else None

    def close(self) -> None:
        with self._cond:
            self._open = False
            self._queue.clear()
            self._cond.notify_all()


class Suspension:
    """Handle returned by ``suspend_default_action``; ``resume`` may be called from any thread."""

    __slots__ = ("_processor", "kind", "_resumed")

    def __init__(self, processor: "MailboxProcessor", kind: str) -> None:
        self._processor = processor
        self.kind = kind
        self._resumed = False

    def resume(self, *_ignored) -> None:  # usable directly as a future callback
        if not self._resumed:
            self._resumed = True
            self._processor.mailbox.put(self._processor.resume_default_action)


class MailboxProcessor:
    """Runs mails and the default action on one thread until ``all_actions_completed``."""

    def __init__(self, default_action: Callable[["MailboxProcessor"], None]) -> None:
        self.mailbox = TaskMailbox()
        self.default_action = default_action
        self._running = True
        self._suspension: Optional[Suspension] = None
        self.idle_ns = 0
        self.back_pressured_ns = 0
        self.started_ns = 0
        self.ended_ns = 0
        self._waiting_since = 0  # while blocked: when the wait began (counted live)
        self._waiting_kind = IDLE
        self._samples: list = []  # (time, idle, back pressured) for per-second rates
        self.lock = None  # the checkpoint lock mails run under, while a legacy source thread runs

    # -- control (task thread) ---------------------------------------------------------
    def suspend_default_action(self, kind: str = IDLE) -> Suspension:
        suspension = Suspension(self, kind)
        self._suspension = suspension
        return suspension

    def resume_default_action(self) -> None:
        """Mailbox thread: run the default action again, whatever suspended it."""
        self._suspension = None

    def all_actions_completed(self) -> None:
        """Stop the loop after the current mail/action (Flink's ``allActionsCompleted``)."""
        self._running = False

    # -- control (any thread) -----------------------------------------------------------
    def send_stop(self) -> None:
        self.mailbox.put(self.all_actions_completed)

    # -- the loop ----------------------------------------------------------------------------
    def run_mailbox_loop(self) -> None:
        mailbox = self.mailbox
        default_action = self.default_action
        self.started_ns = time.perf_counter_ns()
        try:
            while self._running:
                # all pending mails first
                while mailbox._queue and self._running:
                    mail = mailbox.try_take()
                    if mail is not None:
                        self._run_mail(mail)
                if not self._running:
                    break
                suspension = self._suspension
                if suspension is None:
                    default_action(self)
                    continue
                # suspended: sleep until a mail (resume, timer, control) arrives
                start = self._waiting_since = time.perf_counter_ns()
                self._waiting_kind = suspension.kind
                mail = mailbox.take()
                self._waiting_since = 0
                waited = time.perf_counter_ns() - start
                if suspension.kind == BACK_PRESSURE:
                    self.back_pressured_ns += waited
                elif suspension.kind == IDLE:
                    self.idle_ns += waited
                if mail is not None:
                    self._run_mail(mail)
        finally:
            self.ended_ns = time.perf_counter_ns()

    def _run_mail(self, mail: Callable[[], None]) -> None:
        lock = self.lock
        if lock is None:
            mail()
        else:
            with lock:
                mail()

    def time_metrics(self) -> dict:
        """busy / idle / back-pressured time in ms per second, over about the last second
        between two calls (Flink's per-second TimerGauges; over the task's life at first), and
        the same three accumulated over the task's life in ms."""
        now = self.ended_ns or time.perf_counter_ns()
        idle, back = self.idle_ns, self.back_pressured_ns
        since = self._waiting_since
        if since and not self.ended_ns:  # blocked right now: count the wait so far
            if self._waiting_kind == BACK_PRESSURE:
                back += now - since
            elif self._waiting_kind == IDLE:
                idle += now - since
        sample = (now, idle, back)
        samples = self._samples
        base = (self.started_ns or now, 0, 0)
        for old in reversed(samples):
            if now - old[0] >= 1_000_000_000:
                base = old
                break
        samples.append(sample)
        if len(samples) > 16:
            del samples[:-16]
        span = max(now - base[0], 1)
        idle_rate = 1000.0 * (idle - base[1]) / span
        back_rate = 1000.0 * (back - base[2]) / span
        lived = now - (self.started_ns or now)
        return {
            "idleTimeMsPerSecond": idle_rate,
            "backPressuredTimeMsPerSecond": back_rate,
            "busyTimeMsPerSecond": max(0.0, 1000.0 - idle_rate - back_rate),
            # over the task's whole life (Flink's accumulate*TimeMs): what a finished task reports
            "accumulateIdleTimeMs": idle / 1e6,
            "accumulateBackPressuredTimeMs": back / 1e6,
            "accumulateBusyTimeMs": max(0.0, (lived - idle - back) / 1e6),
        }


class MailboxExecutor:
    """What an operator may do with its task's mailbox (Flink's ``MailboxExecutor``):
    ``execute`` a mail from any thread (it runs on the task thread between two records), and,
    on the task thread, ``yield_`` — run the next mail, waiting for one — while it waits for
    something a mail brings (the async wait operator at the end of its input)."""

    def __init__(self, processor: MailboxProcessor) -> None:
        self._processor = processor

    def execute(self, mail: Callable[[], None]) -> None:
        self._processor.mailbox.put(mail)

    def yield_(self) -> None:
        processor = self._processor
        mail = processor.mailbox.take()
        if mail is None:
            raise MailboxClosedError("the task's mailbox is closed")
        processor._run_mail(mail)
