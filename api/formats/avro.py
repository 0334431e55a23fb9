"""PyFlink's ``pyflink.datastream.formats.avro``: ``AvroBulkWriters`` writes the FileSink's part
files as Avro container files (``FileSink.for_bulk_format(path,
AvroBulkWriters.for_generic_record(AvroSchema.parse_string(json)))``, records are dicts, the
stream before the sink declares ``GenericRecordAvroTypeInfo(schema)``; see
:mod:`raylink.connectors.file.bulk_formats`); Flink's Java Avro reader and row
(de)serialization schemas are stand-ins that raise ``UnsupportedFeatureError`` naming the
Python way (fastavro)."""

from raylink.api.pyflink_compat.stand_ins import JAVA_FORMATS
from raylink.api.pyflink_compat.unsupported import define_unsupported
from raylink.connectors.file.bulk_formats import AvroBulkWriters, AvroSchema, GenericRecordAvroTypeInfo

_feature, _alternative, _names = JAVA_FORMATS["avro"]
__all__ = [
    "AvroBulkWriters",
    "AvroSchema",
    "GenericRecordAvroTypeInfo",
    *define_unsupported(globals(), _names, _feature, _alternative),
]
