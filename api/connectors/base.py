"""PyFlink's ``pyflink.datastream.connectors.base``: Flink's Sink V2 interfaces (``raylink.core.sink``).

Only re-exports: the implementation lives on a lower floor."""

from raylink.core import sink as _sink
from raylink.core.sink import *  # noqa: F401,F403 - every name of core.sink's __all__

__all__ = list(_sink.__all__)
