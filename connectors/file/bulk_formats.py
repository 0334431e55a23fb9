"""Bulk formats of the FileSink (Flink's ``BulkWriter`` / ``BulkWriter.Factory``): a part file
written as a whole format (Parquet here) instead of record by record, and therefore closed at
every checkpoint (Flink's ``CheckpointRollingPolicy``: a bulk part file is never resumed).

:class:`ParquetBulkWriters` is PyFlink's ``pyflink.datastream.formats.parquet.ParquetBulkWriters``:
``for_row_type(row_type)`` takes the record type as the DataStream API declares it
(``Types.ROW_NAMED([...], [...])``) -- PyFlink takes the Table API's ``RowType``, which raylink
does not have -- or a ``pyarrow.Schema``. Records are ``Row`` s, tuples or lists in field
order, or dicts by field name; a record that does not fit fails the job naming the field.
The files are written with pyarrow's ``ParquetWriter`` (row groups of ``row_group_size``
records) and read back by Spark with the declared schema.

Thread-safety: a writer belongs to its part file's task thread.
"""

from __future__ import annotations

from typing import Any, List, Optional

import pyarrow as pa
import pyarrow.parquet as pq

from raylink.core.types import TypeInformation
from raylink.errors import RaylinkError

#: Flink's basic type names -> Arrow types (what Spark reads as the same SQL types)
_ARROW_TYPES = {
    "STRING": pa.string(),
    "CHAR": pa.string(),
    "BOOLEAN": pa.bool_(),
    "BYTE": pa.int8(),
    "SHORT": pa.int16(),
    "INT": pa.int32(),
    "LONG": pa.int64(),
    "FLOAT": pa.float32(),
    "DOUBLE": pa.float64(),
    "BIG_INT": pa.decimal128(38, 0),
    "BIG_DEC": pa.decimal128(38, 18),
    "SQL_DATE": pa.date32(),
    "SQL_TIME": pa.time64("us"),
    "SQL_TIMESTAMP": pa.timestamp("us"),
    "INSTANT": pa.timestamp("us", tz="UTC"),
    "PRIMITIVE_ARRAY(BYTE)": pa.binary(),
}

DEFAULT_ROW_GROUP_SIZE = 64 * 1024


class BulkFormatError(RaylinkError, ValueError):
    """A record type a bulk format cannot write, or a record that does not fit it."""


def arrow_type(t: TypeInformation, where: str) -> pa.DataType:
    """The Arrow type of a declared field type."""
    name = t.name
    if name == "PRIMITIVE_ARRAY" and t.field_types and t.field_types[0].name == "BYTE":
        return pa.binary()
    if name in _ARROW_TYPES:
        return _ARROW_TYPES[name]
    if name in ("BASIC_ARRAY", "PRIMITIVE_ARRAY", "OBJECT_ARRAY", "LIST"):
        return pa.list_(arrow_type(t.field_types[0], where))
    if name == "MAP":
        return pa.map_(arrow_type(t.field_types[0], where), arrow_type(t.field_types[1], where))
    if name in ("ROW", "TUPLE"):
        return pa.struct(list(_fields(t, where)))
    raise BulkFormatError(f"{where}: Parquet cannot hold a field of type {name} (declare a basic type)")


def _fields(t: TypeInformation, where: str) -> List[pa.Field]:
    return [
        pa.field(name, arrow_type(ft, f"{where} field {name!r}"))
        for name, ft in zip(t.get_field_names(), t.get_field_types())
    ]


def arrow_schema(row_type: Any, where: str = "ParquetBulkWriters.for_row_type") -> pa.Schema:
    """A ``pyarrow.Schema`` as it is, or the schema of a ``Types.ROW_NAMED`` / ``Types.ROW``."""
    if isinstance(row_type, pa.Schema):
        return row_type
    if isinstance(row_type, TypeInformation) and row_type.name in ("ROW", "TUPLE"):
        return pa.schema(_fields(row_type, where))
    raise BulkFormatError(
        f"{where}: expected Types.ROW_NAMED([...], [...]) or a pyarrow.Schema, got {row_type!r} "
        f"(the Table API's RowType is not supported)"
    )


class ParquetBulkWriter:
    """Writes records into one Parquet part file (Flink's ``ParquetBulkWriter``)."""

    def __init__(self, stream: Any, schema: pa.Schema, row_group_size: int = DEFAULT_ROW_GROUP_SIZE) -> None:
        self._schema = schema
        self._names = schema.names
        self._row_group_size = row_group_size
        self._rows: List[Any] = []
        self._writer = pq.ParquetWriter(stream, schema)

    def add_element(self, element: Any) -> None:
        self._rows.append(element)
        if len(self._rows) >= self._row_group_size:
            self.flush()

    def flush(self) -> None:
        """Writes the buffered records as one row group."""
        rows, self._rows = self._rows, []
        if rows:
            self._writer.write_table(self._table(rows))

    def finish(self) -> None:
        """The last row group and the footer: the file is complete."""
        self.flush()
        self._writer.close()

    def _table(self, rows: List[Any]) -> pa.Table:
        names, width = self._names, len(self._names)
        columns: List[List[Any]] = [[] for _ in names]
        for row in rows:
            values = [row.get(n) for n in names] if isinstance(row, dict) else row
            if len(values) != width:
                raise BulkFormatError(
                    f"FileSink (Parquet): record {row!r} has {len(values)} fields, the schema {width} ({names})"
                )
            for column, value in zip(columns, values):
                column.append(value)
        arrays = []
        for field, column in zip(self._schema, columns):
            try:
                arrays.append(pa.array(column, type=field.type))
            except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError) as exc:
                raise BulkFormatError(f"FileSink (Parquet): field {field.name!r} ({field.type}): {exc}") from None
        return pa.Table.from_arrays(arrays, schema=self._schema)


class ParquetWriterFactory:
    """Flink's ``ParquetWriterFactory``: creates a :class:`ParquetBulkWriter` per part file."""

    def __init__(self, schema: pa.Schema, row_group_size: int = DEFAULT_ROW_GROUP_SIZE) -> None:
        if row_group_size < 1:
            raise BulkFormatError(f"ParquetBulkWriters: row_group_size must be >= 1, got {row_group_size}")
        self.schema = schema
        self.row_group_size = row_group_size

    def create(self, stream: Any) -> ParquetBulkWriter:
        return ParquetBulkWriter(stream, self.schema, self.row_group_size)

    def __repr__(self) -> str:
        return f"ParquetWriterFactory({self.schema.names})"


class ParquetBulkWriters:
    """PyFlink's ``ParquetBulkWriters``: the factory ``FileSink.for_bulk_format`` takes."""

    @staticmethod
    def for_row_type(
        row_type: Any,
        hadoop_config: Optional[Any] = None,
        utc_timestamp: bool = False,
        row_group_size: int = DEFAULT_ROW_GROUP_SIZE,
    ) -> ParquetWriterFactory:
        """Parquet files of records of ``row_type`` (``Types.ROW_NAMED`` or a
        ``pyarrow.Schema``). ``hadoop_config`` and ``utc_timestamp`` are PyFlink's and have no
        effect (timestamps are written as declared)."""
        return ParquetWriterFactory(arrow_schema(row_type), row_group_size)


__all__ = [
    "BulkFormatError",
    "ParquetBulkWriter",
    "ParquetBulkWriters",
    "ParquetWriterFactory",
    "arrow_schema",
    "arrow_type",
]
