"""Retrying async calls: the ``AsyncRetryStrategy`` / ``AsyncRetryPredicate`` interfaces, the
built-in strategies (PyFlink's ``pyflink.datastream.async_retry_strategies``, Flink's
``AsyncRetryStrategies``) and the ready-made predicates
(``pyflink.datastream.async_retry_predicates``).

Attempts count from 1: ``can_retry(n)`` is asked after the n-th attempt, so
``max_attempts`` is the number of retries after the first call. A strategy is called on
its operator's asyncio loop thread only; ``ExponentialBackoffDelayRetryStrategy`` keeps
the last delay (as PyFlink's does), so it belongs to one operator.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, Callable, List, Optional

from raylink.core.functions import _Generic

ResultPredicate = Optional[Callable[[List[Any]], bool]]
ExceptionPredicate = Optional[Callable[[Exception], bool]]


def _positive(value: Any, what: str) -> None:
    if not value > 0:
        raise ValueError(f"{what} should be greater than zero, got {value!r}")


class AsyncRetryPredicate(ABC, _Generic):
    """When an async call is tried again (PyFlink's ``AsyncRetryPredicate``): a predicate on
    its result list and one on its exception, either may be None."""

    @abstractmethod
    def result_predicate(self) -> Optional[Any]:
        raise NotImplementedError

    @abstractmethod
    def exception_predicate(self) -> Optional[Any]:
        raise NotImplementedError


class AsyncRetryStrategy(ABC, _Generic):
    """How often and after how long an async call is tried again (PyFlink's
    ``AsyncRetryStrategy``); attempts count from 1. The built-in strategies are below."""

    @abstractmethod
    def can_retry(self, current_attempts: int) -> bool:
        raise NotImplementedError

    @abstractmethod
    def get_backoff_time_millis(self, current_attempts: int) -> int:
        raise NotImplementedError

    @abstractmethod
    def get_retry_predicate(self) -> AsyncRetryPredicate:
        raise NotImplementedError

    @staticmethod
    def no_restart() -> "AsyncRetryStrategy":
        return NO_RETRY_STRATEGY

    @staticmethod
    def fixed_delay(
        max_attempts: int, backoff_time_millis: int, result_predicate: Optional[Any], exception_predicate: Optional[Any]
    ) -> "AsyncRetryStrategy":
        return FixedDelayRetryStrategy(max_attempts, backoff_time_millis, result_predicate, exception_predicate)

    @staticmethod
    def exponential_backoff(
        max_attempts: int,
        initial_delay: int,
        max_retry_delay: int,
        multiplier: float,
        result_predicate: Optional[Any],
        exception_predicate: Optional[Any],
    ) -> "AsyncRetryStrategy":
        return ExponentialBackoffDelayRetryStrategy(
            max_attempts, initial_delay, max_retry_delay, multiplier, result_predicate, exception_predicate
        )


class RetryPredicate(AsyncRetryPredicate, _Generic):
    """A result predicate and an exception predicate (either may be None: never retry on it)."""

    def __init__(self, result_predicate: ResultPredicate, exception_predicate: ExceptionPredicate) -> None:
        self._result_predicate = result_predicate
        self._exception_predicate = exception_predicate

    def result_predicate(self) -> ResultPredicate:
        return self._result_predicate

    def exception_predicate(self) -> ExceptionPredicate:
        return self._exception_predicate


class NoRetryStrategy(AsyncRetryStrategy, _Generic):
    """Never retry."""

    def can_retry(self, current_attempts: int) -> bool:
        return False

    def get_backoff_time_millis(self, current_attempts: int) -> int:
        return -1

    def get_retry_predicate(self) -> AsyncRetryPredicate:
        return RetryPredicate(None, None)


class FixedDelayRetryStrategy(AsyncRetryStrategy, _Generic):
    """Up to ``max_attempts`` retries, ``backoff_time_millis`` apart."""

    def __init__(
        self,
        max_attempts: int,
        backoff_time_millis: int,
        result_predicate: ResultPredicate,
        exception_predicate: ExceptionPredicate,
    ) -> None:
        _positive(max_attempts, "max_attempts")
        _positive(backoff_time_millis, "backoff_time_millis")
        self._max_attempts = max_attempts
        self._backoff_time_millis = backoff_time_millis
        self._result_predicate = result_predicate
        self._exception_predicate = exception_predicate

    def can_retry(self, current_attempts: int) -> bool:
        return current_attempts <= self._max_attempts

    def get_backoff_time_millis(self, current_attempts: int) -> int:
        return self._backoff_time_millis

    def get_retry_predicate(self) -> AsyncRetryPredicate:
        return RetryPredicate(self._result_predicate, self._exception_predicate)


class ExponentialBackoffDelayRetryStrategy(AsyncRetryStrategy, _Generic):
    """Up to ``max_attempts`` retries; the first after ``initial_delay`` ms, each next one
    ``multiplier`` times later than the one before, at most ``max_retry_delay`` ms."""

    def __init__(
        self,
        max_attempts: int,
        initial_delay: int,
        max_retry_delay: int,
        multiplier: float,
        result_predicate: ResultPredicate,
        exception_predicate: ExceptionPredicate,
    ) -> None:
        _positive(max_attempts, "max_attempts")
        _positive(initial_delay, "initial_delay")
        _positive(max_retry_delay, "max_retry_delay")
        _positive(multiplier, "multiplier")
        self._max_attempts = max_attempts
        self._initial_delay = initial_delay
        self._max_retry_delay = max_retry_delay
        self._multiplier = multiplier
        self._result_predicate = result_predicate
        self._exception_predicate = exception_predicate
        self._last_retry_delay = initial_delay

    def can_retry(self, current_attempts: int) -> bool:
        return current_attempts <= self._max_attempts

    def get_backoff_time_millis(self, current_attempts: int) -> int:
        if current_attempts <= 1:
            self._last_retry_delay = self._initial_delay
        else:
            self._last_retry_delay = int(min(self._last_retry_delay * self._multiplier, self._max_retry_delay))
        return self._last_retry_delay

    def get_retry_predicate(self) -> AsyncRetryPredicate:
        return RetryPredicate(self._result_predicate, self._exception_predicate)


# -- ready-made retry predicates (PyFlink's ``pyflink.datastream.async_retry_predicates``) --------
def empty_result_predicate(result: Optional[list]) -> bool:
    """Retry when the call returned no results."""
    return result is None or len(result) == 0


def has_exception_predicate(error: Optional[BaseException]) -> bool:
    """Retry on any exception."""
    return error is not None


def exception_type_predicate(error: Optional[BaseException], expected_error_type: Any) -> bool:
    """Retry on an exception of ``expected_error_type`` (a class or a tuple of classes)."""
    return isinstance(error, expected_error_type)


NO_RETRY_STRATEGY: AsyncRetryStrategy = NoRetryStrategy()

__all__ = [
    "AsyncRetryPredicate",
    "AsyncRetryStrategy",
    "RetryPredicate",
    "NoRetryStrategy",
    "FixedDelayRetryStrategy",
    "ExponentialBackoffDelayRetryStrategy",
    "NO_RETRY_STRATEGY",
    "empty_result_predicate",
    "has_exception_predicate",
    "exception_type_predicate",
]
