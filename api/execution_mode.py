"""PyFlink's ``RuntimeExecutionMode`` (``pyflink.datastream.execution_mode``): how a job runs.

``STREAMING`` (the default): every task runs from the start, exchanges are pipelined,
keyed operators emit rolling results, watermarks and timers follow the data.
``BATCH``: exchanges are blocking, keyed operators read their input sorted by key and
emit final results only (a reduce or aggregation once per key), event-time timers fire
at the end of each key's input with the watermark at +inf, processing-time timers fire
there too (processing time does not advance during execution), checkpointing is off.
``AUTOMATIC``: ``BATCH`` when every source of the job is bounded, else ``STREAMING``
(Flink's rule). Set with ``env.set_runtime_mode(...)`` or ``execution.runtime-mode``.

Pure data; thread-safe.
"""

from __future__ import annotations

from enum import Enum
from typing import Any


class RuntimeExecutionMode(Enum):
    """Flink's ``RuntimeExecutionMode``."""

    STREAMING = 0
    BATCH = 1
    AUTOMATIC = 2

    @staticmethod
    def of(value: Any) -> "RuntimeExecutionMode":
        """The mode named by ``value``: a ``RuntimeExecutionMode`` or its name in any case
        (``"batch"``, the text of ``execution.runtime-mode``)."""
        if isinstance(value, RuntimeExecutionMode):
            return value
        name = str(value).strip().upper()
        try:
            return RuntimeExecutionMode[name]
        except KeyError:
            raise ValueError(f"{value!r} is not a runtime execution mode (STREAMING, BATCH or AUTOMATIC)") from None


__all__ = ["RuntimeExecutionMode"]
