"""The async wait operator: Flink's ``AsyncWaitOperator`` with its ``OrderedStreamElementQueue``
and ``UnorderedStreamElementQueue``, running the coroutines of a PyFlink ``AsyncFunction``
(``async def async_invoke(value) -> list``) on an asyncio loop.

Threads. The operator owns one asyncio loop on its own daemon thread. Records are started
from the task thread in batches (one ``call_soon_threadsafe`` per batch); a finished
coroutine hands its entry back through the task's mailbox (``MailboxExecutor.execute``; one
mail drains every entry finished meanwhile), so results, ``timeout()`` calls, retries'
outcomes and emission all happen on the task thread. The user's coroutines, retry predicates
and the retry strategy run on the loop thread.

Capacity and back pressure. At most ``capacity`` records are in the queue at once (started
and not yet emitted, as Flink counts them; watermarks do not count). What arrives beyond
that waits, unstarted, in arrival order; while anything waits the operator is unavailable
(``get_available_future``): the task takes no input until a drain mail has started it all —
it blocks in its mailbox, no busy wait, and counts the time as busy, as Flink's task
blocked in ``MailboxExecutor.yield`` does.

Order. ORDERED emits results in input order. UNORDERED emits them as they complete, but
never across a watermark: a watermark is emitted once every record before it was, and no
record after it is emitted before it (Flink's watermark barrier). Results carry their input
record's timestamp.

Timeout and retries. The timeout (ms; 0: none) covers every attempt of a record; when it
expires the coroutine is cancelled and the function's ``timeout(value)`` gives the results
(``AsyncFunction``'s default fails the job with a ``TimeoutError`` naming the operator).
With an ``AsyncRetryStrategy`` a result its result predicate accepts, or an exception its
exception predicate accepts, is retried after ``get_backoff_time_millis(attempt)`` while
``can_retry(attempt)`` (attempts count from 1, as in Flink). Any other exception fails the job.

Checkpoints. Every record in the queue or waiting (its input value and timestamp) and every
queued watermark is operator list state ``_async_wait_operator_state_`` (as Flink's); a
restored operator starts them again, in order, before any new input (they are re-issued
from a mail, so every operator of the chain is restored first). End of input waits for
every record in flight (``MailboxExecutor.yield_``).
"""

from __future__ import annotations

import asyncio
import threading
from collections import deque
from concurrent.futures import Future
from typing import Any, Callable, List, Optional

from raylink.core.functions import AsyncFunction
from raylink.errors import RaylinkError
from raylink.operators.base import AbstractUdfStreamOperator

ORDERED = "ORDERED"
UNORDERED = "UNORDERED"
STATE_NAME = "_async_wait_operator_state_"
LOOP_STOP_TIMEOUT_S = 5.0


class AsyncFunctionError(RaylinkError, RuntimeError):
    """A call of the ``AsyncFunction`` (``async_invoke`` or ``timeout``) failed: names the operator,
    the function, the input and the error, which stays the ``__cause__`` (also across processes)."""

    def __init__(self, operator_name: str, function: str, value: Any, cause: BaseException) -> None:
        super().__init__(
            f"async wait operator {operator_name!r}: {function} failed for input {value!r}: "
            f"{type(cause).__name__}: {cause}"
        )
        self.operator_name = operator_name
        self.function = function
        self.value = value
        self.cause = cause
        self.__cause__ = cause

    def __reduce__(self):
        return (AsyncFunctionError, (self.operator_name, self.function, self.value, self.cause))


class _Record:
    """A record in the queue (or waiting): its input, and once finished its outcome."""

    __slots__ = ("value", "timestamp", "result", "error", "timed_out", "done", "segment")

    def __init__(self, value: Any, timestamp: Optional[int]) -> None:
        self.value = value
        self.timestamp = timestamp
        self.result: Any = None
        self.error: Optional[BaseException] = None
        self.timed_out = False
        self.done = False
        self.segment: Any = None


class _Watermark:
    __slots__ = ("timestamp",)

    def __init__(self, timestamp: int) -> None:
        self.timestamp = timestamp


class OrderedQueue:
    """Flink's ``OrderedStreamElementQueue``: elements leave in the order they came."""

    def __init__(self) -> None:
        self._entries: deque = deque()
        self.size = 0  # records

    def add(self, element: Any) -> None:
        self._entries.append(element)
        if type(element) is _Record:
            self.size += 1

    def complete(self, record: _Record) -> None:
        record.done = True

    def pop_completed(self) -> List[Any]:
        """The elements that may leave now, in order."""
        entries = self._entries
        out = []
        while entries and (type(entries[0]) is _Watermark or entries[0].done):
            element = entries.popleft()
            if type(element) is _Record:
                self.size -= 1
            out.append(element)
        return out

    def elements(self) -> List[Any]:
        return list(self._entries)

    def is_empty(self) -> bool:
        return not self._entries


class _Segment:
    """Records between two watermarks: those not finished (insertion ordered) and those
    finished but not emitted yet."""

    __slots__ = ("pending", "completed")

    def __init__(self) -> None:
        self.pending: dict = {}
        self.completed: deque = deque()


class UnorderedQueue:
    """Flink's ``UnorderedStreamElementQueue``: records leave as they finish, watermarks
    separate segments that leave one after the other."""

    def __init__(self) -> None:
        self._segments: deque = deque()  # _Segment or _Watermark
        self.size = 0

    def add(self, element: Any) -> None:
        segments = self._segments
        if type(element) is _Watermark:
            segments.append(element)
            return
        if not segments or type(segments[-1]) is not _Segment:
            segments.append(_Segment())
        segment = segments[-1]
        segment.pending[id(element)] = element
        element.segment = segment
        self.size += 1

    def complete(self, record: _Record) -> None:
        record.done = True
        segment = record.segment
        del segment.pending[id(record)]
        segment.completed.append(record)

    def pop_completed(self) -> List[Any]:
        segments = self._segments
        out: List[Any] = []
        while segments:
            head = segments[0]
            if type(head) is _Watermark:
                out.append(segments.popleft())
                continue
            completed = head.completed
            while completed:
                out.append(completed.popleft())
                self.size -= 1
            if head.pending:
                break
            segments.popleft()
        return out

    def elements(self) -> List[Any]:
        out: List[Any] = []
        for segment in self._segments:
            if type(segment) is _Watermark:
                out.append(segment)
            else:
                out.extend(segment.completed)
                out.extend(segment.pending.values())
        return out

    def is_empty(self) -> bool:
        return not self._segments


class _InFlightState:
    """The queue's part of a checkpoint, through the operator state store (a
    ``CheckpointedFunction`` the snapshot code finds in the operator's ``_lifecycle``)."""

    def __init__(self, operator: "AsyncWaitOperator") -> None:
        self._operator = operator
        self._state: Any = None

    def initialize_state(self, context: Any) -> None:
        self._state = context.get_operator_state_store().get_list_state(STATE_NAME)
        if context.is_restored():
            self._operator._restore([tuple(item) for item in self._state.get()])

    def snapshot_state(self, _context: Any) -> None:
        self._state.update(self._operator._snapshot())


class AsyncWaitOperator(AbstractUdfStreamOperator):
    """Runs ``function.async_invoke`` for every record, ``capacity`` at most at once."""

    def __init__(
        self,
        function: Any,
        timeout_ms: int = 0,
        capacity: int = 100,
        retry_strategy: Any = None,
        output_mode: str = UNORDERED,
        name: str = "",
        operator_id: str = "",
    ) -> None:
        super().__init__(function, name, operator_id)
        if capacity <= 0:
            raise ValueError(f"async wait operator: capacity must be positive, got {capacity}")
        if output_mode not in (ORDERED, UNORDERED):
            raise ValueError(f"async wait operator: output mode must be {ORDERED} or {UNORDERED}, got {output_mode!r}")
        self.timeout_ms = int(timeout_ms)
        self.capacity = int(capacity)
        self.retry_strategy = retry_strategy
        self.output_mode = output_mode
        self.max_in_flight = 0  # the most records in the queue at once (at most ``capacity``)
        self._queue: Any = OrderedQueue() if output_mode == ORDERED else UnorderedQueue()
        self._waiting: deque = deque()  # arrived, not started: records and watermarks
        self._available: Optional[Future] = None
        self._finished: List[_Record] = []  # finished on the loop, not drained yet
        self._finished_lock = threading.Lock()
        self._drain_posted = False
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._thread: Optional[threading.Thread] = None
        self._executor: Any = None
        self._output_watermark = -(1 << 63)
        self._in_flight_state = _InFlightState(self)

    # -- lifecycle ----------------------------------------------------------------------------
    def open(self) -> None:
        executor = getattr(self.runtime_context, "mailbox_executor", None)
        if executor is None:
            raise RuntimeError(
                f"async wait operator {self.name!r} needs its task's mailbox (runtime_context.mailbox_executor) to run"
            )
        self._executor = executor
        function = self.function
        self._invoke = self._resolve(function, "async_invoke")
        if not asyncio.iscoroutinefunction(self._invoke):
            raise TypeError(
                f"async wait operator {self.name!r}: async_invoke of {type(function).__name__} "
                "must be declared with 'async def'"
            )
        self._timeout_function = getattr(function, "timeout", None)
        strategy = self.retry_strategy
        self._result_predicate: Optional[Callable[[Any], bool]] = None
        self._exception_predicate: Optional[Callable[[Any], bool]] = None
        if strategy is not None:
            predicate = strategy.get_retry_predicate()
            self._result_predicate = predicate.result_predicate()
            self._exception_predicate = predicate.exception_predicate()
        self._retrying = self._result_predicate is not None or self._exception_predicate is not None
        self._lifecycle.append(self._in_flight_state)  # a CheckpointedFunction, with no open/close
        self._start_loop()
        self._open_functions()

    def _start_loop(self) -> None:
        loop = self._loop = asyncio.new_event_loop()
        ready = threading.Event()

        def run() -> None:
            asyncio.set_event_loop(loop)
            loop.call_soon(ready.set)
            try:
                loop.run_forever()
                tasks = asyncio.all_tasks(loop)
                for task in tasks:
                    task.cancel()
                if tasks:
                    loop.run_until_complete(asyncio.wait(tasks, timeout=LOOP_STOP_TIMEOUT_S))
            finally:
                loop.close()

        task = getattr(self.runtime_context, "task_name", "")
        self._thread = threading.Thread(target=run, name=f"asyncio loop of {self.name} in {task}", daemon=True)
        self._thread.start()
        ready.wait()

    def close(self) -> None:
        loop, self._loop = self._loop, None
        if loop is not None:
            try:
                loop.call_soon_threadsafe(loop.stop)
            except RuntimeError:  # already closed
                pass
            if self._thread is not threading.current_thread():
                self._thread.join(LOOP_STOP_TIMEOUT_S)
        super().close()

    # -- input (task thread) ------------------------------------------------------------------
    def process_element(self, value: Any) -> None:
        self._waiting.append(_Record(value, self.record_context.timestamp))
        self._start_waiting()

    def process_batch(self, values: List[Any]) -> None:
        timestamp = self.record_context.timestamp
        self._waiting.extend([_Record(value, timestamp) for value in values])
        self._start_waiting()

    def process_timestamped_batch(self, values: List[Any], timestamps: List[int]) -> None:
        self._waiting.extend(map(_Record, values, timestamps))
        self._start_waiting()

    def process_watermark(self, timestamp: int) -> None:
        self.current_watermark = timestamp
        if self._waiting:
            self._waiting.append(_Watermark(timestamp))
        else:
            self._queue.add(_Watermark(timestamp))
            self._emit_completed()

    def current_output_watermark(self) -> int:
        return self._output_watermark

    def get_available_future(self) -> Optional[Future]:
        """None when the operator takes input; else a future completed once it does."""
        if not self._waiting:
            return None
        if self._available is None:
            self._available = Future()
        return self._available

    def end_input(self) -> None:
        """Wait for every record in flight, emitting as results come (Flink's ``finish``)."""
        executor = self._executor
        while self._waiting or not self._queue.is_empty():
            executor.yield_()

    # -- starting records ---------------------------------------------------------------------
    def _start_waiting(self) -> None:
        waiting, queue, capacity = self._waiting, self._queue, self.capacity
        started: List[_Record] = []
        watermark_added = False
        while waiting:
            element = waiting[0]
            if type(element) is _Watermark:
                queue.add(waiting.popleft())
                watermark_added = True
                continue
            if queue.size >= capacity:
                break
            queue.add(waiting.popleft())
            started.append(element)
        if started:
            if queue.size > self.max_in_flight:
                self.max_in_flight = queue.size
            self._loop.call_soon_threadsafe(self._launch, started)  # type: ignore[union-attr]
        if watermark_added:
            self._emit_completed()
        if not waiting and self._available is not None:
            available, self._available = self._available, None
            available.set_result(None)

    # -- the loop thread ----------------------------------------------------------------------
    def _launch(self, records: List[_Record]) -> None:
        create = asyncio.get_running_loop().create_task
        run = self._run
        for record in records:
            create(run(record))

    async def _run(self, record: _Record) -> None:
        expiry = None
        if self.timeout_ms > 0:
            expiry = asyncio.get_running_loop().call_later(
                self.timeout_ms / 1000.0, self._expire, record, asyncio.current_task()
            )
        try:
            if self._retrying:
                record.result = await self._attempts(record.value)
            else:
                record.result = await self._invoke(record.value)
        except asyncio.CancelledError:
            if not record.timed_out:
                raise  # the operator is closing
        except Exception as exc:  # noqa: BLE001 - handed to the task thread, which fails the job
            record.error = exc
        finally:
            if expiry is not None:
                expiry.cancel()
        self._on_finished(record)

    @staticmethod
    def _expire(record: _Record, task: Any) -> None:
        record.timed_out = True
        task.cancel()

    async def _attempts(self, value: Any) -> Any:
        strategy = self.retry_strategy
        result_predicate, exception_predicate = self._result_predicate, self._exception_predicate
        attempt = 1
        while True:
            try:
                result = await self._invoke(value)
            except Exception as exc:
                if exception_predicate is None or not exception_predicate(exc) or not strategy.can_retry(attempt):
                    raise
            else:
                if (
                    result is None
                    or result_predicate is None
                    or not result_predicate(result)
                    or not strategy.can_retry(attempt)
                ):
                    return result
            await asyncio.sleep(strategy.get_backoff_time_millis(attempt) / 1000.0)
            attempt += 1

    def _on_finished(self, record: _Record) -> None:
        with self._finished_lock:
            self._finished.append(record)
            if self._drain_posted:
                return
            self._drain_posted = True
        self._executor.execute(self._drain)

    # -- results (task thread) ----------------------------------------------------------------
    def _drain(self) -> None:
        with self._finished_lock:
            finished, self._finished = self._finished, []
            self._drain_posted = False
        if self._loop is None:  # closed meanwhile
            return
        queue = self._queue
        for record in finished:
            method = "async_invoke"
            if record.timed_out:
                record.result, method = self._on_timeout(record), "timeout"
            elif record.error is not None:
                raise AsyncFunctionError(
                    self.name, f"{type(self.function).__name__}.async_invoke", record.value, record.error
                )
            record.result = self._results(record.result, record.value, method)
            record.error = None
            queue.complete(record)
        self._emit_completed()
        self._start_waiting()

    def _on_timeout(self, record: _Record) -> Any:
        function = self._timeout_function
        if function is None or getattr(function, "__func__", None) is AsyncFunction.timeout:
            raise TimeoutError(
                f"async wait operator {self.name!r}: {type(self.function).__name__}.async_invoke did not complete "
                f"within {self.timeout_ms} ms for input {record.value!r} (override timeout(value) of the "
                "AsyncFunction to emit results instead)"
            )
        try:
            return function(record.value)
        except Exception as exc:
            raise AsyncFunctionError(self.name, f"{type(self.function).__name__}.timeout", record.value, exc) from exc

    def _results(self, result: Any, value: Any, method: str) -> List[Any]:
        if type(result) is list:
            return result
        if result is None or isinstance(result, (str, bytes, dict)):
            what = "None" if result is None else f"a {type(result).__name__}"
            raise TypeError(
                f"async wait operator {self.name!r}: {type(self.function).__name__}.{method} returned "
                f"{what} for input {value!r}; it must return a list of results"
            )
        try:
            return list(result)
        except TypeError:
            raise TypeError(
                f"async wait operator {self.name!r}: {type(self.function).__name__}.{method} "
                f"returned a {type(result).__name__} for input {value!r}; it must return a list "
                "of results"
            ) from None

    def _emit_completed(self) -> None:
        elements = self._queue.pop_completed()
        if not elements:
            return
        rc = self.record_context
        previous = rc.timestamp
        collect, collect_batch = self._collect, self._collect_batch
        for element in elements:
            if type(element) is _Watermark:
                self._output_watermark = element.timestamp
                self.output.emit_watermark(element.timestamp)  # type: ignore[union-attr]
                continue
            result = element.result
            element.result = None
            if result:
                rc.timestamp = element.timestamp
                if len(result) == 1:
                    collect(result[0])
                else:
                    collect_batch(result)
        rc.timestamp = previous

    # -- checkpoints --------------------------------------------------------------------------
    def _snapshot(self) -> List[tuple]:
        """Queue and waiting elements, in order: ``("r", value, timestamp)`` / ``("w", timestamp)``."""
        out = []
        for element in self._queue.elements() + list(self._waiting):
            if type(element) is _Watermark:
                out.append(("w", element.timestamp))
            else:
                out.append(("r", element.value, element.timestamp))
        return out

    def _restore(self, elements: List[tuple]) -> None:
        for element in elements:
            if element[0] == "w":
                self._waiting.append(_Watermark(element[1]))
            else:
                self._waiting.append(_Record(element[1], element[2]))
        if self._waiting:
            self._executor.execute(self._start_waiting)  # once the whole chain is restored


__all__ = [
    "AsyncFunctionError",
    "AsyncWaitOperator",
    "OrderedQueue",
    "UnorderedQueue",
    "ORDERED",
    "UNORDERED",
    "STATE_NAME",
]
