"""PyFlink's ``pyflink.datastream.connectors.pulsar``: the Pulsar connector, one of Flink's
Java connectors, which raylink does not have. Every name PyFlink exports is importable, so a
migrated program loads; constructing or using one raises
:class:`~raylink.api.unsupported.UnsupportedFeatureError` naming the alternative."""

from raylink.api.unsupported import define_unsupported, own_source

_NAMES = [
    "PulsarSource",
    "PulsarSourceBuilder",
    "StartCursor",
    "StopCursor",
    "RangeGenerator",
    "PulsarSink",
    "PulsarSinkBuilder",
    "MessageDelayer",
    "TopicRoutingMode",
]

__all__ = define_unsupported(globals(), _NAMES, "the Pulsar connector (Java)", own_source("pulsar-client"))
