"""Result partitions and their subpartitions.

Mirrors Flink's ``ResultPartitionType``, ``ResultPartition``
(``BufferWritingResultPartition``), ``PipelinedSubpartition`` (+ its view) and
``BoundedBlockingSubpartition``.

A subpartition holds *finished* buffers (``bytes``) and event buffers, in
order. The writer side (``RecordWriter``) decides when a buffer is finished:
when full, on flush, on every record with ``flush_always``, and before an
event. ``PipelinedSubpartition`` calls its reader's availability listener
(a no-argument callable) whenever its queue goes from empty to non-empty (or,
for a view created with ``every_buffer=True``, on every buffer); the reader
then drains it with ``poll_buffer()`` until ``more_available`` is False. A
view may also register ``on_flush``: called when the writer flushes (buffer
timeout, events, end of partition, an exhausted buffer pool), Flink's
``PipelinedSubpartition.flush`` -> ``notifyDataAvailable``; a transport that
batches buffers ships what it holds at that point.
``BoundedBlockingSubpartition`` keeps everything and lets readers see
data only after ``finish()`` (batch exchange); it can be read several times
(one view per reader).

Priority events (unaligned checkpoints, Flink's ``PipelinedSubpartition.add`` of a
priority buffer): ``add_priority_event`` puts an event at the head of the queue (behind
priority events already there) and returns the data buffers it overtook, in order — the
subpartition's output channel state for that checkpoint; they stay queued and are sent
after the event. ``convert_to_priority`` does the same to an event already queued (an aligned
barrier whose alignment timed out), ``on_event_polled`` tells when an event left. A priority event is queued with ``is_event`` = ``PRIORITY_EVENT`` (2,
truthy), which readers pass on as it is, so a receiving channel can let it overtake too.

Buffer permits: for ``PIPELINED_BOUNDED`` partitions with a buffer pool, every
data buffer added takes a permit (overdraft if the pool is exhausted) that is
recycled when the reader polls the buffer. Event buffers are unpooled (as in
Flink). ``PIPELINED`` and ``BLOCKING`` partitions are unbounded. A pipelined
partition gives its buffer pool back (``LocalBufferPool.destroy``) once every
subpartition's reader has polled EndOfPartition; ``release()`` does it for
blocking partitions and on cancellation.

Thread safety: one writer thread, one reader thread per subpartition;
listeners are called outside the subpartition lock, in the writer's thread.
"""

from __future__ import annotations

import enum
import threading
import time
from collections import deque
from concurrent.futures import Future
from typing import Any, Callable, Deque, List, NamedTuple, Optional, Tuple

from raylink.errors import RaylinkError
from raylink.shuffle.buffer_pool import LocalBufferPool, completed_future
from raylink.shuffle.codec import encode_event
from raylink.shuffle.elements import END_OF_PARTITION

__all__ = [
    "ResultPartitionType",
    "BufferAndBacklog",
    "PartitionReleasedError",
    "ResultSubpartition",
    "PipelinedSubpartition",
    "BoundedBlockingSubpartition",
    "ResultPartition",
    "PRIORITY_EVENT",
]

#: ``is_event`` of a priority event (a barrier of an unaligned checkpoint): truthy like True
PRIORITY_EVENT = 2

_EOP_BYTES = encode_event(END_OF_PARTITION)


class ResultPartitionType(enum.Enum):
    """BLOCKING (batch), PIPELINED (streaming, unbounded), PIPELINED_BOUNDED (streaming default)."""

    BLOCKING = (False, False)
    PIPELINED = (True, False)
    PIPELINED_BOUNDED = (True, True)

    @property
    def is_pipelined(self) -> bool:
        return self.value[0]

    @property
    def is_blocking(self) -> bool:
        return not self.value[0]

    @property
    def is_bounded(self) -> bool:
        return self.value[1]

    @classmethod
    def of(cls, name: "str | ResultPartitionType") -> "ResultPartitionType":
        return name if isinstance(name, cls) else cls[str(name).upper()]


class BufferAndBacklog(NamedTuple):
    """One polled buffer (Flink's ``BufferAndBacklog``).

    ``backlog``: data buffers still queued after this one; ``more_available``:
    anything (buffer or event) still queued; ``next_is_event``: whether the
    next queued item is an event (an event needs no credit).
    """

    buffer: bytes
    is_event: bool
    backlog: int
    more_available: bool
    next_is_event: bool


class PartitionReleasedError(RaylinkError, RuntimeError):
    """The producer's partition was released (cancelled / failed) while being read."""


class ResultSubpartition:
    """Common interface of subpartitions (and their read views)."""

    index: int
    #: set by the RecordWriter: called with the buffer size the reader asks for (debloating)
    buffer_size_listener: Optional[Callable[[int], None]] = None

    def add(self, buffer: bytes, is_event: bool = False) -> None:
        raise NotImplementedError

    def set_buffer_size(self, size: int) -> None:
        """The consumer asks for buffers of ``size`` bytes from now on (Flink's buffer debloating)."""
        listener = self.buffer_size_listener
        if listener is not None:
            listener(size)

    def finish(self) -> None:
        raise NotImplementedError

    def create_read_view(
        self, listener: Callable[[], None], on_flush: Optional[Callable[[], None]] = None, every_buffer: bool = False
    ) -> Any:
        raise NotImplementedError

    def flush(self) -> None:
        """The writer flushed: tell a reader that registered ``on_flush``."""

    def release(self) -> None:
        raise NotImplementedError


class PipelinedSubpartition(ResultSubpartition):
    """In-memory queue of finished buffers and events for one consumer.

    Acts as its own (single) read view: ``poll_buffer()``, ``backlog``,
    ``peek_next_is_event()``.
    """

    def __init__(
        self,
        index: int,
        recycle: Optional[Callable[[int], None]] = None,
        on_consumed: Optional[Callable[[], None]] = None,
    ) -> None:
        self.index = index
        self._queue: Deque[Tuple[bytes, bool]] = deque()
        self._lock = threading.Lock()
        self._listener: Optional[Callable[[], None]] = None
        self._on_flush: Optional[Callable[[], None]] = None
        self._every_buffer = False
        self._recycle = recycle
        self._on_consumed = on_consumed  # called once the reader polled EndOfPartition
        self._backlog = 0
        self._num_priority = 0  # priority events at the head of the queue
        self._finished = False
        self._released = False
        self.num_buffers = 0
        self.num_bytes = 0
        #: called (in the reader's thread) with every event buffer the reader takes: a task
        #: waiting for its timeoutable barrier to leave sets it
        self.on_event_polled: Optional[Callable[[bytes], None]] = None
        #: perf_counter_ns since when the queue has held what it holds (0: empty), for
        #: transports that wait to batch buffers at most so long
        self.oldest_ns = 0

    def add(self, buffer: bytes, is_event: bool = False) -> None:
        with self._lock:
            if self._finished or self._released:
                released = self._released
            else:
                released = None
                was_empty = not self._queue
                if was_empty:
                    self.oldest_ns = time.perf_counter_ns()
                self._queue.append((buffer, is_event))
                if not is_event:
                    self._backlog += 1
                self.num_buffers += 1
                self.num_bytes += len(buffer)
                if is_event and self._on_flush is not None:
                    listener = self._on_flush  # events flush
                else:
                    listener = self._listener if (was_empty or self._every_buffer) else None
        if released is not None:
            if not is_event and self._recycle is not None:
                self._recycle(1)
            if released:
                return
            raise RuntimeError(f"subpartition {self.index} is already finished")
        if listener is not None:
            listener()

    def add_priority_event(self, buffer: bytes) -> List[Any]:
        """Queue event ``buffer`` ahead of every data buffer and return those data buffers (the
        ones it overtook, oldest first); nothing if the subpartition is finished or released."""
        with self._lock:
            if self._finished or self._released:
                return []
            q = self._queue
            n = self._num_priority
            overtaken = [b for i, (b, ev) in enumerate(q) if i >= n and not ev]
            if n == 0:
                q.appendleft((buffer, PRIORITY_EVENT))
            else:
                q.insert(n, (buffer, PRIORITY_EVENT))
            if len(q) == 1:
                self.oldest_ns = time.perf_counter_ns()
            self._num_priority = n + 1
            self.num_buffers += 1
            self.num_bytes += len(buffer)
            listener = self._on_flush or self._listener
        if listener is not None:
            listener()
        return overtaken

    def convert_to_priority(self, convert: Callable[[bytes], Optional[bytes]]) -> Optional[List[Any]]:
        """Flink's ``alignedBarrierTimeout``: the first queued (not priority) event for which
        ``convert`` returns a buffer is replaced by that buffer at the head of the queue, as a
        priority event; returns the data buffers that were ahead of it (now overtaken), or None
        if no queued event was converted."""
        with self._lock:
            q = self._queue
            n = self._num_priority
            for i in range(n, len(q)):
                b, ev = q[i]
                if ev and ev != PRIORITY_EVENT:
                    replacement = convert(b)
                    if replacement is not None:
                        overtaken = [q[j][0] for j in range(n, i) if not q[j][1]]
                        del q[i]
                        q.insert(n, (replacement, PRIORITY_EVENT))
                        self._num_priority = n + 1
                        listener = self._on_flush or self._listener
                        break
            else:
                return None
        if listener is not None:
            listener()
        return overtaken

    def finish(self) -> None:
        """Append EndOfPartition; nothing can be added afterwards."""
        with self._lock:
            if self._finished or self._released:
                return
            was_empty = not self._queue
            self._queue.append((_EOP_BYTES, True))
            self._finished = True
            self.num_buffers += 1
            self.num_bytes += len(_EOP_BYTES)
            listener = self._on_flush or (self._listener if was_empty else None)
        if listener is not None:
            listener()

    def flush(self) -> None:
        if self._on_flush is None:  # a local reader: it already sees every buffer
            return
        with self._lock:
            listener = self._on_flush if self._queue else None
        if listener is not None:
            listener()

    def create_read_view(
        self, listener: Callable[[], None], on_flush: Optional[Callable[[], None]] = None, every_buffer: bool = False
    ) -> "PipelinedSubpartition":
        """Register the reader's listeners (one reader); notifies at once if data is queued."""
        with self._lock:
            if self._released:
                raise PartitionReleasedError(f"subpartition {self.index} was released")
            self._listener = listener
            self._on_flush = on_flush
            self._every_buffer = every_buffer
            notify = bool(self._queue)
        if notify:
            (on_flush or listener)()
        return self

    def poll_buffer(self) -> Optional[BufferAndBacklog]:
        """Next buffer or event, or None if nothing is queued."""
        with self._lock:
            if self._released:
                raise PartitionReleasedError(f"subpartition {self.index} was released")
            if not self._queue:
                return None
            buffer, is_event = self._queue.popleft()
            if not is_event:
                self._backlog -= 1
            elif self._num_priority and is_event == PRIORITY_EVENT:
                self._num_priority -= 1
            q = self._queue
            self.oldest_ns = time.perf_counter_ns() if q else 0  # what is left waits afresh
            result = BufferAndBacklog(buffer, is_event, self._backlog, bool(q), bool(q) and q[0][1])
            consumed = is_event and self._finished and not q
        if not is_event and self._recycle is not None:
            self._recycle(1)
        elif consumed and self._on_consumed is not None:
            self._on_consumed()
        if is_event and self.on_event_polled is not None:
            self.on_event_polled(buffer)
        return result

    def peek_next_is_event(self) -> Optional[bool]:
        """None if empty, else whether the next item is an event."""
        with self._lock:
            return self._queue[0][1] if self._queue else None

    @property
    def backlog(self) -> int:
        """Queued data buffers (Flink's buffers in backlog)."""
        return self._backlog

    def is_available(self) -> bool:
        return bool(self._queue)

    @property
    def is_finished(self) -> bool:
        return self._finished

    @property
    def is_released(self) -> bool:
        return self._released

    def release(self) -> None:
        """Drop queued buffers (recycling their permits); readers then get PartitionReleasedError."""
        with self._lock:
            if self._released:
                return
            self._released = True
            n = sum(1 for _, ev in self._queue if not ev)
            self._queue.clear()
            self._backlog = 0
            self._num_priority = 0
        if n and self._recycle is not None:
            self._recycle(n)


class _BlockingView:
    """A reader of a BoundedBlockingSubpartition (own read position)."""

    def __init__(self, sub: "BoundedBlockingSubpartition", listener: Optional[Callable[[], None]]) -> None:
        self._sub = sub
        self._pos = 0
        self._data_read = 0
        self.listener = listener

    def poll_buffer(self) -> Optional[BufferAndBacklog]:
        sub = self._sub
        with sub._lock:
            if sub._released:
                raise PartitionReleasedError(f"subpartition {sub.index} was released")
            items = sub._items
            pos = self._pos
            if not sub._finished or pos >= len(items):
                return None
            buffer, is_event = items[pos]
            pos += 1
            self._pos = pos
            if not is_event:
                self._data_read += 1
            more = pos < len(items)
            return BufferAndBacklog(buffer, is_event, sub._data_count - self._data_read, more, more and items[pos][1])

    def peek_next_is_event(self) -> Optional[bool]:
        sub = self._sub
        with sub._lock:
            if not sub._finished or self._pos >= len(sub._items):
                return None
            return sub._items[self._pos][1]

    @property
    def backlog(self) -> int:
        sub = self._sub
        with sub._lock:
            return sub._data_count - self._data_read if sub._finished else 0

    def is_available(self) -> bool:
        sub = self._sub
        return sub._finished and self._pos < len(sub._items)


class BoundedBlockingSubpartition(ResultSubpartition):
    """Keeps all buffers; readable only after ``finish()`` (batch / BLOCKING exchange)."""

    def __init__(self, index: int) -> None:
        self.index = index
        self._items: List[Tuple[bytes, bool]] = []
        self._data_count = 0
        self._lock = threading.Lock()
        self._finished = False
        self._released = False
        self._views: List[_BlockingView] = []
        self._default_view: Optional[_BlockingView] = None
        self.num_buffers = 0
        self.num_bytes = 0

    def add(self, buffer: bytes, is_event: bool = False) -> None:
        with self._lock:
            if self._released:
                return
            if self._finished:
                raise RuntimeError(f"subpartition {self.index} is already finished")
            self._items.append((buffer, is_event))
            if not is_event:
                self._data_count += 1
            self.num_buffers += 1
            self.num_bytes += len(buffer)

    def finish(self) -> None:
        """Append EndOfPartition and make the data readable (notifies all readers)."""
        self.add(_EOP_BYTES, True)
        with self._lock:
            self._finished = True
            listeners = [v.listener for v in self._views if v.listener is not None]
        for listener in listeners:
            listener()

    def create_read_view(
        self,
        listener: Optional[Callable[[], None]] = None,
        on_flush: Optional[Callable[[], None]] = None,
        every_buffer: bool = False,
    ) -> _BlockingView:
        """A reader with its own position; ``listener`` (or ``on_flush``) is told once data is readable."""
        view = _BlockingView(self, on_flush or listener)
        with self._lock:
            if self._released:
                raise PartitionReleasedError(f"subpartition {self.index} was released")
            self._views.append(view)
            notify = self._finished and listener is not None
        if notify:
            listener()
        return view

    def poll_buffer(self) -> Optional[BufferAndBacklog]:
        """Read through a default view (None until finished)."""
        if self._default_view is None:
            self._default_view = self.create_read_view(None)
        return self._default_view.poll_buffer()

    @property
    def backlog(self) -> int:
        return self._data_count

    @property
    def is_finished(self) -> bool:
        return self._finished

    def release(self) -> None:
        with self._lock:
            self._released = True
            self._items = []


class ResultPartition:
    """The output of one producer subtask for one IntermediateResult: N subpartitions.

    ``sink(i)`` is the ``on_buffer(buffer, is_event)`` callable a
    ``RecordSerializer`` writes subpartition ``i`` through. ``finish()`` adds
    EndOfPartition to every subpartition (flush the writers first —
    ``RecordWriter.finish()`` does both).
    """

    def __init__(
        self,
        num_subpartitions: int,
        partition_type: "ResultPartitionType | str" = ResultPartitionType.PIPELINED_BOUNDED,
        buffer_pool: Optional[LocalBufferPool] = None,
        partition_id: Any = None,
    ) -> None:
        if num_subpartitions < 1:
            raise ValueError(f"a partition needs >= 1 subpartition, got {num_subpartitions}")
        self.partition_type = ResultPartitionType.of(partition_type)
        self.partition_id = partition_id
        self.buffer_pool = buffer_pool if self.partition_type.is_bounded else None
        self._owned_pool = buffer_pool  # destroyed when consumed / released, even if unused
        pool = self.buffer_pool
        self._lock = threading.Lock()
        self._num_consumed = 0
        if self.partition_type.is_pipelined:
            recycle = pool.recycle if pool is not None else None
            self.subpartitions: List[Any] = [
                PipelinedSubpartition(i, recycle, self._on_subpartition_consumed) for i in range(num_subpartitions)
            ]
        else:
            self.subpartitions = [BoundedBlockingSubpartition(i) for i in range(num_subpartitions)]
        self._finished = False
        self._released = False

    @property
    def num_subpartitions(self) -> int:
        return len(self.subpartitions)

    def sink(self, index: int) -> Callable[[bytes, bool], None]:
        """``on_buffer(buffer, is_event)`` for subpartition ``index``."""
        sub = self.subpartitions[index]
        pool = self.buffer_pool
        if pool is None:
            return sub.add
        add = sub.add
        take = pool.request_overdraft
        available = pool.is_available
        flush_all = self.flush_all

        def on_buffer(buffer: bytes, is_event: bool) -> None:
            if is_event:
                add(buffer, True)
                return
            take()
            add(buffer, False)
            if not available():  # the writer is about to block: readers must ship what they hold
                flush_all()

        return on_buffer

    def flush(self, index: int) -> None:
        """Flink's ``ResultPartition.flush(i)``: notify subpartition ``i``'s reader of a flush."""
        self.subpartitions[index].flush()

    def flush_all(self) -> None:
        for s in self.subpartitions:
            s.flush()

    def broadcast_sink(self) -> Callable[[bytes, bool], None]:
        """``on_buffer`` that appends every buffer to all subpartitions (one permit each)."""
        sinks = [self.sink(i) for i in range(self.num_subpartitions)]

        def on_buffer(buffer: bytes, is_event: bool) -> None:
            for s in sinks:
                s(buffer, is_event)

        return on_buffer

    def broadcast_priority_event(self, buffer: bytes) -> List[List[Any]]:
        """``add_priority_event`` to every subpartition (flush the writer first, so its partial
        buffers are queued): the data buffers the event overtook, per subpartition."""
        if not self.partition_type.is_pipelined:
            raise ValueError("priority events (unaligned checkpoints) need a pipelined partition")
        return [s.add_priority_event(buffer) for s in self.subpartitions]

    def create_subpartition_view(self, index: int, listener: Callable[[], None]) -> Any:
        return self.subpartitions[index].create_read_view(listener)

    def finish(self) -> None:
        """EndOfPartition to every subpartition; the partition takes no more data."""
        if self._finished:
            return
        self._finished = True
        for s in self.subpartitions:
            s.finish()

    @property
    def is_finished(self) -> bool:
        return self._finished

    def _on_subpartition_consumed(self) -> None:
        with self._lock:
            self._num_consumed += 1
            all_consumed = self._num_consumed == len(self.subpartitions)
        if all_consumed:  # Flink: a pipelined partition is released once fully consumed
            self._destroy_pool()

    @property
    def is_consumed(self) -> bool:
        """True once every (pipelined) subpartition's reader polled EndOfPartition."""
        return self._num_consumed == len(self.subpartitions)

    def _destroy_pool(self) -> None:
        pool = self._owned_pool
        self._owned_pool = None
        if pool is not None:
            pool.destroy()

    def release(self) -> None:
        """Drop all data (cancellation/failover/batch cleanup), give the buffer pool back;
        readers then get PartitionReleasedError."""
        if self._released:
            return
        self._released = True
        for s in self.subpartitions:
            s.release()
        self._destroy_pool()

    @property
    def is_released(self) -> bool:
        return self._released

    def is_available(self) -> bool:
        """False while the output buffer pool is exhausted (back pressure)."""
        pool = self.buffer_pool
        return True if pool is None else pool.is_available()

    def get_available_future(self) -> Future:
        pool = self.buffer_pool
        return completed_future() if pool is None else pool.get_available_future()

    @property
    def num_buffers_out(self) -> int:
        return sum(s.num_buffers for s in self.subpartitions)

    @property
    def num_bytes_out(self) -> int:
        return sum(s.num_bytes for s in self.subpartitions)

    def usage(self) -> float:
        """``outPoolUsage``."""
        pool = self.buffer_pool
        return 0.0 if pool is None else pool.usage()
