"""Losing a host, measured: a keyed rolling count at parallelism 2 into the exactly-once
FileSink on a three-host cluster of network namespaces (``bench/netns_cluster.py``: the Ray
head and the driver on host 1, one TaskExecutor on each of hosts 2 and 3), checkpointing
every 300 ms, fixed-delay restarts. Once a checkpoint is complete, the host of one
TaskExecutor is lost, one of two ways:

* ``kill``: every process of the host is SIGKILLed (``ip netns pids``);
* ``cut``: its link goes down for ``--cut-s`` seconds (longer than Ray's health checks take to
  declare it dead), then up again: the host ran on unreachable meanwhile, its tasks zombies.

* ``head`` (on a cluster with Ray's GCS fault tolerance, ``--gcs-ft``): every process of the
  head's host is SIGKILLed once the JobMaster said the head is lost, the head is started again
  on its Redis (as KubeRay restarts a head pod); the driver runs on a worker host here.

The job fails over onto the host left. Figures per loss, from the moment of the loss:
*detected* (the JobMaster has seen the TaskExecutor lost: the job left RUNNING), *running*
(RUNNING again on the host left) and *first record* (the restored keyed task emitted its first
record, :class:`raylink.bench.recovery.FirstRecordAfterRestore`); and the committed output
against the rolling counts computed here without raylink: records lost and duplicated (0/0).
After a cut, the link comes back while the job runs on; the zombie tasks must write nothing
that is committed (the exact output says so).

After a head restart the job is not failed over at all: its TaskExecutors never stop, the
JobMaster says in one line that the head's GCS does not answer (naming the last completed
checkpoint) and in another that it answers again; *running* is then the time the GCS answered.

    python bench/host_failover.py [--rounds 3] [--records 40000] [--gcs-ft]   # as root

The driver part (``--driver``) runs on host 1 (in its namespace) and prints one JSON report.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Optional

from raylink.bench.failover import KEYS, add, committed_lines, paced, reference

DETECTION_TIMEOUT_S = 120.0
#: the file the head-loss driver writes once the JobMaster said the head is lost: the head may restart
HEAD_LOST_MARKER = "head-lost"
#: how many records the head-restart run counts: its job must outlast the head's restart
HEAD_RECORDS = 200_000


class _LogLines(logging.Handler):
    """The raylink logger's lines with the wall time each was logged (the JobMaster's word on
    the head)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: list = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append((time.time(), record.getMessage()))

    def first(self, fragment: str) -> Optional[float]:
        return next((t for t, line in list(self.lines) if fragment in line), None)


def _wait(predicate, timeout: float, what: str, step: float = 0.01) -> float:
    """Polls ``predicate`` every ``step`` s until true; the wall time it became true."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(step)  # polling the job's status with a deadline
    return time.time()


def _set_link(netns: str, state: str) -> None:
    """The host's end of its veth pair (``eth0`` in its namespace) ``up`` or ``down``: its only
    link to the bridge, so the host keeps running, cut off (the driver runs in host 1's namespace,
    from where the root namespace's end cannot be reached)."""
    subprocess.run(
        ["ip", "netns", "exec", netns, "ip", "link", "set", "eth0", state], check=True, capture_output=True, timeout=30
    )


def _kill_host(netns: str) -> None:
    """SIGKILL every process of the namespace (again: a process may fork while the first die)."""
    for _ in range(3):
        pids = subprocess.run(["ip", "netns", "pids", netns], capture_output=True, text=True).stdout
        for pid in map(int, pids.split()):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def _lose_head(client, hosts: dict, folder: str, lines: _LogLines, lost_at: float) -> dict:
    """Kills the head's host, lets it restart (:data:`HEAD_LOST_MARKER`) once the JobMaster said
    it is lost, and waits until the JobMaster says the head answers again."""
    head = next(h for h in hosts.values() if h.get("head"))
    _kill_host(head["netns"])
    detected = _wait(
        lambda: lines.first("has not answered") is not None or client.wait(0),
        DETECTION_TIMEOUT_S,
        "the JobMaster to say the head is lost",
    )
    with open(os.path.join(folder, HEAD_LOST_MARKER), "w") as fh:
        fh.write(str(detected))
    back = _wait(
        lambda: lines.first("answers again") is not None or client.wait(0),
        DETECTION_TIMEOUT_S * 2,
        "the head's GCS to answer again",
    )
    return {
        "detected_s": detected - lost_at,
        "running_s": back - lost_at,  # the job never stopped: the time the head answered again
        "running_when_back": not client.wait(0) and client.get_job_status() == "RUNNING",
        "head_lines": [line for _, line in lines.lines if "Ray head's GCS" in line],
    }


def _lose_worker(
    client, stats, netns: str, fault: str, restarts: int, lost_at: float, probe: str, cut_s: float
) -> dict:
    """Kills or cuts off the worker host in ``netns``; its figures once the job runs again (after a
    cut, once the link is back)."""
    from raylink.bench.recovery import wait_first_record

    if fault == "kill":
        _kill_host(netns)
    else:
        _set_link(netns, "down")
    detected = _wait(
        lambda: client.get_job_status() != "RUNNING" or stats()["numRestarts"] > restarts,
        DETECTION_TIMEOUT_S,
        "the JobMaster to see the host lost",
    )
    running = _wait(
        lambda: (stats()["numRestarts"] > restarts and client.get_job_status() == "RUNNING") or client.wait(0),
        DETECTION_TIMEOUT_S,
        "the job to run again",
    )
    first = wait_first_record(probe, restarts, lambda: client.wait(0))
    report = {
        "detected_s": detected - lost_at,
        "running_s": running - lost_at,
        "first_record_s": None if first is None else first - lost_at,
        "hosts_after": sorted({loc["host"] for loc in client.locations.values()}),
    }
    if fault == "cut":
        time.sleep(max(0.0, lost_at + cut_s - time.time()))  # the cut lasts cut_s: the scenario itself
        _set_link(netns, "up")
        report["restored_link_s"] = time.time() - lost_at
    return report


def driver(fault: str, folder: str, hosts: dict, records: int, cut_s: float) -> dict:
    """Runs the job on the cluster at RAY_ADDRESS, loses the host of the first TaskExecutor (or
    the head) as ``fault`` says once a checkpoint completed, waits for the job's end; the report."""
    from raylink.api import Configuration, Encoder, FileSink, RollingPolicy, StreamExecutionEnvironment
    from raylink.bench.recovery import FirstRecordAfterRestore

    conf = (
        Configuration()
        .set_string("restart-strategy.type", "fixed-delay")
        .set_integer("restart-strategy.fixed-delay.attempts", 5)
        .set_string("restart-strategy.fixed-delay.delay", "200 ms")
    )
    env = StreamExecutionEnvironment.get_execution_environment(conf)
    env.set_parallelism(2)
    env.enable_checkpointing(300)
    env.get_checkpoint_config().set_checkpoint_storage_dir(os.path.join(folder, "checkpoints"))
    out = os.path.join(folder, "out")
    probe = os.path.join(folder, "first-records")
    os.makedirs(probe, exist_ok=True)
    sink = (
        FileSink.for_row_format(out, Encoder.simple_string_encoder())
        .with_rolling_policy(RollingPolicy.on_checkpoint_rolling_policy())
        .build()
    )
    (
        env.from_sequence(1, records)
        .map(paced)
        .map(lambda v: (v % KEYS, 1))
        .key_by(lambda kv: kv[0])
        .reduce(add)
        .map(FirstRecordAfterRestore(probe))
        .map(lambda kv: f"{kv[0]},{kv[1]}")
        .sink_to(sink)
    )
    lines = _LogLines()
    logging.getLogger("raylink").addHandler(lines)
    client = env.execute_async(f"host loss ({fault})")
    report: dict = {"fault": fault}
    try:
        report["hosts_used"] = sorted({loc["host"] for loc in client.locations.values()})
        if fault == "head":
            victim_ip = next(ip for ip, h in hosts.items() if h.get("head"))
        else:
            victim_ip = next(iter(client.locations.values()))["host"]
        victim = hosts[victim_ip]
        report["victim"] = victim_ip

        def stats() -> dict:
            return client.get_checkpoint_stats()

        _wait(lambda: stats()["numberOfCompletedCheckpoints"] >= 1 or client.wait(0), 120, "a checkpoint")
        restarts = stats()["numRestarts"]
        lost_at = time.time()
        if fault == "head":
            report.update(_lose_head(client, hosts, folder, lines, lost_at))
            report["first_record_s"] = None  # nothing was restored
            report["hosts_after"] = sorted({loc["host"] for loc in client.locations.values()})
        else:
            report.update(_lose_worker(client, stats, victim["netns"], fault, restarts, lost_at, probe, cut_s))
        report["finished"] = client.wait(300)
        report["status"] = client.get_job_status()
        report["restarts"] = stats()["numRestarts"]
    finally:
        logging.getLogger("raylink").removeHandler(lines)
        if not client.wait(0):
            client.cancel()
            client.wait(60)
    got, want = committed_lines(out), reference(records)
    report["lost"] = sum((want - got).values())
    report["duplicated"] = sum((got - want).values())
    report["exact"] = got == want
    return report


def run_driver(cluster, fault: str, folder: str, records: int = 40_000, cut_s: float = 12.0, timeout: float = 600):
    """:func:`driver` as a program on the cluster's head host (on a worker host for ``head``,
    whose host is restarted here once the driver asks); its report (``RuntimeError`` with its
    output and the nodes' logs when it fails)."""
    hosts = {ip: {"netns": ns, "veth": veth} for ip, ns, veth in zip(cluster.ips, cluster.names, cluster.veths)}
    hosts[cluster.ips[0]]["head"] = True
    on = 1 if fault == "head" else 0
    argv = [
        sys.executable,
        "-m",
        "raylink.bench.host_failover",
        "--driver",
        fault,
        "--folder",
        folder,
        "--hosts",
        json.dumps(hosts),
        "--records",
        str(records),
        "--cut-s",
        str(cut_s),
        "--node-ip",
        cluster.ips[on],
    ]
    proc = subprocess.Popen(
        cluster.driver_argv(argv, host=on),
        env=cluster.driver_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        if fault == "head":
            marker = os.path.join(folder, HEAD_LOST_MARKER)
            _wait(
                lambda: os.path.exists(marker) or proc.poll() is not None, timeout, "the driver to lose the head", 0.1
            )
            if proc.poll() is None:
                cluster.revive(0)  # the head restarts on its Redis, as KubeRay restarts a head pod
        stdout, stderr = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=30)
    lines = stdout.strip().splitlines()
    if proc.returncode != 0 or not lines or not lines[-1].startswith("{"):
        raise RuntimeError(
            f"the {fault} driver exited with {proc.returncode}:\n{stdout[-2000:]}\n{stderr[-4000:]}\n"
            f"{cluster.log_text()}"
        )
    return json.loads(lines[-1])


def _median(values: list) -> str:
    values = [v for v in values if v is not None]
    return f"{statistics.median(values):8.2f}" if values else f"{'-':>8}"


def main(argv: Optional[list] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--driver", choices=["kill", "cut", "head"])
    parser.add_argument("--node-ip", help="the driver's host address (its Ray node)")
    parser.add_argument(
        "--gcs-ft", action="store_true", help="the head on a redis-server (Ray's GCS fault tolerance), and a head row"
    )
    parser.add_argument("--folder")
    parser.add_argument("--hosts")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--records", type=int, default=40_000)
    parser.add_argument("--cut-s", type=float, default=12.0)
    args = parser.parse_args(argv)
    if args.driver:
        from raylink.actors.cluster import connect_to, shutdown_ray

        connect_to(os.environ["RAY_ADDRESS"], node_ip_address=args.node_ip)
        try:
            report = driver(args.driver, args.folder, json.loads(args.hosts), args.records, args.cut_s)
        finally:
            shutdown_ray()
        print(json.dumps(report))
        return

    from raylink.bench.netns_cluster import HEALTH_CHECK_ENV, NetnsCluster

    faults = ("kill", "cut", "head") if args.gcs_ft else ("kill", "cut")
    reports: dict = {fault: [] for fault in faults}
    with NetnsCluster(gcs_redis=args.gcs_ft) as cluster:
        for round_ in range(args.rounds):
            for fault in faults:  # interleaved
                with tempfile.TemporaryDirectory(prefix="rlhf") as folder:
                    records = max(args.records, HEAD_RECORDS) if fault == "head" else args.records
                    reports[fault].append(run_driver(cluster, fault, folder, records, args.cut_s))
                if fault != "head":  # the head was restarted by run_driver
                    cluster.revive(cluster.ips.index(reports[fault][-1]["victim"]))
    checks = ", ".join(f"{k.removeprefix('RAY_')}={v}" for k, v in HEALTH_CHECK_ENV.items())
    print(f"host failover: {args.records:,} records, parallelism 2 over 2 worker hosts, Ray health checks {checks}")
    print(f"medians over {args.rounds} rounds, seconds from the loss (head: RUNNING = its GCS answers again)")
    print(f"{'loss':<28}{'detected':>9}{'RUNNING':>9}{'1st rec':>9}{'lost':>6}{'dup':>6}{'exact':>7}{'restarts':>9}")
    labels = {
        "kill": "host killed (all processes)",
        "cut": f"link cut for {args.cut_s:.0f} s",
        "head": "head restarted (GCS FT)",
    }
    for fault in faults:
        rows, label = reports[fault], labels[fault]
        print(
            f"{label:<28}{_median([r['detected_s'] for r in rows]):>9}{_median([r['running_s'] for r in rows]):>9}"
            f"{_median([r['first_record_s'] for r in rows]):>9}{sum(r['lost'] for r in rows):>6}"
            f"{sum(r['duplicated'] for r in rows):>6}{str(all(r['exact'] for r in rows)):>7}"
            f"{sum(r['restarts'] for r in rows):>9}"
        )


if __name__ == "__main__":
    main()
