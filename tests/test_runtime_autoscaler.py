"""The autoscaler on a running job (``job.autoscaler.enabled``; issue 47, item 3): a keyed count
whose input rate (Flink's ``DataGeneratorSource`` with a step schedule) goes up 5x and back down
scales out while the rate is high and back in once it dropped, through its own rescales (same job
id), and the exactly-once FileSink commits exactly the rolling counts computed here over ``1..N``.
Locally and on Ray (where the REST API shows the same decisions); a parallelism the cluster cannot
place sends the job back to the one it ran at. The autoscaler on a Ray cluster that adds and
removes a node: ``tests/test_netns_autoscaling.py``."""

from __future__ import annotations

import os

import pytest

from raylink.actors.cluster import available_cpus
from raylink.bench.autoscale import AUTOSCALER_CONF, MAX_PARALLELISM, build, reference, schedule
from raylink.bench.failover import committed_lines
from raylink.runtime.job.rescaling import RescaleNotPlacedError, rescaler_of
from raylink.tests.runtime_jobs import make_env, wait_for
from raylink.tests.test_runtime_rest_api import get


def autoscaled_job(target: str, tmp_path, low: float = 30.0, extra: dict = None):
    """The keyed count at ``low`` records/s for 6 s, 5x that for 20 s, ``low`` for 20 s."""
    steps, records = schedule(low, 5 * low, 6.0, 20.0, 20.0)
    conf = {
        **AUTOSCALER_CONF,
        "execution.checkpointing.interval": "1 s",
        "execution.checkpointing.dir": str(tmp_path / "checkpoints"),
        "rest.port": 0,
        **(extra or {}),
    }
    env = make_env(target, 1, conf)
    build(env, steps, records, str(tmp_path / "out"))
    return env, records


def assert_scaled_out_and_in_exactly_once(client, tmp_path, records: int, job_id: str) -> dict:
    assert client.wait(300), "the autoscaled job did not finish"
    assert client.get_job_status() == "FINISHED" and client.job_id == job_id
    assert committed_lines(tmp_path / "out") == reference(records), "records lost or repeated across rescales"
    status = client.get_autoscaler_status()
    reports = [e for e in status["events"] if e["reason"] == "ScalingReport"]
    moves = [(v["from"], v["to"]) for e in reports for v in e["vertices"].values()]
    assert moves and moves[0][1] > moves[0][0], status  # first out, while the rate is high
    assert any(new < old for old, new in moves[1:]), status  # then in, once it dropped
    keyed = [p["vertices"] for p in status["parallelism"]]
    # a decision taken as the bounded input ran out is refused, the job ending or FINISHED meanwhile
    refused = [e["message"] for e in status["events"] if e["reason"] == "AutoscalerError"]
    assert all("not RUNNING: not rescaled" in message for message in refused), status
    assert max(max(v.values()) for v in keyed) > 1 and len(keyed) == len(reports) - len(refused) + 1, status
    assert client.get_checkpoint_stats()["numRestarts"] == 0
    return status


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_keyed_count_scales_out_and_back_in_locally_and_commits_every_record_once(tmp_path):
    env, records = autoscaled_job("local", tmp_path)
    client = env.execute_async()
    assert_scaled_out_and_in_exactly_once(client, tmp_path, records, client.job_id)


@pytest.mark.ray
@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_keyed_count_scales_out_and_back_in_on_ray_and_rest_shows_the_decisions(ray_session, tmp_path):
    env, records = autoscaled_job("ray", tmp_path)
    client = env.execute_async()
    job_id, base = client.job_id, client.rest_endpoint.url

    def shown() -> dict:
        return get(base, f"/jobs/{job_id}/autoscaler")

    # while it runs, the REST API shows the first decision, with the metrics behind it
    assert wait_for(lambda: any(e["reason"] == "ScalingReport" for e in shown()["events"]), client, timeout=120)
    view = shown()
    assert view["enabled"] is True and view["events"][0] in client.get_autoscaler_status()["events"]
    assert view["vertices"] and all(
        "TRUE_PROCESSING_RATE" in v and "TARGET_DATA_RATE" in v for v in view["vertices"].values()
    )
    assert_scaled_out_and_in_exactly_once(client, tmp_path, records, job_id)


def test_without_the_option_there_is_no_autoscaler(tmp_path):
    env = make_env("local", 1)
    env.from_collection([1, 2, 3]).map(lambda v: v).print()
    client = env.execute_async()
    assert client.wait(30)
    assert client.get_autoscaler_status() == {"enabled": False}


def test_inconsistent_utilization_bounds_fail_the_submission_naming_the_keys(tmp_path):
    env = make_env(
        "local",
        1,
        {"job.autoscaler.enabled": "true", "job.autoscaler.utilization.target": "0.9", "job.autoscaler.utilization.max": "0.8",
         "execution.checkpointing.dir": str(tmp_path / "c")},
    )  # fmt: skip
    env.from_collection([1, 2, 3]).map(lambda v: v).print()
    with pytest.raises(Exception, match=r"utilization\.target \(0\.9\) <= utilization\.max \(0\.8\)"):
        env.execute_async()


@pytest.mark.ray
@pytest.mark.timeout(300)
def test_a_rescale_the_cluster_cannot_place_goes_back_to_the_old_parallelism(ray_session, tmp_path, monkeypatch):
    import raylink.actors.ray_executor as ray_executor

    monkeypatch.setattr(ray_executor, "PLACEMENT_TIMEOUT_S", 5.0)  # the wait for CPUs no node has
    cpus = int(available_cpus())
    env, records = autoscaled_job(
        "ray", tmp_path, extra={"job.autoscaler.enabled": "false", "taskmanager.cpu.cores": "1",
                                "raylink.task-placement": "slot"},
    )  # fmt: skip
    client = env.execute_async()
    assert wait_for(lambda: client.get_checkpoint_stats()["numberOfCompletedCheckpoints"] > 0, client, timeout=60)
    with pytest.raises(RescaleNotPlacedError, match="runs on at its previous parallelism"):
        client.rescale({"count": min(cpus + 2, MAX_PARALLELISM)}).result(120)
    assert client.get_job_status() == "RUNNING"
    # the extra TaskExecutors were waited for while the job ran on: it was never stopped
    assert "RESTARTING" not in client.status_timestamps and rescaler_of(client).num_rescales == 0
    assert [v.parallelism for v in client.execution_graph.job_vertices] == [1, 1]
    client.cancel()
    assert client.wait(60)
    assert os.path.isdir(tmp_path / "checkpoints")
