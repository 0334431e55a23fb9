"""PyFlink's ``pyflink.datastream.formats.json``: ``JsonRowSerializationSchema`` and
``JsonRowDeserializationSchema`` (Flink's JSON row format), for the Kafka connector and a user's
own sources and sinks.

A row of a ``Types.ROW`` / ``ROW_NAMED`` type becomes a JSON object keyed by the type's field
names (``f0``, ``f1``, ... for an unnamed ROW), compact, UTF-8; a JSON object becomes a ``Row``
(positional, as the Java ``Row`` Flink builds) taking each declared field by name -- a missing
field is None unless ``fail_on_missing_field()``; a message that is not JSON fails, naming
it, unless ``ignore_parse_errors()`` (then it is skipped, None). Declared ``json_schema``
strings are read for their top-level ``properties``. Immutable once built; thread-safe.
"""

from __future__ import annotations

import json
from typing import Any, List, Optional

from raylink.api.serialization import DeserializationSchema, SerializationSchema
from raylink.core.row import Row


def _row_type(type_info: Any, who: str) -> Any:
    if getattr(type_info, "name", None) not in ("ROW", "ROW_NAMED"):
        raise ValueError(f"{who}: the type must be Types.ROW(...) or Types.ROW_NAMED(...), got {type_info!r}")
    return type_info


def _json_value(value: Any) -> Any:
    if isinstance(value, Row):
        return [_json_value(v) for v in value]
    if isinstance(value, (bytes, bytearray)):
        return list(bytes(value))
    if isinstance(value, (list, tuple)):
        return [_json_value(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _json_value(v) for k, v in value.items()}
    return value


class JsonRowSerializationSchema(SerializationSchema):
    """A row as a JSON object of its declared fields (Flink's ``JsonRowSerializationSchema``)."""

    def __init__(self, type_info: Any) -> None:
        self.type_info = _row_type(type_info, "JsonRowSerializationSchema")
        self.field_names: List[str] = type_info.get_field_names()

    @staticmethod
    def builder() -> "JsonRowSerializationSchema.Builder":
        return JsonRowSerializationSchema.Builder()

    def serialize(self, element: Any) -> bytes:
        names = self.field_names
        if isinstance(element, dict):
            values = [element.get(name) for name in names]
        else:
            values = list(element)
            if len(values) != len(names):
                raise ValueError(
                    f"JsonRowSerializationSchema: a row of {len(values)} fields for a type of {len(names)} ({names})"
                )
        return json.dumps(
            {n: _json_value(v) for n, v in zip(names, values)}, separators=(",", ":"), ensure_ascii=False
        ).encode("utf-8")

    class Builder:
        """PyFlink's ``JsonRowSerializationSchema.Builder``."""

        def __init__(self) -> None:
            self._type_info: Any = None

        def with_type_info(self, type_info: Any) -> "JsonRowSerializationSchema.Builder":
            self._type_info = _row_type(type_info, "JsonRowSerializationSchema.with_type_info")
            return self

        def build(self) -> "JsonRowSerializationSchema":
            if self._type_info is None:
                raise ValueError("JsonRowSerializationSchema: no type; call with_type_info(Types.ROW(...))")
            return JsonRowSerializationSchema(self._type_info)


class JsonRowDeserializationSchema(DeserializationSchema):
    """A JSON object as a ``Row`` of the declared fields (Flink's ``JsonRowDeserializationSchema``)."""

    def __init__(
        self,
        field_names: List[str],
        fail_on_missing_field: bool,
        ignore_parse_errors: bool,
        type_info: Any = None,
    ) -> None:
        self.field_names = list(field_names)
        self.fail_on_missing_field = fail_on_missing_field
        self.ignore_parse_errors = ignore_parse_errors
        self.type_info = type_info

    def get_produced_type(self) -> Any:
        """The declared ``Types.ROW`` (Flink's ``getProducedType``): a source reading with this
        schema is a stream of that type, so ``print()`` writes ``+I[1,hi]`` as PyFlink does;
        None for a schema built from ``json_schema``."""
        return self.type_info

    @staticmethod
    def builder() -> "JsonRowDeserializationSchema.Builder":
        return JsonRowDeserializationSchema.Builder()

    def deserialize(self, message: bytes) -> Optional[Row]:
        try:
            document = json.loads(bytes(message))
            if not isinstance(document, dict):
                raise ValueError(f"expected a JSON object, got {type(document).__name__}")
            values = []
            for name in self.field_names:
                if name not in document and self.fail_on_missing_field:
                    raise ValueError(f"field {name!r} is missing")
                values.append(document.get(name))
        except (ValueError, TypeError) as exc:
            if self.ignore_parse_errors:
                return None
            raise ValueError(f"JsonRowDeserializationSchema: cannot read {bytes(message)[:200]!r}: {exc}") from None
        return Row(*values)

    class Builder:
        """PyFlink's ``JsonRowDeserializationSchema.Builder``."""

        def __init__(self) -> None:
            self._names: Optional[List[str]] = None
            self._type_info: Any = None
            self._fail_on_missing = False
            self._ignore_errors = False

        def type_info(self, type_info: Any) -> "JsonRowDeserializationSchema.Builder":
            self._names = _row_type(type_info, "JsonRowDeserializationSchema.type_info").get_field_names()
            self._type_info = type_info
            return self

        def json_schema(self, json_schema: str) -> "JsonRowDeserializationSchema.Builder":
            try:
                schema = json.loads(json_schema)
                self._names = list(schema["properties"])
                self._type_info = None
            except (ValueError, KeyError, TypeError) as exc:
                raise ValueError(f"JsonRowDeserializationSchema.json_schema: not a JSON object schema: {exc}") from None
            return self

        def fail_on_missing_field(self) -> "JsonRowDeserializationSchema.Builder":
            self._fail_on_missing = True
            return self

        def ignore_parse_errors(self) -> "JsonRowDeserializationSchema.Builder":
            self._ignore_errors = True
            return self

        def build(self) -> "JsonRowDeserializationSchema":
            if self._names is None:
                raise ValueError("JsonRowDeserializationSchema: no type; call type_info(Types.ROW(...)) or json_schema")
            return JsonRowDeserializationSchema(
                self._names, self._fail_on_missing, self._ignore_errors, self._type_info
            )


__all__ = ["JsonRowDeserializationSchema", "JsonRowSerializationSchema"]
