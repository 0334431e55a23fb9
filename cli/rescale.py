"""``raylink rescale JOB_ID --vertex NAME=P ...``: change a running job's parallelism per vertex
(Flink's ``PUT /jobs/:jobid/resource-requirements``, FLIP-291, as the adaptive scheduler takes it).

The job's REST endpoint is ``--rest URL``, else the one of this user's REST servers (recorded
in the per-user runtime folder with their tokens, :mod:`raylink.runtime.client.rest_tokens`)
that serves ``JOB_ID``. Each ``--vertex`` names a vertex by id, name, or the name of one
operator of its chain, and the parallelism it gets (sent as ``lowerBound = upperBound = P``).
The command waits (``--timeout``, default 300 s; ``--no-wait`` does not) until the job runs
again with every named vertex at its new parallelism and prints each vertex's old and new
parallelism. A request the job refuses prints the server's reason (exit 2); an unknown job
or no endpoint exits 5 / 3. Not thread-safe (one command line per process).
"""

from __future__ import annotations

import glob
import json
import os
import time
import urllib.error
import urllib.request
from typing import Any, Optional

from raylink.cli.common import (
    EXIT_JOB_FAILED,
    EXIT_NO_SUCH_JOB,
    EXIT_OK,
    EXIT_UNREACHABLE,
    EXIT_USAGE,
    CliError,
    reject_extra,
)

EXAMPLES = """examples:
  raylink rescale 4ed3c34f52de4ca6b8efdd946f612271 --vertex "Keyed Reduce=3"
  raylink rescale JOB_ID --vertex f539f3d2a434ade856ab236dcb0bc102=4 --rest http://127.0.0.1:8081
"""

#: seconds between two reads of the job while waiting for it to run rescaled
POLL_S = 0.2
HTTP_TIMEOUT_S = 30.0
TERMINAL = ("FINISHED", "FAILED", "CANCELED")


def add_parser(sub: Any, fmt: type, handler: Any) -> None:
    """The ``rescale`` sub-command."""
    rescale = sub.add_parser(
        "rescale",
        help="change a running job's parallelism per vertex (no new job: same job id)",
        description="Rescale a running job (FLIP-291's PUT /jobs/:jobid/resource-requirements): the job "
        "takes a checkpoint and redeploys its tasks at the new parallelism, its state redistributed by key "
        "group, split and union as a savepoint restore does; exactly-once sinks commit each record once.",
        epilog=EXAMPLES,
        formatter_class=fmt,
    )
    rescale.add_argument("job_id", metavar="JOB_ID", help="the job's id (its dashboard or REST API shows it)")
    rescale.add_argument(
        "--vertex",
        "-v",
        action="append",
        required=True,
        metavar="NAME=P",
        help="a vertex (id, name, or the uid or name of one of its operators) and its new parallelism; repeatable",
    )
    rescale.add_argument("--rest", metavar="URL", help="the job's REST endpoint (default: found in the runtime folder)")
    rescale.add_argument("--timeout", type=float, default=300.0, help="seconds to wait for the rescaled job (300)")
    rescale.add_argument("--no-wait", action="store_true", help="return once the job accepted the request")
    rescale.set_defaults(func=handler("rescale", "cmd_rescale"))


def parse_vertices(specs: list[str]) -> dict[str, int]:
    """``["NAME=P", ...]`` as ``{NAME: P}`` (the last ``=`` splits: names may contain one)."""
    out: dict[str, int] = {}
    for spec in specs:
        name, sep, value = spec.rpartition("=")
        name = name.strip()
        if not sep or not name:
            raise CliError(EXIT_USAGE, f"raylink rescale: --vertex {spec!r}: expected NAME=P")
        try:
            out[name] = int(value.strip())
        except ValueError:
            raise CliError(
                EXIT_USAGE, f"raylink rescale: --vertex {spec!r}: {value.strip()!r} is not a number"
            ) from None
    return out


def _request(url: str, method: str = "GET", body: Optional[dict] = None) -> tuple[int, Any]:
    from raylink.runtime.client.rest_tokens import rest_auth_headers

    base = url.split("/jobs", 1)[0]
    data = None if body is None else json.dumps(body).encode("utf-8")
    headers = {**rest_auth_headers(base), **({"Content-Type": "application/json"} if data is not None else {})}
    request = urllib.request.Request(url, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=HTTP_TIMEOUT_S) as response:
            return response.status, json.loads(response.read() or b"null")
    except urllib.error.HTTPError as exc:
        try:
            return exc.code, json.loads(exc.read() or b"null")
        except ValueError:
            return exc.code, None


def _recorded_endpoints() -> list[str]:
    from raylink.runtime.runtime_dir import read_private_file, runtime_dir

    urls = []
    for path in sorted(glob.glob(os.path.join(runtime_dir("rest"), "port-*.json"))):
        try:
            url = json.loads(read_private_file(path)).get("url")
        except (OSError, ValueError):
            continue
        if isinstance(url, str):
            urls.append(url)
    return urls


def find_job_endpoint(job_id: str, rest: Optional[str]) -> str:
    """The REST endpoint serving ``job_id`` (``rest`` when given)."""
    candidates = [rest.rstrip("/")] if rest else _recorded_endpoints()
    if not candidates:
        raise CliError(EXIT_UNREACHABLE, "raylink rescale: no REST endpoint recorded on this machine; give --rest URL")
    for url in candidates:
        try:
            status, _ = _request(f"{url}/jobs/{job_id}")
        except (OSError, ValueError) as exc:
            if rest:
                raise CliError(EXIT_UNREACHABLE, f"raylink rescale: cannot reach {url}: {exc}") from None
            continue
        if status == 200:
            return url
    where = rest or f"{len(candidates)} recorded REST endpoint(s)"
    raise CliError(EXIT_NO_SUCH_JOB, f"raylink rescale: job {job_id} not found at {where}")


def cmd_rescale(args: Any) -> int:
    reject_extra(args, "rescale")
    wanted = parse_vertices(args.vertex)
    url = find_job_endpoint(args.job_id, args.rest)
    job_url = f"{url}/jobs/{args.job_id}"
    _, before = _request(job_url)
    old = {v["id"]: (v["name"], v["parallelism"]) for v in before.get("vertices", [])}
    body = {name: {"parallelism": {"lowerBound": p, "upperBound": p}} for name, p in wanted.items()}
    started = time.monotonic()
    status, answer = _request(f"{job_url}/resource-requirements", "PUT", body)
    if status != 200:
        errors = "; ".join((answer or {}).get("errors", [])) if isinstance(answer, dict) else str(answer)
        raise CliError(EXIT_USAGE, f"raylink rescale: refused ({status}): {errors}")
    _, requirements = _request(f"{job_url}/resource-requirements")
    target = {v: r["parallelism"]["upperBound"] for v, r in requirements.items() if v in old}
    if args.no_wait:
        print(f"job {args.job_id}: rescale accepted")
        return EXIT_OK
    deadline = started + args.timeout
    while True:
        _, details = _request(job_url)
        state = details.get("state")
        now = {v["id"]: v["parallelism"] for v in details.get("vertices", [])}
        if state == "RUNNING" and all(now.get(v) == p for v, p in target.items()):
            break
        _, asked = _request(f"{job_url}/resource-requirements")
        if any(asked.get(v, {}).get("parallelism", {}).get("upperBound") != p for v, p in target.items()):
            raise CliError(
                EXIT_JOB_FAILED,
                f"raylink rescale: job {args.job_id} was not rescaled (its checkpoint failed, or it stopped "
                f"running); it runs on at its parallelism; see the job's log",
            )
        if state in TERMINAL:
            raise CliError(EXIT_JOB_FAILED, f"raylink rescale: job {args.job_id} ended {state} while rescaling")
        if time.monotonic() >= deadline:
            raise CliError(
                EXIT_JOB_FAILED,
                f"raylink rescale: job {args.job_id} is {state} and not rescaled after {args.timeout:.0f} s",
            )
        time.sleep(POLL_S)  # a CLI polling a REST server: nothing to wait on
    took = time.monotonic() - started
    for vertex_id, (name, was) in old.items():
        if target.get(vertex_id, was) != was:
            print(f"{name} ({vertex_id}): {was} -> {target[vertex_id]}")
    print(f"job {args.job_id} rescaled in {took:.1f} s (same job id, state restored from a checkpoint)")
    return EXIT_OK


__all__ = ["add_parser", "cmd_rescale", "find_job_endpoint", "parse_vertices"]
