"""Bounded reprs of user records for error messages.

An error message that names the offending record (``Could not extract key from
...``) must not carry the whole record: a 20 MB record would make a 20 MB
message, shipped to the driver, logged and printed. Flink truncates such
values; :func:`record_repr` does the same with the standard library's
:mod:`reprlib` (per-container and per-string limits, nesting depth), then caps
the total length.

Called only on error paths (never per record). Thread-safe: the module's
:class:`reprlib.Repr` holds only its limits. Imports nothing from raylink, so
``shuffle/``, ``operators/`` and the connectors can all use it.
"""

from __future__ import annotations

import reprlib
from typing import Any

__all__ = ["record_repr", "MAX_RECORD_REPR"]

#: the longest text :func:`record_repr` returns (characters)
MAX_RECORD_REPR = 500

_REPR = reprlib.Repr()  # Python 3.10/3.11 take no keyword arguments here
_REPR.maxlevel = 3
_REPR.maxstring = 200
_REPR.maxother = 200
_REPR.maxlong = 100
for _name in ("maxtuple", "maxlist", "maxarray", "maxdict", "maxset", "maxfrozenset", "maxdeque"):
    setattr(_REPR, _name, 10)
del _name


def record_repr(value: Any, limit: int = MAX_RECORD_REPR) -> str:
    """``repr(value)`` shortened for an error message: at most ``limit`` characters.

    Long strings, long containers and deep nesting are elided with ``...`` (as
    :mod:`reprlib` does); an object whose ``__repr__`` fails is shown by its type.
    """
    try:
        text = _REPR.repr(value)
    except Exception as exc:  # a broken __repr__ must not hide the original error
        return f"<{type(value).__qualname__} object (repr failed: {type(exc).__name__})>"
    if len(text) > limit:
        text = text[: max(0, limit - 3)] + "..."
    return text
