"""PyFlink 2.3's five Kafka examples (``connectors/kafka_*`` of the ``apache-flink`` wheel),
migrated with ``raylink migrate`` and pointed at the session's broker instead of
``localhost:9092``: each writes its records through the KafkaSink and reads them back through the
KafkaSource (JSON, CSV, Avro, raw bytes), or writes keys and values with
``RowFieldExtractorSchema``. Each prints exactly what PyFlink prints: a row read back through a
row format's deserialization schema is a record of the schema's ``Types.ROW``, which PyFlink
2.3's ``print()`` writes as ``'{kind}[{fields joined by ","}]'`` (``DataStream._align_output_type``
for a ``RowTypeInfo`` stream: ``1> +I[1,hi]``, a None field as ``None``). Checked against PyFlink
2.3 itself with ``flink-sql-connector-kafka`` 4.0.1-2.0 from Maven Central and this broker: the
JSON, CSV and raw-bytes examples print these very lines (the row field extractor example its
``Sending:`` lines); its Avro example fails there before writing
(Flink 2's ``flink-sql-avro`` has no ``AvroRowSerializationSchema`` any more), and raylink prints
its rows by the same rule. Which subtask prints a record differs
from run to run, so the record lines are compared sorted without their ``N> `` prefixes. The
readers never end (the examples read an unbounded topic), so the test stops them once
everything was printed; for the sink-only example, a plain client reads its topic back."""

from __future__ import annotations

import json
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time

import pytest

from raylink.migrate import main as migrate
from raylink.tests.pyflink_examples.cases import RECORDED_PARALLELISM, pyflink_examples_dir, raylink_env

pytestmark = pytest.mark.timeout(300)

ROWS = [(1, "hi"), (2, "hello"), (3, "hi"), (4, "hello"), (5, "hi"), (6, "hello"), (6, "hello")]
COUNTRIES = [{"id": 1, "country": "USA"}, {"id": 2, "country": "Canada"}, {"id": 3, "country": "Germany"}]
_PREFIX = re.compile(r"^\d+> ")


@pytest.fixture(scope="module")
def migrated(tmp_path_factory):
    out = tmp_path_factory.mktemp("kafka-examples")
    assert migrate(["-q", "-o", str(out), os.path.join(pyflink_examples_dir(), "connectors")]) == 0
    return out


def _program(migrated, name: str, servers: str, tmp_path) -> str:
    with open(os.path.join(str(migrated), name)) as f:
        text = f.read()
    assert "localhost:9092" in text and "pyflink" not in "".join(
        line for line in text.splitlines(True) if line.startswith(("import ", "from "))
    )
    path = tmp_path / name
    path.write_text(text.replace("localhost:9092", servers))
    return str(path)


def _run_until(program: str, cwd, done, timeout: float = 200.0):
    """Runs ``program`` until ``done(lines)`` holds for its stdout lines, then stops it
    (SIGTERM; the examples' readers never end by themselves) or until it exits."""
    proc = subprocess.Popen(
        [sys.executable, program],
        cwd=str(cwd),
        env=raylink_env("local"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    lines: "queue.Queue" = queue.Queue()
    errors: list = []
    threading.Thread(target=lambda: [lines.put(line.rstrip("\n")) for line in proc.stdout], daemon=True).start()
    threading.Thread(target=lambda: errors.extend(proc.stderr), daemon=True).start()
    seen: list = []
    deadline = time.monotonic() + timeout
    try:
        while not done(seen) and proc.poll() is None and time.monotonic() < deadline:
            try:
                seen.append(lines.get(timeout=0.5))
            except queue.Empty:
                pass
        while True:  # what it printed before it ended
            try:
                seen.append(lines.get_nowait())
            except queue.Empty:
                break
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    return seen, proc.returncode, "".join(errors)


def _read_part(lines):
    """The record lines printed after ``start reading data from kafka``, without subtask prefixes."""
    if "start reading data from kafka" not in lines:
        return []
    return [_PREFIX.sub("", line) for line in lines[lines.index("start reading data from kafka") + 1 :] if line]


def _record_lines(lines):
    """The lines printed after ``start reading data from kafka``: each must carry a subtask
    prefix of the recorded parallelism (Flink's print sink at parallelism > 1)."""
    printed = lines[lines.index("start reading data from kafka") + 1 :]
    assert all(re.match(rf"^[1-{RECORDED_PARALLELISM}]> ", line) for line in printed), printed
    return sorted(_PREFIX.sub("", line) for line in printed)


@pytest.mark.parametrize("name", ["kafka_json_format.py", "kafka_csv_format.py", "kafka_avro_format.py"])
def test_a_row_format_example_prints_every_row_it_wrote_as_pyflink_does(kafka_broker, migrated, tmp_path, name):
    program = _program(migrated, name, kafka_broker.bootstrap_servers, tmp_path)
    lines, _code, stderr = _run_until(program, tmp_path, lambda seen: len(_read_part(seen)) >= len(ROWS))
    assert lines[:1] == ["start writing data to kafka"] and "start reading data from kafka" in lines, stderr[-3000:]
    assert lines.index("start reading data from kafka") == 1, lines
    assert _record_lines(lines) == sorted(f"+I[{i},{s}]" for i, s in ROWS), stderr[-3000:]


def test_the_bytearray_example_prints_every_message_it_wrote(kafka_broker, migrated, tmp_path):
    program = _program(migrated, "kafka_bytearray_format.py", kafka_broker.bootstrap_servers, tmp_path)
    lines, _code, stderr = _run_until(program, tmp_path, lambda seen: len(_read_part(seen)) >= len(COUNTRIES))
    assert lines[:2] == ["start writing data to kafka", "start reading data from kafka"], stderr[-3000:]
    assert _record_lines(lines) == sorted(json.dumps(c) for c in COUNTRIES), stderr[-3000:]


def test_the_row_field_extractor_example_writes_keys_and_values_from_row_fields(kafka_broker, migrated, tmp_path):
    from confluent_kafka import Consumer, TopicPartition

    servers = kafka_broker.bootstrap_servers
    program = _program(migrated, "kafka_row_field_extractor_example.py", servers, tmp_path)
    lines, code, stderr = _run_until(program, tmp_path, lambda seen: False)
    assert code == 0, stderr[-3000:]
    expected = [
        ("user-001", {"type": "purchase", "item": "laptop", "price": 999.99}),
        ("user-002", {"type": "view", "item": "phone", "timestamp": "2024-01-07T10:30:00"}),
        ("user-001", {"type": "add_to_cart", "item": "mouse", "quantity": 2}),
        ("user-003", {"type": "purchase", "item": "keyboard", "price": 79.99}),
    ]
    # the program's own print() in its map function, at parallelism 1: in input order
    sent = [line for line in lines if line.startswith("Sending: ")]
    assert sent == [f"Sending: User={user}, Event={event}" for user, event in expected], stderr[-3000:]
    topic = "row-extractor-example"
    consumer = Consumer({"bootstrap.servers": servers, "group.id": "check-" + topic})
    partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
    consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
    got = []
    try:
        deadline = time.monotonic() + 30
        while len(got) < 4 and time.monotonic() < deadline:
            got.extend((m.key(), m.value()) for m in consumer.consume(10, 1.0) if m.error() is None)
    finally:
        consumer.close()
    canonical = lambda pairs: sorted((key, json.dumps(value, sort_keys=True)) for key, value in pairs)
    assert canonical((k.decode(), json.loads(v)) for k, v in got) == canonical(expected)


AVRO_SCHEMA = json.dumps(
    {
        "type": "record",
        "name": "T",
        "fields": [
            {"name": "id", "type": "int"},
            {"name": "name", "type": ["null", "string"]},
            {"name": "tags", "type": {"type": "array", "items": "long"}},
        ],
    }
)


def test_a_kafka_source_with_a_row_schema_is_a_stream_of_its_row_type_and_prints_its_rows_as_pyflink():
    """What the examples rely on, without a broker: the stream's type is the row schema's, and
    a row with a None field prints as PyFlink 2.3 printed ``(2, None)`` declared
    ``Types.ROW([INT, STRING])``: ``+I[2,None]``."""
    from raylink.api import Row, Types
    from raylink.api.connectors.kafka import FlinkKafkaConsumer, KafkaSource
    from raylink.api.formats.avro import AvroRowDeserializationSchema
    from raylink.api.formats.csv import CsvRowDeserializationSchema
    from raylink.api.formats.json import JsonRowDeserializationSchema
    from raylink.api.serialization import SimpleStringSchema
    from raylink.operators.print_format import record_formatter
    from raylink.tests.runtime_jobs import make_env

    row = Types.ROW([Types.INT(), Types.STRING()])
    schemas = {
        "json": JsonRowDeserializationSchema.builder().type_info(row).build(),
        "csv": CsvRowDeserializationSchema.Builder(row).build(),
        "avro": AvroRowDeserializationSchema(avro_schema_string=AVRO_SCHEMA),
        "string": SimpleStringSchema(),
    }
    env = make_env("local", 1)

    def source_type(schema):
        source = KafkaSource.builder().set_bootstrap_servers("localhost:1").set_topics("t")
        return env.from_source(source.set_value_only_deserializer(schema).build(), None, "k").get_type()

    types = {name: source_type(schema) for name, schema in schemas.items()}
    assert types["json"] is row and types["csv"] is row and types["string"] is None
    assert str(types["avro"]) == "ROW<id: INT, name: STRING, tags: OBJECT_ARRAY<LONG>>"
    with pytest.warns(DeprecationWarning):
        legacy = FlinkKafkaConsumer("t", schemas["json"], {"bootstrap.servers": "localhost:1"})
    assert env.add_source(legacy).get_type() is row
    fmt = record_formatter(row)
    assert [fmt(schemas["json"].deserialize(b'{"f0": 2, "f1": null}')), fmt(Row(1, "hi"))] == ["+I[2,None]", "+I[1,hi]"]
    assert record_formatter(types["avro"])(Row(1, "a", [2, 3])) == "+I[1,a,[2, 3]]"
