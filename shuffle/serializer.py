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

Memory per channel (issue 34: a TaskExecutor of an ALL_TO_ALL job at 1,000 executors has
thousands of channels): the serializers of one writer share its msgpack packers
(``RecordPackers``: one writer thread drives them all, and a packer keeps nothing between
calls), and a deserializer creates its streaming unpacker (~40 KiB of parse stack) when the
first data buffer arrives and drops it at the end of the partition, so an idle channel costs
a few hundred bytes.

Deserializer model: one per input channel. ``feed(buffer)`` appends one data
buffer to msgpack's streaming unpacker (which carries partial records across
buffers) and returns every element completed by it, in order, grouped::

    [ [v1, v2, v3],                        # a run of plain records (a list)
      Watermark(17),                       # control elements as objects
      TimestampedRecords([v4, v5], [t4, t5]),   # a run of timestamped records
      [v6] ]

A buffer holding only plain records yields ``[[...all records...]]`` with no
per-record Python work at all. A timestamped record is written as a 10-byte
timestamp marker followed by the record (``add_timestamped_record``) or, for
batches, as one ext object holding both lists (``add_timestamped_records``);
the deserializer pairs markers with their records (also across buffers) and
merges consecutive timestamped records into one ``TimestampedRecords`` run.

In-process hand-over: a serializer whose reader lives in the same process and reads it
alone (``hand_over_objects``, set by the TaskExecutor for the pipelined, non-broadcast
subpartitions whose reader it runs: all of them on the local target) passes a batch of at
least ``OBJECT_RUN_MIN`` flat records (scalars, or tuples of scalars: immutable, so sharing
them is what a copy would give; checked by :func:`~raylink.shuffle.shareable.is_shareable_batch`)
as an :class:`ObjectBuffer` instead of encoding it; the partial byte buffer before it is
handed over first, so order is kept. It takes a buffer permit like any data buffer. Flink
always serializes between tasks; here the bytes would only be decoded again by a thread of
the same interpreter.
"""

from __future__ import annotations

from itertools import compress, count
from operator import attrgetter
from typing import Any, Callable, List, Optional, Tuple

import msgpack

from raylink.shuffle.codec import (
    _TS_MARKER,
    EXT_TIMESTAMP_NEXT,
    FIRST_CONTROL_CODE,
    SCALAR_TYPES,
    DeclaredFlatType,
    DeserializationError,
    TimestampMark,
    array_header_size,
    encode_event,
    encode_timestamped,
    ext_hook,
    is_flat_batch,
    is_flat_value,
    make_packer,
    make_unpacker,
    pack_flat_batch_into,
    pack_surrogatepass,
    prepare,
    stream_classes,
)
from raylink.shuffle.elements import (
    CONTROL_TYPE_SET,
    STREAM_ELEMENT_TYPES,
    TimestampedRecords,
)
from raylink.shuffle.shareable import is_shareable_batch

__all__ = [
    "DEFAULT_BUFFER_SIZE",
    "ObjectBuffer",
    "RecordPackers",
    "RecordSerializer",
    "RecordDeserializer",
    "BufferSink",
]

#: Flink's default memory segment size (``taskmanager.memory.segment-size``)
DEFAULT_BUFFER_SIZE = 32 * 1024
#: timestamped batches are cut into runs of at most this many records
TIMESTAMPED_RUN_LENGTH = 1024
#: the smallest batch handed over in-process as objects (smaller ones are packed into a buffer)
OBJECT_RUN_MIN = 32
#: what an in-process run counts per record in the byte metrics (it is never encoded)
OBJECT_RECORD_BYTES = 16


class ObjectBuffer:
    """A data buffer that holds decoded elements instead of bytes: ``items`` is what
    ``RecordDeserializer.feed`` would return for the encoded run (``[values]`` or
    ``[TimestampedRecords]``); ``len()`` is its nominal size in bytes."""

    __slots__ = ("items", "nbytes")

    def __init__(self, items: List[Any], nbytes: int) -> None:
        self.items = items
        self.nbytes = nbytes

    def __len__(self) -> int:
        return self.nbytes

    def __repr__(self) -> str:
        return f"ObjectBuffer({self.items!r})"


BufferSink = Callable[[bytes, bool], None]


class RecordPackers:
    """The msgpack packers a ``RecordSerializer`` encodes with: ``pack`` (one value -> bytes)
    and ``batch`` (a batch packed into its buffer, then taken out and reset).

    A packer holds nothing between calls, so serializers whose calls never overlap share
    one ``RecordPackers``: a ``RecordWriter``'s (one per subpartition), all called by the
    task thread (a legacy source thread calls them holding the checkpoint lock, which the
    task thread takes too). Serializers that threads drive concurrently must not."""

    __slots__ = ("pack", "batch")

    def __init__(self) -> None:
        self.pack = make_packer().pack
        self.batch = make_packer(autoreset=False)


_INLINE_TYPES = STREAM_ELEMENT_TYPES
_ts_marker = _TS_MARKER.pack
_EVENT_TYPES = CONTROL_TYPE_SET


class RecordSerializer:
    """Writes stream elements of one channel into fixed-size buffers.

    ``add_record(value)`` / ``add_records(values)`` (batch: much faster per
    record) / ``add_timestamped_record(value, ts)`` /
    ``add_timestamped_records(values, timestamps)`` / ``add_element(wm)``
    (watermark, status, latency marker: inline) / ``add_event(ev)`` (own
    buffer) / ``flush()``. Not thread safe: one writer thread.

    ``flat_records``: the stream's declared flat type (a ``TypeInformation``
    with ``is_flat``, or a ``DeclaredFlatType``): every record is checked against
    it (``DeclaredFlatType.conform``) and batches are packed by msgspec in one
    call. Anything else (None, False, True) means no declaration: records are
    examined and travel as they are.

    ``packers``: shared with the other serializers of the same writer thread (None: its own).
    """

    __slots__ = (
        "buffer_size",
        "_buf",
        "_pack",
        "_bpacker",
        "_sink",
        "_on_flush",
        "_declared",
        "_sent_classes",
        "_collected",
        "num_buffers",
        "num_bytes",
        "hand_over_objects",
    )

    def __init__(
        self,
        buffer_size: int = DEFAULT_BUFFER_SIZE,
        on_buffer: Optional[BufferSink] = None,
        on_flush: Optional[Callable[[], None]] = None,
        flat_records: Any = None,
        packers: Optional[RecordPackers] = None,
    ) -> None:
        if buffer_size < 16:
            raise ValueError(f"buffer_size must be >= 16 bytes, got {buffer_size}")
        self.buffer_size = int(buffer_size)
        self._buf = bytearray()
        if packers is None:
            packers = RecordPackers()
        self._pack = packers.pack
        self._bpacker = packers.batch
        self._collected: List[Tuple[bytes, bool]] = []
        self._sink: BufferSink = on_buffer if on_buffer is not None else self._collect
        self._on_flush = on_flush  # told after a flush handed data over (the partition's flush)
        # the stream's declared flat type: records are checked against it, batches packed by msgspec
        self._declared = DeclaredFlatType.of(flat_records) if flat_records not in (None, False, True) else None
        self._sent_classes: set = set()  # by-value classes this stream already carries (codec.stream_classes)
        self.num_buffers = 0  # buffers handed to the sink (data + events)
        self.num_bytes = 0
        #: the reader is a thread of this process, alone on this channel: flat batches go as objects
        self.hand_over_objects = False

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
        if self._declared is not None:
            value = self._declared.conform(value)
        else:
            t = type(value)
            if t not in SCALAR_TYPES:
                if t is tuple:
                    for x in value:
                        if type(x) not in SCALAR_TYPES:
                            value = self._prepare(value)
                            break
                else:
                    value = self._prepare(value)
        buf = self._buf
        try:
            buf += self._pack(value)
        except UnicodeEncodeError:  # a str with a lone surrogate (prepared already: not again)
            buf += pack_surrogatepass(value)
        if len(buf) >= self.buffer_size:
            self._spill()

    def add_records(self, values: List[Any]) -> None:
        """Serialize a batch of records (one C call when the batch is flat)."""
        if type(values) is not list and type(values) is not tuple:
            values = list(values)
        n = len(values)
        if not n:
            return
        buf = self._buf
        if self._declared is not None:  # checked (or converted) against the declaration, then packed
            if n >= OBJECT_RUN_MIN and self.hand_over_objects and self._hand_over_declared(values, None):
                return
            self._declared.pack_batch_into(values, buf, self._pack)
        elif (handing := n >= OBJECT_RUN_MIN and self.hand_over_objects) and is_shareable_batch(values):
            self._hand_over_run(list(values), None)  # a copy: the caller may reuse its list
            return
        # a batch is_shareable_batch refused is not flat either (it accepts every flat batch)
        elif handing or not (is_flat_batch(values) and pack_flat_batch_into(values, buf)):
            self._pack_batch(values, buf)
        if len(buf) >= self.buffer_size:
            self._spill()

    def _pack_batch(self, values: List[Any], buf: bytearray) -> None:
        """Pack a batch record by record (preparing what is not flat) onto ``buf``. A record
        that cannot be prepared raises after the records before it were committed. A str
        with a lone surrogate makes msgpack's strict packer drop what it holds: the prepared
        records kept so far are packed again with 'surrogatepass', nothing prepared twice
        (a by-value class is sent once per stream)."""
        p = self._bpacker
        pk = p.pack
        prepared: List[Any] = []
        keep = prepared.append
        try:
            with stream_classes(self._sent_classes):
                for v in values:
                    if not is_flat_value(v):
                        v = prepare(v)
                    keep(v)
                    pk(v)
        except UnicodeEncodeError:
            p.reset()
            with stream_classes(self._sent_classes):
                rest = [v if is_flat_value(v) else prepare(v) for v in values[len(prepared) :]]
                buf += pack_surrogatepass(prepared + rest)[array_header_size(len(prepared) + len(rest)) :]
            return
        finally:
            # commit what was packed (all of it, or the records before a failing one)
            buf += p.bytes()
            p.reset()

    def add_timestamped_record(self, value: Any, timestamp: int) -> None:
        """Serialize one record carrying an event-time timestamp."""
        if self._declared is not None:
            value = self._declared.conform(value)
        elif not is_flat_value(value):
            value = self._prepare(value)
        try:
            packed = self._pack(value)
        except UnicodeEncodeError:  # a str with a lone surrogate (prepared already: not again)
            packed = pack_surrogatepass(value)
        buf = self._buf
        buf += _ts_marker(0xD7, EXT_TIMESTAMP_NEXT, timestamp)
        buf += packed
        if len(buf) >= self.buffer_size:
            self._spill()

    def add_timestamped_records(self, values: List[Any], timestamps: "List[int] | int") -> None:
        """Serialize a batch of timestamped records (runs of <= TIMESTAMPED_RUN_LENGTH).

        ``timestamps``: one per value, or one int for the whole batch.
        """
        n = len(values)
        shared = type(timestamps) is int
        if not shared and n != len(timestamps):
            raise ValueError(f"{n} values but {len(timestamps)} timestamps")
        if n == 1:
            self.add_timestamped_record(values[0], timestamps if shared else timestamps[0])
            return
        flat = None  # unknown: encode_timestamped checks it
        if n >= OBJECT_RUN_MIN and self.hand_over_objects:
            if self._declared is not None:
                if self._hand_over_declared(values, timestamps):
                    return
            elif is_shareable_batch(values):
                self._hand_over_run(list(values), timestamps)  # a copy: the caller may reuse its list
                return
            else:
                flat = False  # is_shareable_batch accepts every flat batch
        if self._declared is not None:
            values = self._declared.conform_batch(values)
        buf = self._buf
        step = TIMESTAMPED_RUN_LENGTH
        with stream_classes(self._sent_classes):
            if n <= step:
                if n:
                    buf += encode_timestamped(values, timestamps, flat)
            else:
                for i in range(0, n, step):
                    buf += encode_timestamped(values[i : i + step], timestamps if shared else timestamps[i : i + step])
        if len(buf) >= self.buffer_size:
            self._spill()

    # -- control -----------------------------------------------------------------
    def add_element(self, element: Any) -> None:
        """Write a watermark / watermark status / latency marker inline."""
        if not isinstance(element, _INLINE_TYPES):
            raise TypeError(
                f"add_element takes a Watermark, WatermarkStatus or LatencyMarker, "
                f"not {type(element).__qualname__}; use add_event for events"
            )
        buf = self._buf
        buf += self._pack(element)
        if len(buf) >= self.buffer_size:
            self._spill()

    def add_event(self, event: Any) -> None:
        """Finish the current buffer, then emit ``event`` as a buffer of its own."""
        if type(event) not in _EVENT_TYPES:
            raise TypeError(f"not an event: {type(event).__qualname__}")
        data = encode_event(event)
        self._hand_over()  # the event buffer itself flushes
        self.num_buffers += 1
        self.num_bytes += len(data)
        self._sink(data, True)

    def set_buffer_size(self, size: int) -> None:
        """Cut the following buffers at ``size`` bytes (any thread: one int is replaced)."""
        self.buffer_size = max(16, int(size))

    def flush(self) -> bool:
        """Hand over the partial buffer, then tell the partition (``on_flush``) so
        buffers it holds get shipped; returns False if there was no partial buffer."""
        handed = self._hand_over()
        if self._on_flush is not None:
            self._on_flush()
        return handed

    def _hand_over_declared(self, values: List[Any], timestamps: "List[int] | int | None") -> bool:
        """Hand a batch of a declared flat type over as an :class:`ObjectBuffer`, conformed
        (a new list); False leaves it to the encoding path (other declarations, or values
        that are not flat once conformed)."""
        declared = self._declared
        if not isinstance(declared, DeclaredFlatType):
            return False
        conformed = declared.conform_batch(values)
        if not is_flat_batch(conformed):
            return False
        if conformed is values:  # already of its declared type: a copy, the caller may reuse its list
            conformed = list(values)
        self._hand_over_run(conformed, timestamps)
        return True

    def _hand_over_run(self, values: List[Any], timestamps: "List[int] | int | None") -> None:
        """Hand the partial byte buffer over, then ``values`` (flat, owned) as objects."""
        if timestamps is None:
            items: List[Any] = [values]
        else:
            stamps = [timestamps] * len(values) if type(timestamps) is int else list(timestamps)
            items = [TimestampedRecords(values, stamps)]
        self._hand_over()
        nbytes = OBJECT_RECORD_BYTES * len(values)
        self.num_buffers += 1
        self.num_bytes += nbytes
        self._sink(ObjectBuffer(items, nbytes), False)

    def _hand_over(self) -> bool:
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
        self._sent_classes.clear()  # what it carried may be gone with it

    def _prepare(self, value: Any) -> Any:
        """``prepare`` within this stream (by-value classes travel once per stream)."""
        with stream_classes(self._sent_classes):
            return prepare(value)

    def _spill(self) -> None:
        buf = self._buf
        size = self.buffer_size
        end = (len(buf) // size) * size
        sink = self._sink
        mv = memoryview(buf)
        try:
            for i in range(0, end, size):
                self.num_buffers += 1
                sink(mv[i : i + size].tobytes(), False)
        finally:
            mv.release()
        self.num_bytes += end
        del buf[:end]


_GROUP_TYPES = CONTROL_TYPE_SET | {TimestampedRecords, TimestampMark}
_is_group_type = _GROUP_TYPES.__contains__
_ONLY_MARKS = {TimestampMark}
_get_timestamp = attrgetter("timestamp")


class RecordDeserializer:
    """Reassembles the elements of one input channel from its data buffers.

    ``feed(buffer) -> list`` (see module doc for the grouping). Elements that
    span buffers come out with the buffer holding their last byte.
    ``has_partial_record`` tells whether bytes of an unfinished element are
    buffered (must be False at end of partition). Not thread safe.

    The streaming unpacker is created by the first ``feed`` (an idle channel holds none) and
    dropped by ``clear`` (end of partition, channel released).
    """

    __slots__ = ("_unpacker", "_controls", "_fed", "_pending_ts", "num_buffers", "num_bytes")

    def __init__(self) -> None:
        self._controls = [0]
        self._unpacker: Optional[msgpack.Unpacker] = None
        self._fed = 0
        self._pending_ts: Optional[int] = None  # a TimestampMark whose record is still to come
        self.num_buffers = 0
        self.num_bytes = 0

    def _open(self) -> msgpack.Unpacker:
        """The unpacker of this channel's stream, created with its first data buffer."""
        controls = self._controls

        def hook(code: int, data: bytes, _ext=ext_hook, _first=FIRST_CONTROL_CODE) -> Any:
            if code >= _first:
                controls[0] += 1
            return _ext(code, data)

        unpacker = self._unpacker = make_unpacker(hook)
        return unpacker

    def feed(self, buffer: Any) -> List[Any]:
        """Consume one data buffer; return the completed elements, grouped."""
        unpacker = self._unpacker
        if unpacker is None:
            unpacker = self._open()
        unpacker.feed(buffer)
        n = len(buffer)
        self._fed += n
        self.num_buffers += 1
        self.num_bytes += n
        try:
            objs = list(unpacker)
        except DeserializationError:
            raise
        except (ValueError, TypeError, msgpack.UnpackException) as e:
            raise DeserializationError(f"corrupt stream: {type(e).__name__}: {e}") from e
        controls = self._controls
        if not controls[0] and self._pending_ts is None:
            return [objs] if objs else []
        controls[0] = 0
        return self._group(objs)

    def _group(self, objs: List[Any]) -> List[Any]:
        """Split decoded objects into runs of plain records and control elements,
        pairing every TimestampMark with the object after it."""
        out: List[Any] = []
        last_ts: Optional[TimestampedRecords] = None
        start = 0
        n = len(objs)
        pending = self._pending_ts
        if pending is not None:
            if not n:
                return out
            last_ts = TimestampedRecords([objs[0]], [pending])
            out.append(last_ts)
            self._pending_ts = None
            start = 1
        # fast path: nothing but (mark, record) pairs, as event-time streams produce
        marks = objs[start::2]
        if marks and set(map(type, marks)) == _ONLY_MARKS:
            values = objs[start + 1 :: 2]
            if len(values) < len(marks):
                self._pending_ts = marks.pop().timestamp
            if values:
                stamps = list(map(_get_timestamp, marks))
                if last_ts is not None:
                    last_ts.values.extend(values)
                    last_ts.timestamps.extend(stamps)
                else:
                    out.append(TimestampedRecords(values, stamps))
            return out
        positions = compress(count(), map(_is_group_type, map(type, objs)))
        for i in positions:
            if i < start:  # the record of a TimestampMark (whatever its type)
                continue
            if i > start:
                out.append(objs[start:i])
                last_ts = None
            o = objs[i]
            t = type(o)
            start = i + 1
            if t is TimestampMark:
                if i + 1 == n:  # its record is in a later buffer
                    self._pending_ts = o.timestamp
                    return out
                if last_ts is not None:
                    last_ts.values.append(objs[i + 1])
                    last_ts.timestamps.append(o.timestamp)
                else:
                    last_ts = TimestampedRecords([objs[i + 1]], [o.timestamp])
                    out.append(last_ts)
                start = i + 2
            elif t is TimestampedRecords:
                if last_ts is not None:
                    last_ts.values.extend(o.values)
                    last_ts.timestamps.extend(o.timestamps)
                else:
                    out.append(o)
                    last_ts = o
            else:
                out.append(o)
                last_ts = None
        if start < n:
            out.append(objs[start:])
        return out

    @property
    def has_partial_record(self) -> bool:
        unpacker = self._unpacker
        return (unpacker is not None and unpacker.tell() < self._fed) or self._pending_ts is not None

    @property
    def at_element_boundary(self) -> bool:
        """No element is partly read (after ``feed``): the next buffer starts a new one. For an
        unaligned checkpoint's channel state, which replays a channel from such a point."""
        if self._pending_ts is not None:
            return False
        unpacker = self._unpacker
        if unpacker is None:
            return True
        if unpacker.tell() < self._fed:
            return False
        try:
            unpacker.read_bytes(0)  # refused while the unpacker holds part of an object
        except ValueError:
            return False
        return True

    def clear(self) -> None:
        """Forget buffered partial data and the unpacker (end of partition, channel released)."""
        self._unpacker = None
        self._controls[0] = 0
        self._pending_ts = None
        self._fed = 0
