"""The FileSink's Avro bulk format (``FileSink.for_bulk_format(path,
AvroBulkWriters.for_generic_record(AvroSchema.parse_string(...)))``, PyFlink's
``pyflink.datastream.formats.avro``): part files are complete Avro container files rolled at
checkpoints only, committed when the checkpoint completes, read back with fastavro exactly as
written; schemas and records that do not fit fail naming the sink, the field and the value."""

from __future__ import annotations

import json
import os
import pickle

import fastavro
import pytest

from raylink.api import BucketAssigner, FileSink, OutputFileConfig, Row
from raylink.api.formats.avro import AvroBulkWriters, AvroSchema, GenericRecordAvroTypeInfo
from raylink.connectors.file.bulk_formats import AVRO_SYNC_INTERVAL, BulkFormatError
from raylink.core.sink import WriterInitContext
from raylink.migrate import migrate_source
from raylink.tests.runtime_jobs import make_env

pytestmark = pytest.mark.timeout(120)

SCHEMA_JSON = json.dumps(
    {
        "type": "record",
        "name": "Reading",
        "namespace": "raylink.test",
        "fields": [
            {"name": "id", "type": "long"},
            {"name": "name", "type": ["null", "string"], "default": None},
            {"name": "score", "type": "double"},
            {"name": "tags", "type": {"type": "array", "items": "string"}},
            {"name": "counts", "type": {"type": "map", "values": "int"}},
        ],
    }
)
SQUARES_JSON = json.dumps(
    {"type": "record", "name": "Square", "fields": [{"name": "v", "type": "int"}, {"name": "square", "type": "long"}]}
)


def _sink(path, schema_json=SCHEMA_JSON):
    return (
        FileSink.for_bulk_format(str(path), AvroBulkWriters.for_generic_record(AvroSchema.parse_string(schema_json)))
        .with_bucket_assigner(BucketAssigner.base_path_bucket_assigner())
        .with_output_file_config(OutputFileConfig.builder().with_part_suffix(".avro").build())
        .build()
    )


def _visible(path):
    return sorted(f for f in os.listdir(path) if not f.startswith((".", "_")))


def _read(path):
    with open(path, "rb") as f:
        return list(fastavro.reader(f))


def test_each_checkpoint_closes_a_complete_avro_file_visible_only_after_commit(tmp_path):
    sink = _sink(tmp_path)
    writer = sink.create_writer(WriterInitContext(0, 1, 0, None))
    committer = sink.create_committer()
    records = [
        {"id": 1, "name": "a", "score": 0.5, "tags": ["x"], "counts": {"k": 1}},
        {"id": 2, "score": -1.25, "tags": [], "counts": {}},  # name left out: its default (null)
        Row(id=3, name=None, score=2.0, tags=["y", "z"], counts={"a": 7, "b": -2}),  # a named Row is a record
    ]
    for record in records:
        writer.write(record)
    writer.flush(False)
    committables = writer.prepare_commit()
    assert len(committables) == 1 and writer.snapshot_state(1)[0].buckets == ()  # nothing to resume
    assert _visible(tmp_path) == []  # pending: hidden until the checkpoint completes
    committer.commit(committables)
    (name,) = _visible(tmp_path)
    assert name == "part-0-0.avro"
    with open(tmp_path / name, "rb") as f:
        reader = fastavro.reader(f)
        assert reader.writer_schema["name"] == "raylink.test.Reading"
        assert reader.codec == "null"  # Flink's AvroWriters.forGenericRecord: no compression
        assert list(reader) == [
            {"id": 1, "name": "a", "score": 0.5, "tags": ["x"], "counts": {"k": 1}},
            {"id": 2, "name": None, "score": -1.25, "tags": [], "counts": {}},
            {"id": 3, "name": None, "score": 2.0, "tags": ["y", "z"], "counts": {"a": 7, "b": -2}},
        ]
    writer.write({"id": 4, "name": "d", "score": 1.0, "tags": [], "counts": {}})
    committer.commit(writer.prepare_commit())
    committer.commit(committables)  # a replayed commit changes nothing
    assert _visible(tmp_path) == ["part-0-0.avro", "part-0-1.avro"]
    assert [r["id"] for r in _read(tmp_path / "part-0-1.avro")] == [4]


def test_a_part_file_rolls_at_checkpoints_only_however_many_blocks_it_holds(tmp_path):
    """Far more than one data block (~16 kB) of records between two checkpoints: one part
    file, complete, holding them all in order."""
    sink = _sink(tmp_path)
    writer = sink.create_writer(WriterInitContext(0, 1, 0, None))
    committer = sink.create_committer()
    records = [
        {"id": i, "name": f"name-{i}" * 4, "score": i / 3, "tags": [str(i)] * 3, "counts": {"i": i % 1000}}
        for i in range(20_000)
    ]
    for record in records:
        writer.write(record)
    writer.flush(False)  # a flush that is not the end of input rolls nothing
    hidden = [f for f in os.listdir(tmp_path) if ".inprogress." in f]
    assert len(hidden) == 1 and os.path.getsize(tmp_path / hidden[0]) > 20 * AVRO_SYNC_INTERVAL
    committer.commit(writer.prepare_commit())
    (name,) = _visible(tmp_path)
    assert [r["id"] for r in _read(tmp_path / name)] == list(range(20_000))


@pytest.mark.parametrize(
    "record, message",
    [
        (
            {"id": "seven", "score": 1.0, "tags": [], "counts": {}},
            r"FileSink \(Avro, schema raylink.test.Reading\): record .* does not fit: field 'id' = 'seven', "
            r"expected long",
        ),
        (
            {"id": 1, "name": 3, "score": 1.0, "tags": [], "counts": {}},
            r"field 'name' = 3, expected null or string",
        ),
        ({"id": 1, "score": 1.0, "tags": [1], "counts": {}}, r"field 'tags' = 1, expected string"),
        ({"name": "x", "score": 1.0, "tags": [], "counts": {}}, r"field 'id' = None, expected long"),
        ({"id": 2**70, "score": 1.0, "tags": [], "counts": {}}, rf"field 'id' = {2**70}, expected long"),
        ((1, "a", 1.0, [], {}), r"is a tuple; Avro generic records are dicts by field name"),
    ],
)
def test_a_record_that_does_not_fit_fails_naming_the_sink_the_field_and_the_value(tmp_path, record, message):
    writer = _sink(tmp_path).create_writer(WriterInitContext(0, 1, 0, None))
    with pytest.raises(BulkFormatError, match=message):
        writer.write(record)


def test_a_job_whose_record_does_not_fit_fails_naming_the_field(tmp_path):
    env = make_env("local", 1)
    schema = AvroSchema.parse_string(SQUARES_JSON)
    env.from_collection([1, 2, 3]).map(
        lambda v: {"v": v, "square": "big" if v == 2 else v * v}, output_type=GenericRecordAvroTypeInfo(schema)
    ).sink_to(_sink(tmp_path / "out", SQUARES_JSON))
    with pytest.raises(Exception, match=r"FileSink \(Avro, schema Square\): record .* field 'square' = 'big'"):
        env.execute()


def test_schemas_that_avro_refuses_fail_naming_the_call(tmp_path):
    with pytest.raises(BulkFormatError, match=r"AvroSchema.parse_string: the schema is not JSON"):
        AvroSchema.parse_string("{not json")
    with pytest.raises(BulkFormatError, match=r"AvroSchema.parse_string: not a valid Avro schema"):
        AvroSchema.parse_string(json.dumps({"type": "record", "name": "R", "fields": [{"name": "x", "type": "nope"}]}))
    with pytest.raises(BulkFormatError, match=r"AvroSchema.parse_file\('.*missing.avsc'\)"):
        AvroSchema.parse_file(str(tmp_path / "missing.avsc"))
    with pytest.raises(BulkFormatError, match=r"expected an AvroSchema"):
        AvroBulkWriters.for_generic_record(SCHEMA_JSON)
    with pytest.raises(TypeError, match=r"GenericRecordAvroTypeInfo: expected an AvroSchema"):
        GenericRecordAvroTypeInfo({"type": "string"})


def test_schema_and_type_info_are_values(tmp_path):
    (tmp_path / "reading.avsc").write_text(SCHEMA_JSON)
    from_file = AvroSchema.parse_file(str(tmp_path / "reading.avsc"))
    schema = AvroSchema.parse_string(SCHEMA_JSON)
    assert from_file == schema and json.loads(str(schema)) == json.loads(SCHEMA_JSON)
    type_info = GenericRecordAvroTypeInfo(schema)
    assert pickle.loads(pickle.dumps(type_info)) == type_info == GenericRecordAvroTypeInfo(from_file)
    assert type_info.get_field_names() == ["id", "name", "score", "tags", "counts"]
    assert repr(type_info) == "GenericRecordAvroTypeInfo<raylink.test.Reading>"


def test_a_pyflink_program_writing_avro_runs_after_migration(tmp_path):
    """PyFlink's documented way: a pass-through map declares GenericRecordAvroTypeInfo before the
    sink; after ``raylink migrate`` the program runs and the files hold every record once."""
    out = tmp_path / "out"
    program = f"""
from pyflink.common import Types
from pyflink.datastream import StreamExecutionEnvironment
from pyflink.datastream.connectors.file_system import FileSink, OutputFileConfig
from pyflink.datastream.formats.avro import AvroBulkWriters, AvroSchema, GenericRecordAvroTypeInfo

env = StreamExecutionEnvironment.get_execution_environment()
env.set_parallelism(2)
schema = AvroSchema.parse_string({SQUARES_JSON!r})
sink = FileSink.for_bulk_format({str(out)!r}, AvroBulkWriters.for_generic_record(schema)).with_output_file_config(
    OutputFileConfig.builder().with_part_suffix(".avro").build()).build()
ds = env.from_collection([{{"v": v, "square": v * v}} for v in range(1, 1001)], type_info=Types.PICKLED_BYTE_ARRAY())
ds.map(lambda e: e, output_type=GenericRecordAvroTypeInfo(schema)).sink_to(sink)
env.execute("avro")
"""
    migrated = migrate_source(program).text
    assert "from raylink.api.formats.avro import AvroBulkWriters" in migrated
    exec(compile(migrated, "<migrated>", "exec"), {"__name__": "__main__"})
    files = [os.path.join(root, f) for root, _, names in os.walk(out) for f in names if not f.startswith(".")]
    assert files and all(f.endswith(".avro") for f in files)
    records = [r for f in files for r in _read(f)]
    assert sorted(records, key=lambda r: r["v"]) == [{"v": v, "square": v * v} for v in range(1, 1001)]


@pytest.mark.parametrize("checkpointing", [False, True])
def test_a_job_writes_avro_that_holds_every_record_once(tmp_path, checkpointing):
    conf = {"execution.checkpointing.interval": "100 ms", "execution.checkpointing.dir": str(tmp_path / "chk")}
    env = make_env("local", 2, conf if checkpointing else None)
    schema = AvroSchema.parse_string(SQUARES_JSON)
    out = tmp_path / "out"
    env.from_sequence(1, 5000).map(
        lambda v: {"v": v, "square": v * v}, output_type=GenericRecordAvroTypeInfo(schema)
    ).sink_to(_sink(out, SQUARES_JSON))
    env.execute()
    names = _visible(out)
    if not checkpointing:  # no checkpoint, so each subtask's one part file rolls at its end of input
        assert len(names) == 2
    records = [r for name in names for r in _read(out / name)]
    assert sorted(records, key=lambda r: r["v"]) == [{"v": v, "square": v * v} for v in range(1, 5001)]
