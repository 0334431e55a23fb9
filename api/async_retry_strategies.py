"""PyFlink's ``pyflink.datastream.async_retry_strategies`` (``raylink.core.async_retry``).

Only re-exports: the implementation lives on a lower floor."""

from raylink.core.async_retry import (
    NO_RETRY_STRATEGY,
    AsyncRetryPredicate,
    AsyncRetryStrategy,
    ExponentialBackoffDelayRetryStrategy,
    FixedDelayRetryStrategy,
    NoRetryStrategy,
    RetryPredicate,
)

__all__ = [
    "RetryPredicate",
    "NoRetryStrategy",
    "FixedDelayRetryStrategy",
    "ExponentialBackoffDelayRetryStrategy",
    "NO_RETRY_STRATEGY",
    "AsyncRetryPredicate",
    "AsyncRetryStrategy",
]
