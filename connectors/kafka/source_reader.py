"""The runtime of :class:`~raylink.connectors.kafka.source.KafkaSource`: Flink's FLIP-27 Kafka
source -- ``KafkaSourceEnumerator``'s split ownership and partition discovery,
``KafkaPartitionSplit`` and ``KafkaSourceReader`` -- as one source operator per subtask.

**Splits.** Every partition of the subscription is a :class:`KafkaPartitionSplit` (topic,
partition, next offset, stop offset). Flink's enumerator hands each new split to subtask
``getSplitOwner`` = ``(((topic.hashCode() * 31) & 0x7FFFFFFF) % p + partition) % p``; that
owner is a pure function, so here every subtask lists the partitions itself (through its
consumer's metadata) and takes the ones it owns -- the same assignment without a coordinator.
Partitions found at the first discovery start at the builder's starting offsets; partitions
that appear later (``partition.discovery.interval.ms``, default 5 min when unbounded, off when
bounded) start at the earliest offset, as in Flink. Offsets are resolved to numbers when a
split is created (earliest/latest from the partition's watermarks, committed offsets of the
group with the reset strategy, offsets by timestamp, given offsets), so a checkpoint holds
exact positions.

**Reading.** One confluent-kafka ``Consumer`` per subtask, manually assigned its splits. The
task calls :meth:`KafkaSourceOperator.emit_next` only while its output has buffers; each call
consumes up to ``max_records`` records and emits them in runs of one partition (one hand-over
per run, deserialized in one pass; see :meth:`KafkaSourceOperator._emit`). Records leave per
partition in offset order with their Kafka timestamps.

**Back pressure.** When the output has no buffer the task tells the reader
(:meth:`KafkaSourceOperator.output_blocked`); if it is still blocked ``PAUSE_AFTER_MS`` later,
the reader pauses its partitions (Flink's ``KafkaSourceReader`` pauses splits) and resumes them
at the next ``emit_next``. A pause makes librdkafka drop what it pre-fetched and fetch nothing
more, so a blocked reader holds no records at all; while it reads (or during short stalls) its
memory is bounded by librdkafka's pre-fetch queue (``queued.max.messages.kbytes``, 16 MiB
unless set, plus at most one fetch, ``fetch.max.bytes``). A resume fetches from the offset
after the last record emitted. Metrics (from librdkafka's statistics, every
``statistics.interval.ms``): ``pendingRecords`` (the splits' records not read yet: consumer
lag) and ``KafkaConsumer.fetchQueueBytes`` (as of the last ``consume``: librdkafka reports
only while it is polled); ``KafkaSourceReader.paused`` (1 while paused) and ``.pauses`` (how
often).

**Watermarks.** With a watermark strategy (``env.from_source(source, strategy, name)``) each
split gets its own generator (so ``with_idleness`` works per partition) and the source's
watermark is the minimum over the splits that are not idle; when every split is idle, or the
subtask owns none, the source is idle -- Flink's split-level watermarks
(``WatermarkOutputMultiplexer``).

**Checkpoints.** The state is every owned split with its next offset (and stop offset); a restore
seeks there. At another parallelism every old subtask's splits are pooled and each goes to its
owner under the new parallelism. When a checkpoint completes, the offsets it holds are
committed to the group (``commit.offsets.on.checkpoint``, default on with a group id) -- for
monitoring only, as in Flink; the checkpoint is what a restore uses.

**Bounded.** With stopping offsets a split ends at its stop offset (the consumer's position
also counts, so transaction markers at the end do not keep it open); the source ends when all
its splits ended and discovery is off (``set_bounded``'s default).

**Failures.** Unreachable servers or an unknown topic fail the job within
``default.api.timeout.ms`` naming them; a record the deserializer cannot read fails it naming
topic, partition and offset. Thread-safety: the task thread drives everything; ``cancel`` may
come from another thread (it sets a flag and an event).
"""

from __future__ import annotations

import json
import threading
import time
from bisect import bisect_left
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple

from raylink.connectors.kafka.client import (
    CLIENT_ID_PREFIX,
    KafkaConnectorError,
    consumer_config,
    fetch_partitions,
    split_owner,
)
from raylink.connectors.kafka.offsets import (
    ConsumerRecord,
    KafkaOffsetResetStrategy,
    KafkaOffsetsInitializer,
    KafkaTopicPartition,
)
from raylink.core.watermark_strategy import WatermarkOutput
from raylink.operators.base import MIN_WATERMARK
from raylink.operators.sources import SourceOperator

IDLE_WAIT_S = 0.05
POLL_TIMEOUT_S = 0.05
#: how often librdkafka reports its statistics (the metrics' freshness), unless set
STATISTICS_INTERVAL_MS = 1000
#: how long the output must stay blocked before the partitions are paused (back pressure)
PAUSE_AFTER_MS = 200


@dataclass
class KafkaPartitionSplit:
    """A partition and where reading it stands (Flink's ``KafkaPartitionSplit``)."""

    topic: str
    partition: int
    next_offset: int
    stop_offset: Optional[int] = None

    @property
    def split_id(self) -> str:
        return f"{self.topic}-{self.partition}"

    @property
    def finished(self) -> bool:
        return self.stop_offset is not None and self.next_offset >= self.stop_offset

    def to_state(self) -> list:
        return [self.topic, self.partition, self.next_offset, self.stop_offset]

    @staticmethod
    def from_state(state: list) -> "KafkaPartitionSplit":
        return KafkaPartitionSplit(state[0], int(state[1]), int(state[2]), None if state[3] is None else int(state[3]))


class _SplitOutput(WatermarkOutput):
    """One split's watermark output inside the multiplexer."""

    __slots__ = ("watermark", "idle")

    def __init__(self) -> None:
        self.watermark = MIN_WATERMARK
        self.idle = False

    def emit_watermark(self, watermark: Any) -> None:
        ts = watermark if isinstance(watermark, int) else int(getattr(watermark, "timestamp", watermark))
        if ts > self.watermark:
            self.watermark = ts
        self.idle = False

    def mark_idle(self) -> None:
        self.idle = True

    def mark_active(self) -> None:
        self.idle = False


class SplitWatermarks:
    """A ``WatermarkGenerator`` made of one generator per split (Flink's
    ``WatermarkOutputMultiplexer`` in ``SourceOperator``): records go to the current split's
    generator; the combined watermark is the minimum over the non-idle splits."""

    def __init__(self, strategy: Any, clock: Any) -> None:
        self._strategy = strategy
        self._clock = clock
        self._splits: Dict[str, Tuple[Any, _SplitOutput]] = {}
        self.current: Optional[str] = None

    def add_split(self, split_id: str) -> None:
        if split_id not in self._splits:
            self._splits[split_id] = (self._strategy.create_watermark_generator(clock=self._clock), _SplitOutput())

    def remove_split(self, split_id: str) -> None:
        self._splits.pop(split_id, None)

    def _current(self) -> Optional[Tuple[Any, _SplitOutput]]:
        return self._splits.get(self.current) if self.current is not None else None

    def on_event(self, event: Any, event_timestamp: int, output: WatermarkOutput) -> None:
        entry = self._current()
        if entry is not None:
            entry[0].on_event(event, event_timestamp, entry[1])
            self._combine(output)

    def on_timestamps(self, events: list, timestamps: list, output: WatermarkOutput) -> None:
        entry = self._current()
        if entry is not None:
            entry[0].on_timestamps(events, timestamps, entry[1])
            self._combine(output)

    def on_periodic_emit(self, output: WatermarkOutput) -> None:
        for generator, split_output in self._splits.values():
            generator.on_periodic_emit(split_output)
        self._combine(output)

    def _combine(self, output: WatermarkOutput) -> None:
        active = [o.watermark for _g, o in self._splits.values() if not o.idle]
        if not active:
            output.mark_idle()
            return
        output.mark_active()
        lowest = min(active)
        if lowest > MIN_WATERMARK:
            output.emit_watermark(lowest)


def _is_simple_string_schema(schema: Any) -> bool:
    """Whether ``schema`` is exactly the API's ``SimpleStringSchema`` (not a subclass), whose
    ``deserialize`` is ``bytes.decode(charset)`` (the API sits above connectors: known by name)."""
    kind = type(schema)
    return kind.__qualname__ == "SimpleStringSchema" and kind.__module__ == "raylink.api.serialization"


_AUTO_OFFSET_RESET = {
    KafkaOffsetResetStrategy.EARLIEST: "earliest",
    KafkaOffsetResetStrategy.LATEST: "latest",
    KafkaOffsetResetStrategy.NONE: "error",
}


def _reset_strategy(initializer: KafkaOffsetsInitializer) -> KafkaOffsetResetStrategy:
    """Flink's ``OffsetsInitializer.getAutoOffsetResetStrategy``."""
    if initializer.kind == "earliest":
        return KafkaOffsetResetStrategy.EARLIEST
    if initializer.kind in ("latest", "timestamp"):
        return KafkaOffsetResetStrategy.LATEST
    return initializer.reset_strategy


class KafkaSourceOperator(SourceOperator):
    """Reads this subtask's partitions of a ``KafkaSource`` (see the module docstring)."""

    def __init__(self, source: Any, name: str = "", operator_id: str = "") -> None:
        super().__init__(None, name, operator_id)
        self.source = source
        self._splits: Dict[Tuple[str, int], KafkaPartitionSplit] = {}
        self._restored: Optional[List[KafkaPartitionSplit]] = None
        self._consumer: Any = None
        self._pending_commits: Dict[int, Dict[Tuple[str, int], int]] = {}
        self._next_discovery: Optional[float] = None
        self._split_watermarks: Optional[SplitWatermarks] = None
        self._wakeup = threading.Event()
        #: bytes librdkafka has pre-fetched and not yet handed to this reader (last statistics)
        self.fetch_queue_bytes = 0
        self._end_offsets: Dict[Tuple[str, int], int] = {}
        self._one_topic = True  # all splits of one topic: runs are told apart by partition alone
        self._blocked: Any = None  # the output's availability future while the task waits for it
        self._pause_timer: Any = None
        self._paused: List[Any] = []  # the TopicPartitions paused under back pressure
        #: how often the partitions were paused under back pressure (metric ``KafkaSourceReader.pauses``)
        self.pauses = 0

    # -- lifecycle -----------------------------------------------------------------------------------
    def setup(self, output: Any, runtime_context: Any) -> None:
        super().setup(output, runtime_context)
        watermarks = self._watermarks
        if watermarks is not None:  # split-level watermarks: one generator per partition
            multiplexer = SplitWatermarks(self.watermark_strategy, watermarks._pts.current_processing_time)
            watermarks.generator = multiplexer
            watermarks._on_event = multiplexer.on_event
            watermarks._on_timestamps = multiplexer.on_timestamps
            self._split_watermarks = multiplexer

    def open(self) -> None:
        super().open()
        from confluent_kafka import Consumer

        rc = self.runtime_context
        source = self.source
        self._timeout_s = source.api_timeout_ms / 1000.0
        self._deserializer = source.deserializer
        self._deserializer.open(rc)
        value_only = getattr(self._deserializer, "value_deserializer", None)
        self._value_only = None if value_only is None else value_only.deserialize
        self._charset = value_only.charset if _is_simple_string_schema(value_only) else None
        self._may_give_none = self._charset is None
        prefix = source.properties.get(CLIENT_ID_PREFIX) or "raylink-kafka-source"
        config = consumer_config(source.properties, f"{prefix}-{rc.subtask_index}")
        config.setdefault("statistics.interval.ms", STATISTICS_INTERVAL_MS)
        # an offset gone out of range (retention) resets as the starting offsets say, as Flink sets
        # auto.offset.reset from the starting OffsetsInitializer; NONE: the job fails
        config["auto.offset.reset"] = _AUTO_OFFSET_RESET[_reset_strategy(source.starting_offsets)]
        config["stats_cb"] = self._on_statistics
        self._consumer = Consumer(config)
        group = getattr(rc, "metrics_group", None)
        if group is not None:  # Flink's source metric, and the consumer's pre-fetched bytes
            group.gauge("pendingRecords", self.pending_records)
            group.gauge("KafkaConsumer.fetchQueueBytes", lambda: self.fetch_queue_bytes)
            group.gauge("KafkaSourceReader.pauses", lambda: self.pauses)
            group.gauge("KafkaSourceReader.paused", lambda: int(self.paused))
        if self._restored is not None:
            for split in self._restored:
                self._add_split(split)
            self._restored = None
            self._discover(initial=False)
        else:
            self._discover(initial=True)
        self._assign()
        interval = source.discovery_interval_ms
        self._next_discovery = None if interval is None else time.monotonic() + interval / 1000.0

    def close(self) -> None:
        timer, self._pause_timer = self._pause_timer, None
        if timer is not None:
            timer.cancel()
        consumer, self._consumer = self._consumer, None
        try:
            if consumer is not None:
                consumer.close()
        finally:
            super().close()

    def cancel(self) -> None:
        self.cancelled = True
        self._wakeup.set()

    # -- metrics -------------------------------------------------------------------------------------
    def _on_statistics(self, stats_json: str) -> None:
        """librdkafka's statistics (every ``statistics.interval.ms``, inside ``consume``): the
        bytes it pre-fetched for this subtask and each partition's end offset."""
        try:
            stats = json.loads(stats_json)
        except ValueError:
            return
        queued = 0
        ends = {}
        for topic, info in (stats.get("topics") or {}).items():
            for partition, p in (info.get("partitions") or {}).items():
                if partition == "-1":
                    continue
                queued += max(0, int(p.get("fetchq_size", 0)))
                end = p.get("ls_offset", p.get("hi_offset", -1))
                if end is not None and end >= 0:
                    ends[(topic, int(partition))] = end
        self.fetch_queue_bytes = queued
        self._end_offsets = ends

    def pending_records(self) -> int:
        """Records of this subtask's splits not read yet (Flink's ``pendingRecords``), as of the
        consumer's last statistics."""
        ends = self._end_offsets
        pending = 0
        for key, split in list(self._splits.items()):
            end = ends.get(key)
            if split.stop_offset is not None:
                end = split.stop_offset if end is None else min(end, split.stop_offset)
            if end is not None and end > split.next_offset:
                pending += end - split.next_offset
        return pending

    # -- splits --------------------------------------------------------------------------------------
    def _add_split(self, split: KafkaPartitionSplit) -> None:
        self._splits[(split.topic, split.partition)] = split
        self._one_topic = len({topic for topic, _ in self._splits}) <= 1
        if self._split_watermarks is not None and not split.finished:
            self._split_watermarks.add_split(split.split_id)

    def _discover(self, initial: bool) -> None:
        """Lists the subscription's partitions and adds the new ones this subtask owns."""
        source, rc = self.source, self.runtime_context
        wanted = None if source.partitions is None else [(p.topic, p.partition) for p in source.partitions]
        found = fetch_partitions(
            self._consumer, source.bootstrap_servers, source.topics, source.topic_pattern, wanted, self._timeout_s
        )
        new = [
            tp
            for tp in found
            if tp not in self._splits and split_owner(tp[0], tp[1], rc.parallelism) == rc.subtask_index
        ]
        if not new:
            return
        starting = source.starting_offsets if initial else KafkaOffsetsInitializer.earliest()
        starts = self._resolve(starting, new, "starting")
        stops = self._resolve(source.stopping_offsets, new, "stopping") if source.stopping_offsets else {}
        for tp in new:
            self._add_split(KafkaPartitionSplit(tp[0], tp[1], starts[tp], stops.get(tp)))
        if not initial:
            self._assign()

    def _resolve(self, initializer: KafkaOffsetsInitializer, tps: List[Tuple[str, int]], what: str) -> Dict:
        """Exact offsets of ``tps`` for a ``KafkaOffsetsInitializer``."""
        from confluent_kafka import KafkaException, TopicPartition

        consumer, timeout = self._consumer, self._timeout_s
        try:
            marks = {tp: consumer.get_watermark_offsets(TopicPartition(*tp), timeout=timeout) for tp in tps}
            kind = initializer.kind
            if kind == "earliest":
                return {tp: marks[tp][0] for tp in tps}
            if kind == "latest":
                return {tp: marks[tp][1] for tp in tps}
            if kind == "timestamp":
                found = consumer.offsets_for_times(
                    [TopicPartition(t, p, initializer.timestamp_ms) for t, p in tps], timeout=timeout
                )
                return {
                    (x.topic, x.partition): (x.offset if x.offset >= 0 else marks[(x.topic, x.partition)][1])
                    for x in found
                }
            if kind == "committed":
                found = consumer.committed([TopicPartition(*tp) for tp in tps], timeout=timeout)
                given = {(x.topic, x.partition): x.offset for x in found if x.offset >= 0}
            else:  # offsets
                given = {(k.topic, k.partition): v for k, v in (initializer.partition_offsets or {}).items()}
        except KafkaException as exc:
            raise KafkaConnectorError(
                f"KafkaSource {self.name!r}: looking up the {what} offsets of {[f'{t}-{p}' for t, p in tps]} "
                f"on {self.source.bootstrap_servers} failed: {exc.args[0].str() if exc.args else exc}"
            ) from None
        offsets = {}
        for tp in tps:
            low, high = marks[tp]
            offset = given.get(tp)
            # a given stopping offset counts as given (Flink's SpecifiedOffsetsInitializer), also past
            # today's log end: the bounded read then waits for the records up to it
            if offset is not None and (kind == "committed" or low <= offset <= high or what == "stopping"):
                offsets[tp] = offset
                continue
            strategy = initializer.reset_strategy
            if strategy is KafkaOffsetResetStrategy.EARLIEST:
                offsets[tp] = low
            elif strategy is KafkaOffsetResetStrategy.LATEST:
                offsets[tp] = high
            else:
                have = "no committed offset" if kind == "committed" else f"no valid offset (given {offset})"
                raise KafkaConnectorError(
                    f"KafkaSource {self.name!r}: partition {KafkaTopicPartition(*tp)!r} has {have} for the {what} "
                    f"offsets (group {self.source.group_id!r}) and the reset strategy is NONE"
                )
        return offsets

    def _assign(self) -> None:
        from confluent_kafka import TopicPartition

        active = [s for s in self._splits.values() if not s.finished]
        self._consumer.assign([TopicPartition(s.topic, s.partition, s.next_offset) for s in active])

    def _finish_split(self, split: KafkaPartitionSplit) -> None:
        from confluent_kafka import TopicPartition

        self._consumer.incremental_unassign([TopicPartition(split.topic, split.partition)])
        if self._split_watermarks is not None:
            self._split_watermarks.remove_split(split.split_id)

    # -- back pressure -------------------------------------------------------------------------------
    def output_blocked(self, available: Any) -> None:
        """The task's hook when it stops calling :meth:`emit_next` because the output has no
        buffer (``available``: the future that completes when it has one; task thread). If the
        output is still blocked after :data:`PAUSE_AFTER_MS`, the splits' partitions are paused
        (Flink's ``KafkaSourceReader.pauseOrResumeSplits``); the next :meth:`emit_next` resumes
        them. The delay keeps short stalls from discarding librdkafka's pre-fetched records,
        which a pause drops (a resume fetches them again from the position after the last
        record emitted)."""
        self._blocked = available
        if self._paused or self._pause_timer is not None or self._consumer is None:
            return
        pts = self.runtime_context.processing_time_service
        self._pause_timer = pts.register_timer(pts.current_processing_time() + PAUSE_AFTER_MS, self._pause_if_blocked)

    def _pause_if_blocked(self, _timestamp: int) -> None:
        self._pause_timer = None
        blocked = self._blocked
        if blocked is None or blocked.done() or self._consumer is None or self.cancelled:
            return
        from confluent_kafka import TopicPartition

        paused = [TopicPartition(s.topic, s.partition) for s in self._splits.values() if not s.finished]
        if paused:
            self._consumer.pause(paused)
            self._paused = paused
            self.pauses += 1

    def _resume(self) -> None:
        paused, self._paused = self._paused, []
        if self._consumer is not None:
            self._consumer.resume(paused)

    @property
    def paused(self) -> bool:
        """Whether the partitions are paused (the output has been blocked since the pause)."""
        return bool(self._paused)

    # -- reading -------------------------------------------------------------------------------------
    def emit_next(self, max_records: int = 1024) -> bool:
        if self.finished or self.cancelled:
            return False
        self._blocked = None
        if self._paused:  # the output takes records again
            self._resume()
        if self._next_discovery is not None and time.monotonic() >= self._next_discovery:
            self._discover(initial=False)
            self._next_discovery = time.monotonic() + self.source.discovery_interval_ms / 1000.0
        splits = self._splits
        if not any(not s.finished for s in splits.values()):
            if self.source.stopping_offsets is not None and self._next_discovery is None:
                self._finish()
                return False
            self._wakeup.wait(IDLE_WAIT_S)  # nothing to read until the next discovery; mails run in between
            return not self.cancelled
        messages = self._consumer.consume(num_messages=max(1, max_records), timeout=POLL_TIMEOUT_S)
        if messages:
            self._emit(messages)
        if self.source.stopping_offsets is not None:
            self._check_stops(bool(messages))
        return True

    def _emit(self, messages: List[Any]) -> None:
        """Emits ``messages`` (one ``consume``) in runs of one partition, one hand-over per run.

        The whole batch is checked with a few C-level passes (errors, partitions); each run is
        deserialized in one list comprehension (``SimpleStringSchema`` decodes directly) and only
        its first and last offsets are looked at unless a stale fetch or a stop offset cuts it.
        Anything unusual (an error, a deserializer that raises) goes to :meth:`_emit_each`, which
        finds the record and names it."""
        if any([m.error() is not None for m in messages]):
            self._emit_each(messages)
            return
        if self._one_topic:
            keys: List[Any] = [m.partition() for m in messages]
        else:
            keys = [(m.topic(), m.partition()) for m in messages]
        n = len(keys)
        if keys.count(keys[0]) == n:
            self._emit_run(messages)
            return
        lo = 0
        for hi in [i for i in range(1, n) if keys[i] != keys[i - 1]]:
            self._emit_run(messages[lo:hi])
            lo = hi
        self._emit_run(messages[lo:])

    def _emit_run(self, run: List[Any]) -> None:
        """Emits messages of one partition (in offset order) and moves its split past them."""
        first = run[0]
        split = self._splits.get((first.topic(), first.partition()))
        if split is None or split.finished:
            return  # a fetch that raced an unassign
        next_offset, stop = split.next_offset, split.stop_offset
        last_offset = run[-1].offset()
        if first.offset() < next_offset:  # a fetch that raced a seek: skip what was emitted
            run = run[bisect_left([m.offset() for m in run], next_offset) :]
            if not run:
                return
        if stop is not None and last_offset >= stop:
            run = run[: bisect_left([m.offset() for m in run], stop)]
            end = stop
        else:
            end = last_offset + 1
        values: List[Any] = []
        if run:
            try:
                values = self._deserialize_run(run, split)
            except Exception:  # record by record: emits what precedes the bad one and names it
                self._emit_each(run)
                return
            timestamps = [m.timestamp()[1] for m in run]
            if self._may_give_none:  # Flink's value-only wrapper drops nulls
                kept = [i for i, v in enumerate(values) if v is not None]
                if len(kept) < len(values):
                    values = [values[i] for i in kept]
                    timestamps = [timestamps[i] for i in kept]
        split.next_offset = end  # the offset after the last record emitted (or skipped as past the stop)
        if values:
            self._hand_over((split.topic, split.partition), values, timestamps)

    def _deserialize_run(self, run: List[Any], split: KafkaPartitionSplit) -> List[Any]:
        charset = self._charset
        if charset is not None:  # SimpleStringSchema: bytes.decode, no call into the schema
            decode = bytes.decode
            return [decode(m.value(), charset) for m in run]
        value_only = self._value_only
        if value_only is not None:
            return [value_only(m.value()) for m in run]
        deserialize, topic, partition = self._deserializer.deserialize, split.topic, split.partition
        return [
            deserialize(ConsumerRecord(topic, partition, m.offset(), m.timestamp()[1], m.key(), m.value(), m.headers()))
            for m in run
        ]

    def _emit_each(self, messages: List[Any]) -> None:
        """Record by record (the path for errors): emits what precedes a failing record, leaves
        its split at that record's offset (a restore reads it again) and raises naming it."""
        run: List[Any] = []
        timestamps: List[int] = []
        key: Optional[Tuple[str, int]] = None
        split: Optional[KafkaPartitionSplit] = None
        value_only = getattr(self._deserializer, "value_deserializer", None)
        deserialize = value_only.deserialize if value_only is not None else self._deserializer.deserialize
        topic, partition = None, None
        next_offset, stop = 0, None
        try:
            for message in messages:
                if message.error() is not None:
                    self._hand_over(key, run, timestamps)
                    raise KafkaConnectorError(
                        f"KafkaSource {self.name!r}: reading topic {message.topic()!r} partition "
                        f"{message.partition()} from {self.source.bootstrap_servers} failed: {message.error().str()}"
                    )
                if message.partition() != partition or message.topic() != topic:
                    if split is not None:
                        split.next_offset = next_offset
                    self._hand_over(key, run, timestamps)
                    topic, partition = message.topic(), message.partition()
                    key, run, timestamps = (topic, partition), [], []
                    split = self._splits.get(key)
                    if split is not None:
                        next_offset, stop = split.next_offset, split.stop_offset
                        if split.finished:
                            split = None
                offset = message.offset()
                if split is None or offset < next_offset:
                    continue  # a fetch that raced an unassign or a seek
                if stop is not None and offset >= stop:
                    next_offset = stop
                    continue
                if value_only is not None:
                    value = deserialize(message.value())
                else:
                    value = deserialize(
                        ConsumerRecord(
                            topic,
                            partition,
                            offset,
                            message.timestamp()[1],
                            message.key(),
                            message.value(),
                            message.headers(),
                        )
                    )
                next_offset = offset + 1
                if value is not None:  # Flink's value-only wrapper drops nulls
                    run.append(value)
                    timestamps.append(message.timestamp()[1])
        except KafkaConnectorError:
            raise
        except Exception as exc:
            if split is not None:
                split.next_offset = next_offset  # the bad record's offset: a restore reads it again
            self._hand_over(key, run, timestamps)  # what came before it is emitted and checkpointed
            raise KafkaConnectorError(
                f"KafkaSource {self.name!r}: the deserializer cannot read the record at topic {topic!r}, "
                f"partition {partition}, offset {offset}: {type(exc).__name__}: {exc}"
            ) from exc
        if split is not None:
            split.next_offset = next_offset
        self._hand_over(key, run, timestamps)

    def _hand_over(self, key: Optional[Tuple[str, int]], run: List[Any], timestamps: List[int]) -> None:
        if not run or key is None:
            return
        if self._split_watermarks is not None:
            self._split_watermarks.current = f"{key[0]}-{key[1]}"
        self._collect_timestamped(run, timestamps)

    def _check_stops(self, got_records: bool) -> None:
        from confluent_kafka import TopicPartition

        open_splits = [s for s in self._splits.values() if not s.finished]
        if not got_records and open_splits:  # transaction markers take offsets no record has
            positions = self._consumer.position([TopicPartition(s.topic, s.partition) for s in open_splits])
            for split, position in zip(open_splits, positions):
                if position.offset is not None and position.offset > split.next_offset:
                    split.next_offset = position.offset
        for split in open_splits:
            if split.finished:
                self._finish_split(split)

    # -- checkpoints ---------------------------------------------------------------------------------
    def snapshot_operator_state(self, checkpoint_id: int) -> dict:
        splits = sorted(self._splits.values(), key=lambda s: (s.topic, s.partition))
        if self.source.commit_offsets_on_checkpoint:
            self._pending_commits[checkpoint_id] = {(s.topic, s.partition): s.next_offset for s in splits}
        return {"splits": [s.to_state() for s in splits]}

    def restore_operator_state(self, state: dict) -> None:
        self._restore([KafkaPartitionSplit.from_state(s) for s in state["splits"]])

    def restore_rescaled_operator_state(self, states: List[Optional[dict]], subtask: int, parallelism: int) -> None:
        """Every old subtask's splits pooled; this subtask takes those it owns now."""
        pooled = [KafkaPartitionSplit.from_state(s) for state in states if state for s in state["splits"]]
        self._restore([s for s in pooled if split_owner(s.topic, s.partition, parallelism) == subtask])

    def _restore(self, splits: List[KafkaPartitionSplit]) -> None:
        """The checkpoint's splits replace what ``open`` found (the task restores after opening);
        owned partitions the checkpoint does not know are new ones: read from their start."""
        if self._consumer is None:  # not opened yet: open() applies them
            self._restored = splits
            return
        if self._split_watermarks is not None:
            for split in self._splits.values():
                self._split_watermarks.remove_split(split.split_id)
        self._splits = {}
        for split in splits:
            self._add_split(split)
        self._discover(initial=False)
        self._assign()

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        """Commits the offsets checkpoint ``checkpoint_id`` holds to the group (asynchronously)."""
        offsets = self._pending_commits.pop(checkpoint_id, None)
        for older in [c for c in self._pending_commits if c < checkpoint_id]:
            del self._pending_commits[older]
        if offsets and self._consumer is not None:
            from confluent_kafka import TopicPartition

            self._consumer.commit(offsets=[TopicPartition(t, p, o) for (t, p), o in offsets.items()], asynchronous=True)

    def notify_checkpoint_aborted(self, checkpoint_id: int) -> None:
        self._pending_commits.pop(checkpoint_id, None)


__all__ = ["KafkaPartitionSplit", "KafkaSourceOperator", "SplitWatermarks"]
