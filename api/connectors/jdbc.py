"""PyFlink's ``pyflink.datastream.connectors.jdbc``: the JDBC connector, one of Flink's Java
connectors, which raylink does not have. Every name PyFlink exports is importable, so a
migrated program loads; constructing or using one raises
:class:`~raylink.api.unsupported.UnsupportedFeatureError` naming the alternative."""

from raylink.api.unsupported import define_unsupported, own_source

_NAMES = [
    "JdbcSink",
    "JdbcConnectionOptions",
    "JdbcExecutionOptions",
]

__all__ = define_unsupported(
    globals(),
    _NAMES,
    "the JDBC connector (Java)",
    own_source("a DB-API driver (or sink_to_spark for Spark's JDBC writer)"),
)
