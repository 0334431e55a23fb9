"""Restart strategies decide as Flink's do (``runtime/job/restart_strategy.py``)."""

import pytest

from raylink.runtime.job.restart_strategy import (
    ExponentialDelayRestartStrategy,
    FailureRateRestartStrategy,
    FixedDelayRestartStrategy,
    NoRestartStrategy,
    create_restart_strategy,
)

pytestmark = pytest.mark.timeout(30)


def test_default_is_none_without_checkpointing_and_exponential_with_it():
    assert isinstance(create_restart_strategy({}), NoRestartStrategy)
    strategy = create_restart_strategy({"execution.checkpointing.interval": "1 s"})
    assert isinstance(strategy, ExponentialDelayRestartStrategy)


def test_fixed_delay_allows_exactly_its_attempts():
    strategy = create_restart_strategy(
        {
            "restart-strategy.type": "fixed-delay",
            "restart-strategy.fixed-delay.attempts": "2",
            "restart-strategy.fixed-delay.delay": "50 ms",
        }
    )
    assert isinstance(strategy, FixedDelayRestartStrategy)
    verdicts = []
    for t in range(3):
        strategy.notify_failure(t)
        verdicts.append(strategy.can_restart())
    assert verdicts == [True, True, False]
    assert strategy.backoff_time_ms() == 50


def test_failure_rate_counts_failures_within_the_interval_only():
    strategy = create_restart_strategy(
        {
            "restart-strategy": "failure-rate",
            "restart-strategy.failure-rate.max-failures-per-interval": 2,
            "restart-strategy.failure-rate.failure-rate-interval": "1 s",
        }
    )
    assert isinstance(strategy, FailureRateRestartStrategy)
    for now in (0, 100):
        strategy.notify_failure(now)
        assert strategy.can_restart()
    strategy.notify_failure(200)
    assert not strategy.can_restart()  # three within a second
    strategy = create_restart_strategy(
        {
            "restart-strategy": "failure-rate",
            "restart-strategy.failure-rate.max-failures-per-interval": 2,
            "restart-strategy.failure-rate.failure-rate-interval": "1 s",
        }
    )
    for now in (0, 1500, 3000):
        strategy.notify_failure(now)
        assert strategy.can_restart()


def test_exponential_delay_grows_to_its_maximum_and_resets_after_a_quiet_period():
    strategy = create_restart_strategy(
        {
            "restart-strategy.type": "exponential-delay",
            "restart-strategy.exponential-delay.initial-backoff": "100 ms",
            "restart-strategy.exponential-delay.max-backoff": "1 s",
            "restart-strategy.exponential-delay.backoff-multiplier": 2.0,
            "restart-strategy.exponential-delay.jitter-factor": 0,
            "restart-strategy.exponential-delay.reset-backoff-threshold": "10 s",
        }
    )
    waits = []
    for now in range(0, 600, 100):
        strategy.notify_failure(now)
        waits.append(strategy.backoff_time_ms())
    assert waits == [100, 200, 400, 800, 1000, 1000]
    strategy.notify_failure(20_000)
    assert strategy.backoff_time_ms() == 100 and strategy.can_restart()


def test_an_unknown_strategy_names_the_key():
    with pytest.raises(ValueError, match="restart-strategy.type"):
        create_restart_strategy({"restart-strategy.type": "sometimes"})
