"""The network between TaskExecutors over Ray actor calls: Flink's ``NettyConnectionManager``.

It talks to Ray (its peers are actor handles), so it lives in ``actors/``; the
channels and readers it connects are ``shuffle/``'s. One logical connection per
(producer executor, consumer executor) pair multiplexes all channels, like
Flink's Netty connection:

* consumer -> producer: ``request_partition`` (open a channel with its initial
  credit), batched ``add_credit`` announcements and
  ``set_buffer_size`` (Flink's buffer debloating, see ``buffer_debloater``);
* producer -> consumer: batched ``receive_buffers``: several
  ``BufferResponse``s (buffer, backlog, sequence number) for any channels of
  that consumer in one call (up to ``max_batch_bytes``), at most
  ``max_calls_in_flight`` calls under way per connection: what is flushed while
  they are (with buffer timeout 0, every emit) leaves together in the next call,
  made when one completes. Like Netty's write coalescing; without it a call per
  small flush costs both processes more CPU than the records do, and latency
  grows with the queue of calls.

Calls are made by whichever thread has something to send (the task thread
that filled a buffer, the actor thread that received credit) — no sender
threads: on a busy executor each extra thread that needs the GIL costs the
task thread a hand-over of several hundred microseconds.

A producer sends a data buffer only while its reader holds credit
(``CreditBasedSequenceNumberingViewReader``); the consumer's
``CreditBasedInputChannel`` grants credit from its exclusive and floating
buffers, so at most exclusive + floating buffers per channel are ever queued.
Each connection numbers its calls and the receiver applies them in that order,
so buffers reach each channel in sequence even on a threaded actor. A priority event (the
barrier of an unaligned checkpoint, ``is_event`` = ``PRIORITY_EVENT``) travels like any
event, in order, and overtakes the received buffers in the consumer's channel
(``CreditBasedInputChannel``).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any, Callable

from raylink.core.options import RaylinkOptions
from raylink.shuffle.credit import (
    BufferResponse,
    CreditBasedInputChannel,
    CreditBasedSequenceNumberingViewReader,
)

DEFAULT_MAX_BATCH_BYTES = RaylinkOptions.MAX_BATCH_BYTES.default
#: ``raylink.network.max-batch-delay``: a full buffer waits at most this long for its batch
DEFAULT_MAX_BATCH_DELAY_MS = RaylinkOptions.MAX_BATCH_DELAY.default
DEFAULT_MAX_CALLS_IN_FLIGHT = RaylinkOptions.MAX_CALLS_IN_FLIGHT.default
MAX_BATCH_BUFFERS = 32  # tiny segments: credit stays at 2 x 32 buffers per channel


#: for a Ray that raylink starts: call arguments up to 2 MiB travel inline
RAY_SYSTEM_CONFIG = {"max_direct_call_object_size": 2 * 1024 * 1024}


def inline_call_limit(max_batch_bytes: int) -> int:
    """The ``max_direct_call_object_size`` a batch needs to travel inline in its call.

    Ray moves call arguments above that size (100 KiB by default) through the
    object store and the raylet, which costs more CPU on a busy node than the
    call itself.
    """
    return max(100 * 1024, max_batch_bytes + 64 * 1024)


@dataclass(slots=True)
class _InboundConnection:
    """The receiving end of one producer's connection: the sequence number of the call to
    apply next and the calls that overtook it (``receive_buffers`` runs on several actor
    threads)."""

    next_seq: int = 0
    pending: dict = field(default_factory=dict)  # seq -> batch


class _Connection:
    """One direction of the connection to a peer: calls made from the thread that
    has something to send (no sender thread, no GIL hand-over). Their results are
    not kept: a lost peer fails the job through the JobMaster, and an error in a
    call is logged by Ray as an unhandled error of its reference."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._lock = threading.Lock()
        self.num_calls = 0

    def _submitted(self, _ref: Any) -> None:
        with self._lock:
            self.num_calls += 1


class PartitionRequestQueue(_Connection):
    """Producer end of one connection (Flink's ``PartitionRequestQueue``).

    Readers call ``notify(reader, flushed)``; buffers are shipped, as several
    ``BufferResponse``s per ``receive_buffers`` call, when the writer flushed
    or added an event, when some reader's credit is used up by its queued
    buffers, when ``batch_buffers`` are ready, or when the oldest queued buffer
    has waited ``max_batch_delay`` — otherwise they wait a little: until the
    writer's next flush (its buffer timeout; with -1, until a batch is full or
    end of input) or until its pool runs dry, which flushes too. Every Ray call
    costs both processes 1-3 ms of CPU, so fewer, larger calls are what makes
    the transport fast: while ``max_calls_in_flight`` calls are under way,
    nothing more is sent; the completion of one ships what became sendable
    meanwhile (a reader's flush stays pending until its buffers leave).
    """

    def __init__(self, transport: "RayTransport", consumer_id: str, handle: Any) -> None:
        super().__init__(f"{transport.executor_id}->{consumer_id}")
        self._transport = transport
        self._handle = handle
        self._readers: list = []
        self._next = 0  # round-robin start
        self._seq = 0
        self.num_buffers = 0
        self._in_flight = 0
        self._deferred = False  # something asked to be sent while the calls were under way
        self.max_in_flight = 0

    def add_reader(self, reader: CreditBasedSequenceNumberingViewReader) -> None:
        with self._lock:
            self._readers.append(reader)

    def notify(self, reader: CreditBasedSequenceNumberingViewReader, flushed: bool = False) -> None:
        transport = self._transport
        batch = transport.batch_buffers
        delay = transport.max_batch_delay_ns
        while True:
            with self._lock:
                if self._in_flight >= transport.max_calls_in_flight:
                    self._deferred = True
                    return
                if not flushed and not any(r.should_send(batch, delay) for r in self._readers):
                    return
                responses, more = self._take_batch()
                if not responses:
                    return
                seq = self._seq
                self._seq = seq + 1
                self._in_flight += 1
                if self._in_flight > self.max_in_flight:
                    self.max_in_flight = self._in_flight
            ref = self._handle.receive_buffers.remote(transport.executor_id, seq, responses)
            self._submitted(ref)
            ref.future().add_done_callback(self._call_done)  # on a Ray thread; a failed call completes too
            if not more:
                return
            flushed = False  # the rest of a flush is still marked on its readers

    def _call_done(self, _future: Any) -> None:
        with self._lock:
            self._in_flight -= 1
            deferred = self._deferred
            self._deferred = False
        if deferred:
            self.notify(None)

    def _take_batch(self) -> tuple:
        """Round robin over the readers: everything sendable, up to max_batch_bytes."""
        batch: list = []
        size = 0
        limit = self._transport.max_batch_bytes
        readers = self._readers
        n = len(readers)
        start = self._next
        self._next = (start + 1) % n if n else 0
        for i in range(n):
            reader = readers[(start + i) % n]
            while size < limit:
                response = reader.poll_next()
                if response is None:
                    break
                batch.append(
                    (reader.receiver_id, response.buffer, response.is_event, response.backlog, response.sequence_number)
                )
                size += len(response.buffer)
            if size >= limit:
                self.num_buffers += len(batch)
                return batch, True
        self.num_buffers += len(batch)
        return batch, False


class CreditAnnouncer(_Connection):
    """Consumer end of one connection: ``add_credit`` calls, made by the thread that freed the buffers."""

    def __init__(self, transport: "RayTransport", producer_id: str, handle: Any) -> None:
        super().__init__(f"{transport.executor_id}->{producer_id}")
        self._transport = transport
        self._handle = handle

    def announce(self, channel_id: str, credit: int) -> None:
        self._submitted(self._handle.add_credit.remote(self._transport.executor_id, [(channel_id, credit)]))

    def announce_buffer_size(self, channel_id: str, size: int) -> None:
        self._submitted(self._handle.set_buffer_size.remote(self._transport.executor_id, [(channel_id, size)]))


class RayTransport:
    """Both ends of every remote channel of one TaskExecutor.

    ``buffer_size`` and ``max_batch_bytes`` give the batch a sender aims for
    (``batch_buffers``). A remote channel keeps credit for two batches (one in
    flight while the next one fills) and announces freed buffers a batch at a
    time; its gate gets the floating buffers that takes
    (``min_floating_buffers``) when the configured number is smaller.
    """

    def __init__(
        self,
        executor_id: str,
        partition_lookup: Callable[[str], Any],
        buffer_size: int = 32 * 1024,
        max_batch_bytes: int = DEFAULT_MAX_BATCH_BYTES,
        max_batch_delay_ms: float = DEFAULT_MAX_BATCH_DELAY_MS,
        max_calls_in_flight: int = DEFAULT_MAX_CALLS_IN_FLIGHT,
    ) -> None:
        self.executor_id = executor_id
        self.partition_lookup = partition_lookup
        self.max_batch_bytes = max_batch_bytes
        self.max_batch_delay_ns = int(max_batch_delay_ms * 1_000_000)
        self.max_calls_in_flight = max(1, max_calls_in_flight)
        self.batch_buffers = min(MAX_BATCH_BUFFERS, max(1, max_batch_bytes // buffer_size))
        self.peers: dict[str, Any] = {}
        self._lock = threading.Lock()
        self._queues: dict[str, PartitionRequestQueue] = {}
        self._announcers: dict[str, CreditAnnouncer] = {}
        self._readers: dict[tuple[str, str], CreditBasedSequenceNumberingViewReader] = {}
        self._pending_credit: dict[tuple[str, str], int] = {}
        self._pending_sizes: dict[tuple[str, str], int] = {}
        self._channels: dict[str, CreditBasedInputChannel] = {}
        self._inbound: dict[str, _InboundConnection] = {}  # by producer id
        self._inbound_lock = threading.Lock()
        self._channel_ids = 0

    def register_peers(self, peers: dict[str, Any]) -> None:
        self.peers.update(peers)

    def min_floating_buffers(self, exclusive_buffers: int) -> int:
        """Floating buffers a gate with remote channels needs for two batches in flight."""
        return max(0, 2 * self.batch_buffers - exclusive_buffers)

    def extra_output_buffers(self) -> int:
        """Buffers a result partition's pool needs beyond Flink's size so that a whole
        batch can queue up for a remote reader (a pool that runs dry ships what it has)."""
        return self.batch_buffers

    # -- consumer side -----------------------------------------------------------------------
    def create_input_channel(
        self,
        producer_id: str,
        partition_id: str,
        subpartition_index: int,
        floating_pool: Any,
        exclusive_buffers: int,
        network_pool: Any,
    ) -> CreditBasedInputChannel:
        with self._lock:
            self._channel_ids += 1
            channel_id = f"{self.executor_id}#{self._channel_ids}"
            announcer = self._announcers.get(producer_id)
            if announcer is None:
                announcer = CreditAnnouncer(self, producer_id, self.peers[producer_id])
                self._announcers[producer_id] = announcer
        batch = self.batch_buffers
        producer = self.peers[producer_id]

        def request(initial_credit: int) -> None:
            producer.request_partition.remote(
                self.executor_id, channel_id, partition_id, subpartition_index, initial_credit
            )

        channel = CreditBasedInputChannel(
            floating_pool,
            exclusive_buffers,
            network_pool,
            announce_credit=lambda n: announcer.announce(channel_id, n),
            min_credit=2 * batch,
            announce_threshold=batch,
            request=request,
            announce_buffer_size=lambda size: announcer.announce_buffer_size(channel_id, size),
        )
        self._channels[channel_id] = channel
        return channel

    def receive_buffers(self, producer_id: str, seq: int, batch: list) -> None:
        """Apply the connection's calls in the order they were sent."""
        with self._inbound_lock:
            inbound = self._inbound.get(producer_id)
            if inbound is None:
                inbound = self._inbound[producer_id] = _InboundConnection()
            pending = inbound.pending
            pending[seq] = batch
            channels = self._channels
            while inbound.next_seq in pending:
                ready = pending.pop(inbound.next_seq)
                inbound.next_seq += 1
                for channel_id, buffer, is_event, backlog, sequence_number in ready:
                    channels[channel_id].on_buffer(BufferResponse(buffer, is_event, backlog, sequence_number))

    # -- producer side -----------------------------------------------------------------------
    def request_partition(
        self, consumer_id: str, channel_id: str, partition_id: str, subpartition_index: int, initial_credit: int
    ) -> None:
        partition = self.partition_lookup(partition_id)
        subpartition = partition.subpartitions[subpartition_index]
        with self._lock:
            queue = self._queues.get(consumer_id)
            if queue is None:
                queue = PartitionRequestQueue(self, consumer_id, self.peers[consumer_id])
                self._queues[consumer_id] = queue
            key = (consumer_id, channel_id)
            reader = CreditBasedSequenceNumberingViewReader(
                subpartition, receiver_id=channel_id, on_available=queue.notify
            )
            self._readers[key] = reader
            extra = self._pending_credit.pop(key, 0)
            buffer_size = self._pending_sizes.pop(key, None)
        if buffer_size is not None:  # a debloater's announcement that overtook this request
            subpartition.set_buffer_size(buffer_size)
        queue.add_reader(reader)
        reader.request_subpartition(every_buffer=True)
        reader.add_credit(initial_credit + extra)

    def add_credit(self, consumer_id: str, credits: list) -> None:
        for channel_id, credit in credits:
            key = (consumer_id, channel_id)
            with self._lock:
                reader = self._readers.get(key)
                if reader is None:  # overtook its partition request: keep it for later
                    self._pending_credit[key] = self._pending_credit.get(key, 0) + credit
                    continue
            reader.add_credit(credit)

    def set_buffer_size(self, consumer_id: str, sizes: list) -> None:
        """A consumer's debloater asks for new buffer sizes: ``[(channel_id, size), ...]``."""
        for channel_id, size in sizes:
            key = (consumer_id, channel_id)
            with self._lock:
                reader = self._readers.get(key)
                if reader is None:  # overtook its partition request
                    self._pending_sizes[key] = size
                    continue
            reader.subpartition.set_buffer_size(size)

    # -- metrics -------------------------------------------------------------------------------
    def stats(self) -> dict:
        return {
            "remoteBuffersSent": sum(q.num_buffers for q in self._queues.values()),
            "remoteCalls": sum(q.num_calls for q in self._queues.values()),
            "remoteCreditCalls": sum(a.num_calls for a in self._announcers.values()),
            "maxCallsInFlight": max((q.max_in_flight for q in self._queues.values()), default=0),
            "remoteChannels": len(self._channels),
            "maxBuffersInFlightPerChannel": max((c.max_buffers_in_flight for c in self._channels.values()), default=0),
            "creditPerChannel": max(
                (
                    c.initial_credit + (c.floating_pool.max_buffers or 0 if c.floating_pool else 0)
                    for c in self._channels.values()
                ),
                default=0,
            ),
        }

    def close(self) -> None:
        """Forget every channel, reader and connection: the executor's tasks are gone.

        Nothing runs in the background (calls are made by the threads that send), so there
        is nothing to stop; but a channel of a task that failed while suspended on its input
        leads through its gate's availability future to that task's mailbox, so while the
        transport keeps it, the task and its state stay reachable."""
        with self._lock:
            self._queues.clear()
            self._announcers.clear()
            self._readers.clear()
            self._pending_credit.clear()
            self._pending_sizes.clear()
            self._channels.clear()
        with self._inbound_lock:
            self._inbound.clear()
