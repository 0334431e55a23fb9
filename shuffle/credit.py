"""Credit-based flow control (Flink FLINK-7282).

Sender side: ``CreditBasedSequenceNumberingViewReader`` — one per consumed
subpartition; holds the receiver's credit, hands out a buffer only while
credit > 0 (events need no credit), decrements it per data buffer, numbers
every buffer and reports the backlog (data buffers still queued) with it.

Receiver side: ``CreditBasedInputChannel`` (Flink's ``RemoteInputChannel`` +
``BufferManager``) — owns ``exclusive_buffers`` buffers (default 2 =
``taskmanager.network.memory.buffers-per-channel``) and borrows floating
buffers from its gate's pool (default 8 = ``floating-buffers-per-gate``,
``create_floating_pool``). Credit = free buffers announced to the sender. On
every buffer it learns the sender's backlog and requests floating buffers up
to ``backlog + exclusive_buffers``; consuming a buffer frees it again and
announces new credit (or gives a floating buffer back to the pool when it is
no longer needed). Hence at most ``exclusive + floating`` buffers per channel
are ever in flight: a slow consumer stops its producer, whose subpartition
then fills its (bounded) buffer pool and back pressure moves upstream.

Transport: the only two calls that cross between sender and receiver are
``channel.on_buffer(BufferResponse)`` (sender -> receiver; a remote transport
should ship several responses per call) and the channel's credit
announcement ``announce_credit(n)`` (receiver -> sender, ending in
``reader.add_credit(n)``). ``LocalCreditConnection`` wires the two with
direct calls in one process; a Ray transport replaces it, keeping the reader
on the producer's TaskExecutor and the channel on the consumer's.

Priority events (unaligned checkpoints): a buffer whose ``is_event`` is
``PRIORITY_EVENT`` (a barrier that overtook its subpartition's queue) overtakes the
received buffers the task has not taken yet, as in Flink's ``RemoteInputChannel``;
the data buffers it overtook are kept for the task to persist as input channel state
(``take_overtaken``, asked after the event was returned). An aligned barrier with a timeout
that arrives after its timeout passed, or that ``convert_barrier`` finds queued once its
checkpoint went unaligned, overtakes the same way, as the unaligned barrier.

Batching (for transports where every message is expensive, like a Ray actor
call): a channel created with ``min_credit`` keeps at least that many buffers
(exclusive + floating) as credit even without a sender backlog, so the sender
can gather a batch; with ``announce_threshold`` it announces freed buffers in
groups of that size, or at once when it holds no data buffer while the sender
holds less than that (events queued behind the last data buffer, such as a
checkpoint barrier, do not hold credit back: nothing would announce it once they
are taken). Defaults (0 / 1) are Flink's exact protocol.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from typing import Any, Callable, Deque, NamedTuple, Optional, Tuple

from raylink.errors import RaylinkError
from raylink.shuffle.buffer_pool import LocalBufferPool, NetworkBufferPool
from raylink.shuffle.codec import decode_event, encode_event
from raylink.shuffle.elements import CheckpointBarrier
from raylink.shuffle.input_gate import InputChannel
from raylink.shuffle.result_partition import PRIORITY_EVENT

__all__ = [
    "DEFAULT_EXCLUSIVE_BUFFERS",
    "DEFAULT_FLOATING_BUFFERS",
    "BufferResponse",
    "CreditProtocolError",
    "CreditBasedSequenceNumberingViewReader",
    "CreditBasedInputChannel",
    "LocalCreditConnection",
    "create_floating_pool",
    "connect_local",
]

DEFAULT_EXCLUSIVE_BUFFERS = 2  # taskmanager.network.memory.buffers-per-channel
DEFAULT_FLOATING_BUFFERS = 8  # taskmanager.network.memory.floating-buffers-per-gate

_EXCLUSIVE = 1
_FLOATING = 2


def timed_out_barrier(buffer: bytes) -> Optional[bytes]:
    """``buffer`` as an unaligned barrier if it is an aligned barrier whose alignment timeout
    (measured from its checkpoint's start) has passed, else None."""
    event = decode_event(buffer)
    if type(event) is CheckpointBarrier and event.is_timeoutable:
        if time.time_ns() // 1_000_000 - event.timestamp >= event.timeout_ms:
            return encode_event(event.as_unaligned())
    return None


class BufferResponse(NamedTuple):
    """One buffer on the wire (Flink's ``NettyMessage.BufferResponse``)."""

    buffer: bytes
    is_event: bool
    backlog: int
    sequence_number: int


class CreditProtocolError(RaylinkError, RuntimeError):
    """Out-of-order buffer, or a buffer sent without credit."""


class CreditBasedSequenceNumberingViewReader:
    """Sender side of one channel: a subpartition read view plus the receiver's credit.

    ``on_available(reader, flushed)`` (set by the transport) is called — outside
    the reader's lock, in whatever thread made it true — when the reader may
    have something to send: data arrived or credit was added (``flushed``
    False), or the writer flushed / added an event (``flushed`` True: ship now).
    """

    def __init__(
        self,
        subpartition: Any,
        receiver_id: Any = None,
        on_available: Optional[Callable[["CreditBasedSequenceNumberingViewReader", bool], None]] = None,
    ) -> None:
        self.subpartition = subpartition
        self.receiver_id = receiver_id
        self.on_available = on_available
        self._lock = threading.Lock()
        self._view: Any = None
        self.credit = 0
        self._sequence_number = 0
        self._flushed = False  # a flush is pending: ship the queue as soon as credit allows
        self.num_buffers_sent = 0

    def request_subpartition(self, every_buffer: bool = False) -> None:
        """Open the view; ``every_buffer``: be told of every buffer added, not only the first."""
        if self._view is None:
            self._view = self.subpartition.create_read_view(
                self.notify_data_available, on_flush=self.notify_flush, every_buffer=every_buffer
            )

    def notify_data_available(self) -> None:
        """Subpartition listener: data became available."""
        cb = self.on_available
        if cb is not None and self.is_available():
            cb(self, False)

    def notify_flush(self) -> None:
        """Subpartition flush listener: the writer flushed or added an event (sticky
        until the queue is drained, like Flink's ``flushRequested``)."""
        self._flushed = True
        cb = self.on_available
        if cb is not None and self.is_available():
            cb(self, True)

    def add_credit(self, credit: int) -> None:
        """The receiver announced ``credit`` more free buffers."""
        with self._lock:
            self.credit += credit
        cb = self.on_available
        if cb is not None and self.is_available():
            cb(self, False)

    def should_send(self, batch_buffers: int, max_delay_ns: int = 0) -> bool:
        """Shipping now is worth it: a flush is pending, an event is next, the credit is
        used up by the queued buffers (waiting cannot grow the batch), ``batch_buffers``
        are sendable, or (``max_delay_ns`` > 0) the oldest queued buffer waited that long."""
        view = self._view
        if view is None:
            return False
        nxt = view.peek_next_is_event()
        if nxt is None:
            return False
        if nxt or self._flushed:
            return nxt or self.credit > 0
        credit = self.credit
        if credit <= 0:
            return False
        backlog = view.backlog
        if backlog >= credit or credit >= batch_buffers and backlog >= batch_buffers:
            return True
        return max_delay_ns > 0 and time.perf_counter_ns() - getattr(view, "oldest_ns", 0) >= max_delay_ns

    def is_available(self) -> bool:
        """Something to send: an event, or a data buffer and credit > 0."""
        view = self._view
        if view is None:
            return False
        nxt = view.peek_next_is_event()
        return nxt is not None and (nxt or self.credit > 0)

    @property
    def backlog(self) -> int:
        return 0 if self._view is None else self._view.backlog

    def poll_next(self) -> Optional[BufferResponse]:
        """Next buffer to send (consumes one credit for data), or None."""
        with self._lock:
            view = self._view
            if view is None:
                return None
            nxt = view.peek_next_is_event()
            if nxt is None or (not nxt and self.credit <= 0):
                return None
            r = view.poll_buffer()
            if r is None:
                self._flushed = False
                return None
            if not r.more_available:
                self._flushed = False
            if not r.is_event:
                self.credit -= 1
            seq = self._sequence_number
            self._sequence_number = seq + 1
            self.num_buffers_sent += 1
        return BufferResponse(r.buffer, r.is_event, r.backlog, seq)


def create_floating_pool(
    network_pool: Optional[NetworkBufferPool] = None, floating_buffers: int = DEFAULT_FLOATING_BUFFERS
) -> Optional[LocalBufferPool]:
    """The per-gate pool of floating buffers (None for 0 floating buffers)."""
    if floating_buffers <= 0:
        return None
    return LocalBufferPool(network_pool, 0, floating_buffers)


class CreditBasedInputChannel(InputChannel):
    """Receiver side of a credit-based channel (Flink's ``RemoteInputChannel``).

    ``announce_credit(n)`` is the transport hook that carries new credit to the
    sender; ``request(initial_credit)`` is called by ``request_subpartition`` to
    open the connection; ``announce_buffer_size(size)`` asks the sender for buffers of
    a new size (debloating). The transport passes them to the constructor, or to
    :meth:`connect` when it wraps an existing channel. ``max_buffers_in_flight``
    records the most data buffers ever held (received, not yet consumed).
    ``min_credit`` / ``announce_threshold``: see the module doc (batching).
    """

    def __init__(
        self,
        floating_pool: Optional[LocalBufferPool] = None,
        exclusive_buffers: int = DEFAULT_EXCLUSIVE_BUFFERS,
        network_pool: Optional[NetworkBufferPool] = None,
        announce_credit: Optional[Callable[[int], None]] = None,
        min_credit: int = 0,
        announce_threshold: int = 1,
        request: Optional[Callable[[int], None]] = None,
        announce_buffer_size: Optional[Callable[[int], None]] = None,
    ) -> None:
        super().__init__()
        if exclusive_buffers < 1 and floating_pool is None:
            raise ValueError("a credit-based channel needs exclusive or floating buffers")
        self.initial_credit = exclusive_buffers
        self.floating_pool = floating_pool
        self.network_pool = network_pool
        self.announce_credit = announce_credit
        self.request = request
        #: the transport hook that asks the sender for buffers of a new size (debloating)
        self.announce_buffer_size = announce_buffer_size
        self._lock = threading.Lock()
        self._received: Deque[Tuple[bytes, bool, int]] = deque()
        self._free_exclusive = exclusive_buffers
        self._free_floating = 0
        self._floating_held = 0
        self.min_credit = min_credit
        self.announce_threshold = max(1, announce_threshold)
        self._required = max(exclusive_buffers, min_credit)
        self._unannounced = 0
        self._sender_credit = 0  # credit the sender holds, as far as this side knows
        self._waiting_for_floating = False
        self._expected_sequence = 0
        self._num_priority = 0  # priority events at the head of _received
        self._overtaken: Deque[list] = deque()  # per queued priority event: the data it overtook
        self._last_overtaken: Optional[list] = None
        self._queued_data = 0
        self.max_buffers_in_flight = 0
        self.num_buffers_received = 0
        self._released = False
        if network_pool is not None and exclusive_buffers:
            network_pool.request_exclusive(exclusive_buffers)

    # -- connection ----------------------------------------------------------------------
    def connect(self, request: Callable[[int], None], announce_credit: Callable[[int], None]) -> None:
        """Attach the transport's hooks (before ``request_subpartition``)."""
        self.request = request
        self.announce_credit = announce_credit

    def request_subpartition(self) -> None:
        if self.request is None:
            raise RuntimeError("credit-based channel is not connected to a transport")
        self._request_floating()  # up to min_credit, when floating buffers are free
        with self._lock:
            initial = self.initial_credit + self._unannounced
            self._unannounced = 0
            self._sender_credit = initial
        self.request(initial)

    # -- transport thread ---------------------------------------------------------------
    def on_buffer(self, response: BufferResponse) -> None:
        """A buffer arrived from the sender (it used one credit unless it is an event)."""
        with self._lock:
            if response.sequence_number != self._expected_sequence:
                raise CreditProtocolError(
                    f"channel {self.channel_index}: expected buffer #{self._expected_sequence}, "
                    f"got #{response.sequence_number}"
                )
            self._expected_sequence += 1
            if response.is_event:
                kind = 0
            elif self._free_floating:
                self._free_floating -= 1
                kind = _FLOATING
            elif self._free_exclusive:
                self._free_exclusive -= 1
                kind = _EXCLUSIVE
            else:
                raise CreditProtocolError(f"channel {self.channel_index}: buffer received without credit")
            buffer, is_event = response.buffer, response.is_event
            if is_event and is_event != PRIORITY_EVENT:
                converted = timed_out_barrier(buffer)
                if converted is not None:  # its alignment timed out on the way: it overtakes now
                    buffer, is_event = converted, PRIORITY_EVENT
            if is_event == PRIORITY_EVENT:
                q = self._received
                n = self._num_priority
                self._overtaken.append([b for i, (b, ev, _k) in enumerate(q) if i >= n and not ev])
                q.insert(n, (buffer, PRIORITY_EVENT, 0))
                self._num_priority = n + 1
            else:
                self._received.append((buffer, is_event, kind))
            if kind:
                self._sender_credit -= 1
                self._queued_data += 1
                if self._queued_data > self.max_buffers_in_flight:
                    self.max_buffers_in_flight = self._queued_data
            self.num_buffers_received += 1
            was_empty = len(self._received) == 1
        if not response.is_event:
            self.on_sender_backlog(response.backlog)
        if was_empty:
            self.notify_channel_non_empty()

    def on_sender_backlog(self, backlog: int) -> None:
        """Request floating buffers until ``backlog + exclusive`` buffers are free."""
        with self._lock:
            self._required = max(backlog + self.initial_credit, self.min_credit)
        self._request_floating()
        self._announce()

    def _request_floating(self, from_listener: bool = False) -> bool:
        """Take floating buffers while needed; True if still waiting for the pool.

        Outside a listener call, a failed request registers ``_on_floating_available``
        with the pool; inside one, returning True keeps that registration.
        """
        pool = self.floating_pool
        if pool is None:
            return False
        while True:
            with self._lock:
                if self._released or self._free_exclusive + self._free_floating >= self._required:
                    self._waiting_for_floating = False
                    return False
                if self._waiting_for_floating and not from_listener:
                    return True  # already registered with the pool
            if pool.request():
                with self._lock:
                    self._floating_held += 1
                    self._free_floating += 1
                    self._unannounced += 1
                continue
            with self._lock:
                self._waiting_for_floating = True
            if from_listener or pool.add_buffer_listener(self._on_floating_available):
                return True
            with self._lock:  # a buffer came back meanwhile: try again
                self._waiting_for_floating = False

    def _on_floating_available(self) -> bool:
        """Buffer listener: the gate's pool may have a buffer for us (True: keep waiting)."""
        still_waiting = self._request_floating(from_listener=True)
        self._announce()
        return still_waiting

    def _announce(self) -> None:
        """Announce freed buffers: at once (Flink) or, with batching, in groups of
        ``announce_threshold`` / when the queue ran dry and the sender is short of credit."""
        with self._lock:
            n = self._unannounced
            if not n:
                return
            threshold = self.announce_threshold
            if n < threshold and (self._queued_data or self._sender_credit >= threshold):
                return
            self._unannounced = 0
            self._sender_credit += n
        if n:
            cb = self.announce_credit
            if cb is None:
                raise RuntimeError("credit-based channel has no transport to announce credit")
            cb(n)

    # -- task thread ----------------------------------------------------------------------
    def get_next_buffer(self) -> Optional[Tuple[bytes, bool, int, bool, bool]]:
        """Next received buffer (its buffer is recycled at once: the caller copies it)."""
        with self._lock:
            if not self._received:
                return None
            buffer, is_event, kind = self._received.popleft()
            if self._num_priority and is_event == PRIORITY_EVENT:
                self._num_priority -= 1
                self._last_overtaken = self._overtaken.popleft()
            q = self._received
            more = bool(q)
            next_is_event = more and q[0][1]
            if kind:
                self._queued_data -= 1
        if kind:
            self._recycle(kind)
        return buffer, is_event, 0, more, next_is_event

    def _recycle(self, kind: int) -> None:
        release_floating = False
        with self._lock:
            if self._released:
                release_floating = kind == _FLOATING
                if release_floating:
                    self._floating_held -= 1
            elif kind == _EXCLUSIVE:
                self._free_exclusive += 1
                if self._free_exclusive + self._free_floating > self._required and self._free_floating:
                    # the exclusive buffer replaces a free floating one: no new credit
                    self._free_floating -= 1
                    self._floating_held -= 1
                    release_floating = True
                else:
                    self._unannounced += 1
            else:
                if self._free_exclusive + self._free_floating >= self._required:
                    self._floating_held -= 1
                    release_floating = True
                else:
                    self._free_floating += 1
                    self._unannounced += 1
        if release_floating and self.floating_pool is not None:
            self.floating_pool.recycle()
        self._announce()

    def convert_barrier(self, checkpoint_id: int) -> bool:
        """Task thread: the aligned barrier of ``checkpoint_id`` waiting among the received buffers
        overtakes them now (its checkpoint went unaligned); False if none is waiting."""
        with self._lock:
            q = self._received
            n = self._num_priority
            for i in range(n, len(q)):
                b, ev, _k = q[i]
                if ev and ev != PRIORITY_EVENT:
                    event = decode_event(b)
                    if type(event) is CheckpointBarrier and event.checkpoint_id == checkpoint_id:
                        self._overtaken.append([q[j][0] for j in range(n, i) if not q[j][1]])
                        del q[i]
                        q.insert(n, (encode_event(event.as_unaligned()), PRIORITY_EVENT, 0))
                        self._num_priority = n + 1
                        return True
        return False

    def take_overtaken(self) -> list:
        """Task thread, right after it got a priority event: the data buffers that event
        overtook in this channel (oldest first), once."""
        with self._lock:
            overtaken, self._last_overtaken = self._last_overtaken, None
        return overtaken or []

    # -- state ----------------------------------------------------------------------------
    @property
    def buffers_in_flight(self) -> int:
        """Data buffers received and not yet consumed."""
        return self._queued_data

    @property
    def available_credit(self) -> int:
        """Free buffers (announced or not)."""
        return self._free_exclusive + self._free_floating

    @property
    def unannounced_credit(self) -> int:
        return self._unannounced

    @property
    def num_floating_buffers(self) -> int:
        return self._floating_held

    def release(self) -> None:
        """Return floating buffers and the exclusive reservation (after EndOfPartition)."""
        with self._lock:
            if self._released:
                return
            self._released = True
            free_floating = self._free_floating
            self._floating_held -= free_floating
            self._free_floating = 0
        if free_floating and self.floating_pool is not None:
            self.floating_pool.recycle(free_floating)
        if self.network_pool is not None and self.initial_credit:
            self.network_pool.recycle_exclusive(self.initial_credit)

    def __repr__(self) -> str:
        return f"CreditBasedInputChannel(index={self.channel_index})"


class LocalCreditConnection:
    """Direct-call transport between one reader and one channel (same process).

    Sending happens in whichever thread makes the reader available (producer
    adding a buffer, consumer announcing credit); a reentrancy guard keeps one
    drain loop at a time, so buffers are delivered in order.
    """

    def __init__(self, reader: CreditBasedSequenceNumberingViewReader, channel: CreditBasedInputChannel) -> None:
        self.reader = reader
        self.channel = channel
        self._lock = threading.Lock()
        self._pumping = False
        self._again = False
        reader.on_available = self._trigger
        channel.connect(self._open, reader.add_credit)

    def _open(self, initial_credit: int) -> None:
        self.reader.request_subpartition()
        self.reader.add_credit(initial_credit)
        self._trigger(self.reader)

    def _trigger(self, _reader: Any = None, _flushed: bool = False) -> None:
        with self._lock:
            if self._pumping:
                self._again = True
                return
            self._pumping = True
        try:
            while True:
                while True:
                    resp = self.reader.poll_next()
                    if resp is None:
                        break
                    self.channel.on_buffer(resp)
                with self._lock:
                    if not self._again:
                        self._pumping = False
                        return
                    self._again = False
        except BaseException:
            with self._lock:
                self._pumping = False
            raise


def connect_local(subpartition: Any, channel: CreditBasedInputChannel) -> LocalCreditConnection:
    """Wire ``channel`` to ``subpartition`` through a reader and a direct-call connection."""
    return LocalCreditConnection(CreditBasedSequenceNumberingViewReader(subpartition), channel)
