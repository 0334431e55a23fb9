"""Two Ray nodes on this machine, jobs through the dashboard with the raylink CLI.

A head (with the dashboard, so the Job Submission API works) and a second node
are started with ``ray start --block`` as processes this test owns, each with
its own ports and a dedicated ``--temp-dir``; nothing here touches another Ray
instance on the machine. The test submits the word-count example, checks its
counts in ``raylink logs``, that its TaskExecutors ran on both nodes and that
remote channels carried buffers, runs it again with ``raylink run --address``,
checks a failing job's exit code and cause, cancels an unbounded job, and ends
with the cluster's processes gone and its temp dir removed.
"""

from __future__ import annotations

import os
import random
import re
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import psutil
import pytest
import requests

pytestmark = [pytest.mark.timeout(240), pytest.mark.multinode, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[1]
VENV_BIN = Path(sys.executable).parent
RAY = str(VENV_BIN / "ray")
WORD_COUNT = ROOT / "examples" / "word_count.py"
UNBOUNDED = ROOT / "examples" / "unbounded_word_count.py"
ANSI = re.compile(r"\x1b\[[0-9;]*m")

FAILING_JOB = """
from raylink.api import StreamExecutionEnvironment


def check(x):
    if x == 3:
        raise ValueError("bad record 3")
    return x


env = StreamExecutionEnvironment.get_execution_environment()
env.from_collection([1, 2, 3, 4]).map(check).print()
env.execute("failing")
"""


def expected_counts() -> Counter:
    lines = ["to be or not to be", "that is the question", "whether tis nobler in the mind to suffer"]
    return Counter(w for line in lines for w in line.split())


# Ports below the kernel's ephemeral range (32768+), so no outgoing connection grabs one between
# picking it and Ray binding it, and above Ray's default worker ports (10002-19999) of other clusters.
PORT_LOW, PORT_HIGH = 20000, 32000
_TAKEN: set = set()


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("0.0.0.0", port))
            return True
        except OSError:
            return False


def port_range(size: int = 1) -> tuple[int, int]:
    """``size`` consecutive free ports not handed out before in this session."""
    for _ in range(500):
        base = random.randrange(PORT_LOW, PORT_HIGH - size)
        ports = range(base, base + size)
        if not _TAKEN.intersection(ports) and all(_bindable(p) for p in ports):
            _TAKEN.update(ports)
            return base, base + size - 1
    raise RuntimeError("no free port range")


def free_port() -> int:
    return port_range(1)[0]


def node_ports() -> list[str]:
    low, high = port_range(40)
    return [
        "--node-manager-port",
        str(free_port()),
        "--object-manager-port",
        str(free_port()),
        "--dashboard-agent-listen-port",
        str(free_port()),
        "--dashboard-agent-grpc-port",
        str(free_port()),
        "--metrics-export-port",
        str(free_port()),
        "--runtime-env-agent-port",
        str(free_port()),
        "--min-worker-port",
        str(low),
        "--max-worker-port",
        str(high),
    ]


# The test cluster's own token for Ray's token authentication (not the machine's
# ~/.ray/auth_token); the file lives in the cluster's temp dir, set by the fixture.
TOKEN = {"file": ""}


def clean_env() -> dict:
    """A fresh shell's environment: the venv on PATH, the cluster's token file, no other Ray settings."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "RAYLINK_")) and k not in ("PYTHONPATH",)}
    env["PATH"] = f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}"
    env["RAY_AUTH_TOKEN_PATH"] = TOKEN["file"]
    return env


def headers() -> dict:
    token = Path(TOKEN["file"]).read_text().strip()
    return {"Authorization": f"Bearer {token}"}


class TwoNodeCluster:
    def __init__(self) -> None:
        # short: Ray's unix socket paths live under it (limit ~107 characters)
        self.temp_dir = tempfile.mkdtemp(prefix="rlcli", dir="/tmp")
        TOKEN["file"] = os.path.join(self.temp_dir, "auth_token")
        with open(TOKEN["file"], "w") as fh:
            fh.write(secrets.token_hex(32))
        self.gcs_port = free_port()
        self.dashboard = f"http://127.0.0.1:{free_port()}"
        self.procs: list[subprocess.Popen] = []
        self.logs: list = []
        # the nodes' daemons and workers, seen as they stopped: Ray renames workers ("ray::IDLE"), so their
        # command lines do not name the temp dir
        self.descendants: list[psutil.Process] = []

    def _start(self, name: str, args: list[str]) -> None:
        env = clean_env()
        env["RAY_USAGE_STATS_ENABLED"] = "0"
        env["RAY_AUTH_MODE"] = "token"
        log = open(os.path.join(self.temp_dir, f"{name}.log"), "w")
        self.logs.append(log)
        # one temp dir per node: nodes sharing a session's log dir would each forward every worker's output
        node_dir = os.path.join(self.temp_dir, name[0])
        self.procs.append(
            subprocess.Popen(
                [
                    RAY,
                    "start",
                    "--block",
                    "--num-cpus",
                    "1",
                    "--temp-dir",
                    node_dir,
                    "--disable-usage-stats",
                    *node_ports(),
                    *args,
                ],
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.temp_dir,
            )
        )

    def _node_ids(self) -> list[str]:
        r = requests.get(f"{self.dashboard}/api/v0/nodes", headers=headers(), timeout=5)
        r.raise_for_status()
        return [n["node_id"] for n in r.json()["data"]["result"]["result"] if n["state"] == "ALIVE"]

    def _poll(self, what: str, check, timeout_s: float):
        deadline = time.monotonic() + timeout_s
        while True:
            for proc in self.procs:
                assert proc.poll() is None, f"a ray node exited while {what}:\n{self.log_text()}"
            try:
                value = check()
                if value:
                    return value
            except (requests.RequestException, KeyError, ValueError):
                pass
            assert time.monotonic() < deadline, f"timed out while {what}:\n{self.log_text()}"
            time.sleep(0.5)  # polling the dashboard API with a deadline

    def log_text(self) -> str:
        out = []
        for name in ("head", "worker"):
            path = os.path.join(self.temp_dir, f"{name}.log")
            if os.path.exists(path):
                out.append(f"--- {name}\n" + Path(path).read_text()[-3000:])
        return "\n".join(out)

    def start(self) -> "TwoNodeCluster":
        self._start(
            "head",
            [
                "--head",
                "--port",
                str(self.gcs_port),
                "--dashboard-host",
                "127.0.0.1",
                "--dashboard-port",
                self.dashboard.rsplit(":", 1)[1],
                "--ray-client-server-port",
                str(free_port()),
            ],
        )
        self._poll("waiting for the head", lambda: len(self._node_ids()) == 1, 90)
        self._start("worker", ["--address", f"127.0.0.1:{self.gcs_port}"])
        self.node_ids = self._poll(
            "waiting for the second node", lambda: (lambda ids: ids if len(ids) == 2 else None)(self._node_ids()), 90
        )
        return self

    def processes(self) -> list[psutil.Process]:
        """Every live process that belongs to this cluster: its temp dir in the command line, or started
        under one of its nodes."""
        out = [proc for proc in self.descendants if _alive(proc)]
        for proc in psutil.process_iter(["pid", "cmdline"]):
            try:
                if any(self.temp_dir in part for part in proc.info["cmdline"] or []) and proc not in out:
                    out.append(proc)
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                pass
        return out

    def stop(self) -> None:
        for proc in self.procs:
            try:
                self.descendants += psutil.Process(proc.pid).children(recursive=True)
            except psutil.NoSuchProcess:
                pass
        for proc in reversed(self.procs):  # worker first, then head
            if proc.poll() is None:
                proc.terminate()
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
        self.procs = []
        for log in self.logs:
            log.close()
        self.logs = []


def _alive(proc: psutil.Process) -> bool:
    """Running and not a zombie (an exited process its parent has not reaped holds no files)."""
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def raylink(*args: str, timeout: float = 120, cwd: Path = ROOT, script: bool = False) -> subprocess.CompletedProcess:
    """``python -m raylink ...`` (or the ``raylink`` console script) as from a fresh shell."""
    command = [str(VENV_BIN / "raylink")] if script else [sys.executable, "-m", "raylink"]
    return subprocess.run([*command, *args], capture_output=True, text=True, timeout=timeout, cwd=cwd, env=clean_env())


def submitted_id(stderr: str) -> str:
    match = re.search(r"^raylink: submitted job (\S+) to ", stderr, re.M)
    assert match, stderr
    return match.group(1)


def word_counts(log: str) -> Counter:
    """The final count per word: the largest rolling sum printed for it."""
    counts: Counter = Counter()
    for word, n in re.findall(r"^(?:\(TaskExecutorActor[^)]*\) )?\d> \('(\w+)', (\d+)\)$", ANSI.sub("", log), re.M):
        counts[word] = max(counts[word], int(n))
    return counts


def executor_lines(log: str) -> list[tuple[str, str, int, int]]:
    return [
        (m[0], m[1], int(m[2]), int(m[3]))
        for m in re.findall(
            r"^raylink: TaskExecutor (\S+) on node ([0-9a-f]+) pid \d+: tasks=\d+ remoteBuffersSent=(\d+) "
            r"remoteChannels=(\d+)$",
            log,
            re.M,
        )
    ]


def alive_task_executors(cluster: TwoNodeCluster) -> int:
    r = requests.get(f"{cluster.dashboard}/api/v0/actors", params={"limit": 1000}, headers=headers(), timeout=10)
    r.raise_for_status()
    return sum(
        1
        for a in r.json()["data"]["result"]["result"]
        if a["class_name"] == "TaskExecutorActor" and a["state"] != "DEAD"
    )


def placement_groups(cluster: TwoNodeCluster) -> list[dict]:
    r = requests.get(
        f"{cluster.dashboard}/api/v0/placement_groups",
        params={"limit": 1000, "detail": "true"},
        headers=headers(),
        timeout=10,
    )
    r.raise_for_status()
    return r.json()["data"]["result"]["result"]


def job_logs(cluster: TwoNodeCluster, job_id: str) -> str:
    r = requests.get(f"{cluster.dashboard}/api/jobs/{job_id}/logs", headers=headers(), timeout=10)
    r.raise_for_status()
    return r.json()["logs"]


@pytest.fixture(scope="module")
def cluster():
    c = TwoNodeCluster()
    try:
        yield c.start()
    finally:
        c.stop()
        shutil.rmtree(c.temp_dir, ignore_errors=True)


def test_submit_logs_run_fail_and_cancel_on_two_nodes(cluster, tmp_path):
    expected = expected_counts()

    # -- submit the word count, follow it to the end -------------------------------------------------
    # Flink's slot placement (one TaskExecutor per slot), so the job's two slots land one per node
    proc = raylink(
        "submit",
        "--address",
        cluster.dashboard,
        "--conf",
        "raylink.task-placement=slot",
        str(WORD_COUNT),
        cwd=tmp_path,
        script=(VENV_BIN / "raylink").exists(),
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    job_id = submitted_id(proc.stderr)
    assert re.fullmatch(r"raylink-word_count-[0-9a-f]{8}", job_id)
    assert proc.stderr.splitlines()[-1] == f"raylink: job {job_id} SUCCEEDED"

    # -- its logs: the counts, and TaskExecutors on both nodes exchanging buffers remotely ------------
    logs = raylink("logs", "--address", cluster.dashboard, job_id)
    assert logs.returncode == 0 and logs.stderr == "", logs.stderr
    assert word_counts(logs.stdout) == expected, logs.stdout
    assert "raylink: job 'word count' FINISHED in " in logs.stdout
    executors = executor_lines(logs.stdout)
    assert len(executors) == 2, logs.stdout
    assert {node for _, node, _, _ in executors} == set(cluster.node_ids)  # one TaskExecutor per node
    assert all(sent > 0 and channels > 0 for _, _, sent, channels in executors), executors
    followed = raylink("logs", "--follow", "--address", cluster.dashboard, job_id)  # ended: prints all, returns
    assert (followed.returncode, followed.stdout, followed.stderr) == (0, logs.stdout, "")

    # -- list and status -----------------------------------------------------------------------------
    listing = raylink("list", "--address", cluster.dashboard)
    assert listing.returncode == 0, listing.stderr
    assert listing.stdout.splitlines()[0].split() == ["JOB", "ID", "STATUS", "START", "END", "ENTRYPOINT"]
    row = next(line for line in listing.stdout.splitlines() if line.startswith(job_id))
    assert row.split()[1] == "SUCCEEDED"
    assert row.endswith("python -m raylink run --progress log word_count.py")
    status = raylink("status", "--address", cluster.dashboard, job_id)
    assert status.returncode == 0, status.stderr
    lines = status.stdout.splitlines()
    assert lines[:3] == [
        f"Job:        {job_id}",
        "Status:     SUCCEEDED",
        "Entrypoint: python -m raylink run --progress log word_count.py",
    ]
    assert "Exit code:  0" in lines
    progress = lines[lines.index("Progress:") + 1 :]
    assert progress[0].startswith("  job 'word count' FINISHED ")
    assert re.fullmatch(r"  Source: Collection Source +1 +0 +3  OK \(0%\)", progress[2]), progress
    assert re.fullmatch(r"  Flat Map +2 +3 +18  (OK|LOW|HIGH) \(\d+%\)", progress[3]), progress

    # -- raylink run --address: this process is the driver, the job on the cluster --------------------
    result_file = tmp_path / "result.json"
    run = raylink(
        "run",
        "--address",
        f"127.0.0.1:{cluster.gcs_port}",
        "--progress",
        "log",
        "--result-file",
        str(result_file),
        str(WORD_COUNT),
    )
    assert run.returncode == 0, run.stderr
    assert word_counts(run.stdout) == expected, run.stdout
    import json

    result = json.loads(result_file.read_text())
    assert result["job_name"] == "word count" and result["status"] == "FINISHED"
    assert {e["node_id"] for e in result["executors"]} == set(cluster.node_ids)
    assert [v["numRecordsOut"] for v in result["vertices"]] == [3, 18, 0]

    # -- a failing job: exit code 1 and the cause ----------------------------------------------------
    failing = tmp_path / "failing_job.py"
    failing.write_text(FAILING_JOB)
    proc = raylink("submit", "--address", cluster.dashboard, str(failing))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    fail_id = submitted_id(proc.stderr)
    assert proc.stderr.splitlines()[-1] == (
        f"raylink: job {fail_id} FAILED (exit code 1): job 'failing' FAILED: Operator 'Map' in task "
        "'Source: Collection Source -> Map -> Sink: Print to Std. Out (1/1)' failed: ValueError: bad record 3"
    )
    status = raylink("status", "--address", cluster.dashboard, fail_id)
    assert status.returncode == 0 and "Status:     FAILED" in status.stdout.splitlines()
    assert "Exit code:  1" in status.stdout.splitlines()

    # -- an unbounded job: submitted without waiting, running, then cancelled --------------------------
    proc = raylink(
        "submit",
        "--no-wait",
        "--address",
        cluster.dashboard,
        "--conf",
        "raylink.progress.interval=500",
        "--conf",
        "raylink.task-placement=slot",
        "--conf",
        "taskmanager.cpu.cores=0.25",
        "--conf",
        "taskmanager.memory.process.size=64m",
        str(UNBOUNDED),
        "--rate",
        "100",
    )
    assert proc.returncode == 0, proc.stderr
    endless_id = proc.stdout.strip()
    assert proc.stdout == endless_id + "\n" and endless_id.startswith("raylink-unbounded_word_count-")
    deadline = time.monotonic() + 90
    # running when a progress block shows the source's output growing
    while not re.search(
        r"^raylink\| Source: Endless Lines -> Flat Map +2 +0 +[1-9]\d* ", job_logs(cluster, endless_id), re.M
    ):
        info = requests.get(f"{cluster.dashboard}/api/jobs/{endless_id}", headers=headers(), timeout=10).json()
        assert info["status"] in ("PENDING", "RUNNING"), info
        assert time.monotonic() < deadline, job_logs(cluster, endless_id)
        time.sleep(0.5)  # polling the job API with a deadline
    status = raylink("status", "--address", cluster.dashboard, endless_id)
    assert "Status:     RUNNING" in status.stdout.splitlines(), status.stdout
    assert "Progress:" in status.stdout.splitlines()
    assert alive_task_executors(cluster) == 2
    # the TaskExecutors' resources came from the job configuration, one bundle on each node
    bundles = [b for pg in placement_groups(cluster) if pg["state"] == "CREATED" for b in pg["bundles"]]
    assert sorted(b["unit_resources"]["CPU"] for b in bundles) == [0.25, 0.25]
    assert [b["unit_resources"]["memory"] for b in bundles] == [64 << 20] * 2
    assert {b["node_id"] for b in bundles} == set(cluster.node_ids)
    cancel = raylink("cancel", "--address", cluster.dashboard, endless_id)
    assert cancel.returncode == 0, cancel.stderr
    assert cancel.stderr == f"raylink: job {endless_id} STOPPED\n"
    again = raylink("cancel", "--address", cluster.dashboard, endless_id)
    assert (again.returncode, again.stderr) == (0, f"raylink: job {endless_id} already STOPPED; nothing to cancel\n")
    assert "raylink: cancelling job 'unbounded word count'" in job_logs(cluster, endless_id)
    deadline = time.monotonic() + 30
    # the TaskExecutors and their placement group are released
    while alive_task_executors(cluster) or [pg for pg in placement_groups(cluster) if pg["state"] != "REMOVED"]:
        assert time.monotonic() < deadline, (
            "TaskExecutors or placement group still there after cancel",
            placement_groups(cluster),
        )
        time.sleep(0.5)

    for command in ("status", "logs", "cancel"):
        unknown = raylink(command, "--address", cluster.dashboard, "raylink-no-such-job")
        assert (unknown.returncode, unknown.stdout, unknown.stderr) == (
            5,
            "",
            f"raylink: no job 'raylink-no-such-job' on {cluster.dashboard}\n",
        )

    # -- the cluster is clean afterwards -------------------------------------------------------------
    cluster.stop()
    deadline = time.monotonic() + 30
    while cluster.processes():
        assert time.monotonic() < deadline, [p.pid for p in cluster.processes()]
        time.sleep(0.5)
    shutil.rmtree(cluster.temp_dir)
    assert not os.path.exists(cluster.temp_dir)
    gone = raylink("list", "--address", cluster.dashboard)
    assert gone.returncode == 3
    assert (
        gone.stderr == f"raylink: cannot reach the Ray dashboard at {cluster.dashboard[len('http://') :]}: "
        f"Connection refused\n"
    )
