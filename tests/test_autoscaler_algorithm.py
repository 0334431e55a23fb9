"""The autoscaler's arithmetic against Flink's formulas, computed here by hand from the samples
(``raylink.runtime.job.scaling_metrics``, ``raylink.runtime.job.job_vertex_scaler``): rates over
the window, the true processing rate, target and catch-up rates through the topology, the
thresholds, the new parallelism with its bounds, max factors and key-group alignment, the
delayed scale-down, FORWARD edges, and the control loop's window, stabilization and decision on
a job whose metrics are given (no runtime)."""

from __future__ import annotations

import math
import threading
from concurrent.futures import Future

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from raylink.core.job_status import JobStatus
from raylink.runtime.job.autoscaler import JobAutoScaler, scaling_report
from raylink.runtime.job.job_vertex_scaler import (
    DelayedScaleDown,
    align,
    compute_scale_target_parallelism,
    outside_utilization_bound,
    unify_forward,
)
from raylink.runtime.job.scaling_metrics import (
    CATCH_UP_DATA_RATE,
    LAG,
    LOAD,
    SCALE_DOWN_RATE_THRESHOLD,
    SCALE_UP_RATE_THRESHOLD,
    TARGET_DATA_RATE,
    TRUE_PROCESSING_RATE,
    JobTopology,
    Settings,
    VertexInfo,
    VertexSample,
    collect_sample,
    evaluate,
    target_capacity,
)

SRC, MID, SINK = "src", "mid", "sink"


def topology(max_parallelism: int = 128, hashed: bool = True) -> JobTopology:
    return JobTopology(
        {
            SRC: VertexInfo(SRC, "Source: numbers", 1, max_parallelism),
            MID: VertexInfo(MID, "Keyed Reduce", 2, max_parallelism, (SRC,), hash_input=hashed),
            SINK: VertexInfo(SINK, "Sink", 2, max_parallelism, (MID,)),
        }
    )


def sample(src_out: float, lag: float, mid_in: float, mid_out: float, loads=(0.1, 0.8, 0.2), busy=(0, 0, 0)) -> dict:
    return {
        SRC: VertexSample(1, loads[0], busy[0], src_out, src_out, lag),
        MID: VertexSample(2, loads[1], busy[1], mid_in, mid_out),
        SINK: VertexSample(2, loads[2], busy[2], mid_out, 0.0),
    }


def window() -> list:
    """10 s: the source emits 1000/s with its lag growing 50/s, the keyed vertex turns each record
    into 2, 80 % busy (MAX aggregator), the sink 20 % busy."""
    return [
        (100.0, sample(0, 100, 0, 0)),
        (105.0, sample(5000, 350, 5000, 10000)),
        (110.0, sample(10000, 600, 10000, 20000)),
    ]


SETTINGS = Settings(target_utilization=0.5, utilization_max=0.8, utilization_min=0.2, catch_up_s=60.0, restart_s=30.0)


def test_rates_true_processing_rate_and_target_rates_follow_flink_s_formulas():
    metrics = evaluate(window(), topology(), SETTINGS)
    src, mid, sink = metrics[SRC], metrics[MID], metrics[SINK]
    assert src[LOAD] == pytest.approx(0.1)
    assert src[TRUE_PROCESSING_RATE] == pytest.approx(1000 / 0.1)  # input rate / busy fraction
    assert src[LAG] == 600
    assert src[TARGET_DATA_RATE] == pytest.approx(1000 + 50)  # input rate + lag growth rate
    assert src[CATCH_UP_DATA_RATE] == pytest.approx(600 / 60)  # latest lag / catch-up duration
    assert mid[TRUE_PROCESSING_RATE] == pytest.approx(1000 / 0.8)
    assert mid[TARGET_DATA_RATE] == pytest.approx(1050)  # edge ratio 1000 / 1000
    assert sink[TARGET_DATA_RATE] == pytest.approx(1050 * 2)  # the keyed vertex doubles the records
    assert sink[CATCH_UP_DATA_RATE] == pytest.approx(10 * 2)
    # thresholds: catch-up + target / utilization (+ the restart's backlog for the lower one)
    assert mid[SCALE_UP_RATE_THRESHOLD] == round(10 + 1050 / 0.8)
    assert mid[SCALE_DOWN_RATE_THRESHOLD] == round(10 + 1050 * 30 / 60 + 1050 / 0.2)


def test_the_avg_aggregator_uses_accumulated_busy_time_per_subtask():
    samples = [
        (0.0, sample(0, 0, 0, 0, busy=(0, 0, 0))),
        (10.0, sample(10000, 0, 10000, 10000, busy=(1000, 12000, 0))),
    ]
    metrics = evaluate(samples, topology(), Settings(aggregator="avg"))
    assert metrics[MID][LOAD] == pytest.approx(12000 / 10 / 2 / 1000)  # ms/s per subtask
    assert metrics[MID][TRUE_PROCESSING_RATE] == pytest.approx(1000 / 0.6)


def test_a_backlog_longer_than_the_threshold_blocks_scale_down_and_sizes_for_full_utilization():
    samples = [(0.0, sample(0, 0, 0, 0)), (10.0, sample(1000, 50_000, 1000, 1000))]
    metrics = evaluate(samples, topology(), Settings(backlog_threshold_s=30.0, catch_up_s=100.0))
    assert metrics[MID][SCALE_DOWN_RATE_THRESHOLD] == math.inf  # utilization 0: never scale down
    assert metrics[MID][SCALE_UP_RATE_THRESHOLD] == round(500 + 5100)  # catch-up + target at 1.0


def test_the_target_parallelism_is_the_scale_factor_times_the_parallelism_aligned_to_key_groups():
    info = VertexInfo(MID, "Keyed", 2, 128, (SRC,), hash_input=True)
    metrics = {TRUE_PROCESSING_RATE: 1250.0, TARGET_DATA_RATE: 1050.0, CATCH_UP_DATA_RATE: 10.0}
    capacity = target_capacity(metrics, SETTINGS, 0.5, with_restart=True)
    assert capacity == round(10 + 1050 * 30 / 60 + 1050 / 0.5)
    raw = math.ceil(capacity / 1250.0 * 2)  # 5
    # BALANCED: 128 % 5 != 0, but 6 gives each subtask fewer key groups (21 < 25)
    assert compute_scale_target_parallelism(info, metrics, SETTINGS) == align(raw, 2, 128, 128) == 6
    unkeyed = VertexInfo(MID, "Map", 2, 128, (SRC,))
    assert compute_scale_target_parallelism(unkeyed, metrics, SETTINGS) == raw


@pytest.mark.parametrize(
    "target, current, groups, expected",
    [
        (3, 1, 8, 4),  # 8 % 3 != 0 and 8 // 4 < 8 // 3: 4
        (5, 2, 8, 8),  # 8 // 5 == 1: only 8 gives fewer than one... 8 divides
        (3, 4, 8, 4),  # a scale-down never aligns above the current parallelism: 4
        (6, 2, 128, 7),  # 128 // 7 = 18 < 128 // 6 = 21: fewer key groups each
        (4, 2, 128, 4),
    ],
)
def test_balanced_alignment(target, current, groups, expected):
    assert align(target, current, groups, groups) == expected


@given(
    target=st.integers(1, 64),
    current=st.integers(1, 64),
    groups=st.integers(1, 256),
)
@settings(max_examples=300, deadline=None)
def test_alignment_stays_within_its_bounds_and_never_gives_a_subtask_more_key_groups(target, current, groups):
    upper = groups
    target = min(target, upper)
    aligned = align(target, current, upper, groups)
    if target == current:
        assert aligned == current
        return
    assert aligned >= target
    assert aligned <= max(target, min(groups, upper) if target > current else min(current, groups, upper))
    assert groups // aligned <= groups // target


def test_bounds_and_max_factors_limit_the_new_parallelism():
    info = VertexInfo(MID, "Map", 10, 20, (SRC,))
    idle = {TRUE_PROCESSING_RATE: 10_000.0, TARGET_DATA_RATE: 10.0, CATCH_UP_DATA_RATE: 0.0}
    # far too many: at most 60 % go in one scale-down
    assert compute_scale_target_parallelism(info, idle, SETTINGS) == math.ceil(0.4 * 10)
    busy = {TRUE_PROCESSING_RATE: 10.0, TARGET_DATA_RATE: 10_000.0, CATCH_UP_DATA_RATE: 0.0}
    assert compute_scale_target_parallelism(info, busy, SETTINGS) == 20  # the vertex's max parallelism
    capped = Settings(**{**SETTINGS.__dict__, "max_parallelism": 12})
    assert compute_scale_target_parallelism(info, busy, capped) == 12
    slow_up = Settings(**{**SETTINGS.__dict__, "max_scale_up_factor": 0.5})
    assert compute_scale_target_parallelism(info, busy, slow_up) == 15
    floor = Settings(**{**SETTINGS.__dict__, "min_parallelism": 6})
    assert compute_scale_target_parallelism(info, idle, floor) == 6
    unknown = {TRUE_PROCESSING_RATE: math.nan, TARGET_DATA_RATE: 10.0, CATCH_UP_DATA_RATE: 0.0}
    assert compute_scale_target_parallelism(info, unknown, SETTINGS) == 10


def test_a_vertex_inside_its_band_is_not_outside_its_utilization_bound():
    metrics = {TRUE_PROCESSING_RATE: 1000.0, SCALE_UP_RATE_THRESHOLD: 900.0, SCALE_DOWN_RATE_THRESHOLD: 2000.0}
    assert not outside_utilization_bound(metrics)
    assert outside_utilization_bound({**metrics, TRUE_PROCESSING_RATE: 800.0})
    assert outside_utilization_bound({**metrics, TRUE_PROCESSING_RATE: 2500.0})


def test_a_scale_down_waits_for_the_interval_then_takes_the_highest_recommendation():
    delayed = DelayedScaleDown()
    assert delayed.apply("v", 8, 4, now=0.0, interval_s=10.0) == 8
    assert delayed.apply("v", 8, 6, now=5.0, interval_s=10.0) == 8
    assert delayed.apply("v", 8, 3, now=10.0, interval_s=10.0) == 6  # highest within the last 10 s
    assert delayed.apply("v", 8, 3, now=16.0, interval_s=10.0) == 3  # the 6 is older than 10 s now
    assert delayed.apply("v", 8, 9, now=17.0, interval_s=10.0) == 9  # a scale-up clears it
    assert delayed.waiting_since("v") is None
    assert delayed.apply("v", 8, 2, now=18.0, interval_s=0.0) == 2  # 0: at once


def test_vertices_tied_by_a_forward_edge_get_the_same_parallelism():
    topo = JobTopology(
        {
            "a": VertexInfo("a", "A", 2, 128, (), forward=("b",)),
            "b": VertexInfo("b", "B", 2, 128, ("a",), forward=("a",)),
            "c": VertexInfo("c", "C", 2, 128, ("b",), hash_input=True),
        }
    )
    assert unify_forward(topo, {"a": 1, "b": 5, "c": 3}) == {"a": 5, "b": 5, "c": 3}


def test_a_sample_reads_subtask_metrics_and_sums_the_sources_pending_records():
    topo = topology()
    metrics = [
        {"vertex": SRC, "numRecordsIn": 0, "numRecordsOut": 70, "busyTimeMsPerSecond": 100.0,
         "accumulateBusyTimeMs": 5.0, "operators": {"Source: numbers": {"pendingRecords": 12}}},
        {"vertex": MID, "numRecordsIn": 30, "numRecordsOut": 30, "busyTimeMsPerSecond": 900.0,
         "accumulateBusyTimeMs": 7.0},
        {"vertex": MID, "numRecordsIn": 40, "numRecordsOut": 40, "busyTimeMsPerSecond": 300.0,
         "accumulateBusyTimeMs": 3.0},
    ]  # fmt: skip
    got = collect_sample(metrics, topo, "max")
    assert got[SRC] == VertexSample(1, 0.1, 5.0, 70.0, 70.0, 12.0)
    assert got[MID] == VertexSample(2, 0.9, 10.0, 70.0, 70.0, None)
    assert SINK not in got
    assert collect_sample(metrics, topo, "avg")[MID].load == pytest.approx(0.6)
    assert collect_sample(metrics, topo, "min")[MID].load == pytest.approx(0.3)


def test_the_report_is_flink_s_scaling_report():
    vertices = {"ab12": {TRUE_PROCESSING_RATE: 450.0, "from": 1, "to": 4, "EXPECTED_PROCESSING_RATE": 1800.0,
                         TARGET_DATA_RATE: 1000.0}}  # fmt: skip
    assert scaling_report(vertices, True) == (
        "Scaling execution enabled, begin scaling vertices:{ Vertex ID ab12 | Parallelism 1 -> 4 | "
        "Processing capacity 450.00 -> 1800.00 | Target data rate 1000.00}"
    )
    assert scaling_report(vertices, False).startswith(
        "Scaling execution disabled by config job.autoscaler.scaling.enabled:false, recommended parallelism change:"
    )


# -- the control loop over a job whose metrics are given -----------------------------------------------
class _Vertex:
    def __init__(self, vid, name, parallelism, inputs=()):
        self.id, self.name = vid, name
        self.job_vertex = type("JV", (), {})()
        self.job_vertex.id, self.job_vertex.name = vid, name
        self.job_vertex.parallelism, self.job_vertex.max_parallelism = parallelism, 8
        self.job_vertex.inputs = [
            type(
                "E", (), {"source": type("D", (), {"producer": type("P", (), {"id": i})()})(), "ship_strategy": "HASH"}
            )()
            for i in inputs
        ]
        self.parallelism = parallelism


class FakeMaster:
    """What the autoscaler reads of a JobMaster: status, RUNNING timestamp, metrics, graph, rescale."""

    def __init__(self, rate: float, tpr_per_subtask: float) -> None:
        self.job_id, self.job_name = "f" * 32, "fake"
        self._done = threading.Event()
        self._restarting = False
        self.status_timestamps = {"RUNNING": 0}
        self.rate, self.tpr = rate, tpr_per_subtask
        self.parallelism = 1
        self.t = 0.0
        self.rescales: list = []
        self._graph()

    def _graph(self):
        self.execution_graph = type("G", (), {})()
        self.execution_graph.job_vertices = [_Vertex("s", "Source", 1), _Vertex("k", "Keyed", self.parallelism, ("s",))]

    def get_job_status(self):
        return JobStatus.RUNNING

    def get_metrics(self):
        """The keyed vertex processes at most ``tpr`` a subtask; what it cannot take is the source's lag."""
        elapsed = self.t - self.status_timestamps["RUNNING"] / 1000
        processed = min(self.rate, self.tpr * self.parallelism)
        n, lag = processed * elapsed, (self.rate - processed) * elapsed
        load = processed / (self.tpr * self.parallelism)
        out = [
            {
                "vertex": "s",
                "numRecordsOut": n,
                "busyTimeMsPerSecond": 10.0,
                "operators": {"s": {"pendingRecords": lag}},
            }
        ]
        out += [
            {
                "vertex": "k",
                "numRecordsIn": n / self.parallelism,
                "numRecordsOut": 0,
                "busyTimeMsPerSecond": 1000 * load,
            }
            for _ in range(self.parallelism)
        ]
        return out

    def rescale(self, changes):
        self.rescales.append(dict(changes))
        self.parallelism = changes.get("k", self.parallelism)
        self.status_timestamps["RUNNING"] = int(self.t * 1000)
        self._graph()
        done = Future()
        done.set_result({})
        return done


def test_the_control_loop_waits_for_stabilization_and_a_full_window_then_scales_out_and_reports():
    master = FakeMaster(rate=1000.0, tpr_per_subtask=400.0)
    settings = Settings(target_utilization=0.5, utilization_max=0.8, utilization_min=0.2, window_s=4.0,
                        stabilization_s=2.0, catch_up_s=0.0)  # fmt: skip
    scaler = JobAutoScaler(master, settings, clock=lambda: master.t)
    states = []
    for t in range(0, 8):
        master.t = float(t)
        scaler.tick()
        states.append(scaler.status()["state"])
    assert states[0].startswith("Stabilizing until") and states[1].startswith("Stabilizing until")
    assert states[2].startswith("Metric window is not full until")
    assert master.rescales == [{"k": 8}], master.rescales  # 1000 / (400 * 0.5) = 5 -> aligned to 8 groups
    report = scaler.status()["events"][0]
    assert report["reason"] == "ScalingReport" and "Parallelism 1 -> 8" in report["message"], report
    assert scaler.status()["parallelism"][-1]["vertices"] == {"s": 1, "k": 8}
    # after the rescale the window starts again: no second decision within it
    for t in range(8, 12):
        master.t = float(t)
        scaler.tick()
    assert len(master.rescales) == 1


def test_with_scaling_disabled_it_reports_the_recommendation_and_changes_nothing():
    master = FakeMaster(rate=1000.0, tpr_per_subtask=400.0)
    settings = Settings(target_utilization=0.5, window_s=2.0, stabilization_s=0.0, catch_up_s=0.0,
                        scaling_enabled=False)  # fmt: skip
    scaler = JobAutoScaler(master, settings, clock=lambda: master.t)
    for t in range(0, 5):
        master.t = float(t)
        scaler.tick()
    assert master.rescales == []
    assert scaler.status()["events"][0]["message"].startswith("Scaling execution disabled by config")
