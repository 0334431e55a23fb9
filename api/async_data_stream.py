"""``AsyncDataStream``: asynchronous I/O on a stream (PyFlink's
``pyflink.datastream.async_data_stream``, Flink's ``AsyncDataStream``).

``unordered_wait`` / ``ordered_wait`` (and the ``..._with_retry`` variants taking an
``AsyncRetryStrategy``) add an "async wait operator" running the ``AsyncFunction``'s
``async def async_invoke(value)`` coroutines on an asyncio loop of its own, at most
``capacity`` records at once; ``ordered_wait`` emits results in input order,
``unordered_wait`` as they complete (never across a watermark). ``timeout`` (a ``Time``,
``Duration``, ``timedelta`` or milliseconds; 0: none) bounds every record, retries included.
The operator is :class:`raylink.operators.async_wait.AsyncWaitOperator`. Building the graph
only: the calls here run on the driver.
"""

from __future__ import annotations

import inspect
from typing import Any

from raylink.api.datastream import DataStream
from raylink.core.async_retry import NO_RETRY_STRATEGY
from raylink.core.time import to_millis

OPERATOR_NAME = "async wait operator"  # the transformation's name, as in Flink and PyFlink


class AsyncDataStream:
    """Applies an ``AsyncFunction`` to a ``DataStream``."""

    @staticmethod
    def unordered_wait(
        data_stream: DataStream, async_function: Any, timeout: Any, capacity: int = 100, output_type: Any = None
    ) -> DataStream:
        """Results leave as their calls complete (watermarks still keep them apart)."""
        return AsyncDataStream._add(
            data_stream,
            async_function,
            timeout,
            NO_RETRY_STRATEGY,
            capacity,
            output_type,
            "UNORDERED",
            "unordered_wait",
        )

    @staticmethod
    def unordered_wait_with_retry(
        data_stream: DataStream,
        async_function: Any,
        timeout: Any,
        async_retry_strategy: Any,
        capacity: int = 100,
        output_type: Any = None,
    ) -> DataStream:
        """``unordered_wait`` retrying calls as ``async_retry_strategy`` says."""
        return AsyncDataStream._add(
            data_stream,
            async_function,
            timeout,
            async_retry_strategy,
            capacity,
            output_type,
            "UNORDERED",
            "unordered_wait_with_retry",
        )

    @staticmethod
    def ordered_wait(
        data_stream: DataStream, async_function: Any, timeout: Any, capacity: int = 100, output_type: Any = None
    ) -> DataStream:
        """Results leave in the order of their input records."""
        return AsyncDataStream._add(
            data_stream,
            async_function,
            timeout,
            NO_RETRY_STRATEGY,
            capacity,
            output_type,
            "ORDERED",
            "ordered_wait",
        )

    @staticmethod
    def ordered_wait_with_retry(
        data_stream: DataStream,
        async_function: Any,
        timeout: Any,
        async_retry_strategy: Any,
        capacity: int = 100,
        output_type: Any = None,
    ) -> DataStream:
        """``ordered_wait`` retrying calls as ``async_retry_strategy`` says."""
        return AsyncDataStream._add(
            data_stream,
            async_function,
            timeout,
            async_retry_strategy,
            capacity,
            output_type,
            "ORDERED",
            "ordered_wait_with_retry",
        )

    @staticmethod
    def _add(
        data_stream: DataStream,
        async_function: Any,
        timeout: Any,
        strategy: Any,
        capacity: int,
        output_type: Any,
        mode: str,
        method: str,
    ) -> DataStream:
        where = f"AsyncDataStream.{method}"
        if not isinstance(data_stream, DataStream):
            raise TypeError(f"{where}: data_stream must be a DataStream, got {type(data_stream).__name__}")
        invoke = getattr(async_function, "async_invoke", None)
        if not callable(invoke) or isinstance(async_function, type):
            raise TypeError(
                f"{where}: async_function must be an AsyncFunction instance (an object with "
                f"'async def async_invoke(value)'), got {async_function!r}"
            )
        if not inspect.iscoroutinefunction(invoke):
            raise TypeError(
                f"{where}: method 'async_invoke' of class '{type(async_function).__name__}' "
                "must be declared as 'async def'"
            )
        timeout_ms = to_millis(timeout, f"{where}: timeout")
        if timeout_ms < 0:
            raise ValueError(f"{where}: timeout must not be negative, got {timeout_ms} ms")
        if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity <= 0:
            raise ValueError(f"{where}: capacity must be a positive int, got {capacity!r}")
        if strategy is None:
            raise ValueError(
                f"{where}: the async retry strategy must not be None (AsyncRetryStrategy.no_restart() retries nothing)"
            )
        if strategy is not NO_RETRY_STRATEGY and timeout_ms <= 0:
            raise ValueError(
                f"{where}: a timeout is needed with an async retry strategy (it bounds all attempts of a record)"
            )
        if strategy.get_retry_predicate() is None:
            raise ValueError(f"{where}: the retry predicate of {type(strategy).__name__} is None")
        return data_stream._one_input(
            "async_wait",
            OPERATOR_NAME,
            async_function,
            output_type,
            timeout_ms=timeout_ms,
            capacity=capacity,
            retry_strategy=strategy,
            output_mode=mode,
        )


__all__ = ["AsyncDataStream"]
