"""The text ``DataStream.print()`` writes for a record: what Flink's ``PrintSinkFunction``
prints for it under PyFlink 2.3.

``record_formatter(type_info)`` compiles the stream's declared type into
``format(record) -> str``:

* no type, or ``PICKLED_BYTE_ARRAY``: Python's ``str(record)`` (PyFlink maps such a
  stream to strings with ``str`` before its Java print sink): ``('a', 5)``,
  ``Row(name='a', age=5)``;
* ``ROW`` / ``ROW_NAMED``: PyFlink's own row text, ``<kind>[<str of each field>,...]``
  without spaces: ``+I[a,5]`` (a tuple or list given for a ROW counts as an INSERT);
* any other type: the record converted as PyFlink's coder converts it (so a FLOAT
  is a float32, an INT out of range fails) and printed as Java's ``toString``
  prints the Java value: a TUPLE as ``Tuple.toString`` does, ``(a,5)`` (nested:
  ``(a,(b,1.5))``), a DOUBLE/FLOAT as ``Double``/``Float.toString`` (``1.0``,
  ``1.0E7``, ``1.5E-4``, ``NaN``), a BOOLEAN ``true``, None ``null``, a LIST or array
  ``[1, 2]``, a MAP ``{a=1, b=2}`` (in the dict's order), a Row inside a TUPLE
  ``+I[a, 5]``, SQL_DATE/TIME/TIMESTAMP as ``java.sql``'s ``2024-05-01``,
  ``12:00:00``, ``2024-05-01 12:00:00.123``, an INSTANT as ISO-8601
  ``2024-05-01T12:00:00Z``. (A Java array's own ``toString`` is its address; raylink
  prints its elements instead.)

Thread-safety: formatters are immutable closures.
"""

from __future__ import annotations

import decimal
import math
from typing import Any, Callable

from raylink.core.declared_types import record_converter, round_float32
from raylink.core.row import Row, RowKind

__all__ = ["record_formatter", "java_double_string", "java_float_string"]

Formatter = Callable[[Any], str]


def record_formatter(type_info: Any) -> Formatter:
    """``format(record)`` for a stream declared ``type_info`` (see the module doc)."""
    name = getattr(type_info, "name", None)
    if name is None or name == "PICKLED_BYTE_ARRAY":
        return str
    if name == "ROW":
        return _pyflink_row_formatter(type_info)
    convert = record_converter(type_info)
    java = _java_formatter(type_info)
    return lambda record: java(convert(record))


def _pyflink_row_formatter(type_info: Any) -> Formatter:
    convert = record_converter(type_info)
    insert = RowKind.INSERT

    def format_row(record: Any) -> str:
        if isinstance(record, Row):
            kind, values = record._row_kind, record._values
        elif isinstance(record, (tuple, list)):
            kind, values = insert, record
        else:
            row = convert(record)  # a dict: by name; anything else: a RecordTypeError
            kind, values = row._row_kind, row._values
        return f"{kind}[{','.join(map(str, values))}]"

    return format_row


# -- Java's toString --------------------------------------------------------------------------
def _scientific(digits: str, exponent: int, negative: bool, plain: bool) -> str:
    """Java's Double/Float.toString layout of ``0.digits × 10^exponent``-style shortest digits:
    ``digits`` (no leading/trailing zeros), ``exponent`` of the first digit."""
    sign = "-" if negative else ""
    if plain:  # 10^-3 <= |x| < 10^7: plain decimal with at least one digit after the point
        if exponent >= 0:
            whole = digits[: exponent + 1].ljust(exponent + 1, "0")
            fraction = digits[exponent + 1 :] or "0"
        else:
            whole, fraction = "0", "0" * (-exponent - 1) + digits
        return f"{sign}{whole}.{fraction}"
    return f"{sign}{digits[0]}.{digits[1:] or '0'}E{exponent}"


def _shortest(text: str) -> tuple:
    """(digits, exponent of the first digit) of a float's shortest decimal text."""
    _, digits, exp = decimal.Decimal(text).as_tuple()
    significant = "".join(map(str, digits)).lstrip("0")
    stripped = significant.rstrip("0")
    exp += len(significant) - len(stripped)  # the value is int(stripped) * 10**exp
    return stripped, exp + len(stripped) - 1


def _special(x: float) -> "str | None":
    if x != x:
        return "NaN"
    if math.isinf(x):
        return "Infinity" if x > 0 else "-Infinity"
    if x == 0.0:
        return "-0.0" if math.copysign(1.0, x) < 0 else "0.0"
    return None


def java_double_string(x: float) -> str:
    """Java's ``Double.toString(x)`` (shortest digits that read back as ``x``)."""
    special = _special(x)
    if special is not None:
        return special
    digits, exponent = _shortest(repr(abs(x)))
    return _scientific(digits, exponent, x < 0, 1e-3 <= abs(x) < 1e7)


def java_float_string(x: float) -> str:
    """Java's ``Float.toString`` of the float32 ``x`` (shortest digits that read back as it)."""
    special = _special(x)
    if special is not None:
        return special
    a = abs(x)
    for precision in range(1, 10):
        text = "%.*e" % (precision - 1, a)
        if round_float32(float(text)) == a:
            break
    digits, exponent = _shortest(text)
    return _scientific(digits, exponent, x < 0, 1e-3 <= a < 1e7)


def _java_timestamp(t: Any) -> str:
    nanos = t.microsecond * 1000
    fraction = "0" if nanos == 0 else f"{nanos:09d}".rstrip("0")
    return f"{t.year:04d}-{t.month:02d}-{t.day:02d} {t.hour:02d}:{t.minute:02d}:{t.second:02d}.{fraction}"


def _java_instant(i: Any) -> str:
    import datetime

    moment = datetime.datetime(1970, 1, 1) + datetime.timedelta(seconds=i.seconds)
    nanos = i.nanos
    if nanos == 0:
        fraction = ""
    elif nanos % 1_000_000 == 0:
        fraction = f".{nanos // 1_000_000:03d}"
    elif nanos % 1000 == 0:
        fraction = f".{nanos // 1000:06d}"
    else:
        fraction = f".{nanos:09d}"
    return moment.strftime("%Y-%m-%dT%H:%M:%S") + fraction + "Z"


def _java_row(row: Any) -> str:  # Row.toString of a nested (untyped-field) row
    return f"{row._row_kind}[{', '.join(_java_any(v) for v in row._values)}]"


def _java_any(v: Any) -> str:
    """Java's toString of a value of no declared type (inside a LIST of rows, say)."""
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return java_double_string(v)
    if isinstance(v, Row):
        return _java_row(v)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(map(_java_any, v)) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{_java_any(k)}={_java_any(x)}" for k, x in v.items()) + "}"
    return str(v)


def _null_or(f: Formatter) -> Formatter:
    return lambda v: "null" if v is None else f(v)


def _java_formatter(type_info: Any) -> Formatter:
    """Java's toString of a converted value declared ``type_info`` (None: ``null``)."""
    name = getattr(type_info, "name", None)
    fields = tuple(getattr(type_info, "field_types", None) or ())
    if name in ("STRING", "CHAR"):
        return _null_or(str)
    if name in ("INT", "LONG", "SHORT", "BYTE", "BIG_INT", "BIG_DEC"):
        return _null_or(str)
    if name == "BOOLEAN":
        return lambda v: "null" if v is None else ("true" if v else "false")
    if name == "DOUBLE":
        return _null_or(java_double_string)
    if name == "FLOAT":
        return _null_or(java_float_string)
    if name == "SQL_DATE":
        return _null_or(lambda d: d.isoformat())
    if name == "SQL_TIME":
        return _null_or(lambda t: f"{t.hour:02d}:{t.minute:02d}:{t.second:02d}")
    if name == "SQL_TIMESTAMP":
        return _null_or(_java_timestamp)
    if name == "INSTANT":
        return _null_or(_java_instant)
    if name == "TUPLE":
        formats = tuple(_java_formatter(f) for f in fields)
        return _null_or(lambda t: "(" + ",".join(f(x) for f, x in zip(formats, t)) + ")")
    if name == "ROW":
        formats = tuple(_java_formatter(f) for f in fields)
        return _null_or(lambda r: f"{r._row_kind}[{', '.join(f(x) for f, x in zip(formats, r._values))}]")
    if name in ("LIST", "BASIC_ARRAY", "OBJECT_ARRAY", "PRIMITIVE_ARRAY"):
        element = _java_formatter(fields[0]) if fields else _java_any
        if name == "PRIMITIVE_ARRAY" and getattr(fields[0] if fields else None, "name", None) == "BYTE":
            return _null_or(lambda b: "[" + ", ".join(str(x - 256 if x > 127 else x) for x in b) + "]")
        return _null_or(lambda items: "[" + ", ".join(map(element, items)) + "]")
    if name == "MAP":
        key = _java_formatter(fields[0]) if fields else _java_any
        value = _java_formatter(fields[1]) if len(fields) > 1 else _java_any
        return _null_or(lambda m: "{" + ", ".join(f"{key(k)}={value(v)}" for k, v in m.items()) + "}")
    return _java_any
