"""Flink's ``StreamTask`` family: one subtask running its OperatorChain on a mailbox thread.

``StreamTask.run`` (the task thread) builds the chain, opens it tail-first,
runs the mailbox loop until the input ends, then ends the operators' input
head-first (they emit what they hold), with checkpointing waits for a checkpoint
taken after that (Flink 2's final checkpoint, FLIP-147), then closes the
operators and finishes every output partition (EndOfPartition).
The default action is Flink's ``processInput``: a source emits one batch, a
one-input task processes the items of one buffer, a two-input task the next
available input. With no input or no output buffer the action suspends on the
matching availability future (idle vs. back-pressured time).

A stop-with-savepoint ends every task once its savepoint completed, the operators unfinished
(their state is in the savepoint); with drain (FLIP-147) the sources first emit the end of
event time and stop, and every task ends its operators' input (``finish``: what they hold comes
out) before its snapshot, so the savepoint is every task's final checkpoint and the job ends
with everything emitted (restored from it, the tasks stay finished). Without periodic
checkpoints (no ``execution.checkpointing.interval``) a task still takes part in savepoints.

Checkpoints: the task decides whether and when (Flink's ``triggerCheckpointAsync`` /
``performCheckpoint``: a source or a task past its end of input on the JobMaster's trigger,
any other task when its barrier handler has the barriers; stop-with-savepoint, drain, the final
checkpoint); its ``SubtaskCheckpointCoordinator`` (``subtask_checkpoint_coordinator``) takes
the checkpoint: the operators' snapshots, the barrier sent on, channel state for unaligned
checkpoints, the acknowledgement through the TaskExecutor, the notifications to the
operators. Restored, the task replays its channel state before anything new
(``channel_state_handling``).

Threads: ``run`` and every mail run in the task thread (the only one touching the chain,
except a legacy ``SourceFunction``'s thread, which calls it under the checkpoint lock);
``start``, ``cancel``, ``trigger_checkpoint``, ``notify_checkpoint`` and ``metrics`` may be
called from any thread (``cancel``, ``trigger_checkpoint`` and ``notify_checkpoint`` only put
mails or set flags).
"""

from __future__ import annotations

import contextlib
import threading
import time
from concurrent.futures import Future
from typing import Any, Callable, Optional

from raylink.core.options import CheckpointingOptions, MetricOptions, TaskManagerOptions, read_option
from raylink.graph.job_graph import JobVertex
from raylink.operators.base import MAX_WATERMARK
from raylink.operators.processing_time import SystemProcessingTimeService
from raylink.operators.runtime_context import RecordContext, StreamingRuntimeContext
from raylink.runtime.execution_state import ExecutionState
from raylink.runtime.metrics import operator_metrics
from raylink.runtime.process_tuning import pin_current_thread
from raylink.runtime.task.channel_state_handling import SAVEPOINT, restore_channel_state
from raylink.runtime.task.mailbox import BACK_PRESSURE, IDLE, OPERATOR, SOURCE_THREAD, MailboxExecutor, MailboxProcessor
from raylink.runtime.task.operator_chain import OperatorChain, exception_with_operator
from raylink.runtime.task.subtask_checkpoint_coordinator import SubtaskCheckpointCoordinator, finished_on_restore
from raylink.runtime.task.task_canceler import InterruptibleThreads, TaskCanceler, TaskCancellationTimeoutError
from raylink.shuffle.elements import (
    END_OF_PARTITION,
    CancelCheckpointMarker,
    CheckpointBarrier,
    LatencyMarker,
    TimestampedRecords,
    Watermark,
    WatermarkStatus,
)
from raylink.state.snapshots import initialize_operator

_NO_LOCK = contextlib.nullcontext()

SOURCE_BATCH_SIZE = 1024  # records per source step at most
SOURCE_BATCH_BUFFERS = 2  # ... and about this many output buffers' worth
FIRST_DEBLOAT_MS = 20  # the first buffer debloating measurement, after this long

CREATED, DEPLOYING, INITIALIZING, RUNNING = (
    ExecutionState.CREATED,
    ExecutionState.DEPLOYING,
    ExecutionState.INITIALIZING,
    ExecutionState.RUNNING,
)
FINISHED, CANCELED, FAILED = ExecutionState.FINISHED, ExecutionState.CANCELED, ExecutionState.FAILED


class CancelTaskException(BaseException):
    """Raised inside the task thread to unwind a cancelled task (Flink's ``CancelTaskException``).

    A BaseException, like Python's own interrupts, so a user function's ``except Exception``
    does not swallow it; for the same reason it is deliberately not a
    :class:`~raylink.errors.RaylinkError` (it never reaches the user: the task ends CANCELED)."""


def any_of(futures: list[Future]) -> Future:
    """A future completed as soon as one of ``futures`` is."""
    done: Future = Future()

    def complete(_f: Future) -> None:
        if not done.done():
            try:
                done.set_result(None)
            except Exception:  # already completed by another callback
                pass

    for f in futures:
        f.add_done_callback(complete)
    return done


class StreamTask:
    """One subtask: ``inputs`` are ``StreamTaskNetworkInput``s (1 for one-input, 2 for two-input)."""

    def __init__(
        self,
        job_vertex: JobVertex,
        subtask_index: int,
        record_writers: dict[str, Any],
        inputs: list[Any],
        attempt_number: int = 0,
        accumulators: Optional[dict] = None,
        on_state_change: Optional[Callable[["StreamTask", ExecutionState, Optional[BaseException]], None]] = None,
        job_parameters: Optional[dict] = None,
        buffer_size: int = 32 * 1024,
        restore: Optional[dict] = None,
        checkpoint_sink: Optional[Callable[["StreamTask", int, dict, dict], None]] = None,
        attempt_id: str = "",
        checkpoint_storage: Any = None,
        cpus: Optional[frozenset] = None,
    ) -> None:
        self.job_vertex = job_vertex
        #: the CPUs the task thread runs on (None: any; the local target pins its task threads)
        self.cpus = cpus
        #: the deployment attempt this task runs (Flink's ``ExecutionAttemptID``)
        self.attempt_id = attempt_id
        #: where the TaskExecutor writes this task's snapshots (None: no checkpointing)
        self.checkpoint_storage = checkpoint_storage
        #: the checkpointed state it starts from: {operator id: [snapshot of each old subtask]}
        self.restore = restore
        #: where a snapshot goes (the TaskExecutor writes it off this thread and acknowledges)
        self.checkpoint_sink = checkpoint_sink
        #: periodic checkpoints are on (execution.checkpointing.interval): the end of input waits for
        #: a final checkpoint; else the task takes part in savepoints only
        self.periodic_checkpointing = checkpoint_sink is not None and bool(
            read_option(job_parameters, CheckpointingOptions.CHECKPOINTING_INTERVAL)
        )
        self._barrier_handler: Any = None  # the checkpoint coordinator's, for the inputs' barriers
        self.buffer_size = buffer_size
        self._source_batch = SOURCE_BATCH_SIZE
        self._on_output_blocked: Optional[Callable[[Future], None]] = None
        self.subtask_index = subtask_index
        self.name = f"{job_vertex.name} ({subtask_index + 1}/{job_vertex.parallelism})"
        self.record_writers = record_writers
        self.writers = list(record_writers.values())
        self.inputs = inputs
        self.attempt_number = attempt_number
        self.accumulators = accumulators if accumulators is not None else {}
        self.on_state_change = on_state_change
        self.job_parameters = job_parameters or {}
        self.state: ExecutionState = CREATED
        self.error: Optional[BaseException] = None
        self.chain: Optional[OperatorChain] = None
        self.mailbox_processor = MailboxProcessor(self._default_action)
        #: the checkpoint side: snapshots, barriers sent on, channel state, acknowledgements
        self.checkpoint_coordinator = SubtaskCheckpointCoordinator(
            self,
            self.name,
            job_vertex.chain,
            self.writers,
            self.mailbox_processor.mailbox.put,
            checkpoint_sink,
            job_parameters,
        )
        self.num_records_in = 0
        self._input_ended = [False] * len(inputs)
        self._next_input = 0
        self._canceled = False
        self._ended = False
        # legacy SourceFunction mode: run() on its own thread, chain calls under this lock
        self._legacy_lock: Optional[threading.RLock] = None
        self._source_thread: Optional[threading.Thread] = None
        self._source_wakeup: Optional[threading.Event] = None
        self._thread: Optional[threading.Thread] = None
        self._gated_operators: list = []
        self._time_service: Optional[SystemProcessingTimeService] = None
        self._flushers: list = []
        self._step_bound_ns = 0  # a source step ends after this long (0: when its batch is full)
        # at the end of its input (FLIP-147): -1 waiting for a trigger, then the final checkpoint's id
        self._final_checkpoint: Optional[int] = None
        self._last_checkpoint_id = 0  # the newest checkpoint this task took part in
        self._missed_trigger: Optional[tuple] = None  # the newest trigger that reached it while inputs were open
        self._finished_on_restore = False  # restored from a snapshot taken after its end of input
        # stop-with-savepoint (Flink's synchronous savepoint): its checkpoint id; after the
        # savepoint a source emits nothing more and every task ends when the savepoint
        # completes, without finishing its operators
        self._stop_savepoint: Optional[int] = None
        self._halted = False  # a source after its stop-with-savepoint barrier
        self._stop_mode: Optional[str] = None  # the stop-with-savepoint's "suspend" or "drain"
        self._drained = False  # a drain ended its input and finished its operators before the savepoint
        self._unresumable = False  # a drained or cancelled (legacy) source cannot just go on
        self._interruptible = InterruptibleThreads(CancelTaskException)
        self._state_lock = threading.Lock()
        self.done = threading.Event()

    # -- lifecycle (any thread) ----------------------------------------------------------------
    def start(self) -> threading.Thread:
        self._thread = threading.Thread(target=self.run, name=f"task {self.name}", daemon=True)
        self._thread.start()
        return self._thread

    def join(self, timeout: Optional[float] = None) -> bool:
        return self.done.wait(timeout)

    def cancel(self) -> None:
        """Cancel from any thread: the task thread unwinds at its next mail, or at once where
        it runs (Flink's TaskInterrupter); a task still running after
        ``task.cancellation.timeout`` ms is reported FAILED (Flink's TaskCancelerWatchDog)."""
        if self.done.is_set() or self._canceled:
            return
        self._canceled = True
        wakeup = self._source_wakeup
        if wakeup is not None:
            wakeup.set()
        chain = self.chain
        if chain is not None and self.job_vertex.invokable == "SourceStreamTask":
            cancel = getattr(chain.head, "cancel", None)
            if cancel is not None:
                cancel()
        self.mailbox_processor.mailbox.put(self._raise_cancel)
        params = self.job_parameters
        TaskCanceler(
            self.name,
            self.done,
            self._interruptible.interrupt,
            self._cancellation_timed_out,
            read_option(params, TaskManagerOptions.TASK_CANCELLATION_INTERVAL),
            read_option(params, TaskManagerOptions.TASK_CANCELLATION_TIMEOUT),
        ).start()

    def _raise_cancel(self) -> None:
        raise CancelTaskException(f"task {self.name} was cancelled")

    def _cancellation_timed_out(self) -> None:
        """Watchdog thread: the task ignored the cancel; report it FAILED and let it go."""
        timeout = read_option(self.job_parameters, TaskManagerOptions.TASK_CANCELLATION_TIMEOUT)
        stacks = self._interruptible.stacks()
        error = TaskCancellationTimeoutError(
            f"task {self.name} did not react to cancelling within {timeout} ms "
            f"(task.cancellation.timeout); it is stuck in:\n{stacks}"
        )
        if self._set_state(FAILED, error):
            self.mailbox_processor.mailbox.close()
            self.done.set()

    def _set_state(self, state: ExecutionState, error: Optional[BaseException] = None) -> bool:
        """Move to ``state`` (Flink's Task transitions, checked); a task reports one final
        state only (False: it had one)."""
        with self._state_lock:
            if self.state.is_terminal():
                return False
            self.state = self.state.transition_to(state)
            self.error = error
        if self.on_state_change is not None:
            self.on_state_change(self, state, error)
        return True

    # -- the task thread ------------------------------------------------------------------------
    def run(self) -> None:
        mp = self.mailbox_processor
        try:
            pin_current_thread(self.cpus)
            self._set_state(DEPLOYING)
            if self._canceled:
                raise CancelTaskException(f"task {self.name} was cancelled")
            self._time_service = SystemProcessingTimeService(mail_executor=mp.mailbox.put)
            jv = self.job_vertex
            context = StreamingRuntimeContext(
                task_name=self.name,
                operator_name=jv.name,
                subtask_index=self.subtask_index,
                parallelism=jv.parallelism,
                max_parallelism=jv.max_parallelism,
                attempt_number=self.attempt_number,
                record_context=RecordContext(),
                accumulators=self.accumulators,
                processing_time_service=self._time_service,
                job_parameters=self.job_parameters,
                mailbox_executor=MailboxExecutor(mp),
                checkpointing_enabled=self.periodic_checkpointing,
            )
            self.record_context = context.record_context
            self._set_state(INITIALIZING)  # building, opening and restoring the operators
            self.chain = OperatorChain(jv.chain, self.record_writers, context)
            if self._canceled:
                raise CancelTaskException(f"task {self.name} was cancelled")
            head = self.chain.head
            self._bind_head(head)
            # operators that may take no input for a while (Flink's async wait operator when full)
            self._gated_operators = [op for op in self.chain.operators if hasattr(op, "get_available_future")]
            self.chain.open()
            restore = self.restore or {}
            for operator, config in zip(self.chain.operators, jv.chain):
                initialize_operator(operator, restore.get(config.operator_id))
            restore_channel_state(
                self.name,
                jv.chain[0].operator_name,
                restore.get(jv.chain[0].operator_id),
                jv.parallelism,
                self.subtask_index,
                self.inputs,
                self.writers,
            )
            self._finished_on_restore = finished_on_restore(restore, jv.chain)
            self.restore = None  # the snapshots are in the operators now
            if self.inputs:
                self._barrier_handler = self.checkpoint_coordinator.create_barrier_handler(
                    self.inputs, self._perform_checkpoint, self._time_service
                )
            self.checkpoint_coordinator.watch_barriers_sent()
            if jv.invokable == "SourceStreamTask" and getattr(head, "runs_source_function", False):
                self._start_legacy_mode(head)
            if jv.invokable == "SourceStreamTask":
                self._bound_source_steps(head, jv.chain[0].buffer_timeout)
            for writer in self.writers:
                schedule = mp.mailbox.put
                if self._legacy_lock is not None:  # the source thread may hold a partial batch

                    def schedule(action, _put=mp.mailbox.put, _flush=head.flush_pending):
                        _put(_flush)
                        _put(action)

                flusher = writer.start_output_flusher(schedule)
                if flusher is not None:
                    self._flushers.append(flusher)
            if self._legacy_lock is not None and not self._flushers and self._step_bound_ns and self._source_batch > 1:
                self._schedule_legacy_flush(self._step_bound_ns // 1_000_000)
            interval = read_option(self.job_parameters, MetricOptions.LATENCY_INTERVAL)
            if interval > 0 and jv.invokable == "SourceStreamTask":
                self._schedule_latency_marker(interval)
            self._schedule_debloating()
            self._set_state(RUNNING)
            self._interruptible.enter()
            try:
                mp.run_mailbox_loop()
            finally:
                self._interruptible.leave()
            if self._canceled:
                raise CancelTaskException(f"task {self.name} was cancelled")
            self._stop_timers()
            self._set_state(FINISHED)
        except CancelTaskException:
            self._interruptible.leave()
            self._cleanup_after_failure()
            self._set_state(CANCELED)
        except BaseException as exc:  # noqa: BLE001 - a task reports every failure
            self._interruptible.leave()
            if self._canceled:  # failing while being cancelled (e.g. interrupted inside a library)
                self._cleanup_after_failure()
                self._set_state(CANCELED)
                return
            error = exception_with_operator(self.chain, self.name, exc)
            self._cleanup_after_failure()
            self._set_state(FAILED, error)
        finally:
            mp.mailbox.close()
            self.done.set()

    def _bind_head(self, head: Any) -> None:
        invokable = self.job_vertex.invokable
        if invokable == "SourceStreamTask":
            self._source = head
            self._on_output_blocked = getattr(head, "output_blocked", None)
        elif invokable == "TwoInputStreamTask":
            self._batch = (head.process_batch1, head.process_batch2)
            self._element = (head.process_element1, head.process_element2)
            # runs of records with a timestamp each, for heads that take them whole (else None)
            self._timestamped = (
                getattr(head, "process_timestamped_batch1", None),
                getattr(head, "process_timestamped_batch2", None),
            )
            self._watermark = (head.process_watermark1, head.process_watermark2)
            self._latency = (head.process_latency_marker1, head.process_latency_marker2)
        else:
            self._batch = (head.process_batch,)
            self._element = (head.process_element,)
            self._timestamped = (getattr(head, "process_timestamped_batch", None),)
            self._watermark = (head.process_watermark,)
            self._latency = (self.chain.latency_handler(head),)

    def _bound_source_steps(self, head: Any, buffer_timeout: int) -> None:
        """The buffer timeout bounds how long a source holds records: a source step ends
        after it (or a full batch), so a slow source's records leave within the timeout."""
        if buffer_timeout == 0 or any(w.flush_always for w in self.writers):
            if self._legacy_lock is not None:
                self._source_batch = 1  # buffer timeout 0: every record leaves at once
            buffer_timeout = 1
        if buffer_timeout > 0:
            self._step_bound_ns = buffer_timeout * 1_000_000
            if hasattr(head, "step_bound_ns"):
                head.step_bound_ns = self._step_bound_ns

    def _schedule_legacy_flush(self, interval_ms: int) -> None:
        """A SourceFunction chained to its sinks has no OutputFlusher: hand its partial
        batch over every buffer timeout all the same."""
        service = self._time_service
        head = self.chain.head

        def flush(_timestamp: int) -> None:
            if self._ended:
                return
            head.flush_pending()
            service.register_timer(service.current_processing_time() + interval_ms, flush)

        service.register_timer(service.current_processing_time() + interval_ms, flush)

    def _schedule_latency_marker(self, interval_ms: int) -> None:
        """Flink's LatencyMarkerEmitter: every ``metrics.latency.interval`` ms, in the task thread."""
        service = self._time_service
        head = self.chain.head
        config = self.job_vertex.chain[0]

        def emit(_timestamp: int) -> None:
            if self._ended:
                return
            marker = LatencyMarker(int(time.time() * 1000), config.operator_id, self.subtask_index)
            head.output.emit_latency_marker(marker)
            service.register_timer(service.current_processing_time() + interval_ms, emit)

        service.register_timer(service.current_processing_time() + interval_ms, emit)

    def _schedule_debloating(self) -> None:
        """Flink's ``StreamTask.debloat``: every period, each gate with a debloater measures
        what the task consumed from it while not idle and resizes its remote buffers."""
        gates = [
            g
            for inp in self.inputs
            for g in getattr(inp.gate, "gates", [inp.gate])
            if getattr(g, "debloater", None) is not None
        ]
        if not gates:
            return
        service = self._time_service
        mp = self.mailbox_processor
        period = gates[0].debloater.settings.period_ms

        def debloat(_timestamp: int) -> None:
            if self._ended:
                return
            busy_ns = time.perf_counter_ns() - mp.started_ns - mp.idle_ns
            for gate in gates:
                size = gate.debloater.measure(gate.num_bytes_in, busy_ns)
                if size is not None:
                    for channel in gate.debloated_channels:
                        channel.announce_buffer_size(size)
            measured = all(gate.debloater.throughput is not None for gate in gates)
            delay = period if measured else min(period, FIRST_DEBLOAT_MS)
            service.register_timer(service.current_processing_time() + delay, debloat)

        # remote buffers start small: measure early and often until every gate has a throughput
        service.register_timer(service.current_processing_time() + min(period, FIRST_DEBLOAT_MS), debloat)

    def _stop_timers(self) -> None:
        for flusher in self._flushers:
            flusher.terminate()
        self._flushers.clear()
        if self._time_service is not None:
            self._time_service.shutdown()

    def _cleanup_after_failure(self) -> None:
        self._stop_timers()
        self.checkpoint_coordinator.cancel_alignment_timers()
        if self._source_thread is not None and self._source_thread is not threading.current_thread():
            if self.chain is not None:
                cancel = getattr(self.chain.head, "cancel", None)
                if cancel is not None:
                    cancel()
            self._source_thread.join(5)
        if self.chain is not None:
            self.chain.close_quietly()
        for writer in self.writers:
            try:
                writer.close()
            except Exception:
                pass

    # -- the default action --------------------------------------------------------------------
    def _unavailable_output(self) -> Optional[Future]:
        for writer in self.writers:
            if not writer.is_available():
                return writer.get_available_future()
        return None

    # -- legacy SourceFunction thread (Flink's LegacySourceFunctionThread) ---------------------------------
    def _start_legacy_mode(self, head: Any) -> None:
        lock = self._legacy_lock = threading.RLock()
        head.checkpoint_lock = lock
        head.on_batch_flushed = self._wait_for_output_in_source_thread
        self.mailbox_processor.lock = lock

    def _legacy_source_main(self) -> None:
        put = self.mailbox_processor.mailbox.put
        self._interruptible.enter()
        try:
            self._source.emit_next(self._source_batch)
        except BaseException as exc:  # noqa: BLE001 - re-raised in the task thread
            self._interruptible.leave()

            def fail(exc=exc):
                raise exc

            put(fail)
            return
        self._interruptible.leave()
        put(lambda: self._end_of_input(self.mailbox_processor))

    def _wait_for_output_in_source_thread(self) -> None:
        """Source thread: wait (outside the lock) while every output buffer is taken."""
        mp = self.mailbox_processor
        blocked = self._unavailable_output()
        while blocked is not None and not self._canceled:
            wakeup = self._source_wakeup = threading.Event()
            blocked.add_done_callback(lambda _f: wakeup.set())
            start = time.perf_counter_ns()
            wakeup.wait()
            mp.back_pressured_ns += time.perf_counter_ns() - start
            blocked = self._unavailable_output()

    def _default_action(self, mp: MailboxProcessor) -> None:
        if self._halted:  # a resumed back-pressure wait must not restart a stopped source
            mp.suspend_default_action(IDLE)
            return
        if self._finished_on_restore and not self.inputs:  # a source whose input ended before its checkpoint
            self._end_of_input(mp)
            return
        if self._legacy_lock is not None:
            if self._source_thread is None:
                self._source_thread = threading.Thread(
                    target=self._legacy_source_main, name=f"Legacy Source Thread - {self.name}", daemon=True
                )
                self._source_thread.start()
            # the source thread feeds the chain; this thread only runs mails until it ends
            mp.suspend_default_action(SOURCE_THREAD)
            return
        blocked = self._unavailable_output()
        if blocked is not None:
            if self._on_output_blocked is not None:  # a source that pauses its reading (Flink's KafkaSourceReader)
                self._on_output_blocked(blocked)
            blocked.add_done_callback(mp.suspend_default_action(BACK_PRESSURE).resume)
            return
        for operator in self._gated_operators:
            waiting = operator.get_available_future()
            if waiting is not None:
                # busy (an async wait operator's own work) unless the operator says it waits idle
                # (a rate-limited source ahead of its schedule)
                kind = getattr(operator, "availability_kind", OPERATOR)
                waiting.add_done_callback(mp.suspend_default_action(kind).resume)
                return
        if self.job_vertex.invokable == "SourceStreamTask":
            bound = self._step_bound_ns
            if bound:
                start = time.perf_counter_ns()
            if not self._source.emit_next(self._source_batch):
                self._end_of_input(mp)
                return
            self._adapt_source_batch()
            if bound and time.perf_counter_ns() - start >= bound:
                for writer in self.writers:  # a slow source: what it emitted leaves now
                    writer.flush_all()
            return
        inputs = self.inputs
        n = len(inputs)
        for attempt in range(n):
            index = (self._next_input + attempt) % n
            if self._input_ended[index]:
                continue
            items = inputs[index].poll_next()
            if items is None:
                if inputs[index].is_finished():
                    self._input_ended[index] = True
                    if n == 2:
                        self.chain.head.end_input(index + 1)
                continue
            self._next_input = (index + 1) % n
            self._process_items(items, index)
            return
        if all(self._input_ended):
            self._end_of_input(mp)
            return
        futures = [inp.get_available_future() for inp, ended in zip(inputs, self._input_ended) if not ended]
        waiting = futures[0] if len(futures) == 1 else any_of(futures)
        waiting.add_done_callback(mp.suspend_default_action(IDLE).resume)

    def _adapt_source_batch(self) -> None:
        """Size source batches to ~SOURCE_BATCH_BUFFERS output buffers, so one batch can
        overdraw a full output pool by only that much (memory stays bounded)."""
        writers = self.writers
        if not writers:
            return
        records = writers[0].num_records_out
        if records:
            per_record = max(1.0, writers[0].num_bytes_out / records)
            batch = int(SOURCE_BATCH_BUFFERS * self.buffer_size / per_record)
            self._source_batch = max(1, min(SOURCE_BATCH_SIZE, batch))

    def _process_items(self, items: list, index: int) -> None:
        process_batch = self._batch[index]
        for item in items:
            kind = type(item)
            if kind is list:
                self.num_records_in += len(item)
                process_batch(item)
            elif kind is TimestampedRecords:
                self.num_records_in += len(item)
                timestamped = self._timestamped[index]
                if timestamped is not None:  # the head takes the whole run
                    timestamped(item.values, item.timestamps)
                    continue
                rc = self.record_context
                element = self._element[index]
                for value, ts in zip(item.values, item.timestamps):
                    rc.timestamp = ts
                    element(value)
                rc.timestamp = None
            elif kind is Watermark:
                self._watermark[index](item.timestamp)
            elif kind is LatencyMarker:
                self._latency[index](item)
            elif kind is WatermarkStatus:  # the valve's output went idle / active
                head = self._batch[index].__self__
                suffix = str(index + 1) if len(self._batch) == 2 else ""
                getattr(head, "process_watermark_status" + suffix)(item.idle)
            elif kind is CheckpointBarrier:
                self._barrier_handler.process_barrier(item, index, self.inputs[index].last_channel)
            elif kind is CancelCheckpointMarker:
                self._barrier_handler.process_cancellation_marker(item, index, self.inputs[index].last_channel)
            elif item is END_OF_PARTITION and self._barrier_handler is not None:
                self._barrier_handler.process_end_of_partition(index, self.inputs[index].last_channel)

    # -- checkpoints: when and whether (the checkpoint itself: SubtaskCheckpointCoordinator) ------------
    def trigger_checkpoint(self, checkpoint_id: int, timestamp: int, stop: Optional[str] = None) -> None:
        """Any thread: the JobMaster triggers checkpoint ``checkpoint_id``. A source takes it
        between two records; a task whose every input has ended and that waits for its final
        checkpoint takes it too (its barriers can no longer come through its inputs; Flink
        triggers the running tasks whose predecessors all finished). Any other task takes it
        when the barrier arrives on its inputs.

        ``stop`` ("suspend" or "drain") makes it a stop-with-savepoint: a source first emits
        the end of event time when draining, takes the savepoint and then emits nothing more;
        draining, every task ends its operators' input (``_drain``) before its snapshot;
        every task ends once the savepoint completes (see :meth:`notify_checkpoint`)."""
        self.mailbox_processor.mailbox.put(lambda: self._on_trigger(checkpoint_id, timestamp, stop))

    def _on_trigger(self, checkpoint_id: int, timestamp: int, stop: Optional[str] = None) -> None:
        savepoint = stop is not None
        if stop == SAVEPOINT:
            stop = None
        if stop is not None:
            self._stop_savepoint = checkpoint_id
            self._stop_mode = stop
        if checkpoint_id <= self._last_checkpoint_id:
            return  # taken already (its barrier came first)
        if self.inputs and self._final_checkpoint is None:
            # it may end its input before the barrier
            self._missed_trigger = (checkpoint_id, timestamp, SAVEPOINT if savepoint and stop is None else stop)
            return
        if stop is not None and not self.inputs and self.chain is not None and not self._ended:
            self._stop_source(stop)
        self._perform_checkpoint(
            self.checkpoint_coordinator.barrier_for_trigger(checkpoint_id, timestamp, savepoint, stop == "drain")
        )

    def _stop_source(self, mode: str) -> None:
        """Stop-with-savepoint at a source: no record after the savepoint's barrier (a legacy
        ``SourceFunction`` is cancelled; what it emits meanwhile is after the barrier and not in
        the savepoint), the end of event time before it when draining (Flink's
        ``advanceToEndOfEventTime``: event-time windows and timers fire)."""
        self._halted = True
        head = self.chain.head
        if self._legacy_lock is not None:
            head.cancel()
            self._unresumable = True
        if mode == "drain" and self._final_checkpoint is None:
            self._unresumable = True
            with self._legacy_lock or _NO_LOCK:
                head.current_watermark = MAX_WATERMARK
                head.output.emit_watermark(MAX_WATERMARK)

    def _drain(self) -> None:
        """Stop-with-savepoint with drain (FLIP-147): the savepoint's (aligned) barrier came
        after the end of event time and every record of the inputs, which send nothing more:
        end the input of every operator (``endInput`` + ``finish``: pending window output, async
        requests in flight, buffered sink rows come out now, before the barrier) and take the
        savepoint as this task's final checkpoint (its state restores as finished)."""
        self._drained = self._unresumable = True
        if not self._finished_on_restore:  # it ended before the checkpoint it was restored from
            with self._legacy_lock or _NO_LOCK:
                if len(self.inputs) == 2:  # a two-input head: each input that has not ended ends
                    for index, ended in enumerate(self._input_ended):
                        if not ended:
                            self._input_ended[index] = True
                            self.chain.head.end_input(index + 1)
                self.chain.finish(head_inputs_ended=len(self.inputs) == 2)
        self._stop_timers()  # Flink quiesces the timer service once the operators finished
        for writer in self.writers:
            writer.flush_all()
        self._final_checkpoint = -1  # the savepoint is its final checkpoint (snapshots marked finished)

    def _perform_checkpoint(self, barrier: CheckpointBarrier) -> None:
        """Task thread (Flink's ``performCheckpoint``): a finished task declines; a drain's
        barrier first ends the operators' input; then the checkpoint coordinator snapshots every
        operator, sends the barrier on before any later record, and hands the snapshot over."""
        coordinator = self.checkpoint_coordinator
        if self._ended or self.chain is None:  # its outputs are finished: nothing to send on
            coordinator.decline(barrier.checkpoint_id, f"task {self.name} has already finished")
            return
        if self._legacy_lock is not None and self._source.failure is not None:
            raise self._source.failure  # the source thread failed inside the chain: no checkpoint past it
        started = time.perf_counter()
        self._last_checkpoint_id = max(self._last_checkpoint_id, barrier.checkpoint_id)
        if barrier.drain:  # the barrier may come before the JobMaster's trigger says so
            self._stop_savepoint, self._stop_mode = barrier.checkpoint_id, "drain"
        if (
            self._stop_mode == "drain"
            and barrier.checkpoint_id == self._stop_savepoint
            and self._final_checkpoint is None
        ):
            self._drain()
        if self._final_checkpoint == -1:
            self._final_checkpoint = barrier.checkpoint_id
        if self._legacy_lock is not None:
            self.chain.head.flush_pending()  # what run() emitted so far belongs before the barrier
        coordinator.checkpoint_state(barrier, self.chain, self._final_checkpoint is not None, started)

    def notify_checkpoint(self, checkpoint_id: int, complete: bool) -> None:
        """Any thread: checkpoint ``checkpoint_id`` completed (or was aborted); operators hear of
        it in the task thread (a two-phase-commit sink commits here); then the task ends if
        that was its final checkpoint or its stop-with-savepoint."""

        def mail() -> None:
            if self.chain is not None:
                self.checkpoint_coordinator.notify_checkpoint(self.chain, checkpoint_id, complete)
            final = self._final_checkpoint
            if complete and final is not None and 0 <= final <= checkpoint_id and not self._ended and not self._drained:
                self._end_of_input(self.mailbox_processor)  # the final checkpoint completed
            stop = self._stop_savepoint
            if stop is not None and checkpoint_id == stop and not self._ended:
                if complete:  # the savepoint holds everything up to here: end, operators unfinished
                    self._end_task(self.mailbox_processor)
                elif self._unresumable:  # past the end of event time, or its source cancelled
                    raise RuntimeError(
                        f"stop-with-savepoint {checkpoint_id} failed after task {self.name} had stopped its "
                        f"source; the job restarts from its latest checkpoint"
                    )
                else:  # the savepoint failed: the job goes on (Flink resumes the sources)
                    self._stop_savepoint = None
                    self._halted = False
                    self.mailbox_processor.resume_default_action()

        self.mailbox_processor.mailbox.put(mail)

    def _end_of_input(self, mp: MailboxProcessor) -> None:
        """Every input ended (a source: its input is exhausted). The operators finish (emit what
        they hold); with checkpointing the task then waits for a checkpoint taken after that
        (Flink 2's final checkpoint, FLIP-147) before it releases the operators and finishes its
        partitions, so everything it and its upstream produced is in a completed checkpoint
        (two-phase-commit sinks commit there) and a restore neither loses nor repeats any of it.
        Called again once that checkpoint completed."""
        if self._stop_savepoint is not None and (self._final_checkpoint is None or self._drained):
            mp.suspend_default_action(IDLE)  # its upstream stopped with a savepoint: it ends with it
            return
        if self._final_checkpoint is None:
            if not self._finished_on_restore:  # it ended before the checkpoint it was restored from
                self.chain.finish(head_inputs_ended=len(self.inputs) == 2)
            if self.periodic_checkpointing:
                self._stop_timers()  # Flink quiesces the timer service once the operators finished
                for writer in self.writers:
                    writer.flush_all()
                self._final_checkpoint = -1
                mp.suspend_default_action(IDLE)  # nothing left to do but mails (triggers, notifications)
                self.checkpoint_coordinator.request_final_checkpoint()
                missed, self._missed_trigger = self._missed_trigger, None
                if missed is not None:
                    self._on_trigger(*missed)
                return
        self._end_task(mp)

    def _end_task(self, mp: MailboxProcessor) -> None:
        """Release the operators, finish the partitions (end of partition downstream), stop."""
        self._ended = True
        self._stop_timers()
        self.checkpoint_coordinator.cancel_alignment_timers()
        self.chain.close()
        for writer in self.writers:
            writer.finish()
        mp.all_actions_completed()

    # -- metrics -------------------------------------------------------------------------------
    def metrics(self) -> dict:
        out = {
            "task": self.name,
            "vertex": self.job_vertex.id,
            "subtask": self.subtask_index,
            "state": self.state.value,
            "numRecordsIn": self.num_records_in,
            "numRecordsOut": sum(w.num_records_out for w in self.writers),
            "numBuffersOut": sum(w.num_buffers_out for w in self.writers),
            "numBytesOut": sum(w.num_bytes_out for w in self.writers),
            "numBuffersIn": sum(getattr(i.gate, "num_buffers_in", 0) for i in self.inputs),
            "numBytesIn": sum(getattr(i.gate, "num_bytes_in", 0) for i in self.inputs),
        }
        pools = [w.partition.buffer_pool for w in self.writers if w.partition.buffer_pool is not None]
        out["outPoolUsage"] = max((p.usage() for p in pools), default=0.0)
        out.update(self.mailbox_processor.time_metrics())
        if self.chain is not None:  # every operator's metric group (user metrics, watermark gauges)
            out.update(operator_metrics(self.chain.operators))
        samples = sorted(self.chain.latency_samples) if self.chain is not None else []
        if samples:
            n = len(samples)
            out["latencyMs"] = {
                "count": n,
                "p50": samples[n // 2],
                "p95": samples[min(n - 1, int(n * 0.95))],
                "p99": samples[min(n - 1, int(n * 0.99))],
            }
        return out
