"""The value types the Kafka source's configuration and its runtime share: PyFlink's
``KafkaTopicPartition``, ``KafkaOffsetResetStrategy`` and ``KafkaOffsetsInitializer`` (Flink's
``OffsetsInitializer``: earliest, latest, committed offsets with a reset strategy, a timestamp,
given offsets), Flink's ``Boundedness`` and the ``ConsumerRecord`` a
``KafkaRecordDeserializationSchema`` reads. Immutable; thread-safe.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any, Dict, Optional


class Boundedness(enum.Enum):
    """Whether a source ends (Flink's ``Boundedness``)."""

    BOUNDED = "BOUNDED"
    CONTINUOUS_UNBOUNDED = "CONTINUOUS_UNBOUNDED"


class KafkaTopicPartition:
    """A topic's partition (PyFlink's ``KafkaTopicPartition``)."""

    __slots__ = ("_topic", "_partition")

    def __init__(self, topic: str, partition: int) -> None:
        if not isinstance(topic, str) or not topic:
            raise ValueError(f"KafkaTopicPartition: topic must be a non-empty str, got {topic!r}")
        if not isinstance(partition, int) or partition < 0:
            raise ValueError(f"KafkaTopicPartition: partition must be an int >= 0, got {partition!r}")
        self._topic = topic
        self._partition = partition

    @property
    def topic(self) -> str:
        return self._topic

    @property
    def partition(self) -> int:
        return self._partition

    def __eq__(self, other: Any) -> bool:
        return isinstance(other, KafkaTopicPartition) and (other._topic, other._partition) == (
            self._topic,
            self._partition,
        )

    def __hash__(self) -> int:
        return hash((self._topic, self._partition))

    def __reduce__(self) -> Any:
        return KafkaTopicPartition, (self._topic, self._partition)

    def __repr__(self) -> str:
        return f"{self._topic}-{self._partition}"


class KafkaOffsetResetStrategy(enum.Enum):
    """Where to start when no (valid) offset is known (Kafka's ``OffsetResetStrategy``)."""

    LATEST = 0
    EARLIEST = 1
    NONE = 2


@dataclass(frozen=True)
class KafkaOffsetsInitializer:
    """Starting or stopping offsets of each partition (Flink's ``OffsetsInitializer``):
    ``kind`` is one of ``earliest``, ``latest``, ``committed``, ``timestamp``, ``offsets``."""

    kind: str
    reset_strategy: KafkaOffsetResetStrategy = KafkaOffsetResetStrategy.NONE
    timestamp_ms: Optional[int] = None
    partition_offsets: Optional[Dict[KafkaTopicPartition, int]] = None

    @staticmethod
    def committed_offsets(
        offset_reset_strategy: KafkaOffsetResetStrategy = KafkaOffsetResetStrategy.NONE,
    ) -> "KafkaOffsetsInitializer":
        """The group's committed offsets; without one, ``offset_reset_strategy`` (NONE: the job fails)."""
        if not isinstance(offset_reset_strategy, KafkaOffsetResetStrategy):
            raise TypeError(
                f"KafkaOffsetsInitializer.committed_offsets: expected a KafkaOffsetResetStrategy, "
                f"got {offset_reset_strategy!r}"
            )
        return KafkaOffsetsInitializer("committed", offset_reset_strategy)

    @staticmethod
    def timestamp(timestamp: int) -> "KafkaOffsetsInitializer":
        """The first record whose timestamp is >= ``timestamp`` (ms); the end when there is none."""
        if not isinstance(timestamp, int) or isinstance(timestamp, bool) or timestamp < 0:
            raise ValueError(f"KafkaOffsetsInitializer.timestamp: expected epoch milliseconds >= 0, got {timestamp!r}")
        return KafkaOffsetsInitializer("timestamp", timestamp_ms=timestamp)

    @staticmethod
    def earliest() -> "KafkaOffsetsInitializer":
        return KafkaOffsetsInitializer("earliest")

    @staticmethod
    def latest() -> "KafkaOffsetsInitializer":
        return KafkaOffsetsInitializer("latest")

    @staticmethod
    def offsets(
        offsets: Dict[KafkaTopicPartition, int],
        offset_reset_strategy: KafkaOffsetResetStrategy = KafkaOffsetResetStrategy.EARLIEST,
    ) -> "KafkaOffsetsInitializer":
        """The given offset of each listed partition; for other partitions, and offsets out of
        range, ``offset_reset_strategy``."""
        checked: Dict[KafkaTopicPartition, int] = {}
        for tp, offset in dict(offsets).items():
            if not isinstance(tp, KafkaTopicPartition):
                raise TypeError(f"KafkaOffsetsInitializer.offsets: keys must be KafkaTopicPartition, got {tp!r}")
            if not isinstance(offset, int) or offset < 0:
                raise ValueError(
                    f"KafkaOffsetsInitializer.offsets: offset of {tp!r} must be an int >= 0, got {offset!r}"
                )
            checked[tp] = offset
        return KafkaOffsetsInitializer("offsets", offset_reset_strategy, partition_offsets=checked)


@dataclass(frozen=True)
class ConsumerRecord:
    """One record as Kafka delivered it (Kafka's ``ConsumerRecord``), for a
    :class:`KafkaRecordDeserializationSchema`."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    key: Optional[bytes]
    value: Optional[bytes]
    headers: Optional[list] = None


__all__ = [
    "Boundedness",
    "ConsumerRecord",
    "KafkaOffsetResetStrategy",
    "KafkaOffsetsInitializer",
    "KafkaTopicPartition",
]
