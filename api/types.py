"""PyFlink's ``pyflink.common.typeinfo`` / ``pyflink.common.types``: ``Types``, ``TypeInformation``,
``Row``, ``RowKind`` (``raylink.core.types``, ``raylink.core.row``).

Only re-exports: the implementation lives on a lower floor."""

from raylink.core.row import (
    Row,
    RowKind,
)
from raylink.core.types import (
    TypeInformation,
    Types,
    apply_declared_type,
    declared_flat_type,
    declared_type,
    is_flat_type,
)

__all__ = [
    "TypeInformation",
    "Types",
    "Row",
    "RowKind",
    "is_flat_type",
    "declared_flat_type",
    "declared_type",
    "apply_declared_type",
]
