"""Input side: Flink's ``InputChannel``, ``LocalInputChannel``, ``SingleInputGate``,
``UnionInputGate`` and ``StreamTaskNetworkInput``.

An ``InputGate`` has one channel per consumed subpartition and a queue of the
channels that have data; a channel is queued once, when its producer signals
that data became available (``notify_channel_non_empty``, called from the
producer's thread), and re-queued by ``poll_next`` while it has more. The
task thread calls ``poll_next()`` until it returns None and then waits on
``get_available_future()`` (a ``concurrent.futures.Future`` completed by the
next notification or when the gate is finished). Events are decoded by the
gate: ``poll_next`` returns ``(channel_index, bytes)`` for a data buffer and
``(channel_index, event)`` for an event; ``EndOfPartition`` marks the channel
finished and ``is_finished()`` turns True once every channel delivered it.

Channel blocking (Flink's ``blockConsumption`` / ``resumeConsumption``, for
aligned checkpoints): ``block_channel(i)`` takes channel ``i`` out of the
queue; ``poll_next`` returns nothing of it until ``resume_consumption()``
(all channels, alias ``unblock_all``) or ``resume_consumption(i)``, which
re-queues it if it holds data and completes the availability future. A
blocked channel's buffers stay in the channel: a credit-based channel
announces no credit for them, so its sender stops within its credit, and a
local channel's producer runs out of output buffers (back pressure). While
blocked, a channel counts as queued, so its producer's notifications are
dropped with the existing check: ``poll_next`` and the notification path
cost nothing extra.

``StreamTaskNetworkInput`` adds one ``RecordDeserializer`` per channel and a
``StatusWatermarkValve``: its ``poll_next()`` returns the grouped stream items
of one buffer (runs of records as lists, ``TimestampedRecords``, aligned
``Watermark``/``WatermarkStatus`` changes, ``LatencyMarker``,
``CheckpointBarrier``, ``EndOfPartition``).

Unaligned checkpoints (Flink's ``ChannelStatePersister``): ``start_persisting(id,
channels)`` makes ``StreamTaskNetworkInput`` record, per listed channel, the start of an
element its deserializer holds and every data buffer it then reads there, until
``stop_persisting(id, channel)`` (barrier ``id`` arrived on it) adds the received buffers
that barrier overtook in its channel (``take_overtaken``) and hands the lot over.
``recover(states)`` makes it return a restored checkpoint's persisted buffers of every
channel before anything of its gate.

Thread safety: notifications may come from any thread; everything else is
for the single task thread.
"""

from __future__ import annotations

import threading
from collections import deque
from concurrent.futures import Future
from typing import Any, Deque, Dict, List, Optional, Sequence, Tuple

from raylink.shuffle.buffer_pool import _AvailabilityHelper, _complete, completed_future
from raylink.shuffle.channel_state import PartialRecord
from raylink.shuffle.codec import decode_event, encode_event
from raylink.shuffle.elements import (
    END_OF_PARTITION,
    CheckpointBarrier,
    EndOfPartition,
    Watermark,
    WatermarkStatus,
)
from raylink.shuffle.serializer import ObjectBuffer, RecordDeserializer
from raylink.shuffle.watermark_valve import StatusWatermarkValve

__all__ = [
    "InputChannel",
    "LocalInputChannel",
    "InputGate",
    "SingleInputGate",
    "UnionInputGate",
    "StreamTaskNetworkInput",
]


def _as_unaligned(buffer: bytes, checkpoint_id: int) -> Optional[bytes]:
    """The unaligned form of ``buffer`` if it is an aligned barrier of ``checkpoint_id``."""
    event = decode_event(buffer)
    if type(event) is CheckpointBarrier and event.checkpoint_id == checkpoint_id and not event.unaligned:
        return encode_event(event.as_unaligned())
    return None


class InputChannel:
    """One input of a gate, reading one subpartition.

    Subclasses implement ``request_subpartition()`` and ``get_next_buffer()``
    (-> ``BufferAndBacklog``-like ``(buffer, is_event, backlog, more_available,
    ...)`` or None) and call ``notify_channel_non_empty()`` when data arrives.
    """

    def __init__(self) -> None:
        self.gate: Optional["InputGate"] = None
        self.channel_index = -1
        self.is_finished = False
        self._queued = False  # in the gate's queue, or blocked
        self._blocked = False

    def _attach(self, gate: "InputGate", index: int) -> None:
        self.gate = gate
        self.channel_index = index

    def request_subpartition(self) -> None:
        raise NotImplementedError

    def get_next_buffer(self) -> Optional[Tuple]:
        raise NotImplementedError

    def notify_channel_non_empty(self) -> None:
        gate = self.gate
        if gate is not None:
            gate.notify_channel_non_empty(self)

    def has_queued_data(self) -> bool:
        """Whether buffers or events wait in this channel (asked when it is unblocked;
        True when unsure: a spurious wake-up of the gate is harmless)."""
        return True

    @property
    def is_blocked(self) -> bool:
        return self._blocked

    def release(self) -> None:
        pass


class LocalInputChannel(InputChannel):
    """Reads a subpartition of the same process directly (its availability listener)."""

    def __init__(self, subpartition: Any) -> None:
        super().__init__()
        self.subpartition = subpartition
        self._view: Any = None
        self._overtaken: Optional[List[Any]] = None

    def request_subpartition(self) -> None:
        if self._view is None:
            self._view = self.subpartition.create_read_view(self.notify_channel_non_empty)

    def get_next_buffer(self) -> Optional[Tuple]:
        view = self._view
        if view is None:
            raise RuntimeError("request_subpartition() was not called")
        return view.poll_buffer()

    def convert_barrier(self, checkpoint_id: int) -> bool:
        """Task thread: the aligned barrier of ``checkpoint_id`` still queued in the subpartition
        overtakes the data ahead of it (its checkpoint went unaligned here); that data is this
        task's to persist (``take_overtaken``). False if it is not queued."""
        convert = getattr(self.subpartition, "convert_to_priority", None)
        if convert is None:
            return False
        overtaken = convert(lambda buffer: _as_unaligned(buffer, checkpoint_id))
        if overtaken is None:
            return False
        self._overtaken = overtaken
        return True

    def take_overtaken(self) -> List[Any]:
        overtaken, self._overtaken = self._overtaken, None
        return overtaken or []

    def has_queued_data(self) -> bool:
        view = self._view
        return view is not None and view.is_available()

    def __repr__(self) -> str:
        return f"LocalInputChannel(index={self.channel_index})"


class InputGate:
    """Flink's ``SingleInputGate``: the channels of one logical input."""

    #: a BufferDebloater sizing the buffers of ``debloated_channels`` (set by the TaskExecutor)
    debloater: Any = None
    debloated_channels: Sequence[Any] = ()

    def __init__(self, channels: Sequence[InputChannel] = (), gate_index: int = 0, name: str = "") -> None:
        self.gate_index = gate_index
        self.name = name
        self.channels: List[InputChannel] = []
        self._lock = threading.Lock()
        self._queue: Deque[InputChannel] = deque()
        self._helper = _AvailabilityHelper()
        self._num_finished = 0
        self._num_blocked = 0
        self._requested = False
        self.num_buffers_in = 0
        self.num_bytes_in = 0
        self.num_events_in = 0
        for ch in channels:
            self.add_channel(ch)

    def add_channel(self, channel: InputChannel) -> int:
        if self._requested:
            raise RuntimeError("cannot add channels after request_partitions()")
        index = len(self.channels)
        channel._attach(self, index)
        self.channels.append(channel)
        return index

    @property
    def num_channels(self) -> int:
        return len(self.channels)

    def request_partitions(self) -> None:
        """Connect every channel to its subpartition (data may flow from now on)."""
        if self._requested:
            return
        self._requested = True
        for ch in self.channels:
            ch.request_subpartition()

    setup = request_partitions

    # -- producer side (any thread) ----------------------------------------------------
    def notify_channel_non_empty(self, channel: InputChannel) -> None:
        """Queue ``channel`` (once) and wake the task if the gate was empty."""
        with self._lock:
            if channel._queued:
                return
            channel._queued = True
            self._queue.append(channel)
            f = self._helper.take_to_complete() if len(self._queue) == 1 else None
        _complete(f)

    # -- task side ---------------------------------------------------------------------
    def poll_next(self) -> Optional[Tuple[int, Any]]:
        """Next ``(channel_index, bytes | event)`` or None if no channel has data."""
        while True:
            with self._lock:
                if not self._queue:
                    return None
                ch = self._queue.popleft()
                ch._queued = False
            r = ch.get_next_buffer()
            if r is None:
                continue
            buffer, is_event, _backlog, more = r[0], r[1], r[2], r[3]
            if more:
                self.notify_channel_non_empty(ch)
            if not is_event:
                self.num_buffers_in += 1
                self.num_bytes_in += len(buffer)
                return ch.channel_index, buffer
            self.num_events_in += 1
            event = decode_event(buffer)
            if type(event) is EndOfPartition and not ch.is_finished:
                ch.is_finished = True
                ch.release()
                with self._lock:
                    self._num_finished += 1
                    done = self._num_finished == len(self.channels)
                    f = self._helper.take_to_complete() if done else None
                _complete(f)
            return ch.channel_index, event

    # -- blocking (aligned checkpoints; task thread) --------------------------------------
    def block_channel(self, index: int) -> None:
        """Return nothing more of channel ``index`` until it is resumed (no-op if blocked)."""
        ch = self._channel(index)
        with self._lock:
            if ch._blocked:
                return
            if ch._queued:
                self._queue.remove(ch)  # O(queued channels); once per barrier
            ch._queued = True  # notifications are dropped while blocked
            ch._blocked = True
            self._num_blocked += 1

    def resume_consumption(self, index: Optional[int] = None) -> None:
        """Unblock channel ``index``, or every blocked channel; those holding data are
        queued again (completing the availability future)."""
        if not self._num_blocked:
            return
        chans = self.channels if index is None else (self._channel(index),)
        resumed = []
        with self._lock:
            for ch in chans:
                if ch._blocked:
                    ch._blocked = False
                    ch._queued = False  # from now on the producer's notification queues it
                    self._num_blocked -= 1
                    resumed.append(ch)
        for ch in resumed:  # data that arrived while blocked (its notification was dropped)
            if ch.has_queued_data():
                self.notify_channel_non_empty(ch)

    def unblock_all(self) -> None:
        """Resume every blocked channel."""
        self.resume_consumption()

    def is_blocked(self, index: int) -> bool:
        return self._channel(index)._blocked

    @property
    def num_blocked_channels(self) -> int:
        return self._num_blocked

    def _channel(self, index: int) -> InputChannel:
        if not 0 <= index < len(self.channels):
            raise IndexError(f"{self!r} has no channel {index}")
        return self.channels[index]

    def take_overtaken(self, index: int) -> List[Any]:
        """The data buffers the priority event channel ``index`` just returned overtook in the
        channel (a local channel's only when this task converted the barrier: otherwise they
        are its producer's output channel state)."""
        take = getattr(self._channel(index), "take_overtaken", None)
        return take() if take is not None else []

    def convert_barrier(self, index: int, checkpoint_id: int) -> bool:
        """Let the queued aligned barrier of ``checkpoint_id`` in channel ``index`` overtake."""
        convert = getattr(self._channel(index), "convert_barrier", None)
        return convert(checkpoint_id) if convert is not None else False

    def has_data(self) -> bool:
        return bool(self._queue)

    def is_finished(self) -> bool:
        """True once every channel delivered EndOfPartition."""
        return self._num_finished == len(self.channels) and bool(self.channels)

    def get_available_future(self) -> Future:
        """Done if a channel has data or the gate is finished; else completed on the next data."""
        with self._lock:
            if self._queue or self.is_finished():
                return completed_future()
            return self._helper.get_unavailable_future()

    def release(self) -> None:
        for ch in self.channels:
            ch.release()

    def __repr__(self) -> str:
        return f"InputGate({self.name or self.gate_index}, channels={len(self.channels)})"


SingleInputGate = InputGate


class UnionInputGate:
    """Several gates read as one (Flink's ``UnionInputGate``).

    Channel indices are flattened: gate ``g``'s channel ``c`` is
    ``channel_offsets[g] + c``. Gates are polled round robin.
    """

    def __init__(self, gates: Sequence[InputGate]) -> None:
        if not gates:
            raise ValueError("UnionInputGate needs at least one gate")
        self.gates = list(gates)
        self.channel_offsets: List[int] = []
        off = 0
        for g in self.gates:
            self.channel_offsets.append(off)
            off += g.num_channels
        self.num_channels = off
        self._next = 0
        self._future: Optional[Future] = None

    def request_partitions(self) -> None:
        for g in self.gates:
            g.request_partitions()

    setup = request_partitions

    def poll_next(self) -> Optional[Tuple[int, Any]]:
        n = len(self.gates)
        start = self._next
        for i in range(n):
            k = (start + i) % n
            r = self.gates[k].poll_next()
            if r is not None:
                self._next = (k + 1) % n
                return self.channel_offsets[k] + r[0], r[1]
        return None

    def gate_of_channel(self, flat_index: int) -> Tuple[int, int]:
        """``(gate position, channel index in that gate)`` of a flattened index."""
        if 0 <= flat_index < self.num_channels:
            for g in range(len(self.gates) - 1, -1, -1):
                if flat_index >= self.channel_offsets[g]:
                    return g, flat_index - self.channel_offsets[g]
        raise IndexError(f"union gate of {self.num_channels} channels has no channel {flat_index}")

    def block_channel(self, flat_index: int) -> None:
        """Block a channel given by its flattened index (see ``InputGate.block_channel``)."""
        g, c = self.gate_of_channel(flat_index)
        self.gates[g].block_channel(c)

    def resume_consumption(self, flat_index: Optional[int] = None) -> None:
        """Unblock one channel (flattened index) or all blocked channels of all gates."""
        if flat_index is None:
            for gate in self.gates:
                gate.resume_consumption()
        else:
            g, c = self.gate_of_channel(flat_index)
            self.gates[g].resume_consumption(c)

    def unblock_all(self) -> None:
        self.resume_consumption()

    def take_overtaken(self, flat_index: int) -> List[Any]:
        g, c = self.gate_of_channel(flat_index)
        return self.gates[g].take_overtaken(c)

    def convert_barrier(self, flat_index: int, checkpoint_id: int) -> bool:
        g, c = self.gate_of_channel(flat_index)
        return self.gates[g].convert_barrier(c, checkpoint_id)

    def is_blocked(self, flat_index: int) -> bool:
        g, c = self.gate_of_channel(flat_index)
        return self.gates[g].is_blocked(c)

    @property
    def num_blocked_channels(self) -> int:
        return sum(g.num_blocked_channels for g in self.gates)

    def is_finished(self) -> bool:
        return all(g.is_finished() for g in self.gates)

    def has_data(self) -> bool:
        return any(g.has_data() for g in self.gates)

    def get_available_future(self) -> Future:
        """Done when any unfinished gate has data, or when all gates are finished."""
        live = [g for g in self.gates if not g.is_finished()]
        if not live:
            return completed_future()
        futures = [g.get_available_future() for g in live]
        if any(f.done() for f in futures):
            return completed_future()
        f = self._future
        if f is not None and not f.done():
            return f
        f = self._future = Future()
        for gf in futures:
            gf.add_done_callback(lambda _gf, _f=f: _complete(_f))
        return f

    @property
    def num_buffers_in(self) -> int:
        return sum(g.num_buffers_in for g in self.gates)

    @property
    def num_bytes_in(self) -> int:
        return sum(g.num_bytes_in for g in self.gates)

    def release(self) -> None:
        for g in self.gates:
            g.release()


class StreamTaskNetworkInput:
    """Gate + per-channel deserializers + watermark valve (Flink's ``StreamTaskNetworkInput``).

    ``poll_next()`` processes at most one buffer/event and returns the list of
    stream items it yielded (possibly empty), or None when nothing is
    available — then check ``is_finished()`` (end of input) or wait on
    ``get_available_future()``. ``last_channel`` is the flattened channel the
    items came from (for barrier alignment). Watermarks and statuses are
    returned only when the valve's output changes. ``block_channel`` /
    ``resume_consumption`` pass through to the gate (flattened indices).
    Channel state (unaligned checkpoints): see the module doc; ``track_partial_records``
    must be on for a partial element to be recorded.
    """

    def __init__(self, gate: "InputGate | UnionInputGate", input_index: int = 0) -> None:
        self.gate = gate
        self.input_index = input_index
        n = gate.num_channels
        self._deserializers = [RecordDeserializer() for _ in range(n)]
        self.valve = StatusWatermarkValve(n)
        self.last_channel = -1
        #: keep the bytes of each channel's partial element (unaligned checkpoints are on)
        self.track_partial_records = False
        # per channel: the buffers read since its deserializer was last between two elements
        self._retained: List[Optional[List[bytes]]] = [None] * n
        self._persisting: Dict[int, List[Any]] = {}  # channel -> recorded items
        self._persisting_id = -1
        self._overtaken: Dict[int, Tuple[int, List[Any]]] = {}  # channel -> (checkpoint, buffers)
        self._recovered: Deque[Tuple[int, Any]] = deque()

    def poll_next(self) -> Optional[List[Any]]:
        if self._recovered:
            r = self._recovered.popleft()
        else:
            r = self.gate.poll_next()
            if r is None:
                return None
        channel, boe = r
        self.last_channel = channel
        t = type(boe)
        if t is bytes:
            if self._persisting and channel in self._persisting:
                self._persisting[channel].append(boe)
            deserializer = self._deserializers[channel]
            items = deserializer.feed(boe)
            if self.track_partial_records:
                self._track_partial(channel, boe, deserializer)
            if len(items) == 1 and type(items[0]) is list:
                return items
            return self._through_valve(items, channel)
        if t is ObjectBuffer:  # an in-process run: already decoded
            if self._persisting and channel in self._persisting:
                self._persisting[channel].append(boe)
            items = boe.items
            if type(items[0]) is list:
                return items
            return self._through_valve(items, channel)
        if t is EndOfPartition:
            deserializer = self._deserializers[channel]
            if deserializer.has_partial_record:
                raise RuntimeError(f"channel {channel}: partial record at end of partition")
            deserializer.clear()  # its unpacker's memory goes with the stream
            return [END_OF_PARTITION]
        if t is PartialRecord:  # restored: the start of the element its deserializer held
            deserializer = self._deserializers[channel]
            for buffer in boe.buffers:
                deserializer.feed(buffer)  # what completes here was processed before the checkpoint
            self._retained[channel] = list(boe.buffers)
            if self._persisting and channel in self._persisting:
                self._persisting[channel].append(boe)
            return []
        if t is CheckpointBarrier and boe.unaligned:
            overtaken = self.gate.take_overtaken(channel)
            if overtaken:
                self._overtaken[channel] = (boe.checkpoint_id, overtaken)
        return self._through_valve([boe], channel)

    def _track_partial(self, channel: int, buffer: bytes, deserializer: RecordDeserializer) -> None:
        """Keep the buffers read since the deserializer last stood between two elements (a flushed
        buffer ends between two, so this holds at most a buffer timeout's worth of a channel)."""
        retained = self._retained[channel]
        if deserializer.at_element_boundary:
            if retained is not None:
                self._retained[channel] = None
        elif retained is None:
            self._retained[channel] = [buffer]
        else:
            retained.append(buffer)

    # -- channel state (unaligned checkpoints; task thread) ------------------------------------
    def start_persisting(self, checkpoint_id: int, channels: Sequence[int]) -> None:
        """Record from now on what ``channels`` deliver, starting with their partial elements."""
        self._persisting_id = checkpoint_id
        persisting = self._persisting = {}
        for c in channels:  # their barriers, if queued aligned, overtake now (the checkpoint is unaligned)
            self.gate.convert_barrier(c, checkpoint_id)
        for c in channels:
            retained = self._retained[c]
            if retained:
                if not self.track_partial_records:
                    raise RuntimeError(f"channel {c}: partial elements are not tracked (track_partial_records is off)")
                persisting[c] = [PartialRecord(tuple(retained))]
            elif not self.track_partial_records and not self._deserializers[c].at_element_boundary:
                raise RuntimeError(f"channel {c}: partial elements are not tracked (track_partial_records is off)")
            else:
                persisting[c] = []

    def stop_persisting(self, checkpoint_id: int, channel: int) -> List[Any]:
        """Barrier ``checkpoint_id`` arrived on ``channel`` (or it ended): what it recorded,
        followed by the buffers that barrier overtook in the channel."""
        items = self._persisting.pop(channel, []) if checkpoint_id == self._persisting_id else []
        overtaken = self._overtaken.pop(channel, None)
        if overtaken is not None and overtaken[0] == checkpoint_id:
            items.extend(overtaken[1])
        return items

    def abort_persisting(self) -> None:
        self._persisting = {}
        self._overtaken.clear()

    def recover(self, states: Sequence[Sequence[Any]]) -> None:
        """Return ``states[c]`` (a restored checkpoint's items of channel ``c``) before any data
        of the gate."""
        n = self.gate.num_channels
        if len(states) != n:
            raise ValueError(f"channel state of {len(states)} channels for an input of {n}")
        for c, items in enumerate(states):
            for item in items:
                self._recovered.append((c, item))

    @property
    def is_recovering(self) -> bool:
        return bool(self._recovered)

    def _through_valve(self, items: List[Any], channel: int) -> List[Any]:
        out: List[Any] = []
        valve = self.valve
        for it in items:
            t = type(it)
            if t is Watermark:
                wm = valve.input_watermark(it, channel)
                if wm is not None:
                    out.append(Watermark(wm))
            elif t is WatermarkStatus:
                out.extend(valve.input_stream_status(it, channel))
            else:  # list, TimestampedRecords, LatencyMarker, CheckpointBarrier, CancelCheckpointMarker
                out.append(it)
        return out

    def block_channel(self, channel: int) -> None:
        self.gate.block_channel(channel)

    def resume_consumption(self, channel: Optional[int] = None) -> None:
        self.gate.resume_consumption(channel)

    def is_finished(self) -> bool:
        return not self._recovered and self.gate.is_finished()

    def get_available_future(self) -> Future:
        if self._recovered:
            return completed_future()
        return self.gate.get_available_future()
