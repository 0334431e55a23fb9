"""Two-input operators: co-map / co-flat-map / co-process and the combined watermark."""

import pytest

from raylink.api.functions import CoFlatMapFunction, CoMapFunction, CoProcessFunction, KeyedCoProcessFunction
from raylink.api.state import ValueStateDescriptor
from raylink.operators import MIN_WATERMARK
from raylink.operators.co import CoProcessOperator, CoStreamFlatMap, CoStreamMap, KeyedCoProcessOperator
from raylink.tests.harness import KeyedTwoInputStreamOperatorTestHarness, TwoInputStreamOperatorTestHarness

pytestmark = pytest.mark.timeout(30)


def test_co_map_with_function_object_and_pair():
    events = []

    class M(CoMapFunction):
        def open(self, ctx):
            events.append("open")

        def map1(self, v):
            return ("left", v)

        def map2(self, v):
            return ("right", v)

        def close(self):
            events.append("close")

    for fn in (M(), (lambda v: ("left", v), lambda v: ("right", v))):
        harness = TwoInputStreamOperatorTestHarness(CoStreamMap(fn)).open()
        harness.process_element1(1)
        harness.process_element2("a")
        harness.process_elements1([2, 3])
        harness.process_elements2(["b"])
        harness.close()
        assert harness.extract_output_values() == [
            ("left", 1),
            ("right", "a"),
            ("left", 2),
            ("left", 3),
            ("right", "b"),
        ]
    assert events == ["open", "close"]


def test_co_flat_map():
    class F(CoFlatMapFunction):
        def flat_map1(self, v):
            return [v, v]

        def flat_map2(self, v):
            yield from v

    harness = TwoInputStreamOperatorTestHarness(CoStreamFlatMap(F())).open()
    harness.process_element1(1)
    harness.process_elements2(["ab", "c"])
    harness.process_element2("d")
    harness.process_elements1([2])
    assert harness.extract_output_values() == [1, 1, "a", "b", "c", "d", 2, 2]


def test_bad_pair_is_rejected_with_operator_name():
    with pytest.raises(TypeError, match="joiner"):
        TwoInputStreamOperatorTestHarness(CoStreamMap((str,), name="joiner")).open()
    with pytest.raises(TypeError, match="joiner"):
        TwoInputStreamOperatorTestHarness(CoStreamMap(object(), name="joiner")).open()


def test_combined_watermark_is_minimum_and_only_advances():
    op = CoStreamMap((str, str))
    harness = TwoInputStreamOperatorTestHarness(op).open()
    out = harness.output
    harness.process_watermark1(10)
    assert out.watermarks == []  # input 2 still at MIN
    harness.process_watermark2(5)
    assert out.watermarks == [5]
    harness.process_watermark2(20)
    assert out.watermarks == [5, 10]
    harness.process_watermark1(15)
    assert out.watermarks == [5, 10, 15]
    harness.process_watermark2(15)  # min unchanged (15): nothing new
    harness.process_watermark1(12)  # input 1 went back: min 12 < 15, no regression
    assert out.watermarks == [5, 10, 15]
    assert op.current_watermark == 15
    op.process_latency_marker2("lm")
    assert out.latency_markers == ["lm"]


def test_co_process_side_outputs_and_watermark_in_context():
    class Tag:
        _is_output_tag = True
        tag_id = "odd"

    class P(CoProcessFunction):
        def process_element1(self, value, ctx):
            yield ("1", value, ctx.timestamp(), ctx.timer_service().current_watermark())

        def process_element2(self, value, ctx):
            if value % 2:
                yield Tag(), value
            else:
                yield ("2", value)

    harness = TwoInputStreamOperatorTestHarness(CoProcessOperator(P())).open()
    harness.process_element1("x")
    harness.process_watermark1(3)
    harness.process_watermark2(4)
    harness.process_element1("y", timestamp=9)
    harness.process_elements2([1, 2, 3], timestamp=9)
    assert harness.extract_output_values() == [("1", "x", None, MIN_WATERMARK), ("1", "y", 9, 3), ("2", 2)]
    assert harness.output.side_outputs == {"odd": [1, 3]}


def test_keyed_co_process_state_and_timers_on_combined_watermark():
    class Join(KeyedCoProcessFunction):
        def open(self, runtime_context):
            self.left = runtime_context.get_state(ValueStateDescriptor("left"))

        def process_element1(self, value, ctx):
            self.left.update(value[1])
            ctx.timer_service().register_event_time_timer(value[2])

        def process_element2(self, value, ctx):
            yield ("joined", ctx.get_current_key(), self.left.value(), value[1])

        def on_timer(self, timestamp, ctx):
            yield ("timer", ctx.get_current_key(), timestamp, self.left.value())

    harness = KeyedTwoInputStreamOperatorTestHarness(KeyedCoProcessOperator(Join(), lambda v: v[0], lambda v: v[0]))
    harness.open()
    out = harness.output
    harness.process_element1(("a", "L-a", 10))
    harness.process_element1(("b", "L-b", 5))
    harness.process_element2(("a", "R-a"))
    harness.process_element2(("c", "R-c"))
    assert harness.num_event_time_timers() == 2
    harness.process_watermark1(20)
    assert out.records == [("joined", "a", "L-a", "R-a"), ("joined", "c", None, "R-c")]
    harness.process_watermark2(7)
    assert out.records[2:] == [("timer", "b", 5, "L-b")]
    harness.process_watermark2(30)
    assert out.records[3:] == [("timer", "a", 10, "L-a")]
    assert out.watermarks == [7, 20] and harness.num_event_time_timers() == 0
    with pytest.raises(ValueError, match="^Assigned key must not be null!$"):
        harness.process_element2((None, 1))
