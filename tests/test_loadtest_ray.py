"""``raylink loadtest`` end to end on a local Ray: report files, rate held, back pressure."""

from __future__ import annotations

import json
import os

import pytest

from raylink.cli import main as cli  # cli.main(argv): the raylink command
from raylink.loadtest import SCENARIOS, run_one

pytestmark = pytest.mark.timeout(150)

REPORT_KEYS = {"scenario", "description", "createdAt", "host", "settings", "runs", "summary", "plots"}
RUN_KEYS = {
    "scenario",
    "parallelism",
    "targetRate",
    "achievedRate",
    "rateHeld",
    "recordsEmitted",
    "recordsAtSink",
    "latencyMs",
    "vertices",
    "bottleneck",
    "memory",
    "throughputSeries",
}


def test_cli_loadtest_writes_json_markdown_and_plots(ray_session, tmp_path, capsys):
    out = tmp_path / "report"
    assert cli.main(["loadtest", "chain", "--rate", "4000", "--duration", "2", "--output", str(out)]) == 0
    report = json.loads((out / "report.json").read_text())
    assert REPORT_KEYS <= set(report)
    [run] = report["runs"]
    assert RUN_KEYS <= set(run)
    # the rate limiter, by record counts and the source's own clock (generous: a shared, busy box)
    assert run["rateHeld"] is True
    assert run["achievedRate"] == pytest.approx(4000, rel=0.1)
    assert 1.9 <= run["recordsEmitted"] / 4000 <= 2.3
    # map(x*2) then filter(% 3 != 0): the records with i % 3 != 0 reach the sink, every one measured
    emitted = run["recordsEmitted"]
    assert run["recordsAtSink"] == emitted - (emitted + 2) // 3
    lat = run["latencyMs"]
    assert 0 < lat["p50"] <= lat["p95"] <= lat["p99"] and lat["count"] > 1000
    assert all(m["peakRssBytes"] > 10 * 2**20 for m in run["memory"].values()) and run["memory"]
    md = (out / "report.md").read_text()
    assert "| P | target rec/s | achieved rec/s |" in md and "|---|" in md and "| 1 | 4,000 |" in md
    for png in ("throughput.png", "latency_vs_rate.png", "scaling.png", "memory.png"):
        data = (out / png).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000, png
    assert "rate held" in capsys.readouterr().out


def test_slow_sink_back_pressures_the_upstream_vertex(ray_session):
    run = run_one(SCENARIOS["slowsink"], None, 1, 5.0, None, sample_interval=0.4)
    vertices = run["vertices"]
    upstream = [n for n in vertices if "LoadSource" in n]
    sink = [n for n in vertices if "LatencySink" in n]
    assert upstream and sink and upstream != sink
    assert vertices[upstream[0]]["maxBackPressureStatus"] == "HIGH"
    assert run["bottleneck"] == sink[0]
    # the sink sleeps 100 us per record: ~10k records/s at most; memory stays bounded
    assert run["achievedRate"] < 20_000
    for m in run["memory"].values():
        assert m["peakRssBytes"] < 1 * 2**30


def test_cli_lists_scenarios_and_rejects_unknown(capsys):
    assert cli.main(["loadtest", "list"]) == 0
    text = capsys.readouterr().out
    for name in ("chain", "wordcount", "wide", "slowsink", "spark"):
        assert name in text
    with pytest.raises(SystemExit):
        cli.main(["loadtest", "no-such-scenario", "--duration", "1", "--output", os.devnull])
