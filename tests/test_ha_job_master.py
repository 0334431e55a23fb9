"""JobMaster high availability: the JobMaster actor's process is SIGKILLed while a checkpointed
keyed count writes into an exactly-once sink; Ray restarts it, it recovers the job from the
high-availability store (program, checkpoint counter, latest completed checkpoint), fences the
previous attempt's TaskExecutors, and the committed output equals the failure-free result
computed here without raylink. The same for the FileSink and the Spark sink."""

from __future__ import annotations

import os
import signal as os_signal
from collections import Counter

import pytest

from raylink.bench.failover import committed_lines, reference
from raylink.tests.runtime_jobs import wait_for
from raylink.tests.test_runtime_checkpointing import Paced, add_counts, build, checkpointing_env

N = 8000

pytestmark = [pytest.mark.ray, pytest.mark.slow]


def ha_env(tmp_path, parallelism: int = 2):
    return checkpointing_env(
        "ray",
        parallelism,
        tmp_path,
        **{"high-availability.type": "filesystem", "high-availability.storageDir": str(tmp_path / "ha")},
    )


def kill_job_master_after_a_checkpoint(client) -> tuple[int, int]:
    """SIGKILL the JobMaster actor's process once the job has completed a checkpoint; returns
    (the killed pid, the last checkpoint id completed before the kill)."""
    assert wait_for(lambda: client.get_checkpoint_stats().get("numberOfCompletedCheckpoints", 0) >= 2, client, 120)
    assert not client.wait(0), "the job ended before the JobMaster could be killed"
    last = client.get_checkpoint_stats()["lastCheckpointId"]
    pid = client.job_master_pid()
    os.kill(pid, os_signal.SIGKILL)
    return pid, last


def assert_recovered(client, pid: int, last_checkpoint: int) -> None:
    summary = client.summary()
    assert summary["pid"] != pid and summary["jobMasterIncarnation"] == 2 and summary["recovered"]
    stats = client.get_checkpoint_stats()
    # the recovered JobMaster restored a checkpoint of the first one and counted on from its ids
    assert stats["lastRestoredCheckpointId"] is not None and stats["lastRestoredCheckpointId"] >= 1
    assert stats["lastCheckpointId"] is None or stats["lastCheckpointId"] > last_checkpoint


@pytest.mark.timeout(240)
def test_a_sigkilled_job_master_recovers_and_the_file_sink_output_is_exactly_once(ray_session, tmp_path):
    env = ha_env(tmp_path)
    out = tmp_path / "out"
    build(env, out, n=N)
    client = env.execute_async()
    pid, last = kill_job_master_after_a_checkpoint(client)
    assert client.wait(180), "the recovered job did not finish"
    assert client.get_job_status() == "FINISHED"
    assert_recovered(client, pid, last)
    got = committed_lines(str(out))
    want = reference(N)
    assert got == want, f"lost {sum((want - got).values())}, duplicated {sum((got - want).values())}"
    assert not os.listdir(tmp_path / "ha" / "default" / "jobgraphs")  # a finished job's entries are gone


@pytest.mark.spark
@pytest.mark.timeout(600)  # the session's Spark may start here (its setup counts)
def test_a_sigkilled_job_master_recovers_and_the_spark_sink_output_is_exactly_once(spark, tmp_path):
    env = ha_env(tmp_path)
    target = str(tmp_path / "counts")
    (
        env.from_sequence(1, N)
        .map(Paced(0))
        .map(lambda v: (v % 7, 1))
        .key_by(lambda kv: kv[0])
        .reduce(add_counts)
        .sink_to_spark(path=target, schema="k bigint, c bigint", mode="append")
    )
    client = env.execute_async()
    pid, last = kill_job_master_after_a_checkpoint(client)
    assert client.wait(240), "the recovered job did not finish"
    assert client.get_job_status() == "FINISHED"
    assert_recovered(client, pid, last)
    got = Counter(f"{row[0]},{row[1]}" for row in spark.read.parquet(target).collect())
    assert got == reference(N)
