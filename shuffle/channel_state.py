"""Channel state of unaligned checkpoints: the in-flight buffers a task persists with its
snapshot — Flink's ``ChannelStateWriter`` (what one checkpoint collected) and
``InputChannelInfo`` / ``ResultSubpartitionInfo`` layout, with the ``ChannelStatePersister``
part living in ``StreamTaskNetworkInput``.

For checkpoint n a task records, per input channel, the data it had not processed when it
took its snapshot and that comes before barrier n on that channel: the start of an element
its deserializer holds (``PartialRecord``: the buffers read since the channel was last
between two elements), the buffers it reads from the channel until
barrier n arrives there, and the received buffers barrier n overtook in the channel; per
output subpartition, the finished buffers barrier n overtook there
(``PipelinedSubpartition.add_priority_event``). Restored, the task feeds each input
channel's buffers to that channel's deserializer before anything new and queues each
subpartition's buffers ahead of anything it emits, so every element in flight at the
checkpoint is processed once.

``TaskChannelState`` is what a snapshot holds (under ``state.snapshots.CHANNEL_STATE`` in
the task's head operator); ``InputChannelStateCollector`` collects one checkpoint's input
side over a task's network inputs for the ``CheckpointBarrierHandler``.

Thread safety: the task thread only. No Ray.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

__all__ = ["PartialRecord", "TaskChannelState", "InputChannelStateCollector", "buffer_size"]


@dataclass(frozen=True)
class PartialRecord:
    """The buffers a channel's deserializer read since it last stood between two elements,
    the last of them ending inside an element it has not completed. Replayed, they are fed
    to a fresh deserializer and what they yield is dropped (it was processed before the
    checkpoint), which leaves it holding the start of that element again."""

    buffers: Tuple[bytes, ...]

    def __len__(self) -> int:
        return sum(map(len, self.buffers))


def buffer_size(item: Any) -> int:
    """Bytes of one persisted item (a data buffer, an in-process ``ObjectBuffer``'s nominal
    size, or a ``PartialRecord``)."""
    return len(item)


@dataclass
class TaskChannelState:
    """One subtask's in-flight data of one checkpoint.

    ``inputs[i][c]``: items of channel ``c`` of input ``i`` (``PartialRecord`` first, then
    buffers), oldest first; ``outputs[w][s]``: buffers of subpartition ``s`` of the task's
    ``w``-th record writer, oldest first."""

    inputs: List[List[List[Any]]] = field(default_factory=list)
    outputs: List[List[List[Any]]] = field(default_factory=list)

    def is_empty(self) -> bool:
        return not any(b for inp in self.inputs for b in inp) and not any(b for out in self.outputs for b in out)

    def size_bytes(self) -> int:
        """Persisted bytes (Flink's checkpointed "persisted data")."""
        total = 0
        for side in (self.inputs, self.outputs):
            for channels in side:
                for items in channels:
                    total += sum(map(buffer_size, items))
        return total

    @property
    def input_layout(self) -> List[int]:
        return [len(channels) for channels in self.inputs]

    @property
    def output_layout(self) -> List[int]:
        return [len(subpartitions) for subpartitions in self.outputs]


class InputChannelStateCollector:
    """Collects the input channel state of the checkpoint a ``CheckpointBarrierHandler``
    handles unaligned, over a task's ``StreamTaskNetworkInput``s.

    ``start(id, channels)``: the task snapshots now; every listed ``(input, channel)`` starts
    persisting (its deserializer's partial element first). ``stop(id, input, channel)``:
    barrier ``id`` arrived there (or the channel ended): add what it overtook, stop
    persisting. ``finish(id)``: all barriers are in: ``on_complete(id, inputs)`` gets
    ``inputs[i][c]`` for every channel. ``abort(id)``: forget it.
    """

    def __init__(self, inputs: Sequence[Any], on_complete: Callable[[int, List[List[List[Any]]]], None]) -> None:
        self.inputs = list(inputs)
        self._on_complete = on_complete
        self._checkpoint_id: Optional[int] = None
        self._collected: Dict[Tuple[int, int], List[Any]] = {}

    def start(self, checkpoint_id: int, channels: Sequence[Tuple[int, int]]) -> None:
        if self._checkpoint_id is not None:
            self.abort(self._checkpoint_id)
        self._checkpoint_id = checkpoint_id
        self._collected = {}
        by_input: Dict[int, List[int]] = {}
        for i, c in channels:
            by_input.setdefault(i, []).append(c)
        for i, chans in by_input.items():
            self.inputs[i].start_persisting(checkpoint_id, chans)

    def stop(self, checkpoint_id: int, input_index: int, channel: int) -> None:
        if checkpoint_id != self._checkpoint_id:
            return
        items = self.inputs[input_index].stop_persisting(checkpoint_id, channel)
        if items:
            self._collected[(input_index, channel)] = items

    def finish(self, checkpoint_id: int) -> None:
        if checkpoint_id != self._checkpoint_id:
            return
        collected = self._collected
        self._checkpoint_id = None
        self._collected = {}
        for inp in self.inputs:
            inp.abort_persisting()  # channels that ended without data are still open here
        state = [[collected.get((i, c), []) for c in range(_num_channels(inp))] for i, inp in enumerate(self.inputs)]
        self._on_complete(checkpoint_id, state)

    def abort(self, checkpoint_id: int) -> None:
        if checkpoint_id != self._checkpoint_id:
            return
        self._checkpoint_id = None
        self._collected = {}
        for inp in self.inputs:
            inp.abort_persisting()


def _num_channels(inp: Any) -> int:
    return getattr(inp, "gate", inp).num_channels
