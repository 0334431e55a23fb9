"""``raylink loadtest --soak``: the report's fields, the slope / drift / verdict analysis, and a
leaking job flagged as such."""

from __future__ import annotations

import csv
import json
import sys

import pytest

from raylink.cli import main as cli  # cli.main(argv): the raylink command
from raylink.loadtest import Scenario, analyze, latency_windows, parse_duration, run_soak, slope_per_hour
from raylink.loadtest.functions import bucket_latency, histogram_percentiles, latency_bucket

MIB = 2**20


# -- analysis (pure) --------------------------------------------------------------------------------
def test_parse_duration_takes_seconds_minutes_hours():
    assert [parse_duration(t) for t in ("60s", "30m", "8h", "1h30m", "90")] == [60, 1800, 28800, 5400, 90]
    for bad in ("", "5x", "0s", "m30"):
        with pytest.raises(ValueError, match="duration"):
            parse_duration(bad)


def test_slope_is_least_squares_per_hour():
    points = [(t, 100 + 10 * t / 3600 + (0.5 if t % 2 else -0.5)) for t in range(0, 1200, 10)]
    assert slope_per_hour(points) == pytest.approx(10, abs=0.1)
    assert slope_per_hour(points[:2]) is None  # too few points


def test_latency_histogram_percentiles_are_within_a_bucket():
    samples = [float(i) for i in range(1, 1001)]  # 1..1000 ms
    histogram: dict = {}
    for s in samples:
        histogram[latency_bucket(s)] = histogram.get(latency_bucket(s), 0) + 1
    p = histogram_percentiles(histogram)
    assert p["count"] == 1000
    for q, exact in (("p50", 500), ("p95", 950), ("p99", 990)):
        assert p[q] == pytest.approx(exact, rel=0.03)
    assert bucket_latency(latency_bucket(0.001)) < 0.011  # below the first bucket: the first bucket


def _samples(executor: str, mib_per_hour: float, minutes: int = 30) -> list:
    rows = []
    for i in range(minutes * 12):  # every 5 s
        t = i * 5.0
        rss = (150 + mib_per_hour * t / 3600) * MIB
        rows.append(
            {
                "t": t,
                "executor": executor,
                "rssBytes": rss,
                "heapInUseBytes": rss / 2,
                "heapFreeBytes": 10 * MIB,
                "allocatedBlocks": 100_000,
                "gcObjects": None,
                "tracedBytes": None,
                "networkBuffersInUse": 4,
                "queuedIn": 1,
                "queuedOut": 2,
                "stateEntries": 1000,
            }
        )
    return rows


def _windows(p99s: list) -> list:
    entries = []
    for w, p99 in enumerate(p99s):
        entries += [(1000 + w, latency_bucket(p99 / 2), 98), (1000 + w, latency_bucket(p99), 2)]
    return latency_windows(entries, 60)


RUN = {"targetRate": 1000, "rateHeld": True, "achievedRate": 1000.0, "latencyWindowS": 60}


def test_flat_memory_and_steady_latency_pass():
    samples = _samples("te-a", 0.5) + _samples("te-b", -1.0)
    report = analyze(samples, _windows([40, 41, 39, 42, 40]), {}, {}, {}, RUN)
    assert report["verdict"] == "PASS"
    assert report["memory"]["te-a"]["status"] == "flat"
    assert report["memory"]["te-a"]["slopeMiBPerHour"] == pytest.approx(0.5, abs=0.01)
    assert report["memory"]["te-b"]["slopeMiBPerHour"] == pytest.approx(-1.0, abs=0.01)
    assert report["latency"]["completeWindows"] == 3  # the first and last windows are partial
    assert report["verdictLine"].startswith("verdict: PASS: memory flat")


def test_growing_memory_and_drifting_latency_fail_naming_them():
    samples = _samples("te-a", 0.5) + _samples("te-b", 40.0)
    report = analyze(samples, _windows([40, 40, 40, 60, 60]), {}, {}, {}, RUN)
    assert report["verdict"] == "FAIL"
    assert report["memory"]["te-b"]["status"] == "grows"
    assert report["memory"]["te-b"]["diagnosis"].startswith("objects are kept")
    assert "te-b grows +40.0 MiB/h > 5" in report["verdictLine"]
    assert report["latency"]["p99Drift"] == pytest.approx(0.5, abs=0.06)
    assert "p99 latency" in report["verdictLine"]


def test_a_slope_below_the_noise_floor_is_inconclusive():
    samples = _samples("te-a", 30.0, minutes=2)  # 30 MiB/h for 1 minute: 0.5 MiB, within RSS noise
    report = analyze(samples, _windows([40, 40]), {}, {}, {}, RUN)
    assert report["memory"]["te-a"]["status"] == "too short to tell"
    assert report["verdict"] == "INCONCLUSIVE"


# -- a leaking job, in this process (execution.target: local) ------------------------------------------------
def kilobyte(i: int) -> bytes:
    return i.to_bytes(8, "little") * 128  # a new 1 KiB object per record


class KeepEveryRecord:
    """A map that keeps every record it sees: a leak."""

    def __init__(self) -> None:
        self.kept: list = []

    def __call__(self, record: tuple) -> tuple:
        self.kept.append(record)
        return record


def _build_leak(env, source):
    return source.map(KeepEveryRecord()).name("Keep")


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_soak_flags_a_job_that_keeps_every_record(tmp_path, capsys):
    leak = Scenario("leak", "keeps every record (1 KiB each)", _build_leak, payload=kilobyte)
    report = run_soak(
        leak, 3000, 16.0, str(tmp_path), sample_interval=1.0, conf={"execution.target": "local"}, plots=False
    )
    m = report["memory"]["local"]
    assert m["status"] == "grows" and m["slopeMiBPerHour"] > 500  # ~3 MiB/s kept
    assert m["diagnosis"].startswith("objects are kept")
    assert report["verdict"] == "FAIL"
    assert "local grows +" in report["verdictLine"]
    assert report["verdictLine"] in capsys.readouterr().out
    assert json.loads((tmp_path / "report.json").read_text())["verdict"] == "FAIL"


# -- a 60-second soak on Ray ---------------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.timeout(300)
def test_cli_soak_of_wordcount_reports_memory_latency_and_a_verdict(ray_session, tmp_path, capsys):
    out = tmp_path / "soak"
    code = cli.main(
        ["loadtest", "wordcount", "--rate", "5000", "--soak", "60s", "--sample-interval", "2", "--output", str(out)]
    )
    report = json.loads((out / "report.json").read_text())
    assert code == (1 if report["verdict"] == "FAIL" else 0)
    assert report["verdict"] in ("PASS", "FAIL", "INCONCLUSIVE")
    assert report["verdictLine"].startswith(f"verdict: {report['verdict']}: ")
    assert report["verdictLine"] in capsys.readouterr().out
    assert report["settings"]["durationS"] == 60 and report["settings"]["rate"] == 5000
    # two TaskExecutors (the keyed exchange), each sampled all along with all of its figures
    assert len(report["memory"]) == 2
    for executor, m in report["memory"].items():
        assert executor.startswith("te-")
        assert m["samples"] >= 10
        assert isinstance(m["slopeMiBPerHour"], float)
        assert m["status"] in ("flat", "grows", "too short to tell")
        assert m["rssStartMiB"] > 20 and m["rssEndMiB"] > 20
        assert m["topTypes"]  # the last full report's objects by type
    # the rolling count holds one entry per word of the 1,000-word vocabulary
    assert sorted(m["stateEntries"][1] for m in report["memory"].values()) == [0, 1000]
    rows = list(csv.DictReader((out / "soak_samples.csv").open()))
    assert {r["executor"] for r in rows} == set(report["memory"])
    assert all(int(r["rssBytes"]) > 0 and int(r["allocatedBlocks"]) > 0 for r in rows)
    # latency per 10 s window (a soak under 5 minutes): ~6 windows, the inner ones complete
    windows = report["latencyWindows"]
    assert 5 <= len(windows) <= 8 and report["latency"]["windowS"] == 10
    assert report["latency"]["completeWindows"] >= 3 and report["latency"]["p99Drift"] is not None
    assert all(w["p50"] <= w["p95"] <= w["p99"] <= w["max"] for w in windows)
    assert sum(w["count"] for w in windows) > 1000
    assert set(report["run"]["backPressure"]) == {"Source: LoadSource -> Split", "Count -> Sink: LatencySink"}
    for name in ("report.md", "soak_latency.csv", "soak_memory.png", "soak_latency.png"):
        assert (out / name).stat().st_size > 100, name
    assert "verdict: " in (out / "report.md").read_text()


def test_soak_without_matplotlib_says_so_and_writes_the_csv(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # as if raylink[plots] were not installed
    leak = Scenario("leak", "keeps every record", _build_leak, payload=kilobyte)
    report = run_soak(leak, 1000, 3.0, str(tmp_path), sample_interval=1.0, conf={"execution.target": "local"})
    assert report["plots"] == []
    assert "plots skipped: matplotlib is not installed (pip install 'raylink[plots]')" in capsys.readouterr().out
    assert (tmp_path / "soak_samples.csv").exists() and (tmp_path / "soak_latency.csv").exists()
    assert not (tmp_path / "soak_memory.png").exists()


def test_cli_soak_rejects_a_sweep():
    with pytest.raises(SystemExit, match="one rate at one parallelism"):
        cli.main(["loadtest", "chain", "--rate", "1000,2000", "--soak", "60s", "--output", "/nonexistent/x"])


# -- what used to grow -----------------------------------------------------------------------------------
def test_processing_time_timers_share_one_thread_and_leave_nothing_behind():
    """A task's periodic timers (debloating every 200 ms, latency markers, legacy flushes) once
    started a thread each, and a cancelled timer stayed in the service for good."""
    import queue
    import threading

    from raylink.operators.processing_time import SystemProcessingTimeService

    mails: queue.Queue = queue.Queue()
    service = SystemProcessingTimeService(mail_executor=mails.put)
    now = service.current_processing_time()
    fired: list = []
    before = threading.active_count()
    for i in range(200):
        service.register_timer(now + 10 + i % 5, fired.append)
    far = [service.register_timer(now + 3_600_000, fired.append) for _ in range(500)]
    assert threading.active_count() == before + 1  # one timer thread, not 700
    for handle in far:
        assert handle.cancel() is True
    assert service.num_pending() <= 200 and len(service._queue) < 700  # cancelled ones were dropped
    for _ in range(200):
        mails.get(timeout=10)()
    assert len(fired) == 200 and sorted(set(fired)) == [now + 10 + k for k in range(5)]
    assert service.num_pending() == 0
    service._thread is None or service._thread.join(5)
    assert service._thread is None  # nothing pending: the thread ended
    service.register_timer(now, fired.append)  # and a new timer starts it again
    mails.get(timeout=10)()
    assert len(fired) == 201
    service.shutdown()
