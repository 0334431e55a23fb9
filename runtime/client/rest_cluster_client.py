"""Jobs submitted to a session cluster over HTTP, from a driver that never imports Ray.

Flink's ``RestClusterClient`` and the ``JobClient`` it hands out: the program's JobGraph
and configuration, pickled, go to the session cluster's Dispatcher
(:mod:`raylink.actors.dispatcher`), which runs the job's JobMaster next to the warm
TaskExecutors; the client then polls it for the job's status, collected records and
execution result. Starting a Ray driver (importing Ray and connecting to the GCS, about
1 s) is what this saves a short job.

How a driver finds the Dispatcher (the endpoint file) and how both sides prove they hold the
session's token (the signed wire protocol) is :mod:`raylink.runtime.client.rest_endpoint`, which the
Dispatcher uses too.

**User code.** Functions defined in the program's ``__main__`` travel by value (cloudpickle).
So do modules imported from the program's own directory: the Dispatcher and the pooled
TaskExecutors do not have it on their ``sys.path``. Relative local paths the job's
configuration names (the checkpoint directory, Python files) are made absolute here.

Thread-safety: a client's HTTP connections are per thread, so a job can be cancelled or
watched from one thread while another reads its records.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import secrets
import ssl
import sys
import threading
import time
import uuid
from concurrent.futures import Future
from types import ModuleType
from typing import Any, Iterator, Optional
from urllib.parse import urlsplit

import cloudpickle

from raylink.core.checkpointing import DEFAULT_CHECKPOINTS_DIR
from raylink.core.job_status import JobStatus
from raylink.core.options import CheckpointingOptions, SavepointConfigOptions
from raylink.errors import RaylinkError
from raylink.runtime.client.job_result import (
    CloseableIterator,
    JobExecutionException,
    JobExecutionResult,
    collected_records,
)
from raylink.runtime.client.python_dependencies import FILE_DELIMITER, PYTHON_FILES, PythonDependencyInfo
from raylink.runtime.client.rest_endpoint import (
    AUTH_SCHEME,
    DIGEST_HEADER,
    EXCEPTION_CONTENT_TYPE,
    IDEMPOTENT_METHODS,
    MAX_POLL_S,
    NONCE_HEADER,
    PICKLE_CONTENT_TYPE,
    SIGNATURE_HEADER,
    TIMESTAMP_HEADER,
    RestEndpoint,
    body_digest,
    request_signature,
    response_signature,
    signature_matches,
    signing_timestamp,
)

CONNECT_TIMEOUT_S = 5.0
#: the longest the Dispatcher may take to deploy a job (new executors, a runtime env to build)
SUBMIT_TIMEOUT_S = 600.0
#: how long a savepoint (or a stop with one) may take at the Dispatcher
SAVEPOINT_TIMEOUT_S = 900.0


class RestClusterError(RaylinkError, RuntimeError):
    """The Dispatcher answered with an error of its own (not the job's)."""


class UnauthenticatedServerError(RestClusterError):
    """The server at a session's endpoint did not prove that it holds the session's token (its
    answer is unsigned or wrongly signed); nothing of the answer was read."""


# -- the HTTP client -----------------------------------------------------------------------------------
class RestClusterClient:
    """Requests to one Dispatcher; a keep-alive connection per thread."""

    def __init__(self, endpoint: RestEndpoint) -> None:
        self.endpoint = endpoint
        parts = urlsplit(endpoint.url)
        self._host, self._port = parts.hostname or "127.0.0.1", parts.port or (443 if parts.scheme == "https" else 80)
        self._tls = ssl.create_default_context(cafile=endpoint.cafile) if parts.scheme == "https" else None
        self._local = threading.local()

    def _connection(self) -> http.client.HTTPConnection:
        connection = getattr(self._local, "connection", None)
        if connection is None:
            if self._tls is not None:  # a Dispatcher listening beyond loopback serves HTTPS
                connection = http.client.HTTPSConnection(
                    self._host, self._port, timeout=CONNECT_TIMEOUT_S, context=self._tls
                )
            else:
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
        # a call that changes something (POST: submit, cancel, savepoint) is sent once, on a new
        # connection: after a reset the server may have run it, so it is never sent again; a
        # read goes on the kept-alive connection and, if the server had closed that, once more
        # on a new one, signed anew (the Dispatcher refuses a nonce it has seen)
        idempotent = method.upper() in IDEMPOTENT_METHODS
        if not idempotent:
            self.close()
        for attempt in (0, 1):
            nonce = secrets.token_urlsafe(24)
            timestamp = signing_timestamp()
            digest = body_digest(body or b"")
            mac = request_signature(token, nonce, method, path, digest, timestamp=timestamp)
            headers = {
                "Authorization": f"{AUTH_SCHEME} {mac}",
                NONCE_HEADER: nonce,
                TIMESTAMP_HEADER: timestamp,
                DIGEST_HEADER: digest,
            }
            if body is not None:
                headers["Content-Type"] = PICKLE_CONTENT_TYPE
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
                if attempt or not idempotent:
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
    raylink_home = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
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
    conf = type(configuration)().add_all(configuration)
    key = CheckpointingOptions.CHECKPOINTS_DIRECTORY.key
    directory = conf.get_string(key, None)
    if conf.get(CheckpointingOptions.CHECKPOINTING_INTERVAL) and not directory:
        conf.set_string(key, os.path.abspath(DEFAULT_CHECKPOINTS_DIR))
    elif directory and "://" not in directory:
        conf.set_string(key, os.path.abspath(directory.removeprefix("file:")))
    for option in (SavepointConfigOptions.SAVEPOINT_PATH, SavepointConfigOptions.SAVEPOINT_DIRECTORY):
        value = conf.get(option)
        if value and "://" not in value:
            conf.set_string(option.key, os.path.abspath(value))
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
        job_id = uuid.uuid4().hex  # chosen here, as Flink's client sets the JobGraph's JobID
        try:
            _, answer = cluster.request("POST", f"/v1/jobs?jobId={job_id}", body, wait_s=SUBMIT_TIMEOUT_S)
        except KeyboardInterrupt:  # Ctrl-C while the job starts: it must not run on without a driver
            with contextlib.suppress(Exception):
                cluster.request("POST", f"/v1/jobs/{job_id}/cancel")
            raise
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

    def trigger_savepoint(self, savepoint_directory: Optional[str] = None, formatType: Any = None) -> Future:
        """As ``JobMasterBase.trigger_savepoint``, at the Dispatcher: a future of the folder."""
        return self._savepoint(savepoint_directory, None)

    def stop_with_savepoint(
        self,
        advance_to_end_of_event_time: bool = False,
        savepoint_directory: Optional[str] = None,
        formatType: Any = None,
    ) -> Future:
        """As ``JobMasterBase.stop_with_savepoint``, at the Dispatcher: a future of the folder,
        complete once the job ended."""
        return self._savepoint(savepoint_directory, "drain" if advance_to_end_of_event_time else "suspend")

    def _savepoint(self, directory: Optional[str], stop: Optional[str]) -> Future:
        if directory is not None and "://" not in str(directory):
            directory = os.path.abspath(directory)  # the Dispatcher's working folder is not this one
        body = cloudpickle.dumps({"directory": directory, "stop": stop})
        future: Future = Future()

        def request() -> None:  # on a thread of its own: its own connection (thread-local)
            try:
                _, answer = self._cluster.request(
                    "POST", f"/v1/jobs/{self.job_id}/savepoints", body, wait_s=SAVEPOINT_TIMEOUT_S
                )
                future.set_result(answer["location"])
            except BaseException as exc:  # noqa: BLE001 - the future carries it
                future.set_exception(exc)
            finally:
                self._cluster.close()

        threading.Thread(target=request, name=f"savepoint {self.job_id[:6]}", daemon=True).start()
        return future


__all__ = [
    "CONNECT_TIMEOUT_S",
    "SUBMIT_TIMEOUT_S",
    "RestClusterClient",
    "RestClusterError",
    "RestJobClient",
    "UnauthenticatedServerError",
]
