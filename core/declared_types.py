"""Declared stream types applied to values as PyFlink's coders apply them.

Flink turns a stream's ``TypeInformation`` into a ``TypeSerializer``; PyFlink's
coders (``pyflink.fn_execution.coders``) do the same for Python values, and in
doing so *convert* them: what a Python function emits is encoded as the declared
type and decoded on the other side as that type's Python value. raylink ships
Python values with msgpack, so it applies the same conversion where a record
leaves its chain (the record writer), when a typed collection source is built,
and when a sink formats a typed record. ``value_converter(type_info)`` compiles a
declaration into that conversion:

=====================  ===================================================================
declared type          value that arrives (what is accepted)
=====================  ===================================================================
BYTE/SHORT/INT/LONG    an ``int`` in 8/16/32/64 bits (bool, IntEnum, numpy ints); a value
                       out of range is an error, as the coder's fixed-width write is
BIG_INT                an ``int`` in 64 bits (PyFlink encodes it as a LONG)
FLOAT                  a ``float`` rounded to 32 bits (``struct.pack('f')``: 0.1 arrives as
                       0.10000000149011612); beyond the float32 range an error
DOUBLE                 a ``float`` (ints, Decimals, numpy floats)
STRING, CHAR           a ``str`` (a str subclass, e.g. a str Enum, as its str value)
BOOLEAN                a ``bool`` (an int 0..255 as its truth value)
BIG_DEC                a ``decimal.Decimal`` (``Decimal(str(value))``: ints, floats, numeric text)
SQL_DATE               a ``datetime.date`` (a datetime's date)
SQL_TIME               a naive ``datetime.time`` in milliseconds
SQL_TIMESTAMP          a naive ``datetime.datetime`` in milliseconds (an aware one keeps its
                       wall-clock time and drops the zone)
INSTANT                a ``raylink.core.time.Instant``
PICKLED_BYTE_ARRAY     any value, as it is
PRIMITIVE_ARRAY(BYTE)  ``bytes`` (bytes, bytearray, memoryview)
PRIMITIVE_ARRAY(T)     a ``list`` of T (a list or tuple; no None element)
BASIC_ARRAY(T), OBJECT_ARRAY(T), LIST(T)
                       a ``list`` of T or None (a list or tuple)
MAP(K, V)              a ``dict`` of K to V or None
TUPLE([...])           a ``tuple`` (a tuple, list, namedtuple or Row of that arity)
ROW / ROW_NAMED        a ``Row`` named as declared (``f0``, ``f1`` ... for ``Types.ROW``), of
                       the kind of the Row given; from a Row (by name when both are named),
                       a tuple or list (by position) or a dict (by name)
=====================  ===================================================================

``None`` passes in any field (as it travels in a Flink null mask) except as an
element of a PRIMITIVE_ARRAY or a MAP key; a TUPLE or ROW record itself must
not be None. A value that does not convert raises ``RecordTypeError`` naming
where it sits (``element 2 of field 1 of a record``), the declaration, the
value's type (or the value, when it is out of range) and the record.

Thread-safety: compiled converters are immutable closures; call them from any thread.
"""

from __future__ import annotations

import datetime
import decimal
import operator
import struct
from collections.abc import Mapping
from typing import Any, Callable, Dict, List, Optional, Tuple

from raylink.core.reprs import record_repr
from raylink.core.row import Row, RowKind, make_row
from raylink.core.time import Instant
from raylink.errors import RaylinkError

__all__ = [
    "RecordTypeError",
    "value_converter",
    "record_converter",
    "declaration_text",
    "qualified_name",
    "INT_RANGES",
    "FLOAT32_MAX",
    "BASIC_PYTHON_TYPES",
    "BASIC_TYPE_NAMES",
    "STRUCTURED_TYPE_NAMES",
    "round_float32",
]

#: signed ranges of the fixed-width integer types, as the coders write them
INT_RANGES = {
    "BYTE": (-(1 << 7), (1 << 7) - 1),
    "SHORT": (-(1 << 15), (1 << 15) - 1),
    "INT": (-(1 << 31), (1 << 31) - 1),
    "LONG": (-(1 << 63), (1 << 63) - 1),
    "BIG_INT": (-(1 << 63), (1 << 63) - 1),
}
#: the largest finite float32
FLOAT32_MAX = struct.unpack("<f", b"\xff\xff\x7f\x7f")[0]
#: the basic types (what a flat declaration may hold: ``raylink.shuffle.codec.DeclaredFlatType``),
#: each with the Python type its values have
BASIC_PYTHON_TYPES: Dict[str, type] = {
    "STRING": str,
    "CHAR": str,
    "INT": int,
    "LONG": int,
    "SHORT": int,
    "BYTE": int,
    "BIG_INT": int,
    "BOOLEAN": bool,
    "FLOAT": float,
    "DOUBLE": float,
}
#: the names of the basic types
BASIC_TYPE_NAMES = frozenset(BASIC_PYTHON_TYPES)
#: the other declarations a record writer applies, record by record (all but PICKLED_BYTE_ARRAY,
#: which ships values as they are)
STRUCTURED_TYPE_NAMES = frozenset(
    (
        "TUPLE",
        "ROW",
        "LIST",
        "MAP",
        "PRIMITIVE_ARRAY",
        "BASIC_ARRAY",
        "OBJECT_ARRAY",
        "BIG_DEC",
        "SQL_DATE",
        "SQL_TIME",
        "SQL_TIMESTAMP",
        "INSTANT",
    )
)
_ARRAYS = frozenset(("BASIC_ARRAY", "OBJECT_ARRAY", "LIST"))
_F32 = struct.Struct("<f")


def qualified_name(t: "type | str") -> str:
    """``module.QualName`` of a type (just the name for builtins); a str is returned as is."""
    if isinstance(t, str):
        return t
    module = getattr(t, "__module__", None)
    return f"{module}.{t.__qualname__}" if module not in (None, "builtins") else t.__qualname__


def _a(name: str) -> str:
    return f"an {name}" if name[:1].lower() in "aeiou" else f"a {name}"


class RecordTypeError(RaylinkError, TypeError):
    """A record does not match its stream's declared type: ``declared`` (the
    declaration as text), ``field`` (the top-level position, None for the record
    itself), ``value_type`` (the offending value's
    type name) and ``path`` (where the value sits, e.g. ``element 2 of field 1``)."""

    def __init__(
        self, message: str, declared: str = "", field: Optional[int] = None, value_type: str = "", path: str = ""
    ) -> None:
        super().__init__(message)
        self.declared = declared
        self.field = field
        self.value_type = value_type
        self.path = path

    def __reduce__(self):
        return (RecordTypeError, (str(self), self.declared, self.field, self.value_type, self.path))


class _Mismatch(Exception):
    """Internal: a value does not convert. ``path`` grows outwards as it unwinds."""

    def __init__(self, what: str, value_type: type) -> None:
        super().__init__(what)
        self.what = what
        self.value_type = value_type
        self.path: List[str] = []
        self.position: Optional[int] = None  # the top-level field position, once known


def _not_a(x: Any, name: str) -> _Mismatch:
    t = type(x)
    return _Mismatch(f"is {_a(qualified_name(t))}, not {_a(name)}", t)


def _is_a(x: Any) -> _Mismatch:
    t = type(x)
    return _Mismatch(f"is {_a(qualified_name(t))}", t)


# -- basic types --------------------------------------------------------------------------
def _int_converter(name: str) -> Callable[[Any], int]:
    lo, hi = INT_RANGES[name]

    def convert_int(x: Any) -> int:
        if type(x) is not int:
            try:
                x = int(operator.index(x))  # bool, IntEnum, numpy ints: as the int coders take them
            except TypeError:
                raise _not_a(x, name) from None
        if lo <= x <= hi:
            return x
        raise _Mismatch(f"is {record_repr(x, 60)}, out of the range of {_a(name)} ({lo} to {hi})", int)

    return convert_int


def round_float32(x: float) -> float:
    """``x`` rounded to the nearest float32 (``OverflowError`` beyond its range)."""
    return _F32.unpack(_F32.pack(x))[0]


def _to_float(x: Any, name: str) -> float:
    if isinstance(x, (str, bytes, bytearray)):
        raise _not_a(x, name)
    try:
        return float(x)  # int, Decimal, numpy floats: as the float coders take them
    except (TypeError, ValueError):
        raise _not_a(x, name) from None
    except OverflowError:
        raise _Mismatch(f"is {record_repr(x, 60)}, out of the range of {_a(name)}", type(x)) from None


def _convert_float(x: Any) -> float:
    if type(x) is not float:
        x = _to_float(x, "FLOAT")
    try:
        return _F32.unpack(_F32.pack(x))[0]
    except OverflowError:
        raise _Mismatch(f"is {x!r}, out of the range of a FLOAT (±{FLOAT32_MAX!r})", float) from None


def _convert_double(x: Any) -> float:
    return x if type(x) is float else _to_float(x, "DOUBLE")


def _str_converter(name: str) -> Callable[[Any], str]:
    def convert_str(x: Any) -> str:
        if type(x) is str:
            return x
        if isinstance(x, str):  # str subclasses (a str Enum): their str value, as PyFlink encodes them
            return str.__str__(x)
        raise _not_a(x, name)

    return convert_str


def _convert_bool(x: Any) -> bool:
    if type(x) is bool:
        return x
    t = type(x)
    if t.__module__ == "numpy" and t.__name__ in ("bool", "bool_"):
        return bool(x)
    try:
        v = operator.index(x)  # the coder writes one unsigned byte and reads back its truth
    except TypeError:
        raise _not_a(x, "BOOLEAN") from None
    if 0 <= v <= 255:
        return bool(v)
    raise _Mismatch(f"is {record_repr(x, 60)}, out of the range of a BOOLEAN (a byte, 0 to 255)", t)


def _convert_big_dec(x: Any) -> decimal.Decimal:
    if type(x) is decimal.Decimal:
        return x
    if isinstance(x, (int, float, str, decimal.Decimal)) and not isinstance(x, bool):
        try:
            return decimal.Decimal(str(x))  # the coder writes str(value), reads Decimal(text)
        except decimal.InvalidOperation:
            pass
    raise _not_a(x, "BIG_DEC")


def _convert_date(x: Any) -> datetime.date:
    if type(x) is datetime.date:
        return x
    if isinstance(x, datetime.datetime):
        return x.date()
    if isinstance(x, datetime.date):
        return datetime.date(x.year, x.month, x.day)
    raise _not_a(x, "SQL_DATE")


def _convert_time(x: Any) -> datetime.time:
    if not isinstance(x, datetime.time):
        raise _not_a(x, "SQL_TIME")
    return datetime.time(x.hour, x.minute, x.second, x.microsecond // 1000 * 1000)


def _convert_timestamp(x: Any) -> datetime.datetime:
    if not isinstance(x, datetime.datetime):
        raise _not_a(x, "SQL_TIMESTAMP")
    return datetime.datetime(x.year, x.month, x.day, x.hour, x.minute, x.second, x.microsecond // 1000 * 1000)


def _convert_instant(x: Any) -> Any:
    if isinstance(x, Instant):
        return x
    raise _not_a(x, "INSTANT")


def _convert_bytes(x: Any) -> bytes:
    if type(x) is bytes:
        return x
    if isinstance(x, (bytes, bytearray, memoryview)):
        return bytes(x)
    raise _not_a(x, "PRIMITIVE_ARRAY(BYTE)")


def _identity(x: Any) -> Any:
    return x


_BASIC_CONVERTERS = {
    "BYTE": _int_converter("BYTE"),
    "SHORT": _int_converter("SHORT"),
    "INT": _int_converter("INT"),
    "LONG": _int_converter("LONG"),
    "BIG_INT": _int_converter("BIG_INT"),
    "FLOAT": _convert_float,
    "DOUBLE": _convert_double,
    "STRING": _str_converter("STRING"),
    "CHAR": _str_converter("CHAR"),
    "BOOLEAN": _convert_bool,
    "BIG_DEC": _convert_big_dec,
    "SQL_DATE": _convert_date,
    "SQL_TIME": _convert_time,
    "SQL_TIMESTAMP": _convert_timestamp,
    "INSTANT": _convert_instant,
    "PICKLED_BYTE_ARRAY": _identity,
}


# -- composite types ------------------------------------------------------------------------
def _fields_of(type_info: Any) -> Tuple[Any, ...]:
    return tuple(getattr(type_info, "field_types", None) or ())


def _tuple_converter(type_info: Any) -> Callable[[Any], tuple]:
    converters = tuple(value_converter(f) for f in _fields_of(type_info))
    arity = len(converters)

    def convert_tuple(x: Any) -> tuple:
        if not isinstance(x, (tuple, list, Row)):
            raise _is_a(x)
        if len(x) != arity:
            raise _Mismatch(f"has {len(x)} fields", type(x))
        out = []
        append = out.append
        for j, (convert, v) in enumerate(zip(converters, x)):
            if v is None:
                append(None)
                continue
            try:
                append(convert(v))
            except _Mismatch as m:
                m.path.append(f"field {j}")
                m.position = j
                raise
        return tuple(out)

    return convert_tuple


def _row_converter(type_info: Any) -> Callable[[Any], Any]:
    converters = tuple(value_converter(f) for f in _fields_of(type_info))
    arity = len(converters)
    declared_names = getattr(type_info, "field_names", None)
    names = list(declared_names) if declared_names else [f"f{i}" for i in range(arity)]
    labels = [f"field {n!r}" for n in names] if declared_names else [f"field {i}" for i in range(arity)]
    insert = RowKind.INSERT

    def convert_row(x: Any) -> Any:
        kind = insert
        if isinstance(x, Row):
            kind = x._row_kind
            fields = getattr(x, "_fields", None)
            if fields is None or fields == names:
                values = x._values
            else:
                for n in names:
                    if n not in fields:
                        raise _Mismatch(f"is a Row without a field {n!r} (its fields: {fields})", Row)
                values = [x._values[fields.index(n)] for n in names]
        elif isinstance(x, (tuple, list)):
            values = x
        elif isinstance(x, Mapping):
            values = [x.get(n) for n in names]
        else:
            raise _is_a(x)
        if len(values) != arity:
            raise _Mismatch(f"has {len(values)} fields", type(x))
        out = []
        append = out.append
        for j, (convert, v) in enumerate(zip(converters, values)):
            if v is None:
                append(None)
                continue
            try:
                append(convert(v))
            except _Mismatch as m:
                m.path.append(labels[j])
                m.position = j
                raise
        return make_row(names, out, kind)

    return convert_row


def _array_converter(type_info: Any, primitive: bool) -> Callable[[Any], Any]:
    element_type = _fields_of(type_info)[0] if _fields_of(type_info) else None
    if primitive and getattr(element_type, "name", None) == "BYTE":
        return _convert_bytes  # PyFlink's byte[]: bytes
    convert = value_converter(element_type) if element_type is not None else _identity
    name = declaration_text(type_info, top=False)

    def convert_array(x: Any) -> list:
        if not isinstance(x, (list, tuple)):
            raise _not_a(x, name)
        out = []
        append = out.append
        for i, v in enumerate(x):
            if v is None:
                if primitive:
                    m = _Mismatch(f"is None, which {_a(name)} cannot hold", type(None))
                    m.path.append(f"element {i}")
                    raise m
                append(None)
                continue
            try:
                append(convert(v))
            except _Mismatch as m:
                m.path.append(f"element {i}")
                raise
        return out

    return convert_array


def _map_converter(type_info: Any) -> Callable[[Any], dict]:
    fields = _fields_of(type_info)
    convert_key = value_converter(fields[0]) if fields else _identity
    convert_value = value_converter(fields[1]) if len(fields) > 1 else _identity
    name = declaration_text(type_info, top=False)

    def convert_map(x: Any) -> dict:
        if not isinstance(x, Mapping):
            raise _not_a(x, name)
        out = {}
        for k, v in x.items():
            try:
                if k is None:
                    raise _Mismatch(f"is None, which cannot be a key of {_a(name)}", type(None))
                k = convert_key(k)
            except _Mismatch as m:
                m.path.append(f"key {record_repr(k, 40)}")
                raise
            try:
                out[k] = None if v is None else convert_value(v)
            except _Mismatch as m:
                m.path.append(f"the value of key {record_repr(k, 40)}")
                raise
        return out

    return convert_map


def value_converter(type_info: Any) -> Callable[[Any], Any]:
    """The conversion of one non-None value of ``type_info`` (see the module doc); it
    raises an internal mismatch that :func:`record_converter` turns into a
    ``RecordTypeError``. An unknown declaration converts nothing."""
    name = getattr(type_info, "name", None)
    basic = _BASIC_CONVERTERS.get(name)
    if basic is not None:
        return basic
    if name == "TUPLE":
        return _tuple_converter(type_info)
    if name == "ROW":
        return _row_converter(type_info)
    if name == "PRIMITIVE_ARRAY":
        return _array_converter(type_info, primitive=True)
    if name in _ARRAYS:
        return _array_converter(type_info, primitive=False)
    if name == "MAP":
        return _map_converter(type_info)
    return _identity


def record_converter(type_info: Any) -> Callable[[Any], Any]:
    """``convert(record)``: the record as ``type_info``'s coder delivers it, or
    ``RecordTypeError`` naming where and why not (see the module doc)."""
    convert = value_converter(type_info)
    text = declaration_text(type_info)
    none_passes = getattr(type_info, "name", None) in _BASIC_CONVERTERS

    def convert_record(record: Any) -> Any:
        if record is None and none_passes:
            return None
        try:
            if record is None:
                raise _is_a(record)
            return convert(record)
        except _Mismatch as m:
            raise mismatch_error(m, text, record) from None

    return convert_record


def mismatch_error(m: _Mismatch, text: str, record: Any) -> RecordTypeError:
    """The ``RecordTypeError`` for a mismatch found in ``record`` declared ``text``."""
    path = " of ".join(m.path)  # innermost first
    where = f"{path} of a record" if path else "a record"
    return RecordTypeError(
        f"{where} declared {text} {m.what}: {record_repr(record)}", text, m.position, qualified_name(m.value_type), path
    )


def declaration_text(type_info: Any, top: bool = True) -> str:
    """A declaration as a program writes it: ``Types.TUPLE([STRING, LIST(INT)])``,
    ``Types.ROW_NAMED(['a', 'b'], [STRING, INT])``, ``Types.INT()``."""
    name = getattr(type_info, "name", None)
    if name is None:
        return repr(type_info)
    fields = _fields_of(type_info)
    inner = ", ".join(declaration_text(f, top=False) for f in fields)
    if name in ("TUPLE", "ROW"):
        names = getattr(type_info, "field_names", None)
        text = f"ROW_NAMED({list(names)!r}, [{inner}])" if names else f"{name}([{inner}])"
    elif fields:
        text = f"{name}({inner})"
    else:
        text = f"{name}()" if top else name
    return f"Types.{text}" if top else text
