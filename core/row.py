"""PyFlink's ``Row`` and ``RowKind`` (``pyflink.common.types``; Flink's ``org.apache.flink.types.Row``).

A ``Row`` is an ordered list of field values with optional field names and a
change kind (``RowKind``), with PyFlink 2.3's semantics:

* ``Row(1, "a")`` is positional (``repr``: ``<Row(1, 'a')>``); ``Row(name="a", age=5)``
  is named and keeps the keywords in the order given (``Row(name='a', age=5)``);
* fields are read as ``row[0]``, ``row["name"]``, ``row.name``; ``as_dict()`` maps the
  names to the values (``recursive=True`` also converts nested rows);
* ``Row("name", "age")`` used as a factory: ``Person("a", 5)`` is ``Row(name='a', age=5)``;
* ``in`` looks for a field name (a value, for a positional row); ``len``/iteration
  over the values; ``hash`` is the hash of the values;
* two named rows are equal when they hold the same names with the same values (in
  any order) and the same kind; positional rows when values and kind are equal;
* ``RowKind`` (``INSERT``, ``UPDATE_BEFORE``, ``UPDATE_AFTER``, ``DELETE``) prints as
  Flink's short strings ``+I``, ``-U``, ``+U``, ``-D``; ``Row.of_kind(kind, ...)``.

Rows pickle (``__reduce__``) and travel in raylink's wire codec as their own ext
type (``raylink.shuffle.codec.EXT_ROW``) with their names and kind.

Every record of a job is read as ``row[i]``, so those reads are compiled where the build has a
C compiler: ``Row`` then subclasses ``core._row.RowBase``, whose C slots hold the four fields and
answer ``row[int]``, ``iter(row)`` and ``len(row)`` (~3x faster than a Python ``__getitem__``).
The class body below is written once: over ``object`` it is ``PureRow``, the pure-Python twin
that stays the reference (``Row`` itself without the compiled module or with
``RAYLINK_PURE_PYTHON=1``); ``tests/test_core_row_twins.py`` compares the two on every kind of
input. ``make_row`` (the codecs' constructor) is compiled alike (twin: ``make_pure_row``).

Thread-safety: a Row is a mutable value (``row[i] = v``), as in PyFlink; share
it between threads only read-only.
"""

from __future__ import annotations

from enum import Enum
from typing import Any, Dict, List, Optional

from raylink.core.compiled import pure_python_forced

__all__ = ["Row", "RowKind"]


class RowKind(Enum):
    """The kind of change a row describes (Flink's ``RowKind``)."""

    INSERT = 0
    UPDATE_BEFORE = 1
    UPDATE_AFTER = 2
    DELETE = 3

    def short_string(self) -> str:
        """Flink's ``RowKind.shortString()``: ``+I``, ``-U``, ``+U`` or ``-D``."""
        return _SHORT_STRINGS[self.value]

    def __str__(self) -> str:
        return _SHORT_STRINGS[self.value]


_SHORT_STRINGS = ("+I", "-U", "+U", "-D")
#: RowKind by its byte value (the wire codec's decoding table)
ROW_KINDS = tuple(RowKind)
_INSERT = RowKind.INSERT
_INTERNAL = frozenset(("_fields", "_values", "_row_kind", "_from_dict"))


def _create_row(fields: Optional[List[Any]], values: Any, row_kind: Optional[RowKind] = None) -> "Row":
    """A row of ``values`` named ``fields`` (None: positional) of ``row_kind`` (pickle's constructor)."""
    row = Row(*values)
    if fields is not None:
        object.__setattr__(row, "_fields", fields)
    if row_kind is not None:
        object.__setattr__(row, "_row_kind", row_kind)
    return row


_set = object.__setattr__


def _row_class(base: type, name: str) -> type:
    """The ``Row`` class over ``base``: ``object`` (the pure-Python row, storage in slots) or the
    compiled ``RowBase`` (storage and the int/iter/len reads in C; see ``core._row``). One body,
    so the two differ only in what the base answers."""

    class Row(base):  # type: ignore[valid-type,misc]
        """A row of field values with optional names and a ``RowKind`` (see the module doc)."""

        __slots__ = ("_fields", "_values", "_row_kind", "_from_dict") if base is object else ()

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            if args and kwargs:
                raise ValueError("Can not use both args and kwargs to create Row")
            if kwargs:
                _set(self, "_fields", list(kwargs))
                _set(self, "_values", list(kwargs.values()))
                _set(self, "_from_dict", True)
            else:
                _set(self, "_values", list(args))
                _set(self, "_from_dict", False)
            _set(self, "_row_kind", _INSERT)

        # -- names, kind -----------------------------------------------------------------
        def as_dict(self, recursive: bool = False) -> Dict[Any, Any]:
            """``{name: value}`` of a named row; ``recursive``: nested rows (also in lists and
            dicts) become dicts too. A positional row raises ``TypeError``."""
            fields = getattr(self, "_fields", None)
            if fields is None:
                raise TypeError("Cannot convert a Row class into dict")
            if not recursive:
                return dict(zip(fields, self._values))
            return dict(zip(fields, map(_as_dict_deep, self._values)))

        def get_row_kind(self) -> RowKind:
            return self._row_kind

        def set_row_kind(self, row_kind: RowKind) -> None:
            _set(self, "_row_kind", row_kind)

        def set_field_names(self, field_names: List[Any]) -> None:
            _set(self, "_fields", field_names)

        def get_fields_by_names(self, names: List[Any]) -> List[Any]:
            """The values of ``names`` in that order (all values, for a positional row or
            the row's own names); a name the row lacks raises ``ValueError``."""
            fields = getattr(self, "_fields", None)
            if fields is None or names == fields:
                return self._values
            missing = [n for n in names if n not in fields]
            if missing:
                raise ValueError(f"Field names {missing} not exist in {fields}.")
            values = self._values
            return [values[fields.index(n)] for n in names]

        def _is_retract_msg(self) -> bool:
            return self._row_kind in (RowKind.UPDATE_BEFORE, RowKind.DELETE)

        def _is_accumulate_msg(self) -> bool:
            return self._row_kind in (RowKind.UPDATE_AFTER, RowKind.INSERT)

        @classmethod
        def of_kind(cls, row_kind: RowKind, *args: Any, **kwargs: Any) -> "Row":
            """``Row(*args, **kwargs)`` of ``row_kind`` (Flink's ``Row.ofKind``)."""
            row = cls(*args, **kwargs)
            _set(row, "_row_kind", row_kind)
            return row

        # -- a row used as a factory: Person = Row("name", "age"); Person("a", 5) -----------
        def __call__(self, *args: Any) -> "Row":
            if len(args) > len(self._values):
                raise ValueError(
                    "Can not create Row with fields %s, expected %d values but got %s" % (self, len(self._values), args)
                )
            row = type(self)(*args)
            _set(row, "_fields", self._values)
            _set(row, "_row_kind", self._row_kind)
            return row

        # -- field access -----------------------------------------------------------------
        def __contains__(self, item: Any) -> bool:
            fields = getattr(self, "_fields", None)
            return item in (fields if fields is not None else self._values)

        if base is object:  # the compiled base answers these three in C

            def __getitem__(self, item: Any) -> Any:
                if type(item) is int:  # a plain int: one type check
                    return self._values[item]
                return self._item(item)

            def __iter__(self):
                return iter(self._values)

            def __len__(self) -> int:
                return len(self._values)

        def _item(self, item: Any) -> Any:
            """``row[item]`` for anything but a plain int: a slice, an int subclass, a name."""
            if isinstance(item, (int, slice)):
                return self._values[item]
            try:
                return self._values[self._fields.index(item)]
            except (ValueError, AttributeError):  # not a name of it, or a positional row
                raise ValueError(f"{item!r} is not a field of {self!r}") from None

        def __setitem__(self, key: Any, value: Any) -> None:
            if isinstance(key, (int, slice)):
                self._values[key] = value
                return
            fields = getattr(self, "_fields", None)
            if fields is None:
                raise KeyError(key)
            try:
                index = fields.index(key)
            except ValueError:
                raise ValueError(f"{key!r} is not a field of {self!r}") from None
            self._values[index] = value

        def __getattr__(self, item: str) -> Any:
            # only called for names that are no attribute: field names (unset slots land here too)
            if item.startswith("_"):
                raise AttributeError(item)
            try:
                return self._values[self._fields.index(item)]
            except (ValueError, AttributeError):
                raise AttributeError(item) from None

        def __setattr__(self, key: str, value: Any) -> None:
            if key not in _INTERNAL:
                raise AttributeError(key)
            _set(self, key, value)

        # -- value semantics --------------------------------------------------------------
        def __reduce__(self):
            return _create_row, (getattr(self, "_fields", None), tuple(self._values), self._row_kind)

        def __repr__(self) -> str:
            fields = getattr(self, "_fields", None)
            if fields is not None:
                return "Row(%s)" % ", ".join("%s=%r" % (k, v) for k, v in zip(fields, self._values))
            return "<Row(%s)>" % ", ".join(map(repr, self._values))

        def __eq__(self, other: Any) -> bool:
            if self.__class__ is not other.__class__:
                return False
            fields = getattr(self, "_fields", None)
            other_fields = getattr(other, "_fields", None)
            if (fields is None) != (other_fields is None) or self._row_kind != other._row_kind:
                return False
            if fields is None:
                return self._values == other._values
            if fields == other_fields:
                return self._values == other._values
            names = sorted(fields)
            if names != sorted(other_fields):
                return False
            mine, theirs = self._values, other._values
            return [mine[fields.index(n)] for n in names] == [theirs[other_fields.index(n)] for n in names]

        def __hash__(self) -> int:
            return hash(tuple(self._values))

    Row.__name__ = Row.__qualname__ = name
    global _row_classes
    _row_classes += (Row,)
    return Row


#: every Row class built (the active one, its pure twin, a twin test's compiled one)
_row_classes: tuple = ()


def _load_compiled() -> Any:
    """``core._row``, or None: not built, or ``RAYLINK_PURE_PYTHON`` asks for the pure path."""
    if pure_python_forced():
        return None
    try:
        from raylink.core import _row
    except ImportError:
        return None
    return _row


#: the compiled module, or None on the pure-Python path
NATIVE_ROW = _load_compiled()
#: the pure-Python row: ``Row`` itself on the pure path, the reference of the compiled one otherwise
PureRow = _row_class(object, "Row" if NATIVE_ROW is None else "PureRow")
Row = PureRow if NATIVE_ROW is None else _row_class(NATIVE_ROW.RowBase, "Row")


def make_pure_row(cls: type, fields: Optional[List[Any]], values: List[Any], row_kind: RowKind) -> Any:
    """A ``cls`` row of ``values`` (owned from now on) named ``fields`` (None: positional) of
    ``row_kind``: the pure-Python twin of the compiled ``core._row.make_row``."""
    row = _new_object(cls)
    _set(row, "_values", values)
    _set(row, "_row_kind", row_kind)
    _set(row, "_from_dict", False)
    if fields is not None:
        _set(row, "_fields", fields)
    return row


_new_object = object.__new__
_make_row = make_pure_row if NATIVE_ROW is None else NATIVE_ROW.make_row


def make_row(fields: Optional[List[Any]], values: List[Any], row_kind: RowKind = _INSERT) -> "Row":
    """The fast constructor for codecs: a ``Row`` taking ownership of the ``values`` list."""
    return _make_row(Row, fields, values, row_kind)


def _as_dict_deep(value: Any) -> Any:
    if isinstance(value, _row_classes):
        return value.as_dict(True)
    if isinstance(value, list):
        return [_as_dict_deep(v) for v in value]
    if isinstance(value, dict):
        return {k: _as_dict_deep(v) for k, v in value.items()}
    return value
