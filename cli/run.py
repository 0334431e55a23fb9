"""``raylink run job.py [args]``: run a program here, its job on a local Ray or ``--address``.

The program runs in this process (as ``__main__``, with ``sys.argv = [job.py, args...]``);
``execute()`` is routed through :class:`~raylink.cli.progress.ProgressExecutor`,
which shows per-vertex progress, prints where the TaskExecutors ran, and cancels the job
cleanly on SIGTERM / Ctrl-C (that is how ``raylink cancel`` stops a submitted job).
With ``--detached`` (``execution.attached: false``) ``execute()`` submits the job to a JobMaster
actor of its own and returns at once: the job id is printed, and the job outlives this command
(:mod:`raylink.actors.job_master_actor`).
"""

from __future__ import annotations

import contextlib
import json
import os
import runpy
import signal
import sys
import traceback
from typing import Any, Iterator, Optional

from raylink.cli.common import (
    EXIT_JOB_FAILED,
    EXIT_OK,
    EXIT_STOPPED,
    EXIT_UNREACHABLE,
    EXIT_USAGE,
    CliError,
    check_ray_address,
    enable_auth_for,
    err,
)
from raylink.cli.conf import ConfError, build_conf, conf_from_environment
from raylink.cli.progress import (
    ProgressExecutor,
    Terminated,
    cancel_job,
    install_signal_handlers,
    resolve_mode,
    write_result_file,
)
from raylink.core.configuration import CONF_ENV_VAR
from raylink.core.options import ExecutionOptions, RaylinkOptions, SavepointConfigOptions, read_option
from raylink.runtime.client.executors import executor_context
from raylink.runtime.client.job_result import JobExecutionException
from raylink.runtime.logging_setup import log_file_hint
from raylink.runtime.metrics import MetricsPortError


def _has_traceback(exc: BaseException) -> bool:
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if exc.__traceback__ is not None:
            return True
        exc = exc.__cause__ or exc.__context__
    return False


def connect_ray(address: str) -> None:
    """Connect this driver to the cluster at ``address`` now, so a bad address is a clear error."""
    check_ray_address(address)
    enable_auth_for(address)
    os.environ["RAY_ADDRESS"] = address
    from raylink.actors.ray_executor import ensure_ray

    try:
        ensure_ray()
    except Exception as exc:  # AuthenticationError, ConnectionError, version mismatch, ...
        first_line = str(exc).splitlines()[0] if str(exc) else ""
        raise CliError(
            EXIT_UNREACHABLE,
            f"raylink: cannot connect to the Ray cluster at {address}: {type(exc).__name__}: {first_line}",
        ) from None


def prepare_conf(args: Any) -> dict:
    try:
        conf, warnings = build_conf(args.conf_file, args.conf)
        inherited = conf_from_environment()
    except ConfError as exc:
        raise CliError(EXIT_USAGE, f"raylink: {exc}") from None
    for warning in warnings:
        err(warning)
    merged = {**inherited, **conf}
    if getattr(args, "progress", None):
        merged[RaylinkOptions.PROGRESS.key] = args.progress
    if getattr(args, "from_savepoint", None):
        path = args.from_savepoint
        merged[SavepointConfigOptions.SAVEPOINT_PATH.key] = path if "://" in path else os.path.abspath(path)
    if getattr(args, "allow_non_restored_state", False):
        merged[SavepointConfigOptions.SAVEPOINT_IGNORE_UNCLAIMED_STATE.key] = "true"
    if getattr(args, "detached", False):
        merged[ExecutionOptions.ATTACHED.key] = "false"
    return merged


class DetachedSubmitter:
    """Wraps an executor for a detached job (``execution.attached: false``): ``execute`` submits
    it, prints its id and how to reach it, and returns at once (the job outlives this program)."""

    def __init__(self, module: Any, entries: list) -> None:
        self.module = module
        self.entries = entries

    def execute_async(self, env: Any, job_name: Optional[str] = None) -> Any:
        client = self.module.execute_async(env, job_name)
        # not cancelled when this program is stopped: the job is detached
        self.entries.append({"client": None, "result": None, "detached": client.get_job_id()})
        err(
            f"raylink: job '{client.job_name}' submitted detached, job id {client.get_job_id()} "
            f"(raylink savepoint / stop / cluster cancel {client.get_job_id()})"
        )
        return client

    def execute(self, env: Any, job_name: Optional[str] = None) -> Any:
        from raylink.actors.job_master_actor import DetachedJobExecutionResult

        client = self.execute_async(env, job_name)
        print(client.get_job_id())
        return DetachedJobExecutionResult(client.get_job_id(), client.job_name, 0)

    def execute_and_collect(self, *args: Any, **kwargs: Any) -> Any:
        raise CliError(EXIT_USAGE, "raylink run: execute_and_collect needs an attached job (not --detached)")


def check_result_file(path: str) -> None:
    """``--result-file``: its folder must exist and be writable before the job runs (not after
    it succeeded); a folder cannot be the file."""
    folder = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):
        raise CliError(EXIT_USAGE, f"raylink run: --result-file {path} is a folder, not a file")
    if not os.path.isdir(folder):
        raise CliError(EXIT_USAGE, f"raylink run: --result-file {path}: no such folder {folder}")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise CliError(EXIT_USAGE, f"raylink run: --result-file {path}: folder {folder} is not writable")
    if os.path.exists(path) and not os.access(path, os.W_OK):
        raise CliError(EXIT_USAGE, f"raylink run: --result-file {path} is not writable")


@contextlib.contextmanager
def _program_context(job: str, argv: list[str]) -> Iterator[None]:
    """The program's ``sys.argv`` and ``sys.path`` and signal handlers that cancel its jobs;
    all restored afterwards."""
    saved_handlers = install_signal_handlers()
    saved_argv, saved_path = sys.argv, list(sys.path)
    sys.argv = [job] + list(argv)
    sys.path.insert(0, os.path.dirname(os.path.abspath(job)))
    try:
        yield
    finally:
        for signum, handler in saved_handlers.items():
            signal.signal(signum, handler)
        sys.argv = saved_argv
        sys.path[:] = saved_path


def _run_program(job: str, entries: list) -> Optional[int]:
    """Run ``job`` as ``__main__``; the exit code when it ended badly, ``None`` when it ended well."""
    try:
        runpy.run_path(job, run_name="__main__")
    except Terminated as stop:
        for entry in entries:  # jobs the program started with execute_async, or interrupted early
            if entry["client"] is not None:
                cancel_job(entry["client"], sys.stderr)
        err(f"raylink: {job} stopped by signal {stop.signum}")
        return 128 + stop.signum
    except MetricsPortError as exc:  # the job never ran: a configuration problem, not a crash
        err(f"raylink: {exc}")
        return EXIT_USAGE
    except JobExecutionException as exc:
        if exc.cause is not None and _has_traceback(exc.cause):
            traceback.print_exception(exc.cause, file=sys.stderr)
        cause = exc.cause if exc.cause is not None else "no cause reported"
        _point_to_logs()
        err(f"raylink: job '{exc.job_name}' {exc.status}: {cause}")
        return EXIT_STOPPED if exc.status == "CANCELED" else EXIT_JOB_FAILED
    except SystemExit as exc:
        if exc.code in (None, 0):
            return None
        if isinstance(exc.code, int):
            return exc.code
        err(str(exc.code))
        return EXIT_JOB_FAILED
    except Exception as exc:
        traceback.print_exc()
        _point_to_logs()
        err(f"raylink: {job} failed: {type(exc).__name__}: {exc}")
        return EXIT_JOB_FAILED
    return None


def _point_to_logs() -> None:
    """Before a failure's last line: where Ray's, Spark's and raylink's own log lines of this
    run are."""
    hint = log_file_hint()
    if hint is not None:
        err(f"raylink: {hint} (raylink --verbose run ... prints them)")


def cmd_run(args: Any) -> int:
    job = args.job
    if not os.path.isfile(job):
        raise CliError(EXIT_USAGE, f"raylink: no such job file: {job}")
    if args.result_file:
        check_result_file(args.result_file)
        args.result_file = os.path.abspath(args.result_file)  # the program may chdir
    conf = prepare_conf(args)
    if args.address:
        connect_ray(args.address)
    os.environ[CONF_ENV_VAR] = json.dumps(conf)
    mode = resolve_mode(read_option(conf, RaylinkOptions.PROGRESS), sys.stderr)
    interval_s = read_option(conf, RaylinkOptions.PROGRESS_INTERVAL) / 1000.0

    entries: list = []

    def wrap(env: Any, executor: Any) -> Any:
        if not env.configuration.get(ExecutionOptions.ATTACHED):
            return DetachedSubmitter(executor, entries)
        return ProgressExecutor(executor, env, mode, interval_s, sys.stderr, entries)

    wrapper = executor_context(wrap)
    with wrapper, _program_context(job, args.args):
        code = _run_program(job, entries)
    if code is not None:
        return code
    if not entries:
        err(f"raylink run: {job} finished without calling execute(); no job ran")
        return EXIT_JOB_FAILED
    if args.result_file:
        write_result_file(args.result_file, entries)
    return EXIT_OK
