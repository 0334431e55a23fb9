"""Fine-grained resources per slot sharing group (issue 47, item 1): a group's profile becomes the
Ray resources of its TaskExecutors, a group asking for a resource runs only where it is, and a
request no node can hold fails the job at once, naming the group and the resource.

The profile -> Ray resources mapping, the placement of profiled slots and the satisfiability
check are tested as pure functions; the end-to-end part runs once on a two-node
``ray.cluster_utils.Cluster`` (one node declaring a GPU and a custom resource ``accel``, one
without) in a child process (a Ray of its own, apart from the session's local Ray), and each
test asserts one part of its report.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from raylink.api import StreamExecutionEnvironment
from raylink.api.slot_sharing_group import MemorySize, SlotSharingGroup
from raylink.graph.execution_graph import build_execution_graph
from raylink.runtime.job.resource_profile import (
    Verdict,
    assign_with_profiles,
    autoscaler_could_add,
    placement_verdict,
    ray_resources,
    unsatisfiable,
)
from raylink.tests.runtime_jobs import make_env

MIB = 1 << 20


# -- the mapping ------------------------------------------------------------------------------------
def test_a_profile_becomes_cpus_memory_gpus_and_custom_resources():
    group = (
        SlotSharingGroup.builder("inference")
        .set_cpu_cores(1.5)
        .set_task_heap_memory_mb(256)
        .set_task_off_heap_memory(MemorySize.of_mebi_bytes(64))
        .set_managed_memory_mb(128)
        .set_external_resource("GPU", 1)
        .set_external_resource("accel", 0.5)
        .build()
    )
    assert ray_resources(group) == {"CPU": 1.5, "memory": (256 + 64 + 128) * MIB, "GPU": 1.0, "accel": 0.5}


def test_flink_s_lower_case_gpu_is_a_ray_gpu_and_heap_alone_is_the_memory():
    group = SlotSharingGroup.builder("g").set_cpu_cores(2).set_task_heap_memory_mb(100).set_external_resource("gpu", 2)
    assert ray_resources(group.build()) == {"CPU": 2.0, "memory": 100 * MIB, "GPU": 2.0}


def test_a_group_without_a_profile_asks_for_nothing_of_its_own():
    assert ray_resources(SlotSharingGroup.builder("plain").build()) == {}
    assert ray_resources(None) == {}


# -- satisfiable or not -----------------------------------------------------------------------------
NODES = [
    {"CPU": 1.0, "memory": 1024.0 * MIB, "node:10.0.0.1": 1.0},
    {"CPU": 2.0, "memory": 512.0 * MIB, "GPU": 1.0, "accel": 1.0},
]


def test_a_request_fitting_one_node_is_satisfiable():
    assert unsatisfiable({"CPU": 2.0, "GPU": 1.0, "accel": 0.5}, NODES) is None
    assert unsatisfiable({"CPU": 1.0, "memory": 1000.0 * MIB}, NODES) is None


def test_a_resource_no_node_has_is_named():
    reason = unsatisfiable({"CPU": 1.0, "tpu": 1.0}, NODES)
    assert reason == "no node has resource 'tpu'"


def test_more_cpus_than_any_one_node_is_named_even_when_the_cluster_has_them_in_total():
    reason = unsatisfiable({"CPU": 3.0}, NODES)  # 3 CPUs in the cluster, at most 2 on one node
    assert reason == "CPU=3 asked, at most 2 on one node"


def test_resources_that_exist_only_on_different_nodes_are_not_satisfiable_together():
    reason = unsatisfiable({"memory": 1000.0 * MIB, "GPU": 1.0}, NODES)
    assert reason is not None and "no single node" in reason and "GPU=1" in reason


def test_an_autoscaler_node_type_holding_the_request_could_add_it():
    node_types = [{"CPU": 4.0, "GPU": 2.0}]
    assert unsatisfiable({"CPU": 4.0, "GPU": 1.0}, NODES) is not None
    assert autoscaler_could_add({"CPU": 4.0, "GPU": 1.0}, node_types)
    assert not autoscaler_could_add({"CPU": 4.0, "tpu": 1.0}, node_types)
    assert not autoscaler_could_add({"CPU": 1.0}, [])
    # a node type declaring no memory gets its machine's: memory alone never rules it out
    assert autoscaler_could_add({"CPU": 1.0, "memory": 1e12}, [{"CPU": 2.0}])
    assert not autoscaler_could_add({"CPU": 1.0, "memory": 1e12}, [{"CPU": 2.0, "memory": 1e9}])


def test_the_verdict_fails_only_what_neither_a_node_nor_the_autoscaler_can_hold():
    fits = {"CPU": 1.0, "accel": 1.0}
    assert placement_verdict(fits, NODES, None) == placement_verdict(fits, NODES, []) == Verdict(None, False)
    big = {"CPU": 4.0, "GPU": 1.0}
    no_autoscaler = placement_verdict(big, NODES, None)
    assert not no_autoscaler.waits_for_autoscaler
    assert no_autoscaler.reason == "CPU=4 asked, at most 2 on one node; no Ray autoscaler runs"
    assert placement_verdict(big, NODES, [{"CPU": 8.0, "GPU": 4.0}]) == Verdict(None, True)
    too_big = placement_verdict(big, NODES, [{"CPU": 2.0, "GPU": 4.0}])
    assert too_big.reason is not None and "no node type of Ray's autoscaler" in too_big.reason
    # an autoscaler that does not publish its node types: the request waits for it (bounded)
    assert placement_verdict(big, NODES, []) == Verdict(None, True)


# -- placement of profiled slots --------------------------------------------------------------------
def _graph(profiled_parallelism: int = 2):
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(3)
    group = SlotSharingGroup.builder("gpu").set_cpu_cores(1).set_task_heap_memory_mb(64).build()
    source = env.from_collection(list(range(10)))
    inferred = source.map(lambda x: x).set_parallelism(profiled_parallelism).slot_sharing_group(group)
    inferred = inferred.map(lambda x: x + 1).set_parallelism(profiled_parallelism).slot_sharing_group("gpu")
    inferred.map(lambda x: x).slot_sharing_group("default").add_sink(lambda v: None)
    return build_execution_graph(env.get_job_graph("placement")), env


@pytest.mark.parametrize("mode", ["auto", "task", "slot"])
def test_each_slot_of_a_profiled_group_gets_one_executor_of_its_own(mode):
    graph, env = _graph()
    assert env.get_slot_sharing_groups()["gpu"].has_resources()
    placed = assign_with_profiles(graph, mode, 1, 2, {"gpu"})
    by_group: dict = {}
    for ejv in graph.job_vertices:
        for ev in ejv.vertices:
            executor = placed.executor_of[(ejv.id, ev.subtask_index)]
            group = ejv.job_vertex.slot_sharing_group
            assert placed.group_of_executor[executor] == (group if group == "gpu" else None)
            by_group.setdefault(group, set()).add((ev.subtask_index, executor))
    gpu = by_group.pop("gpu")
    # subtask i of both vertices of the group share the group's executor i, and no other subtask runs there
    assert len({i for i, _ in gpu}) == len(gpu) == 2  # each subtask index on one executor, two executors
    assert {e for _, e in gpu}.isdisjoint({e for pairs in by_group.values() for _, e in pairs})
    assert placed.group_of_executor.count("gpu") == 2 and placed.count == len(placed.group_of_executor)
    assert placed.group_of_executor[: placed.count - 2] == [None] * (placed.count - 2)  # default ones first


# -- on a two-node Ray cluster ----------------------------------------------------------------------
CLUSTER_SCRIPT = """
import json, time
import ray
from ray.cluster_utils import Cluster
from raylink.api import StreamExecutionEnvironment
from raylink.api.slot_sharing_group import SlotSharingGroup
from raylink.actors.ray_actors import TASK_EXECUTOR_NAMESPACE as NAMESPACE
from raylink.runtime.rest.job_views import MetricsSnapshot, vertex_details

N = 200
cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
accel_node = cluster.add_node(num_cpus=2, num_gpus=1, resources={"accel": 1})
cluster.wait_for_nodes()
ray.init(address=cluster.address)
report = {"accel_node": accel_node.node_id}


def node_of(x):
    import ray
    return (x, ray.get_runtime_context().get_node_id())


def env_of(parallelism):
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(parallelism)
    return env


try:
    env = env_of(2)
    inference = (
        SlotSharingGroup.builder("inference").set_cpu_cores(0.5).set_task_heap_memory_mb(64)
        .set_external_resource("GPU", 0.5).set_external_resource("accel", 0.5).build()
    )
    tagged = env.from_collection(list(range(N))).map(node_of).name("infer").slot_sharing_group(inference)
    out = tagged.map(lambda t: (t[0], t[1], node_of(0)[1])).name("plain").slot_sharing_group("plain")
    out.add_sink(lambda v: None)
    client = env.execute_async("placed")
    report["finished"] = client.wait(120)
    report["status"] = str(client.get_job_status())
    report["executor_nodes"] = {
        e: (g, client.locations[e]["node_id"]) for e, g in zip(client.executor_ids, client.executor_groups)
    }
    views = {}
    for ejv in client.execution_graph.job_vertices:
        view = vertex_details(client, ejv, MetricsSnapshot([]))
        views[ejv.name] = {"resources": view["resources"], "hosts": [s["host"] for s in view["subtasks"]]}
    report["views"] = views
    report["node_ips"] = sorted({n["NodeManagerAddress"] for n in ray.nodes() if n["Alive"]})

    env = env_of(2)
    tagged = env.from_collection(list(range(N))).map(node_of).slot_sharing_group(inference)
    rows = sorted(tagged.map(lambda t: (t[0], t[1], node_of(0)[1])).slot_sharing_group("plain").execute_and_collect())
    report["values_exact"] = [r[0] for r in rows] == list(range(N))
    report["inference_nodes"] = sorted({r[1] for r in rows})
    report["plain_nodes"] = sorted({r[2] for r in rows})

    def fails(group, name):
        env = env_of(1)
        env.from_collection([1, 2, 3]).map(lambda x: x).slot_sharing_group(group).add_sink(lambda v: None)
        t0 = time.monotonic()
        try:
            env.execute(name)
            return {"error": "", "seconds": time.monotonic() - t0}
        except Exception as exc:
            return {"error": f"{type(exc).__name__}: {exc}", "seconds": time.monotonic() - t0}

    tpu = SlotSharingGroup.builder("tpu-group").set_cpu_cores(0.1).set_task_heap_memory_mb(16)
    report["no_such_resource"] = fails(tpu.set_external_resource("tpu_v5", 1).build(), "tpu")
    big = SlotSharingGroup.builder("big-group").set_cpu_cores(3).set_task_heap_memory_mb(16).build()
    report["too_many_cpus"] = fails(big, "big")
    deadline = time.monotonic() + 30  # ray.kill is asynchronous: the last job's names go soon after
    while True:
        left = [a for a in ray.util.list_named_actors(all_namespaces=True) if a["namespace"] == NAMESPACE]
        if not left or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    report["executors_left"] = left
finally:
    print(json.dumps(report))
    ray.shutdown()
    cluster.shutdown()
"""


@pytest.fixture(scope="module")
def cluster_report(tmp_path_factory):
    """Runs :data:`CLUSTER_SCRIPT` once for the module's cluster tests."""
    script = tmp_path_factory.mktemp("resources") / "cluster.py"
    script.write_text(CLUSTER_SCRIPT)
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS" and not k.startswith("RAYLINK_")}
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=280, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.slow
@pytest.mark.multinode
@pytest.mark.timeout(320)  # the first one starts the module's cluster
def test_the_group_asking_for_a_gpu_and_a_custom_resource_runs_only_on_the_node_declaring_them(cluster_report):
    report = cluster_report
    assert report["finished"] and report["status"] == "FINISHED", report
    assert report["values_exact"], report
    assert report["inference_nodes"] == [report["accel_node"]], report
    placed = report["executor_nodes"]
    assert {node for group, node in placed.values() if group == "inference"} == {report["accel_node"]}, placed
    assert sum(1 for group, _ in placed.values() if group == "inference") == 2, placed  # one per slot
    # the groups without a profile ran too (anywhere: on the nodes of the cluster)
    assert set(report["plain_nodes"]) <= {node for _, node in placed.values()} | {report["accel_node"]}


@pytest.mark.slow
@pytest.mark.multinode
@pytest.mark.timeout(320)  # the first one starts the module's cluster
def test_the_rest_vertex_view_shows_each_vertex_s_resources_and_hosts(cluster_report):
    views = cluster_report["views"]
    named = {name.split(" ")[0]: view for name, view in views.items()}  # "plain -> Sink: ..." (chained)
    infer = named["infer"]
    assert infer["resources"] == {"profile": True, "CPU": 0.5, "memory": 64 * MIB, "GPU": 0.5, "accel": 0.5}
    assert named["plain"]["resources"]["profile"] is False and named["plain"]["resources"]["CPU"] > 0
    hosts = {h for view in views.values() for h in view["hosts"]}
    assert hosts and hosts <= set(cluster_report["node_ips"]), (hosts, cluster_report["node_ips"])


@pytest.mark.slow
@pytest.mark.multinode
@pytest.mark.timeout(320)  # the first one starts the module's cluster
def test_a_resource_no_node_has_fails_the_job_at_once_naming_group_and_resource(cluster_report):
    failed = cluster_report["no_such_resource"]
    assert "UnsatisfiableResourcesError" in failed["error"], failed
    assert "'tpu-group'" in failed["error"] and "'tpu_v5'" in failed["error"], failed
    assert failed["seconds"] < 10, failed  # no wait for a placement (60 s)


@pytest.mark.slow
@pytest.mark.multinode
@pytest.mark.timeout(320)  # the first one starts the module's cluster
def test_more_cpus_than_any_node_has_fails_at_once_naming_group_and_cpus(cluster_report):
    failed = cluster_report["too_many_cpus"]
    assert "UnsatisfiableResourcesError" in failed["error"], failed
    assert "'big-group'" in failed["error"] and "CPU=3 asked, at most 2 on one node" in failed["error"], failed
    assert failed["seconds"] < 10, failed
    assert cluster_report["executors_left"] == [], cluster_report["executors_left"]


def test_a_group_only_the_autoscaler_could_hold_says_so_while_it_waits_then_fails_naming_it(ray_session, monkeypatch):
    """On the session's one-node Ray, with an autoscaler whose node type has ``tpu`` (its
    published node types stand in; no node with ``tpu`` ever comes): the job waits, a line says
    it waits for the autoscaler for that group, and the wait ends with an error naming it."""
    import logging

    from raylink.actors import ray_executor

    monkeypatch.setattr(ray_executor, "_autoscaler_node_types", lambda: [{"CPU": 4.0, "tpu": 1.0}])
    monkeypatch.setattr(ray_executor, "AUTOSCALER_PLACEMENT_TIMEOUT_S", 1.5)
    monkeypatch.setattr(ray_executor, "AUTOSCALER_LINE_EVERY_S", 0.5)
    lines: list[str] = []

    class Lines(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(record.getMessage())

    handler = Lines(level=logging.INFO)
    before = set(ray_session.util.placement_group_table())  # earlier tests' groups are theirs
    logger = logging.getLogger("raylink")
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        env = make_env("ray", 1)
        tpu = SlotSharingGroup.builder("tpu-group").set_cpu_cores(0.1).set_task_heap_memory_mb(16)
        env.from_collection([1, 2]).map(lambda x: x).slot_sharing_group(
            tpu.set_external_resource("tpu", 1).build()
        ).add_sink(lambda v: None)
        with pytest.raises(RuntimeError) as info:
            env.execute("waits for a tpu node")
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    waiting = [line for line in lines if "waits for Ray's autoscaler" in line]
    assert waiting and "'tpu-group'" in waiting[0] and "tpu=1" in waiting[0], (lines, str(info.value))
    assert "Ray's autoscaler added no node for slot sharing group 'tpu-group'" in str(info.value)
    # the job's placement groups are released (Ray removes them asynchronously)
    deadline = time.monotonic() + 30
    while True:
        left = {i: pg["state"] for i, pg in ray_session.util.placement_group_table().items() if i not in before}
        if all(state == "REMOVED" for state in left.values()) or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert all(state == "REMOVED" for state in left.values()), left
