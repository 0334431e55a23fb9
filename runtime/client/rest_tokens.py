"""Where a client finds the bearer token of a raylink REST server on this machine (no Flink
counterpart: Flink's REST API has no token).

Each REST server (a job's driver, the session cluster's Dispatcher) records its URL and token
in the per-user runtime folder (:mod:`raylink.runtime.runtime_dir`: ``rest/port-<port>.json``,
mode 0600 in a checked 0700 folder, replaced atomically) while it listens, and removes the file
when it stops. The CLI, the tests and any client of this user look a server's token up by its
URL (:func:`find_rest_token`, :func:`rest_auth_headers`); another local user cannot read the
file. The dashboard's address (:func:`dashboard_address`) carries the token in its fragment,
which browsers never send to a server.

Stateless apart from the file system; safe across threads and processes.
"""

from __future__ import annotations

import json
import logging
import os
from typing import Optional
from urllib.parse import urlsplit

from raylink.runtime.runtime_dir import (
    UnsafePathError,
    read_private_file,
    remove_private_file,
    runtime_dir,
    write_private_file,
)

LOG = logging.getLogger("raylink.rest")


def _port_of(url: str) -> int:
    parts = urlsplit(url)
    return parts.port or (443 if parts.scheme == "https" else 80)


def token_file(url: str) -> str:
    """The file recording the token of the server at ``url`` (its folder created and checked)."""
    return os.path.join(runtime_dir("rest"), f"port-{_port_of(url)}.json")


def record_rest_token(url: str, token: str) -> Optional[str]:
    """Record the token of the server at ``url``; the file's path, None when the runtime folder
    cannot be used (logged: the token is still in the printed dashboard address)."""
    try:
        path = token_file(url)
        write_private_file(path, json.dumps({"url": url, "token": token, "pid": os.getpid()}).encode("utf-8"))
    except (OSError, UnsafePathError) as exc:
        LOG.warning("raylink: the REST token of %s is not recorded in the runtime folder: %s", url, exc)
        return None
    return path


def forget_rest_token(url: str) -> None:
    """Remove the record of the server at ``url`` if it is this server's (same URL)."""
    try:
        path = token_file(url)
        if json.loads(read_private_file(path)).get("url") == url:
            remove_private_file(path)
    except (OSError, ValueError, UnsafePathError):
        pass


def find_rest_token(url: str) -> Optional[str]:
    """The token of this user's server at ``url`` (scheme, host and port as recorded), None when
    none is recorded or the record is for another server."""
    try:
        recorded = json.loads(read_private_file(token_file(url)))
    except (OSError, ValueError, UnsafePathError):
        return None
    mine, theirs = urlsplit(url), urlsplit(recorded.get("url", ""))
    if (mine.scheme, _port_of(url)) != (theirs.scheme, _port_of(theirs.geturl())):
        return None
    token = recorded.get("token")
    return token if isinstance(token, str) and token else None


def rest_auth_headers(url: str) -> dict:
    """``{"Authorization": "Bearer <token>"}`` for the server at ``url``, empty when unknown."""
    token = find_rest_token(url)
    return {"Authorization": f"Bearer {token}"} if token else {}


def dashboard_address(url: str, token: str, route: Optional[str] = None) -> str:
    """The dashboard's address with the token in its fragment (never sent to the server);
    ``route`` (e.g. ``/jobs/<jobid>``) is the page it opens."""
    fragment = f"token={token}" + (f"&next={route}" if route else "")
    return f"{url.rstrip('/')}/#{fragment}"


__all__ = [
    "dashboard_address",
    "find_rest_token",
    "forget_rest_token",
    "record_rest_token",
    "rest_auth_headers",
    "token_file",
]
