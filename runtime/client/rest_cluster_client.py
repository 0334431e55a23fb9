"""Jobs submitted to a session cluster over HTTP, from a driver that never imports Ray.

Flink's ``RestClusterClient`` and the ``JobClient`` it hands out: the program's JobGraph
and configuration, pickled, go to the session cluster's Dispatcher
(:mod:`raylink.actors.dispatcher`), which runs the job's JobMaster next to the warm
TaskExecutors; the client then polls it for the job's status, collected records and
execution result. Starting a Ray driver (importing Ray and connecting to the GCS, about
1 s) is what this saves a short job.

**Discovery.** ``raylink cluster start`` writes the Dispatcher's URL and token to a file
readable by its user only (:func:`write_endpoint_file`), named by the Ray cluster's GCS
port, in the user's private runtime folder (:mod:`raylink.runtime.runtime_dir`: mode 0700,
owner and mode checked before use, files opened with ``O_NOFOLLOW`` and replaced
atomically; a folder or file another user could control raises ``UnsafePathError``). A
driver finds it for the cluster it would connect to: ``RAY_ADDRESS``, else the Ray running
on this machine (Ray's own ``ray_current_cluster`` file, as ``ray.init()`` finds it).
``RAY_ADDRESS=local``, a ``ray://`` address, a driver already connected to Ray,
``raylink.session.enabled=false`` or ``raylink.session.rest-submission=false`` skip it; so
does an endpoint that refuses the connection (a stale file): the job then runs as before,
with its JobMaster in the driver. Drivers on other machines connect through Ray.

**Authentication, both ways.** The token never crosses the wire. Every request carries a
fresh random nonce (``X-Raylink-Nonce``), its body's SHA-256 (``X-Raylink-Content-SHA256``)
and ``Authorization: Raylink-HMAC-SHA256 <mac>``, an HMAC-SHA256 under the token of the
nonce, method, path and body digest (:func:`request_signature`); the Dispatcher refuses
others with 401 before it reads their body. Every answer carries
``X-Raylink-Signature``, the HMAC of that nonce, the status, the content type and the body
(:func:`response_signature`); the client checks it (``hmac.compare_digest``) before it reads
a byte of the answer -- before any unpickling -- and raises
:class:`UnauthenticatedServerError` otherwise (a program that took a stopped session's port
cannot sign, and learns nothing it could sign with). The job's JobGraph is sent only after
an authenticated answer. The traffic itself is plain HTTP: the Dispatcher binds to a
loopback address unless asked explicitly (:func:`check_rest_bind_address`).

**User code.** Functions defined in the program's ``__main__`` travel by value (cloudpickle).
So do modules imported from the program's own directory: the Dispatcher and the pooled
TaskExecutors do not have it on their ``sys.path``. Relative local paths the job's
configuration names (the checkpoint directory, Python files) are made absolute here.

Thread-safety: a client's HTTP connections are per thread, so a job can be cancelled or
watched from one thread while another reads its records.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import http.client
import ipaddress
import json
import os
import secrets
import socket
import sys
import threading
import time
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Iterator, Optional
from urllib.parse import urlsplit

import cloudpickle

from raylink.api.job_status import JobStatus
from raylink.api.options import CheckpointingOptions, RaylinkOptions
from raylink.errors import RaylinkError
from raylink.runtime.job_result import (
    CloseableIterator,
    JobExecutionException,
    JobExecutionResult,
    collected_records,
)
from raylink.runtime.python_dependencies import FILE_DELIMITER, PYTHON_FILES, PythonDependencyInfo
from raylink.runtime.runtime_dir import read_private_file, remove_private_file, runtime_dir, write_private_file

PICKLE_CONTENT_TYPE = "application/x-raylink-pickle"
EXCEPTION_CONTENT_TYPE = "application/x-raylink-exception"
#: the longest a poll waits at the Dispatcher before answering "not yet"
MAX_POLL_S = 30.0
CONNECT_TIMEOUT_S = 5.0
#: the longest the Dispatcher may take to deploy a job (new executors, a runtime env to build)
SUBMIT_TIMEOUT_S = 600.0
#: the request's fresh random nonce, which the answer's signature covers
NONCE_HEADER = "X-Raylink-Nonce"
#: the SHA-256 of the request's body (:func:`body_digest`), which the request's signature covers
DIGEST_HEADER = "X-Raylink-Content-SHA256"
#: the answer's HMAC (:func:`response_signature`)
SIGNATURE_HEADER = "X-Raylink-Signature"
#: the scheme of the request's ``Authorization`` header (:func:`request_signature`)
AUTH_SCHEME = "Raylink-HMAC-SHA256"
#: the option of ``raylink cluster start`` that lets the Dispatcher listen beyond this machine
INSECURE_BIND_FLAG = "--allow-insecure-rest-bind"


class RestClusterError(RaylinkError, RuntimeError):
    """The Dispatcher answered with an error of its own (not the job's)."""


class UnauthenticatedServerError(RestClusterError):
    """The server at a session's endpoint did not prove that it holds the session's token (its
    answer is unsigned or wrongly signed); nothing of the answer was read."""


class InsecureBindError(RaylinkError, ValueError):
    """The Dispatcher was asked to listen on a non-loopback address without the explicit
    opt-in (:data:`INSECURE_BIND_FLAG`)."""


# -- the wire protocol's signatures (the client's and the Dispatcher's) --------------------------------
def _mac(token: str, *parts: bytes) -> str:
    return hmac.new(token.encode("utf-8"), b"\n".join(parts), hashlib.sha256).hexdigest()


def body_digest(body: bytes) -> str:
    """What a request's ``X-Raylink-Content-SHA256`` carries: the SHA-256 of its body (hex)."""
    return hashlib.sha256(body).hexdigest()


def request_signature(token: str, nonce: str, method: str, path: str, digest: str) -> str:
    """What a request's ``Authorization`` carries: the HMAC-SHA256 under ``token`` of its nonce,
    method, path (with the query) and body digest (:func:`body_digest`) -- checkable before
    the body is read, so a request without the token is refused before its body is taken."""
    return _mac(
        token,
        b"raylink-request",
        nonce.encode("utf-8", "surrogateescape"),
        method.encode("ascii", "replace"),
        path.encode("utf-8", "surrogateescape"),
        digest.encode("utf-8", "surrogateescape"),
    )


def response_signature(token: str, nonce: str, status: int, content_type: str, body: bytes) -> str:
    """What an answer's ``X-Raylink-Signature`` carries: the HMAC-SHA256 under ``token`` of the
    request's nonce, the answer's status, its ``Content-Type`` and its body."""
    return _mac(
        token,
        b"raylink-response",
        nonce.encode("utf-8", "surrogateescape"),
        str(status).encode("ascii"),
        content_type.encode("utf-8", "surrogateescape"),
        body,
    )


def signature_matches(expected: str, received: Optional[str]) -> bool:
    """``received`` (a header's text, maybe None or not ASCII) is ``expected``, compared in constant time."""
    if not received:
        return False
    return hmac.compare_digest(expected.encode("ascii"), received.encode("utf-8", "surrogateescape"))


def is_loopback(host: str) -> bool:
    """True when ``host`` (an address or a name) is this machine's loopback only."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, None)
    except OSError:
        return False
    return bool(infos) and all(ipaddress.ip_address(info[4][0]).is_loopback for info in infos)


def check_rest_bind_address(host: str, allow_insecure: bool = False) -> None:
    """Refuse a non-loopback bind address for the Dispatcher unless ``allow_insecure``
    (:data:`INSECURE_BIND_FLAG`): it speaks pickle over plain HTTP."""
    if allow_insecure or is_loopback(host):
        return
    raise InsecureBindError(
        f"the Dispatcher's REST endpoint would listen on {host!r}, which is not a loopback address: it speaks "
        f"pickle over plain HTTP without TLS, so anyone on the network could read the jobs, records and "
        f"results it exchanges and replay requests to it. Bind to 127.0.0.1 (the default), or pass "
        f"{INSECURE_BIND_FLAG} (allow_insecure_rest_bind=True in code) on a network you trust"
    )


@dataclass(frozen=True)
class RestEndpoint:
    """A session cluster's Dispatcher: its URL and bearer token."""

    url: str
    token: str


# -- discovery ----------------------------------------------------------------------------------------
def _system_temp_dir() -> str:
    """Where Ray keeps its temp files on this machine (Ray's own rule)."""
    return os.environ.get("RAY_TMPDIR") or os.environ.get("TMPDIR") or "/tmp"


def endpoint_dir() -> str:
    """The folder of this user's endpoint files, created and checked
    (:func:`raylink.runtime.runtime_dir.runtime_dir`; raises ``UnsafePathError``)."""
    return runtime_dir("sessions")


def _endpoint_file(gcs_address: str) -> str:
    return os.path.join(endpoint_dir(), f"gcs-{gcs_address.rpartition(':')[2]}.json")


def write_endpoint_file(gcs_address: str, endpoint: RestEndpoint) -> str:
    """Record the Dispatcher of the session on the Ray cluster at ``gcs_address`` (mode 0600,
    replaced atomically)."""
    path = _endpoint_file(gcs_address)
    recorded = {"gcsAddress": gcs_address, "url": endpoint.url, "token": endpoint.token}
    write_private_file(path, json.dumps(recorded).encode("utf-8"))
    return path


def remove_endpoint_file(gcs_address: str) -> None:
    remove_private_file(_endpoint_file(gcs_address))


def _ray_address() -> Optional[str]:
    """The GCS address ``ray.init()`` would connect to, without importing Ray (None: none, or
    one this client cannot reach over HTTP)."""
    address = os.environ.get("RAY_ADDRESS", "").strip()
    if address in ("", "auto"):
        try:
            with open(os.path.join(_system_temp_dir(), "ray", "ray_current_cluster"), encoding="utf-8") as fh:
                address = fh.read().strip()
        except OSError:
            return None
    if not address or address == "local" or "://" in address or ":" not in address:
        return None
    return address


def _same_host(host: str, gcs_host: str) -> bool:
    if host in (gcs_host, "localhost", socket.gethostname()) or host.startswith("127."):
        return True
    try:
        return socket.gethostbyname(host) == gcs_host
    except OSError:
        return False


def find_endpoint(configuration: Any) -> Optional[RestEndpoint]:
    """The Dispatcher a job of this driver should be submitted to, else None (see the module
    docstring for when)."""
    ray_module = sys.modules.get("ray")
    if ray_module is not None and getattr(ray_module, "is_initialized", lambda: False)():
        return None
    if not configuration.get(RaylinkOptions.SESSION_ENABLED) or not configuration.get(
        RaylinkOptions.SESSION_REST_SUBMISSION
    ):
        return None
    address = _ray_address()
    if address is None:
        return None
    try:  # an unsafe folder or file raises UnsafePathError (not an OSError)
        recorded = json.loads(read_private_file(_endpoint_file(address)))
    except (OSError, ValueError):
        return None
    if not _same_host(address.rpartition(":")[0], recorded["gcsAddress"].rpartition(":")[0]):
        return None
    return RestEndpoint(recorded["url"], recorded["token"])


# -- the HTTP client -----------------------------------------------------------------------------------
class RestClusterClient:
    """Requests to one Dispatcher; a keep-alive connection per thread."""

    def __init__(self, endpoint: RestEndpoint) -> None:
        self.endpoint = endpoint
        parts = urlsplit(endpoint.url)
        self._host, self._port = parts.hostname or "127.0.0.1", parts.port or 80
        self._local = threading.local()

    def _connection(self) -> http.client.HTTPConnection:
        connection = getattr(self._local, "connection", None)
        if connection is None:
            connection = http.client.HTTPConnection(self._host, self._port, timeout=CONNECT_TIMEOUT_S)
            self._local.connection = connection
        return connection

    def request(
        self, method: str, path: str, body: Optional[bytes] = None, wait_s: float = 0.0, raise_remote: bool = True
    ) -> tuple[int, Any]:
        """``(status, value)``: JSON decoded, pickles loaded -- once the answer's signature
        proved the server holds the session's token (else :class:`UnauthenticatedServerError`).
        An exception the Dispatcher sent is raised (with ``raise_remote=False`` returned as the
        value); ``wait_s``: how long the Dispatcher may take to answer."""
        token = self.endpoint.token
        nonce = secrets.token_urlsafe(24)
        digest = body_digest(body or b"")
        mac = request_signature(token, nonce, method, path, digest)
        headers = {"Authorization": f"{AUTH_SCHEME} {mac}", NONCE_HEADER: nonce, DIGEST_HEADER: digest}
        if body is not None:
            headers["Content-Type"] = PICKLE_CONTENT_TYPE
        for attempt in (0, 1):  # a kept-alive connection the server closed: once more on a new one
            connection = self._connection()
            connection.timeout = CONNECT_TIMEOUT_S + wait_s
            try:
                connection.request(method, path, body=body, headers=headers)
                if connection.sock is not None:
                    connection.sock.settimeout(CONNECT_TIMEOUT_S + wait_s + 30.0)
                response = connection.getresponse()
                data = response.read()
                break
            except (
                http.client.RemoteDisconnected,
                http.client.CannotSendRequest,
                BrokenPipeError,
                ConnectionResetError,
            ):
                connection.close()
                self._local.connection = None
                if attempt:
                    raise
        kind = response.getheader("Content-Type", "")
        received = response.getheader(SIGNATURE_HEADER)
        if not signature_matches(response_signature(token, nonce, response.status, kind, data), received):
            self.close()  # whoever answered: not this connection again
            how = "an unsigned answer" if not received else "an answer not signed with this session's token"
            raise UnauthenticatedServerError(
                f"{method} {self.endpoint.url}{path}: HTTP {response.status}, {how}: the server did not prove it "
                f"is this session's Dispatcher, so nothing of its answer was read (a stale endpoint file whose "
                f"port another program took, or a wrong token)"
            )
        if kind.startswith(EXCEPTION_CONTENT_TYPE):
            error = cloudpickle.loads(data)
            if raise_remote:
                raise error
            return response.status, error
        if kind.startswith(PICKLE_CONTENT_TYPE):
            return response.status, cloudpickle.loads(data)
        value = json.loads(data) if kind.startswith("application/json") and data else None
        if response.status >= 400:
            errors = "; ".join((value or {}).get("errors", [])) or data.decode(errors="replace")[:500]
            raise RestClusterError(f"{method} {self.endpoint.url}{path}: HTTP {response.status}: {errors}")
        return response.status, value

    def close(self) -> None:
        connection = getattr(self._local, "connection", None)
        if connection is not None:
            connection.close()
            self._local.connection = None


# -- submission ------------------------------------------------------------------------------------------
def _program_modules() -> list[ModuleType]:
    """Modules loaded from the program's own directory (not installed ones): they go by value."""
    main = sys.modules.get("__main__")
    main_file = getattr(main, "__file__", None)
    if not main_file:
        return []
    home = os.path.dirname(os.path.abspath(main_file)) + os.sep
    raylink_home = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    # the interpreter's own and installed code (a venv or pyenv may live under the program's folder)
    roots = [sys.prefix, sys.base_prefix, sys.exec_prefix, raylink_home]
    roots += [p for p in sys.path if "site-packages" in p or "dist-packages" in p]
    installed = tuple(os.path.abspath(root) + os.sep for root in roots if root)
    out = []
    for name, module in list(sys.modules.items()):
        path = getattr(module, "__file__", None)
        if name == "__main__" or not path:
            continue
        path = os.path.abspath(path)
        if path.startswith(home) and not path.startswith(installed):
            out.append(module)
    return out


@contextlib.contextmanager
def _by_value(modules: list[ModuleType]) -> Iterator[None]:
    """Pickle ``modules`` by value within the block (those the program registered stay so)."""
    registered = cloudpickle.list_registry_pickle_by_value()
    added = [m for m in modules if m.__name__ not in registered]
    for module in added:
        cloudpickle.register_pickle_by_value(module)
    try:
        yield
    finally:
        for module in added:
            with contextlib.suppress(ValueError):
                cloudpickle.unregister_pickle_by_value(module)


def _absolute_paths(configuration: Any) -> Any:
    """A copy of ``configuration`` whose relative local paths are absolute (the Dispatcher
    runs in another working directory)."""
    from raylink.runtime.job_master import DEFAULT_CHECKPOINTS_DIR

    conf = type(configuration)().add_all(configuration)
    key = CheckpointingOptions.CHECKPOINTS_DIRECTORY.key
    directory = conf.get_string(key, None)
    if conf.get(CheckpointingOptions.CHECKPOINTING_INTERVAL) and not directory:
        conf.set_string(key, os.path.abspath(DEFAULT_CHECKPOINTS_DIR))
    elif directory and "://" not in directory:
        conf.set_string(key, os.path.abspath(directory.removeprefix("file:")))
    files = PythonDependencyInfo.from_configuration(conf).files
    if files:
        conf.set_string(PYTHON_FILES, FILE_DELIMITER.join(os.path.abspath(f) for f in files))
    return conf


class RestJobClient:
    """Flink's ``JobClient`` of a job running on a session cluster's Dispatcher."""

    def __init__(self, cluster: RestClusterClient, job_id: str, job_name: str) -> None:
        self._cluster = cluster
        self.job_id = job_id
        self.job_name = job_name
        self._result: Optional[JobExecutionResult] = None
        self._failure: Optional[BaseException] = None
        self._final_status = JobStatus.FINISHED
        self._done = False

    @classmethod
    def submit(cls, endpoint: RestEndpoint, env: Any, job_name: Optional[str]) -> "RestJobClient":
        """Post the program's JobGraph to the Dispatcher; the job is running when this returns."""
        with _by_value(_program_modules()):  # the JobGraph holds its operators pickled
            job_graph = env.get_job_graph(job_name)
            body = cloudpickle.dumps({"job_graph": job_graph, "configuration": _absolute_paths(env.configuration)})
        cluster = RestClusterClient(endpoint)
        cluster.request("GET", "/v1/overview")  # the server proves it holds the token before it gets the job
        _, answer = cluster.request("POST", "/v1/jobs", body, wait_s=SUBMIT_TIMEOUT_S)
        return cls(cluster, answer["jobId"], answer["jobName"])

    def get_job_id(self) -> str:
        return self.job_id

    def get_job_status(self) -> JobStatus:
        if self._done:
            return self._final_status
        _, answer = self._cluster.request("GET", f"/v1/jobs/{self.job_id}")
        return JobStatus(answer["status"])

    def cancel(self) -> None:
        if not self._done:
            self._cluster.request("POST", f"/v1/jobs/{self.job_id}/cancel")

    def _poll_result(self, wait_s: float) -> bool:
        """Ask for the execution result, waiting up to ``wait_s`` at the Dispatcher; True once ended."""
        if self._done:
            return True
        status, value = self._cluster.request(
            "GET", f"/v1/jobs/{self.job_id}/execution-result?timeout={wait_s:.3f}", wait_s=wait_s, raise_remote=False
        )
        if status == 202:
            return False
        if isinstance(value, BaseException):  # the job's own exception (failed, cancelled)
            if isinstance(value, JobExecutionException) and value.__cause__ is None:
                value.__cause__ = value.cause  # what a pickle leaves out
            self._failure, self._done = value, True
            self._final_status = JobStatus(getattr(value, "status", JobStatus.FAILED))
            return True
        self._result, self._done = value, True
        return True

    def wait(self, timeout: Optional[float] = None) -> bool:
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            remaining = MAX_POLL_S if deadline is None else max(0.0, min(MAX_POLL_S, deadline - time.monotonic()))
            if self._poll_result(remaining):
                return True
            if deadline is not None and time.monotonic() >= deadline:
                return False

    def get_job_execution_result(self, timeout: Optional[float] = None) -> JobExecutionResult:
        if not self.wait(timeout):
            raise TimeoutError(f"job '{self.job_name}' did not finish within {timeout} s")
        if self._failure is not None:
            raise self._failure
        assert self._result is not None
        return self._result

    def fetch_collected(self, timeout: float = 0.5) -> Optional[list]:
        _, chunks = self._cluster.request(
            "GET", f"/v1/jobs/{self.job_id}/collected?timeout={timeout:.3f}", wait_s=timeout
        )
        return None if chunks is None else collected_records(chunks)

    def collect(self, limit: Optional[int] = None) -> CloseableIterator:
        return CloseableIterator(self, limit)

    def close(self) -> None:
        """Drop this thread's connection to the Dispatcher (the next call opens a new one)."""
        self._cluster.close()

    def get_metrics(self) -> list[dict]:
        return self._cluster.request("GET", f"/v1/jobs/{self.job_id}/metrics/subtasks")[1]

    def get_vertex_metrics(self) -> dict:
        return self._cluster.request("GET", f"/v1/jobs/{self.job_id}/metrics/vertices")[1]

    def get_checkpoint_stats(self) -> dict:
        return self._cluster.request("GET", f"/v1/jobs/{self.job_id}/metrics/checkpoints")[1]


__all__ = [
    "AUTH_SCHEME",
    "DIGEST_HEADER",
    "INSECURE_BIND_FLAG",
    "NONCE_HEADER",
    "SIGNATURE_HEADER",
    "InsecureBindError",
    "RestClusterClient",
    "RestClusterError",
    "RestEndpoint",
    "RestJobClient",
    "UnauthenticatedServerError",
    "body_digest",
    "check_rest_bind_address",
    "endpoint_dir",
    "find_endpoint",
    "is_loopback",
    "remove_endpoint_file",
    "request_signature",
    "response_signature",
    "signature_matches",
    "write_endpoint_file",
]
