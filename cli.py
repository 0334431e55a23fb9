"""The ``raylink`` command line: ``raylink plan job.py`` (more sub-commands come with the runtime).

``plan`` runs the user's program with ``execute()`` intercepted — Flink's
``OptimizerPlanEnvironment`` trick — so the job is compiled but never started.
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
from raylink.runtime.executors import executor_context


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


def _cmd_plan(args: argparse.Namespace) -> int:
    job_graph = capture_job_graph(args.job, args.args)
    if args.format == "json":
        print(json.dumps(job_graph.to_dict(), indent=2))
    elif args.format == "dot":
        print(format_dot(job_graph))
    else:
        print(format_text(job_graph))
    return 0


def _demo_module():
    """``examples/clicks_demo.py`` of this checkout (examples/ is not a package)."""
    import importlib.util

    name = "raylink_examples_clicks_demo"
    if name in sys.modules:
        return sys.modules[name]
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "examples", "clicks_demo.py")
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _cmd_demo(args: argparse.Namespace) -> int:
    if getattr(args, "args", None):
        raise SystemExit(f"raylink demo: unexpected arguments {args.args}")
    _demo_module().run(args.rows, args.users, args.parallelism, args.warehouse)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="raylink", description="Flink's streaming runtime on Ray.")
    sub = parser.add_subparsers(dest="command", required=True)
    plan = sub.add_parser("plan", help="print a job's JobGraph without running it")
    plan.add_argument("job", help="path to the job's Python file")
    plan.add_argument("args", nargs="*", help="arguments passed to the job")
    plan.add_argument("--format", choices=("text", "json", "dot"), default="text")
    plan.set_defaults(func=_cmd_plan)
    demo = sub.add_parser("demo", help="the clicks demo: Spark table -> raylink job on Ray -> Spark tables "
                                       "(starts local Ray and Spark-on-Ray itself)")
    demo.add_argument("--rows", type=int, default=100_000, help="click events in the day (default 100000)")
    demo.add_argument("--users", type=int, default=5_000, help="distinct users (default 5000)")
    demo.add_argument("--parallelism", type=int, default=2, help="job parallelism (default 2)")
    demo.add_argument("--warehouse", default="warehouse", help="Spark warehouse folder (default ./warehouse)")
    demo.set_defaults(func=_cmd_demo)
    from raylink.cli_commands import register_commands  # run, submit, list, status, logs, cancel

    register_commands(parser, sub)
    from raylink.loadtest import register_cli as register_loadtest  # raylink loadtest SCENARIO

    register_loadtest(sub)
    return parser


def main(argv: Optional[list[str]] = None) -> int:
    args, extra = build_parser().parse_known_args(argv)
    if extra:  # options meant for the job itself
        args.args = list(getattr(args, "args", [])) + extra
    return args.func(args)
