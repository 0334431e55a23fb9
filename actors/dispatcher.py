"""The session cluster's Dispatcher: jobs submitted over HTTP run here, their JobMasters too.

Flink's session cluster takes jobs through its ``Dispatcher`` behind the REST endpoint
(``WebMonitorEndpoint``: ``JobSubmitHandler``, ``JobExecutionResultHandler``, ...), so
a client needs no more than an HTTP connection. Here the Dispatcher is a **detached
named actor** (``raylink-dispatcher`` next to the session actor, pinned to the node of
the process that started it) serving an aiohttp application on that node (the bind
address is ``127.0.0.1`` unless asked otherwise). A driver that is not connected to Ray
(:mod:`raylink.runtime.client.rest_cluster_client`) posts its JobGraph and configuration,
pickled; the Dispatcher runs the job with a ``RayJobClient`` in this process (the same
JobMaster a connected driver runs in its own), leasing the session's warm
TaskExecutors, and answers the client's polls: status, collected records, the execution
result, metrics, cancel. A driver thus starts without importing or connecting to Ray.

Every request is signed with the session's token (random, written with the endpoint's
address to a file only the user who started the session can read): an HMAC of a fresh
nonce, a timestamp, the method, path and body digest (:func:`~raylink.runtime.client.rest_endpoint.request_signature`);
others get 401 before their body is read, a body that does not match its digest 400. A
request signed outside the validity window (``rest.signature.validity``, 5 minutes) or whose
nonce was already accepted within it (a replay) gets 401 naming why
(:class:`~raylink.runtime.client.rest_endpoint.ReplayGuard`). Every answer, a 401 too, is signed in turn (the HMAC of that nonce, the
status, content type and body), so the client knows it talks to this Dispatcher before
it unpickles anything; the token itself never crosses the wire. The endpoint listens on a
loopback address unless it serves TLS (``tls``: a PEM certificate and key; drivers trust that
certificate, recorded with the endpoint) or the caller opts in explicitly
(``allow_insecure_bind``: pickle over plain HTTP).

An ended job's entry is dropped :data:`FINISHED_JOB_GRACE_S` after the last request about
it once its client has read every collected record and the result, else
:data:`FINISHED_JOB_TTL_S` after it (idle time is counted in the reaper's rounds, not read
from a clock, so a paused machine does not age a job whose client is reading). A job whose
client stopped reading its collected records (none asked for in the job's
``client.heartbeat.timeout``, Flink's option, 180 s by default) is cancelled: its driver is
gone and its sink's bounded buffer would hold the job forever.

Beside that API the same server answers Flink's JSON REST API and serves the web dashboard
(:mod:`raylink.runtime.rest`: ``/jobs/overview``, ``/jobs/:jobid``, ..., ``/``) for the jobs
submitted here, under :mod:`raylink.runtime.rest.rest_security`'s rules (Host and Origin
allow-lists on every route, ``/v1/`` included; header and idle timeouts and a connection
limit): every route but the dashboard's page and ``/config`` needs a token derived from the
session token (``Authorization: Bearer <rest_api_token(token)>``; :func:`dashboard_url`
carries it in the address's fragment, and the session records it in the runtime folder); the
session token itself still never crosses the wire.

High availability (``high-availability.type`` other than none, from ``start_dispatcher``'s
``ha_settings``): every submitted program goes to the store's ``JobGraphStore`` (under
``<cluster-id>/session``) before it is deployed, each job's checkpoint ids and completed
checkpoints too (:mod:`raylink.runtime.job.high_availability`), and the actor's bound port is
recorded. Ray restarts a Dispatcher whose process died (``raylink.jobmaster.max-restarts``);
the new one serves on the same port and recovers every job of the store
(:func:`~raylink.actors.job_master_actor.start_job`: the old attempt's leased executors are
taken back and reset, each job restores its latest completed checkpoint). An ended job's
entries are removed; stopping the session removes them all.

Thread-safety: an asyncio actor; the handlers run on its event loop and hand every blocking
JobMaster call to a thread pool. The job table is only changed on the loop.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Optional

import cloudpickle
import ray
from aiohttp import web

from raylink.actors.job_master_actor import SubmittedProgram, start_job
from raylink.actors.ray_actors import TASK_EXECUTOR_NAMESPACE
from raylink.actors.ray_executor import RayJobClient
from raylink.core.configuration import Configuration
from raylink.core.job_status import JobStatus
from raylink.core.options import ClientOptions, HighAvailabilityOptions, read_option, validate_enumerated_values
from raylink.runtime.client.rest_endpoint import (
    AUTH_SCHEME,
    DEFAULT_SIGNATURE_VALIDITY_S,
    DIGEST_HEADER,
    EXCEPTION_CONTENT_TYPE,
    MAX_POLL_S,
    NONCE_HEADER,
    PICKLE_CONTENT_TYPE,
    SIGNATURE_HEADER,
    TIMESTAMP_HEADER,
    ReplayGuard,
    body_digest,
    check_rest_bind_address,
    is_loopback,
    request_signature,
    response_signature,
    signature_matches,
)
from raylink.runtime.client.rest_tokens import dashboard_address
from raylink.runtime.job.high_availability import HighAvailabilityServices, create_ha_services
from raylink.runtime.rest.rest_security import (
    AccessPolicy,
    ServerLimits,
    bound_port,
    route_table,
    runner_kwargs,
    security_middlewares,
    server_ssl_context,
    start_listening,
)
from raylink.runtime.rest.web_monitor_endpoint import add_rest_routes, rest_api_token
from raylink.state.savepoint_targets import SavepointTargetError, check_savepoint_target

#: the Dispatcher actor's name (in the session cluster's namespace)
DISPATCHER_NAME = "raylink-dispatcher"
#: how long an ended job is kept after the last request about it (its result taken / not yet)
FINISHED_JOB_GRACE_S = 60.0
FINISHED_JOB_TTL_S = 300.0
REAP_INTERVAL_S = 1.0


@dataclass
class _Job:
    client: Any
    heartbeat_timeout_s: float
    idle_ticks: int = 0  # reaper rounds since the last request about this job
    result_taken: bool = False  # the client has read the execution result (or the failure)
    ha_cleaned: bool = False  # its high-availability entries are removed (it ended)


def session_ha_services(settings: Optional[dict]) -> Optional[HighAvailabilityServices]:
    """The Dispatcher's high-availability services (its jobs under ``<cluster-id>/session``),
    None with ``high-availability.type: none``."""
    conf = Configuration()
    for key, value in (settings or {}).items():
        conf.set_string(key, value)
    services = create_ha_services(conf)
    if services is None:
        return None
    return HighAvailabilityServices(services.storage_dir, f"{services.cluster_id.strip('/')}/session")


def _pickled(value: Any, status: int = 200) -> web.Response:
    return web.Response(body=cloudpickle.dumps(value), status=status, content_type=PICKLE_CONTENT_TYPE)


_JOB_ID = re.compile("[0-9a-f]{32}")


def _error(exc: BaseException, status: int = 500) -> web.Response:
    """The exception itself (pickled) for the client to raise, its text when it does not pickle."""
    try:
        body = cloudpickle.dumps(exc)
    except Exception:  # noqa: BLE001 - an exception holding something that does not pickle
        body = cloudpickle.dumps(RuntimeError(f"{type(exc).__name__}: {exc}"))
    return web.Response(body=body, status=status, content_type=EXCEPTION_CONTENT_TYPE)


def _summary(client: Any) -> dict:
    """A job as the REST API lists it (Flink's job overview fields)."""
    return {"jobId": client.job_id, "jobName": client.job_name, "status": str(client.get_job_status())}


def _not_found(job_id: str) -> web.Response:
    return web.json_response({"errors": [f"job {job_id} is not known to this session cluster"]}, status=404)


@ray.remote(num_cpus=0)
class DispatcherActor:
    """The REST endpoint and the JobMasters of jobs submitted through it (see the module docstring)."""

    def __init__(
        self,
        token: str,
        signature_validity_s: float = DEFAULT_SIGNATURE_VALIDITY_S,
        serve: Optional[dict] = None,
        ha_settings: Optional[dict] = None,
    ) -> None:
        self._token = token
        self._replays = ReplayGuard(signature_validity_s)
        self._jobs: dict[str, _Job] = {}
        # job id -> whether a cancel came while its JobMaster starts (the submitter was interrupted
        # before it learned that the job runs: it cancels by the id it chose)
        self._starting: dict[str, bool] = {}
        self._pool = ThreadPoolExecutor(max_workers=64, thread_name_prefix="dispatcher")
        self._runner: Optional[web.AppRunner] = None
        self._reaper: Optional[asyncio.Task] = None
        self._web_monitor: Any = None
        self.url = ""
        # high availability: the jobs' programs, checkpoint counters and pointers in the store; Ray
        # restarts this actor when its process dies and the new one recovers them (``recover``)
        self._ha = session_ha_services(ha_settings)
        self._serve = dict(serve or {})  # start()'s arguments, for a restarted Dispatcher
        self.incarnation = 1 + int(bool(ray.get_runtime_context().was_current_actor_reconstructed))
        self.recovered_jobs: list[str] = []
        self._recovery: Optional[asyncio.Future] = None
        if self.incarnation > 1 and self._ha is not None:
            me = ray.get_runtime_context().current_actor
            threading.Thread(target=lambda: me.recover.remote(), daemon=True).start()  # runs after __init__

    async def recover(self) -> list[str]:
        """A restarted Dispatcher (Flink's Dispatcher regaining leadership): serve again on the
        address it had, and recover every job of the high-availability store -- the previous
        attempt's executors fenced, restored from each job's latest completed checkpoint.
        Returns the recovered job ids (once; later calls wait for and return the same)."""
        if self._ha is None:
            return []
        if self._recovery is None:
            self._recovery = asyncio.ensure_future(self._recover())
        return await asyncio.shield(self._recovery)

    async def _recover(self) -> list[str]:
        record = self._ha.get_record("dispatcher") or {}
        serve = dict(self._serve)
        serve["port"] = record.get("port", serve.get("port", 0))
        if self._runner is None:
            await self.start(**serve)
        for job_id in self._ha.get_job_graph_store().get_job_ids():
            if job_id in self._jobs:
                continue
            try:
                client = await self._blocking(start_job, b"", job_id, self._ha, True)
            except Exception as exc:  # noqa: BLE001 - the others are still recovered
                logging.getLogger("raylink").error("session cluster: job %s could not be recovered: %s", job_id, exc)
                continue
            timeout_s = client.configuration.get(ClientOptions.HEARTBEAT_TIMEOUT) / 1000.0
            self._jobs[job_id] = _Job(client, timeout_s)
            self.recovered_jobs.append(job_id)
        return list(self.recovered_jobs)

    def pid(self) -> int:
        """This Dispatcher's process id (failover tests kill it)."""
        return os.getpid()

    async def start(
        self, host: str, port: int, tls: Optional[tuple] = None, limits: Optional[ServerLimits] = None
    ) -> str:
        """Serve on ``host:port`` (0: a free port), over TLS when ``tls`` is ``(cert PEM, key PEM
        or None)``, holding connections as ``limits`` say (the ``rest.server.*`` options;
        their defaults when None); returns the endpoint's URL."""
        limits = limits or ServerLimits()
        ssl_context = server_ssl_context(*tls) if tls else None

        @web.middleware
        async def authenticate(request: web.Request, handler: Any) -> web.StreamResponse:
            if not request.path.startswith("/v1/"):  # Flink's REST API and the dashboard: their own checks
                return await handler(request)
            nonce = request.headers.get(NONCE_HEADER, "")
            timestamp = request.headers.get(TIMESTAMP_HEADER, "")
            digest = request.headers.get(DIGEST_HEADER, "")
            scheme, _, mac = request.headers.get("Authorization", "").partition(" ")
            expected = request_signature(
                self._token, nonce, request.method, request.raw_path, digest, timestamp=timestamp
            )
            if not nonce or scheme != AUTH_SCHEME or not signature_matches(expected, mac):
                response: web.Response = web.json_response({"errors": ["missing or wrong session token"]}, status=401)
            elif (stale := self._replays.check(nonce, timestamp)) is not None:  # only signed nonces are kept
                response = web.json_response({"errors": [stale]}, status=401)
            elif not signature_matches(body_digest(await request.read()), digest):  # read() is kept for the handler
                response = web.json_response({"errors": ["the body does not match its signed digest"]}, status=400)
            else:
                try:
                    response = await handler(request)
                except web.HTTPException as exc:  # no such route, ...: answered, and signed, as a response
                    response = web.Response(status=exc.status, text=exc.text)
            return self._signed(response, nonce)

        # Host / Origin allow-lists, the JSON API's bearer token, CORS: before the signature check
        # (rest_security; /v1/ is authenticated by its signatures instead of the bearer token)
        policy = AccessPolicy(rest_api_token(self._token), host, tls=ssl_context is not None, signed_prefix="/v1/")
        app = web.Application(middlewares=[*security_middlewares(policy), authenticate], client_max_size=1 << 30)
        app.add_routes(
            [
                web.get("/v1/overview", self._overview),
                web.post("/v1/jobs", self._submit),
                web.get("/v1/jobs/{job_id}", self._status),
                web.post("/v1/jobs/{job_id}/cancel", self._cancel),
                web.get("/v1/jobs/{job_id}/collected", self._collected),
                web.get("/v1/jobs/{job_id}/execution-result", self._result),
                web.get("/v1/jobs/{job_id}/metrics/{kind}", self._metrics),
                web.post("/v1/jobs/{job_id}/savepoints", self._savepoint),
            ]
        )
        # Flink's JSON REST API and the web dashboard beside the signed pickle API (its own
        # access rules: reads open on loopback, cancel / savepoints need the session token)
        self._web_monitor = add_rest_routes(app, self, self._blocking, rest_api_token(self._token), is_loopback(host))
        self._runner = web.AppRunner(app, **runner_kwargs(limits))
        await self._runner.setup()
        self._listener, self.guard = await start_listening(self._runner, host, port, limits, ssl_context)
        scheme = "https" if ssl_context is not None else "http"
        self.url = f"{scheme}://{'127.0.0.1' if host in ('0.0.0.0', '::') else host}:{bound_port(self._listener)}"
        self._reaper = asyncio.ensure_future(self._reap())
        if self._ha is not None:  # a restarted Dispatcher binds the same port (drivers keep their URL)
            await self._blocking(self._ha.put_record, "dispatcher", {"port": bound_port(self._listener)})
        return self.url

    def routes(self) -> list:
        """Every (method, canonical path) this server answers (for audits and tests)."""
        return route_table(self._runner.app) if self._runner is not None else []

    def _signed(self, response: web.Response, nonce: str) -> web.Response:
        """``response`` with its signature: the proof for the client that this Dispatcher answered."""
        body = response.body
        response.headers[SIGNATURE_HEADER] = response_signature(
            self._token, nonce, response.status, response.headers.get("Content-Type", ""), bytes(body or b"")
        )
        return response

    async def _blocking(self, fn: Any, *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self._pool, fn, *args)

    def _job(self, request: web.Request) -> Optional[_Job]:
        job = self._jobs.get(request.match_info["job_id"])
        if job is not None:
            job.idle_ticks = 0
        return job

    # -- the JobLookup of Flink's REST routes (raylink.runtime.rest) ---------------------------------
    def job_clients(self) -> list[Any]:
        return [job.client for job in self._jobs.values()]

    def job_client(self, job_id: str) -> Optional[Any]:
        job = self._jobs.get(job_id)
        return job.client if job is not None else None

    # -- handlers ----------------------------------------------------------------------------------
    def jobs(self) -> list[dict]:
        """The jobs submitted here that have not been dropped yet: id, name, status."""
        return [_summary(job.client) for job in self._jobs.values()]

    async def cancel_job(self, job_id: str) -> Optional[str]:
        """Cancel a job submitted here (``raylink cluster cancel``); its status, None if unknown."""
        job = self._jobs.get(job_id)
        if job is None:
            if job_id in self._starting:  # cancelled once started, before its submitter is answered
                self._starting[job_id] = True
                return str(JobStatus.CANCELLING)
            return None
        await self._blocking(job.client.cancel)
        return str(job.client.get_job_status())

    async def _overview(self, request: web.Request) -> web.Response:
        return web.json_response({"pid": os.getpid(), "url": self.url, "jobs": self.jobs()})

    async def _submit(self, request: web.Request) -> web.Response:
        body = await request.read()
        # the client chooses the job's id (Flink's JobGraph carries its JobID): a submitter
        # interrupted before the answer cancels the job by it
        job_id = request.query.get("jobId") or uuid.uuid4().hex
        if not _JOB_ID.fullmatch(job_id) or job_id in self._jobs or job_id in self._starting:
            return _error(ValueError(f"jobId {job_id!r}: not 32 hex digits, or a job here has it"), 400)
        self._starting[job_id] = False
        try:
            client = await self._blocking(self._start_job, body, job_id, self._ha)
        except Exception as exc:  # noqa: BLE001 - the client raises it as a direct submission would
            return _error(exc)
        finally:
            cancelled = self._starting.pop(job_id)
        timeout_s = client.configuration.get(ClientOptions.HEARTBEAT_TIMEOUT) / 1000.0
        self._jobs[client.job_id] = _Job(client, timeout_s)
        if cancelled:
            await self._blocking(client.cancel)
        return web.json_response({"jobId": client.job_id, "jobName": client.job_name}, status=201)

    @staticmethod
    def _start_job(body: bytes, job_id: str, ha: Optional[HighAvailabilityServices] = None) -> Any:
        if ha is not None:  # the program goes to the JobGraphStore before the job is deployed
            return start_job(body, job_id, ha, recovered=False)
        payload = cloudpickle.loads(body)
        validate_enumerated_values(payload["configuration"])  # as the driver did: no unknown value runs
        program = SubmittedProgram(payload["job_graph"], payload["configuration"], job_id)
        return RayJobClient(program, None).start()

    async def _status(self, request: web.Request) -> web.Response:
        job = self._job(request)
        if job is None:
            return _not_found(request.match_info["job_id"])
        return web.json_response(_summary(job.client))

    async def _cancel(self, request: web.Request) -> web.Response:
        job_id = request.match_info["job_id"]
        if self._job(request) is None and job_id not in self._starting:
            return _not_found(job_id)
        try:
            await self.cancel_job(job_id)
        except Exception as exc:  # noqa: BLE001 - the client raises it as a direct call would
            return _error(exc)
        return web.json_response({}, status=202)

    async def savepoint_job(self, job_id: str, directory: Optional[str], stop: Optional[str]) -> Optional[str]:
        """Trigger a savepoint of a job submitted here (``stop`` None) or stop it with one
        ("suspend" / "drain"); the savepoint's folder once taken (stopping: once the job
        ended), None if the job is unknown. Raises what the JobClient's future raised, and
        ``SavepointTargetError`` for a ``directory`` outside the job's savepoint roots
        (:mod:`raylink.state.savepoint_targets`)."""
        job = self._jobs.get(job_id)
        if job is None:
            return None
        job.idle_ticks = 0
        client = job.client
        # a caller of this API names a folder the job's process writes: only under its roots
        directory = check_savepoint_target(directory, client.configuration, "raylink savepoint")
        if stop is None:
            future = client.trigger_savepoint(directory)
        else:
            future = client.stop_with_savepoint(stop == "drain", directory)
        return await asyncio.wrap_future(future)

    async def _savepoint(self, request: web.Request) -> web.Response:
        args = cloudpickle.loads(await request.read())  # signed by the session's token (middleware)
        try:
            location = await self.savepoint_job(request.match_info["job_id"], args["directory"], args["stop"])
        except SavepointTargetError as exc:  # nothing written: the caller's mistake
            return _error(exc, 400)
        except Exception as exc:  # noqa: BLE001 - the client raises it as a direct call would
            return _error(exc)
        if location is None:
            return _not_found(request.match_info["job_id"])
        return web.json_response({"location": location})

    async def _collected(self, request: web.Request) -> web.Response:
        job = self._job(request)
        if job is None:
            return _not_found(request.match_info["job_id"])
        timeout = min(float(request.query.get("timeout", "0.5")), MAX_POLL_S)
        try:
            # the executors' pickled chunks as they are: the client unpickles them
            return _pickled(await self._blocking(job.client.fetch_collected_chunks, timeout))
        except Exception as exc:  # noqa: BLE001 - e.g. a task's last records it cannot unpickle
            return _error(exc)

    async def _result(self, request: web.Request) -> web.Response:
        job = self._job(request)
        if job is None:
            return _not_found(request.match_info["job_id"])
        timeout = min(float(request.query.get("timeout", str(MAX_POLL_S))), MAX_POLL_S)
        if not await self._blocking(job.client.wait, timeout):
            return web.json_response({"done": False}, status=202)
        job.result_taken = True
        try:
            return _pickled(job.client.get_job_execution_result(0))
        except Exception as exc:  # noqa: BLE001 - the job failed or was cancelled: its exception
            return _error(exc)

    async def _metrics(self, request: web.Request) -> web.Response:
        job = self._job(request)
        if job is None:
            return _not_found(request.match_info["job_id"])
        getter = {
            "subtasks": job.client.get_metrics,
            "vertices": job.client.get_vertex_metrics,
            "checkpoints": job.client.get_checkpoint_stats,
        }.get(request.match_info["kind"])
        if getter is None:
            return web.json_response({"errors": ["metrics kinds: subtasks, vertices, checkpoints"]}, status=404)
        return _pickled(await self._blocking(getter))

    # -- housekeeping ------------------------------------------------------------------------------
    async def _reap(self) -> None:
        """Drop ended jobs nobody asks about any more; cancel a job whose collecting client went away."""
        while True:
            await asyncio.sleep(REAP_INTERVAL_S)
            for job_id, job in list(self._jobs.items()):
                # idle time in reaper rounds, not clock readings: a clock that jumps (a paused
                # VM) must not make a job whose client is reading look abandoned
                job.idle_ticks += 1
                idle_s = job.idle_ticks * REAP_INTERVAL_S
                client = job.client
                if JobStatus(client.get_job_status()).is_globally_terminal_state():
                    if self._ha is not None and not job.ha_cleaned and client.wait(0):
                        job.ha_cleaned = True  # nothing to recover any more
                        await self._blocking(self._ha.cleanup_job_data, job_id)
                    # a client still reading the last collected records keeps asking (idle 0)
                    done_with = job.result_taken and not client.collected_unread
                    if idle_s > (FINISHED_JOB_GRACE_S if done_with else FINISHED_JOB_TTL_S):
                        del self._jobs[job_id]
                        self._web_monitor.forget(job_id)
                elif client.collect_sinks_open and idle_s > job.heartbeat_timeout_s:
                    try:
                        await self._blocking(client.cancel)
                    except Exception:  # noqa: BLE001 - it ended meanwhile; keep reaping the others
                        pass

    async def shutdown(self) -> int:
        """Cancel every running job and stop serving; returns how many jobs were cancelled."""
        running = [
            job.client
            for job in self._jobs.values()
            if not JobStatus(job.client.get_job_status()).is_globally_terminal_state()
        ]
        for client in running:
            try:
                await self._blocking(client.cancel)
            except Exception:  # noqa: BLE001 - it ended meanwhile
                pass
        await asyncio.gather(*[self._blocking(client.wait, 10.0) for client in running])
        if self._ha is not None:  # a stopped session recovers nothing
            for job_id in list(self._jobs):
                await self._blocking(self._ha.cleanup_job_data, job_id)
            await self._blocking(self._ha.remove_record, "dispatcher")
        if self._reaper is not None:
            self._reaper.cancel()
        if getattr(self, "_listener", None) is not None:
            self._listener.close()
        if self._runner is not None:
            await self._runner.cleanup()
        return len(running)


def start_dispatcher(
    token: str,
    host: str = "127.0.0.1",
    port: int = 0,
    allow_insecure_bind: bool = False,
    signature_validity_s: float = DEFAULT_SIGNATURE_VALIDITY_S,
    tls: Optional[tuple] = None,
    limits: Optional[ServerLimits] = None,
    ha_settings: Optional[dict] = None,
) -> tuple[Any, str]:
    """Start the Dispatcher on this driver's node; returns its handle and URL. A ``host`` that
    is not a loopback address raises ``InsecureBindError`` unless ``tls`` (``(cert PEM, key PEM
    or None)``, files on this node: the Dispatcher serves HTTPS) or ``allow_insecure_bind``;
    ``signature_validity_s``: how long a signed request stays valid (``rest.signature.validity``);
    ``limits``: its header and idle timeouts and connection limit (``ServerLimits.from_configuration``
    of the ``rest.server.*`` options; their defaults when None); ``ha_settings``: the
    ``high-availability.*`` options (with a type other than none Ray restarts the Dispatcher,
    ``raylink.jobmaster.max-restarts`` times, and it recovers its jobs)."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    check_rest_bind_address(host, allow_insecure_bind or bool(tls))
    if tls:
        server_ssl_context(*tls)  # unreadable or mismatched files fail here, naming them

    node = ray.get_runtime_context().get_node_id()
    ha = session_ha_services(ha_settings)
    conf = Configuration()
    for key, value in (ha_settings or {}).items():
        conf.set_string(key, value)
    serve = {"host": host, "port": port, "tls": tls, "limits": limits}
    handle = DispatcherActor.options(
        name=DISPATCHER_NAME,
        namespace=TASK_EXECUTOR_NAMESPACE,
        lifetime="detached",
        max_concurrency=1000,
        max_restarts=read_option(conf, HighAvailabilityOptions.JOB_MASTER_MAX_RESTARTS) if ha is not None else 0,
        max_task_retries=-1 if ha is not None else 0,  # calls in flight wait for the restarted Dispatcher
        # its JobMasters' blocking Ray calls run on worker threads, never on the event loop
        runtime_env={"env_vars": {"RAY_WARN_BLOCKING_GET_INSIDE_ASYNC": "0"}},
        scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False),
    ).remote(token, signature_validity_s, serve, ha_settings)
    try:
        url = ray.get(handle.start.remote(host, port, tls, limits))
    except Exception:
        ray.kill(handle, no_restart=True)
        raise
    logging.getLogger("raylink.rest").info("raylink: session cluster web dashboard at %s", dashboard_url(url, token))
    return handle, url


def dashboard_url(url: str, token: str) -> str:
    """The address that opens the session's dashboard: it carries the JSON API's token
    (:func:`rest_api_token` of the session's ``token``, never the session token itself) in its
    fragment, which the browser never sends; the page keeps it for its requests (no cookie)."""
    return dashboard_address(url, rest_api_token(token))


def find_dispatcher() -> Optional[Any]:
    """The running Dispatcher's actor handle on the connected Ray, else None."""
    try:
        return ray.get_actor(DISPATCHER_NAME, namespace=TASK_EXECUTOR_NAMESPACE)
    except ValueError:
        return None


def stop_dispatcher() -> Optional[int]:
    """Cancel the Dispatcher's running jobs and kill it; None when none was running."""
    handle = find_dispatcher()
    if handle is None:
        return None
    try:
        cancelled = ray.get(handle.shutdown.remote(), timeout=60)
    except Exception:  # noqa: BLE001 - it died: nothing left to cancel
        cancelled = 0
    ray.kill(handle, no_restart=True)
    return cancelled


def submitted_jobs() -> list:
    """The jobs submitted to the running Dispatcher over HTTP (empty when none runs)."""
    handle = find_dispatcher()
    return ray.get(handle.jobs.remote()) if handle is not None else []


def cancel_submitted_job(job_id: str) -> Optional[str]:
    """Cancel job ``job_id`` submitted to the Dispatcher over HTTP; its status, None when the
    Dispatcher does not know it (or none runs)."""
    handle = find_dispatcher()
    status = ray.get(handle.cancel_job.remote(job_id)) if handle is not None else None
    if status is None:  # a detached (or highly available) job's JobMaster actor
        from raylink.actors.job_master_actor import find_job

        client = find_job(job_id)
        if client is not None:
            client.cancel()
            client.wait(30)
            status = str(client.get_job_status())
    return status


def savepoint_submitted_job(job_id: str, directory: Optional[str], stop: Optional[str] = None) -> Optional[str]:
    """A savepoint of job ``job_id`` submitted to the Dispatcher over HTTP (``stop``: end the
    job with it, "suspend" or "drain"): its folder, None when the Dispatcher does not know the
    job (or none runs)."""
    handle = find_dispatcher()
    location = ray.get(handle.savepoint_job.remote(job_id, directory, stop)) if handle is not None else None
    if location is None:  # a detached (or highly available) job's JobMaster actor
        from raylink.actors.job_master_actor import find_job

        client = find_job(job_id)
        if client is not None:
            future = (
                client.trigger_savepoint(directory)
                if stop is None
                else client.stop_with_savepoint(stop == "drain", directory)
            )
            location = future.result()
    return location


__all__ = [
    "DISPATCHER_NAME",
    "DispatcherActor",
    "SubmittedProgram",
    "cancel_submitted_job",
    "dashboard_url",
    "savepoint_submitted_job",
    "find_dispatcher",
    "start_dispatcher",
    "stop_dispatcher",
    "submitted_jobs",
]
