"""msgpack wire codec for records and stream elements.

Plays the role of Flink's ``StreamElementSerializer`` (tags for record /
timestamped record / watermark / status / latency marker) plus
``EventSerializer`` (checkpoint barrier, end of partition) plus a generic
``TypeSerializer`` for Python values.

Wire format (one msgpack object per element, concatenated):

* a plain record is the msgpack encoding of the value itself;
* msgpack arrays are **tuples** (the unpacker runs with ``use_list=False``:
  the common tuple record decodes without a Python call); Python ``list``\\ s
  travel as ``ExtType(EXT_LIST, <packed array>)`` and come back as lists;
* dicts are msgpack maps (any hashable key type), str/bytes/int/float/bool/None
  are native; anything else that pickles (dataclass, datetime, Decimal, set,
  namedtuple, bytearray, ints beyond 64 bit, ...) is ``ExtType(EXT_PICKLE,
  pickle.dumps(value))``;
* control elements and timestamped runs use reserved ext codes >= 10
  (``EXT_WATERMARK`` ... ``EXT_TIMESTAMPED``); a single timestamped record is
  a 10-byte ``EXT_TIMESTAMP_NEXT`` marker (fixext 8 holding the timestamp)
  followed by the record itself, decoded as a ``TimestampMark`` that the
  ``RecordDeserializer`` pairs with the next object.

Fast path: msgpack's packer treats tuple and list alike, so a value may be
handed to the C packer as is only if it contains no list and no type msgpack
would silently change. ``is_flat_batch``/``is_flat_value`` decide that with a
few C-level passes (scalars, or tuples of scalars); everything else goes
through ``prepare`` (a Python walk that turns lists into EXT_LIST and
non-native types into EXT_PICKLE). A value that cannot be pickled raises
``SerializationError`` (a ``TypeError``) naming its type.

Control element types are reserved: a Watermark (etc.) given as a *record*
value is decoded as the element, not as a record.
"""

from __future__ import annotations

import pickle
import struct
from itertools import chain
from typing import Any, Callable, Iterable, List, Optional

import msgpack
import msgspec
from msgpack import ExtType

from .elements import (
    END_OF_PARTITION,
    CheckpointBarrier,
    EndOfPartition,
    LatencyMarker,
    TimestampedRecords,
    Watermark,
    WatermarkStatus,
)

__all__ = [
    "SerializationError",
    "DeserializationError",
    "EXT_PICKLE",
    "EXT_LIST",
    "EXT_WATERMARK",
    "EXT_STATUS",
    "EXT_LATENCY",
    "EXT_END_OF_PARTITION",
    "EXT_BARRIER",
    "EXT_TIMESTAMPED",
    "EXT_TIMESTAMP_NEXT",
    "TimestampMark",
    "timestamp_marker",
    "encode",
    "decode",
    "encode_event",
    "decode_event",
    "encode_timestamped",
    "prepare",
    "is_flat_value",
    "is_flat_batch",
    "ext_hook",
    "make_packer",
    "make_unpacker",
    "pack_flat_batch_into",
    "array_header_size",
]

# -- ext codes -----------------------------------------------------------------
EXT_PICKLE = 1
EXT_LIST = 2
EXT_WATERMARK = 10
EXT_STATUS = 11
EXT_LATENCY = 12
EXT_END_OF_PARTITION = 13
EXT_BARRIER = 14
EXT_TIMESTAMPED = 15
EXT_TIMESTAMP_NEXT = 16
#: ext codes at or above this mark a top-level control element / timestamped run
FIRST_CONTROL_CODE = 10

PICKLE_PROTOCOL = pickle.HIGHEST_PROTOCOL

_NoneType = type(None)
#: exact types the C packer round-trips unchanged
SCALAR_TYPES = frozenset((str, int, float, bool, bytes, _NoneType))
_scalars_issuperset = SCALAR_TYPES.issuperset
_chain_from_iterable = chain.from_iterable

_Q = struct.Struct(">q")
_QQ = struct.Struct(">qq")
_TS_MARKER = struct.Struct(">BBq")  # fixext 8 header, ext code, timestamp


def timestamp_marker(timestamp: int) -> bytes:
    """The 10 bytes announcing that the next encoded object is a record with ``timestamp``."""
    return _TS_MARKER.pack(0xD7, EXT_TIMESTAMP_NEXT, timestamp)


class TimestampMark:
    """Decoded ``EXT_TIMESTAMP_NEXT``: the next top-level object is a record with this timestamp."""

    __slots__ = ("timestamp",)

    def __init__(self, timestamp: int) -> None:
        self.timestamp = timestamp

    def __repr__(self) -> str:
        return f"TimestampMark({self.timestamp})"


class SerializationError(TypeError):
    """A value could not be serialized. ``value_type`` is its Python type.

    ``operator_name`` is ``None`` here; the task sets it (``with_operator``) so
    that the message names the operator that emitted the value.
    """

    def __init__(self, value_type: "type | str", cause: Optional[BaseException] = None,
                 operator_name: Optional[str] = None) -> None:
        self.value_type = value_type
        self.cause = cause
        self.operator_name = operator_name
        super().__init__(self._message())

    @property
    def type_name(self) -> str:
        """The qualified name of the value's type (what survives pickling)."""
        t = self.value_type
        if isinstance(t, str):
            return t
        return f"{t.__module__}.{t.__qualname__}" if t.__module__ != "builtins" else t.__qualname__

    def _message(self) -> str:
        name = self.type_name
        where = f" emitted by operator '{self.operator_name}'" if self.operator_name else ""
        why = f": {type(self.cause).__name__}: {self.cause}" if self.cause is not None else ""
        return f"Cannot serialize a value of type '{name}'{where}{why}"

    def with_operator(self, operator_name: str) -> "SerializationError":
        """Return a copy whose message also names ``operator_name``."""
        err = SerializationError(self.value_type, self.cause, operator_name)
        err.__cause__ = self.cause
        return err

    def __reduce__(self):
        # the type itself may not be importable by name (locks, local classes): keep its name
        return (SerializationError, (self.type_name, None, self.operator_name))


class DeserializationError(ValueError):
    """A buffer could not be decoded (corrupt stream or unpicklable payload)."""


# -- encoding --------------------------------------------------------------------
def _pickle_ext(obj: Any) -> ExtType:
    try:
        return ExtType(EXT_PICKLE, pickle.dumps(obj, protocol=PICKLE_PROTOCOL))
    except Exception as e:  # PicklingError, TypeError, AttributeError, ...
        raise SerializationError(type(obj), e) from e


_packer_pool: List[msgpack.Packer] = []


def _pack_nested(obj: Any) -> bytes:
    """Pack with a pooled packer (reentrant: hooks may call it while packing)."""
    try:
        p = _packer_pool.pop()
    except IndexError:
        p = make_packer()
    try:
        return p.pack(obj)
    except BaseException:
        p.reset()
        raise
    finally:
        _packer_pool.append(p)


def _default(obj: Any) -> Any:
    """Packer ``default`` hook: control elements, timestamped runs, pickle fallback."""
    t = type(obj)
    if t is Watermark:
        return ExtType(EXT_WATERMARK, _Q.pack(obj.timestamp))
    if t is WatermarkStatus:
        return ExtType(EXT_STATUS, b"\x01" if obj.idle else b"\x00")
    if t is EndOfPartition:
        return ExtType(EXT_END_OF_PARTITION, b"")
    if t is CheckpointBarrier:
        return ExtType(EXT_BARRIER, _QQ.pack(obj.checkpoint_id, obj.timestamp))
    if t is LatencyMarker:
        return ExtType(EXT_LATENCY, _pack_nested((obj.marked_time, obj.operator_id, obj.subtask_index)))
    if t is TimestampedRecords:
        return ExtType(EXT_TIMESTAMPED, _encode_ts_payload(obj.values, obj.timestamps))
    if t is ExtType:
        return obj
    return _pickle_ext(obj)


def make_packer(autoreset: bool = True) -> msgpack.Packer:
    """A packer with the codec's ``default`` hook (bin type for bytes)."""
    return msgpack.Packer(default=_default, use_bin_type=True, autoreset=autoreset)


_flat_encode_into = msgspec.msgpack.Encoder().encode_into


def pack_flat_batch_into(values: List[Any], buf: bytearray) -> bool:
    """Append the records of a flat batch (``is_flat_batch``) to ``buf``, packed.

    msgspec's encoder writes exactly the bytes msgpack's packer would for
    scalars and tuples of scalars, ~5x faster; the array header it writes first
    is cut out again, leaving the concatenation of the packed records. Returns
    False, with ``buf`` unchanged, for what only the codec's own packer handles
    (ints beyond 64 bits; in a batch that was not checked, types msgspec does not
    know).
    """
    start = len(buf)
    try:
        _flat_encode_into(values, buf, start)
    except (OverflowError, TypeError):
        del buf[start:]
        return False
    del buf[start:start + array_header_size(len(values))]
    return True


def array_header_size(n: int) -> int:
    """Bytes of the msgpack header of an array of ``n`` items."""
    return 1 if n < 16 else 3 if n < 0x10000 else 5


_CONTROL_TYPES = frozenset((Watermark, WatermarkStatus, LatencyMarker, CheckpointBarrier, EndOfPartition,
                            TimestampedRecords))


def prepare(obj: Any) -> Any:
    """Turn ``obj`` into something the C packer encodes faithfully.

    Lists become EXT_LIST, non-native types EXT_PICKLE; tuples and dicts are
    rebuilt around their prepared items. Scalars are returned unchanged.
    """
    t = type(obj)
    if t in SCALAR_TYPES:
        return obj
    if t is tuple:
        return tuple(map(prepare, obj))
    if t is list:
        return ExtType(EXT_LIST, _pack_nested(list(map(prepare, obj))))
    if t is dict:
        return {prepare(k): prepare(v) for k, v in obj.items()}
    if t in _CONTROL_TYPES:
        return obj  # handled by the ``default`` hook
    if t is memoryview:
        return obj.tobytes()
    return _pickle_ext(obj)


def is_flat_value(value: Any) -> bool:
    """True if ``value`` is a scalar or a tuple of scalars (packable as is)."""
    t = type(value)
    if t in SCALAR_TYPES:
        return True
    if t is tuple:
        for x in value:
            if type(x) not in SCALAR_TYPES:
                return False
        return True
    return False


def is_flat_batch(values: List[Any]) -> bool:
    """True if every value is a scalar, or every value a tuple of scalars."""
    types = set(map(type, values))
    if types <= SCALAR_TYPES:
        return True
    if len(types) == 1 and tuple in types:
        return _scalars_issuperset(map(type, _chain_from_iterable(values)))
    return False


def prepare_batch(values: List[Any]) -> List[Any]:
    """``values`` itself if flat, else a list with every non-flat value prepared."""
    if is_flat_batch(values):
        return values
    return [v if is_flat_value(v) else prepare(v) for v in values]


def _encode_ts_payload(values: List[Any], timestamps: "List[int] | int") -> bytes:
    if type(timestamps) is not int and len(values) != len(timestamps):
        raise ValueError(f"{len(values)} values but {len(timestamps)} timestamps")
    return _pack_nested((timestamps, prepare_batch(values)))


def encode_timestamped(values: List[Any], timestamps: "List[int] | int") -> bytes:
    """Encode a timestamped run as one top-level EXT_TIMESTAMPED object.

    ``timestamps``: one per value, or a single int shared by all values.
    """
    return _pack_nested(ExtType(EXT_TIMESTAMPED, _encode_ts_payload(values, timestamps)))


def encode(value: Any) -> bytes:
    """Encode one value (record or control element) to bytes."""
    if not is_flat_value(value):
        value = prepare(value)
    return _pack_nested(value)


def encode_event(event: Any) -> bytes:
    """Encode an event (barrier, end of partition, or any stream element) for its own buffer."""
    if type(event) not in _CONTROL_TYPES:
        raise TypeError(f"not an event or stream element: {type(event).__qualname__}")
    return _pack_nested(event)


# -- decoding --------------------------------------------------------------------
def ext_hook(code: int, data: bytes) -> Any:
    """Unpacker ``ext_hook`` for every code this codec writes."""
    if code == EXT_TIMESTAMP_NEXT:
        return TimestampMark(_Q.unpack(data)[0])
    if code == EXT_LIST:
        return list(_unpackb(data))
    if code == EXT_PICKLE:
        try:
            return pickle.loads(data)
        except Exception as e:
            raise DeserializationError(f"cannot unpickle a record: {type(e).__name__}: {e}") from e
    if code == EXT_WATERMARK:
        return Watermark(_Q.unpack(data)[0])
    if code == EXT_TIMESTAMPED:
        ts, vals = _unpackb(data)
        return TimestampedRecords(list(vals), [ts] * len(vals) if type(ts) is int else list(ts))
    if code == EXT_STATUS:
        return WatermarkStatus.IDLE if data == b"\x01" else WatermarkStatus.ACTIVE
    if code == EXT_LATENCY:
        t, op, idx = _unpackb(data)
        return LatencyMarker(t, op, idx)
    if code == EXT_END_OF_PARTITION:
        return END_OF_PARTITION
    if code == EXT_BARRIER:
        cid, ts = _QQ.unpack(data)
        return CheckpointBarrier(cid, ts)
    return ExtType(code, data)


def _unpackb(data: bytes) -> Any:
    return msgpack.unpackb(data, use_list=False, raw=False, strict_map_key=False, ext_hook=ext_hook)


def make_unpacker(hook: Callable[[int, bytes], Any] = ext_hook) -> msgpack.Unpacker:
    """A streaming unpacker (tuples for arrays, unlimited buffer) with ``hook``."""
    return msgpack.Unpacker(
        use_list=False, raw=False, strict_map_key=False, ext_hook=hook, max_buffer_size=0
    )


def decode(data: bytes) -> Any:
    """Decode one value written by ``encode``."""
    try:
        return _unpackb(data)
    except DeserializationError:
        raise
    except (ValueError, msgpack.UnpackException) as e:
        raise DeserializationError(f"corrupt data: {e}") from e


def decode_event(data: bytes) -> Any:
    """Decode an event buffer written by ``encode_event``."""
    return decode(data)


def decode_all(data: bytes) -> List[Any]:
    """Decode a concatenation of encoded objects (for tests and tools)."""
    u = make_unpacker()
    u.feed(data)
    return list(u)


def iter_encoded(values: Iterable[Any]) -> Iterable[bytes]:
    """Encode each value (helper for tools)."""
    return map(encode, values)
