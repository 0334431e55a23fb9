"""Every figure of the REST API is measured: each one compared with a measurement the test makes
itself, apart from the job (the files a checkpoint left on disk, the clock of a user function,
the savepoint folder a stop left, this machine's memory).

Checkpoint statistics come from the coordinator's tracker, kept for ``web.checkpoints.history``
checkpoints whether or not anyone polled; sizes are compared with the bytes on disk (every
state blob a file: ``execution.checkpointing.data-inline-threshold`` 0), an incremental
checkpoint's written bytes with its own new files, an unaligned checkpoint's persisted bytes
with the in-flight buffers its files hold.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any, Optional

import cloudpickle
import pytest

from raylink.api.functions import MapFunction, SourceFunction
from raylink.runtime.job.checkpoint_stats import CheckpointStatsTracker, CheckpointType, SubtaskStateStats
from raylink.state.checkpoint_storage import load_completed_checkpoint, read_state_handle
from raylink.state.snapshots import CHANNEL_STATE
from raylink.tests.runtime_jobs import make_env, wait_for
from raylink.tests.test_runtime_rest_api import DiscardingSink, FiniteThenIdleSource
from raylink.tests.test_runtime_rest_api import http as plain_http

N = 500
KEYS = 50


def checkpoint_config(tmp_path: Path, **extra: Any) -> dict:
    config = {
        "raylink.rest.enabled": True,
        "rest.port": 0,
        "execution.checkpointing.interval": 100,
        "execution.checkpointing.dir": str(tmp_path / "checkpoints"),
        "execution.checkpointing.num-retained": 1000,  # every checkpoint stays on disk to be measured
        "execution.checkpointing.data-inline-threshold": 0,  # every state blob is a file
        "rest.savepoint.allowed-roots": str(tmp_path),  # REST savepoint targets lie under it
    }
    config.update(extra)
    return config


def keyed_idle_job(target: str, config: dict, name: str = "figures") -> Any:
    """A keyed running sum over 0 .. N-1 (KEYS keys), then idle until cancelled."""
    env = make_env(target, 2, config)
    (
        env.add_source(FiniteThenIdleSource(N), "Numbers")
        .set_parallelism(1)
        .map(lambda x: (x % KEYS, x))
        .name("Pair")
        .key_by(lambda kv: kv[0])
        .sum(1)
        .name("Sum")
        .add_sink(DiscardingSink())
        .name("Discard")
    )
    return env.execute_async(name)


def http(client: Any, path: str, method: str = "GET", body: Optional[dict] = None) -> tuple:
    """(status, JSON body) of one request to ``client``'s REST endpoint, with its token if it has one."""
    endpoint = client.rest_endpoint
    headers = {"Content-Type": "application/json"}
    token = getattr(endpoint, "token", None)
    if token:
        headers["Authorization"] = f"Bearer {token}"
    data = json.dumps(body).encode() if body is not None else None
    status, answer, _ = plain_http(endpoint.url + path, method, headers, data)
    return status, answer


def get(client: Any, path: str) -> Any:
    status, body = http(client, path)
    assert status == 200, (path, status, body)
    return body


def job_folder(tmp_path: Path, client: Any) -> Path:
    return tmp_path / "checkpoints" / client.job_id


def disk_sizes(folder: Path, checkpoint_id: int) -> tuple[int, int]:
    """(bytes checkpoint ``checkpoint_id`` wrote, its full size) from the files on disk: the
    state files in its folder plus the shared files uploaded for it / plus every shared file
    its ``_metadata`` names."""
    chk = folder / f"chk-{checkpoint_id}"
    own = sum(f.stat().st_size for f in chk.iterdir() if f.name != "_metadata")
    shared_dir = folder / "shared"
    uploaded = (
        sum(f.stat().st_size for f in shared_dir.iterdir() if f.name.startswith(f"{checkpoint_id}-"))
        if shared_dir.is_dir()
        else 0
    )
    completed = load_completed_checkpoint(str(chk))
    named = {p for by_subtask in completed.operator_states.values() for h in by_subtask.values() for p in h.shared}
    full = own + sum(os.path.getsize(p) for p in named)
    return own + uploaded, full


def cancel(client: Any) -> None:
    client.cancel()
    assert client.wait(60)


# -- the tracker alone --------------------------------------------------------------------------------
def test_the_tracker_keeps_a_bounded_history_newest_first_and_counts_every_outcome():
    tracker = CheckpointStatsTracker(history_size=3)
    for checkpoint_id in range(1, 7):
        tracker.report_pending(checkpoint_id, 1000 * checkpoint_id, {"v": 1})
        figures = SubtaskStateStats(0, 1000 * checkpoint_id + 40, 1, 2, 3, 10, 100, 0, False)
        tracker.report_subtask(checkpoint_id, "v", figures)
        if checkpoint_id == 4:
            tracker.report_failed(checkpoint_id, 1000 * checkpoint_id + 50, "declined")
        else:
            tracker.report_completed(checkpoint_id, 1000 * checkpoint_id + 60, 100, f"/chk-{checkpoint_id}")
    tracker.report_pending(7, 7000, {"v": 1}, savepoint=True, stop=True)
    stats = tracker.snapshot()
    assert [e.checkpoint_id for e in stats.history] == [7, 6, 5]
    assert (stats.num_triggered, stats.num_completed, stats.num_failed, stats.num_in_progress) == (7, 5, 1, 1)
    assert stats.history[0].checkpoint_type is CheckpointType.SYNC_SAVEPOINT
    assert stats.latest_failed.checkpoint_id == 4 and stats.latest_failed.failure_message == "declined"
    assert stats.latest_completed.end_to_end_duration == 60
    assert stats.summaries["end_to_end_duration"].count == 5
    assert stats.summaries["checkpointed_size"].total == 50


# -- on a job -------------------------------------------------------------------------------------------
@pytest.mark.timeout(180)
@pytest.mark.parametrize("target", ["local", "ray"])
def test_checkpoint_history_is_kept_unpolled_bounded_and_sized_as_on_disk(request, tmp_path, target):
    if target == "ray":
        request.getfixturevalue("ray_session")
    client = keyed_idle_job(target, checkpoint_config(tmp_path, **{"web.checkpoints.history": 4}))
    try:
        # nobody polls the REST API meanwhile: the coordinator keeps the history itself
        assert wait_for(lambda: client.get_checkpoint_stats()["numberOfCompletedCheckpoints"] >= 8, client, 90)
        body = get(client, f"/jobs/{client.job_id}/checkpoints")
        history = body["history"]
        assert len(history) == 4
        ids = [h["id"] for h in history]
        assert ids == sorted(ids, reverse=True) and ids == list(range(ids[0], ids[0] - 4, -1))
        assert body["counts"]["completed"] >= 8
        assert body["counts"]["total"] == sum(body["counts"][k] for k in ("completed", "failed", "in_progress"))
        folder = job_folder(tmp_path, client)
        completed = [h for h in history if h["status"] == "COMPLETED"]
        assert completed
        for entry in completed:
            assert entry["checkpoint_type"] == "CHECKPOINT" and entry["is_savepoint"] is False
            written, full = disk_sizes(folder, entry["id"])
            assert (entry["checkpointed_size"], entry["state_size"]) == (written, full)
            on_disk = load_completed_checkpoint(str(folder / f"chk-{entry['id']}"))
            assert entry["trigger_timestamp"] == on_disk.trigger_timestamp  # when it was triggered
            assert entry["trigger_timestamp"] <= entry["latest_ack_timestamp"] <= on_disk.completion_timestamp
            assert entry["num_acknowledged_subtasks"] == entry["num_subtasks"] == 5  # 1 + 2 + 2 subtasks
            assert "alignment_buffered" not in entry and "processed_data" not in entry  # not measured
        # one checkpoint in detail: per vertex and per subtask, acks within its trigger and completion
        newest = completed[0]
        details = get(client, f"/jobs/{client.job_id}/checkpoints/details/{newest['id']}")
        vertices = {v["id"]: v for v in get(client, f"/jobs/{client.job_id}")["vertices"]}
        assert set(details["tasks"]) == set(vertices)
        assert sum(t["checkpointed_size"] for t in details["tasks"].values()) == newest["checkpointed_size"]
        on_disk = load_completed_checkpoint(str(folder / f"chk-{newest['id']}"))
        sources = {n["id"] for n in get(client, f"/jobs/{client.job_id}/plan")["plan"]["nodes"] if "inputs" not in n}
        for vertex_id, vertex in vertices.items():
            sub = get(client, f"/jobs/{client.job_id}/checkpoints/details/{newest['id']}/subtasks/{vertex_id}")
            assert [s["index"] for s in sub["subtasks"]] == list(range(vertex["parallelism"]))
            for s in sub["subtasks"]:
                assert s["status"] == "completed"
                assert newest["trigger_timestamp"] <= s["ack_timestamp"] <= on_disk.completion_timestamp
                assert s["end_to_end_duration"] == s["ack_timestamp"] - newest["trigger_timestamp"]
                if vertex_id in sources:  # no barrier reaches a source: no start delay to tell
                    assert "start_delay" not in s
                else:  # its first barrier came after the trigger and before it acknowledged
                    assert 0 <= s["start_delay"] <= s["end_to_end_duration"]
            assert sum(s["checkpointed_size"] for s in sub["subtasks"]) == sub["checkpointed_size"]
        assert http(client, f"/jobs/{client.job_id}/checkpoints/details/999999")[0] == 404
        summary = body["summary"]["checkpointed_size"]
        assert summary["min"] <= min(h["checkpointed_size"] for h in completed)
        assert summary["max"] >= max(h["checkpointed_size"] for h in completed)
    finally:
        cancel(client)


@pytest.mark.timeout(180)
def test_an_incremental_checkpoint_writes_less_than_its_full_size(tmp_path):
    client = keyed_idle_job("local", checkpoint_config(tmp_path, **{"execution.checkpointing.incremental": True}))
    try:
        folder = job_folder(tmp_path, client)

        def incremental_seen() -> bool:
            history = client.get_checkpoint_statistics().history
            return any(e.status == "COMPLETED" and e.checkpointed_size < (e.state_size or 0) for e in history)

        assert wait_for(incremental_seen, client, 90)
        history = get(client, f"/jobs/{client.job_id}/checkpoints")["history"]
        smaller = [h for h in history if h["status"] == "COMPLETED" and h["checkpointed_size"] < h["state_size"]]
        assert smaller
        for entry in [h for h in history if h["status"] == "COMPLETED"]:
            assert (entry["checkpointed_size"], entry["state_size"]) == disk_sizes(folder, entry["id"])
    finally:
        cancel(client)


@pytest.mark.timeout(180)
def test_a_savepoint_is_typed_flagged_and_located_as_taken(tmp_path):
    client = keyed_idle_job("local", checkpoint_config(tmp_path))
    try:
        status, body = http(
            client, f"/jobs/{client.job_id}/savepoints", "POST", {"target-directory": str(tmp_path / "savepoints")}
        )
        assert status == 202, body
        progress = f"/jobs/{client.job_id}/savepoints/{body['request-id']}"
        assert wait_for(lambda: get(client, progress)["status"]["id"] == "COMPLETED", client, 60)
        location = get(client, progress)["operation"]["location"]
        stats = get(client, f"/jobs/{client.job_id}/checkpoints")
        savepoint = stats["latest"]["savepoint"]
        assert savepoint["is_savepoint"] is True and savepoint["checkpoint_type"] == "SAVEPOINT"
        assert savepoint["external_path"] == location
        assert Path(location).parent == tmp_path / "savepoints"
        on_disk = load_completed_checkpoint(location)
        assert savepoint["id"] == on_disk.checkpoint_id
        # the latest completed checkpoint is never the savepoint
        latest = stats["latest"]["completed"]
        assert latest is None or (latest["is_savepoint"] is False and latest["id"] != savepoint["id"])
    finally:
        cancel(client)


@pytest.mark.timeout(180)
def test_mode_stop_is_refused_and_post_stop_stops_with_a_savepoint(tmp_path):
    client = keyed_idle_job("local", checkpoint_config(tmp_path))
    try:
        assert wait_for(lambda: client.get_checkpoint_stats()["numberOfCompletedCheckpoints"] >= 1, client, 60)
        status, body = http(client, f"/jobs/{client.job_id}?mode=stop", "PATCH")
        assert status == 400 and "POST /jobs/:jobid/stop" in body["errors"][0]
        assert str(client.get_job_status()) == "RUNNING"  # never a silent cancel
        status, body = http(
            client,
            f"/jobs/{client.job_id}/stop",
            "POST",
            {"targetDirectory": str(tmp_path / "stopped"), "drain": False},
        )
        assert status == 202 and body["request-id"], body
        assert client.wait(60)
    finally:
        if not client.wait(0):
            cancel(client)
    assert str(client.get_job_status()) == "FINISHED"
    folders = [p for p in (tmp_path / "stopped").iterdir() if (p / "_metadata").is_file()]
    assert len(folders) == 1
    savepoint = client.get_checkpoint_statistics().latest_savepoint
    assert savepoint.checkpoint_type is CheckpointType.SYNC_SAVEPOINT
    assert savepoint.external_path == str(folders[0])
    assert savepoint.checkpoint_id == load_completed_checkpoint(str(folders[0])).checkpoint_id


@pytest.mark.timeout(180)
def test_a_job_started_from_a_savepoint_counts_one_restore(tmp_path):
    first = keyed_idle_job("local", checkpoint_config(tmp_path), "before")
    try:
        location = first.trigger_savepoint(str(tmp_path / "savepoints")).result(60)
    finally:
        cancel(first)
    taken = load_completed_checkpoint(location)
    second = keyed_idle_job("local", checkpoint_config(tmp_path, **{"execution.savepoint.path": location}), "after")
    try:
        counts = get(second, f"/jobs/{second.job_id}/checkpoints")
        assert counts["counts"]["restored"] == 1
        restored = counts["latest"]["restored"]
        assert restored["id"] == taken.checkpoint_id and restored["is_savepoint"] is True
        assert restored["external_path"] == taken.external_pointer
    finally:
        cancel(second)


class PacedSource(SourceFunction):
    """``0, 1, 2, ...`` one record every 5 ms until cancelled (records keep flowing through the job)."""

    def __init__(self) -> None:
        self.running = True

    def run(self, ctx: Any) -> None:
        i = 0
        while self.running:
            ctx.collect(i)
            i += 1
            time.sleep(0.005)

    def cancel(self) -> None:
        self.running = False


class FailWhenAsked(MapFunction):
    """Raises once, at the first record after ``<folder>/fail`` appeared (``<folder>/failed`` marks it)."""

    def __init__(self, folder: str) -> None:
        self.folder = folder

    def map(self, value: Any) -> Any:
        if os.path.exists(os.path.join(self.folder, "fail")) and not os.path.exists(
            os.path.join(self.folder, "failed")
        ):
            Path(self.folder, "failed").write_text(str(int(time.time() * 1000)))
            raise ValueError("asked to fail")
        return value


@pytest.mark.timeout(180)
def test_each_failover_restore_is_counted_with_the_checkpoint_it_started_from(tmp_path):
    marks = tmp_path / "marks"
    marks.mkdir()
    config = checkpoint_config(
        tmp_path, **{"restart-strategy.type": "fixed-delay", "restart-strategy.fixed-delay.delay": "50 ms"}
    )
    env = make_env("local", 1, config)
    env.add_source(PacedSource(), "Paced").map(FailWhenAsked(str(marks))).add_sink(DiscardingSink())
    client = env.execute_async("fails once")
    try:
        assert wait_for(lambda: client.get_checkpoint_stats()["numberOfCompletedCheckpoints"] >= 2, client, 60)
        assert get(client, f"/jobs/{client.job_id}/checkpoints")["counts"]["restored"] == 0
        (marks / "fail").write_text("")
        assert wait_for(lambda: client.num_restarts == 1 and str(client.get_job_status()) == "RUNNING", client, 60)
        failed_at = int((marks / "failed").read_text())
        body = get(client, f"/jobs/{client.job_id}/checkpoints")
        assert body["counts"]["restored"] == 1
        restored = body["latest"]["restored"]
        # the newest checkpoint on disk completed before the restore is the one restored
        folder = job_folder(tmp_path, client)
        before = [
            c.checkpoint_id
            for c in (load_completed_checkpoint(str(p)) for p in folder.glob("chk-*") if (p / "_metadata").is_file())
            if c.completion_timestamp <= restored["restore_timestamp"]
        ]
        assert restored["id"] == max(before) and restored["is_savepoint"] is False
        assert failed_at <= restored["restore_timestamp"]
        assert restored["external_path"].rstrip("/").endswith(f"chk-{restored['id']}")
    finally:
        cancel(client)


# -- unaligned checkpoints ----------------------------------------------------------------------------
class SlowEnd(MapFunction):
    """The slow end of the job: 1 ms every 3 records (the workload, not a wait)."""

    def __init__(self) -> None:
        self.seen = 0

    def map(self, value: Any) -> Any:
        self.seen += 1
        if self.seen % 3 == 0:
            time.sleep(0.001)
        return value


def channel_state_bytes(folder: Path, checkpoint_id: int) -> int:
    """Bytes of in-flight data checkpoint ``checkpoint_id`` holds, read back from its files."""
    completed = load_completed_checkpoint(str(folder / f"chk-{checkpoint_id}"))
    total = 0
    for by_subtask in completed.operator_states.values():
        for handle in by_subtask.values():
            state = (cloudpickle.loads(read_state_handle(handle)) or {}).get(CHANNEL_STATE)
            if state is not None:
                for side in (state.inputs, state.outputs):
                    total += sum(len(item) for channels in side for items in channels for item in items)
    return total


@pytest.mark.timeout(180)
def test_an_unaligned_checkpoint_is_typed_so_and_persists_its_channel_state_bytes(tmp_path):
    config = checkpoint_config(tmp_path, **{"execution.checkpointing.unaligned.enabled": True})
    config["execution.checkpointing.interval"] = 200
    env = make_env("local", 2, config)
    (
        env.from_sequence(1, 300_000)
        .map(lambda v: (v % KEYS, 1))
        .key_by(lambda kv: kv[0])
        .reduce(lambda a, b: (a[0], a[1] + b[1]))
        .map(SlowEnd())
        .add_sink(DiscardingSink())
    )
    client = env.execute_async("unaligned figures")
    try:

        def persisted_seen() -> bool:
            history = client.get_checkpoint_statistics().history
            return any(e.status == "COMPLETED" and e.persisted_data > 0 for e in history)

        assert wait_for(persisted_seen, client, 120)
        history = get(client, f"/jobs/{client.job_id}/checkpoints")["history"]
        folder = job_folder(tmp_path, client)
        unaligned = [h for h in history if h["status"] == "COMPLETED" and h["persisted_data"] > 0]
        assert unaligned
        for entry in unaligned:
            assert entry["checkpoint_type"] == "UNALIGNED_CHECKPOINT"
            assert entry["persisted_data"] == channel_state_bytes(folder, entry["id"])
            details = get(client, f"/jobs/{client.job_id}/checkpoints/details/{entry['id']}")
            assert sum(t["persisted_data"] for t in details["tasks"].values()) == entry["persisted_data"]
    finally:
        cancel(client)


# -- subtask and job times ----------------------------------------------------------------------------
class ClockedMap(MapFunction):
    """Writes its own clock (epoch ms) when opened and when closed: ``<folder>/<open|close>-<subtask>``."""

    def __init__(self, folder: str) -> None:
        self.folder = folder
        self.index = -1

    def _stamp(self, what: str) -> None:
        Path(self.folder, f"{what}-{self.index}").write_text(str(int(time.time() * 1000)))

    def open(self, runtime_context: Any) -> None:
        self.index = runtime_context.get_index_of_this_subtask()
        self._stamp("open")

    def map(self, value: Any) -> Any:
        return value

    def close(self) -> None:
        self._stamp("close")


@pytest.mark.timeout(120)
def test_subtask_times_come_from_the_subtasks_clock_and_each_status_has_its_own_time(tmp_path):
    from raylink.runtime.rest.job_views import (
        MetricsSnapshot,
        find_vertex,
        job_details,
        multiple_jobs_details,
        vertex_details,
    )

    clocks = tmp_path / "clocks"
    clocks.mkdir()
    env = make_env("local", 2)
    env.from_sequence(1, 2000).map(ClockedMap(str(clocks))).name("Clocked").add_sink(DiscardingSink())
    before = int(time.time() * 1000)  # whole ms, as every clock reading here
    client = env.execute_async("clocked")
    client.get_job_execution_result(60)
    after = int(time.time() * 1000)
    opened = {int(p.name.split("-")[1]): int(p.read_text()) for p in clocks.glob("open-*")}
    closed = {int(p.name.split("-")[1]): int(p.read_text()) for p in clocks.glob("close-*")}
    assert sorted(opened) == sorted(closed) == [0, 1]
    # the bodies the REST handlers answer with, over the job's final reports
    snapshot = MetricsSnapshot(client.get_metrics())
    details = job_details(client, snapshot)
    stamps = details["timestamps"]
    assert before <= stamps["CREATED"] <= stamps["RUNNING"] <= min(opened.values())  # two moments, not one
    assert max(closed.values()) <= stamps["FINISHED"] <= after
    [overview] = multiple_jobs_details([client])["jobs"]
    assert overview["last-modification"] == stamps["FINISHED"]  # its last status change
    ejv = [e for e in client.execution_graph.job_vertices if "Clocked" in e.name][0]
    body = vertex_details(client, find_vertex(client, ejv.id), snapshot)
    for sub in body["subtasks"]:
        index = sub["subtask"]
        assert stamps["RUNNING"] <= sub["start-time"] <= opened[index]  # started before its function opened
        assert closed[index] <= sub["end-time"] <= stamps["FINISHED"]  # ended after its function closed
        assert sub["duration"] == sub["end-time"] - sub["start-time"]
    [vertex] = [v for v in details["vertices"] if v["id"] == ejv.id]
    assert vertex["start-time"] == min(s["start-time"] for s in body["subtasks"])
    assert vertex["end-time"] == max(s["end-time"] for s in body["subtasks"])


# -- TaskExecutors -----------------------------------------------------------------------------------------
@pytest.mark.timeout(120)
def test_a_local_task_executor_shows_this_process_hardware_and_no_heartbeat(tmp_path):
    import psutil

    client = keyed_idle_job("local", {"raylink.rest.enabled": True, "rest.port": 0})
    try:
        managers = get(client, "/taskmanagers")["taskmanagers"]
        assert len(managers) == 1
        [manager] = managers
        assert "timeSinceLastHeartbeat" not in manager  # in this process: no heartbeat to tell
        hardware = manager["hardware"]
        assert hardware["physicalMemory"] == psutil.virtual_memory().total
        assert hardware["cpuCores"] == len(os.sched_getaffinity(0))
        assert 0 < hardware["freeMemory"] <= hardware["physicalMemory"]
        assert "managedMemory" not in hardware
        # five subtasks in two slots (slot sharing), the local TaskExecutor sized for them
        assert (manager["slotsNumber"], manager["freeSlots"]) == (2, 0)
        overview = get(client, "/overview")
        assert (overview["slots-total"], overview["slots-available"]) == (2, 0)
    finally:
        cancel(client)


@pytest.mark.timeout(180)
def test_ray_task_executors_show_their_slots_heartbeats_and_hardware(ray_session, tmp_path):
    import psutil

    config = {"raylink.task-placement": "slot", "taskmanager.numberOfTaskSlots": 3}
    client = keyed_idle_job("ray", config)
    try:
        asked = time.time() * 1000
        assert wait_for(lambda: len(client.last_heartbeats) == len(client.handles), client, 30)
        managers = get(client, "/taskmanagers")["taskmanagers"]
        answered = time.time() * 1000
        # two slots of work (slot sharing, parallelism 2) on one TaskExecutor offering three
        assert [(m["slotsNumber"], m["freeSlots"]) for m in managers] == [(3, 1)]
        overview = get(client, "/overview")
        assert (overview["slots-total"], overview["slots-available"]) == (3, 1)
        [manager] = managers
        # a real heartbeat: the executor answered the JobMaster's long poll within its interval
        assert asked - 5000 <= manager["timeSinceLastHeartbeat"] <= answered
        pid = int(manager["path"].rsplit(":", 1)[1])
        assert pid != os.getpid() and psutil.pid_exists(pid)
        assert manager["hardware"]["physicalMemory"] == psutil.virtual_memory().total  # the same machine
        assert manager["hardware"]["cpuCores"] >= 1
        # each subtask's start is its own process's clock reading when it started: after RUNNING, before now
        running = get(client, f"/jobs/{client.job_id}")["timestamps"]["RUNNING"]
        for vertex in get(client, f"/jobs/{client.job_id}")["vertices"]:
            for sub in get(client, f"/jobs/{client.job_id}/vertices/{vertex['id']}")["subtasks"]:
                assert running <= sub["start-time"] <= answered and sub["end-time"] == -1
    finally:
        cancel(client)


@pytest.mark.timeout(120)
def test_an_exception_entry_carries_no_labels_nobody_computed(tmp_path):
    from raylink.runtime.rest.job_views import exception_entry

    entry = exception_entry(ValueError("bad"), 1, "Task", "executor-1")
    assert entry["exceptionName"] == "builtins.ValueError" and "ValueError: bad" in entry["stacktrace"]
    assert "failureLabels" not in entry and "concurrentExceptions" not in entry


def test_a_negative_history_size_is_refused_naming_the_option():
    from raylink.core.options import IllegalConfigurationError

    env = make_env("local", 1, {"web.checkpoints.history": -1, "execution.checkpointing.interval": 100})
    env.from_sequence(1, 10).add_sink(DiscardingSink())
    with pytest.raises(IllegalConfigurationError, match="web.checkpoints.history"):
        env.execute("negative history")
