"""``raylink loadtest nexmark --query qN``: a Nexmark query at a rate with the harness's
measurements; bounded, its output equals a brute-force run of the query over the same events."""

from __future__ import annotations

import json
from collections import Counter, defaultdict

import pytest

from raylink.bench.nexmark import NexmarkConfig, events
from raylink.cli import main as cli  # cli.main(argv): the raylink command

pytestmark = pytest.mark.timeout(240)


def brute_force_q5(evs: list) -> list:
    """q5's SQL by hand: per 10 s window sliding by 2 s, the auctions with the most bids."""
    counts: Counter = Counter()
    for e in evs:
        if e["event_type"] == 2:
            b = e["bid"]
            start = b.dateTime - b.dateTime % 2000
            for s in range(start, b.dateTime - 10_000, -2000):  # the windows holding the bid
                counts[(s, b.auction)] += 1
    top: dict = defaultdict(int)
    for (s, _), num in counts.items():
        top[s] = max(top[s], num)
    return [(auction, num) for (s, auction), num in counts.items() if num >= top[s]]


def run_cli(tmp_path, query: str, rate: str, records: int, *extra: str) -> dict:
    out = tmp_path / f"report-{query}"
    argv = ["loadtest", "nexmark", "--query", query, "--rate", rate, "--records", str(records)]
    argv += ["--start-delay", "1", "--output", str(out), *extra]
    assert cli.main(argv) == 0
    return json.loads((out / "report.json").read_text())


def test_nexmark_q5_at_a_rate_on_ray_counts_what_the_query_gives_over_the_same_events(ray_session, tmp_path):
    n, rate = 3000, 1500
    report = run_cli(tmp_path, "q5", str(rate), n, "--parallelism", "2", "--no-plots")
    [run] = report["runs"]
    settings = run["scenarioSettings"]
    assert settings["events"] == n and settings["eventsPerSecond"] == rate and settings["paced"]
    config = NexmarkConfig(events=n, events_per_second=rate, base_time=settings["baseTimeMs"])
    expected = brute_force_q5(events(n, config))
    assert expected and run["recordsEmitted"] == n
    assert run["recordsAtSink"] == len(expected)
    # latency: sink time minus each output's event time (a window's end, held back by the 4 s bound)
    lat = run["latencyMs"]
    assert lat["count"] == len(expected)
    assert 0 <= lat["p50"] <= lat["max"] <= run["wallClockS"] * 1000
    assert run["vertices"] and all("maxBackPressureStatus" in v for v in run["vertices"].values())


def test_nexmark_q0_emits_every_bid_with_latency_from_its_date_time(tmp_path):
    n, rate = 2000, 2000
    report = run_cli(tmp_path, "q0", str(rate), n, "--conf", "execution.target=local")
    [run] = report["runs"]
    config = NexmarkConfig(events=n, events_per_second=rate, base_time=run["scenarioSettings"]["baseTimeMs"])
    bids = [e for e in events(n, config) if e["event_type"] == 2]
    assert run["recordsAtSink"] == len(bids) and run["recordsEmitted"] == n
    lat = run["latencyMs"]
    # the events are due over 1 s of wall time: each bid's latency is its time from due to sink
    assert lat["count"] > 100 and 0 <= lat["p50"] <= lat["max"] <= run["wallClockS"] * 1000
    for png in ("throughput.png", "latency_vs_rate.png", "memory.png"):
        assert (tmp_path / "report-q0" / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_nexmark_options_name_what_is_wrong(tmp_path):
    base = ["loadtest", "nexmark", "--output", str(tmp_path), "--no-plots", "--records", "10"]
    with pytest.raises(SystemExit, match="needs --query"):
        cli.main(base)
    with pytest.raises(SystemExit, match="unknown Nexmark query 'q99'"):
        cli.main(base + ["--query", "q99"])
    with pytest.raises(SystemExit, match="source of its own"):
        cli.main(base + ["--query", "q0", "--kafka-bootstrap-servers", "127.0.0.1:1"])
    with pytest.raises(SystemExit, match="--query is for the nexmark scenario"):
        cli.main(["loadtest", "chain", "--query", "q5", "--output", str(tmp_path)])
