"""Metric definitions and the load-test source/sink, driven in this process (no Ray)."""

from __future__ import annotations

import threading
import time
from concurrent.futures import Future

import pytest
from prometheus_client.parser import text_string_to_metric_families

from raylink.loadtest import (
    ACC_LATENCY,
    ACC_SINK_COUNT,
    ACC_SOURCE,
    LatencySink,
    RateLimitedSource,
    _parse_rates,
    percentiles,
)
from raylink.operators.runtime_context import StreamingRuntimeContext
from raylink.runtime.metrics import aggregate_by_vertex, back_pressure_status, bottleneck, to_prometheus
from raylink.runtime.task.mailbox import BACK_PRESSURE, IDLE, MailboxProcessor

pytestmark = pytest.mark.timeout(60)


# -- busy / idle / back-pressured time ----------------------------------------------------------------
def _drive(steps):
    """Run a MailboxProcessor whose default action performs ``steps`` one by one: ("busy", s)
    works for s seconds, ("bp"|"idle", s) suspends until a future completed s seconds later."""
    todo = list(steps)

    def action(mp: MailboxProcessor) -> None:
        if not todo:
            mp.all_actions_completed()
            return
        kind, seconds = todo.pop(0)
        if kind == "busy":
            end = time.perf_counter() + seconds
            while time.perf_counter() < end:
                pass
            return
        future: Future = Future()
        future.add_done_callback(mp.suspend_default_action(BACK_PRESSURE if kind == "bp" else IDLE).resume)
        threading.Timer(seconds, future.set_result, (None,)).start()

    mp = MailboxProcessor(action)
    mp.run_mailbox_loop()
    return mp


def test_back_pressured_time_accrues_only_while_waiting_for_an_output_buffer():
    mp = _drive([("busy", 0.1), ("bp", 0.3), ("busy", 0.1), ("idle", 0.2)])
    assert 0.28 <= mp.back_pressured_ns / 1e9 < 0.6
    assert 0.18 <= mp.idle_ns / 1e9 < 0.5
    busy_only = _drive([("busy", 0.2), ("idle", 0.1)])
    assert busy_only.back_pressured_ns == 0
    rates = mp.time_metrics()  # over the task's life (< 1 s): shares of a second
    assert rates["backPressuredTimeMsPerSecond"] > rates["idleTimeMsPerSecond"] > 0
    total = rates["busyTimeMsPerSecond"] + rates["idleTimeMsPerSecond"] + rates["backPressuredTimeMsPerSecond"]
    assert total == pytest.approx(1000.0, abs=1.0)


def test_back_pressure_status_thresholds_are_10_and_50_percent():
    assert back_pressure_status(0) == "OK"
    assert back_pressure_status(100) == "OK"
    assert back_pressure_status(101) == "LOW"
    assert back_pressure_status(500) == "LOW"
    assert back_pressure_status(501) == "HIGH"
    assert back_pressure_status(1000) == "HIGH"


def _m(vertex, subtask, **kw):
    base = {
        "vertex_name": vertex,
        "subtask": subtask,
        "numRecordsIn": 0,
        "numRecordsOut": 0,
        "busyTimeMsPerSecond": 0.0,
        "idleTimeMsPerSecond": 0.0,
        "backPressuredTimeMsPerSecond": 0.0,
    }
    base.update(kw)
    return base


def test_vertex_aggregation_sums_counts_and_maxes_times():
    metrics = [
        _m(
            "Source -> Map",
            0,
            numRecordsOut=100,
            numBytesOut=1000,
            busyTimeMsPerSecond=200,
            backPressuredTimeMsPerSecond=700,
            outPoolUsage=1.0,
        ),
        _m(
            "Source -> Map",
            1,
            numRecordsOut=50,
            numBytesOut=500,
            busyTimeMsPerSecond=300,
            backPressuredTimeMsPerSecond=50,
            outPoolUsage=0.25,
        ),
        _m("Sink", 0, numRecordsIn=150, busyTimeMsPerSecond=950, inPoolUsage=0.9),
    ]
    v = aggregate_by_vertex(metrics)
    assert list(v) == ["Source -> Map", "Sink"]
    src = v["Source -> Map"]
    assert (src["numRecordsOut"], src["numBytesOut"], src["subtasks"]) == (150, 1500, 2)
    assert src["busyTimeMsPerSecond"] == 300 and src["backPressuredTimeMsPerSecond"] == 700
    assert src["outPoolUsage"] == 1.0 and src["backPressureStatus"] == "HIGH"
    assert v["Sink"]["backPressureStatus"] == "OK"
    # the busiest vertex that is not back pressured is where back pressure starts
    assert bottleneck(metrics) == "Sink"
    text = to_prometheus(metrics, "job")
    families = {f.name: f for f in text_string_to_metric_families(text)}
    out = {(s.labels["vertex"], s.labels["subtask"]): s.value for s in families["raylink_task_numRecordsOut"].samples}
    assert out == {("Source -> Map", "0"): 100, ("Source -> Map", "1"): 50, ("Sink", "0"): 0}
    assert {s.labels["job"] for s in families["raylink_task_numRecordsOut"].samples} == {"job"}
    assert families["raylink_task_backPressuredTimeMsPerSecond"].type == "gauge"


# -- the rate limiter -------------------------------------------------------------------------------
class FakeCtx:
    def __init__(self):
        self.records = []
        self.flushes = 0

    def collect(self, value):
        self.records.append(value)

    def flush(self):
        self.flushes += 1


def _rc(index=0, parallelism=1):
    return StreamingRuntimeContext(subtask_index=index, parallelism=parallelism)


def _run_source(source, rc):
    source.open(rc)
    ctx = FakeCtx()
    cpu0 = time.thread_time()
    source.run(ctx)
    return ctx, time.thread_time() - cpu0


def test_rate_limiter_holds_a_modest_rate_by_its_own_clock_without_spinning():
    rc = _rc()
    source = RateLimitedSource(rate=20_000, duration_s=1.0)
    ctx, cpu = _run_source(source, rc)
    n = len(ctx.records)
    assert n == source.emitted
    [(index, emitted, elapsed)] = rc.accumulators[ACC_SOURCE]
    assert emitted == n and 0.99 <= elapsed < 1.5
    assert n / elapsed == pytest.approx(20_000, rel=0.05)
    # emitted in small bursts (~5 ms), each handed over, not one record at a time
    assert 50 <= ctx.flushes <= 1000
    assert cpu < 0.8 * elapsed  # waits between bursts, no busy loop
    stamps = [r[0] for r in ctx.records]
    assert stamps == sorted(stamps) and [r[1] for r in ctx.records[:3]] == [0, 1, 2]


def test_rate_limiter_splits_rate_and_records_between_subtasks():
    rc = _rc(index=1, parallelism=3)
    source = RateLimitedSource(rate=None, records=10, payload=lambda i: f"r{i}")
    ctx, _cpu = _run_source(source, rc)
    assert [r[1] for r in ctx.records] == ["r1", "r4", "r7"]  # 10 = 4 + 3 + 3, every 3rd index
    low = RateLimitedSource(rate=3000, duration_s=0.5)
    rc2 = _rc(index=2, parallelism=3)
    ctx2, _ = _run_source(low, rc2)
    [(_i, emitted, elapsed)] = rc2.accumulators[ACC_SOURCE]
    assert emitted / elapsed == pytest.approx(1000, rel=0.1)


def test_rate_limiter_stops_on_cancel():
    source = RateLimitedSource(rate=100, duration_s=30)
    source.open(_rc())
    ctx = FakeCtx()
    t = threading.Thread(target=source.run, args=(ctx,))
    t.start()
    time.sleep(0.2)
    source.cancel()
    t.join(2)
    assert not t.is_alive()


def test_source_needs_a_bound_and_a_positive_rate():
    with pytest.raises(ValueError):
        RateLimitedSource(rate=10)
    with pytest.raises(ValueError):
        RateLimitedSource(rate=0, duration_s=1)
    assert _parse_rates("1000,max") == [1000.0, None]


def test_latency_sink_keeps_a_bounded_reservoir():
    rc = _rc()
    sink = LatencySink(max_samples=100)
    sink.open(rc)
    stamp = time.time_ns() - 5_000_000  # 5 ms ago
    for i in range(5000):
        sink.invoke((stamp, i))
    sink.close()
    samples = rc.accumulators[ACC_LATENCY]
    assert len(samples) == 100 and rc.accumulators[ACC_SINK_COUNT] == 5000
    assert all(s >= 5.0 for s in samples)
    p = percentiles(samples)
    assert p["p50"] <= p["p95"] <= p["p99"] <= p["max"]


def test_percentiles_nearest_rank():
    p = percentiles(list(range(1, 101)))
    assert (p["p50"], p["p95"], p["p99"], p["count"]) == (50, 95, 99, 100)
    assert percentiles([]) == {}


def test_bench_run_all_reads_the_ratio_column_of_each_script():
    from raylink.bench.run_all import parse_rows

    text = """source -> map -> filter -> sink, 200,000 records, one task, best of 2, Python 3.11.7
variant                                   seconds      records/s  vs plain
plain Python loop (baseline)                0.050      4,000,000     1.00x
raylink chain, batch path (1024/emit)       0.056      3,571,428     0.89x
path                                                       ser M/s deser M/s total M/s  ratio
bare msgpack packb(list) + unpackb(use_list=False)            9.10     12.00      5.10   1.00
keyed RecordWriter.emit_batch (HASH, 4 ch) + gate + feed         -         -      1.12   0.22
"""
    assert parse_rows(text) == [
        ("plain Python loop (baseline)", 1.0),
        ("raylink chain, batch path (1024/emit)", 0.89),
        ("bare msgpack packb(list) + unpackb(use_list=False)", 1.0),
        ("keyed RecordWriter.emit_batch (HASH, 4 ch) + gate + feed", 0.22),
    ]


def test_latency_sink_takes_a_batch_in_one_call_and_samples_it():
    from raylink.loadtest import BATCH_SAMPLES, LatencySink
    from raylink.operators.runtime_context import StreamingRuntimeContext

    sink = LatencySink(max_samples=1000)
    sink.open(StreamingRuntimeContext())
    stamp = time.time_ns() - 5_000_000  # emitted 5 ms ago
    sink.invoke_batch([(stamp, "w", 1)] * 640)
    sink.invoke((stamp, "w", 1))
    assert sink.count == 641
    assert len(sink.samples) == BATCH_SAMPLES + 1  # a spread sample of the batch + the single record
    assert all(5.0 <= s < 5000 for s in sink.samples)


def test_loadtest_without_matplotlib_names_the_plots_extra_before_running(monkeypatch, tmp_path):
    """No Ray is started and no report folder made: the missing extra is named first."""
    import sys

    from raylink.extras import MissingExtraError
    from raylink.loadtest import main

    monkeypatch.setitem(sys.modules, "matplotlib", None)  # as if raylink[plots] were not installed
    out = tmp_path / "report"
    with pytest.raises(MissingExtraError) as info:
        main(["chain", "--rate", "1000", "--duration", "1", "--output", str(out)])
    assert str(info.value) == (
        "the load-test plots needs raylink[plots]: pip install 'raylink[plots]' "
        "(matplotlib not installed) (or run raylink loadtest with --no-plots)"
    )
    assert not out.exists()


def test_spark_scenario_without_the_spark_extra_is_listed_as_unavailable(monkeypatch, capsys):
    import sys

    from raylink.loadtest import main, spark_scenario

    monkeypatch.setitem(sys.modules, "pyspark", None)  # as if raylink[spark] were not installed
    scenario = spark_scenario()
    assert not scenario.available
    assert scenario.unavailable_reason == "needs raylink[spark]: pip install 'raylink[spark]' (pyspark not installed)"
    assert main(["list"]) == 0
    [line] = [line for line in capsys.readouterr().out.splitlines() if line.startswith("spark ")]
    assert line.endswith("  [unavailable: needs raylink[spark]: pip install 'raylink[spark]' (pyspark not installed)]")
