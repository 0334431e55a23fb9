"""Amounts and points of time: PyFlink's ``pyflink.common.time`` (``Duration``, ``Time``, ``Instant``).

``Duration`` mirrors ``java.time.Duration`` as PyFlink exposes it (``Duration.of_millis``,
``of_seconds`` ...), ``Time`` the window-size helper PyFlink 2.x still uses
(``Time.seconds(5)``), ``Instant`` a point on the epoch time line. All three are
immutable value objects (frozen dataclasses, safe to share between threads) whose
resolution is what the runtime needs: milliseconds, the unit of every timestamp,
watermark and timer in raylink (``Duration`` keeps nanoseconds like Java's).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Union

from raylink.core.options import parse_duration_ms as _parse_option_duration

_NANOS_PER_MILLI = 1_000_000


@dataclass(frozen=True, order=True)
class Duration:
    """A length of time (Java's ``Duration``), stored in nanoseconds."""

    nanos: int

    @staticmethod
    def of_nanos(nanos: int) -> "Duration":
        return Duration(int(nanos))

    @staticmethod
    def of_millis(millis: int) -> "Duration":
        return Duration(int(millis) * _NANOS_PER_MILLI)

    @staticmethod
    def of_seconds(seconds: int) -> "Duration":
        return Duration(int(seconds) * 1000 * _NANOS_PER_MILLI)

    @staticmethod
    def of_minutes(minutes: int) -> "Duration":
        return Duration(int(minutes) * 60_000 * _NANOS_PER_MILLI)

    @staticmethod
    def of_hours(hours: int) -> "Duration":
        return Duration(int(hours) * 3_600_000 * _NANOS_PER_MILLI)

    @staticmethod
    def of_days(days: int) -> "Duration":
        return Duration(int(days) * 86_400_000 * _NANOS_PER_MILLI)

    @staticmethod
    def from_timedelta(delta: timedelta) -> "Duration":
        return Duration((delta.days * 86_400 + delta.seconds) * 1_000_000_000 + delta.microseconds * 1000)

    def to_millis(self) -> int:
        """Whole milliseconds (Java's ``toMillis``: truncated towards negative infinity)."""
        return self.nanos // _NANOS_PER_MILLI

    to_milliseconds = to_millis

    def to_nanos(self) -> int:
        return self.nanos

    def get_seconds(self) -> int:
        return self.nanos // 1_000_000_000

    def is_negative(self) -> bool:
        return self.nanos < 0

    def is_zero(self) -> bool:
        return self.nanos == 0

    def to_timedelta(self) -> timedelta:
        return timedelta(microseconds=self.nanos / 1000)

    def __repr__(self) -> str:
        return (
            f"Duration.of_millis({self.to_millis()})"
            if self.nanos % _NANOS_PER_MILLI == 0
            else f"Duration.of_nanos({self.nanos})"
        )


Duration.ZERO = Duration(0)  # type: ignore[attr-defined]


@dataclass(frozen=True, order=True)
class Time:
    """A window size / interval in milliseconds (Flink's ``Time``, as PyFlink 2.x uses it)."""

    millis: int

    @staticmethod
    def milliseconds(milliseconds: int) -> "Time":
        return Time(int(milliseconds))

    @staticmethod
    def seconds(seconds: int) -> "Time":
        return Time(int(seconds) * 1000)

    @staticmethod
    def minutes(minutes: int) -> "Time":
        return Time(int(minutes) * 60_000)

    @staticmethod
    def hours(hours: int) -> "Time":
        return Time(int(hours) * 3_600_000)

    @staticmethod
    def days(days: int) -> "Time":
        return Time(int(days) * 86_400_000)

    def to_milliseconds(self) -> int:
        return self.millis

    def get_size(self) -> int:
        return self.millis

    def __repr__(self) -> str:
        return f"Time.milliseconds({self.millis})"


@dataclass(frozen=True, order=True)
class Instant:
    """A point in time: ``seconds`` since the epoch plus ``nanos`` (Java's ``Instant``)."""

    seconds: int
    nanos: int = 0

    @staticmethod
    def of_epoch_milli(epoch_milli: int) -> "Instant":
        seconds, millis = divmod(int(epoch_milli), 1000)
        return Instant(seconds, millis * _NANOS_PER_MILLI)

    def to_epoch_milli(self) -> int:
        return self.seconds * 1000 + self.nanos // _NANOS_PER_MILLI


TimeLike = Union[Duration, Time, int, timedelta]


def to_millis(value: TimeLike, what: str = "time") -> int:
    """Milliseconds of a ``Duration``, ``Time``, ``timedelta`` or int (ms); clear error otherwise."""
    if isinstance(value, bool):
        raise TypeError(f"{what} must be a Time, Duration, timedelta or int milliseconds, got {value!r}")
    if isinstance(value, int):
        return value
    if isinstance(value, (Duration, Time)):
        return value.to_milliseconds()
    if isinstance(value, timedelta):
        return Duration.from_timedelta(value).to_millis()
    to_ms = getattr(value, "to_milliseconds", None)
    if callable(to_ms):
        return int(to_ms())
    raise TypeError(f"{what} must be a Time, Duration, timedelta or int milliseconds, got {value!r}")


def parse_duration_ms(value: Any, key: str = "duration") -> int:
    """Milliseconds of an option value: an int, or Flink's duration text ("200 ms", "1 s")."""
    try:
        return _parse_option_duration(value)
    except ValueError as exc:
        raise ValueError(f"configuration key {key!r}: {exc}") from None


__all__ = ["Duration", "Time", "Instant", "to_millis", "parse_duration_ms"]
