"""The Kafka connector vs. confluent-kafka's own loops over the same broker, in the same run.

Starts its own single-node broker (:class:`raylink.connectors.kafka.broker.KafkaBroker`, stopped
at the end) and prints one table of records/s:

* source: a bounded ``KafkaSource`` (``SimpleStringSchema``, 100-byte values, a topic of two
  partitions) read at p=1 and p=2 into a discarding sink, next to the client's own loop
  (``Consumer.consume(10000)`` + value decode over both partitions);
* sink: ``from_sequence`` -> a 100-byte string -> ``KafkaSink`` with NONE, AT_LEAST_ONCE and
  EXACTLY_ONCE, checkpoints every second, at p=1 and p=2, next to the client's own produce loop
  with the same producer settings (the sink's ``producer_config``; for EXACTLY_ONCE a
  transactional producer committing a transaction every second);
* a topic -> keyed count -> topic job as a PyFlink user writes it (``flat_map`` into
  ``(word, 1)``, ``key_by(lambda)``, ``reduce(lambda)``, ``map`` to a string, ``KafkaSink``
  AT_LEAST_ONCE) in words/s, next to a plain loop that consumes, counts in a dict and produces.

Every job is written as a user writes it: default configuration, no declared types. "tasks
running" is the job's net runtime, "wall clock" the driver's time from ``execute`` (deploy
included) until the job ended (on Ray a source's consumer starts fetching as its task opens,
while the other tasks still deploy, so the source rows' "tasks running" flatters them: read them
next to the wall clock). Each ratio is to the client loop timed in the same round; rounds
interleave every row, and the table shows the medians over ``--repeat`` rounds. The records each
row moved are counted (the source rows by their sink's input, the sink rows and the word count by
reading the output topic back with ``isolation.level=read_committed``) and shown in the table.

    python bench/kafka.py [--records 200000] [--repeat 3] [--target local|ray]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import uuid
from typing import Dict, List, Optional, Tuple

if __name__ == "__main__":  # run as a script, bench/ comes first on sys.path, where this file
    # would stand in for kafka-python's ``kafka`` package (the exactly-once sink's admin client)
    _here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _here]

from raylink.api.functions import SinkFunction  # noqa: E402
from raylink.api.serialization import SerializationSchema
from raylink.connectors.kafka.broker import new_topic
from raylink.connectors.kafka.sink_writer import producer_config

VALUE_BYTES = 100
WORDS_PER_LINE = 10
VOCABULARY = [f"word{i}" for i in range(1000)]
CHECKPOINT_INTERVAL_MS = 1000
PARTITIONS = 2


def make_value(i: int) -> str:
    """The ``i``-th 100-byte value (ASCII)."""
    return f"{i:010d}".ljust(VALUE_BYTES, "x")


def make_line(i: int) -> str:
    v = VOCABULARY
    n = len(v)
    return " ".join(v[(i * 7 + k * 13) % n] for k in range(WORDS_PER_LINE))


class CountingDiscard(SinkFunction):
    """Discards every record, counting them in the user metric ``discarded``."""

    def open(self, runtime_context) -> None:
        self.counter = runtime_context.get_metrics_group().counter("discarded")

    def invoke(self, value, context) -> None:
        self.counter.inc()


def _discarded(result) -> int:
    """Records the ``CountingDiscard`` sinks of a finished job got."""
    total = 0
    for m in result.task_metrics:
        for name, metrics in m.get("operators", {}).items():
            total += sum(v for k, v in metrics.items() if k.endswith("discarded"))
    return total


# --- the broker and its topics ---------------------------------------------------------------


def fill(servers: str, topic: str, values: List[str]) -> None:
    """Produces ``values`` round-robin over the topic's partitions, acknowledged."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": servers, "linger.ms": 5, "enable.idempotence": True})
    for i, value in enumerate(values):
        while True:
            try:
                producer.produce(topic, value=value.encode(), partition=i % PARTITIONS)
                break
            except BufferError:
                producer.poll(0.1)
    if producer.flush(120) != 0:
        raise RuntimeError(f"could not fill {topic}")


def _assigned_consumer(servers: str, topic: str, isolation: str = "read_uncommitted"):
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": servers,
            "group.id": f"bench-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "isolation.level": isolation,
            "log_level": 3,
        }
    )
    partitions = sorted(consumer.list_topics(topic, timeout=30).topics[topic].partitions)
    ends = {}
    for p in partitions:
        ends[p] = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1]
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
    return consumer, ends


def read_back(servers: str, topic: str, expected: int, timeout: float = 120.0) -> List[str]:
    """Every value a ``read_committed`` consumer sees in ``topic`` up to its end offsets now."""
    consumer, ends = _assigned_consumer(servers, topic, "read_committed")
    got: List[str] = []
    position = {p: 0 for p in ends}
    deadline = time.monotonic() + timeout
    try:
        while any(position[p] < ends[p] for p in ends) and time.monotonic() < deadline:
            for m in consumer.consume(10_000, 0.5):
                if m.error() is None:
                    got.append(m.value().decode())
                    position[m.partition()] = m.offset() + 1
                elif m.error().code() == -191:  # partition EOF: the rest are transaction markers
                    position[m.partition()] = ends[m.partition()]
            if len(got) >= expected:
                # markers may sit past the last record: give them a moment, then stop
                if not consumer.consume(10_000, 0.3):
                    break
    finally:
        consumer.close()
    return got


# --- the client's own loops (the baselines) --------------------------------------------------


def consume_loop(servers: str, topic: str, records: int) -> Tuple[float, int]:
    consumer, _ = _assigned_consumer(servers, topic)
    count = 0
    try:
        start = time.perf_counter()
        while count < records:
            for m in consumer.consume(min(10_000, records - count), 1.0):
                if m.error() is None:
                    m.value().decode()
                    count += 1
        return time.perf_counter() - start, count
    finally:
        consumer.close()


def produce_loop(servers: str, topic: str, records: int, guarantee: str) -> float:
    """The client producing ``records`` values with the producer settings the sink gives its
    own producers (``producer_config`` of the same ``KafkaSink``); for EXACTLY_ONCE one
    transaction a checkpoint interval."""
    from confluent_kafka import Producer

    txid = f"bench-{uuid.uuid4().hex[:8]}" if guarantee == "EXACTLY_ONCE" else None
    producer = Producer(producer_config(_sink(servers, topic, guarantee), txid))
    transactional = guarantee == "EXACTLY_ONCE"
    start = time.perf_counter()
    if transactional:
        producer.init_transactions(30)
        producer.begin_transaction()
    interval = CHECKPOINT_INTERVAL_MS / 1000
    next_commit = time.perf_counter() + interval
    for i in range(records):
        value = make_value(i).encode()
        while True:
            try:
                producer.produce(topic, value=value)
                break
            except BufferError:
                producer.poll(0.05)
        if not i & 1023:
            producer.poll(0)
            if time.perf_counter() >= next_commit:  # a checkpoint: flush or commit
                if transactional:
                    producer.commit_transaction(60)
                    producer.begin_transaction()
                elif guarantee == "AT_LEAST_ONCE":
                    producer.flush(60)
                next_commit = time.perf_counter() + interval
    if transactional:
        producer.commit_transaction(60)
    elif producer.flush(60) != 0:
        raise RuntimeError("the produce loop's records were not all delivered")
    return time.perf_counter() - start


def count_loop(servers: str, source_topic: str, sink_topic: str, lines: int) -> Tuple[float, int]:
    """Consume lines, count words in a dict, produce ``word,count`` for each word."""
    from confluent_kafka import Producer

    consumer, _ = _assigned_consumer(servers, source_topic)
    producer = Producer(producer_config(_sink(servers, sink_topic, "AT_LEAST_ONCE", key=True)))
    counts: Dict[str, int] = {}
    seen = 0
    try:
        start = time.perf_counter()
        while seen < lines:
            for m in consumer.consume(min(10_000, lines - seen), 1.0):
                if m.error() is not None:
                    continue
                seen += 1
                for word in m.value().decode().split():
                    total = counts.get(word, 0) + 1
                    counts[word] = total
                    out = f"{word},{total}".encode()
                    while True:
                        try:
                            producer.produce(sink_topic, value=out, key=word.encode())
                            break
                        except BufferError:
                            producer.poll(0.05)
            producer.poll(0)
        if producer.flush(60) != 0:
            raise RuntimeError("the count loop's records were not all delivered")
        return time.perf_counter() - start, seen
    finally:
        consumer.close()


# --- the jobs, as a PyFlink user writes them -------------------------------------------------


def _env(target: str, parallelism: int, checkpoints: bool = False):
    from raylink.api import Configuration, StreamExecutionEnvironment

    conf = Configuration().set_string("execution.target", target)
    if checkpoints:
        conf.set_string("execution.checkpointing.interval", f"{CHECKPOINT_INTERVAL_MS} ms")
        conf.set_string("execution.checkpointing.dir", tempfile.mkdtemp(prefix="bench-kafka-ck-"))
    env = StreamExecutionEnvironment.get_execution_environment(conf)
    env.set_parallelism(parallelism)
    return env


def _timed(env, name: str) -> Tuple[float, float, object]:
    start = time.perf_counter()
    result = env.execute(name)
    wall = time.perf_counter() - start
    return min(wall, result.net_runtime_ms / 1000), wall, result


def source_job(servers: str, topic: str, target: str, parallelism: int) -> Tuple[float, float, int]:
    """(tasks running s, wall s, records the sink got)."""
    from raylink.api import WatermarkStrategy
    from raylink.api.connectors.kafka import KafkaOffsetsInitializer, KafkaSource
    from raylink.api.serialization import SimpleStringSchema

    env = _env(target, parallelism)
    source = (
        KafkaSource.builder()
        .set_bootstrap_servers(servers)
        .set_topics(topic)
        .set_group_id(f"bench-{uuid.uuid4().hex[:8]}")
        .set_starting_offsets(KafkaOffsetsInitializer.earliest())
        .set_value_only_deserializer(SimpleStringSchema())
        .set_bounded(KafkaOffsetsInitializer.latest())
        .build()
    )
    env.from_source(source, WatermarkStrategy.no_watermarks(), "kafka source").add_sink(CountingDiscard()).name(
        "discard"
    )
    tasks, wall, result = _timed(env, "kafka source bench")
    return tasks, wall, _discarded(result)


def _sink(servers: str, topic: str, guarantee: str, key: bool = False):
    from raylink.api.connectors.kafka import DeliveryGuarantee, KafkaRecordSerializationSchema, KafkaSink
    from raylink.api.serialization import SimpleStringSchema

    schema = (
        KafkaRecordSerializationSchema.builder().set_topic(topic).set_value_serialization_schema(SimpleStringSchema())
    )
    if key:
        schema = schema.set_key_serialization_schema(WordOf())
    builder = (
        KafkaSink.builder()
        .set_bootstrap_servers(servers)
        .set_record_serializer(schema.build())
        .set_delivery_guarantee(DeliveryGuarantee[guarantee])
    )
    if guarantee == "EXACTLY_ONCE":
        builder.set_transactional_id_prefix(f"bench-{topic}")
    return builder.build()


class WordOf(SerializationSchema):
    """The key of a ``word,count`` record."""

    def serialize(self, element: str) -> bytes:
        return element.split(",", 1)[0].encode()


def sink_job(servers: str, topic: str, records: int, guarantee: str, target: str, parallelism: int):
    env = _env(target, parallelism, checkpoints=True)
    env.from_sequence(0, records - 1).map(make_value).sink_to(_sink(servers, topic, guarantee))
    tasks, wall, _ = _timed(env, f"kafka sink bench {guarantee}")
    return tasks, wall


def count_job(servers: str, source_topic: str, sink_topic: str, target: str, parallelism: int):
    """topic -> keyed count -> topic, as a user writes it."""
    from raylink.api import WatermarkStrategy
    from raylink.api.connectors.kafka import (
        DeliveryGuarantee,
        KafkaOffsetsInitializer,
        KafkaRecordSerializationSchema,
        KafkaSink,
        KafkaSource,
    )
    from raylink.api.serialization import SimpleStringSchema

    env = _env(target, parallelism)
    source = (
        KafkaSource.builder()
        .set_bootstrap_servers(servers)
        .set_topics(source_topic)
        .set_group_id("wordcount")
        .set_starting_offsets(KafkaOffsetsInitializer.earliest())
        .set_value_only_deserializer(SimpleStringSchema())
        .set_bounded(KafkaOffsetsInitializer.latest())
        .build()
    )
    sink = (
        KafkaSink.builder()
        .set_bootstrap_servers(servers)
        .set_record_serializer(
            KafkaRecordSerializationSchema.builder()
            .set_topic(sink_topic)
            .set_key_serialization_schema(WordOf())
            .set_value_serialization_schema(SimpleStringSchema())
            .build()
        )
        .set_delivery_guarantee(DeliveryGuarantee.AT_LEAST_ONCE)
        .build()
    )
    (
        env.from_source(source, WatermarkStrategy.no_watermarks(), "lines")
        .flat_map(lambda line: [(w, 1) for w in line.split()])
        .key_by(lambda pair: pair[0])
        .reduce(lambda a, b: (a[0], a[1] + b[1]))
        .map(lambda pair: f"{pair[0]},{pair[1]}")
        .sink_to(sink)
    )
    tasks, wall, _ = _timed(env, "kafka word count")
    return tasks, wall


# --- rounds and the table --------------------------------------------------------------------

GUARANTEES = ("NONE", "AT_LEAST_ONCE", "EXACTLY_ONCE")


def row_keys() -> List[Tuple[str, str, str]]:
    """(row key, label, baseline key) in table order."""
    rows = [("consume", "client: consume(10000) + decode (baseline)", "consume")]
    for p in (1, 2):
        rows.append((f"source p{p}", f"KafkaSource p={p} -> discard, tasks running", "consume"))
        rows.append((f"source p{p} wall", f"KafkaSource p={p} -> discard, wall clock incl. deploy", "consume"))
    for g in GUARANTEES:
        rows.append((f"produce {g}", f"client: produce loop {g} (baseline)", f"produce {g}"))
        for p in (1, 2):
            rows.append((f"sink {g} p{p}", f"KafkaSink {g} p={p}, checkpoints 1 s, tasks running", f"produce {g}"))
            rows.append((f"sink {g} p{p} wall", f"KafkaSink {g} p={p}, wall clock incl. deploy", f"produce {g}"))
    rows.append(("count loop", "client: consume, count in a dict, produce (baseline)", "count loop"))
    for p in (1, 2):
        rows.append((f"count p{p}", f"topic -> keyed count -> topic p={p}, tasks running", "count loop"))
        rows.append((f"count p{p} wall", f"topic -> keyed count -> topic p={p}, wall clock", "count loop"))
    return rows


def one_round(servers: str, records: int, target: str, source_topic: str, lines_topic: str) -> Tuple[dict, dict]:
    """Seconds of every row and the records each row moved, this round."""
    lines = records // WORDS_PER_LINE
    secs: dict = {}
    counts: dict = {}
    secs["consume"], counts["consume"] = consume_loop(servers, source_topic, records)
    for p in (1, 2):
        secs[f"source p{p}"], secs[f"source p{p} wall"], counts[f"source p{p}"] = source_job(
            servers, source_topic, target, p
        )
    for g in GUARANTEES:
        topic = new_topic(servers, PARTITIONS, "bench-produce")
        secs[f"produce {g}"] = produce_loop(servers, topic, records, g)
        counts[f"produce {g}"] = len(read_back(servers, topic, records))
        for p in (1, 2):
            topic = new_topic(servers, PARTITIONS, "bench-sink")
            secs[f"sink {g} p{p}"], secs[f"sink {g} p{p} wall"] = sink_job(servers, topic, records, g, target, p)
            counts[f"sink {g} p{p}"] = len(read_back(servers, topic, records))
    words = lines * WORDS_PER_LINE
    topic = new_topic(servers, PARTITIONS, "bench-counts")
    secs["count loop"], _ = count_loop(servers, lines_topic, topic, lines)
    counts["count loop"] = len(read_back(servers, topic, words))
    for p in (1, 2):
        topic = new_topic(servers, PARTITIONS, "bench-counts")
        secs[f"count p{p}"], secs[f"count p{p} wall"] = count_job(servers, lines_topic, topic, target, p)
        counts[f"count p{p}"] = len(read_back(servers, topic, words))
    return secs, counts


def run(records: int, repeat: int, target: str, servers: Optional[str] = None) -> str:
    """Runs the bench (on ``servers``, else on a broker of its own) and returns the table."""
    if servers is None:
        from raylink.connectors.kafka.broker import KafkaBroker

        with KafkaBroker() as broker:
            return run(records, repeat, target, broker.bootstrap_servers)
    lines = records // WORDS_PER_LINE
    words = lines * WORDS_PER_LINE
    source_topic = new_topic(servers, PARTITIONS, "bench-values")
    fill(servers, source_topic, [make_value(i) for i in range(records)])
    lines_topic = new_topic(servers, PARTITIONS, "bench-lines")
    fill(servers, lines_topic, [make_line(i) for i in range(lines)])
    if target == "ray":
        from raylink.actors.cluster import ensure_ray

        ensure_ray()
    try:
        sink_job(servers, new_topic(servers, 1, "bench-warmup"), 1000, "EXACTLY_ONCE", target, 1)  # warm up
        rounds = [one_round(servers, records, target, source_topic, lines_topic) for _ in range(max(1, repeat))]
    finally:
        if target == "ray":
            from raylink.actors.cluster import shutdown_ray

            shutdown_ray()
    out = [
        f"Kafka connector vs confluent-kafka, {records:,} records of {VALUE_BYTES} B, {words:,} words; "
        f"target {target}; medians of {len(rounds)} interleaved rounds (vs client: the median of each "
        "round's ratio to that round's client loop; records: what the row moved, counted)",
        f"{'row':<66}{'records':>10}{'seconds':>9}{'records/s':>12}{'vs client':>10}",
    ]
    for key, label, base in row_keys():
        name = key.replace(" wall", "")
        got = [c[name] for _, c in rounds]
        count = f"{min(got):,}" if min(got) == max(got) else f"{min(got):,}-{max(got):,}"  # every round's
        moved = words if name.startswith("count") else records
        secs = statistics.median([s[key] for s, _ in rounds])
        ratio = statistics.median([s[base] / s[key] for s, _ in rounds])
        unit = "words/s" if name.startswith("count") else ""
        out.append(f"{label:<66}{count:>10}{secs:>9.2f}{moved / secs:>12,.0f}{ratio:>9.2f}x {unit}".rstrip())
    return "\n".join(out)


def main(argv: Optional[list] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=3, help="interleaved rounds; medians are reported")
    parser.add_argument("--target", choices=("local", "ray"), default="local")
    parser.add_argument("--bootstrap-servers", default=None, help="a running broker instead of one of its own")
    args = parser.parse_args(argv)
    print(run(args.records, args.repeat, args.target, args.bootstrap_servers), flush=True)


if __name__ == "__main__":
    main()
