"""Progress of a running job: per-vertex records in/out and back-pressure state.

The numbers come from ``JobClient.get_metrics()`` (per subtask); a vertex shows
the sum of its subtasks' record counts and the *maximum* back-pressure ratio
over its subtasks with Flink's levels: OK <= 10 %, LOW <= 50 %, HIGH > 50 % of
the time back pressured.

:class:`ProgressExecutor` stands in for the executor module while ``raylink run``
runs a program: ``execute()`` becomes ``execute_async()`` plus a poll of the
metrics every ``raylink.progress.interval`` ms from the main thread — nothing in
the job's data path changes.
"""

from __future__ import annotations

import json
import signal
import sys
import threading
import time
from typing import Any, Optional, TextIO

# Flink's back-pressure levels (BackPressureStatsTracker / web UI)
OK_MAX = 0.10
LOW_MAX = 0.50

LOG_PREFIX = "raylink| "


def back_pressure_level(ratio: float) -> str:
    """Flink's level for a ratio of time back pressured (0..1)."""
    if ratio <= OK_MAX:
        return "OK"
    if ratio <= LOW_MAX:
        return "LOW"
    return "HIGH"


def vertex_rows(metrics: list[dict], order: Optional[list[tuple[str, str, int]]] = None) -> list[dict]:
    """One row per vertex from per-subtask metrics.

    ``order`` lists ``(vertex_id, name, parallelism)`` in topological order so that
    vertices without reported subtasks yet still show up (with zeros).
    """
    rows: dict[str, dict] = {}
    for vertex_id, name, parallelism in order or []:
        rows[vertex_id] = {
            "vertex": name,
            "parallelism": parallelism,
            "subtasks": 0,
            "numRecordsIn": 0,
            "numRecordsOut": 0,
            "backPressureRatio": 0.0,
            "states": {},
        }
    for m in metrics:
        key = m.get("vertex") or m.get("vertex_name", "?")
        row = rows.setdefault(
            key,
            {
                "vertex": m.get("vertex_name", key),
                "parallelism": 0,
                "subtasks": 0,
                "numRecordsIn": 0,
                "numRecordsOut": 0,
                "backPressureRatio": 0.0,
                "states": {},
            },
        )
        row["subtasks"] += 1
        row["numRecordsIn"] += int(m.get("numRecordsIn", 0))
        row["numRecordsOut"] += int(m.get("numRecordsOut", 0))
        ratio = float(m.get("backPressuredTimeMsPerSecond", 0.0)) / 1000.0
        row["backPressureRatio"] = max(row["backPressureRatio"], min(max(ratio, 0.0), 1.0))
        state = m.get("state")
        if state:
            row["states"][state] = row["states"].get(state, 0) + 1
    out = []
    for row in rows.values():
        row["parallelism"] = row["parallelism"] or row["subtasks"]
        row["backPressure"] = back_pressure_level(row["backPressureRatio"])
        out.append(row)
    return out


def format_table(rows: list[dict], title: str, prefix: str = "") -> list[str]:
    width = max([len("VERTEX")] + [len(r["vertex"]) for r in rows])
    header = f"{'VERTEX'.ljust(width)}  {'SUBTASKS':>8}  {'RECORDS IN':>12}  {'RECORDS OUT':>12}  BACK PRESSURE"
    lines = [prefix + title, prefix + header]
    for r in rows:
        lines.append(
            prefix + f"{r['vertex'].ljust(width)}  {r['parallelism']:>8}  {r['numRecordsIn']:>12}  "
            f"{r['numRecordsOut']:>12}  {r['backPressure']} ({r['backPressureRatio'] * 100:.0f}%)"
        )
    return lines


def checkpoint_summary(client: Any) -> str:
    """``; checkpoints 4 completed, 0 failed, last #4 212 ms 1.3 MB; restarts 1`` when the
    job checkpoints or took a savepoint (the progress title, and so ``raylink status``), else ``""``."""
    coordinator = getattr(client, "coordinator", None)
    if coordinator is None:
        return ""
    stats = client.get_checkpoint_stats()
    if not getattr(coordinator, "interval_ms", 1) and not stats.get("numberOfCompletedCheckpoints"):
        return ""  # no periodic checkpoints (the coordinator is there for savepoints) and none taken
    text = (
        f"; checkpoints {stats['numberOfCompletedCheckpoints']} completed, {stats['numberOfFailedCheckpoints']} failed"
    )
    if stats["lastCheckpointId"] is not None:
        text += (
            f", last #{stats['lastCheckpointId']} {stats['lastCheckpointDuration']} ms "
            f"{(stats['lastCheckpointSize'] or 0) / 1e6:.1f} MB"
        )
    return text + f"; restarts {stats['numRestarts']}"


def vertex_order(client: Any) -> list[tuple[str, str, int]]:
    graph = getattr(client, "execution_graph", None)
    if graph is None:
        return []
    return [(v.id, v.name, v.parallelism) for v in graph.job_vertices]


def _count(n: int, singular: str, plural: str = "") -> str:
    return f"{n} {singular if n == 1 else (plural or singular + 's')}"


class ProgressPrinter:
    """Renders rows: redrawn in place on a terminal (``tty``), appended blocks in logs (``log``)."""

    def __init__(self, mode: str, stream: Optional[TextIO] = None) -> None:
        self.mode = mode
        self.stream = stream or sys.stderr
        self._drawn = 0

    def show(self, rows: list[dict], title: str, final: bool = False) -> None:
        if self.mode == "tty":
            lines = format_table(rows, title)
            erase = f"\x1b[{self._drawn}F" if self._drawn else ""
            self.stream.write(erase + "".join(f"\x1b[2K{line}\n" for line in lines))
            self._drawn = 0 if final else len(lines)
        elif self.mode == "log":
            self.stream.write("\n".join(format_table(rows, title, LOG_PREFIX)) + "\n")
        self.stream.flush()


def resolve_mode(mode: str, stream: TextIO) -> str:
    if mode == "auto":
        return "tty" if getattr(stream, "isatty", lambda: False)() else "off"
    return mode


def summary_lines(result: Any, client: Any) -> list[str]:
    """Where the job ran: one line per TaskExecutor with its node and remote traffic."""
    stats = {s.get("executor"): s for s in getattr(result, "executor_stats", None) or []}
    locations = getattr(result, "locations", None) or {}
    lines = []
    for executor_id, where in locations.items():
        s = stats.get(executor_id, {})
        tasks = len(client.tasks_on(executor_id)) if hasattr(client, "tasks_on") else s.get("tasks", 0)
        lines.append(
            f"raylink: TaskExecutor {executor_id} on node {where.get('node_id', '?')} pid {where.get('pid', '?')}: "
            f"tasks={tasks} remoteBuffersSent={s.get('remoteBuffersSent', 0)} "
            f"remoteChannels={s.get('remoteChannels', 0)}"
        )
    return lines


def result_document(result: Any, rows: list[dict]) -> dict:
    stats = {s.get("executor"): s for s in getattr(result, "executor_stats", None) or []}
    return {
        "job_id": result.job_id,
        "job_name": result.job_name,
        "status": "FINISHED",
        "net_runtime_ms": result.net_runtime_ms,
        "executors": [
            {
                "executor": e,
                "node_id": where.get("node_id"),
                "pid": where.get("pid"),
                "remoteBuffersSent": stats.get(e, {}).get("remoteBuffersSent", 0),
                "remoteChannels": stats.get(e, {}).get("remoteChannels", 0),
            }
            for e, where in (getattr(result, "locations", None) or {}).items()
        ],
        "vertices": [{k: v for k, v in r.items() if k != "states"} for r in rows],
    }


class Terminated(BaseException):
    """SIGTERM / SIGINT while a job runs: cancel it, then leave."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"signal {signum}")
        self.signum = signum


def _raise_terminated(signum: int, _frame: Any) -> None:
    raise Terminated(signum)


def install_signal_handlers() -> dict:
    """SIGTERM / SIGINT raise :class:`Terminated` in the main thread; returns the previous handlers.

    Called again once Ray is connected: ``ray.init`` installs its own SIGTERM handler
    (exit at once), which would leave the job's tasks to Ray's cleanup instead of a cancel.
    """
    if threading.current_thread() is not threading.main_thread():
        return {}
    return {s: signal.signal(s, _raise_terminated) for s in (signal.SIGTERM, signal.SIGINT)}


class ProgressExecutor:
    """Wraps an executor module; ``execute`` shows progress and a summary, cancels on a signal."""

    def __init__(self, module: Any, env: Any, mode: str, interval_s: float, stream: TextIO, results: list) -> None:
        self.module = module
        self.env = env
        self.mode = mode
        self.interval_s = interval_s
        self.stream = stream
        self.results = results  # shared with the CLI: one entry per started job

    def execute_async(self, env: Any, job_name: Optional[str] = None) -> Any:
        client = self.module.execute_async(env, job_name)
        install_signal_handlers()  # after ray.init, which replaced them
        self.results.append({"client": client, "result": None})
        return client

    def execute_and_collect(self, *args: Any, **kwargs: Any) -> Any:
        self.results.append({"client": None, "result": None})
        return self.module.execute_and_collect(*args, **kwargs)

    def execute(self, env: Any, job_name: Optional[str] = None) -> Any:
        client = self.execute_async(env, job_name)
        entry = self.results[-1]
        order = vertex_order(client)
        printer = ProgressPrinter(self.mode, self.stream)
        started = time.monotonic()

        def show(final: bool = False) -> list[dict]:
            rows = vertex_rows(client.get_metrics(), order)
            if self.mode != "off":
                printer.show(
                    rows,
                    f"job '{client.job_name}' {client.get_job_status()} "
                    f"{time.monotonic() - started:.1f} s{checkpoint_summary(client)}",
                    final=final,
                )
            return rows

        try:
            executors = len(getattr(client, "executor_ids", []) or []) or 1
            self.stream.write(
                f"raylink: job '{client.job_name}' ({client.job_id}) started: "
                f"{_count(len(order), 'vertex', 'vertices')}, {_count(len(client.executions), 'subtask')} "
                f"on {_count(executors, 'TaskExecutor')}\n"
            )
            self.stream.flush()
            while not client.wait(self.interval_s):
                if self.mode != "off":
                    show()
        except Terminated:
            cancel_job(client, self.stream, lambda: show(final=True) if self.mode != "off" else None)
            raise
        rows = show(final=True)
        result = client.get_job_execution_result()  # raises JobExecutionException if not FINISHED
        entry["result"] = result
        entry["rows"] = rows
        self.stream.write(
            f"raylink: job '{result.job_name}' FINISHED in {result.net_runtime_ms} ms (job id {result.job_id})\n"
        )
        for line in summary_lines(result, client):
            self.stream.write(line + "\n")
        self.stream.flush()
        return result


def cancel_job(client: Any, stream: TextIO, show_final: Any = None, timeout_s: float = 2.5) -> None:
    """Cancel a running job and wait (briefly) until its tasks are gone and its actors released."""
    if client.wait(0):
        return
    stream.write(f"raylink: cancelling job '{client.job_name}' ({client.job_id})\n")
    stream.flush()
    client.cancel()
    if client.wait(timeout_s) and show_final is not None:
        show_final()
    stream.write(f"raylink: job '{client.job_name}' {client.get_job_status()}\n")
    stream.flush()


def write_result_file(path: str, entries: list) -> None:
    docs = [result_document(e["result"], e.get("rows", [])) for e in entries if e.get("result") is not None]
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(docs[-1] if len(docs) == 1 else docs, fh, indent=2)
