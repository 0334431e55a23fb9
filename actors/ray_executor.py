"""``execution.target = "ray"`` (the default): a job's subtasks on TaskExecutor actors.

The JobMaster (this driver-side object) connects to Ray (``RAY_ADDRESS`` /
``ray.init()`` conventions, else starts a local Ray), assigns slots (slot sharing
groups respected), places one TaskExecutor actor per ``taskmanager.numberOfTaskSlots``
slots in a SPREAD placement group so a job covers every node (PACK with
``raylink.placement-strategy: pack``, so a scale-in leaves nodes Ray's autoscaler can
remove), deploys every
subtask, starts them, and long-polls the executors for task state changes. A rescale to more
TaskExecutors first reserves the extra ones' resources in a placement group of their own and
waits for it while the job runs on (``reserve_resources``). A slot
of a slot sharing group with a resource profile gets a TaskExecutor of exactly those
Ray resources (:mod:`raylink.runtime.job.resource_profile`); a profile no node (nor a
node type Ray's autoscaler publishes) can hold fails the job before anything is placed. A
lost actor or node fails the job with the tasks it hosted; every actor and the
placement group are released when the job fails or is cancelled, and when it finishes unless
the program keeps them for its next job (below). When the Ray head's GCS
stops answering, the JobMaster says so in one line, with the job's last completed checkpoint
(the job survives only a head that comes back with GCS fault tolerance), and again once it answers.

When a session cluster runs on the Ray cluster (``raylink cluster start``,
:mod:`raylink.actors.session_cluster`) and ``raylink.session.enabled`` is true, the
JobMaster leases warm TaskExecutors from it instead (no placement group, no
process start) and gives them back to its pool when the job ends or restarts. Without one, a
finished job's TaskExecutors and placement group are kept for the program's next job for
``resourcemanager.taskmanager-timeout`` (:mod:`raylink.actors.warm_executors`).
"""

from __future__ import annotations

import copy
import json
import logging
import os
import queue
import threading
import time
from typing import Any, Callable, Optional

import cloudpickle
import ray
from ray.util.placement_group import placement_group, remove_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from raylink.actors.local_ray import listening, on_loopback, single_node_ray
from raylink.actors.ray_actors import TASK_EXECUTOR_NAMESPACE, TaskExecutorActor, task_executor_actor_name
from raylink.actors.ray_transport import RAY_SYSTEM_CONFIG, inline_call_limit
from raylink.actors.session_cluster import find_session
from raylink.actors.warm_executors import WARM_EXECUTORS, warm_key
from raylink.core.job_status import JobStatus
from raylink.core.options import ExecutionOptions, RaylinkOptions, ResourceManagerOptions, TaskManagerOptions
from raylink.errors import RaylinkError
from raylink.graph.execution_graph import build_execution_graph
from raylink.operators.print_channel import write_chunks
from raylink.runtime.client.job_result import JobExecutionResult
from raylink.runtime.client.python_dependencies import ray_runtime_env
from raylink.runtime.execution_state import ExecutionState
from raylink.runtime.job.deployment import TaskDeploymentDescriptorFactory, assign_slots, assign_task_executors
from raylink.runtime.job.high_availability import ha_enabled
from raylink.runtime.job.job_master import JobExecutor, JobMasterBase
from raylink.runtime.job.resource_profile import (
    UnsatisfiableResourcesError,
    assign_with_profiles,
    describe_request,
    placement_verdict,
    ray_resources,
)
from raylink.runtime.logging_setup import is_verbose, quiet_third_party_loggers, setup_logging

POLL_TIMEOUT_S = 0.5
#: how often the JobMaster checks that the Ray head's GCS answers, and after how long without
#: an answer it says so (one line)
GCS_CHECK_EVERY_S = 1.0
GCS_SILENT_S = 3.0
PLACEMENT_TIMEOUT_S = 60.0
#: how long a job waits for Ray's autoscaler to add a node a slot sharing group's resources need
AUTOSCALER_PLACEMENT_TIMEOUT_S = 600.0
#: the interval between two lines saying the job waits for the autoscaler
AUTOSCALER_LINE_EVERY_S = 10.0


class TaskExecutorLostError(RaylinkError, RuntimeError):
    """A TaskExecutor actor (or its node) died; names it, its node and the tasks it hosted."""


#: glibc malloc arenas in the processes of a Ray started here (its workers: the TaskExecutors).
#: With glibc's default (8 per core) each of a TaskExecutor's many threads leaves free memory
#: in an arena of its own and the RSS creeps up under a steady load (measured: 25-35 MiB/h
#: against 3-10 MiB/h with 2, the heap's free bytes 18-22 MiB against 3). A
#: ``MALLOC_ARENA_MAX`` already in the environment wins; a cluster started elsewhere
#: (``ray start``) needs it in the environment of its nodes.
MALLOC_ARENA_MAX = "2"


def init_ray(address: Optional[str] = None, **kwargs: Any) -> None:
    """``ray.init``; a Ray started here gets ``RAY_SYSTEM_CONFIG`` (transport
    batches travel inline in their calls) and :data:`MALLOC_ARENA_MAX`, and listens on
    loopback only (``RAY_ADDRESS=local`` or none running: it is this driver's alone; a Ray other
    machines join is started with ``ray start``); a Ray joined at a loopback address is reached
    there (:func:`~raylink.actors.local_ray.single_node_ray`). A running cluster keeps its settings.

    Quiet unless verbose (:mod:`raylink.runtime.logging_setup`): Ray's driver-side log lines
    (its start, its token-authentication notice) and the error messages its raylets push to the
    driver ("A worker died or was killed ...") go to the run's log file instead of the
    terminal; raylink reports a lost TaskExecutor itself, naming it and its tasks."""
    setup_logging()  # after ``import ray``, which gives Ray's logger a terminal handler
    kwargs.setdefault("logging_level", logging.DEBUG if is_verbose() else logging.INFO)
    kwargs.setdefault("log_to_driver", is_verbose())  # print() lines come with the task reports
    added = "MALLOC_ARENA_MAX" not in os.environ
    if added:  # inherited by the processes ray.init starts (its workers fork from the raylet)
        os.environ["MALLOC_ARENA_MAX"] = MALLOC_ARENA_MAX
    try:
        with single_node_ray(on_loopback(address)):  # a Ray of its own, or one on loopback: loopback only
            try:
                ray.init(address=address, _system_config=RAY_SYSTEM_CONFIG, **kwargs)
            except ValueError as exc:
                if "_system_config" not in str(exc):
                    raise
                ray.init(address=address, **kwargs)
    finally:
        if added:
            os.environ.pop("MALLOC_ARENA_MAX", None)
    if not is_verbose():
        quiet_third_party_loggers()  # ray.init may have configured its loggers again
        _route_ray_error_messages()


def _route_ray_error_messages() -> None:
    """Ray's driver prints the error messages its raylets publish (a worker killed, an actor
    that could not start) straight to stdout, prefixed ``(raylet)``; send them to the run's
    log file (``ray`` logger) instead. Ray looks the printer up per message by its module
    global, so replacing it takes effect at once."""
    worker_module = ray._private.worker
    if getattr(worker_module.print_to_stdstream, "_raylink_routed", False):
        return
    ray_log = logging.getLogger("ray.raylet_messages")

    def to_log_file(data: dict, ignore_prefix: bool = False) -> None:
        for line in data.get("lines", ()):
            ray_log.warning("(%s) %s", data.get("pid", "?"), line)

    to_log_file._raylink_routed = True  # type: ignore[attr-defined]
    worker_module.print_to_stdstream = to_log_file


def ensure_ray() -> None:
    """Connect to the cluster named by RAY_ADDRESS, else start (or reuse) a local Ray. The Ray
    workers' own output reaches this terminal only when verbose (``print()`` sinks' lines
    come through the JobMaster's task reports)."""
    if not ray.is_initialized():
        init_ray(os.environ.get("RAY_ADDRESS"), ignore_reinit_error=True, configure_logging=False)


def _upload_local_packages(env: dict) -> dict:
    """Local ``py_modules`` / ``working_dir`` paths become ``gcs://`` package URIs: Ray takes
    local paths only in ``ray.init``'s job-level runtime env, so this does the upload
    ``ray.init`` does for those (Ray's own helpers; each package once, by content hash)."""
    if not env.get("py_modules") and not env.get("working_dir"):
        return env
    from ray._private.runtime_env.py_modules import upload_py_modules_if_needed
    from ray._private.runtime_env.working_dir import upload_working_dir_if_needed

    try:
        scratch_dir = ray._private.worker.global_worker.node.get_runtime_env_dir_path()
    except AttributeError:  # no local node (Ray client)
        scratch_dir = None
    env = upload_py_modules_if_needed(env, include_gitignore=False, scratch_dir=scratch_dir)
    return upload_working_dir_if_needed(env, include_gitignore=False, scratch_dir=scratch_dir)


#: the system config of each Ray cluster this process connected to, by GCS address and cluster id
_CLUSTER_CONFIGS: dict[tuple, dict] = {}


def cluster_system_config() -> dict:
    """The system config the connected Ray cluster's head was started with (``ray start
    --system-config``, ``ray.init(_system_config=...)``), as its GCS serves it to every raylet
    (``GetInternalConfig``); ``{}`` when it cannot be read (Ray client). Read once per cluster."""
    try:
        worker = ray._private.worker.global_worker
        key = (worker.gcs_client.address, worker.gcs_client.cluster_id.hex())
    except Exception:  # noqa: BLE001 - not connected, or a Ray client
        return {}
    if key not in _CLUSTER_CONFIGS:
        from ray._private.grpc_utils import init_grpc_channel
        from ray.core.generated import gcs_service_pb2, gcs_service_pb2_grpc

        try:
            channel = init_grpc_channel(key[0])  # Ray's token authentication, TLS as Ray's own
            try:
                reply = gcs_service_pb2_grpc.InternalKVGcsServiceStub(channel).GetInternalConfig(
                    gcs_service_pb2.GetInternalConfigRequest(), timeout=10
                )
            finally:
                channel.close()
            _CLUSTER_CONFIGS[key] = json.loads(reply.config or "{}")
        except Exception:  # noqa: BLE001 - an unreadable config: the TaskExecutors set their own
            return {}
    return _CLUSTER_CONFIGS[key]


def _executor_runtime_env(max_batch_bytes: int, conf: Any = None) -> Optional[dict]:
    """The TaskExecutor actors' runtime environment: the job's Python dependencies
    (``add_python_file`` & co., :mod:`raylink.runtime.client.python_dependencies`) and, unless the
    cluster already inlines call arguments of a batch's size (a Ray raylink started, or any
    started with its system config), the per-actor inline limit. None when neither is needed (a
    runtime env costs a fresh worker process: seconds per TaskExecutor on a busy node)."""
    env = _upload_local_packages(ray_runtime_env(conf)) if conf is not None else {}
    limit = int(cluster_system_config().get("max_direct_call_object_size", 0) or 0)
    needed = inline_call_limit(max_batch_bytes)
    if limit < needed:
        env["env_vars"] = {"RAY_max_direct_call_object_size": str(needed)}
    return env or None


def _placement_ready(
    pg: Any,
    timeout: float,
    poll_s: float,
    say: Optional[Callable[[], None]] = None,
    say_every: int = 1,
    gone: Callable[[], bool] = lambda: False,
) -> bool:
    """Whether placement group ``pg`` was placed within ``timeout`` s: waited for ``poll_s`` at a
    time, ``say()`` after every ``say_every`` waits that did not place it (a progress line), given
    up early once ``gone()``."""
    deadline = time.monotonic() + timeout
    polls = 0
    while not gone():
        ready, _ = ray.wait([pg.ready()], timeout=max(0.0, min(poll_s, deadline - time.monotonic())))
        if ready:
            return True
        if time.monotonic() >= deadline:
            return False
        polls += 1
        if say is not None and polls % say_every == 0:
            say()
    return False


def _autoscaler_node_types() -> Optional[list[dict]]:
    """The resources of each node type Ray's autoscaler may still start, from the cluster config
    it publishes in the GCS (max_count 0 left out); None when none is published. Ray's v1
    monitor publishes no node types (and one runs on every cluster, even where it cannot add a
    node), so an autoscaler of that kind is not seen here: a request no node holds fails at once."""
    try:
        config = ray._private.state.state.get_cluster_config()
    except Exception:  # an older Ray
        return None
    if not config or not config.node_group_configs:
        return None
    return [dict(ngc.resources) for ngc in config.node_group_configs if ngc.max_count != 0 and ngc.resources]


class RayJobClient(JobMasterBase):
    """Flink's JobMaster + JobClient for a job on Ray actors."""

    def __init__(self, env: Any, job_name: Optional[str]) -> None:
        super().__init__(env, job_name)
        conf = self.configuration
        ensure_ray()
        slots = conf.get(TaskManagerOptions.NUM_TASK_SLOTS)  # checked: >= 1
        cpus = conf.get(TaskManagerOptions.CPU_CORES)
        memory = conf.get(TaskManagerOptions.TOTAL_PROCESS_MEMORY)
        self._slots = slots
        self._bundle = {"CPU": cpus} if cpus > 0 else {"CPU": 0.01}
        if memory > 0:
            self._bundle["memory"] = memory
        self.handles: dict[str, Any] = {}
        self._takes: dict[str, Any] = {}  # executor id -> its take_collected call in flight
        self._released = False
        self._pg: Any = None
        self._session: Any = None
        # fine-grained resources: slot sharing group -> the Ray resources of each of its TaskExecutors
        used = {ejv.job_vertex.slot_sharing_group for ejv in self.execution_graph.job_vertices}
        registered = env.get_slot_sharing_groups() if hasattr(env, "get_slot_sharing_groups") else {}
        self.group_resources: dict[str, dict] = {
            name: request for name, group in registered.items() if name in used and (request := ray_resources(group))
        }
        self.default_resources = dict(self._bundle)
        # a session's warm executors have the default bundle: a job with profiles starts its own
        if conf.get(RaylinkOptions.SESSION_ENABLED) and not self.group_resources:
            self._session = find_session()
        self._generation = 0  # deployments so far (a restart makes a new one)
        # a finished job's executors wait for the program's next job (not a JobMaster actor's:
        # a detached or highly available job's JobMaster ends with its job)
        self._keep_warm_s = conf.get(ResourceManagerOptions.TASK_MANAGER_TIMEOUT) / 1000.0
        if self._session is not None or not conf.get(ExecutionOptions.ATTACHED) or ha_enabled(conf):
            self._keep_warm_s = 0.0
        self._warm_key = ""
        self._spare_handles: list = []  # a warm set's executors this deployment does not run on
        self.reused_executors = False  # whether the latest deployment runs on a previous job's executors
        self._monitor: Optional[threading.Thread] = None
        self._head_watch: Optional[threading.Thread] = None
        self.executor_stats: list[dict] = []
        # the Ray resources the deployment's placement group holds (a warm set's: more than it runs on)
        self._pg_bundles: list[dict] = []
        self.locations: dict[str, dict] = {}
        self.last_heartbeats: dict[str, int] = {}  # executor id -> epoch ms of its last answer
        self.executor_slot_capacity: dict[str, int] = {}  # executor id -> the slots it offers
        try:
            self._deploy(self.restored_from)
        except BaseException:
            self._release_resources()
            raise

    def _plan(self, graph: Any) -> tuple[dict, int, list, dict, Any]:
        """Where ``graph``'s subtasks go: ``(executor_of, count, executor_groups, default_of,
        default_view)`` -- every subtask's TaskExecutor index, how many TaskExecutors, the slot
        sharing group of each (None: the default bundle; those come first), the default-bundle
        ones' subtasks, and the graph those run."""
        mode = self.configuration.get(RaylinkOptions.TASK_PLACEMENT)
        cores = max(1, int(ray.cluster_resources().get("CPU", 1)))
        if self.group_resources:  # a profiled group's slot: one TaskExecutor of its profile
            profiled = assign_with_profiles(graph, mode, self._slots, cores, set(self.group_resources))
            executor_of, count, graph = profiled.executor_of, profiled.count, profiled.default_view
            groups = list(profiled.group_of_executor)
        else:
            executor_of, count = assign_task_executors(graph, mode, self._slots, cores)
            groups = [None] * count
        defaults = groups.count(None)
        default_of = {key: i for key, i in executor_of.items() if i < defaults}
        return executor_of, count, groups, default_of, graph

    def _bundles_of(self, default_of: dict, groups: list, graph: Any) -> list[dict]:
        """The Ray resources of each TaskExecutor of a plan (:meth:`_plan`), in order."""
        defaults = groups.count(None)
        mode = self.configuration.get(RaylinkOptions.TASK_PLACEMENT)
        bundles = self._bundles(mode, default_of, defaults, graph) if defaults else []
        return bundles + [dict(self.group_resources[g]) for g in groups[defaults:]]

    def reserve_resources(self, parallelism: dict[str, int]) -> Any:
        """Before a rescale stops the job: the Ray resources its TaskExecutors at ``parallelism``
        ({job vertex id: parallelism}) need beyond those it holds, reserved in a placement group
        of their own and waited for while the job runs on -- Ray's autoscaler adds a node for
        them meanwhile (Flink's ``AdaptiveScheduler`` waits for the slots while Executing).
        None when the job needs no more (or leases a session's executors); ``RuntimeError`` when
        they cannot be placed within the placement timeout (nothing held then)."""
        if self._session is not None or not self._pg_bundles:
            return None
        # the running JobGraph stays as it is: a copy whose vertices (copies too) take the new
        # parallelism; their edges name the running vertices, which the build reads by id only
        job_graph = copy.copy(self.execution_graph.job_graph)
        job_graph.vertices = {vid: copy.copy(v) for vid, v in job_graph.vertices.items()}
        for vid, p in parallelism.items():
            job_graph.get_vertex(vid).parallelism = p
        _executor_of, _count, groups, default_of, graph = self._plan(build_execution_graph(job_graph))
        extra = self._bundles_of(default_of, groups, graph)
        for bundle in self._pg_bundles:  # what the running deployment's placement group holds comes back
            if bundle in extra:
                extra.remove(bundle)
        if not extra:
            return None
        pg = placement_group(extra, strategy=self.configuration.get(RaylinkOptions.PLACEMENT_STRATEGY).upper())
        timeout = AUTOSCALER_PLACEMENT_TIMEOUT_S if _autoscaler_node_types() else PLACEMENT_TIMEOUT_S
        placed = _placement_ready(
            pg,
            timeout,
            poll_s=1.0,  # a cancel of the job ends the wait
            say=lambda: logging.getLogger("raylink").info(
                "job '%s' waits for Ray to place %d more TaskExecutors (%s) before it rescales",
                self.job_name,
                len(extra),
                describe_request(extra[0]),
            ),
            say_every=int(AUTOSCALER_LINE_EVERY_S),
            gone=lambda: self._cancel_requested or self._done.is_set(),
        )
        if placed:
            return pg
        remove_placement_group(pg)
        raise RuntimeError(
            f"Ray placed no {len(extra)} more TaskExecutors ({describe_request(extra[0])} each) within {timeout:.0f} s"
            if not (self._cancel_requested or self._done.is_set())
            else "the job ended while its TaskExecutors were placed"
        )

    def release_reservation(self, reservation: Any) -> None:
        """Give back what :meth:`reserve_resources` reserved (the new deployment places there)."""
        if reservation is not None:
            try:
                remove_placement_group(reservation)
            except Exception:  # noqa: BLE001 - Ray already gone
                pass

    def _deploy(self, restore: Any) -> None:
        """New TaskExecutor actors (one SPREAD placement group) for every current attempt."""
        conf = self.configuration
        self._generation += 1
        executor_of, count, self.executor_groups, default_of, graph = self._plan(self.execution_graph)
        self.executor_ids = [f"te-{self.job_id[:6]}-{self._generation}-{i}" for i in range(count)]
        placement = {key: self.executor_ids[i] for key, i in executor_of.items()}
        whole_slots = default_of == assign_slots(graph, self._slots)[0]
        # Flink's slots: a TaskExecutor placed whole slots offers taskmanager.numberOfTaskSlots;
        # one started for some tasks' shares of slots offers just those; one of a profiled group one
        self.executor_slot_capacity = (
            {e: self._slots if g is None else 1 for e, g in zip(self.executor_ids, self.executor_groups)}
            if whole_slots
            else {}
        )
        self.last_heartbeats = {}
        self.handles = {}
        self._takes = {}
        settings = conf.to_dict()
        batch = conf.get(RaylinkOptions.MAX_BATCH_BYTES)
        if self._session is not None:
            leased = ray.get(self._session.lease.remote(self.job_id, count, _executor_runtime_env(batch, conf)))
            self._bind_executors([h for h, _ in leased], settings, batch)
            self._deploy_tasks(placement, settings, restore, registered=True)
            return
        bundles = self._bundles_of(default_of, self.executor_groups, graph)
        runtime_env = _executor_runtime_env(batch, conf)
        self._warm_key = warm_key(runtime_env)
        warm = WARM_EXECUTORS.take(self._warm_key, bundles)  # a set that does not fit is released here
        self.reused_executors = warm is not None
        if warm is not None:  # the program's previous job's executors: no process starts
            self._pg, self._pg_bundles = warm.placement_group, warm.bundles
            self._spare_handles = warm.handles[count:]  # held idle, given back with the set
            self._bind_executors(warm.handles[:count], settings, batch)
            self._deploy_tasks(placement, settings, restore, registered=True)
            return
        waits_for_autoscaler = self._check_group_resources()
        self._pg_bundles, self._spare_handles = bundles, []
        self._pg = placement_group(bundles, strategy=conf.get(RaylinkOptions.PLACEMENT_STRATEGY).upper())
        self._wait_placed(count, bundles[0], waits_for_autoscaler)
        for index, executor_id in enumerate(self.executor_ids):
            custom = {k: v for k, v in bundles[index].items() if k not in ("CPU", "GPU", "memory")}
            self.handles[executor_id] = TaskExecutorActor.options(
                name=task_executor_actor_name(self.job_id, executor_id),  # raylink debug memory finds it
                namespace=TASK_EXECUTOR_NAMESPACE,
                num_cpus=bundles[index]["CPU"],
                num_gpus=bundles[index].get("GPU", 0),  # Ray sets the actor's CUDA_VISIBLE_DEVICES
                resources=custom or None,
                max_concurrency=32,
                runtime_env=runtime_env,
                scheduling_strategy=PlacementGroupSchedulingStrategy(
                    placement_group=self._pg, placement_group_bundle_index=index
                ),
            ).remote(executor_id, settings, batch, self.job_id)
        self.locations = dict(zip(self.executor_ids, ray.get([h.location.remote() for h in self.handles.values()])))
        self._deploy_tasks(placement, settings, restore, registered=False)

    def _bind_executors(self, handles: list, settings: dict, batch: int) -> None:
        """Bind running executors (a session's leased ones, the program's warm ones) to this
        deployment's executor ids, in order, with the job's settings and their peers."""
        self.handles = dict(zip(self.executor_ids, handles))
        peers = ray.put(self.handles)  # the handles once on the wire, not once per executor
        binds = [h.bind.remote(e, settings, batch, peers, self.job_id) for e, h in self.handles.items()]
        self.locations = dict(zip(self.executor_ids, ray.get(binds)))

    def _deploy_tasks(self, placement: dict, settings: dict, restore: Any, registered: bool) -> None:
        """Deploy every current attempt on the executors in ``self.handles``."""
        with self._lock:
            self._set_all(ExecutionState.SCHEDULED)
        for ev in self.executions.values():
            ev.current_execution.assigned_location = placement[(ev.job_vertex.id, ev.subtask_index)]
        if not registered:
            peers = ray.put(self.handles)  # the handles once on the wire, not once per executor
            ray.get([h.register_peers.remote(peers) for h in self.handles.values()])
        # group descriptors shared by many subtasks are put once into the object store; the
        # factory holds their references until every executor has deployed (fetched them)
        factory = TaskDeploymentDescriptorFactory(
            self.job_id, self.execution_graph, placement, settings, self.checkpoint_storage, restore, offload=ray.put
        )
        per_executor: dict[str, list] = {e: [] for e in self.executor_ids}
        for tdd in factory.create_deployment_descriptors():
            per_executor[placement[(tdd.job_vertex_id, tdd.subtask_index)]].append(tdd)
        with self._lock:
            self._set_all(ExecutionState.DEPLOYING)
        ray.get([self.handles[e].deploy.remote(tdds) for e, tdds in per_executor.items()])
        del factory

    def _check_group_resources(self) -> list[str]:
        """Fail at once when a slot sharing group asks for resources no node of the cluster has
        (a TaskExecutor's resources must fit one node), unless a node type of Ray's autoscaler
        holds them: returns those groups (the job waits for the autoscaler, saying so)."""
        if not self.group_resources:
            return []
        nodes = [dict(n.get("Resources") or {}) for n in ray.nodes() if n.get("Alive")]
        autoscaler = _autoscaler_node_types()
        waiting = []
        for group, request in sorted(self.group_resources.items()):
            verdict = placement_verdict(request, nodes, autoscaler)
            if verdict.reason is not None:
                raise UnsatisfiableResourcesError(
                    f"job '{self.job_name}': slot sharing group {group!r} asks for {describe_request(request)} "
                    f"per TaskExecutor, which no node of the Ray cluster can hold ({verdict.reason})"
                )
            if verdict.waits_for_autoscaler:
                waiting.append(group)
        return waiting

    def _wait_placed(self, count: int, bundle: dict, waits_for_autoscaler: list[str]) -> None:
        """Wait for the placement group; while it waits for Ray's autoscaler, a line every
        :data:`AUTOSCALER_LINE_EVERY_S` says so (the job's progress line before it runs)."""
        timeout = AUTOSCALER_PLACEMENT_TIMEOUT_S if waits_for_autoscaler else PLACEMENT_TIMEOUT_S

        def say() -> None:
            logging.getLogger("raylink").info(
                "job '%s' waits for Ray's autoscaler to add a node for slot sharing group %s",
                self.job_name,
                ", ".join(f"{g!r} ({describe_request(self.group_resources[g])})" for g in waits_for_autoscaler),
            )

        if waits_for_autoscaler:
            placed = _placement_ready(self._pg, timeout, poll_s=AUTOSCALER_LINE_EVERY_S, say=say)
        else:
            placed = _placement_ready(self._pg, timeout, poll_s=timeout)
        if placed:
            return
        groups = ", ".join(repr(g) for g in waits_for_autoscaler)
        raise RuntimeError(
            f"could not place {count} TaskExecutors ({bundle} each) on the Ray cluster within {timeout:.0f} s"
            + (f" (Ray's autoscaler added no node for slot sharing group {groups})" if groups else "")
            + "; lower taskmanager.cpu.cores or the parallelism"
        )

    def _bundles(self, mode: str, executor_of: dict, count: int, graph: Any) -> list[dict]:
        """Ray resources of each default-bundle TaskExecutor (those running ``graph``'s
        vertices, the groups without a profile). A slot reserves ``taskmanager.cpu.cores`` (and
        the process memory); when a slot's tasks are spread over processes, each task takes
        an equal part of its slot's share and a process the sum of its tasks' parts, so a job
        reserves the same either way."""
        if mode == "slot" or executor_of == assign_slots(graph, self._slots)[0]:
            return [dict(self._bundle) for _ in range(count)]
        slot_of, _slots = assign_slots(graph, 1)
        sharing: dict[int, int] = {}
        for slot in slot_of.values():
            sharing[slot] = sharing.get(slot, 0) + 1
        totals: list[dict] = [{} for _ in range(count)]
        for key, executor in executor_of.items():
            share = sharing[slot_of[key]]
            for resource, amount in self._bundle.items():
                totals[executor][resource] = totals[executor].get(resource, 0) + amount / share
        return [
            {resource: amount if resource == "CPU" else int(amount) for resource, amount in total.items()}
            for total in totals
        ]

    def tasks_on(self, executor_id: str) -> list[str]:
        return sorted(
            ev.name for ev in self.executions.values() if ev.current_execution.assigned_location == executor_id
        )

    def start(self) -> "RayJobClient":
        self._job_running()
        self._start_tasks()
        self._start_checkpointing()
        return self

    def _watch_head(self) -> None:
        """One line when the Ray head's GCS stops answering for :data:`GCS_SILENT_S` (what
        happened, and where the job's last completed checkpoint is), one when it answers again:
        with Ray's GCS fault tolerance a restarted head resumes the cluster and the job goes on;
        without it Ray ends this process after ``RAY_gcs_rpc_server_reconnect_timeout_s``."""
        address = ray.get_runtime_context().gcs_address
        silent_since: Optional[float] = None
        said = False
        while not self._done.wait(GCS_CHECK_EVERY_S):
            if listening(address):
                if said:
                    logging.getLogger("raylink").warning(
                        "raylink: the Ray head's GCS at %s answers again (job '%s' goes on)", address, self.job_name
                    )
                silent_since, said = None, False
                continue
            now = time.monotonic()
            silent_since = now if silent_since is None else silent_since
            if not said and now - silent_since >= GCS_SILENT_S:
                said = True
                logging.getLogger("raylink").warning("%s", self._head_lost_line(address, now - silent_since))

    def _head_lost_line(self, address: str, silent_s: float) -> str:
        stats = self.get_checkpoint_statistics()
        latest = None if stats is None or stats.latest_completed is None else stats.latest_completed.external_path
        where = (
            f"its last completed checkpoint is {latest} (raylink run --from-savepoint {latest} resumes it)"
            if latest
            else "it has no completed checkpoint"
        )
        return (
            f"raylink: the Ray head's GCS at {address} has not answered for {silent_s:.0f} s: job '{self.job_name}' "
            f"({self.job_id}) goes on only if the cluster has GCS fault tolerance and the head comes back; {where}"
        )

    def _start_tasks(self) -> None:
        if self._head_watch is None:
            self._head_watch = threading.Thread(
                target=self._watch_head, name=f"JobMaster {self.job_id[:6]} head watch", daemon=True
            )
            self._head_watch.start()
        handles = dict(self.handles)
        ray.get([h.start.remote() for h in handles.values()])
        self._monitor = threading.Thread(
            target=self._monitor_loop,
            args=(self._generation, handles),
            name=f"JobMaster {self.job_id[:6]}",
            daemon=True,
        )
        self._monitor.start()

    def _monitor_loop(self, generation: int, handles: dict) -> None:
        """Long-polls one deployment's executors until the job ends or a restart replaces them.

        Each answer queues itself as it arrives (a done-callback on its reference), so an
        answer costs O(1) however many executors there are (a ``ray.wait`` over every
        executor's poll per answer would cost O(executors²) per poll interval)."""
        answers: queue.SimpleQueue = queue.SimpleQueue()

        def poll(executor_id: str) -> None:
            ref = handles[executor_id].next_events.remote(POLL_TIMEOUT_S)
            ref.future().add_done_callback(lambda _future: answers.put((executor_id, ref)))

        for executor_id in handles:
            poll(executor_id)
        while not self._done.is_set() and generation == self._generation:
            try:
                executor_id, ref = answers.get(timeout=POLL_TIMEOUT_S * 5)
            except queue.Empty:
                continue
            try:
                data = ray.get(ref)
                self.last_heartbeats[executor_id] = int(time.time() * 1000)  # it answered: alive now
            except Exception as exc:  # the actor (or its node) is gone
                if generation != self._generation or self._restarting:
                    return  # killed on purpose: a restart tears this deployment down
                node = self.locations.get(executor_id, {}).get("node_id", "?")
                lost = TaskExecutorLostError(
                    f"TaskExecutor {executor_id} on node {node[:12]} was lost "
                    f"({type(exc).__name__}); tasks: {', '.join(self.tasks_on(executor_id))}"
                )
                # the one terminal line of it (Ray's own "A worker died ..." goes to the log file)
                logging.getLogger("raylink").warning("%s", lost)
                self.fail(lost)
                return
            try:
                events, printed = cloudpickle.loads(data)
            except Exception as exc:  # e.g. an accumulator of a class the driver cannot load
                self.fail(
                    RuntimeError(
                        f"the reports of TaskExecutor {executor_id} could not be read "
                        f"in the driver: {type(exc).__name__}: {exc}"
                    )
                )
                return
            write_chunks(printed)  # print() lines on the driver's stdout, before the reports after them
            for event in events:
                self.on_task_event(event)
            if self._done.is_set():
                return
            poll(executor_id)

    # -- JobMasterBase hooks -----------------------------------------------------------------------------
    def _request_collected(self) -> None:
        hosted: dict[str, list] = {}
        for attempt_id in self._open_collectors:
            hosted.setdefault(self.executions[attempt_id].current_execution.assigned_location, []).append(attempt_id)
        for executor_id, attempt_ids in hosted.items():
            if executor_id not in self._takes:  # only this job's sinks: the executor may be pooled again
                self._takes[executor_id] = self.handles[executor_id].take_collected.remote(POLL_TIMEOUT_S, attempt_ids)

    def _take_collected(self, timeout: float) -> list[tuple[str, str, list, bool]]:
        """One long poll in flight per executor hosting an open collect sink (the next one is
        asked for as soon as one answers, before the reader works on these records)."""
        self._request_collected()
        if not self._takes:
            return []
        by_ref = {ref: e for e, ref in self._takes.items()}
        ready, _ = ray.wait(list(by_ref), num_returns=1, timeout=timeout)
        out: list = []
        for ref in ready:
            executor_id = by_ref[ref]
            del self._takes[executor_id]
            try:
                out.extend(cloudpickle.loads(ray.get(ref)))
            except Exception:  # the executor is gone (the job fails): its collect sinks ended
                out.extend(
                    (a, "", [], True)
                    for a in self._open_collectors
                    if self.executions[a].current_execution.assigned_location == executor_id
                )
        return out

    def _cancel_all_tasks(self) -> None:
        for handle in self.handles.values():
            try:
                handle.cancel.remote()
            except Exception:  # a dead actor: nothing to cancel
                pass

    def _trigger_checkpoint(self, checkpoint_id: int, timestamp: int, stop: Optional[str] = None) -> None:
        for handle in self.handles.values():
            handle.trigger_checkpoint.remote(checkpoint_id, timestamp, stop)

    def _notify_checkpoint(self, checkpoint_id: int, complete: bool) -> None:
        for handle in self.handles.values():
            try:
                handle.notify_checkpoint.remote(checkpoint_id, complete)
            except Exception:  # a dead actor: a restart is coming
                pass

    def _release_resources(self) -> None:
        if self._released:
            return
        self._released = True
        if self._takes:  # records a collect sink already handed over must reach the reader
            ray.wait(list(self._takes.values()), num_returns=len(self._takes), timeout=2)
        if self.handles:
            refs = [h.stats.remote() for h in self.handles.values()]
            ready, _ = ray.wait(refs, num_returns=len(refs), timeout=2)
            for ref in ready:
                try:
                    self.executor_stats.append(ray.get(ref))
                except Exception:
                    pass
        self._release_executors()

    def _release_executors(self) -> None:
        """Kill the deployment's TaskExecutor actors and free their placement group (give them
        back to the session cluster's pool instead when leased from it)."""
        if self._session is not None:
            if self.handles:
                try:
                    ray.get(
                        self._session.release.remote(self.job_id, list(self.handles.values())),
                        timeout=PLACEMENT_TIMEOUT_S,
                    )
                except Exception:  # the session is gone (stopped): its executors died with it
                    pass
            return
        if self._released and self._keep_warm_s > 0 and self._status is JobStatus.FINISHED and self.handles:
            # the job ended: its executors wait for the program's next job (reset first)
            handles = [self.handles[e] for e in self.executor_ids] + self._spare_handles
            WARM_EXECUTORS.offer(self._warm_key, self._pg_bundles, self._pg, handles, self._keep_warm_s, self._quiesced)
            return
        for handle in [*self.handles.values(), *self._spare_handles]:
            try:
                ray.kill(handle, no_restart=True)
            except Exception:
                pass
        if self._pg is not None:
            try:
                remove_placement_group(self._pg)
            except Exception:
                pass

    def _quiesced(self, timeout_s: float = 10.0) -> None:
        """Returns once the job has ended and its monitor polls its executors no more."""
        self._done.wait(timeout_s)
        if self._monitor is not None and self._monitor is not threading.current_thread():
            self._monitor.join(timeout_s)

    def _live_metrics(self) -> list[dict]:
        refs = [h.metrics.remote() for h in self.handles.values()]
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=5)
        out: list[dict] = []
        for ref in ready:
            try:
                out.extend(ray.get(ref))
            except Exception:
                pass
        return out

    def get_job_execution_result(self, timeout: Optional[float] = None) -> JobExecutionResult:
        result = super().get_job_execution_result(timeout)
        result.executor_stats = list(self.executor_stats)
        result.locations = dict(self.locations)
        return result


#: registered for its ``execution.target`` through the ``raylink.executors`` entry points
EXECUTOR = JobExecutor(RayJobClient)
