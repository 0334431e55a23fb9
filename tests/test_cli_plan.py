"""``python -m raylink plan job.py``: the JobGraph of a program, without running it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from raylink.api import StreamExecutionEnvironment
from raylink.cli.plan import capture_job_graph, format_dot, format_text

pytestmark = pytest.mark.timeout(60)

ROOT = Path(__file__).resolve().parents[1]
WORD_COUNT = ROOT / "examples" / "word_count.py"

SRC = "Source: Collection Source"
AGG = "Keyed Aggregation -> Sink: Print to Std. Out"


def plan(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "raylink", "plan", *args], capture_output=True, text=True, cwd=cwd, timeout=50
    )


def split(line):
    return [(w, 1) for w in line.split()]


def first(kv):
    return kv[0]


@pytest.fixture(scope="module")
def json_plan() -> dict:
    proc = plan("examples/word_count.py", "--format", "json")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_plan_text():
    proc = plan("examples/word_count.py")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "Job 'word count': 3 vertices, 2 edges"
    assert lines[1].endswith(f"] {SRC}  parallelism=1 max=128 slot_sharing_group=default")
    assert lines[2].endswith("] Flat Map  parallelism=2 max=128 slot_sharing_group=default")
    assert lines[3] == f"      <- {SRC}  REBALANCE ALL_TO_ALL PIPELINED_BOUNDED"
    assert lines[4].endswith(f"] {AGG}  parallelism=2 max=128 slot_sharing_group=default")
    assert lines[5] == "      <- Flat Map  HASH ALL_TO_ALL PIPELINED_BOUNDED"
    assert len(lines) == 6
    assert proc.stderr == ""


def test_plan_json_equals_to_dict(json_plan):
    assert json_plan == capture_job_graph(str(WORD_COUNT), []).to_dict()
    assert [v["name"] for v in json_plan["vertices"]] == [SRC, "Flat Map", AGG]
    assert [(e["ship_strategy"], e["distribution_pattern"]) for e in json_plan["edges"]] == [
        ("REBALANCE", "ALL_TO_ALL"),
        ("HASH", "ALL_TO_ALL"),
    ]


def test_plan_json_ids_match_the_same_program_built_here(json_plan):
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    env.from_collection(["x"]).flat_map(split).key_by(first).sum(1).print()
    assert env.get_job_graph("word count").to_dict() == json_plan


def test_plan_dot(json_plan):
    proc = plan("examples/word_count.py", "--format", "dot")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.strip().splitlines()
    ids = [v["id"] for v in json_plan["vertices"]]
    assert lines[0] == "digraph raylink {" and lines[-1] == "}"
    assert lines[2] == f'  "{ids[0]}" [shape=box, label="{SRC}\\nparallelism 1"];'
    assert lines[4] == f'  "{ids[2]}" [shape=box, label="{AGG}\\nparallelism 2"];'
    assert lines[5:7] == [
        f'  "{ids[0]}" -> "{ids[1]}" [label="REBALANCE"];',
        f'  "{ids[1]}" -> "{ids[2]}" [label="HASH"];',
    ]
    assert len(lines) == 8


def test_plan_from_another_directory_with_absolute_path(tmp_path, json_plan):
    proc = plan(str(WORD_COUNT), "--format", "json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == json_plan


def test_plan_passes_arguments_to_the_job(tmp_path):
    job = tmp_path / "job_with_args.py"
    job.write_text(
        "import sys\n"
        "from raylink.api import StreamExecutionEnvironment\n"
        "env = StreamExecutionEnvironment.get_execution_environment()\n"
        "env.set_parallelism(int(sys.argv[1]))\n"
        "env.from_sequence(1, 10).map(lambda x: x).print()\n"
        "env.execute(sys.argv[2])\n"
    )
    proc = plan(str(job), "3", "named", "--format", "json")
    assert proc.returncode == 0, proc.stderr
    d = json.loads(proc.stdout)
    assert d["job_name"] == "named"
    assert [(v["name"], v["parallelism"]) for v in d["vertices"]] == [
        ("Source: Sequence Source -> Map -> Sink: Print to Std. Out", 3)
    ]


def test_plan_without_execute_fails_clearly(tmp_path):
    job = tmp_path / "no_execute.py"
    job.write_text(
        "from raylink.api import StreamExecutionEnvironment\n"
        "env = StreamExecutionEnvironment.get_execution_environment()\n"
        "env.from_sequence(1, 10).print()\n"
    )
    proc = plan(str(job))
    assert proc.returncode != 0
    assert proc.stdout == ""
    assert f"raylink plan: {job} never called execute(); no job to show" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_plan_with_execute_and_collect_is_captured(tmp_path):
    job = tmp_path / "collect.py"
    job.write_text(
        "from raylink.api import StreamExecutionEnvironment\n"
        "env = StreamExecutionEnvironment.get_execution_environment()\n"
        "list(env.from_sequence(1, 10).map(lambda x: x).execute_and_collect('c'))\n"
    )
    proc = plan(str(job), "--format", "json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["job_name"] == "c"


def test_plan_with_execute_and_collect_shows_collect_sink(tmp_path):
    job = tmp_path / "collect.py"
    job.write_text(
        "from raylink.api import StreamExecutionEnvironment\n"
        "env = StreamExecutionEnvironment.get_execution_environment()\n"
        "list(env.from_sequence(1, 10).map(lambda x: x).execute_and_collect('c'))\n"
    )
    proc = plan(str(job), "--format", "json")
    assert proc.returncode == 0, proc.stderr
    d = json.loads(proc.stdout)
    assert [v["name"] for v in d["vertices"]] == ["Source: Sequence Source -> Map -> Sink: Collect Sink"]


def test_capture_restores_execute():
    original = (
        StreamExecutionEnvironment.execute,
        StreamExecutionEnvironment.execute_async,
        StreamExecutionEnvironment._execute_and_collect,
    )
    argv = list(sys.argv)
    job = capture_job_graph(str(WORD_COUNT), [])
    assert (
        StreamExecutionEnvironment.execute,
        StreamExecutionEnvironment.execute_async,
        StreamExecutionEnvironment._execute_and_collect,
    ) == original
    assert sys.argv == argv
    assert format_text(job).splitlines()[0] == "Job 'word count': 3 vertices, 2 edges"
    assert format_dot(job).startswith("digraph raylink {")


def test_plan_bad_format():
    proc = plan("examples/word_count.py", "--format", "yaml")
    assert proc.returncode == 2
    assert "invalid choice: 'yaml'" in proc.stderr


def test_plan_missing_file_fails_clearly(tmp_path):
    missing = tmp_path / "nope.py"
    proc = plan(str(missing))
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr
    assert str(missing) in proc.stderr
