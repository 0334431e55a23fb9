"""Nexmark q5 (hot items: sliding-window counts, then the top auctions per window) with
checkpoints on Ray, its TaskExecutor processes SIGKILLed twice while it runs: the exactly-once
FileSink's committed lines equal the brute-force answer over the same events (and so a
failure-free run's output) -- no window counted twice, none lost, no top row repeated."""

from __future__ import annotations

from collections import Counter

import pytest

from raylink.api import Encoder, FileSink, OutputFileConfig, RollingPolicy
from raylink.bench.failover import committed_lines
from raylink.bench.nexmark import NexmarkConfig, NexmarkSource, events
from raylink.bench.nexmark.queries import q5, watermark_strategy
from raylink.tests.test_nexmark import ref_q5
from raylink.tests.test_runtime_checkpointing import checkpointing_env
from raylink.tests.test_runtime_exactly_once_sinks import kill_task_executors_while_running

#: 12 s of events at their own pace (1,000 events/s of wall clock and of event time): six 2 s
#: hops of 10 s windows close while it runs, with room for two kills and their restores
CONFIG = NexmarkConfig(events=12_000, events_per_second=1000, max_emit_speed=False)


def _build(env, out) -> None:
    sink = (
        FileSink.for_row_format(str(out), Encoder.simple_string_encoder())
        .with_output_file_config(OutputFileConfig.builder().with_part_prefix("q5").build())
        .with_rolling_policy(RollingPolicy.on_checkpoint_rolling_policy())
        .build()
    )
    stream = env.from_source(NexmarkSource(CONFIG), watermark_strategy(), "nexmark").uid("nexmark")
    q5(stream).map(lambda row: f"{row[0]},{row[1]}").uid("format").sink_to(sink).uid("files")


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_checkpointed_q5_killed_twice_on_ray_commits_the_failure_free_output(ray_session, tmp_path):
    expected = Counter(f"{auction},{num}" for auction, num in ref_q5(events(CONFIG.events, CONFIG)))
    assert sum(expected.values()) >= 5, "the reference is too small to prove anything"
    env = checkpointing_env("ray", 2, tmp_path)
    out = tmp_path / "out"
    _build(env, out)
    client = env.execute_async()
    kills = kill_task_executors_while_running(client, kills=2)
    assert client.wait(240), "the job did not finish"
    assert client.get_job_status() == "FINISHED", client.get_job_status()
    failures = [f"{r.task_name}: {r.error!r}"[:500] for r in getattr(client, "exception_history", [])]
    assert client.get_checkpoint_stats()["numRestarts"] == kills == 2, failures
    assert committed_lines(out) == expected
