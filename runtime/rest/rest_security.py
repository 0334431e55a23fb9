"""Who may talk to raylink's REST servers, from where, for how long and how many at once: one
policy for every server (the per-job driver's :mod:`raylink.runtime.rest.rest_server` and the
session cluster's Dispatcher, :mod:`raylink.actors.dispatcher`, and the ``metrics.port``
Prometheus exporter, :class:`raylink.runtime.metrics.MetricsHttpServer`). No Flink counterpart: Flink's
REST API has no authentication by default; raylink is stricter by design.

**The token.** Each server has a random bearer token (:func:`new_token`; the Dispatcher's is
derived from its session token). Every route needs ``Authorization: Bearer <token>``
(compared with :func:`hmac.compare_digest`) except the public ones below, which carry no user
data; a missing or wrong token is answered 401. There is no cookie: a cookie is not scoped by
port, so every listener on the machine would receive it. The dashboard's address carries the
token in its fragment (``http://127.0.0.1:PORT/#token=...``, never sent to a server); the page
keeps it in ``sessionStorage`` and sends it as the header. The CLI and clients read it from the
per-user runtime folder (:mod:`raylink.runtime.client.rest_tokens`).

Routes (method, Flink's route) and what they need:

==============================================  ===========  ======================================
route                                           access       why
==============================================  ===========  ======================================
``GET /``, ``GET /static/*``                     public       the dashboard's page and scripts, no data
``GET /config``                                  public       version, refresh interval, time zone
``GET /overview``, ``/taskmanagers``, ``/jobs``  token        job counts and ids of this user's jobs
``GET /jobs/overview``, ``/jobs/:jobid``         token        job names, plans (user operator names)
``GET /jobs/:jobid/{plan,metrics,checkpoints}``  token        user names, metrics, checkpoint config
``GET /jobs/:jobid/exceptions``                  token        user exceptions with their messages
``GET /jobs/:jobid/vertices/...``                token        metrics, watermarks, back pressure
``GET /jobs/:jobid/savepoints/:triggerid``       token        savepoint locations
``PATCH /jobs/:jobid``, ``POST .../savepoints``  token        cancel / stop / savepoint: mutating
``GET /metrics`` (Prometheus)                    token        metric names carry operator names
``/v1/*`` (the Dispatcher's pickle API)          signature    its own HMAC per request (replay-proof)
any other route, 404s included                   token        default deny: a new route is covered
==============================================  ===========  ======================================

**Host and Origin** (DNS rebinding): before any handler runs, a request whose ``Host`` is not
``localhost``, a loopback address, the address the connection came in on or the configured
bind address (with the server's port), or whose ``Origin`` (when present) is not
``http(s)://<such a host>:<port>``, is refused with 403. CORS preflights (``OPTIONS``) are
answered only for such origins. A state-changing request (``POST``/``PUT``/``PATCH``/``DELETE``)
outside the signed API must not use a content type a cross-site form may send
(``text/plain``, form encodings: 415) and a ``POST`` must say ``application/json``.

**Connections** (:class:`ConnectionGuard`): a client has :attr:`ServerLimits.header_timeout_s`
from connecting (TLS handshake included) to the end of its first request's headers; an idle
keep-alive connection is closed after :attr:`ServerLimits.idle_timeout_s` (aiohttp's
``keepalive_timeout``, which also bounds a later request's headers). The head ends only with a
blank line after a non-empty request line (empty lines before the request line are ignored, RFC
9112 section 2.2, and end nothing). At most :attr:`ServerLimits.max_connections` are open: a new
one closes the one that waited longest for its headers, else the idle keep-alive connection quiet
the longest (never one inside a request: from the middleware's entry to its exit, after which
aiohttp writes the response), and is refused only when every connection is inside a request.

**Response headers**: every response of these servers carries :data:`SECURITY_HEADERS` (no
framing, no referrer, no content sniffing).

**Binds** (:func:`check_bind`): a server listens beyond loopback only over TLS
(``security.ssl.rest.enabled`` with the PEM ``security.ssl.rest.cert-file``).

Thread-safety: the middlewares and the guard run on the server's event loop only; the registry
of open connections they share is keyed by connection, so servers on other loops touch other keys.
"""

from __future__ import annotations

import asyncio
import functools
import hmac
import ipaddress
import re
import secrets
import socket
import ssl
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Optional

from aiohttp import web

from raylink.core.options import IllegalConfigurationError, RestOptions, SecurityOptions
from raylink.errors import RaylinkError
from raylink.runtime.client.rest_endpoint import is_loopback

#: canonical routes any client may GET without the token (see the module docstring)
PUBLIC_ROUTES = frozenset({"/", "/static", "/config"})
#: methods that change state
MUTATING_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
#: content types a cross-site form or a no-cors fetch may send without a CORS preflight
SIMPLE_CONTENT_TYPES = frozenset({"text/plain", "application/x-www-form-urlencoded", "multipart/form-data"})
#: hosts every server accepts in ``Host`` / ``Origin`` (plus loopback IP literals)
LOOPBACK_NAMES = frozenset({"localhost"})
_WILDCARDS = frozenset({"", "0.0.0.0", "::", "*"})
#: sent with every response: no framing (clickjacking), no referrer, no content sniffing (the
#: dashboard sets inline ``style`` attributes, so no ``default-src`` policy)
SECURITY_HEADERS = {
    "X-Frame-Options": "DENY",
    "Content-Security-Policy": "frame-ancestors 'none'",
    "Referrer-Policy": "no-referrer",
    "X-Content-Type-Options": "nosniff",
}

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class RestBindError(RaylinkError, ValueError):
    """A REST server was asked to listen beyond loopback without TLS; names the options."""


def new_token() -> str:
    """A fresh random bearer token for one server."""
    return secrets.token_urlsafe(32)


@dataclass(frozen=True)
class ServerLimits:
    """How long and how many connections a server holds (``rest.server.*`` options)."""

    header_timeout_s: float = RestOptions.SERVER_HEADER_TIMEOUT.default / 1000.0
    idle_timeout_s: float = RestOptions.SERVER_IDLE_TIMEOUT.default / 1000.0
    max_connections: int = RestOptions.SERVER_MAX_CONNECTIONS.default

    @classmethod
    def from_configuration(cls, conf: Any) -> "ServerLimits":
        return cls(
            conf.get(RestOptions.SERVER_HEADER_TIMEOUT) / 1000.0,
            conf.get(RestOptions.SERVER_IDLE_TIMEOUT) / 1000.0,
            conf.get(RestOptions.SERVER_MAX_CONNECTIONS),
        )


@dataclass(frozen=True)
class AccessPolicy:
    """What one server lets through: its ``token``, the address it was told to listen on
    (``bind_host``, accepted in ``Host`` besides loopback), whether it speaks TLS, and the path
    prefix of routes authenticated by request signatures instead (the Dispatcher's ``/v1/``)."""

    token: str
    bind_host: str = "127.0.0.1"
    tls: bool = False
    signed_prefix: Optional[str] = None

    def __post_init__(self) -> None:
        if not self.token:
            raise ValueError("a REST server needs a token")


# -- TLS and binds -----------------------------------------------------------------------------------------
def rest_ssl_context(conf: Any) -> Optional[ssl.SSLContext]:
    """The server-side TLS context of ``security.ssl.rest.*`` (PEM files), None when TLS is off."""
    if not conf.get(SecurityOptions.SSL_REST_ENABLED):
        return None
    cert = conf.get(SecurityOptions.SSL_REST_CERT_FILE)
    key = conf.get(SecurityOptions.SSL_REST_KEY_FILE)
    if not cert:
        raise IllegalConfigurationError(
            f"{SecurityOptions.SSL_REST_ENABLED.key} is true but {SecurityOptions.SSL_REST_CERT_FILE.key} is not "
            f"set: raylink reads the REST server's certificate from a PEM file (Flink's JKS "
            f"security.ssl.rest.keystore is not read)"
        )
    return server_ssl_context(cert, key)


def server_ssl_context(cert: str, key: Optional[str] = None) -> ssl.SSLContext:
    """A TLS server context (TLS 1.2 or newer) of a PEM certificate chain and its key; errors name
    the ``security.ssl.rest.*`` options."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(cert, key or None)
    except (OSError, ssl.SSLError) as exc:
        raise IllegalConfigurationError(
            f"{SecurityOptions.SSL_REST_CERT_FILE.key} {cert!r} / {SecurityOptions.SSL_REST_KEY_FILE.key} {key!r}: "
            f"cannot load the certificate and key ({exc})"
        ) from None
    return context


def check_bind(host: str, ssl_context: Optional[ssl.SSLContext], option: str = RestOptions.BIND_ADDRESS.key) -> None:
    """Refuse a bind address (``option``, ``rest.bind-address`` by default) beyond loopback
    without TLS (the token is always on)."""
    if ssl_context is None and not is_loopback(host):
        raise RestBindError(
            f"{option} {host!r} is not a loopback address: a server reachable from "
            f"other machines must use TLS. Set {SecurityOptions.SSL_REST_ENABLED.key}=true with "
            f"{SecurityOptions.SSL_REST_CERT_FILE.key} (and {SecurityOptions.SSL_REST_KEY_FILE.key}) naming PEM "
            f"files, or listen on 127.0.0.1"
        )


# -- Host and Origin -----------------------------------------------------------------------------------------
#: exactly ``host[:port]``: a name or IPv4 address, or a bracketed IPv6 address, and a port in
#: canonical digits (no sign, no leading zero); nothing else (no spaces, ``?``, ``#``, ``@``, path)
_HOST_PORT = re.compile(r"(?:\[(?P<v6>[0-9A-Fa-f:.]+)\]|(?P<name>[A-Za-z0-9._-]+))(?::(?P<port>[1-9][0-9]{0,4}))?")
_ORIGIN = re.compile(r"(?P<scheme>https?)://(?P<authority>[^/?#@\s]+)")


def _split_host(text: str) -> tuple[str, Optional[int]]:
    """``Host``'s name (lower case, no brackets) and port (None when absent); ValueError unless it
    is exactly ``host[:port]`` (see :data:`_HOST_PORT`)."""
    match = _HOST_PORT.fullmatch(text)
    if match is None:
        raise ValueError(text)
    name = match.group("v6") or match.group("name")
    port = match.group("port")
    return name.lower(), int(port) if port is not None else None


def _is_ip_literal(name: str) -> Optional[ipaddress._BaseAddress]:
    try:
        return ipaddress.ip_address(name)
    except ValueError:
        return None


@functools.lru_cache(maxsize=1)
def _machine_names() -> frozenset:
    """This machine's own names (accepted in ``Host`` by a server listening beyond loopback)."""
    return frozenset(n.lower() for n in (socket.gethostname(), socket.getfqdn()) if n)


class _HostRule:
    """The names and the port one connection may be addressed by."""

    def __init__(self, policy: AccessPolicy, request: web.Request) -> None:
        transport = request.transport
        sockname = transport.get_extra_info("sockname") if transport is not None else None
        self.port = sockname[1] if sockname else None
        self.local_ip = _is_ip_literal(sockname[0]) if sockname else None
        self.scheme = "https" if policy.tls else "http"
        bind = policy.bind_host.strip("[]").lower()
        self.names = set(LOOPBACK_NAMES)
        if bind not in _WILDCARDS:
            self.names.add(bind)
        if bind in _WILDCARDS or not is_loopback(bind):
            self.names.update(_machine_names())

    def name_ok(self, name: str) -> bool:
        if name in self.names:
            return True
        ip = _is_ip_literal(name)
        if ip is None:
            return False
        mapped = getattr(ip, "ipv4_mapped", None)
        return ip.is_loopback or (mapped is not None and mapped.is_loopback) or ip == self.local_ip

    def port_ok(self, port: Optional[int], scheme: str) -> bool:
        if port is None:
            port = 443 if scheme == "https" else 80
        return port == self.port

    def host_ok(self, header: Optional[str]) -> bool:
        if not header:
            return False
        try:
            name, port = _split_host(header)
        except ValueError:
            return False
        return self.name_ok(name) and self.port_ok(port, self.scheme)

    def origin_ok(self, origin: str) -> bool:
        """``origin`` is exactly ``<scheme>://host[:port]`` of this server (no path, ``?`` or ``#``)."""
        match = _ORIGIN.fullmatch(origin)
        if match is None or match.group("scheme") != self.scheme:
            return False
        try:
            name, port = _split_host(match.group("authority"))
        except ValueError:
            return False
        return self.name_ok(name) and self.port_ok(port, self.scheme)


def _refuse(status: int, message: str, headers: Optional[dict] = None) -> web.Response:
    return web.json_response({"errors": [message]}, status=status, headers=headers)


def _presented_token(request: web.Request) -> bytes:
    scheme, _, value = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() != "bearer":
        return b""
    return value.strip().encode("utf-8", "surrogateescape")


def token_matches(request: web.Request, token: str) -> bool:
    """The request carries ``Authorization: Bearer <token>`` (compared in constant time)."""
    presented = _presented_token(request)
    return bool(presented) and hmac.compare_digest(presented, token.encode("utf-8"))


def is_public(request: web.Request) -> bool:
    """GET/HEAD of a :data:`PUBLIC_ROUTES` route (matched on the resolved route, not the raw path)."""
    if request.method not in ("GET", "HEAD"):
        return False
    resource = request.match_info.route.resource
    return resource is not None and resource.canonical in PUBLIC_ROUTES


def route_table(app: web.Application) -> list[tuple[str, str]]:
    """Every (method, canonical path) an application answers, static prefixes as ``/static/{filename}``
    (for tests and audits: a new route shows up here and falls under the rules above)."""
    table = []
    for route in app.router.routes():
        resource = route.resource
        if resource is None:
            continue
        path = resource.canonical
        if isinstance(resource, web.StaticResource):
            path += "/{filename}"
        table.append((route.method, path))
    return table


def security_middlewares(policy: AccessPolicy) -> list:
    """The aiohttp middlewares enforcing ``policy`` (first in an application's chain)."""

    @web.middleware
    async def guard(request: web.Request, handler: Handler) -> web.StreamResponse:
        connection = _CONNECTIONS.get(id(request.protocol))
        if connection is not None:
            connection.request_started()
        try:
            response = await checked(request, handler)
        except web.HTTPException as exc:  # 404s, 405s: the same headers
            exc.headers.update(SECURITY_HEADERS)
            raise
        finally:
            if connection is not None:
                connection.request_finished()
        if isinstance(response, web.StreamResponse) and not response.prepared:
            response.headers.update(SECURITY_HEADERS)
        return response

    async def checked(request: web.Request, handler: Handler) -> web.StreamResponse:
        rule = _HostRule(policy, request)
        if not rule.host_ok(request.headers.get("Host")):
            return _refuse(403, "this server answers only requests addressed to it (Host), e.g. 127.0.0.1:<port>")
        origin = request.headers.get("Origin")
        if origin is not None and not rule.origin_ok(origin):
            return _refuse(403, f"requests from the origin {origin!r} are not allowed")
        cors = {"Access-Control-Allow-Origin": origin, "Vary": "Origin"} if origin is not None else {}
        if request.method == "OPTIONS":  # a CORS preflight of an allowed origin
            return web.Response(
                status=204,
                headers={
                    **cors,
                    "Access-Control-Allow-Methods": "GET, HEAD, POST, PATCH",
                    "Access-Control-Allow-Headers": "Authorization, Content-Type",
                    "Access-Control-Max-Age": "600",
                },
            )
        signed = policy.signed_prefix is not None and request.path.startswith(policy.signed_prefix)
        if not signed and not is_public(request) and not token_matches(request, policy.token):
            return _refuse(
                401,
                "this call needs the server's token (Authorization: Bearer <token>; it is in the dashboard "
                "address printed at start and in your raylink runtime folder)",
                {"WWW-Authenticate": 'Bearer realm="raylink"'},
            )
        if not signed and request.method in MUTATING_METHODS:
            declared = request.headers.get("Content-Type")
            kind = declared.split(";", 1)[0].strip().lower() if declared else ""
            if kind in SIMPLE_CONTENT_TYPES or (request.method == "POST" and kind != "application/json"):
                return _refuse(415, f"{request.method} {request.path} takes application/json, not {kind or 'no type'}")
        response = await handler(request)
        if cors and isinstance(response, web.StreamResponse) and not response.prepared:
            response.headers.update(cors)
        return response

    return [guard]


# -- connections -------------------------------------------------------------------------------------------
#: the guarded connection of each open aiohttp protocol (by ``id``), for the middleware to mark requests
_CONNECTIONS: dict = {}


class _GuardedProtocol(asyncio.Protocol):
    """One connection: the aiohttp handler behind a header deadline and the guard's count. Its
    state: waiting for its first request head (:attr:`awaiting_head`), inside a request
    (:attr:`active` > 0, from the middleware's entry until the response is written), or idle
    keep-alive (neither; :attr:`quiet_since` says since when)."""

    def __init__(self, guard: "ConnectionGuard", inner: asyncio.Protocol) -> None:
        self._guard = guard
        self._inner = inner
        self.transport: Optional[asyncio.BaseTransport] = None
        self._timer: Optional[asyncio.TimerHandle] = None
        self._tail = b""
        self._started = False  # a byte other than CR / LF came (RFC 9112 2.2: leading empty lines are ignored)
        self.awaiting_head = True
        self.forwarded = False
        self.active = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport
        if not self._guard.admit(self):
            transport.abort()
            return
        self._timer = asyncio.get_running_loop().call_later(self._guard.limits.header_timeout_s, self._too_slow)
        self.forwarded = True
        _CONNECTIONS[id(self._inner)] = self
        self._inner.connection_made(transport)

    def _too_slow(self) -> None:
        self._timer = None
        if self.awaiting_head and self.transport is not None:
            self.transport.abort()

    def _head_complete(self, data: bytes) -> bool:
        """Whether ``data`` ends the first request head: a non-empty request line, then a blank line."""
        if not self._started:
            data = data.lstrip(b"\r\n")
            if not data:
                return False
            self._started = True
        window = self._tail + data
        if b"\r\n\r\n" in window or b"\n\n" in window:
            return True
        self._tail = window[-3:]
        return False

    def data_received(self, data: bytes) -> None:
        if not self.forwarded:
            return
        if self.awaiting_head:
            if self._head_complete(data):
                self.awaiting_head = False
                self._guard.head_received(self)
                if self._timer is not None:
                    self._timer.cancel()
                    self._timer = None
        else:
            self._guard.touch(self)
        self._inner.data_received(data)

    def request_started(self) -> None:
        self.active += 1
        self._guard.touch(self)

    def request_finished(self) -> None:
        self.active -= 1
        self._guard.touch(self)

    def eof_received(self) -> Optional[bool]:
        return self._inner.eof_received() if self.forwarded else None

    def pause_writing(self) -> None:
        if self.forwarded:
            self._inner.pause_writing()

    def resume_writing(self) -> None:
        if self.forwarded:
            self._inner.resume_writing()

    def connection_lost(self, exc: Optional[Exception]) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._guard.forget(self)
        if self.forwarded:
            _CONNECTIONS.pop(id(self._inner), None)
            self._inner.connection_lost(exc)


class ConnectionGuard:
    """The protocol factory of one listening socket: wraps ``factory``'s (aiohttp's) protocol,
    counts connections and enforces :class:`ServerLimits` (see the module docstring).

    When every slot is taken, a newcomer first closes the connection that has waited longest for
    its first request head, else the idle keep-alive connection quiet the longest (never one
    inside a request), and is refused only when neither exists (as nginx reuses keep-alive
    connections)."""

    def __init__(self, factory: Callable[[], asyncio.Protocol], limits: ServerLimits) -> None:
        self._factory = factory
        self.limits = limits
        self._open: set = set()
        self._waiting: OrderedDict = OrderedDict()  # connections without a full request head, oldest first
        self._quiet: OrderedDict = OrderedDict()  # the others, least recently active first
        self.refused = 0
        self.evicted = 0

    @property
    def open_connections(self) -> int:
        return len(self._open)

    def __call__(self) -> asyncio.Protocol:
        return _GuardedProtocol(self, self._factory())

    def _victim(self) -> Optional[_GuardedProtocol]:
        if self._waiting:
            return next(iter(self._waiting))
        for protocol in self._quiet:
            if protocol.active <= 0:
                return protocol
        return None

    def admit(self, protocol: _GuardedProtocol) -> bool:
        if len(self._open) >= self.limits.max_connections:
            victim = self._victim()
            if victim is None:
                self.refused += 1
                return False
            self.forget(victim)
            self.evicted += 1
            if victim.transport is not None:
                victim.transport.abort()
        self._open.add(protocol)
        self._waiting[protocol] = None
        return True

    def head_received(self, protocol: _GuardedProtocol) -> None:
        if self._waiting.pop(protocol, 0) is None:
            self._quiet[protocol] = None

    def touch(self, protocol: _GuardedProtocol) -> None:
        if protocol in self._quiet:
            self._quiet.move_to_end(protocol)

    def forget(self, protocol: _GuardedProtocol) -> None:
        self._open.discard(protocol)
        self._waiting.pop(protocol, None)
        self._quiet.pop(protocol, None)


def runner_kwargs(limits: ServerLimits) -> dict:
    """aiohttp ``AppRunner`` settings for ``limits`` (its idle timeout; no access log)."""
    return {"access_log": None, "keepalive_timeout": limits.idle_timeout_s}


async def start_listening(
    runner: web.AppRunner,
    host: str,
    port: int,
    limits: ServerLimits,
    ssl_context: Optional[ssl.SSLContext] = None,
    reuse_address: Optional[bool] = None,
) -> tuple[asyncio.AbstractServer, ConnectionGuard]:
    """Listen on ``host:port`` for ``runner``'s (set up) application behind a :class:`ConnectionGuard`;
    the caller closes the returned server before ``runner.cleanup()``."""
    guard = ConnectionGuard(runner.server, limits)
    server = await asyncio.get_running_loop().create_server(
        guard,
        host,
        port,
        ssl=ssl_context,
        ssl_handshake_timeout=limits.header_timeout_s if ssl_context is not None else None,
        backlog=min(1024, max(128, limits.max_connections)),
        reuse_address=reuse_address,
    )
    return server, guard


def bound_port(server: asyncio.AbstractServer) -> int:
    return server.sockets[0].getsockname()[1]


__all__ = [
    "AccessPolicy",
    "ConnectionGuard",
    "LOOPBACK_NAMES",
    "PUBLIC_ROUTES",
    "RestBindError",
    "SECURITY_HEADERS",
    "ServerLimits",
    "bound_port",
    "check_bind",
    "is_public",
    "new_token",
    "rest_ssl_context",
    "route_table",
    "runner_kwargs",
    "security_middlewares",
    "server_ssl_context",
    "start_listening",
    "token_matches",
]
