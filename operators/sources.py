"""Source operators: Flink's ``StreamSource`` (legacy ``SourceFunction``), the
collection source (``fromCollection``) and ``NumberSequenceSource`` (``fromSequence``).

The task drives a source with ``emit_next(max_records)``: it emits up to
``max_records`` records (as one ``collect_batch`` where possible) and returns
``False`` once the source is exhausted. On exhaustion (not on cancel) a source
emits ``MAX_WATERMARK`` once, like Flink's ``advanceToEndOfEventTime``, so
downstream event-time timers and windows fire at the end of a bounded input.

An iterable source (a generator) reads in chunks and ends a step once
``step_bound_ns`` has passed (the task sets it from the buffer timeout), so a
slow generator's records are handed over within the timeout instead of after a
whole batch; chunks grow while the iterator is fast, so a fast one pays one
clock read per chunk.

``SourceFunction.run(ctx)`` runs inline inside the first ``emit_next`` call
until it returns; the context buffers records and flushes them every
``max_records`` (and before watermarks / timestamp changes). After each flush
the optional ``on_batch_flushed`` hook runs (the task may process mails there).
``cancel()`` (callable from any thread) calls the function's ``cancel()`` — its
``run`` loop must watch its own flag — and makes the context drop every
record collected afterwards.
"""

from __future__ import annotations

import threading
import time
from itertools import islice
from typing import Any, Callable, List, Optional

from raylink.core.functions import SourceContext
from raylink.core.watermark_strategy import NoWatermarksGenerator
from raylink.operators.base import MAX_WATERMARK, AbstractUdfStreamOperator
from raylink.operators.timestamps import OperatorInput, TimestampsAndWatermarksOperator

DEFAULT_BATCH_SIZE = 1024


class SourceOperator(AbstractUdfStreamOperator):
    """Base of sources: no input, chain head.

    ``watermark_strategy`` (``env.from_source(source, strategy, name)``) runs inside the
    source, as in Flink's ``SourceOperator``: its records get the strategy's timestamps and
    its watermarks replace the source's own (except the end of input)."""

    chaining_strategy = "HEAD"
    num_inputs = 0

    def __init__(self, function: Any = None, name: str = "", operator_id: str = "") -> None:
        super().__init__(function, name, operator_id)
        self.finished = False
        self.cancelled = False
        self.watermark_strategy: Any = None
        self._watermarks: Optional[TimestampsAndWatermarksOperator] = None

    def setup(self, output: Any, runtime_context: Any) -> None:
        strategy = self.watermark_strategy
        if strategy is None or (
            strategy._generator_factory is NoWatermarksGenerator and strategy.get_timestamp_assigner() is None
        ):
            super().setup(output, runtime_context)  # no_watermarks(): records pass as they are
            return
        watermarks = self._watermarks = TimestampsAndWatermarksOperator(strategy, self.name)
        watermarks.setup(output, runtime_context)
        super().setup(OperatorInput(watermarks, output), runtime_context)
        watermarks.open()  # subclasses' open() need not know: it only starts the periodic emit

    def current_output_watermark(self) -> int:
        watermarks = self._watermarks
        return self.current_watermark if watermarks is None else watermarks.current_watermark

    def end_input(self) -> None:
        if self._watermarks is not None:
            self._watermarks.end_input()

    def close(self) -> None:
        if self._watermarks is not None:
            self._watermarks.close()
        super().close()

    def emit_next(self, max_records: int = DEFAULT_BATCH_SIZE) -> bool:
        raise NotImplementedError

    def cancel(self) -> None:
        self.cancelled = True

    def _finish(self) -> None:
        if not self.finished:
            self.finished = True
            if not self.cancelled:
                self.current_watermark = MAX_WATERMARK
                self.output.emit_watermark(MAX_WATERMARK)  # type: ignore[union-attr]


class CollectionSourceOperator(SourceOperator):
    """Emits a list of elements (non-parallel: parallelism must be 1)."""

    def __init__(self, elements: List[Any], name: str = "", operator_id: str = "") -> None:
        super().__init__(None, name, operator_id)
        self.elements = list(elements)
        self._position = 0

    def open(self) -> None:
        if self.runtime_context.parallelism != 1:
            raise ValueError(f"collection source {self.name!r} is non-parallel; parallelism must be 1")

    def emit_next(self, max_records: int = DEFAULT_BATCH_SIZE) -> bool:
        if self.finished or self.cancelled:
            return False
        start = self._position
        batch = self.elements[start : start + max_records]
        self._position = start + len(batch)
        if batch:
            self.record_context.timestamp = None
            self._collect_batch(batch)
        if self._position >= len(self.elements):
            self._finish()
            return False
        return True

    def snapshot_operator_state(self, _checkpoint_id: int) -> dict:
        return {"position": self._position}

    def restore_operator_state(self, state: dict) -> None:
        self._position = state["position"]


def sequence_split(start: int, end: int, subtask_index: int, parallelism: int) -> range:
    """Subtask ``subtask_index``'s even share of ``[start, end]`` (end inclusive)."""
    total = end - start + 1
    if total <= 0:
        return range(0)
    lo = start + subtask_index * total // parallelism
    hi = start + (subtask_index + 1) * total // parallelism
    return range(lo, hi)


class SequenceSourceOperator(SourceOperator):
    """Emits the integers ``start..end`` (inclusive), evenly split over the subtasks (Flink's
    ``NumberSequenceSource``). Its state is the ranges it has left; restored at another
    parallelism, every old subtask's remaining numbers are shared out evenly again."""

    def __init__(self, start: int, end: int, name: str = "", operator_id: str = "") -> None:
        super().__init__(None, name, operator_id)
        self.start = int(start)
        self.end = int(end)
        self._ranges: List[List[int]] = []  # [lo, hi) ranges still to emit, in order

    def open(self) -> None:
        rc = self.runtime_context
        split = sequence_split(self.start, self.end, rc.subtask_index, rc.parallelism)
        self._ranges = [[split.start, split.stop]] if split else []

    def _take(self, max_records: int) -> range:
        """The next at most ``max_records`` numbers, taken off the ranges left."""
        ranges = self._ranges
        if not ranges:
            return range(0)
        current = ranges[0]
        lo = current[0]
        hi = min(lo + max_records, current[1])
        current[0] = hi
        if hi >= current[1]:
            del ranges[0]
        return range(lo, hi)

    def emit_next(self, max_records: int = DEFAULT_BATCH_SIZE) -> bool:
        if self.finished or self.cancelled:
            return False
        numbers = self._take(max_records)
        if numbers:
            self.record_context.timestamp = None
            self._collect_batch(list(numbers))
        if not self._ranges:
            self._finish()
            return False
        return True

    def snapshot_operator_state(self, _checkpoint_id: int) -> dict:
        return {"ranges": [list(r) for r in self._ranges]}

    def _remaining(self, state: dict, subtask: int, parallelism: int) -> List[List[int]]:
        if "ranges" in state:
            return [list(r) for r in state["ranges"]]
        stop = sequence_split(self.start, self.end, subtask, parallelism).stop  # older snapshots: {"next"}
        return [[state["next"], stop]] if state["next"] < stop else []

    def restore_operator_state(self, state: dict) -> None:
        rc = self.runtime_context
        self._ranges = self._remaining(state, rc.subtask_index, rc.parallelism)

    def restore_rescaled_operator_state(self, states: List[Optional[dict]], subtask: int, parallelism: int) -> None:
        """Every old subtask's remaining numbers, in order, split evenly over ``parallelism``."""
        old = len(states)
        remaining = [r for i, s in enumerate(states) if s is not None for r in self._remaining(s, i, old)]
        total = sum(hi - lo for lo, hi in remaining)
        first, last = subtask * total // parallelism, (subtask + 1) * total // parallelism
        mine, offset = [], 0
        for lo, hi in remaining:  # the numbers at offsets [first, last) of the concatenation
            a, b = max(lo, lo + first - offset), min(hi, lo + last - offset)
            if a < b:
                mine.append([a, b])
            offset += hi - lo
        self._ranges = mine


def rescaled_file_queues(states: List[Optional[dict]], subtask: int, parallelism: int, position: str) -> tuple:
    """A file-reading source restored at another parallelism: ``(seen, queue, skips)`` for new
    subtask ``subtask`` -- every file any old subtask discovered counts as seen (none is read
    twice), old subtask ``j``'s unread files go to new subtask ``j % parallelism``, the one it
    was reading resuming after ``state[position]`` records (``skips``: file -> records)."""
    seen = {path for state in states if state for path in state["seen"]}
    queue: List[str] = []
    skips: dict = {}
    for j, state in enumerate(states):
        if state is None or j % parallelism != subtask:
            continue
        if state["queue"] and state[position]:
            skips[state["queue"][0]] = state[position]
        queue.extend(state["queue"])
    return seen, queue, skips


class _SourceContext(SourceContext):
    """Buffers what ``run`` emits; a batch holds records of one timestamp."""

    def __init__(self, operator: "SourceFunctionOperator", batch_size: int) -> None:
        self._operator = operator
        self._record_context = operator.record_context
        self._batch_size = max(1, batch_size)
        self._buffer: List[Any] = []
        self._timestamp: Optional[int] = None
        # set from another thread (the task's OutputFlusher) to hand over a partial batch
        self.flush_requested = False

    def get_runtime_context(self) -> Any:
        return self._operator.runtime_context

    def get_checkpoint_lock(self) -> Any:
        """Flink's checkpoint lock: emit and update checkpointed state while holding it."""
        lock = self._operator.checkpoint_lock
        if lock is None:
            lock = self._operator.checkpoint_lock = threading.RLock()
        return lock

    def collect(self, value: Any) -> None:
        if self._timestamp is not None:
            self.flush()
            self._timestamp = None
        buffer = self._buffer
        buffer.append(value)
        if len(buffer) >= self._batch_size or self.flush_requested:
            self.flush()

    def collect_batch(self, values: List[Any]) -> None:
        """raylink extension: ``collect`` for each of ``values``, in one call."""
        if self._add_batch(values):
            self._batch_flushed()

    def _add_batch(self, values: List[Any]) -> bool:
        """Append ``values`` to the untimestamped batch; True if a batch was handed over."""
        handed = False
        if self._timestamp is not None:
            handed = self._hand_over()
            self._timestamp = None
        buffer = self._buffer
        buffer.extend(values)
        if len(buffer) >= self._batch_size or self.flush_requested:
            handed = self._hand_over() or handed
        return handed

    def collect_with_timestamp(self, value: Any, timestamp: int) -> None:
        if timestamp != self._timestamp:
            self.flush()
            self._timestamp = timestamp
        buffer = self._buffer
        buffer.append(value)
        if len(buffer) >= self._batch_size or self.flush_requested:
            self.flush()

    def emit_watermark(self, watermark: Any) -> None:
        self.flush()
        if self._operator.cancelled:
            return
        timestamp = watermark
        if not isinstance(watermark, int):
            timestamp = getattr(watermark, "timestamp")
            if callable(timestamp):
                timestamp = timestamp()
        self._operator.current_watermark = timestamp
        self._operator.output.emit_watermark(int(timestamp))  # type: ignore[union-attr]

    def mark_as_temporarily_idle(self) -> None:
        """Idleness is not propagated (watermarks of idle sources are not tracked)."""

    def flush(self) -> None:
        if self._hand_over():
            self._batch_flushed()

    def _batch_flushed(self) -> None:
        hook = self._operator.on_batch_flushed
        if hook is not None:
            hook()

    def _hand_over(self) -> bool:
        """Give the collected records to the chain; True if there were any."""
        self.flush_requested = False
        buffer = self._buffer
        if not buffer:
            return False
        self._buffer = []
        operator = self._operator
        if operator.cancelled:
            return False
        rc = self._record_context
        rc.timestamp = self._timestamp
        try:
            operator._collect_batch(buffer)
        except BaseException as exc:  # seen by the task before it could checkpoint past these records
            operator.failure = exc
            raise
        rc.timestamp = None
        return True


class _LockingSourceContext(_SourceContext):
    """For ``run`` on its own thread (Flink's LegacySourceFunctionThread): every call into
    the chain holds the task's checkpoint lock, which the mailbox thread also takes for
    its mails, so a partial batch can be handed over from the task thread at any time.
    ``on_batch_flushed`` runs after the lock is released (it may wait for buffers)."""

    def __init__(self, operator: "SourceFunctionOperator", batch_size: int, lock: Any) -> None:
        super().__init__(operator, batch_size)
        self._lock = lock
        self._handed = False

    def _hand_over(self) -> bool:
        handed = _SourceContext._hand_over(self)
        if handed:
            self._handed = True
        return handed

    def _after(self) -> None:
        if self._handed:
            self._handed = False
            self._batch_flushed()

    def collect(self, value: Any) -> None:
        with self._lock:
            buffer = self._buffer
            if self._timestamp is not None:
                self._hand_over()
                self._timestamp = None
                buffer = self._buffer
            buffer.append(value)
            if len(buffer) >= self._batch_size or self.flush_requested:
                self._hand_over()
        if self._handed:
            self._after()

    def collect_batch(self, values: List[Any]) -> None:
        with self._lock:
            self._add_batch(values)
        self._after()

    def collect_with_timestamp(self, value: Any, timestamp: int) -> None:
        with self._lock:
            if timestamp != self._timestamp:
                self._hand_over()
                self._timestamp = timestamp
            buffer = self._buffer
            buffer.append(value)
            if len(buffer) >= self._batch_size or self.flush_requested:
                self._hand_over()
        self._after()

    def emit_watermark(self, watermark: Any) -> None:
        with self._lock:
            _SourceContext.emit_watermark(self, watermark)
        self._after()

    def flush(self) -> None:
        with self._lock:
            self._hand_over()
        self._after()

    def flush_pending(self) -> None:
        """Task thread (holding the lock): hand over what ``run`` collected so far."""
        with self._lock:
            self._hand_over()
            self._handed = False  # nothing for the source thread to wait on


class SourceFunctionOperator(SourceOperator):
    """Runs a ``SourceFunction`` (``run(ctx)``/``cancel()``), an iterable, or a
    zero-argument callable returning an iterable; every subtask runs its own copy."""

    def __init__(self, function: Any, name: str = "", operator_id: str = "") -> None:
        super().__init__(function, name, operator_id)
        self.on_batch_flushed: Optional[Callable[[], None]] = None
        #: what the chain raised on the source thread (legacy mode): the records it was handed
        #: are lost, so no checkpoint may be taken after it (the task fails instead)
        self.failure: Optional[BaseException] = None
        # set by the task to run ``run`` on its own thread under this (re-entrant) lock
        self.checkpoint_lock: Any = None
        self._context: Optional[_SourceContext] = None
        self._iterator: Any = None
        self._run: Optional[Callable[[Any], Any]] = None
        #: a step of an iterable source ends after this many ns (0: when its batch is full)
        self.step_bound_ns = 0
        self._chunk = 1  # items read from the iterator between two clock reads
        self._consumed = 0  # items taken from the iterator (its checkpointed position)

    def open(self) -> None:
        function = self.function
        run = getattr(function, "run", None)
        if callable(run) and not isinstance(function, type):
            self._run = run
            self._lifecycle.append(function)
        elif hasattr(function, "__iter__"):
            self._iterator = iter(function)
        elif callable(function):
            self._iterator = iter(function())
        else:
            raise TypeError(
                f"source {self.name!r}: expected a SourceFunction, an iterable or a callable "
                f"returning an iterable, got {function!r}"
            )
        self._open_functions()

    def emit_next(self, max_records: int = DEFAULT_BATCH_SIZE) -> bool:
        if self.finished or self.cancelled:
            return False
        if self._run is not None:
            lock = self.checkpoint_lock
            if lock is None:
                ctx = self._context = _SourceContext(self, max_records)
                self._run(ctx)
                ctx.flush()
                self._finish()
            else:
                ctx = self._context = _LockingSourceContext(self, max_records, lock)
                self._run(ctx)
                with lock:
                    ctx._hand_over()
                    self._finish()
            return False
        batch, exhausted = self._read(max_records)
        self._consumed += len(batch)
        if batch:
            self.record_context.timestamp = None
            self._collect_batch(batch)
        if exhausted:
            self._finish()
            return False
        return True

    def _read(self, max_records: int) -> "tuple[list, bool]":
        """Up to ``max_records`` items, within ``step_bound_ns``; (items, iterator exhausted)."""
        iterator = self._iterator
        bound = self.step_bound_ns
        if not bound:
            batch = list(islice(iterator, max_records))
            return batch, len(batch) < max_records
        clock = time.perf_counter_ns
        batch: list = []
        chunk = self._chunk
        start = last = clock()
        try:
            while True:
                want = min(chunk, max_records - len(batch))
                before = len(batch)
                batch.extend(islice(iterator, want))
                if len(batch) - before < want:
                    return batch, True
                now = clock()
                took, last = now - last, now
                if took < bound >> 4:  # fast: read more between clock reads
                    chunk = min(chunk << 1, max_records)
                elif took > bound >> 2 and chunk > 1:
                    chunk >>= 1
                if len(batch) >= max_records or now - start >= bound:
                    return batch, False
        finally:
            self._chunk = chunk

    def snapshot_operator_state(self, _checkpoint_id: int) -> Optional[dict]:
        return None if self._run is not None else {"consumed": self._consumed}

    def restore_operator_state(self, state: dict) -> None:
        """An iterable source resumes by reading its iterable again and skipping what the
        checkpoint had consumed: the iterable must give the same items each time."""
        consumed = state["consumed"]
        function = self.function
        if hasattr(function, "__iter__") and iter(function) is function:
            raise ValueError(
                f"source {self.name!r} cannot be restored from a checkpoint: it reads a one-shot "
                "iterator; give the source a list or a callable returning a new iterator instead"
            )
        self._iterator = iter(function) if hasattr(function, "__iter__") else iter(function())
        for _ in islice(self._iterator, consumed):
            pass
        self._consumed = consumed

    @property
    def runs_source_function(self) -> bool:
        """True when this source runs a ``SourceFunction.run(ctx)`` loop (after ``open``)."""
        return self._run is not None

    def request_flush(self) -> None:
        """Any thread: hand the records collected so far over at the next ``collect``."""
        ctx = self._context
        if ctx is not None:
            ctx.flush_requested = True

    def flush_pending(self) -> None:
        """Task thread, legacy-thread mode: hand over a partial batch now."""
        ctx = self._context
        if isinstance(ctx, _LockingSourceContext):
            ctx.flush_pending()

    def cancel(self) -> None:
        self.cancelled = True
        if self._run is not None:
            cancel = getattr(self.function, "cancel", None)
            if callable(cancel):
                cancel()


__all__ = [
    "DEFAULT_BATCH_SIZE",
    "SourceOperator",
    "CollectionSourceOperator",
    "SequenceSourceOperator",
    "SourceFunctionOperator",
    "sequence_split",
]
