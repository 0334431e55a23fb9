"""Operator test harnesses, Flink's (``flink-streaming-java``'s test-jar):
``AbstractStreamOperatorTestHarness``, ``OneInputStreamOperatorTestHarness``,
``KeyedOneInputStreamOperatorTestHarness``, ``TwoInputStreamOperatorTestHarness`` and
``KeyedTwoInputStreamOperatorTestHarness``.

A harness drives one operator the way its StreamTask does, without a task: it builds the
runtime context (subtask index, parallelism, max parallelism, a manual processing-time
service, the job parameters) and a :class:`~raylink.operators.CollectingOutput`, and
``open(restore)`` runs the task's order — ``setup(output, context)``, ``open()``, then the
state restore (``initialize_operator``: keyed state, timers, operator list state, an
operator's own state, rescaled from every old subtask's snapshot as a restored task would).
Then the test feeds elements, batches, timestamped runs and watermarks, advances processing
time, takes snapshots (``snapshot``: what the task hands to its TaskExecutor), notifies
completed checkpoints, ends the input and closes — and reads what came out (``output``:
records, timestamps, watermarks, side outputs).

Usage::

    harness = OneInputStreamOperatorTestHarness(StreamMap(fn), subtask_index=1, parallelism=2)
    harness.open()
    harness.process_element(3, timestamp=10)
    harness.process_watermark(10)
    assert harness.extract_output_values() == [6] and harness.output.watermarks == [10]
    restored = OneInputStreamOperatorTestHarness(StreamMap(fn)).open(restore=[harness.snapshot(1)])

Not thread-safe: the test's thread drives the operator (its task thread).
"""

from __future__ import annotations

from typing import Any, Callable, List, Optional, Sequence

from raylink.operators import CollectingOutput, ManualProcessingTimeService, StreamingRuntimeContext
from raylink.state.snapshots import (
    initialize_operator,
    notify_checkpoint_aborted,
    notify_checkpoint_complete,
    snapshot_operator,
)

__all__ = [
    "AbstractStreamOperatorTestHarness",
    "KeyedOneInputStreamOperatorTestHarness",
    "KeyedTwoInputStreamOperatorTestHarness",
    "OneInputStreamOperatorTestHarness",
    "TwoInputStreamOperatorTestHarness",
]


class AbstractStreamOperatorTestHarness:
    """One operator with its context and output (see the module doc).

    ``output``: a factory taking the record context (default ``CollectingOutput``);
    ``processing_time``: where the manual processing-time service starts (or pass
    ``processing_time_service``); further keywords go to ``StreamingRuntimeContext``
    (``job_parameters``, ``mailbox_executor``, ``operator_name`` ...)."""

    def __init__(
        self,
        operator: Any,
        *,
        subtask_index: int = 0,
        parallelism: int = 1,
        max_parallelism: int = 128,
        task_name: str = "task",
        processing_time: int = 0,
        processing_time_service: Any = None,
        output: Optional[Callable[[Any], Any]] = None,
        **context: Any,
    ) -> None:
        self.operator = operator
        if processing_time_service is None:
            processing_time_service = ManualProcessingTimeService(start=processing_time)
        self.processing_time_service = processing_time_service
        context.setdefault("operator_name", operator.name)
        self.runtime_context = StreamingRuntimeContext(
            task_name=task_name,
            subtask_index=subtask_index,
            parallelism=parallelism,
            max_parallelism=max_parallelism,
            processing_time_service=processing_time_service,
            **context,
        )
        self.record_context = self.runtime_context.record_context
        self.output = (output or CollectingOutput)(self.record_context)
        self._set_up = False

    # -- lifecycle -------------------------------------------------------------------------------
    def setup(self) -> "AbstractStreamOperatorTestHarness":
        """Bind the output and the context (keyed operators create their state backend and
        timer service here); ``open`` does it when the test did not."""
        if not self._set_up:
            self.operator.setup(self.output, self.runtime_context)
            self._set_up = True
        return self

    def open(self, restore: Optional[Sequence[Optional[dict]]] = None) -> "AbstractStreamOperatorTestHarness":
        """Set up, open and restore the operator in the task's order; ``restore``: the
        snapshots of every old subtask (None: a fresh start)."""
        self.setup()
        self.operator.open()
        initialize_operator(self.operator, list(restore) if restore is not None else None)
        return self

    def close(self) -> None:
        self.operator.close()

    # -- checkpoints -----------------------------------------------------------------------------
    def snapshot(self, checkpoint_id: int = 1, timestamp: int = 0) -> dict:
        """The operator's part of checkpoint ``checkpoint_id`` (taken between two records)."""
        return snapshot_operator(self.operator, checkpoint_id, timestamp)

    def notify_of_completed_checkpoint(self, checkpoint_id: int) -> None:
        notify_checkpoint_complete(self.operator, checkpoint_id)

    def notify_of_aborted_checkpoint(self, checkpoint_id: int) -> None:
        notify_checkpoint_aborted(self.operator, checkpoint_id)

    # -- processing time -------------------------------------------------------------------------
    def set_processing_time(self, timestamp: int) -> None:
        """Move the processing-time clock to ``timestamp``: due timers fire."""
        self.processing_time_service.set_current_time(timestamp)

    def advance_processing_time(self, delta_ms: int) -> None:
        self.processing_time_service.advance(delta_ms)

    def processing_time(self) -> int:
        return self.processing_time_service.current_processing_time()

    # -- output ----------------------------------------------------------------------------------
    def extract_output_values(self) -> List[Any]:
        """The main output's records so far, in order."""
        return list(self.output.records)

    def extract_output_with_timestamps(self) -> List[tuple]:
        """``(record, timestamp)`` of the main output so far, in order."""
        return list(zip(self.output.records, self.output.timestamps))

    def side_output(self, tag_id: str) -> List[Any]:
        return list(self.output.side_outputs.get(tag_id, []))

    def _set_timestamp(self, timestamp: Optional[int]) -> None:
        self.record_context.timestamp = timestamp


class _KeyedInspection:
    """What a keyed harness can tell about its operator's keyed state and timers."""

    operator: Any

    @property
    def keyed_state_backend(self) -> Any:
        return self.operator.keyed_state_backend

    def num_event_time_timers(self) -> int:
        return self.operator.timer_service.num_event_time_timers()

    def num_processing_time_timers(self) -> int:
        return self.operator.timer_service.num_processing_time_timers()


class OneInputStreamOperatorTestHarness(AbstractStreamOperatorTestHarness):
    """A one-input operator: elements (each with its timestamp), batches, timestamped runs,
    watermarks, watermark status, end of input."""

    def process_element(self, value: Any, timestamp: Optional[int] = None) -> None:
        self._set_timestamp(timestamp)
        self.operator.process_element(value)

    def process_elements(self, values: Sequence[Any], timestamp: Optional[int] = None) -> None:
        """One network buffer's run of records sharing ``timestamp`` (``process_batch``)."""
        self._set_timestamp(timestamp)
        self.operator.process_batch(list(values))

    def process_timestamped(self, elements: Sequence[tuple]) -> None:
        """``(value, timestamp)`` pairs as one run (``process_timestamped_batch``)."""
        self.operator.process_timestamped_batch([v for v, _ in elements], [t for _, t in elements])

    def process_watermark(self, timestamp: int) -> None:
        self.operator.process_watermark(timestamp)

    def process_watermark_status(self, idle: bool) -> None:
        self.operator.process_watermark_status(idle)

    def end_input(self) -> None:
        self.operator.end_input()


class KeyedOneInputStreamOperatorTestHarness(_KeyedInspection, OneInputStreamOperatorTestHarness):
    """A keyed one-input operator (it carries its key selector); also its keyed state and
    timers (Flink's ``numEventTimeTimers`` / ``numProcessingTimeTimers``)."""


class TwoInputStreamOperatorTestHarness(AbstractStreamOperatorTestHarness):
    """A two-input operator: elements, batches and watermarks per input, end of each input."""

    def process_element1(self, value: Any, timestamp: Optional[int] = None) -> None:
        self._set_timestamp(timestamp)
        self.operator.process_element1(value)

    def process_element2(self, value: Any, timestamp: Optional[int] = None) -> None:
        self._set_timestamp(timestamp)
        self.operator.process_element2(value)

    def process_elements1(self, values: Sequence[Any], timestamp: Optional[int] = None) -> None:
        self._set_timestamp(timestamp)
        self.operator.process_batch1(list(values))

    def process_elements2(self, values: Sequence[Any], timestamp: Optional[int] = None) -> None:
        self._set_timestamp(timestamp)
        self.operator.process_batch2(list(values))

    def process_watermark1(self, timestamp: int) -> None:
        self.operator.process_watermark1(timestamp)

    def process_watermark2(self, timestamp: int) -> None:
        self.operator.process_watermark2(timestamp)

    def end_input(self, input_index: int) -> None:
        self.operator.end_input(input_index)


class KeyedTwoInputStreamOperatorTestHarness(_KeyedInspection, TwoInputStreamOperatorTestHarness):
    """A keyed two-input operator; also its keyed state and timers."""
