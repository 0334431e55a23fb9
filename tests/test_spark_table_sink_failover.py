"""A failover between a checkpoint's completion and its table commit, for the Delta and Iceberg
sinks (by path and by table) on Ray through RayDP: a sink subtask's TaskExecutor process is
SIGKILLed inside ``notify_checkpoint_complete`` -- before it handed the completed checkpoint's
files to the driver's committer, or right after the driver committed them -- as
tests/test_kafka_sink_failover.py kills a Kafka sink's committer. The restored job commits
that checkpoint's files once (or finds the commit in the table and adds nothing): Spark reads
every input row exactly once and the table's history holds at most one commit per checkpoint.
Expected rows come from the input itself."""

from __future__ import annotations

import os
import signal as os_signal
import sys
from collections import Counter

import cloudpickle
import pytest
import ray

from raylink.connectors.spark.sink import SparkSink, SparkSinkOperator
from raylink.tests.test_runtime_checkpointing import Paced, checkpointing_env
from raylink.tests.test_spark_delta_iceberg import commits_per_checkpoint, read_back, target_args

for _pickler in (cloudpickle, ray.cloudpickle):
    _pickler.register_pickle_by_value(sys.modules[__name__])

N = 8_000


def _first(marker: str) -> bool:
    """True for the first caller of the job (the marker file is created once)."""
    try:
        os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return False
    return True


class KillInCommitOperator(SparkSinkOperator):
    """Dies by SIGKILL (the whole TaskExecutor process) the first time a completed checkpoint
    has staged files to commit: ``before`` handing them to the driver, or ``after`` the driver
    committed them (the subtask's state still lists them: the restore hands them in again)."""

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        sink = self.sink
        staged = any(files for c, (files, _rows, _ended) in self._pending.items() if c <= checkpoint_id)
        kill = self._exactly_once and staged and checkpoint_id >= 2 and _first(sink.marker)
        if kill and sink.moment == "before":
            os.kill(os.getpid(), os_signal.SIGKILL)
        super().notify_checkpoint_complete(checkpoint_id)
        if kill:
            os.kill(os.getpid(), os_signal.SIGKILL)


class KillInCommitSink(SparkSink):
    def __init__(self, marker: str, moment: str, **kwargs) -> None:
        super().__init__(**kwargs)
        self.marker = marker
        self.moment = moment

    def create_operator(self, spec) -> SparkSinkOperator:
        return KillInCommitOperator(self)


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize(
    "kind, moment",
    [
        ("delta-path", "before"),
        ("delta-table", "before"),
        ("iceberg", "before"),
        ("delta-path", "after"),
        ("iceberg", "after"),
    ],
)
def test_a_failover_between_a_checkpoints_completion_and_its_commit_is_still_exactly_once(
    spark, tmp_path, kind, moment
):
    marker = str(tmp_path / "killed-in-commit")
    env = checkpointing_env("ray", 2, tmp_path, **{"execution.checkpointing.interval": "500 ms"})
    sink = KillInCommitSink(marker, moment, schema="v bigint", **target_args(kind, tmp_path))
    env.from_sequence(0, N - 1).map(Paced(-1)).sink_to(sink)
    client = env.execute_async()
    assert client.wait(400), "the job did not finish"
    assert client.get_job_status() == "FINISHED", client.get_job_status()
    assert os.path.exists(marker)  # a TaskExecutor died inside a commit
    assert client.get_checkpoint_stats()["numRestarts"] >= 1
    assert read_back(spark, sink) == Counter((v,) for v in range(N))
    per_checkpoint = commits_per_checkpoint(spark, sink)
    assert len(per_checkpoint) >= 2 and max(per_checkpoint.values()) == 1, per_checkpoint
