"""Checkpoint barrier handling: Flink's ``SingleCheckpointBarrierHandler`` in its aligned
states (``WaitingForFirstBarrier`` / ``CollectingBarriers``) and its unaligned and
alternating ones (``AlternatingWaitingForFirstBarrierUnaligned`` /
``AlternatingCollectingBarriersUnaligned``), as used by ``CheckpointedInputGate``.

A ``CheckpointBarrierHandler`` serves one task with one or two inputs; the
channels of all its gates are numbered ``(input index, channel index within
that input)`` — the channel index is the input's flattened one (a
``UnionInputGate``'s). The task calls it for every event the network input
returns: ``process_barrier``, ``process_cancellation_marker``,
``process_end_of_partition`` (or ``process_event`` for any of them).

Contract (exactly-once alignment):

* the first barrier of checkpoint n starts the alignment; every channel that
  delivers barrier n is then blocked (``block(input, channel)``: the gate returns
  nothing more of it) until all channels that were open when n started have
  delivered it; the channel delivering the last missing barrier is not blocked;
* then ``trigger(barrier)`` runs — before any record behind a barrier was
  returned to the task — and after it returns (or raises) the blocked channels
  are released with ``resume()``; with a single open channel the checkpoint
  triggers at once and nothing is blocked;
* a barrier of a newer checkpoint while n is aligning aborts n
  (``abort(n, CheckpointFailureReason.CHECKPOINT_DECLINED_SUBSUMED)``, channels
  resumed) and starts the newer one; a barrier of an older, completed or
  aborted checkpoint is ignored (its channel is not blocked);
* a ``CancelCheckpointMarker`` for the aligning checkpoint or a newer one aborts
  it (``CHECKPOINT_DECLINED_ON_CANCELLATION_BARRIER``); later barriers of that
  checkpoint are ignored. If it names a newer checkpoint than the one aligning,
  the aligning one is aborted as subsumed first (it can no longer complete here);
* a channel's ``EndOfPartition`` (Flink 2: checkpoints after tasks finished)
  counts as its barrier for the aligning checkpoint — if it was the last
  missing one, the checkpoint triggers — and the channel is left out of later
  checkpoints. With ``checkpoint_after_tasks_finished=False`` it aborts the
  aligning checkpoint (``CHECKPOINT_DECLINED_INPUT_END_OF_STREAM``) instead.

Unaligned (``barrier.unaligned``; needs a ``channel_state`` collector, see
``shuffle.channel_state.InputChannelStateCollector``):

* the first barrier of checkpoint n on any channel starts persisting every other open
  channel (``channel_state.start``) and triggers at once — ``trigger(barrier)`` with the
  unaligned barrier: the task snapshots and sends it on ahead of its queued output;
  nothing is blocked;
* every later barrier n (or a channel's ``EndOfPartition``) stops persisting its channel
  (``channel_state.stop``); with the last one the checkpoint's input channel state is
  complete (``channel_state.finish``); an abort (newer barrier, cancel marker) calls
  ``channel_state.abort`` and ``abort`` as above;
* an aligned barrier with a timeout (``barrier.is_timeoutable``, Flink's
  ``aligned-checkpoint-timeout``) aligns as above until ``timeout_ms`` after the
  checkpoint started (the barrier's timestamp): a barrier arriving later, or the check
  ``schedule_timeout(delay_ms)`` asked for (``check_alignment_timeout``), switches it to
  unaligned — the blocked channels are resumed (their barriers are in) and the others are
  persisted until theirs arrive; an unaligned barrier of the checkpoint on any channel
  switches it too.

Metrics (Flink's ``CheckpointBarrierHandler``): ``alignment_duration_ns`` (the
alignment in progress so far, else the last one; 0 after an abort) and
``checkpoint_start_delay_ns`` (first barrier received minus the barrier's
creation timestamp). Inside ``trigger`` both describe the triggering
checkpoint.

Thread safety: none — every method belongs to the task thread (Flink's
``@NotThreadSafe``). No Ray.
"""

from __future__ import annotations

import enum
import time
from typing import Any, Callable, List, Optional, Sequence, Set, Tuple

from raylink.shuffle.elements import CancelCheckpointMarker, CheckpointBarrier, EndOfPartition

__all__ = ["CheckpointBarrierHandler", "CheckpointFailureReason"]


class CheckpointFailureReason(enum.StrEnum):
    """Why a task aborted (declined) a checkpoint during alignment; the values are
    Flink's ``CheckpointFailureReason`` names (``message`` explains them)."""

    CHECKPOINT_DECLINED_SUBSUMED = "CHECKPOINT_DECLINED_SUBSUMED"
    CHECKPOINT_DECLINED_ON_CANCELLATION_BARRIER = "CHECKPOINT_DECLINED_ON_CANCELLATION_BARRIER"
    CHECKPOINT_DECLINED_INPUT_END_OF_STREAM = "CHECKPOINT_DECLINED_INPUT_END_OF_STREAM"

    @property
    def message(self) -> str:
        return _MESSAGES[self]


_MESSAGES = {
    CheckpointFailureReason.CHECKPOINT_DECLINED_SUBSUMED: "a barrier (or cancel marker) of a newer checkpoint arrived before this one was aligned",
    CheckpointFailureReason.CHECKPOINT_DECLINED_ON_CANCELLATION_BARRIER: "an upstream task cancelled the checkpoint (CancelCheckpointMarker)",
    CheckpointFailureReason.CHECKPOINT_DECLINED_INPUT_END_OF_STREAM: "an input channel ended before the checkpoint was aligned",
}


def _wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


class CheckpointBarrierHandler:
    """Aligns the checkpoint barriers of all input channels of one task.

    ``num_channels_per_input``: channels of each input (one entry per input).
    ``trigger(barrier)``: snapshot the task and forward the barrier (all barriers
    are in). ``block(input, channel)`` / ``resume()``: stop returning data of a
    channel / resume every blocked channel (``InputGate.block_channel`` /
    ``resume_consumption``; ``for_inputs`` wires them). ``abort(checkpoint_id,
    reason)``: the task declines that checkpoint (``reason`` is a
    ``CheckpointFailureReason``, a str). ``clock_ns`` (monotonic) and
    ``wall_clock_ms`` (the barriers' timestamp clock) are injectable for tests.
    """

    def __init__(
        self,
        num_channels_per_input: Sequence[int],
        trigger: Callable[[CheckpointBarrier], None],
        block: Callable[[int, int], None],
        resume: Callable[[], None],
        abort: Callable[[int, str], None],
        *,
        checkpoint_after_tasks_finished: bool = True,
        task_name: str = "",
        clock_ns: Callable[[], int] = time.perf_counter_ns,
        wall_clock_ms: Callable[[], int] = _wall_clock_ms,
        channel_state: Any = None,
        schedule_timeout: Optional[Callable[[int], None]] = None,
    ) -> None:
        counts = list(num_channels_per_input)
        if not counts:
            raise ValueError(f"{task_name or 'task'}: a barrier handler needs at least one input")
        for i, n in enumerate(counts):
            if type(n) is not int or n < 1:
                raise ValueError(f"{task_name or 'task'}: input {i} must have at least one channel, got {n!r}")
        self.task_name = task_name
        self.num_channels_per_input: Tuple[int, ...] = tuple(counts)
        self._offsets: List[int] = []
        total = 0
        for n in counts:
            self._offsets.append(total)
            total += n
        self.num_channels = total
        self._trigger = trigger
        self._block = block
        self._resume = resume
        self._abort = abort
        self.checkpoint_after_tasks_finished = checkpoint_after_tasks_finished
        self._clock_ns = clock_ns
        self._wall_clock_ms = wall_clock_ms
        self.channel_state = channel_state
        self._schedule_timeout = schedule_timeout
        self._unaligned = False  # the pending checkpoint triggered unaligned and collects barriers

        self._finished = bytearray(total)  # flat index -> channel delivered EndOfPartition
        self._num_open = total
        self._current_id = -1  # the checkpoint aligning, or the last one started
        self._last_closed_id = -1  # the last checkpoint completed or aborted here
        self._pending_barrier: Optional[CheckpointBarrier] = None
        self._aligned: Set[int] = set()  # flat indices that delivered the pending barrier (or ended)
        self._target = 0  # channels open when the pending checkpoint started
        self._blocked: List[Tuple[int, int]] = []
        self._alignment_start_ns: Optional[int] = None
        self._last_alignment_ns = 0
        self._start_delay_ns = 0

    @classmethod
    def for_inputs(
        cls,
        inputs: Sequence[Any],
        trigger: Callable[[CheckpointBarrier], None],
        abort: Callable[[int, str], None],
        **kwargs: Any,
    ) -> "CheckpointBarrierHandler":
        """A handler over network inputs (``StreamTaskNetworkInput``s, or gates): it blocks
        and resumes their channels itself."""
        inputs = list(inputs)

        def block(input_index: int, channel: int) -> None:
            inputs[input_index].block_channel(channel)

        def resume() -> None:
            for inp in inputs:
                inp.resume_consumption()

        counts = [getattr(inp, "gate", inp).num_channels for inp in inputs]
        return cls(counts, trigger, block, resume, abort, **kwargs)

    # -- events ----------------------------------------------------------------------------
    def process_event(self, event: Any, input_index: int, channel: int) -> None:
        """Dispatch a ``CheckpointBarrier``, ``CancelCheckpointMarker`` or ``EndOfPartition``
        (anything else is ignored)."""
        t = type(event)
        if t is CheckpointBarrier:
            self.process_barrier(event, input_index, channel)
        elif t is CancelCheckpointMarker:
            self.process_cancellation_marker(event, input_index, channel)
        elif t is EndOfPartition:
            self.process_end_of_partition(input_index, channel)

    def process_barrier(self, barrier: CheckpointBarrier, input_index: int, channel: int) -> None:
        """Channel ``channel`` of input ``input_index`` delivered ``barrier``."""
        flat = self._flat(input_index, channel)
        cid = barrier.checkpoint_id
        if cid < self._current_id or (cid == self._current_id and not self.is_checkpoint_pending):
            return  # obsolete: completed, aborted or subsumed here
        if cid > self._current_id:
            self._start(barrier)
        if self._unaligned:
            self._collect_unaligned(flat, input_index, channel)
            return
        if barrier.unaligned or (barrier.is_timeoutable and self._timed_out(barrier)):
            self._switch_to_unaligned(flat)
            return
        first = not self._aligned
        self._mark_aligned(flat, input_index, channel, barrier, True)
        if first and barrier.is_timeoutable and self.is_checkpoint_pending and self._schedule_timeout is not None:
            remaining = barrier.timestamp + barrier.timeout_ms - self._wall_clock_ms()
            self._schedule_timeout(max(0, remaining))

    def process_cancellation_marker(self, marker: CancelCheckpointMarker, input_index: int, channel: int) -> None:
        """An upstream task cancelled checkpoint ``marker.checkpoint_id``."""
        self._flat(input_index, channel)  # validates
        cid = marker.checkpoint_id
        pending = self.is_checkpoint_pending
        if cid > self._current_id:
            if pending:
                self._abort_checkpoint(self._current_id, CheckpointFailureReason.CHECKPOINT_DECLINED_SUBSUMED)
            self._abort_checkpoint(cid, CheckpointFailureReason.CHECKPOINT_DECLINED_ON_CANCELLATION_BARRIER)
        elif cid == self._current_id and pending:
            self._abort_checkpoint(cid, CheckpointFailureReason.CHECKPOINT_DECLINED_ON_CANCELLATION_BARRIER)

    def process_end_of_partition(self, input_index: int, channel: int) -> None:
        """Channel ``channel`` of input ``input_index`` is finished (idempotent)."""
        flat = self._flat(input_index, channel)
        if self._finished[flat]:
            return
        self._finished[flat] = 1
        self._num_open -= 1
        if not self.is_checkpoint_pending:
            return
        if not self.checkpoint_after_tasks_finished:
            self._abort_checkpoint(self._current_id, CheckpointFailureReason.CHECKPOINT_DECLINED_INPUT_END_OF_STREAM)
            return
        if self._unaligned:
            self._collect_unaligned(flat, input_index, channel)
            return
        self._mark_aligned(flat, input_index, channel, self._pending_barrier, False)

    def check_alignment_timeout(self) -> None:
        """The alignment of an aligned checkpoint with a timeout may have timed out (the check
        ``schedule_timeout`` asked for): switch it to unaligned if so."""
        barrier = self._pending_barrier
        if self.is_checkpoint_pending and not self._unaligned and barrier is not None and barrier.is_timeoutable:
            if self._timed_out(barrier):
                self._switch_to_unaligned(None)
            elif self._schedule_timeout is not None:
                self._schedule_timeout(max(1, barrier.timestamp + barrier.timeout_ms - self._wall_clock_ms()))

    # -- state -----------------------------------------------------------------------------
    @property
    def current_checkpoint_id(self) -> int:
        """The checkpoint aligning, or the latest one seen (-1 before any)."""
        return self._current_id

    @property
    def is_checkpoint_pending(self) -> bool:
        """An alignment is in progress."""
        return self._current_id != self._last_closed_id and self._current_id >= 0

    @property
    def is_unaligned(self) -> bool:
        """The pending checkpoint was triggered unaligned and waits for its other barriers."""
        return self._unaligned

    @property
    def num_open_channels(self) -> int:
        """Channels that have not delivered EndOfPartition."""
        return self._num_open

    @property
    def aligned_channels(self) -> List[Tuple[int, int]]:
        """``(input, channel)`` of the channels the pending checkpoint already has."""
        return sorted(self._unflat(f) for f in self._aligned)

    @property
    def blocked_channels(self) -> List[Tuple[int, int]]:
        """``(input, channel)`` of the channels this handler blocked (in blocking order)."""
        return list(self._blocked)

    @property
    def alignment_duration_ns(self) -> int:
        """The alignment in progress so far, else the last checkpoint's (0 after an abort)."""
        start = self._alignment_start_ns
        if start is not None:
            return self._clock_ns() - start
        return self._last_alignment_ns

    @property
    def checkpoint_start_delay_ns(self) -> int:
        """Delay between the creation of the latest checkpoint's barrier and its arrival here."""
        return self._start_delay_ns

    # -- internals -------------------------------------------------------------------------
    def _flat(self, input_index: int, channel: int) -> int:
        counts = self.num_channels_per_input
        if not 0 <= input_index < len(counts):
            raise IndexError(f"{self.task_name or 'task'}: no input {input_index} (the task has {len(counts)})")
        if not 0 <= channel < counts[input_index]:
            raise IndexError(
                f"{self.task_name or 'task'}: input {input_index} has no channel {channel} "
                f"(it has {counts[input_index]})"
            )
        return self._offsets[input_index] + channel

    def _unflat(self, flat: int) -> Tuple[int, int]:
        for i in range(len(self._offsets) - 1, -1, -1):
            if flat >= self._offsets[i]:
                return i, flat - self._offsets[i]
        raise IndexError(flat)

    def _start(self, barrier: CheckpointBarrier) -> None:
        """The first barrier (or announcement) of a newer checkpoint."""
        if self.is_checkpoint_pending:
            self._abort_checkpoint(self._current_id, CheckpointFailureReason.CHECKPOINT_DECLINED_SUBSUMED)
        self._current_id = barrier.checkpoint_id
        self._pending_barrier = barrier
        self._aligned.clear()
        self._target = self._num_open

    def _mark_aligned(self, flat: int, input_index: int, channel: int, barrier: CheckpointBarrier, block: bool) -> None:
        aligned = self._aligned
        if flat in aligned:
            return  # a second barrier of the same checkpoint on one channel
        aligned.add(flat)
        if len(aligned) == 1:  # alignment starts
            self._start_delay_ns = 1_000_000 * max(0, self._wall_clock_ms() - barrier.timestamp)
            self._last_alignment_ns = 0
            self._alignment_start_ns = self._clock_ns() if self._target > 1 else None
        if len(aligned) < self._target:
            if block:
                self._block(input_index, channel)
                self._blocked.append((input_index, channel))
            return
        # all barriers are in
        start = self._alignment_start_ns
        if start is not None:
            self._last_alignment_ns = self._clock_ns() - start
            self._alignment_start_ns = None
        self._last_closed_id = self._current_id
        self._pending_barrier = None
        aligned.clear()
        try:
            self._trigger(barrier)
        finally:
            self._resume_blocked()

    def _timed_out(self, barrier: CheckpointBarrier) -> bool:
        return self._wall_clock_ms() - barrier.timestamp >= barrier.timeout_ms

    def _switch_to_unaligned(self, flat: Optional[int]) -> None:
        """Trigger the pending checkpoint unaligned now (its first barrier is unaligned, or its
        alignment timed out); ``flat``: the channel whose barrier arrived (None: a timer)."""
        if self.channel_state is None:
            raise RuntimeError(
                f"{self.task_name or 'task'}: an unaligned checkpoint barrier reached a task without channel state "
                f"(execution.checkpointing.unaligned.enabled is not set for it)"
            )
        barrier = self._pending_barrier
        cid = self._current_id
        aligned = self._aligned
        if not aligned:
            self._start_delay_ns = 1_000_000 * max(0, self._wall_clock_ms() - barrier.timestamp)
        if flat is not None:
            aligned.add(flat)
        start = self._alignment_start_ns
        self._last_alignment_ns = self._clock_ns() - start if start is not None else 0
        self._alignment_start_ns = None
        self._unaligned = True
        self._resume_blocked()  # their barriers are in: what follows is after the checkpoint
        finished = self._finished
        open_channels = [self._unflat(f) for f in range(self.num_channels) if not finished[f]]
        self.channel_state.start(cid, open_channels)
        for f in sorted(aligned):
            self.channel_state.stop(cid, *self._unflat(f))
        self._trigger(barrier.as_unaligned())
        if self._unaligned and self._current_id == cid and len(aligned) >= self._target:
            self._finish_unaligned()

    def _collect_unaligned(self, flat: int, input_index: int, channel: int) -> None:
        aligned = self._aligned
        if flat in aligned:
            return
        aligned.add(flat)
        self.channel_state.stop(self._current_id, input_index, channel)
        if len(aligned) >= self._target:
            self._finish_unaligned()

    def _finish_unaligned(self) -> None:
        cid = self._current_id
        self._last_closed_id = cid
        self._pending_barrier = None
        self._aligned.clear()
        self._unaligned = False
        self.channel_state.finish(cid)

    def _abort_checkpoint(self, checkpoint_id: int, reason: CheckpointFailureReason) -> None:
        if self._unaligned:
            self._unaligned = False
            self.channel_state.abort(self._current_id)
        self._current_id = max(self._current_id, checkpoint_id)
        self._last_closed_id = max(self._last_closed_id, checkpoint_id)
        self._pending_barrier = None
        self._aligned.clear()
        self._target = 0
        self._alignment_start_ns = None
        self._last_alignment_ns = 0
        self._resume_blocked()
        self._abort(checkpoint_id, reason)

    def _resume_blocked(self) -> None:
        if self._blocked:
            self._blocked.clear()
            self._resume()

    def __repr__(self) -> str:
        return (
            f"CheckpointBarrierHandler({self.task_name!r}, checkpoint={self._current_id}, "
            f"pending={self.is_checkpoint_pending}, aligned={len(self._aligned)}/{self._target}, "
            f"open={self._num_open}/{self.num_channels})"
        )
