"""Detached jobs (``execution.attached: false``): the JobMaster runs in a detached actor of its
own, so the job keeps running after the program that submitted it exited; other processes
find it by id, take a savepoint of it and cancel it, and its actors are released when it ends."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

pytestmark = [pytest.mark.ray, pytest.mark.slow]

ROOT = Path(__file__).resolve().parent.parent

PROGRAM = textwrap.dedent(
    """
    import sys, time
    from raylink.api import Encoder, FileSink, StreamExecutionEnvironment
    from raylink.api.functions import MapFunction

    class Paced(MapFunction):
        def map(self, value):
            time.sleep(0.002)  # the workload: the job runs far longer than the test
            return value

    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    out = sys.argv[1]
    (
        env.from_sequence(1, 10_000_000)
        .map(Paced())
        .map(lambda v: (v % 7, 1))
        .key_by(lambda kv: kv[0])
        .reduce(lambda a, b: (a[0], a[1] + b[1]))
        .map(lambda kv: f"{kv[0]},{kv[1]}")
        .sink_to(FileSink.for_row_format(out, Encoder.simple_string_encoder()).build())
    )
    result = env.execute("detached count")
    print("JOB", result.get_job_id(), flush=True)
    """
)


def _alive(actor_name: str, namespace: str) -> bool:
    import ray

    return any(
        a["name"] == actor_name and a["namespace"] == namespace for a in ray.util.list_named_actors(all_namespaces=True)
    )


def _until(condition, timeout: float) -> bool:
    """Re-check ``condition`` every 0.2 s until it holds or ``timeout`` s pass."""
    deadline = time.monotonic() + timeout
    pace = threading.Event()  # never set: a paced re-check of a state read from Ray
    while not condition():
        if time.monotonic() > deadline:
            return False
        pace.wait(0.2)
    return True


@pytest.mark.timeout(300)
def test_a_detached_job_outlives_its_program_and_another_process_savepoints_and_cancels_it(ray_session, tmp_path):
    import ray

    from raylink.actors.job_master_actor import JOB_MASTER_NAMESPACE, job_master_actor_name, list_jobs
    from raylink.api import JobClient

    program = tmp_path / "job.py"
    program.write_text(PROGRAM)
    address = ray.get_runtime_context().gcs_address
    conf = (
        '{"execution.target": "ray", "execution.attached": "false", "execution.checkpointing.interval": "300 ms", '
        f'"execution.checkpointing.dir": "{tmp_path / "checkpoints"}", "jobstore.expiration-time": "5", '
        f'"execution.checkpointing.savepoint-dir": "{tmp_path / "savepoints"}"}}'
    )
    env = dict(os.environ, RAY_ADDRESS=address, RAYLINK_CONF=conf)
    ran = subprocess.run(
        [sys.executable, str(program), str(tmp_path / "out")],
        capture_output=True,
        text=True,
        env=env,
        timeout=180,
        cwd=str(tmp_path),
    )
    assert ran.returncode == 0, ran.stderr[-3000:]
    job_id = ran.stdout.split("JOB ", 1)[1].split()[0]

    # the program has exited; the job goes on: it is listed, RUNNING, and completes checkpoints
    listed = {job["jobId"]: job for job in list_jobs()}
    assert job_id in listed and listed[job_id]["detached"], listed
    client = JobClient.of(job_id)
    assert client.get_job_status() == "RUNNING"
    done = client.get_checkpoint_stats().get("numberOfCompletedCheckpoints", 0)
    assert _until(lambda: client.get_checkpoint_stats()["numberOfCompletedCheckpoints"] > done + 1, 120)

    # another process (the CLI) takes a savepoint by job id; the job keeps running
    savepoints = tmp_path / "savepoints"
    cli = [sys.executable, "-m", "raylink"]
    taken = subprocess.run(
        [*cli, "savepoint", job_id, str(savepoints), "--address", address],
        capture_output=True,
        text=True,
        env=dict(os.environ, RAYLINK_CONF=""),
        timeout=180,
        cwd=str(ROOT),
    )
    assert taken.returncode == 0, taken.stderr[-3000:]
    location = taken.stdout.strip().splitlines()[-1]
    assert os.path.isfile(os.path.join(location.removeprefix("file://"), "_metadata")), location
    assert client.get_job_status() == "RUNNING"

    cancelled = subprocess.run(
        [*cli, "cluster", "cancel", job_id, "--address", address],
        capture_output=True,
        text=True,
        env=dict(os.environ, RAYLINK_CONF=""),
        timeout=180,
        cwd=str(ROOT),
    )
    assert cancelled.returncode == 0, cancelled.stderr[-3000:]
    assert f"job {job_id} CANCELED" in cancelled.stdout
    # released: the JobMaster actor (jobstore.expiration-time 5 s) and every TaskExecutor of the job
    assert _until(lambda: not _alive(job_master_actor_name(job_id), JOB_MASTER_NAMESPACE), 90)
    assert not [a for a in ray.util.list_named_actors(all_namespaces=True) if a["name"].startswith(f"{job_id}/")]
