"""Flink's REST API and web dashboard as aiohttp routes: Flink's ``WebMonitorEndpoint``.

:func:`add_rest_routes` adds to an aiohttp application the routes of Flink's REST API (JSON
bodies from :mod:`raylink.runtime.rest.job_views`) and the dashboard's static files
(``/`` and ``/static/...``, from this package's ``static/`` folder). Both the per-job driver
(:mod:`raylink.runtime.rest.rest_server`) and the session cluster's Dispatcher
(:mod:`raylink.actors.dispatcher`) serve them; they differ only in the :class:`JobLookup`
they pass (which JobClients exist) and in how a blocking call leaves the event loop.

**Who may do what.** Access is checked before any handler runs by the server's middlewares
(:mod:`raylink.runtime.rest.rest_security`: the bearer token on every route but the
dashboard's page and ``/config``, Host and Origin allow-lists, no cookie). The handlers check
the token again (``Authorization: Bearer <token>`` only; a session cluster's is
:func:`rest_api_token`) so routes added here without that middleware are not open.

Thread-safety: the handlers run on the application's event loop; every call into a JobClient
(which may block on Ray) goes through the ``run_blocking`` coroutine function given.
"""

from __future__ import annotations

import hmac
import itertools
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Awaitable, Callable, Optional, Protocol
from urllib.parse import urlsplit

from aiohttp import web

from raylink.runtime import metrics
from raylink.runtime.client.rest_endpoint import is_loopback
from raylink.runtime.rest import job_views
from raylink.runtime.rest.job_views import MetricsSnapshot
from raylink.state.savepoint_targets import SavepointTargetError, check_savepoint_target

#: the dashboard's files (package data)
STATIC_DIR = Path(__file__).resolve().parent / "static"
#: how long one reading of a job's metrics serves the requests after it (Flink's MetricFetcher caches too)
METRICS_TTL_S = 0.5

RunBlocking = Callable[..., Awaitable[Any]]


async def _json_object(request: web.Request, shape: str, flags: set) -> dict:
    """The request's body as a JSON object (``{}`` when there is none); 400 naming ``shape`` when
    it is not JSON in its declared charset, not an object, or one of ``flags`` is not a boolean."""

    def bad(why: str) -> web.HTTPBadRequest:
        return web.HTTPBadRequest(
            text=json.dumps({"errors": [f"{request.method} {request.path}: {why}; expected a JSON object {shape}"]}),
            content_type="application/json",
        )

    if not request.can_read_body:
        return {}
    raw = await request.read()
    if not raw.strip():
        return {}
    charset = request.charset or "utf-8"
    try:
        body = json.loads(raw.decode(charset))
    except LookupError:
        raise bad(f"the body's charset {charset!r} is unknown") from None
    except ValueError:  # UnicodeDecodeError included
        raise bad(f"the body is not JSON in {charset}") from None
    if not isinstance(body, dict):
        raise bad(f"the body is a JSON {type(body).__name__}")
    for flag in flags:
        if not isinstance(body.get(flag, False), bool):
            raise bad(f"{flag!r} is {body[flag]!r}, not a boolean")
    return body


class JobLookup(Protocol):
    """The JobClients an endpoint shows (Flink's ``DispatcherGateway`` as the handlers use it)."""

    def job_clients(self) -> list[Any]:
        """Every job known here, running or ended."""

    def job_client(self, job_id: str) -> Optional[Any]:
        """The job ``job_id``'s client, None if unknown."""


@dataclass
class _JobCache:
    snapshot: Optional[MetricsSnapshot] = None
    read_at: float = 0.0


def _savepoint_target(client: Any, directory: Any, route: str) -> Optional[str]:
    """``directory`` when the job may write a savepoint there (under its configured roots, an
    allowed scheme: :func:`raylink.state.savepoint_targets.check_savepoint_target`), else 400."""
    if directory is not None and not isinstance(directory, str):
        raise web.HTTPBadRequest(
            text=json.dumps({"errors": [f"{route}: the target directory must be a string"]}),
            content_type="application/json",
        )
    try:
        return check_savepoint_target(directory, client.configuration, route)
    except SavepointTargetError as exc:
        raise web.HTTPBadRequest(text=json.dumps({"errors": [str(exc)]}), content_type="application/json") from None


def _bad_request(message: str) -> web.HTTPBadRequest:
    return web.HTTPBadRequest(text=json.dumps({"errors": [message]}), content_type="application/json")


@dataclass
class _Savepoint:
    future: Any
    job_id: str


def rest_api_token(session_token: str) -> str:
    """The bearer token of a session cluster's JSON API, derived from the session's token (an
    HMAC of a fixed label): it may cross the wire and sit in a browser's session storage while the
    session token, which signs the pickle API, never does."""
    return hmac.new(session_token.encode(), b"raylink rest api", "sha256").hexdigest()


class WebMonitorEndpoint:
    """The handlers (Flink's ``*Handler`` classes as methods) over a :class:`JobLookup`."""

    def __init__(
        self, lookup: JobLookup, run_blocking: RunBlocking, token: Optional[str] = None, loopback: bool = True
    ) -> None:
        self.lookup = lookup
        self.run_blocking = run_blocking
        self.token = token
        self.reads_need_token = token is not None  # ``loopback`` no longer opens reads
        self._cache: dict[str, _JobCache] = {}
        self._savepoints: dict[str, _Savepoint] = {}
        self._trigger_ids = itertools.count(1)

    # -- routes ------------------------------------------------------------------------------------------
    def routes(self) -> list[web.RouteDef]:
        j = "/jobs/{job_id}"
        v = j + "/vertices/{vertex_id}"
        return [
            web.get("/", self.index),
            web.static("/static", STATIC_DIR, show_index=False),
            web.get("/config", self.config),
            web.get("/overview", self.overview),
            web.get("/taskmanagers", self.task_managers),
            web.get("/metrics", self.prometheus),
            web.get("/jobs", self.jobs),
            web.get("/jobs/overview", self.jobs_overview),
            web.get(j, self.job_details),
            web.patch(j, self.cancel),
            web.get(j + "/plan", self.plan),
            web.get(j + "/metrics", self.job_metrics),
            web.get(j + "/checkpoints", self.checkpoints),
            web.get(j + "/checkpoints/details/{checkpoint_id}", self.checkpoint_details),
            web.get(j + "/checkpoints/details/{checkpoint_id}/subtasks/{vertex_id}", self.task_checkpoint_details),
            web.post(j + "/stop", self.stop_with_savepoint),
            web.get(j + "/exceptions", self.exceptions),
            web.get(j + "/resource-requirements", self.resource_requirements),
            web.put(j + "/resource-requirements", self.update_resource_requirements),
            web.get(j + "/autoscaler", self.autoscaler),
            web.post(j + "/savepoints", self.trigger_savepoint),
            web.get(j + "/savepoints/{trigger_id}", self.savepoint_status),
            web.get(v, self.vertex_details),
            web.get(v + "/subtasks/metrics", self.subtask_metrics),
            web.get(v + "/backpressure", self.back_pressure),
            web.get(v + "/watermarks", self.watermarks),
        ]

    # -- access --------------------------------------------------------------------------------------------
    def _presented_token(self, request: web.Request) -> str:
        scheme, _, value = request.headers.get("Authorization", "").partition(" ")
        if scheme.lower() == "bearer" and value:
            return value.strip()
        return ""

    def _token_ok(self, request: web.Request) -> bool:
        presented = self._presented_token(request).encode("utf-8", "surrogateescape")
        return self.token is None or hmac.compare_digest(presented, self.token.encode("utf-8"))

    def _check_read(self, request: web.Request) -> None:
        if self.reads_need_token and not self._token_ok(request):
            raise web.HTTPUnauthorized(text='{"errors": ["missing or wrong token"]}', content_type="application/json")

    def _check_write(self, request: web.Request) -> None:
        origin = request.headers.get("Origin")
        if origin is not None and urlsplit(origin).netloc != request.host:
            raise web.HTTPForbidden(
                text='{"errors": ["cross-origin requests may not change jobs"]}', content_type="application/json"
            )
        if not self._token_ok(request):
            raise web.HTTPUnauthorized(
                text='{"errors": ["this call needs the cluster\'s token (Authorization: Bearer <token>)"]}',
                content_type="application/json",
            )

    def _job(self, request: web.Request) -> Any:
        self._check_read(request)
        job_id = request.match_info["job_id"]
        client = self.lookup.job_client(job_id)
        if client is None:
            raise web.HTTPNotFound(text=f'{{"errors": ["Job {job_id} not found"]}}', content_type="application/json")
        return client

    def _vertex(self, client: Any, request: web.Request) -> Any:
        vertex_id = request.match_info["vertex_id"]
        ejv = job_views.find_vertex(client, vertex_id)
        if ejv is None:
            raise web.HTTPNotFound(
                text=f'{{"errors": ["JobVertex {vertex_id} not found in job {client.job_id}"]}}',
                content_type="application/json",
            )
        return ejv

    async def _snapshot(self, client: Any) -> MetricsSnapshot:
        """The job's per-subtask metrics, read at most every :data:`METRICS_TTL_S`."""
        cache = self._cache.setdefault(client.job_id, _JobCache())
        now = time.monotonic()
        if cache.snapshot is None or now - cache.read_at >= METRICS_TTL_S:
            cache.snapshot = MetricsSnapshot(await self.run_blocking(client.get_metrics))
            cache.read_at = now
        return cache.snapshot

    @staticmethod
    def _get_param(request: web.Request) -> Optional[list[str]]:
        text = request.query.get("get")
        return [name for name in text.split(",") if name] if text else None

    # -- dashboard -----------------------------------------------------------------------------------------
    async def index(self, request: web.Request) -> web.StreamResponse:
        return web.FileResponse(STATIC_DIR / "index.html", headers={"Cache-Control": "no-store"})

    async def config(self, request: web.Request) -> web.Response:  # public: no user data
        offset = -time.altzone if time.localtime().tm_isdst > 0 else -time.timezone
        return web.json_response(
            {
                "refresh-interval": 1000,
                "timezone-name": time.tzname[0],
                "timezone-offset": offset * 1000,
                "flink-version": job_views.RAYLINK_VERSION,
                "flink-revision": "",
                "features": {"web-submit": False, "web-cancel": True, "web-rescale": False, "web-history": False},
            }
        )

    # -- cluster ------------------------------------------------------------------------------------------
    async def overview(self, request: web.Request) -> web.Response:
        self._check_read(request)
        clients = self.lookup.job_clients()
        managers = job_views.task_managers(clients)["taskmanagers"]
        body = job_views.cluster_overview(clients, managers)
        return web.json_response(body)

    async def prometheus(self, request: web.Request) -> web.Response:
        """Every job's live metrics in Prometheus' text format (Flink's PrometheusReporter series;
        :func:`raylink.runtime.metrics.prometheus_text`), for a Prometheus to scrape."""
        self._check_read(request)
        jobs = [(c.job_name, c.get_metrics) for c in self.lookup.job_clients()]
        body = await self.run_blocking(metrics.prometheus_text, jobs)
        return web.Response(body=body, headers={"Content-Type": metrics.CONTENT_TYPE})

    async def task_managers(self, request: web.Request) -> web.Response:
        self._check_read(request)
        return web.json_response(job_views.task_managers(self.lookup.job_clients()))

    async def jobs(self, request: web.Request) -> web.Response:
        self._check_read(request)
        return web.json_response(
            {"jobs": [{"id": c.job_id, "status": str(c.get_job_status())} for c in self.lookup.job_clients()]}
        )

    async def jobs_overview(self, request: web.Request) -> web.Response:
        self._check_read(request)
        return web.json_response(job_views.multiple_jobs_details(self.lookup.job_clients()))

    # -- one job ------------------------------------------------------------------------------------------
    async def job_details(self, request: web.Request) -> web.Response:
        client = self._job(request)
        return web.json_response(job_views.job_details(client, await self._snapshot(client)))

    async def plan(self, request: web.Request) -> web.Response:
        return web.json_response(job_views.job_plan(self._job(request)))

    async def job_metrics(self, request: web.Request) -> web.Response:
        client = self._job(request)
        body = await self.run_blocking(job_views.job_metrics, client, self._get_param(request))
        return web.json_response(body)

    def _checkpoint_statistics(self, client: Any) -> Any:
        """What the job's checkpoint coordinator kept; 404 for a job that takes no checkpoints."""
        stats = client.get_checkpoint_statistics()
        if stats is None:
            raise web.HTTPNotFound(
                text=f'{{"errors": ["job {client.job_id} takes no checkpoints (a BATCH job)"]}}',
                content_type="application/json",
            )
        return stats

    async def checkpoints(self, request: web.Request) -> web.Response:
        """Flink's ``CheckpointingStatisticsHandler``: the history the coordinator kept."""
        stats = self._checkpoint_statistics(self._job(request))
        return web.json_response(job_views.checkpointing_statistics(stats))

    def _checkpoint_id(self, request: web.Request) -> int:
        text = request.match_info["checkpoint_id"]
        if not text.isdigit():
            raise web.HTTPBadRequest(
                text=f'{{"errors": ["checkpoint id {text!r} is not a number"]}}', content_type="application/json"
            )
        return int(text)

    def _unknown_checkpoint(self, checkpoint_id: int) -> web.HTTPNotFound:
        return web.HTTPNotFound(
            text=f'{{"errors": ["checkpoint {checkpoint_id} is not in the history (web.checkpoints.history)"]}}',
            content_type="application/json",
        )

    async def checkpoint_details(self, request: web.Request) -> web.Response:
        """Flink's ``CheckpointStatisticDetailsHandler``: one checkpoint with its tasks."""
        stats = self._checkpoint_statistics(self._job(request))
        checkpoint_id = self._checkpoint_id(request)
        body = job_views.checkpoint_details(stats, checkpoint_id)
        if body is None:
            raise self._unknown_checkpoint(checkpoint_id)
        return web.json_response(body)

    async def task_checkpoint_details(self, request: web.Request) -> web.Response:
        """Flink's ``TaskCheckpointStatisticDetailsHandler``: a vertex's subtasks in one checkpoint."""
        stats = self._checkpoint_statistics(self._job(request))
        checkpoint_id = self._checkpoint_id(request)
        body = job_views.task_checkpoint_details(stats, checkpoint_id, request.match_info["vertex_id"])
        if body is None:
            raise self._unknown_checkpoint(checkpoint_id)
        return web.json_response(body)

    async def exceptions(self, request: web.Request) -> web.Response:
        return web.json_response(job_views.job_exceptions(self._job(request)))

    async def cancel(self, request: web.Request) -> web.Response:
        """Flink's ``JobCancellationHandler``: ``PATCH /jobs/:jobid?mode=cancel`` -> 202. As in
        Flink since 1.9, ``mode=stop`` is refused (400), naming the route that stops a job
        gracefully: ``POST /jobs/:jobid/stop`` (stop with a savepoint)."""
        self._check_write(request)
        client = self._job(request)
        mode = request.query.get("mode", "cancel")
        if mode == "stop":
            raise web.HTTPBadRequest(
                text='{"errors": ["The termination mode \\"stop\\" has been removed. For an ungraceful shutdown, '
                'use mode=cancel; for a graceful one, POST /jobs/:jobid/stop (stop with a savepoint)."]}',
                content_type="application/json",
            )
        if mode != "cancel":
            raise web.HTTPBadRequest(
                text=f'{{"errors": ["mode {mode!r}: only cancel is supported"]}}', content_type="application/json"
            )
        await self.run_blocking(client.cancel)
        return web.json_response({}, status=202)

    async def stop_with_savepoint(self, request: web.Request) -> web.Response:
        """Flink's ``StopWithSavepointHandlers``: body ``{"targetDirectory", "drain"}`` -> 202
        ``{"request-id"}``; the sources stop, a savepoint is taken and the job ends FINISHED;
        ``GET .../savepoints/:triggerid`` tells how it went."""
        self._check_write(request)
        client = self._job(request)
        body = await _json_object(request, '{"targetDirectory": str, "drain": bool}', {"drain"})
        directory = _savepoint_target(client, body.get("targetDirectory"), "POST /jobs/:jobid/stop")
        future = await self.run_blocking(client.stop_with_savepoint, bool(body.get("drain", False)), directory)
        trigger_id = f"{next(self._trigger_ids):032x}"
        self._savepoints[trigger_id] = _Savepoint(future, client.job_id)
        return web.json_response({"request-id": trigger_id}, status=202)

    async def trigger_savepoint(self, request: web.Request) -> web.Response:
        """Flink's ``SavepointTriggerHandler``: body ``{"target-directory", "cancel-job"}`` ->
        202 ``{"request-id"}``; ``GET .../savepoints/:triggerid`` tells how it went."""
        self._check_write(request)
        client = self._job(request)
        body = await _json_object(request, '{"target-directory": str, "cancel-job": bool}', {"cancel-job"})
        directory = _savepoint_target(client, body.get("target-directory"), "POST /jobs/:jobid/savepoints")
        if body.get("cancel-job"):
            future = await self.run_blocking(client.stop_with_savepoint, False, directory)
        else:
            future = await self.run_blocking(client.trigger_savepoint, directory)
        trigger_id = f"{next(self._trigger_ids):032x}"
        self._savepoints[trigger_id] = _Savepoint(future, client.job_id)
        return web.json_response({"request-id": trigger_id}, status=202)

    async def savepoint_status(self, request: web.Request) -> web.Response:
        client = self._job(request)
        savepoint = self._savepoints.get(request.match_info["trigger_id"])
        if savepoint is None or savepoint.job_id != client.job_id:
            raise web.HTTPNotFound(text='{"errors": ["unknown savepoint trigger id"]}', content_type="application/json")
        future = savepoint.future
        if not future.done():
            return web.json_response({"status": {"id": "IN_PROGRESS"}, "operation": None})
        error = future.exception()
        if error is not None:
            cause = {"class": type(error).__name__, "stack-trace": str(error)}
            return web.json_response({"status": {"id": "COMPLETED"}, "operation": {"failure-cause": cause}})
        return web.json_response({"status": {"id": "COMPLETED"}, "operation": {"location": future.result()}})

    # -- rescaling (FLIP-291) -----------------------------------------------------------------------------
    def _rescalable(self, client: Any, route: str) -> Any:
        if not callable(getattr(client, "rescale", None)):
            raise _bad_request(f"{route}: job {client.job_id} cannot be rescaled from here")
        return client

    async def resource_requirements(self, request: web.Request) -> web.Response:
        """Flink's ``JobResourceRequirementsHandler``: ``{vertexId: {"parallelism": {"lowerBound",
        "upperBound"}}}`` the job runs at (or is being rescaled to)."""
        client = self._rescalable(self._job(request), "GET /jobs/:jobid/resource-requirements")
        return web.json_response(await self.run_blocking(client.get_resource_requirements))

    async def update_resource_requirements(self, request: web.Request) -> web.Response:
        """Flink's ``JobResourceRequirementsUpdateHandler`` (FLIP-291): body ``{vertexId:
        {"parallelism": {"lowerBound", "upperBound"}}}`` -> 200 ``{}`` once accepted; the job
        then rescales (RUNNING -> RESTARTING -> RUNNING, :mod:`raylink.runtime.job.rescaling`).
        A request the job cannot follow (unknown vertex, a bound below 1 or above the max
        parallelism, state that cannot be redistributed, a job not RUNNING) -> 400 naming why."""
        self._check_write(request)
        route = "PUT /jobs/:jobid/resource-requirements"
        client = self._rescalable(self._job(request), route)
        body = await _json_object(
            request, '{"<vertexId>": {"parallelism": {"lowerBound": int, "upperBound": int}}}', set()
        )
        for vertex, value in body.items():
            if not isinstance(value, dict) or not isinstance(value.get("parallelism"), dict):
                raise _bad_request(
                    f'{route}: vertex {vertex!r}: expected {{"parallelism": {{"lowerBound": int, "upperBound": int}}}}, '
                    f"got {value!r}"
                )
        future = await self.run_blocking(client.rescale, body)
        error = future.exception() if future.done() else None
        if error is not None:
            raise _bad_request(f"{route}: {error}")
        return web.json_response({})

    async def autoscaler(self, request: web.Request) -> web.Response:
        """The job's autoscaler (``job.autoscaler.enabled``; :mod:`raylink.runtime.job.autoscaler`):
        its state line, every vertex's evaluated metrics (true processing rate, target data rate,
        lag, load, thresholds, recommended parallelism), its events (Flink's ``ScalingReport``
        messages, errors) and the parallelism over time; ``{"enabled": false}`` without it."""
        client = self._job(request)
        status = getattr(client, "get_autoscaler_status", None)
        if status is None:
            return web.json_response({"enabled": False})
        return web.json_response(await self.run_blocking(status))

    # -- one vertex ---------------------------------------------------------------------------------------
    async def vertex_details(self, request: web.Request) -> web.Response:
        client = self._job(request)
        ejv = self._vertex(client, request)
        return web.json_response(job_views.vertex_details(client, ejv, await self._snapshot(client)))

    async def subtask_metrics(self, request: web.Request) -> web.Response:
        client = self._job(request)
        ejv = self._vertex(client, request)
        snapshot = await self._snapshot(client)
        return web.json_response(job_views.aggregated_subtask_metrics(ejv, snapshot, self._get_param(request)))

    async def back_pressure(self, request: web.Request) -> web.Response:
        client = self._job(request)
        ejv = self._vertex(client, request)
        return web.json_response(job_views.vertex_back_pressure(ejv, await self._snapshot(client)))

    async def watermarks(self, request: web.Request) -> web.Response:
        client = self._job(request)
        ejv = self._vertex(client, request)
        return web.json_response(job_views.vertex_watermarks(ejv, await self._snapshot(client)))

    def forget(self, job_id: str) -> None:
        """Drop what is cached about a job the lookup no longer holds."""
        self._cache.pop(job_id, None)
        for trigger_id in [t for t, s in self._savepoints.items() if s.job_id == job_id]:
            del self._savepoints[trigger_id]


def add_rest_routes(
    app: web.Application,
    lookup: JobLookup,
    run_blocking: RunBlocking,
    token: Optional[str] = None,
    loopback: bool = True,
) -> WebMonitorEndpoint:
    """Add Flink's REST routes and the dashboard to ``app``; returns the endpoint serving them."""
    endpoint = WebMonitorEndpoint(lookup, run_blocking, token, loopback)
    app.add_routes(endpoint.routes())
    return endpoint


__all__ = [
    "rest_api_token",
    "JobLookup",
    "STATIC_DIR",
    "WebMonitorEndpoint",
    "add_rest_routes",
    "is_loopback",
]
