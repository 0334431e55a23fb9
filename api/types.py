"""A small subset of PyFlink's ``Types`` so programs written for PyFlink read the same.

raylink ships values with msgpack, so type information is a declaration, not a
serializer: it documents a stream, distinguishes side-output tags and lets a
Spark sink derive a schema.
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
        """A basic type, or a TUPLE of basic types: msgpack encodes its values as
        they are, so a record writer packs batches without looking at them.

        The declaration is a promise, as for PyFlink's coders: values are
        converted to the declared shape (a list declared as a TUPLE arrives as a
        tuple); a value of another type is converted as msgspec encodes it (a set
        arrives as a tuple; Decimal, UUID and naive dates as strings) or, for a
        type msgspec does not know, pickled. Declare no type to keep such values
        as they are."""
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
