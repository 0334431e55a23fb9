"""PyFlink's ``pyflink.datastream.state``: state descriptors and interfaces, TTL config
(``raylink.core.state``, ``raylink.core.state_ttl``).

Only re-exports: the implementation lives on a lower floor."""

from raylink.core import state as _state
from raylink.core.state import *  # noqa: F401,F403 - every name of core.state's __all__ (StateTtlConfig too)

__all__ = list(_state.__all__)
