"""PyFlink's ``pyflink.datastream.async_retry_predicates`` (``raylink.core.async_retry``); bind extra
arguments with ``functools.partial`` (``partial(exception_type_predicate, expected_error_type=TimeoutError)``).

Only re-exports: the implementation lives on a lower floor."""

from raylink.core.async_retry import (
    empty_result_predicate,
    exception_type_predicate,
    has_exception_predicate,
)

__all__ = [
    "empty_result_predicate",
    "has_exception_predicate",
    "exception_type_predicate",
]
