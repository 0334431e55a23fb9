"""``raylink submit | list | status | logs | cancel`` without a cluster: errors, the runtime
environment a submission carries, and how failures and progress are read from a job's log.
(The same commands against a real two-node cluster: test_cli_multinode.py.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from raylink.cli.common import auth_headers, dashboard_address, enable_auth_for
from raylink.cli.jobs import (
    build_runtime_env,
    entrypoint_for,
    failure_cause,
    latest_progress,
    stage_raylink,
    submission_id_for,
)

pytestmark = pytest.mark.timeout(60)

ROOT = Path(__file__).resolve().parents[1]
DEAD = "http://127.0.0.1:1"


def clean_env(**extra: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "RAYLINK_"))}
    env.update(extra)
    return env


def raylink(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "raylink", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=50,
        env=env or clean_env(),
    )


@pytest.mark.parametrize(
    "args",
    [
        ["list"],
        ["status", "raylink-x"],
        ["logs", "raylink-x"],
        ["logs", "--follow", "raylink-x"],
        ["cancel", "raylink-x"],
        ["submit", "examples/word_count.py"],
    ],
)
def test_unreachable_dashboard_exits_3(args):
    proc = raylink(args[0], "--address", DEAD, *args[1:])
    assert (proc.returncode, proc.stdout) == (3, "")
    stderr = proc.stderr
    if args[0] == "submit":  # what would be uploaded is printed first (test_cli_safety.py)
        first, _, stderr = stderr.partition("\n")
        assert first.startswith(f"raylink: uploading {ROOT / 'examples'} as the working_dir: "), first
    assert stderr == "raylink: cannot reach the Ray dashboard at 127.0.0.1:1: Connection refused\n"


def test_address_from_the_environment():
    proc = raylink("list", env=clean_env(RAY_API_SERVER_ADDRESS="http://127.0.0.1:2"))
    assert (proc.returncode, proc.stderr) == (
        3,
        "raylink: cannot reach the Ray dashboard at 127.0.0.1:2: Connection refused\n",
    )


def test_submit_errors_before_contacting_the_cluster():
    proc = raylink("submit", "--address", DEAD, "missing_job.py")
    assert (proc.returncode, proc.stderr) == (2, "raylink: no such job file: missing_job.py\n")
    proc = raylink("submit", "--address", "ray://127.0.0.1:10001", "examples/word_count.py")
    assert (proc.returncode, proc.stderr) == (
        2,
        "raylink: ray://127.0.0.1:10001 is a Ray Client address; jobs go "
        "through the dashboard: --address http://HEAD:8265\n",
    )
    proc = raylink("submit", "--address", DEAD, "--env", "NOEQUALS", "examples/word_count.py")
    assert (proc.returncode, proc.stderr) == (2, "raylink submit: --env expects KEY=VALUE, got 'NOEQUALS'\n")
    proc = raylink("submit", "--address", DEAD, "--pip", "raylink", "examples/word_count.py")
    assert (proc.returncode, proc.stderr) == (2, "raylink submit: --pip needs --ship-raylink pip\n")


def test_usage_errors_exit_2():
    proc = raylink("status")
    assert proc.returncode == 2 and "the following arguments are required: JOB" in proc.stderr
    proc = raylink("list", "--address", DEAD, "extra")
    assert (proc.returncode, proc.stderr) == (2, "raylink list: unrecognized arguments: extra\n")
    proc = raylink("submit", "--ship-raylink", "conda", "examples/word_count.py")
    assert proc.returncode == 2 and "invalid choice: 'conda'" in proc.stderr


def test_dashboard_address_rules(monkeypatch):
    for var in ("RAY_ADDRESS", "RAY_API_SERVER_ADDRESS"):
        monkeypatch.delenv(var, raising=False)
    assert dashboard_address(None) == "http://127.0.0.1:8265"
    assert dashboard_address("head:8265") == "http://head:8265"
    assert dashboard_address("https://head/ray/") == "https://head/ray"
    monkeypatch.setenv("RAY_ADDRESS", "127.0.0.1:6379")  # a GCS address is not the dashboard
    assert dashboard_address(None) == "http://127.0.0.1:8265"
    monkeypatch.setenv("RAY_ADDRESS", "http://a:8265")
    assert dashboard_address(None) == "http://a:8265"
    monkeypatch.setenv("RAY_API_SERVER_ADDRESS", "http://b:8265")
    assert dashboard_address(None) == "http://b:8265"


def test_token_is_sent_only_where_it_belongs(monkeypatch, tmp_path):
    home = tmp_path / "home"
    (home / ".ray").mkdir(parents=True)
    (home / ".ray" / "auth_token").write_text("local-token\n")
    monkeypatch.setenv("HOME", str(home))
    for var in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH"):
        monkeypatch.delenv(var, raising=False)
    assert auth_headers("http://127.0.0.1:8265") == {"Authorization": "Bearer local-token"}
    assert auth_headers("http://remote-head:8265") == {}  # the local token never leaves by accident
    monkeypatch.setenv("RAY_AUTH_MODE", "token")
    assert auth_headers("http://remote-head:8265") == {"Authorization": "Bearer local-token"}
    monkeypatch.setenv("RAY_AUTH_TOKEN", "explicit")
    assert auth_headers("http://remote-head:8265") == {"Authorization": "Bearer explicit"}
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    assert auth_headers("http://127.0.0.1:8265") == {}
    monkeypatch.delenv("RAY_AUTH_MODE")
    monkeypatch.delenv("RAY_AUTH_TOKEN")
    enable_auth_for("remote-head:6379")
    assert "RAY_AUTH_MODE" not in os.environ
    enable_auth_for("127.0.0.1:6379")
    assert os.environ["RAY_AUTH_MODE"] == "token"


def test_staged_package_is_raylink_without_tests(tmp_path):
    staged = Path(stage_raylink(str(tmp_path)))
    assert staged.name == "raylink"
    names = {p.name for p in staged.iterdir()}
    assert {
        "__init__.py",
        "__main__.py",
        "api",
        "graph",
        "operators",
        "shuffle",
        "runtime",
        "actors",
        "connectors",
        "cli",
    } <= names
    assert {p.name for p in (staged / "cli").iterdir()} >= {
        "__init__.py",
        "main.py",
        "run.py",
        "jobs.py",
        "plan.py",
        "conf.py",
        "config.py",
        "progress.py",
        "common.py",
    }
    assert "tests" not in names and ".venv" not in names and ".git" not in names
    assert not list(staged.rglob("__pycache__"))
    # importable under its own name from the staging dir (what py_modules does on a node)
    proc = subprocess.run(
        [sys.executable, "-c", "import raylink.api, raylink.cli.run; print(raylink.__file__)"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=clean_env(PYTHONPATH=str(tmp_path)),
        timeout=30,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == str(staged / "__init__.py")


def test_runtime_env_per_ship_mode(tmp_path):
    conf = {"parallelism.default": 2}
    env = build_runtime_env("/jobs/wc", conf, "py_modules", [], {"A": "1"}, str(tmp_path))
    assert env["working_dir"] == "/jobs/wc"
    assert env["py_modules"] == [str(tmp_path / "raylink")]
    assert json.loads(env["env_vars"]["RAYLINK_CONF"]) == conf
    assert env["env_vars"]["A"] == "1" and env["env_vars"]["RAY_DEDUP_LOGS"] == "0"
    assert ".venv" in env["excludes"] and ".git" in env["excludes"]
    pip = build_runtime_env("/jobs/wc", conf, "pip", [], {}, None)
    assert pip["pip"] == ["raylink==0.1.0"] and "py_modules" not in pip
    assert build_runtime_env("/jobs/wc", conf, "pip", ["raylink @ git+https://example/raylink"], {}, None)["pip"] == [
        "raylink @ git+https://example/raylink"
    ]
    installed = build_runtime_env("/jobs/wc", conf, "installed", [], {}, None)
    assert "pip" not in installed and "py_modules" not in installed


def test_entrypoint_and_submission_id():
    args = SimpleNamespace(python="python", progress="log", job="/x/my job.py", args=["--in", "a b"])
    assert entrypoint_for(args) == "python -m raylink run --progress log 'my job.py' --in 'a b'"
    assert submission_id_for("/x/my job.py").startswith("raylink-my-job-")


def test_failure_cause_from_logs():
    info = SimpleNamespace(message="Job entrypoint command failed with exit code 1")
    logs = (
        "Running entrypoint for job x\nraylink: job 'wc' (abc) started: 1 vertex\n"
        "raylink: job 'wc' FAILED: Operator 'Map' failed: KeyError: 'k'\n"
    )
    assert failure_cause(info, logs) == "job 'wc' FAILED: Operator 'Map' failed: KeyError: 'k'"
    assert (
        failure_cause(info, "Traceback (most recent call last):\n  File x\nImportError: no raylink\n")
        == "ImportError: no raylink"
    )
    assert failure_cause(info, "/bin/sh: 1: python: not found\n") == "/bin/sh: 1: python: not found"
    assert failure_cause(info, "") == "Job entrypoint command failed with exit code 1"


def test_latest_progress_block():
    logs = "\n".join(
        [
            "raylink| job 'x' RUNNING 1.0 s",
            "raylink| VERTEX  SUBTASKS",
            "raylink| Source  1",
            "(TaskExecutorActor pid=1) 1> ('a', 1)",
            "raylink| job 'x' RUNNING 2.0 s",
            "raylink| VERTEX  SUBTASKS",
            "raylink| Source  2",
        ]
    )
    assert latest_progress(logs) == ["job 'x' RUNNING 2.0 s", "VERTEX  SUBTASKS", "Source  2"]
    assert latest_progress("no progress here") == []
