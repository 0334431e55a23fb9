"""Large jobs on one machine: ExecutionGraph, deployment descriptors and JobMaster bookkeeping
against stub TaskExecutors, at growing parallelism (issue 34; Flink's FLINK-21110 figures).

The job: ``from_sequence -> map -> key_by -> reduce -> rebalance -> map -> sink``, three
JobVertices and two ALL_TO_ALL edges, every vertex at parallelism ``p``. Each ``p`` runs in
a fresh subprocess (its peak RSS is its own) through the steps a JobMaster takes:

* ``job graph``: StreamGraph -> JobGraph (independent of ``p``: for scale);
* ``execution graph``: the JobMaster's construction (``build_execution_graph`` and its
  attempt bookkeeping);
* ``placement``: Flink's slot placement, ``--slots`` slots per TaskExecutor (1: one
  TaskExecutor per slot, the worst case for descriptors on the wire);
* ``descriptors``: a TaskDeploymentDescriptor per subtask;
* ``deploy``: the JobMaster's deployment bookkeeping (SCHEDULED, DEPLOYING, descriptors
  grouped per TaskExecutor) and every TaskExecutor's ``deploy`` call pickled as Ray
  pickles its arguments; stub TaskExecutors take the call (unpickle it, load the
  descriptors' offloaded parts through a stub object store, count the channels they
  would open) without running tasks;
* ``running``: INITIALIZING -> RUNNING for every attempt, checkpointing started;
* ``checkpoint``: one checkpoint triggered and acknowledged by every task;
* ``metrics``: one aggregation of every task's metrics by vertex;
* ``finish``: every task reports FINISHED; the job ends.

Printed: seconds and peak RSS (MiB, the process's peak at the end of the step) per step
and ``p``, then the growth factor per 10x parallelism (100 -> 1,000, and 1,000 -> 5,000
scaled to a 10x step: ``ratio ** (1 / log10(5))``). Then the wire: bytes of the deploy
calls and of the objects put once into the object store.

Then the transport at scale (``--transport``, TaskExecutor counts): one TaskExecutor of the
same job with one slot per TaskExecutor (3 tasks), deployed on a real ``TaskExecutor`` and
``RayTransport`` whose peers are stub actor handles, every remote input channel requested
and every remote reader of its subpartitions opened (an ALL_TO_ALL job needs a channel per
peer pair and edge). Printed: the connections (one per peer each way), channels and readers,
then the memory that executor took for them: allocated (tracemalloc, requested whether
touched or not) and resident (RSS growth, measured in a second, untraced process), in total
and per peer TaskExecutor. Flat per-peer columns mean the cost grows linearly with the
peers, as the channels must.

    python bench/scale.py [--parallelism 100,1000,5000] [--slots 1] [--limit-gb 8]
                          [--transport 100,250,500,1000]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import pickle
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Optional

PACKAGE_PARENT = str(Path(__file__).resolve().parent.parent.parent)
STEPS = (
    "job graph",
    "execution graph",
    "placement",
    "descriptors",
    "deploy",
    "running",
    "checkpoint",
    "metrics",
    "finish",
)


def ident(x):
    return x


def add(a, b):
    return a + b


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def build_env(parallelism: int, checkpoint_dir: str) -> Any:
    from raylink.api import Configuration, StreamExecutionEnvironment

    conf = Configuration()
    conf.set_string("execution.checkpointing.interval", "1 h")  # triggered by hand below
    conf.set_string("execution.checkpointing.dir", checkpoint_dir)
    env = StreamExecutionEnvironment.get_execution_environment(conf)
    env.set_parallelism(parallelism)
    env.from_sequence(1, 10).map(ident).key_by(ident).reduce(add).rebalance().map(ident).print()
    return env


class StubObjectStore:
    """Ray's object store as far as deployment goes: ``put`` pickles a value once, a
    TaskExecutor's ``get`` unpickles it (each stub executor caches what it got)."""

    def __init__(self) -> None:
        self.objects: dict[int, bytes] = {}
        self.bytes_put = 0

    def put(self, value: Any) -> int:
        data = pickle.dumps(value, protocol=5)
        self.bytes_put += len(data)
        key = len(self.objects)
        self.objects[key] = data
        return key

    def get(self, keys: list) -> list:
        return [pickle.loads(self.objects[k]) for k in keys]


class StubTaskExecutor:
    """Accepts descriptors without running tasks: what a TaskExecutor's ``deploy`` receives,
    unpickled; offloaded parts fetched once per call (as the Ray actor does); channels counted."""

    def __init__(self, executor_id: str, store: StubObjectStore) -> None:
        self.executor_id = executor_id
        self.store = store
        self.tasks = 0
        self.channels = 0
        self.seconds = 0.0  # in deploy: the TaskExecutor's side of the call

    def deploy(self, payload: bytes) -> list[str]:
        from raylink.runtime.job import deployment

        started = time.perf_counter()
        try:
            return self._deploy(deployment, payload)
        finally:
            self.seconds += time.perf_counter() - started

    def _deploy(self, deployment: Any, payload: bytes) -> list[str]:
        descriptors = pickle.loads(payload)
        load = getattr(deployment, "load_big_data", None)
        if load is not None:
            load(descriptors, self.store.get)
        out = []
        for tdd in descriptors:
            for gate in tdd.input_gates:  # (a TaskExecutor opens these: O(partitions) per task)
                count = getattr(gate, "number_of_input_channels", None)
                self.channels += len(gate.channels) if count is None else count
            self.tasks += 1
            out.append(tdd.attempt_id)
        return out


def run_one(parallelism: int, slots: int) -> dict:
    """Every step for one ``p`` (in this process); ``{step: (seconds, peak MiB)}`` and wire figures."""
    import gc

    from raylink.runtime.execution_state import ExecutionState
    from raylink.runtime.job import deployment
    from raylink.runtime.job.job_master import JobMasterBase
    from raylink.runtime.task.task_events import AcknowledgeCheckpoint, TaskStateEvent

    results: dict = {"p": parallelism, "steps": {}}
    store = StubObjectStore()
    stubs: dict[str, StubTaskExecutor] = {}
    wire = {"deploy_bytes": 0, "max_executor_bytes": 0}

    class StubJobMaster(JobMasterBase):
        """The JobMaster's bookkeeping with stub TaskExecutors (as ``RayJobClient`` deploys)."""

        def _deploy(self, restore: Any) -> None:  # steps timed one by one below
            pass

        def _start_tasks(self) -> None:
            pass

        def _cancel_all_tasks(self) -> None:
            pass

        def _trigger_checkpoint(self, checkpoint_id: int, timestamp: int) -> None:
            pass

        def _notify_checkpoint(self, checkpoint_id: int, complete: bool) -> None:
            pass

        def _live_metrics(self) -> list[dict]:
            return [
                {
                    "vertex_name": ev.job_vertex.name,
                    "numRecordsIn": 1,
                    "numRecordsOut": 1,
                    "busyTimeMsPerSecond": 1.0,
                    "backPressuredTimeMsPerSecond": 0.0,
                }
                for ev in self.executions.values()
            ]

    timings = results["steps"]

    def timed(step: str, fn):
        gc.collect()
        started = time.perf_counter()
        out = fn()
        timings[step] = (time.perf_counter() - started, peak_rss_mib())
        return out

    with tempfile.TemporaryDirectory(prefix="raylink-scale-") as checkpoint_dir:
        env = build_env(parallelism, checkpoint_dir)
        job_graph = timed("job graph", lambda: env.get_job_graph("scale"))
        env.get_job_graph = lambda job_name=None: job_graph
        jm = timed("execution graph", lambda: StubJobMaster(env, "scale"))
        eg = jm.execution_graph
        results["tasks"] = len(jm.executions)

        def place():
            executor_of, count = deployment.assign_task_executors(eg, "slot", slots)
            ids = [f"te-{i}" for i in range(count)]
            for executor_id in ids:
                stubs[executor_id] = StubTaskExecutor(executor_id, store)
            return {key: ids[i] for key, i in executor_of.items()}

        placement = timed("placement", place)
        results["executors"] = len(stubs)
        settings = jm.configuration.to_dict()

        def descriptors():
            factory_class = getattr(deployment, "TaskDeploymentDescriptorFactory", None)
            if factory_class is None:  # before issue 34
                return deployment.create_deployment_descriptors(jm.job_id, eg, placement, settings)
            factory = factory_class(jm.job_id, eg, placement, settings, offload=store.put)
            return factory.create_deployment_descriptors()

        held = {"tdds": timed("descriptors", descriptors)}

        def deploy():
            with jm._lock:
                jm._set_all(ExecutionState.SCHEDULED)
            for ev in jm.executions.values():
                ev.current_execution.assigned_location = placement[(ev.job_vertex.id, ev.subtask_index)]
            per_executor: dict[str, list] = {e: [] for e in stubs}
            for tdd in held.pop("tdds"):
                per_executor[
                    placement[(getattr(tdd, "job_vertex_id", None) or tdd.job_vertex.id, tdd.subtask_index)]
                ].append(tdd)
            with jm._lock:
                jm._set_all(ExecutionState.DEPLOYING)
            deployed = 0
            for executor_id, executor_tdds in per_executor.items():
                payload = pickle.dumps(executor_tdds, protocol=5)  # Ray pickles a call's arguments
                wire["deploy_bytes"] += len(payload)
                wire["max_executor_bytes"] = max(wire["max_executor_bytes"], len(payload))
                deployed += len(stubs[executor_id].deploy(payload))
            assert deployed == len(jm.executions)

        timed("deploy", deploy)
        # the TaskExecutors' side ran here too, one executor after the other: kept out of the
        # JobMaster's step and reported per executor (on a cluster each runs in its own process)
        executor_seconds = [stub.seconds for stub in stubs.values()]
        seconds, mib = timings["deploy"]
        timings["deploy"] = (seconds - sum(executor_seconds), mib)
        wire["executor_max_s"] = max(executor_seconds)
        wire["executor_sum_s"] = sum(executor_seconds)
        wire["object_store_bytes"] = store.bytes_put
        wire["channels"] = sum(s.channels for s in stubs.values())

        def running():
            jm._job_running()
            jm._start_checkpointing()

        timed("running", running)

        storage = jm.checkpoint_storage
        # what the tasks acknowledge (small state, carried inline): made on the tasks' side
        acks = [
            (attempt_id, {ev.job_vertex.id: {ev.subtask_index: storage.write_state(1, ev.job_vertex.id, 0, b"s")}})
            for attempt_id, ev in jm.executions.items()
        ]

        def checkpoint():
            checkpoint_id = jm.coordinator.trigger_checkpoint()
            for attempt_id, handles in acks:
                jm.on_task_event(AcknowledgeCheckpoint(attempt_id, checkpoint_id, handles, {"alignment_ms": 0.0}))
            assert jm.coordinator.stats.num_completed == 1, jm.coordinator.stats

        timed("checkpoint", checkpoint)
        timed("metrics", lambda: jm.get_vertex_metrics())

        def finish():
            for attempt_id, ev in list(jm.executions.items()):
                jm.on_task_event(TaskStateEvent(attempt_id, ev.name, ExecutionState.FINISHED))
            assert jm.get_job_status() == "FINISHED"

        timed("finish", finish)
    results["wire"] = wire
    return results


class _StubRef:
    """What a stub actor call returns: a reference whose future is already done."""

    def future(self) -> Any:
        from concurrent.futures import Future

        done: Future = Future()
        done.set_result(None)
        return done


class _StubMethod:
    def __init__(self, calls: dict, name: str) -> None:
        self.calls = calls
        self.name = name

    def remote(self, *args: Any) -> _StubRef:
        self.calls[self.name] = self.calls.get(self.name, 0) + 1
        return _StubRef()


class StubPeer:
    """A peer TaskExecutor's actor handle as the transport uses it: calls counted, nothing sent."""

    def __init__(self, calls: dict) -> None:
        for name in ("request_partition", "add_credit", "set_buffer_size", "receive_buffers"):
            setattr(self, name, _StubMethod(calls, name))


def run_transport(executors: int, traced: bool = True) -> dict:
    """One TaskExecutor (``te-0``) of the job at parallelism ``executors``, one slot per
    TaskExecutor: its tasks deployed on a real :class:`TaskExecutor` with a real
    :class:`RayTransport` whose peers are stubs, every remote channel requested (consumer
    side) and every remote reader of its partitions opened (producer side, as the other
    executors' requests would). Counts and memory of that one executor: with ``traced``,
    what Python allocated meanwhile (tracemalloc: requested, touched or not); without, the
    growth of the resident set (tracemalloc's own tables would count there)."""
    import gc
    import tracemalloc

    from raylink.actors.ray_transport import RayTransport
    from raylink.graph.execution_graph import build_execution_graph
    from raylink.runtime.job import deployment
    from raylink.runtime.task.task_executor import NetworkSettings, TaskExecutor, process_memory

    with tempfile.TemporaryDirectory(prefix="raylink-scale-") as checkpoint_dir:
        env = build_env(executors, checkpoint_dir)
        graph = build_execution_graph(env.get_job_graph("scale"))
    executor_of, count = deployment.assign_task_executors(graph, "slot", 1)
    ids = [f"te-{i}" for i in range(count)]
    placement = {key: ids[i] for key, i in executor_of.items()}
    # buffers are permits (no memory each): enough for every channel
    settings = {"taskmanager.network.numberOfBuffers": 64 * executors + 4096}
    factory_class = getattr(deployment, "TaskDeploymentDescriptorFactory", None)
    if factory_class is None:  # before issue 34
        tdds = deployment.create_deployment_descriptors("scale", graph, placement, settings)
    else:
        tdds = factory_class("scale", graph, placement, settings).create_deployment_descriptors()
    mine = [
        t for t in tdds if placement[(getattr(t, "job_vertex_id", None) or t.job_vertex.id, t.subtask_index)] == "te-0"
    ]
    del tdds
    calls: dict = {}
    peers = {e: StubPeer(calls) for e in ids}
    gc.collect()
    rss_before = process_memory().get("rssBytes", 0)
    if traced:
        tracemalloc.start()
        before, _ = tracemalloc.get_traced_memory()
    holder: dict = {}
    transport = RayTransport("te-0", lambda partition_id: holder["te"].partitions[partition_id])
    transport.register_peers(peers)
    te = holder["te"] = TaskExecutor("te-0", NetworkSettings(settings), transport)
    for tdd in mine:
        te.deploy(tdd)
    for gates in te._gates.values():
        for gate in gates:
            gate.request_partitions()  # consumer side: a partition request per remote channel
    for tdd in mine:  # producer side: the other executors' requests for this executor's subpartitions
        for rpdd in tdd.produced_partitions:
            for index, consumer in enumerate(rpdd.consumer_executors):
                if consumer != "te-0":
                    channel_id = f"{consumer}#{rpdd.partition_id}#{index}"
                    transport.request_partition(consumer, channel_id, rpdd.partition_id, index, 2)
    if traced:
        current, _peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    gc.collect()
    rss = process_memory().get("rssBytes", 0) - rss_before
    handles = len(transport.peers)
    out = {
        "executors": count,
        "tasks": len(te.tasks),
        "peer handles": handles,
        "outbound connections": len(transport._queues),
        "inbound connections": len(transport._announcers),
        "remote channels": len(transport._channels),
        "remote readers": len(transport._readers),
        "partition requests sent": calls.get("request_partition", 0),
    }
    if traced:
        out["allocated MiB"] = (current - before) / 2**20
        out["allocated KiB per peer"] = (current - before) / 1024 / max(1, count - 1)
    else:
        out["resident MiB"] = rss / 2**20
        out["resident KiB per peer"] = rss / 1024 / max(1, count - 1)
    te.shutdown(timeout=1)
    return out


def _child(parallelism: int, slots: int, limit_gb: float, transport: str = "") -> None:
    if limit_gb > 0:
        limit = int(limit_gb * 1024**3)
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    try:
        out = run_transport(parallelism, transport == "traced") if transport else run_one(parallelism, slots)
    except MemoryError:
        out = {"p": parallelism, "error": f"MemoryError (address space limited to {limit_gb} GB)"}
    print("RESULT " + json.dumps(out))


def measure(parallelism: int, slots: int, limit_gb: float, timeout: float, transport: str = "") -> dict:
    """One run in a fresh subprocess; ``transport``: "traced" or "resident" for the
    transport table's two runs (``run_transport``), "" for the graph steps."""
    env = dict(os.environ, PYTHONPATH=PACKAGE_PARENT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    argv = [sys.executable, "-m", "raylink.bench.scale", "--child", str(parallelism)]
    argv += ["--slots", str(slots), "--limit-gb", str(limit_gb)]
    argv += ["--transport-child", transport] if transport else []
    try:
        proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"p": parallelism, "error": f"did not finish within {timeout:.0f} s"}
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT ") :])
    return {"p": parallelism, "error": f"exit {proc.returncode}: {proc.stderr.strip().splitlines()[-1:]}"}


def growth(a: Optional[float], b: Optional[float], ratio: float) -> str:
    """``b / a`` scaled to a 10x step in parallelism (``ratio``: b's p over a's p)."""
    if not a or not b or a <= 0:
        return "-"
    return f"{(b / a) ** (1.0 / math.log10(ratio)):.1f}x"


def print_tables(runs: list[dict]) -> None:
    ok = [r for r in runs if "error" not in r]
    for r in runs:
        if "error" in r:
            print(f"p={r['p']}: {r['error']}")
    if not ok:
        return
    ps = [r["p"] for r in ok]
    head = f"{'step':<18}" + "".join(f"{'p=' + format(p, ','):>22}" for p in ps)
    pairs = list(zip(ok, ok[1:]))
    head += "".join(f"{'x/10x ' + format(a['p'], ',') + '->' + format(b['p'], ','):>22}" for a, b in pairs)
    print(
        f"tasks: {', '.join(format(r['tasks'], ',') for r in ok)}; "
        f"TaskExecutors: {', '.join(format(r['executors'], ',') for r in ok)}"
    )
    print("seconds (peak RSS MiB at the end of the step)")
    print(head)
    for step in STEPS:
        row = f"{step:<18}"
        for r in ok:
            seconds, mib = r["steps"][step]
            row += f"{seconds:>12.3f} s {mib:>6.0f} MiB"
        for a, b in pairs:
            row += f"{growth(a['steps'][step][0], b['steps'][step][0], b['p'] / a['p']):>22}"
        print(row)
    row = f"{'total':<18}"
    totals = [sum(s for s, _ in r["steps"].values()) for r in ok]
    peaks = [max(m for _, m in r["steps"].values()) for r in ok]
    for seconds, mib in zip(totals, peaks):
        row += f"{seconds:>12.3f} s {mib:>6.0f} MiB"
    for (a, b), (ta, tb) in zip(pairs, zip(totals, totals[1:])):
        row += f"{growth(ta, tb, b['p'] / a['p']):>22}"
    print(row)
    print()
    print("wire (MiB)")
    print(f"{'':<18}" + "".join(f"{'p=' + format(p, ','):>22}" for p in ps))
    for key, label in (
        ("deploy_bytes", "deploy calls"),
        ("max_executor_bytes", "largest call"),
        ("object_store_bytes", "put once"),
    ):
        print(f"{label:<18}" + "".join(f"{r['wire'].get(key, 0) / 2**20:>22.2f}" for r in ok))
    print(f"{'input channels':<18}" + "".join(f"{r['wire']['channels']:>22,}" for r in ok))
    print()
    print("a TaskExecutor's deploy call (unpickle, load offloaded parts), seconds")
    print(f"{'':<18}" + "".join(f"{'p=' + format(p, ','):>22}" for p in ps))
    print(f"{'slowest executor':<18}" + "".join(f"{r['wire']['executor_max_s']:>22.4f}" for r in ok))
    print(f"{'all executors':<18}" + "".join(f"{r['wire']['executor_sum_s']:>22.3f}" for r in ok))


def print_transport(runs: list[dict]) -> None:
    ok = [r for r in runs if "error" not in r]
    for r in runs:
        if "error" in r:
            print(f"executors={r['p']}: {r['error']}")
    if not ok:
        return
    print("one TaskExecutor of the job (1 slot each: 3 tasks), with all its remote channels and readers open")
    print(f"{'':<26}" + "".join(f"{'executors=' + format(r['executors'], ','):>18}" for r in ok))
    for key in (
        "tasks",
        "peer handles",
        "outbound connections",
        "inbound connections",
        "remote channels",
        "remote readers",
        "partition requests sent",
    ):
        print(f"{key:<26}" + "".join(f"{r[key]:>18,}" for r in ok))
    for key in ("allocated MiB", "allocated KiB per peer", "resident MiB", "resident KiB per peer"):
        print(f"{key:<26}" + "".join(f"{r[key]:>18.2f}" if key in r else f"{'-':>18}" for r in ok))


def measure_transport(executors: int, limit_gb: float, timeout: float) -> dict:
    """The transport table's column for ``executors``: allocations from a traced run, the
    resident set from an untraced one (each in its own process)."""
    out = measure(executors, 1, limit_gb, timeout, transport="traced")
    if "error" not in out:
        resident = measure(executors, 1, limit_gb, timeout, transport="resident")
        if "error" in resident:
            return resident
        out.update(resident)
    return out


def main(argv: Optional[list] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--parallelism", default="100,1000,5000", help="comma-separated parallelisms")
    parser.add_argument("--slots", type=int, default=1, help="slots per TaskExecutor")
    parser.add_argument("--limit-gb", type=float, default=8.0, help="address-space limit per run (0: none)")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per run")
    parser.add_argument("--json", help="also write the measurements to this file")
    parser.add_argument(
        "--transport", default="100,250,500,1000", help="TaskExecutor counts for the transport table ('': none)"
    )
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--transport-child", choices=("traced", "resident"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child is not None:
        _child(args.child, args.slots, args.limit_gb, args.transport_child or "")
        return 0
    runs = []
    for p in (int(x) for x in args.parallelism.split(",") if x):
        runs.append(measure(p, args.slots, args.limit_gb, args.timeout))
    print_tables(runs)
    transport = []
    for n in (int(x) for x in args.transport.split(",") if x):
        transport.append(measure_transport(n, args.limit_gb, args.timeout))
    if transport:
        print()
        print_transport(transport)
    if args.json:
        Path(args.json).write_text(json.dumps({"graph": runs, "transport": transport}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
