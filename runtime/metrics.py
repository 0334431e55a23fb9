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

:class:`MetricsHttpServer` serves them on the driver (``metrics.port``, loopback only);
a port it cannot listen on raises :class:`MetricsPortError` naming the key and port.
Everything here runs off the task threads and only reads.
"""

from __future__ import annotations

import errno
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Optional

from raylink.errors import RaylinkError

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


def _label(value: Any) -> str:
    return str(value).replace("\\", "\\\\").replace('"', '\\"').replace("\n", " ")


def to_prometheus(task_metrics: list[dict], job_name: str = "") -> str:
    """Prometheus text exposition of the per-subtask metrics (``raylink_task_<metric>``) and of
    every operator's metrics (``raylink_taskmanager_job_task_operator_<groups>_<metric>``)."""
    lines = []
    for key in SUMMED + MAXED:
        metric = f"raylink_task_{key}"
        kind = "counter" if key in SUMMED else "gauge"
        lines.append(f"# TYPE {metric} {kind}")
        for m in task_metrics:
            labels = (
                f'job="{_label(job_name)}",vertex="{_label(m.get("vertex_name", ""))}",subtask="{m.get("subtask", 0)}"'
            )
            lines.append(f"{metric}{{{labels}}} {float(m.get(key, 0) or 0)}")
    lines.extend(_operator_prometheus(task_metrics, job_name))
    return "\n".join(lines) + "\n"


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


def _operator_prometheus(task_metrics: list[dict], job_name: str) -> list[str]:
    series: dict[str, list[str]] = {}
    for m in task_metrics:
        operators = m.get("operators") or {}
        all_scopes = m.get("operatorMetricScopes") or {}
        for operator, metrics in operators.items():
            scopes = all_scopes.get(operator, {})
            labels = (
                f'job_name="{_label(job_name)}",task_name="{_label(m.get("vertex_name", ""))}",'
                f'operator_name="{_label(operator)}",subtask_index="{m.get("subtask", 0)}",'
                f'tm_id="{_label(m.get("executor", ""))}"'
            )
            for dotted, value in metrics.items():
                logical, variables = scopes.get(dotted, (dotted, None))
                metric = OPERATOR_PREFIX + _INVALID_NAME.sub("_", logical.replace(".", "_"))
                own = labels
                if variables:
                    own += "".join(f',{_INVALID_LABEL.sub("_", k)}="{_label(v)}"' for k, v in variables.items())
                for name, number in _samples(metric, value):
                    series.setdefault(name, []).append(f"{name}{{{own}}} {number}")
    lines = []
    for name, samples in series.items():
        lines.append(f"# TYPE {name} gauge")  # Flink's PrometheusReporter: counters are gauges too
        lines.extend(samples)
    return lines


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
    """Serves ``/metrics`` (Prometheus text) and ``/vertices`` (JSON) for a running job."""

    def __init__(
        self, supplier: Callable[[], list[dict]], job_name: str, port: int = 0, host: str = "127.0.0.1"
    ) -> None:
        import json

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server API
                if self.path.startswith("/metrics"):
                    body = to_prometheus(supplier(), job_name).encode()
                    kind = "text/plain; version=0.0.4"
                elif self.path.startswith("/vertices"):
                    body = json.dumps(aggregate_by_vertex(supplier())).encode()
                    kind = "application/json"
                else:
                    self.send_error(404)
                    return
                self.send_response(200)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        try:
            self.server = ThreadingHTTPServer((host, port), Handler)
        except OSError as exc:
            raise MetricsPortError(port, host, exc) from None
        self.port = self.server.server_address[1]
        self._thread = threading.Thread(target=self.server.serve_forever, name="metrics-http", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
