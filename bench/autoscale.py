"""The autoscaler, measured on a Ray cluster that grows and shrinks: a keyed count whose input
rate steps up 5x and back down, with ``job.autoscaler.enabled``, into the exactly-once FileSink.

The job: Flink's ``DataGeneratorSource`` (``raylink.api.connectors.datagen``) emits ``1..N`` at
``--low`` records/s, ``--high`` (5x) from ``--low-s`` seconds on, and ``--low`` again after
``--high-s`` more; its backlog against that schedule is its ``pendingRecords`` (the lag the
autoscaler reads). Each number becomes ``(v % KEYS, 1)``, is counted per key and then worked on
(:func:`work`: 10 ms a record, about 95 records/s per subtask) -- the keyed vertex is what must
scale. Every TaskExecutor asks for one CPU (``taskmanager.cpu.cores: 1``, one per slot), placed
packed (``raylink.placement-strategy: pack``) so that fewer of them leave a node idle.

The cluster (``--cluster``, as root): a network-namespace host (``bench/netns_cluster.py``) whose
Ray head has no CPUs (it holds the GCS and the driver) and runs Ray's autoscaler with its fake
multi-node provider (what ``ray.cluster_utils.AutoscalingCluster`` starts), allowing two nodes of
2 CPUs; idle nodes go after 6 s. The job's first TaskExecutor makes Ray add one node; four need
the second: the autoscaler's scale-out makes Ray add it, the scale-in (two TaskExecutors, packed
on one node) lets Ray remove one. Without ``--cluster`` the job runs on the local Ray.

The report (one JSON line from the driver; a table from :func:`main`): the autoscaler's scaling
reports, a timeline (every 0.5 s: the keyed vertex's parallelism, the backlog -- records the
schedule made due since the job first ran minus the records committed, counted in the sink's
files --, the source's ``pendingRecords``, alive Ray nodes, the autoscaler's state), and derived
figures: when the job scaled out and in, when the cluster had a second node and lost it again,
how long the backlog took to drain once the peak parallelism ran (against
``job.autoscaler.catch-up.duration``), and the committed output against the rolling counts
computed here (lost / duplicated).

    python bench/autoscale.py --cluster        # as root, ~2 min
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from typing import Any, Optional

from raylink.bench.failover import committed_lines
from raylink.bench.failover import reference as failover_reference

KEYS = 256  # evenly over the 8 key groups (28-38 keys each)
PADDING = "x" * 2000
MAX_PARALLELISM = 8
WORK_S = 0.01
#: the autoscaler's settings: short windows, so a run takes minutes, not Flink's hours
AUTOSCALER_CONF = {
    "job.autoscaler.enabled": "true",
    "autoscaler.standalone.control-loop.interval": "1 s",
    "job.autoscaler.metrics.window": "5 s",
    "job.autoscaler.stabilization.interval": "3 s",
    "job.autoscaler.utilization.target": "0.5",
    "job.autoscaler.scale-down.interval": "3 s",
    "job.autoscaler.catch-up.duration": "20 s",
    "job.autoscaler.restart.time": "5 s",
    # the cluster holds four TaskExecutors of a CPU each (two on the head, two on the node Ray adds)
    "job.autoscaler.vertex.max-parallelism": "4",
}
#: the backlog counts as drained at or below this many seconds of the high rate (the sink commits
#: once a checkpoint interval: what it has not committed yet is in the backlog)
DRAINED_S_OF_INPUT = 2.0


def work(kv: tuple) -> str:
    """The keyed vertex's per-record work (a call that waits, as a model or a lookup would)."""
    time.sleep(WORK_S)
    return f"{kv[0]},{kv[1]}"


def pair(v: int) -> tuple:
    """``(key, 1, padding)``: records of about 2 KB, so that the network buffers between the source
    and the keyed vertex hold a few hundred of them, not tens of thousands (what they hold is
    emitted, so not in the source's backlog the autoscaler reads)."""
    return (v % KEYS, 1, PADDING)


def add(a: tuple, b: tuple) -> tuple:
    return (a[0], a[1] + b[1], a[2])


def number(i: int) -> int:
    return i + 1


def reference(n: int) -> Counter:
    """The rolling counts of ``1..n`` per key, as committed lines."""
    return failover_reference(n, KEYS)


def build(env: Any, steps: list, records: int, out: str) -> None:
    """The job: ``DataGeneratorSource`` over ``steps`` -> pairs -> per-key count -> :func:`work`
    -> the exactly-once FileSink at ``out`` (rolling on checkpoints)."""
    from raylink.api import Encoder, FileSink, RollingPolicy, WatermarkStrategy
    from raylink.api.connectors import DataGeneratorSource, RateLimiterStrategy

    sink = (
        FileSink.for_row_format(out, Encoder.simple_string_encoder())
        .with_rolling_policy(RollingPolicy.on_checkpoint_rolling_policy())
        .build()
    )
    source = DataGeneratorSource(number, records, RateLimiterStrategy.steps_of(steps))
    (
        env.from_source(source, WatermarkStrategy.no_watermarks(), "numbers")
        .uid("numbers")
        .map(pair)
        .uid("pairs")
        .key_by(_key)
        .reduce(add)
        .uid("count")
        .set_max_parallelism(MAX_PARALLELISM)
        .map(work)
        .uid("work")
        .sink_to(sink)
        .uid("files")
    )


def _key(kv: tuple) -> int:
    return kv[0]


def schedule(low: float, high: float, low_s: float, high_s: float, tail_s: float) -> tuple[list, int]:
    """The rate steps and the record count they emit in all."""
    steps = [(0.0, low), (low_s, high), (low_s + high_s, low)]
    return steps, int(low * low_s + high * high_s + low * tail_s)


def driver(
    folder: str, low: float, high: float, low_s: float, high_s: float, tail_s: float, verbose: bool = False
) -> dict:
    """Runs the job on the Ray at RAY_ADDRESS (or a local one), samples it until it ends; the report."""
    from raylink.actors.cluster import alive_nodes
    from raylink.api import Configuration, StreamExecutionEnvironment
    from raylink.api.connectors import RateLimiterStrategy

    steps, records = schedule(low, high, low_s, high_s, tail_s)
    conf = Configuration()
    for key, value in {
        **AUTOSCALER_CONF,
        # a CPU per TaskExecutor on the autoscaling cluster: one or two fit a node, four need two
        "taskmanager.cpu.cores": "1" if os.environ.get("RAY_ADDRESS") else "0.01",
        "raylink.task-placement": "slot",
        "raylink.placement-strategy": "pack",  # a scale-in leaves the added node idle: Ray removes it
        "restart-strategy.type": "fixed-delay",
        "restart-strategy.fixed-delay.attempts": "3",
        "execution.checkpointing.interval": "1 s",
        "execution.checkpointing.dir": os.path.join(folder, "checkpoints"),
    }.items():
        conf.set_string(key, value)
    env = StreamExecutionEnvironment.get_execution_environment(conf)
    env.set_parallelism(1)
    out = os.path.join(folder, "out")
    build(env, steps, records, out)
    client = env.execute_async("autoscaled keyed count")
    job_id = client.job_id
    keyed = next(v.id for v in client.execution_graph.job_vertices if v.name.startswith("Keyed Reduce"))
    strategy = RateLimiterStrategy.steps_of(steps)
    started = time.time()
    first_running: Optional[float] = None
    timeline = []
    while not client.wait(0.5):
        try:
            metrics = client.get_metrics()
            status = client.get_autoscaler_status()
            nodes = alive_nodes()
        except Exception:  # noqa: BLE001 - a job ending under us
            continue
        if first_running is None:
            running_ms = client.status_timestamps.get("RUNNING")
            first_running = running_ms / 1000.0 if running_ms else None
        now = time.time()
        committed = sum(committed_lines(out).values())
        due = min(records, strategy.due(now - first_running)) if first_running else 0
        sample = {
            "t": round(now - started, 2),
            "parallelism": client.execution_graph.get_job_vertex(keyed).parallelism,
            "pending": int(
                sum(op.get("pendingRecords", 0) or 0 for m in metrics for op in (m.get("operators") or {}).values())
            ),
            "backlog": max(0, int(due - committed)),
            "nodes": nodes,
            "state": status.get("state"),
            "jobStatus": str(client.get_job_status()).rsplit(".", 1)[-1],
        }
        timeline.append(sample)
        if verbose:
            print(json.dumps(sample), file=sys.stderr, flush=True)
    status = client.get_autoscaler_status()
    got, want = committed_lines(out), reference(records)
    report = {
        "records": records,
        "steps": steps,
        "job_id_kept": client.job_id == job_id,
        "status": str(client.get_job_status()).rsplit(".", 1)[-1],
        "restarts": client.get_checkpoint_stats()["numRestarts"],
        "events": status["events"],
        "parallelism_history": status["parallelism"],
        "timeline": timeline,
        "lost": sum((want - got).values()),
        "duplicated": sum((got - want).values()),
        "exact": got == want,
        "catch_up_s": 20.0,
        "drained_at": DRAINED_S_OF_INPUT * high,
    }
    report.update(derive(timeline, DRAINED_S_OF_INPUT * high))
    return report


def derive(timeline: list, drained_at: float) -> dict:
    """When it scaled out and in, when the cluster grew and shrank, how fast the backlog drained."""
    out: dict = {"scaled_out_s": None, "peak_s": None, "running_at_peak_s": None, "scaled_in_s": None}
    out.update(node_added_s=None, node_removed_s=None, drained_s=None)
    peak = max((s["parallelism"] for s in timeline), default=1)
    out["peak_parallelism"] = peak
    out["final_parallelism"] = timeline[-1]["parallelism"] if timeline else None
    out["max_backlog"] = max((s["backlog"] for s in timeline), default=0)
    out["max_pending"] = max((s["pending"] for s in timeline), default=0)
    # nodes while the job first ran at parallelism 1, and at its peak
    out["nodes_before"] = max((s["nodes"] for s in timeline if s["parallelism"] == 1), default=0)
    at_peak = [s for s in timeline if s["parallelism"] == peak and s["jobStatus"] == "RUNNING"]
    out["nodes_at_peak"] = max((s["nodes"] for s in at_peak), default=0)
    for s in timeline:
        if out["scaled_out_s"] is None and s["parallelism"] > 1:
            out["scaled_out_s"] = s["t"]
        if out["peak_s"] is None and s["parallelism"] == peak:
            out["peak_s"] = s["t"]
        if out["peak_s"] is not None and out["running_at_peak_s"] is None and s["jobStatus"] == "RUNNING":
            out["running_at_peak_s"] = s["t"]
        if out["running_at_peak_s"] is not None and out["scaled_in_s"] is None and s["parallelism"] < peak:
            out["scaled_in_s"] = s["t"]
        if out["peak_s"] is not None and out["node_added_s"] is None and s["nodes"] > out["nodes_before"]:
            out["node_added_s"] = s["t"]
        if out["scaled_in_s"] is not None and out["node_removed_s"] is None and s["nodes"] < out["nodes_at_peak"]:
            out["node_removed_s"] = s["t"]
    if out["running_at_peak_s"] is not None:
        drained = next(
            (s["t"] for s in timeline if s["t"] >= out["running_at_peak_s"] and s["backlog"] <= drained_at), None
        )
        out["drained_s"] = None if drained is None else round(drained - out["running_at_peak_s"], 2)
    return out


def run_driver(cluster, folder: str, timeout: float = 600, **rates) -> dict:
    """:func:`driver` as a program on the cluster's head host; its report (``RuntimeError`` with
    its output and the nodes' logs when it fails)."""
    argv = [sys.executable, "-m", "raylink.bench.autoscale", "--driver", "--folder", folder]
    for key, value in rates.items():
        argv += [f"--{key.replace('_', '-')}", str(value)]
    proc = subprocess.run(
        cluster.driver_argv(argv), env=cluster.driver_env(), capture_output=True, text=True, timeout=timeout
    )
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines or not lines[-1].startswith("{"):
        raise RuntimeError(
            f"the autoscale driver exited with {proc.returncode}:\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}\n"
            f"{cluster.log_text()}"
        )
    return json.loads(lines[-1])


def autoscaling_cluster():
    """The one-host cluster whose head has no CPUs and whose Ray autoscaler may add two nodes of 2 CPUs."""
    from raylink.bench.netns_cluster import NetnsCluster

    return NetnsCluster(
        hosts=1,
        head_cpus=0,
        autoscaler_node_types={"cpu2": {"resources": {"CPU": 2}, "min_workers": 0, "max_workers": 2}},
        idle_timeout_minutes=0.1,
    )


def _print(report: dict, timeline: bool = False) -> None:
    print(f"{'':34}{'s':>8}")
    for label, key in (
        ("scaled out (parallelism > 1)", "scaled_out_s"),
        ("at the peak parallelism", "peak_s"),
        ("running at the peak parallelism", "running_at_peak_s"),
        ("Ray added a node for it", "node_added_s"),
        ("scaled in", "scaled_in_s"),
        ("Ray removed an idle node", "node_removed_s"),
    ):
        value = report.get(key)
        print(f"{label:34}{'-' if value is None else f'{value:8.1f}':>8}")
    print(
        f"backlog (records due - committed) drained to <= {report['drained_at']:.0f} {report['drained_s']} s after "
        f"the peak parallelism ran (catch-up duration {report['catch_up_s']:g} s); peak backlog "
        f"{report['max_backlog']}, peak pendingRecords {report['max_pending']}; parallelism 1 -> "
        f"{report['peak_parallelism']} -> {report['final_parallelism']}, nodes {report['nodes_before']} -> {report['nodes_at_peak']}; "
        f"lost {report['lost']}, duplicated {report['duplicated']}"
    )
    for event in report["events"]:
        print(f"  {event['reason']}: {event['message']}")
    if timeline:
        print(f"{'t s':>7}{'parallelism':>12}{'backlog':>9}{'pending':>9}{'nodes':>6}  autoscaler")
        for s in report["timeline"]:
            print(f"{s['t']:7.1f}{s['parallelism']:12d}{s['backlog']:9d}{s['pending']:9d}{s['nodes']:6d}  {s['state']}")


def main(argv: Optional[list] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--driver", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--folder")
    parser.add_argument("--cluster", action="store_true", help="on an autoscaling Ray cluster (needs root)")
    parser.add_argument("--low", type=float, default=40.0, help="records/s before and after the step (40)")
    parser.add_argument("--high", type=float, default=200.0, help="records/s during the step (200)")
    parser.add_argument("--low-s", type=float, default=10.0, help="seconds at --low first (10)")
    parser.add_argument("--high-s", type=float, default=40.0, help="seconds at --high (40)")
    parser.add_argument("--timeline", action="store_true", help="print the sampled timeline too")
    parser.add_argument("--tail-s", type=float, default=40.0, help="seconds at --low at the end (40)")
    args = parser.parse_args(argv)
    rates = {"low": args.low, "high": args.high, "low_s": args.low_s, "high_s": args.high_s, "tail_s": args.tail_s}
    if args.driver:
        from raylink.actors.cluster import connect_to, shutdown_ray

        if os.environ.get("RAY_ADDRESS"):
            connect_to(os.environ["RAY_ADDRESS"])
        try:
            report = driver(args.folder, **rates, verbose=args.timeline)
        finally:
            shutdown_ray()
        print(json.dumps(report))
        return
    with tempfile.TemporaryDirectory(prefix="rlautoscale") as folder:
        if args.cluster:
            with autoscaling_cluster() as cluster:
                report = run_driver(cluster, folder, **rates)
        else:
            report = driver(folder, **rates)
    _print(report, args.timeline)


if __name__ == "__main__":
    main()
