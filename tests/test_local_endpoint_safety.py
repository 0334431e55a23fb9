"""Local endpoints another user on the machine cannot hijack (issue 28, item 4).

Each attack is staged for real -- a folder chowned to another uid, group- or world-writable
folders, symbolic links planted where raylink keeps its files, fake Dispatchers on
127.0.0.1 that answer pickles which would create a marker folder if unpickled -- and each
must be refused with a clear error naming what is wrong, nothing written through a link and
nothing unpickled. The per-user runtime folder is the test's own (``XDG_RUNTIME_DIR`` or
the temp dir pointed at ``tmp_path``). No Ray is started.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import os
import pickle
import socket
import stat
import sys
import tempfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Iterator, Optional

import pytest

from raylink.api import Configuration, StreamExecutionEnvironment
from raylink.cli.cluster import open_ray_log
from raylink.cli.main import main as cli_main
from raylink.runtime.client.rest_cluster_client import RestClusterClient, RestJobClient, UnauthenticatedServerError
from raylink.runtime.client.rest_endpoint import (
    DIGEST_HEADER,
    EXCEPTION_CONTENT_TYPE,
    NONCE_HEADER,
    PICKLE_CONTENT_TYPE,
    SIGNATURE_HEADER,
    TIMESTAMP_HEADER,
    InsecureBindError,
    RestEndpoint,
    check_rest_bind_address,
    find_endpoint,
    remove_endpoint_file,
    request_signature,
    response_signature,
    write_endpoint_file,
)
from raylink.runtime.process_tuning import NodeCpuRegistry
from raylink.runtime.runtime_dir import UnsafePathError, base_dir, runtime_dir

pytestmark = pytest.mark.timeout(60)

GCS = "127.0.0.1:6379"
TOKEN = "the-session-token"
OTHER_UID = 12345


@pytest.fixture
def run_dir(tmp_path, monkeypatch) -> Path:
    """``XDG_RUNTIME_DIR`` for the test (mode 0700, as a login manager makes it); raylink's
    folder is ``<it>/raylink``."""
    run = tmp_path / "run"
    run.mkdir(mode=0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(run))
    monkeypatch.setenv("RAY_ADDRESS", GCS)
    return run


def _mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


# -- the users of the runtime folder: each refuses what the folder checks refuse ---------------------------
def _write_endpoint() -> None:
    write_endpoint_file(GCS, RestEndpoint("http://127.0.0.1:1", TOKEN))


def _read_endpoint() -> None:
    find_endpoint(Configuration())


def _pin_registry() -> None:
    NodeCpuRegistry().release()  # opens (and rewrites) the registry on every machine


def _ray_log() -> None:
    open_ray_log(4321).close()


USERS = pytest.mark.parametrize(
    "use",
    [_write_endpoint, _read_endpoint, _pin_registry, _ray_log],
    ids=["endpoint-write", "endpoint-read", "pinned-cpus", "ray-log"],
)


def test_the_runtime_folder_is_private_and_each_user_of_it_works(run_dir):
    assert base_dir() == str(run_dir / "raylink")
    path = write_endpoint_file(GCS, RestEndpoint("http://127.0.0.1:1", TOKEN))
    assert path == str(run_dir / "raylink" / "sessions" / "gcs-6379.json")
    assert _mode(run_dir / "raylink") == 0o700 and _mode(run_dir / "raylink" / "sessions") == 0o700
    assert _mode(Path(path)) == 0o600
    assert json.loads(Path(path).read_text()) == {"gcsAddress": GCS, "url": "http://127.0.0.1:1", "token": TOKEN}
    assert os.listdir(run_dir / "raylink" / "sessions") == ["gcs-6379.json"]  # no temp file left
    assert find_endpoint(Configuration()) == RestEndpoint("http://127.0.0.1:1", TOKEN)
    remove_endpoint_file(GCS)
    assert find_endpoint(Configuration()) is None
    _pin_registry()
    assert _mode(run_dir / "raylink" / "pinned-cpus.json") == 0o600
    with open_ray_log(4321) as log:
        log.write("started\n")
    assert (run_dir / "raylink" / "logs" / "cluster-ray-4321.log").read_text() == "started\n"
    assert _mode(run_dir / "raylink" / "logs" / "cluster-ray-4321.log") == 0o600


def test_without_xdg_runtime_dir_the_folder_is_per_user_and_host_under_a_private_home(tmp_path, monkeypatch):
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    home = tmp_path / "home"
    home.mkdir(mode=0o755)
    monkeypatch.setenv("HOME", str(home))
    (home / ".cache").mkdir(mode=0o755)  # as tools make it: kept as it is
    assert runtime_dir("sessions") == str(home / ".cache" / "raylink" / socket.gethostname() / "sessions")
    assert _mode(home / ".cache") == 0o755 and _mode(home / ".cache" / "raylink") == 0o700
    assert _mode(home / ".cache" / "raylink" / socket.gethostname()) == 0o700
    # a home others may write (or of another owner) is no private place: the temp dir then
    home.chmod(0o777)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    assert base_dir() == str(tmp_path / f"raylink-{os.getuid()}")


def test_without_xdg_runtime_dir_nor_home_the_folder_is_per_uid_under_the_temp_dir(tmp_path, monkeypatch):
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "no-such-home"))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    assert runtime_dir("sessions") == str(tmp_path / f"raylink-{os.getuid()}" / "sessions")
    assert _mode(tmp_path / f"raylink-{os.getuid()}") == 0o700
    os.chown(tmp_path / f"raylink-{os.getuid()}", OTHER_UID, OTHER_UID)  # planted by another user
    with pytest.raises(UnsafePathError) as caught:
        runtime_dir("sessions")
    assert str(caught.value).startswith(
        f"refusing to use {tmp_path / f'raylink-{os.getuid()}'}: it is owned by uid {OTHER_UID}, "
        f"not by you (uid {os.getuid()})"
    )


@USERS
def test_a_folder_owned_by_another_user_is_refused(run_dir, use):
    folder = run_dir / "raylink"
    folder.mkdir(mode=0o700)
    os.chown(folder, OTHER_UID, OTHER_UID)
    with pytest.raises(UnsafePathError) as caught:
        use()
    assert caught.value.path == str(folder)
    assert caught.value.problem == f"it is owned by uid {OTHER_UID}, not by you (uid {os.getuid()})"
    assert os.listdir(folder) == []


def test_the_owner_is_compared_with_os_getuid(run_dir, monkeypatch):
    runtime_dir("sessions")  # made by this process's user
    real = os.getuid()
    monkeypatch.setattr(os, "getuid", lambda: real + 4242)
    with pytest.raises(UnsafePathError, match=rf"it is owned by uid {real}, not by you \(uid {real + 4242}\)"):
        _write_endpoint()


@pytest.mark.parametrize("mode", [0o770, 0o707, 0o777, 0o720], ids=oct)
@USERS
def test_a_folder_others_may_write_is_refused(run_dir, use, mode):
    folder = run_dir / "raylink"
    folder.mkdir()
    os.chmod(folder, mode)
    with pytest.raises(UnsafePathError) as caught:
        use()
    assert caught.value.path == str(folder)
    assert caught.value.problem == f"it is writable by its group or by others (mode {oct(mode)})"
    assert "Remove it (or set $XDG_RUNTIME_DIR" in str(caught.value)
    assert os.listdir(folder) == []


def test_a_group_writable_subfolder_is_refused_too(run_dir):
    runtime_dir("sessions")
    os.chmod(run_dir / "raylink" / "sessions", 0o770)
    with pytest.raises(UnsafePathError, match=r"sessions: it is writable by its group or by others \(mode 0o770\)"):
        _read_endpoint()


def test_a_folder_of_this_user_others_may_only_read_is_narrowed_to_0700(run_dir):
    folder = run_dir / "raylink"
    folder.mkdir()
    os.chmod(folder, 0o755)  # as an older raylink made raylink-<uid>
    _write_endpoint()
    assert _mode(folder) == 0o700


@USERS
def test_a_symlinked_folder_is_refused(run_dir, tmp_path, use):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)  # even a folder of this user: the link could be swapped
    (run_dir / "raylink").symlink_to(elsewhere)
    with pytest.raises(UnsafePathError) as caught:
        use()
    assert caught.value.problem == "it is a symbolic link, not a folder"
    assert os.listdir(elsewhere) == []


def test_a_temp_dir_others_may_write_without_the_sticky_bit_is_refused(tmp_path, monkeypatch):
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "no-such-home"))
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)
    monkeypatch.setattr(tempfile, "tempdir", str(shared))
    with pytest.raises(UnsafePathError, match="others may write it and it has no sticky bit"):
        runtime_dir()
    os.chmod(shared, 0o1777)  # as /tmp
    assert runtime_dir() == str(shared / f"raylink-{os.getuid()}")


# -- planted files ------------------------------------------------------------------------------------------
def _victim(tmp_path: Path) -> Path:
    victim = tmp_path / "victim.txt"
    victim.write_text("the victim's own file\n")
    return victim


def test_a_symlinked_endpoint_file_is_not_read_and_not_written_through(run_dir, tmp_path):
    planted = tmp_path / "attacker.json"
    planted.write_text(json.dumps({"gcsAddress": GCS, "url": "http://127.0.0.1:2", "token": "theirs"}))
    link = Path(runtime_dir("sessions")) / "gcs-6379.json"
    link.symlink_to(planted)
    with pytest.raises(UnsafePathError) as caught:
        find_endpoint(Configuration())
    assert (caught.value.path, caught.value.problem) == (str(link), "it is a symbolic link")
    victim = _victim(tmp_path)
    (link.parent / "gcs-6379.json.tmp").symlink_to(victim)  # the temp name an older raylink wrote through
    write_endpoint_file(GCS, RestEndpoint("http://127.0.0.1:1", TOKEN))  # replaces the link itself
    assert not link.is_symlink() and json.loads(link.read_text())["token"] == TOKEN
    assert victim.read_text() == "the victim's own file\n"
    assert json.loads(planted.read_text())["token"] == "theirs"


@pytest.mark.parametrize(
    "attack, problem",
    [
        ("chown", f"it is owned by uid {OTHER_UID}, not by you (uid {os.getuid()})"),
        ("chmod", "it is writable by its group or by others (mode 0o660)"),
        ("fifo", "it is not a regular file"),
    ],
)
def test_an_endpoint_file_another_user_could_change_is_refused(run_dir, attack, problem):
    path = Path(write_endpoint_file(GCS, RestEndpoint("http://127.0.0.1:1", TOKEN)))
    if attack == "chown":
        os.chown(path, OTHER_UID, OTHER_UID)
    elif attack == "chmod":
        os.chmod(path, 0o660)
    else:  # a FIFO: opening it must neither hang nor read what a writer feeds it
        path.unlink()
        os.mkfifo(path, 0o600)
    with pytest.raises(UnsafePathError) as caught:
        find_endpoint(Configuration())
    assert (caught.value.path, caught.value.problem) == (str(path), problem)


def test_a_symlinked_pinned_cpus_registry_is_refused(run_dir, tmp_path):
    victim = _victim(tmp_path)
    (Path(runtime_dir()) / "pinned-cpus.json").symlink_to(victim)
    with pytest.raises(UnsafePathError, match=r"pinned-cpus.json: it is a symbolic link"):
        NodeCpuRegistry().release()
    if hasattr(os, "sched_getaffinity") and len(os.sched_getaffinity(0)) >= 2:
        with pytest.raises(UnsafePathError, match=r"pinned-cpus.json: it is a symbolic link"):
            NodeCpuRegistry().claim()
    assert victim.read_text() == "the victim's own file\n"


def test_a_symlinked_cluster_log_is_refused(run_dir, tmp_path):
    victim = _victim(tmp_path)
    (Path(runtime_dir("logs")) / "cluster-ray-4321.log").symlink_to(victim)
    with pytest.raises(UnsafePathError, match=r"cluster-ray-4321.log: it is a symbolic link"):
        open_ray_log(4321)
    assert victim.read_text() == "the victim's own file\n"


# -- servers that are not the session's Dispatcher ----------------------------------------------------------
class _MakesMarker:
    """Unpickling this creates the folder ``path``: the evidence that a pickle was loaded."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self):
        return (os.mkdir, (self.path,))


class _FakeDispatcher:
    """An HTTP server on 127.0.0.1 answering every request with ``body`` (``content_type``),
    signed with ``key`` (None: unsigned; ``"stolen"``: with whatever the request's
    Authorization carried, as a server would that tried to use the client's credentials);
    it records every request it got."""

    def __init__(self, body: bytes, content_type: str = PICKLE_CONTENT_TYPE, key: Optional[str] = None) -> None:
        self.requests: list[tuple[str, str, dict, bytes]] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                self._answer(b"")

            def do_POST(self) -> None:
                self._answer(self.rfile.read(int(self.headers.get("Content-Length", "0"))))

            def _answer(self, received: bytes) -> None:
                fake.requests.append((self.command, self.path, dict(self.headers), received))
                self.send_response(200)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                signing_key = self.headers.get("Authorization", "") if key == "stolen" else key
                if signing_key is not None:
                    nonce = self.headers.get(NONCE_HEADER, "")
                    self.send_header(SIGNATURE_HEADER, response_signature(signing_key, nonce, 200, content_type, body))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> "_FakeDispatcher":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(10)


@pytest.fixture
def marker(tmp_path) -> Iterator[Path]:
    path = tmp_path / "unpickled"
    yield path
    assert not path.exists(), "a pickle from an unauthenticated server was loaded"


@pytest.mark.parametrize("content_type", [PICKLE_CONTENT_TYPE, EXCEPTION_CONTENT_TYPE])
@pytest.mark.parametrize(
    "key, how",
    [
        (None, "an unsigned answer"),
        ("some-other-token", "an answer not signed with this session's token"),
        ("stolen", "an answer not signed with this session's token"),
    ],
    ids=["unsigned", "wrong-token", "signed-with-what-the-client-sent"],
)
def test_a_server_without_the_token_is_refused_before_anything_is_unpickled(marker, key, how, content_type):
    evil = pickle.dumps(_MakesMarker(str(marker)))
    with _FakeDispatcher(evil, content_type, key) as fake:
        client = RestClusterClient(RestEndpoint(fake.url, TOKEN))
        with pytest.raises(UnauthenticatedServerError) as caught:
            client.request("GET", "/v1/jobs/0123/execution-result", raise_remote=False)
    assert str(caught.value) == (
        f"GET {fake.url}/v1/jobs/0123/execution-result: HTTP 200, {how}: the server did not prove it is this "
        "session's Dispatcher, so nothing of its answer was read (a stale endpoint file whose port another "
        "program took, or a wrong token)"
    )
    # the token itself never went over the wire (a server cannot learn it and sign with it)
    ((method, path, headers, _),) = fake.requests
    assert (method, path) == ("GET", "/v1/jobs/0123/execution-result")
    assert TOKEN not in json.dumps(headers)


def test_a_job_is_not_sent_to_a_server_that_cannot_prove_the_token(marker):
    env = StreamExecutionEnvironment.get_execution_environment(Configuration().set_string("execution.target", "local"))
    env.from_collection([1, 2, 3]).map(lambda x: x + 1).print()
    with _FakeDispatcher(pickle.dumps(_MakesMarker(str(marker)))) as fake:
        with pytest.raises(UnauthenticatedServerError, match="did not prove it is this session's Dispatcher"):
            RestJobClient.submit(RestEndpoint(fake.url, TOKEN), env, "secret job")
    assert [(m, p, body) for m, p, _, body in fake.requests] == [("GET", "/v1/overview", b"")]


def test_the_right_token_authenticates_both_ways(tmp_path):
    """The control: a server that checks the request's signature and signs with the token is
    believed, and what it sent is loaded."""
    answer = pickle.dumps({"jobId": "0123", "records": [1, 2, 3]})
    with _FakeDispatcher(answer, key=TOKEN) as fake:
        status, value = RestClusterClient(RestEndpoint(fake.url, TOKEN)).request("POST", "/v1/jobs?x=1", b"payload")
    assert (status, value) == (200, {"jobId": "0123", "records": [1, 2, 3]})
    ((method, path, headers, body),) = fake.requests
    scheme, mac = headers["Authorization"].split(" ")
    assert scheme == "Raylink-HMAC-SHA256" and len(headers[NONCE_HEADER]) >= 32
    assert headers[DIGEST_HEADER] == hashlib.sha256(b"payload").hexdigest()
    stamp = headers[TIMESTAMP_HEADER]
    assert mac == request_signature(
        TOKEN, headers[NONCE_HEADER], "POST", "/v1/jobs?x=1", headers[DIGEST_HEADER], timestamp=stamp
    )
    assert (method, path, body) == ("POST", "/v1/jobs?x=1", b"payload")
    # a new nonce per request: an answer cannot be replayed to another request
    with _FakeDispatcher(answer, key=TOKEN) as fake:
        client = RestClusterClient(RestEndpoint(fake.url, TOKEN))
        client.request("GET", "/v1/overview")
        client.request("GET", "/v1/overview")
    assert fake.requests[0][2][NONCE_HEADER] != fake.requests[1][2][NONCE_HEADER]


def test_a_raw_connection_sees_the_signature_cover_status_and_content_type(tmp_path):
    """A signature is bound to the answer's status and content type: the same body as another
    kind (JSON read as a pickle) does not verify."""
    nonce = "n" * 32
    body = b'{"ok": true}'
    good = response_signature(TOKEN, nonce, 200, "application/json", body)
    assert good != response_signature(TOKEN, nonce, 200, PICKLE_CONTENT_TYPE, body)
    assert good != response_signature(TOKEN, nonce, 500, "application/json", body)
    assert good != response_signature(TOKEN, "m" * 32, 200, "application/json", body)
    with _FakeDispatcher(body, "application/json", key=TOKEN) as fake:
        connection = http.client.HTTPConnection("127.0.0.1", fake.server.server_address[1], timeout=10)
        connection.request("GET", "/", headers={NONCE_HEADER: nonce})
        response = connection.getresponse()
        response.read()
        connection.close()
    assert response.getheader(SIGNATURE_HEADER) == good


# -- binding the Dispatcher beyond this machine ------------------------------------------------------------
def test_a_non_loopback_bind_address_needs_the_explicit_opt_in():
    for host in ("127.0.0.1", "127.0.0.2", "localhost", "::1"):
        check_rest_bind_address(host)
    with pytest.raises(InsecureBindError) as caught:
        check_rest_bind_address("0.0.0.0")
    assert str(caught.value).startswith(
        "the Dispatcher's REST endpoint would listen on '0.0.0.0', which is not a loopback address: it speaks "
        "pickle over plain HTTP without TLS"
    )
    assert "--allow-insecure-rest-bind" in str(caught.value)
    check_rest_bind_address("0.0.0.0", allow_insecure=True)


def test_cluster_start_refuses_a_public_bind_address_before_starting_anything(capsys):
    code = cli_main(["cluster", "start", "--rest-bind-address", "0.0.0.0"])
    out, err = capsys.readouterr()
    assert (code, out) == (2, "")
    assert err.startswith(
        "raylink cluster start: the Dispatcher's REST endpoint would listen on '0.0.0.0', which is not a "
        "loopback address"
    )
    assert "pass --allow-insecure-rest-bind" in err
    ray = sys.modules.get("ray")
    assert ray is None or not ray.is_initialized()


def test_start_session_refuses_a_public_bind_address():
    from raylink.actors.session_entrypoint import start_session

    with pytest.raises(InsecureBindError, match="allow_insecure_rest_bind=True in code"):
        start_session(rest_bind_address="0.0.0.0")
