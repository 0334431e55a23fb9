"""Bulk formats of the FileSink (Flink's ``BulkWriter`` / ``BulkWriter.Factory``): a part file
written as a whole format (Parquet or an Avro container file) instead of record by record, and
therefore closed at every checkpoint (Flink's ``CheckpointRollingPolicy``: a bulk part file is
never resumed).

:class:`ParquetBulkWriters` is PyFlink's ``pyflink.datastream.formats.parquet.ParquetBulkWriters``:
``for_row_type(row_type)`` takes the record type as the DataStream API declares it
(``Types.ROW_NAMED([...], [...])``) -- PyFlink takes the Table API's ``RowType``, which raylink
does not have -- or a ``pyarrow.Schema``. Records are ``Row`` s, tuples or lists in field
order, or dicts by field name; a record that does not fit fails the job naming the field.
The files are written with pyarrow's ``ParquetWriter`` (row groups of ``row_group_size``
records) and read back by Spark with the declared schema.

:class:`AvroBulkWriters` is PyFlink's ``pyflink.datastream.formats.avro.AvroBulkWriters``:
``for_generic_record(AvroSchema.parse_string(json))`` writes Avro object container files with
fastavro (Flink's ``AvroWriters.forGenericRecord``: no compression, one data block per ~16 kB and
at every checkpoint). Records are dicts by field name (PyFlink's generic records; a named ``Row``
works too); the stream before the sink declares :class:`GenericRecordAvroTypeInfo` as PyFlink
asks, which ships the dicts as they are. A record that does not fit the schema fails the job
naming the sink, the field, the value and the type the schema expects.

Thread-safety: a writer belongs to its part file's task thread.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Dict, List, Optional

import fastavro
import pyarrow as pa
import pyarrow.parquet as pq
from fastavro.validation import ValidationError, validate
from fastavro.write import Writer as _AvroFileWriter

from raylink.core.row import Row
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


# -- Avro -------------------------------------------------------------------------------------


class AvroSchema:
    """PyFlink's ``AvroSchema``: an Avro schema, parsed (and checked) by fastavro.
    ``str(schema)`` is its JSON. An immutable value."""

    def __init__(self, schema: Any, where: str = "AvroSchema") -> None:
        try:
            self._parsed = fastavro.parse_schema(schema)
        except Exception as exc:  # fastavro raises SchemaParseException, KeyError, TypeError ...
            raise BulkFormatError(f"{where}: not a valid Avro schema: {exc}") from None
        self._json = json.dumps(schema, sort_keys=True)

    @staticmethod
    def parse_string(json_schema: str) -> "AvroSchema":
        """The schema written as JSON (``'{"type": "record", "name": ..., "fields": [...]}'``)."""
        try:
            decoded = json.loads(json_schema)
        except (TypeError, ValueError) as exc:
            raise BulkFormatError(f"AvroSchema.parse_string: the schema is not JSON: {exc}") from None
        return AvroSchema(decoded, "AvroSchema.parse_string")

    @staticmethod
    def parse_file(file_path: str) -> "AvroSchema":
        """The schema in a definition file (``.avsc``, JSON)."""
        try:
            with open(file_path, encoding="utf-8") as f:
                decoded = json.load(f)
        except (OSError, ValueError) as exc:
            raise BulkFormatError(f"AvroSchema.parse_file({file_path!r}): {exc}") from None
        return AvroSchema(decoded, f"AvroSchema.parse_file({file_path!r})")

    @property
    def parsed(self) -> Dict[str, Any]:
        """The schema as fastavro's writer and reader take it."""
        return self._parsed

    @property
    def name(self) -> str:
        """The full name of a named schema (a record), else its type."""
        parsed = self._parsed
        return parsed.get("name") or parsed.get("type") if isinstance(parsed, dict) else str(parsed)

    def __str__(self) -> str:
        return self._json

    def __repr__(self) -> str:
        return f"AvroSchema({self.name})"

    def __eq__(self, other: Any) -> bool:
        return isinstance(other, AvroSchema) and other._json == self._json

    def __hash__(self) -> int:
        return hash(self._json)


@dataclass(frozen=True, init=False, repr=False)
class GenericRecordAvroTypeInfo(TypeInformation):
    """PyFlink's ``GenericRecordAvroTypeInfo``: a stream of Avro generic records of ``schema``
    (Python dicts). A subclass of ``TypeInformation``, so record writers ship the records as
    they are; the Avro bulk writer checks them against the schema."""

    schema: Optional[AvroSchema] = None

    def __init__(self, schema: AvroSchema) -> None:
        if not isinstance(schema, AvroSchema):
            raise TypeError(
                f"GenericRecordAvroTypeInfo: expected an AvroSchema (AvroSchema.parse_string(...)), got {schema!r}"
            )
        fields = schema.parsed.get("fields") if isinstance(schema.parsed, dict) else None
        object.__setattr__(self, "name", "GENERIC_RECORD")
        object.__setattr__(self, "field_types", None)
        object.__setattr__(self, "field_names", tuple(f["name"] for f in fields) if fields else None)
        object.__setattr__(self, "schema", schema)

    def __repr__(self) -> str:
        return f"GenericRecordAvroTypeInfo<{self.schema.name if self.schema else '?'}>"


#: Flink's AvroWriters write a data block when it reaches about this many bytes (Avro's default)
AVRO_SYNC_INTERVAL = 16000


class AvroBulkWriter:
    """Writes generic records into one Avro container part file (Flink's ``AvroBulkWriter``)."""

    def __init__(self, stream: Any, schema: AvroSchema) -> None:
        self._schema = schema
        self._writer = _AvroFileWriter(stream, schema.parsed, sync_interval=AVRO_SYNC_INTERVAL)

    def add_element(self, element: Any) -> None:
        try:
            if isinstance(element, Row):
                element = element.as_dict(recursive=True)
            self._writer.write(element)
        except Exception as exc:  # the record does not fit: say where and why
            raise self._misfit(element, exc) from None

    def flush(self) -> None:
        """Writes the records so far as one data block."""
        self._writer.flush()

    def finish(self) -> None:
        """The last data block: the file is complete (an Avro container has no footer)."""
        self._writer.flush()

    def _misfit(self, record: Any, exc: Exception) -> BulkFormatError:
        where = f"FileSink (Avro, schema {self._schema.name})"
        parsed = self._schema.parsed
        if not isinstance(record, dict) and isinstance(parsed, dict) and parsed.get("type") == "record":
            return BulkFormatError(
                f"{where}: record {record!r} is a {type(record).__name__}; Avro generic records are dicts "
                f"by field name (or Rows with field names)"
            )
        try:
            validate(record, parsed, raise_errors=True)
        except ValidationError as invalid:
            prefix = f"{self._schema.name}."
            details = {}
            for error in invalid.errors:
                field = error.field[len(prefix) :] if error.field.startswith(prefix) else error.field
                expected = error.schema if isinstance(error.schema, str) else json.dumps(error.schema)
                details.setdefault((field, repr(error.datum)), []).append(expected)
            text = "; ".join(
                f"field {field!r} = {value}, expected {' or '.join(expected)}"
                for (field, value), expected in details.items()
            )
            return BulkFormatError(f"{where}: record {record!r} does not fit: {text}")
        return BulkFormatError(f"{where}: record {record!r} cannot be written: {exc}")


class AvroWriterFactory:
    """Flink's ``AvroWriterFactory``: creates an :class:`AvroBulkWriter` per part file."""

    def __init__(self, schema: AvroSchema) -> None:
        self.schema = schema

    def create(self, stream: Any) -> AvroBulkWriter:
        return AvroBulkWriter(stream, self.schema)

    def __repr__(self) -> str:
        return f"AvroWriterFactory({self.schema.name})"


class AvroBulkWriters:
    """PyFlink's ``AvroBulkWriters``: the factory ``FileSink.for_bulk_format`` takes."""

    @staticmethod
    def for_generic_record(schema: AvroSchema) -> AvroWriterFactory:
        """Avro container files of generic records (dicts) of ``schema``."""
        if not isinstance(schema, AvroSchema):
            raise BulkFormatError(
                f"AvroBulkWriters.for_generic_record: expected an AvroSchema (AvroSchema.parse_string(...)), "
                f"got {schema!r}"
            )
        return AvroWriterFactory(schema)


__all__ = [
    "AvroBulkWriter",
    "AvroBulkWriters",
    "AvroSchema",
    "AvroWriterFactory",
    "BulkFormatError",
    "GenericRecordAvroTypeInfo",
    "ParquetBulkWriter",
    "ParquetBulkWriters",
    "ParquetWriterFactory",
    "arrow_schema",
    "arrow_type",
]
