"""The per-job driver's REST endpoint and dashboard: Flink's ``RestServerEndpoint`` of a job cluster.

:class:`RestServerEndpoint` serves the routes of
:mod:`raylink.runtime.rest.web_monitor_endpoint` for the JobClients registered with it, on
an aiohttp server of its own (:class:`~raylink.runtime.rest.server_thread.GuardedServerThread`:
a daemon thread ``rest-endpoint`` running its own event loop), blocking calls into the JobClient
on a small thread pool. It listens on ``rest.bind-address`` (127.0.0.1) and
``rest.port`` (8081); a taken port moves it to the next free one (up to
:data:`PORT_ATTEMPTS` ports on), 0 takes any free port. :func:`start_job_endpoint` starts
one for a job (when ``raylink.rest.enabled``) and logs the dashboard's address once, at INFO
on the ``raylink`` logger; the JobMaster closes it when the job ends, so no thread and no
port outlives the job.

Access (:mod:`raylink.runtime.rest.rest_security`): every endpoint has a random token
(:func:`~raylink.runtime.rest.rest_security.new_token`) that every route but the dashboard's
page and ``/config`` requires as ``Authorization: Bearer``; Host and Origin must name this
server (DNS rebinding is refused with 403); header and idle timeouts and a connection limit
(``rest.server.*``) hold for every connection. The token is recorded in the per-user runtime
folder while the endpoint listens (:mod:`raylink.runtime.client.rest_tokens`) and the logged
dashboard address carries it in its fragment. A ``rest.bind-address`` beyond loopback needs
TLS (``security.ssl.rest.enabled``, PEM ``security.ssl.rest.cert-file``), else
:func:`start_job_endpoint` raises :class:`~raylink.runtime.rest.rest_security.RestBindError`.

Thread-safety: :meth:`RestServerEndpoint.close` may be called from any thread, the
endpoint's own included (it then does not wait for the server to stop).
"""

from __future__ import annotations

import asyncio
import errno
import logging
import ssl
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Optional

from aiohttp import web

from raylink.core.options import RestOptions
from raylink.errors import RaylinkError
from raylink.runtime.client.rest_tokens import dashboard_address, forget_rest_token, record_rest_token
from raylink.runtime.rest.rest_security import (
    AccessPolicy,
    ConnectionGuard,
    ServerLimits,
    check_bind,
    new_token,
    rest_ssl_context,
    security_middlewares,
)
from raylink.runtime.rest.server_thread import GuardedServerThread
from raylink.runtime.rest.web_monitor_endpoint import add_rest_routes

#: how many ports after ``rest.port`` are tried when it is taken
PORT_ATTEMPTS = 100
#: the longest :meth:`RestServerEndpoint.close` waits for the server thread
CLOSE_TIMEOUT_S = 10.0

LOG = logging.getLogger("raylink.rest")


class RestPortError(RaylinkError, OSError):
    """The REST endpoint found no port to listen on (``rest.port`` and the ones after it)."""


class _Jobs:
    """The :class:`~raylink.runtime.rest.web_monitor_endpoint.JobLookup` of one driver."""

    def __init__(self) -> None:
        self._clients: dict[str, Any] = {}
        self._lock = threading.Lock()

    def add(self, client: Any) -> None:
        with self._lock:
            self._clients[client.job_id] = client

    def job_clients(self) -> list[Any]:
        with self._lock:
            return list(self._clients.values())

    def job_client(self, job_id: str) -> Optional[Any]:
        with self._lock:
            return self._clients.get(job_id)


class RestServerEndpoint:
    """An aiohttp server on a daemon thread serving Flink's REST API for this driver's jobs."""

    def __init__(
        self,
        port: int = 8081,
        host: str = "127.0.0.1",
        token: Optional[str] = None,
        limits: Optional[ServerLimits] = None,
        ssl_context: Optional[ssl.SSLContext] = None,
    ) -> None:
        check_bind(host, ssl_context)
        self.host = host
        self.jobs = _Jobs()
        self._pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="rest-handler")
        self._closed = False
        self.token = token or new_token()
        self._ssl = ssl_context
        self._serving = GuardedServerThread("rest-endpoint", host, limits or ServerLimits(), ssl_context)
        try:
            self.port: int = self._serving.start(lambda: self._start(port))
        except BaseException:
            self._pool.shutdown(wait=False)
            raise

    @property
    def guard(self) -> Optional[ConnectionGuard]:
        """The listener's connection guard (open, evicted and refused connections)."""
        return self._serving.guard

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        if host in ("0.0.0.0", "[::]"):
            host = "127.0.0.1"
        return f"{'https' if self._ssl is not None else 'http'}://{host}:{self.port}"

    def dashboard_url(self, route: Optional[str] = None) -> str:
        """The dashboard's address with this endpoint's token in its fragment."""
        return dashboard_address(self.url, self.token, route)

    async def _run_blocking(self, fn: Any, *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self._pool, fn, *args)

    async def _start(self, port: int) -> int:
        policy = AccessPolicy(self.token, self.host, tls=self._ssl is not None)
        app = web.Application(middlewares=security_middlewares(policy))
        self.app = app
        add_rest_routes(app, self.jobs, self._run_blocking, self.token, False)
        candidates = [0] if port == 0 else range(port, min(port + PORT_ATTEMPTS, 65536))
        taken = (errno.EADDRINUSE, errno.EACCES)
        try:
            return await self._serving.listen(app, candidates, reuse_address=False, retry_errnos=taken)
        except OSError as exc:
            if exc.errno not in taken:
                raise RestPortError(
                    exc.errno, f"rest.bind-address {self.host!r}: cannot listen ({exc.strerror or exc})"
                ) from None
            raise RestPortError(
                exc.errno,
                f"rest.port {port}: it and the {PORT_ATTEMPTS - 1} ports after it are taken on {self.host} "
                f"(choose another rest.port, 0 for any free one, or set raylink.rest.enabled=false)",
            ) from None

    def add_job(self, client: Any) -> None:
        self.jobs.add(client)

    def close(self) -> None:
        """Stop serving and free the port; waits for the server thread unless called from it
        or from one of its handler threads."""
        if self._closed:
            return
        self._closed = True
        forget_rest_token(self.url)
        if not self._serving.stop():
            return
        self._pool.shutdown(wait=False)
        if threading.current_thread().name.startswith("rest-handler"):
            return
        self._serving.join(CLOSE_TIMEOUT_S)


def start_job_endpoint(client: Any) -> Optional[RestServerEndpoint]:
    """Serve ``client``'s job on ``rest.bind-address:rest.port`` when ``raylink.rest.enabled``
    with a new token (recorded in the runtime folder), logging the dashboard's address with the
    token in its fragment; None when disabled. Raises ``RestBindError`` for a bind beyond
    loopback without TLS."""
    conf = client.configuration
    if not conf.get(RestOptions.ENABLED):
        return None
    host = conf.get(RestOptions.BIND_ADDRESS)
    endpoint = RestServerEndpoint(
        conf.get(RestOptions.PORT), host, None, ServerLimits.from_configuration(conf), rest_ssl_context(conf)
    )
    endpoint.add_job(client)
    record_rest_token(endpoint.url, endpoint.token)
    LOG.info(
        "raylink: web dashboard of job '%s' at %s", client.job_name, endpoint.dashboard_url(f"/jobs/{client.job_id}")
    )
    return endpoint


__all__ = ["PORT_ATTEMPTS", "RestPortError", "RestServerEndpoint", "start_job_endpoint"]
