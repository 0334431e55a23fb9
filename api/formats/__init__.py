"""PyFlink's ``pyflink.datastream.formats``: Flink's (de)serialization formats. raylink writes
Parquet and Avro part files with the FileSink (:mod:`raylink.api.formats.parquet`'s
``ParquetBulkWriters``, through pyarrow; :mod:`raylink.api.formats.avro`'s ``AvroBulkWriters``,
through fastavro) and has Flink's row (de)serialization schemas the Kafka connector and a user's
own sources and sinks use: JSON (:mod:`raylink.api.formats.json`), CSV
(:mod:`raylink.api.formats.csv`) and Avro (:mod:`raylink.api.formats.avro`). Flink's other Java
formats (ORC, the CSV and Avro file readers and writers, the rest of Parquet) are stand-ins that
make every PyFlink name importable -- using one raises ``UnsupportedFeatureError`` naming the
Python way (records are Python objects)."""
