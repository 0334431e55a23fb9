"""The ``metrics.port`` Prometheus exporter under the REST servers' rules (issue 43): without its
token 401, addressed by a foreign ``Host`` or from a foreign ``Origin`` 403 (DNS rebinding),
with the token (read from the file a Prometheus ``credentials_file`` names) the scrape parses
with prometheus_client's own parser and holds the running job's exact counts; another local
user (``nobody``, the suite runs as root) can neither read the token nor scrape; slow clients
are cut off and connections bounded; a bind beyond loopback needs TLS, and over TLS it serves
every interface with the same rules.
"""

from __future__ import annotations

import http.client
import json
import os
import socket
import ssl
import stat
import subprocess
from pathlib import Path
from typing import Optional

import pytest
from prometheus_client.parser import text_string_to_metric_families

from raylink.runtime.client.rest_tokens import find_rest_token
from raylink.runtime.metrics import MetricsHttpServer, metrics_token_file
from raylink.runtime.rest.rest_security import RestBindError, ServerLimits, server_ssl_context
from raylink.tests.runtime_jobs import make_env, wait_for
from raylink.tests.test_runtime_user_metrics import Discard, NumbersThenWait

pytestmark = pytest.mark.timeout(120)

N = 500


@pytest.fixture
def run_dir(tmp_path, monkeypatch) -> Path:
    run = tmp_path / "run"
    run.mkdir(mode=0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(run))
    return run


def get(port: int, path: str = "/metrics", headers: Optional[dict] = None) -> tuple[int, bytes]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        connection.putrequest("GET", path, skip_host="Host" in (headers or {}))
        for name, value in (headers or {}).items():
            connection.putheader(name, value)
        connection.endheaders()
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


def bearer(token: str) -> dict:
    return {"Authorization": f"Bearer {token}"}


def records_in(text: str, vertex_part: str) -> float:
    """``raylink_task_numRecordsIn`` summed over the subtasks of the vertex whose name holds ``vertex_part``."""
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "raylink_task_numRecordsIn" and vertex_part in sample.labels["vertex"]
    )


def test_a_running_jobs_exporter_needs_the_token_a_local_host_and_origin(run_dir):
    env = make_env("local", 2, {"metrics.port": 0})
    env.add_source(NumbersThenWait(N)).set_parallelism(1).rebalance().map(lambda x: x + 1).add_sink(Discard())
    client = env.execute_async("scraped")
    try:
        server = client.metrics_server
        port = server.port
        token_path = Path(metrics_token_file(port))
        # the file Prometheus reads: the token alone, readable by this user only
        assert token_path == Path(server.token_file) and token_path.parent.parent == run_dir / "raylink"
        assert stat.S_IMODE(token_path.stat().st_mode) == 0o600
        token = token_path.read_text()
        assert token and find_rest_token(server.url) == token
        local = f"127.0.0.1:{port}"
        refused = {
            "no token": get(port)[0],
            "a wrong token": get(port, headers=bearer(token[:-1] + ("A" if token[-1] != "A" else "B")))[0],
            "another path, no token": get(port, "/")[0],
            "rebinding Host": get(port, headers={**bearer(token), "Host": f"evil.example:{port}"})[0],
            "rebinding Host, no token": get(port, headers={"Host": f"evil.example:{port}"})[0],
            "foreign Origin": get(port, headers={**bearer(token), "Origin": f"http://evil.example:{port}"})[0],
            "Origin of another port": get(port, headers={**bearer(token), "Origin": "http://127.0.0.1:1"})[0],
        }
        assert refused == {
            "no token": 401,
            "a wrong token": 401,
            "another path, no token": 401,
            "rebinding Host": 403,
            "rebinding Host, no token": 403,
            "foreign Origin": 403,
            "Origin of another port": 403,
        }
        assert wait_for(
            lambda: records_in(get(port, headers=bearer(token))[1].decode(), "Map") == N, client, timeout=60
        )
        status, body = get(port, headers={**bearer(token), "Host": local, "Origin": f"http://{local}"})
        assert status == 200
        assert records_in(body.decode(), "Map") == N  # every input record once, counted from the input
        assert get(port, "/other", bearer(token))[0] == 404
    finally:
        client.cancel()
    assert client.wait(60)
    assert not token_path.exists() and find_rest_token(f"http://127.0.0.1:{port}") is None
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=5).close()


def test_another_local_user_can_neither_read_the_token_nor_scrape(run_dir):
    server = MetricsHttpServer(lambda: [{"vertex_name": "Secret operator", "numRecordsIn": 1}], "job", 0)
    try:
        read_end, write_end = os.pipe()
        child = os.fork()
        if child == 0:  # the attacker: another local user (nobody), same machine
            code = 1
            try:
                os.close(read_end)
                os.setgroups([])
                os.setgid(65534)
                os.setuid(65534)
                out: dict = {}
                try:
                    Path(server.token_file).read_text()
                    out["read"] = "read"
                except OSError as exc:
                    out["read"] = type(exc).__name__
                status, body = get(server.port)
                out["scrape"] = [status, b"Secret" in body]
                os.write(write_end, json.dumps(out).encode())
                code = 0
            finally:
                os._exit(code)
        os.close(write_end)
        with os.fdopen(read_end, "rb") as pipe:
            answer = pipe.read()
        assert os.waitpid(child, 0)[1] == 0
        assert json.loads(answer) == {"read": "PermissionError", "scrape": [401, False]}
    finally:
        server.close()


def test_slow_clients_are_cut_off_and_connections_bounded(run_dir):
    limits = ServerLimits(header_timeout_s=1.0, idle_timeout_s=1.5, max_connections=8)
    server = MetricsHttpServer(lambda: [{"vertex_name": "Map", "numRecordsIn": 7}], "job", 0, limits=limits)
    sockets = []
    try:
        for _ in range(40):  # half a request line each, never the end of the headers
            s = socket.create_connection(("127.0.0.1", server.port), timeout=10)
            s.sendall(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1:")
            sockets.append(s)
        status, body = get(server.port, headers=bearer(server.token))
        assert status == 200 and records_in(body.decode(), "Map") == 7
        assert server.guard.open_connections <= limits.max_connections
        slow = sockets[-1]
        slow.settimeout(10)
        try:  # the server closes it once its header time is up
            assert slow.recv(4096) == b""
        except ConnectionResetError:
            pass
    finally:
        for s in sockets:
            s.close()
        server.close()


def test_a_bind_beyond_loopback_needs_tls(run_dir):
    for host in ("0.0.0.0", "192.0.2.1"):
        with pytest.raises(RestBindError, match=r"metrics\.port .*security\.ssl\.rest\.enabled"):
            MetricsHttpServer(lambda: [], "job", 0, host)


def test_over_tls_it_serves_every_interface_with_the_token(run_dir, tmp_path):
    cert, key = tmp_path / "metrics.pem", tmp_path / "metrics.key"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=localhost",
         "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost", "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    supplier = lambda: [{"vertex_name": "Map", "numRecordsIn": 3}]  # noqa: E731
    server = MetricsHttpServer(supplier, "job", 0, "0.0.0.0", ssl_context=server_ssl_context(str(cert), str(key)))
    try:
        assert server.url.startswith("https://127.0.0.1:")
        trust = ssl.create_default_context(cafile=str(cert))

        def scrape(headers: dict) -> tuple[int, bytes]:
            connection = http.client.HTTPSConnection("127.0.0.1", server.port, timeout=10, context=trust)
            try:
                connection.request("GET", "/metrics", headers=headers)
                response = connection.getresponse()
                return response.status, response.read()
            finally:
                connection.close()

        status, body = scrape(bearer(server.token))
        assert status == 200 and records_in(body.decode(), "Map") == 3
        assert scrape({})[0] == 401
        assert scrape({**bearer(server.token), "Host": "evil.example"})[0] == 403
        with pytest.raises((http.client.HTTPException, OSError)):  # plain HTTP gets no answer
            get(server.port, headers=bearer(server.token))
    finally:
        server.close()
