"""``python -m raylink run``: a program run by the CLI, with progress, summary, errors and signals.

The jobs here use ``execution.target=local`` (threads in the CLI's process) so that
output is exact and fast; the same command against a Ray cluster is exercised in
test_cli_multinode.py.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(120)

ROOT = Path(__file__).resolve().parents[1]
LOCAL = ["--conf", "execution.target=local"]
WORD_COUNT_LINES = sorted(
    [
        "1> ('be', 1)",
        "1> ('be', 2)",
        "1> ('in', 1)",
        "1> ('mind', 1)",
        "1> ('nobler', 1)",
        "1> ('not', 1)",
        "1> ('suffer', 1)",
        "1> ('that', 1)",
        "1> ('tis', 1)",
        "2> ('is', 1)",
        "2> ('or', 1)",
        "2> ('question', 1)",
        "2> ('the', 1)",
        "2> ('the', 2)",
        "2> ('to', 1)",
        "2> ('to', 2)",
        "2> ('to', 3)",
        "2> ('whether', 1)",
    ]
)
JOB_ID = r"[0-9a-f]{32}"


def env() -> dict:
    return {k: v for k, v in os.environ.items() if not k.startswith(("RAY_ADDRESS", "RAYLINK_"))}


def raylink(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "raylink", *args], capture_output=True, text=True, cwd=cwd, timeout=100, env=env()
    )


def write(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_run_word_count_in_process():
    proc = raylink("run", *LOCAL, "examples/word_count.py")
    assert proc.returncode == 0, proc.stderr
    assert sorted(proc.stdout.splitlines()) == WORD_COUNT_LINES
    lines = proc.stderr.splitlines()
    assert len(lines) == 2, proc.stderr  # in-process: no TaskExecutor actors to report
    assert re.fullmatch(
        rf"raylink: job 'word count' \({JOB_ID}\) started: 3 vertices, 5 subtasks on 1 "
        r"TaskExecutor",
        lines[0],
    )
    assert re.fullmatch(rf"raylink: job 'word count' FINISHED in \d+ ms \(job id {JOB_ID}\)", lines[1])


def test_run_progress_log_and_result_file(tmp_path):
    result = tmp_path / "result.json"
    proc = raylink("run", *LOCAL, "--progress", "log", "--result-file", str(result), "examples/word_count.py")
    assert proc.returncode == 0, proc.stderr
    table = [line for line in proc.stderr.splitlines() if line.startswith("raylink| ")]
    assert re.fullmatch(r"raylink\| job 'word count' FINISHED \d+\.\d s", table[-5])
    assert table[-4].split() == [
        "raylink|",
        "VERTEX",
        "SUBTASKS",
        "RECORDS",
        "IN",
        "RECORDS",
        "OUT",
        "BACK",
        "PRESSURE",
    ]
    assert re.fullmatch(r"raylink\| Source: Collection Source +1 +0 +3  OK \(0%\)", table[-3])
    assert re.fullmatch(r"raylink\| Flat Map +2 +3 +18  (OK|LOW|HIGH) \(\d+%\)", table[-2])
    assert re.fullmatch(
        r"raylink\| Keyed Aggregation -> Sink: Print to Std\. Out +2 +18 +0  (OK|LOW|HIGH) "
        r"\(\d+%\)",
        table[-1],
    )
    doc = json.loads(result.read_text())
    assert doc["job_name"] == "word count" and doc["status"] == "FINISHED"
    assert [(v["vertex"], v["parallelism"], v["numRecordsIn"], v["numRecordsOut"]) for v in doc["vertices"]] == [
        ("Source: Collection Source", 1, 0, 3),
        ("Flat Map", 2, 3, 18),
        ("Keyed Aggregation -> Sink: Print to Std. Out", 2, 18, 0),
    ]


def test_run_passes_arguments_to_the_program(tmp_path):
    job = write(
        tmp_path,
        "args_job.py",
        """
import sys
from raylink.api import StreamExecutionEnvironment
print("argv", sys.argv[1:])
env = StreamExecutionEnvironment.get_execution_environment()
env.from_collection([1]).print()
env.execute("args")
""",
    )
    proc = raylink("run", *LOCAL, job, "--conf", "x=y", "-v", "plain")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "argv ['--conf', 'x=y', '-v', 'plain']\n1\n"


def test_failing_job_exits_1_with_the_cause(tmp_path):
    job = write(
        tmp_path,
        "failing_job.py",
        """
from raylink.api import StreamExecutionEnvironment

def check(x):
    if x == 3:
        raise ValueError("bad record 3")
    return x

env = StreamExecutionEnvironment.get_execution_environment()
env.from_collection([1, 2, 3, 4]).map(check).print()
env.execute("failing")
""",
    )
    proc = raylink("run", *LOCAL, job)
    assert proc.returncode == 1
    assert proc.stderr.splitlines()[-1] == (
        "raylink: job 'failing' FAILED: Operator 'Map' in task 'Source: Collection Source -> Map -> "
        "Sink: Print to Std. Out (1/1)' failed: ValueError: bad record 3"
    )


def test_program_error_before_execute_exits_1(tmp_path):
    job = write(tmp_path, "broken.py", "raise RuntimeError('no input today')\n")
    proc = raylink("run", *LOCAL, job)
    assert proc.returncode == 1
    assert proc.stderr.splitlines()[-1] == f"raylink: {job} failed: RuntimeError: no input today"
    assert "Traceback (most recent call last):" in proc.stderr


def test_program_without_execute_exits_1(tmp_path):
    job = write(tmp_path, "idle.py", "print('nothing to run')\n")
    proc = raylink("run", *LOCAL, job)
    assert (proc.returncode, proc.stdout) == (1, "nothing to run\n")
    assert proc.stderr == f"raylink run: {job} finished without calling execute(); no job ran\n"


def test_program_exit_code_is_kept(tmp_path):
    job = write(tmp_path, "exits.py", "import sys\nsys.exit(7)\n")
    proc = raylink("run", *LOCAL, job)
    assert (proc.returncode, proc.stderr) == (7, "")


def test_missing_job_file_exits_2():
    proc = raylink("run", "no_such_job.py")
    assert (proc.returncode, proc.stdout, proc.stderr) == (2, "", "raylink: no such job file: no_such_job.py\n")


def test_unreachable_address_exits_3():
    proc = raylink("run", "--address", "127.0.0.1:1", "examples/word_count.py")
    assert (proc.returncode, proc.stdout) == (3, "")
    assert proc.stderr == "raylink: cannot reach the Ray cluster at 127.0.0.1:1: Connection refused\n"


def test_dashboard_address_for_run_exits_2():
    proc = raylink("run", "--address", "http://127.0.0.1:8265", "examples/word_count.py")
    assert proc.returncode == 2
    assert proc.stderr == (
        "raylink run: http://127.0.0.1:8265 is a dashboard address; give the Ray address "
        "(HEAD:6379 or ray://HEAD:10001), or use `raylink submit --address "
        "http://127.0.0.1:8265`\n"
    )


def test_sigterm_cancels_a_running_job():
    """What `raylink cancel` does to a submitted job's driver: SIGTERM -> cancel -> CANCELED."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "raylink", "run", *LOCAL, "examples/unbounded_word_count.py", "--rate", "500"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env=env(),
    )
    try:
        first = proc.stderr.readline()  # blocks until the job has started
        assert re.fullmatch(
            rf"raylink: job 'unbounded word count' \({JOB_ID}\) started: 2 vertices, 4 subtasks "
            r"on 1 TaskExecutor\n",
            first,
        ), first
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 128 + signal.SIGTERM
    lines = err.splitlines()
    assert re.fullmatch(rf"raylink: cancelling job 'unbounded word count' \({JOB_ID}\)", lines[0])
    assert lines[1:] == [
        "raylink: job 'unbounded word count' CANCELED",
        "raylink: examples/unbounded_word_count.py stopped by signal 15",
    ]


def test_help_lists_every_command_and_each_has_help():
    top = raylink("--help")
    assert top.returncode == 0 and top.stderr == ""
    commands = re.search(r"\{([a-z,]+)\}", top.stdout).group(1).split(",")
    assert {"plan", "run", "submit", "list", "status", "logs", "cancel"} <= set(commands)
    assert "exit codes:" in top.stdout
    for command in commands:
        sub = raylink(command, "--help")
        assert sub.returncode == 0, (command, sub.stderr)
        assert sub.stdout.startswith(f"usage: raylink {command} "), command
    run_help = raylink("run", "--help").stdout
    for key in (
        "parallelism.default",
        "taskmanager.numberOfTaskSlots",
        "execution.buffer-timeout",
        "taskmanager.network.memory.buffers-per-channel",
        "taskmanager.network.memory.floating-buffers-per-gate",
        "pipeline.max-parallelism",
        "taskmanager.cpu.cores",
        "taskmanager.memory.process.size",
    ):
        assert f"\n  {key} " in run_help, key


def test_no_command_is_a_usage_error():
    proc = raylink()
    assert proc.returncode == 2 and "the following arguments are required: command" in proc.stderr


CHECKPOINTED_JOB = """
import time
from raylink.api import StreamExecutionEnvironment

def slow(v):
    time.sleep(0.002)
    return v

env = StreamExecutionEnvironment.get_execution_environment()
env.from_sequence(1, 1500).map(slow).key_by(lambda v: v % 3).reduce(lambda a, b: a + b).add_sink(lambda v: None)
env.execute("checkpointed")
"""


def test_progress_shows_checkpoints_and_restarts(tmp_path):
    """`raylink run` prints checkpoint counts in its progress lines (what `raylink status` shows)."""
    job = write(tmp_path, "checkpointed.py", CHECKPOINTED_JOB)
    proc = raylink(
        "run",
        *LOCAL,
        "--progress",
        "log",
        "--conf",
        "raylink.progress.interval=200",
        "--conf",
        "execution.checkpointing.interval=100",
        "--conf",
        f"execution.checkpointing.dir={tmp_path / 'chk'}",
        job,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    completed = [int(m) for m in re.findall(r"checkpoints (\d+) completed, 0 failed", proc.stdout + proc.stderr)]
    assert completed and max(completed) >= 1, (proc.stdout + proc.stderr)[-2000:]
    assert "restarts 0" in proc.stdout + proc.stderr
