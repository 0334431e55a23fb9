"""PyFlink's ``pyflink.datastream.formats``: Flink's (de)serialization formats. raylink writes
Parquet and Avro part files with the FileSink (:mod:`raylink.api.formats.parquet`'s
``ParquetBulkWriters``, through pyarrow; :mod:`raylink.api.formats.avro`'s ``AvroBulkWriters``,
through fastavro); Flink's Java formats (JSON, CSV, ORC and the rest of Avro and Parquet) are
stand-ins that make every PyFlink name importable -- using one raises
``UnsupportedFeatureError`` naming the Python way (records are Python objects)."""
