"""PyFlink's ``Types`` (``pyflink.common.typeinfo``) and its ``Row``/``RowKind`` (re-exported).

raylink ships values with msgpack, so type information does not pick a serializer;
it is a declaration that is *applied* where PyFlink's coders apply it: where a
stream leaves its chain (the record writer), to a typed ``from_collection`` and
in ``print()``. There a record is converted as PyFlink's coder for the type
converts it -- a tuple declared ``Types.ROW_NAMED(["a", "b"], ...)`` arrives as
``Row(a=..., b=...)``, a ``Types.FLOAT`` is rounded to 32 bits, a ``Types.INT``
out of 32 bits fails the job naming the operator, field and value; see
``raylink.core.declared_types`` for the whole table. A *flat* declaration
(``is_flat``: a basic type, or a TUPLE of basic types) is checked a batch at a
time in C (``raylink.shuffle.codec.DeclaredFlatType``); the others record by
record. Declare no type (or ``PICKLED_BYTE_ARRAY``) to ship any value as it is.

``TypeInformation`` is an immutable value (thread-safe): ``name`` (``"INT"``,
``"ROW"`` ...), ``field_types`` (of a TUPLE/ROW, the element of an array or
LIST, the key and value of a MAP) and ``field_names`` (of a ROW_NAMED).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, List, Optional

from raylink.core.declared_types import BASIC_TYPE_NAMES, STRUCTURED_TYPE_NAMES, RecordTypeError, record_converter
from raylink.core.row import Row, RowKind

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

#: declarations a record writer applies (every one but PICKLED_BYTE_ARRAY, which ships values as they are)
_APPLIED = BASIC_TYPE_NAMES | STRUCTURED_TYPE_NAMES


@dataclass(frozen=True)
class TypeInformation:
    """A declared type (Flink's ``TypeInformation``); build it with :class:`Types`."""

    name: str
    field_types: Optional[tuple] = None
    field_names: Optional[tuple] = None

    @property
    def is_flat(self) -> bool:
        """A basic type, or a TUPLE of basic types: a record writer packs batches of
        it with one msgspec call, after checking them in one C pass.

        The declaration is checked as PyFlink's coders apply it: a list or
        namedtuple declared as a TUPLE arrives as a tuple, an int (or Decimal) in
        a FLOAT/DOUBLE field as a float (a FLOAT rounded to 32 bits), a
        bool/IntEnum/numpy int in an INT/LONG/SHORT/BYTE field as an int within
        that type's width, a str subclass as a str; ``None`` passes in any field.
        Any other value (a set, datetime, Decimal or UUID for a STRING, a
        dataclass, an Enum, a float for an INT, an int beyond the width, a record
        of another arity) fails the job with a ``RecordTypeError`` naming the field
        and the value's type (or the value). Declare no type to ship any value as it is."""
        if self.name in BASIC_TYPE_NAMES:
            return True
        return self.name == "TUPLE" and all(
            isinstance(f, TypeInformation) and f.name in BASIC_TYPE_NAMES for f in self.field_types or ()
        )

    # -- PyFlink's RowTypeInfo / TupleTypeInfo accessors ------------------------------------
    def get_field_types(self) -> List["TypeInformation"]:
        return list(self.field_types or ())

    def get_field_names(self) -> List[str]:
        """A ROW's field names: the declared ones, else Flink's defaults ``f0``, ``f1`` ..."""
        if self.field_names:
            return list(self.field_names)
        return [f"f{i}" for i in range(len(self.field_types or ()))]

    def get_field_index(self, field_name: str) -> int:
        """The position of ``field_name`` in a ROW_NAMED, -1 if absent (as PyFlink)."""
        names = self.get_field_names() if self.field_names else []
        return names.index(field_name) if field_name in names else -1

    def __repr__(self) -> str:
        if self.field_types is None:
            return self.name
        inner = ", ".join(map(repr, self.field_types))
        if self.field_names:
            inner = ", ".join(f"{n}: {t!r}" for n, t in zip(self.field_names, self.field_types))
        return f"{self.name}<{inner}>"


def is_flat_type(type_info: Any) -> bool:
    """``type_info.is_flat`` for a TypeInformation; False for None or anything else."""
    return isinstance(type_info, TypeInformation) and type_info.is_flat


def declared_type(type_info: Any) -> Optional[TypeInformation]:
    """``type_info`` if a record writer applies it to the records of its stream (a
    ``Types`` declaration other than PICKLED_BYTE_ARRAY), else None. Subclasses
    describing records of their own (the Spark connector's row type) are not applied."""
    return type_info if type(type_info) is TypeInformation and type_info.name in _APPLIED else None


#: the name the deployment used when only flat declarations were applied
declared_flat_type = declared_type


def apply_declared_type(type_info: Any, records: List[Any], what: str = "from_collection") -> List[Any]:
    """``records`` as ``type_info``'s coder delivers them (``[("a", 1)]`` declared
    ``Types.ROW_NAMED(["k", "v"], ...)`` gives ``[Row(k='a', v=1)]``), the list itself
    without a declaration; a record that does not convert raises ``RecordTypeError``
    naming ``what``, its position and why (PyFlink converts a typed collection when the
    program is built, too)."""
    if declared_type(type_info) is None:
        return records
    convert = record_converter(type_info)
    out = []
    for i, record in enumerate(records):
        try:
            out.append(convert(record))
        except RecordTypeError as e:
            raise RecordTypeError(f"{what}: element {i}: {e}", e.declared, e.field, e.value_type, e.path) from None
    return out


def _check_types(what: str, types: Any) -> tuple:
    if isinstance(types, TypeInformation) or not hasattr(types, "__iter__"):
        raise TypeError(f"Types.{what}: expected a list of TypeInformation, got {types!r}")
    types = tuple(types)
    for t in types:
        if not isinstance(t, TypeInformation):
            raise TypeError(f"Types.{what}: {t!r} is not a TypeInformation (write Types.INT(), not Types.INT)")
    return types


def _check_type(what: str, t: Any) -> TypeInformation:
    if not isinstance(t, TypeInformation):
        raise TypeError(f"Types.{what}: {t!r} is not a TypeInformation (write Types.INT(), not Types.INT)")
    return t


class Types:
    """The type information of the common types (PyFlink's ``Types``)."""

    @staticmethod
    def STRING() -> TypeInformation:
        return TypeInformation("STRING")

    @staticmethod
    def BYTE() -> TypeInformation:
        return TypeInformation("BYTE")

    @staticmethod
    def BOOLEAN() -> TypeInformation:
        return TypeInformation("BOOLEAN")

    @staticmethod
    def SHORT() -> TypeInformation:
        return TypeInformation("SHORT")

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
    def CHAR() -> TypeInformation:
        return TypeInformation("CHAR")

    @staticmethod
    def BIG_INT() -> TypeInformation:
        return TypeInformation("BIG_INT")

    @staticmethod
    def BIG_DEC() -> TypeInformation:
        return TypeInformation("BIG_DEC")

    @staticmethod
    def INSTANT() -> TypeInformation:
        return TypeInformation("INSTANT")

    @staticmethod
    def SQL_DATE() -> TypeInformation:
        return TypeInformation("SQL_DATE")

    @staticmethod
    def SQL_TIME() -> TypeInformation:
        return TypeInformation("SQL_TIME")

    @staticmethod
    def SQL_TIMESTAMP() -> TypeInformation:
        return TypeInformation("SQL_TIMESTAMP")

    @staticmethod
    def PICKLED_BYTE_ARRAY() -> TypeInformation:
        return TypeInformation("PICKLED_BYTE_ARRAY")

    @staticmethod
    def ROW(field_types: List[TypeInformation]) -> TypeInformation:
        return TypeInformation("ROW", _check_types("ROW", field_types))

    @staticmethod
    def ROW_NAMED(field_names: List[str], field_types: List[TypeInformation]) -> TypeInformation:
        types = _check_types("ROW_NAMED", field_types)
        names = tuple(field_names)
        if len(names) != len(types):
            raise ValueError(f"Types.ROW_NAMED: {len(names)} field names {list(names)} for {len(types)} field types")
        return TypeInformation("ROW", types, names)

    @staticmethod
    def TUPLE(field_types: List[TypeInformation]) -> TypeInformation:
        return TypeInformation("TUPLE", _check_types("TUPLE", field_types))

    @staticmethod
    def PRIMITIVE_ARRAY(element_type: TypeInformation) -> TypeInformation:
        return TypeInformation("PRIMITIVE_ARRAY", (_check_type("PRIMITIVE_ARRAY", element_type),))

    @staticmethod
    def BASIC_ARRAY(element_type: TypeInformation) -> TypeInformation:
        return TypeInformation("BASIC_ARRAY", (_check_type("BASIC_ARRAY", element_type),))

    @staticmethod
    def OBJECT_ARRAY(element_type: TypeInformation) -> TypeInformation:
        return TypeInformation("OBJECT_ARRAY", (_check_type("OBJECT_ARRAY", element_type),))

    @staticmethod
    def MAP(key_type_info: TypeInformation, value_type_info: TypeInformation) -> TypeInformation:
        return TypeInformation("MAP", (_check_type("MAP", key_type_info), _check_type("MAP", value_type_info)))

    @staticmethod
    def LIST(element_type_info: TypeInformation) -> TypeInformation:
        return TypeInformation("LIST", (_check_type("LIST", element_type_info),))
