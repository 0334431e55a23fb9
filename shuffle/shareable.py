"""Which batches a record writer may hand to a reader thread of its own process as objects.

A channel whose reader is a task thread of the writer's process skips encoding: the writer
hands its batch over (``ObjectBuffer``) and the reader gets the very objects. That must
read exactly as encoding and decoding the batch would, so only values that cannot change
afterwards are shared: scalars, and tuples of scalars and of such tuples (``codec.is_flat_batch``). Anything
else (a list, a dict, a user's object) is encoded, i.e. copied, as between processes --
Flink's rule without object reuse.

Checking every field of every record costs one type lookup per field (~100 ns for a
three-field record). :func:`is_shareable_batch` does it in one msgspec pass instead
(~40 ns): the shape of the batch's first record -- e.g. ``(str, int, int)`` -- compiled
once into a strict msgspec type, which accepts a batch only if every record is a tuple
of that width whose fields are of those types (or None). A batch of other shapes falls
back to the field-by-field check. Byte-string fields always take the field-by-field
check (msgspec's ``bytes`` also accepts a ``bytearray``, which may change).

What the msgspec pass accepts beyond ``is_flat_batch``: subclasses of ``str`` and ``int``
(enum members among them) and, in a float field, ints and ``Decimal``\\ s -- immutable
values that decoding returns equal (the codec pickles them), so sharing them is the same.

On the compiled per-record path (``shuffle.hotpath``) one C loop over the exact types accepts
the flat batches first; whatever it refuses takes the check above.

Thread-safe: the cache of compiled shapes only grows (bounded), and a race compiles one
shape twice.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List

import msgspec

from raylink.shuffle.codec import SCALAR_TYPES, fields_are_flat
from raylink.shuffle.hotpath import NATIVE

_NoneType = type(None)
#: field types whose strict msgspec check accepts only values that cannot change
_CHECKABLE = frozenset((str, int, float, bool, _NoneType))
_TUPLE = frozenset((tuple,))
_MAX_SHAPES = 256

_convert = msgspec.convert
_ValidationError = msgspec.ValidationError
_shapes: Dict[tuple, Any] = {}  # shape of a record -> its batch's msgspec type (None: not checkable)


def _batch_type(shape: tuple) -> Any:
    checked = _shapes.get(shape, False)
    if checked is False:
        if len(_shapes) >= _MAX_SHAPES:
            _shapes.clear()
        fields = tuple(t | None for t in shape)
        checked = list[tuple[fields]] if shape and _CHECKABLE.issuperset(shape) else None  # type: ignore[misc]
        _shapes[shape] = checked
    return checked


def is_shareable_batch_pure(values: List[Any]) -> bool:
    """True if every value is a scalar, or every value a flat tuple (as ``is_flat_batch``;
    see the module doc for the immutable values it also accepts).
    The pure-Python twin of ``is_shareable_batch``."""
    types = {*map(type, values)}
    if types <= SCALAR_TYPES:
        return True
    if types != _TUPLE:
        return False
    checked = _batch_type(tuple(map(type, values[0])))
    if checked is not None:
        try:
            _convert(values, checked, strict=True)
            return True
        except _ValidationError:
            pass
    return fields_are_flat(values)


def compiled_is_shareable_batch(is_flat_batch: Callable[[List[Any]], bool]) -> Callable[[List[Any]], bool]:
    """``is_shareable_batch`` on the compiled path: its exact-type flatness check accepts every
    flat batch (the common case) in one C loop; anything else (a subclass, a Decimal in a float
    field, a batch that is not shareable) takes the pure-Python check."""

    def is_shareable_batch(values: List[Any]) -> bool:
        return is_flat_batch(values) or is_shareable_batch_pure(values)

    return is_shareable_batch


is_shareable_batch = is_shareable_batch_pure if NATIVE is None else compiled_is_shareable_batch(NATIVE.is_flat_batch)
