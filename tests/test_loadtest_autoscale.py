"""``raylink loadtest JOB --rate-steps ... --conf job.autoscaler.enabled=true`` (issue 47, item 5):
a load whose rate steps up 5x and back down through a job whose keyed stage is slow; the report
holds the parallelism, the source's pendingRecords and the sink's p99 latency per sample, the
autoscaler's scaling reports, and plots them (``autoscaling.png``). Runs in this process
(``execution.target=local``)."""

from __future__ import annotations

import json
import os

import pytest

from raylink.loadtest.command import main

JOB = """
import time


def slow(record):
    time.sleep(0.01)  # about 95 records/s per subtask
    return record


def build(env, source):
    return source.key_by(lambda r: r[1] % 256).map(slow).set_max_parallelism(8)
"""


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_stepped_rate_with_the_autoscaler_on_is_reported_and_plotted(tmp_path, capsys):
    job = tmp_path / "slow_job.py"
    job.write_text(JOB)
    out = tmp_path / "report"
    conf = {
        "execution.target": "local",
        "job.autoscaler.enabled": "true",
        "autoscaler.standalone.control-loop.interval": "1 s",
        "job.autoscaler.metrics.window": "4 s",
        "job.autoscaler.stabilization.interval": "2 s",
        "job.autoscaler.utilization.target": "0.5",
        "job.autoscaler.scale-down.interval": "2 s",
        "execution.checkpointing.interval": "1 s",
        "execution.checkpointing.dir": str(tmp_path / "checkpoints"),
    }
    argv = [str(job), "--rate-steps", "0:30,5:150,25:30", "--duration", "40", "--output", str(out)]
    for key, value in conf.items():
        argv += ["--conf", f"{key}={value}"]
    assert main(argv) == 0
    report = json.loads((out / "report.json").read_text())
    (run,) = report["runs"]
    assert run["rateSteps"] == [[0.0, 30.0], [5.0, 150.0], [25.0, 30.0]]
    samples = run["metricSamples"]
    assert all("parallelism" in s and "pendingRecords" in s for s in samples)
    keyed = [name for name in samples[0]["parallelism"] if "LatencySink" in name]  # the keyed map chained to the sink
    assert keyed and max(s["parallelism"].get(keyed[0], 0) for s in samples) > 1  # scaled out meanwhile
    assert any(s["latencyP99Ms"] for s in samples)
    reports = [e for e in run["autoscaler"]["events"] if e["reason"] == "ScalingReport"]
    assert reports and "Parallelism 1 -> " in reports[0]["message"]
    assert "autoscaling.png" in report["plots"] and os.path.getsize(out / "autoscaling.png") > 10_000
    markdown = (out / "report.md").read_text()
    assert "## Autoscaler" in markdown and "ScalingReport: Scaling execution enabled" in markdown
    assert f"{run['autoscaler']['scalings']} autoscaler rescales" in markdown
