"""Flink's Sink V2 shape (``org.apache.flink.api.connector.sink2``): a sink is a factory of
per-subtask writers and of a committer, so two-phase-commit sinks share one protocol.

The runtime drives it like this, per sink subtask, all on the task thread:

1. ``sink.create_writer(context)`` — or ``sink.restore_writer(context, states)`` with the
   writer states of the checkpoint it restores from;
2. ``writer.write(element, context)`` per record (``write_watermark`` per watermark);
3. at a checkpoint barrier ``n``: ``writer.flush(end_of_input=False)``, then
   ``writer.prepare_commit()`` -> committables (the pre-commit), then
   ``writer.snapshot_state(n)`` -> writer states; both belong to checkpoint ``n``'s state;
4. when ``notify_checkpoint_complete(n)`` arrives: ``committer.commit(committables of every
   checkpoint <= n)``; on restore from ``n``: ``committer.commit(committables of <= n)``
   again — committers are idempotent, so a commit repeated after a failure is a no-op;
5. at the end of bounded input: ``writer.flush(end_of_input=True)``; with checkpointing
   the task's final checkpoint (FLIP-147) then prepares and, once complete, commits what
   is left; without checkpointing it is prepared and committed at once.

``raylink.operators.committable_collector.CommittableCollector`` keeps the committables per
checkpoint for step 4. Writers and committers are not thread-safe: one task thread each.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from dataclasses import dataclass
from enum import Enum
from typing import Any, Callable, Generic, Optional, Protocol, Sequence, TypeVar

IN = TypeVar("IN")
CommT = TypeVar("CommT")
WriterStateT = TypeVar("WriterStateT")


class DeliveryGuarantee(Enum):
    """The guarantee a sink is configured for (Flink's ``DeliveryGuarantee``)."""

    EXACTLY_ONCE = 0
    AT_LEAST_ONCE = 1
    NONE = 2


class ProcessingTimeService(Protocol):
    """The task's processing-time clock and timers (Flink's ``ProcessingTimeService``); the
    runtime runs timer callbacks on the task thread (through the mailbox)."""

    def get_current_processing_time(self) -> int:
        """Now, epoch milliseconds."""

    def register_timer(self, timestamp: int, callback: Callable[[int], None]) -> Any:
        """Calls ``callback(timestamp)`` once the clock reaches ``timestamp``."""


class SystemClock:
    """Wall-clock time without timers (writers given no ``ProcessingTimeService``)."""

    @staticmethod
    def get_current_processing_time() -> int:
        return time.time_ns() // 1_000_000


@dataclass(frozen=True)
class WriterInitContext:
    """What a writer learns about its subtask (Flink's ``WriterInitContext``)."""

    subtask_id: int
    number_of_parallel_subtasks: int = 1
    attempt_number: int = 0
    processing_time_service: Optional[ProcessingTimeService] = None


@dataclass
class SinkWriterContext:
    """Per-record context of ``SinkWriter.write`` (Flink's ``SinkWriter.Context``); the
    runtime may reuse one instance, updating its fields."""

    timestamp: Optional[int] = None
    current_watermark: int = -(1 << 63)


class SinkWriter(ABC, Generic[IN]):
    """Writes the records of one sink subtask (Flink's ``SinkWriter``)."""

    @abstractmethod
    def write(self, element: IN, context: Optional[SinkWriterContext] = None) -> None:
        """Adds one record."""

    def flush(self, end_of_input: bool) -> None:
        """Called before every checkpoint and at the end of input (``end_of_input=True``)."""

    def write_watermark(self, watermark: int) -> None:
        """Called for every watermark (nothing by default)."""

    def close(self) -> None:
        """Releases resources; uncommitted data stays recoverable from the last snapshot."""


class CommittingSinkWriter(SinkWriter[IN], Generic[IN, CommT]):
    """A writer whose output becomes visible only through a committer (the pre-commit)."""

    @abstractmethod
    def prepare_commit(self) -> list[CommT]:
        """The committables of everything written since the previous call (at a barrier)."""


class StatefulSinkWriter(SinkWriter[IN], Generic[IN, WriterStateT]):
    """A writer with state of its own to checkpoint (Flink's ``StatefulSinkWriter``)."""

    @abstractmethod
    def snapshot_state(self, checkpoint_id: int) -> list[WriterStateT]:
        """The writer's state at checkpoint ``checkpoint_id`` (after ``prepare_commit``)."""


class Committer(ABC, Generic[CommT]):
    """Makes committables visible (Flink's ``Committer``); ``commit`` must be idempotent: the
    same committables may be committed again after a failure."""

    @abstractmethod
    def commit(self, committables: Sequence[CommT]) -> None:
        """Commits every committable or raises."""

    def close(self) -> None:
        """Releases resources."""


class Sink(ABC, Generic[IN]):
    """A sink in Flink's Sink V2 shape; ``DataStream.sink_to`` accepts any subclass."""

    @abstractmethod
    def create_writer(self, context: WriterInitContext) -> SinkWriter[IN]:
        """A fresh writer for subtask ``context.subtask_id``."""


class SupportsWriterState(ABC, Generic[IN, WriterStateT]):
    """A sink whose writer has state (Flink's ``SupportsWriterState``)."""

    @abstractmethod
    def restore_writer(
        self, context: WriterInitContext, recovered_state: Sequence[WriterStateT]
    ) -> StatefulSinkWriter[IN, WriterStateT]:
        """A writer continuing from ``recovered_state`` (states of one or more old subtasks)."""


class SupportsCommitter(ABC, Generic[CommT]):
    """A two-phase-commit sink (Flink's ``SupportsCommitter``)."""

    @abstractmethod
    def create_committer(self) -> Committer[CommT]:
        """The committer of this sink's committables."""


__all__ = [
    "Committer",
    "CommittingSinkWriter",
    "DeliveryGuarantee",
    "ProcessingTimeService",
    "Sink",
    "SinkWriter",
    "SinkWriterContext",
    "StatefulSinkWriter",
    "SupportsCommitter",
    "SupportsWriterState",
    "SystemClock",
    "WriterInitContext",
]
