"""What a user sees: the README's first program, run as ``python job.py`` in a fresh process,
prints its six ``N> (word, count)`` lines and nothing else -- in this process when nothing
runs, and through the driver (no Ray prefix, no colour codes, before the job ends) on Ray."""

from __future__ import annotations

import collections
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LINE = re.compile(r"(\d+)> \('(\w+)', (\d+)\)")

pytestmark = pytest.mark.timeout(180)


def readme_first_program() -> str:
    """The first ``python`` block of the README (the program a newcomer copies)."""
    text = (ROOT / "README.md").read_text()
    return re.search(r"```python\n(.*?)```", text, re.S).group(1)


def words_of(program: str) -> list[str]:
    """The words the program counts: the sentence in its ``from_collection``."""
    sentences = re.search(r"from_collection\(\[(.*?)\]\)", program).group(1)
    return " ".join(eval(f"[{sentences}]")).split()  # noqa: S307 - a literal list of str from the README


def clean_env(tmp_path: Path, **extra: str) -> dict:
    """The environment of a newcomer's shell: no raylink or Ray settings; Ray's and raylink's
    temp folders private to the test (so no Ray started by another test is found)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "RAYLINK_"))}
    temp = tmp_path / "tmp"
    temp.mkdir(exist_ok=True)
    env.update(TMPDIR=str(temp), XDG_RUNTIME_DIR=str(temp), **extra)
    return env


def run_job(tmp_path: Path, env: dict, after: str = "") -> subprocess.CompletedProcess:
    job = tmp_path / "job.py"
    job.write_text(readme_first_program() + after)
    return subprocess.run(
        [sys.executable, str(job)], capture_output=True, text=True, cwd=tmp_path, env=env, timeout=150
    )


def assert_word_count_lines(stdout: str, words: list[str]) -> None:
    """Exactly one ``N> (word, count)`` line per word; per subtask a word's counts run 1, 2, ...
    in order; each word on one subtask; the last counts are the words' frequencies."""
    lines = stdout.splitlines()
    assert len(lines) == len(words), stdout
    parsed = []
    for line in lines:
        match = LINE.fullmatch(line)
        assert match, f"not a print() line: {line!r}"
        parsed.append((int(match.group(1)), match.group(2), int(match.group(3))))
    seen: dict[str, int] = {}
    subtask_of: dict[str, int] = {}
    for subtask, word, count in parsed:  # in the order printed: per subtask order is kept
        assert subtask in (1, 2)
        assert subtask_of.setdefault(word, subtask) == subtask, f"{word} printed by two subtasks"
        assert count == seen.get(word, 0) + 1, f"{word}: {count} after {seen.get(word, 0)}"
        seen[word] = count
    assert seen == dict(collections.Counter(words))


def test_readme_first_program_prints_only_its_lines_when_nothing_runs(tmp_path):
    program = readme_first_program()
    proc = run_job(tmp_path, clean_env(tmp_path))
    assert proc.returncode == 0, proc.stderr
    assert_word_count_lines(proc.stdout, words_of(program))
    assert len(proc.stdout.splitlines()) == 6
    assert proc.stderr == ""  # nothing from Ray, nothing from raylink: the job ran in this process


def test_readme_first_program_on_ray_prints_the_lines_through_the_driver(ray_session, tmp_path):
    """On a running Ray the print() lines come from TaskExecutor processes: the driver writes
    them, without Ray's ``(TaskExecutorActor pid=...)`` prefix, before the job ends; stderr holds
    only raylink's own lines."""
    address = ray_session.get_runtime_context().gcs_address
    env = clean_env(tmp_path, RAY_ADDRESS=address, RAY_AUTH_MODE=os.environ.get("RAY_AUTH_MODE", "token"))
    proc = run_job(tmp_path, env, after='print("execute() returned")\n')
    assert proc.returncode == 0, proc.stderr
    assert "\x1b[" not in proc.stdout and "pid=" not in proc.stdout
    *printed, last = proc.stdout.splitlines(keepends=True)
    assert last == "execute() returned\n", proc.stdout  # every print() line came before
    assert_word_count_lines("".join(printed), words_of(readme_first_program()))
    foreign = [line for line in proc.stderr.splitlines() if not line.startswith("raylink: ")]
    assert foreign == [], proc.stderr


KILLED_JOB = """
import sys
from raylink.actors.cluster import task_executor_pids
from raylink.api import Configuration, StreamExecutionEnvironment

env = StreamExecutionEnvironment.get_execution_environment(
    Configuration().set_string("raylink.session.enabled", "false")
)
env.set_parallelism(1)
env.from_sequence(0, 10**12).map(lambda x: x + 1).filter(lambda x: x < 0).print()
client = env.execute_async("victim")
print(task_executor_pids(client)[0], flush=True)
try:
    client.get_job_execution_result(timeout=120)
except Exception:
    pass
print(client.get_job_status(), flush=True)
"""


@pytest.mark.slow
def test_a_killed_task_executor_is_one_raylink_line_naming_it_and_its_tasks(ray_session, tmp_path):
    """SIGKILL the TaskExecutor of a running job: the terminal gets raylink's one line naming the
    executor and its tasks, none of Ray's "A worker died or was killed" lines."""
    import signal

    script = tmp_path / "victim.py"
    script.write_text(KILLED_JOB)
    address = ray_session.get_runtime_context().gcs_address
    env = clean_env(tmp_path, RAY_ADDRESS=address, RAY_AUTH_MODE=os.environ.get("RAY_AUTH_MODE", "token"))
    proc = subprocess.Popen(
        [sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )
    try:
        pid = int(proc.stdout.readline())
        os.kill(pid, signal.SIGKILL)
        out, err = proc.communicate(timeout=150)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert out.split() == ["FAILED"], (out, err)
    lines = err.splitlines()
    assert all(line.startswith("raylink: ") for line in lines), err
    lost = [line for line in lines if "was lost" in line]
    assert len(lost) == 1, err
    assert re.fullmatch(
        r"raylink: WARNING: TaskExecutor te-\w+-1-0 on node \w+ was lost \(\w+\); tasks: "
        r"Source: Sequence Source -> Map -> Filter -> Sink: Print to Std\. Out \(1/1\)",
        lost[0],
    ), lost[0]


FOREIGN_LINE = re.compile(
    r"^\d\d/\d\d/\d\d \d\d:\d\d:\d\d (INFO|WARN|ERROR)\b"  # Spark's log4j lines
    r"|^\[\d{4}-\d\d-\d\d [\d:,]+ [DIWEF] \d+ \d+\] \w+\.cc:\d+"  # Ray's native (C++) lines
    r"|StatusConsoleListener|NativeCodeLoader|Setting default log level|log4j"
    r"|\(raylet\)|\(\w+ pid=\d+\)|Token authentication|\bWARNING\b.* -- "  # Ray's Python lines
)


@pytest.mark.slow
@pytest.mark.spark
@pytest.mark.timeout(900)
def test_the_demo_prints_no_line_of_java_spark_or_ray(tmp_path):
    """``raylink demo`` (its own Ray and Spark on Ray, as a newcomer runs it): stdout is the
    demo's summary, stderr only raylink's lines; Spark's, Java's and Ray's are in the log folder."""
    import tempfile

    temp = tempfile.mkdtemp(prefix="rlq", dir="/tmp")  # Ray's socket paths must stay short
    env = clean_env(tmp_path)
    env.update(TMPDIR=temp)
    proc = subprocess.run(
        [sys.executable, "-m", "raylink", "demo", "--rows", "20000", "--users", "500"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=850,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.startswith("raylink demo: 20,000 click events (Delta table clicks_raw)"), proc.stdout
    # the malformed rows, by brute force over the input's ids (the demo's INPUT_SQL marks them by id)
    expected = {}
    for i in range(20000):
        reason = (
            "missing user"
            if i % 997 == 0
            else "missing page"
            if i % 1499 == 0
            else "bad timestamp"
            if i % 1009 == 0
            else "bad duration"
            if i % 1201 == 0
            else None
        )
        if reason:
            expected[reason] = expected.get(reason, 0) + 1
    malformed = ", ".join(f"{reason} {count}" for reason, count in sorted(expected.items()))
    assert f"  malformed: {malformed}\n" in proc.stdout, proc.stdout
    assert f"= aggregated {20000 - sum(expected.values()):,} + malformed {sum(expected.values())}: ok" in proc.stdout
    # each table is one Delta commit: the input's write and each sink's commit at the end of input
    assert "clicks_raw version 0, clicks_per_page version 0, clicks_malformed version 0" in proc.stdout, proc.stdout
    foreign = [line for line in (proc.stdout + proc.stderr).splitlines() if FOREIGN_LINE.search(line)]
    assert foreign == [], foreign
    assert all(line.startswith("raylink: ") for line in proc.stderr.splitlines()), proc.stderr
    logs = Path(temp if "XDG_RUNTIME_DIR" not in env else env["XDG_RUNTIME_DIR"]) / "raylink" / "logs"
    driver_logs = "".join(p.read_text() for p in logs.glob("run-*/spark-driver.log"))
    assert "INFO" in driver_logs  # Spark's lines went to the run's log folder


LOGGING_PROGRAM = """
import logging
from raylink.runtime.logging_setup import driver_log_path, setup_logging

setup_logging()
logging.getLogger("raylink").info("job started")
logging.getLogger("raylink.shuffle.hotpath").info("internal detail")
logging.getLogger("raylink.state").warning("disk almost full")
logging.getLogger("ray").warning("ray says hi")
logging.getLogger("py4j").warning("java gateway")
print(driver_log_path())
"""
LOGGED = ("job started", "internal detail", "disk almost full", "ray says hi", "java gateway")


def run_logging_program(tmp_path: Path, **extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", LOGGING_PROGRAM],
        capture_output=True,
        text=True,
        env=clean_env(tmp_path, **extra),
        timeout=60,
    )


def test_the_terminal_gets_raylink_s_lines_and_the_run_log_everything(tmp_path):
    proc = run_logging_program(tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.splitlines() == ["raylink: job started", "raylink: WARNING: disk almost full"]
    log = Path(proc.stdout.strip())
    assert log.parent.parent == tmp_path / "tmp" / "raylink" / "logs"
    text = log.read_text()
    assert all(message in text for message in LOGGED), text


def test_debug_level_prints_everything_and_a_bad_level_is_named(tmp_path):
    proc = run_logging_program(tmp_path, RAYLINK_LOG_LEVEL="DEBUG")
    assert proc.returncode == 0, proc.stderr
    assert "raylink: internal detail" in proc.stderr.splitlines()
    assert "ray says hi" in proc.stderr  # third-party lines are not kept from the terminal
    bad = run_logging_program(tmp_path, RAYLINK_LOG_LEVEL="LOUD")
    assert bad.returncode == 1
    assert "RAYLINK_LOG_LEVEL='LOUD' is not a log level; use one of DEBUG, INFO, WARNING, ERROR" in bad.stderr


LONG_JOB = """
import time
from raylink.api import StreamExecutionEnvironment

def slow(x):
    time.sleep(0.07)  # the job's own work: ~7 s in all
    return x

env = StreamExecutionEnvironment.get_execution_environment()
env.from_sequence(1, 100).map(slow).filter(lambda x: x % 50 == 0).print()
env.execute("slow job")
"""


def test_a_job_longer_than_a_few_seconds_gets_a_progress_line(tmp_path):
    job = tmp_path / "slow.py"
    job.write_text(LONG_JOB)
    proc = subprocess.run(
        [sys.executable, str(job)], capture_output=True, text=True, env=clean_env(tmp_path), timeout=150
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["50", "100"]
    lines = proc.stderr.splitlines()
    assert lines, "no progress line"
    for line in lines:
        assert re.fullmatch(r"raylink: job 'slow job' RUNNING for \d+ s: [\d,]+ records in", line), line


def test_a_program_s_own_logging_configuration_is_kept(tmp_path):
    """A program that configured logging (PyFlink's examples do, at INFO on stdout) gets raylink's
    records through it, not raylink's terminal handler and not raylink's DEBUG lines."""
    program = (
        "import logging, sys\n"
        "logging.basicConfig(stream=sys.stdout, level=logging.INFO, format='%(name)s %(message)s')\n"
        + LOGGING_PROGRAM.replace("print(driver_log_path())", "")
        + "logging.getLogger('raylink.x').debug('a debug detail')\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, env=clean_env(tmp_path), timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    assert proc.stdout.splitlines() == [
        "raylink job started",
        "raylink.shuffle.hotpath internal detail",
        "raylink.state disk almost full",
    ]


@pytest.mark.parametrize(
    "argv, verbose",
    [(["run"], False), (["--verbose", "run"], True), (["run", "--verbose"], True)],
)
def test_raylink_verbose_prints_raylink_s_debug_lines(tmp_path, argv, verbose):
    proc = subprocess.run(
        [sys.executable, "-m", "raylink", *argv, "--progress", "off", "examples/word_count.py"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=clean_env(tmp_path),
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()  # the word count's print() lines (18 words), and nothing else
    assert len(lines) == 18 and all(LINE.fullmatch(line) for line in lines), proc.stdout
    said_where = "raylink: no Ray to run on" in proc.stderr  # the DEBUG line of the target's choice
    assert said_where == verbose, proc.stderr
