"""``raylink debug memory JOB_ID`` on a running job's TaskExecutors (Ray)."""

from __future__ import annotations

import json
import time

import pytest

from raylink.cli import main as cli  # cli.main(argv): the raylink command
from raylink.loadtest import SCENARIOS
from raylink.loadtest.runner import build_job

pytestmark = pytest.mark.timeout(180)


@pytest.fixture
def running_wordcount(ray_session):
    """The wordcount load test (two TaskExecutors) running for up to a minute, its keyed count
    holding state (records reached it)."""
    env = build_job(SCENARIOS["wordcount"], 2000, 1, 60.0, None)
    client = env.execute_async("debug memory test")
    deadline = time.monotonic() + 60
    while not any(m["task"].startswith("Count") and m["numRecordsIn"] for m in client.get_metrics()):
        assert time.monotonic() < deadline, "no record reached the keyed count in 60 s"
        assert client.get_job_status() == "RUNNING", client.get_job_status()
        time.sleep(0.1)
    yield client
    client.cancel()
    client.wait(30)


def test_debug_memory_reports_every_executor_and_starts_tracemalloc_once(running_wordcount, capsys):
    client = running_wordcount
    job = client.get_job_id()
    executors = list(client.handles)
    assert len(executors) == 2

    assert cli.main(["debug", "memory", job[:10], "--top", "5"]) == 0
    out, err = capsys.readouterr()
    assert out.startswith(f"raylink debug memory: job {job[:10]}: 2 TaskExecutor(s)\n")
    for executor in executors:
        assert f"== TaskExecutor {executor} (1 tasks): RSS " in out
    assert "   state entries Count (1/1): " in out  # the keyed count's state, per subtask
    assert "objects by type (gc-tracked" in out
    assert out.count("tracemalloc: started now in this TaskExecutor") == 2
    assert f"started tracemalloc in {', '.join(sorted(executors))}; call again" in err

    # the second call: tracing runs, so the top allocation sites show; --trim frees heap pages first
    assert cli.main(["debug", "memory", job, "--top", "5", "--json", "--trim"]) == 0
    reports = json.loads(capsys.readouterr().out)
    assert sorted(r["executor"] for r in reports) == sorted(executors)
    for report in reports:
        assert report["rssBytes"] > 20 * 2**20 and report["tasks"] == 1
        traced = report["tracemalloc"]
        assert traced["started"] is False and traced["tracedBytes"] > 0
        assert 0 < len(traced["top"]) <= 5 and all(s["bytes"] > 0 and ":" in s["site"] for s in traced["top"])
        assert 0 < len(report["python"]["topTypes"]) <= 5
        assert report["networkBuffers"]["total"] >= report["networkBuffers"]["inUse"] >= 0
        assert isinstance(report["trimmedRssBytes"], int)  # glibc: the RSS change malloc_trim made
    keyed = [r for r in reports if r["stateEntries"]]
    assert len(keyed) == 1 and list(keyed[0]["stateEntries"]) == ["Count (1/1)"]
    assert keyed[0]["stateBytes"]["Count (1/1)"] > 0  # keyed state size per operator (issue 31)


def test_debug_memory_of_an_unknown_job_names_the_running_ones(running_wordcount, capsys):
    assert cli.main(["debug", "memory", "no-such-job"]) == 5
    err = capsys.readouterr().err
    assert "raylink debug memory: no running job with id 'no-such-job' on this Ray cluster" in err
    assert running_wordcount.get_job_id() in err
