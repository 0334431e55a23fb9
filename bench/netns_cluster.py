"""A Ray cluster of real hosts on one machine: each host a Linux network namespace with an
address of its own, for the host-loss tests (``tests/test_netns_host_failover.py``) and
``bench/host_failover.py``.

Layout (needs root and iproute2's ``ip``): a bridge in the root namespace holds
``10.77.<n>.1/24``; host ``i`` (1-based) is the namespace ``rl<tag>h<i>`` whose ``eth0`` (one
end of a veth pair, the other end a port of the bridge, named ``rl<tag>v<i>``) holds
``10.77.<n>.1<i>``. ``<tag>`` and ``<n>`` come from this process's id, so two clusters on the
machine never share names or a subnet. Host 1 runs the Ray head (no CPUs: it holds the GCS
and the driver, never a TaskExecutor), the others Ray workers with ``worker_cpus`` each. The
namespaces split the network only: every host sees the same files and process ids, so a
sink on a local folder is a folder all hosts share, and a host's processes are killed by pid.

With ``autoscaler_node_types`` the head (``head_cpus`` CPUs) also runs Ray's autoscaler with its
fake multi-node provider (``RAY_FAKE_CLUSTER=1``, what ``ray.cluster_utils.AutoscalingCluster``
starts; the config is written here, Ray's wheel lacks the example it reads): the nodes it adds
and removes are processes in the head's namespace, ended with it (``bench/autoscale.py``).

Losing a host, both ways: :meth:`NetnsCluster.kill_host` SIGKILLs every process of its
namespace (``ip netns pids``); :meth:`NetnsCluster.cut_link` sets its bridge port down (the
host runs on unreachable) and :meth:`NetnsCluster.restore_link` up again.

Failure detection is Ray's health check of each raylet by the GCS, tuned here for tests
(:data:`HEALTH_CHECK_ENV`: a check every second, 1 s timeout, dead after 3 missed, about
3-4 s from the loss); Ray's defaults (3 s, 10 s, 5) take 15-30 s. Every node uses Ray's token
authentication with a token of the cluster's own (``RAY_AUTH_MODE=token``, as every Ray the
project starts). :meth:`NetnsCluster.close` removes everything (Ray nodes by pid, left-over
processes of each namespace, the namespaces, the bridge, the temp dir), also after a failed
start; it is idempotent.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from typing import Optional

from raylink.errors import RaylinkError

#: Ray's GCS health checks of the raylets, tuned for tests: dead ~3-4 s after the loss
HEALTH_CHECK_ENV = {
    "RAY_health_check_initial_delay_ms": "1000",
    "RAY_health_check_period_ms": "1000",
    "RAY_health_check_timeout_ms": "1000",
    "RAY_health_check_failure_threshold": "3",
    # how long a raylet waits for its runtime-env agent (a Python process, slow to start on a
    # loaded machine); its wait for the dashboard agent's port files is a fixed 15 s in Ray 2.60,
    # which NetnsCluster.revive() meets by trying the node again
    "RAY_agent_register_timeout_ms": "300000",
    "RAY_raylet_start_wait_time_s": "300",
}
GCS_PORT = 6379
#: with GCS fault tolerance, how long Ray's workers and drivers wait for a restarted head (Ray: 60 s)
GCS_RECONNECT_TIMEOUT_S = 120
REDIS_PORT = 6390  # each namespace has a network stack of its own: Ray's default ports are free there
#: every port of a node fixed: each namespace's ports are its own, so Ray's defaults are free there
NODE_PORTS = (
    "--node-manager-port=6380",
    "--object-manager-port=6381",
    "--dashboard-agent-listen-port=52365",
    "--dashboard-agent-grpc-port=52366",
    "--metrics-export-port=52367",
    "--runtime-env-agent-port=52368",
    "--min-worker-port=20000",
    "--max-worker-port=20200",
)
OBJECT_STORE_BYTES = 150 * 1024 * 1024
START_TIMEOUT_S = 180.0
#: how long a restarted node must stay up after it registered before revive() counts it started
REVIVE_SETTLE_S = 10.0
NODE_NICENESS = -5


#: prints {node id: address} of the alive nodes, asked from the GCS at RAY_ADDRESS (Ray's GcsClient)
_ALIVE_NODES = """
import json, os
from ray._raylet import GcsClient
nodes = GcsClient(address=os.environ["RAY_ADDRESS"]).get_all_node_info(timeout=20)
print(json.dumps({i.hex(): n.node_manager_address for i, n in nodes.items() if n.state == 0}))
"""


#: a line of Ray's C++ logs at level error or fatal: ``[2026-01-01 10:00:00,000 E 123 456] ...``
_LOG_LEVEL = re.compile(r"^\[\S+ \S+ [EF] ")


class NetnsClusterError(RaylinkError, RuntimeError):
    """The cluster could not be set up; the message names the step and its output."""


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if check and proc.returncode != 0:
        raise NetnsClusterError(f"`ip {' '.join(args)}` failed: {proc.stderr.strip()}")
    return proc


def netns_supported() -> Optional[str]:
    """None when this process can build the cluster, else why not."""
    if os.geteuid() != 0:
        return "needs root (ip netns add)"
    if shutil.which("ip") is None:
        return "needs iproute2's ip"
    return None


class NetnsCluster:
    """``hosts`` network namespaces on one bridge with a Ray node in each; see the module docstring."""

    def __init__(
        self,
        hosts: int = 3,
        worker_cpus: int = 2,
        extra_env: Optional[dict] = None,
        gcs_redis: bool = False,
        head_cpus: int = 0,
        autoscaler_node_types: Optional[dict] = None,
        idle_timeout_minutes: float = 0.1,
    ) -> None:
        tag = os.getpid() % 10000
        self.subnet = f"10.77.{tag % 250}"
        self.bridge = f"rl{tag}br"
        self.names = [f"rl{tag}h{i}" for i in range(1, hosts + 1)]
        self.veths = [f"rl{tag}v{i}" for i in range(1, hosts + 1)]
        self.ips = [f"{self.subnet}.{10 + i}" for i in range(1, hosts + 1)]
        self.worker_cpus = worker_cpus
        self.extra_env = dict(extra_env or {})
        self.gcs_address = f"{self.ips[0]}:{GCS_PORT}"
        self.temp_dir = ""
        self.token_file = ""
        self.nodes: dict[int, subprocess.Popen] = {}  # host index -> its `ray start --block`
        self._logs: list = []
        self._made_bridge = False
        self._made: list[str] = []
        #: Ray's GCS fault tolerance: the head keeps its tables in a redis-server of the cluster's
        #: own (root namespace, on the bridge's address; scripts/redis.sh installs it)
        self.gcs_redis = gcs_redis
        self.redis: Optional[subprocess.Popen] = None
        self.redis_address = f"{self.subnet}.1:{REDIS_PORT}"
        self.redis_password = secrets.token_hex(16)
        self.head_cpus = head_cpus
        #: Ray's autoscaler on the head with its fake multi-node provider (what
        #: ``ray.cluster_utils.AutoscalingCluster`` starts): ``{node type: {"resources": {...},
        #: "min_workers", "max_workers"}}``; the nodes it adds run in the head's namespace
        self.autoscaler_node_types = autoscaler_node_types
        self.idle_timeout_minutes = idle_timeout_minutes

    # -- set up ---------------------------------------------------------------------------------------
    def start(self) -> "NetnsCluster":
        try:
            self._network()
            # short: Ray's unix socket paths live under it (limit ~107 characters)
            self.temp_dir = tempfile.mkdtemp(prefix="rlns", dir="/tmp")
            self.token_file = os.path.join(self.temp_dir, "auth_token")
            with open(self.token_file, "w") as fh:
                fh.write(secrets.token_hex(32))
            if self.gcs_redis:
                self._start_redis()
            for host in range(len(self.names)):
                self.revive(host)
        except BaseException:
            self.close()
            raise
        return self

    def revive(self, host: int, attempts: int = 3) -> None:
        """(Re)start host ``host``'s Ray node, after what is left of it is killed, and wait until
        Ray counts a new node of it alive. The GCS counts a killed node alive until its health
        checks miss (:data:`HEALTH_CHECK_ENV`): the old node must be dead first, else the new
        raylet's registration races it and the old entry would pass for the new node; a restarted
        node counts once it stayed up :data:`REVIVE_SETTLE_S` after registering. ``ray start``
        gives a raylet 30 s to register, which a loaded machine can miss: it is tried again
        ``attempts`` times."""
        restarted = host != 0 and host in self.nodes  # a head's restart takes the node table with it
        old = self.node_ids_of(host) if restarted else set()
        tries = []  # what became of each attempt, for the error
        for attempt in range(attempts):
            self.kill_host(host)
            started = time.monotonic()
            deadline = started + START_TIMEOUT_S
            while old and old & set(self.alive_node_ids()):
                if time.monotonic() > deadline:
                    raise NetnsClusterError(f"Ray did not declare host {host + 1}'s killed node dead")
                time.sleep(0.5)  # polling Ray's node table with a deadline
            proc = self.start_node(host)
            registered = False
            while proc.poll() is None and time.monotonic() < deadline:
                new = self.node_ids_of(host) - old
                registered = registered or bool(new)
                if new and (not restarted or self._stays_alive(proc, new)):
                    return
                time.sleep(0.5)  # polling Ray's node table with a deadline
            old |= self.node_ids_of(host)
            tries.append(
                f"attempt {attempt + 1}: `ray start` exit code {proc.poll()} after "
                f"{time.monotonic() - started:.0f} s, {'registered' if registered else 'never registered'}; "
                f"raylet: {'; '.join(self._raylet_errors(host)) or 'no error logged'}"
            )
        raise NetnsClusterError(
            f"the Ray node of host {host + 1} did not start:\n" + "\n".join(tries) + f"\n{self.log_text()}"
        )

    def restore(self) -> None:
        """Every host with a node Ray counts alive again, as :meth:`start` left the cluster: the
        hosts without one are revived; when a revive fails (its error says why), the cluster is
        made anew, so a host that would not come back cannot fail the tests after it."""
        missing = [host for host in range(len(self.names)) if not self.node_ids_of(host)]
        try:
            for host in missing:
                self.revive(host)
        except NetnsClusterError as error:
            print(f"NetnsCluster: making the cluster anew: {error}", file=sys.stderr)
            self.close()
            self.start()

    def _raylet_errors(self, host: int, limit: int = 5) -> list[str]:
        """The last error and fatal lines of host ``host``'s newest raylet log (Ray's glog format:
        ``[time E pid tid] (raylet) ...``), and its stderr."""
        logs = os.path.join(self.temp_dir, f"n{host + 1}", "session_latest", "logs")
        found = []
        for name in ("raylet.out", "raylet.err"):
            try:
                with open(os.path.join(logs, name), errors="replace") as fh:
                    lines = fh.read().splitlines()
            except OSError:
                continue
            if name == "raylet.err":
                found += [line for line in lines if line.strip()]
            else:
                found += [line for line in lines if _LOG_LEVEL.match(line)]
        return [line[:400] for line in found[-limit:]]

    def _stays_alive(self, proc: subprocess.Popen, nodes: set, settle_s: float = REVIVE_SETTLE_S) -> bool:
        """Whether a restarted node is still up ``settle_s`` after Ray first counted it alive: a
        raylet restarted at its predecessor's address has been seen to register and then exit."""
        try:
            proc.wait(settle_s)  # its `ray start --block` ends with the node
            return False
        except subprocess.TimeoutExpired:
            return nodes <= set(self.alive_node_ids())

    def _network(self) -> None:
        _ip("link", "add", self.bridge, "type", "bridge")
        self._made_bridge = True
        _ip("addr", "add", f"{self.subnet}.1/24", "dev", self.bridge)
        _ip("link", "set", self.bridge, "up")
        for name, veth, ip in zip(self.names, self.veths, self.ips):
            _ip("netns", "add", name)
            self._made.append(name)
            _ip("link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", name)
            _ip("link", "set", veth, "master", self.bridge)
            _ip("link", "set", veth, "up")
            _ip("-n", name, "addr", "add", f"{ip}/24", "dev", "eth0")
            _ip("-n", name, "link", "set", "eth0", "up")
            _ip("-n", name, "link", "set", "lo", "up")

    def _start_redis(self) -> None:
        redis_server = shutil.which("redis-server")
        if redis_server is None:
            raise NetnsClusterError("redis-server is missing: run scripts/redis.sh")
        folder = os.path.join(self.temp_dir, "redis")
        os.makedirs(folder)
        log = open(os.path.join(self.temp_dir, "redis.log"), "a")
        self._logs.append(log)
        self.redis = subprocess.Popen(
            [redis_server, "-"],  # the config on stdin: the password never shows in a command line
            stdin=subprocess.PIPE,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            text=True,
        )
        self.redis.stdin.write(
            f"bind {self.subnet}.1\nport {REDIS_PORT}\ndir {folder}\nrequirepass {self.redis_password}\n"
            'save ""\nappendonly no\ndaemonize no\nprotected-mode yes\n'
        )
        self.redis.stdin.close()

    def env(self) -> dict:
        """The environment of every Ray process and driver of the cluster: the venv on PATH, the
        cluster's token, the tuned health checks, no Ray or raylink settings of the caller."""
        env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "RAYLINK_")) and k != "PYTHONPATH"}
        env["PATH"] = f"{os.path.dirname(sys.executable)}{os.pathsep}{env.get('PATH', '')}"
        env.update(HEALTH_CHECK_ENV)
        env.update(
            RAY_AUTH_MODE="token",
            RAY_AUTH_TOKEN_PATH=self.token_file,
            RAY_USAGE_STATS_ENABLED="0",
        )
        if self.gcs_redis:  # as deploy/kuberay/raycluster-ha.yaml: workers wait longer for a restarted head
            env["RAY_gcs_rpc_server_reconnect_timeout_s"] = str(GCS_RECONNECT_TIMEOUT_S)
        env.update(self.extra_env)
        return env

    def start_node(self, host: int, extra_args: tuple = ()) -> subprocess.Popen:
        """``ray start --block`` in host ``host``'s namespace (0: the head)."""
        from raylink.actors.ray_transport import RAY_SYSTEM_CONFIG

        ray_cli = os.path.join(os.path.dirname(sys.executable), "ray")
        temp_dir = os.path.join(self.temp_dir, f"n{host + 1}")
        if host == 0:
            # a head restarts as a new head pod would, without its last address: `ray start --head`
            # refuses an address that it last started at and that a raylet of this machine names
            # (the workers', all in one process table)
            with contextlib.suppress(FileNotFoundError):
                os.remove(os.path.join(temp_dir, "ray_current_cluster"))
        argv = [
            "ip",
            "netns",
            "exec",
            self.names[host],
            # ahead of other work on the machine: a raylet gives its dashboard agent 15 s to start
            "nice",
            f"-n{NODE_NICENESS}",
            ray_cli,
            "start",
            "--block",
            "--disable-usage-stats",
            f"--node-ip-address={self.ips[host]}",
            f"--temp-dir={temp_dir}",
            f"--object-store-memory={OBJECT_STORE_BYTES}",
            *NODE_PORTS,
        ]
        env = self.env()
        env["PYTHONUNBUFFERED"] = "1"  # `ray start`'s own lines reach the log before a kill
        if host == 0 and self.gcs_redis:
            env["RAY_REDIS_ADDRESS"] = self.redis_address
            argv += ["--redis-username=default", f"--redis-password={self.redis_password}"]
        if host == 0 and self.autoscaler_node_types is not None:
            argv.append(f"--autoscaling-config={self._autoscaling_config()}")
            env.update(RAY_FAKE_CLUSTER="1", AUTOSCALER_UPDATE_INTERVAL_S="1")
        if host == 0:
            argv += [
                "--head",
                f"--port={GCS_PORT}",
                f"--num-cpus={self.head_cpus}",
                "--include-dashboard=false",
                f"--system-config={json.dumps(RAY_SYSTEM_CONFIG)}",
            ]
        else:
            argv += [f"--address={self.gcs_address}", f"--num-cpus={self.worker_cpus}"]
        argv += list(extra_args)
        log = open(os.path.join(self.temp_dir, f"node{host + 1}.log"), "a")
        self._logs.append(log)
        proc = subprocess.Popen(
            argv, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, cwd=self.temp_dir
        )
        self.nodes[host] = proc
        return proc

    def _autoscaling_config(self) -> str:
        """The cluster config of Ray's fake multi-node provider (the fields of Ray's
        ``fake_multi_node/example.yaml``, which Ray 2.60's wheel does not ship) as a file."""
        types = {name: {"node_config": {}, **spec} for name, spec in self.autoscaler_node_types.items()}
        types["ray.head.default"] = {"resources": {"CPU": self.head_cpus}, "node_config": {}, "max_workers": 0}
        config = {
            "cluster_name": f"raylink-{os.path.basename(self.temp_dir)}",
            "max_workers": sum(int(t.get("max_workers", 0)) for t in types.values()),
            "provider": {
                "type": "fake_multinode",
                "use_node_id_as_ip": True,
                "disable_node_updaters": True,
                "disable_launch_config_check": True,
                "gcs_address": self.gcs_address,
            },
            "available_node_types": types,
            "head_node_type": "ray.head.default",
            "auth": {},
            "upscaling_speed": 1.0,
            "idle_timeout_minutes": self.idle_timeout_minutes,
            "docker": {},
            "initialization_commands": [],
            "setup_commands": [],
            "head_setup_commands": [],
            "worker_setup_commands": [],
            "head_start_ray_commands": [],
            "worker_start_ray_commands": [],
            "file_mounts": {},
            "cluster_synced_files": [],
            "file_mounts_sync_continuously": False,
            "rsync_exclude": [],
            "rsync_filter": [],
        }
        path = os.path.join(self.temp_dir, "autoscaling.json")
        with open(path, "w") as fh:
            json.dump(config, fh)
        return path

    def alive_node_ids(self) -> dict[str, str]:
        """{node id: address} of the nodes Ray's GCS counts alive (asked from the head's host;
        the cluster has no dashboard, so no ``ray list nodes``); empty while the GCS is down."""
        out = self.run_on(0, [sys.executable, "-c", _ALIVE_NODES], timeout=60)
        if out.returncode != 0:
            return {}
        try:
            return dict(json.loads(out.stdout.strip().splitlines()[-1]))
        except (ValueError, IndexError):
            return {}

    def node_ids_of(self, host: int) -> set[str]:
        """The ids of host ``host``'s nodes Ray's GCS counts alive."""
        return {node for node, address in self.alive_node_ids().items() if address == self.ips[host]}

    def alive_nodes(self) -> list[str]:
        """The addresses of the nodes Ray's GCS counts alive."""
        return list(self.alive_node_ids().values())

    def wait_nodes(self, count: int, timeout_s: float = START_TIMEOUT_S) -> list[str]:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            alive = self.alive_nodes()
            if len(alive) == count:
                return alive
            time.sleep(0.5)  # polling Ray's node table with a deadline
        raise NetnsClusterError(f"{count} Ray nodes did not come up:\n{self.log_text()}")

    def run_on(self, host: int, argv: list, timeout: float = 60, **kwargs) -> subprocess.CompletedProcess:
        """``argv`` in host ``host``'s namespace with the cluster's environment, to its end."""
        env = self.env()
        env["RAY_ADDRESS"] = self.gcs_address
        return subprocess.run(
            ["ip", "netns", "exec", self.names[host], *argv],
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
            **kwargs,
        )

    def driver_env(self) -> dict:
        env = self.env()
        env["RAY_ADDRESS"] = self.gcs_address
        return env

    def driver_argv(self, argv: list, host: int = 0) -> list:
        """``argv`` run as a driver on host ``host`` (its namespace; default: the head's)."""
        return ["ip", "netns", "exec", self.names[host], *argv]

    # -- losing a host ---------------------------------------------------------------------------------
    def pids(self, host: int) -> list[int]:
        out = _ip("netns", "pids", self.names[host], check=False)
        return [int(p) for p in out.stdout.split()]

    def kill_host(self, host: int) -> int:
        """SIGKILL every process of host ``host``; how many there were."""
        killed = 0
        for _ in range(3):  # a process may fork while the first ones die
            pids = self.pids(host)
            if not pids:
                break
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                    killed += 1
                except ProcessLookupError:
                    pass
        return killed

    def process_ids(self, host: int, name: str) -> list[int]:
        """The processes of host ``host`` whose command name is ``name`` (e.g. ``gcs_server``)."""
        found = []
        for pid in self.pids(host):
            try:
                with open(f"/proc/{pid}/comm") as fh:
                    if fh.read().strip() == name:
                        found.append(pid)
            except OSError:
                pass
        return found

    def cut_link(self, host: int) -> None:
        _ip("link", "set", self.veths[host], "down")

    def restore_link(self, host: int) -> None:
        _ip("link", "set", self.veths[host], "up")

    def log_text(self, tail: int = 2000) -> str:
        """The end of each node's ``ray start`` output and raylet log (for failure messages)."""
        out = []
        for host in range(len(self.names)):
            for path in (
                os.path.join(self.temp_dir, f"node{host + 1}.log"),
                os.path.join(self.temp_dir, f"n{host + 1}", "session_latest", "logs", "raylet.out"),
            ):
                if os.path.exists(path):
                    with open(path, errors="replace") as fh:
                        out.append(f"--- host {host + 1}: {os.path.basename(path)}\n" + fh.read()[-tail:])
        return "\n".join(out)

    # -- tear down ------------------------------------------------------------------------------------
    def close(self) -> None:
        for host, proc in sorted(self.nodes.items(), reverse=True):  # workers first, then the head
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        deadline = time.monotonic() + 10  # `ray start --block` stops its node's processes on SIGTERM
        for proc in self.nodes.values():
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                proc.wait(10)
        self.nodes = {}
        for host, name in enumerate(self.names):
            if name in self._made:
                self.kill_host(host)  # what `ray stop` left (workers of a cut host, a driver)
        for name in list(self._made):
            _ip("netns", "del", name, check=False)
            self._made.remove(name)
        for veth in self.veths:  # gone with their namespaces; a half-made one may be left
            if _ip("link", "show", veth, check=False).returncode == 0:
                _ip("link", "del", veth, check=False)
        if self.redis is not None:
            self.redis.terminate()
            try:
                self.redis.wait(30)
            except subprocess.TimeoutExpired:
                self.redis.kill()
                self.redis.wait(10)
            self.redis = None
        if self._made_bridge:
            _ip("link", "del", self.bridge, check=False)
            self._made_bridge = False
        for log in self._logs:
            log.close()
        self._logs = []
        if self.temp_dir:
            shutil.rmtree(self.temp_dir, ignore_errors=True)
            self.temp_dir = ""

    def __enter__(self) -> "NetnsCluster":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()


__all__ = ["HEALTH_CHECK_ENV", "NetnsCluster", "NetnsClusterError", "netns_supported"]
