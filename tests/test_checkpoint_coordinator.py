"""The CheckpointCoordinator (``runtime/job/checkpoint_coordinator.py``) with real checkpoint
storage: completion needs every task's acknowledgement, ``_metadata`` names every handle,
declines and expiries are counted and fail the job past the tolerable number."""

from __future__ import annotations

import os
import shutil
import threading

import pytest

from raylink.runtime.job.checkpoint_coordinator import CheckpointCoordinator, CheckpointException
from raylink.state.checkpoint_storage import CheckpointStorage

pytestmark = pytest.mark.timeout(30)


class Recorder:
    def __init__(self):
        self.triggered, self.completed, self.aborted, self.failures = [], [], [], []
        self.event = threading.Event()

    def trigger(self, checkpoint_id, timestamp, stop=None):
        self.triggered.append(checkpoint_id)
        self.event.set()

    def complete(self, checkpoint_id):
        self.completed.append(checkpoint_id)

    def abort(self, checkpoint_id):
        self.aborted.append(checkpoint_id)

    def fail(self, exc):
        self.failures.append(exc)


def coordinator(tmp_path, settings=None):
    storage = CheckpointStorage(str(tmp_path), "job", num_retained=2)
    rec = Recorder()
    coord = CheckpointCoordinator(storage, settings or {}, rec.trigger, rec.complete, rec.abort, rec.fail)
    return coord, rec, storage


def ack(coord, storage, attempt, checkpoint_id, subtask, payload):
    handle = storage.write_state(checkpoint_id, "op", subtask, payload)
    coord.receive_ack(attempt, checkpoint_id, {"op": {subtask: handle}}, {"alignment_ms": 1.5})


def test_a_checkpoint_completes_only_when_every_task_acknowledged(tmp_path):
    coord, rec, storage = coordinator(tmp_path)
    coord.start({"a", "b"})
    checkpoint_id = coord.trigger_checkpoint()
    assert rec.triggered == [checkpoint_id]
    ack(coord, storage, "a", checkpoint_id, 0, b"state-a")
    assert rec.completed == [] and storage.latest_completed() is None
    ack(coord, storage, "a", checkpoint_id, 0, b"again")  # duplicate: ignored
    ack(coord, storage, "b", checkpoint_id, 1, b"state-b")
    assert rec.completed == [checkpoint_id]
    completed = storage.latest_completed()
    assert completed.checkpoint_id == checkpoint_id
    assert storage.read_state(completed.get_state("op", 0)) == b"state-a"
    assert storage.read_state(completed.get_state("op", 1)) == b"state-b"
    assert coord.stats.num_completed == 1 and coord.stats.last_alignment_ms == 1.5


def test_max_concurrent_checkpoints_holds_back_a_second_trigger(tmp_path):
    coord, rec, storage = coordinator(tmp_path)
    coord.start({"a"})
    first = coord.trigger_checkpoint()
    assert coord.trigger_checkpoint() is None
    ack(coord, storage, "a", first, 0, b"x")
    assert coord.trigger_checkpoint() == first + 1


def test_declines_are_tolerated_up_to_the_configured_number_then_fail_the_job(tmp_path):
    coord, rec, storage = coordinator(tmp_path, {"execution.checkpointing.tolerable-failed-checkpoints": 1})
    coord.start({"a"})
    first = coord.trigger_checkpoint()
    coord.receive_decline("a", first, "state of operator 'x' cannot be serialised")
    assert rec.aborted == [first] and rec.failures == []
    second = coord.trigger_checkpoint()
    coord.receive_decline("a", second, "again")
    assert len(rec.failures) == 1 and isinstance(rec.failures[0], CheckpointException)
    assert "tolerable-failed-checkpoints" in str(rec.failures[0])
    assert coord.stats.num_failed == 2


def test_a_checkpoint_that_times_out_expires_and_is_counted(tmp_path):
    coord, rec, storage = coordinator(
        tmp_path,
        {
            "execution.checkpointing.interval": "50 ms",
            "execution.checkpointing.timeout": "100 ms",
            "execution.checkpointing.tolerable-failed-checkpoints": 100,
        },
    )
    coord.start({"a"})  # "a" never acknowledges
    assert rec.event.wait(5)
    done = threading.Event()
    original = rec.abort

    def abort(checkpoint_id):
        original(checkpoint_id)
        done.set()

    rec.abort = abort
    coord._notify_aborted = abort
    assert done.wait(5), "the pending checkpoint never expired"
    coord.stop()
    assert coord.stats.num_failed >= 1
    assert "expired" in coord.stats.last_failure
    assert storage.latest_completed() is None


def test_a_savepoint_is_a_checkpoint_copied_into_a_folder_that_restores_anywhere(tmp_path):
    from raylink.state.checkpoint_storage import load_completed_checkpoint, read_state_handle

    coord, rec, storage = coordinator(tmp_path, {"execution.checkpointing.data-inline-threshold": "0"})
    coord.start({"a", "b"})
    checkpoint = coord.trigger_checkpoint()
    future = coord.trigger_savepoint(str(tmp_path / "savepoints"))  # beyond max-concurrent-checkpoints 1
    savepoint = rec.triggered[-1]
    assert savepoint == checkpoint + 1 and not future.done()
    for attempt, subtask in (("a", 0), ("b", 1)):
        ack(coord, storage, attempt, savepoint, subtask, f"state {subtask}".encode())
    path = future.result(timeout=10)
    assert os.path.basename(path).startswith("savepoint-job-")
    assert savepoint not in rec.completed  # Flink: a savepoint commits no side effects (FLINK-25191)
    moved = str(tmp_path / "moved")
    shutil.move(path, moved)
    restored = load_completed_checkpoint(moved)
    assert restored.checkpoint_id == savepoint and restored.properties["savepoint"] is True
    assert {i: read_state_handle(h) for i, h in restored.operator_states["op"].items()} == {
        0: b"state 0",
        1: b"state 1",
    }


def test_a_declined_savepoint_fails_its_future_not_the_job(tmp_path):
    coord, rec, storage = coordinator(tmp_path)  # no failed checkpoint tolerated
    coord.start({"a"})
    future = coord.trigger_savepoint(str(tmp_path / "savepoints"), stop="suspend")
    again = coord.trigger_savepoint(str(tmp_path / "savepoints"), stop="suspend")
    with pytest.raises(CheckpointException, match="already stopping"):
        again.result(timeout=10)
    coord.receive_decline("a", rec.triggered[-1], "the sink is not ready")
    with pytest.raises(CheckpointException, match="the sink is not ready"):
        future.result(timeout=10)
    assert rec.failures == [] and coord.stats.num_failed == 0
    assert coord.trigger_savepoint(str(tmp_path / "savepoints"), stop="suspend") is not None  # stopping again works


def test_without_an_interval_only_savepoints_are_taken_and_a_stopping_one_is_notified(tmp_path):
    """No execution.checkpointing.interval: nothing is triggered on its own, a savepoint still
    is; only a stop-with-savepoint tells the tasks it completed (their sinks commit, they end)."""
    coord, rec, storage = coordinator(tmp_path)
    coord.start({"a"})
    assert not rec.event.wait(0.3) and rec.triggered == []  # no periodic trigger
    plain = coord.trigger_savepoint(str(tmp_path / "savepoints"))
    ack(coord, storage, "a", rec.triggered[-1], 0, b"plain")
    assert os.path.isfile(os.path.join(plain.result(timeout=10), "_metadata")) and rec.completed == []
    stopping = coord.trigger_savepoint(str(tmp_path / "savepoints"), stop="suspend")
    ack(coord, storage, "a", rec.triggered[-1], 0, b"stop")
    assert os.path.isfile(os.path.join(stopping.result(timeout=10), "_metadata"))
    assert rec.completed == [rec.triggered[-1]] and rec.triggered == [1, 2]
    coord.stop()
