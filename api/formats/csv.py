"""PyFlink's ``pyflink.datastream.formats.csv``: one of Flink's Java formats, which raylink
does not have. Every name PyFlink exports is importable; constructing or using one raises
:class:`~raylink.api.unsupported.UnsupportedFeatureError` naming the alternative."""

from raylink.api.unsupported import FILES_OR_SPARK, NO_JVM, define_unsupported

_NAMES = [
    "CsvSchema",
    "CsvSchemaBuilder",
    "CsvReaderFormat",
    "CsvBulkWriters",
    "CsvRowDeserializationSchema",
    "CsvRowSerializationSchema",
]

__all__ = define_unsupported(
    globals(),
    _NAMES,
    "the CSV format (Java)",
    f"{NO_JVM}; records are Python objects: (de)serialize them in a map "
    f"function with the csv module, or {FILES_OR_SPARK}",
)
