"""PyFlink's ``pyflink.common.typeinfo`` / ``pyflink.common.types``: ``Types``, ``TypeInformation``,
``Row``, ``RowKind`` (``raylink.core.types``, ``raylink.core.row``).

Only re-exports: the implementation lives on a lower floor."""

from raylink.core import types as _types
from raylink.core.types import *  # noqa: F401,F403 - every name of core.types' __all__ (Row, RowKind too)

__all__ = list(_types.__all__)
