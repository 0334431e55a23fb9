"""``raylink loadtest SCENARIO --kafka`` / ``--kafka-bootstrap-servers``: the scenario's records go
through a Kafka topic, produced at the target rate outside the job and read by the job's
``KafkaSource``; the run reports end-to-end latency from each record's Kafka timestamp and the
consumer lag over time.

:class:`KafkaLoad` is the user's choice (servers or a local broker, topic, partitions, checkpoint
interval). :class:`KafkaDriver` carries one run:

* :meth:`~KafkaDriver.open` starts a local broker when asked
  (:class:`raylink.connectors.kafka.broker.KafkaBroker`, stopped again by :meth:`~KafkaDriver.close`),
  creates the topic (or checks the given one) and reads each partition's log end offset: the
  run's records are the next ``N`` of the topic (``N`` = ``--records``, else rate x duration),
  record ``j`` in partition ``j % partitions``;
* :meth:`~KafkaDriver.source` is the job's ``KafkaSource`` (PyFlink's builder), unbounded from
  those offsets, its records ``(kafka_timestamp_ns, payload)`` (:class:`StampedDeserializer`), so
  the scenario and the :class:`~raylink.loadtest.functions.LatencySink` run unchanged; with a
  consumer group that commits its offsets on every checkpoint (``--kafka-checkpoint-interval``);
* :meth:`~KafkaDriver.start` starts the producer thread (confluent-kafka, in the harness's
  process): record ``j`` is due at ``j / rate`` s after the start, produced with its Kafka
  timestamp (``CreateTime``) set to the wall clock in ms at that moment; a producer that falls
  behind produces the rest as fast as the broker takes it (the rate is then not held);
* :meth:`~KafkaDriver.sample` reads, every sample interval, the log end offsets and the group's
  committed offsets from the broker and the source subtasks' ``pendingRecords`` gauges:
  ``committedLag`` = sum over partitions of log end offset - committed offset (what
  ``kafka-consumer-groups.sh`` shows as LAG), ``pendingRecords`` = the job's own view
  (log end offset - next offset to read, as of librdkafka's last statistics);
* :meth:`~KafkaDriver.drained` says when the job may end: every record produced and the group's
  committed offsets at the run's last offsets (a completed checkpoint holds every record: with
  aligned barriers the sink has taken them all). The runner then stops the job with a savepoint
  and ``advance_to_end_of_event_time`` (Flink's ``stop --drain``) into a temporary folder, so
  the tasks finish and report their accumulators. (A source bounded at the last offsets would be
  simpler, but the connector resets stopping offsets beyond the log end at job start.)
* :meth:`~KafkaDriver.finish` waits for the producer, takes a last sample after the job ended and
  returns the run's ``kafka`` section (produced records, rate, lag samples, offsets).

Latency has the Kafka timestamp's resolution (1 ms, truncated: up to 1 ms too high) and assumes
the producer's and the TaskExecutors' clocks agree (one machine, or NTP). Used by one driver
thread, plus the producer thread it starts. No Flink counterpart (Flink's Kafka benchmarks use
external producers).
"""

from __future__ import annotations

import pickle
import shutil
import tempfile
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional

from raylink.loadtest.functions import BUCKETS_PER_S, SOURCE_NAME

#: the consumer group's prefix (a fresh group per run)
GROUP_PREFIX = "raylink-loadtest"
DEFAULT_PARTITIONS = 4
DEFAULT_CHECKPOINT_INTERVAL_MS = 1000
#: every record produced, and the group's committed offsets still for this long: the run fails
STALL_S = 120.0


@dataclass(frozen=True)
class KafkaLoad:
    """Where a run's records go: ``bootstrap_servers`` (or ``start_broker``: a local broker for
    the run), ``topic`` (None: a fresh one of ``partitions`` partitions)."""

    bootstrap_servers: Optional[str] = None
    start_broker: bool = False
    topic: Optional[str] = None
    partitions: int = DEFAULT_PARTITIONS
    checkpoint_interval_ms: int = DEFAULT_CHECKPOINT_INTERVAL_MS

    def __post_init__(self) -> None:
        if bool(self.bootstrap_servers) == bool(self.start_broker):
            raise ValueError("a Kafka load test needs either --kafka-bootstrap-servers HOST:PORT or --kafka")
        if self.partitions < 1:
            raise ValueError(f"--partitions must be >= 1, got {self.partitions}")
        if self.checkpoint_interval_ms < 1:
            raise ValueError(f"--kafka-checkpoint-interval must be >= 1 ms, got {self.checkpoint_interval_ms}")


# -- the records' encoding ---------------------------------------------------------------------------
def payload_kind(sample: Any) -> str:
    """How payloads like ``sample`` are written to Kafka: ``int``, ``str``, ``bytes`` or ``pickle``."""
    if isinstance(sample, bool):
        return "pickle"
    for kind in (int, str, bytes):
        if isinstance(sample, kind):
            return kind.__name__
    return "pickle"


def encoder(kind: str) -> Callable[[Any], bytes]:
    if kind == "int":
        return lambda v: b"%d" % v
    if kind == "str":
        return lambda v: v.encode("utf-8")
    if kind == "bytes":
        return lambda v: v
    return pickle.dumps


class StampedDeserializer:
    """A ``KafkaRecordDeserializationSchema`` (by its methods: this module stays light to import):
    ``ConsumerRecord`` -> ``(kafka_timestamp_ns, payload)``, the load test's record shape."""

    def __init__(self, kind: str) -> None:
        self.kind = kind

    def open(self, context: Any = None) -> None:
        """Nothing to prepare."""

    def deserialize(self, record: Any) -> tuple:
        value = record.value
        kind = self.kind
        if kind == "int":
            payload: Any = int(value)
        elif kind == "str":
            payload = value.decode("utf-8")
        elif kind == "bytes":
            payload = value
        else:
            payload = pickle.loads(value)
        return (record.timestamp * 1_000_000, payload)


# -- the driver ---------------------------------------------------------------------------------------
def planned_count(rate: Optional[float], duration_s: Optional[float], records: Optional[int]) -> int:
    """How many records a Kafka run produces: ``records``, else rate x duration (at most both)."""
    counts = []
    if records is not None:
        counts.append(records)
    if rate is not None and duration_s is not None:
        counts.append(int(rate * duration_s))
    if not counts:
        raise SystemExit(
            "a Kafka load test produces a known number of records: give --records N, or a --rate with a --duration"
        )
    return min(counts)


def check_load(load: KafkaLoad, rates: list, duration_s: Optional[float], records: Optional[int]) -> None:
    """Fail (``SystemExit``) before anything starts: a run without a known record count, or a
    ``--topic`` the cluster does not have."""
    for rate in rates:
        planned_count(rate, duration_s, records)
    if load.topic is None or load.bootstrap_servers is None:
        return
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": load.bootstrap_servers})
    try:
        # every topic's metadata: asking for this topic by name would have a broker with
        # auto.create.topics.enable (Kafka's default) create it
        topic = admin.list_topics(timeout=30).topics.get(load.topic)
    except KafkaException as exc:
        raise SystemExit(f"Kafka load test: no answer from {load.bootstrap_servers}: {exc.args[0].str()}") from None
    if topic is None or topic.error is not None or not topic.partitions:
        raise SystemExit(f"--topic {load.topic!r} does not exist on {load.bootstrap_servers}")


class KafkaDriver:
    """One Kafka run's producer, source, lag samples and broker (see the module docstring)."""

    def __init__(
        self,
        load: KafkaLoad,
        payload: Callable[[int], Any],
        rate: Optional[float],
        duration_s: Optional[float],
        records: Optional[int],
        buckets_per_s: float = BUCKETS_PER_S,
    ) -> None:
        self.load = load
        self.payload = payload
        self.rate = rate
        self.count = planned_count(rate, duration_s, records)
        self.buckets_per_s = buckets_per_s
        self.kind = payload_kind(payload(0))
        self.broker: Any = None
        self.servers: Optional[str] = load.bootstrap_servers
        self.topic: Optional[str] = load.topic
        self.partitions = load.partitions
        self.group_id = f"{GROUP_PREFIX}-{uuid.uuid4().hex[:10]}"
        self.savepoint_dir: Optional[str] = None
        self.start_offsets: Dict[int, int] = {}
        self.stop_offsets: Dict[int, int] = {}
        self.lag: List[dict] = []
        #: (t, executor, RSS bytes, committed lag): a soak's memory next to the backlog
        self.backlog_rss: List[tuple] = []
        self.produced = 0
        self.produce_elapsed_s = 0.0
        self._buckets: Counter = Counter()
        self._thread: Optional[threading.Thread] = None
        self._stop = threading.Event()
        self._error: Optional[BaseException] = None
        self._failed_deliveries = 0
        self._consumer: Any = None
        self._producer: Any = None
        self._started = 0.0
        self._last_committed: Optional[dict] = None
        self._moved_at = 0.0

    @property
    def failed(self) -> bool:
        """True once the producer has failed (the job would wait for records forever)."""
        return self._error is not None

    # -- set-up ---------------------------------------------------------------------------------
    def open(self) -> "KafkaDriver":
        from confluent_kafka import Consumer, Producer

        from raylink.connectors.kafka.broker import KafkaBroker, new_topic

        self.savepoint_dir = tempfile.mkdtemp(prefix="raylink-loadtest-kafka-")
        if self.load.start_broker:
            self.broker = KafkaBroker().start()
            self.servers = self.broker.bootstrap_servers
        assert self.servers is not None
        self._consumer = Consumer(
            {"bootstrap.servers": self.servers, "group.id": self.group_id, "enable.auto.commit": False}
        )
        if self.topic is None:
            self.topic = new_topic(self.servers, self.partitions, prefix="loadtest")
        else:
            metadata = self._consumer.list_topics(timeout=30)  # not by name: that could create it
            topic = metadata.topics.get(self.topic)
            if topic is None or topic.error is not None or not topic.partitions:
                raise SystemExit(f"--topic {self.topic!r} does not exist on {self.servers}")
            self.partitions = len(topic.partitions)
        # made now, so its producer id (idempotence) is there before the job reads: the first
        # records' latency is not the broker's start-up
        self._producer = Producer(
            {"bootstrap.servers": self.servers, "linger.ms": 2, "acks": "all", "enable.idempotence": True}
        )
        self._producer.poll(0)
        for p in range(self.partitions):
            high = self._log_end(p, 30.0)
            self.start_offsets[p] = high
            self.stop_offsets[p] = high + self.count // self.partitions + (1 if p < self.count % self.partitions else 0)
        return self

    def _log_end(self, partition: int, timeout_s: float) -> int:
        """The partition's log end offset; retried while its leader is not known yet (a new topic)."""
        from confluent_kafka import KafkaException, TopicPartition

        deadline = time.monotonic() + timeout_s
        while True:
            try:
                return self._consumer.get_watermark_offsets(
                    TopicPartition(self.topic, partition), timeout=max(0.1, deadline - time.monotonic()), cached=False
                )[1]
            except KafkaException as exc:
                if time.monotonic() >= deadline:  # a new topic's leader may be unknown for a while
                    raise SystemExit(
                        f"Kafka load test: no log end offset for {self.topic}-{partition} on {self.servers}: "
                        f"{exc.args[0].str()}"
                    ) from None
            time.sleep(0.1)  # metadata propagation, polled with a deadline

    def source(self, env: Any) -> Any:
        """The job's source stream of ``(kafka_timestamp_ns, payload)`` (checkpointing enabled)."""
        from raylink.api import WatermarkStrategy
        from raylink.api.connectors.kafka import KafkaOffsetsInitializer, KafkaSource, KafkaTopicPartition

        topic = self.topic
        assert topic is not None and self.servers is not None
        env.enable_checkpointing(self.load.checkpoint_interval_ms)
        source = (
            KafkaSource.builder()
            .set_bootstrap_servers(self.servers)
            .set_topics(topic)
            .set_group_id(self.group_id)
            .set_starting_offsets(
                KafkaOffsetsInitializer.offsets(
                    {KafkaTopicPartition(topic, p): o for p, o in self.start_offsets.items()}
                )
            )
            .set_deserializer(StampedDeserializer(self.kind))
            .set_property("partition.discovery.interval.ms", "0")
            .build()
        )
        return env.from_source(source, WatermarkStrategy.no_watermarks(), SOURCE_NAME)

    # -- the producer ----------------------------------------------------------------------------
    @property
    def started(self) -> bool:
        return self._thread is not None

    def start(self) -> None:
        """Start producing (the runner calls it once the job's tasks report metrics: records do
        not wait in the topic for the job's deployment)."""
        self._started = time.perf_counter()
        self._thread = threading.Thread(target=self._produce_guarded, name="loadtest-kafka-producer", daemon=True)
        self._thread.start()

    def _produce_guarded(self) -> None:
        try:
            self._produce()
        except BaseException as exc:  # noqa: BLE001 - reported by finish()
            self._error = exc

    def _on_delivery(self, err: Any, _msg: Any) -> None:
        if err is not None:
            self._failed_deliveries += 1

    def _produce(self) -> None:
        producer = self._producer
        encode = encoder(self.kind)
        payload, topic, parts = self.payload, self.topic, self.partitions
        rate, total, stop = self.rate, self.count, self._stop
        bucket_ns = int(1e9 / self.buckets_per_s)
        buckets = self._buckets
        on_delivery = self._on_delivery
        produced = 0
        start = time.perf_counter()
        while produced < total and not stop.is_set():
            now = time.perf_counter()
            due = total if rate is None else min(total, int((now - start) * rate) + 1)
            if due <= produced:
                stop.wait(max(0.001, (produced + 1) / rate - (now - start)))  # type: ignore[operator]
                continue
            batch_end = min(due, produced + 2000)
            stamp_ms = time.time_ns() // 1_000_000
            for j in range(produced, batch_end):
                while True:
                    try:
                        producer.produce(
                            topic, encode(payload(j)), partition=j % parts, timestamp=stamp_ms, on_delivery=on_delivery
                        )
                        break
                    except BufferError:  # the client's queue is full: let it send
                        producer.poll(0.01)
            buckets[time.time_ns() // bucket_ns] += batch_end - produced
            produced = batch_end
            self.produced = produced
            producer.poll(0)
        left = producer.flush(60)
        self.produce_elapsed_s = time.perf_counter() - start
        if left:
            raise RuntimeError(
                f"Kafka load test: {left} records to {topic} on {self.servers} were not delivered in 60 s"
            )

    # -- lag ---------------------------------------------------------------------------------------
    def offsets(self) -> "tuple[Dict[int, int], Dict[int, Optional[int]]]":
        """(log end offset, committed offset of the run's group) per partition, read from the broker."""
        from confluent_kafka import TopicPartition

        consumer, topic = self._consumer, self.topic
        ends = {p: self._log_end(p, 10.0) for p in range(self.partitions)}
        committed = {
            tp.partition: (tp.offset if tp.offset >= 0 else None)
            for tp in consumer.committed([TopicPartition(topic, p) for p in range(self.partitions)], timeout=10)
        }
        return ends, committed

    def drained(self) -> bool:
        """True once every record is produced and the group's committed offsets (a completed
        checkpoint's) have reached the run's last offsets: every record went through the job."""
        if self._thread is None or self._thread.is_alive() or not self.lag:
            return False
        committed = self.lag[-1]["committedOffsets"]
        return all(committed.get(p) == stop for p, stop in self.stop_offsets.items())

    def stalled(self, now: float) -> Optional[str]:
        """Why the run cannot end, when every record is produced but the group's committed offsets
        have not moved for :data:`STALL_S` s (checkpoints failing, say); else None."""
        if self._thread is None or self._thread.is_alive() or not self.lag:
            return None
        committed = self.lag[-1]["committedOffsets"]
        if committed != self._last_committed:
            self._last_committed, self._moved_at = committed, now
            return None
        if now - self._moved_at < STALL_S:
            return None
        return (
            f"Kafka load test: the job's consumer group {self.group_id} committed nothing new for {STALL_S:g} s "
            f"with {self.lag[-1]['committedLag']:,} records of {self.topic} not committed (do its checkpoints complete?)"
        )

    def sample(self, t: float, metrics: Optional[list]) -> Optional[dict]:
        """One lag sample at ``t`` s since the job started (``metrics``: its subtasks' metrics)."""
        try:
            ends, committed = self.offsets()
        except (Exception, SystemExit):  # noqa: BLE001 - a slow broker answer: no sample this time
            return None
        pending = None
        if metrics:
            values = [
                ops.get("pendingRecords")
                for m in metrics
                for name, ops in (m.get("operators") or {}).items()
                if SOURCE_NAME in name and isinstance(ops, dict)
            ]
            values = [v for v in values if isinstance(v, (int, float))]
            pending = sum(values) if values else None
        start = self.start_offsets
        sample = {
            "t": round(t, 3),
            "produced": self.produced,
            "endOffsets": ends,
            "committedOffsets": committed,
            # records the group has not committed yet; a partition without a commit counts from the run's start
            "committedLag": sum(
                ends[p] - (committed.get(p) if committed.get(p) is not None else start[p]) for p in ends
            ),
            "pendingRecords": pending,
        }
        self.lag.append(sample)
        return sample

    # -- the end -----------------------------------------------------------------------------------
    def finish(self, t: float) -> dict:
        """Wait for the producer, take the last lag sample; the run's ``kafka`` section."""
        if self._thread is not None:
            self._thread.join(120)
        if self._error is not None:
            raise self._error
        if self._failed_deliveries:
            raise RuntimeError(f"Kafka load test: {self._failed_deliveries} records were not delivered to {self.topic}")
        final = self.sample(t, None)
        lags = [s["committedLag"] for s in self.lag]
        return {
            "bootstrapServers": self.servers,
            "localBroker": self.broker is not None,
            "topic": self.topic,
            "partitions": self.partitions,
            "groupId": self.group_id,
            "checkpointIntervalMs": self.load.checkpoint_interval_ms,
            "recordsProduced": self.produced,
            "produceElapsedS": round(self.produce_elapsed_s, 3),
            "produceRate": round(self.produced / self.produce_elapsed_s, 1) if self.produce_elapsed_s > 0 else 0.0,
            "startOffsets": self.start_offsets,
            "stopOffsets": self.stop_offsets,
            "final": final,
            "maxCommittedLag": max(lags) if lags else None,
            "maxPendingRecords": max(
                (s["pendingRecords"] for s in self.lag if s["pendingRecords"] is not None), default=None
            ),
            "lagSeries": self.lag,
        }

    def source_buckets(self) -> list:
        """``[(bucket since epoch, records produced)]``: the producer's throughput over time."""
        return sorted(self._buckets.items())

    def close(self) -> None:
        """Stop the producer, close the consumer, stop the local broker. Idempotent."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(30)
        self._producer = None
        consumer, self._consumer = self._consumer, None
        if consumer is not None:
            consumer.close()
        broker, self.broker = self.broker, None
        if broker is not None:
            broker.stop()
        folder, self.savepoint_dir = self.savepoint_dir, None
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)


__all__ = [
    "DEFAULT_CHECKPOINT_INTERVAL_MS",
    "DEFAULT_PARTITIONS",
    "KafkaDriver",
    "KafkaLoad",
    "StampedDeserializer",
    "check_load",
    "payload_kind",
    "planned_count",
]
