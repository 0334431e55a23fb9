"""What raylink deliberately does not support is importable under PyFlink's names and fails at
the call, naming the feature and raylink's alternative: the Table API / SQL and Flink's Java
connectors and formats. Also the plain-Python serialization schemas of
``raylink.api.serialization``."""

from __future__ import annotations

import importlib
import pickle

import pytest

from raylink.api.pyflink_compat.unsupported import UnsupportedFeatureError
from raylink.errors import RaylinkError
from raylink.migrate import migrate_source

pytestmark = pytest.mark.timeout(60)

CONNECTORS = [
    "dynamic_kafka",
    "jdbc",
    "elasticsearch",
    "pulsar",
    "cassandra",
    "kinesis",
    "rabbitmq",
    "hybrid_source",
]
FORMATS = ["csv", "avro", "orc", "parquet"]


def test_the_table_api_fails_at_the_call_naming_spark_sql():
    from raylink.table import DataTypes, StreamTableEnvironment, TableDescriptor

    with pytest.raises(UnsupportedFeatureError) as info:
        StreamTableEnvironment.create(stream_execution_environment=None)
    message = str(info.value)
    assert message.startswith(
        "StreamTableEnvironment.create: the Table API and SQL (pyflink.table) is not "
        "supported by raylink; use Spark SQL instead"
    )
    assert "env.from_spark(df)" in message and "env.from_spark_table(path_or_table)" in message
    with pytest.raises(UnsupportedFeatureError, match=r"^DataTypes\.INT: the Table API and SQL"):
        DataTypes.INT()
    with pytest.raises(UnsupportedFeatureError, match=r"^TableDescriptor: the Table API"):
        TableDescriptor()


def test_every_table_submodule_is_importable_and_fails_on_use():
    from raylink.table.expressions import col, lit
    from raylink.table.udf import udf

    for call, name in ((lambda: col("a"), "col"), (lambda: lit(1), "lit"), (lambda: udf(print), "udf")):
        with pytest.raises(UnsupportedFeatureError, match=rf"^{name}: the Table API and SQL .*Spark SQL"):
            call()
    module = importlib.import_module("raylink.table.catalog")
    with pytest.raises(UnsupportedFeatureError, match=r"^Catalog\.get_database"):
        module.Catalog.get_database("x")


def test_a_migrated_table_program_loads_and_fails_at_the_table_call():
    program = (
        "from pyflink.datastream import StreamExecutionEnvironment\n"
        "from pyflink.table import StreamTableEnvironment\n"
        "env = StreamExecutionEnvironment.get_execution_environment()\n"
        "t_env = StreamTableEnvironment.create(stream_execution_environment=env)\n"
    )
    migrated = migrate_source(program).text
    assert "from raylink.table import StreamTableEnvironment" in migrated
    with pytest.raises(UnsupportedFeatureError, match=r"^StreamTableEnvironment\.create: .*Spark SQL"):
        exec(compile(migrated, "<migrated>", "exec"), {"__name__": "__main__"})


@pytest.mark.parametrize("module_name", CONNECTORS)
def test_every_java_connector_class_fails_at_construction_and_on_its_builders(module_name):
    module = importlib.import_module(f"raylink.api.connectors.{module_name}")
    assert module.__all__
    for name in module.__all__:
        cls = getattr(module, name)
        with pytest.raises(UnsupportedFeatureError) as info:
            cls("topic", None, {"bootstrap.servers": "x"})
        message = str(info.value)
        assert message.startswith(f"{name}: the ") and "(Java) is not supported by raylink" in message
        assert "without a JVM" in message and "env.add_source" in message
        with pytest.raises(UnsupportedFeatureError, match=rf"^{name}\.builder: "):
            cls.builder()


def test_kafka_is_a_real_connector_and_only_the_dynamic_kafka_source_is_a_stand_in():
    from raylink.api.connectors.dynamic_kafka import DynamicKafkaSource
    from raylink.api.connectors.kafka import KafkaSink, KafkaSinkBuilder, KafkaSource, KafkaSourceBuilder

    assert isinstance(KafkaSource.builder(), KafkaSourceBuilder)
    assert isinstance(KafkaSink.builder(), KafkaSinkBuilder)
    migrated = migrate_source("from pyflink.datastream.connectors.kafka import KafkaSource\n").text
    assert "from raylink.api.connectors.kafka import KafkaSource" in migrated
    with pytest.raises(UnsupportedFeatureError) as info:
        DynamicKafkaSource.builder()
    assert "dynamic Kafka connector (Java)" in str(info.value)
    assert "a Kafka client (confluent-kafka, kafka-python)" in str(info.value)


@pytest.mark.parametrize("module_name", FORMATS)
def test_every_java_format_fails_naming_the_python_way(module_name):
    module = importlib.import_module(f"raylink.api.formats.{module_name}")
    written = {"ParquetBulkWriters", "AvroBulkWriters", "AvroSchema", "GenericRecordAvroTypeInfo"}
    rows = {"CsvRowSerializationSchema", "CsvRowDeserializationSchema"}
    rows |= {"AvroRowSerializationSchema", "AvroRowDeserializationSchema"}
    for name in set(module.__all__) - written - rows:  # Parquet and Avro part files, the row formats
        with pytest.raises(
            UnsupportedFeatureError,
            match=rf"^{name}: the .* format \(Java\) is not supported"
            r".*records are Python objects",
        ):
            getattr(module, name)()


def test_the_error_is_a_raylink_error_and_a_not_implemented_error_and_pickles():
    from raylink.api.connectors.jdbc import JdbcSink

    with pytest.raises(UnsupportedFeatureError) as info:
        JdbcSink.sink("insert", None)
    error = info.value
    assert isinstance(error, RaylinkError) and isinstance(error, NotImplementedError)
    again = pickle.loads(pickle.dumps(error))
    assert str(again) == str(error) and again.feature == "the JDBC connector (Java)"


def test_stand_ins_answer_introspection_without_raising():
    from raylink.api.connectors.pulsar import StartCursor

    assert not hasattr(StartCursor, "_private")
    assert StartCursor.__name__ == "StartCursor"
    assert "Pulsar connector" in StartCursor.__doc__


def test_delivery_guarantee_is_a_plain_enum():
    from raylink.api.connectors import DeliveryGuarantee

    assert [g.name for g in DeliveryGuarantee] == ["EXACTLY_ONCE", "AT_LEAST_ONCE", "NONE"]


# -- raylink.api.serialization -----------------------------------------------------------------------
def test_simple_string_and_byte_array_schemas_round_trip():
    from raylink.api import ByteArraySchema, SimpleStringSchema

    utf8, latin = SimpleStringSchema(), SimpleStringSchema("ISO-8859-1")
    assert utf8.serialize("gr\u00fc\u00dfe") == "gr\u00fc\u00dfe".encode()
    assert utf8.deserialize("gr\u00fc\u00dfe".encode()) == "gr\u00fc\u00dfe"
    assert latin.serialize("\u00fc") == b"\xfc"
    assert ByteArraySchema().deserialize(bytearray(b"ab")) == b"ab"
    with pytest.raises(ValueError, match="unknown charset 'nope'"):
        SimpleStringSchema("nope")


def test_row_field_extractor_schema():
    from raylink.api.serialization import RowFieldExtractorSchema
    from raylink.api.types import Row

    schema = RowFieldExtractorSchema(1)
    assert schema.serialize(Row(b"k", b"v")) == b"v"
    assert schema.serialize((b"k", None)) == b""
    with pytest.raises(ValueError, match="field 1 must be bytes, got str"):
        schema.serialize(("k", "v"))
    with pytest.raises(ValueError, match="Field index must be non-negative, got: -1"):
        RowFieldExtractorSchema(-1)


def test_bulk_writer_factory_is_a_stand_in():
    from raylink.api.serialization import BulkWriterFactory

    with pytest.raises(UnsupportedFeatureError, match=r"^BulkWriterFactory: Flink's bulk writers \(Java\)"):
        BulkWriterFactory()
