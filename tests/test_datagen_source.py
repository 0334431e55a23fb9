"""Flink's ``DataGeneratorSource`` with its ``RateLimiterStrategy`` (``raylink.api.connectors.datagen``):
every index exactly once at any parallelism, never faster than its schedule, waiting idle while
ahead of it, its backlog reported as ``pendingRecords``, and its position kept across a rescale
of the running job (every record committed once). Expected values are computed here from the
generator over ``range(count)``."""

from __future__ import annotations

import math
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from raylink.api import MapFunction, WatermarkStrategy
from raylink.api.connectors import DataGeneratorSource, RateLimiterStrategy
from raylink.bench.failover import committed_lines, reference
from raylink.tests.runtime_jobs import make_env, wait_for
from raylink.tests.test_runtime_datagen_failover import generated_counts


class Squares:
    """A ``GeneratorFunction`` object (``map(index)``)."""

    def map(self, index: int) -> int:
        return index * index


# -- the schedule ---------------------------------------------------------------------------------------
def test_steps_integrate_to_the_records_due_and_invert():
    strategy = RateLimiterStrategy.steps_of([(0, 100), (2, 500), (4, 50)])
    assert strategy.due(1) == 100
    assert strategy.due(3) == 200 + 500
    assert strategy.due(5) == 200 + 1000 + 50
    assert strategy.time_of(700) == pytest.approx(3.0)
    assert strategy.rate_at(2.5) == 500 and strategy.rate_at(10) == 50


@given(
    rates=st.lists(st.floats(1, 10_000), min_size=1, max_size=4),
    gaps=st.lists(st.floats(0.01, 100), min_size=3, max_size=3),
    records=st.floats(0, 1e6),
)
@settings(max_examples=200, deadline=None)
def test_time_of_is_the_inverse_of_due(rates, gaps, records):
    times = [0.0]
    for gap in gaps[: len(rates) - 1]:
        times.append(times[-1] + gap)
    strategy = RateLimiterStrategy.steps_of(list(zip(times, rates)))
    assert strategy.due(strategy.time_of(records)) == pytest.approx(records, rel=1e-9, abs=1e-6)


@pytest.mark.parametrize(
    "schedule, named",
    [
        ([], "first step starts at 0"),
        ([(1, 10)], "first step starts at 0"),
        ([(0, 10), (0, 20)], "step times must increase"),
        ([(0, 0)], "a rate must be > 0"),
        ([(0, float("nan"))], "a rate must be > 0"),
        ([(0,)], "a step is (seconds, records per second)"),
    ],
)
def test_a_bad_schedule_is_refused_naming_why(schedule, named):
    with pytest.raises(ValueError, match=named.replace("(", r"\(").replace(")", r"\)")):
        RateLimiterStrategy.steps_of(schedule)


@pytest.mark.parametrize(
    "args, error, named",
    [
        ((42, 10), TypeError, "generator_function must be a callable"),
        ((str, -1), ValueError, "count must be an integer >= 0"),
        ((str, 1.5), ValueError, "count must be an integer >= 0"),
        ((str, 10, "fast"), TypeError, "rate_limiter_strategy must be a RateLimiterStrategy"),
    ],
)
def test_a_bad_source_is_refused_naming_the_argument(args, error, named):
    with pytest.raises(error, match=named):
        DataGeneratorSource(*args)


# -- running ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("parallelism", [1, 2, 3])
@pytest.mark.parametrize("generator", [lambda i: ("v", i), Squares()], ids=["callable", "map-object"])
def test_every_index_is_generated_exactly_once(parallelism, generator):
    env = make_env("local", parallelism)
    source = DataGeneratorSource(generator, 2_345)
    got = list(env.from_source(source, WatermarkStrategy.no_watermarks(), "gen").execute_and_collect())
    fn = generator.map if hasattr(generator, "map") else generator
    assert sorted(got) == sorted(fn(i) for i in range(2_345))


def test_a_rate_limited_source_is_never_ahead_of_its_schedule_and_waits_idle():
    rate, count = 400.0, 800
    env = make_env("local", 2)
    source = DataGeneratorSource(lambda i: i, count, RateLimiterStrategy.per_second(rate))
    started = time.monotonic()
    env.from_source(source, WatermarkStrategy.no_watermarks(), "gen").filter(lambda v: False).print()
    client = env.execute_async()
    idle = []
    while not client.wait(0.3):
        idle += [m["idleTimeMsPerSecond"] for m in client.get_metrics() if m["vertex_name"].startswith("Source")]
    elapsed = time.monotonic() - started
    assert client.get_job_status() == "FINISHED"
    # all 800 records are due 2 s after the start at the earliest (each subtask: its share of the rate)
    assert elapsed >= (count - 2) / rate, elapsed
    assert idle and max(idle) > 500, idle  # far ahead of a slow rate, a subtask waits idle, not busy


class Slow(MapFunction):
    def map(self, value):
        time.sleep(0.002)  # the workload: about 500 records/s, below the source's rate
        return value


def test_the_backlog_against_the_schedule_is_reported_as_pending_records():
    env = make_env("local", 1)
    source = DataGeneratorSource(lambda i: i, 100_000, RateLimiterStrategy.per_second(5_000))
    env.from_source(source, WatermarkStrategy.no_watermarks(), "gen").rebalance().map(Slow()).filter(
        lambda v: False
    ).print()
    client = env.execute_async()

    def pending() -> int:
        return sum(
            op.get("pendingRecords", 0) for m in client.get_metrics() for op in (m.get("operators") or {}).values()
        )

    seen = []
    assert wait_for(lambda: seen.append(pending()) or seen[-1] > 500, client, timeout=30), seen
    client.cancel()
    client.wait(30)


def test_a_rescaled_rate_limited_source_emits_each_record_once(tmp_path):
    n = 6_000
    conf = {
        "execution.checkpointing.interval": "300 ms",
        "execution.checkpointing.dir": str(tmp_path / "checkpoints"),
    }
    env = make_env("local", 2, conf)
    generated_counts(env, n, 2_000, str(tmp_path / "out"))
    client = env.execute_async()
    assert wait_for(lambda: client.get_checkpoint_stats()["numberOfCompletedCheckpoints"] > 0, client, timeout=60)
    for parallelism in (3, 1):
        client.rescale({"numbers": parallelism}).result(120)
        assert client.execution_graph.job_vertices[0].parallelism == parallelism
    assert client.wait(120) and client.get_job_status() == "FINISHED"
    assert committed_lines(tmp_path / "out") == reference(n)  # rolling counts of 1..n: nothing lost or repeated
    assert math.isclose(client.get_checkpoint_stats()["numRestarts"], 0)
