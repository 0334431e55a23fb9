"""Job metrics as Flink shows them: per subtask, per JobVertex, back-pressure status,
every operator's metric group (user metrics), Prometheus.

Per vertex, counts are summed over subtasks and times take the maximum (Flink's
web UI does the same for busy / back-pressured time). The back-pressure status
follows Flink: OK when at most 10% of the time is back pressured, LOW up to 50%,
HIGH above.

Operator metrics (Flink's ``OperatorMetricGroup``: what functions register through
``runtime_context.get_metrics_group()``, the watermark gauges, ``numLateRecordsDropped``)
are in each subtask's metrics under ``"operators"``: ``{operator name: {"group.metric":
value}}`` (:func:`operator_metrics`; a name used twice in one chain gets `` #2``, `` #3``).
On the Prometheus endpoint they are Flink's PrometheusReporter series
``raylink_taskmanager_job_task_operator_<groups>_<metric>`` labelled ``job_name``,
``task_name``, ``operator_name``, ``subtask_index``, ``tm_id`` and the variables of
key/value groups (``add_group(key, value)``: ``key="value"``); a meter is its rate plus
``_count``, a distribution ``_count``/``_sum``/``_min``/``_max``.

:class:`MetricsHttpServer` serves them where the job's JobMaster runs too (``metrics.port``,
loopback only), behind the REST servers' rules (a bearer token recorded in the runtime folder,
Host/Origin allow-lists, timeouts, a connection limit); a port it cannot listen on raises
:class:`MetricsPortError` naming the key and port. Everything here runs off the task threads
and only reads; the server's own thread runs its event loop.

The text is ``prometheus_client``'s (:class:`JobMetricsCollector` yields the families from
the live metrics at every scrape, ``generate_latest`` writes them); every series is a gauge,
as Flink's PrometheusReporter maps counters. The driver's REST server (and a session
cluster's Dispatcher) serve it at ``/metrics`` for every job they know
(:func:`prometheus_text`).
"""

from __future__ import annotations

import errno
import logging
import os
import re
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, Optional

from raylink.core.options import MetricOptions
from raylink.errors import RaylinkError

if TYPE_CHECKING:  # prometheus_client is imported when metrics are first served (50 ms), aiohttp when served
    import ssl

    from prometheus_client.core import Metric

    from raylink.runtime.rest.rest_security import ServerLimits

#: the Content-Type of :func:`prometheus_text` (``prometheus_client.CONTENT_TYPE_PLAIN_0_0_4``)
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
LOG = logging.getLogger("raylink.metrics")
#: the labels of the per-subtask task series
TASK_LABELS = ["job", "vertex", "subtask"]
#: the longest :meth:`MetricsHttpServer.close` waits for the exporter's thread
CLOSE_TIMEOUT_S = 10.0

SUMMED = (
    "numRecordsIn",
    "numRecordsOut",
    "numBytesIn",
    "numBytesOut",
    "numBuffersIn",
    "numBuffersOut",
)
MAXED = (
    "busyTimeMsPerSecond",
    "idleTimeMsPerSecond",
    "backPressuredTimeMsPerSecond",
    "outPoolUsage",
    "inPoolUsage",
)


def back_pressure_status(back_pressured_ms_per_second: float) -> str:
    ratio = back_pressured_ms_per_second / 1000.0
    if ratio <= 0.10:
        return "OK"
    if ratio <= 0.50:
        return "LOW"
    return "HIGH"


def aggregate_by_vertex(task_metrics: list[dict]) -> dict[str, dict]:
    """``{vertex name: {summed counts, max times, subtasks, backPressureStatus}}`` in job order."""
    out: dict[str, dict] = {}
    for m in task_metrics:
        name = m.get("vertex_name") or m.get("task", "?")
        agg = out.get(name)
        if agg is None:
            agg = out[name] = {k: 0 for k in SUMMED}
            agg.update({k: 0.0 for k in MAXED})
            agg["subtasks"] = 0
        for key in SUMMED:
            agg[key] += m.get(key, 0) or 0
        for key in MAXED:
            agg[key] = max(agg[key], m.get(key, 0.0) or 0.0)
        agg["subtasks"] += 1
        lat = m.get("latencyMs")
        if lat:
            prev = agg.get("latencyMs")
            if prev is None or lat["p99"] > prev["p99"]:
                agg["latencyMs"] = dict(lat)
    for agg in out.values():
        agg["backPressureStatus"] = back_pressure_status(agg["backPressuredTimeMsPerSecond"])
    return out


def bottleneck(task_metrics: list[dict]) -> Optional[str]:
    """The busiest vertex that is not itself back pressured (where back pressure starts)."""
    vertices = aggregate_by_vertex(task_metrics)
    candidates = [
        (agg["busyTimeMsPerSecond"], name) for name, agg in vertices.items() if agg["backPressureStatus"] == "OK"
    ]
    return max(candidates)[1] if candidates else None


def to_prometheus(task_metrics: list[dict], job_name: str = "") -> str:
    """Prometheus text exposition of one job's per-subtask metrics (``raylink_task_<metric>``)
    and of every operator's metrics (``raylink_taskmanager_job_task_operator_<groups>_<metric>``)."""
    return prometheus_text([(job_name, lambda: task_metrics)]).decode()


def prometheus_text(jobs: Iterable[tuple[str, Callable[[], list[dict]]]]) -> bytes:
    """The text exposition of ``jobs``' metrics: ``(job name, per-subtask metrics supplier)``
    pairs, each supplier called once (it may block: call this off an event loop); served as
    :data:`CONTENT_TYPE`."""
    from prometheus_client import CollectorRegistry, generate_latest

    registry = CollectorRegistry(auto_describe=False)
    registry.register(JobMetricsCollector(lambda: [(name, supplier()) for name, supplier in jobs]))
    return generate_latest(registry)


class JobMetricsCollector:
    """A ``prometheus_client`` collector (its ``Collector`` protocol) reading the live metrics of jobs at every scrape.

    ``jobs`` returns ``(job name, per-subtask metrics)`` pairs. Every series is a gauge, as
    Flink's PrometheusReporter maps counters too (a restarted subtask counts from 0 again).
    """

    def __init__(self, jobs: Callable[[], list[tuple[str, list[dict]]]]) -> None:
        self._jobs = jobs

    def collect(self) -> Iterator["Metric"]:
        from prometheus_client.core import GaugeMetricFamily

        jobs = self._jobs()
        for key in SUMMED + MAXED:
            family = GaugeMetricFamily(
                f"raylink_task_{key}", f"Flink's task metric {key}, per subtask", labels=TASK_LABELS
            )
            for job_name, task_metrics in jobs:
                for m in task_metrics:
                    labels = [str(job_name), str(m.get("vertex_name", "")), str(m.get("subtask", 0))]
                    family.add_metric(labels, float(m.get(key, 0) or 0))
            yield family
        yield from _operator_families(jobs)


def operator_metrics(operators: list) -> dict:
    """The operator part of a subtask's metrics: ``{"operators": {name: {"group.metric": value}}}``
    and, for metrics of key/value groups, ``"operatorMetricScopes"``: ``{name: {"group.metric":
    (logical name, variables)}}`` (what the Prometheus text needs)."""
    values: dict = {}
    scopes: dict = {}
    seen: dict = {}
    for operator in operators:
        group = getattr(getattr(operator, "runtime_context", None), "metrics_group", None)
        if group is None:
            continue
        name = operator.name
        count = seen[name] = seen.get(name, 0) + 1
        key = name if count == 1 else f"{name} #{count}"
        own_scopes: dict = {}
        values[key] = group.report(scopes=own_scopes)
        if own_scopes:
            scopes[key] = own_scopes
    out: dict = {"operators": values}
    if scopes:
        out["operatorMetricScopes"] = scopes
    return out


OPERATOR_PREFIX = "raylink_taskmanager_job_task_operator_"
_INVALID_NAME = re.compile(r"[^a-zA-Z0-9:_]")
_INVALID_LABEL = re.compile(r"[^a-zA-Z0-9_]")


def _samples(name: str, value: Any) -> list:
    """``(series name, number)`` pairs of one operator metric (nothing for text gauges)."""
    if isinstance(value, (bool, int, float)):
        return [(name, float(value))]
    if isinstance(value, dict):
        if "rate" in value:  # a meter: Flink reports its rate; its count too, here
            parts = {"": value.get("rate"), "_count": value.get("count")}
        elif "mean" in value:  # a distribution
            parts = {f"_{part}": value.get(part) for part in ("count", "sum", "min", "max")}
        else:
            return []
        return [
            (name + suffix, float(number)) for suffix, number in parts.items() if isinstance(number, (bool, int, float))
        ]
    return []


def _operator_families(jobs: list[tuple[str, list[dict]]]) -> Iterator["Metric"]:
    from prometheus_client.core import Metric

    families: dict[str, Metric] = {}
    for job_name, task_metrics in jobs:
        for m in task_metrics:
            operators = m.get("operators") or {}
            all_scopes = m.get("operatorMetricScopes") or {}
            for operator, metrics in operators.items():
                scopes = all_scopes.get(operator, {})
                labels = {
                    "job_name": str(job_name),
                    "task_name": str(m.get("vertex_name", "")),
                    "operator_name": str(operator),
                    "subtask_index": str(m.get("subtask", 0)),
                    "tm_id": str(m.get("executor", "")),
                }
                for dotted, value in metrics.items():
                    logical, variables = scopes.get(dotted, (dotted, None))
                    metric = OPERATOR_PREFIX + _INVALID_NAME.sub("_", logical.replace(".", "_"))
                    own = dict(labels)
                    if variables:
                        own.update({_label_name(k): str(v) for k, v in variables.items()})
                    for name, number in _samples(metric, value):
                        family = families.get(name)
                        if family is None:  # Flink's PrometheusReporter: counters are gauges too
                            family = families[name] = Metric(name, f"operator metric {logical}", "gauge")
                        family.add_sample(name, own, number)
    yield from families.values()


def _label_name(key: Any) -> str:
    """A key/value group's key as a label name (Prometheus' alphabet; not a reserved ``__`` name)."""
    name = _INVALID_LABEL.sub("_", str(key)) or "_"
    if name[0].isdigit() or name.startswith("__"):
        name = "key_" + name
    return name


class MetricsPortError(RaylinkError, OSError):
    """The job's metrics endpoint cannot listen on ``metrics.port`` (busy, or not allowed)."""

    def __init__(self, port: int, host: str, cause: OSError) -> None:
        if cause.errno == errno.EADDRINUSE:
            why = "is already in use"
        else:
            why = f"cannot be used: {cause.strerror or cause}"
        super().__init__(
            cause.errno,
            f"metrics.port {port} {why} on {host} (choose another port, 0 for any free one, or -1 to turn it off)",
        )
        self.port = port
        self.host = host

    def __str__(self) -> str:
        return self.strerror


class MetricsHttpServer:
    """The job's Prometheus endpoint on ``metrics.port`` (as Flink's PrometheusReporter listens on
    a port of its own): ``GET /metrics`` (prometheus_client's text, or OpenMetrics when asked
    for), reading the job's live metrics at every scrape (on a scrape thread of its own: the
    supplier may block). The REST server serves the same text at its ``/metrics``.

    It is an aiohttp server on a daemon thread behind the REST servers' rules
    (:mod:`raylink.runtime.rest.rest_security`): a random bearer token (401 without it),
    ``Host``/``Origin`` limited to loopback names and ``host`` (403: DNS rebinding), header and
    idle timeouts, a connection limit, and a ``host`` beyond loopback only over TLS
    (``ssl_context``). The token is recorded for this user as a REST server's is
    (``rest_tokens.rest_auth_headers(url)``) and, alone, in :attr:`token_file`
    (``<runtime folder>/metrics/port-<port>.token``, mode 0600): the file a Prometheus
    ``scrape_config`` names as ``authorization: {credentials_file: ...}``. A port it cannot
    listen on raises :class:`MetricsPortError`. :meth:`close` may be called from any thread.
    """

    def __init__(
        self,
        supplier: Callable[[], list[dict]],
        job_name: str,
        port: int = 0,
        host: str = "127.0.0.1",
        *,
        token: Optional[str] = None,
        limits: Optional["ServerLimits"] = None,
        ssl_context: Optional["ssl.SSLContext"] = None,
    ) -> None:
        from concurrent.futures import ThreadPoolExecutor

        from prometheus_client import CollectorRegistry

        from raylink.runtime.rest import rest_security as security
        from raylink.runtime.rest.server_thread import GuardedServerThread

        security.check_bind(host, ssl_context, option=f"the host of {MetricOptions.PORT.key}")
        self.host = host
        self.token: str = token or security.new_token()
        self._ssl = ssl_context
        self._registry = CollectorRegistry(auto_describe=False)
        self._registry.register(JobMetricsCollector(lambda: [(job_name, supplier())]))
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="metrics-scrape")
        self.token_file: Optional[str] = None
        self._closed = False
        self._serving = GuardedServerThread("metrics-endpoint", host, limits or security.ServerLimits(), ssl_context)
        try:
            self.port: int = self._serving.start(lambda: self._start(port))
        except BaseException as error:
            self._pool.shutdown(wait=False)
            if isinstance(error, OSError):
                raise MetricsPortError(port, host, error) from None
            raise
        self.token_file = _record_metrics_token(self.url, self.port, self.token)
        LOG.info(
            "raylink: Prometheus metrics of job '%s' at %s/metrics (bearer token in %s)",
            job_name,
            self.url,
            self.token_file or "no file: the runtime folder is refused",
        )

    @property
    def url(self) -> str:
        """``http(s)://host:port`` (a wildcard host as 127.0.0.1); scrape ``url + "/metrics"``."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        if host in ("0.0.0.0", "[::]"):
            host = "127.0.0.1"
        return f"{'https' if self._ssl is not None else 'http'}://{host}:{self.port}"

    @property
    def guard(self) -> Any:
        """The listener's :class:`~raylink.runtime.rest.rest_security.ConnectionGuard`."""
        return self._serving.guard

    async def _start(self, port: int) -> int:
        from aiohttp import web

        from raylink.runtime.rest import rest_security as security

        policy = security.AccessPolicy(self.token, self.host, tls=self._ssl is not None)
        app = web.Application(middlewares=security.security_middlewares(policy))
        app.router.add_get("/metrics", self._scrape)
        return await self._serving.listen(app, [port])

    async def _scrape(self, request: Any) -> Any:
        import asyncio

        from aiohttp import web
        from prometheus_client.exposition import choose_encoder

        encoder, content_type = choose_encoder(request.headers.get("Accept", ""))
        body = await asyncio.get_running_loop().run_in_executor(self._pool, encoder, self._registry)
        response = web.Response(body=body, headers={"Content-Type": content_type})
        if "gzip" in request.headers.get("Accept-Encoding", ""):
            response.enable_compression()
        return response

    def close(self) -> None:
        """Stop serving, free the port and remove the token's records; waits for the server
        thread (at most :data:`CLOSE_TIMEOUT_S`) unless called from it."""
        if self._closed:
            return
        self._closed = True
        _forget_metrics_token(self.url, self.token_file, self.token)
        if not self._serving.stop():
            return
        self._pool.shutdown(wait=False)
        self._serving.join(CLOSE_TIMEOUT_S)


def metrics_token_file(port: int) -> str:
    """Where the token of this user's metrics endpoint on ``port`` is kept alone (mode 0600; the
    folder is created and checked): ``<runtime folder>/metrics/port-<port>.token``."""
    from raylink.runtime.runtime_dir import runtime_dir

    return os.path.join(runtime_dir("metrics"), f"port-{port}.token")


def _record_metrics_token(url: str, port: int, token: str) -> Optional[str]:
    from raylink.runtime.client.rest_tokens import record_rest_token
    from raylink.runtime.runtime_dir import UnsafePathError, write_private_file

    record_rest_token(url, token)
    try:
        path = metrics_token_file(port)
        write_private_file(path, token.encode("utf-8"))
    except (OSError, UnsafePathError) as exc:
        LOG.warning("raylink: the token of the metrics endpoint %s is not recorded in the runtime folder: %s", url, exc)
        return None
    return path


def _forget_metrics_token(url: str, path: Optional[str], token: str) -> None:
    from raylink.runtime.client.rest_tokens import forget_rest_token
    from raylink.runtime.runtime_dir import UnsafePathError, read_private_file, remove_private_file

    forget_rest_token(url)
    if path is None:
        return
    try:
        if read_private_file(path).decode("utf-8", "replace") == token:  # not a later endpoint's
            remove_private_file(path)
    except (OSError, UnsafePathError):
        pass
