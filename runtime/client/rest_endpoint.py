"""The session cluster's REST endpoint, shared by its server (the Dispatcher,
:mod:`raylink.actors.dispatcher`) and its client (:mod:`raylink.runtime.client.rest_cluster_client`):
where a driver finds it, how both sides sign what they send, where it may listen.

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
fresh random nonce (``X-Raylink-Nonce``), the time it was signed (``X-Raylink-Timestamp``,
milliseconds since the epoch), its body's SHA-256 (``X-Raylink-Content-SHA256``) and
``Authorization: Raylink-HMAC-SHA256 <mac>``, an HMAC-SHA256 under the token of the nonce,
timestamp, method, path and body digest (:func:`request_signature`); the Dispatcher refuses
others with 401 before it reads their body.

**No replays.** A request signed more than the validity window ago (``rest.signature.validity``,
5 minutes by default) or dated more than the window ahead is refused with 401 naming why, and
the Dispatcher remembers every nonce it accepted until its request's window has passed
(:class:`ReplayGuard`): a captured request sent again is refused with 401, and memory holds at
most the requests of one window. Clients never re-send a non-idempotent call (POST, PATCH,
DELETE): such a call goes on a new connection, and a connection reset raises instead of
sending it again (the server may have run it); only reads are retried, signed anew. Every answer carries
``X-Raylink-Signature``, the HMAC of that nonce, the status, the content type and the body
(:func:`response_signature`); the client checks it (``hmac.compare_digest``) before it reads
a byte of the answer -- before any unpickling -- and raises
:class:`UnauthenticatedServerError` otherwise (a program that took a stopped session's port
cannot sign, and learns nothing it could sign with). The job's JobGraph is sent only after
an authenticated answer. The traffic itself is plain HTTP: the Dispatcher binds to a
loopback address unless asked explicitly (:func:`check_rest_bind_address`).
"""

from __future__ import annotations

import hashlib
import heapq
import hmac
import ipaddress
import json
import os
import socket
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any, Optional

from raylink.core.options import RaylinkOptions, RestOptions
from raylink.errors import RaylinkError
from raylink.runtime.runtime_dir import read_private_file, remove_private_file, runtime_dir, write_private_file

PICKLE_CONTENT_TYPE = "application/x-raylink-pickle"
EXCEPTION_CONTENT_TYPE = "application/x-raylink-exception"
#: the longest a poll waits at the Dispatcher before answering "not yet"
MAX_POLL_S = 30.0
#: the request's fresh random nonce, which the answer's signature covers
NONCE_HEADER = "X-Raylink-Nonce"
#: when the request was signed (integer milliseconds since the epoch), covered by its signature
TIMESTAMP_HEADER = "X-Raylink-Timestamp"
#: how long a signed request stays valid, and its nonce remembered (``rest.signature.validity``'s default)
DEFAULT_SIGNATURE_VALIDITY_S = RestOptions.SIGNATURE_VALIDITY.default / 1000.0
#: the SHA-256 of the request's body (:func:`body_digest`), which the request's signature covers
DIGEST_HEADER = "X-Raylink-Content-SHA256"
#: the answer's HMAC (:func:`response_signature`)
SIGNATURE_HEADER = "X-Raylink-Signature"
#: the scheme of the request's ``Authorization`` header (:func:`request_signature`)
AUTH_SCHEME = "Raylink-HMAC-SHA256"
#: the option of ``raylink cluster start`` that lets the Dispatcher listen beyond this machine
INSECURE_BIND_FLAG = "--allow-insecure-rest-bind"


class InsecureBindError(RaylinkError, ValueError):
    """The Dispatcher was asked to listen on a non-loopback address without the explicit
    opt-in (:data:`INSECURE_BIND_FLAG`)."""


# -- the wire protocol's signatures (the client's and the Dispatcher's) --------------------------------
def _mac(token: str, *parts: bytes) -> str:
    return hmac.new(token.encode("utf-8"), b"\n".join(parts), hashlib.sha256).hexdigest()


def body_digest(body: bytes) -> str:
    """What a request's ``X-Raylink-Content-SHA256`` carries: the SHA-256 of its body (hex)."""
    return hashlib.sha256(body).hexdigest()


def request_signature(token: str, nonce: str, method: str, path: str, digest: str, *, timestamp: str) -> str:
    """What a request's ``Authorization`` carries: the HMAC-SHA256 under ``token`` of its nonce,
    timestamp (:data:`TIMESTAMP_HEADER`'s text), method, path (with the query) and body digest
    (:func:`body_digest`) -- checkable before the body is read, so a request without the token
    is refused before its body is taken."""
    return _mac(
        token,
        b"raylink-request-v2",
        nonce.encode("utf-8", "surrogateescape"),
        timestamp.encode("utf-8", "surrogateescape"),
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


def signing_timestamp() -> str:
    """The :data:`TIMESTAMP_HEADER` of a request signed now."""
    return str(time.time_ns() // 1_000_000)


#: methods a client may send again after a connection reset (they change nothing at the server)
IDEMPOTENT_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


class ReplayGuard:
    """The Dispatcher's memory of the signed requests it accepted, against replays: a request is
    accepted once, and only within ``validity_s`` of its timestamp (either way). A nonce is kept
    until its request's window has passed (a heap ordered by expiry, purged on every check), so
    memory holds the requests of one window at most. Thread-safe (one lock)."""

    def __init__(self, validity_s: float = DEFAULT_SIGNATURE_VALIDITY_S) -> None:
        if not validity_s > 0:
            raise ValueError(f"rest.signature.validity must be > 0, got {validity_s} s")
        self.validity_s = float(validity_s)
        self._expiry: dict[str, float] = {}
        self._heap: list[tuple[float, str]] = []
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._expiry)

    def check(self, nonce: str, timestamp: str, now: Optional[float] = None) -> Optional[str]:
        """None when a request with this (already verified) ``nonce`` and ``timestamp`` is fresh
        -- the nonce is then remembered -- else why it is refused (stale, future-dated, replayed,
        no timestamp)."""
        now = time.time() if now is None else now
        try:
            signed_at = int(timestamp) / 1000.0
        except ValueError:
            return f"the request carries no valid {TIMESTAMP_HEADER} (milliseconds since the epoch)"
        age = now - signed_at
        if age > self.validity_s:
            return (
                f"stale request: signed {age:.0f} s ago, beyond the {self.validity_s:.0f} s validity window "
                f"(rest.signature.validity)"
            )
        if -age > self.validity_s:
            return (
                f"future-dated request: signed {-age:.0f} s ahead of this server's clock, beyond the "
                f"{self.validity_s:.0f} s validity window (rest.signature.validity)"
            )
        with self._lock:
            while self._heap and self._heap[0][0] < now:
                _, old = heapq.heappop(self._heap)
                if self._expiry.get(old, now + 1) < now:
                    del self._expiry[old]
            if nonce in self._expiry:
                return "replayed request: this nonce was already used within the validity window"
            expiry = signed_at + self.validity_s
            self._expiry[nonce] = expiry
            heapq.heappush(self._heap, (expiry, nonce))
        return None


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
    """A session cluster's Dispatcher: its URL and bearer token; ``cafile``: the PEM certificate
    an ``https://`` Dispatcher is trusted by (its own, for a self-signed one), None for the
    system's trust store."""

    url: str
    token: str
    cafile: Optional[str] = None


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
    if endpoint.cafile is not None:  # an https:// Dispatcher's certificate, for drivers to trust
        recorded["cafile"] = endpoint.cafile
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
    return RestEndpoint(recorded["url"], recorded["token"], recorded.get("cafile"))


__all__ = [
    "AUTH_SCHEME",
    "DEFAULT_SIGNATURE_VALIDITY_S",
    "DIGEST_HEADER",
    "EXCEPTION_CONTENT_TYPE",
    "IDEMPOTENT_METHODS",
    "INSECURE_BIND_FLAG",
    "InsecureBindError",
    "MAX_POLL_S",
    "NONCE_HEADER",
    "PICKLE_CONTENT_TYPE",
    "ReplayGuard",
    "RestEndpoint",
    "SIGNATURE_HEADER",
    "TIMESTAMP_HEADER",
    "body_digest",
    "check_rest_bind_address",
    "endpoint_dir",
    "find_endpoint",
    "is_loopback",
    "remove_endpoint_file",
    "request_signature",
    "response_signature",
    "signature_matches",
    "signing_timestamp",
    "write_endpoint_file",
]
