"""Built-in keyed aggregations: Flink's ``SumAggregator`` and ``ComparableAggregator``.

``make_aggregator(agg, field)`` returns a reduce function ``(acc, value) -> acc``
used by the grouped reduce operator (which emits the first record of a key as is):

* ``sum``: the accumulated record (the key's first record) with ``field`` replaced
  by the running sum; ``min`` / ``max``: likewise with the running min / max;
* ``min_by`` / ``max_by``: the whole record holding the min / max (on ties the
  first one seen is kept).

``field``: an int position (tuples, lists, Rows, indexable records; on a basic
value -- a number, str or bytes -- position 0 is the value itself, as in Flink), a
str name (a Row's field name -- ``Types.ROW`` rows are named ``f0``, ``f1`` ... as
in PyFlink --, a dict key, or an attribute: namedtuples, objects), or ``None`` (the
value itself). Records are never mutated: tuples get a new tuple, Rows/lists/dicts/
objects a copy (a Row keeps its names and kind).

``field_check(agg, field, operator_name)`` is the check Flink's
``FieldAccessorFactory`` makes against the stream's type, made here against a
record (Python records have no declared arity): the grouped aggregate operator
runs it on the first record of every key, so a position beyond the record's
arity (or a missing name) fails with ``InvalidFieldReferenceError`` naming the
operator and the field instead of aggregating another field.
``check_declared_field(agg, field, type_info, operator_name)`` makes the same
check against a stream's declared TUPLE/ROW/basic type when the program is built.
"""

from __future__ import annotations

import copy
import decimal
import operator
from collections.abc import Mapping
from typing import Any, Callable, Optional, Union

from raylink.core.declared_types import declaration_text
from raylink.core.reprs import record_repr
from raylink.core.row import Row, make_row
from raylink.errors import RaylinkError

Field = Optional[Union[int, str]]
Reducer = Callable[[Any, Any], Any]

AGGREGATIONS = ("sum", "min", "max", "min_by", "max_by")

#: exact types of basic values: their only position, 0, is the value itself
BASIC_VALUE_TYPES = frozenset((int, float, bool, complex, str, bytes, decimal.Decimal))


class InvalidFieldReferenceError(RaylinkError, ValueError):
    """An aggregation's field does not exist on a record (Flink's
    ``InvalidFieldReferenceException``)."""


def field_getter(field: Field) -> Callable[[Any], Any]:
    if field is None:
        return lambda value: value
    if isinstance(field, int):
        return operator.itemgetter(field)
    if isinstance(field, str):
        name = field

        def get(value: Any) -> Any:
            return value[name] if isinstance(value, (dict, Row)) else getattr(value, name)

        return get
    raise TypeError(f"aggregation field must be an int position, a str name or None, got {field!r}")


def set_field(record: Any, field: Union[int, str], new: Any) -> Any:
    """A copy of ``record`` with ``field`` set to ``new`` (the record is not mutated)."""
    t = type(record)
    if t is Row:
        out = make_row(getattr(record, "_fields", None), list(record._values), record._row_kind)
        out[field] = new
        return out
    if isinstance(field, int):
        if t is tuple:
            return record[:field] + (new,) + record[field + 1 :]
        if t is list:
            out = record.copy()
            out[field] = new
            return out
        if isinstance(record, tuple):  # namedtuple & other tuple subclasses
            values = list(record)
            values[field] = new
            make = getattr(t, "_make", None)
            return make(values) if make is not None else t(values)
        out = copy.copy(record)
        out[field] = new
        return out
    if t is dict:
        out = record.copy()
        out[field] = new
        return out
    if isinstance(record, dict):
        out = copy.copy(record)
        out[field] = new
        return out
    replace = getattr(record, "_replace", None)
    if replace is not None and isinstance(record, tuple):
        return replace(**{field: new})
    out = copy.copy(record)
    setattr(out, field, new)
    return out


def _has_field(record: Any, field: Field) -> Optional[str]:
    """None if ``record`` has ``field``, else why not."""
    if field is None:
        return None
    if isinstance(record, Row):
        if isinstance(field, int):
            n = len(record)
            return None if field < n else f"the Row has {n} field{'s' if n != 1 else ''}"
        names = getattr(record, "_fields", None)
        if names is None:
            return "the Row has no field names (a positional Row: use a position)"
        return None if field in names else f"the Row's fields are {list(names)}"
    if isinstance(field, int):
        if type(record) in BASIC_VALUE_TYPES:
            return (
                None
                if field == 0
                else (f"the record is a basic value ({type(record).__qualname__}), whose only position is 0")
            )
        if isinstance(record, Mapping):
            return None if field in record else "the record is a mapping without that key"
        try:
            n = len(record)
            type(record).__getitem__
        except (TypeError, AttributeError):
            return f"a record of type {type(record).__qualname__} has no positions (use a field name)"
        return None if field < n else f"the record has {n} field{'s' if n != 1 else ''}"
    if isinstance(record, dict):
        return None if field in record else "the record is a dict without that key"
    return None if hasattr(record, field) else f"a record of type {type(record).__qualname__} has no such attribute"


def field_check(agg: str, field: Field, operator_name: str = "") -> Callable[[Any], None]:
    """``check(record)``: raises ``InvalidFieldReferenceError`` naming ``agg``, the
    operator and ``field`` if ``record`` does not have ``field`` (see the module doc)."""
    what = f"field position {field}" if isinstance(field, int) else f"field {field!r}"
    bound = " is out of bounds" if isinstance(field, int) else " does not exist"

    def check(record: Any) -> None:
        why = _has_field(record, field)
        if why is not None:
            raise InvalidFieldReferenceError(f"{agg} {operator_name!r}: {what}{bound}: {why} ({record_repr(record)})")

    return check


def check_declared_field(agg: str, field: Field, type_info: Any, operator_name: str = "") -> None:
    """Raise ``InvalidFieldReferenceError`` naming ``agg``, the operator and ``field`` if a
    stream declared ``type_info`` cannot have ``field`` (a name a ROW/TUPLE lacks, a
    position beyond its arity, a position other than 0 on a basic type)."""
    name = getattr(type_info, "name", None)
    if field is None or name in (None, "PICKLED_BYTE_ARRAY"):
        return
    what = f"field position {field}" if isinstance(field, int) else f"field {field!r}"
    declared = declaration_text(type_info)
    why = None
    if name in ("ROW", "TUPLE"):
        arity = len(getattr(type_info, "field_types", None) or ())
        if isinstance(field, int):
            if field >= arity:
                why = f"is out of bounds: the stream's type {declared} has {arity} field{'s' if arity != 1 else ''}"
        elif name == "TUPLE":
            why = f"does not exist: the stream's type {declared} has positions only"
        else:
            names = list(getattr(type_info, "field_names", None) or [f"f{i}" for i in range(arity)])
            if field not in names:
                why = f"does not exist: the stream's type {declared} has the fields {names}"
    elif name in ("LIST", "MAP", "PRIMITIVE_ARRAY", "BASIC_ARRAY", "OBJECT_ARRAY"):
        return  # checked on the records
    elif isinstance(field, str) or field != 0:
        why = (
            f"{'does not exist' if isinstance(field, str) else 'is out of bounds'}: the stream's type "
            f"{declared} is a basic type, whose only position is 0"
        )
    if why is not None:
        raise InvalidFieldReferenceError(f"{agg} {operator_name!r}: {what} {why}")


def make_aggregator(agg: str, field: Field = None) -> Reducer:
    """The reduce function implementing ``agg`` on ``field`` (see the module doc)."""
    if agg not in AGGREGATIONS:
        raise ValueError(f"unknown aggregation {agg!r}; expected one of {', '.join(AGGREGATIONS)}")
    if isinstance(field, int) and (field < 0 or isinstance(field, bool)):
        raise ValueError(f"aggregation position must be a non-negative int, got {field!r}")
    get = field_getter(field)

    if field is None:
        if agg == "sum":
            return operator.add
        if agg == "min":
            return lambda a, b: a if a <= b else b
        if agg == "max":
            return lambda a, b: a if a >= b else b
        if agg == "min_by":
            return lambda a, b: a if a <= b else b
        return lambda a, b: a if a >= b else b

    if isinstance(field, int):
        return _positional_aggregator(agg, field)

    if agg == "sum":

        def sum_reduce(acc: Any, value: Any) -> Any:
            return set_field(acc, field, get(acc) + get(value))  # type: ignore[arg-type]

        return sum_reduce
    if agg == "min":

        def min_reduce(acc: Any, value: Any) -> Any:
            a, b = get(acc), get(value)
            return acc if a <= b else set_field(acc, field, b)  # type: ignore[arg-type]

        return min_reduce
    if agg == "max":

        def max_reduce(acc: Any, value: Any) -> Any:
            a, b = get(acc), get(value)
            return acc if a >= b else set_field(acc, field, b)  # type: ignore[arg-type]

        return max_reduce
    if agg == "min_by":
        return lambda acc, value: acc if get(acc) <= get(value) else value
    return lambda acc, value: acc if get(acc) >= get(value) else value


def _positional_aggregator(agg: str, i: int) -> Reducer:
    """Fast path for int positions: subscript access, plain tuples rebuilt inline.

    Records are assumed to have position ``i`` (the operator checks the first
    record of every key: ``field_check``); position 0 of a basic value is the value.
    """
    j = i + 1
    basic = BASIC_VALUE_TYPES

    if i == 0:

        def get(record: Any) -> Any:
            return record if type(record) in basic else record[0]

        def put(record: Any, new: Any) -> Any:
            t = type(record)
            if t is tuple:
                return (new,) + record[1:]
            if t in basic:
                return new
            return set_field(record, 0, new)

        if agg == "sum":

            def sum_reduce0(acc: Any, value: Any) -> Any:
                t = type(acc)
                if t is tuple:
                    return (acc[0] + value[0],) + acc[1:]
                if t in basic:
                    return acc + value
                return set_field(acc, 0, acc[0] + value[0])

            return sum_reduce0
        if agg == "min":
            return lambda acc, value: acc if get(acc) <= get(value) else put(acc, get(value))
        if agg == "max":
            return lambda acc, value: acc if get(acc) >= get(value) else put(acc, get(value))
        if agg == "min_by":
            return lambda acc, value: acc if get(acc) <= get(value) else value
        return lambda acc, value: acc if get(acc) >= get(value) else value

    def put_i(record: Any, new: Any) -> Any:
        if type(record) is tuple:
            return record[:i] + (new,) + record[j:]
        return set_field(record, i, new)

    if agg == "sum":
        if i == 1:

            def sum_reduce(acc: Any, value: Any) -> Any:
                if type(acc) is tuple:
                    if len(acc) == 2:  # the common (key, count) pair: one small tuple, no slicing
                        return (acc[0], acc[1] + value[1])
                    return acc[:1] + (acc[1] + value[1],) + acc[2:]
                return set_field(acc, 1, acc[1] + value[1])
        else:

            def sum_reduce(acc: Any, value: Any) -> Any:
                if type(acc) is tuple:
                    return acc[:i] + (acc[i] + value[i],) + acc[j:]
                return set_field(acc, i, acc[i] + value[i])

        return sum_reduce
    if agg == "min":
        return lambda acc, value: acc if acc[i] <= value[i] else put_i(acc, value[i])
    if agg == "max":
        return lambda acc, value: acc if acc[i] >= value[i] else put_i(acc, value[i])
    if agg == "min_by":
        return lambda acc, value: acc if acc[i] <= value[i] else value
    return lambda acc, value: acc if acc[i] >= value[i] else value


__all__ = [
    "AGGREGATIONS",
    "BASIC_VALUE_TYPES",
    "InvalidFieldReferenceError",
    "make_aggregator",
    "field_check",
    "check_declared_field",
    "field_getter",
    "set_field",
]
