"""The pipelines of PyFlink's windowing examples (``pyflink/examples/datastream/windowing``),
written as a PyFlink user writes them — generic window-function classes, declared types,
``key_type`` — with the rows Flink computes for their inputs."""

from typing import Iterable

import pytest

from raylink.api import (
    ContinuousEventTimeTrigger,
    CountWindow,
    EventTimeSessionWindows,
    ProcessWindowFunction,
    SessionWindowTimeGapExtractor,
    SlidingEventTimeWindows,
    StreamExecutionEnvironment,
    Time,
    TimestampAssigner,
    TimeWindow,
    TumblingEventTimeWindows,
    Types,
    WatermarkStrategy,
    WindowFunction,
)
from raylink.api.configuration import Configuration

pytestmark = pytest.mark.timeout(60)

EVENTS = [("hi", 1), ("hi", 2), ("hi", 3), ("hi", 4), ("hi", 5), ("hi", 8), ("hi", 9), ("hi", 15)]
ROW = Types.TUPLE([Types.STRING(), Types.INT(), Types.INT(), Types.INT()])


class SecondField(TimestampAssigner):
    def extract_timestamp(self, value, record_timestamp) -> int:
        return int(value[1])


class CountPerWindow(ProcessWindowFunction[tuple, tuple, str, TimeWindow]):
    def process(
        self, key: str, context: ProcessWindowFunction.Context[TimeWindow], elements: Iterable[tuple]
    ) -> Iterable[tuple]:
        return [(key, context.window().start, context.window().end, len(list(elements)))]

    def clear(self, context: ProcessWindowFunction.Context) -> None:
        pass


def windowed(events, assigner, trigger=None, interval=None):
    conf = Configuration().set_string("execution.target", "local")
    env = StreamExecutionEnvironment.get_execution_environment(conf)
    env.set_parallelism(1)
    if interval is not None:
        env.get_config().set_auto_watermark_interval(interval)
    stream = env.from_collection(events, type_info=Types.TUPLE([Types.STRING(), Types.INT()]))
    keyed = stream.assign_timestamps_and_watermarks(
        WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(SecondField())
    ).key_by(lambda x: x[0], key_type=Types.STRING())
    w = keyed.window(assigner)
    if trigger is not None:
        w = w.trigger(trigger)
    return list(w.process(CountPerWindow(), ROW).execute_and_collect())


def test_tumbling_time_window_example():
    assert windowed(EVENTS, TumblingEventTimeWindows.of(Time.milliseconds(5))) == [
        ("hi", 0, 5, 4),
        ("hi", 5, 10, 3),
        ("hi", 15, 20, 1),
    ]


def test_sliding_time_window_example():
    got = windowed(EVENTS, SlidingEventTimeWindows.of(Time.milliseconds(5), Time.milliseconds(2)))
    # windows [s, s + 5) for even s, each counting the timestamps it holds
    expected = []
    for start in range(-4, 16, 2):
        n = sum(1 for _, ts in EVENTS if start <= ts < start + 5)
        if n:
            expected.append(("hi", start, start + 5, n))
    assert sorted(got) == expected


def test_session_with_gap_window_example():
    events = [("hi", 1), ("hi", 2), ("hi", 3), ("hi", 4), ("hi", 9), ("hi", 9), ("hi", 15)]
    # [1, 6) ... [9, 14) touch or overlap: one session; 15 starts after 14: another
    assert windowed(events, EventTimeSessionWindows.with_gap(Time.milliseconds(5))) == [
        ("hi", 1, 14, 6),
        ("hi", 15, 20, 1),
    ]


def test_session_with_dynamic_gap_window_example():
    class GapIsTheTimestamp(SessionWindowTimeGapExtractor):
        def extract(self, element: tuple) -> int:
            return element[1]

    events = [("hi", 1), ("hi", 2), ("hi", 3), ("hi", 4), ("hi", 9), ("hi", 9), ("hi", 15)]
    # [1,2) [2,4) [3,6) [4,8) merge into [1, 8); [9,18) [9,18) [15,30) into [9, 30)
    assert windowed(events, EventTimeSessionWindows.with_dynamic_gap(GapIsTheTimestamp())) == [
        ("hi", 1, 8, 4),
        ("hi", 9, 30, 3),
    ]


def test_tumbling_time_window_with_continuous_trigger_example():
    # no periodic watermark before the end of this tiny input (interval 0): only the final one,
    # which fires [0, 10) at its continuous fire time 5 and at its end, [10, 20) at its end
    got = windowed(
        EVENTS,
        TumblingEventTimeWindows.of(Time.milliseconds(10)),
        ContinuousEventTimeTrigger.of(Time.milliseconds(5)),
        interval=0,
    )
    assert got == [("hi", 0, 10, 7), ("hi", 0, 10, 7), ("hi", 10, 20, 1)]


def test_tumbling_count_window_example():
    class SumFirstField(WindowFunction[tuple, tuple, str, CountWindow]):
        def apply(self, key: str, window: CountWindow, inputs: Iterable[tuple]):
            return [(key, sum(i[0] for i in inputs))]

    env = StreamExecutionEnvironment.get_execution_environment(Configuration().set_string("execution.target", "local"))
    env.set_parallelism(1)
    got = list(
        env.from_collection(
            [(1, "hi"), (2, "hello"), (3, "hi"), (4, "hello"), (5, "hi"), (6, "hello"), (6, "hello")],
            type_info=Types.TUPLE([Types.INT(), Types.STRING()]),
        )
        .key_by(lambda x: x[1], key_type=Types.STRING())
        .count_window(3)
        .apply(SumFirstField(), Types.TUPLE([Types.STRING(), Types.INT()]))
        .execute_and_collect()
    )
    assert got == [("hi", 9), ("hello", 12)]  # the fourth "hello" waits for two more
