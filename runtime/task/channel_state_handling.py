"""What a subtask does for unaligned checkpoints besides its barrier handler — the channel
state parts of Flink's ``SubtaskCheckpointCoordinatorImpl`` (which barrier a trigger
injects, the priority barrier and the output channel state it records) and of
``StreamTask``'s recovery (``restoreChannelState``: recovered input buffers replayed, and
recovered output buffers re-sent, before anything new).

* :func:`barrier_for_trigger` — the barrier a source (or a task at its end of input) injects:
  aligned for savepoints and when ``execution.checkpointing.unaligned.enabled`` is off,
  unaligned, or aligned with a timeout (``execution.checkpointing.aligned-checkpoint-timeout``).
* :func:`broadcast_priority_barrier` — the writers flush, then the barrier goes to the head
  of every subpartition; returns the output channel state (the data buffers it overtook).
* :class:`TimeoutableBarrier` — an aligned barrier with a timeout the task sent, waiting to
  leave its subpartitions; what its conversion at the timeout overtook.
* :func:`restore_channel_state` — a restored task's channel state: refused with a
  :class:`~raylink.state.snapshots.StateRestoreError` naming the operator when the
  checkpoint holds in-flight data and the task's parallelism or channels changed (as
  Flink 1.x refused rescaling unaligned checkpoints), else the inputs replay their buffers
  first and the output buffers are queued ahead of anything new.

Task thread only. No Ray.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, List, Optional, Sequence

from raylink.core.options import CheckpointingOptions, read_option
from raylink.shuffle.channel_state import TaskChannelState
from raylink.shuffle.codec import encode_event
from raylink.shuffle.elements import CheckpointBarrier
from raylink.state.snapshots import CHANNEL_STATE, StateRestoreError

__all__ = [
    "SAVEPOINT",
    "barrier_for_trigger",
    "broadcast_priority_barrier",
    "restore_channel_state",
    "unaligned_settings",
]

#: the ``stop`` of a trigger that is a savepoint without stopping the job (its barrier is aligned)
SAVEPOINT = "savepoint"


@dataclass
class TimeoutableBarrier:
    """An aligned barrier with a timeout a task sent, until it has left every subpartition
    (``remaining``: ``(writer, subpartition)`` still holding it) or its timeout converted it;
    ``outputs`` collects what it overtook then (output channel state)."""

    barrier: CheckpointBarrier
    encoded: bytes
    snapshots: dict
    stats: dict
    remaining: set
    outputs: List[List[List[Any]]] = field(default_factory=list)
    converted: bool = False
    timer: Any = None  # the threading.Timer of its timeout

    @classmethod
    def of(
        cls, barrier: CheckpointBarrier, writers: Sequence[Any], snapshots: dict, stats: dict
    ) -> "TimeoutableBarrier":
        pipelined = [w.partition.partition_type.is_pipelined for w in writers]
        return cls(
            barrier,
            encode_event(barrier),
            snapshots,
            stats,
            {
                (w, s)
                for w, writer in enumerate(writers)
                if pipelined[w]
                for s in range(writer.partition.num_subpartitions)
            },
            [[[] for _ in range(writer.partition.num_subpartitions)] for writer in writers],
        )


def unaligned_settings(job_parameters: Any) -> tuple:
    """``(unaligned enabled, aligned checkpoint timeout ms)`` of a job."""
    enabled = bool(read_option(job_parameters, CheckpointingOptions.ENABLE_UNALIGNED))
    timeout = read_option(job_parameters, CheckpointingOptions.ALIGNED_CHECKPOINT_TIMEOUT) if enabled else 0
    return enabled, int(timeout or 0)


def barrier_for_trigger(
    checkpoint_id: int, timestamp: int, unaligned: bool, timeout_ms: int, savepoint: bool, drain: bool = False
) -> CheckpointBarrier:
    """The barrier of a triggered checkpoint (Flink's ``CheckpointOptions.forConfig``); a
    savepoint's is aligned, and marked ``drain`` for a stop-with-savepoint that drains."""
    if savepoint or not unaligned:
        return CheckpointBarrier(checkpoint_id, timestamp, drain=savepoint and drain)
    if timeout_ms > 0:
        return CheckpointBarrier(checkpoint_id, timestamp, False, timeout_ms)
    return CheckpointBarrier(checkpoint_id, timestamp, True)


def broadcast_priority_barrier(writers: Sequence[Any], barrier: CheckpointBarrier) -> List[List[List[Any]]]:
    """Send ``barrier`` ahead of every queued buffer of every writer's partition (after a
    flush, so partial buffers are queued too); the data buffers it overtook per writer and
    subpartition: the output channel state."""
    buffer = encode_event(barrier)
    out = []
    for writer in writers:
        writer.flush_all()
        out.append(writer.partition.broadcast_priority_event(buffer))
    return out


def restore_channel_state(
    task_name: str,
    operator_name: str,
    snapshots: Optional[Sequence[Optional[dict]]],
    parallelism: int,
    subtask_index: int,
    inputs: Sequence[Any],
    writers: Sequence[Any],
) -> Optional[TaskChannelState]:
    """Hand a restored task's channel state to its inputs and output partitions (see the
    module doc); ``snapshots``: its head operator's snapshots of every old subtask. Returns
    what was restored (None: nothing in flight)."""
    states = [s.get(CHANNEL_STATE) if s else None for s in (snapshots or ())]
    if not any(state is not None and not state.is_empty() for state in states):
        return None
    what = "the checkpoint"
    advice = (
        "restore it at the parallelism it was taken with, or take a savepoint (always aligned) of that "
        "job and start from the savepoint"
    )
    if len(states) != parallelism:
        raise StateRestoreError(
            f"Failed to rollback to {what}: operator {operator_name!r} ({task_name}) was checkpointed unaligned "
            f"with in-flight data at parallelism {len(states)} and cannot restore it at parallelism {parallelism} "
            f"(unaligned checkpoints are not rescaled); {advice}."
        )
    state = states[subtask_index] or TaskChannelState()
    in_layout = [getattr(inp, "gate", inp).num_channels for inp in inputs]
    out_layout = [w.partition.num_subpartitions for w in writers]
    if (state.inputs and state.input_layout != in_layout) or (state.outputs and state.output_layout != out_layout):
        raise StateRestoreError(
            f"Failed to rollback to {what}: operator {operator_name!r} ({task_name}) was checkpointed unaligned "
            f"with in-flight data over channels {state.input_layout} in / {state.output_layout} out, and now has "
            f"{in_layout} in / {out_layout} out (a neighbour's parallelism or the partitioning changed; unaligned "
            f"checkpoints are not rescaled); {advice}."
        )
    for inp, channels in zip(inputs, state.inputs):
        inp.recover(channels)
    for writer, subpartitions in zip(writers, state.outputs):
        partition = writer.partition
        for index, buffers in enumerate(subpartitions):
            if buffers:
                sink = partition.sink(index)
                for buffer in buffers:
                    sink(buffer, False)
    return state
