"""PyFlink's ``pyflink.datastream.connectors.elasticsearch``: the Elasticsearch connector, one
of Flink's Java connectors, which raylink does not have. Every name PyFlink exports is
importable, so a migrated program loads; constructing or using one raises
:class:`~raylink.api.unsupported.UnsupportedFeatureError` naming the alternative."""

from raylink.api.unsupported import define_unsupported, own_source

_NAMES = [
    "FlushBackoffType",
    "ElasticsearchEmitter",
    "Elasticsearch6SinkBuilder",
    "Elasticsearch7SinkBuilder",
    "ElasticsearchSink",
]

__all__ = define_unsupported(
    globals(), _NAMES, "the Elasticsearch connector (Java)", own_source("the elasticsearch client")
)
