"""msgpack wire codec for records and stream elements.

Plays the role of Flink's ``StreamElementSerializer`` (tags for record /
timestamped record / watermark / status / latency marker) plus
``EventSerializer`` (checkpoint barrier, cancel marker, end of partition) plus a generic
``TypeSerializer`` for Python values.

Wire format (one msgpack object per element, concatenated):

* a plain record is the msgpack encoding of the value itself;
* msgpack arrays are **tuples** (the unpacker runs with ``use_list=False``:
  the common tuple record decodes without a Python call); Python ``list``\\ s
  travel as ``ExtType(EXT_LIST, <packed array>)`` and come back as lists;
* a ``Row`` (``raylink.core.row``, PyFlink's Row) is ``ExtType(EXT_ROW, <packed
  (kind, names or None, values)>)`` and comes back a Row with its names and kind;
* dicts are msgpack maps (any hashable key type), str/bytes/int/float/bool/None
  are native; a str is its UTF-8 bytes, a lone surrogate (``json.loads('"\\ud800"')``)
  its three bytes ('surrogatepass', as Java's modified UTF-8 carries any Java string):
  every Python str travels and comes back equal. The packers are strict (the fast path:
  no copy of a str's bytes) and the bytes of a str that UTF-8 refuses are written by
  ``pack_surrogatepass`` instead; the unpackers decode with 'surrogatepass' (no cost on
  valid UTF-8); anything else that pickles (dataclass, datetime, Decimal, set,
  namedtuple, bytearray, ints beyond 64 bit, ...) is ``ExtType(EXT_PICKLE,
  pickle.dumps(value))``;
* a value whose class pickle cannot find by its qualified name -- a class the
  job script defined in ``__main__``, which reaches a TaskExecutor *by value*
  inside the user's functions (cloudpickle) -- is ``ExtType(EXT_PICKLE_BY_VALUE,
  ...)``: pickled with that class by value too (cloudpickle's bytes of the class,
  which keep its identity in every process). A record serializer sends each such
  class once per stream (the first record carrying it holds the class, later ones
  its id: ``stream_classes``); a decoding process keeps every class it received,
  so a stream must be decoded from its start (channels are);
* control elements and timestamped runs use reserved ext codes >= 10
  (``EXT_WATERMARK`` ... ``EXT_TIMESTAMPED``); a single timestamped record is
  a 10-byte ``EXT_TIMESTAMP_NEXT`` marker (fixext 8 holding the timestamp)
  followed by the record itself, decoded as a ``TimestampMark`` that the
  ``RecordDeserializer`` pairs with the next object.

Fast path: msgpack's packer treats tuple and list alike, so a value may be
handed to the C packer as is only if it contains no list and no type msgpack
would silently change. ``is_flat_batch``/``is_flat_value`` decide that with a
few C-level passes (scalars, or tuples of scalars and of such tuples, nested up to
``FLAT_NESTING`` deep: the decoder reads every array back as a tuple); everything else goes
through ``prepare`` (a Python walk that turns lists into EXT_LIST and
non-native types into EXT_PICKLE). A value that cannot be pickled raises
``SerializationError`` (a ``TypeError``) naming its type and why (the pickler's
own error; the reason survives being shipped to the driver).

Declared types: ``DeclaredFlatType`` compiles a flat declaration (a basic type,
or a TUPLE of basic types: ``TypeInformation.is_flat``) into a check that a
record writer runs on every record before msgspec packs it: a batch of the
declared Python types and widths (ints constrained to 8/16/32/64 bits) passes as
it is after one exact check on the compiled path (``conforms_flat``), or, elsewhere
and with values to convert, is checked and converted by one msgspec call (``convert``,
strict), then each FLOAT column is rounded to 32 bits by one ``struct`` pass (which
rejects one beyond float32's range); otherwise record by record, values
are converted as PyFlink's coders convert them (``declared_types``: a list or
namedtuple for a TUPLE becomes a tuple, an int for a DOUBLE a float, an
int-like for an INT an int) or rejected with ``RecordTypeError`` naming the
field, the value's type or its range. Any other declaration (ROW, LIST, MAP,
arrays, dates ...) compiles to a ``DeclaredType``: converted record by record
(a tuple declared as a ROW arrives as a named ``Row``), then prepared.

Threads: encoding and decoding are thread-safe. The by-value class tables are
process-wide (entries only added; a race at worst gives one class two ids);
``stream_classes`` is per thread.

Control element types are reserved: a Watermark (etc.) given as a *record*
value is decoded as the element, not as a record.
"""

from __future__ import annotations

import io
import pickle
import struct
import threading
import uuid
from itertools import chain
from operator import itemgetter
from typing import Annotated, Any, Callable, Dict, Iterable, List, Optional, Tuple

import cloudpickle
import msgpack
import msgspec
from msgpack import ExtType

from raylink.core.declared_types import (
    BASIC_PYTHON_TYPES,
    INT_RANGES,
    STRUCTURED_TYPE_NAMES,
    RecordTypeError,
    declaration_text,
    qualified_name,
    record_converter,
)
from raylink.core.row import ROW_KINDS, Row, make_row
from raylink.errors import RaylinkError
from raylink.shuffle.elements import (
    CONTROL_TYPE_SET,
    END_OF_PARTITION,
    CancelCheckpointMarker,
    CheckpointBarrier,
    EndOfPartition,
    LatencyMarker,
    TimestampedRecords,
    Watermark,
    WatermarkStatus,
)
from raylink.shuffle.hotpath import NATIVE

__all__ = [
    "SerializationError",
    "DeserializationError",
    "RecordTypeError",
    "DeclaredFlatType",
    "DeclaredType",
    "stream_classes",
    "EXT_PICKLE",
    "EXT_LIST",
    "EXT_PICKLE_BY_VALUE",
    "EXT_ROW",
    "EXT_WATERMARK",
    "EXT_STATUS",
    "EXT_LATENCY",
    "EXT_END_OF_PARTITION",
    "EXT_BARRIER",
    "EXT_CANCEL_CHECKPOINT",
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
    "fields_are_scalars",
    "fields_are_flat",
    "FLAT_NESTING",
    "ext_hook",
    "make_packer",
    "make_unpacker",
    "pack_surrogatepass",
    "pack_flat_batch_into",
    "array_header_size",
]

# -- ext codes -----------------------------------------------------------------
EXT_PICKLE = 1
EXT_LIST = 2
EXT_PICKLE_BY_VALUE = 3
EXT_ROW = 4
EXT_WATERMARK = 10
EXT_STATUS = 11
EXT_LATENCY = 12
EXT_END_OF_PARTITION = 13
EXT_BARRIER = 14
EXT_TIMESTAMPED = 15
EXT_TIMESTAMP_NEXT = 16
EXT_CANCEL_CHECKPOINT = 17
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
_QQQQ = struct.Struct(">qqqq")
_BARRIER_DRAIN = 2  # a barrier's flags: 1 unaligned, 2 a draining stop-with-savepoint's
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


class SerializationError(RaylinkError, TypeError):
    """A value could not be serialized. ``value_type`` is its Python type, ``reason``
    why (the pickler's error as text).

    ``operator_name`` is ``None`` here; the task sets it (``with_operator``) so
    that the message names the operator that emitted the value.
    """

    def __init__(
        self,
        value_type: "type | str",
        cause: Optional[BaseException] = None,
        operator_name: Optional[str] = None,
        reason: Optional[str] = None,
    ) -> None:
        self.value_type = value_type
        self.cause = cause
        self.operator_name = operator_name
        if reason is None and cause is not None:
            reason = f"{type(cause).__name__}: {cause}"
        self.reason = reason
        super().__init__(self._message())

    @property
    def type_name(self) -> str:
        """The qualified name of the value's type (what survives pickling)."""
        return qualified_name(self.value_type)

    def _message(self) -> str:
        name = self.type_name
        where = f" emitted by operator '{self.operator_name}'" if self.operator_name else ""
        why = f": {self.reason}" if self.reason else ""
        return f"Cannot serialize a value of type '{name}'{where}{why}"

    def with_operator(self, operator_name: str) -> "SerializationError":
        """Return a copy whose message also names ``operator_name``."""
        err = SerializationError(self.value_type, self.cause, operator_name, self.reason)
        err.__cause__ = self.cause
        return err

    def __reduce__(self):
        # the type itself may not be importable by name (locks, local classes) and the
        # cause may not pickle: keep their text
        return (SerializationError, (self.type_name, None, self.operator_name, self.reason))


class DeserializationError(RaylinkError, ValueError):
    """A buffer could not be decoded (corrupt stream or unpicklable payload)."""


# -- classes by value ----------------------------------------------------------------
_class_ids: Dict[type, Optional[str]] = {}  # sender: class -> its id, None if pickle finds it by name
_class_payloads: Dict[str, bytes] = {}  # sender: id -> the class pickled by value (cloudpickle)
_received_classes: Dict[str, type] = {}  # receiver: id -> class, for every class this process was sent
_by_value_types: set = set()  # record types whose instances go straight to the by-value pickler
_stream = threading.local()  # .sent: ids of the classes the stream being written already carries


class stream_classes:
    """``with stream_classes(sent):`` the records pickled inside belong to one stream:
    a by-value class in ``sent`` (a set of class ids, updated) travels as its id
    only. Outside such a block every by-value record carries its classes."""

    __slots__ = ("_sent", "_outer")

    def __init__(self, sent: set) -> None:
        self._sent = sent

    def __enter__(self) -> None:
        self._outer = getattr(_stream, "sent", None)
        _stream.sent = self._sent

    def __exit__(self, *exc: Any) -> None:
        _stream.sent = self._outer


def _class_id(cls: type) -> Optional[str]:
    """The by-value id of ``cls``, or None if pickle can reference it by name."""
    try:
        return _class_ids[cls]
    except KeyError:
        pass
    try:
        pickle.dumps(cls, protocol=PICKLE_PROTOCOL)
        cid = None
    except Exception:
        payload = cloudpickle.dumps(cls, protocol=PICKLE_PROTOCOL)
        cid = uuid.uuid4().hex
        _class_payloads[cid] = payload
    _class_ids[cls] = cid
    return cid


class _ByValuePickler(pickle.Pickler):
    """pickle, except that classes it cannot reference by name travel by value."""

    def persistent_id(self, obj: Any) -> Any:
        if not isinstance(obj, type):
            return None
        cid = _class_id(obj)
        if cid is None:
            return None
        sent = getattr(_stream, "sent", None)
        if sent is not None:
            if cid in sent:
                return cid
            sent.add(cid)
        return (cid, _class_payloads[cid])


class _ByValueUnpickler(pickle.Unpickler):
    def persistent_load(self, pid: Any) -> Any:
        if type(pid) is tuple:
            cid, payload = pid
            cls = _received_classes.get(cid)
            if cls is None:
                cls = _received_classes[cid] = cloudpickle.loads(payload)
            return cls
        try:
            return _received_classes[pid]
        except KeyError:
            raise DeserializationError(
                f"a record refers to a class by value (id {pid}) that did not reach this process "
                "(a stream decoded from its middle?)"
            ) from None


def _dumps_by_value(obj: Any) -> bytes:
    out = io.BytesIO()
    _ByValuePickler(out, protocol=PICKLE_PROTOCOL).dump(obj)
    return out.getvalue()


# -- encoding --------------------------------------------------------------------
_pickle_dumps = pickle.dumps


def _pickle_ext(obj: Any) -> ExtType:
    t = type(obj)
    if t not in _by_value_types:
        try:
            return ExtType(EXT_PICKLE, _pickle_dumps(obj, protocol=PICKLE_PROTOCOL))
        except Exception:  # PicklingError, TypeError, AttributeError, ...: by value, or why not
            pass
    try:
        data = _dumps_by_value(obj)
    except Exception as e:
        raise SerializationError(t, e) from e
    if _class_id(t) is not None:  # its own class travels by value: skip plain pickle from now on
        _by_value_types.add(t)
    return ExtType(EXT_PICKLE_BY_VALUE, data)


_packer_pool: List[msgpack.Packer] = []


def _pack_nested(obj: Any) -> bytes:
    """Pack with a pooled packer (reentrant: hooks may call it while packing)."""
    try:
        p = _packer_pool.pop()
    except IndexError:
        p = make_packer()
    try:
        return p.pack(obj)
    except UnicodeEncodeError:
        p.reset()
        return pack_surrogatepass(obj)
    except BaseException:
        p.reset()
        raise
    finally:
        _packer_pool.append(p)


_surrogate_packer_pool: List[msgpack.Packer] = []


def pack_surrogatepass(obj: Any) -> bytes:
    """``obj`` packed as the codec's packer packs it, every str as its UTF-8 bytes with lone
    surrogates as their three bytes ('surrogatepass'): what a strict packer refuses (a
    UnicodeEncodeError). Its ``default`` hook prepares nothing a strict packer would not:
    call it with the value the strict packer refused, no second ``prepare``."""
    try:
        p = _surrogate_packer_pool.pop()
    except IndexError:
        p = make_packer(unicode_errors="surrogatepass")
    try:
        return p.pack(obj)
    except BaseException:
        p.reset()
        raise
    finally:
        _surrogate_packer_pool.append(p)


def _row_ext(row: Any) -> ExtType:
    """``EXT_ROW``: (kind value, names or None, prepared values) of a Row."""
    values = row._values
    if not _scalars_issuperset(map(type, values)):
        values = list(map(prepare, values))
    names = getattr(row, "_fields", None)
    if names is not None and not _scalars_issuperset(map(type, names)):
        names = list(map(prepare, names))
    return ExtType(EXT_ROW, _pack_nested((row._row_kind.value, names, values)))


def _decode_row(data: bytes) -> Any:
    kind, names, values = _unpackb(data)
    return make_row(None if names is None else list(names), list(values), ROW_KINDS[kind])


def _default(obj: Any) -> Any:
    """Packer ``default`` hook: control elements, timestamped runs, rows, pickle fallback."""
    t = type(obj)
    if t is Watermark:
        return ExtType(EXT_WATERMARK, _Q.pack(obj.timestamp))
    if t is WatermarkStatus:
        return ExtType(EXT_STATUS, b"\x01" if obj.idle else b"\x00")
    if t is EndOfPartition:
        return ExtType(EXT_END_OF_PARTITION, b"")
    if t is CheckpointBarrier:
        data = _QQ.pack(obj.checkpoint_id, obj.timestamp)
        if obj.unaligned or obj.timeout_ms or obj.drain:  # its options, when not the default (aligned)
            data += _QQ.pack(int(obj.unaligned) | (_BARRIER_DRAIN if obj.drain else 0), obj.timeout_ms)
        return ExtType(EXT_BARRIER, data)
    if t is CancelCheckpointMarker:
        return ExtType(EXT_CANCEL_CHECKPOINT, _Q.pack(obj.checkpoint_id))
    if t is LatencyMarker:
        return ExtType(EXT_LATENCY, _pack_nested((obj.marked_time, obj.operator_id, obj.subtask_index)))
    if t is TimestampedRecords:
        return ExtType(EXT_TIMESTAMPED, _encode_ts_payload(obj.values, obj.timestamps))
    if t is ExtType:
        return obj
    if t is Row:
        return _row_ext(obj)
    return _pickle_ext(obj)


#: the internal buffer a packer starts with (msgpack's default is 256 KiB, allocated at
#: once: a serializer per subpartition made that the cost of a channel); it grows, by
#: doubling, to the largest value or batch packed
PACKER_BUFFER_SIZE = 4 * 1024


def make_packer(
    autoreset: bool = True, buf_size: int = PACKER_BUFFER_SIZE, unicode_errors: Optional[str] = None
) -> msgpack.Packer:
    """A packer with the codec's ``default`` hook (bin type for bytes), ``buf_size``
    bytes of internal buffer to start with; ``unicode_errors`` None: strict (a str with a
    lone surrogate raises UnicodeEncodeError; without a handler msgpack encodes a str in
    place, with one it copies every str's bytes first)."""
    options: Dict[str, Any] = dict(default=_default, use_bin_type=True, autoreset=autoreset)
    if unicode_errors is not None:
        options["unicode_errors"] = unicode_errors
    try:
        return msgpack.Packer(buf_size=buf_size, **options)
    except TypeError:  # msgpack < 1.1: no buf_size (always 1 MiB)
        return msgpack.Packer(**options)


_flat_encoder = msgspec.msgpack.Encoder()
_flat_encode_into = _flat_encoder.encode_into
_flat_encode = _flat_encoder.encode
_FlatExt = msgspec.msgpack.Ext


def pack_flat_batch_into(values: List[Any], buf: bytearray) -> bool:
    """Append the records of a flat batch (``is_flat_batch``) to ``buf``, packed.

    msgspec's encoder writes exactly the bytes msgpack's packer would for
    scalars and tuples of scalars, ~5x faster; the array header it writes first
    is cut out again, leaving the concatenation of the packed records. Returns
    False, with ``buf`` unchanged, for what only the codec's own packer handles
    (ints beyond 64 bits, subclasses of str and int, a str with a lone surrogate; in a
    batch that was not checked, types msgspec does not know).
    """
    start = len(buf)
    try:
        _flat_encode_into(values, buf, start)
    except (OverflowError, TypeError, UnicodeEncodeError):
        del buf[start:]
        return False
    del buf[start : start + array_header_size(len(values))]
    return True


# -- declared types ---------------------------------------------------------------------
# (the basic types and their Python types: ``raylink.core.declared_types.BASIC_PYTHON_TYPES``)


def _checked_type(name: str) -> Any:
    """The msgspec type (for one strict ``convert`` pass in C) of a field of basic type
    ``name``: ints constrained to their width, None allowed."""
    bounds = INT_RANGES.get(name)
    if bounds is not None:
        return Optional[Annotated[int, msgspec.Meta(ge=bounds[0], le=bounds[1])]]
    return Optional[BASIC_PYTHON_TYPES[name]]  # a FLOAT beyond float32: struct's OverflowError when rounded


def _float32_column(column: Any) -> List[float]:
    """A column of floats rounded to float32 in one pass (``struct.error`` for a None,
    ``OverflowError`` beyond the float32 range)."""
    n = len(column)
    return list(struct.unpack(f"<{n}f", struct.pack(f"<{n}f", *column)))


class DeclaredFlatType:
    """A flat declaration compiled for the record writer (see the module doc).

    ``declaration``: duck-typed ``TypeInformation`` (``name``, ``field_types``).
    ``conform_batch(values)`` / ``conform(value)`` return the records to pack --
    the same objects, or PyFlink's conversion of them (``declared_types``: ints
    range-checked to their width, FLOATs rounded to 32 bits) -- or raise
    ``RecordTypeError``; ``pack_batch_into(values, buf, pack)`` conforms and packs
    a batch (the serializer's path). ``None`` is accepted for any field (it travels
    as is).

    ``DeclaredFlatType.of(declaration)`` compiles any declaration: a flat one to
    this class, any other (ROW, LIST, MAP, nested TUPLE ...) to a
    :class:`DeclaredType`, which converts record by record. Thread-safe (immutable).
    """

    __slots__ = ("text", "names", "kinds", "arity", "_batch_type", "_float_columns", "_fast", "_convert")
    is_flat = True

    def __init__(self, declaration: Any) -> None:
        name = getattr(declaration, "name", None)
        if name in BASIC_PYTHON_TYPES:
            self.names: Tuple[str, ...] = (name,)
            self.arity: Optional[int] = None
        elif name == "TUPLE":
            self.names = tuple(getattr(f, "name", None) for f in declaration.field_types or ())
            self.arity = len(self.names)
        else:
            self.names = ()
        if not all(n in BASIC_PYTHON_TYPES for n in self.names) or not self.names and name != "TUPLE":
            raise ValueError(f"{declaration!r} is not a flat type (a basic type or a TUPLE of basic types)")
        self.text = declaration_text(declaration)
        self.kinds: Tuple[type, ...] = tuple(BASIC_PYTHON_TYPES[n] for n in self.names)
        fields = tuple(_checked_type(n) for n in self.names)
        self._batch_type = list[fields[0]] if self.arity is None else list[tuple[fields]]  # type: ignore[misc]
        # after the C type (and range) check, FLOAT columns are rounded to 32 bits
        self._float_columns = tuple(j for j, n in enumerate(self.names) if n == "FLOAT")
        # one record of exactly the declared types and ranges passes as it is (no FLOAT: always rounded)
        self._fast = (
            None
            if self._float_columns
            else tuple((BASIC_PYTHON_TYPES[n],) + INT_RANGES.get(n, (None, None)) for n in self.names)
        )
        self._convert = record_converter(declaration)  # record by record, with the reason of a mismatch

    @classmethod
    def of(cls, declaration: Any) -> "Optional[DeclaredFlatType | DeclaredType]":
        """The compiled declaration: a ``DeclaredFlatType`` for a flat one, a
        ``DeclaredType`` for any other; None for no declaration (or an unknown one)."""
        if isinstance(declaration, (DeclaredFlatType, DeclaredType)):
            return declaration
        try:
            return cls(declaration)
        except (ValueError, TypeError, AttributeError):
            pass
        if getattr(declaration, "name", None) in DeclaredType.NAMES:
            return DeclaredType(declaration)
        return None

    def conform_batch(self, values: List[Any]) -> List[Any]:
        """The batch to pack: ``values`` itself when every value is exactly of its declared
        type and width (no FLOAT field: ``conforms_flat``); else one C pass (msgspec) when every
        value is of its declared type and width (lists/namedtuples become tuples, ints in float
        fields floats), then one pass per FLOAT column (rounded to 32 bits); else record by
        record, converting or rejecting as ``conform`` does."""
        fast = self._fast
        if (
            conforms_flat is not None
            and fast is not None
            and type(values) is list
            and conforms_flat(values, fast, self.arity is not None)
        ):
            return values
        try:
            out = msgspec.convert(values, self._batch_type, strict=True)
            if self._float_columns:
                out = self._round_floats(out)
        except Exception:  # ValidationError (or a None in a FLOAT column): find the record, say why
            return list(map(self._convert, values))
        return out

    def _round_floats(self, out: List[Any]) -> List[Any]:
        if self.arity is None:
            return _float32_column(out)
        columns: List[Any] = [map(itemgetter(j), out) for j in range(self.arity)]
        for j in self._float_columns:
            columns[j] = _float32_column(tuple(columns[j]))
        return list(zip(*columns))

    def pack_batch_into(self, values: List[Any], buf: bytearray, pack: Callable[[Any], bytes]) -> None:
        """Conform ``values`` and append them to ``buf``, packed (msgspec, else ``pack``,
        the codec's packer: str/int subclasses msgspec refuses)."""
        out = self.conform_batch(values)
        if not pack_flat_batch_into(out, buf):
            buf += memoryview(_pack_batch(pack, out))[array_header_size(len(out)) :]

    def conform(self, value: Any) -> Any:
        """One record, of the declared type (see the class doc)."""
        fast = self._fast
        if fast is not None:
            if self.arity is None:
                kind, lo, hi = fast[0]
                if value is None or type(value) is kind and (lo is None or lo <= value <= hi):
                    return value
            elif type(value) is tuple and len(value) == self.arity:
                for x, (kind, lo, hi) in zip(value, fast):
                    if x is not None and (type(x) is not kind or lo is not None and not lo <= x <= hi):
                        break
                else:
                    return value
        return self._convert(value)

    def __repr__(self) -> str:
        return f"DeclaredFlatType({self.text})"


class DeclaredType:
    """Any other declaration (ROW, LIST, MAP, arrays, dates, nested TUPLEs ...) compiled
    for the record writer: ``conform(value)`` converts one record as PyFlink's coder
    does (``declared_types``) and prepares it for the packer (a ``Row`` becomes an
    ``EXT_ROW``, a list an ``EXT_LIST`` ...); ``convert(value)`` only converts.
    Record by record: slower than a flat declaration. Thread-safe (immutable)."""

    __slots__ = ("text", "convert")
    is_flat = False
    NAMES = STRUCTURED_TYPE_NAMES

    def __init__(self, declaration: Any) -> None:
        self.text = declaration_text(declaration)
        self.convert = record_converter(declaration)

    def conform(self, value: Any) -> Any:
        return prepare(self.convert(value))

    def conform_batch(self, values: List[Any]) -> List[Any]:
        convert = self.convert
        return [prepare(convert(v)) for v in values]

    def pack_batch_into(self, values: List[Any], buf: bytearray, pack: Callable[[Any], bytes]) -> None:
        """Conform ``values`` and append them to ``buf``, packed by ``pack`` (the codec's packer)."""
        out = self.conform_batch(values)
        buf += memoryview(_pack_batch(pack, out))[array_header_size(len(out)) :]

    def __repr__(self) -> str:
        return f"DeclaredType({self.text})"


def _pack_batch(pack: Callable[[Any], bytes], values: List[Any]) -> bytes:
    """``pack(values)`` (prepared values), or their 'surrogatepass' bytes if it refuses a str."""
    try:
        return pack(values)
    except UnicodeEncodeError:
        return pack_surrogatepass(values)


def array_header_size(n: int) -> int:
    """Bytes of the msgpack header of an array of ``n`` items."""
    return 1 if n < 16 else 3 if n < 0x10000 else 5


_CONTROL_TYPES = CONTROL_TYPE_SET | {TimestampedRecords}


def prepare(obj: Any) -> Any:
    """Turn ``obj`` into something the C packer encodes faithfully.

    Lists become EXT_LIST, Rows EXT_ROW, non-native types EXT_PICKLE; tuples and
    dicts are rebuilt around their prepared items. Scalars (and ExtTypes: values
    prepared already) are returned unchanged.
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
    if t is Row:
        return _row_ext(obj)
    if t is ExtType:
        return obj
    return _pickle_ext(obj)


#: how deep tuples may nest in a flat value: ``((day,), price)`` is flat, as tuples of scalars
FLAT_NESTING = 4


def is_flat_value(value: Any) -> bool:
    """True if ``value`` is a scalar or a flat tuple: of scalars and of flat tuples, nested at
    most ``FLAT_NESTING`` deep (packable as is)."""
    t = type(value)
    if t in SCALAR_TYPES:
        return True
    if t is tuple:
        return _is_flat_tuple(value, FLAT_NESTING)
    return False


def _is_flat_tuple(value: tuple, depth: int) -> bool:
    for x in value:
        t = type(x)
        if t not in SCALAR_TYPES and (t is not tuple or depth <= 1 or not _is_flat_tuple(x, depth - 1)):
            return False
    return True


def is_flat_batch_pure(values: List[Any]) -> bool:
    """True if every value is a scalar, or every value a flat tuple (``is_flat_value``; the
    pure-Python twin of the compiled check ``is_flat_batch`` runs when it is built:
    ``shuffle.hotpath``)."""
    types = set(map(type, values))
    if types <= SCALAR_TYPES:
        return True
    if len(types) == 1 and tuple in types:
        return fields_are_flat(values)
    return False


is_flat_batch = is_flat_batch_pure if NATIVE is None else NATIVE.is_flat_batch


def conforms_flat_pure(values: List[Any], fields: Tuple[Any, ...], is_tuple: bool) -> bool:
    """Whether every value is exactly of a flat declared type (the pure-Python twin of the
    compiled ``conforms_flat``): ``fields`` holds ``(type, low, high)`` per field (bounds None
    but for ints); a TUPLE declaration (``is_tuple``) wants tuples of ``len(fields)`` such
    fields, a basic one values like ``fields[0]``; None fits any field."""

    if not fields:
        raise ValueError("conforms_flat() needs at least one field")
    for field in fields:  # the compiled check reads them unchecked: validated alike on both paths
        if type(field) is not tuple or len(field) != 3 or not isinstance(field[0], type):
            raise ValueError(f"a field of conforms_flat() is (type, low, high), not {field!r}")

    def fits(x: Any, kind: type, lo: Any, hi: Any) -> bool:
        return x is None or type(x) is kind and (lo is None or lo <= x <= hi)

    if not is_tuple:
        kind, lo, hi = fields[0]
        return all(fits(v, kind, lo, hi) for v in values)
    arity = len(fields)
    return all(
        type(v) is tuple and len(v) == arity and all(fits(x, *field) for x, field in zip(v, fields)) for v in values
    )


#: the compiled check, or None on the pure-Python path: there msgspec's strict conversion (C) costs
#: less than the twin's Python loop, which stays the reference (the hot-path tests)
conforms_flat = None if NATIVE is None else NATIVE.conforms_flat


def fields_are_scalars(tuples: List[tuple]) -> bool:
    """True if every field of every tuple is a scalar (one C-level pass over the fields)."""
    return _scalars_issuperset(map(type, _chain_from_iterable(tuples)))


def fields_are_flat(tuples: List[tuple]) -> bool:
    """True if every tuple is flat (``is_flat_value``): one C-level pass when every field is a
    scalar, a walk of each tuple otherwise."""
    return fields_are_scalars(tuples) or all(map(is_flat_value, tuples))


def prepare_batch(values: List[Any], flat: Optional[bool] = None) -> List[Any]:
    """``values`` itself if flat, else a list with every non-flat value prepared
    (``flat``: ``is_flat_batch(values)`` when the caller knows it already)."""
    if is_flat_batch(values) if flat is None else flat:
        return values
    return [v if is_flat_value(v) else prepare(v) for v in values]


def _check_run(values: List[Any], timestamps: "List[int] | int") -> None:
    if type(timestamps) is not int and len(values) != len(timestamps):
        raise ValueError(f"{len(values)} values but {len(timestamps)} timestamps")


def _encode_ts_payload(values: List[Any], timestamps: "List[int] | int", flat: Optional[bool] = None) -> bytes:
    _check_run(values, timestamps)
    return _pack_nested((timestamps, prepare_batch(values, flat)))


def encode_timestamped(values: List[Any], timestamps: "List[int] | int", flat: Optional[bool] = None) -> bytes:
    """Encode a timestamped run as one top-level EXT_TIMESTAMPED object.

    ``timestamps``: one per value, or a single int shared by all values. A flat run
    (``is_flat_batch``) of int timestamps is written by msgspec, the same bytes as
    msgpack's packer writes (see ``pack_flat_batch_into``), ~5x faster. ``flat``: the
    result of ``is_flat_batch(values)`` when the caller has it (checked here otherwise).
    """
    if flat is None:
        flat = is_flat_batch(values)
    if flat:
        _check_run(values, timestamps)
        try:
            return _flat_encode(_FlatExt(EXT_TIMESTAMPED, _flat_encode((timestamps, values))))
        except (OverflowError, TypeError, UnicodeEncodeError):
            pass  # an int beyond 64 bits, a timestamp of another type, a lone surrogate: the codec's packer
    return _pack_nested(ExtType(EXT_TIMESTAMPED, _encode_ts_payload(values, timestamps, flat)))


def encode(value: Any) -> bytes:
    """Encode one value (record or control element) to bytes."""
    if not is_flat_value(value):
        value = prepare(value)
    return _pack_nested(value)


def encode_event(event: Any) -> bytes:
    """Encode an event (barrier, cancel marker, end of partition, or any stream element) for its own buffer."""
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
    if code == EXT_ROW:
        return _decode_row(data)
    if code == EXT_PICKLE:
        try:
            return pickle.loads(data)
        except Exception as e:
            raise DeserializationError(f"cannot unpickle a record: {type(e).__name__}: {e}") from e
    if code == EXT_PICKLE_BY_VALUE:
        try:
            return _ByValueUnpickler(io.BytesIO(data)).load()
        except DeserializationError:
            raise
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
        if len(data) > 16:
            cid, ts, flags, timeout_ms = _QQQQ.unpack(data)
            return CheckpointBarrier(cid, ts, bool(flags & 1), timeout_ms, bool(flags & _BARRIER_DRAIN))
        cid, ts = _QQ.unpack(data)
        return CheckpointBarrier(cid, ts)
    if code == EXT_CANCEL_CHECKPOINT:
        return CancelCheckpointMarker(_Q.unpack(data)[0])
    return ExtType(code, data)


def _unpackb(data: bytes) -> Any:
    return msgpack.unpackb(
        data, use_list=False, raw=False, strict_map_key=False, ext_hook=ext_hook, unicode_errors="surrogatepass"
    )


#: the internal buffer a streaming unpacker starts with (msgpack's default with an unlimited
#: ``max_buffer_size`` is 1 MiB, allocated at once); it grows to twice what is fed at once
#: plus the partial element carried over (a 32 KiB network buffer: ~64 KiB)
UNPACKER_READ_SIZE = 32 * 1024


def make_unpacker(
    hook: Callable[[int, bytes], Any] = ext_hook, read_size: int = UNPACKER_READ_SIZE
) -> msgpack.Unpacker:
    """A streaming unpacker (tuples for arrays, unlimited buffer) with ``hook``, starting
    with ``read_size`` bytes of buffer.

    Whatever ``read_size``, a msgpack ``Unpacker`` holds its parse stack inline: ~40 KiB
    each (1,024 levels), allocated and zeroed when it is created. Create one per stream
    when its data arrives, not per idle channel (``RecordDeserializer``)."""
    return msgpack.Unpacker(
        use_list=False,
        raw=False,
        strict_map_key=False,
        ext_hook=hook,
        max_buffer_size=0,
        read_size=read_size,
        unicode_errors="surrogatepass",
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
