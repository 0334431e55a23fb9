"""PyFlink's ``pyflink.datastream.formats.csv``: ``CsvRowSerializationSchema`` and
``CsvRowDeserializationSchema`` (Flink's CSV row format), for the Kafka connector and a user's
own sources and sinks; Flink's Java CSV file reader and writers (``CsvSchema``,
``CsvReaderFormat``, ``CsvBulkWriters``) are stand-ins that raise ``UnsupportedFeatureError``.

A row of a ``Types.ROW`` type is one CSV line (fields joined by the field delimiter, quoted
only when they hold the delimiter, the quote character or a line break; None as the null
literal, ``""`` by default; booleans ``true``/``false``; arrays joined by the array element
delimiter ``;``), ending with the line delimiter (``\\n``). A line becomes a positional
``Row`` with each field converted to its declared type (integers, floating point, booleans,
decimals, strings; the null literal, or an empty non-string field, is None); a line that does
not fit fails naming it unless ``set_ignore_parse_errors(True)`` (then it is skipped).
Immutable once built; thread-safe.
"""

from __future__ import annotations

import csv
import decimal
import io
from typing import Any, Callable, List, Optional

from raylink.api.pyflink_compat.stand_ins import JAVA_FORMATS
from raylink.api.pyflink_compat.unsupported import define_unsupported
from raylink.api.serialization import DeserializationSchema, SerializationSchema
from raylink.core.row import Row

_INTS = {"INT", "LONG", "SHORT", "BYTE", "BIG_INT"}
_FLOATS = {"FLOAT", "DOUBLE"}


def _field_types(type_info: Any, who: str) -> list:
    if getattr(type_info, "name", None) not in ("ROW", "ROW_NAMED"):
        raise ValueError(f"{who}: the type must be Types.ROW(...) or Types.ROW_NAMED(...), got {type_info!r}")
    return type_info.get_field_types()


def _parser(type_info: Any, array_delimiter: str) -> Callable[[str], Any]:
    name = getattr(type_info, "name", "STRING")
    if name in _INTS:
        return int
    if name in _FLOATS:
        return float
    if name == "BIG_DEC":
        return decimal.Decimal
    if name == "BOOLEAN":

        def boolean(text: str) -> bool:
            lowered = text.strip().lower()
            if lowered not in ("true", "false"):
                raise ValueError(f"not a boolean: {text!r}")
            return lowered == "true"

        return boolean
    if name in ("BASIC_ARRAY", "PRIMITIVE_ARRAY", "OBJECT_ARRAY", "LIST") and type_info.field_types:
        element = _parser(type_info.field_types[0], array_delimiter)
        return lambda text: [element(part) for part in text.split(array_delimiter)] if text else []
    return str


def _text(value: Any, array_delimiter: str, null_literal: str) -> str:
    if value is None:
        return null_literal
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return array_delimiter.join(_text(v, array_delimiter, null_literal) for v in value)
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).decode("utf-8")
    return str(value)


def _one_char(value: str, what: str) -> str:
    if not isinstance(value, str) or len(value) != 1:
        raise ValueError(f"CSV format: the {what} must be one character, got {value!r}")
    return value


class CsvRowSerializationSchema(SerializationSchema):
    """A row as one CSV line (Flink's ``CsvRowSerializationSchema``)."""

    def __init__(
        self,
        field_types: list,
        field_delimiter: str = ",",
        line_delimiter: str = "\n",
        array_element_delimiter: str = ";",
        quote_character: Optional[str] = '"',
        escape_character: Optional[str] = None,
        null_literal: str = "",
    ) -> None:
        self.arity = len(field_types)
        self.field_delimiter = field_delimiter
        self.line_delimiter = line_delimiter
        self.array_element_delimiter = array_element_delimiter
        self.quote_character = quote_character
        self.escape_character = escape_character
        self.null_literal = null_literal

    def serialize(self, element: Any) -> bytes:
        values = list(element)
        if len(values) != self.arity:
            raise ValueError(f"CsvRowSerializationSchema: a row of {len(values)} fields for a type of {self.arity}")
        out = io.StringIO()
        writer = csv.writer(
            out,
            delimiter=self.field_delimiter,
            quotechar=self.quote_character or '"',
            quoting=csv.QUOTE_MINIMAL if self.quote_character else csv.QUOTE_NONE,
            escapechar=self.escape_character,
            lineterminator=self.line_delimiter,
        )
        writer.writerow([_text(v, self.array_element_delimiter, self.null_literal) for v in values])
        return out.getvalue().encode("utf-8")

    class Builder:
        """PyFlink's ``CsvRowSerializationSchema.Builder(type_info)``."""

        def __init__(self, type_info: Any) -> None:
            self._types = _field_types(type_info, "CsvRowSerializationSchema")
            self._options: dict = {}

        def set_field_delimiter(self, c: str) -> "CsvRowSerializationSchema.Builder":
            self._options["field_delimiter"] = _one_char(c, "field delimiter")
            return self

        def set_line_delimiter(self, delimiter: str) -> "CsvRowSerializationSchema.Builder":
            if delimiter not in ("\n", "\r", "\r\n", ""):
                raise ValueError(f"CSV format: the line delimiter must be \\n, \\r, \\r\\n or empty, got {delimiter!r}")
            self._options["line_delimiter"] = delimiter
            return self

        def set_array_element_delimiter(self, delimiter: str) -> "CsvRowSerializationSchema.Builder":
            self._options["array_element_delimiter"] = delimiter
            return self

        def disable_quote_character(self) -> "CsvRowSerializationSchema.Builder":
            self._options["quote_character"] = None
            return self

        def set_quote_character(self, c: str) -> "CsvRowSerializationSchema.Builder":
            self._options["quote_character"] = _one_char(c, "quote character")
            return self

        def set_escape_character(self, c: str) -> "CsvRowSerializationSchema.Builder":
            self._options["escape_character"] = _one_char(c, "escape character")
            return self

        def set_null_literal(self, s: str) -> "CsvRowSerializationSchema.Builder":
            self._options["null_literal"] = s
            return self

        def build(self) -> "CsvRowSerializationSchema":
            return CsvRowSerializationSchema(self._types, **self._options)


class CsvRowDeserializationSchema(DeserializationSchema):
    """One CSV line as a ``Row`` of the declared types (Flink's ``CsvRowDeserializationSchema``)."""

    def __init__(
        self,
        field_types: list,
        field_delimiter: str = ",",
        allow_comments: bool = False,
        array_element_delimiter: str = ";",
        quote_character: Optional[str] = '"',
        escape_character: Optional[str] = None,
        null_literal: Optional[str] = None,
        ignore_parse_errors: bool = False,
        type_info: Any = None,
    ) -> None:
        self.type_info = type_info
        self.field_types = list(field_types)
        self.field_delimiter = field_delimiter
        self.allow_comments = allow_comments
        self.array_element_delimiter = array_element_delimiter
        self.quote_character = quote_character
        self.escape_character = escape_character
        self.null_literal = null_literal
        self.ignore_parse_errors = ignore_parse_errors
        self._parsers = [_parser(t, array_element_delimiter) for t in self.field_types]

    def deserialize(self, message: bytes) -> Optional[Row]:
        text = bytes(message).decode("utf-8").rstrip("\r\n")
        if self.allow_comments and text.startswith("#"):
            return None
        try:
            reader = csv.reader(
                [text],
                delimiter=self.field_delimiter,
                quotechar=self.quote_character or '"',
                quoting=csv.QUOTE_MINIMAL if self.quote_character else csv.QUOTE_NONE,
                escapechar=self.escape_character,
            )
            fields = next(reader, [])
            if len(fields) != len(self._parsers):
                raise ValueError(f"{len(fields)} fields for a type of {len(self._parsers)}")
            values: List[Any] = []
            for field, parse, declared in zip(fields, self._parsers, self.field_types):
                is_string = getattr(declared, "name", "STRING") in ("STRING", "CHAR")
                if (self.null_literal is not None and field == self.null_literal) or (field == "" and not is_string):
                    values.append(None)
                else:
                    values.append(parse(field))
        except (ValueError, decimal.InvalidOperation, csv.Error) as exc:
            if self.ignore_parse_errors:
                return None
            raise ValueError(f"CsvRowDeserializationSchema: cannot read {text[:200]!r}: {exc}") from None
        return Row(*values)

    def get_produced_type(self) -> Any:
        """The builder's ``Types.ROW`` (Flink's ``getProducedType``): a source reading with this
        schema is a stream of that type, so ``print()`` writes ``+I[1,hi]`` as PyFlink does."""
        return self.type_info

    class Builder:
        """PyFlink's ``CsvRowDeserializationSchema.Builder(type_info)``."""

        def __init__(self, type_info: Any) -> None:
            self._types = _field_types(type_info, "CsvRowDeserializationSchema")
            self._options: dict = {"type_info": type_info}

        def set_field_delimiter(self, delimiter: str) -> "CsvRowDeserializationSchema.Builder":
            self._options["field_delimiter"] = _one_char(delimiter, "field delimiter")
            return self

        def set_allow_comments(self, allow_comments: bool) -> "CsvRowDeserializationSchema.Builder":
            self._options["allow_comments"] = bool(allow_comments)
            return self

        def set_array_element_delimiter(self, delimiter: str) -> "CsvRowDeserializationSchema.Builder":
            self._options["array_element_delimiter"] = delimiter
            return self

        def set_quote_character(self, c: str) -> "CsvRowDeserializationSchema.Builder":
            self._options["quote_character"] = _one_char(c, "quote character")
            return self

        def set_escape_character(self, c: str) -> "CsvRowDeserializationSchema.Builder":
            self._options["escape_character"] = _one_char(c, "escape character")
            return self

        def set_null_literal(self, null_literal: str) -> "CsvRowDeserializationSchema.Builder":
            self._options["null_literal"] = null_literal
            return self

        def set_ignore_parse_errors(self, ignore_parse_errors: bool) -> "CsvRowDeserializationSchema.Builder":
            self._options["ignore_parse_errors"] = bool(ignore_parse_errors)
            return self

        def build(self) -> "CsvRowDeserializationSchema":
            return CsvRowDeserializationSchema(self._types, **self._options)


_feature, _alternative, _names = JAVA_FORMATS["csv"]
__all__ = [
    "CsvRowDeserializationSchema",
    "CsvRowSerializationSchema",
    *define_unsupported(globals(), _names, _feature, _alternative),
]
