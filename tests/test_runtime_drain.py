"""Stop-with-savepoint with drain (``stop_with_savepoint(True, dir)``, ``raylink stop --drain``)
in Flink's order (FLIP-147): the sources emit the end of event time and stop, every task ends
its operators' input (``end_input`` / ``finish``) before its part of the savepoint, the
savepoint is taken and the job ends FINISHED. What only ``finish`` produces -- the async
operator's requests in flight, the sink writer's buffered rows -- is in the drained job's
committed output, every record the sources emitted exactly once; a job started from the
drained savepoint finds its sources ended and writes nothing more."""

from __future__ import annotations

import asyncio
import glob
import os
from collections import Counter

import pytest

from raylink.api import AsyncDataStream, Encoder, FileSink, OutputFileConfig, Time
from raylink.api.functions import AsyncFunction, MapFunction
from raylink.bench.failover import committed_lines
from raylink.tests.runtime_jobs import make_env, wait_for

pytestmark = pytest.mark.timeout(300)

N = 200_000  # far more than the job gets through before it is stopped
CAPACITY = 40


class SlowEcho(AsyncFunction):
    """``v -> [v]`` after 20 ms: with capacity 40 the async operator always has ~40 requests in
    flight, which only its ``finish`` (end of input) waits for."""

    async def async_invoke(self, value):
        await asyncio.sleep(0.02)  # the request's latency: the workload, not a wait
        return [value]


class Logged(MapFunction):
    """Passes every value on and appends it to ``<prefix>-<subtask>.log`` (a line each, flushed):
    what reached this point of the job, counted outside raylink's metrics."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix

    def open(self, runtime_context) -> None:
        index = runtime_context.get_index_of_this_subtask()
        self.file = open(f"{self.prefix}-{index}.log", "a", encoding="utf-8")  # noqa: SIM115 - closed in close()

    def map(self, value):
        self.file.write(f"{value}\n")
        self.file.flush()
        return value

    def close(self) -> None:
        self.file.close()


def logged(prefix) -> list:
    """The values :class:`Logged` wrote under ``prefix`` (a line being written may be cut)."""
    values = []
    for path in sorted(glob.glob(f"{prefix}-*.log")):
        with open(path, encoding="utf-8") as f:
            values.extend(int(line) for line in f.read().split())
    return values


def build(env, out, log) -> None:
    sink = (
        FileSink.for_row_format(str(out), Encoder.simple_string_encoder())
        .with_output_file_config(OutputFileConfig.builder().with_part_prefix("part").build())
        .build()
    )
    numbers = env.from_sequence(1, N).uid("numbers").map(Logged(str(log))).uid("log")  # what the source emitted
    numbers = numbers.key_by(lambda v: v % 7)  # the source: a task of its own
    echoed = AsyncDataStream.unordered_wait(numbers, SlowEcho(), Time.seconds(30), capacity=CAPACITY).uid("echo")
    echoed.map(str).uid("format").sink_to(sink).uid("files")


@pytest.mark.parametrize("checkpointing", [False, True], ids=["savepoints-only", "checkpointing"])
def test_drain_finishes_every_operator_before_the_savepoint_and_the_output_is_exactly_once(
    target, tmp_path, checkpointing
):
    conf = {"execution.checkpointing.interval": "300 ms", "execution.checkpointing.dir": str(tmp_path / "chk")}
    env = make_env(target, 1, conf if checkpointing else None)
    out, log = tmp_path / "out", tmp_path / "emitted"
    build(env, out, log)
    client = env.execute_async()
    assert wait_for(
        lambda: client.get_job_status() == "RUNNING" and len(logged(log)) > 10 * CAPACITY, client, timeout=120
    )
    path = client.stop_with_savepoint(True, str(tmp_path / "savepoints")).result(timeout=120)
    assert client.wait(60) and client.get_job_status() == "FINISHED", client.get_job_status()
    assert os.path.isfile(os.path.join(path, "_metadata"))
    emitted = logged(log)  # what the source emitted before its savepoint barrier, in order
    assert emitted == list(range(1, len(emitted) + 1)) and 10 * CAPACITY < len(emitted) < N, emitted[-5:]
    # every record the source emitted went through the async requests in flight at the stop
    # (finished, not kept in the savepoint) into the committed files, once
    assert committed_lines(out) == Counter(str(v) for v in emitted)

    env = make_env(target, 1, {"execution.savepoint.path": path})
    build(env, tmp_path / "again", tmp_path / "emitted-again")
    restored = env.execute_async()
    assert restored.wait(120) and restored.get_job_status() == "FINISHED", restored.get_job_status()
    assert committed_lines(tmp_path / "again") == Counter(), "the drained job's sources did not stay ended"
    assert logged(tmp_path / "emitted-again") == []
