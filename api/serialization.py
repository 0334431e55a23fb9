"""PyFlink's ``pyflink.common.serialization``: turning records into bytes and back
(Flink's ``SerializationSchema`` / ``DeserializationSchema``, ``SimpleStringSchema``,
``ByteArraySchema``, ``RowFieldExtractorSchema``) and the FileSink's ``Encoder``.

In PyFlink these wrap Java objects for Java connectors; here they are plain Python
objects with ``serialize`` / ``deserialize``, usable in a user's own source or sink
(``raylink.core.sink``). ``BulkWriterFactory`` (Java bulk formats) is a
stand-in that fails on use. The schemas are immutable and thread-safe.
"""

from __future__ import annotations

import codecs
from typing import Any

from raylink.api.pyflink_compat.unsupported import FILES_OR_SPARK, NO_JVM, unsupported_class
from raylink.connectors.file.sink_config import Encoder


class SerializationSchema:
    """Turns a record into bytes (Flink's ``SerializationSchema``): override ``serialize``."""

    def open(self, context: Any = None) -> None:
        """Called once before the first ``serialize``."""

    def serialize(self, element: Any) -> bytes:
        raise NotImplementedError(f"{type(self).__name__} must implement serialize(element)")


class DeserializationSchema:
    """Turns bytes into a record (Flink's ``DeserializationSchema``): override ``deserialize``."""

    def open(self, context: Any = None) -> None:
        """Called once before the first ``deserialize``."""

    def deserialize(self, message: bytes) -> Any:
        raise NotImplementedError(f"{type(self).__name__} must implement deserialize(message)")

    def is_end_of_stream(self, next_element: Any) -> bool:
        return False


class SimpleStringSchema(SerializationSchema, DeserializationSchema):
    """Strings to bytes and back in ``charset`` (default UTF-8), as Flink's ``SimpleStringSchema``."""

    def __init__(self, charset: str = "UTF-8") -> None:
        try:
            self.charset = codecs.lookup(charset).name
        except LookupError:
            raise ValueError(f"SimpleStringSchema: unknown charset {charset!r}") from None

    def serialize(self, element: Any) -> bytes:
        return str(element).encode(self.charset)

    def deserialize(self, message: bytes) -> str:
        return bytes(message).decode(self.charset)

    def __eq__(self, other: Any) -> bool:
        return isinstance(other, SimpleStringSchema) and other.charset == self.charset

    def __hash__(self) -> int:
        return hash(("SimpleStringSchema", self.charset))


class ByteArraySchema(SerializationSchema, DeserializationSchema):
    """Bytes as they are (Flink's ``ByteArraySchema``)."""

    def serialize(self, element: Any) -> bytes:
        return bytes(element)

    def deserialize(self, message: bytes) -> bytes:
        return bytes(message)


class RowFieldExtractorSchema(SerializationSchema):
    """The field at ``field_index`` of a row (a ``Row``, tuple or list), which must already
    be ``bytes`` (Flink's ``RowFieldExtractorSchema``)."""

    def __init__(self, field_index: int) -> None:
        if not isinstance(field_index, int) or field_index < 0:
            raise ValueError(f"Field index must be non-negative, got: {field_index}")
        self.field_index = field_index

    def serialize(self, element: Any) -> bytes:
        if element is None:
            raise ValueError("RowFieldExtractorSchema: the row is None")
        try:
            value = element[self.field_index]
        except IndexError:
            raise ValueError(
                f"RowFieldExtractorSchema: field index {self.field_index} is out of range "
                f"for a row of {len(element)} fields"
            ) from None
        if value is None:
            return b""
        if not isinstance(value, (bytes, bytearray)):
            raise ValueError(
                f"RowFieldExtractorSchema: field {self.field_index} must be bytes, got {type(value).__name__}"
            )
        return bytes(value)


BulkWriterFactory = unsupported_class(
    "BulkWriterFactory",
    "Flink's bulk writers (Java)",
    f"{NO_JVM}; write row-encoded files with FileSink.for_row_format(path, Encoder...), or {FILES_OR_SPARK}",
    __name__,
)

__all__ = [
    "BulkWriterFactory",
    "ByteArraySchema",
    "DeserializationSchema",
    "Encoder",
    "RowFieldExtractorSchema",
    "SerializationSchema",
    "SimpleStringSchema",
]
