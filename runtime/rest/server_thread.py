"""An aiohttp application served on a private event loop in a daemon thread, behind the REST
servers' connection guard: what the per-job :class:`~raylink.runtime.rest.rest_server.RestServerEndpoint`
and the ``metrics.port`` exporter (:class:`raylink.runtime.metrics.MetricsHttpServer`) share.

No Flink counterpart: Flink's ``RestServerEndpoint`` runs on Netty's event loops.

The owner builds its application and listens through :meth:`GuardedServerThread.listen`
inside the coroutine it hands to :meth:`GuardedServerThread.start`; the limits, the TLS
context and the access policy are :mod:`raylink.runtime.rest.rest_security`'s.

Thread contract: :meth:`~GuardedServerThread.start` is called once, from the owner's thread;
it runs the coroutine on the new thread's loop, waits for it and returns its port or raises
its error as it was raised (the loop is then closed and the thread has ended). After a
successful start the thread runs the loop until :meth:`~GuardedServerThread.stop`, which may
be called from any thread, the server's own included; :meth:`~GuardedServerThread.join`
waits for the thread unless called from it.
"""

from __future__ import annotations

import asyncio
import errno
import ssl
import threading
from typing import Awaitable, Callable, Iterable, Optional

from aiohttp import web

from raylink.runtime.rest.rest_security import ConnectionGuard, ServerLimits, bound_port, runner_kwargs, start_listening


class GuardedServerThread:
    """A daemon thread named ``name`` running a private event loop that serves one guarded
    aiohttp application on ``host`` (see the module docstring for the thread contract)."""

    def __init__(self, name: str, host: str, limits: ServerLimits, ssl_context: Optional[ssl.SSLContext]) -> None:
        self.name = name
        self.host = host
        self.limits = limits
        self.ssl_context = ssl_context
        self.loop = asyncio.new_event_loop()
        self.runner: Optional[web.AppRunner] = None
        self.server: Optional[asyncio.AbstractServer] = None
        self.guard: Optional[ConnectionGuard] = None
        self.thread: Optional[threading.Thread] = None

    def start(self, setup: Callable[[], Awaitable[int]]) -> int:
        """Run ``setup()`` (which calls :meth:`listen`) on the server thread's loop, then keep the
        loop running; returns the port ``setup`` returns, or raises its error unchanged."""
        ready = threading.Event()
        outcome: dict = {}

        def serve() -> None:
            asyncio.set_event_loop(self.loop)
            try:
                outcome["port"] = self.loop.run_until_complete(setup())
            except BaseException as exc:  # noqa: BLE001 - handed to the starting thread
                outcome["error"] = exc
                ready.set()
                self.loop.close()
                return
            ready.set()
            try:
                self.loop.run_forever()
            finally:
                self.loop.close()

        self.thread = threading.Thread(target=serve, name=self.name, daemon=True)
        self.thread.start()
        ready.wait()
        if "error" in outcome:
            raise outcome["error"]
        return outcome["port"]

    async def listen(
        self,
        app: web.Application,
        ports: Iterable[int],
        *,
        reuse_address: Optional[bool] = None,
        retry_errnos: tuple[int, ...] = (),
    ) -> int:
        """Set ``app`` up and listen on the first of ``ports`` that binds, behind a
        :class:`~raylink.runtime.rest.rest_security.ConnectionGuard`; returns the bound port. An
        ``OSError`` whose errno is in ``retry_errnos`` moves on to the next port, any other is
        raised; when every port failed so, the last such error is raised (``EADDRINUSE`` when
        ``ports`` is empty). The runner is cleaned up whenever nothing listens."""
        runner = web.AppRunner(app, shutdown_timeout=1.0, **runner_kwargs(self.limits))
        await runner.setup()
        try:
            last: Optional[OSError] = None
            for port in ports:
                try:
                    server, guard = await start_listening(
                        runner, self.host, port, self.limits, self.ssl_context, reuse_address=reuse_address
                    )
                except OSError as exc:
                    if exc.errno not in retry_errnos:
                        raise
                    last = exc
                    continue
                self.runner, self.server, self.guard = runner, server, guard
                return bound_port(server)
            raise last or OSError(errno.EADDRINUSE, "no port to listen on")
        except BaseException:
            await runner.cleanup()
            raise

    async def _stop(self) -> None:
        try:
            if self.server is not None:
                self.server.close()  # no new connections; the runner closes the open ones
            if self.runner is not None:
                await self.runner.cleanup()
        finally:
            self.loop.stop()  # run_forever returns, the server thread closes the loop and ends

    def stop(self) -> bool:
        """Close the server and its connections and end the loop, without waiting; False when
        the loop was closed already (nothing to stop)."""
        try:
            asyncio.run_coroutine_threadsafe(self._stop(), self.loop)
        except RuntimeError:  # the loop is closed already
            return False
        return True

    def join(self, timeout: float) -> None:
        """Wait at most ``timeout`` seconds for the server thread to end; returns at once when
        called from it (a server that does not stop in time dies with the process)."""
        if self.thread is not None and threading.current_thread() is not self.thread:
            self.thread.join(timeout)


__all__ = ["GuardedServerThread"]
