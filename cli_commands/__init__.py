"""The job sub-commands of the ``raylink`` CLI: run, submit, list, status, logs, cancel.

:func:`register_commands` adds them to the parser that :mod:`raylink.cli` builds.
Handlers return an exit code; a :class:`~raylink.cli_commands.common.CliError` is
printed on stderr and its code returned.
"""

from __future__ import annotations

import argparse
from typing import Any, Callable

from raylink.cli_commands.common import EXIT_CODES_HELP, CliError, err

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

ADDRESS_HELP = ("Ray dashboard address, http://HEAD:8265 (default: $RAY_API_SERVER_ADDRESS, "
                "an http $RAY_ADDRESS, else http://127.0.0.1:8265)")


def _wrap(handler: Callable[[Any], int]) -> Callable[[Any], int]:
    def run(args: Any) -> int:
        try:
            return handler(args)
        except CliError as exc:
            err(exc.message)
            return exc.code
    return run


def _lazy(module: str, name: str) -> Callable[[Any], int]:
    def handler(args: Any) -> int:
        import importlib

        return getattr(importlib.import_module(f"raylink.cli_commands.{module}"), name)(args)
    return _wrap(handler)


def _conf_options(p: argparse.ArgumentParser) -> None:
    from raylink.cli_commands.conf import keys_help

    p.add_argument("--conf-file", metavar="YAML", help="job configuration file (flat or nested YAML, Flink key names)")
    p.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                   help="a configuration value (repeatable; wins over --conf-file)")
    p.epilog = (p.epilog or "") + "\nconfiguration keys (Flink's names where Flink has one):\n" + keys_help() \
        + "\n\n" + EXIT_CODES_HELP


def register_commands(parser: argparse.ArgumentParser, sub: Any) -> None:
    """Add run / submit / list / status / logs / cancel to ``sub`` (the CLI's sub-parsers)."""
    fmt = argparse.RawDescriptionHelpFormatter
    parser.formatter_class = fmt
    parser.epilog = ((parser.epilog or "") + "\n" + EXIT_CODES_HELP + "\n\n`raylink COMMAND --help` describes "
                     "a command.").strip()

    run = sub.add_parser("run", help="run a job: a local Ray, --address HEAD:6379, or in-process",
                         description="Run a raylink program with per-vertex progress; its job runs on Ray "
                                     "(local, or --address) or in this process (execution.target=local).",
                         epilog=RUN_EXAMPLES, formatter_class=fmt)
    run.add_argument("--address", help="Ray cluster address (HEAD:6379, ray://HEAD:10001 or auto); "
                                       "default: $RAY_ADDRESS, else a local Ray")
    _conf_options(run)
    run.add_argument("--progress", choices=("auto", "tty", "log", "off"),
                     help="progress display on stderr (default: raylink.progress, auto = tty if a terminal)")
    run.add_argument("--result-file", metavar="JSON",
                     help="write the finished job's result (runtime, vertices, executors and their nodes) as JSON")
    run.add_argument("job", help="the program's Python file")
    run.add_argument("args", nargs=argparse.REMAINDER, help="arguments passed to the program")
    run.set_defaults(func=_lazy("run", "cmd_run"))

    submit = sub.add_parser("submit", help="submit a job to a Ray cluster (Ray Job Submission API)",
                            description="Submit a raylink program to a Ray cluster through its dashboard.",
                            epilog=SUBMIT_EXAMPLES, formatter_class=fmt)
    submit.add_argument("--address", help=ADDRESS_HELP)
    _conf_options(submit)
    submit.add_argument("--job-id", help="submission id (default: raylink-<file>-<random>)")
    submit.add_argument("--no-wait", action="store_true", help="print the job id and return at once")
    submit.add_argument("--progress", choices=("log", "off"), default="log",
                        help="progress blocks in the job's log (default: log)")
    submit.add_argument("--ship-raylink", choices=("py_modules", "pip", "installed"), default="py_modules",
                        help="how raylink reaches the cluster: this raylink package as py_modules (default), "
                             "a pip requirement, or already installed in the cluster's image")
    submit.add_argument("--pip", action="append", default=[], metavar="SPEC",
                        help="pip requirement for --ship-raylink pip (default: raylink==<this version>)")
    submit.add_argument("--env", action="append", default=[], metavar="KEY=VALUE",
                        help="environment variable for the job and its actors (repeatable)")
    submit.add_argument("--python", default="python", help="Python executable on the cluster (default: python)")
    submit.add_argument("job", help="the program's Python file; its folder becomes the working_dir")
    submit.add_argument("args", nargs=argparse.REMAINDER, help="arguments passed to the program")
    submit.set_defaults(func=_lazy("jobs", "cmd_submit"))

    listing = sub.add_parser("list", help="list the submitted jobs of a Ray cluster",
                             description="List the jobs submitted to a Ray cluster.",
                             epilog=EXIT_CODES_HELP, formatter_class=fmt)
    listing.add_argument("--address", help=ADDRESS_HELP)
    listing.set_defaults(func=_lazy("jobs", "cmd_list"))

    status = sub.add_parser("status", help="status, cause of failure and latest progress of a job",
                            description="Show a submitted job's status, exit code, failure cause and the "
                                        "latest per-vertex progress it logged.",
                            epilog=EXIT_CODES_HELP, formatter_class=fmt)
    status.add_argument("--address", help=ADDRESS_HELP)
    status.add_argument("job_id", metavar="JOB", help="submission id")
    status.set_defaults(func=_lazy("jobs", "cmd_status"))

    logs = sub.add_parser("logs", help="print (or --follow) a job's logs",
                          description="Print a submitted job's logs (driver output, TaskExecutor output, "
                                      "progress).", epilog=EXIT_CODES_HELP, formatter_class=fmt)
    logs.add_argument("--address", help=ADDRESS_HELP)
    logs.add_argument("--follow", "-f", action="store_true", help="keep printing until the job ends")
    logs.add_argument("job_id", metavar="JOB", help="submission id")
    logs.set_defaults(func=_lazy("jobs", "cmd_logs"))

    cancel = sub.add_parser("cancel", help="stop a running job",
                            description="Stop a submitted job: its driver gets SIGTERM, cancels the job's "
                                        "tasks and releases its TaskExecutors.",
                            epilog=EXIT_CODES_HELP, formatter_class=fmt)
    cancel.add_argument("--address", help=ADDRESS_HELP)
    cancel.add_argument("--timeout", type=float, default=30.0, help="seconds to wait for the job to stop (30)")
    cancel.add_argument("job_id", metavar="JOB", help="submission id")
    cancel.set_defaults(func=_lazy("jobs", "cmd_cancel"))
