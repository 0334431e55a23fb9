"""Session cluster high availability: the Dispatcher actor (which runs the JobMasters of jobs
submitted over HTTP) is SIGKILLed while a checkpointed keyed count writes into the FileSink;
Ray restarts it, it serves on the same port again and recovers the job from the
high-availability store (the old attempt's leased TaskExecutors taken back and reset), and the
committed output equals the failure-free result computed here without raylink."""

from __future__ import annotations

import json
import os
import signal as os_signal
import threading
import time

import pytest

from raylink.bench.failover import committed_lines, reference
from raylink.tests.runtime_jobs import wait_for
from raylink.tests.test_runtime_checkpointing import build, checkpointing_env

N = 8000

pytestmark = [pytest.mark.ray, pytest.mark.slow]


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
def test_a_sigkilled_dispatcher_recovers_its_job_and_the_output_is_exactly_once(ray_session, tmp_path):
    import ray

    from raylink.actors.dispatcher import find_dispatcher
    from raylink.actors.session_entrypoint import start_session, stop_session
    from raylink.runtime.client.rest_cluster_client import RestJobClient
    from raylink.runtime.client.rest_endpoint import RestEndpoint, _endpoint_file
    from raylink.runtime.runtime_dir import read_private_file

    ha = {"high-availability.type": "filesystem", "high-availability.storageDir": str(tmp_path / "ha")}
    session = start_session(executors=2, ha_settings=ha)
    try:
        env = checkpointing_env("ray", 2, tmp_path)
        out = tmp_path / "out"
        build(env, out, n=N)
        # over HTTP, as a driver without Ray submits it: its JobMaster runs in the Dispatcher
        recorded = json.loads(read_private_file(_endpoint_file(ray.get_runtime_context().gcs_address)))
        client = RestJobClient.submit(RestEndpoint(recorded["url"], recorded["token"]), env, None)
        job_id = client.get_job_id()
        assert [j["jobId"] for j in ray.get(find_dispatcher().jobs.remote())] == [job_id]
        assert wait_for(lambda: client.get_checkpoint_stats()["numberOfCompletedCheckpoints"] >= 2, client, 120)
        dispatcher = find_dispatcher()
        pid = ray.get(dispatcher.pid.remote())
        os.kill(pid, os_signal.SIGKILL)

        def status() -> str:
            try:
                jobs = {j["jobId"]: j["status"] for j in ray.get(dispatcher.jobs.remote(), timeout=30)}
            except ray.exceptions.RayError:  # restarting
                return "?"
            return jobs.get(job_id, "?")

        assert _until(lambda: status() in ("FINISHED", "FAILED", "CANCELED"), 240), status()
        assert status() == "FINISHED"
        assert ray.get(dispatcher.pid.remote()) != pid
        assert ray.get(dispatcher.recover.remote()) == [job_id]  # the restarted one recovered it
        got, want = committed_lines(str(out)), reference(N)
        assert got == want, f"lost {sum((want - got).values())}, duplicated {sum((got - want).values())}"
        # a finished job's high-availability entries are removed (the reaper's next round)
        assert _until(lambda: not os.listdir(tmp_path / "ha" / "default" / "session" / "jobgraphs"), 30)
    finally:
        stop_session(session)
