"""The FileSink's bulk format (``FileSink.for_bulk_format`` with PyFlink's
``ParquetBulkWriters``): part files are complete Parquet files rolled at every checkpoint,
committed only when it completes, read back exactly with the declared schema; bad types and
records fail naming the field."""

from __future__ import annotations

import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from raylink.api import BucketAssigner, FileSink, OutputFileConfig, RollingPolicy, Row, Types
from raylink.api.formats.parquet import ParquetBulkWriters
from raylink.connectors.file.bulk_formats import BulkFormatError
from raylink.core.sink import WriterInitContext
from raylink.tests.runtime_jobs import make_env

pytestmark = pytest.mark.timeout(120)

ROW = Types.ROW_NAMED(
    ["id", "name", "score", "tags"], [Types.LONG(), Types.STRING(), Types.DOUBLE(), Types.LIST(Types.STRING())]
)


def _sink(path, row_type=ROW):
    return (
        FileSink.for_bulk_format(str(path), ParquetBulkWriters.for_row_type(row_type))
        .with_bucket_assigner(BucketAssigner.base_path_bucket_assigner())
        .with_output_file_config(OutputFileConfig.builder().with_part_suffix(".parquet").build())
        .build()
    )


def _visible(path):
    return sorted(f for f in os.listdir(path) if not f.startswith((".", "_")))


def test_each_checkpoint_closes_a_complete_parquet_file_visible_only_after_commit(tmp_path):
    sink = _sink(tmp_path)
    writer = sink.create_writer(WriterInitContext(0, 1, 0, None))
    committer = sink.create_committer()
    rows = [(1, "a", 0.5, ["x"]), Row(2, "b", None, []), {"id": 3, "name": None, "score": 2.0, "tags": None}]
    for row in rows:
        writer.write(row)
    writer.flush(False)
    committables = writer.prepare_commit()
    assert len(committables) == 1 and writer.snapshot_state(1)[0].buckets == ()  # nothing to resume
    assert _visible(tmp_path) == []  # pending: hidden until the checkpoint completes
    committer.commit(committables)
    (name,) = _visible(tmp_path)
    assert name == "part-0-0.parquet"
    table = pq.read_table(tmp_path / name)
    assert table.schema == pa.schema(
        [("id", pa.int64()), ("name", pa.string()), ("score", pa.float64()), ("tags", pa.list_(pa.string()))]
    )
    assert table.to_pylist() == [
        {"id": 1, "name": "a", "score": 0.5, "tags": ["x"]},
        {"id": 2, "name": "b", "score": None, "tags": []},
        {"id": 3, "name": None, "score": 2.0, "tags": None},
    ]
    writer.write((4, "d", 1.0, []))
    committer.commit(writer.prepare_commit())
    committer.commit(committables)  # a replayed commit changes nothing
    assert _visible(tmp_path) == ["part-0-0.parquet", "part-0-1.parquet"]
    assert pq.read_table(tmp_path / "part-0-1.parquet").column("id").to_pylist() == [4]


def test_a_record_that_does_not_fit_fails_naming_the_field(tmp_path):
    writer = _sink(tmp_path).create_writer(WriterInitContext(0, 1, 0, None))
    writer.write((1, "a", "not a number", []))
    with pytest.raises(BulkFormatError, match=r"field 'score' \(double\)"):
        writer.prepare_commit()
    writer = _sink(tmp_path).create_writer(WriterInitContext(0, 1, 0, None))
    writer.write((1, "a"))
    with pytest.raises(BulkFormatError, match=r"has 2 fields, the schema 4"):
        writer.prepare_commit()


def test_bulk_formats_refuse_what_they_cannot_do(tmp_path):
    with pytest.raises(BulkFormatError, match="Types.ROW_NAMED"):
        ParquetBulkWriters.for_row_type(Types.STRING())
    with pytest.raises(BulkFormatError, match="PICKLED_BYTE_ARRAY"):
        ParquetBulkWriters.for_row_type(Types.ROW_NAMED(["x"], [Types.PICKLED_BYTE_ARRAY()]))
    builder = FileSink.for_bulk_format(str(tmp_path), ParquetBulkWriters.for_row_type(ROW))
    with pytest.raises(TypeError, match="OnCheckpointRollingPolicy"):
        builder.with_rolling_policy(RollingPolicy.default_rolling_policy()).build()
    schema = pa.schema([("v", pa.int32())])  # a pyarrow schema works as well
    assert ParquetBulkWriters.for_row_type(schema).schema == schema


@pytest.mark.parametrize("checkpointing", [False, True])
def test_a_job_writes_parquet_that_holds_every_record_once(tmp_path, checkpointing):
    conf = {"execution.checkpointing.interval": "100 ms", "execution.checkpointing.dir": str(tmp_path / "chk")}
    env = make_env("local", 2, conf if checkpointing else None)
    row_type = Types.ROW_NAMED(["v", "square"], [Types.INT(), Types.LONG()])
    out = tmp_path / "out"
    env.from_sequence(1, 5000).map(lambda v: (v, v * v)).sink_to(_sink(out, row_type))
    env.execute()
    table = pa.concat_tables(pq.read_table(out / name) for name in _visible(out))
    assert sorted(table.to_pylist(), key=lambda r: r["v"]) == [{"v": v, "square": v * v} for v in range(1, 5001)]
