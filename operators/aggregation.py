"""Built-in keyed aggregations: Flink's ``SumAggregator`` and ``ComparableAggregator``.

``make_aggregator(agg, field)`` returns a reduce function ``(acc, value) -> acc``
used by the grouped reduce operator (which emits the first record of a key as is):

* ``sum``: the accumulated record (the key's first record) with ``field`` replaced
  by the running sum; ``min`` / ``max``: likewise with the running min / max;
* ``min_by`` / ``max_by``: the whole record holding the min / max (on ties the
  first one seen is kept).

``field``: an int position (tuples, lists, indexable records), a str name (dict
key, or attribute: namedtuples, objects), or ``None`` (the value itself).
Records are never mutated: tuples get a new tuple, lists/dicts/objects a copy.
"""

from __future__ import annotations

import copy
import operator
from typing import Any, Callable, Optional, Union

Field = Optional[Union[int, str]]
Reducer = Callable[[Any, Any], Any]

AGGREGATIONS = ("sum", "min", "max", "min_by", "max_by")


def field_getter(field: Field) -> Callable[[Any], Any]:
    if field is None:
        return lambda value: value
    if isinstance(field, int):
        return operator.itemgetter(field)
    if isinstance(field, str):
        name = field

        def get(value: Any) -> Any:
            return value[name] if isinstance(value, dict) else getattr(value, name)

        return get
    raise TypeError(f"aggregation field must be an int position, a str name or None, got {field!r}")


def set_field(record: Any, field: Union[int, str], new: Any) -> Any:
    """A copy of ``record`` with ``field`` set to ``new`` (the record is not mutated)."""
    t = type(record)
    if isinstance(field, int):
        if t is tuple:
            return record[:field] + (new,) + record[field + 1:]
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
    """Fast path for int positions: subscript access, plain tuples rebuilt inline."""
    j = i + 1

    def put(record: Any, new: Any) -> Any:
        if type(record) is tuple:
            return record[:i] + (new,) + record[j:]
        return set_field(record, i, new)

    if agg == "sum":

        def sum_reduce(acc: Any, value: Any) -> Any:
            if type(acc) is tuple:
                if len(acc) == 2:  # the common (key, count) pair: one small tuple, no slicing
                    if i == 1:
                        return (acc[0], acc[1] + value[1])
                    return (acc[0] + value[0], acc[1])
                return acc[:i] + (acc[i] + value[i],) + acc[j:]
            return set_field(acc, i, acc[i] + value[i])

        return sum_reduce
    if agg == "min":
        return lambda acc, value: acc if acc[i] <= value[i] else put(acc, value[i])
    if agg == "max":
        return lambda acc, value: acc if acc[i] >= value[i] else put(acc, value[i])
    if agg == "min_by":
        return lambda acc, value: acc if acc[i] <= value[i] else value
    return lambda acc, value: acc if acc[i] >= value[i] else value


__all__ = ["AGGREGATIONS", "make_aggregator", "field_getter", "set_field"]
