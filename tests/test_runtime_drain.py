"""Stop-with-savepoint with drain (``stop_with_savepoint(True, dir)``, ``raylink stop --drain``)
in Flink's order (FLIP-147): the sources emit the end of event time and stop, every task ends
its operators' input (``end_input`` / ``finish``) before its part of the savepoint, the
savepoint is taken and the job ends FINISHED. What only ``finish`` produces -- the async
operator's requests in flight, the sink writer's buffered rows -- is in the drained job's
committed output, every record the sources emitted exactly once; a job started from the
drained savepoint finds its sources ended and writes nothing more."""

from __future__ import annotations

import asyncio
import os
from collections import Counter

import pytest

from raylink.api import AsyncDataStream, Encoder, FileSink, OutputFileConfig, Time
from raylink.api.functions import AsyncFunction
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


def build(env, out) -> None:
    sink = (
        FileSink.for_row_format(str(out), Encoder.simple_string_encoder())
        .with_output_file_config(OutputFileConfig.builder().with_part_prefix("part").build())
        .build()
    )
    numbers = env.from_sequence(1, N).uid("numbers").key_by(lambda v: v % 7)  # the source: a task of its own
    echoed = AsyncDataStream.unordered_wait(numbers, SlowEcho(), Time.seconds(30), capacity=CAPACITY).uid("echo")
    echoed.map(str).uid("format").sink_to(sink).uid("files")


def source_records_out(client) -> int:
    return sum(m["numRecordsOut"] for m in client.get_metrics() if str(m["task"]).startswith("Source"))


@pytest.mark.parametrize("checkpointing", [False, True], ids=["savepoints-only", "checkpointing"])
def test_drain_finishes_every_operator_before_the_savepoint_and_the_output_is_exactly_once(
    target, tmp_path, checkpointing
):
    conf = {"execution.checkpointing.interval": "300 ms", "execution.checkpointing.dir": str(tmp_path / "chk")}
    env = make_env(target, 1, conf if checkpointing else None)
    out = tmp_path / "out"
    build(env, out)
    client = env.execute_async()
    assert wait_for(
        lambda: client.get_job_status() == "RUNNING" and source_records_out(client) > 10 * CAPACITY,
        client,
        timeout=120,
    )
    path = client.stop_with_savepoint(True, str(tmp_path / "savepoints")).result(timeout=120)
    assert client.wait(60) and client.get_job_status() == "FINISHED", client.get_job_status()
    assert os.path.isfile(os.path.join(path, "_metadata"))
    emitted = source_records_out(client)  # what the source emitted before its savepoint barrier
    assert 10 * CAPACITY < emitted < N, emitted
    # every record the source emitted went through the async requests in flight at the stop
    # (finished, not kept in the savepoint) into the committed files, once
    assert committed_lines(out) == Counter(str(v) for v in range(1, emitted + 1))

    env = make_env(target, 1, {"execution.savepoint.path": path})
    build(env, tmp_path / "again")
    restored = env.execute_async()
    assert restored.wait(120) and restored.get_job_status() == "FINISHED", restored.get_job_status()
    assert committed_lines(tmp_path / "again") == Counter(), "the drained job's sources did not stay ended"
