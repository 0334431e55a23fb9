"""The CLI keeps secrets and bad input out of a run: what `raylink submit` uploads (.gitignore,
.rayignore, a deny list of secret files, a printed summary), configuration values checked at
submission (exit code 2, the key named, no traceback), and `--result-file` checked before the job."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from raylink.cli.conf import ConfError, build_conf
from raylink.cli.jobs import build_runtime_env, plan_upload

pytestmark = pytest.mark.timeout(60)

ROOT = Path(__file__).resolve().parents[1]
DEAD = "http://127.0.0.1:1"

SECRETS = {
    ".env": "API_KEY=1\n",
    ".env.production": "DB_PASSWORD=2\n",
    ".envrc": "export X=3\n",
    ".ssh/id_rsa": "-----BEGIN OPENSSH PRIVATE KEY-----\n",
    ".aws/credentials": "[default]\n",
    "server.pem": "-----BEGIN CERTIFICATE-----\n",
    "conf/tls.key": "key\n",
    "id_ed25519": "key\n",
    ".netrc": "machine x login y password z\n",
    "conf/credentials": "secret\n",
}
HOUSEKEEPING = {".git/config": "[core]\n", "__pycache__/job.cpython-311.pyc": "pyc\n", ".venv/pyvenv.cfg": "x\n"}
KEPT = {
    "job.py": "print('job')\n",
    "helper.py": "X = 1\n",
    "conf/settings.yaml": "a: 1\n",
    "lib/util.py": "Y = 2\n",
    ".gitignore": "data/\n*.log\n",
    ".rayignore": "notes/\n",
    "lib/.gitignore": "*.tmp\n",
}
IGNORED = {"data/big.csv": "1,2,3\n", "run.log": "log\n", "notes/private.md": "todo\n", "lib/scratch.tmp": "t\n"}


def clean_env(**extra: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "RAYLINK_"))}
    env.update(extra)
    return env


def raylink(*args: str, cwd: Path = ROOT, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "raylink", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=50,
        env=env or clean_env(),
    )


def job_folder(tmp_path: Path) -> Path:
    root = tmp_path / "job"
    for name, text in {**SECRETS, **HOUSEKEEPING, **KEPT, **IGNORED}.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


# -- raylink submit: what leaves this machine ------------------------------------------------------
def test_the_uploaded_working_dir_has_no_secrets_and_honours_ignore_files(tmp_path, monkeypatch):
    """Ray's own packaging of the runtime_env `raylink submit` builds: exactly the kept files."""
    from ray._private.runtime_env.packaging import create_package

    monkeypatch.delenv("RAY_RUNTIME_ENV_IGNORE_GITIGNORE", raising=False)
    root = job_folder(tmp_path)
    runtime_env = build_runtime_env(str(root), {}, "installed", [], {}, None)
    package = tmp_path / "package.zip"
    create_package(runtime_env["working_dir"], package, include_gitignore=True, excludes=runtime_env["excludes"])
    with zipfile.ZipFile(package) as zf:
        uploaded = {name for name in zf.namelist() if not name.endswith("/")}
    assert uploaded == set(KEPT)
    plan = plan_upload(str(root))  # the preview the CLI prints is what Ray packs
    assert [path for path, _ in plan.files] == sorted(KEPT)
    assert plan.total_bytes == sum(len(text) for text in KEPT.values())
    assert plan.secrets_left_out == sorted(SECRETS)


def test_submit_prints_file_count_and_size_before_submitting(tmp_path):
    root = job_folder(tmp_path)
    proc = raylink("submit", "--address", DEAD, str(root / "job.py"))
    assert proc.returncode == 3  # the dashboard is unreachable: nothing was submitted
    size = sum(len(text) for text in KEPT.values())
    assert proc.stderr.splitlines() == [
        f"raylink: uploading {root} as the working_dir: {len(KEPT)} files, {size} bytes (.gitignore and "
        f".rayignore apply); left out as secrets: .aws/credentials, .env, .env.production, .envrc, .netrc "
        f"and 5 more",
        "raylink: cannot reach the Ray dashboard at 127.0.0.1:1: Connection refused",
    ]


def test_submit_refuses_a_job_file_its_ignore_files_leave_out(tmp_path):
    (tmp_path / "job.py").write_text("print('job')\n")
    (tmp_path / ".rayignore").write_text("*.py\n")
    proc = raylink("submit", "--address", DEAD, str(tmp_path / "job.py"))
    assert (proc.returncode, proc.stdout) == (2, "")
    assert proc.stderr == (
        f"raylink submit: {tmp_path / 'job.py'} itself is left out of the upload (a "
        ".gitignore, .rayignore or the secrets deny list matches it); rename it or change "
        "the ignore file\n"
    )


# -- configuration values checked once, at submission -----------------------------------------------
@pytest.mark.parametrize(
    "pair, message",
    [
        ("taskmanager.memory.segment-size=8", "8 bytes is below the minimum memory segment size of 4096 (4kb)"),
        ("taskmanager.memory.segment-size=3kb", "3072 bytes is below the minimum memory segment size of 4096 (4kb)"),
        (
            "taskmanager.memory.segment-size=5000",
            "5000 bytes is not a power of 2 (memory segment sizes must be, e.g. 32kb)",
        ),
        (
            "taskmanager.memory.segment-size=2g",
            "2147483648 bytes is above the maximum memory segment size of 1073741824 (1gb)",
        ),
        ("metrics.port=notaport", "'notaport' is not an integer"),
        ("metrics.port=65536", "65536 is not a port (0-65535, 0 = any free port, -1 = off)"),
        ("metrics.port=-2", "-2 is not a port (0-65535, 0 = any free port, -1 = off)"),
        ("raylink.network.max-batch-bytes=0", "0 is below the minimum of 1 bytes"),
        ("raylink.network.buffer-debloat.initial-size=16", "16 is below the minimum of 256 bytes"),
    ],
)
def test_bad_values_name_the_key(pair, message):
    with pytest.raises(ConfError) as info:
        build_conf(None, [pair])
    assert str(info.value) == f"configuration key {pair.split('=')[0]!r}: {message}"


def test_good_values_are_normalised():
    conf, warnings = build_conf(
        None,
        ["taskmanager.memory.segment-size=4kb", "metrics.port=9249", "raylink.network.buffer-debloat.initial-size=256"],
    )
    assert warnings == []
    assert conf == {
        "taskmanager.memory.segment-size": 4096,
        "metrics.port": 9249,
        "raylink.network.buffer-debloat.initial-size": 256,
    }
    assert build_conf(None, ["metrics.port=0", "taskmanager.memory.segment-size=1g"])[0] == {
        "metrics.port": 0,
        "taskmanager.memory.segment-size": 1 << 30,
    }


@pytest.mark.parametrize("command", ["run", "submit"])
def test_bad_values_exit_2_without_a_traceback(command):
    for pair, key, why in [
        (
            "taskmanager.memory.segment-size=8",
            "taskmanager.memory.segment-size",
            "8 bytes is below the minimum memory segment size of 4096 (4kb)",
        ),
        ("metrics.port=notaport", "metrics.port", "'notaport' is not an integer"),
    ]:
        proc = raylink(
            command, *(["--address", DEAD] if command == "submit" else []), "--conf", pair, "examples/word_count.py"
        )
        assert (proc.returncode, proc.stdout) == (2, "")
        assert proc.stderr == f"raylink: configuration key {key!r}: {why}\n"


def test_an_inherited_bad_value_is_a_usage_error_too():
    proc = raylink("run", "examples/word_count.py", env=clean_env(RAYLINK_CONF=json.dumps({"metrics.port": "x"})))
    assert (proc.returncode, proc.stdout) == (2, "")
    assert proc.stderr == "raylink: RAYLINK_CONF: configuration key 'metrics.port': 'x' is not an integer\n"


# -- --result-file ---------------------------------------------------------------------------------
JOB = """
from raylink.api import StreamExecutionEnvironment
print("the job ran", flush=True)
env = StreamExecutionEnvironment.get_execution_environment()
env.from_collection([1, 2, 3]).map(lambda x: x * 2).print()
env.execute("doubles")
"""


def test_result_file_in_a_missing_folder_fails_before_the_job_runs(tmp_path):
    job = tmp_path / "job.py"
    job.write_text(JOB)
    missing = tmp_path / "no" / "such" / "folder" / "result.json"
    proc = raylink("run", "--conf", "execution.target=local", "--result-file", str(missing), str(job))
    assert (proc.returncode, proc.stdout) == (2, "")  # the job never ran
    assert proc.stderr == (f"raylink run: --result-file {missing}: no such folder {missing.parent}\n")
    proc = raylink("run", "--conf", "execution.target=local", "--result-file", str(tmp_path), str(job))
    assert (proc.returncode, proc.stdout) == (2, "")
    assert proc.stderr == f"raylink run: --result-file {tmp_path} is a folder, not a file\n"


def test_relative_result_file_lands_where_it_was_named_even_if_the_program_changes_folder(tmp_path):
    job = tmp_path / "job.py"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    job.write_text(f"import os\nos.chdir({str(elsewhere)!r})\n" + JOB)
    proc = raylink("run", "--conf", "execution.target=local", "--result-file", "result.json", str(job), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    result = json.loads((tmp_path / "result.json").read_text())
    assert (result["job_name"], result["status"]) == ("doubles", "FINISHED")
    assert not (elsewhere / "result.json").exists()


def test_busy_metrics_port_is_a_clean_usage_error(tmp_path):
    import socket

    job = tmp_path / "job.py"
    job.write_text(JOB)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        proc = raylink("run", "--conf", "execution.target=local", "--conf", f"metrics.port={port}", str(job))
    assert proc.returncode == 2
    assert proc.stderr.splitlines()[-1] == (
        f"raylink: metrics.port {port} is already in use on 127.0.0.1 "
        f"(choose another port, 0 for any free one, or -1 to turn it off)"
    )
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("value, why", [("0", "must be > 0"), ("soon", "is not a duration")])
def test_a_bad_signature_validity_is_refused_before_any_ray_starts(tmp_path, value, why):
    """``raylink cluster start --rest-signature-validity``: exit 2 naming the flag, nothing started."""
    ran = raylink("cluster", "start", "--rest-signature-validity", value, cwd=tmp_path, env=clean_env())
    assert ran.returncode == 2, ran.stderr
    assert f"--rest-signature-validity {value!r}" in ran.stderr and why in ran.stderr
    assert "Traceback" not in ran.stderr and ran.stdout == ""
