"""Ready-made retry predicates for ``AsyncRetryStrategy`` (PyFlink's
``pyflink.datastream.async_retry_predicates``); bind extra arguments with
``functools.partial`` (``partial(exception_type_predicate, expected_error_type=TimeoutError)``).
Pure functions, safe on any thread."""

from __future__ import annotations

from typing import Any, Optional


def empty_result_predicate(result: Optional[list]) -> bool:
    """Retry when the call returned no results."""
    return result is None or len(result) == 0


def has_exception_predicate(error: Optional[BaseException]) -> bool:
    """Retry on any exception."""
    return error is not None


def exception_type_predicate(error: Optional[BaseException], expected_error_type: Any) -> bool:
    """Retry on an exception of ``expected_error_type`` (a class or a tuple of classes)."""
    return isinstance(error, expected_error_type)


__all__ = ["empty_result_predicate", "has_exception_predicate", "exception_type_predicate"]
