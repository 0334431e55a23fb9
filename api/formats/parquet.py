"""PyFlink's ``pyflink.datastream.formats.parquet``: ``ParquetBulkWriters`` writes the
FileSink's part files as Parquet (``FileSink.for_bulk_format(path,
ParquetBulkWriters.for_row_type(Types.ROW_NAMED([...], [...])))``, see
:mod:`raylink.connectors.file.bulk_formats`); Flink's Java Parquet readers and Avro writers
are stand-ins that raise ``UnsupportedFeatureError`` naming the Python way."""

from raylink.api.pyflink_compat.stand_ins import JAVA_FORMATS
from raylink.api.pyflink_compat.unsupported import define_unsupported
from raylink.connectors.file.bulk_formats import ParquetBulkWriters

_feature, _alternative, _names = JAVA_FORMATS["parquet"]
__all__ = ["ParquetBulkWriters", *define_unsupported(globals(), _names, _feature, _alternative)]
