"""``env.from_source(source, watermark_strategy, name)``: the strategy runs inside the source
operator (Flink's ``SourceOperator``), so event-time windows downstream fire from its
watermarks, and the graphs have the same nodes as without a strategy."""

from __future__ import annotations

from collections import defaultdict

import pytest

from raylink.api import Duration, OutputTag, Time, TumblingEventTimeWindows, WatermarkStrategy
from raylink.api.connectors import NumberSequenceSource
from raylink.api.watermark_strategy import Watermark, WatermarkGenerator
from raylink.tests.runtime_jobs import make_env

pytestmark = pytest.mark.timeout(120)

N = 3000
SIZE = 100


class EventTime:
    """Event time of n: roughly n, shuffled within a bound of 7."""

    def extract_timestamp(self, value, record_timestamp):
        return value * 3 + (value * 7919) % 7


def reference() -> dict:
    """Per (key, window end): the sum of n, with the event time above (nothing is late:
    every event is within the strategy's out-of-orderness of the maximum seen)."""
    sums = defaultdict(int)
    for n in range(1, N + 1):
        ts = n * 3 + (n * 7919) % 7
        sums[(n % 3, ts - ts % SIZE + SIZE)] += n
    return dict(sums)


def build(env, strategy):
    stream = env.from_source(NumberSequenceSource(1, N), strategy, "numbers")
    return (
        stream.key_by(lambda n: n % 3)
        .window(TumblingEventTimeWindows.of(Time.milliseconds(SIZE)))
        .reduce(lambda a, b: a + b)
    )


@pytest.mark.parametrize("parallelism", [1, 2])
def test_from_source_watermarks_fire_event_time_windows(target, parallelism):
    env = make_env(target, parallelism, {"pipeline.auto-watermark-interval": "20 ms"})
    strategy = WatermarkStrategy.for_bounded_out_of_orderness(Duration.of_millis(10)).with_timestamp_assigner(
        EventTime()
    )
    result = list(build(env, strategy).execute_and_collect())
    # each window's result is the sum of its key's values: compare the multiset of sums
    assert sorted(result) == sorted(reference().values())


class Disordered:
    """Event time of n with a disorder up to 400 ms: beyond a bound of 0, so late."""

    def extract_timestamp(self, value, record_timestamp):
        return value * 3 + (value * 7919) % 400


class Punctuated(WatermarkGenerator):
    """A punctuated generator: a watermark right after every event (Flink's
    ``onEvent``-driven generators), so watermarks do not depend on the emit interval."""

    def __init__(self):
        self.highest = -(1 << 63)

    def on_event(self, event, event_timestamp, output):
        self.highest = max(self.highest, event_timestamp)
        output.emit_watermark(Watermark(self.highest - 1))

    def on_periodic_emit(self, output):
        pass


def test_the_sources_watermarks_make_disordered_events_late(target):
    """Late data exists only if the source generated watermarks while it ran: with a
    punctuated generator some events are late (side output), with ``no_watermarks`` none are
    (the only watermark is the end of input); nothing is lost either way."""
    late = OutputTag("late")

    def run(strategy):
        env = make_env(target, 1, {})
        windowed = (
            env.from_source(NumberSequenceSource(1, N), strategy.with_timestamp_assigner(Disordered()), "numbers")
            .key_by(lambda n: 0)
            .window(TumblingEventTimeWindows.of(Time.milliseconds(SIZE)))
            .side_output_late_data(late)
            .reduce(lambda a, b: a + b)
        )
        out = windowed.map(lambda v: ("on time", v)).union(windowed.get_side_output(late).map(lambda v: ("late", v)))
        records = list(out.execute_and_collect())
        return [v for kind, v in records if kind == "on time"], [v for kind, v in records if kind == "late"]

    on_time, late_values = run(WatermarkStrategy.for_generator(Punctuated))
    assert late_values, "no event was late: the source generated no watermarks while it ran"
    assert sum(on_time) + sum(late_values) == N * (N + 1) // 2
    on_time, late_values = run(WatermarkStrategy.no_watermarks())
    assert late_values == [] and sum(on_time) == N * (N + 1) // 2


def test_from_source_with_a_strategy_adds_no_node_to_the_graphs():
    plain = make_env("local", 2, {})
    build(plain, WatermarkStrategy.no_watermarks()).add_sink(lambda v: None)
    with_strategy = make_env("local", 2, {})
    build(with_strategy, WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(EventTime())).add_sink(
        lambda v: None
    )
    names = lambda env: [v["name"] for v in env.get_job_graph().to_dict()["vertices"]]  # noqa: E731
    assert names(plain) == names(with_strategy)
    assert names(plain)[0].startswith("Source: numbers")


def test_from_source_rejects_a_strategy_that_is_not_one():
    env = make_env("local", 1, {})
    with pytest.raises(TypeError, match="from_source 'numbers': watermark_strategy must be a WatermarkStrategy"):
        env.from_source(NumberSequenceSource(1, 3), "not a strategy", "numbers")


def test_without_a_strategy_nothing_fires():
    """``no_watermarks()``: the only watermark is the end of input, so each window fires once
    at the end; the sums are the same."""
    env = make_env("local", 1, {})
    result = list(
        build(env, WatermarkStrategy.no_watermarks().with_timestamp_assigner(EventTime())).execute_and_collect()
    )
    assert sorted(result) == sorted(reference().values())
