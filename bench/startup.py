"""Start-up time: wall clock of a trivial job script, ``python job.py`` to exit.

The job: three elements, one map, collected (``execute_and_collect``) and printed.
Measured as ``/usr/bin/time`` would (elapsed wall clock of the child process, and its CPU
time: on a box other work keeps busy the CPU time shows what a quiet box's wall clock would
be), with Python's compiled-module cache on as in a user's shell, the median of ``--runs`` runs, the modes interleaved round by round (this machine's speed
drifts between minutes):

* ``session cluster``: against a running session cluster (``raylink cluster start``), ``RAY_ADDRESS``
  set: the driver submits the job to the session's Dispatcher over HTTP, without Ray;
* ``session cluster, driver on Ray``: the same, ``raylink.session.rest-submission=false`` (the
  driver connects to Ray and runs the JobMaster itself, leasing the session's executors);
* ``per-job, running Ray``: the same Ray, ``raylink.session.enabled=false`` (per-job TaskExecutors);
* ``per-job, own Ray``: ``RAY_ADDRESS=local``, the script starts (and stops) its own Ray;
* ``local target``: ``execution.target=local`` (threads in the script's process);
* ``nothing running, first run`` / ``second run``: the script as a newcomer runs it, no
  ``RAY_ADDRESS``, no Ray on the machine (Ray's temp folder is an empty one of the bench's),
  twice in a row: raylink runs such a job in the script's process (see ``actors/session_executor``);
* ``python -c pass``: the interpreter's own start, for scale.

A second table is for a program that runs several jobs (``JOBS``: the same job three times in one
script, per-job TaskExecutors on the running Ray): the time from ``execute`` to the result of its
first job and of its later ones, with the finished jobs' executors kept warm for the next
(``resourcemanager.taskmanager-timeout``, 30 s by default) and without (``0``: each job starts
its own processes), the two interleaved run by run.

The modes that start no Ray run first, before the bench starts its private Ray head
(``ray start --head --block`` in its own temp dir, so no other driver on the machine finds
it), which it stops, with the session, at the end.

    python bench/startup.py [--runs 5] [--skip-ray]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from raylink.actors.local_ray import start_ray_head

JOB = """
import sys
from raylink.api import Configuration, StreamExecutionEnvironment

conf = Configuration()
for item in sys.argv[1:]:
    key, value = item.split("=", 1)
    conf.set_string(key, value)
env = StreamExecutionEnvironment.get_execution_environment(conf)
with env.from_collection([1, 2, 3]).map(lambda x: x * 2).execute_and_collect() as results:
    out = sorted(results)
assert out == [2, 4, 6], out
print(out)
"""
#: the trivial job three times in one program: each job's seconds from execute to its result (JSON)
JOBS = """
import json
import sys
import time
from raylink.api import Configuration, StreamExecutionEnvironment

seconds = []
for _ in range(3):
    conf = Configuration()
    for item in sys.argv[1:]:
        key, value = item.split("=", 1)
        conf.set_string(key, value)
    env = StreamExecutionEnvironment.get_execution_environment(conf)
    started = time.perf_counter()
    with env.from_collection([1, 2, 3]).map(lambda x: x * 2).execute_and_collect() as results:
        out = sorted(results)
    seconds.append(time.perf_counter() - started)
    assert out == [2, 4, 6], out
print(json.dumps(seconds))
"""
PYTHON = sys.executable
PACKAGE_PARENT = str(Path(__file__).resolve().parent.parent.parent)


def _timed(argv: list[str], env: dict) -> tuple[float, float]:
    """(wall clock, CPU seconds: user + system) of one run of ``argv`` (the CPU time of the
    script's process and its children that it waited for; not of Ray's processes)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300)
    elapsed = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return elapsed, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def _start_ray(temp_dir: str) -> tuple[subprocess.Popen, str]:
    """The bench's private Ray head (its own temp dir, so no other driver on the machine finds it)."""
    return start_ray_head(open(temp_dir + ".log", "w"), temp_dir=temp_dir, timeout_s=90, settle_s=2.0)


def _rounds(modes: dict, runs: int, times: dict) -> None:
    """``runs`` rounds, each running every mode once in order (the modes interleaved)."""
    for _ in range(runs):
        for mode, (argv, env) in modes.items():
            times.setdefault(mode, []).append(_timed(argv, env))
            wall, cpu = times[mode][-1]
            print(f"  {mode}: {wall:.2f} s (CPU {cpu:.2f} s)", file=sys.stderr, flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--skip-ray", action="store_true", help="only the modes that start no Ray")
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="rlstart")
    job = os.path.join(work, "job.py")
    with open(job, "w") as f:
        f.write(JOB)
    base = dict(os.environ)
    base["PYTHONPATH"] = PACKAGE_PARENT + os.pathsep + base.get("PYTHONPATH", "")
    base.pop("RAY_ADDRESS", None)
    base.pop("PYTHONDONTWRITEBYTECODE", None)  # as a user's shell: Python caches compiled modules
    nothing = tempfile.mkdtemp(prefix="rlnothing")  # Ray's temp folder with no Ray in it
    nothing_running = dict(base, RAY_TMPDIR=nothing)
    times: dict[str, list[float]] = {}
    # first, while the bench runs no Ray: a newcomer's first and second run, back to back
    _rounds(
        {
            "nothing running, first run": ([PYTHON, job], nothing_running),
            "nothing running, second run": ([PYTHON, job], nothing_running),
            "local target": ([PYTHON, job, "execution.target=local"], nothing_running),
            "python -c pass": ([PYTHON, "-c", "pass"], base),
        },
        args.runs,
        times,
    )
    jobs: dict[str, list] = {}
    if not args.skip_ray:
        jobs_script = os.path.join(work, "jobs.py")
        with open(jobs_script, "w") as f:
            f.write(JOBS)
        _ray_modes(job, jobs_script, base, args.runs, times, jobs)
    print(
        f"\nTrivial job (3 elements, 1 map, collected): wall clock of `python job.py`, "
        f"median of {args.runs} (min-max)\n"
    )
    print("| mode | median s | min s | max s | CPU s (median) |\n|---|---|---|---|---|")
    for mode, values in times.items():
        wall = [w for w, _ in values]
        cpu = statistics.median(c for _, c in values)
        print(f"| {mode} | {statistics.median(wall):.2f} | {min(wall):.2f} | {max(wall):.2f} | {cpu:.2f} |")
    if jobs:
        print(
            f"\nA program's three jobs on the running Ray (per-job TaskExecutors): seconds from execute to the "
            f"result, median of {args.runs} programs\n"
        )
        print("| executors | 1st job s | 2nd and 3rd job s | later jobs vs cold |\n|---|---|---|---|")
        cold = statistics.median(t for run in jobs["cold"] for t in run[1:])
        for mode, label in (("warm", "kept warm (default, 30 s)"), ("cold", "released (timeout 0)")):
            later = statistics.median(t for run in jobs[mode] for t in run[1:])
            first = statistics.median(run[0] for run in jobs[mode])
            print(f"| {label} | {first:.2f} | {later:.2f} | {cold / later:.1f}x |")


def _program_jobs(argv: list, env: dict) -> list:
    """Each job's seconds of one run of :data:`JOBS`."""
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _ray_modes(job: str, jobs_script: str, base: dict, runs: int, times: dict, jobs: dict) -> None:
    """The modes on Ray: a private Ray head (its own temp folder) and a session cluster on it;
    then a program's several jobs with and without warm executors."""
    ray_proc, address = _start_ray(os.path.join("/tmp", f"rlb{os.getpid()}"))
    on_ray = dict(
        base, RAY_ADDRESS=address, RAY_AUTH_MODE="token"
    )  # Ray enables its token auth only for a cluster it finds itself
    modes = {
        "session cluster (RAY_ADDRESS)": ([PYTHON, job], on_ray),
        "session cluster, driver on Ray": ([PYTHON, job, "raylink.session.rest-submission=false"], on_ray),
        "per-job, running Ray (RAY_ADDRESS)": ([PYTHON, job, "raylink.session.enabled=false"], on_ray),
        "per-job, own local Ray (RAY_ADDRESS=local)": ([PYTHON, job], dict(base, RAY_ADDRESS="local")),
    }
    cli = [PYTHON, "-m", "raylink", "cluster"]
    try:
        for _attempt in range(3):  # a Ray head just started may refuse drivers for a few seconds
            started = subprocess.run(
                cli + ["start", "--address", address, "--executors", "2"],
                env=on_ray,
                capture_output=True,
                text=True,
                timeout=180,
            )
            if started.returncode != 3:
                break
        if started.returncode != 0:
            raise RuntimeError(f"raylink cluster start failed: {started.stderr}")
        _timed(*modes["session cluster (RAY_ADDRESS)"])  # warm-up: the pool's first lease
        _rounds(modes, runs, times)
        per_job = [PYTHON, jobs_script, "raylink.session.enabled=false"]
        for _ in range(runs):  # interleaved
            jobs.setdefault("warm", []).append(_program_jobs(per_job, on_ray))
            jobs.setdefault("cold", []).append(
                _program_jobs(per_job + ["resourcemanager.taskmanager-timeout=0"], on_ray)
            )
            print(f"  program's jobs: warm {jobs['warm'][-1]}, cold {jobs['cold'][-1]}", file=sys.stderr, flush=True)
    finally:
        subprocess.run(cli + ["stop", "--address", address], env=on_ray, capture_output=True, timeout=120)
        os.killpg(ray_proc.pid, signal.SIGTERM)
        ray_proc.wait(60)


if __name__ == "__main__":
    main()
