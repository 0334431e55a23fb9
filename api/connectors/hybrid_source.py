"""PyFlink's ``pyflink.datastream.connectors.hybrid_source``: the hybrid source, one of Flink's
Java connectors, which raylink does not have. Every name PyFlink exports is importable, so a
migrated program loads; constructing or using one raises
:class:`~raylink.api.unsupported.UnsupportedFeatureError` naming the alternative."""

from raylink.api.unsupported import NO_JVM, define_unsupported

_NAMES = [
    "HybridSource",
    "HybridSourceBuilder",
]

__all__ = define_unsupported(
    globals(),
    _NAMES,
    "the hybrid source (Java)",
    f"{NO_JVM}; chain the sources in Python: a SourceFunction for env.add_source(...) that reads one after the other",
)
