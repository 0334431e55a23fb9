"""PyFlink's ``pyflink.datastream.formats.parquet``: one of Flink's Java formats, which raylink
does not have. Every name PyFlink exports is importable; constructing or using one raises
:class:`~raylink.api.unsupported.UnsupportedFeatureError` naming the alternative."""

from raylink.api.unsupported import FILES_OR_SPARK, NO_JVM, define_unsupported

_NAMES = [
    "AvroParquetReaders",
    "AvroParquetWriters",
    "ParquetColumnarRowInputFormat",
    "ParquetBulkWriters",
]

__all__ = define_unsupported(
    globals(),
    _NAMES,
    "the Parquet format (Java)",
    f"{NO_JVM}; records are Python objects: (de)serialize them in a map "
    f"function with pyarrow.parquet, or {FILES_OR_SPARK}",
)
