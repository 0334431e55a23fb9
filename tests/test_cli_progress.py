"""Progress of a running job: per-vertex records and Flink's back-pressure levels."""

from __future__ import annotations

import io
from types import SimpleNamespace

import pytest

from raylink.cli.progress import (
    ProgressPrinter,
    back_pressure_level,
    format_table,
    resolve_mode,
    summary_lines,
    vertex_rows,
)

pytestmark = pytest.mark.timeout(30)


def m(vertex, name, subtask, rin, rout, bp_ms, state="RUNNING"):
    return {
        "vertex": vertex,
        "vertex_name": name,
        "subtask": subtask,
        "numRecordsIn": rin,
        "numRecordsOut": rout,
        "backPressuredTimeMsPerSecond": bp_ms,
        "state": state,
    }


@pytest.mark.parametrize(
    "ratio, level",
    [
        (0.0, "OK"),
        (0.10, "OK"),
        (0.1001, "LOW"),
        (0.5, "LOW"),
        (0.5001, "HIGH"),
        (1.0, "HIGH"),
    ],
)
def test_flink_back_pressure_levels(ratio, level):
    assert back_pressure_level(ratio) == level


def test_rows_sum_records_and_take_the_worst_subtask():
    order = [("v1", "Source", 2), ("v2", "Map -> Sink", 2), ("v3", "Late", 1)]
    rows = vertex_rows(
        [
            m("v1", "Source", 0, 0, 100, 620.0),
            m("v1", "Source", 1, 0, 50, 40.0),
            m("v2", "Map -> Sink", 0, 90, 0, 0.0),
            m("v2", "Map -> Sink", 1, 60, 0, 150.0),
        ],
        order,
    )
    assert [
        (r["vertex"], r["parallelism"], r["subtasks"], r["numRecordsIn"], r["numRecordsOut"], r["backPressure"])
        for r in rows
    ] == [("Source", 2, 2, 0, 150, "HIGH"), ("Map -> Sink", 2, 2, 150, 0, "LOW"), ("Late", 1, 0, 0, 0, "OK")]
    assert rows[0]["backPressureRatio"] == pytest.approx(0.62)


def test_table_and_printer_modes():
    rows = vertex_rows([m("v1", "Source", 0, 0, 12, 0.0)], [("v1", "Source", 1)])
    assert format_table(rows, "job 'x' RUNNING 1.0 s") == [
        "job 'x' RUNNING 1.0 s",
        "VERTEX  SUBTASKS    RECORDS IN   RECORDS OUT  BACK PRESSURE",
        "Source         1             0            12  OK (0%)",
    ]
    log = io.StringIO()
    ProgressPrinter("log", log).show(rows, "t")
    assert log.getvalue().splitlines()[0] == "raylink| t" and len(log.getvalue().splitlines()) == 3
    tty = io.StringIO()
    printer = ProgressPrinter("tty", tty)
    printer.show(rows, "t1")
    printer.show(rows, "t2")
    out = tty.getvalue()
    assert out.startswith("\x1b[2Kt1\n")
    assert "\x1b[3F\x1b[2Kt2\n" in out  # the second refresh moves up over the 3 lines drawn
    off = io.StringIO()
    ProgressPrinter("off", off).show(rows, "t")
    assert off.getvalue() == ""


def test_auto_mode_needs_a_terminal():
    assert resolve_mode("auto", io.StringIO()) == "off"
    assert resolve_mode("auto", SimpleNamespace(isatty=lambda: True)) == "tty"
    assert resolve_mode("log", io.StringIO()) == "log"


def test_summary_names_node_and_remote_traffic_per_task_executor():
    result = SimpleNamespace(
        locations={"te-1-0": {"node_id": "aa11", "pid": 10}, "te-1-1": {"node_id": "bb22", "pid": 11}},
        executor_stats=[
            {"executor": "te-1-0", "remoteBuffersSent": 4, "remoteChannels": 1},
            {"executor": "te-1-1", "remoteBuffersSent": 2, "remoteChannels": 2},
        ],
    )
    client = SimpleNamespace(tasks_on=lambda e: ["a", "b", "c"] if e.endswith("0") else ["d"])
    assert summary_lines(result, client) == [
        "raylink: TaskExecutor te-1-0 on node aa11 pid 10: tasks=3 remoteBuffersSent=4 remoteChannels=1",
        "raylink: TaskExecutor te-1-1 on node bb22 pid 11: tasks=1 remoteBuffersSent=2 remoteChannels=2",
    ]
