"""PyFlink's ``pyflink.common.time``: ``Duration``, ``Instant``, ``Time`` (``raylink.core.time``).

Only re-exports: the implementation lives on a lower floor."""

from raylink.core.time import (
    Duration,
    Instant,
    Time,
    parse_duration_ms,
    to_millis,
)

__all__ = [
    "Duration",
    "Time",
    "Instant",
    "to_millis",
    "parse_duration_ms",
]
