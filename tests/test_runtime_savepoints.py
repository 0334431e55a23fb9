"""Savepoints end to end (PyFlink's ``JobClient.trigger_savepoint`` / ``stop_with_savepoint``,
``execution.savepoint.path``): a keyed rolling count into the exactly-once FileSink is stopped
with a savepoint and the same program (same uids) started from it at another parallelism —
also after the savepoint folder was moved — and the two runs' committed files together hold
every rolling count of the input exactly once (the reference is computed in the test, without
raylink). Savepoints that do not fit the program are refused before anything runs, naming the
operator or the file."""

from __future__ import annotations

import os
import shutil
from collections import Counter

import pytest

from raylink.api import (
    Encoder,
    FileSink,
    OutputFileConfig,
    RollingPolicy,
    Time,
    TimestampAssigner,
    TumblingEventTimeWindows,
    WatermarkStrategy,
)
from raylink.api.connectors.file_system import FileSource, StreamFormat
from raylink.bench.failover import KEYS, committed_lines, reference
from raylink.errors import RaylinkError
from raylink.state.checkpoint_storage import CheckpointStorageError
from raylink.state.snapshots import StateRestoreError
from raylink.tests.runtime_jobs import make_env, wait_for
from raylink.tests.test_runtime_checkpointing import Paced, add_counts, checkpointing_env
from raylink.tests.test_runtime_drain import Logged, logged
from raylink.tests.test_runtime_exactly_once_sinks import spark_values

N = 16_000  # ~4 s at p=2 (Paced: 1 ms every 2 records per subtask)


def number_files(folder, n: int = N, files: int = 8) -> str:
    """The numbers 1..n as text lines spread over ``files`` files (a FileSource's input)."""
    os.makedirs(folder, exist_ok=True)
    for f in range(files):
        with open(os.path.join(folder, f"numbers-{f}.txt"), "w", encoding="utf-8") as out:
            out.writelines(f"{v}\n" for v in range(1 + f, n + 1, files))
    return str(folder)


def build(env, out_dir, n: int = N, reduce_uid: str = "rolling-count", max_parallelism: int = 0, files: str = ""):
    """The keyed rolling count of 1..n (``files``: read from that folder by a FileSource)."""
    sink = (
        FileSink.for_row_format(str(out_dir), Encoder.simple_string_encoder())
        .with_output_file_config(OutputFileConfig.builder().with_part_prefix("part").build())
        .with_rolling_policy(RollingPolicy.on_checkpoint_rolling_policy())
        .build()
    )
    if files:
        source = FileSource.for_record_stream_format(StreamFormat.text_line_format(), files).build()
        numbers = env.from_source(source, WatermarkStrategy.no_watermarks(), "files").uid("numbers").map(int)
    else:
        numbers = env.from_sequence(1, n).uid("numbers")
    counts = (
        numbers.map(Paced())
        .uid("paced")
        .map(lambda v: (v % KEYS, 1))
        .uid("pairs")
        .key_by(lambda kv: kv[0])
        .reduce(add_counts)
        .uid(reduce_uid)
    )
    if max_parallelism:
        counts.set_max_parallelism(max_parallelism)
    counts.map(lambda kv: f"{kv[0]},{kv[1]}").uid("format").sink_to(sink).uid("files")


def wait_running_with_a_checkpoint(client, out=None) -> None:
    """Wait until the job runs with a checkpoint of its current deployment completed (after its
    last restore: a restarted job is RUNNING before its checkpoints are, and like Flink refuses
    a savepoint until then) and, given ``out``, has committed output there."""

    def checkpointed() -> bool:
        stats = client.get_checkpoint_stats()
        last, restored = stats["lastCheckpointId"], stats["lastRestoredCheckpointId"]
        return last is not None and (restored is None or last > restored)

    assert wait_for(
        lambda: client.get_job_status() == "RUNNING" and checkpointed() and (out is None or bool(committed_lines(out))),
        client,
        timeout=120,
    )
    assert not client.wait(0), "the job ended too soon"


def stop_after_a_checkpoint(client, savepoints, drain: bool = False, out=None) -> str:
    """Once the job runs with a completed checkpoint, stop it with a savepoint."""
    wait_running_with_a_checkpoint(client, out)
    path = client.stop_with_savepoint(drain, str(savepoints)).result(timeout=120)
    assert client.wait(30) and client.get_job_status() == "FINISHED", client.get_job_status()
    return path


def run_from(target, parallelism, tmp_path, out, path, n: int = N, files: str = "", **extra):
    env = checkpointing_env(target, parallelism, tmp_path, **{"execution.savepoint.path": path, **extra})
    build(env, out, n, files=files)
    client = env.execute_async()
    assert client.wait(180), "the restored job did not finish"
    assert client.get_job_status() == "FINISHED", client.get_job_status()
    return client


@pytest.mark.slow
@pytest.mark.timeout(400)
@pytest.mark.parametrize(
    "before, after, source, moved",
    [(2, 3, "sequence", False), (3, 1, "sequence", True), (3, 2, "files", True)],
)
def test_stop_with_savepoint_then_resume_at_another_parallelism_exactly_once(
    ray_session, tmp_path, before, after, source, moved
):
    first, second = tmp_path / "out-1", tmp_path / "out-2"
    files = number_files(tmp_path / "numbers") if source == "files" else ""
    env = checkpointing_env("ray", before, tmp_path)
    build(env, first, files=files)
    client = env.execute_async()
    path = stop_after_a_checkpoint(client, tmp_path / "savepoints")
    assert os.path.isfile(os.path.join(path, "_metadata")) and os.path.basename(path).startswith("savepoint-")
    stopped = committed_lines(first)
    assert 0 < sum(stopped.values()) < N, "the first run was not stopped part-way"
    if moved:  # relative names inside: the folder restores wherever it was copied to
        path = shutil.move(path, str(tmp_path / "elsewhere"))

    restored = run_from("ray", after, tmp_path, second, path, files=files)
    assert restored.get_checkpoint_stats()["lastRestoredCheckpointId"] is not None
    both = stopped + committed_lines(second)
    assert both == reference(N), "rolling counts lost or repeated across the savepoint"


class ValueTime(TimestampAssigner):
    def extract_timestamp(self, value, record_timestamp):
        return value  # event time: the number itself, in ms


def build_windows(env, out_dir, log, n: int = N):
    """Per key, the count of each 200 ms event-time tumbling window of 1..n, as "key,count";
    the values the sources emitted go to ``log`` too (:class:`Logged`)."""
    sink = (
        FileSink.for_row_format(str(out_dir), Encoder.simple_string_encoder())
        .with_rolling_policy(RollingPolicy.on_checkpoint_rolling_policy())
        .build()
    )
    (
        env.from_sequence(1, n)
        .uid("numbers")
        .map(Logged(str(log)))
        .uid("log")
        .map(Paced())
        .uid("paced")
        .assign_timestamps_and_watermarks(
            WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(ValueTime())
        )
        .uid("timestamps")
        .map(lambda v: (v % KEYS, 1))
        .uid("pairs")
        .key_by(lambda kv: kv[0])
        .window(TumblingEventTimeWindows.of(Time.milliseconds(200)))
        .reduce(add_counts)
        .uid("windows")
        .map(lambda kv: f"{kv[0]},{kv[1]}")
        .uid("format")
        .sink_to(sink)
        .uid("files")
    )


def counted(lines) -> Counter:
    """Records counted per key in "key,count" lines."""
    total: Counter = Counter()
    for line, times in lines.items():
        key, count = line.split(",")
        total[int(key)] += int(count) * times
    return total


@pytest.mark.timeout(300)
@pytest.mark.parametrize("drain", [False, True], ids=["suspend", "drain"])
def test_event_time_windows_count_every_record_once_across_a_stop_with_savepoint(tmp_path, drain):
    """Without drain the open windows travel in the savepoint and the restored job counts the
    rest of their records: the two runs together count every record exactly once. With drain
    (FLIP-147: the end of event time, then every operator finishes before the savepoint) every
    window fires before it, the first run counts every record its sources emitted, and the job
    restored from the drained savepoint finds its sources ended and counts nothing. Local
    target, p=2 then 1, the savepoint folder moved in between."""
    first, second = tmp_path / "out-1", tmp_path / "out-2"
    env = checkpointing_env("local", 2, tmp_path)
    build_windows(env, first, tmp_path / "emitted-1")
    stopped = env.execute_async()
    path = stop_after_a_checkpoint(stopped, tmp_path / "savepoints", drain=drain)
    moved = shutil.move(path, str(tmp_path / "elsewhere"))
    env = checkpointing_env("local", 1, tmp_path, **{"execution.savepoint.path": moved})
    build_windows(env, second, tmp_path / "emitted-2")
    client = env.execute_async()
    assert client.wait(180) and client.get_job_status() == "FINISHED"
    before, after = counted(committed_lines(first)), counted(committed_lines(second))
    assert sum(before.values()) > 0
    if drain:  # every window of what the sources emitted (counted outside raylink) fired before the stop
        emitted = logged(tmp_path / "emitted-1")
        assert len(set(emitted)) == len(emitted) < N and set(emitted) <= set(range(1, N + 1))
        assert before == Counter(v % KEYS for v in emitted)
        assert after == Counter() and logged(tmp_path / "emitted-2") == []
    else:
        assert sum(after.values()) > 0
        assert before + after == Counter(v % KEYS for v in range(1, N + 1))


@pytest.mark.timeout(300)
def test_trigger_savepoint_keeps_the_job_running(tmp_path):
    out = tmp_path / "out"
    env = checkpointing_env("local", 2, tmp_path)
    build(env, out)
    client = env.execute_async()
    assert wait_for(lambda: client.get_job_status() == "RUNNING", client, timeout=60)
    path = client.trigger_savepoint(str(tmp_path / "savepoints")).result(timeout=60)
    assert os.path.isfile(os.path.join(path, "_metadata"))
    assert client.wait(120) and client.get_job_status() == "FINISHED"
    assert committed_lines(out) == reference(N)  # the savepoint changed nothing of the output
    assert os.path.isdir(path), "a savepoint outlives the job (checkpoints are discarded)"


@pytest.fixture(scope="module")
def small_savepoint(tmp_path_factory):
    """A savepoint of the test program at p=2, taken part-way on the local target (every state
    in a file of its own)."""
    tmp_path = tmp_path_factory.mktemp("savepoint")
    env = checkpointing_env("local", 2, tmp_path, **{"execution.checkpointing.data-inline-threshold": "0"})
    build(env, tmp_path / "out")
    client = env.execute_async()
    return stop_after_a_checkpoint(client, tmp_path / "savepoints")


def _refused(tmp_path, path, error=StateRestoreError, **build_args):
    env = checkpointing_env("local", 2, tmp_path, **{"execution.savepoint.path": path})
    build(env, tmp_path / "out", **build_args)
    with pytest.raises(error) as raised:
        env.execute_async()
    assert not (tmp_path / "out").exists(), "the refused job started writing"
    return str(raised.value)


@pytest.mark.timeout(120)
def test_state_of_an_operator_the_program_lost_is_refused_unless_allowed(tmp_path, small_savepoint):
    message = _refused(tmp_path, small_savepoint, reduce_uid="another-uid")
    assert "'Reduce' in the savepoint's program" in message or "Reduce" in message, message
    assert "execution.savepoint.ignore-unclaimed-state" in message and "--allow-non-restored-state" in message
    env = checkpointing_env(
        "local",
        2,
        tmp_path,
        **{"execution.savepoint.path": small_savepoint, "execution.savepoint.ignore-unclaimed-state": True},
    )
    build(env, tmp_path / "allowed", reduce_uid="another-uid")
    client = env.execute_async()
    assert client.wait(120) and client.get_job_status() == "FINISHED"


@pytest.mark.timeout(120)
def test_a_changed_max_parallelism_is_refused_naming_the_operator(tmp_path, small_savepoint):
    message = _refused(tmp_path, small_savepoint, max_parallelism=256)
    assert "maximum parallelism (128)" in message and "(256)" in message and "Reduce" in message, message


@pytest.mark.timeout(120)
def test_a_savepoint_missing_a_state_file_is_refused_naming_the_file(tmp_path, small_savepoint):
    broken = str(tmp_path / "broken")
    shutil.copytree(small_savepoint, broken)
    state_files = sorted(f for f in os.listdir(broken) if f != "_metadata")
    assert state_files, "every state of the savepoint was inline"
    os.remove(os.path.join(broken, state_files[0]))
    message = _refused(tmp_path, broken, error=CheckpointStorageError)
    assert os.path.join(broken, state_files[0]) in message and "is missing" in message, message


@pytest.mark.timeout(60)
@pytest.mark.parametrize("kind", ["missing", "empty folder", "not a metadata file"])
def test_a_path_that_is_not_a_savepoint_is_refused_naming_it(tmp_path, kind):
    path = tmp_path / "not-a-savepoint"
    if kind != "missing":
        path.mkdir()
    if kind == "not a metadata file":
        (path / "_metadata").write_bytes(b"hello")
    message = _refused(tmp_path, str(path), error=CheckpointStorageError)
    assert str(path) in message, message


@pytest.mark.timeout(60)
def test_savepoints_need_a_directory(tmp_path):
    env = make_env("local", 1)  # without checkpointing too (tests/test_runtime_savepoints_without_checkpoints.py)
    env.from_sequence(1, 10).map(Paced()).print()
    client = env.execute_async()
    with pytest.raises(RaylinkError, match="state.savepoints.dir"):
        client.trigger_savepoint().result(timeout=10)
    assert client.wait(60)
    env = checkpointing_env("local", 1, tmp_path)
    build(env, tmp_path / "out", n=10)
    client = env.execute_async()
    with pytest.raises(RaylinkError, match="state.savepoints.dir"):
        client.stop_with_savepoint(False).result(timeout=10)
    assert client.wait(60)


def test_state_restore_errors_stop_restarts():
    from raylink.errors import suppresses_restarts

    error = StateRestoreError("no")
    wrapped = RuntimeError("operator X failed")
    wrapped.__cause__ = error
    assert suppresses_restarts(error) and suppresses_restarts(wrapped)
    assert not suppresses_restarts(RuntimeError("transient"))


@pytest.mark.timeout(300)
def test_a_failed_stop_with_savepoint_leaves_the_job_running_exactly_once(tmp_path):
    """Flink: a stop-with-savepoint whose savepoint fails does not stop the job; the sources
    go on and the output is still exactly once."""
    out = tmp_path / "out"
    (tmp_path / "a-file").write_text("")
    env = checkpointing_env("local", 2, tmp_path)
    build(env, out)
    client = env.execute_async()
    wait_running_with_a_checkpoint(client)
    with pytest.raises(RaylinkError, match="savepoint"):
        client.stop_with_savepoint(False, str(tmp_path / "a-file" / "savepoints")).result(timeout=60)
    assert client.wait(180) and client.get_job_status() == "FINISHED", client.get_job_status()
    assert committed_lines(out) == reference(N)


# -- Spark sources and sink --------------------------------------------------------------------------------
def _values_to_files(stream, out):
    sink = (
        FileSink.for_row_format(str(out), Encoder.simple_string_encoder())
        .with_rolling_policy(RollingPolicy.on_checkpoint_rolling_policy())
        .build()
    )
    stream.map(str).uid("format").sink_to(sink).uid("files")


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_a_spark_dataframe_source_resumes_at_another_parallelism_exactly_once(spark, tmp_path):
    """``from_spark(df)``: the partitions emitted and the rows reached are shared out anew."""
    from raylink.tests.test_runtime_exactly_once_sinks import PacedRow

    df = spark.range(0, N, 1, 8).selectExpr("id AS v")
    first, second = tmp_path / "out-1", tmp_path / "out-2"
    env = checkpointing_env("ray", 2, tmp_path)
    _values_to_files(env.from_spark(df).uid("dataframe").map(PacedRow()).uid("paced"), first)
    path = stop_after_a_checkpoint(env.execute_async(), tmp_path / "savepoints", out=first)
    stopped = committed_lines(first)
    assert 0 < sum(stopped.values()) < N
    env = checkpointing_env("ray", 3, tmp_path, **{"execution.savepoint.path": path})
    _values_to_files(env.from_spark(df).uid("dataframe").map(PacedRow()).uid("paced"), second)
    client = env.execute_async()
    assert client.wait(240) and client.get_job_status() == "FINISHED", client.get_job_status()
    assert stopped + committed_lines(second) == Counter(str(v) for v in range(N))


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_a_spark_table_source_resumes_at_another_parallelism_exactly_once(spark, tmp_path):
    """``from_spark_table`` (never ends): the files seen and the row reached are shared out
    anew; the restored job runs until every row is committed, then is cancelled."""
    from raylink.tests.test_runtime_exactly_once_sinks import PacedRow

    source = str(tmp_path / "source")
    for start in range(0, N, N // 4):  # four Parquet writes, several files
        spark.range(start, start + N // 4, 1, 2).selectExpr("id AS v").write.mode("append").parquet(source)
    first, second = tmp_path / "out-1", tmp_path / "out-2"

    def build_table_job(env, out):
        _values_to_files(env.from_spark_table(source, poll_interval=0.2).uid("table").map(PacedRow()).uid("paced"), out)

    env = checkpointing_env("ray", 2, tmp_path)
    build_table_job(env, first)
    path = stop_after_a_checkpoint(env.execute_async(), tmp_path / "savepoints", out=first)
    stopped = committed_lines(first)
    assert 0 < sum(stopped.values()) < N
    env = checkpointing_env("ray", 3, tmp_path, **{"execution.savepoint.path": path})
    build_table_job(env, second)
    client = env.execute_async()
    try:
        assert wait_for(
            lambda: sum(stopped.values()) + sum(committed_lines(second).values()) >= N,
            client,
            timeout=240,
            interval=0.2,
        )
    finally:
        client.cancel()
        assert client.wait(60)
    assert stopped + committed_lines(second) == Counter(str(v) for v in range(N))


def _numbers_to_spark(env, n: int = N, **target):
    env.from_sequence(1, n).uid("numbers").map(Paced()).uid("paced").sink_to_spark(schema="v bigint", **target).uid(
        "spark"
    )


@pytest.mark.slow
@pytest.mark.timeout(400)
@pytest.mark.parametrize("before, after, target", [(2, 3, "path"), (3, 1, "table")])
def test_a_spark_sink_resumes_from_a_savepoint_at_another_parallelism_exactly_once(
    spark, tmp_path, before, after, target
):
    """The restored job continues the earlier run's target (its ``overwrite`` applied to that
    run's first write only): the target holds every number once."""
    where = {"path": str(tmp_path / "out")} if target == "path" else {"table": f"resumed_{before}_{after}"}
    env = checkpointing_env("ray", before, tmp_path)
    _numbers_to_spark(env, mode="overwrite", **where)
    path = stop_after_a_checkpoint(env.execute_async(), tmp_path / "savepoints")
    committed = sum(spark_values(spark, **where).values())
    assert 0 < committed < N, committed
    moved = str(tmp_path / "moved")
    shutil.move(path, moved)
    env = checkpointing_env("ray", after, tmp_path, **{"execution.savepoint.path": moved})
    _numbers_to_spark(env, mode="overwrite", **where)
    client = env.execute_async()
    assert client.wait(240) and client.get_job_status() == "FINISHED", client.get_job_status()
    assert spark_values(spark, **where) == Counter(range(1, N + 1))
    if target == "table":
        spark.sql(f"DROP TABLE IF EXISTS {where['table']}")


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_a_spark_result_dataframe_resumes_from_a_savepoint_at_another_parallelism(spark, tmp_path):
    """No target: a job stopped with a savepoint (without draining) has not published its
    result; the job restored from it at another parallelism returns every row once."""
    from raylink.connectors.spark import get_spark_dataframe

    env = checkpointing_env("ray", 2, tmp_path)
    _numbers_to_spark(env)
    path = stop_after_a_checkpoint(env.execute_async(), tmp_path / "savepoints")
    env = checkpointing_env("ray", 3, tmp_path, **{"execution.savepoint.path": path})
    _numbers_to_spark(env)
    result = env.execute()
    rows = Counter(row[0] for row in get_spark_dataframe(result).collect())
    assert rows == Counter(range(1, N + 1))


@pytest.mark.timeout(300)
def test_a_retained_checkpoint_of_a_cancelled_job_restores_at_another_parallelism(tmp_path):
    """A cancelled job keeps its latest checkpoint (Flink's retain-on-cancellation); its
    ``chk-<n>`` folder is a valid ``execution.savepoint.path``."""
    first, second = tmp_path / "out-1", tmp_path / "out-2"
    env = checkpointing_env("local", 2, tmp_path)
    build(env, first)
    client = env.execute_async()
    assert wait_for(lambda: bool(committed_lines(first)), client, timeout=120)
    client.cancel()
    assert client.wait(60) and client.get_job_status() == "CANCELED"
    job_folder = tmp_path / "checkpoints" / client.get_job_id()
    (checkpoint,) = [p for p in job_folder.iterdir() if p.name.startswith("chk-") and (p / "_metadata").exists()]
    run_from("local", 3, tmp_path, second, str(checkpoint))
    assert committed_lines(first) + committed_lines(second) == reference(N)
