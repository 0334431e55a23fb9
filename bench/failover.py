"""Failover under repeated process kills, on a real local Ray: a keyed rolling count at
parallelism 2 from a sequence source into the exactly-once FileSink, checkpointing every
300 ms, fixed-delay restarts. A TaskExecutor worker process is SIGKILLed ``--kills`` times
(after a new checkpoint each time); at the end the visible part files are compared with
the rolling counts computed here without raylink (the failure-free reference).

Recovery is timed twice per kill, from the SIGKILL: until the job status is RUNNING again
(the JobMaster has redeployed the tasks) and until the restored keyed task emits its first
record (state loaded, sources resumed; ``bench/recovery.py``); the table gives the medians.

A table before it is for JobMaster loss: the same job with ``high-availability.type:
filesystem``, its JobMaster actor's process SIGKILLed ``--job-master-kills`` times; per kill the
time until the restarted JobMaster answers (Ray's detection of the dead process and its restart),
until the recovered job is RUNNING, and until the restored tasks emit their first record, with
the records lost / duplicated in the committed output (0 / 0: the FileSink is exactly-once).

Hosts, with ``--host-rounds N`` (root): a host killed, a host's link cut and the head restarted
with Ray's GCS fault tolerance, ``N`` rounds each on three hosts of network namespaces
(``bench/host_failover.py``, whose table this prints).

    python bench/failover.py [--kills 20] [--records 24000] [--job-master-kills 3] [--skip-task-executors]
                             [--host-rounds 0]
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from typing import Any, Callable, Optional

KEYS = 7


def reference(n: int, keys: int = KEYS) -> Counter:
    """The rolling counts of ``1..n`` per key ``v % keys``, as committed lines ``key,count``."""
    out, totals = Counter(), Counter()
    for v in range(1, n + 1):
        totals[v % keys] += 1
        out[f"{v % keys},{totals[v % keys]}"] += 1
    return out


def committed_lines(path: str) -> Counter:
    lines: Counter = Counter()
    for root, dirs, files in os.walk(path):
        dirs[:] = [d for d in dirs if not d.startswith((".", "_"))]
        for name in files:
            if not name.startswith((".", "_")):
                with open(os.path.join(root, name), encoding="utf-8") as fh:
                    lines.update(line for line in fh.read().splitlines() if line)
    return lines


def paced(value: int) -> int:
    if value % 2 == 0:
        time.sleep(0.001)  # the workload: ~2,000 records/s per subtask
    return value


def add(a: tuple, b: tuple) -> tuple:
    return (a[0], a[1] + b[1])


def start_keyed_count(conf: Any, folder: str, records: int, probe_map: Callable[[str], Any], name: str) -> tuple:
    """The bench's job, started: ``records`` paced numbers counted per key, checkpointed every
    300 ms at p=2 into the FileSink under ``<folder>/out``, ``probe_map(<folder>/first-records)``
    after the count; ``(job client, output folder, probe folder)``."""
    from raylink.api import Encoder, FileSink, RollingPolicy, StreamExecutionEnvironment

    env = StreamExecutionEnvironment.get_execution_environment(conf)
    env.set_parallelism(2)
    env.enable_checkpointing(300)
    env.get_checkpoint_config().set_checkpoint_storage_dir(os.path.join(folder, "checkpoints"))
    out = os.path.join(folder, "out")
    probe = os.path.join(folder, "first-records")
    os.makedirs(probe)
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
        .map(probe_map(probe))
        .map(lambda kv: f"{kv[0]},{kv[1]}")
        .sink_to(sink)
    )
    return env.execute_async(name), out, probe


def run(kills: int, records: int, folder: str) -> dict:
    from raylink.actors.cluster import task_executor_pids
    from raylink.api import Configuration
    from raylink.bench.recovery import FirstRecordAfterRestore, wait_first_record

    conf = (
        Configuration()
        .set_string("restart-strategy.type", "fixed-delay")
        .set_integer("restart-strategy.fixed-delay.attempts", kills + 5)
        .set_string("restart-strategy.fixed-delay.delay", "100 ms")
    )
    client, out, probe = start_keyed_count(conf, folder, records, FirstRecordAfterRestore, "failover bench")
    running, first = [], []
    done = 0
    while done < kills and not client.wait(0):
        completed = client.get_checkpoint_stats()["numberOfCompletedCheckpoints"]
        while not client.wait(0.02) and (
            client.get_job_status() != "RUNNING"
            or client.get_checkpoint_stats()["numberOfCompletedCheckpoints"] <= completed
        ):
            pass
        if client.wait(0):
            break
        pids = task_executor_pids(client)
        pid = pids[done % len(pids)]
        restarts = client.get_checkpoint_stats()["numRestarts"]  # = the attempt number running now
        killed = time.time()  # wall time: the probe's clock in the TaskExecutor processes
        os.kill(pid, signal.SIGKILL)
        done += 1
        while not client.wait(0.01) and not (
            client.get_checkpoint_stats()["numRestarts"] > restarts and client.get_job_status() == "RUNNING"
        ):
            pass
        if client.wait(0):
            break
        running.append(time.time() - killed)
        first_record = wait_first_record(probe, restarts, lambda: client.wait(0))
        if first_record is not None:
            first.append(first_record - killed)
    client.wait(600)
    got, want = committed_lines(out), reference(records)
    return {
        "status": client.get_job_status(),
        "kills": done,
        "restarts": client.get_checkpoint_stats()["numRestarts"],
        "lost": sum((want - got).values()),
        "duplicated": sum((got - want).values()),
        "running_s": running,
        "first_record_s": first,
    }


class FirstRecordOfEachDeployment:
    """Identity map writing the wall time of the first record each deployed subtask sees into
    ``<folder>/<pid>-<subtask>-<attempt>`` (a recovered JobMaster counts attempts from 0 again, so
    the files are told apart by time: those after a kill are the restored tasks')."""

    def __init__(self, folder: str) -> None:
        self.folder = folder
        self.pending = False

    def open(self, runtime_context) -> None:
        subtask, attempt = runtime_context.get_index_of_this_subtask(), runtime_context.get_attempt_number()
        self.name = f"{os.getpid()}-{subtask}-{attempt}"
        self.pending = True

    def map(self, value):
        if self.pending:
            self.pending = False
            path = os.path.join(self.folder, self.name)
            with open(path + ".tmp", "w") as fh:
                fh.write(repr(time.time()))
            os.replace(path + ".tmp", path)  # the bench never reads half a number
        return value


def _first_record_after(folder: str, since: float) -> Optional[float]:
    times = []
    for name in os.listdir(folder):
        if not name.endswith(".tmp"):
            with open(os.path.join(folder, name)) as fh:
                times.append(float(fh.read()))
    after = [t for t in times if t > since]
    return min(after) if after else None


def run_job_master_loss(kills: int, records: int, folder: str) -> dict:
    """The same keyed count with high availability (its JobMaster in an actor Ray restarts);
    the JobMaster's process is SIGKILLed ``kills`` times, each after a new checkpoint. Per kill:
    until the restarted JobMaster answers (Ray's detection and restart), until the recovered job
    is RUNNING, until the restored tasks emit their first record."""
    from raylink.api import Configuration
    from raylink.api.functions import MapFunction

    class Probe(FirstRecordOfEachDeployment, MapFunction):
        pass

    conf = (
        Configuration()
        .set_string("execution.target", "ray")
        .set_string("restart-strategy.type", "fixed-delay")
        .set_integer("restart-strategy.fixed-delay.attempts", kills + 5)
        .set_string("restart-strategy.fixed-delay.delay", "100 ms")
        .set_string("high-availability.type", "filesystem")
        .set_string("high-availability.storageDir", os.path.join(folder, "ha"))
    )
    client, out, probe = start_keyed_count(conf, folder, records, Probe, "job master failover bench")
    answering, running, first = [], [], []
    done = 0
    while done < kills and not client.wait(0):
        completed = client.get_checkpoint_stats().get("numberOfCompletedCheckpoints", 0)
        while not client.wait(0.05) and (
            client.get_job_status() != "RUNNING"
            or client.get_checkpoint_stats().get("numberOfCompletedCheckpoints", 0) <= completed
        ):
            pass
        if client.wait(0):
            break
        incarnation = client.summary()["jobMasterIncarnation"]
        pid = client.job_master_pid()
        killed = time.time()
        os.kill(pid, signal.SIGKILL)
        done += 1
        summary = client.summary()  # answered by the restarted JobMaster (the call waits for it)
        answering.append(time.time() - killed)
        if summary["pid"] == pid or summary["jobMasterIncarnation"] <= incarnation:
            raise RuntimeError(f"the JobMaster was not restarted: {summary}")
        while not client.wait(0.01) and client.get_job_status() != "RUNNING":
            pass
        running.append(time.time() - killed)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not client.wait(0.005):
            found = _first_record_after(probe, killed)
            if found is not None:
                first.append(found - killed)
                break
    client.wait(600)
    got, want = committed_lines(out), reference(records)
    return {
        "status": client.get_job_status(),
        "kills": done,
        "lost": sum((want - got).values()),
        "duplicated": sum((got - want).values()),
        "answering_s": answering,
        "running_s": running,
        "first_record_s": first,
    }


def job_master_table(report: dict) -> str:
    """Per kill of the JobMaster: medians (min - max) of the three times, the first as baseline."""
    import statistics

    rows = [
        ("JobMaster answers again (baseline)", report["answering_s"]),
        ("recovered job RUNNING", report["running_s"]),
        ("first record after the restore", report["first_record_s"]),
    ]
    base = statistics.median(report["answering_s"]) if report["answering_s"] else float("nan")
    lines = [
        f"JobMaster loss: {report['kills']} SIGKILLs of the JobMaster actor's process, job {report['status']}",
        f"{'kill ->':<38}{'median s':>9}{'min s':>8}{'max s':>8}{'vs answer':>11}",
    ]
    for label, values in rows:
        if not values:
            lines.append(f"{label:<38}{'-':>9}{'-':>8}{'-':>8}{'-':>11}")
            continue
        median = statistics.median(values)
        lines.append(f"{label:<38}{median:>9.2f}{min(values):>8.2f}{max(values):>8.2f}{median / base:>10.2f}x")
    lines.append(f"  lost {report['lost']}, duplicated {report['duplicated']} (committed output vs the reference)")
    return "\n".join(lines)


def main(argv: Optional[list] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--records", type=int, default=24_000)
    parser.add_argument(
        "--job-master-kills", type=int, default=3, help="SIGKILLs of the JobMaster actor (0: no JobMaster row)"
    )
    parser.add_argument("--skip-task-executors", action="store_true", help="only the JobMaster loss table")
    parser.add_argument(
        "--host-rounds", type=int, default=0, help="rounds of host, link and head loss on network namespaces (root)"
    )
    args = parser.parse_args(argv)
    if args.host_rounds > 0:  # a cluster of its own (bench/host_failover.py prints its table)
        host_failover = [sys.executable, "-m", "raylink.bench.host_failover", "--rounds", str(args.host_rounds)]
        subprocess.run(host_failover + ["--gcs-ft"], check=True)
        print(flush=True)
        if args.job_master_kills <= 0 and args.skip_task_executors:
            return

    from raylink.actors.cluster import ensure_ray, shutdown_ray
    from raylink.bench.recovery import recovery_table

    ensure_ray()
    if args.job_master_kills > 0:
        records = max(args.records, 8_000 * args.job_master_kills)
        with tempfile.TemporaryDirectory() as folder:
            print(job_master_table(run_job_master_loss(args.job_master_kills, records, folder)))
        print()
    if args.skip_task_executors:
        shutdown_ray()
        return
    records = max(args.records, 4_000 * args.kills)  # long enough for every kill
    with tempfile.TemporaryDirectory() as folder:
        report = run(args.kills, records, folder)
    print(
        f"failover: {records:,} records, {report['kills']} SIGKILLs of TaskExecutor processes, "
        f"{report['restarts']} restarts, job {report['status']}"
    )
    print(f"  lost {report['lost']}, duplicated {report['duplicated']} (committed output vs the reference)")
    print()
    print(
        recovery_table(
            f"recovery, medians over {len(report['running_s'])} kills (first record: {len(report['first_record_s'])})",
            report["running_s"],
            report["first_record_s"],
        )
    )
    shutdown_ray()


if __name__ == "__main__":
    main()
