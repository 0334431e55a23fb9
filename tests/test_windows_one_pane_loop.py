"""The window operator's one-pane loop (a run of elements that all fall into one window that is
not due) and the timestamp assigner's batch check, against brute-force references computed here."""

import random
from decimal import Decimal

import pytest

from raylink.api import AggregateFunction, Time, TumblingEventTimeWindows, WatermarkStrategy
from raylink.operators.base import MAX_WATERMARK
from raylink.operators.timestamps import TimestampsAndWatermarksOperator
from raylink.operators.window import WindowOperatorDescriptor, create_window_operator
from raylink.tests.harness import KeyedOneInputStreamOperatorTestHarness, OneInputStreamOperatorTestHarness

pytestmark = pytest.mark.timeout(60)

SIZE = 100


def key_of(value):
    return value[0]


def concat(a, b):
    """Order-sensitive: the reference must apply a key's elements in arrival order too."""
    return (a[0], a[1] + b[1])


class ConcatAgg(AggregateFunction):
    def create_accumulator(self):
        return ""

    def add(self, value, acc):
        return acc + value[1]

    def get_result(self, acc):
        return acc

    def merge(self, a, b):
        return a + b


def all_values(key, window, inputs):
    return [(key, window.start, "".join(v[1] for v in inputs))]


def window_operator(contents):
    desc = WindowOperatorDescriptor(
        assigner=TumblingEventTimeWindows.of(Time.milliseconds(SIZE)),
        trigger=TumblingEventTimeWindows.of(Time.milliseconds(SIZE)).get_default_trigger(),
        evictor=None,
        allowed_lateness=0,
        late_data_output_tag=None,
        contents=contents,
        reduce_function=concat if contents == "reducing" else None,
        aggregate_function=ConcatAgg() if contents == "aggregating" else None,
        window_function=all_values if contents == "list" else None,
        function_kind="window" if contents == "list" else "pass",
    )
    harness = KeyedOneInputStreamOperatorTestHarness(
        create_window_operator(desc, key_of), task_name="", operator_name=""
    ).open()
    return harness.operator, harness.output


def reference(events, contents):
    """(record, timestamp) of every window, by brute force: a key's values concatenated in
    arrival order per window."""
    panes = {}
    for (key, letter), ts in events:
        start = ts - ts % SIZE
        panes[(key, start)] = panes.get((key, start), "") + letter
    rows = []
    for (key, start), text in panes.items():
        if contents == "reducing":
            record = (key, text)
        elif contents == "aggregating":
            record = text
        else:
            record = (key, start, text)
        rows.append((record, start + SIZE - 1))
    return sorted(rows, key=repr)


@pytest.mark.parametrize("contents", ["reducing", "aggregating", "list"])
def test_one_pane_runs_match_a_brute_force_reference(contents):
    rnd = random.Random(contents)
    # ascending timestamps, 3 ms per run of 48 elements: most runs lie in one window; keys repeat
    # inside a run and new keys turn up in the middle of one
    events = [((f"k{rnd.randrange(30)}", rnd.choice("abcdefgh")), i // 16) for i in range(4800)]
    op, out = window_operator(contents)
    one_pane_runs = []
    loop = op._process_in_window

    def counting(values, window):
        one_pane_runs.append(len(values))
        return loop(values, window)

    op._process_in_window = counting
    for i in range(0, len(events), 48):
        run = events[i : i + 48]
        op.process_timestamped_batch([v for v, _ in run], [t for _, t in run])
        watermark = run[-1][1] - 1
        op.process_watermark(watermark)
        # one timer per (key, window) with contents, however many elements it holds
        assert op.timer_service.num_event_time_timers() == len(pane_contents(events[: i + 48], watermark, contents))
    op.process_watermark(MAX_WATERMARK)
    assert sorted(zip(out.records, out.timestamps), key=repr) == reference(events, contents)
    assert sum(one_pane_runs) > len(events) // 2  # the loop under test did most of the work
    assert op.keyed_state_backend.get_namespaced_table("window-contents", contents).values == {}
    assert op.timer_service.num_event_time_timers() == 0


def pane_contents(events, watermark, contents):
    """``{(key, window start): contents}`` of the panes not fired at ``watermark``, by brute force."""
    panes = {}
    for value, ts in events:
        start = ts - ts % SIZE
        if start + SIZE - 1 > watermark:
            panes.setdefault((value[0], start), []).append(value)
    if contents == "reducing":
        return {p: (p[0], "".join(v[1] for v in vs)) for p, vs in panes.items()}
    if contents == "aggregating":
        return {p: "".join(v[1] for v in vs) for p, vs in panes.items()}
    return panes


@pytest.mark.parametrize("contents", ["reducing", "aggregating", "list"])
def test_one_pane_runs_after_checkpoints_keep_every_snapshot_and_the_output_exact(contents):
    """Snapshots freeze the panes into lower layers (copy-on-write): the runs after them read
    through the layers, and no snapshot sees a later change."""
    rnd = random.Random(contents + "layers")
    events = [((f"k{rnd.randrange(30)}", rnd.choice("abcdefgh")), i // 16) for i in range(4800)]
    op, out = window_operator(contents)
    snapshots = []  # (snapshot, what it must hold)
    for n, i in enumerate(range(0, len(events), 48)):
        run = events[i : i + 48]
        op.process_timestamped_batch([v for v, _ in run], [t for _, t in run])
        watermark = run[-1][1] - 1
        op.process_watermark(watermark)
        if n % 7 == 3:
            snapshots.append((op.keyed_state_backend.snapshot(), pane_contents(events[: i + 48], watermark, contents)))
    op.process_watermark(MAX_WATERMARK)
    assert sorted(zip(out.records, out.timestamps), key=repr) == reference(events, contents)
    assert len(snapshots) > 5
    for snapshot, expected in snapshots:
        held = {}
        for groups in snapshot.values():
            for key, panes in groups.get("window-contents", {}).items():
                for window, value in panes.items():
                    held[(key, window.start)] = value
        assert held == expected


class SecondField:
    def extract_timestamp(self, value, record_timestamp):
        return value[1]


def timestamps_operator():
    harness = OneInputStreamOperatorTestHarness(
        TimestampsAndWatermarksOperator(
            WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(SecondField())
        ),
        task_name="",
        operator_name="",
    ).open()
    return harness.operator, harness.output


@pytest.mark.parametrize("bad", [1.5, Decimal(3), None, "7"], ids=["float", "decimal", "none", "str"])
def test_a_non_int_timestamp_anywhere_in_a_batch_is_refused_naming_its_record(bad):
    op, out = timestamps_operator()
    batch = [("a", 1), ("b", 2), ("c", bad), ("d", 4)]
    with pytest.raises(TypeError, match=r"returned .* for record \('c', .*\); timestamps must be int"):
        op.process_batch(batch)
    assert out.records == []  # nothing of the refused batch went out


def test_int_timestamps_at_the_ends_of_the_long_range_go_out_unchanged():
    op, out = timestamps_operator()
    stamps = [-(2**63) + 1, 0, 2**63 - 2, 2**63 - 2, 5]  # their sum leaves the C long range
    op.process_batch([("v", ts) for ts in stamps])
    assert out.timestamps == stamps
    op.end_input()
    assert out.watermarks == [2**63 - 3]
