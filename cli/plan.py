"""``raylink plan job.py``: print a program's JobGraph without running it.

The program runs with ``execute()`` intercepted -- Flink's ``OptimizerPlanEnvironment``
trick, through the public executor hook (:func:`raylink.runtime.client.executors.executor_context`)
-- so the job is compiled but never started. Not thread-safe: it swaps ``sys.argv``.
"""

from __future__ import annotations

import argparse
import json
import os
import runpy
import sys
from typing import Optional

from raylink.api.stream_execution_environment import StreamExecutionEnvironment
from raylink.graph.job_graph import JobGraph
from raylink.runtime.client.executors import executor_context


class _PlanCaptured(Exception):
    def __init__(self, env: StreamExecutionEnvironment, job_name: Optional[str]) -> None:
        super().__init__("plan captured")
        self.env = env
        self.job_name = job_name


class _PlanExecutor:
    """Stands in for the executor module: every way to run the job stops with the plan."""

    def __init__(self, env: StreamExecutionEnvironment) -> None:
        self.env = env

    def _stop(self, _env=None, job_name=None, *args, **kwargs):
        raise _PlanCaptured(self.env, job_name)

    execute = execute_async = execute_and_collect = _stop


def capture_job_graph(path: str, argv: list[str]) -> JobGraph:
    """Run ``path`` until its first execute call and return that job's JobGraph."""
    if not os.path.isfile(path):
        raise SystemExit(f"raylink: no such job file: {path}")
    old_argv = sys.argv
    try:
        with executor_context(lambda env, _executor: _PlanExecutor(env)):
            sys.argv = [path] + argv
            runpy.run_path(path, run_name="__main__")
    except _PlanCaptured as captured:
        return captured.env.get_job_graph(captured.job_name)
    finally:
        sys.argv = old_argv
    raise SystemExit(f"raylink plan: {path} never called execute(); no job to show")


def format_text(job_graph: JobGraph) -> str:
    data = job_graph.to_dict()
    names = {v["id"]: v["name"] for v in data["vertices"]}
    lines = [f"Job '{data['job_name']}': {len(data['vertices'])} vertices, {len(data['edges'])} edges"]
    for v in data["vertices"]:
        lines.append(
            f"  [{v['id'][:8]}] {v['name']}  parallelism={v['parallelism']} "
            f"max={v['max_parallelism']} slot_sharing_group={v['slot_sharing_group']}"
        )
        for e in data["edges"]:
            if e["target"] == v["id"]:
                lines.append(
                    f"      <- {names[e['source']]}  {e['ship_strategy']} {e['distribution_pattern']} "
                    f"{e['result_partition_type']}"
                )
    return "\n".join(lines)


def format_dot(job_graph: JobGraph) -> str:
    data = job_graph.to_dict()
    out = ["digraph raylink {", "  rankdir=LR;"]
    for v in data["vertices"]:
        label = f"{v['name']}\\nparallelism {v['parallelism']}".replace('"', "'")
        out.append(f'  "{v["id"]}" [shape=box, label="{label}"];')
    for e in data["edges"]:
        out.append(f'  "{e["source"]}" -> "{e["target"]}" [label="{e["ship_strategy"]}"];')
    out.append("}")
    return "\n".join(out)


def cmd_plan(args: argparse.Namespace) -> int:
    """``raylink plan``: the JobGraph as text, JSON or Graphviz dot."""
    job_graph = capture_job_graph(args.job, args.args)
    if args.format == "json":
        print(json.dumps(job_graph.to_dict(), indent=2))
    elif args.format == "dot":
        print(format_dot(job_graph))
    else:
        print(format_text(job_graph))
    return 0
