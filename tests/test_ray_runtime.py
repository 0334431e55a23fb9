"""The runtime on real Ray actors: remote channels, credit-based back pressure, failures."""

from __future__ import annotations

import collections
import json
import os
import subprocess
import sys
import textwrap
import time

import cloudpickle
import pytest
import ray

from raylink.actors.ray_executor import ensure_ray
from raylink.api import Configuration, StreamExecutionEnvironment
from raylink.api.functions import SourceFunction
from raylink.runtime.client.job_result import JobExecutionException

pytestmark = pytest.mark.timeout(120)

# Test modules are not importable inside Ray workers: ship their functions by value.
for _pickler in (cloudpickle, ray.cloudpickle):
    _pickler.register_pickle_by_value(sys.modules[__name__])


@pytest.fixture(scope="module", autouse=True)
def ray_runtime(ray_session):
    ensure_ray()
    yield


def ray_env(parallelism: int) -> StreamExecutionEnvironment:
    env = StreamExecutionEnvironment.get_execution_environment(Configuration())
    env.set_parallelism(parallelism)
    return env


def alive_task_executors(client) -> int:
    """How many of the job's TaskExecutor actors still answer a call."""
    alive = 0
    for handle in client.handles.values():
        try:
            ray.get(handle.location.remote(), timeout=10)
            alive += 1
        except (ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError):
            pass
    return alive


def task_executors_gone(client, timeout: float = 30.0) -> bool:
    """Whether every TaskExecutor actor of the ended job stops answering within ``timeout``
    seconds: the job kills them as it ends, and Ray's kill takes effect asynchronously
    (a live actor's answer paces the next check)."""
    deadline = time.monotonic() + timeout
    while alive_task_executors(client):
        if time.monotonic() >= deadline:
            return False
    return True


LINES = [f"w{i % 7} w{i % 3} w{i % 11} w{i % 5}" for i in range(400)]


def split(line):
    return [(w, 1) for w in line.split()]


def expected_rolling_counts():
    seen = collections.Counter()
    out = []
    for line in LINES:
        for w in line.split():
            seen[w] += 1
            out.append((w, seen[w]))
    return sorted(out)


@pytest.mark.parametrize("placement", ["auto", "task", "slot"])
@pytest.mark.parametrize("parallelism", [1, 2, 3, 4])
def test_word_count_over_several_task_executors(parallelism, placement):
    import ray

    env = ray_env(parallelism)
    if placement != "auto":  # auto is the default
        env.configuration.set_string("raylink.task-placement", placement)
    # released as the job ends, not kept for a next job (that: tests/test_runtime_warm_executors.py)
    env.configuration.set_string("resourcemanager.taskmanager-timeout", "0")
    counts = env.from_collection(LINES).flat_map(split).key_by(lambda kv: kv[0]).sum(1)
    it = counts.execute_and_collect()
    assert sorted(it) == expected_rolling_counts()
    result = it.job_execution_result
    executors = {m["executor"] for m in result.task_metrics}
    tasks = {m["task"] for m in result.task_metrics}
    # slot: Flink's placement, one process per slot (the default slot sharing group: p slots);
    # task: one process per subtask; auto: one per subtask while they fit the CPUs, else the
    # slots, spread over at least one process per CPU
    cpus = int(ray.cluster_resources()["CPU"])
    auto = len(tasks) if len(tasks) <= cpus else max(parallelism, cpus)
    assert len(executors) == {"slot": parallelism, "task": len(tasks), "auto": auto}[placement]
    if parallelism > 1:  # the keyed exchange crossed actors through remote channels
        assert sum(s["remoteBuffersSent"] for s in result.executor_stats) > 0
    assert task_executors_gone(it.job_client)


def test_task_executors_take_the_clusters_inline_limit_and_set_their_own_only_above_it():
    """The session's Ray was started with raylink's system config: its GCS says so, and a
    TaskExecutor needs no runtime env (which would cost a fresh worker process) unless its
    batches exceed what the cluster inlines."""
    from raylink.actors.ray_executor import _executor_runtime_env, cluster_system_config
    from raylink.actors.ray_transport import RAY_SYSTEM_CONFIG, inline_call_limit

    limit = RAY_SYSTEM_CONFIG["max_direct_call_object_size"]
    assert cluster_system_config()["max_direct_call_object_size"] == limit
    assert _executor_runtime_env(1 << 20) is None
    bigger = 2 * limit
    assert _executor_runtime_env(bigger) == {
        "env_vars": {"RAY_max_direct_call_object_size": str(inline_call_limit(bigger))}
    }


def test_chain_union_side_output_and_rebalance_on_ray():
    from raylink.api import OutputTag
    from raylink.api.functions import ProcessFunction

    odd = OutputTag("odd")

    class Split(ProcessFunction):
        def process_element(self, value, ctx):
            yield (odd, value) if value % 2 else value

    env = ray_env(3)
    main = env.from_sequence(1, 3000).process(Split())
    side = main.get_side_output(odd).rebalance().map(lambda x: -x)
    result = sorted(main.union(side).filter(lambda x: x % 5).execute_and_collect())
    expected = sorted(x if x % 2 == 0 else -x for x in range(1, 3001) if x % 5)
    assert result == expected


def test_back_pressure_is_bounded_by_credit():
    """A slow sink in another TaskExecutor stops the source within its credit."""
    env = ray_env(1)
    env.configuration.set_integer("taskmanager.memory.segment-size", 1024)
    # batches of 4 buffers: the channel keeps credit for two (8 <= Flink's 2 exclusive + 8 floating)
    env.configuration.set_integer("raylink.network.max-batch-bytes", 4 * 1024)
    payload = "x" * 100

    def slow_sink(_value):
        time.sleep(0.0005)  # the user function is slow; the test itself never sleeps

    (
        env.from_sequence(1, 6000)
        .slot_sharing_group("source")
        .map(lambda i: (i, payload))
        .add_sink(slow_sink)
        .slot_sharing_group("sink")
    )
    result = env.execute("back pressure")
    source = next(m for m in result.task_metrics if m["task"].startswith("Source"))
    sink = next(m for m in result.task_metrics if m["task"].startswith("Sink"))
    assert source["executor"] != sink["executor"]
    assert sink["numRecordsIn"] == 6000
    # the credit bound held: never more buffers queued for the channel than it granted
    assert 0 < sink["maxBuffersInFlightPerChannel"] <= sink["creditPerChannel"] == 2 + 8
    # the source spent most of its life waiting for output buffers
    assert source["backPressuredTimeMsPerSecond"] > 500
    # memory stayed flat: the source's output pool is fixed; a source step may overdraw
    # it by about two buffers (10 buffers + overdraft <= 15)
    assert source["outPoolUsage"] <= 1.5


def test_buffers_debloat_behind_a_slow_consumer_and_stay_whole_behind_a_fast_one():
    """Flink's buffer debloating: a remote gate asks for buffers holding ~1 s of its work."""
    env = ray_env(1)

    def slow_sink(_value):
        time.sleep(0.0002)  # ~5k records/s at most

    (
        env.from_sequence(1, 12_000)
        .slot_sharing_group("source")
        .map(lambda i: (i, "x" * 20))
        .add_sink(slow_sink)
        .slot_sharing_group("sink")
    )
    result = env.execute("slow consumer")
    source = next(m for m in result.task_metrics if m["task"].startswith("Source"))
    sink = next(m for m in result.task_metrics if m["task"].startswith("Sink"))
    assert sink["numRecordsIn"] == 12_000
    # <= 5k records/s of ~25 bytes: a second of it spread over the gate's 64 buffers is ~2 KiB
    assert sink["debloatedBufferSize"] <= 4 * 1024
    assert source["numBytesOut"] / source["numBuffersOut"] <= 4 * 1024

    env = ray_env(1)
    (
        env.from_sequence(1, 100_000)
        .slot_sharing_group("source")
        .map(lambda i: (f"w{i % 100}", "x" * 256))
        .key_by(lambda kv: kv[0])
        .reduce(lambda _a, b: b)
        .slot_sharing_group("keyed")
        .add_sink(lambda _v: None)
    )
    result = env.execute("fast consumer")
    keyed = next(m for m in result.task_metrics if m["task"].startswith("Keyed"))
    assert keyed["numRecordsIn"] == 100_000
    # even at 20k records/s of ~270 bytes (a loaded 2-core box), a second of it
    # spread over 64 buffers is ~84 KiB: above a whole 32 KiB segment
    assert keyed["debloatedBufferSize"] == 32 * 1024  # whole segments


class Endless(SourceFunction):
    def __init__(self):
        self.running = True

    def run(self, ctx):
        i = 0
        while self.running:
            ctx.collect(i)
            i += 1

    def cancel(self):
        self.running = False


def test_cancel_stops_an_unbounded_job_within_5s():
    env = ray_env(2)
    env.add_source(Endless()).map(lambda x: x + 1).rebalance().add_sink(lambda v: None)
    client = env.execute_async("endless")
    deadline = time.monotonic() + 30
    while not any(m["numRecordsOut"] > 0 for m in client.get_metrics() if "Source" in m["task"]):
        assert time.monotonic() < deadline, "the job never produced anything"
    started = time.monotonic()
    client.cancel()
    assert client.wait(5.0), "job did not stop within 5 s"
    assert time.monotonic() - started < 5.0
    assert client.get_job_status() == "CANCELED"
    assert task_executors_gone(client)


def test_killed_task_executor_fails_the_job_naming_the_lost_task():
    env = ray_env(2)
    env.add_source(Endless()).slot_sharing_group("a").rebalance().map(lambda x: x).slot_sharing_group("b").add_sink(
        lambda v: None
    )
    client = env.execute_async("victim")
    victim = client.executor_ids[-1]
    lost_tasks = client.tasks_on(victim)
    ray.kill(client.handles[victim], no_restart=True)
    killed = time.monotonic()
    assert client.wait(10.0), "job did not fail within 10 s of losing a TaskExecutor"
    assert time.monotonic() - killed < 10.0
    assert client.get_job_status() == "FAILED"
    with pytest.raises(JobExecutionException) as info:
        client.get_job_execution_result(timeout=1)
    message = str(info.value)
    assert victim in message and lost_tasks[0] in message
    assert task_executors_gone(client)


def test_user_exception_on_ray_names_the_operator():
    env = ray_env(2)

    def explode(x):
        if x == 77:
            raise KeyError("no such thing")
        return x

    env.from_sequence(1, 200).rebalance().map(explode).name("exploding map").add_sink(lambda v: None)
    client = env.execute_async("explodes")
    with pytest.raises(JobExecutionException) as info:
        client.get_job_execution_result(timeout=60)
    assert "exploding map" in str(info.value)
    assert "KeyError" in str(info.value)
    assert isinstance(info.value.__cause__.__cause__, KeyError)  # the cause survived the actor boundary
    assert task_executors_gone(client)


TWO_NODE_SCRIPT = textwrap.dedent(
    """
    import collections, json, ray
    from ray.cluster_utils import Cluster
    from raylink.api import StreamExecutionEnvironment
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    cluster.add_node(num_cpus=1)
    cluster.wait_for_nodes()
    ray.init(address=cluster.address)
    try:
        env = StreamExecutionEnvironment.get_execution_environment()
        env.set_parallelism(2)
        words = [f"k{i % 13}" for i in range(5000)]
        counts = env.from_collection(words).map(lambda w: (w, 1)).key_by(lambda kv: kv[0]).sum(1)
        it = counts.execute_and_collect()
        got = sorted(it)
        seen = collections.Counter(); expected = []
        for w in words:
            seen[w] += 1; expected.append((w, seen[w]))
        res = it.job_execution_result
        report = {
            "ok": got == sorted(expected),
            "nodes": sorted({loc["node_id"] for loc in res.locations.values()}),
            "cluster_nodes": len([n for n in ray.nodes() if n["Alive"]]),
            "remote": sum(s["remoteBuffersSent"] for s in res.executor_stats),
        }
        # losing a node fails a running job within seconds, naming the tasks it hosted
        from raylink.api.functions import SourceFunction

        class Endless(SourceFunction):
            def __init__(self):
                self.running = True
            def run(self, ctx):
                i = 0
                while self.running:
                    ctx.collect(i)
                    i += 1
            def cancel(self):
                self.running = False

        env = StreamExecutionEnvironment.get_execution_environment()
        env.set_parallelism(2)
        env.add_source(Endless()).rebalance().map(lambda x: x).add_sink(lambda v: None)
        client = env.execute_async("node loss")
        worker = cluster.list_all_nodes()[1]
        worker_id = worker.node_id
        on_worker = [e for e, loc in client.locations.items() if loc["node_id"] == worker_id]
        cluster.remove_node(worker)
        import time
        t0 = time.monotonic()
        report["failed_in_time"] = client.wait(10.0)
        report["fail_seconds"] = time.monotonic() - t0
        report["status"] = client.get_job_status()
        try:
            client.get_job_execution_result(timeout=1)
            report["error"] = ""
        except Exception as exc:
            report["error"] = str(exc)
        report["lost_executor_named"] = bool(on_worker) and any(e in report["error"] for e in on_worker)
        print(json.dumps(report))
    finally:
        ray.shutdown()
        cluster.shutdown()
    """
)


@pytest.mark.slow
@pytest.mark.multinode
def test_two_node_cluster_runs_subtasks_on_both_nodes_and_fails_on_node_loss(tmp_path):
    script = tmp_path / "two_nodes.py"
    script.write_text(TWO_NODE_SCRIPT)
    env = dict(os.environ)
    env.pop("RAY_ADDRESS", None)
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=110, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["ok"]
    assert report["cluster_nodes"] == 2
    assert len(report["nodes"]) == 2, report
    assert report["remote"] > 0
    assert report["failed_in_time"] and report["status"] == "FAILED", report
    assert report["lost_executor_named"], report


def test_execute_and_collect_streams_records_of_an_unbounded_job():
    """Records reach the driver while the job runs; the limit cancels the job."""
    env = ray_env(2)
    stream = env.add_source(Endless()).rebalance().map(lambda x: x * 2)
    with stream.execute_and_collect(limit=500) as results:
        got = list(results)
    assert len(got) == 500
    assert all(x % 2 == 0 for x in got)
    assert results.job_client.wait(10), "the job was not cancelled after the limit"
    assert results.job_client.get_job_status() == "CANCELED"
    assert task_executors_gone(results.job_client)


def test_task_executor_processes_collect_the_young_generation_less_often():
    code = (
        "import gc; from raylink.runtime.process_tuning import tune_gc; before = gc.get_threshold(); "
        "tune_gc(50000); print(before[0], gc.get_threshold()[0], gc.get_freeze_count() > 0)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.split() == ["700", "50000", "True"]


def switch_interval(_):
    import sys

    return sys.getswitchinterval()


def test_task_executors_hand_the_gil_over_after_the_configured_switch_interval():
    for interval, expected in ((None, 0.001), ("3 ms", 0.003)):  # raylink's default, then a setting
        conf = Configuration()
        if interval:
            conf.set_string("raylink.taskmanager.switch-interval", interval)
        env = StreamExecutionEnvironment.get_execution_environment(conf)
        out = list(env.from_collection([0]).map(switch_interval).execute_and_collect())
        assert out == [pytest.approx(expected)], interval


def pid_and_cpus(value):
    return value % 2, os.getpid(), tuple(sorted(os.sched_getaffinity(0)))


@pytest.mark.skipif(
    not hasattr(os, "sched_setaffinity") or len(os.sched_getaffinity(0)) < 2, reason="pinning: Linux, 2+ CPUs"
)
def test_a_task_executor_running_two_tasks_runs_their_threads_on_one_cpu():
    """Slot placement at p=2 puts a source and a map subtask in each TaskExecutor: both threads
    of one process report the same single CPU; with the option off, any CPU."""
    for pin in ("true", "false"):
        conf = Configuration().set_string("raylink.task-placement", "slot")
        conf.set_string("raylink.taskmanager.pin-task-threads", pin)
        env = StreamExecutionEnvironment.get_execution_environment(conf)
        env.set_parallelism(2)
        rows = set(env.from_sequence(0, 199).rebalance().map(pid_and_cpus).execute_and_collect())
        by_process = collections.defaultdict(set)
        for _, pid, cpus in rows:
            by_process[pid].add(cpus)
        assert len(by_process) == 2, rows  # two TaskExecutors, both map subtasks reported
        if pin == "true":
            assert all(len(seen) == 1 and len(next(iter(seen))) == 1 for seen in by_process.values()), by_process
        else:
            assert all(len(next(iter(seen))) >= 2 for seen in by_process.values()), by_process


def _emitted() -> dict:
    """Records a TaskExecutor process emitted, by id: kept in ``sys`` (the one namespace
    both tasks' by-value functions share), so no id is reused while the job runs."""
    return sys.__dict__.setdefault("_raylink_test_emitted", {})


def emit_tracked(value):
    record = (value % 7, value) if value < 20_000 else [value % 7, value]  # runs of each
    _emitted()[id(record)] = record
    return record


def received_as_emitted(record):
    return record[1], type(record).__name__, _emitted().get(id(record)) is record, os.getpid()


def test_a_reader_in_the_writer_s_task_executor_gets_immutable_records_as_the_objects_emitted():
    """Slot placement at p=2: each TaskExecutor runs a source subtask and a keyed subtask, so
    half the keyed exchange stays in one process. Tuples of scalars for a reader there arrive
    as the very objects emitted (not encoded); lists are copied, as between processes; every
    record arrives once."""
    conf = Configuration().set_string("raylink.task-placement", "slot")
    env = StreamExecutionEnvironment.get_execution_environment(conf)
    env.set_parallelism(2)
    rows = list(
        env.from_sequence(0, 39_999)
        .map(emit_tracked)
        .key_by(lambda r: r[0])
        .map(received_as_emitted)
        .execute_and_collect()
    )
    assert sorted(v for v, *_ in rows) == list(range(40_000))
    assert len({pid for *_, pid in rows}) == 2
    assert not [v for v, kind, same, _ in rows if kind == "list" and same]  # lists: copies
    tuples = [same for _, kind, same, _ in rows if kind == "tuple"]
    assert any(tuples) and not all(tuples), (sum(tuples), len(tuples))  # in-process ones shared, remote decoded
