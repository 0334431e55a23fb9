"""Jobs submitted over HTTP to a session cluster's Dispatcher, from drivers that never import Ray.

Each driver is a real ``python job.py`` process with ``RAY_ADDRESS`` naming the test's Ray
(where the session runs); it reports its results and whether Ray was imported. Results are
compared with a brute-force reference computed here; the session's own figures show that
the warm executors were reused and went back clean.
"""

from __future__ import annotations

import http.client
import json
import os
import signal
import subprocess
import sys
import textwrap
from collections import defaultdict
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from raylink.tests.runtime_jobs import running_session
from raylink.tests.test_runtime_session_cluster import _cli, _eventually

ROOT = Path(__file__).resolve().parent.parent

PRELUDE = """
import json, signal, sys
# Ctrl-C raises KeyboardInterrupt, as in a terminal (a shell starting pytest in the background
# leaves SIGINT ignored, and a Python started with it ignored keeps it so)
signal.signal(signal.SIGINT, signal.default_int_handler)
from raylink.api import Configuration, StreamExecutionEnvironment
conf = Configuration()
for item in sys.argv[1:]:
    key, value = item.split("=", 1)
    conf.set_string(key, value)
env = StreamExecutionEnvironment.get_execution_environment(conf)
env.set_parallelism(2)
out = {}
"""
REPORT = """
out["ray_imported"] = "ray" in sys.modules
print("REPORT " + json.dumps(out))
"""


@pytest.fixture(scope="module")
def session(ray_session):
    yield from running_session()


def _address() -> str:
    import ray

    return ray.get_runtime_context().gcs_address


def _start_driver(tmp_path: Path, body: str, *conf: str, name: str = "job.py") -> subprocess.Popen:
    """Start ``body`` as the job script ``name`` in ``tmp_path``, a driver with ``RAY_ADDRESS``
    naming the test's Ray (``conf``: ``key=value`` options)."""
    script = tmp_path / name
    script.write_text(PRELUDE + textwrap.dedent(body))
    env = dict(os.environ, RAY_ADDRESS=_address())
    env["PYTHONPATH"] = str(ROOT.parent) + os.pathsep + env.get("PYTHONPATH", "")
    return subprocess.Popen(
        [sys.executable, "-u", str(script), *conf],
        cwd=tmp_path,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _report(stdout: str) -> dict:
    """What a job script ending in ``REPORT`` reported."""
    line = [x for x in stdout.splitlines() if x.startswith("REPORT ")][-1]
    return json.loads(line[len("REPORT ") :])


def _driver(tmp_path: Path, body: str, *conf: str, timeout: float = 180) -> dict:
    """Run ``body`` as a job script in ``tmp_path`` to its end; the dict it reported."""
    proc = _start_driver(tmp_path, textwrap.dedent(body) + REPORT, *conf)
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    finally:
        proc.kill()
    assert proc.returncode == 0, stderr[-4000:]
    return _report(stdout)


def _status(session) -> dict:
    import ray

    ray.get(session.wait_idle.remote())
    return ray.get(session.status.remote())


WORDCOUNT = """
from words import split  # a module of the program's own folder: it travels by value
lines = ["a b c a", "b a d", "c c c", "e"] * 25
stream = (
    env.from_collection(lines)
    .flat_map(split)
    .key_by(lambda t: t[0])
    .reduce(lambda x, y: (x[0], x[1] + y[1]))
)
with stream.execute_and_collect() as results:
    out["counts"] = [list(r) for r in results]
"""


def _wordcount_reference() -> dict:
    final: dict = defaultdict(int)
    for line in ["a b c a", "b a d", "c c c", "e"] * 25:
        for word in line.split():
            final[word] += 1
    return dict(final)


def _last_counts(counts: list) -> dict:
    running: dict = {}
    for word, count in counts:
        assert count == running.get(word, 0) + 1, (word, count)  # every update, in order per key
        running[word] = count
    return running


@pytest.mark.timeout(300)
def test_a_driver_without_ray_runs_its_job_on_the_warm_executors(session, tmp_path):
    (tmp_path / "words.py").write_text("def split(line):\n    return [(w, 1) for w in line.split()]\n")
    _driver(tmp_path, WORDCOUNT)  # the pool grows to the job's size
    before = _status(session)
    out = _driver(tmp_path, WORDCOUNT)
    assert out["ray_imported"] is False
    assert _last_counts(out["counts"]) == _wordcount_reference()
    assert len(out["counts"]) == sum(_wordcount_reference().values())
    after = _status(session)
    assert after["jobs"] == before["jobs"] + 1
    assert after["created"] == before["created"], "the job started new executors instead of the warm ones"
    assert after["leased"] == {}
    reports = session_reset_reports(session, before["resets"])
    assert reports and all(r["clean"] for r in reports), reports


def session_reset_reports(session, since: int) -> list:
    """The reports of the executors reset after ``since`` (a ``status()["resets"]``): this
    test's jobs', not an earlier test's (a cancelled job's executor may be discarded)."""
    import ray

    return ray.get(session.reset_reports.remote(since))


@pytest.mark.timeout(300)
def test_two_drivers_at_once_then_one_more(session, tmp_path):
    (tmp_path / "words.py").write_text("def split(line):\n    return [(w, 1) for w in line.split()]\n")
    since = _status(session)["resets"]
    procs = [_start_driver(tmp_path, WORDCOUNT + REPORT, name=f"job{i}.py") for i in range(2)]
    for proc in procs:
        stdout, stderr = proc.communicate(timeout=180)
        assert proc.returncode == 0, stderr[-4000:]
        report = _report(stdout)
        assert report["ray_imported"] is False
        assert _last_counts(report["counts"]) == _wordcount_reference()
    out = _driver(tmp_path, WORDCOUNT)
    assert _last_counts(out["counts"]) == _wordcount_reference()
    status = _status(session)
    assert status["leased"] == {}
    reports = session_reset_reports(session, since)
    assert reports and all(r["clean"] for r in reports), reports


@pytest.mark.timeout(300)
def test_execute_results_failures_and_limits_reach_the_driver(session, tmp_path):
    out = _driver(
        tmp_path,
        """
        from raylink.runtime.client.job_result import JobExecutionException

        def check(x):
            if x == 7:
                raise ValueError("bad record 7")
            return x

        env.from_collection(list(range(10))).map(check).print()
        try:
            env.execute("failing job")
        except JobExecutionException as exc:
            out["error"] = str(exc)
            out["cause"] = type(exc.__cause__).__name__
        env.from_collection(list(range(100))).map(lambda x: x + 1).print()
        client = env.execute_async("async job")
        result = client.get_job_execution_result(120)
        out["name"] = result.job_name
        out["status"] = str(client.get_job_status())
        first = env.from_sequence(1, 10_000_000).map(lambda x: -x).execute_and_collect(limit=5)
        out["first"] = list(first)
        out["after_limit"] = str(first.job_client.get_job_status())
        """,
    )
    assert out["ray_imported"] is False
    assert "failing job" in out["error"] and "bad record 7" in out["error"] and out["cause"]
    assert out["name"] == "async job" and out["status"] == "FINISHED"
    assert len(out["first"]) == 5 and all(x < 0 for x in out["first"])
    assert out["after_limit"] in ("CANCELED", "CANCELLING")
    # the driver left while its cancelled job was being torn down: the executors come back after
    assert _eventually(lambda: _leased(session) == {}, 60), "a cancelled job kept its executors"


@pytest.mark.timeout(300)
def test_without_an_endpoint_or_when_asked_the_driver_connects_to_ray(session, tmp_path):
    from raylink.runtime.client.rest_endpoint import _endpoint_file

    body = "out['r'] = sorted(env.from_collection([1, 2, 3]).map(lambda x: x * 2).execute_and_collect())\n"
    out = _driver(tmp_path, body, "raylink.session.rest-submission=false")
    assert out == {"r": [2, 4, 6], "ray_imported": True}
    path = _endpoint_file(_address())
    recorded = Path(path).read_text()
    stale = json.loads(recorded)
    stale["url"] = "http://127.0.0.1:9"  # nothing listens there: a session stopped without cleaning up
    Path(path).write_text(json.dumps(stale))
    try:
        out = _driver(tmp_path, body)
    finally:
        Path(path).write_text(recorded)
    assert out == {"r": [2, 4, 6], "ray_imported": True}


@pytest.mark.timeout(120)
def test_requests_without_the_token_or_for_unknown_jobs_are_refused(session):
    import ray

    from raylink.runtime.client.rest_cluster_client import RestClusterClient, RestClusterError
    from raylink.runtime.client.rest_endpoint import RestEndpoint

    url = ray.get(session.status.remote())["restUrl"]
    assert url.startswith("http://127.0.0.1:")
    with pytest.raises(RestClusterError, match="HTTP 401, an answer not signed with this session's token"):
        RestClusterClient(RestEndpoint(url, "wrong")).request("GET", "/v1/overview")
    from raylink.runtime.client.rest_endpoint import (
        AUTH_SCHEME,
        DIGEST_HEADER,
        NONCE_HEADER,
        SIGNATURE_HEADER,
        TIMESTAMP_HEADER,
        _endpoint_file,
        body_digest,
        request_signature,
        response_signature,
        signing_timestamp,
    )

    token = json.loads(Path(_endpoint_file(_address())).read_text())["token"]
    assert oct(os.stat(_endpoint_file(_address())).st_mode & 0o777) == "0o600"
    # the token itself as a bearer token is refused (it never crosses the wire); the 401 is signed
    parts = urlsplit(url)
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
    connection.request("GET", "/v1/overview", headers={"Authorization": f"Bearer {token}", NONCE_HEADER: "n0"})
    response = connection.getresponse()
    body = response.read()
    connection.close()
    assert response.status == 401 and json.loads(body) == {"errors": ["missing or wrong session token"]}
    kind = response.getheader("Content-Type")
    assert response.getheader(SIGNATURE_HEADER) == response_signature(token, "n0", 401, kind, body)
    # a signed request whose body is not the one it signed is refused too
    digest, stamp = body_digest(b"signed body"), signing_timestamp()
    headers = {
        "Authorization": f"{AUTH_SCHEME} {request_signature(token, 'n1', 'POST', '/v1/jobs', digest, timestamp=stamp)}",
        NONCE_HEADER: "n1",
        TIMESTAMP_HEADER: stamp,
        DIGEST_HEADER: digest,
    }
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
    connection.request("POST", "/v1/jobs", body=b"another body", headers=headers)
    response = connection.getresponse()
    body = response.read()
    connection.close()
    assert response.status == 400 and json.loads(body) == {"errors": ["the body does not match its signed digest"]}
    client = RestClusterClient(RestEndpoint(url, token))
    assert client.request("GET", "/v1/overview")[0] == 200
    with pytest.raises(RestClusterError, match="HTTP 404: 404: Not Found"):  # aiohttp's own answer, signed too
        client.request("GET", "/v1/no-such-route")
    with pytest.raises(RestClusterError, match="HTTP 404.*not known"):
        client.request("GET", "/v1/jobs/0123/execution-result")


def _leased(session) -> dict:
    import ray

    return ray.get(session.status.remote())["leased"]


def _cancel_left(job_name: str) -> None:
    """Cancel the session's running jobs named ``job_name`` (a failed test's leftovers)."""
    status = _cli("status", "--json", address=_address())
    if status.returncode != 0:
        return
    for job in json.loads(status.stdout)["submittedJobs"]:
        if job["status"] == "RUNNING" and job["jobName"] == job_name:
            _cli("cancel", job["jobId"], address=_address())


@pytest.mark.timeout(300)
def test_a_killed_collecting_driver_or_ctrl_c_ends_its_job_and_frees_the_executors(session, tmp_path):
    assert _eventually(lambda: _leased(session) == {}, 60)
    collecting = _start_driver(
        tmp_path,
        """
        conf.set_string("client.heartbeat.timeout", "2 s")
        env = StreamExecutionEnvironment.get_execution_environment(conf)
        results = env.from_sequence(1, 10**12).map(lambda x: x).execute_and_collect()
        print("READ", next(results), flush=True)
        sys.stdin.read()  # holds the job, reading nothing more, until killed
        """,
    )
    try:
        assert collecting.stdout.readline().startswith("READ 1"), collecting.stderr.read()[-3000:]
        assert _leased(session), "the running job holds no executors"
        collecting.kill()  # SIGKILL: no close(), no cancel from the driver
        collecting.wait(30)
        assert _eventually(lambda: _leased(session) == {}, 60), "the orphaned job was not cancelled"
    finally:
        collecting.kill()
    attached = _start_driver(
        tmp_path,
        """
        env.from_sequence(1, 10**12).map(lambda x: x).add_sink(lambda x: None)
        print("SUBMITTING", flush=True)
        env.execute("until ctrl-c")
        """,
    )
    try:
        assert attached.stdout.readline().startswith("SUBMITTING")
        assert _eventually(lambda: bool(_leased(session)), 60), "the job did not start"
        attached.send_signal(signal.SIGINT)
        _, stderr = attached.communicate(timeout=60)
        assert attached.returncode != 0 and "KeyboardInterrupt" in stderr
        assert _eventually(lambda: _leased(session) == {}, 60), "Ctrl-C did not cancel the job"
    finally:
        attached.kill()
        _cancel_left("until ctrl-c")  # after a failure here: not a job the next tests find running


@pytest.mark.timeout(300)
def test_ctrl_c_while_the_dispatcher_starts_the_job_cancels_it_once_started(session, tmp_path):
    """The driver is interrupted before the Dispatcher answered its submission (the job being
    built from its JobGraph): the job it never learned the id of is cancelled once started."""
    assert _eventually(lambda: _leased(session) == {}, 60)
    started, go = tmp_path / "deploying", tmp_path / "go"
    driver = _start_driver(
        tmp_path,
        f"""
        import os, time

        def _held(marker, gate):  # unpickled where the job starts: holds it until ``gate``
            open(marker, "w").close()
            deadline = time.monotonic() + 120
            while not os.path.exists(gate) and time.monotonic() < deadline:
                time.sleep(0.05)
            return lambda x: x

        class Held:
            def __reduce__(self):
                return _held, ({str(started)!r}, {str(go)!r})

        held = Held()
        env.from_sequence(1, 10**12).map(lambda x: held(x)).add_sink(lambda x: None)
        env.execute("interrupted while starting")
        """,
    )
    try:
        assert _eventually(started.exists, 120), driver.stderr.read()[-3000:] if driver.poll() is not None else ""
        driver.send_signal(signal.SIGINT)
        _, stderr = driver.communicate(timeout=60)
        assert driver.returncode != 0 and "KeyboardInterrupt" in stderr
        go.touch()

        def statuses() -> list:
            status = json.loads(_cli("status", "--json", address=_address()).stdout)
            return [job["status"] for job in status["submittedJobs"] if job["jobName"] == "interrupted while starting"]

        assert _eventually(lambda: statuses() == ["CANCELED"], 60), statuses()
        assert _eventually(lambda: _leased(session) == {}, 60), "the cancelled job kept its executors"
    finally:
        go.touch()
        driver.kill()
        _cancel_left("interrupted while starting")


@pytest.mark.timeout(400)
def test_a_job_submitted_over_http_survives_a_killed_executor_exactly_once(session, tmp_path):
    import ray

    from raylink.bench.failover import committed_lines
    from raylink.runtime.client.rest_cluster_client import RestClusterClient
    from raylink.runtime.client.rest_endpoint import RestEndpoint, _endpoint_file
    from raylink.tests.test_runtime_checkpointing import N, expected_counts

    out = tmp_path / "out"
    driver = _start_driver(
        tmp_path,
        textwrap.dedent(f"""
        from raylink.tests.test_runtime_checkpointing import build, checkpointing_env
        from pathlib import Path

        env = checkpointing_env("ray", 2, Path({str(tmp_path)!r}))
        build(env, Path({str(out)!r}), n={2 * N})
        client = env.execute_async()
        print("JOB", client.get_job_id(), flush=True)
        client.get_job_execution_result(300)
        out["status"] = str(client.get_job_status())
        out["restarts"] = client.get_checkpoint_stats()["numRestarts"]
        out["ray_connected"] = "ray" in sys.modules and sys.modules["ray"].is_initialized()
        """)
        + REPORT,
    )
    try:
        line = driver.stdout.readline()
        assert line.startswith("JOB "), driver.stderr.read()[-3000:]
        job_id = line.split()[1]
        recorded = json.loads(Path(_endpoint_file(_address())).read_text())
        rest = RestClusterClient(RestEndpoint(recorded["url"], recorded["token"]))

        def checkpointed() -> bool:
            stats = rest.request("GET", f"/v1/jobs/{job_id}/metrics/checkpoints")[1]
            return stats.get("numberOfCompletedCheckpoints", 0) > 0

        assert _eventually(checkpointed, 120), "no checkpoint completed"
        pids = [where["pid"] for where in ray.get(session.leased_locations.remote(job_id))]
        assert pids, "the job holds no executors"
        os.kill(pids[0], signal.SIGKILL)
        stdout, stderr = driver.communicate(timeout=300)
        assert driver.returncode == 0, stderr[-4000:]
    finally:
        driver.kill()
    report = _report(stdout)
    assert report["status"] == "FINISHED" and report["restarts"] >= 1, report
    assert report["ray_connected"] is False  # the test module it imports imports Ray, unused
    assert committed_lines(out) == expected_counts(2 * N)
    assert _eventually(lambda: _leased(session) == {}, 60)


@pytest.mark.timeout(300)
def test_cluster_status_lists_submitted_jobs_and_cancel_ends_one(session, tmp_path):
    driver = _start_driver(
        tmp_path,
        """
        env.from_sequence(1, 10**12).map(lambda x: x).add_sink(lambda x: None)
        env.execute("endless")
        """,
    )
    try:

        def running() -> list:
            status = _cli("status", "--json", address=_address())
            assert status.returncode == 0, status.stderr
            return [j for j in json.loads(status.stdout)["submittedJobs"] if j["status"] == "RUNNING"]

        def endless() -> list:  # this test's job (a job another test left would be listed too)
            return [j for j in running() if j["jobName"] == "endless"]

        assert _eventually(lambda: bool(endless()), 120), "the job is not listed as running"
        (job,) = endless()
        cancelled = _cli("cancel", job["jobId"], address=_address())
        assert cancelled.returncode == 0, cancelled.stderr
        _, stderr = driver.communicate(timeout=60)
        assert driver.returncode != 0 and "Job 'endless' canceled" in stderr, stderr[-3000:]
    finally:
        driver.kill()
    unknown = _cli("cancel", "0123", address=_address())
    assert unknown.returncode == 1 and "no job 0123" in unknown.stderr
    assert _eventually(lambda: _leased(session) == {}, 60)


SAVEPOINT_PROGRAM = """
import time
from raylink.api import Encoder, FileSink, OutputFileConfig, RollingPolicy

KEYS, N = 7, 16000
conf.set_string("execution.checkpointing.interval", "300 ms")
conf.set_string("execution.checkpointing.dir", "checkpoints")
conf.set_string("state.savepoints.dir", "savepoints")  # where the Dispatcher may write savepoints
env = StreamExecutionEnvironment.get_execution_environment(conf)
env.set_parallelism(int(conf.get_string("test.parallelism", "2")))

def paced(v):
    if v % 2 == 0:
        time.sleep(0.001)  # the workload: the job runs for a few seconds
    return v

sink = (
    FileSink.for_row_format(conf.get_string("test.out", ""), Encoder.simple_string_encoder())
    .with_output_file_config(OutputFileConfig.builder().with_part_prefix("part").build())
    .with_rolling_policy(RollingPolicy.on_checkpoint_rolling_policy())
    .build()
)
(
    env.from_sequence(1, N).uid("numbers")
    .map(paced).uid("paced")
    .map(lambda v: (v % KEYS, 1)).uid("pairs")
    .key_by(lambda kv: kv[0])
    .reduce(lambda a, b: (a[0], a[1] + b[1])).uid("rolling-count")
    .map(lambda kv: f"{kv[0]},{kv[1]}").uid("format")
    .sink_to(sink).uid("files")
)
client = env.execute_async()
out["client"] = type(client).__name__
if conf.get_string("test.stop", ""):
    while client.get_job_status() != "RUNNING" or not client.get_checkpoint_stats()["numberOfCompletedCheckpoints"]:
        assert not client.wait(0.05), "the job ended before the stop"
    if conf.get_string("test.stop", "") == "announce":  # the test stops it with the CLI
        print("JOB " + client.get_job_id(), flush=True)
    else:
        out["savepoint"] = client.stop_with_savepoint(False, "savepoints").result(timeout=120)
client.wait(180)
out["status"] = str(client.get_job_status())
"""


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_stop_with_savepoint_over_http_then_raylink_run_from_it_at_another_parallelism(session, tmp_path):
    """A driver without Ray stops its job with a savepoint through the Dispatcher's HTTP API;
    ``raylink run --from-savepoint`` starts the program from it at p=3."""
    from raylink.bench.failover import committed_lines, reference

    first = _driver(tmp_path, SAVEPOINT_PROGRAM, "test.out=out-1", "test.stop=yes")
    assert first["client"] == "RestJobClient" and first["status"] == "FINISHED", first
    savepoint = first["savepoint"]
    assert savepoint.startswith(str(tmp_path / "savepoints" / "savepoint-")), first
    stopped = committed_lines(str(tmp_path / "out-1"))  # relative paths are the driver's folder's
    assert 0 < sum(stopped.values()) < 16000, "the first run was not stopped part-way"
    (tmp_path / "job.py").write_text(PRELUDE + textwrap.dedent(SAVEPOINT_PROGRAM) + REPORT)
    run = [sys.executable, "-m", "raylink", "run", "--from-savepoint", savepoint, "--progress", "off"]
    ran = subprocess.run(
        [*run, "job.py", "test.out=out-2", "test.parallelism=3"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=dict(os.environ, RAY_ADDRESS=_address()),
        timeout=300,
    )
    assert ran.returncode == 0, ran.stderr[-4000:]
    assert _report(ran.stdout)["status"] == "FINISHED"
    assert stopped + committed_lines(str(tmp_path / "out-2")) == reference(16000)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_the_cli_stops_a_job_submitted_over_http_with_a_savepoint(session, tmp_path):
    from raylink.bench.failover import committed_lines

    driver = _start_driver(tmp_path, SAVEPOINT_PROGRAM + REPORT, "test.out=out-1", "test.stop=announce")
    try:
        line = driver.stdout.readline()  # blocks until the job announced itself (or the driver ended)
        assert line.startswith("JOB "), line + driver.stderr.read()[-4000:]
        env = dict(os.environ, RAY_ADDRESS=_address())
        command = [sys.executable, "-m", "raylink", "stop", line.split()[1], "--savepoint-path", "savepoints"]
        stopped = subprocess.run(command, capture_output=True, text=True, cwd=tmp_path, env=env, timeout=200)
        assert stopped.returncode == 0, stopped.stderr[-4000:]
        savepoint = stopped.stdout.strip().splitlines()[-1]
        stdout, stderr = driver.communicate(timeout=120)
    finally:
        driver.kill()
    assert savepoint.startswith(str(tmp_path / "savepoints" / "savepoint-")), stopped.stdout
    assert os.path.isfile(os.path.join(savepoint, "_metadata"))
    assert _report(stdout)["status"] == "FINISHED", stderr[-4000:]
    assert 0 < sum(committed_lines(str(tmp_path / "out-1")).values()) < 16000
    unknown = subprocess.run(
        [sys.executable, "-m", "raylink", "savepoint", "0123", "savepoints"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=120,
    )
    assert unknown.returncode != 0 and "no job 0123" in unknown.stderr
