"""PyFlink's ``pyflink.datastream.time_domain``: event time or processing time of a timer (Flink's ``TimeDomain``).

The class lives in ``raylink.core.functions``; this module is where ``raylink migrate`` sends an import of
PyFlink's module. Stateless.
"""

from raylink.core.functions import TimeDomain

__all__ = ["TimeDomain"]
