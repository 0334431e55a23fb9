"""Stream elements and network events.

Mirrors Flink's ``StreamElement`` hierarchy (``Watermark``, ``WatermarkStatus``
— formerly ``StreamStatus`` —, ``LatencyMarker``; ``StreamRecord`` is only used
where a single timestamped record must be an object) and the runtime events
``EndOfPartitionEvent``, ``CheckpointBarrier`` and ``CancelCheckpointMarker``.

Records are *not* wrapped on the hot path: a record is the bare user value, and
a run of timestamped records travels as ``TimestampedRecords(values,
timestamps)`` (two parallel lists). The classes below are small, slotted and
compare by value; ``END_OF_PARTITION``, ``WatermarkStatus.ACTIVE`` and
``WatermarkStatus.IDLE`` are singletons (decoding returns the same objects).

Two families, as in Flink:

* stream elements (``Watermark``, ``WatermarkStatus``, ``LatencyMarker``) are
  written *inline* into data buffers between records;
* events (``CheckpointBarrier``, ``CancelCheckpointMarker``, ``EndOfPartition``)
  travel in a buffer of their own (see ``RecordSerializer.add_event``) and are
  handled by the input gate / the task before any record that follows them.
"""

from __future__ import annotations

from typing import Any, List

LONG_MIN = -(1 << 63)
LONG_MAX = (1 << 63) - 1


class Watermark:
    """Flink's ``Watermark``: event time has reached ``timestamp`` (ms)."""

    __slots__ = ("timestamp",)

    MAX: "Watermark"  # Watermark.MAX_WATERMARK (end of event time)
    MIN: "Watermark"  # Watermark.UNINITIALIZED

    def __init__(self, timestamp: int) -> None:
        self.timestamp = int(timestamp)

    def __eq__(self, other: object) -> bool:
        return type(other) is Watermark and other.timestamp == self.timestamp

    def __hash__(self) -> int:
        return hash((Watermark, self.timestamp))

    def __repr__(self) -> str:
        return f"Watermark({self.timestamp})"

    def __reduce__(self):
        return (Watermark, (self.timestamp,))


Watermark.MAX = Watermark(LONG_MAX)
Watermark.MIN = Watermark(LONG_MIN)


class WatermarkStatus:
    """Flink's ``WatermarkStatus`` (``StreamStatus`` before 1.14): ACTIVE or IDLE.

    Use the singletons ``WatermarkStatus.ACTIVE`` / ``WatermarkStatus.IDLE``;
    ``WatermarkStatus(idle=True)`` returns the IDLE singleton. ``status`` is
    Flink's int code (ACTIVE = 0, IDLE = -1).
    """

    __slots__ = ("idle",)

    ACTIVE: "WatermarkStatus"
    IDLE: "WatermarkStatus"
    ACTIVE_STATUS = 0
    IDLE_STATUS = -1

    def __new__(cls, idle: bool = False) -> "WatermarkStatus":
        existing = cls.__dict__.get("IDLE" if idle else "ACTIVE")
        if isinstance(existing, WatermarkStatus):
            return existing
        obj = super().__new__(cls)
        object.__setattr__(obj, "idle", bool(idle))
        return obj

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("WatermarkStatus is immutable")

    @property
    def is_idle(self) -> bool:
        return self.idle

    @property
    def is_active(self) -> bool:
        return not self.idle

    @property
    def status(self) -> int:
        return self.IDLE_STATUS if self.idle else self.ACTIVE_STATUS

    def __repr__(self) -> str:
        return "WatermarkStatus.IDLE" if self.idle else "WatermarkStatus.ACTIVE"

    def __reduce__(self):
        return (WatermarkStatus, (self.idle,))


WatermarkStatus.ACTIVE = WatermarkStatus(False)
WatermarkStatus.IDLE = WatermarkStatus(True)
StreamStatus = WatermarkStatus  # Flink < 1.14 name


class LatencyMarker:
    """Flink's ``LatencyMarker``: created at a source at ``marked_time`` (ms)."""

    __slots__ = ("marked_time", "operator_id", "subtask_index")

    def __init__(self, marked_time: int, operator_id: str, subtask_index: int) -> None:
        self.marked_time = int(marked_time)
        self.operator_id = str(operator_id)
        self.subtask_index = int(subtask_index)

    def __eq__(self, other: object) -> bool:
        return (
            type(other) is LatencyMarker
            and other.marked_time == self.marked_time
            and other.operator_id == self.operator_id
            and other.subtask_index == self.subtask_index
        )

    def __hash__(self) -> int:
        return hash((LatencyMarker, self.marked_time, self.operator_id, self.subtask_index))

    def __repr__(self) -> str:
        return f"LatencyMarker({self.marked_time}, {self.operator_id!r}, {self.subtask_index})"

    def __reduce__(self):
        return (LatencyMarker, (self.marked_time, self.operator_id, self.subtask_index))


class CheckpointBarrier:
    """Flink's ``CheckpointBarrier`` event (its own buffer, broadcast to all channels).

    Its alignment (Flink's ``CheckpointOptions.AlignmentType``): ``unaligned`` — the
    barrier overtakes queued buffers (a priority event) and the buffers it overtook are
    persisted as channel state; otherwise aligned, and with ``timeout_ms`` > 0
    (``execution.checkpointing.aligned-checkpoint-timeout``) aligned until ``timeout_ms``
    after the checkpoint started (``timestamp``), then unaligned (``as_unaligned``).
    Savepoints are always aligned without a timeout. ``drain``: the barrier of a
    stop-with-savepoint that drains (Flink's ``SavepointType.terminate``): every task it
    reaches ends its operators' input before its snapshot, whether or not the JobMaster's
    trigger reached it first."""

    __slots__ = ("checkpoint_id", "timestamp", "unaligned", "timeout_ms", "drain")

    def __init__(
        self, checkpoint_id: int, timestamp: int, unaligned: bool = False, timeout_ms: int = 0, drain: bool = False
    ) -> None:
        self.checkpoint_id = int(checkpoint_id)
        self.timestamp = int(timestamp)
        self.unaligned = bool(unaligned)
        self.timeout_ms = int(timeout_ms)
        self.drain = bool(drain)

    @property
    def is_timeoutable(self) -> bool:
        """Aligned, switching to unaligned after ``timeout_ms`` (Flink's ``isTimeoutable``)."""
        return not self.unaligned and self.timeout_ms > 0

    def as_unaligned(self) -> "CheckpointBarrier":
        """This checkpoint's barrier once its alignment timed out (Flink's ``asUnaligned``)."""
        return self if self.unaligned else CheckpointBarrier(self.checkpoint_id, self.timestamp, True, 0)

    def __eq__(self, other: object) -> bool:
        return (
            type(other) is CheckpointBarrier
            and other.checkpoint_id == self.checkpoint_id
            and other.timestamp == self.timestamp
            and other.unaligned == self.unaligned
            and other.timeout_ms == self.timeout_ms
            and other.drain == self.drain
        )

    def __hash__(self) -> int:
        return hash(
            (CheckpointBarrier, self.checkpoint_id, self.timestamp, self.unaligned, self.timeout_ms, self.drain)
        )

    def __repr__(self) -> str:
        extra = ", unaligned" if self.unaligned else (f", timeout_ms={self.timeout_ms}" if self.timeout_ms else "")
        if self.drain:
            extra += ", drain"
        return f"CheckpointBarrier({self.checkpoint_id}, {self.timestamp}{extra})"

    def __reduce__(self):
        return (CheckpointBarrier, (self.checkpoint_id, self.timestamp, self.unaligned, self.timeout_ms))


class CancelCheckpointMarker:
    """Flink's ``CancelCheckpointMarker`` event: checkpoint ``checkpoint_id`` was
    cancelled upstream; a task aligning it aborts it (its own buffer, broadcast)."""

    __slots__ = ("checkpoint_id",)

    def __init__(self, checkpoint_id: int) -> None:
        self.checkpoint_id = int(checkpoint_id)

    def __eq__(self, other: object) -> bool:
        return type(other) is CancelCheckpointMarker and other.checkpoint_id == self.checkpoint_id

    def __hash__(self) -> int:
        return hash((CancelCheckpointMarker, self.checkpoint_id))

    def __repr__(self) -> str:
        return f"CancelCheckpointMarker({self.checkpoint_id})"

    def __reduce__(self):
        return (CancelCheckpointMarker, (self.checkpoint_id,))


class EndOfPartition:
    """Flink's ``EndOfPartitionEvent``: the producer subpartition is finished.

    A singleton: ``EndOfPartition() is END_OF_PARTITION``.
    """

    __slots__ = ()
    _instance: "EndOfPartition | None" = None

    def __new__(cls) -> "EndOfPartition":
        inst = cls._instance
        if inst is None:
            inst = super().__new__(cls)
            cls._instance = inst
        return inst

    def __repr__(self) -> str:
        return "END_OF_PARTITION"

    def __reduce__(self):
        return (EndOfPartition, ())


END_OF_PARTITION = EndOfPartition()


class StreamRecord:
    """Flink's ``StreamRecord``: one value plus an optional timestamp.

    Not used on the hot path (runs of bare values are); handy for tests and for
    code that wants an object per record.
    """

    __slots__ = ("value", "timestamp")

    def __init__(self, value: Any, timestamp: "int | None" = None) -> None:
        self.value = value
        self.timestamp = timestamp

    @property
    def has_timestamp(self) -> bool:
        return self.timestamp is not None

    def __eq__(self, other: object) -> bool:
        return type(other) is StreamRecord and other.value == self.value and other.timestamp == self.timestamp

    def __repr__(self) -> str:
        return f"StreamRecord({self.value!r}, {self.timestamp!r})"


class TimestampedRecords:
    """A run of timestamped records: ``values[i]`` carries ``timestamps[i]``.

    What ``RecordDeserializer.feed`` returns for records written with
    ``add_timestamped_record(s)`` (consecutive ones are merged into one run).
    """

    __slots__ = ("values", "timestamps")

    def __init__(self, values: List[Any], timestamps: List[int]) -> None:
        self.values = values
        self.timestamps = timestamps

    def __len__(self) -> int:
        return len(self.values)

    def __iter__(self):
        return zip(self.values, self.timestamps)

    def __eq__(self, other: object) -> bool:
        return (
            type(other) is TimestampedRecords
            and list(other.values) == list(self.values)
            and list(other.timestamps) == list(self.timestamps)
        )

    def __repr__(self) -> str:
        return f"TimestampedRecords({self.values!r}, {self.timestamps!r})"


# The one definition of each group of element types; the shuffle modules build their lookup
# sets from these (``isinstance(x, STREAM_ELEMENT_TYPES)``, ``type(x) in CONTROL_TYPE_SET``).
#: stream elements written inline into data buffers
STREAM_ELEMENT_TYPES = (Watermark, WatermarkStatus, LatencyMarker)
#: events that travel in a buffer of their own
EVENT_TYPES = (CheckpointBarrier, CancelCheckpointMarker, EndOfPartition)
#: everything that is not a record
CONTROL_TYPES = STREAM_ELEMENT_TYPES + EVENT_TYPES
#: ``CONTROL_TYPES`` as a set, for ``type(obj) in CONTROL_TYPE_SET``
CONTROL_TYPE_SET = frozenset(CONTROL_TYPES)


def is_control(obj: Any) -> bool:
    """True for watermarks, statuses, latency markers, barriers, cancel markers, end of partition."""
    return type(obj) in CONTROL_TYPE_SET
