"""Schemas between Spark, Arrow and a raylink stream.

A stream read with ``from_spark`` carries a :class:`SparkRowType` as its type:
the Spark schema (as JSON, so it ships without a JVM), the matching Arrow
schema and how records look (``"tuple"``, ``"dict"`` or ``"row"``: a PyFlink ``Row``
named after the columns). Operators that keep
the type (filter, keyed aggregations) keep it on the stream, so a Spark sink
downstream can reuse the schema.

Only the driver needs pyspark (DDL strings, ``StructType``); operators in
TaskExecutors work on the Arrow schema.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Optional, Sequence

import pyarrow as pa

from raylink.connectors.spark.errors import java_message
from raylink.connectors.spark.session import get_spark
from raylink.core.types import TypeInformation

RECORD_FORMATS = ("tuple", "dict", "row")

#: Arrow schema metadata key holding the Spark schema JSON (exact Spark types on the way back)
SPARK_SCHEMA_METADATA = b"raylink.spark.schema"


@dataclass(frozen=True)
class SparkRowType(TypeInformation):
    """Type of a stream of Spark rows: ``tuple`` (positional), ``dict`` (by name) or ``row``
    (PyFlink ``Row`` named after the columns) records. A subclass of ``TypeInformation``, so
    record writers do not apply it as a ``Types.ROW_NAMED`` declaration (the records are
    Spark's, not converted)."""

    schema_json: str = ""
    record_format: str = "tuple"

    def spark_schema(self) -> Any:
        from pyspark.sql.types import StructType

        return StructType.fromJson(json.loads(self.schema_json))

    def arrow_schema(self) -> pa.Schema:
        return arrow_schema_of(self.spark_schema())

    @property
    def names(self) -> tuple:
        return tuple(f["name"] for f in json.loads(self.schema_json)["fields"])

    def __repr__(self) -> str:
        fields = ", ".join(
            f"{f['name']}: {f['type'] if isinstance(f['type'], str) else f['type'].get('type')}"
            for f in json.loads(self.schema_json)["fields"]
        )
        return f"SparkRow[{self.record_format}]<{fields}>"


def row_type(schema: Any, record_format: str = "tuple") -> SparkRowType:
    """A ``SparkRowType`` for a pyspark ``StructType``."""
    if record_format not in RECORD_FORMATS:
        raise ValueError(f"record_format must be one of {RECORD_FORMATS}, got {record_format!r}")
    names = tuple(schema.names)
    return SparkRowType(
        name="ROW", field_types=None, field_names=names, schema_json=schema.json(), record_format=record_format
    )


def arrow_schema_of(schema: Any) -> pa.Schema:
    """Arrow schema for a Spark ``StructType`` (Spark's own mapping), with the Spark
    schema JSON in its metadata."""
    from pyspark.sql.pandas.types import to_arrow_type

    fields = [pa.field(f.name, to_arrow_type(f.dataType), nullable=f.nullable) for f in schema.fields]
    return pa.schema(fields, metadata={SPARK_SCHEMA_METADATA: schema.json().encode()})


# -- schemas given by the user ------------------------------------------------------------------
_TYPE_NAMES = {
    "STRING": "string",
    "INT": "int",
    "LONG": "bigint",
    "FLOAT": "float",
    "DOUBLE": "double",
    "BOOLEAN": "boolean",
    "BYTE": "tinyint",
    "SHORT": "smallint",
    "BIG_DEC": "decimal(38,18)",
    "SQL_TIMESTAMP": "timestamp",
    "PICKLED_BYTE_ARRAY": "binary",
}


def _type_ddl(t: Any) -> str:
    if not isinstance(t, TypeInformation):
        raise TypeError(f"not a raylink type: {t!r}")
    if t.name in _TYPE_NAMES:
        return _TYPE_NAMES[t.name]
    if t.name in ("LIST", "PRIMITIVE_ARRAY"):
        return f"array<{_type_ddl(t.field_types[0])}>"
    if t.name == "MAP":
        return f"map<{_type_ddl(t.field_types[0])},{_type_ddl(t.field_types[1])}>"
    if t.name in ("ROW", "TUPLE") and t.field_types:
        names = t.field_names or tuple(f"f{i}" for i in range(len(t.field_types)))
        return "struct<" + ",".join(f"`{n}`:{_type_ddl(ft)}" for n, ft in zip(names, t.field_types)) + ">"
    raise TypeError(f"no Spark type for {t!r}")


def ddl_of_type_info(t: TypeInformation) -> Optional[str]:
    """A Spark DDL schema for ``Types.ROW_NAMED``/``Types.ROW``/``Types.TUPLE`` stream types."""
    if t.name not in ("ROW", "TUPLE") or not t.field_types:
        return None
    names = t.field_names or tuple(f"f{i}" for i in range(len(t.field_types)))
    return ", ".join(f"`{n}` {_type_ddl(ft)}" for n, ft in zip(names, t.field_types))


def resolve_schema(schema: Any, stream_type: Any, spark: Any = None, where: str = "sink_to_spark") -> Any:
    """A pyspark ``StructType`` from: an explicit ``StructType`` / DDL string / list of
    (name, DDL type) pairs, else the stream's ``SparkRowType`` or named row type."""
    from pyspark.sql.types import StructType

    if schema is None:
        if isinstance(stream_type, SparkRowType):
            return stream_type.spark_schema()
        if isinstance(stream_type, TypeInformation):
            ddl = ddl_of_type_info(stream_type)
            if ddl is not None:
                return resolve_schema(ddl, None, spark, where)
        raise ValueError(
            f"{where}: cannot infer a Spark schema from the stream's type ({stream_type!r}); "
            "pass schema= (a Spark DDL string such as 'page string, clicks bigint' or a "
            "StructType), or declare the stream's type (e.g. map(..., output_type="
            "Types.ROW_NAMED([...], [...])))"
        )
    if isinstance(schema, StructType):
        return schema
    if isinstance(schema, Sequence) and not isinstance(schema, (str, bytes)):
        schema = ", ".join(f"`{name}` {ddl}" for name, ddl in schema)
    if isinstance(schema, str):
        return parse_ddl(schema, spark, where)
    raise TypeError(f"{where}: schema must be a StructType or a DDL string, got {type(schema).__name__}")


def parse_ddl(ddl: str, spark: Any = None, where: str = "schema") -> Any:
    """Parse a Spark DDL schema string with Spark's own parser (needs the session's JVM)."""
    from pyspark.sql.types import StructType, _parse_datatype_json_string

    if spark is None:
        spark = get_spark()
    try:
        jtype = spark._jvm.org.apache.spark.sql.types.StructType.fromDDL(ddl)
    except Exception as exc:
        raise ValueError(f"{where}: invalid Spark DDL schema {ddl!r}: {java_message(exc)}") from None
    parsed = _parse_datatype_json_string(jtype.json())
    if not isinstance(parsed, StructType):
        raise ValueError(f"{where}: schema {ddl!r} is not a struct")
    return parsed


__all__ = [
    "SparkRowType",
    "RECORD_FORMATS",
    "row_type",
    "arrow_schema_of",
    "resolve_schema",
    "parse_ddl",
    "ddl_of_type_info",
    "SPARK_SCHEMA_METADATA",
]
