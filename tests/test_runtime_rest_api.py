"""Flink's REST API on the per-job driver and on the session cluster's Dispatcher, checked
field by field against the JobClient's own figures for the same job.

The per-job jobs emit a known number of records and then idle until cancelled, so their
counters stop moving and the REST answer and the JobClient's metrics can be compared
exactly; the session cluster keeps an ended job, whose figures are final.
"""

from __future__ import annotations

import json
import socket
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any, Optional

import pytest

from raylink.api.functions import SinkFunction, SourceFunction
from raylink.runtime.client.rest_tokens import rest_auth_headers
from raylink.tests.runtime_jobs import make_env, running_session, wait_for

N = 500


class FiniteThenIdleSource(SourceFunction):
    """``0 .. n-1``, then idle until cancelled (the job keeps running with still counters)."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.running = True

    def run(self, ctx: Any) -> None:
        for i in range(self.n):
            ctx.collect(i)
        while self.running:
            time.sleep(0.02)

    def cancel(self) -> None:
        self.running = False


class DiscardingSink(SinkFunction):
    def invoke(self, value: Any, context: Any = None) -> None:
        pass


def http(
    url: str, method: str = "GET", headers: Optional[dict] = None, body: Optional[bytes] = None, auth: bool = True
) -> tuple:
    """(status, parsed JSON body or text, response headers) of one request; ``auth``: with the
    server's token, found as a client finds it (the per-user runtime folder), unless given."""
    headers = dict(headers or {})
    if auth and "Authorization" not in headers:
        headers.update(rest_auth_headers(url))
    request = urllib.request.Request(url, method=method, headers=headers, data=body)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            status, text, got = response.status, response.read().decode(), response.headers
    except urllib.error.HTTPError as exc:
        status, text, got = exc.code, exc.read().decode(), exc.headers
    try:
        return status, json.loads(text), got
    except ValueError:
        return status, text, got


def get(base: str, path: str) -> Any:
    status, body, _ = http(base + path)
    assert status == 200, (path, status, body)
    return body


def idle_job(parallelism: int = 2, config: Optional[dict] = None, name: str = "rest job") -> Any:
    env = make_env("ray", parallelism, config)
    (
        env.add_source(FiniteThenIdleSource(N), "Numbers")
        .set_parallelism(1)
        .rebalance()
        .map(lambda x: x * 2)
        .name("Double")
        .key_by(lambda x: x % 7)
        .map(lambda x: x + 1)
        .name("PlusOne")
        .add_sink(DiscardingSink())
        .name("Discard")
    )
    return env.execute_async(name)


def counters_settled(client: Any) -> bool:
    """Every record reached the sink and the final buffers were counted."""
    vertices = client.get_vertex_metrics()
    return any(name.startswith("PlusOne") or "Discard" in name for name in vertices) and all(
        agg["numRecordsIn"] == N for name, agg in vertices.items() if not name.startswith("Source")
    )


def assert_matches_client(base: str, client: Any) -> None:
    """Every figure of the REST answers equals the JobClient's for the same job."""
    jid = client.job_id
    metrics = client.get_metrics()
    by_name = client.get_vertex_metrics()
    details = get(base, f"/jobs/{jid}")
    assert details["jid"] == jid and details["name"] == client.job_name
    assert details["state"] == str(client.get_job_status())
    assert details["numRestarts"] == client.get_checkpoint_stats()["numRestarts"]
    assert sorted(v["name"] for v in details["vertices"]) == sorted(by_name)  # REST: job order
    overview = get(base, "/jobs/overview")
    assert [j for j in overview["jobs"] if j["jid"] == jid][0]["state"] == details["state"]
    plan = get(base, f"/jobs/{jid}/plan")["plan"]
    assert [n["id"] for n in plan["nodes"]] == [v["id"] for v in details["vertices"]]
    for vertex in details["vertices"]:
        agg = by_name[vertex["name"]]
        own = [m for m in metrics if m["vertex"] == vertex["id"]]
        assert vertex["parallelism"] == agg["subtasks"] == len(own)
        m = vertex["metrics"]
        assert m["read-records"] == agg["numRecordsIn"] == sum(x["numRecordsIn"] for x in own)
        assert m["write-records"] == agg["numRecordsOut"] == sum(x["numRecordsOut"] for x in own)
        # bytes: checkpoint barriers keep adding some while the job runs, so the REST figure
        # lies between the JobClient's readings before and after it (equal once the job ended)
        later = client.get_vertex_metrics()[vertex["name"]]
        assert agg["numBytesIn"] <= m["read-bytes"] <= later["numBytesIn"]
        assert agg["numBytesOut"] <= m["write-bytes"] <= later["numBytesOut"]
        assert vertex["tasks"]["RUNNING"] + vertex["tasks"]["FINISHED"] == vertex["parallelism"]
        one = get(base, f"/jobs/{jid}/vertices/{vertex['id']}")
        assert one["name"] == vertex["name"] and len(one["subtasks"]) == vertex["parallelism"]
        per_subtask = {x["subtask"]: x for x in own}
        for sub in one["subtasks"]:
            assert sub["metrics"]["read-records"] == per_subtask[sub["subtask"]]["numRecordsIn"]
            assert sub["metrics"]["write-records"] == per_subtask[sub["subtask"]]["numRecordsOut"]
        pressure = get(base, f"/jobs/{jid}/vertices/{vertex['id']}/backpressure")
        assert pressure["status"] == "ok"
        assert [s["subtask"] for s in pressure["subtasks"]] == list(range(vertex["parallelism"]))
        assert pressure["backpressure-level"] == agg["backPressureStatus"].lower()  # idle job: OK on both
        summed = get(base, f"/jobs/{jid}/vertices/{vertex['id']}/subtasks/metrics?get=numRecordsIn,numRecordsOut")
        assert {s["id"]: s["sum"] for s in summed} == {
            "numRecordsIn": agg["numRecordsIn"],
            "numRecordsOut": agg["numRecordsOut"],
        }
        marks = get(base, f"/jobs/{jid}/vertices/{vertex['id']}/watermarks")
        assert sorted(w["id"] for w in marks) == sorted(f"{i}.currentInputWatermark" for i in per_subtask)
    assert get(base, f"/jobs/{jid}/metrics?get=numRestarts") == [{"id": "numRestarts", "value": "0"}]
    assert get(base, f"/jobs/{jid}/exceptions") == {"exceptionHistory": {"entries": [], "truncated": False}}


def port_closed(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except OSError:
        return True
    return False


@pytest.mark.timeout(180)
def test_per_job_driver_rest_api_matches_the_job_client(ray_session, tmp_path):
    client = idle_job(
        config={
            "execution.checkpointing.interval": 200,
            "execution.checkpointing.dir": str(tmp_path / "checkpoints"),
            "state.savepoints.dir": str(tmp_path / "savepoints"),  # a REST savepoint target must lie under it
        }
    )
    try:
        endpoint = client.rest_endpoint
        base = endpoint.url
        assert endpoint.host == "127.0.0.1"
        assert wait_for(lambda: counters_settled(client), client, timeout=60)
        assert_matches_client(base, client)
        # checkpoints: the REST count lies between two readings of the JobClient's
        assert wait_for(lambda: client.get_checkpoint_stats()["numberOfCompletedCheckpoints"] >= 2, client, 60)
        before = client.get_checkpoint_stats()["numberOfCompletedCheckpoints"]
        checkpoints = get(base, f"/jobs/{client.job_id}/checkpoints")
        after = client.get_checkpoint_stats()["numberOfCompletedCheckpoints"]
        assert before <= checkpoints["counts"]["completed"] <= after
        assert checkpoints["latest"]["completed"]["status"] == "COMPLETED"
        completed = [h for h in checkpoints["history"] if h["status"] == "COMPLETED"]  # newer may be in progress
        assert completed[0]["id"] == checkpoints["latest"]["completed"]["id"]
        # a savepoint through POST /jobs/:jobid/savepoints, its outcome under the trigger id
        status, body, _ = http(
            base + f"/jobs/{client.job_id}/savepoints",
            "POST",
            {"Content-Type": "application/json"},
            json.dumps({"target-directory": str(tmp_path / "savepoints"), "cancel-job": False}).encode(),
        )
        assert status == 202, body
        progress = f"/jobs/{client.job_id}/savepoints/{body['request-id']}"
        assert wait_for(lambda: get(base, progress)["status"]["id"] == "COMPLETED", client, 60)
        location = get(base, progress)["operation"]["location"]
        assert Path(location).parent == tmp_path / "savepoints" and (Path(location) / "_metadata").is_file()
        overview = get(base, "/overview")
        assert overview["jobs-running"] == 1 and overview["taskmanagers"] >= 1
        assert get(base, "/config")["features"]["web-cancel"] is True
        status, _, _ = http(base + "/jobs/0123/plan")
        assert status == 404
        # a page of another site may not cancel through the user's browser
        status, _, _ = http(base + f"/jobs/{client.job_id}?mode=cancel", "PATCH", {"Origin": "http://evil.example"})
        assert status == 403 and str(client.get_job_status()) == "RUNNING"
        status, body, _ = http(base + f"/jobs/{client.job_id}?mode=cancel", "PATCH")
        assert status == 202, body
        assert client.wait(60)
        assert str(client.get_job_status()) == "CANCELED"
    finally:
        client.cancel()
        client.wait(60)
    assert port_closed(endpoint.port), "the REST endpoint outlived its job"
    leftover = [t for t in threading.enumerate() if t.name.startswith(("rest-endpoint", "rest-handler"))]
    for thread in leftover:
        thread.join(10)  # the handler pool's idle threads end just after its shutdown
    assert not [t for t in leftover if t.is_alive()], leftover


@pytest.mark.timeout(180)
def test_a_taken_rest_port_moves_to_the_next_and_disabled_serves_none(ray_session):
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen(1)
    taken = holder.getsockname()[1]
    try:
        client = idle_job(parallelism=1, config={"rest.port": taken}, name="moved")
        try:
            assert client.rest_endpoint.port > taken
            assert get(client.rest_endpoint.url, f"/jobs/{client.job_id}")["name"] == "moved"
        finally:
            client.cancel()
            assert client.wait(60)
        off = idle_job(parallelism=1, config={"raylink.rest.enabled": False}, name="no rest")
        try:
            assert off.rest_endpoint is None
        finally:
            off.cancel()
            assert off.wait(60)
    finally:
        holder.close()


class FailOnceMap:
    """Fails at record 100 of its first attempt (a marker file tells later attempts)."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __call__(self, value: int) -> int:
        import os

        if value == 100 and not os.path.exists(self.marker):
            open(self.marker, "w").close()
            raise ValueError("record 100 is bad")
        return value


@pytest.mark.timeout(180)
def test_exceptions_name_the_failing_operator(ray_session, tmp_path):
    env = make_env(
        "ray",
        1,
        {"restart-strategy.type": "fixed-delay", "restart-strategy.fixed-delay.attempts": 2},
    )
    env.add_source(FiniteThenIdleSource(N), "Numbers").map(FailOnceMap(str(tmp_path / "failed"))).name(
        "Checker"
    ).add_sink(DiscardingSink()).name("Discard")
    client = env.execute_async("failing once")
    try:
        base = client.rest_endpoint.url
        assert wait_for(lambda: client.num_restarts >= 1, client, 60)
        entries = get(base, f"/jobs/{client.job_id}/exceptions")["exceptionHistory"]["entries"]
        assert len(entries) == 1
        assert "Checker" in entries[0]["taskName"]
        assert entries[0]["exceptionName"]  # the task's error (OperatorError), its cause in the trace
        assert "ValueError: record 100 is bad" in entries[0]["stacktrace"]
        assert wait_for(lambda: get(base, f"/jobs/{client.job_id}")["numRestarts"] == 1, client, 30)
    finally:
        client.cancel()
        client.wait(60)


# -- the session cluster's Dispatcher ---------------------------------------------------------------
@pytest.fixture(scope="module")
def session(ray_session):
    yield from running_session()


def _endpoint() -> Any:
    import ray

    from raylink.runtime.client.rest_endpoint import RestEndpoint, _endpoint_file
    from raylink.runtime.runtime_dir import read_private_file

    recorded = json.loads(read_private_file(_endpoint_file(ray.get_runtime_context().gcs_address)))
    return RestEndpoint(recorded["url"], recorded["token"])


def _submit(endpoint: Any, env: Any, name: str) -> Any:
    from raylink.runtime.client.rest_cluster_client import RestJobClient

    return RestJobClient.submit(endpoint, env, name)


@pytest.mark.timeout(300)
def test_session_cluster_rest_api_matches_the_job_client(session):
    from raylink.actors.dispatcher import dashboard_url
    from raylink.runtime.rest.web_monitor_endpoint import rest_api_token

    endpoint = _endpoint()
    base = endpoint.url
    env = make_env("ray", 2)
    (
        env.from_collection(list(range(N)))
        .map(lambda x: x * 2)
        .name("Double")
        .key_by(lambda x: x % 7)
        .map(lambda x: x + 1)
        .name("PlusOne")
        .add_sink(DiscardingSink())
        .name("Discard")
    )
    client = _submit(endpoint, env, "session rest job")
    client.get_job_execution_result(120)
    assert str(client.get_job_status()) == "FINISHED"
    assert_matches_client(base, client)  # an ended job's figures are final
    details = get(base, f"/jobs/{client.job_id}")
    assert details["end-time"] >= details["start-time"] > 0
    assert all(v["metrics"]["read-records-complete"] for v in details["vertices"])
    assert sum(v["metrics"]["read-records"] for v in details["vertices"] if v["name"].startswith("PlusOne")) == N
    # the signed pickle API still answers its own clients, and refuses unsigned calls
    assert http(base + "/v1/overview", auth=False)[0] == 401

    # cancelling needs the REST token (derived from the session token, never that token itself)
    idle = make_env("ray", 1)
    idle.add_source(FiniteThenIdleSource(N), "Numbers").add_sink(DiscardingSink()).name("Discard")
    running = _submit(endpoint, idle, "session idle job")
    cancel = base + f"/jobs/{running.job_id}?mode=cancel"
    assert http(cancel, "PATCH", auth=False)[0] == 401
    assert http(cancel, "PATCH", {"Authorization": f"Bearer {endpoint.token}"})[0] == 401
    assert str(running.get_job_status()) == "RUNNING"
    # the printed address carries the REST token in its fragment (never sent); the page sets no cookie
    address = urllib.parse.urlsplit(dashboard_url(base, endpoint.token))
    assert address.fragment == f"token={rest_api_token(endpoint.token)}" and not address.query
    status, page, headers = http(base + "/", auth=False)
    assert status == 200 and "dashboard.js" in page and "Set-Cookie" not in headers
    status, body, _ = http(cancel, "PATCH", {"Authorization": f"Bearer {rest_api_token(endpoint.token)}"})
    assert status == 202, body
    with pytest.raises(Exception):
        running.get_job_execution_result(120)
    assert str(running.get_job_status()) == "CANCELED"
    assert get(base, f"/jobs/{running.job_id}")["state"] == "CANCELED"


@pytest.mark.timeout(120)
def test_a_local_job_serves_the_dashboard_only_when_asked():
    env = make_env("local", 2, {"raylink.rest.enabled": True})
    env.add_source(FiniteThenIdleSource(N), "Numbers").set_parallelism(1).rebalance().map(lambda x: x + 1).name(
        "PlusOne"
    ).add_sink(DiscardingSink()).name("Discard")
    client = env.execute_async("local rest job")
    try:
        assert client.rest_endpoint is not None
        assert wait_for(lambda: counters_settled(client), client, timeout=60)
        assert_matches_client(client.rest_endpoint.url, client)
        status, page, _ = http(client.rest_endpoint.url + "/")
        assert status == 200 and "dashboard.js" in page
    finally:
        client.cancel()
        assert client.wait(60)
    assert port_closed(client.rest_endpoint.port)
    plain = make_env("local", 1)
    plain.add_source(FiniteThenIdleSource(N), "Numbers").add_sink(DiscardingSink())
    other = plain.execute_async("local job")
    try:
        assert other.rest_endpoint is None  # Flink's MiniCluster: no web UI unless asked
    finally:
        other.cancel()
        assert other.wait(60)
