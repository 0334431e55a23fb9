"""Restart strategies: whether, and after how long, a failed job restarts — Flink's
``RestartBackoffTimeStrategy`` family (``NoRestartBackoffTimeStrategy``,
``FixedDelayRestartBackoffTimeStrategy``, ``ExponentialDelayRestartBackoffTimeStrategy``,
``FailureRateRestartBackoffTimeStrategy``) with Flink's ``restart-strategy.*`` keys.

Without ``restart-strategy.type`` the strategy is Flink 2's default: exponential
delay when checkpointing is on, none otherwise. The JobMaster calls
``notify_failure(now_ms)`` on every failure, then ``can_restart()`` and
``backoff_time_ms()``. Not thread-safe: the JobMaster's failover holds its lock.
"""

from __future__ import annotations

import random
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Optional

from raylink.core.options import CheckpointingOptions, RestartStrategyOptions, read_option


class RestartStrategy:
    """Decides after each failure whether the job restarts and how long it waits first."""

    name = "none"

    def notify_failure(self, now_ms: int) -> None:
        pass

    def can_restart(self) -> bool:
        return False

    def backoff_time_ms(self) -> int:
        return 0

    def describe(self) -> str:
        return self.name


class NoRestartStrategy(RestartStrategy):
    pass


@dataclass
class FixedDelayRestartStrategy(RestartStrategy):
    attempts: int
    delay_ms: int
    failures: int = 0
    name = "fixed-delay"

    def notify_failure(self, now_ms: int) -> None:
        self.failures += 1

    def can_restart(self) -> bool:
        return self.failures <= self.attempts

    def backoff_time_ms(self) -> int:
        return self.delay_ms

    def describe(self) -> str:
        return f"fixed-delay (attempts {self.attempts}, delay {self.delay_ms} ms)"


@dataclass
class FailureRateRestartStrategy(RestartStrategy):
    max_failures_per_interval: int
    interval_ms: int
    delay_ms: int
    failure_times: deque = field(default_factory=deque)
    name = "failure-rate"

    def notify_failure(self, now_ms: int) -> None:
        self.failure_times.append(now_ms)
        while self.failure_times and now_ms - self.failure_times[0] > self.interval_ms:
            self.failure_times.popleft()

    def can_restart(self) -> bool:
        return len(self.failure_times) <= self.max_failures_per_interval

    def backoff_time_ms(self) -> int:
        return self.delay_ms

    def describe(self) -> str:
        return (
            f"failure-rate ({self.max_failures_per_interval} failures per {self.interval_ms} ms, "
            f"delay {self.delay_ms} ms)"
        )


@dataclass
class ExponentialDelayRestartStrategy(RestartStrategy):
    initial_backoff_ms: int
    max_backoff_ms: int
    multiplier: float
    reset_threshold_ms: int
    jitter: float
    attempts_before_reset: int
    current_backoff_ms: int = 0
    attempts: int = 0
    last_failure_ms: Optional[int] = None
    name = "exponential-delay"

    def notify_failure(self, now_ms: int) -> None:
        if self.last_failure_ms is not None and now_ms - self.last_failure_ms >= self.reset_threshold_ms:
            self.current_backoff_ms, self.attempts = 0, 0  # ran long enough: start over
        if self.current_backoff_ms == 0:
            self.current_backoff_ms = self.initial_backoff_ms
        else:
            self.current_backoff_ms = min(int(self.current_backoff_ms * self.multiplier), self.max_backoff_ms)
        self.attempts += 1
        self.last_failure_ms = now_ms

    def can_restart(self) -> bool:
        return self.attempts <= self.attempts_before_reset

    def backoff_time_ms(self) -> int:
        spread = int(self.current_backoff_ms * self.jitter)
        return max(0, self.current_backoff_ms + (random.randint(-spread, spread) if spread else 0))

    def describe(self) -> str:
        return (
            f"exponential-delay (initial {self.initial_backoff_ms} ms, max {self.max_backoff_ms} ms, "
            f"x{self.multiplier})"
        )


_ALIASES = {
    "off": "none",
    "disable": "none",
    "fixeddelay": "fixed-delay",
    "exponentialdelay": "exponential-delay",
    "failurerate": "failure-rate",
}


def create_restart_strategy(settings: Any) -> RestartStrategy:
    """The strategy ``settings`` (a Configuration or a dict) configure."""
    kind = read_option(settings, RestartStrategyOptions.RESTART_STRATEGY)
    if kind is None:
        checkpointing = read_option(settings, CheckpointingOptions.CHECKPOINTING_INTERVAL)
        kind = "exponential-delay" if checkpointing else "none"
    kind = _ALIASES.get(kind, kind)
    o = RestartStrategyOptions
    if kind == "none":
        return NoRestartStrategy()
    if kind == "fixed-delay":
        return FixedDelayRestartStrategy(
            read_option(settings, o.FIXED_DELAY_ATTEMPTS), read_option(settings, o.FIXED_DELAY_DELAY)
        )
    if kind == "exponential-delay":
        return ExponentialDelayRestartStrategy(
            read_option(settings, o.EXPONENTIAL_INITIAL_BACKOFF),
            read_option(settings, o.EXPONENTIAL_MAX_BACKOFF),
            read_option(settings, o.EXPONENTIAL_MULTIPLIER),
            read_option(settings, o.EXPONENTIAL_RESET_THRESHOLD),
            read_option(settings, o.EXPONENTIAL_JITTER),
            read_option(settings, o.EXPONENTIAL_ATTEMPTS),
        )
    if kind == "failure-rate":
        return FailureRateRestartStrategy(
            read_option(settings, o.FAILURE_RATE_MAX_FAILURES),
            read_option(settings, o.FAILURE_RATE_INTERVAL),
            read_option(settings, o.FAILURE_RATE_DELAY),
        )
    raise ValueError(f"restart-strategy.type: unknown strategy {kind!r}")


__all__ = [
    "ExponentialDelayRestartStrategy",
    "FailureRateRestartStrategy",
    "FixedDelayRestartStrategy",
    "NoRestartStrategy",
    "RestartStrategy",
    "create_restart_strategy",
]
