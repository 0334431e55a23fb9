"""The per-job driver's REST endpoint and dashboard: Flink's ``RestServerEndpoint`` of a job cluster.

:class:`RestServerEndpoint` serves the routes of
:mod:`raylink.runtime.rest.web_monitor_endpoint` for the JobClients registered with it, on
an aiohttp server of its own: a daemon thread running its own event loop, blocking calls into
the JobClient on a small thread pool. It listens on ``rest.bind-address`` (127.0.0.1) and
``rest.port`` (8081); a taken port moves it to the next free one (up to
:data:`PORT_ATTEMPTS` ports on), 0 takes any free port. :func:`start_job_endpoint` starts
one for a job (when ``raylink.rest.enabled``) and logs the dashboard's address once, at INFO
on the ``raylink`` logger; the JobMaster closes it when the job ends, so no thread and no
port outlives the job.

Thread-safety: :meth:`RestServerEndpoint.close` may be called from any thread, the
endpoint's own included (it then does not wait for the server to stop).
"""

from __future__ import annotations

import asyncio
import errno
import logging
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Optional

from aiohttp import web

from raylink.core.options import RestOptions
from raylink.errors import RaylinkError
from raylink.runtime.client.rest_endpoint import is_loopback
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

    def __init__(self, port: int = 8081, host: str = "127.0.0.1", token: Optional[str] = None) -> None:
        self.host = host
        self.jobs = _Jobs()
        self._pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="rest-handler")
        self._loop = asyncio.new_event_loop()
        self._runner: Optional[web.AppRunner] = None
        self._closed = False
        self._token = token
        ready = threading.Event()
        outcome: dict = {}

        def serve() -> None:
            asyncio.set_event_loop(self._loop)
            try:
                outcome["port"] = self._loop.run_until_complete(self._start(port))
            except BaseException as exc:  # noqa: BLE001 - handed to the constructor's thread
                outcome["error"] = exc
                ready.set()
                self._loop.close()
                return
            ready.set()
            try:
                self._loop.run_forever()
            finally:
                self._loop.close()

        self._thread = threading.Thread(target=serve, name="rest-endpoint", daemon=True)
        self._thread.start()
        ready.wait()
        if "error" in outcome:
            self._pool.shutdown(wait=False)
            raise outcome["error"]
        self.port: int = outcome["port"]

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    async def _run_blocking(self, fn: Any, *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self._pool, fn, *args)

    async def _start(self, port: int) -> int:
        app = web.Application()
        add_rest_routes(app, self.jobs, self._run_blocking, self._token, is_loopback(self.host))
        runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
        await runner.setup()
        candidates = [0] if port == 0 else range(port, min(port + PORT_ATTEMPTS, 65536))
        last: Optional[OSError] = None
        for candidate in candidates:
            try:
                await web.TCPSite(runner, self.host, candidate, reuse_address=False).start()
            except OSError as exc:
                if exc.errno not in (errno.EADDRINUSE, errno.EACCES):
                    await runner.cleanup()
                    raise RestPortError(
                        exc.errno, f"rest.bind-address {self.host!r}: cannot listen ({exc.strerror or exc})"
                    ) from None
                last = exc
                continue
            self._runner = runner
            return runner.addresses[0][1]
        await runner.cleanup()
        raise RestPortError(
            getattr(last, "errno", errno.EADDRINUSE),
            f"rest.port {port}: it and the {PORT_ATTEMPTS - 1} ports after it are taken on {self.host} "
            f"(choose another rest.port, 0 for any free one, or set raylink.rest.enabled=false)",
        )

    def add_job(self, client: Any) -> None:
        self.jobs.add(client)

    async def _stop(self) -> None:
        try:
            if self._runner is not None:
                await self._runner.cleanup()
        finally:
            self._loop.stop()  # run_forever returns, the server thread closes the loop and ends

    def close(self) -> None:
        """Stop serving and free the port; waits for the server thread unless called from it
        or from one of its handler threads."""
        if self._closed:
            return
        self._closed = True
        try:
            asyncio.run_coroutine_threadsafe(self._stop(), self._loop)
        except RuntimeError:  # the loop is closed already
            return
        self._pool.shutdown(wait=False)
        current = threading.current_thread()
        if current is self._thread or current.name.startswith("rest-handler"):
            return
        self._thread.join(CLOSE_TIMEOUT_S)  # a server that does not stop in time dies with the process


def start_job_endpoint(client: Any) -> Optional[RestServerEndpoint]:
    """Serve ``client``'s job on ``rest.bind-address:rest.port`` when ``raylink.rest.enabled``,
    logging the dashboard's address; None when disabled."""
    conf = client.configuration
    if not conf.get(RestOptions.ENABLED):
        return None
    host = conf.get(RestOptions.BIND_ADDRESS)
    endpoint = RestServerEndpoint(conf.get(RestOptions.PORT), host)
    endpoint.add_job(client)
    if not is_loopback(host):
        LOG.warning(
            "raylink: rest.bind-address %s is reachable from other machines and the job's REST API has no "
            "authentication (as Flink's): anyone who reaches it can cancel the job",
            host,
        )
    LOG.info("raylink: web dashboard of job '%s' at %s/#/jobs/%s", client.job_name, endpoint.url, client.job_id)
    return endpoint


__all__ = ["PORT_ATTEMPTS", "RestPortError", "RestServerEndpoint", "start_job_endpoint"]
