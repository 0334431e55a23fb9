"""The session Dispatcher's signed protocol cannot be replayed, and clients never re-send a call
that changes something.

A real ``POST /v1/jobs`` is captured on its way to a real session Dispatcher (a recording TCP
relay between client and server) and sent again byte for byte: 401, and the Dispatcher still
lists one job. Requests signed too long ago or dated ahead are refused with 401 naming why. The
client side: a server that drops the connection after reading a POST sees it exactly once; a
read is retried once, signed anew.
"""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import subprocess
import threading
import time
from typing import Any

import pytest

from raylink.api.functions import SinkFunction
from raylink.runtime.client.rest_cluster_client import RestClusterClient
from raylink.runtime.client.rest_endpoint import (
    AUTH_SCHEME,
    DIGEST_HEADER,
    NONCE_HEADER,
    TIMESTAMP_HEADER,
    ReplayGuard,
    RestEndpoint,
    body_digest,
    request_signature,
)
from raylink.tests.runtime_jobs import make_env, running_session

TOKEN = "t" * 43


class DiscardingSink(SinkFunction):
    def invoke(self, value: Any, context: Any = None) -> None:
        pass


# -- the nonce memory ------------------------------------------------------------------------------------
def test_the_guard_accepts_a_nonce_once_within_its_window_and_forgets_it_after():
    guard = ReplayGuard(300.0)
    now = 1_000_000.0
    stamp = str(int(now * 1000))
    assert guard.check("a", stamp, now) is None
    assert "replayed request" in guard.check("a", stamp, now + 1)
    assert "replayed request" in guard.check("a", stamp, now + 299)
    assert guard.check("b", stamp, now + 1) is None
    assert len(guard) == 2
    # past the window: the old request is stale (refused without being remembered), its nonce forgotten
    assert "stale request: signed 301 s ago" in guard.check("a", stamp, now + 301)
    assert guard.check("c", str(int((now + 301) * 1000)), now + 301) is None
    assert len(guard) == 1  # memory holds one window's requests only


def test_the_guard_refuses_stale_future_dated_and_undated_requests():
    guard = ReplayGuard(60.0)
    now = 2_000_000.0
    assert "stale request" in guard.check("x", str(int((now - 61) * 1000)), now)
    assert "future-dated request: signed 61 s ahead" in guard.check("y", str(int((now + 61) * 1000)), now)
    assert "no valid X-Raylink-Timestamp" in guard.check("z", "yesterday", now)
    assert len(guard) == 0
    assert guard.check("x", str(int((now - 59) * 1000)), now) is None
    with pytest.raises(ValueError, match="rest.signature.validity"):
        ReplayGuard(0)


def test_memory_stays_bounded_by_one_window_of_requests():
    guard = ReplayGuard(10.0)
    for second in range(100):
        for i in range(50):
            assert guard.check(f"{second}-{i}", str((1000 + second) * 1000), 1000.0 + second) is None
    # 50 requests a second, a 10 s window: at most 11 seconds' worth remembered
    assert len(guard) <= 50 * 11


# -- the client never re-sends a call that changes something ---------------------------------------------
class _DroppingServer:
    """Reads each request's head and body, then closes the connection without answering."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.requests: list[bytes] = []
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.sock.getsockname()[1]}"

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                data = b""
                while b"\r\n\r\n" not in data:
                    chunk = conn.recv(65536)
                    if not chunk:
                        break
                    data += chunk
                head, _, rest = data.partition(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":")[1])
                while len(rest) < length:
                    rest += conn.recv(65536)
                self.requests.append(head)

    def close(self) -> None:
        self.sock.close()


@pytest.mark.parametrize("method", ["POST", "PATCH", "DELETE"])
def test_a_call_that_changes_something_is_sent_once_after_a_reset(method):
    server = _DroppingServer()
    try:
        with pytest.raises((ConnectionError, OSError)):
            RestClusterClient(RestEndpoint(server.url, TOKEN)).request(method, "/v1/jobs", b"job")
    finally:
        server.close()
    assert len(server.requests) == 1, server.requests


def test_a_read_is_retried_once_with_a_new_nonce_after_a_reset():
    server = _DroppingServer()
    try:
        with pytest.raises((ConnectionError, OSError)):
            RestClusterClient(RestEndpoint(server.url, TOKEN)).request("GET", "/v1/overview")
    finally:
        server.close()
    assert len(server.requests) == 2
    nonces = [
        line.split(b":", 1)[1].strip()
        for head in server.requests
        for line in head.split(b"\r\n")
        if line.lower().startswith(NONCE_HEADER.lower().encode())
    ]
    assert len(nonces) == 2 and nonces[0] != nonces[1]


# -- against a real session Dispatcher -------------------------------------------------------------------
class _RecordingRelay:
    """A TCP relay to ``target``: forwards every connection both ways and records what the
    server received on it (one bytes object per connection). The ``Host`` header is rewritten to
    name the target (the Dispatcher refuses a foreign Host; the signature does not cover it)."""

    def __init__(self, host: str, port: int) -> None:
        self.target = (host, port)
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sent: list[bytearray] = []
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.sock.getsockname()[1]}"

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.sock.accept()
            except OSError:
                return
            upstream = socket.create_connection(self.target)
            record = bytearray()
            self.sent.append(record)
            threading.Thread(target=self._pipe, args=(client, upstream, record), daemon=True).start()
            threading.Thread(target=self._pipe, args=(upstream, client, None), daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket, record: Any) -> None:
        own = f"Host: 127.0.0.1:{self.sock.getsockname()[1]}\r\n".encode()
        target = f"Host: {self.target[0]}:{self.target[1]}\r\n".encode()
        try:
            while chunk := src.recv(65536):
                if record is not None:
                    chunk = chunk.replace(own, target)
                    record.extend(chunk)
                dst.sendall(chunk)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self) -> None:
        self.sock.close()


def _endpoint() -> RestEndpoint:
    import ray

    from raylink.runtime.client.rest_endpoint import _endpoint_file
    from raylink.runtime.runtime_dir import read_private_file

    recorded = json.loads(read_private_file(_endpoint_file(ray.get_runtime_context().gcs_address)))
    return RestEndpoint(recorded["url"], recorded["token"])


def _raw(url: str, request: bytes) -> tuple[int, dict]:
    """Send ``request`` as it is on a new connection; the answer's status and JSON body."""
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=60) as conn:
        conn.sendall(request)
        response = http.client.HTTPResponse(conn)
        response.begin()
        body = response.read()
    return response.status, json.loads(body or b"null")


def _signed_request(url: str, token: str, method: str, path: str, body: bytes, signed_at: float) -> bytes:
    nonce, timestamp, digest = f"nonce-{signed_at}", str(int(signed_at * 1000)), body_digest(body)
    mac = request_signature(token, nonce, method, path, digest, timestamp=timestamp)
    return (
        f"{method} {path} HTTP/1.1\r\nHost: {url.removeprefix('http://')}\r\nAuthorization: {AUTH_SCHEME} {mac}\r\n"
        f"{NONCE_HEADER}: {nonce}\r\n{TIMESTAMP_HEADER}: {timestamp}\r\n{DIGEST_HEADER}: {digest}\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    ).encode() + body


@pytest.fixture(scope="module")
def session(ray_session):
    yield from running_session(executors=1, pool_size=2)


@pytest.mark.timeout(300)
def test_a_captured_job_submission_replayed_is_refused_and_starts_no_second_job(session):
    import sys

    import cloudpickle

    from raylink.runtime.client.rest_cluster_client import RestJobClient

    cloudpickle.register_pickle_by_value(sys.modules[__name__])  # not importable in the Dispatcher
    endpoint = _endpoint()
    host, port = endpoint.url.removeprefix("http://").split(":")
    relay = _RecordingRelay(host, int(port))
    try:
        env = make_env("ray", 1)
        env.from_collection(list(range(100))).map(lambda x: x + 1).add_sink(DiscardingSink())
        client = RestJobClient.submit(RestEndpoint(relay.url, endpoint.token), env, "replayed job")
        client.get_job_execution_result(120)
    finally:
        relay.close()
    (captured,) = [bytes(r) for r in relay.sent if r.startswith(b"POST /v1/jobs?jobId=")]
    assert TIMESTAMP_HEADER.encode() in captured and len(captured) > 1000  # the signed JobGraph

    def jobs() -> list[dict]:
        return RestClusterClient(endpoint).request("GET", "/v1/overview")[1]["jobs"]

    assert [j["jobName"] for j in jobs()] == ["replayed job"]
    for _ in range(2):  # replayed twice, as the attacker did
        status, answer = _raw(endpoint.url, captured)
        assert status == 401 and answer == {
            "errors": ["replayed request: this nonce was already used within the validity window"]
        }
    assert [j["jobName"] for j in jobs()] == ["replayed job"]

    # stale and future-dated signatures (with the right token) are refused, naming why
    now = time.time()
    for signed_at, why in ((now - 600, "stale request"), (now + 600, "future-dated request")):
        status, answer = _raw(
            endpoint.url, _signed_request(endpoint.url, endpoint.token, "GET", "/v1/overview", b"", signed_at)
        )
        assert status == 401 and answer["errors"][0].startswith(why), answer
    # the control: the same request signed now is served
    status, answer = _raw(endpoint.url, _signed_request(endpoint.url, endpoint.token, "GET", "/v1/overview", b"", now))
    assert status == 200 and [j["jobName"] for j in answer["jobs"]] == ["replayed job"]


def _run_or_dump(command: list, cwd: Any, ray_address: str, timeout: float = 200) -> subprocess.CompletedProcess:
    """Run ``command`` (a Python started with ``-X faulthandler``); past ``timeout`` its threads'
    stacks are the failure's message."""
    env = dict(os.environ, RAY_ADDRESS=ray_address)
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=cwd, env=env)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGABRT)  # faulthandler prints every thread's stack
        out, err = proc.communicate()
        raise AssertionError(f"{command} hung; its stacks:\n{err[-8000:]}") from None
    return subprocess.CompletedProcess(command, proc.returncode, out, err)


@pytest.mark.timeout(400)
def test_the_dispatcher_and_the_cli_refuse_savepoint_targets_outside_the_roots(session, tmp_path):
    """``RestJobClient.trigger_savepoint`` / ``stop_with_savepoint`` and ``raylink savepoint``
    reach the Dispatcher, which refuses a target outside the job's roots or of a foreign scheme
    (400, the ``ValueError`` raised in the caller, the CLI's exit 1), writing nothing."""
    import sys

    import cloudpickle
    import ray

    from raylink.runtime.client.rest_cluster_client import RestJobClient
    from raylink.state.savepoint_targets import SavepointTargetError

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    env = make_env("ray", 1, {"state.savepoints.dir": str(tmp_path / "savepoints")})
    env.from_collection(list(range(10))).add_sink(DiscardingSink())
    client = RestJobClient.submit(_endpoint(), env, "savepoint targets")
    client.get_job_execution_result(120)
    for target in (str(tmp_path / "theirs"), "http://127.0.0.1:9/exfil"):
        for call in (client.trigger_savepoint, lambda t: client.stop_with_savepoint(False, t)):
            with pytest.raises(SavepointTargetError, match="rest.savepoint.allowed-") as caught:
                call(target).result(timeout=60)
            assert isinstance(caught.value, ValueError)
    command = [sys.executable, "-X", "faulthandler", "-m", "raylink", "savepoint", client.job_id]
    ran = _run_or_dump([*command, str(tmp_path / "theirs")], tmp_path, ray.get_runtime_context().gcs_address)
    assert ran.returncode == 1 and "is not under a configured savepoint root" in ran.stderr, ran.stderr[-2000:]
    assert not (tmp_path / "theirs").exists() and not (tmp_path / "savepoints").exists()
