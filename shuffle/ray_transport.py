"""The network between TaskExecutors over Ray actor calls: Flink's ``NettyConnectionManager``.

This is the one module of ``shuffle/`` that imports Ray. One logical connection
per (producer executor, consumer executor) pair multiplexes all channels, like
Flink's Netty connection:

* consumer -> producer: ``request_partition`` (open a channel with its initial
  credit) and batched ``add_credit`` announcements;
* producer -> consumer: batched ``receive_buffers``: several
  ``BufferResponse``s (buffer, backlog, sequence number) for any channels of
  that consumer in one call (up to ``max_batch_bytes``), at most ``window`` calls
  in flight.

A producer sends a data buffer only while its reader holds credit
(``CreditBasedSequenceNumberingViewReader``); the consumer's
``CreditBasedInputChannel`` grants credit from its exclusive and floating
buffers, so at most exclusive + floating buffers per channel are ever queued.
Each connection numbers its calls and the receiver applies them in that order,
so buffers reach each channel in sequence even on a threaded actor.
"""

from __future__ import annotations

import threading
from collections import deque
from typing import Any, Callable, Optional

import ray

from raylink.shuffle.credit import (
    BufferResponse,
    CreditBasedInputChannel,
    CreditBasedSequenceNumberingViewReader,
)

DEFAULT_WINDOW = 8
DEFAULT_MAX_BATCH_BYTES = 96 * 1024


class _Sender:
    """A daemon thread that ships batches to one peer with a bounded window of calls."""

    def __init__(self, name: str, window: int) -> None:
        self._cond = threading.Condition()
        self._closed = False
        self._inflight: list = []
        self._window = window
        self.error: Optional[BaseException] = None
        self.num_calls = 0
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def wake(self) -> None:
        with self._cond:
            self._cond.notify()

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify()

    def _has_work(self) -> bool:  # called with the condition held
        raise NotImplementedError

    def _take_batch(self) -> Any:
        raise NotImplementedError

    def _send(self, batch: Any) -> Any:
        raise NotImplementedError

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._closed and not self._has_work():
                    self._cond.wait()
                if self._closed:
                    return
            batch = self._take_batch()
            if not batch:
                continue
            while len(self._inflight) >= self._window:
                ready, self._inflight = ray.wait(self._inflight, num_returns=1, fetch_local=False)
                try:
                    ray.get(ready)
                except Exception as exc:  # the peer died: nothing more can be delivered
                    self.error = exc
                    return
            self._inflight.append(self._send(batch))
            self.num_calls += 1


class _BufferSender(_Sender):
    """Producer side of one connection: round robin over readers with data and credit."""

    def __init__(self, transport: "RayTransport", consumer_id: str, handle: Any) -> None:
        self._transport = transport
        self._consumer_id = consumer_id
        self._handle = handle
        self._available: deque = deque()
        self._queued: set = set()
        self._seq = 0
        self.num_buffers = 0
        super().__init__(f"sender {transport.executor_id}->{consumer_id}", transport.window)

    def notify(self, reader: CreditBasedSequenceNumberingViewReader) -> None:
        with self._cond:
            if id(reader) not in self._queued:
                self._queued.add(id(reader))
                self._available.append(reader)
                self._cond.notify()

    def _has_work(self) -> bool:
        return bool(self._available)

    def _take_batch(self) -> list:
        batch: list = []
        size = 0
        limit = self._transport.max_batch_bytes
        while size < limit:
            with self._cond:
                if not self._available:
                    break
                reader = self._available.popleft()
                self._queued.discard(id(reader))
            response = reader.poll_next()
            if response is None:
                continue
            batch.append(
                (reader.receiver_id, response.buffer, response.is_event, response.backlog,
                 response.sequence_number)
            )
            size += len(response.buffer)
            if reader.is_available():
                self.notify(reader)
        self.num_buffers += len(batch)
        return batch

    def _send(self, batch: list) -> Any:
        seq = self._seq
        self._seq += 1
        return self._handle.receive_buffers.remote(self._transport.executor_id, seq, batch)


class _CreditSender(_Sender):
    """Consumer side of one connection: accumulated credit per channel, sent in batches."""

    def __init__(self, transport: "RayTransport", producer_id: str, handle: Any) -> None:
        self._transport = transport
        self._handle = handle
        self._credit: dict[str, int] = {}
        super().__init__(f"credit {transport.executor_id}->{producer_id}", transport.window)

    def announce(self, channel_id: str, credit: int) -> None:
        with self._cond:
            self._credit[channel_id] = self._credit.get(channel_id, 0) + credit
            self._cond.notify()

    def _has_work(self) -> bool:
        return bool(self._credit)

    def _take_batch(self) -> list:
        with self._cond:
            batch = list(self._credit.items())
            self._credit.clear()
        return batch

    def _send(self, batch: list) -> Any:
        return self._handle.add_credit.remote(self._transport.executor_id, batch)


class RayTransport:
    """Both ends of every remote channel of one TaskExecutor."""

    def __init__(
        self,
        executor_id: str,
        partition_lookup: Callable[[str], Any],
        window: int = DEFAULT_WINDOW,
        max_batch_bytes: int = DEFAULT_MAX_BATCH_BYTES,
    ) -> None:
        self.executor_id = executor_id
        self.partition_lookup = partition_lookup
        self.window = window
        self.max_batch_bytes = max_batch_bytes
        self.peers: dict[str, Any] = {}
        self._lock = threading.Lock()
        self._buffer_senders: dict[str, _BufferSender] = {}
        self._credit_senders: dict[str, _CreditSender] = {}
        self._readers: dict[tuple[str, str], CreditBasedSequenceNumberingViewReader] = {}
        self._pending_credit: dict[tuple[str, str], int] = {}
        self._channels: dict[str, CreditBasedInputChannel] = {}
        self._inbound: dict[str, list] = {}  # producer id -> [next seq, {seq: batch}]
        self._inbound_lock = threading.Lock()
        self._channel_ids = 0

    def register_peers(self, peers: dict[str, Any]) -> None:
        self.peers.update(peers)

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
            sender = self._credit_senders.get(producer_id)
            if sender is None:
                sender = _CreditSender(self, producer_id, self.peers[producer_id])
                self._credit_senders[producer_id] = sender
        channel = CreditBasedInputChannel(
            floating_pool, exclusive_buffers, network_pool,
            announce_credit=lambda n: sender.announce(channel_id, n),
        )
        producer = self.peers[producer_id]

        def request(initial_credit: int) -> None:
            producer.request_partition.remote(
                self.executor_id, channel_id, partition_id, subpartition_index, initial_credit
            )

        channel.request = request
        self._channels[channel_id] = channel
        return channel

    def receive_buffers(self, producer_id: str, seq: int, batch: list) -> None:
        """Apply the connection's calls in the order they were sent."""
        with self._inbound_lock:
            state = self._inbound.setdefault(producer_id, [0, {}])
            state[1][seq] = batch
            channels = self._channels
            while state[0] in state[1]:
                ready = state[1].pop(state[0])
                state[0] += 1
                for channel_id, buffer, is_event, backlog, sequence_number in ready:
                    channels[channel_id].on_buffer(
                        BufferResponse(buffer, is_event, backlog, sequence_number)
                    )

    # -- producer side -----------------------------------------------------------------------
    def request_partition(
        self, consumer_id: str, channel_id: str, partition_id: str, subpartition_index: int, initial_credit: int
    ) -> None:
        partition = self.partition_lookup(partition_id)
        with self._lock:
            sender = self._buffer_senders.get(consumer_id)
            if sender is None:
                sender = _BufferSender(self, consumer_id, self.peers[consumer_id])
                self._buffer_senders[consumer_id] = sender
            key = (consumer_id, channel_id)
            reader = CreditBasedSequenceNumberingViewReader(
                partition.subpartitions[subpartition_index], receiver_id=channel_id, on_available=sender.notify
            )
            self._readers[key] = reader
            extra = self._pending_credit.pop(key, 0)
        reader.request_subpartition()
        reader.add_credit(initial_credit + extra)
        if reader.is_available():
            sender.notify(reader)

    def add_credit(self, consumer_id: str, credits: list) -> None:
        for channel_id, credit in credits:
            key = (consumer_id, channel_id)
            with self._lock:
                reader = self._readers.get(key)
                if reader is None:  # overtook its partition request: keep it for later
                    self._pending_credit[key] = self._pending_credit.get(key, 0) + credit
                    continue
            reader.add_credit(credit)

    # -- metrics and teardown --------------------------------------------------------------------
    def stats(self) -> dict:
        return {
            "remoteBuffersSent": sum(s.num_buffers for s in self._buffer_senders.values()),
            "remoteCalls": sum(s.num_calls for s in self._buffer_senders.values()),
            "remoteChannels": len(self._channels),
            "maxBuffersInFlightPerChannel": max(
                (c.max_buffers_in_flight for c in self._channels.values()), default=0
            ),
            "creditPerChannel": max(
                (c.initial_credit + (c.floating_pool.max_buffers or 0 if c.floating_pool else 0)
                 for c in self._channels.values()), default=0
            ),
        }

    def close(self) -> None:
        for sender in list(self._buffer_senders.values()) + list(self._credit_senders.values()):
            sender.close()
