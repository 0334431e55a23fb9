"""Record (de)serialization into fixed-size network buffers.

``RecordSerializer`` mirrors Flink's ``SpanningRecordSerializer`` together
with the ``BufferBuilder`` it writes into; ``RecordDeserializer`` mirrors
``SpillingAdaptiveSpanningRecordDeserializer``.

Serializer model: one serializer per output channel (subpartition). Encoded
elements are appended to a byte stream; every time ``buffer_size`` bytes are
available a *full* buffer (``bytes`` of exactly ``buffer_size``) is handed to
the sink. Records do not need to fit: a record larger than the space left
simply continues in the next buffer(s) (a 5 MiB record becomes 160 full 32 KiB
buffers plus a tail). ``flush()`` hands over the partial tail buffer (smaller
than ``buffer_size``); ``add_event`` flushes and then emits the event in a
buffer of its own (``is_event=True``), as Flink's ``broadcastEvent`` does.

The sink is ``on_buffer(buffer: bytes, is_event: bool)``. Without a sink the
buffers are collected and returned by ``take_full_buffers()``.

Deserializer model: one per input channel. ``feed(buffer)`` appends one data
buffer to msgpack's streaming unpacker (which carries partial records across
buffers) and returns every element completed by it, in order, grouped::

    [ [v1, v2, v3],                        # a run of plain records (a list)
      Watermark(17),                       # control elements as objects
      TimestampedRecords([v4, v5], [t4, t5]),   # a run of timestamped records
      [v6] ]

A buffer holding only plain records yields ``[[...all records...]]`` with no
per-record Python work at all.
"""

from __future__ import annotations

from itertools import compress, count
from typing import Any, Callable, List, Optional, Tuple

import msgpack

from .codec import (
    FIRST_CONTROL_CODE,
    DeserializationError,
    encode_event,
    encode_timestamped,
    ext_hook,
    is_flat_batch,
    is_flat_value,
    make_packer,
    make_unpacker,
    prepare,
    SCALAR_TYPES,
)
from .elements import (
    CheckpointBarrier,
    EndOfPartition,
    LatencyMarker,
    TimestampedRecords,
    Watermark,
    WatermarkStatus,
)

__all__ = ["DEFAULT_BUFFER_SIZE", "RecordSerializer", "RecordDeserializer", "BufferSink"]

#: Flink's default memory segment size (``taskmanager.memory.segment-size``)
DEFAULT_BUFFER_SIZE = 32 * 1024
#: timestamped batches are cut into runs of at most this many records
TIMESTAMPED_RUN_LENGTH = 1024

BufferSink = Callable[[bytes, bool], None]

_INLINE_TYPES = (Watermark, WatermarkStatus, LatencyMarker)
_EVENT_TYPES = frozenset((Watermark, WatermarkStatus, LatencyMarker, CheckpointBarrier, EndOfPartition))


class RecordSerializer:
    """Writes stream elements of one channel into fixed-size buffers.

    ``add_record(value)`` / ``add_records(values)`` (batch: much faster per
    record) / ``add_timestamped_record(value, ts)`` /
    ``add_timestamped_records(values, timestamps)`` / ``add_element(wm)``
    (watermark, status, latency marker: inline) / ``add_event(ev)`` (own
    buffer) / ``flush()``. Not thread safe: one writer thread.
    """

    __slots__ = (
        "buffer_size",
        "_buf",
        "_pack",
        "_bpacker",
        "_sink",
        "_collected",
        "num_buffers",
        "num_bytes",
    )

    def __init__(self, buffer_size: int = DEFAULT_BUFFER_SIZE, on_buffer: Optional[BufferSink] = None) -> None:
        if buffer_size < 16:
            raise ValueError(f"buffer_size must be >= 16 bytes, got {buffer_size}")
        self.buffer_size = int(buffer_size)
        self._buf = bytearray()
        self._pack = make_packer().pack
        self._bpacker = make_packer(autoreset=False)
        self._collected: List[Tuple[bytes, bool]] = []
        self._sink: BufferSink = on_buffer if on_buffer is not None else self._collect
        self.num_buffers = 0  # buffers handed to the sink (data + events)
        self.num_bytes = 0

    # -- sinks -------------------------------------------------------------------
    def _collect(self, buffer: bytes, is_event: bool) -> None:
        self._collected.append((buffer, is_event))

    def take_full_buffers(self) -> List[Tuple[bytes, bool]]:
        """Buffers finished so far as ``(buffer, is_event)`` (only without a sink)."""
        out = self._collected
        self._collected = []
        return out

    # -- records -----------------------------------------------------------------
    def add_record(self, value: Any) -> None:
        """Serialize one record (per-record path)."""
        t = type(value)
        if t not in SCALAR_TYPES:
            if t is tuple:
                for x in value:
                    if type(x) not in SCALAR_TYPES:
                        value = prepare(value)
                        break
            else:
                value = prepare(value)
        buf = self._buf
        buf += self._pack(value)
        if len(buf) >= self.buffer_size:
            self._spill()

    def add_records(self, values: List[Any]) -> None:
        """Serialize a batch of records (one C-level pass when the batch is flat)."""
        p = self._bpacker
        try:
            if is_flat_batch(values):
                any(map(p.pack, values))  # pack() returns None: consumes everything
            else:
                pk = p.pack
                for v in values:
                    pk(v if is_flat_value(v) else prepare(v))
        finally:
            # commit what was packed (all of it, or the records before a failing one)
            buf = self._buf
            buf += p.bytes()
            p.reset()
        if len(buf) >= self.buffer_size:
            self._spill()

    def add_timestamped_record(self, value: Any, timestamp: int) -> None:
        """Serialize one record carrying an event-time timestamp."""
        buf = self._buf
        buf += encode_timestamped([value], [timestamp])
        if len(buf) >= self.buffer_size:
            self._spill()

    def add_timestamped_records(self, values: List[Any], timestamps: List[int]) -> None:
        """Serialize a batch of timestamped records (runs of <= TIMESTAMPED_RUN_LENGTH)."""
        n = len(values)
        if n != len(timestamps):
            raise ValueError(f"{n} values but {len(timestamps)} timestamps")
        buf = self._buf
        step = TIMESTAMPED_RUN_LENGTH
        if n <= step:
            if n:
                buf += encode_timestamped(values, timestamps)
        else:
            for i in range(0, n, step):
                buf += encode_timestamped(values[i:i + step], timestamps[i:i + step])
        if len(buf) >= self.buffer_size:
            self._spill()

    # -- control -----------------------------------------------------------------
    def add_element(self, element: Any) -> None:
        """Write a watermark / watermark status / latency marker inline."""
        if not isinstance(element, _INLINE_TYPES):
            raise TypeError(f"add_element takes a Watermark, WatermarkStatus or LatencyMarker, "
                            f"not {type(element).__qualname__}; use add_event for events")
        buf = self._buf
        buf += self._pack(element)
        if len(buf) >= self.buffer_size:
            self._spill()

    def add_event(self, event: Any) -> None:
        """Finish the current buffer, then emit ``event`` as a buffer of its own."""
        if type(event) not in _EVENT_TYPES:
            raise TypeError(f"not an event: {type(event).__qualname__}")
        data = encode_event(event)
        self.flush()
        self.num_buffers += 1
        self.num_bytes += len(data)
        self._sink(data, True)

    def flush(self) -> bool:
        """Hand over the partial buffer; returns False if there was nothing to flush."""
        buf = self._buf
        if not buf:
            return False
        if len(buf) >= self.buffer_size:
            self._spill()
            if not buf:
                return True
        data = bytes(buf)
        buf.clear()
        self.num_buffers += 1
        self.num_bytes += len(data)
        self._sink(data, False)
        return True

    @property
    def pending_bytes(self) -> int:
        """Bytes written but not yet handed to the sink (the partial buffer)."""
        return len(self._buf)

    def clear(self) -> None:
        """Drop the partial buffer (on cancellation)."""
        self._buf.clear()

    def _spill(self) -> None:
        buf = self._buf
        size = self.buffer_size
        end = (len(buf) // size) * size
        sink = self._sink
        mv = memoryview(buf)
        try:
            for i in range(0, end, size):
                self.num_buffers += 1
                sink(mv[i:i + size].tobytes(), False)
        finally:
            mv.release()
        self.num_bytes += end
        del buf[:end]


_GROUP_TYPES = frozenset((Watermark, WatermarkStatus, LatencyMarker, CheckpointBarrier, EndOfPartition,
                          TimestampedRecords))
_is_group_type = _GROUP_TYPES.__contains__


def _group(objs: List[Any]) -> List[Any]:
    """Split decoded objects into runs of plain records and control elements."""
    positions = list(compress(count(), map(_is_group_type, map(type, objs))))
    out: List[Any] = []
    start = 0
    last_ts: Optional[TimestampedRecords] = None
    for i in positions:
        if i > start:
            out.append(objs[start:i])
            last_ts = None
        o = objs[i]
        if type(o) is TimestampedRecords:
            if last_ts is not None:
                last_ts.values.extend(o.values)
                last_ts.timestamps.extend(o.timestamps)
            else:
                out.append(o)
                last_ts = o
        else:
            out.append(o)
            last_ts = None
        start = i + 1
    if start < len(objs):
        out.append(objs[start:])
    return out


class RecordDeserializer:
    """Reassembles the elements of one input channel from its data buffers.

    ``feed(buffer) -> list`` (see module doc for the grouping). Elements that
    span buffers come out with the buffer holding their last byte.
    ``has_partial_record`` tells whether bytes of an unfinished element are
    buffered (must be False at end of partition). Not thread safe.
    """

    __slots__ = ("_unpacker", "_feed", "_hook", "_controls", "_fed", "num_buffers", "num_bytes")

    def __init__(self) -> None:
        controls = [0]
        self._controls = controls

        def hook(code: int, data: bytes, _ext=ext_hook, _first=FIRST_CONTROL_CODE) -> Any:
            if code >= _first:
                controls[0] += 1
            return _ext(code, data)

        self._hook = hook
        self._unpacker = make_unpacker(hook)
        self._feed = self._unpacker.feed
        self._fed = 0
        self.num_buffers = 0
        self.num_bytes = 0

    def feed(self, buffer: Any) -> List[Any]:
        """Consume one data buffer; return the completed elements, grouped."""
        self._feed(buffer)
        self._fed += len(buffer)
        self.num_buffers += 1
        self.num_bytes += len(buffer)
        try:
            objs = list(self._unpacker)
        except DeserializationError:
            raise
        except (ValueError, TypeError, msgpack.UnpackException) as e:
            raise DeserializationError(f"corrupt stream: {type(e).__name__}: {e}") from e
        controls = self._controls
        if not controls[0]:
            return [objs] if objs else []
        controls[0] = 0
        return _group(objs)

    @property
    def has_partial_record(self) -> bool:
        return self._unpacker.tell() < self._fed

    def clear(self) -> None:
        """Forget buffered partial data (channel released)."""
        self._unpacker = make_unpacker(self._hook)
        self._controls[0] = 0
        self._feed = self._unpacker.feed
        self._fed = 0
