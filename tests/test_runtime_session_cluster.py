"""A session cluster (``raylink cluster start``): jobs reuse its warm TaskExecutors.

Jobs one after the other and two at once give exact results; executors given back
are clean (their reset report) and reused (the same actors); a job that loses an
executor restarts and restores; the CLI starts, shows and stops a session on the
test's Ray, and stop releases every actor. Every test stops the session it started
(the session actor is detached: it outlives the test process).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from raylink.tests.runtime_jobs import make_env, running_session

ROOT = Path(__file__).resolve().parent.parent


def _run(values, factor, parallelism=2, config=None):
    env = make_env("ray", parallelism, config)
    stream = env.from_collection(values).map(lambda x: x * factor)
    with stream.execute_and_collect() as results:
        return sorted(results)


@pytest.fixture
def session(ray_session):
    yield from running_session()


def _idle_ids(session):
    import ray

    ray.get(session.wait_idle.remote())
    return set(ray.get(session.idle_actor_ids.remote()))


@pytest.mark.timeout(240)
def test_consecutive_jobs_reuse_clean_executors(session):
    import ray

    warm = _idle_ids(session)
    assert len(warm) == 2
    assert _run([1, 2, 3], 10) == [10, 20, 30]
    first = _idle_ids(session)
    reports = ray.get(session.reset_reports.remote())
    assert reports and all(r["clean"] for r in reports), json.dumps(reports)
    assert {r["actor_id"] for r in reports} <= first
    assert all(
        r["previous"]["tasks"] >= 1
        and r["tasks"] == 0
        and r["threads"] == []
        and r["buffersInUse"] == 0
        and r["liveTasks"] == 0
        and r["connections"] == 0
        for r in reports
    ), reports
    assert _run(list(range(100)), 2) == [2 * i for i in range(100)]
    second = _idle_ids(session)
    status = ray.get(session.status.remote())
    # the second job ran on the same actors: nothing new was created for it
    assert second == first and warm <= first
    assert status["reused"] >= len(warm) and status["leased"] == {}
    assert status["created"] == len(first)


@pytest.mark.timeout(240)
def test_two_jobs_at_once(session):
    import ray

    results: dict = {}
    errors: list = []

    def run(name, values, factor):
        try:
            results[name] = _run(values, factor)
        except BaseException as exc:  # noqa: BLE001 - reported by the assertion below
            errors.append(exc)

    threads = [
        threading.Thread(target=run, args=("a", list(range(500)), 3)),
        threading.Thread(target=run, args=("b", list(range(300)), -1)),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(200)
    assert not errors, errors
    assert results == {"a": [3 * i for i in range(500)], "b": sorted(-i for i in range(300))}
    ray.get(session.wait_idle.remote())
    status = ray.get(session.status.remote())
    assert status["leased"] == {} and status["idle"] >= 2
    reports = ray.get(session.reset_reports.remote())
    assert all(r["clean"] for r in reports), repr([r for r in reports if not r["clean"]])


@pytest.mark.timeout(240)
def test_keyed_job_with_state_on_session(session):
    env = make_env("ray", 2)
    stream = (
        env.from_collection([("a", 1), ("b", 2), ("a", 3), ("b", 4), ("c", 5)])
        .key_by(lambda t: t[0])
        .reduce(lambda x, y: (x[0], x[1] + y[1]))
    )
    with stream.execute_and_collect() as results:
        out = list(results)
    assert sorted(out) == [("a", 1), ("a", 4), ("b", 2), ("b", 6), ("c", 5)]
    # the next job's keyed state starts empty on the same executors
    env = make_env("ray", 2)
    stream = env.from_collection([("a", 100)]).key_by(lambda t: t[0]).reduce(lambda x, y: (x[0], x[1] + y[1]))
    with stream.execute_and_collect() as results:
        assert list(results) == [("a", 100)]


@pytest.mark.timeout(240)
def test_session_disabled_by_option_uses_per_job_executors(session):
    import ray

    before = ray.get(session.status.remote())
    assert _run([1, 2], 5, config={"raylink.session.enabled": False}) == [5, 10]
    after = ray.get(session.status.remote())
    assert after["jobs"] == before["jobs"] and after["created"] == before["created"]


def _dead(actor_ids, timeout=30.0) -> bool:
    """Every actor of ``actor_ids`` is DEAD in the GCS (waits up to ``timeout`` for the kills)."""
    import time

    from ray._private import state

    deadline = time.monotonic() + timeout
    while True:
        states = {a: state.actors(actor_id=a)["State"] for a in actor_ids}
        if all(s == "DEAD" for s in states.values()) or time.monotonic() > deadline:
            return all(s == "DEAD" for s in states.values())
        time.sleep(0.2)  # polls the GCS: a kill has no event to wait on


def _cli(*args, address):
    env = dict(os.environ, RAY_ADDRESS=address)
    return subprocess.run(
        [sys.executable, "-m", "raylink", "cluster", *args, "--address", address],
        capture_output=True,
        text=True,
        cwd=ROOT.parent,
        env=env,
        timeout=120,
    )


def _eventually(predicate, timeout: float) -> bool:
    """``predicate()`` became true within ``timeout`` s (polls the session: a lease has no event to wait on)."""
    import time

    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    return True


def _settled(status: dict) -> bool:
    """No executor is leased or being reset: every one the session holds is idle."""
    return status["idle"] >= 2 and status["resetting"] == 0 and not status["leased"]


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_cli_start_status_stop(ray_session):
    import ray

    from raylink.actors.dispatcher import DISPATCHER_NAME
    from raylink.actors.session_cluster import SESSION_NAMESPACE, find_session
    from raylink.actors.session_entrypoint import stop_session
    from raylink.runtime.client.rest_endpoint import _endpoint_file
    from raylink.runtime.client.rest_tokens import find_rest_token, token_file

    address = ray.get_runtime_context().gcs_address
    record = ""
    assert find_session() is None
    actor_ids: set = set()
    try:
        started = _cli("start", "--executors", "2", address=address)
        assert started.returncode == 0, started.stderr
        assert "session cluster started" in started.stdout
        status = _cli("status", "--json", address=address)
        assert status.returncode == 0, status.stderr
        info = json.loads(status.stdout)
        assert info["idle"] == 2 and info["leased"] == {}
        again = _cli("start", address=address)
        assert again.returncode == 1 and "already running" in again.stderr
        assert _run([4, 5], 2) == [8, 10]  # a job of this driver uses the session the CLI started
        session = find_session()
        # the job ran on the pool's executors: they are idle again once reset
        assert _eventually(lambda: _settled(ray.get(session.status.remote())), 30)
        dispatcher = ray.get_actor(DISPATCHER_NAME, namespace=SESSION_NAMESPACE)
        actor_ids = set(ray.get(session.idle_actor_ids.remote())) | {
            session._actor_id.hex(),
            dispatcher._actor_id.hex(),
        }
        assert ray.get(session.status.remote())["jobs"] == 1
        assert os.path.exists(_endpoint_file(address)) and "submitted to http://127.0.0.1:" in started.stdout
        # the CLI finds the dashboard's token in this user's runtime folder: the address it prints carries it
        rest_url = ray.get(session.status.remote())["restUrl"]
        token = find_rest_token(rest_url)
        assert token and f"web dashboard at {rest_url}/#token={token}\n" in started.stdout
        record = token_file(rest_url)
        stopped = _cli("stop", address=address)
        assert stopped.returncode == 0, stopped.stderr
        assert "stopped" in stopped.stdout
    finally:
        stop_session()
    assert find_session() is None
    assert not os.path.exists(_endpoint_file(address)) and not os.path.exists(record)
    # stop released every actor (executors, the session, its Dispatcher): none is alive
    assert len(actor_ids) >= 4
    assert _dead(actor_ids)
    none = _cli("status", address=address)
    assert none.returncode == 1 and "no session cluster" in none.stderr


@pytest.mark.timeout(400)
def test_a_job_losing_a_pooled_executor_restarts_and_restores_exactly_once(session, tmp_path):
    import ray

    from raylink.bench.failover import committed_lines
    from raylink.tests.runtime_jobs import wait_for
    from raylink.tests.test_runtime_checkpointing import N, build, checkpointing_env, executor_pids, expected_counts

    env = checkpointing_env("ray", 2, tmp_path)
    out = tmp_path / "out"
    build(env, out, n=2 * N)
    client = env.execute_async()
    assert wait_for(
        lambda: (
            client.get_job_status() == "RUNNING" and client.get_checkpoint_stats()["numberOfCompletedCheckpoints"] > 0
        ),
        client,
        timeout=120,
    )
    assert not client.wait(0), "the job ended before the kill"
    os.kill(executor_pids(client)[0], signal.SIGKILL)
    finished = client.wait(150)
    if not finished:
        client.cancel()
    assert finished, "the job did not finish"
    assert client.get_job_status() == "FINISHED", client.get_job_status()
    assert client.get_checkpoint_stats()["numRestarts"] >= 1
    assert committed_lines(out) == expected_counts(2 * N)
    ray.get(session.wait_idle.remote())
    status = ray.get(session.status.remote())
    assert status["lost"] >= 1 and status["leased"] == {} and status["jobs"] >= 2, status
    reports = ray.get(session.reset_reports.remote())
    assert all(r["clean"] for r in reports), repr([r for r in reports if not r["clean"]])
