"""The state backends end to end: TaskExecutor processes SIGKILLed on a real Ray while a
keyed rolling count takes incremental checkpoints -- RocksDB's SST files, the heap's chains
of changes -- (every restore from them, the committed output exactly a failure-free run's), windows of every assigner on Ray, and a
savepoint of a RocksDB job resumed at other parallelisms on RocksDB and on the heap. The
references are computed in the tests without raylink."""

from __future__ import annotations

import json
import os
import signal as os_signal

import pytest

from raylink.bench.failover import committed_lines
from raylink.tests.runtime_jobs import wait_for
from raylink.tests.test_runtime_checkpointing import N, build, checkpointing_env, executor_pids, expected_counts


def use_backend(monkeypatch, tmp_path, backend: str = "rocksdb", incremental: bool = True) -> str:
    """Jobs of this test run on ``backend`` (``RAYLINK_CONF``); returns RocksDB's local folder."""
    local = str(tmp_path / "rocksdb-local")
    conf = {
        "state.backend.type": backend,
        "state.backend.rocksdb.localdir": local,
        "execution.checkpointing.incremental": str(incremental).lower(),
    }
    monkeypatch.setenv("RAYLINK_CONF", json.dumps(conf))
    return local


def shared_sst_files(tmp_path, pattern: str = "*.sst") -> list:
    root = tmp_path / "checkpoints"
    return [p for p in root.glob(f"*/shared/{pattern}")] if root.exists() else []


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize("backend", ["rocksdb", "hashmap"])
def test_sigkilled_task_executors_restore_exact_results_from_incremental_checkpoints(
    ray_session, tmp_path, monkeypatch, backend
):
    local = use_backend(monkeypatch, tmp_path, backend)
    pattern = "*.sst" if backend == "rocksdb" else "*-heap-*-changes-*"  # a heap chain's file of changes
    env = checkpointing_env("ray", 2, tmp_path, **{"execution.checkpointing.num-retained": 2})
    out = tmp_path / "out"
    n = 4 * N
    build(env, out, n=n)
    client = env.execute_async()
    kills = 0
    shared_seen = 0
    for round_ in range(3):
        completed_before = client.get_checkpoint_stats()["numberOfCompletedCheckpoints"]
        wait_for(
            lambda: (
                client.get_job_status() == "RUNNING"
                and client.get_checkpoint_stats()["numberOfCompletedCheckpoints"] > completed_before + 1
            ),
            client,
            timeout=120,
        )
        if client.wait(0):
            break
        shared_seen = max(shared_seen, len(shared_sst_files(tmp_path, pattern)))
        pids = executor_pids(client)
        os.kill(pids[round_ % len(pids)], os_signal.SIGKILL)
        kills += 1
        assert wait_for(
            lambda: client.get_checkpoint_stats()["numRestarts"] >= kills or client.wait(0), client, timeout=120
        )
    assert client.wait(300), "the job did not finish"
    assert client.get_job_status() == "FINISHED", client.get_job_status()
    assert client.get_checkpoint_stats()["numRestarts"] == kills >= 2
    assert committed_lines(out) == expected_counts(n)
    assert shared_seen > 0, f"no incremental checkpoint wrote {pattern} files to the shared folder"
    assert os.path.isdir(local) == (backend == "rocksdb")


@pytest.mark.timeout(300)
def test_windows_of_every_assigner_on_ray_with_rocksdb_match_the_reference(ray_session, tmp_path, monkeypatch):
    from raylink.tests.test_windows_e2e import (
        ASSIGNERS,
        bounded_disorder_events,
        reference_rows,
        run_windowed_job,
    )

    local = use_backend(monkeypatch, tmp_path)
    events = bounded_disorder_events(7, 300, ["a", "b", "c", "d"], 20)
    for i, assigner in enumerate(sorted(ASSIGNERS)):
        kind = ["aggregate", "process", "reduce_window"][i % 3]
        spec = ASSIGNERS[assigner]
        got = run_windowed_job("ray", 2, events, spec, kind, True, 20)
        assert got == reference_rows(events, spec, kind, True), assigner
    assert os.path.isdir(local)


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_a_rocksdb_savepoint_resumes_at_other_parallelisms_on_either_backend(tmp_path, monkeypatch):
    """p=2 on RocksDB, stopped with a savepoint; resumed at p=3 on RocksDB and, from the same
    savepoint, at p=1 on the heap: each resumed run plus the first holds every rolling count
    exactly once."""
    from raylink.tests.test_runtime_savepoints import N as SAVEPOINT_N
    from raylink.tests.test_runtime_savepoints import build as build_counts
    from raylink.tests.test_runtime_savepoints import run_from, stop_after_a_checkpoint

    use_backend(monkeypatch, tmp_path)
    env = checkpointing_env("local", 2, tmp_path)
    first = tmp_path / "first"
    build_counts(env, first)
    path = stop_after_a_checkpoint(env.execute_async(), tmp_path / "savepoints", out=first)
    before = committed_lines(first)
    want = expected_counts(SAVEPOINT_N)
    for parallelism, backend in [(3, "rocksdb"), (1, "hashmap")]:
        use_backend(monkeypatch, tmp_path, backend)
        out = tmp_path / f"resumed-{parallelism}"
        run_from("local", parallelism, tmp_path / f"run-{parallelism}", out, path)
        assert before + committed_lines(out) == want, (parallelism, backend)


@pytest.mark.timeout(120)
def test_set_state_backend_runs_the_job_on_embedded_rocksdb(tmp_path):
    from collections import Counter

    from raylink.api import EmbeddedRocksDBStateBackend, HashMapStateBackend
    from raylink.tests.runtime_jobs import make_env

    env = make_env("local", 2)
    backend = EmbeddedRocksDBStateBackend(enable_incremental_checkpointing=True)
    backend.set_db_storage_paths(str(tmp_path / "a"), str(tmp_path / "b"))
    env.set_state_backend(backend)
    assert env.configuration.to_dict()["state.backend.type"] == "rocksdb"
    assert env.get_state_backend().get_db_storage_paths() == [str(tmp_path / "a"), str(tmp_path / "b")]
    assert env.get_state_backend().is_incremental_checkpoints_enabled()
    words = [f"w{i % 37}" for i in range(2000)]
    got = env.from_collection(words).map(lambda w: (w, 1)).key_by(lambda p: p[0]).sum(1).execute_and_collect()
    final = {}
    for word, count in got:
        final[word] = max(final.get(word, 0), count)
    assert final == dict(Counter(words))
    assert (tmp_path / "a").is_dir() and (tmp_path / "b").is_dir()  # one folder per subtask, round robin
    with pytest.raises(TypeError, match="expected a HashMapStateBackend or EmbeddedRocksDBStateBackend, got str"):
        env.set_state_backend("rocksdb")
    with pytest.raises(ValueError, match="is not a local directory path"):
        backend.set_db_storage_paths("")
    assert isinstance(env.set_state_backend(HashMapStateBackend()).get_state_backend(), HashMapStateBackend)
