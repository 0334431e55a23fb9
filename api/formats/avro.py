"""PyFlink's ``pyflink.datastream.formats.avro``: ``AvroBulkWriters`` writes the FileSink's part
files as Avro container files (``FileSink.for_bulk_format(path,
AvroBulkWriters.for_generic_record(AvroSchema.parse_string(json)))``, records are dicts, the
stream before the sink declares ``GenericRecordAvroTypeInfo(schema)``; see
:mod:`raylink.connectors.file.bulk_formats`); ``AvroRowSerializationSchema`` /
``AvroRowDeserializationSchema`` turn rows into Avro's binary encoding of one record and back
(Flink's Avro row format, without a container header: what the Kafka connector carries), through
fastavro; Flink's Java Avro file reader (``AvroInputFormat``) is a stand-in that raises
``UnsupportedFeatureError`` naming the Python way.

A row's fields go to the schema's fields in order (a dict's by name); a record
read back is a positional ``Row`` in the schema's field order. Immutable; thread-safe.
"""

from __future__ import annotations

import io
import json
from typing import Any, Optional

import fastavro

from raylink.api.pyflink_compat.stand_ins import JAVA_FORMATS
from raylink.api.pyflink_compat.unsupported import define_unsupported
from raylink.api.serialization import DeserializationSchema, SerializationSchema
from raylink.connectors.file.bulk_formats import AvroBulkWriters, AvroSchema, GenericRecordAvroTypeInfo
from raylink.core.row import Row
from raylink.core.types import Types

#: Avro's primitive types as Flink's ``AvroSchemaConverter`` declares them
_AVRO_TYPES = {
    "int": Types.INT,
    "long": Types.LONG,
    "string": Types.STRING,
    "enum": Types.STRING,
    "boolean": Types.BOOLEAN,
    "float": Types.FLOAT,
    "double": Types.DOUBLE,
    "bytes": lambda: Types.PRIMITIVE_ARRAY(Types.BYTE()),
    "fixed": lambda: Types.PRIMITIVE_ARRAY(Types.BYTE()),
}


def _type_info(schema: Any) -> Any:
    """The ``TypeInformation`` of a parsed Avro schema, None where it has none here."""
    if isinstance(schema, list):  # a union: only ``[null, T]`` has a type
        types = [t for t in schema if t != "null"]
        return _type_info(types[0]) if len(types) == 1 else None
    name = schema.get("type") if isinstance(schema, dict) else schema
    if name == "record":
        fields = [_type_info(f["type"]) for f in schema["fields"]]
        if any(f is None for f in fields):
            return None
        return Types.ROW_NAMED([f["name"] for f in schema["fields"]], fields)
    if name == "array":
        element = _type_info(schema["items"])
        return None if element is None else Types.OBJECT_ARRAY(element)
    if name == "map":
        value = _type_info(schema["values"])
        return None if value is None else Types.MAP(Types.STRING(), value)
    if isinstance(name, (dict, list)):
        return _type_info(name)
    make = _AVRO_TYPES.get(name)
    return None if make is None else make()


def _parse(record_class: Optional[str], avro_schema_string: Optional[str], who: str) -> Any:
    if record_class is not None:
        raise ValueError(
            f"{who}: record_class names a Java (SpecificRecord) class, which raylink has not; "
            f"give the schema as avro_schema_string"
        )
    if not avro_schema_string:
        raise ValueError(f"{who}: avro_schema_string is required")
    try:
        schema = fastavro.parse_schema(json.loads(avro_schema_string))
    except (ValueError, fastavro.schema.SchemaParseException, TypeError, KeyError) as exc:
        raise ValueError(f"{who}: not an Avro schema: {exc}") from None
    if not isinstance(schema, dict) or schema.get("type") != "record":
        raise ValueError(f"{who}: the schema must be an Avro record schema")
    return schema


class AvroRowSerializationSchema(SerializationSchema):
    """A row as Avro's binary encoding of one record (Flink's ``AvroRowSerializationSchema``)."""

    def __init__(self, record_class: Optional[str] = None, avro_schema_string: Optional[str] = None) -> None:
        self.schema = _parse(record_class, avro_schema_string, "AvroRowSerializationSchema")
        self.field_names = [f["name"] for f in self.schema["fields"]]

    def serialize(self, element: Any) -> bytes:
        if isinstance(element, dict):
            record = element
        else:  # a Row (named or not) or tuple: by position, as Flink maps a Row's fields
            values = list(element)
            if len(values) != len(self.field_names):
                raise ValueError(
                    f"AvroRowSerializationSchema: a row of {len(values)} fields for a schema of "
                    f"{len(self.field_names)} ({self.field_names})"
                )
            record = dict(zip(self.field_names, values))
        out = io.BytesIO()
        fastavro.schemaless_writer(out, self.schema, record)
        return out.getvalue()


class AvroRowDeserializationSchema(DeserializationSchema):
    """Avro's binary encoding of one record as a ``Row`` (Flink's ``AvroRowDeserializationSchema``)."""

    def __init__(self, record_class: Optional[str] = None, avro_schema_string: Optional[str] = None) -> None:
        self.schema = _parse(record_class, avro_schema_string, "AvroRowDeserializationSchema")
        self.field_names = [f["name"] for f in self.schema["fields"]]
        self.type_info = _type_info(self.schema)

    def get_produced_type(self) -> Any:
        """The schema's row type (Flink's ``getProducedType``, through ``AvroSchemaConverter``):
        a source reading with this schema is a stream of that type, so ``print()`` writes
        ``+I[1,hi]`` as PyFlink does; None when a field's Avro type has no counterpart here."""
        return self.type_info

    def deserialize(self, message: bytes) -> Row:
        try:
            record = fastavro.schemaless_reader(io.BytesIO(bytes(message)), self.schema, None)
        except Exception as exc:  # fastavro raises EOFError, ValueError, UnicodeDecodeError ...
            raise ValueError(f"AvroRowDeserializationSchema: cannot read {bytes(message)[:100]!r}: {exc}") from None
        return Row(*(record[name] for name in self.field_names))


_feature, _alternative, _names = JAVA_FORMATS["avro"]
__all__ = [
    "AvroBulkWriters",
    "AvroRowDeserializationSchema",
    "AvroRowSerializationSchema",
    "AvroSchema",
    "GenericRecordAvroTypeInfo",
    *define_unsupported(globals(), _names, _feature, _alternative),
]
