"""A Ray head on this machine, for ``raylink cluster`` and the benchmarks: find the one running,
start one (``ray start --head --block`` in the background), stop the one started; and
:func:`ray_in_reach`, whether a job of this process would find a Ray to run on (answered
without importing Ray, so a program that runs in-process never loads it).

:func:`start_ray_head` is the one launch of a local Ray head both use: its own session (it
outlives the starting command), raylink's Ray system config, no dashboard unless asked; it
returns once the head's GCS accepts connections. :func:`stop_ray_head` ends it and, as
``ray stop`` does, drops Ray's address file if it still names that Ray (a later
``ray.init()`` on this machine would otherwise try the stopped cluster for minutes).
Not thread-safe (one start or stop at a time).
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import signal
import socket
import subprocess
import sys
import time
from typing import IO, Any, Iterator, Optional

from raylink.errors import RaylinkError

RAY_START_TIMEOUT_S = 60.0
#: Ray's single-node switch, read by every Ray process at import: off ("0"), Ray's node address
#: is the loopback address, so a Ray started so listens on loopback only (GCS, raylet, object
#: manager, workers, agents, dashboard), and ``127.0.0.1`` in an address stays loopback instead
#: of being replaced by the machine's address
RAY_SINGLE_NODE_ENV_VAR = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"
RAY_STOP_TIMEOUT_S = 30.0


class RayStartError(RaylinkError, RuntimeError):
    """The local Ray head did not start; the message names its log."""


def listening(address: str) -> bool:
    """True when something accepts connections at ``host:port``."""
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=1.0):
            return True
    except (OSError, ValueError):
        return False


def local_ray_address() -> Optional[str]:
    """The address of a Ray running on this machine (``ray start``'s address file), None when
    there is none or it does not answer (a stopped Ray's address file stays behind). No
    connection is made."""
    from ray._private.services import canonicalize_bootstrap_address

    try:
        found = canonicalize_bootstrap_address("auto")
    except ConnectionError:
        return None
    return found if found is not None and listening(found) else None


def _ray_address_file() -> str:
    """Ray's file naming the cluster ``ray start`` started on this machine (Ray's own rule for
    its temp folder: ``RAY_TMPDIR``, else ``TMPDIR``, else ``/tmp``)."""
    temp = os.environ.get("RAY_TMPDIR") or os.environ.get("TMPDIR") or "/tmp"
    return os.path.join(temp, "ray", "ray_current_cluster")


def ray_in_reach() -> Optional[str]:
    """Why a job of this process would run on Ray, or None when nothing points to a Ray: no
    ``RAY_ADDRESS``, Ray not connected in this process, no live Ray named by Ray's address file
    on this machine. Imports no Ray."""
    address = os.environ.get("RAY_ADDRESS", "").strip()
    if address:
        return f"RAY_ADDRESS={address}"
    ray_module = sys.modules.get("ray")
    if ray_module is not None and getattr(ray_module, "is_initialized", lambda: False)():
        return "this process is connected to Ray"
    recorded = recorded_ray_address()
    return None if recorded is None else f"a Ray cluster runs on this machine at {recorded}"


def on_loopback(address: Optional[str]) -> bool:
    """True when ``ray.init(address)`` starts a Ray of its own (``local``; no address and none
    running here) or joins one at a loopback address: both are kept on loopback
    (:func:`single_node_ray`)."""
    if address == "local":
        return True
    if not address or address == "auto":
        recorded = recorded_ray_address()
        if recorded is None:
            return address != "auto"
        address = recorded
    if "://" in address:
        return False
    host = address.rpartition(":")[0].strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@contextlib.contextmanager
def single_node_ray(enabled: bool = True) -> Iterator[None]:
    """Around ``ray.init``: Ray's single-node switch (:data:`RAY_SINGLE_NODE_ENV_VAR`) for this
    process and the Ray processes it starts, unless the environment sets it already."""
    if not enabled or RAY_SINGLE_NODE_ENV_VAR in os.environ:
        yield
        return
    from ray._private import ray_constants

    os.environ[RAY_SINGLE_NODE_ENV_VAR] = "0"
    ray_constants.ENABLE_RAY_CLUSTER = False
    try:
        yield
    finally:
        os.environ.pop(RAY_SINGLE_NODE_ENV_VAR, None)
        ray_constants.ENABLE_RAY_CLUSTER = True


def recorded_ray_address() -> Optional[str]:
    """The address in Ray's address file on this machine when a Ray answers there, else None
    (:func:`local_ray_address` without importing Ray)."""
    try:
        with open(_ray_address_file(), encoding="utf-8") as fh:
            recorded = fh.read().strip()
    except OSError:
        return None
    if recorded and ":" in recorded and "://" not in recorded and listening(recorded):
        return recorded
    return None


def free_port() -> int:
    """A TCP port free on the loopback interface now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_ray_head(
    log: IO[Any],
    port: Optional[int] = None,
    temp_dir: Optional[str] = None,
    timeout_s: float = RAY_START_TIMEOUT_S,
    settle_s: float = 0.0,
) -> "tuple[subprocess.Popen, str]":
    """``ray start --head --block`` in the background, its own session (so it outlives this
    process), with raylink's system config, its output to ``log``; on ``port`` (default: a free
    one) and under ``temp_dir`` (default: Ray's). Returns the process and the head's address
    once its GCS accepts connections (then waits ``settle_s`` more: the raylet registers after
    the GCS listens); ``RayStartError`` when it exits or does not listen within ``timeout_s``."""
    from raylink.actors.ray_transport import RAY_SYSTEM_CONFIG

    port = free_port() if port is None else port
    ray_cli = os.path.join(os.path.dirname(sys.executable), "ray")
    argv = [ray_cli, "start", "--head", "--block", f"--port={port}"]
    if temp_dir is not None:
        argv.append(f"--temp-dir={temp_dir}")
    argv += ["--include-dashboard=false", f"--system-config={json.dumps(RAY_SYSTEM_CONFIG)}"]
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RayStartError(f"`ray start` exited with {proc.returncode}; see {log.name}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                time.sleep(settle_s)
                return proc, f"127.0.0.1:{port}"
        except OSError:
            time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGTERM)
    raise RayStartError(f"the local Ray did not start within {timeout_s:.0f} s; see {log.name}")


def stop_ray_head(pid: int, address: str, timeout_s: float = RAY_STOP_TIMEOUT_S) -> bool:
    """End the ``ray start --block`` of process ``pid`` (it stops its Ray) and wait for it (killed
    after ``timeout_s``); then drop Ray's address file if it still names ``address``. False when
    that process was gone already."""
    import psutil
    from ray._common.utils import get_ray_address_file

    try:
        group = psutil.Process(pid)
        os.killpg(pid, signal.SIGTERM)
    except (ProcessLookupError, psutil.NoSuchProcess):
        return False
    try:
        group.wait(timeout_s)
    except psutil.TimeoutExpired:
        os.killpg(pid, signal.SIGKILL)
    path = get_ray_address_file(None)
    try:
        with open(path, encoding="utf-8") as fh:
            stale = fh.read().strip() == address
        if stale:
            os.remove(path)
    except OSError:
        pass
    return True


__all__ = [
    "RAY_START_TIMEOUT_S",
    "RAY_STOP_TIMEOUT_S",
    "RayStartError",
    "free_port",
    "listening",
    "local_ray_address",
    "ray_in_reach",
    "recorded_ray_address",
    "start_ray_head",
    "stop_ray_head",
]
