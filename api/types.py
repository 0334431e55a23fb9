"""A small subset of PyFlink's ``Types`` so programs written for PyFlink read the same.

raylink ships values with msgpack, so type information is a declaration, not a
serializer: it documents a stream, distinguishes side-output tags and lets a
Spark sink derive a schema.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional


@dataclass(frozen=True)
class TypeInformation:
    name: str
    field_types: Optional[tuple] = None
    field_names: Optional[tuple] = None

    def __repr__(self) -> str:
        if self.field_types is None:
            return self.name
        inner = ", ".join(map(repr, self.field_types))
        return f"{self.name}<{inner}>"


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
