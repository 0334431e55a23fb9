"""PyFlink's ``pyflink.datastream.formats``: Flink's Java (de)serialization formats (JSON, CSV,
Avro, ORC, Parquet), which raylink does not have — its records are Python objects. The
submodules make every PyFlink name importable; using one raises
:class:`~raylink.api.unsupported.UnsupportedFeatureError` naming the alternative."""
