"""A small subset of PyFlink's ``Types`` so programs written for PyFlink read the same.

raylink ships values with msgpack, so type information is a declaration, not a
serializer: it documents a stream, distinguishes side-output tags and lets a
Spark sink derive a schema. A *flat* declaration (``is_flat``) is also a
contract the record writer enforces where the stream leaves its chain: records
are checked against it (``raylink.shuffle.codec.DeclaredFlatType``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

_BASIC = frozenset(("STRING", "INT", "LONG", "FLOAT", "DOUBLE", "BOOLEAN", "BYTE", "SHORT"))


@dataclass(frozen=True)
class TypeInformation:
    name: str
    field_types: Optional[tuple] = None
    field_names: Optional[tuple] = None

    @property
    def is_flat(self) -> bool:
        """A basic type, or a TUPLE of basic types: a record writer packs batches of
        it with one msgspec call, after checking them in one C pass.

        The declaration is checked as PyFlink's coders apply it: a list or
        namedtuple declared as a TUPLE arrives as a tuple, an int (or Decimal) in
        a FLOAT/DOUBLE field as a float, a bool/IntEnum/numpy int in an
        INT/LONG/SHORT/BYTE field as an int, a str subclass as a str; ``None``
        passes in any field. Any other value (a set, datetime, Decimal or UUID for
        a STRING, a dataclass, an Enum, a float for an INT, a record of another
        arity) fails the job with a ``RecordTypeError`` naming the field and the
        value's type. Declare no type to ship any value as it is."""
        if self.name in _BASIC:
            return True
        return self.name == "TUPLE" and all(
            isinstance(f, TypeInformation) and f.name in _BASIC for f in self.field_types or ()
        )

    def __repr__(self) -> str:
        if self.field_types is None:
            return self.name
        inner = ", ".join(map(repr, self.field_types))
        return f"{self.name}<{inner}>"


def is_flat_type(type_info: Any) -> bool:
    """``type_info.is_flat`` for a TypeInformation; False for None or anything else."""
    return isinstance(type_info, TypeInformation) and type_info.is_flat


def declared_flat_type(type_info: Any) -> Optional[TypeInformation]:
    """``type_info`` if it is a flat TypeInformation (what a record writer checks
    records against), else None."""
    return type_info if is_flat_type(type_info) else None


class Types:
    @staticmethod
    def STRING() -> TypeInformation:
        return TypeInformation("STRING")

    @staticmethod
    def INT() -> TypeInformation:
        return TypeInformation("INT")

    @staticmethod
    def LONG() -> TypeInformation:
        return TypeInformation("LONG")

    @staticmethod
    def FLOAT() -> TypeInformation:
        return TypeInformation("FLOAT")

    @staticmethod
    def DOUBLE() -> TypeInformation:
        return TypeInformation("DOUBLE")

    @staticmethod
    def BOOLEAN() -> TypeInformation:
        return TypeInformation("BOOLEAN")

    @staticmethod
    def BYTE() -> TypeInformation:
        return TypeInformation("BYTE")

    @staticmethod
    def SHORT() -> TypeInformation:
        return TypeInformation("SHORT")

    @staticmethod
    def BIG_DEC() -> TypeInformation:
        return TypeInformation("BIG_DEC")

    @staticmethod
    def SQL_TIMESTAMP() -> TypeInformation:
        return TypeInformation("SQL_TIMESTAMP")

    @staticmethod
    def PICKLED_BYTE_ARRAY() -> TypeInformation:
        return TypeInformation("PICKLED_BYTE_ARRAY")

    @staticmethod
    def PRIMITIVE_ARRAY(element: TypeInformation) -> TypeInformation:
        return TypeInformation("PRIMITIVE_ARRAY", (element,))

    @staticmethod
    def LIST(element: TypeInformation) -> TypeInformation:
        return TypeInformation("LIST", (element,))

    @staticmethod
    def MAP(key: TypeInformation, value: TypeInformation) -> TypeInformation:
        return TypeInformation("MAP", (key, value))

    @staticmethod
    def TUPLE(field_types: list) -> TypeInformation:
        return TypeInformation("TUPLE", tuple(field_types))

    @staticmethod
    def ROW(field_types: list) -> TypeInformation:
        return TypeInformation("ROW", tuple(field_types))

    @staticmethod
    def ROW_NAMED(field_names: list, field_types: list) -> TypeInformation:
        return TypeInformation("ROW", tuple(field_types), tuple(field_names))
