"""Flink's ``SubtaskCheckpointCoordinator`` (``SubtaskCheckpointCoordinatorImpl``): the
checkpoint side of one subtask, apart from its mailbox loop (``stream_task.StreamTask``).

What it does for its task:

* builds the task's barrier handler over every channel of every input (Flink's
  ``InputProcessorUtil.createCheckpointBarrierHandler``), with the input channel state
  collector and the alignment-timeout check when unaligned checkpoints are on;
* the barrier of a triggered checkpoint (:meth:`barrier_for_trigger`);
* ``checkpointState``: snapshots every operator of the chain (copies only; marked finished
  when taken after the task's end of input, Flink's ``FinishedOperatorSubtaskState``), sends
  the barrier on before any later record (unaligned: ahead of the queued output, which
  becomes output channel state), and hands the snapshot with its statistics to the
  checkpoint sink (the TaskExecutor writes it off the task thread and acknowledges). An
  unaligned snapshot is held until the other inputs' barriers brought the input channel state
  in; an aligned barrier with a timeout until it left every subpartition, or its timeout
  converted it with what it overtook (Flink's ``registerAlignmentTimer``);
* ``abortCheckpointOnBarrier``: a declined checkpoint's pending parts are dropped and a
  ``CancelCheckpointMarker`` goes downstream;
* ``notifyCheckpointComplete`` / ``notifyCheckpointAborted`` to every operator of the chain;
* the request for the final checkpoint a task waits for at its end of input (FLIP-147).

The task decides *whether* and *when* (``StreamTask``'s ``triggerCheckpoint`` /
``performCheckpoint``: stop-with-savepoint, drain, final checkpoint, a finished task
declining); this class does the checkpoint itself. It runs per barrier, never per record.

Thread contract: every method runs in the task thread, except the subpartitions'
``on_event_polled`` hook (a reader's thread: decodes a polled event and mails the task) and
the alignment timers (a timer thread: mails the task). Not thread-safe otherwise. No Ray.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Callable, Optional, Sequence

from raylink.runtime.task.channel_state_handling import (
    TimeoutableBarrier,
    barrier_for_trigger,
    broadcast_priority_barrier,
    unaligned_settings,
)
from raylink.shuffle.barrier_handler import CheckpointBarrierHandler
from raylink.shuffle.channel_state import InputChannelStateCollector, TaskChannelState
from raylink.shuffle.codec import decode_event, encode_event
from raylink.shuffle.elements import CancelCheckpointMarker, CheckpointBarrier
from raylink.state.snapshots import (
    CHANNEL_STATE,
    notify_checkpoint_aborted,
    notify_checkpoint_complete,
    snapshot_operator,
)

__all__ = ["FINISHED_MARK", "SubtaskCheckpointCoordinator", "finished_on_restore"]

#: the key an operator's snapshot carries when its task took it after its end of input
#: (Flink's ``FinishedOperatorSubtaskState``): restored, the operator is not finished again
FINISHED_MARK = "finished"


def finished_on_restore(restore: Optional[dict], chain_configs: Sequence[Any]) -> bool:
    """Every operator of the chain restores from snapshots taken after its end of input."""
    return bool(restore) and all(
        any(restore.get(c.operator_id) or ()) and all(s.get(FINISHED_MARK) for s in restore[c.operator_id] if s)
        for c in chain_configs
    )


class SubtaskCheckpointCoordinator:
    """The checkpoint side of ``owner`` (a StreamTask): see the module doc.

    ``checkpoint_sink(owner, checkpoint_id, snapshots, stats)`` receives every snapshot,
    decline (``snapshots`` None, ``stats["declined"]``) and final-checkpoint request; None:
    the task takes no checkpoints. ``mail`` puts an action into the task's mailbox."""

    def __init__(
        self,
        owner: Any,
        task_name: str,
        chain_configs: Sequence[Any],
        writers: Sequence[Any],
        mail: Callable[[Callable[[], None]], None],
        checkpoint_sink: Optional[Callable[[Any, int, Optional[dict], dict], None]],
        job_parameters: Any,
    ) -> None:
        self._owner = owner
        self._task_name = task_name
        self._chain_configs = list(chain_configs)
        self._writers = writers
        self._mail = mail
        self.checkpoint_sink = checkpoint_sink
        # unaligned checkpoints (execution.checkpointing.unaligned.enabled, aligned-checkpoint-timeout)
        self.unaligned, self.alignment_timeout_ms = unaligned_settings(job_parameters)
        self.barrier_handler: Any = None
        # checkpoint id -> (snapshots, stats, output channel state) until its input channel state is in
        self._pending_unaligned: dict = {}
        # checkpoint id -> TimeoutableBarrier: an aligned barrier with a timeout waiting to leave
        self._pending_timeoutable: dict = {}
        self._sent_early: dict = {}  # checkpoint id -> {(writer, subpartition)} that sent it already
        self._last_acked_timeoutable = 0

    # -- setup (task thread, while the task initialises) ---------------------------------------
    def create_barrier_handler(
        self, inputs: Sequence[Any], on_barrier: Callable[[CheckpointBarrier], None], timer_service: Any
    ) -> CheckpointBarrierHandler:
        """Barriers over every channel of every input (Flink's SingleCheckpointBarrierHandler):
        aligned, and with unaligned checkpoints on unaligned (or alternating, with a timeout),
        persisting the inputs' in-flight buffers. ``on_barrier``: the task's
        ``triggerCheckpointOnBarrier``; ``timer_service`` schedules the alignment-timeout checks."""
        channel_state = None
        if self.unaligned and self.checkpoint_sink is not None:
            for inp in inputs:
                inp.track_partial_records = True
            channel_state = InputChannelStateCollector(inputs, self._inputs_persisted)

        def schedule_alignment_check(delay_ms: int) -> None:
            """The barrier handler asks to look at its alignment again in ``delay_ms`` (timeout)."""
            handler = self.barrier_handler
            timer_service.register_timer(
                timer_service.current_processing_time() + max(1, delay_ms),
                lambda _ts: handler.check_alignment_timeout(),
            )

        self.barrier_handler = CheckpointBarrierHandler.for_inputs(
            inputs,
            on_barrier,
            lambda checkpoint_id, reason: self.abort_checkpoint_on_barrier(checkpoint_id, reason),
            task_name=self._task_name,
            channel_state=channel_state,
            schedule_timeout=schedule_alignment_check if channel_state is not None else None,
        )
        return self.barrier_handler

    def watch_barriers_sent(self) -> None:
        """With aligned checkpoints that time out, learn when a barrier left a subpartition."""
        if not (self.unaligned and self.alignment_timeout_ms > 0 and self.checkpoint_sink is not None):
            return
        for w, writer in enumerate(self._writers):
            for s, sub in enumerate(writer.partition.subpartitions):
                if hasattr(sub, "on_event_polled"):
                    sub.on_event_polled = lambda buffer, w=w, s=s: self._on_event_polled(w, s, buffer)

    # -- checkpoints -----------------------------------------------------------------------------
    def barrier_for_trigger(
        self, checkpoint_id: int, timestamp: int, savepoint: bool, drain: bool = False
    ) -> CheckpointBarrier:
        """The barrier a triggered checkpoint injects (aligned for savepoints)."""
        return barrier_for_trigger(
            checkpoint_id, timestamp, self.unaligned, self.alignment_timeout_ms, savepoint, drain
        )

    def checkpoint_state(self, barrier: CheckpointBarrier, chain: Any, finished: bool, started: float) -> None:
        """Flink's ``checkpointState``: snapshot every operator of ``chain`` (copies only), send
        the barrier on before any later record, and hand the snapshot to the checkpoint sink
        (now, or once its channel state is complete). ``finished``: taken after the task's end
        of input; ``started``: ``time.perf_counter()`` when the task began the checkpoint."""
        cid = barrier.checkpoint_id
        snapshots = {
            config.operator_id: snapshot_operator(operator, cid, barrier.timestamp)
            for operator, config in zip(chain.operators, self._chain_configs)
        }
        if finished:  # taken after the end of input: restored, it stays finished
            for snapshot in snapshots.values():
                snapshot[FINISHED_MARK] = True
        outputs = None
        if barrier.unaligned:  # ahead of the queued output, which becomes channel state
            outputs = broadcast_priority_barrier(self._writers, barrier)
        else:
            for writer in self._writers:
                writer.broadcast_event(barrier)
        handler = self.barrier_handler
        stats = {
            "sync_ms": (time.perf_counter() - started) * 1000.0,
            "alignment_ms": handler.alignment_duration_ns / 1e6 if handler is not None else 0.0,
        }
        if handler is not None:  # the first barrier's arrival here minus its creation (Flink's start delay)
            stats["start_delay_ms"] = handler.checkpoint_start_delay_ns / 1e6
        if barrier.is_timeoutable and self._writers and self.checkpoint_sink is not None:
            self._register_alignment_timer(barrier, snapshots, stats)  # acknowledged once it left or timed out
            return
        if barrier.unaligned:
            stats["unaligned"] = True
            if handler is not None and handler.is_unaligned and handler.current_checkpoint_id == cid:
                # acknowledged once its input channel state is complete (_inputs_persisted)
                self._pending_unaligned[cid] = (snapshots, stats, outputs)
                return
            self._attach_channel_state(snapshots, stats, TaskChannelState([], outputs))
        self._report(cid, snapshots, stats)

    def decline(self, checkpoint_id: int, reason: str) -> None:
        """Report ``checkpoint_id`` declined (the task cannot take it, e.g. it has finished)."""
        if self.checkpoint_sink is not None:
            self.checkpoint_sink(self._owner, checkpoint_id, None, {"declined": reason})

    def abort_checkpoint_on_barrier(self, checkpoint_id: int, reason: str) -> None:
        """Flink's ``abortCheckpointOnBarrier``: drop what the checkpoint holds pending, tell
        downstream tasks to stop waiting for its barrier, and decline it."""
        self._pending_unaligned.pop(checkpoint_id, None)
        pending = self._pending_timeoutable.pop(checkpoint_id, None)
        if pending is not None and pending.timer is not None:
            pending.timer.cancel()
        for writer in self._writers:  # downstream tasks stop waiting for this checkpoint's barrier
            writer.broadcast_event(CancelCheckpointMarker(checkpoint_id))
        self.decline(checkpoint_id, reason)

    def request_final_checkpoint(self) -> None:
        """The task's input ended and its operators finished: it waits for a checkpoint taken
        after that (FLIP-147); the coordinator is told so it can trigger one."""
        self.checkpoint_sink(self._owner, -1, None, {"final_checkpoint_requested": True})

    def notify_checkpoint(self, chain: Any, checkpoint_id: int, complete: bool) -> None:
        """``notifyCheckpointComplete`` / ``notifyCheckpointAborted`` to every operator of ``chain``."""
        notify = notify_checkpoint_complete if complete else notify_checkpoint_aborted
        for operator in chain.operators:
            notify(operator, checkpoint_id)

    def cancel_alignment_timers(self) -> None:
        """The task ends: no pending aligned barrier with a timeout converts any more."""
        for pending in self._pending_timeoutable.values():
            if pending.timer is not None:
                pending.timer.cancel()
        self._pending_timeoutable.clear()

    # -- internals -------------------------------------------------------------------------------
    def _report(self, checkpoint_id: int, snapshots: dict, stats: dict) -> None:
        if self.checkpoint_sink is not None:
            self.checkpoint_sink(self._owner, checkpoint_id, snapshots, stats)

    def _attach_channel_state(self, snapshots: dict, stats: dict, state: TaskChannelState) -> None:
        """Put the task's channel state into its head operator's snapshot (if it holds any)."""
        stats["persisted_bytes"] = state.size_bytes()
        if not state.is_empty():
            snapshots[self._chain_configs[0].operator_id][CHANNEL_STATE] = state

    def _register_alignment_timer(self, barrier: CheckpointBarrier, snapshots: dict, stats: dict) -> None:
        """Flink's alignment timer on the output side: an aligned barrier with a timeout queues
        behind the output; if it has not left every subpartition when its timeout passes, it
        overtakes what is still ahead of it there, which becomes output channel state."""
        pending = TimeoutableBarrier.of(barrier, self._writers, snapshots, stats)
        if not pending.remaining:
            self._attach_channel_state(snapshots, stats, TaskChannelState([], pending.outputs))
            self._report(barrier.checkpoint_id, snapshots, stats)
            return
        cid = barrier.checkpoint_id
        self._pending_timeoutable[cid] = pending
        # its sends counted so far (the readers may have taken it already)
        for w, s in self._sent_early.pop(cid, ()):
            pending.remaining.discard((w, s))
        if not pending.remaining:
            self._finish_timeoutable(cid)
            return
        delay = max(0.001, (barrier.timestamp + barrier.timeout_ms) / 1000 - time.time())
        mail = self._mail
        # a thread, not the processing-time service: that one is quiesced once the operators finished
        timer = pending.timer = threading.Timer(delay, lambda: mail(lambda: self._output_timed_out(cid)))
        timer.daemon = True
        timer.start()

    def _on_event_polled(self, writer: int, subpartition: int, buffer: bytes) -> None:
        """A reader's thread took an event: if it is a timeoutable barrier, tell the task."""
        if len(buffer) > 18:  # a barrier with its alignment (decoding only those; a plain one is 18 bytes)
            event = decode_event(buffer)
            if type(event) is CheckpointBarrier and event.is_timeoutable:
                cid = event.checkpoint_id
                self._mail(lambda: self._barrier_sent(cid, writer, subpartition))

    def _barrier_sent(self, checkpoint_id: int, writer: int, subpartition: int) -> None:
        pending = self._pending_timeoutable.get(checkpoint_id)
        if pending is None:  # taken before the task registered it (a mail after this one does)
            if checkpoint_id > self._last_acked_timeoutable:
                self._sent_early.setdefault(checkpoint_id, set()).add((writer, subpartition))
            return
        pending.remaining.discard((writer, subpartition))
        if not pending.remaining:
            self._finish_timeoutable(checkpoint_id)

    def _output_timed_out(self, checkpoint_id: int) -> None:
        """The alignment timeout passed: the barrier overtakes wherever it still waits."""
        pending = self._pending_timeoutable.get(checkpoint_id)
        if pending is None:
            return
        unaligned = encode_event(pending.barrier.as_unaligned())
        for w, s in sorted(pending.remaining):
            sub = self._writers[w].partition.subpartitions[s]
            overtaken = sub.convert_to_priority(lambda b: unaligned if b == pending.encoded else None)
            if overtaken is not None:
                pending.outputs[w][s] = overtaken
                pending.converted = True
        self._finish_timeoutable(checkpoint_id)

    def _finish_timeoutable(self, checkpoint_id: int) -> None:
        pending = self._pending_timeoutable.pop(checkpoint_id, None)
        if pending is None:
            return
        if pending.timer is not None:
            pending.timer.cancel()
        self._last_acked_timeoutable = max(self._last_acked_timeoutable, checkpoint_id)
        for old in [c for c in self._sent_early if c <= checkpoint_id]:
            del self._sent_early[old]
        if pending.converted:
            pending.stats["unaligned"] = True
        self._attach_channel_state(pending.snapshots, pending.stats, TaskChannelState([], pending.outputs))
        self._report(checkpoint_id, pending.snapshots, pending.stats)

    def _inputs_persisted(self, checkpoint_id: int, inputs: list) -> None:
        """Every barrier of unaligned checkpoint ``checkpoint_id`` is in: its input channel state
        is complete; acknowledge the snapshot taken at the first one."""
        pending = self._pending_unaligned.pop(checkpoint_id, None)
        if pending is None:
            return
        snapshots, stats, outputs = pending
        self._attach_channel_state(snapshots, stats, TaskChannelState(inputs, outputs or []))
        self._report(checkpoint_id, snapshots, stats)
