"""The operator behind ``stream.sink_to(sink)`` for Flink's Sink V2 shape (writer +
committer): Flink's ``SinkWriterOperator`` and ``CommitterOperator`` in one subtask.

Records go to the sink's ``SinkWriter``. At a checkpoint the writer flushes, its
``prepare_commit()`` committables are kept per checkpoint (``CommittableCollector``)
and, with the writer's own state, become the operator's part of the checkpoint. Only
when the checkpoint completes (``notify_checkpoint_complete``) does the committer
commit them, so the output shows exactly the records of completed checkpoints. A
restored subtask commits what its checkpoint had kept (committing is idempotent) and
the writer continues from its state (a FileSink truncates its in-progress file back).
At the end of a bounded input the writer flushes everything (``flush(True)``); with
checkpointing on, the task then waits for its final checkpoint (Flink 2, FLIP-147), whose
snapshot holds the last committables and whose completion commits them, so a failover at
any moment (before, during or after this subtask's end of input) ends in the same
committed output. Without checkpointing everything left is committed at the end of input
(Flink's ``CommitterOperator.endInput``).

Thread-safety: the task thread only (timers of the writer arrive as mails).
"""

from __future__ import annotations

from typing import Any, List, Optional

from raylink.core.sink import SinkWriterContext, WriterInitContext
from raylink.operators.base import StreamOperator
from raylink.operators.committable_collector import CommittableCollector

_ALL = 1 << 62  # commit every pending checkpoint's committables


class _TimeService:
    """The task's processing-time service as a Sink V2 writer expects it."""

    def __init__(self, service: Any) -> None:
        self._service = service

    def get_current_processing_time(self) -> int:
        return self._service.current_processing_time()

    def register_timer(self, timestamp: int, callback: Any) -> Any:
        return self._service.register_timer(timestamp, callback)


class SinkWriterOperator(StreamOperator):
    chaining_strategy = "ALWAYS"

    def __init__(self, sink: Any, name: str = "", operator_id: str = "") -> None:
        super().__init__(name, operator_id)
        self.sink = sink
        self.writer: Any = None
        self.committer: Any = None
        self.collector: CommittableCollector = CommittableCollector()
        self._context = SinkWriterContext()

    def _init_context(self) -> WriterInitContext:
        rc = self.runtime_context
        return WriterInitContext(
            rc.subtask_index, rc.parallelism, rc.attempt_number, _TimeService(rc.processing_time_service)
        )

    def open(self) -> None:
        self.writer = self.sink.create_writer(self._init_context())
        create_committer = getattr(self.sink, "create_committer", None)
        self.committer = create_committer() if create_committer is not None else None

    # -- records ---------------------------------------------------------------------------------
    def process_element(self, value: Any) -> None:
        context = self._context
        context.timestamp = self.record_context.timestamp
        self.writer.write(value, context)

    def process_batch(self, values: List[Any]) -> None:
        context = self._context
        context.timestamp = self.record_context.timestamp
        write_batch = getattr(self.writer, "write_batch", None)
        if write_batch is not None:  # a writer that takes a batch at once (the Kafka sink's)
            write_batch(values, context)
            return
        write = self.writer.write
        for value in values:
            write(value, context)

    def process_watermark(self, timestamp: int) -> None:
        self.current_watermark = timestamp
        self._context.current_watermark = timestamp
        write_watermark = getattr(self.writer, "write_watermark", None)
        if write_watermark is not None:
            write_watermark(timestamp)

    def process_latency_marker(self, marker: Any) -> None:
        pass

    def end_input(self) -> None:
        self.writer.flush(True)
        if not self.runtime_context.checkpointing_enabled:  # else the final checkpoint commits
            self._prepare(_ALL)
            self._commit(_ALL)

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()

    # -- checkpoints -----------------------------------------------------------------------------
    def _prepare(self, checkpoint_id: int) -> None:
        prepare = getattr(self.writer, "prepare_commit", None)
        if prepare is not None:
            self.collector.add(checkpoint_id, prepare())

    def _commit(self, checkpoint_id: int) -> None:
        if self.committer is not None:
            self.collector.commit_up_to(self.committer, checkpoint_id)

    def snapshot_operator_state(self, checkpoint_id: int) -> dict:
        self.writer.flush(False)
        self._prepare(checkpoint_id)
        snapshot = getattr(self.writer, "snapshot_state", None)
        return {
            "writer": list(snapshot(checkpoint_id)) if snapshot is not None else [],
            "committables": self.collector.snapshot(),
        }

    def restore_operator_state(self, state: dict) -> None:
        self._restore([state])

    def restore_rescaled_operator_state(self, states: List[Optional[dict]], subtask: int, parallelism: int) -> None:
        """Restored at another parallelism: old subtask ``j``'s writer state and pending
        committables go to new subtask ``j % parallelism`` (each committed once; Flink hands
        a sink's recovered committables and writer states out the same way)."""
        self._restore([s for j, s in enumerate(states) if s is not None and j % parallelism == subtask])

    def _restore(self, states: List[dict]) -> None:
        if self.writer is not None:
            self.writer.close()
        restore = getattr(self.sink, "restore_writer", None)
        context = self._init_context()
        writer_states = [w for state in states for w in state["writer"]]
        self.writer = restore(context, writer_states) if restore is not None else self.sink.create_writer(context)
        self.collector.restore([state["committables"] for state in states])
        self._commit(_ALL)  # the checkpoint completed: what it kept may be committed (idempotent)

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        self._commit(checkpoint_id)

    def notify_checkpoint_aborted(self, checkpoint_id: int) -> None:
        """Its committables wait for the next completed checkpoint, which subsumes it."""


def sink_writer_operator(spec: Any) -> SinkWriterOperator:
    sink: Optional[Any] = (spec.params or {}).get("sink")
    if sink is None:
        raise ValueError(f"operator {spec.name!r} needs params['sink']")
    return SinkWriterOperator(sink)


__all__ = ["SinkWriterOperator", "sink_writer_operator"]
