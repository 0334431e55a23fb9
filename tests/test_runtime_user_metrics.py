"""User metrics (``runtime_context.get_metrics_group()``: counters, gauges, meters,
distributions, nested and key/value groups) in the job's metrics — live while the job runs and
in the final reports — and on the Prometheus endpoints (``metrics.port`` and the REST server's
``/metrics``, read with prometheus_client's own text parser), with exact values counted from
the input; the MetricGroup API itself (PyFlink's ``pyflink.metrics``)."""

from __future__ import annotations

import threading
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from raylink.api import MapFunction, SinkFunction, SourceFunction
from raylink.metrics import Counter, Distribution, Meter, MetricGroup
from raylink.runtime.client.rest_tokens import rest_auth_headers
from raylink.runtime.metrics import operator_metrics, to_prometheus
from raylink.tests.runtime_jobs import make_env, wait_for

N = 1000
PREFIX = "raylink_taskmanager_job_task_operator_"


class Measured(MapFunction):
    """Counts, meters and measures every record it maps (PyFlink's metric API)."""

    def open(self, runtime_context) -> None:
        group = runtime_context.get_metrics_group()
        self.seen = group.add_group("my_group").counter("seen")
        self.balance = group.counter("balance")
        self.events = group.meter("events", time_span_in_seconds=60)
        self.values = group.distribution("values")
        group.gauge("twiceSeen", lambda: 2 * self.seen.get_count())
        self.parity = {p: group.add_group("parity", p).counter("records") for p in ("even", "odd")}

    def map(self, value):
        self.seen.inc()
        self.balance.inc(2)
        self.balance.dec()
        self.events.mark_event(3)
        self.values.update(value)
        self.parity["even" if value % 2 == 0 else "odd"].inc()
        return value


class NumbersThenWait(SourceFunction):
    """1..n, then nothing until cancelled (the job keeps running while the test looks)."""

    def __init__(self, n: int) -> None:
        self.n = n

    def open(self, runtime_context) -> None:
        self.stopped = threading.Event()

    def run(self, ctx) -> None:
        for value in range(1, self.n + 1):
            ctx.collect(value)
        self.stopped.wait()

    def cancel(self) -> None:
        getattr(self, "stopped", threading.Event()).set()


class Discard(SinkFunction):
    def invoke(self, value, context) -> None:
        pass


def map_metrics(task_metrics: list) -> list:
    """The Map operator's metrics of each subtask that runs it."""
    return [m["operators"]["Map"] for m in task_metrics if "Map" in m.get("operators", {})]


def check_exact(per_subtask: list, n: int = N) -> None:
    assert len(per_subtask) == 2
    assert sum(m["my_group.seen"] for m in per_subtask) == n
    for m in per_subtask:
        seen = m["my_group.seen"]
        assert m["balance"] == seen and m["twiceSeen"] == 2 * seen
        assert m["events"]["count"] == 3 * seen and m["values"]["count"] == seen
    assert sum(m["parity.even.records"] for m in per_subtask) == n // 2
    assert sum(m["parity.odd.records"] for m in per_subtask) == n - n // 2
    assert sum(m["values"]["sum"] for m in per_subtask) == n * (n + 1) // 2
    assert min(m["values"]["min"] for m in per_subtask) == 1 and max(m["values"]["max"] for m in per_subtask) == n


def prometheus_samples(text: str, prefix: str = PREFIX) -> dict:
    """``{(metric, frozenset(labels)): value}`` of the series named ``prefix...``, parsed by
    prometheus_client (a malformed exposition raises)."""
    samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name.startswith(prefix):
                key = (sample.name, frozenset(sample.labels.items()))
                assert key not in samples, key  # one series per name and label set
                samples[key] = sample.value
    return samples


def check_task_series(text: str, job_name: str, n: int = N) -> None:
    """The per-subtask task series: the source sent out the n records, the two ``Map -> Sink``
    subtasks took them in and sent nothing on (a chain ending in a sink, as Flink counts)."""
    samples = prometheus_samples(text, "raylink_task_")

    def by_vertex(metric: str, vertex_prefix: str) -> list:
        return [
            v
            for (name, labels), v in samples.items()
            if name == metric and dict(labels)["job"] == job_name and dict(labels)["vertex"].startswith(vertex_prefix)
        ]

    assert len(by_vertex("raylink_task_numRecordsIn", "Map")) == 2
    assert sum(by_vertex("raylink_task_numRecordsIn", "Map")) == n
    assert sum(by_vertex("raylink_task_numRecordsOut", "Map")) == 0
    assert sum(by_vertex("raylink_task_numRecordsOut", "Source")) == n


def check_prometheus(text: str, job_name: str, n: int = N) -> None:
    samples = prometheus_samples(text)

    def total(metric: str, **labels) -> float:
        want = set(labels.items())
        found = [v for (name, have), v in samples.items() if name == metric and want <= set(have)]
        assert len(found) == 2, (metric, labels, found)  # one series per subtask
        return sum(found)

    common = {"job_name": job_name, "operator_name": "Map"}
    assert total(PREFIX + "my_group_seen", **common) == n
    assert total(PREFIX + "balance", **common) == n
    assert total(PREFIX + "twiceSeen", **common) == 2 * n
    assert total(PREFIX + "events_count", **common) == 3 * n
    assert total(PREFIX + "values_sum", **common) == n * (n + 1) / 2
    assert total(PREFIX + "parity_records", parity="even", **common) == n // 2  # the value is a label
    assert total(PREFIX + "parity_records", parity="odd", **common) == n - n // 2
    subtasks = {dict(labels)["subtask_index"] for (name, labels) in samples if name == PREFIX + "my_group_seen"}
    assert subtasks == {"0", "1"}


def scrape(url: str) -> str:
    """``url``'s text, with the token of the server at ``url`` (the REST server's or the
    metrics.port exporter's) as a client of this user finds it in the runtime folder."""
    with urllib.request.urlopen(urllib.request.Request(url, headers=rest_auth_headers(url)), timeout=10) as response:
        assert response.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        return response.read().decode()


@pytest.mark.timeout(180)
def test_user_metrics_are_in_the_job_metrics_and_on_prometheus_while_running_and_after(target):
    env = make_env(target, 2, {"metrics.port": 0, "raylink.rest.enabled": True, "rest.port": 0})
    (env.add_source(NumbersThenWait(N)).set_parallelism(1).rebalance().map(Measured()).add_sink(Discard()))
    client = env.execute_async("user metrics")
    try:
        # a subtask reports no "my_group.seen" until its Map opened and registered it
        assert wait_for(
            lambda: sum(m.get("my_group.seen", 0) for m in map_metrics(client.get_metrics())) == N, client, timeout=60
        ), client.get_metrics()
        check_exact(map_metrics(client.get_metrics()))  # live, from the running tasks
        # the same series on metrics.port (its own token) and the REST server's /metrics
        for url in (f"http://127.0.0.1:{client.metrics_server.port}/metrics", client.rest_endpoint.url + "/metrics"):
            text = scrape(url)
            check_prometheus(text, "user metrics")
            check_task_series(text, "user metrics")
    finally:
        client.cancel()
    assert client.wait(60)
    final = client.get_metrics()  # the tasks' last reports
    check_exact(map_metrics(final))
    check_prometheus(to_prometheus(final, "user metrics"), "user metrics")
    check_task_series(to_prometheus(final, "user metrics"), "user metrics")


@pytest.mark.timeout(120)
def test_user_metrics_are_in_the_result_of_a_finished_job(target):
    env = make_env(target, 2)
    env.from_collection(list(range(1, N + 1))).rebalance().map(Measured()).add_sink(Discard())
    result = env.execute("finite")
    check_exact(map_metrics(result.task_metrics))
    check_prometheus(to_prometheus(result.task_metrics, "finite"), "finite")
    check_task_series(to_prometheus(result.task_metrics, "finite"), "finite")
    # Flink's watermark gauges of every operator are there too: the end of input moved them to MAX
    for m in result.task_metrics:
        for operator, metrics in m["operators"].items():
            assert metrics["currentInputWatermark"] == (1 << 63) - 1, operator


# -- the MetricGroup API --------------------------------------------------------------------------------
def test_groups_and_metrics_are_registered_once_and_named_by_their_groups():
    root = MetricGroup("Map")
    group = root.add_group("a").add_group("b")
    assert root.add_group("a").add_group("b") is group
    counter = group.counter("c")
    assert group.counter("c") is counter and isinstance(counter, Counter)
    counter.inc(5)
    counter.dec(2)
    assert counter.get_count() == 3
    assert group.get_metric_identifier("c") == "a.b.c" and group.get_scope_components() == ["a", "b"]
    user = root.add_group("user", "alice")
    assert user.get_all_variables() == {"user": "alice"} and user.get_metric_identifier("x") == "user.alice.x"
    user.counter("x").inc()
    scopes: dict = {}
    assert root.report(scopes=scopes) == {"a.b.c": 3, "user.alice.x": 1}
    assert scopes == {"user.alice.x": ("user.x", {"user": "alice"})}
    with pytest.raises(ValueError, match="metric 'a.b.c' is already a Counter; it cannot also be a Meter"):
        group.meter("c")


def test_meter_distribution_and_gauge_report_their_figures():
    root = MetricGroup("op")
    meter = root.meter("m", time_span_in_seconds=10)
    assert isinstance(meter, Meter)
    meter.mark_event()
    meter.mark_event(9)
    assert meter.get_count() == 10
    assert meter.get_rate() == pytest.approx(1.0)  # younger than its span: events per span (as Flink)
    distribution = root.distribution("d")
    assert isinstance(distribution, Distribution)
    for value in (4, 1, 7):
        distribution.update(value)
    state = {"x": 1}
    root.gauge("g", lambda: state["x"])
    root.gauge("broken", lambda: 1 / 0)
    state["x"] = 42
    report = root.report()
    assert report["d"] == {"count": 3, "sum": 12, "min": 1, "max": 7, "mean": 4.0}
    assert report["g"] == 42 and "broken" not in report  # a failing gauge is left out
    assert report["m"]["count"] == 10
    with pytest.raises(ValueError, match="time span must be positive"):
        root.meter("bad", 0)


def test_operators_of_one_name_in_a_chain_are_kept_apart():
    class Op:
        def __init__(self, name, value):
            self.name = name
            group = MetricGroup(name)
            group.counter("n").inc(value)
            self.runtime_context = type("RC", (), {"metrics_group": group})()

    out = operator_metrics([Op("Map", 1), Op("Map", 2), Op("Sink", 3)])
    assert out == {"operators": {"Map": {"n": 1}, "Map #2": {"n": 2}, "Sink": {"n": 3}}}
