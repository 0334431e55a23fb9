"""Savepoints of a job without periodic checkpoints (no ``execution.checkpointing.interval``),
as Flink takes them: ``stop_with_savepoint`` commits the exactly-once FileSink's output at the
savepoint and the same program started from it (also without checkpointing) completes the
output exactly once; ``trigger_savepoint`` commits nothing (Flink: no side effects for a
savepoint) and a job started from it goes on from its state; a failover of a job that took a
savepoint still restarts from the start, as without one. The reference (every rolling count of
the input once) is computed without raylink."""

from __future__ import annotations

import os
from collections import Counter, defaultdict

import pytest

from raylink.bench.failover import committed_lines, reference
from raylink.tests.runtime_jobs import make_env, wait_for
from raylink.tests.test_runtime_checkpointing import Paced
from raylink.tests.test_runtime_savepoints import N, build

pytestmark = pytest.mark.timeout(300)


def no_checkpointing_env(target, parallelism, **extra):
    conf = {"restart-strategy.type": "fixed-delay", "restart-strategy.fixed-delay.delay": "200 ms", **extra}
    return make_env(target, parallelism, conf)


def records_in(client) -> int:
    return sum(m.get("numRecordsIn", 0) for m in client.get_metrics())


def wait_processing(client, records: int = 2000) -> None:
    """Wait until the job runs and its tasks took in ``records`` records."""
    assert wait_for(
        lambda: client.get_job_status() == "RUNNING" and records_in(client) > records, client, timeout=120
    ), client.get_job_status()
    assert not client.wait(0), "the job ended too soon"


def finished(client, timeout: float = 180):
    assert client.wait(timeout), "the job did not finish"
    assert client.get_job_status() == "FINISHED", client.get_job_status()
    return client


def continues_from_state(lines: Counter) -> bool:
    """Per key, the rolling counts in ``lines`` are one run ``c+1 .. total`` of the reference's
    (each once): what a job that restored its count ``c`` and its source position writes."""
    by_key = defaultdict(list)
    for line, times in lines.items():
        if times != 1:
            return False
        key, count = map(int, line.split(","))
        by_key[key].append(count)
    totals = Counter(v % 7 for v in range(1, N + 1))
    return all(sorted(c) == list(range(min(c), totals[k] + 1)) for k, c in by_key.items())


def test_stop_with_savepoint_without_checkpointing_then_resume_exactly_once(target, tmp_path):
    first, second = tmp_path / "out-1", tmp_path / "out-2"
    env = no_checkpointing_env(target, 2)
    build(env, first)
    client = env.execute_async()
    wait_processing(client)
    path = client.stop_with_savepoint(False, str(tmp_path / "savepoints")).result(timeout=120)
    finished(client, 30)
    assert os.path.isfile(os.path.join(path, "_metadata"))
    assert "numberOfCompletedCheckpoints" in client.get_checkpoint_stats()
    stopped = committed_lines(first)  # the sinks committed at the stop's savepoint
    assert 0 < sum(stopped.values()) < N, "the first run was not stopped part-way"
    assert not os.path.exists(client.checkpoint_storage.job_directory), "the staged savepoint was left behind"

    env = no_checkpointing_env(target, 3, **{"execution.savepoint.path": path})
    build(env, second)
    finished(env.execute_async())
    assert stopped + committed_lines(second) == reference(N), "rolling counts lost or repeated across the savepoint"


def test_trigger_savepoint_without_checkpointing_commits_nothing_and_restores(target, tmp_path):
    out, resumed = tmp_path / "out", tmp_path / "resumed"
    env = no_checkpointing_env(target, 2)
    build(env, out)
    client = env.execute_async()
    wait_processing(client)
    path = client.trigger_savepoint(str(tmp_path / "savepoints")).result(timeout=120)
    assert committed_lines(out) == Counter(), "a savepoint committed output (Flink's sinks do not)"
    finished(client)
    assert committed_lines(out) == reference(N)  # the savepoint changed nothing of the output

    env = no_checkpointing_env(target, 2, **{"execution.savepoint.path": path})
    build(env, resumed)
    restored = finished(env.execute_async())
    lines = committed_lines(resumed)
    assert 0 < sum(lines.values()) < N, "the job started from the savepoint did not go on from it"
    assert continues_from_state(lines), "the restored job did not continue from the savepoint's state"
    assert restored.get_checkpoint_stats()["lastRestoredCheckpointId"] is not None


def test_a_failover_after_a_savepoint_without_checkpointing_restarts_from_the_start(tmp_path):
    """Savepoints are not for recovery: the job fails after one and restarts from scratch; the
    committed output is still every rolling count once."""
    from raylink.api import Encoder, FileSink, OutputFileConfig
    from raylink.bench.failover import KEYS
    from raylink.tests.test_runtime_checkpointing import add_counts

    out = tmp_path / "out"
    env = no_checkpointing_env("local", 2, **{"restart-strategy.fixed-delay.attempts": 2})
    sink = (
        FileSink.for_row_format(str(out), Encoder.simple_string_encoder())
        .with_output_file_config(OutputFileConfig.builder().with_part_prefix("part").build())
        .build()
    )
    (
        env.from_sequence(1, N)
        .map(Paced(fail_at=N - 500))
        .map(lambda v: (v % KEYS, 1))
        .key_by(lambda kv: kv[0])
        .reduce(add_counts)
        .map(lambda kv: f"{kv[0]},{kv[1]}")
        .sink_to(sink)
    )
    client = env.execute_async()
    wait_processing(client)
    client.trigger_savepoint(str(tmp_path / "savepoints")).result(timeout=120)
    finished(client)
    stats = client.get_checkpoint_stats()
    assert stats["numRestarts"] == 1 and stats["lastRestoredCheckpointId"] is None
    assert committed_lines(out) == reference(N)


# -- the session cluster's HTTP path ----------------------------------------------------------------
@pytest.fixture(scope="module")
def session(ray_session):
    from raylink.tests.runtime_jobs import running_session

    yield from running_session()


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_stop_with_savepoint_over_http_without_checkpointing_then_resume_exactly_once(session, tmp_path):
    """A job submitted to the session cluster without ``execution.checkpointing.interval`` is
    stopped with a savepoint through the Dispatcher's HTTP API (``RestJobClient``); ``raylink run
    --from-savepoint`` (no checkpointing either) completes the output exactly once."""
    import subprocess
    import sys

    from raylink.tests.test_session_rest_submission import PRELUDE, REPORT, SAVEPOINT_PROGRAM, _address, _driver

    program = SAVEPOINT_PROGRAM.replace('conf.set_string("execution.checkpointing.interval", "300 ms")\n', "")
    program = program.replace(' or not client.get_checkpoint_stats()["numberOfCompletedCheckpoints"]', "")
    assert "checkpointing.interval" not in program and "numberOfCompletedCheckpoints" not in program
    first = _driver(tmp_path, program, "test.out=out-1", "test.stop=yes")
    assert first["client"] == "RestJobClient" and first["status"] == "FINISHED", first
    stopped = committed_lines(str(tmp_path / "out-1"))
    assert sum(stopped.values()) < 16000, "the first run was not stopped"
    (tmp_path / "job.py").write_text(PRELUDE + program + REPORT)
    run = [sys.executable, "-m", "raylink", "run", "--from-savepoint", first["savepoint"], "--progress", "off"]
    ran = subprocess.run(
        [*run, "job.py", "test.out=out-2", "test.parallelism=3"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=dict(os.environ, RAY_ADDRESS=_address()),
        timeout=300,
    )
    assert ran.returncode == 0, ran.stderr[-4000:]
    assert stopped + committed_lines(str(tmp_path / "out-2")) == reference(16000)
