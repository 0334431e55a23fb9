"""PyFlink's ``FileSource`` with ``StreamFormat.text_line_format()``: bounded reading of files
and directories, decompression, parallel subtasks, directory monitoring, checkpoints."""

from __future__ import annotations

import bz2
import gzip
import lzma
import os
import zlib

import pytest

from raylink.api import Duration, RuntimeExecutionMode, WatermarkStrategy
from raylink.api.connectors.file_system import FileSource, StreamFormat
from raylink.connectors.file.source_operator import FileSourceOperator
from raylink.graph.stream_graph_generator import source_boundedness
from raylink.tests.harness import AbstractStreamOperatorTestHarness
from raylink.tests.runtime_jobs import make_env, multiset

pytestmark = pytest.mark.timeout(120)


def _write(path, data: bytes) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)


def _publish(path, data: bytes) -> None:
    """Make a file appear whole in a watched folder, as Flink's FileSource expects of new files:
    written under a hidden name (which the source skips), then renamed."""
    folder, name = os.path.split(path)
    _write(os.path.join(folder, "." + name + ".tmp"), data)
    os.replace(os.path.join(folder, "." + name + ".tmp"), path)


@pytest.fixture
def tree(tmp_path):
    """A folder of text files in every format the source reads, and the lines they hold."""
    root = tmp_path / "in"
    _write(str(root / "plain.txt"), b"alpha beta\ngamma\r\n\nlast line without newline")
    _write(str(root / "nested" / "deeper" / "n.txt"), "caf\u00e9\nna\u00efve\n".encode())
    _write(str(root / "z.gz"), gzip.compress(b"gz one\ngz two\n"))
    _write(str(root / "z.bz2"), bz2.compress(b"bz one\n"))
    _write(str(root / "z.xz"), lzma.compress(b"xz one\nxz two\n"))
    _write(str(root / "z.deflate"), zlib.compress(b"deflate one\n"))
    _write(str(root / "mac.txt"), b"cr one\rcr two\r")
    _write(str(root / ".hidden.txt"), b"never\n")
    _write(str(root / "_SUCCESS"), b"never\n")
    _write(str(root / "_tmp" / "x.txt"), b"never\n")
    lines = [
        "alpha beta",
        "gamma",
        "",
        "last line without newline",
        "caf\u00e9",
        "na\u00efve",
        "gz one",
        "gz two",
        "bz one",
        "xz one",
        "xz two",
        "deflate one",
        "cr one",
        "cr two",
    ]
    return root, lines


def test_a_bounded_source_reads_every_line_of_every_file_once(target, tree):
    root, lines = tree
    env = make_env(target, 3)
    source = (
        FileSource.for_record_stream_format(StreamFormat.text_line_format(), str(root))
        .process_static_file_set()
        .build()
    )
    ds = env.from_source(source, WatermarkStrategy.no_watermarks(), "file_source")
    assert multiset(ds.map(lambda line: line).execute_and_collect()) == multiset(lines)


def test_files_and_directories_can_be_mixed_and_one_file_is_read_in_order(tmp_path):
    one = tmp_path / "one.txt"
    _write(str(one), "".join(f"line {i}\n" for i in range(5000)).encode())
    other = tmp_path / "dir"
    _write(str(other / "a.txt"), b"a\n")
    env = make_env("local", 1)
    source = FileSource.for_record_stream_format(StreamFormat.text_line_format(), str(one), str(other)).build()
    got = list(env.from_source(source, WatermarkStrategy.no_watermarks(), "files").execute_and_collect())
    assert got == ["a"] + [f"line {i}" for i in range(5000)] or got == [f"line {i}" for i in range(5000)] + ["a"]


def test_a_charset_is_honoured(tmp_path):
    _write(str(tmp_path / "latin.txt"), "gr\u00fc\u00dfe\n".encode("latin-1"))
    env = make_env("local", 1)
    source = FileSource.for_record_stream_format(StreamFormat.text_line_format("ISO-8859-1"), str(tmp_path)).build()
    assert list(env.from_source(source, WatermarkStrategy.no_watermarks(), "f").execute_and_collect()) == [
        "gr\u00fc\u00dfe"
    ]


def test_a_missing_path_fails_the_job_naming_the_source_and_path(tmp_path):
    env = make_env("local", 1)
    source = FileSource.for_record_stream_format(StreamFormat.text_line_format(), str(tmp_path / "nope")).build()
    env.from_source(source, WatermarkStrategy.no_watermarks(), "my files").print()
    with pytest.raises(Exception) as info:
        env.execute()
    text = repr(info.value) + repr(info.value.__cause__)
    assert "my files" in text and "no such file or directory" in text and "nope" in text


def test_bad_arguments_are_refused_when_the_source_is_built(tmp_path):
    with pytest.raises(ValueError, match="unknown charset 'no-such-charset'"):
        StreamFormat.text_line_format("no-such-charset")
    with pytest.raises(ValueError, match="at least one path"):
        FileSource.for_record_stream_format(StreamFormat.text_line_format()).build()
    with pytest.raises(TypeError, match="is not a StreamFormat"):
        FileSource.for_record_stream_format("text", str(tmp_path)).build()
    with pytest.raises(ValueError, match="discovery interval must be > 0"):
        FileSource.for_record_stream_format(StreamFormat.text_line_format(), str(tmp_path)).monitor_continuously(
            Duration.of_millis(0)
        )
    with pytest.raises(NotImplementedError, match="no JVM bulk formats"):
        FileSource.for_bulk_file_format(object(), str(tmp_path))


def test_boundedness_drives_the_automatic_runtime_mode(tmp_path):
    bounded = FileSource.for_record_stream_format(StreamFormat.text_line_format(), str(tmp_path)).build()
    unbounded = (
        FileSource.for_record_stream_format(StreamFormat.text_line_format(), str(tmp_path))
        .monitor_continuously(Duration.of_seconds(1))
        .build()
    )
    assert bounded.get_boundedness().name == "BOUNDED"
    assert unbounded.get_boundedness().name == "CONTINUOUS_UNBOUNDED"
    env = make_env("local", 1)
    a = env.from_source(bounded, WatermarkStrategy.no_watermarks(), "a")
    b = env.from_source(unbounded, WatermarkStrategy.no_watermarks(), "b")
    assert source_boundedness(a._transformation) is True
    assert source_boundedness(b._transformation) is False
    env.set_runtime_mode(RuntimeExecutionMode.AUTOMATIC)


def test_monitoring_reads_files_that_appear_while_the_job_runs(target, tmp_path):
    root = tmp_path / "watched"
    _write(str(root / "first.txt"), b"f1\nf2\n")
    env = make_env(target, 2)
    source = (
        FileSource.for_record_stream_format(StreamFormat.text_line_format(), str(root))
        .monitor_continuously(Duration.of_millis(50))
        .build()
    )
    stream = env.from_source(source, WatermarkStrategy.no_watermarks(), "watched")
    got = []
    with stream.execute_and_collect() as results:
        for line in results:
            got.append(line)
            if line == "f2":  # the first file is read: add more while the job runs
                _publish(str(root / "sub" / "second.txt"), b"s1\n")
                _publish(str(root / "third.gz"), gzip.compress(b"t1\nt2\n"))
                _write(str(root / ".in-progress"), b"never\n")
            if len(got) == 5:
                break
        client = results.job_client
    assert sorted(got) == ["f1", "f2", "s1", "t1", "t2"]
    assert client.wait(30)
    assert client.get_job_status() == "CANCELED"


# -- the operator, driven directly: checkpoint and restore ----------------------------------------------
def test_a_restored_subtask_goes_on_after_the_lines_of_its_checkpoint(tmp_path):
    for name in ("a", "b", "c"):
        _write(str(tmp_path / f"{name}.txt"), "".join(f"{name}{i}\n" for i in range(10)).encode())
    source = FileSource.for_record_stream_format(StreamFormat.text_line_format(), str(tmp_path)).build()
    first = AbstractStreamOperatorTestHarness(FileSourceOperator(source), task_name="src").open()
    while len(first.output.records) < 14:
        assert first.operator.emit_next(3)
    snapshot = first.snapshot(1)
    before = first.extract_output_values()
    first.close()

    restored = AbstractStreamOperatorTestHarness(FileSourceOperator(source), task_name="src").open(restore=[snapshot])
    while restored.operator.emit_next(4):
        pass
    every = [f"{n}{i}" for n in "abc" for i in range(10)]
    assert before + restored.extract_output_values() == every
    restored.close()


def test_files_are_split_over_subtasks_exactly_once(tmp_path):
    for i in range(20):
        _write(str(tmp_path / f"f{i:02}.txt"), f"{i}\n".encode())
    source = FileSource.for_record_stream_format(StreamFormat.text_line_format(), str(tmp_path)).build()
    per_subtask = []
    for index in range(3):
        harness = AbstractStreamOperatorTestHarness(
            FileSourceOperator(source), task_name="src", subtask_index=index, parallelism=3
        ).open()
        while harness.operator.emit_next(100):
            pass
        per_subtask.append(harness.extract_output_values())
        harness.close()
    assert sorted(int(v) for records in per_subtask for v in records) == list(range(20))
    assert all(records for records in per_subtask)
