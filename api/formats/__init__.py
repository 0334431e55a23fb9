"""PyFlink's ``pyflink.datastream.formats``: Flink's (de)serialization formats. raylink writes
Parquet part files with the FileSink (:mod:`raylink.api.formats.parquet`'s
``ParquetBulkWriters``, through pyarrow); Flink's Java formats (JSON, CSV, Avro, ORC and the
rest of Parquet) are stand-ins that make every PyFlink name importable -- using one raises
``UnsupportedFeatureError`` naming the Python way (records are Python objects)."""
