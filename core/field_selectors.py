"""Functions that only read fields, run as ``operator.itemgetter`` (Flink's field key selectors).

Flink's Java API turns a positional or named key (``keyBy(0)``, ``keyBy("word")``) into a
``KeySelector`` that reads the field without user code (``KeySelectorUtil``'s field
accessors). Python users write the same key as a function: ``key_by(lambda kv: kv[0])``,
``def key_of(e): return e["id"]``, a ``KeySelector`` whose ``get_key`` returns
``value[0]``, or ``lambda e: (e[0], e[2])``; a ``TimestampAssigner`` reads its record's
time the same way (``return value[4]``). :func:`field_getter` recognises a function
whose whole body is such a lookup and returns the ``operator.itemgetter`` doing exactly
that lookup: the same ``value[c]`` (``type(value).__getitem__`` with the same constant), the
same exceptions, the same tuple for several fields, but no Python frame per record (~55 ns
less per call on CPython 3.11, and a keyed exchange calls the selector on both sides). A
``map`` whose function is such a projection (``lambda e: (e[2], e[0])``) runs the same way,
and a ``filter`` that compares one field with a constant or a module global
(``lambda e: e[0] == BID``) as the ``operator`` comparison over the itemgetter's results
(:func:`field_comparison`).

Only functions are rewritten: plain ``def``/``lambda`` functions and bound methods, with no
``*args``/``**kwargs``/keyword-only arguments, whose bytecode is exactly "load the record,
index it by a constant (int or str), return it" (or several such lookups returned as one
tuple of at least two). Anything else — closures, defaults read in the body, nested
lookups, calls, other Python versions' bytecode — is returned unchanged. Pure function of
its argument; thread-safe. ``RAYLINK_PURE_PYTHON=1`` does not turn it off: the rewrite uses
only the standard library, and an ``itemgetter`` is what the function computes.
"""

from __future__ import annotations

import dis
import inspect
import operator
import types
from itertools import repeat
from typing import Any, Callable, Iterator, List, Optional

__all__ = ["field_comparison", "field_getter"]

_VARARGS = inspect.CO_VARARGS | inspect.CO_VARKEYWORDS
_FIELD_TYPES = (int, str)


def field_getter(function: Callable[..., Any], unused_args: int = 0) -> Callable[[Any], Any]:
    """``operator.itemgetter(*fields)`` when ``function`` only returns ``value[field]`` (or a
    tuple of at least two such lookups) of its first argument; else ``function`` itself.
    ``unused_args``: how many more arguments ``function`` takes, which its body must not read
    (a ``TimestampAssigner``'s ``extract_timestamp(value, record_timestamp)`` takes one): the
    getter is then called with the record alone."""
    found = _plain_function(function, unused_args)
    if found is None:
        return function
    fields = _returned_fields(found[0].__code__, found[1])
    return function if fields is None else operator.itemgetter(*fields)


def field_comparison(function: Callable[[Any], Any]) -> Optional[Callable[[List[Any]], Iterator[Any]]]:
    """For a predicate whose whole body compares one field of its argument with a constant or
    a module global (``lambda e: e[0] == BID``, ``e["price"] > 100``): a function of a batch
    that yields ``function(value)`` for each value, computed in C (``operator.itemgetter``,
    ``operator.eq``/``ne``/``lt``/``le``/``gt``/``ge``: the same comparison, the same
    exceptions). A global is read once per batch (a filter's batch runs no other Python code
    between its records); while it is unbound, the batch goes through ``function``, which
    raises its ``NameError``. None for any other function."""
    found = _plain_function(function, 0)
    if found is None:
        return None
    target, index = found
    ops = _ops(target.__code__)
    if len(ops) != 6 or ops[-1][0] != "RETURN_VALUE":
        return None
    (load, arg, _), (const, _, field), (subscr, _, _), (operand_op, _, operand), (compare, _, symbol) = ops[:5]
    if load != "LOAD_FAST" or arg != index or const != "LOAD_CONST" or subscr != "BINARY_SUBSCR":
        return None
    if type(field) not in _FIELD_TYPES or compare != "COMPARE_OP" or symbol not in _COMPARISONS:
        return None
    getter, compare_fn = operator.itemgetter(field), _COMPARISONS[symbol]
    if operand_op == "LOAD_CONST":
        return lambda values: map(compare_fn, map(getter, values), repeat(operand))
    if operand_op != "LOAD_GLOBAL":
        return None
    module_globals = target.__globals__

    def results(values: List[Any]) -> Iterator[Any]:
        value = module_globals.get(operand, _UNBOUND)
        if value is _UNBOUND:
            return map(function, values)
        return map(compare_fn, map(getter, values), repeat(value))

    return results


_COMPARISONS = {
    "==": operator.eq,
    "!=": operator.ne,
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
}
_UNBOUND = object()


def _plain_function(function: Callable[..., Any], unused_args: int) -> "tuple[types.FunctionType, int] | None":
    """``(the function, the position of the record among its arguments)`` for a plain function
    or bound method taking the record and ``unused_args`` more positional arguments; else None."""
    if isinstance(function, types.MethodType):
        target, index = function.__func__, 1  # get_key(self, value): the record is argument 1
    else:
        target, index = function, 0
    if not isinstance(target, types.FunctionType):
        return None
    code = target.__code__
    if code.co_argcount != index + 1 + unused_args or code.co_kwonlyargcount or code.co_flags & _VARARGS:
        return None
    return target, index


def _ops(code: types.CodeType) -> list:
    return [(i.opname, i.arg, i.argval) for i in dis.get_instructions(code) if i.opname not in ("RESUME", "NOP")]


def _returned_fields(code: types.CodeType, index: int) -> "list | None":
    """The constants the body indexes argument ``index`` by, when that is all it does."""
    ops = _ops(code)
    if not ops or ops[-1][0] != "RETURN_VALUE":
        return None
    body = ops[:-1]
    count = 1
    if len(body) > 3 and body[-1][0] == "BUILD_TUPLE":
        count = body[-1][1]
        if count < 2:  # (value[0],) is a 1-tuple; itemgetter(0) would return the bare field
            return None
        body = body[:-1]
    if len(body) != 3 * count:
        return None
    fields = []
    for k in range(count):
        (load, arg, _), (const, _, field), (subscr, _, _) = body[3 * k : 3 * k + 3]
        if load != "LOAD_FAST" or arg != index or const != "LOAD_CONST" or subscr != "BINARY_SUBSCR":
            return None
        if type(field) not in _FIELD_TYPES:
            return None
        fields.append(field)
    return fields
