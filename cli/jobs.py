"""``raylink submit | list | status | logs | cancel``: jobs on a Ray cluster through the
Ray Job Submission API (the dashboard, ``http://HEAD:8265``).

``submit --detached`` runs the program with ``execution.attached: false``: its Ray job ends once
the raylink job runs in a JobMaster actor of its own; ``list`` shows those raylink jobs too
(their ids: ``raylink savepoint / stop / cluster cancel JOB_ID`` reach them).

``submit`` uploads the job's folder as the ``working_dir`` -- without what its
``.gitignore`` / ``.rayignore`` files exclude (Ray honours them), caches and
virtualenvs, and a deny list of secret files (``.env*``, ``.ssh/``, ``.aws/``,
``*.pem``, ``id_rsa*``, ...), printing the file count and size first -- makes raylink
importable on every node (``--ship-raylink``: the local raylink package as
``py_modules`` (default), a ``pip`` requirement, or ``installed`` when the image
already has it), passes the configuration in ``RAYLINK_CONF`` and runs
``python -m raylink run job.py args`` on the head node.
"""

from __future__ import annotations

import asyncio
import datetime
import os
import re
import shlex
import shutil
import tempfile
import time
import uuid
from dataclasses import dataclass
from typing import Any, Optional

from raylink.actors.job_submission import DashboardAuthenticationError, files_ray_packs, job_submission_client
from raylink.cli.common import (
    EXIT_JOB_FAILED,
    EXIT_NO_SUCH_JOB,
    EXIT_OK,
    EXIT_STOPPED,
    EXIT_UNREACHABLE,
    EXIT_USAGE,
    CliError,
    auth_headers,
    check_dashboard,
    dashboard_address,
    err,
    reject_extra,
)
from raylink.cli.progress import LOG_PREFIX
from raylink.cli.run import prepare_conf
from raylink.core.configuration import CONF_ENV_VAR
from raylink.core.options import RaylinkOptions

TERMINAL = ("SUCCEEDED", "FAILED", "STOPPED")
# Ray's runtime_env ``excludes`` (gitignore syntax, relative to the working_dir). Ray itself also
# honours every .gitignore (unless RAY_RUNTIME_ENV_IGNORE_GITIGNORE=1) and .rayignore in the tree.
WORKING_DIR_EXCLUDES = [".git", ".venv", "venv", "__pycache__", "*.pyc", ".pytest_cache", ".hypothesis"]
#: never uploaded, whatever the ignore files say: credentials that often sit next to a job
#: (``.git`` is always left out above: its config and history can hold tokens too)
SECRET_EXCLUDES = [
    ".env*",
    ".netrc",
    ".pgpass",
    ".pypirc",
    ".npmrc",
    ".git-credentials",
    ".htpasswd",
    ".ssh/",
    ".aws/",
    ".azure/",
    ".gnupg/",
    ".kube/",
    ".docker/",
    ".ray/",
    "**/.config/gcloud/",
    "*.pem",
    "*.key",
    "*.p12",
    "*.pfx",
    "*.jks",
    "*.keystore",
    "id_rsa*",
    "id_dsa*",
    "id_ecdsa*",
    "id_ed25519*",
    "credentials",
    "credentials.json",
    "*credentials*.json",
    "service-account*.json",
    "*.tfstate",
]
SHIP_MODES = ("py_modules", "pip", "installed")


# -- connecting ------------------------------------------------------------------------------------
def connect(address_arg: Optional[str]) -> tuple[Any, str]:
    address = dashboard_address(address_arg)
    check_dashboard(address)
    try:
        return job_submission_client(address, auth_headers(address)), address
    except DashboardAuthenticationError:
        raise CliError(
            EXIT_UNREACHABLE,
            f"raylink: the Ray dashboard at {address} refused the request: it needs "
            f"the cluster's token (set RAY_AUTH_TOKEN or RAY_AUTH_TOKEN_PATH, or "
            f"RAY_AUTH_MODE=token to use ~/.ray/auth_token)",
        ) from None
    except ConnectionError as exc:
        raise CliError(EXIT_UNREACHABLE, f"raylink: cannot reach the Ray dashboard at {address}: {exc}") from None
    except RuntimeError as exc:  # e.g. not a Ray dashboard, or too old
        raise CliError(EXIT_UNREACHABLE, f"raylink: {address} is not a usable Ray dashboard: {exc}") from None


def job_info(client: Any, job_id: str, address: str) -> Any:
    try:
        return client.get_job_info(job_id)
    except RuntimeError as exc:
        if "404" in str(exc) or "does not exist" in str(exc):
            raise CliError(EXIT_NO_SUCH_JOB, f"raylink: no job {job_id!r} on {address}") from None
        raise


def _status(info: Any) -> str:
    return getattr(info.status, "value", str(info.status))


# -- the runtime environment ---------------------------------------------------------------------------
def stage_raylink(dest_root: str) -> str:
    """A copy of the raylink package (sources only, no tests) named ``raylink`` for ``py_modules``.

    The checkout's directory may have any name (the repository root is the package), but
    ``py_modules`` imports a directory under its own name, hence the copy.
    """
    import raylink

    src = os.path.dirname(os.path.abspath(raylink.__file__))
    dst = os.path.join(dest_root, "raylink")
    os.makedirs(dst)
    for name in sorted(os.listdir(src)):
        path = os.path.join(src, name)
        if os.path.isfile(path) and name.endswith(".py"):
            shutil.copy2(path, os.path.join(dst, name))
        elif (
            os.path.isdir(path)
            and not name.startswith(".")
            and name != "tests"
            and os.path.isfile(os.path.join(path, "__init__.py"))
        ):
            shutil.copytree(path, os.path.join(dst, name), ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    return dst


@dataclass
class UploadPlan:
    """What ``raylink submit`` uploads as the working_dir: the files (relative paths and sizes),
    and those the secrets deny list leaves out."""

    root: str
    files: list[tuple[str, int]]
    secrets_left_out: list[str]

    @property
    def total_bytes(self) -> int:
        return sum(size for _, size in self.files)

    def summary(self) -> str:
        n = len(self.files)
        text = (
            f"raylink: uploading {self.root} as the working_dir: {n} file{'s' if n != 1 else ''}, "
            f"{size_text(self.total_bytes)} (.gitignore and .rayignore apply)"
        )
        if self.secrets_left_out:
            shown = ", ".join(self.secrets_left_out[:5])
            more = f" and {len(self.secrets_left_out) - 5} more" if len(self.secrets_left_out) > 5 else ""
            text += f"; left out as secrets: {shown}{more}"
        return text


def size_text(n: int) -> str:
    """``912 bytes``, ``34.5 KiB``, ``1.2 GiB``."""
    if n < 1024:
        return f"{n} bytes"
    value = float(n)
    for unit in ("KiB", "MiB", "GiB"):
        value /= 1024
        if value < 1024 or unit == "GiB":
            break
    return f"{value:.1f} {unit}"


def plan_upload(job_dir: str) -> UploadPlan:
    """The working_dir upload of ``raylink submit`` (``WORKING_DIR_EXCLUDES`` + ``SECRET_EXCLUDES``
    + the tree's .gitignore / .rayignore files), computed the way Ray packs it."""
    files = files_ray_packs(job_dir, WORKING_DIR_EXCLUDES + SECRET_EXCLUDES)
    without_deny_list = files_ray_packs(job_dir, WORKING_DIR_EXCLUDES)
    kept = {path for path, _ in files}
    return UploadPlan(os.path.abspath(job_dir), files, [p for p, _ in without_deny_list if p not in kept])


def build_runtime_env(
    job_dir: str, conf: dict, ship: str, pip_specs: list[str], env_vars: dict, staging_dir: Optional[str]
) -> dict:
    import json

    import raylink

    runtime_env: dict = {
        "working_dir": job_dir,
        "excludes": WORKING_DIR_EXCLUDES + SECRET_EXCLUDES,
        "env_vars": {
            CONF_ENV_VAR: json.dumps(conf),
            "PYTHONUNBUFFERED": "1",
            "RAY_DEDUP_LOGS": "0",  # every printed record reaches the job's log
            **env_vars,
        },
    }
    if ship == "py_modules":
        runtime_env["py_modules"] = [stage_raylink(staging_dir)]
    elif ship == "pip":
        runtime_env["pip"] = list(pip_specs) or [f"raylink=={raylink.__version__}"]
    return runtime_env


def _env_pairs(pairs: list[str]) -> dict:
    out = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise CliError(EXIT_USAGE, f"raylink submit: --env expects KEY=VALUE, got {pair!r}")
        out[key] = value
    return out


def submission_id_for(job: str) -> str:
    stem = re.sub(r"[^A-Za-z0-9_-]+", "-", os.path.splitext(os.path.basename(job))[0]).strip("-") or "job"
    return f"raylink-{stem}-{uuid.uuid4().hex[:8]}"


def entrypoint_for(args: Any) -> str:
    run = [args.python, "-m", "raylink", "run", "--progress", args.progress]
    return shlex.join(run + [os.path.basename(args.job)] + list(args.args))


# -- failure cause -------------------------------------------------------------------------------------
def failure_cause(info: Any, logs: str) -> str:
    lines = [line.rstrip() for line in (logs or "").splitlines() if line.strip()]
    for line in reversed(lines):
        if line.startswith("raylink: job '") and (" FAILED: " in line or " CANCELED: " in line):
            return line[len("raylink: ") :]
    for line in reversed(lines):
        if line.startswith("raylink: ") and " failed: " in line:
            return line[len("raylink: ") :]
    for line in reversed(lines):
        if re.match(r"^[\w.]*(Error|Exception|Interrupt)\b", line):
            return line
    if lines:
        return lines[-1]
    message = (getattr(info, "message", None) or "").strip()
    return message.splitlines()[0] if message else "no cause reported"


def wait_terminal(client: Any, job_id: str, timeout_s: float) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        info = client.get_job_info(job_id)
        if _status(info) in TERMINAL or time.monotonic() >= deadline:
            return info
        time.sleep(0.2)  # polling the status API: the dashboard has no blocking wait


def finish_report(client: Any, job_id: str, info: Any) -> int:
    status = _status(info)
    if status == "SUCCEEDED":
        err(f"raylink: job {job_id} SUCCEEDED")
        return EXIT_OK
    if status == "STOPPED":
        err(f"raylink: job {job_id} STOPPED")
        return EXIT_STOPPED
    if status == "FAILED":
        code = getattr(info, "driver_exit_code", None)
        cause = failure_cause(info, client.get_job_logs(job_id))
        exit_text = f" (exit code {code})" if code is not None else ""
        err(f"raylink: job {job_id} FAILED{exit_text}: {cause}")
        return EXIT_JOB_FAILED
    err(f"raylink: job {job_id} is still {status}")
    return EXIT_JOB_FAILED


async def _tail(client: Any, job_id: str, printed: list) -> None:
    import sys

    async for chunk in client.tail_job_logs(job_id):
        sys.stdout.write(chunk)
        sys.stdout.flush()
        printed[0] += len(chunk)


def follow(client: Any, job_id: str, timeout_s: float = 30.0) -> Any:
    """Print the job's logs as they come until it ends; returns its final info.

    If the log stream breaks (a dashboard restart, a proxy closing the websocket), the
    status API is polled until the job ends and the rest of the log is printed from there.
    """
    import sys

    printed = [0]
    try:
        asyncio.run(_tail(client, job_id, printed))
    except KeyboardInterrupt:
        raise CliError(
            130, f"raylink: stopped following job {job_id}; it keeps running (raylink cancel {job_id} stops it)"
        ) from None
    except Exception as exc:  # the stream broke: fall back to polling
        err(f"raylink: log stream of job {job_id} interrupted ({type(exc).__name__}); polling its status")
        timeout_s = max(timeout_s, 24 * 3600.0)
    try:
        info = wait_terminal(client, job_id, timeout_s)
    except KeyboardInterrupt:
        raise CliError(
            130, f"raylink: stopped following job {job_id}; it keeps running (raylink cancel {job_id} stops it)"
        ) from None
    rest = client.get_job_logs(job_id)[printed[0] :]
    if rest:
        sys.stdout.write(rest)
        sys.stdout.flush()
    return info


# -- sub-commands --------------------------------------------------------------------------------------
def cmd_submit(args: Any) -> int:
    if not os.path.isfile(args.job):
        raise CliError(EXIT_USAGE, f"raylink: no such job file: {args.job}")
    conf = prepare_conf(args)
    conf.pop(RaylinkOptions.PROGRESS.key, None)  # the entrypoint's --progress decides
    env_vars = _env_pairs(args.env)
    if args.ship_raylink != "pip" and args.pip:
        raise CliError(EXIT_USAGE, "raylink submit: --pip needs --ship-raylink pip")
    dashboard_address(args.address)  # a usage error (e.g. a ray:// address) before anything else
    job_dir = os.path.dirname(os.path.abspath(args.job))
    upload = plan_upload(job_dir)
    if os.path.basename(args.job) not in {path for path, _ in upload.files}:
        raise CliError(
            EXIT_USAGE,
            f"raylink submit: {args.job} itself is left out of the upload (a .gitignore, "
            f".rayignore or the secrets deny list matches it); rename it or change the "
            f"ignore file",
        )
    err(upload.summary())
    client, address = connect(args.address)
    job_id = args.job_id or submission_id_for(args.job)
    staging = tempfile.mkdtemp(prefix="raylink-ship-")
    try:
        runtime_env = build_runtime_env(job_dir, conf, args.ship_raylink, args.pip, env_vars, staging)
        client.submit_job(
            entrypoint=entrypoint_for(args),
            submission_id=job_id,
            runtime_env=runtime_env,
            metadata={"raylink.job": os.path.basename(args.job)},
        )
    except RuntimeError as exc:
        raise CliError(EXIT_JOB_FAILED, f"raylink: the dashboard at {address} rejected the job: {exc}") from None
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    err(f"raylink: submitted job {job_id} to {address}")
    if args.no_wait:
        print(job_id)
        return EXIT_OK
    return finish_report(client, job_id, follow(client, job_id))


def _time(ms: Optional[int]) -> str:
    if not ms:
        return "-"
    return datetime.datetime.fromtimestamp(ms / 1000).strftime("%Y-%m-%d %H:%M:%S")


def cmd_list(args: Any) -> int:
    reject_extra(args, "list")
    client, address = connect(args.address)
    jobs = [j for j in client.list_jobs() if j.submission_id]
    from raylink.actors.job_master_actor import job_master_actors

    detached = job_master_actors(address)
    if detached:  # raylink jobs whose JobMaster runs in an actor (raylink savepoint / stop / cluster cancel)
        print("RAYLINK JOB ID                     JOBMASTER")
        for job_id, state in detached:
            print(f"{job_id:<32}  {state}")
        if jobs:
            print()
    if not jobs:
        if not detached:
            err(f"raylink: no jobs on {address}")
        return EXIT_OK
    jobs.sort(key=lambda j: j.start_time or 0)
    width = max(len("JOB ID"), *(len(j.submission_id) for j in jobs))
    print(f"{'JOB ID'.ljust(width)}  {'STATUS':<9}  {'START':<19}  {'END':<19}  ENTRYPOINT")
    for j in jobs:
        print(
            f"{j.submission_id.ljust(width)}  {_status(j):<9}  {_time(j.start_time):<19}  "
            f"{_time(j.end_time):<19}  {j.entrypoint}"
        )
    return EXIT_OK


def latest_progress(logs: str) -> list[str]:
    """The last progress block a job printed (``raylink| `` lines)."""
    block: list[str] = []
    title = LOG_PREFIX + "job '"
    for line in (logs or "").splitlines():
        if line.startswith(title):
            block = [line[len(LOG_PREFIX) :]]
        elif line.startswith(LOG_PREFIX) and block:
            block.append(line[len(LOG_PREFIX) :])
    return block


def cmd_status(args: Any) -> int:
    reject_extra(args, "status")
    client, address = connect(args.address)
    info = job_info(client, args.job_id, address)
    status = _status(info)
    print(f"Job:        {args.job_id}")
    print(f"Status:     {status}")
    print(f"Entrypoint: {info.entrypoint}")
    print(f"Started:    {_time(info.start_time)}")
    print(f"Ended:      {_time(info.end_time)}")
    if info.message:
        print(f"Message:    {info.message.strip().splitlines()[0]}")
    if getattr(info, "driver_exit_code", None) is not None:
        print(f"Exit code:  {info.driver_exit_code}")
    logs = client.get_job_logs(args.job_id)
    if status == "FAILED":
        print(f"Cause:      {failure_cause(info, logs)}")
    block = latest_progress(logs)
    if block:
        print("Progress:")
        for line in block:
            print("  " + line)
    return EXIT_OK


def cmd_logs(args: Any) -> int:
    reject_extra(args, "logs")
    import sys

    client, address = connect(args.address)
    job_info(client, args.job_id, address)
    if args.follow:
        follow(client, args.job_id)
    else:
        sys.stdout.write(client.get_job_logs(args.job_id))
        sys.stdout.flush()
    return EXIT_OK


def cmd_cancel(args: Any) -> int:
    reject_extra(args, "cancel")
    client, address = connect(args.address)
    info = job_info(client, args.job_id, address)
    status = _status(info)
    if status in TERMINAL:
        err(f"raylink: job {args.job_id} already {status}; nothing to cancel")
        return EXIT_OK
    client.stop_job(args.job_id)
    info = wait_terminal(client, args.job_id, args.timeout)
    status = _status(info)
    if status not in TERMINAL:
        err(f"raylink: job {args.job_id} still {status} after {args.timeout:.0f} s")
        return EXIT_JOB_FAILED
    err(f"raylink: job {args.job_id} {status}")
    return EXIT_OK
