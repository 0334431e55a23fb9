"""Network buffer accounting: Flink's ``NetworkBufferPool`` and ``LocalBufferPool``.

Buffers are *permits*: the bytes themselves are produced by the serializer,
the pools only count how many buffers a task may hold, which is what bounds
memory and creates back pressure.

* ``NetworkBufferPool(num_buffers)`` — the fixed number of segments of one
  TaskExecutor. ``create_buffer_pool(min, max)`` reserves ``min`` segments for
  a new ``LocalBufferPool`` (raises ``InsufficientBuffersError`` like Flink's
  "Insufficient number of network buffers"); segments above ``min`` are
  borrowed on demand while unreserved segments are free.
  ``request_exclusive(n)``/``recycle_exclusive(n)`` reserve segments for the
  exclusive buffers of credit-based channels.
* ``LocalBufferPool`` — one per ResultPartition (output) or InputGate
  (floating buffers): ``request() -> bool`` (non-blocking),
  ``request_overdraft()`` (always succeeds; see below), ``recycle(n=1)``,
  ``is_available()``, ``get_available_future()`` (a
  ``concurrent.futures.Future`` completed when a buffer is available again —
  how a task suspends on output back pressure), ``usage()`` (the
  ``outPoolUsage``/``inPoolUsage`` ratio) and buffer listeners (credit-based
  channels waiting for a floating buffer, Flink's ``BufferListener``).

Overdraft: a RecordWriter never blocks inside ``emit``; a buffer produced
while the pool is exhausted is taken as *overdraft* (Flink 1.16's overdraft
buffers) and the pool reports unavailable, so the task stops taking input
after the current batch until buffers are recycled. Recycling pays overdraft
back first.

All methods are thread safe (the producer task requests, consumers recycle).
Futures and listeners are completed/called outside the pool's lock.
"""

from __future__ import annotations

import threading
from concurrent.futures import Future
from typing import Callable, List, Optional

from raylink.errors import RaylinkError

__all__ = ["NetworkBufferPool", "LocalBufferPool", "InsufficientBuffersError", "completed_future"]


class InsufficientBuffersError(RaylinkError, RuntimeError):
    """Not enough network buffers for a new pool / exclusive buffers."""


def completed_future() -> Future:
    """A new, already completed future (result ``None``)."""
    f: Future = Future()
    f.set_result(None)
    return f


class _AvailabilityHelper:
    """Flink's ``AvailabilityHelper``: one future per unavailable period (caller holds the lock)."""

    __slots__ = ("_future",)

    def __init__(self) -> None:
        self._future: Optional[Future] = None

    def get_unavailable_future(self) -> Future:
        f = self._future
        if f is None or f.done():
            f = self._future = Future()
        return f

    def take_to_complete(self) -> Optional[Future]:
        f = self._future
        self._future = None
        return f if f is not None and not f.done() else None


def _complete(f: Optional[Future]) -> None:
    if f is not None and not f.done():
        try:
            f.set_result(None)
        except Exception:  # already completed concurrently (InvalidStateError)
            pass


class NetworkBufferPool:
    """The fixed set of network buffers of one TaskExecutor."""

    def __init__(self, num_buffers: int, buffer_size: int = 32 * 1024) -> None:
        if num_buffers < 1:
            raise ValueError(f"num_buffers must be >= 1, got {num_buffers}")
        self.total_buffers = num_buffers
        self.buffer_size = buffer_size
        self._lock = threading.Lock()
        self._reserved = 0  # mins of local pools + exclusive buffers
        self._borrowed = 0  # local-pool buffers above their min
        self._waiting: List["LocalBufferPool"] = []

    @property
    def free_buffers(self) -> int:
        with self._lock:
            return self.total_buffers - self._reserved - self._borrowed

    def create_buffer_pool(self, min_buffers: int, max_buffers: Optional[int] = None) -> "LocalBufferPool":
        """A LocalBufferPool with ``min_buffers`` guaranteed, up to ``max_buffers`` (None: unbounded)."""
        return LocalBufferPool(self, min_buffers, max_buffers)

    def _reserve(self, n: int, what: str) -> None:
        with self._lock:
            free = self.total_buffers - self._reserved - self._borrowed
            if n > free:
                raise InsufficientBuffersError(
                    f"Insufficient number of network buffers: required {n}, but only {free} available "
                    f"(total {self.total_buffers}) for {what}."
                )
            self._reserved += n

    def _unreserve(self, n: int) -> None:
        with self._lock:
            self._reserved -= n
            waiting = self._take_waiting()
        for p in waiting:
            p._network_buffer_returned()

    def request_exclusive(self, n: int) -> None:
        """Reserve ``n`` segments as exclusive buffers of a channel."""
        self._reserve(n, f"{n} exclusive buffers")

    def recycle_exclusive(self, n: int) -> None:
        self._unreserve(n)

    def _try_borrow(self, pool: "LocalBufferPool") -> bool:
        with self._lock:
            if self.total_buffers - self._reserved - self._borrowed > 0:
                self._borrowed += 1
                return True
            if pool not in self._waiting:
                self._waiting.append(pool)
            return False

    def _has_free(self) -> bool:
        return self.total_buffers - self._reserved - self._borrowed > 0

    def _return_borrowed(self, n: int) -> None:
        with self._lock:
            self._borrowed -= n
            waiting = self._take_waiting()
        for p in waiting:
            p._network_buffer_returned()

    def _take_waiting(self) -> List["LocalBufferPool"]:
        w = self._waiting
        self._waiting = []
        return w

    def usage(self) -> float:
        with self._lock:
            return (self._reserved + self._borrowed) / self.total_buffers


class LocalBufferPool:
    """A task's share of the network buffers (``min`` guaranteed, at most ``max``).

    Without a network pool it is a standalone pool of ``max_buffers`` (or
    ``min_buffers``) buffers; with neither it is unbounded (never back pressures).
    """

    def __init__(
        self, network_pool: Optional[NetworkBufferPool], min_buffers: int, max_buffers: Optional[int] = None
    ) -> None:
        if min_buffers < 0 or (max_buffers is not None and (max_buffers < 1 or max_buffers < min_buffers)):
            raise ValueError(f"invalid pool size min={min_buffers} max={max_buffers}")
        self.network_pool = network_pool
        if network_pool is None:
            cap = max_buffers if max_buffers is not None else (min_buffers or None)
            self.min_buffers = cap or 0
            self.max_buffers = cap
        else:
            self.min_buffers = min_buffers
            self.max_buffers = max_buffers
        self._lock = threading.Lock()
        self._in_use = 0  # pool-backed permits held
        self._overdraft = 0
        self._helper = _AvailabilityHelper()
        self._listeners: List[Callable[[], bool]] = []
        self._destroyed = False
        if network_pool is not None and min_buffers:
            network_pool._reserve(min_buffers, f"a buffer pool (min {min_buffers})")

    # -- internals (caller holds self._lock) --------------------------------------
    def _can_take(self) -> bool:
        if self._overdraft:
            return False
        if self._in_use < self.min_buffers:
            return True
        if self.max_buffers is not None and self._in_use >= self.max_buffers:
            return False
        np = self.network_pool
        if np is None:
            return self.max_buffers is None
        return np._has_free()

    def _take(self) -> bool:
        if self._overdraft:
            return False
        if self._in_use < self.min_buffers:
            self._in_use += 1
            return True
        if self.max_buffers is not None and self._in_use >= self.max_buffers:
            return False
        np = self.network_pool
        if np is None:
            if self.max_buffers is None:
                self._in_use += 1
                return True
            return False
        if np._try_borrow(self):
            self._in_use += 1
            return True
        return False

    def _watch_network(self) -> None:
        """Ask the network pool to tell us when a borrowed segment comes back."""
        np = self.network_pool
        if np is not None and self._in_use >= self.min_buffers:
            with np._lock:
                if self not in np._waiting:
                    np._waiting.append(self)

    # -- public ------------------------------------------------------------------------
    def request(self) -> bool:
        """Take one buffer if one is available (never blocks)."""
        with self._lock:
            return self._take()

    def request_overdraft(self) -> bool:
        """Take one buffer, as overdraft if the pool is exhausted; True if pool-backed."""
        with self._lock:
            if self._take():
                return True
            self._overdraft += 1
            return False

    def recycle(self, n: int = 1) -> None:
        """Return ``n`` buffers (overdraft first); wakes the availability future and listeners."""
        to_net = 0
        with self._lock:
            pay = min(n, self._overdraft)
            self._overdraft -= pay
            n -= pay
            if n > self._in_use:
                raise ValueError(f"recycling {n} buffers but only {self._in_use} in use")
            if n:
                borrowed = max(0, self._in_use - self.min_buffers) if self.network_pool is not None else 0
                to_net = min(n, borrowed)
                self._in_use -= n
            listeners = self._listeners
            self._listeners = []
        if to_net:
            self.network_pool._return_borrowed(to_net)
        if listeners:
            self._notify_listeners(listeners)
        self._maybe_complete()

    def _notify_listeners(self, listeners: List[Callable[[], bool]]) -> None:
        """Call listeners; one returning True (its request failed) stays registered."""
        for _ in range(1000):
            keep = []
            for listener in listeners:
                if listener():
                    keep.append(listener)
            if not keep:
                return
            with self._lock:
                if not self._can_take():
                    self._listeners.extend(keep)
                    self._watch_network()
                    return
            listeners = keep  # a buffer came back meanwhile: offer again
        with self._lock:
            self._listeners.extend(listeners)

    def _network_buffer_returned(self) -> None:
        with self._lock:
            listeners = self._listeners
            self._listeners = []
        if listeners:
            self._notify_listeners(listeners)
        self._maybe_complete()

    def _maybe_complete(self) -> None:
        with self._lock:
            f = self._helper.take_to_complete() if self._can_take() else None
        _complete(f)

    def add_buffer_listener(self, listener: Callable[[], bool]) -> bool:
        """Register ``listener()`` to be called when a buffer may be available.

        Returns False (not registered) if a buffer is available right now. The
        listener must try ``request()`` itself and return True only if that
        failed and it still wants buffers (Flink's ``BufferListener``).
        """
        with self._lock:
            if self._can_take():
                return False
            self._listeners.append(listener)
            self._watch_network()
            return True

    def is_available(self) -> bool:
        with self._lock:
            return self._can_take()

    def get_available_future(self) -> Future:
        """A completed future if a buffer is available now, else one completed on recycle."""
        with self._lock:
            if self._can_take():
                return completed_future()
            f = self._helper.get_unavailable_future()
            if not self._overdraft:
                self._watch_network()
        return f

    @property
    def num_in_use(self) -> int:
        """Buffers held, overdraft included."""
        return self._in_use + self._overdraft

    @property
    def num_overdraft(self) -> int:
        return self._overdraft

    def usage(self) -> float:
        """Buffers in use / pool size (``outPoolUsage``/``inPoolUsage``); > 1 with overdraft."""
        with self._lock:
            used = self._in_use + self._overdraft
            if self.max_buffers is not None:
                return used / self.max_buffers
            if self.network_pool is not None:
                return used / max(self.min_buffers, 1) if self.min_buffers else (used / self.network_pool.total_buffers)
            return 0.0

    def destroy(self) -> None:
        """Give the reservation and borrowed segments back to the network pool."""
        with self._lock:
            if self._destroyed:
                return
            self._destroyed = True
            borrowed = max(0, self._in_use - self.min_buffers)
            f = self._helper.take_to_complete()
        np = self.network_pool
        if np is not None:
            with np._lock:  # a destroyed pool waits for no segment (and stays reachable from none)
                if self in np._waiting:
                    np._waiting.remove(self)
            if borrowed:
                np._return_borrowed(borrowed)
            if self.min_buffers:
                np._unreserve(self.min_buffers)
        _complete(f)
