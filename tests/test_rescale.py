"""Rescaling a running job (Flink's adaptive scheduler, FLIP-291's ``PUT
/jobs/:jobid/resource-requirements``, ``JobClient.rescale``): a keyed rolling count into the
exactly-once FileSink is rescaled 2 -> 3 -> 1 while it runs -- over the REST API on Ray, through
the JobClient in the local executor -- and its committed output equals the brute-force rolling
counts of the input (nothing lost, nothing committed twice), with the same job id, the job going
RUNNING -> RESTARTING -> RUNNING and the REST views showing the new parallelism. Requests the job
cannot follow are refused naming the vertex (400 over REST), the job untouched."""

from __future__ import annotations

import json
import os
import threading

import pytest

from raylink.api import Encoder, FileSink, MapFunction, OutputFileConfig, RollingPolicy
from raylink.bench.failover import KEYS, committed_lines, reference
from raylink.runtime.job.rescaling import RescaleRefusedError, RescaleRequestError
from raylink.tests.runtime_jobs import make_env, wait_for
from raylink.tests.test_runtime_checkpointing import add_counts
from raylink.tests.test_runtime_rest_api import get, http

N = 12_000


def _ship_by_value() -> None:
    """This module is not importable in Ray's workers (as ``test_runtime_*`` modules, which
    ``make_env`` ships): its functions travel by value."""
    import sys

    import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    try:
        import ray

        ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    except ImportError:  # pragma: no cover
        pass


_ship_by_value()


class Gated(MapFunction):
    """Slow (2 ms a record) until the ``release`` file exists, then as fast as it goes: the
    job runs while the test rescales it and ends soon after (bounded either way)."""

    def __init__(self, release: str) -> None:
        self.release = release
        self.released = False

    def map(self, value):
        if not self.released:
            if value % 50 == 0:
                self.released = os.path.exists(self.release)
            import time

            time.sleep(0.002)  # pacing: the workload, not a wait
        return value


def build(env, tmp_path, n: int = N, sink=None) -> None:
    """The keyed rolling count of 1..n into ``sink`` (default: the FileSink, exactly once),
    paced by :class:`Gated`."""
    sink = sink or (
        FileSink.for_row_format(str(tmp_path / "out"), Encoder.simple_string_encoder())
        .with_output_file_config(OutputFileConfig.builder().with_part_prefix("part").build())
        .with_rolling_policy(RollingPolicy.on_checkpoint_rolling_policy())
        .build()
    )
    (
        env.from_sequence(1, n)
        .uid("numbers")
        .map(Gated(str(tmp_path / "release")))
        .uid("gated")
        .map(lambda v: (v % KEYS, 1))
        .uid("pairs")
        .key_by(lambda kv: kv[0])
        .reduce(add_counts)
        .uid("rolling-count")
        .set_max_parallelism(8)
        .map(lambda kv: f"{kv[0]},{kv[1]}")
        .uid("format")
        .sink_to(sink)
        .uid("files")
    )


def rescale_env(target: str, tmp_path, **extra):
    conf = {
        "execution.checkpointing.interval": "500 ms",
        "execution.checkpointing.dir": str(tmp_path / "checkpoints"),
        "restart-strategy.type": "fixed-delay",
        "restart-strategy.fixed-delay.attempts": 3,
        "restart-strategy.fixed-delay.delay": "200 ms",
        "rest.port": 0,
    }
    conf.update(extra)
    return make_env(target, 2, conf)


def keyed_vertex(client):
    return next(v for v in client.execution_graph.job_vertices if v.name.startswith("Keyed Reduce"))


def running_with_a_checkpoint(client) -> None:
    assert wait_for(
        lambda: (
            client.get_job_status() == "RUNNING" and client.get_checkpoint_stats()["numberOfCompletedCheckpoints"] > 0
        ),
        client,
        timeout=120,
    ), client.get_job_status()


def finish_exactly_once(client, tmp_path, job_id: str, committed=None) -> None:
    (tmp_path / "release").write_text("go")
    assert client.wait(180), "the rescaled job did not finish"
    assert client.get_job_status() == "FINISHED", client.get_job_status()
    assert client.job_id == job_id
    got = committed() if committed is not None else committed_lines(tmp_path / "out")
    assert got == reference(N), "rolling counts lost or repeated across rescales"
    stats = client.get_checkpoint_stats()
    assert stats["numRestarts"] == 0 and stats["lastRestoredCheckpointId"] is not None, stats


def put_requirements(base: str, job_id: str, body: dict) -> tuple:
    status, answer, _ = http(
        f"{base}/jobs/{job_id}/resource-requirements",
        "PUT",
        {"Content-Type": "application/json"},
        json.dumps(body).encode(),
    )
    return status, answer


@pytest.mark.ray
@pytest.mark.slow
@pytest.mark.timeout(400)
def test_a_keyed_count_rescaled_2_3_1_over_rest_on_ray_commits_every_record_once(ray_session, tmp_path):
    env = rescale_env("ray", tmp_path)
    build(env, tmp_path)
    client = env.execute_async()
    job_id, base = client.job_id, client.rest_endpoint.url
    keyed = keyed_vertex(client)
    running_with_a_checkpoint(client)
    assert get(base, f"/jobs/{job_id}/resource-requirements")[keyed.id] == {
        "parallelism": {"lowerBound": 1, "upperBound": 2}
    }
    for parallelism in (3, 1):
        assert put_requirements(
            base, job_id, {keyed.id: {"parallelism": {"lowerBound": 1, "upperBound": parallelism}}}
        ) == (
            200,
            {},
        )
        assert wait_for(
            lambda: (
                (details := get(base, f"/jobs/{job_id}"))["state"] == "RUNNING"
                and {v["id"]: v["parallelism"] for v in details["vertices"]}[keyed.id] == parallelism
            ),
            client,
            timeout=120,
        ), get(base, f"/jobs/{job_id}")
        assert get(base, f"/jobs/{job_id}/resource-requirements")[keyed.id]["parallelism"]["upperBound"] == parallelism
        assert get(base, f"/jobs/{job_id}/vertices/{keyed.id}")["parallelism"] == parallelism
        assert "RESTARTING" in client.status_timestamps  # RUNNING -> RESTARTING -> RUNNING
    finish_exactly_once(client, tmp_path, job_id)


@pytest.mark.timeout(200)
def test_a_keyed_count_rescaled_2_3_1_through_the_job_client_locally_commits_every_record_once(tmp_path):
    env = rescale_env("local", tmp_path)
    build(env, tmp_path)
    client = env.execute_async()
    job_id = client.job_id
    running_with_a_checkpoint(client)
    for parallelism in (3, 1):  # the keyed vertex by its name, the source's by one of its operators' uid
        requirements = client.rescale(
            {"Keyed Reduce -> Map -> Sink: FileSink": parallelism, "numbers": 4 - parallelism}
        ).result(120)
        assert requirements[keyed_vertex(client).id]["parallelism"]["upperBound"] == parallelism
        assert client.get_job_status() == "RUNNING"
        assert [v.parallelism for v in client.execution_graph.job_vertices] == [4 - parallelism, parallelism]
    # a request while rescaling follows the current rescale (the latest requirements win)
    first, second = client.rescale({"rolling-count": 2}), client.rescale({"rolling-count": 1})
    assert first.result(120) and second.result(120)
    assert keyed_vertex(client).parallelism == 1 and client.get_job_status() == "RUNNING"
    finish_exactly_once(client, tmp_path, job_id)


@pytest.mark.timeout(300)
def test_the_kafka_sink_commits_every_record_once_across_rescales(kafka_broker, tmp_path):
    from raylink.api.connectors.kafka import DeliveryGuarantee
    from raylink.tests.kafka_util import new_topic
    from raylink.tests.test_kafka_sink import read_committed, string_sink, values

    servers = kafka_broker.bootstrap_servers
    topic = new_topic(servers, 3)
    env = rescale_env("local", tmp_path)
    build(env, tmp_path, sink=string_sink(servers, topic, DeliveryGuarantee.EXACTLY_ONCE, prefix=f"tx-{topic}"))
    client = env.execute_async()
    running_with_a_checkpoint(client)
    for parallelism in (3, 1):  # the sink's transactional ids and committables follow the parallelism
        client.rescale({"rolling-count": parallelism}).result(120)
        assert keyed_vertex(client).parallelism == parallelism
    finish_exactly_once(client, tmp_path, client.job_id, lambda: values(read_committed(servers, topic, N)))


@pytest.fixture
def idle_local_job(tmp_path):
    """A running local job (REST on) with a completed checkpoint; cancelled after the test."""
    env = rescale_env("local", tmp_path, **{"raylink.rest.enabled": "true"})
    build(env, tmp_path, n=1_000_000)
    client = env.execute_async()
    running_with_a_checkpoint(client)
    yield client
    client.cancel()
    assert client.wait(60)


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    "body, named",
    [
        ({"no-such-vertex": {"parallelism": {"lowerBound": 1, "upperBound": 2}}}, "no-such-vertex"),
        ({"Keyed Reduce": {"parallelism": {"lowerBound": 1, "upperBound": 0}}}, "below 1"),
        ({"Keyed Reduce": {"parallelism": {"lowerBound": 1, "upperBound": 9}}}, "max parallelism 8"),
        ({"Keyed Reduce": {"parallelism": {"lowerBound": 3, "upperBound": 2}}}, "lowerBound 3 is above"),
        ({"Keyed Reduce": 3}, "expected {"),
        ({}, "non-empty"),
    ],
)
def test_a_bad_request_is_answered_400_naming_it_and_the_job_runs_on(idle_local_job, body, named):
    client = idle_local_job
    base = client.rest_endpoint.url
    before = [v.parallelism for v in client.execution_graph.job_vertices]
    status, answer = put_requirements(base, client.job_id, body)
    assert status == 400 and named in answer["errors"][0], answer
    if "max parallelism" in named:
        assert "Keyed Reduce" in answer["errors"][0]
    assert client.get_job_status() == "RUNNING"
    assert [v.parallelism for v in client.execution_graph.job_vertices] == before
    with pytest.raises(RescaleRequestError):
        client.rescale({"Keyed Reduce": -1}).result(0)


def test_state_that_cannot_be_redistributed_is_refused_naming_the_vertex(tmp_path):
    env = rescale_env("local", tmp_path)
    env.add_source(list(range(10)), "numbers list").set_parallelism(2).map(lambda v: v).print()
    client = env.execute_async()
    try:
        error = client.rescale({"numbers list": 3}).exception(0)  # checked before anything happens
    finally:
        assert client.wait(60)
    assert isinstance(error, RescaleRequestError), error
    assert "numbers list" in str(error) and "cannot be redistributed" in str(error), error


def test_a_forward_edge_refuses_a_change_on_one_side_naming_both(tmp_path):
    env = rescale_env("local", tmp_path)
    env.from_sequence(1, 10).uid("n").map(lambda v: v).name("before").disable_chaining().map(lambda v: v).name(
        "after"
    ).disable_chaining().print()
    graph_client = env.execute_async()
    try:
        error = graph_client.rescale({"after": 3}).exception(0)  # checked before anything happens
    finally:
        assert graph_client.wait(60)
    assert isinstance(error, RescaleRequestError), error
    assert "forward" in str(error) and "'before'" in str(error) and "'after'" in str(error), error


def test_a_job_that_is_not_running_is_not_rescaled(tmp_path):
    env = rescale_env("local", tmp_path)
    env.from_sequence(1, 10).map(lambda v: v).print()
    client = env.execute_async()
    assert client.wait(60) and client.get_job_status() == "FINISHED"
    with pytest.raises(RescaleRefusedError, match="FINISHED, not RUNNING"):
        client.rescale({"Sequence Source": 1}).result(0)


@pytest.mark.timeout(300)
def test_a_job_that_finishes_as_its_rescale_begins_is_refused_as_finished_and_commits_once(tmp_path):
    """The autoscaler's race at the end of a bounded input: the job FINISHES after the rescale was
    accepted, before its checkpoint is taken. The rescale is refused as for any job that is not
    running (not as a failed checkpoint), and the job's output stands as committed."""
    env = rescale_env("local", tmp_path)
    build(env, tmp_path)
    client = env.execute_async()
    running_with_a_checkpoint(client)
    coordinator = client.coordinator
    trigger = coordinator.trigger_checkpoint_now

    def finish_then_checkpoint(**kwargs):
        (tmp_path / "release").write_text("go")
        assert wait_for(lambda: client.get_job_status() == "FINISHED", client, timeout=120)
        return trigger(**kwargs)

    coordinator.trigger_checkpoint_now = finish_then_checkpoint
    with pytest.raises(RescaleRefusedError, match="FINISHED, not RUNNING"):
        client.rescale({"rolling-count": 3}).result(180)
    assert client.wait(60) and client.get_job_status() == "FINISHED"
    assert keyed_vertex(client).parallelism == 2
    assert committed_lines(tmp_path / "out") == reference(N), "rolling counts lost or repeated"


@pytest.mark.timeout(300)
def test_a_job_whose_every_task_has_ended_is_refused_before_it_reports_finished(tmp_path):
    """The same race one step later: every task has reported FINISHED but the JobMaster has not
    yet made the job FINISHED (its status still says RUNNING). A rescale then is refused as not
    running -- restarting the job would have it go RESTARTING -> FINISHED -- and the job finishes
    with its output committed once."""
    env = rescale_env("local", tmp_path)
    build(env, tmp_path)
    client = env.execute_async()
    running_with_a_checkpoint(client)
    finish, ending, go_on = client._finish, threading.Event(), threading.Event()

    def finish_when_told():
        ending.set()
        assert go_on.wait(60), "the test did not let the job finish"
        finish()

    client._finish = finish_when_told
    try:
        (tmp_path / "release").write_text("go")
        assert ending.wait(120), "the tasks did not end"
        assert client.get_job_status() == "RUNNING"
        with pytest.raises(RescaleRefusedError, match="every task has ended.*not RUNNING"):
            client.rescale({"rolling-count": 3}).result(60)
    finally:
        go_on.set()
    assert client.wait(60) and client.get_job_status() == "FINISHED"
    assert keyed_vertex(client).parallelism == 2
    assert committed_lines(tmp_path / "out") == reference(N), "rolling counts lost or repeated"


@pytest.mark.timeout(120)
def test_raylink_rescale_finds_the_jobs_endpoint_and_waits_for_the_new_parallelism(idle_local_job, capsys):
    from raylink.cli.main import main

    client = idle_local_job
    assert main(["rescale", client.job_id, "--vertex", "rolling-count=3", "--timeout", "90"]) == 0
    printed = capsys.readouterr().out
    assert f"job {client.job_id} rescaled" in printed and "Keyed Reduce" in printed and "2 -> 3" in printed, printed
    assert keyed_vertex(client).parallelism == 3 and client.get_job_status() == "RUNNING"
    assert main(["rescale", client.job_id, "--vertex", "rolling-count=9", "--rest", client.rest_endpoint.url]) == 2
    assert "max parallelism 8" in capsys.readouterr().err
    assert main(["rescale", "0" * 32, "--vertex", "rolling-count=2", "--rest", client.rest_endpoint.url]) == 5
