"""Starting and stopping a session cluster: its pool of warm TaskExecutors and its Dispatcher.

Flink's ``SessionClusterEntrypoint``: it brings up the ResourceManager side (here the pool,
:class:`~raylink.actors.session_cluster.SessionClusterActor`) and the Dispatcher behind its
REST endpoint (:class:`~raylink.actors.dispatcher.DispatcherActor`, on this node), and
records the endpoint for drivers on this machine
(:func:`~raylink.runtime.client.rest_endpoint.write_endpoint_file`). ``raylink cluster
start / stop / status`` and tests call these; they need a connected Ray. Not thread-safe
(one start or stop at a time per Ray cluster).
"""

from __future__ import annotations

import os
import secrets
from typing import Any, Optional

import ray

from raylink.actors.dispatcher import start_dispatcher, stop_dispatcher
from raylink.actors.job_master_actor import ha_settings_of
from raylink.actors.session_cluster import SESSION_NAME, SESSION_NAMESPACE, SessionClusterActor, find_session
from raylink.core.configuration import Configuration
from raylink.runtime.client.rest_endpoint import (
    DEFAULT_SIGNATURE_VALIDITY_S,
    RestEndpoint,
    check_rest_bind_address,
    remove_endpoint_file,
    write_endpoint_file,
)
from raylink.runtime.client.rest_tokens import forget_rest_token, record_rest_token
from raylink.runtime.rest.rest_security import ServerLimits
from raylink.runtime.rest.web_monitor_endpoint import rest_api_token


def start_session(
    executors: int = 0,
    pool_size: int = 16,
    info: Optional[dict] = None,
    runtime_env: Optional[dict] = None,
    rest_bind_address: Optional[str] = "127.0.0.1",
    rest_port: int = 0,
    allow_insecure_rest_bind: bool = False,
    signature_validity_s: float = DEFAULT_SIGNATURE_VALIDITY_S,
    rest_tls: Optional[tuple] = None,
    rest_limits: Optional[ServerLimits] = None,
    ha_settings: Optional[dict] = None,
) -> Any:
    """Start the session cluster (a detached named actor) with ``executors`` warm TaskExecutors
    and, unless ``rest_bind_address`` is None, its Dispatcher (:mod:`raylink.actors.dispatcher`)
    on this node, recorded for drivers on this machine; raises ``RuntimeError`` when a session
    is already running, ``InsecureBindError`` for a non-loopback ``rest_bind_address`` without
    ``rest_tls`` (``(certificate PEM, key PEM or None)``: the Dispatcher serves HTTPS, and
    drivers trust that certificate) or ``allow_insecure_rest_bind`` (pickle over plain HTTP).
    ``signature_validity_s``: how long a signed request to the Dispatcher stays valid
    (``rest.signature.validity``). ``rest_limits``: the Dispatcher's header and idle timeouts and
    connection limit (unset: ``rest.server.*`` as ``RAYLINK_CONF`` sets them, else their defaults).
    ``ha_settings``: the Dispatcher's ``high-availability.*`` options (unset: as ``RAYLINK_CONF``
    sets them); with a type other than none Ray restarts a Dispatcher whose process died and it
    recovers its jobs from the store (:mod:`raylink.actors.dispatcher`)."""
    if rest_bind_address is not None:
        check_rest_bind_address(rest_bind_address, allow_insecure_rest_bind or bool(rest_tls))
    if find_session() is not None:
        raise RuntimeError(
            f"a session cluster is already running on this Ray cluster "
            f"(actor {SESSION_NAME!r} in namespace {SESSION_NAMESPACE!r})"
        )
    info = dict(info or {})
    gcs_address = ray.get_runtime_context().gcs_address
    stop_dispatcher()  # one a session that died left behind
    session = None
    try:
        if rest_bind_address is not None:
            token = secrets.token_urlsafe(32)
            environment = Configuration.from_environment()
            limits = rest_limits or ServerLimits.from_configuration(environment)
            _, url = start_dispatcher(
                token,
                rest_bind_address,
                rest_port,
                allow_insecure_rest_bind,
                signature_validity_s,
                rest_tls,
                limits,
                ha_settings if ha_settings is not None else ha_settings_of(environment),
            )
            info["restUrl"] = url
        session = SessionClusterActor.options(
            name=SESSION_NAME, namespace=SESSION_NAMESPACE, lifetime="detached"
        ).remote(max(pool_size, executors), info)
        ray.get(session.prewarm.remote(executors, runtime_env))
    except BaseException:
        stop_dispatcher()
        if session is not None:
            ray.kill(session, no_restart=True)
        raise
    if rest_bind_address is not None:
        cafile = os.path.abspath(rest_tls[0]) if rest_tls else None  # drivers trust the Dispatcher's certificate
        write_endpoint_file(gcs_address, RestEndpoint(url, token, cafile))
        record_rest_token(url, rest_api_token(token))  # the JSON API's bearer token, for the CLI and browsers
    else:
        remove_endpoint_file(gcs_address)
    return session


def stop_session(session: Optional[Any] = None) -> Optional[dict]:
    """Cancel the Dispatcher's jobs and stop it, kill the session cluster's executors and the
    session actor; returns the session's last status (None when none was running)."""
    session = session or find_session()
    rest_url = ray.get(session.status.remote()).get("restUrl") if session is not None else None
    cancelled = stop_dispatcher()
    remove_endpoint_file(ray.get_runtime_context().gcs_address)
    if rest_url:
        forget_rest_token(rest_url)
    if session is None:
        return None
    status = ray.get(session.status.remote())
    status["killed"] = ray.get(session.shutdown.remote())
    status["cancelledJobs"] = cancelled or 0
    ray.kill(session, no_restart=True)
    return status


def session_status(session: Optional[Any] = None) -> Optional[dict]:
    """The status of ``session`` (default: the running session cluster), else None."""
    session = session or find_session()
    return None if session is None else ray.get(session.status.remote())


__all__ = ["session_status", "start_session", "stop_session"]
