"""The row formats PyFlink's Kafka examples use, under PyFlink's module paths: JSON, CSV and Avro
row (de)serialization schemas write the bytes Flink's formats write (checked against the formats'
specifications) and read them back; a KafkaSource reads records a plain client produced in each
format."""

from __future__ import annotations

import json

import pytest

from raylink.api import Row, Types, WatermarkStrategy
from raylink.api.connectors.kafka import KafkaOffsetsInitializer, KafkaSource
from raylink.api.formats.avro import AvroRowDeserializationSchema, AvroRowSerializationSchema
from raylink.api.formats.csv import CsvRowDeserializationSchema, CsvRowSerializationSchema
from raylink.api.formats.json import JsonRowDeserializationSchema, JsonRowSerializationSchema
from raylink.migrate import migrate_source
from raylink.tests.kafka_util import new_topic, produce
from raylink.tests.runtime_jobs import make_env

ROW = Types.ROW([Types.INT(), Types.STRING()])
AVRO = json.dumps(
    {
        "type": "record",
        "name": "TestRecord",
        "fields": [{"name": "id", "type": "int"}, {"name": "name", "type": "string"}],
    }
)
ROWS = [(1, "hi"), (2, "hello"), (-3, 'with, comma "quoted"'), (4, "caf\u00e9")]


def test_json_rows_are_objects_keyed_by_the_field_names():
    ser = JsonRowSerializationSchema.Builder().with_type_info(ROW).build()
    assert ser.serialize((1, "hi")) == b'{"f0":1,"f1":"hi"}'
    named = Types.ROW_NAMED(["id", "name"], [Types.INT(), Types.STRING()])
    assert JsonRowSerializationSchema.builder().with_type_info(named).build().serialize(Row(2, "x")) == (
        b'{"id":2,"name":"x"}'
    )
    de = JsonRowDeserializationSchema.Builder().type_info(ROW).build()
    assert [de.deserialize(ser.serialize(r)) for r in ROWS] == [Row(*r) for r in ROWS]
    assert de.deserialize(b'{"f1":"only"}') == Row(None, "only")
    strict = JsonRowDeserializationSchema.builder().type_info(ROW).fail_on_missing_field().build()
    with pytest.raises(ValueError, match="field 'f0' is missing"):
        strict.deserialize(b'{"f1":"only"}')
    with pytest.raises(ValueError, match=r"cannot read b'not json'"):
        de.deserialize(b"not json")
    lenient = JsonRowDeserializationSchema.builder().type_info(ROW).ignore_parse_errors().build()
    assert lenient.deserialize(b"not json") is None


def test_csv_rows_are_lines_quoted_only_where_needed_and_typed_when_read():
    ser = CsvRowSerializationSchema.Builder(ROW).build()
    assert ser.serialize((1, "hi")) == b"1,hi\n"
    assert ser.serialize((-3, 'with, comma "quoted"')) == b'-3,"with, comma ""quoted"""\n'
    assert ser.serialize((None, "x")) == b",x\n"
    de = CsvRowDeserializationSchema.Builder(ROW).build()
    assert [de.deserialize(ser.serialize(r)) for r in ROWS] == [Row(*r) for r in ROWS]
    assert de.deserialize(b",x") == Row(None, "x")
    typed = Types.ROW([Types.DOUBLE(), Types.BOOLEAN(), Types.BASIC_ARRAY(Types.INT())])
    semi = CsvRowSerializationSchema.Builder(typed).set_field_delimiter("|").build()
    assert semi.serialize((1.5, True, [1, 2])) == b"1.5|true|1;2\n"
    back = CsvRowDeserializationSchema.Builder(typed).set_field_delimiter("|").build()
    assert back.deserialize(b"1.5|true|1;2\n") == Row(1.5, True, [1, 2])
    with pytest.raises(ValueError, match=r"cannot read 'x,hi'"):
        de.deserialize(b"x,hi")
    assert CsvRowDeserializationSchema.Builder(ROW).set_ignore_parse_errors(True).build().deserialize(b"x") is None


def test_avro_rows_are_one_record_in_avro_binary_encoding():
    ser = AvroRowSerializationSchema(avro_schema_string=AVRO)
    # Avro: an int is a zig-zag varint (1 -> 0x02), a string its length (zig-zag) and UTF-8 bytes
    assert ser.serialize((1, "hi")) == b"\x02\x04hi"
    assert ser.serialize({"id": -1, "name": ""}) == b"\x01\x00"
    assert ser.serialize(Row(f0=1, f1="hi")) == b"\x02\x04hi"  # a Types.ROW row: by position, as Flink maps a Row
    de = AvroRowDeserializationSchema(avro_schema_string=AVRO)
    assert [de.deserialize(ser.serialize(r)) for r in ROWS] == [Row(*r) for r in ROWS]
    with pytest.raises(ValueError, match="record_class names a Java"):
        AvroRowSerializationSchema(record_class="com.example.Rec")
    with pytest.raises(ValueError, match="cannot read"):
        de.deserialize(b"\x02")


def test_pyflink_format_imports_migrate_to_these_modules():
    program = (
        "from pyflink.datastream.formats.json import JsonRowSerializationSchema\n"
        "from pyflink.datastream.formats.csv import CsvRowDeserializationSchema\n"
        "from pyflink.datastream.formats.avro import AvroRowSerializationSchema\n"
    )
    migrated = migrate_source(program).text
    namespace: dict = {}
    exec(compile(migrated, "<migrated>", "exec"), namespace)
    assert namespace["JsonRowSerializationSchema"] is JsonRowSerializationSchema
    assert namespace["CsvRowDeserializationSchema"] is CsvRowDeserializationSchema
    assert namespace["AvroRowSerializationSchema"] is AvroRowSerializationSchema


@pytest.mark.timeout(180)
@pytest.mark.parametrize("fmt", ["json", "csv", "avro"])
def test_a_kafka_source_reads_rows_a_plain_client_produced_in_each_format(kafka_broker, fmt):
    if fmt == "json":
        encode = lambda r: json.dumps({"f0": r[0], "f1": r[1]}).encode()
        schema = JsonRowDeserializationSchema.builder().type_info(ROW).build()
    elif fmt == "csv":
        encode = lambda r: (
            (f'{r[0]},"{r[1]}"' if "," in r[1] else f"{r[0]},{r[1]}").replace('"quoted"', '""quoted""').encode()
        )
        schema = CsvRowDeserializationSchema.Builder(ROW).build()
    else:
        encode = AvroRowSerializationSchema(avro_schema_string=AVRO).serialize
        schema = AvroRowDeserializationSchema(avro_schema_string=AVRO)
    servers = kafka_broker.bootstrap_servers
    topic = new_topic(servers, 2)
    produce(servers, topic, [(i % 2, None, encode(r), None) for i, r in enumerate(ROWS)])
    source = (
        KafkaSource.builder()
        .set_bootstrap_servers(servers)
        .set_topics(topic)
        .set_value_only_deserializer(schema)
        .set_bounded(KafkaOffsetsInitializer.latest())
        .build()
    )
    env = make_env("local", 1)
    got = list(env.from_source(source, WatermarkStrategy.no_watermarks(), "k").execute_and_collect())
    assert sorted(tuple(r) for r in got) == sorted(ROWS)
