"""Sink operators: Flink's ``StreamSink`` (``SinkFunction``), ``PrintSinkFunction``
and the collect sink behind ``execute_and_collect``.

The print sink writes each record as PyFlink 2.3 prints it for the stream's declared
type (``operators.print_format``: ``(a,5)`` for a TUPLE, ``+I[a,5]`` for a ROW,
``str(record)`` without a type), after Flink's ``N> `` / ``id:N> `` prefix, to this process's
stdout, or -- in a TaskExecutor process of its own -- to the process's print channel, which
carries the lines to the driver's stdout (``operators.print_channel``).

Sinks forward watermarks (to a no-op output at the end of a chain) but, like
Flink's ``StreamSink``, do not forward latency markers: they keep the last one.
"""

from __future__ import annotations

import sys
from collections import deque
from typing import Any, List, Optional

from raylink.core.functions import SinkContext
from raylink.operators import print_channel
from raylink.operators.base import AbstractUdfStreamOperator, StreamOperator
from raylink.operators.collect import CollectBuffer
from raylink.operators.print_format import record_formatter


class _SinkContextImpl(SinkContext):
    def __init__(self, operator: StreamOperator) -> None:
        self._operator = operator
        self._record_context = operator.record_context

    def timestamp(self) -> Optional[int]:
        return self._record_context.timestamp

    def current_processing_time(self) -> int:
        return self._operator.runtime_context.processing_time_service.current_processing_time()

    def current_watermark(self) -> int:
        return self._operator.current_watermark


class _SinkBase(AbstractUdfStreamOperator):
    last_latency_marker: Any = None

    def process_latency_marker(self, marker: Any) -> None:
        self.last_latency_marker = marker


class StreamSink(_SinkBase):
    """``SinkFunction.invoke(value, context)`` or ``callable(value)``.

    raylink extension: a SinkFunction that also defines ``invoke_batch(values,
    context)`` gets each batch of plain records in one call (per-record
    ``invoke`` still serves single records).
    """

    def open(self) -> None:
        function = self.function
        invoke = getattr(function, "invoke", None) if not isinstance(function, type) else None
        self._invoke_batch = None
        if callable(invoke):
            self._lifecycle.append(function)
            self._invoke = invoke
            self._context: Optional[SinkContext] = _SinkContextImpl(self)
            batch = getattr(function, "invoke_batch", None)
            self._invoke_batch = batch if callable(batch) else None
        else:
            self._invoke = self._resolve(function, "invoke")
            self._context = None
        self._open_functions()

    def process_element(self, value: Any) -> None:
        context = self._context
        if context is None:
            self._invoke(value)
        else:
            self._invoke(value, context)

    def process_batch(self, values: List[Any]) -> None:
        invoke = self._invoke
        context = self._context
        if context is None:
            deque(map(invoke, values), 0)
        elif self._invoke_batch is not None:
            self._invoke_batch(values, context)
        else:
            for value in values:
                invoke(value, context)

    def process_timestamped_batch(self, values: List[Any], timestamps: List[Any]) -> None:
        """Records with a timestamp each: a plain callable never sees a timestamp, so the batch
        goes through it as in :meth:`process_batch`; a ``SinkFunction``'s context reads each
        record's own (``context.timestamp()``)."""
        invoke = self._invoke
        context = self._context
        if context is None:
            deque(map(invoke, values), 0)
            return
        rc = self.record_context
        previous = rc.timestamp
        for value, timestamp in zip(values, timestamps):
            rc.timestamp = timestamp
            invoke(value, context)
        rc.timestamp = previous


def print_prefix(identifier: Optional[str], subtask_index: int, parallelism: int) -> str:
    """Flink's ``PrintSinkOutputWriter`` prefix: ``"id:3> "``, ``"3> "``, ``"id> "`` or ``""``."""
    prefix = identifier or ""
    if parallelism > 1:
        if prefix:
            prefix += ":"
        prefix += str(subtask_index + 1)
    if prefix:
        prefix += "> "
    return prefix


class PrintSinkOperator(_SinkBase):
    """Prints ``prefix + text`` per record to stdout (or stderr); the text is the
    record as PyFlink prints it for ``input_type``, the stream's declared type (by
    default the ``input_type`` param of the operator's spec; None: ``str(record)``)."""

    def __init__(
        self,
        prefix: Optional[str] = None,
        to_stderr: bool = False,
        name: str = "",
        operator_id: str = "",
        input_type: Any = None,
    ) -> None:
        super().__init__(None, name, operator_id)
        self.prefix = prefix
        self.to_stderr = to_stderr
        self.input_type = input_type

    def open(self) -> None:
        rc = self.runtime_context
        self._prefix = print_prefix(self.prefix, rc.subtask_index, rc.parallelism)
        input_type = self.input_type
        if input_type is None:
            spec = getattr(self, "spec", None)
            input_type = (getattr(spec, "params", None) or {}).get("input_type")
        self._format = record_formatter(input_type)

    def _stream(self) -> Any:
        return sys.stderr if self.to_stderr else sys.stdout  # looked up per call (capture-friendly)

    def _write(self, text: str, lines: int, flush: bool = True) -> None:
        channel = print_channel.installed()
        if channel is not None:  # a TaskExecutor process: the lines go to the driver
            channel.put(self.to_stderr, text, lines)
        else:
            stream = self._stream()
            stream.write(text)
            if flush:
                stream.flush()

    def process_element(self, value: Any) -> None:
        self._write(f"{self._prefix}{self._format(value)}\n", 1, flush=False)

    def process_batch(self, values: List[Any]) -> None:
        if values:
            prefix = self._prefix
            form = self._format
            if form is str:
                self._write("".join([f"{prefix}{v!s}\n" for v in values]), len(values))
            else:
                self._write("".join([f"{prefix}{form(v)}\n" for v in values]), len(values))

    def end_input(self) -> None:
        self._stream().flush()

    def close(self) -> None:
        try:
            self._stream().flush()
        finally:
            super().close()


class CollectSinkOperator(_SinkBase):
    """Hands every record to ``runtime_context.accumulators[collect_id]``.

    For ``execute_and_collect`` the TaskExecutor puts a bounded
    :class:`~raylink.operators.collect.CollectBuffer` there, which the client drains
    while the job runs (the task blocks when it is full: back pressure). A user's
    ``collect_sink(id)`` gets a plain list: the records of a finished job's
    accumulator ``id``.
    """

    def __init__(self, collect_id: str, name: str = "", operator_id: str = "") -> None:
        super().__init__(None, name, operator_id)
        self.collect_id = collect_id

    def open(self) -> None:
        target = self.runtime_context.accumulators.setdefault(self.collect_id, [])
        self._add = target.add if isinstance(target, CollectBuffer) else target.extend

    def process_element(self, value: Any) -> None:
        self._add([value])

    def process_batch(self, values: List[Any]) -> None:
        self._add(values)


__all__ = ["StreamSink", "PrintSinkOperator", "CollectSinkOperator", "print_prefix"]
