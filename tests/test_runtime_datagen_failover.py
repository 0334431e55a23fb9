"""Flink's ``DataGeneratorSource`` under SIGKILLs on Ray: its position (the next index of each
split) is checkpointed, so TaskExecutor processes killed while a rate-limited generator feeds a
keyed count into the exactly-once FileSink cost nothing -- the committed output equals the
rolling counts of ``1..n`` computed here, each line once."""

from __future__ import annotations

import pytest

from raylink.api import Encoder, FileSink, OutputFileConfig, RollingPolicy, WatermarkStrategy
from raylink.api.connectors import DataGeneratorSource, RateLimiterStrategy
from raylink.bench.failover import KEYS, committed_lines, reference
from raylink.tests.runtime_jobs import wait_for
from raylink.tests.test_runtime_checkpointing import add_counts, checkpointing_env
from raylink.tests.test_runtime_exactly_once_sinks import kill_task_executors_while_running


def generated_counts(env, n: int, per_second: float, out: str) -> None:
    """``DataGeneratorSource`` of ``1..n`` at ``per_second`` (uid ``numbers``) -> ``(v % KEYS, 1)``
    -> per-key rolling count (uid ``count``) -> the exactly-once FileSink at ``out`` (rolling on
    checkpoints), whose committed lines :func:`~raylink.bench.failover.reference` computes. Its
    functions ship by value to Ray (a ``test_runtime_*`` module)."""
    sink = (
        FileSink.for_row_format(out, Encoder.simple_string_encoder())
        .with_output_file_config(OutputFileConfig.builder().with_part_prefix("part").build())
        .with_rolling_policy(RollingPolicy.on_checkpoint_rolling_policy())
        .build()
    )
    source = DataGeneratorSource(lambda i: i + 1, n, RateLimiterStrategy.per_second(per_second))
    (
        env.from_source(source, WatermarkStrategy.no_watermarks(), "numbers")
        .uid("numbers")
        .map(lambda v: (v % KEYS, 1))
        .key_by(lambda kv: kv[0])
        .reduce(add_counts)
        .uid("count")
        .map(lambda kv: f"{kv[0]},{kv[1]}")
        .sink_to(sink)
    )


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_rate_limited_generator_survives_sigkilled_task_executors_exactly_once(ray_session, tmp_path):
    n = 12_000
    env = checkpointing_env("ray", 2, tmp_path)
    generated_counts(env, n, 1_000, str(tmp_path / "out"))
    client = env.execute_async()
    assert wait_for(lambda: client.get_checkpoint_stats()["numberOfCompletedCheckpoints"] > 0, client, timeout=60)
    kills = kill_task_executors_while_running(client, kills=2)
    assert client.wait(180) and client.get_job_status() == "FINISHED"
    assert kills == 2 and client.get_checkpoint_stats()["numRestarts"] == kills
    # the rolling counts of 1..n, each once: a replayed index would repeat a line, a skipped one lose it
    assert committed_lines(tmp_path / "out") == reference(n)
