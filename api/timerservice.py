"""PyFlink's ``pyflink.datastream.timerservice``: the timers of a keyed function's context (Flink's ``TimerService``).

The class lives in ``raylink.core.functions``; this module is where ``raylink migrate`` sends an import of
PyFlink's module. Stateless.
"""

from raylink.core.functions import TimerService

__all__ = ["TimerService"]
