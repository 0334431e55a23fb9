"""Exit codes, error reporting, cluster addresses and auth tokens shared by the sub-commands.

Plain functions over the environment and sockets; no Ray. Not thread-safe (a command line
runs once per process).
"""

from __future__ import annotations

import os
import socket
import sys
from typing import Optional
from urllib.parse import urlparse

from raylink.errors import RaylinkError

EXIT_OK = 0
EXIT_JOB_FAILED = 1  # the job (or its script) failed
EXIT_USAGE = 2  # bad arguments, missing file, bad configuration
EXIT_UNREACHABLE = 3  # the Ray cluster / dashboard cannot be reached
EXIT_STOPPED = 4  # the job was cancelled / stopped
EXIT_NO_SUCH_JOB = 5  # status / logs / cancel of an unknown job

EXIT_CODES_HELP = """exit codes:
  0  success            1  the job failed (cause printed)
  2  usage error, missing job file, bad configuration
  3  Ray cluster / dashboard unreachable   4  the job was cancelled (stopped)
  5  no such job"""

DEFAULT_DASHBOARD = "http://127.0.0.1:8265"
CONNECT_TIMEOUT_S = 5.0


class CliError(RaylinkError):
    """Ends the sub-command with ``message`` on stderr and ``code``."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def err(message: str) -> None:
    sys.stderr.write(message + "\n")
    sys.stderr.flush()


def reject_extra(args, command: str) -> None:
    """Sub-commands without job arguments: leftover options are an error, not ignored."""
    extra = getattr(args, "args", None) or []
    if extra:
        raise CliError(EXIT_USAGE, f"raylink {command}: unrecognized arguments: {' '.join(extra)}")


def check_tcp(host: str, port: int, what: str) -> None:
    try:
        with socket.create_connection((host, port), timeout=CONNECT_TIMEOUT_S):
            pass
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise CliError(EXIT_UNREACHABLE, f"raylink: cannot reach {what} at {host}:{port}: {reason}") from None


def dashboard_address(address: Optional[str]) -> str:
    """The dashboard (Job Submission API) address: ``--address``, $RAY_API_SERVER_ADDRESS, an
    http $RAY_ADDRESS, else ``http://127.0.0.1:8265``."""
    env_ray = os.environ.get("RAY_ADDRESS", "")
    addr = (
        address
        or os.environ.get("RAY_API_SERVER_ADDRESS")
        or (env_ray if env_ray.startswith(("http://", "https://")) else "")
        or DEFAULT_DASHBOARD
    )
    if addr.startswith("ray://"):
        raise CliError(
            EXIT_USAGE,
            f"raylink: {addr} is a Ray Client address; jobs go through the dashboard: --address http://HEAD:8265",
        )
    if "://" not in addr:
        addr = "http://" + addr
    return addr.rstrip("/")


def check_dashboard(address: str) -> None:
    parsed = urlparse(address)
    if not parsed.hostname:
        raise CliError(EXIT_USAGE, f"raylink: bad dashboard address {address!r} (expected http://HEAD:8265)")
    port = parsed.port or (443 if parsed.scheme == "https" else 80)
    check_tcp(parsed.hostname, port, "the Ray dashboard")


def check_ray_address(address: str) -> None:
    """``raylink run --address``: a GCS address ``HOST:PORT``, ``ray://HOST:PORT`` or ``auto``."""
    if address in ("auto", "local"):
        return
    if address.startswith(("http://", "https://")):
        raise CliError(
            EXIT_USAGE,
            f"raylink run: {address} is a dashboard address; give the Ray address "
            f"(HEAD:6379 or ray://HEAD:10001), or use `raylink submit --address {address}`",
        )
    parsed = urlparse(address if "://" in address else "ray://" + address)
    if not parsed.hostname or parsed.port is None:
        raise CliError(EXIT_USAGE, f"raylink run: bad Ray address {address!r} (expected HOST:PORT or ray://HOST:PORT)")
    check_tcp(parsed.hostname, parsed.port, "the Ray cluster")


LOOPBACK = ("127.0.0.1", "localhost", "::1")


def auth_token(host: Optional[str]) -> str:
    """The token for Ray's token authentication, following Ray's rules on when to use one.

    An explicit $RAY_AUTH_TOKEN or $RAY_AUTH_TOKEN_PATH is used for any cluster; the local
    ~/.ray/auth_token only with RAY_AUTH_MODE=token or for a cluster on this machine (Ray
    itself enables auth for a local cluster it finds automatically), so a local token is
    never sent to a remote address by accident. RAY_AUTH_MODE=disabled sends none.
    """
    mode = os.environ.get("RAY_AUTH_MODE", "").lower()
    if mode == "disabled":
        return ""
    token = os.environ.get("RAY_AUTH_TOKEN", "").strip()
    if token:
        return token
    path = os.environ.get("RAY_AUTH_TOKEN_PATH")
    if not path and (mode == "token" or host in LOOPBACK):
        path = os.path.join(os.path.expanduser("~"), ".ray", "auth_token")
    if not path:
        return ""
    try:
        with open(path, encoding="utf-8") as fh:
            return fh.read().strip()
    except OSError:
        return ""


def auth_headers(address: str) -> dict:
    token = auth_token(urlparse(address).hostname)
    return {"Authorization": f"Bearer {token}"} if token else {}


def enable_auth_for(address: str) -> None:
    """``raylink run --address``: Ray never enables token auth for an explicit address; do it
    when a token applies (see :func:`auth_token`)."""
    if "RAY_AUTH_MODE" in os.environ:
        return
    parsed = urlparse(address if "://" in address else "ray://" + address)
    host = parsed.hostname if address not in ("auto", "local") else "127.0.0.1"
    if auth_token(host):
        os.environ["RAY_AUTH_MODE"] = "token"
