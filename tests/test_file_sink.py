"""The exactly-once FileSink (raylink.api.connectors.file_system + raylink.connectors.file.sink_writer),
driven by hand through checkpoints, completions and crashes the way the runtime drives a
Sink V2 writer + committer."""

from __future__ import annotations

import os
import pickle
import posixpath
import uuid
from collections import Counter
from dataclasses import dataclass
from datetime import datetime, timezone

import fsspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from raylink.api.connectors import (
    BucketAssigner,
    Encoder,
    FileSink,
    OutputFileConfig,
    RollingPolicy,
    SinkWriterContext,
    WriterInitContext,
)
from raylink.connectors.file.sink_writer import FileSinkError, FileWriterState
from raylink.operators.committable_collector import CommittableCollector


# -- helpers ------------------------------------------------------------------------------------------
@pytest.fixture(params=["local", "memory"])
def out(request, tmp_path):
    """An output folder: local, or a fresh memory:// root (removed after)."""
    if request.param == "local":
        yield str(tmp_path / "out")
        return
    url = f"memory://sink-{uuid.uuid4().hex}"
    yield url
    _remove(url)


def _remove(url):
    fs, path = fsspec.core.url_to_fs(url)
    if fs.exists(path):
        fs.rm(path, recursive=True)


def _files(url, hidden=False):
    """{relative path: bytes} of the files under ``url``; like a reader (Flink, Spark, Hadoop),
    skips every path with a component starting with '.' or '_' unless ``hidden``."""
    fs, root = fsspec.core.url_to_fs(url)
    root = root.rstrip("/")
    if not fs.exists(root):
        return {}
    found = {}
    for path in fs.find(root):
        rel = posixpath.relpath(path, root)
        if not hidden and any(part.startswith((".", "_")) for part in rel.split("/")):
            continue
        found[rel] = fs.cat_file(path)
    return found


def _visible_records(url):
    return [line for data in _files(url).values() for line in data.decode().splitlines()]


class FakeTime:
    """A ProcessingTimeService whose clock the test moves; fires due timers in order."""

    def __init__(self, now=0):
        self.now = now
        self.timers = []

    def get_current_processing_time(self):
        return self.now

    def register_timer(self, timestamp, callback):
        self.timers.append((timestamp, callback))

    def advance(self, to):
        while True:
            due = sorted((t for t in self.timers if t[0] <= to), key=lambda t: t[0])
            if not due:
                break
            timestamp, callback = due[0]
            self.timers.remove(due[0])
            self.now = timestamp
            callback(timestamp)
        self.now = to


@dataclass
class Snapshot:
    checkpoint_id: int
    writer_states: list
    committables: list


class SinkSubtask:
    """What the runtime's sink operator does: writer + committables per checkpoint + committer."""

    def __init__(self, sink, subtask=0, restore_from=None, time=None):
        context = WriterInitContext(subtask, 2, processing_time_service=time)
        self.committer = sink.create_committer()
        self.collector = CommittableCollector()
        if restore_from is None:
            self.writer = sink.create_writer(context)
        else:
            self.writer = sink.restore_writer(context, restore_from.writer_states)
            self.collector.restore([restore_from.committables])
            self.collector.commit_up_to(self.committer, restore_from.checkpoint_id)

    def write(self, *records):
        for record in records:
            self.writer.write(record)

    def checkpoint(self, checkpoint_id, end_of_input=False):
        self.writer.flush(end_of_input)
        self.collector.add(checkpoint_id, self.writer.prepare_commit())
        snapshot = Snapshot(checkpoint_id, self.writer.snapshot_state(checkpoint_id), self.collector.snapshot())
        return pickle.loads(pickle.dumps(snapshot))  # as stored in checkpoint storage

    def notify_complete(self, checkpoint_id):
        self.collector.commit_up_to(self.committer, checkpoint_id)

    def crash(self):
        """The process dies: whatever it buffered reaches the files, nothing else happens."""
        self.writer.close()
        self.writer = None


def _sink(out, policy=None, assigner=None, config=None, check_interval=None):
    builder = FileSink.for_row_format(out, Encoder.simple_string_encoder())
    builder.with_bucket_assigner(assigner or BucketAssigner.base_path_bucket_assigner())
    if policy is not None:
        builder.with_rolling_policy(policy)
    if config is not None:
        builder.with_output_file_config(config)
    if check_interval is not None:
        builder.with_bucket_check_interval(check_interval)
    return builder.build()


# -- lifecycle ----------------------------------------------------------------------------------------
def test_nothing_visible_before_commit(out):
    task = SinkSubtask(_sink(out, RollingPolicy.on_checkpoint_rolling_policy()))
    task.write(*[f"r{i}" for i in range(10)])
    assert _visible_records(out) == []
    assert any(".inprogress." in name for name in _files(out, hidden=True))
    task.checkpoint(1)
    assert _visible_records(out) == []  # pending until the checkpoint completes
    task.write("after-1")
    task.notify_complete(1)
    assert sorted(_visible_records(out)) == sorted(f"r{i}" for i in range(10))
    assert sorted(_files(out)) == ["part-0-0"]


def test_exactly_the_records_of_completed_checkpoints_are_visible(out):
    task = SinkSubtask(_sink(out, RollingPolicy.on_checkpoint_rolling_policy()))
    task.write(*range(0, 10))
    task.checkpoint(1)
    task.write(*range(10, 20))
    task.checkpoint(2)  # never completes (declined): its files are committed with 3
    task.write(*range(20, 30))
    task.notify_complete(1)
    assert sorted(map(int, _visible_records(out))) == list(range(10))
    task.checkpoint(3)
    task.write(*range(30, 35))
    task.notify_complete(3)
    assert sorted(map(int, _visible_records(out))) == list(range(30))
    assert sorted(_files(out)) == ["part-0-0", "part-0-1", "part-0-2"]


def test_commit_is_idempotent(out):
    sink = _sink(out, RollingPolicy.on_checkpoint_rolling_policy())
    task = SinkSubtask(sink)
    task.write("a", "b")
    task.writer.flush(False)
    committables = task.writer.prepare_commit()
    committer = sink.create_committer()
    committer.commit(committables)
    before = _files(out)
    committer.commit(committables)
    sink.create_committer().commit(committables)
    assert _files(out) == before == {"part-0-0": b"a\nb\n"}


def test_commit_of_a_vanished_pending_file_names_it(out):
    sink = _sink(out, RollingPolicy.on_checkpoint_rolling_policy())
    task = SinkSubtask(sink)
    task.write("a")
    task.writer.flush(False)
    [committable] = task.writer.prepare_commit()
    fs, _ = fsspec.core.url_to_fs(out)
    fs.rm_file(committable.path)
    with pytest.raises(FileSinkError) as err:
        sink.create_committer().commit([committable])
    assert posixpath.basename(committable.path) in str(err.value)


@pytest.mark.parametrize("policy", ["default", "on-checkpoint"])
def test_crash_and_replay_gives_every_record_exactly_once(out, policy):
    rolling = (
        RollingPolicy.default_rolling_policy() if policy == "default" else RollingPolicy.on_checkpoint_rolling_policy()
    )
    sink = _sink(out, rolling)
    task = SinkSubtask(sink)
    task.write(*range(0, 10))
    snapshot_1 = task.checkpoint(1)
    task.notify_complete(1)
    task.write(*range(10, 15))
    task.checkpoint(2)  # taken, but the job dies before it completes
    task.write(*range(15, 20))
    task.crash()
    if policy == "default":  # the in-progress file of checkpoint 1 holds records written after it
        assert snapshot_1.writer_states[0].buckets[0].in_progress is not None
        assert b"14\n" in b"".join(_files(out, hidden=True).values())

    task = SinkSubtask(sink, restore_from=snapshot_1)
    task.write(*range(10, 20))  # the source replays everything after checkpoint 1
    task.checkpoint(3, end_of_input=True)
    task.notify_complete(3)
    assert Counter(map(int, _visible_records(out))) == Counter(range(20))


def test_restore_continues_a_copy_of_the_in_progress_file_a_zombie_cannot_reach(out):
    """The restored writer copies the checkpoint's bytes of the in-progress file into a fresh
    hidden file: what the failed attempt (a zombie still running somewhere) appends to the old
    file after the restore never reaches the committed part file, which keeps its name."""
    sink = _sink(out)  # default policy: the part file stays open across checkpoints
    task = SinkSubtask(sink)
    task.write("a", "b")
    snapshot = task.checkpoint(1)
    task.notify_complete(1)
    [recoverable] = [b.in_progress for b in snapshot.writer_states[0].buckets]
    assert recoverable.length == 4
    task.write("c", "d")
    zombie = task  # not crashed: it keeps writing after the restore
    fs, _ = fsspec.core.url_to_fs(out)

    task = SinkSubtask(sink, restore_from=snapshot)
    zombie.write("zombie")
    zombie.writer.snapshot_state(2)  # flushes its in-progress file
    [resumed] = [b.in_progress for b in task.writer._buckets.values()]
    assert resumed.path != recoverable.path and fs.cat_file(resumed.path) == b"a\nb\n"  # checkpoint 1's bytes
    task.write("c2")
    task.checkpoint(2, end_of_input=True)
    task.notify_complete(2)
    assert _files(out) == {posixpath.basename(recoverable.target_path): b"a\nb\nc2\n"}
    assert b"zombie" in fs.cat_file(recoverable.path)  # the zombie wrote, into a file never committed


def test_restore_commits_pending_files_of_the_checkpoint_idempotently(out):
    sink = _sink(out, RollingPolicy.on_checkpoint_rolling_policy())
    task = SinkSubtask(sink)
    task.write("x", "y")
    snapshot = task.checkpoint(1)
    task.crash()  # before notify_checkpoint_complete(1) arrived
    assert _visible_records(out) == []
    SinkSubtask(sink, restore_from=snapshot)  # the restore commits checkpoint 1's files
    assert sorted(_visible_records(out)) == ["x", "y"]
    SinkSubtask(sink, restore_from=snapshot)  # and a second failover does it again: a no-op
    assert sorted(_visible_records(out)) == ["x", "y"]


def test_restore_with_a_vanished_in_progress_file_names_it(out):
    sink = _sink(out)
    task = SinkSubtask(sink)
    task.write("a")
    snapshot = task.checkpoint(1)
    task.crash()
    path = snapshot.writer_states[0].buckets[0].in_progress.path
    fs, _ = fsspec.core.url_to_fs(out)
    fs.rm_file(path)
    with pytest.raises(FileSinkError, match="missing") as err:
        SinkSubtask(sink, restore_from=snapshot)
    assert posixpath.basename(path) in str(err.value)


def test_part_counter_continues_after_restore(out):
    sink = _sink(out, RollingPolicy.on_checkpoint_rolling_policy())
    task = SinkSubtask(sink)
    task.write("a")
    snap = task.checkpoint(1)
    task.notify_complete(1)
    task.crash()
    task = SinkSubtask(sink, restore_from=snap)
    task.write("b")
    task.checkpoint(2)
    task.notify_complete(2)
    assert _files(out) == {"part-0-0": b"a\n", "part-0-1": b"b\n"}


# -- rolling policies ---------------------------------------------------------------------------------
def test_rolling_by_size(out):
    task = SinkSubtask(_sink(out, RollingPolicy.default_rolling_policy(part_size=50)))
    records = [f"{i:09d}" for i in range(20)]  # 10 bytes each with the newline
    task.write(*records)
    task.checkpoint(1, end_of_input=True)
    task.notify_complete(1)
    files = _files(out)
    # a file rolls before the record that finds it above 50 bytes: 6 records (60 bytes) per file
    assert sorted(files) == ["part-0-0", "part-0-1", "part-0-2", "part-0-3"]
    assert [len(files[f"part-0-{i}"]) for i in range(4)] == [60, 60, 60, 20]
    assert b"".join(files[f"part-0-{i}"] for i in range(4)).decode().split() == records


def test_rolling_by_size_at_checkpoint(out):
    task = SinkSubtask(_sink(out, RollingPolicy.default_rolling_policy(part_size=5)))
    task.write("0123456789")  # 11 bytes > 5: rolls at the checkpoint
    task.checkpoint(1)
    task.notify_complete(1)
    assert _files(out) == {"part-0-0": b"0123456789\n"}
    task.write("x")  # 2 bytes: stays in progress
    task.checkpoint(2)
    task.notify_complete(2)
    assert _files(out) == {"part-0-0": b"0123456789\n"}


def test_rolling_by_rollover_and_inactivity_time(out):
    time = FakeTime(now=0)
    policy = RollingPolicy.default_rolling_policy(rollover_interval=1000, inactivity_interval=300)
    task = SinkSubtask(_sink(out, policy, check_interval=100), time=time)
    for t in range(0, 1000, 100):  # written every 100 ms: never inactive, rolled by age
        time.advance(t)
        task.write(f"t{t}")
    time.advance(1000)
    task.checkpoint(1)
    task.notify_complete(1)
    assert _files(out) == {"part-0-0": "".join(f"t{t}\n" for t in range(0, 1000, 100)).encode()}

    time.advance(1050)
    task.write("lonely")
    time.advance(1300)  # 250 ms idle: not yet
    task.checkpoint(2)
    task.notify_complete(2)
    assert "part-0-1" not in _files(out)
    time.advance(1400)  # 350 ms idle: rolled
    task.checkpoint(3)
    task.notify_complete(3)
    assert _files(out)["part-0-1"] == b"lonely\n"


def test_on_checkpoint_rolling_makes_one_file_per_checkpoint(out):
    task = SinkSubtask(_sink(out, RollingPolicy.on_checkpoint_rolling_policy()))
    for n in range(1, 4):
        task.write(*[f"c{n}-{i}" for i in range(3)])
        task.checkpoint(n)
    task.checkpoint(4)  # nothing written: no empty file
    task.notify_complete(4)
    files = _files(out)
    assert sorted(files) == ["part-0-0", "part-0-1", "part-0-2"]
    assert files["part-0-1"] == b"c2-0\nc2-1\nc2-2\n"


def test_closed_writer_ignores_late_timers(out):
    time = FakeTime()
    task = SinkSubtask(_sink(out, check_interval=10), time=time)
    task.write("a")
    task.writer.close()
    time.advance(10_000)  # no error, nothing rolled or committed
    assert _visible_records(out) == []


def test_filesystems_without_resume_close_every_file_at_a_checkpoint(out):
    task = SinkSubtask(_sink(out))  # default policy keeps files open ...
    task.writer.supports_resume = False  # ... unless the filesystem cannot truncate + append
    task.write("a")
    snapshot = task.checkpoint(1)
    assert all(b.in_progress is None for b in snapshot.writer_states[0].buckets)
    task.notify_complete(1)
    assert _visible_records(out) == ["a"]


# -- buckets and names --------------------------------------------------------------------------------
class ByKey(BucketAssigner):
    def get_bucket_id(self, element, context):
        return f"key={element[0]}"


def test_bucket_assigners_choose_the_folders(out):
    task = SinkSubtask(_sink(out, RollingPolicy.on_checkpoint_rolling_policy(), assigner=ByKey()))
    task.write("a1", "b1", "a2")
    task.checkpoint(1)
    task.notify_complete(1)
    assert _files(out) == {"key=a/part-0-0": b"a1\na2\n", "key=b/part-0-1": b"b1\n"}


def test_date_time_bucket_assigner_uses_processing_time(out):
    moment = int(datetime(2024, 1, 2, 3, 4, 5, tzinfo=timezone.utc).timestamp() * 1000)
    time = FakeTime(now=moment)
    assigner = BucketAssigner.date_time_bucket_assigner("'dt='yyyy-MM-dd/HH", "UTC")
    task = SinkSubtask(_sink(out, RollingPolicy.on_checkpoint_rolling_policy(), assigner=assigner), time=time)
    task.write("x")
    time.advance(moment + 3_600_000)
    task.write("y")
    task.checkpoint(1)
    task.notify_complete(1)
    assert _files(out) == {"dt=2024-01-02/03/part-0-0": b"x\n", "dt=2024-01-02/04/part-0-1": b"y\n"}
    default = BucketAssigner.date_time_bucket_assigner(timezone_id="GMT+02:00")
    ctx_time = FakeTime(now=moment)
    from raylink.api.connectors.file_system import BucketAssignerContext

    ctx = BucketAssignerContext()
    ctx._processing_time = ctx_time.now
    assert default.get_bucket_id("r", ctx) == "2024-01-02--05"
    assert pickle.loads(pickle.dumps(default)).get_bucket_id("r", ctx) == "2024-01-02--05"


def test_bad_bucket_settings_are_clear_errors(out):
    with pytest.raises(ValueError, match="'qq' is not supported"):
        BucketAssigner.date_time_bucket_assigner("yyyy-qq")
    with pytest.raises(ValueError, match="Mars/Olympus"):
        BucketAssigner.date_time_bucket_assigner(timezone_id="Mars/Olympus")

    class Escaping(BucketAssigner):
        def get_bucket_id(self, element, context):
            return "../outside"

    task = SinkSubtask(_sink(out, assigner=Escaping()))
    with pytest.raises(ValueError, match=r"\.\./outside"):
        task.write("a")


def test_output_file_config_names_the_files(out):
    config = OutputFileConfig.builder().with_part_prefix("out").with_part_suffix(".txt").build()
    assert (config.get_part_prefix(), config.get_part_suffix()) == ("out", ".txt")
    task = SinkSubtask(_sink(out, RollingPolicy.on_checkpoint_rolling_policy(), config=config), subtask=3)
    task.write("a")
    hidden = [n for n in _files(out, hidden=True) if n not in _files(out)]
    assert len(hidden) == 1 and hidden[0].startswith(".out-3-0.txt.inprogress.")
    task.checkpoint(1)
    task.notify_complete(1)
    assert _files(out) == {"out-3-0.txt": b"a\n"}
    with pytest.raises(ValueError, match="path separators"):
        OutputFileConfig("a/b", "")


def test_custom_encoder_and_bad_builder_arguments(out):
    class Csv(Encoder):
        def encode(self, element, stream):
            stream.write(b"%d,%d\n" % element)

    sink = (
        FileSink.for_row_format(out, Csv())
        .with_bucket_assigner(BucketAssigner.base_path_bucket_assigner())
        .with_rolling_policy(RollingPolicy.default_rolling_policy(part_size=6))
        .build()
    )
    task = SinkSubtask(sink)
    task.writer.write((1, 2), SinkWriterContext(timestamp=5))
    task.write((3, 4))
    task.checkpoint(1, end_of_input=True)
    task.notify_complete(1)
    assert _files(out) == {"part-0-0": b"1,2\n3,4\n"}  # 4 bytes written < 6: one file

    with pytest.raises(TypeError, match="Encoder"):
        FileSink.for_row_format(out, "not an encoder").build()
    with pytest.raises(ValueError, match="part_size"):
        RollingPolicy.default_rolling_policy(part_size=0)
    with pytest.raises(ValueError, match="charset"):
        Encoder.simple_string_encoder("no-such-charset")


# -- random schedules against a brute-force reference -------------------------------------------------
OPS = st.lists(
    st.one_of(
        st.tuples(st.just("write"), st.integers(1, 6)),
        st.just(("checkpoint",)),
        st.just(("complete",)),
        st.just(("complete-unnotified",)),
        st.just(("crash",)),
    ),
    max_size=30,
)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)
@given(
    ops=OPS, policy=st.sampled_from(["on-checkpoint", "size", "default"]), keyed=st.booleans(), use_memory=st.booleans()
)
def test_random_schedules_match_the_committed_records(tmp_path_factory, ops, policy, keyed, use_memory):
    """A source of records 0, 1, 2, ...; checkpoints record the source offset; crashes restore the
    sink and rewind the source to the latest completed checkpoint. After every completion the
    visible records are exactly (on-checkpoint rolling) or a subset of (other policies) the records
    before that checkpoint, never twice; after the final checkpoint, every record exactly once."""
    out = f"memory://hyp-{uuid.uuid4().hex}" if use_memory else str(tmp_path_factory.mktemp("hyp") / "out")
    rolling = {
        "on-checkpoint": RollingPolicy.on_checkpoint_rolling_policy(),
        "size": RollingPolicy.default_rolling_policy(part_size=12),
        "default": RollingPolicy.default_rolling_policy(),
    }[policy]
    sink = _sink(out, rolling, assigner=(_ModKey() if keyed else None))
    try:
        task = SinkSubtask(sink)
        offset = 0  # next record the source emits
        next_id = 1
        triggered: dict[int, tuple[Snapshot, int]] = {}  # taken, not yet completed: snapshot, offset
        completed = None  # (snapshot, offset) of the latest completed checkpoint

        def check(exact_upto):
            seen = Counter(map(int, _visible_records(out)))
            assert all(count == 1 for count in seen.values()), seen
            assert set(seen) <= set(range(exact_upto))
            if policy == "on-checkpoint":
                assert set(seen) == set(range(exact_upto))

        for op in ops:
            if op[0] == "write":
                task.write(*(f"{offset + i}" for i in range(op[1])))
                offset += op[1]
            elif op[0] == "checkpoint":
                triggered[next_id] = (task.checkpoint(next_id), offset)
                next_id += 1
            elif op[0].startswith("complete") and triggered:
                newest = max(triggered)
                completed = triggered[newest]
                for cid in [c for c in triggered if c <= newest]:
                    del triggered[cid]  # older pending ones are subsumed
                if op[0] == "complete":
                    task.notify_complete(newest)
                    check(completed[1])
            elif op[0] == "crash":
                task.crash()
                triggered.clear()
                task = SinkSubtask(sink, restore_from=completed[0] if completed else None)
                offset = completed[1] if completed else 0
                if completed:
                    check(completed[1])
        # end of input: the final checkpoint commits everything
        task.write(*(f"{offset + i}" for i in range(3)))
        offset += 3
        task.checkpoint(next_id, end_of_input=True)
        task.notify_complete(next_id)
        assert Counter(map(int, _visible_records(out))) == Counter(range(offset))
        assert all(
            ".inprogress." in name or name.startswith(".") for name in set(_files(out, hidden=True)) - set(_files(out))
        )
    finally:
        if use_memory:
            _remove(out)


class _ModKey(BucketAssigner):
    def get_bucket_id(self, element, context):
        return f"m{int(element) % 3}"


def test_writer_state_is_plain_data(out):
    task = SinkSubtask(_sink(out))
    task.write("a")
    [state] = task.writer.snapshot_state(1)
    assert isinstance(state, FileWriterState) and state.subtask == 0 and state.part_counter == 1
    assert pickle.loads(pickle.dumps(state)) == state
    assert os.path.basename(state.buckets[0].in_progress.target_path) == "part-0-0"


def test_a_failed_commit_keeps_the_committables_for_the_next_try(out):
    sink = _sink(out, RollingPolicy.on_checkpoint_rolling_policy())
    task = SinkSubtask(sink)
    task.write("a")
    task.checkpoint(1)

    class Flaky:
        def commit(self, committables):
            raise OSError("storage briefly away")

    with pytest.raises(OSError):
        task.collector.commit_up_to(Flaky(), 1)
    assert len(task.collector) == 1
    task.notify_complete(1)
    assert len(task.collector) == 0 and _visible_records(out) == ["a"]
