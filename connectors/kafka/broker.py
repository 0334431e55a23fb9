"""A real single-node Apache Kafka broker (KRaft mode: broker and controller in one JVM) for the
tests, demos and users trying the Kafka examples: the tests' session fixture ``kafka_broker``
and ``raylink kafka start`` / ``stop`` both run it through :class:`KafkaBroker`. No Flink
counterpart (Flink's tests run Kafka in Testcontainers).

The broker's jars come from ``scripts/kafka_jars.sh`` (run by ``scripts/setup.sh``): Maven
resolves ``org.apache.kafka:kafka_2.13`` and its dependencies into ``.cache/kafka/libs`` of the
checkout (``$RAYLINK_KAFKA_LIBS`` names another folder); nothing is downloaded here.

:meth:`KafkaBroker.start` picks two free ports on 127.0.0.1 (the client listener and the
controller's), writes ``server.properties`` and a log4j2 configuration into a fresh temporary
folder, formats the storage there (``kafka.tools.StorageTool format``), starts ``kafka.Kafka``
in a session of its own (its output goes to ``broker.log`` in that folder) and returns once a
client's metadata request lists the broker, else fails within ``startup_timeout_s`` with the
broker log's last lines. :meth:`KafkaBroker.stop` sends SIGTERM (Kafka shuts down cleanly), then
SIGKILL after ``stop_timeout_s``, and removes the folder. Used as a context manager it stops
on exit. ``detach()`` leaves the process running (``raylink kafka start``), to be stopped later
by :func:`stop_broker_process` from its PID and folder.

Thread-safety: one instance is started and stopped by one thread; ``bootstrap_servers`` may be
read from any thread once started.
"""

from __future__ import annotations

import base64
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from typing import List, Optional

from raylink.errors import RaylinkError

#: the Kafka version scripts/kafka_jars.sh resolves
KAFKA_VERSION = "4.4.0"
#: environment variable naming the folder of the broker's jars (default: .cache/kafka/libs)
LIBS_ENV_VAR = "RAYLINK_KAFKA_LIBS"
JVM_OPTIONS = ("-Xmx512m", "-Xms64m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Djava.awt.headless=true")

_LOG4J2 = """status = warn
appender.console.type = Console
appender.console.name = console
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = WARN
rootLogger.appenderRef.console.ref = console
logger.server.name = kafka.server.KafkaRaftServer
logger.server.level = INFO
"""


class KafkaBrokerError(RaylinkError, RuntimeError):
    """The broker could not be started (missing jars or Java, exited, or did not answer)."""


def default_libs_dir() -> str:
    """``$RAYLINK_KAFKA_LIBS``, else ``.cache/kafka/libs`` of this checkout."""
    configured = os.environ.get(LIBS_ENV_VAR)
    if configured:
        return configured
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    return os.path.join(root, ".cache", "kafka", "libs")


def free_ports(count: int) -> List[int]:
    """``count`` distinct ports free on 127.0.0.1 right now."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def _server_properties(broker_port: int, controller_port: int, data_dir: str) -> str:
    lines = [
        "process.roles=broker,controller",
        "node.id=1",
        f"controller.quorum.voters=1@127.0.0.1:{controller_port}",
        f"listeners=PLAINTEXT://127.0.0.1:{broker_port},CONTROLLER://127.0.0.1:{controller_port}",
        f"advertised.listeners=PLAINTEXT://127.0.0.1:{broker_port}",
        "controller.listener.names=CONTROLLER",
        "inter.broker.listener.name=PLAINTEXT",
        "listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
        f"log.dirs={data_dir}",
        "num.partitions=1",
        "offsets.topic.replication.factor=1",
        "offsets.topic.num.partitions=1",
        "transaction.state.log.replication.factor=1",
        "transaction.state.log.min.isr=1",
        "transaction.state.log.num.partitions=1",
        "share.coordinator.state.topic.replication.factor=1",
        "share.coordinator.state.topic.min.isr=1",
        "group.initial.rebalance.delay.ms=0",
        "transaction.max.timeout.ms=3600000",
    ]
    return "\n".join(lines) + "\n"


def new_topic(servers: str, partitions: int, prefix: str = "t") -> str:
    """A fresh topic ``<prefix>-<random>`` of ``partitions`` partitions on the broker at
    ``servers``; returns its name once every partition has a leader (for tests, benchmarks and
    users trying the examples)."""
    from confluent_kafka.admin import AdminClient, NewTopic

    name = f"{prefix}-{uuid.uuid4().hex[:10]}"
    admin = AdminClient({"bootstrap.servers": servers})
    for future in admin.create_topics([NewTopic(name, partitions, 1)]).values():
        future.result(30)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        topic = admin.list_topics(name, timeout=5).topics.get(name)
        if topic is not None and topic.error is None and len(topic.partitions) == partitions:
            if all(p.leader >= 0 for p in topic.partitions.values()):
                return name
        time.sleep(0.05)  # metadata propagation, polled with a deadline
    raise TimeoutError(f"topic {name} has no leaders after 30 s")


def _log_tail(path: str, lines: int = 30) -> str:
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            fh.seek(max(0, fh.tell() - 16384))
            text = fh.read().decode("utf-8", "replace")
    except OSError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:]) or "(empty log)"


class KafkaBroker:
    """One single-node KRaft broker on 127.0.0.1 (see the module docstring)."""

    def __init__(
        self,
        libs_dir: Optional[str] = None,
        startup_timeout_s: float = 90.0,
        stop_timeout_s: float = 20.0,
        workdir_parent: Optional[str] = None,
    ) -> None:
        self.libs_dir = libs_dir or default_libs_dir()
        self.startup_timeout_s = startup_timeout_s
        self.stop_timeout_s = stop_timeout_s
        self.workdir_parent = workdir_parent
        self.workdir: Optional[str] = None
        self.bootstrap_servers: Optional[str] = None
        self._process: Optional[subprocess.Popen] = None

    @property
    def pid(self) -> Optional[int]:
        return None if self._process is None else self._process.pid

    @property
    def log_path(self) -> str:
        return os.path.join(self.workdir or "", "broker.log")

    def _java(self) -> List[str]:
        java = shutil.which("java")
        if java is None:
            raise KafkaBrokerError("Kafka broker: no `java` on PATH (bash scripts/setup.sh installs one)")
        jar = os.path.join(self.libs_dir, f"kafka_2.13-{KAFKA_VERSION}.jar")
        if not os.path.isfile(jar):
            raise KafkaBrokerError(
                f"Kafka broker: its jars are missing ({jar} not found); run `bash scripts/kafka_jars.sh` "
                f"(scripts/setup.sh does) or set {LIBS_ENV_VAR} to a folder holding them"
            )
        log4j = os.path.join(self.workdir or "", "log4j2.properties")
        return [java, *JVM_OPTIONS, f"-Dlog4j2.configurationFile={log4j}", "-cp", os.path.join(self.libs_dir, "*")]

    def start(self) -> "KafkaBroker":
        """Format storage, start the broker and return once it answers (see the module docstring)."""
        if self._process is not None:
            raise KafkaBrokerError("Kafka broker: already started")
        self.workdir = tempfile.mkdtemp(prefix="raylink-kafka-", dir=self.workdir_parent)
        try:
            self._start()
        except BaseException:
            self.stop()
            raise
        return self

    def _start(self) -> None:
        workdir = self.workdir
        assert workdir is not None
        broker_port, controller_port = free_ports(2)
        config = os.path.join(workdir, "server.properties")
        with open(config, "w") as fh:
            fh.write(_server_properties(broker_port, controller_port, os.path.join(workdir, "data")))
        with open(os.path.join(workdir, "log4j2.properties"), "w") as fh:
            fh.write(_LOG4J2)
        java = self._java()
        cluster_id = "-"
        while cluster_id.startswith("-"):  # as Kafka's Uuid.randomUuid: "-..." would read as an option
            cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        formatted = subprocess.run(
            [*java, "kafka.tools.StorageTool", "format", "-t", cluster_id, "-c", config],
            capture_output=True,
            text=True,
            timeout=self.startup_timeout_s,
        )
        if formatted.returncode != 0:
            raise KafkaBrokerError(
                f"Kafka broker: formatting its storage failed (exit {formatted.returncode}):\n"
                f"{(formatted.stdout + formatted.stderr)[-4000:]}"
            )
        with open(self.log_path, "wb") as log:
            self._process = subprocess.Popen(
                [*java, "kafka.Kafka", config],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # a Ctrl-C of the caller's terminal does not reach it
            )
        self.bootstrap_servers = f"127.0.0.1:{broker_port}"
        self._wait_ready()

    def _wait_ready(self) -> None:
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({"bootstrap.servers": self.bootstrap_servers, "log_level": 0})
        deadline = time.monotonic() + self.startup_timeout_s
        process = self._process
        assert process is not None
        while True:
            code = process.poll()
            if code is not None:
                raise KafkaBrokerError(
                    f"Kafka broker on {self.bootstrap_servers} exited with code {code} while starting; "
                    f"the end of its log ({self.log_path}):\n{_log_tail(self.log_path)}"
                )
            try:
                if admin.list_topics(timeout=1).brokers:
                    return
            except Exception:  # KafkaException: not answering yet
                pass
            if time.monotonic() >= deadline:
                raise KafkaBrokerError(
                    f"Kafka broker on {self.bootstrap_servers} did not answer within {self.startup_timeout_s:g} s; "
                    f"the end of its log ({self.log_path}):\n{_log_tail(self.log_path)}"
                )
            time.sleep(0.1)  # between metadata requests; each waits up to 1 s itself

    def detach(self) -> None:
        """Leave the broker running beyond this object (stop it with :func:`stop_broker_process`)."""
        self._process = None
        self.workdir = None

    def stop(self) -> None:
        """SIGTERM, SIGKILL after ``stop_timeout_s``; removes the folder. Idempotent."""
        process, self._process = self._process, None
        if process is not None:
            _terminate(process.pid, self.stop_timeout_s, process)
        workdir, self.workdir = self.workdir, None
        if workdir is not None:
            shutil.rmtree(workdir, ignore_errors=True)

    def __enter__(self) -> "KafkaBroker":
        return self.start() if self._process is None else self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"KafkaBroker({self.bootstrap_servers or 'not started'}, pid={self.pid})"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _terminate(pid: int, timeout_s: float, process: Optional[subprocess.Popen] = None) -> None:
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    deadline = time.monotonic() + timeout_s
    if process is not None:
        try:
            process.wait(timeout_s)
            return
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
            return
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)  # not our child: poll its exit (os.waitpid does not apply)
    if _alive(pid):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def is_broker_process(pid: int, workdir: str) -> bool:
    """True if ``pid`` is a running ``kafka.Kafka`` whose configuration lies in ``workdir``
    (so a PID the OS has given to another process is never signalled)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            args = fh.read().split(b"\0")
    except OSError:
        return False
    return b"kafka.Kafka" in args and os.path.join(workdir, "server.properties").encode() in args


def stop_broker_process(pid: int, workdir: str, timeout_s: float = 20.0) -> bool:
    """Stop a detached broker (SIGTERM, then SIGKILL) and remove its folder; False if ``pid`` was
    no longer that broker (the folder is removed all the same)."""
    running = is_broker_process(pid, workdir)
    if running:
        _terminate(pid, timeout_s)
    if os.path.basename(workdir.rstrip("/")).startswith("raylink-kafka-"):
        shutil.rmtree(workdir, ignore_errors=True)
    return running


__all__ = [
    "KAFKA_VERSION",
    "KafkaBroker",
    "KafkaBrokerError",
    "default_libs_dir",
    "free_ports",
    "is_broker_process",
    "stop_broker_process",
]
