"""The ``raylink`` command's parser and entry point (Flink's ``CliFrontend``).

:func:`build_parser` declares every sub-command; each one's handler lives in its
own module of :mod:`raylink.cli` and is imported only when that sub-command runs,
so ``raylink --help`` and ``raylink config`` start without Ray. Handlers return an
exit code; a :class:`~raylink.cli.common.CliError` is printed on stderr and its
code returned. Not thread-safe (a command line runs once per process).
"""

from __future__ import annotations

import argparse
import importlib
import os
from typing import Any, Callable, Optional

from raylink.cli.common import EXIT_CODES_HELP, CliError, err

RUN_EXAMPLES = """examples:
  raylink run examples/word_count.py
  raylink run --conf parallelism.default=4 --conf-file job.yaml my_job.py --input data.txt
  raylink run --address HEAD:6379 examples/word_count.py       # an existing Ray cluster
  raylink run --conf execution.target=local examples/word_count.py   # threads in this process

Options go before the job file; everything after it is passed to the job.
"""

SUBMIT_EXAMPLES = """examples:
  raylink submit --address http://HEAD:8265 examples/word_count.py
  raylink submit --no-wait --address http://HEAD:8265 examples/unbounded_word_count.py
  raylink submit --ship-raylink installed --address http://HEAD:8265 job.py   # image has raylink

The job's folder is uploaded as the Ray working_dir; raylink reaches every node as
py_modules (default), through pip (--ship-raylink pip [--pip SPEC]) or is already
installed. The entrypoint is `PYTHON -m raylink run --progress MODE job.py [args]`.
Without --no-wait the job's logs are followed and the exit code is the job's
(0 succeeded, 1 failed, 4 stopped).
"""

CONFIG_EXAMPLES = """examples:
  raylink config                              # every option: key, type, default, description
  raylink config execution.buffer-timeout     # one option
  raylink config --markdown                   # the README's table
"""

ADDRESS_HELP = (
    "Ray dashboard address, http://HEAD:8265 (default: $RAY_API_SERVER_ADDRESS, "
    "an http $RAY_ADDRESS, else http://127.0.0.1:8265)"
)


VERBOSE_HELP = (
    "print Ray's, Spark's and raylink's debug output too (RAYLINK_LOG_LEVEL=DEBUG); by default they "
    "go to the run's log folder, named when a job fails"
)


def _handler(module: str, name: str) -> Callable[[Any], int]:
    """``raylink.cli.<module>.<name>``, imported when the sub-command runs; a CliError becomes
    its message on stderr and its exit code."""

    def run(args: Any) -> int:
        try:
            return getattr(importlib.import_module(f"raylink.cli.{module}"), name)(args)
        except CliError as exc:
            err(exc.message)
            return exc.code

    return run


def _conf_options(p: argparse.ArgumentParser) -> None:
    from raylink.cli.conf import keys_help

    p.add_argument("--conf-file", metavar="YAML", help="job configuration file (flat or nested YAML, Flink key names)")
    p.add_argument(
        "--conf",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a configuration value (repeatable; wins over --conf-file)",
    )
    p.epilog = (
        (p.epilog or "") + "\nconfiguration keys (Flink's names where Flink has one; `raylink config` "
        "shows types and defaults):\n" + keys_help() + "\n\n" + EXIT_CODES_HELP
    )


def _add_plan(sub: Any) -> None:
    plan = sub.add_parser("plan", help="print a job's JobGraph without running it")
    plan.add_argument("job", help="path to the job's Python file")
    plan.add_argument("args", nargs="*", help="arguments passed to the job")
    plan.add_argument("--format", choices=("text", "json", "dot"), default="text")
    plan.set_defaults(func=_handler("plan", "cmd_plan"))


def _add_demo(sub: Any) -> None:
    demo = sub.add_parser(
        "demo",
        help="the clicks demo: Spark table -> raylink job on Ray -> Spark tables "
        "(starts local Ray and Spark-on-Ray itself)",
    )
    demo.add_argument("--rows", type=int, default=100_000, help="click events in the day (default 100000)")
    demo.add_argument("--users", type=int, default=5_000, help="distinct users (default 5000)")
    demo.add_argument("--parallelism", type=int, default=2, help="job parallelism (default 2)")
    demo.add_argument("--warehouse", default="warehouse", help="Spark warehouse folder (default ./warehouse)")
    demo.set_defaults(func=_handler("demo", "cmd_demo"))


def _add_run(sub: Any, fmt: type) -> None:
    run = sub.add_parser(
        "run",
        help="run a job: a local Ray, --address HEAD:6379, or in-process",
        description="Run a raylink program with per-vertex progress; its job runs on Ray "
        "(local, or --address) or in this process (execution.target=local).",
        epilog=RUN_EXAMPLES,
        formatter_class=fmt,
    )
    run.add_argument(
        "--address",
        help="Ray cluster address (HEAD:6379, ray://HEAD:10001 or auto); default: $RAY_ADDRESS, else a local Ray",
    )
    _conf_options(run)
    run.add_argument(
        "--progress",
        choices=("auto", "tty", "log", "off"),
        help="progress display on stderr (default: raylink.progress, auto = tty if a terminal)",
    )
    run.add_argument(
        "--from-savepoint",
        "-s",
        metavar="PATH",
        help="start from this savepoint or retained checkpoint (execution.savepoint.path)",
    )
    run.add_argument(
        "--allow-non-restored-state",
        "-n",
        action="store_true",
        help="skip savepoint state no operator claims (execution.savepoint.ignore-unclaimed-state)",
    )
    run.add_argument(
        "--detached",
        "-d",
        action="store_true",
        help="submit the job to a JobMaster actor of its own and return; the job outlives this command "
        "(execution.attached=false)",
    )
    run.add_argument(
        "--result-file",
        metavar="JSON",
        help="write the finished job's result (runtime, vertices, executors and their nodes) as JSON",
    )
    # SUPPRESS: without the flag here, ``raylink --verbose run`` keeps the top-level one
    run.add_argument("--verbose", action="store_true", default=argparse.SUPPRESS, help=VERBOSE_HELP)
    run.add_argument("job", help="the program's Python file")
    run.add_argument("args", nargs=argparse.REMAINDER, help="arguments passed to the program")
    run.set_defaults(func=_handler("run", "cmd_run"))


def _add_jobs(sub: Any, fmt: type) -> None:
    submit = sub.add_parser(
        "submit",
        help="submit a job to a Ray cluster (Ray Job Submission API)",
        description="Submit a raylink program to a Ray cluster through its dashboard.",
        epilog=SUBMIT_EXAMPLES,
        formatter_class=fmt,
    )
    submit.add_argument("--address", help=ADDRESS_HELP)
    _conf_options(submit)
    submit.add_argument("--job-id", help="submission id (default: raylink-<file>-<random>)")
    submit.add_argument("--no-wait", action="store_true", help="print the job id and return at once")
    submit.add_argument(
        "--detached",
        action="store_true",
        help="the program ends once its job runs; the job goes on in a JobMaster actor (execution.attached=false)",
    )
    submit.add_argument(
        "--progress", choices=("log", "off"), default="log", help="progress blocks in the job's log (default: log)"
    )
    submit.add_argument(
        "--ship-raylink",
        choices=("py_modules", "pip", "installed"),
        default="py_modules",
        help="how raylink reaches the cluster: this raylink package as py_modules (default), "
        "a pip requirement, or already installed in the cluster's image",
    )
    submit.add_argument(
        "--pip",
        action="append",
        default=[],
        metavar="SPEC",
        help="pip requirement for --ship-raylink pip (default: raylink==<this version>)",
    )
    submit.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="environment variable for the job and its actors (repeatable)",
    )
    submit.add_argument("--python", default="python", help="Python executable on the cluster (default: python)")
    submit.add_argument("job", help="the program's Python file; its folder becomes the working_dir")
    submit.add_argument("args", nargs=argparse.REMAINDER, help="arguments passed to the program")
    submit.set_defaults(func=_handler("jobs", "cmd_submit"))

    listing = sub.add_parser(
        "list",
        help="list the submitted jobs of a Ray cluster",
        description="List the jobs submitted to a Ray cluster.",
        epilog=EXIT_CODES_HELP,
        formatter_class=fmt,
    )
    listing.add_argument("--address", help=ADDRESS_HELP)
    listing.set_defaults(func=_handler("jobs", "cmd_list"))

    status = sub.add_parser(
        "status",
        help="status, cause of failure and latest progress of a job",
        description="Show a submitted job's status, exit code, failure cause and the "
        "latest per-vertex progress it logged.",
        epilog=EXIT_CODES_HELP,
        formatter_class=fmt,
    )
    status.add_argument("--address", help=ADDRESS_HELP)
    status.add_argument("job_id", metavar="JOB", help="submission id")
    status.set_defaults(func=_handler("jobs", "cmd_status"))

    logs = sub.add_parser(
        "logs",
        help="print (or --follow) a job's logs",
        description="Print a submitted job's logs (driver output, TaskExecutor output, progress).",
        epilog=EXIT_CODES_HELP,
        formatter_class=fmt,
    )
    logs.add_argument("--address", help=ADDRESS_HELP)
    logs.add_argument("--follow", "-f", action="store_true", help="keep printing until the job ends")
    logs.add_argument("job_id", metavar="JOB", help="submission id")
    logs.set_defaults(func=_handler("jobs", "cmd_logs"))

    cancel = sub.add_parser(
        "cancel",
        help="stop a running job",
        description="Stop a submitted job: its driver gets SIGTERM, cancels the job's "
        "tasks and releases its TaskExecutors.",
        epilog=EXIT_CODES_HELP,
        formatter_class=fmt,
    )
    cancel.add_argument("--address", help=ADDRESS_HELP)
    cancel.add_argument("--timeout", type=float, default=30.0, help="seconds to wait for the job to stop (30)")
    cancel.add_argument("job_id", metavar="JOB", help="submission id")
    cancel.set_defaults(func=_handler("jobs", "cmd_cancel"))


def _add_config(sub: Any, fmt: type) -> None:
    config = sub.add_parser(
        "config",
        help="list the configuration options with types, defaults, descriptions",
        description="Show raylink's configuration options (the options registry, "
        "raylink.core.options): every option, or one.",
        epilog=CONFIG_EXAMPLES + "\n" + EXIT_CODES_HELP,
        formatter_class=fmt,
    )
    config.add_argument("key", nargs="?", help="show only this option")
    config.add_argument("--markdown", action="store_true", help="print the table as Markdown (the README's)")
    config.set_defaults(func=_handler("config", "cmd_config"))


def _add_debug(sub: Any, fmt: type) -> None:
    debug = sub.add_parser(
        "debug",
        help="inspect a running job (debug memory JOB_ID)",
        description="Admin calls on a running job's TaskExecutors.",
        formatter_class=fmt,
    )
    what = debug.add_subparsers(dest="debug_command", required=True)
    memory = what.add_parser(
        "memory",
        help="top allocation sites and object counts of a job's TaskExecutors",
        description="Ask every TaskExecutor of a running job what its memory holds: RSS, "
        "heap, Python objects by type, buffers, state and (tracemalloc, started "
        "by the first call) the top allocation sites.",
        epilog=EXIT_CODES_HELP,
        formatter_class=fmt,
    )
    memory.add_argument("--address", help="Ray cluster address (HEAD:6379 or auto; default: $RAY_ADDRESS, else auto)")
    memory.add_argument("--top", type=int, default=10, help="object types / allocation sites to show (10)")
    memory.add_argument(
        "--no-tracemalloc",
        action="store_true",
        help="only count objects (do not start tracemalloc in the TaskExecutors)",
    )
    memory.add_argument(
        "--trim",
        action="store_true",
        help="first hand free heap pages back to the OS (malloc_trim) and show the RSS released",
    )
    memory.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for the executors (60)")
    memory.add_argument("--json", action="store_true", help="print the reports as JSON")
    memory.add_argument("job_id", metavar="JOB_ID", help="the raylink job id (as raylink run prints it) or a prefix")
    memory.set_defaults(func=_handler("debug", "cmd_debug_memory"))


def build_parser() -> argparse.ArgumentParser:
    """The ``raylink`` parser with every sub-command."""
    fmt = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(
        prog="raylink",
        description="Flink's streaming runtime on Ray.",
        formatter_class=fmt,
        epilog=EXIT_CODES_HELP + "\n\n`raylink COMMAND --help` describes a command.",
    )
    parser.add_argument("--verbose", action="store_true", help=VERBOSE_HELP)
    sub = parser.add_subparsers(dest="command", required=True)
    _add_plan(sub)
    _add_demo(sub)
    _add_run(sub, fmt)
    _add_jobs(sub, fmt)
    _add_config(sub, fmt)
    from raylink.cli.cluster import add_parser as _add_cluster
    from raylink.cli.cluster import add_savepoint_parsers

    _add_cluster(sub, fmt, _handler)
    add_savepoint_parsers(sub, fmt, _handler)
    _add_debug(sub, fmt)
    from raylink.cli.kafka import add_parser as _add_kafka  # raylink kafka start|stop

    _add_kafka(sub, fmt, _handler)
    from raylink.cli.rescale import add_parser as _add_rescale  # raylink rescale JOB --vertex NAME=P

    _add_rescale(sub, fmt, _handler)
    from raylink.loadtest import register_cli as register_loadtest  # raylink loadtest SCENARIO

    register_loadtest(sub)
    from raylink.migrate import register_cli as register_migrate  # raylink migrate FILE|DIR

    register_migrate(sub)
    return parser


def main(argv: Optional[list[str]] = None) -> int:
    """Run the command line ``argv`` (default ``sys.argv[1:]``); returns the exit code."""
    args, extra = build_parser().parse_known_args(argv)
    if extra:  # options meant for the job itself
        args.args = list(getattr(args, "args", [])) + extra
    if getattr(args, "verbose", False):  # the job's processes and Ray's see it too
        from raylink.runtime.logging_setup import LOG_LEVEL_ENV_VAR

        os.environ[LOG_LEVEL_ENV_VAR] = "DEBUG"
    return args.func(args)
