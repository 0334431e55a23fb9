"""Another local user cannot stop this user's local jobs by creating raylink's runtime folder
first (:mod:`raylink.runtime.runtime_dir`): the squatting folder is made by a process running
as uid 65534 (the suite runs as root), then a real ``python job.py`` on the local target runs to
its exact result, and nothing is written into the other user's folder."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest

from raylink.runtime.runtime_dir import HOME_SUBDIR, base_dir

pytestmark = [
    pytest.mark.timeout(180),
    pytest.mark.skipif(os.getuid() != 0, reason="acting as another user needs root (the suite runs as root)"),
]

ROOT = Path(__file__).resolve().parent.parent
NOBODY = 65534
JOB = """
from raylink.api import Configuration, StreamExecutionEnvironment
conf = Configuration().set_string("execution.target", "local")
env = StreamExecutionEnvironment.get_execution_environment(conf)
env.set_parallelism(2)
stream = env.from_collection(list(range(1000))).key_by(lambda x: x % 7).map(lambda x: x * 3)
with stream.execute_and_collect() as records:
    print("RESULT", sorted(records) == [x * 3 for x in range(1000)], flush=True)
"""


@pytest.fixture
def shared_tmp():
    """A temp dir every user may write, with the sticky bit (as /tmp)."""
    path = Path(tempfile.mkdtemp(dir="/tmp", prefix="raylink-squat-"))
    path.chmod(0o1777)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _as_nobody(*argv: str) -> None:
    """Run ``argv`` as uid/gid 65534 (another local user)."""

    def drop() -> None:
        os.setgid(NOBODY)
        os.setuid(NOBODY)

    subprocess.run(argv, preexec_fn=drop, check=True, timeout=30)  # noqa: PLW1509 - the point of the test


def _squat(folder: Path) -> None:
    _as_nobody("mkdir", "-m", "700", str(folder))
    assert folder.stat().st_uid == NOBODY


def _run_job(tmp_path: Path, **env_vars: str) -> subprocess.CompletedProcess:
    script = tmp_path / "job.py"
    script.write_text(textwrap.dedent(JOB))
    env = {k: v for k, v in os.environ.items() if k != "XDG_RUNTIME_DIR"}
    env.update(env_vars, PYTHONPATH=str(ROOT.parent) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.pop("RAY_ADDRESS", None)
    return subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=150
    )


def test_a_squatted_temp_folder_is_not_used_when_the_home_folder_is_usable(tmp_path, shared_tmp, monkeypatch):
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    squatted = shared_tmp / f"raylink-{os.getuid()}"
    _squat(squatted)
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setattr(tempfile, "tempdir", str(shared_tmp))
    assert base_dir().startswith(str(home / Path(*HOME_SUBDIR)) + os.sep)
    done = _run_job(tmp_path, HOME=str(home), TMPDIR=str(shared_tmp))
    assert done.returncode == 0, done.stderr[-3000:]
    assert "RESULT True" in done.stdout
    assert "UnsafePathError" not in done.stderr and "not pinned" not in done.stderr
    assert os.listdir(squatted) == []
    logs = home / Path(*HOME_SUBDIR)
    assert oct(logs.stat().st_mode & 0o777) == "0o700"


@pytest.mark.parametrize("where", ["temp-dir-without-home", "xdg-runtime-dir"])
def test_a_squatted_runtime_folder_does_not_stop_a_local_job(tmp_path, shared_tmp, where):
    if where == "xdg-runtime-dir":
        xdg = shared_tmp / "xdg"
        xdg.mkdir()
        xdg.chmod(0o733)  # for a moment the other user may create raylink/ in it
        squatted = xdg / "raylink"
        _squat(squatted)
        xdg.chmod(0o700)
        env = {"XDG_RUNTIME_DIR": str(xdg), "TMPDIR": str(shared_tmp)}
    else:
        squatted = shared_tmp / f"raylink-{os.getuid()}"
        _squat(squatted)
        env = {"HOME": str(tmp_path / "no-such-home"), "TMPDIR": str(shared_tmp)}
    done = _run_job(tmp_path, **env)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "RESULT True" in done.stdout
    # the user is told why nothing was pinned, naming the folder and its owner
    assert f"refusing to use {squatted}: it is owned by uid {NOBODY}" in done.stderr
    assert os.listdir(squatted) == []
