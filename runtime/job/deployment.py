"""Flink's deployment descriptors: what the JobMaster sends a TaskExecutor per subtask (mirrors
``TaskDeploymentDescriptor`` with ``MaybeOffloaded`` / ``NonOffloaded`` / ``Offloaded``,
``ResultPartitionDeploymentDescriptor``, ``InputGateDeploymentDescriptor``,
``ShuffleDescriptorGroup`` and ``TaskDeploymentDescriptorFactory``).

``TaskDeploymentDescriptor`` = the vertex's chain (a graph-free copy of its
JobVertex), the subtask, the result partitions it produces
(``ResultPartitionDeploymentDescriptor``) and, per logical input, the partitions it
consumes and which TaskExecutor holds each producer (``InputGateDeploymentDescriptor``).
Built from the ExecutionGraph plus a placement ``{(job vertex id, subtask): executor id}``.

By group, as Flink does since FLINK-21110: a gate carries the ``ShuffleDescriptorGroup`` of
its ConsumedPartitionGroup and the subpartition it reads of each partition; a result
partition the consumer executors of its ConsumerVertexGroup. The factory builds each
group's descriptor once (its caches, keyed by group id) and every subtask reading the group
shares it, so the n consumers of an n-way ALL_TO_ALL edge cost O(n), not O(n²). A group
descriptor of at least ``offload_min_size`` entries -- and a vertex's chain (Flink's
``TaskInformation``) shared by at least that many subtasks -- is *offloaded* when the
factory has an ``offload`` function (the Ray JobMaster's ``ray.put``, in ``actors/``;
Flink: the blob server): put once, and the descriptors carry only its reference, so the
wire too carries it once, not once per TaskExecutor. A TaskExecutor loads what was
offloaded before it deploys (:func:`load_big_data`, Flink's
``TaskDeploymentDescriptor.loadBigData``), each distinct reference once per deploy call.
The restore handles of a vertex (every old subtask's, for each operator) are shared and
offloaded the same way.
"""

from __future__ import annotations

import dataclasses
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable, Generic, Iterable, Iterator, Optional, TypeVar, Union

from raylink.core.types import declared_flat_type
from raylink.graph.edge_manager import ConsumedPartitionGroup, ConsumerVertexGroup
from raylink.graph.execution_graph import ExecutionGraph, ExecutionVertex
from raylink.graph.job_graph import JobVertex
from raylink.graph.operator_spec import PartitionerSpec

T = TypeVar("T")

#: a group descriptor with this many entries or more (a vertex's chain: shared by this many
#: subtasks or more) is offloaded, when the factory can: below it, a copy in each
#: TaskExecutor's deploy call costs less than a put and a fetch (Flink offloads above
#: ``blob.offload.minsize``, 1 MiB; a group entry here is ~60 bytes)
OFFLOAD_MIN_SIZE = 64


@dataclass
class NonOffloaded(Generic[T]):
    """Flink's ``TaskDeploymentDescriptor.NonOffloaded``: the value travels in the descriptor."""

    value: T


@dataclass
class Offloaded:
    """Flink's ``TaskDeploymentDescriptor.Offloaded``: the value was put once into a store the
    TaskExecutors read (Ray's object store); the descriptor carries its ``key`` (unique per
    deployment and group) and the store's ``reference``."""

    key: str
    reference: Any


MaybeOffloaded = Union[NonOffloaded, Offloaded]


def _loaded(maybe: MaybeOffloaded, what: str) -> Any:
    if isinstance(maybe, NonOffloaded):
        return maybe.value
    raise RuntimeError(f"the {what} ({maybe.key}) is offloaded: load_big_data() before deploying the descriptor")


@dataclass
class ShuffleDescriptorGroup:
    """Flink's ``ShuffleDescriptorGroup``: the partitions of one ConsumedPartitionGroup, in
    order, and the TaskExecutor producing each (Flink's ``ShuffleDescriptor``: its location)."""

    partition_ids: list[str]
    producer_executors: list[str]

    def __len__(self) -> int:
        return len(self.partition_ids)


@dataclass
class ConsumerExecutors:
    """Where the subtasks of one ConsumerVertexGroup run: subpartition ``i`` is read on
    ``executors[i]`` (remote readers start with debloated buffers; local ones get objects)."""

    executors: list[str]

    def __len__(self) -> int:
        return len(self.executors)


@dataclass
class ResultPartitionDeploymentDescriptor:
    partition_id: str
    partition_type: str
    num_subpartitions: int
    edge_id: str
    partitioner: PartitionerSpec
    target_max_parallelism: int
    buffer_timeout: int
    target_name: str
    flat_records: Any = None  # the declared flat type (TypeInformation): the writer checks records against it
    #: the executor consuming each subpartition, shared by every partition of the ConsumerVertexGroup
    consumers: MaybeOffloaded = field(default_factory=lambda: NonOffloaded(ConsumerExecutors([])))

    @property
    def consumer_executors(self) -> list[str]:
        """The executor consuming each subpartition (once loaded)."""
        return _loaded(self.consumers, "consumer executors").executors


@dataclass
class InputChannelDeploymentDescriptor:
    """One channel of a gate: a view of the gate's shared ShuffleDescriptorGroup."""

    partition_id: str
    subpartition_index: int
    producer_executor: str


@dataclass
class InputGateDeploymentDescriptor:
    """One logical input (Flink's ``InputGateDeploymentDescriptor``): subpartition
    ``consumed_subpartition_index`` of every partition of a ConsumedPartitionGroup."""

    type_number: int
    consumed_result_id: str = ""
    consumed_partition_type: str = ""
    consumed_subpartition_index: int = 0
    #: the group's ShuffleDescriptorGroup, shared by every subtask reading the group
    shuffle_descriptors: MaybeOffloaded = field(default_factory=lambda: NonOffloaded(ShuffleDescriptorGroup([], [])))

    def get_shuffle_descriptors(self) -> ShuffleDescriptorGroup:
        return _loaded(self.shuffle_descriptors, "shuffle descriptors")

    @property
    def number_of_input_channels(self) -> int:
        return len(self.get_shuffle_descriptors())

    @property
    def channels(self) -> Iterator[InputChannelDeploymentDescriptor]:
        """One per consumed partition, in order (built on the TaskExecutor as it opens them)."""
        group = self.get_shuffle_descriptors()
        index = self.consumed_subpartition_index
        return (
            InputChannelDeploymentDescriptor(partition_id, index, producer)
            for partition_id, producer in zip(group.partition_ids, group.producer_executors)
        )


@dataclass
class TaskDeploymentDescriptor:
    job_id: str
    job_vertex_id: str
    #: the vertex's chain: a graph-free copy of its JobVertex (Flink's ``TaskInformation``),
    #: shared by the subtasks of the vertex
    task_information: MaybeOffloaded
    subtask_index: int
    attempt_number: int
    attempt_id: str
    produced_partitions: list[ResultPartitionDeploymentDescriptor]
    input_gates: list[InputGateDeploymentDescriptor]
    job_parameters: dict = field(default_factory=dict)
    #: where the task writes its checkpointed state (None: checkpointing is off)
    checkpoint_storage: Any = None
    #: the completed checkpoint the task starts from: {operator id: {old subtask: state handle}},
    #: shared by the subtasks of the vertex
    restore: MaybeOffloaded = field(default_factory=lambda: NonOffloaded({}))

    @property
    def job_vertex(self) -> JobVertex:
        """The vertex's chain (once loaded)."""
        return _loaded(self.task_information, "task information")

    @property
    def task_name(self) -> str:
        jv = self.job_vertex
        return f"{jv.name} ({self.subtask_index + 1}/{jv.parallelism})"

    @property
    def restore_handles(self) -> dict:
        """``{operator id: {old subtask: state handle}}`` to start from (once loaded)."""
        return _loaded(self.restore, "restore handles")

    def offloaded_parts(self) -> Iterator[tuple[Any, str]]:
        """``(holder, attribute)`` of every part that may be offloaded."""
        yield self, "task_information"
        for gate in self.input_gates:
            yield gate, "shuffle_descriptors"
        for partition in self.produced_partitions:
            yield partition, "consumers"
        yield self, "restore"

    def load_big_data(self, fetch: Callable[[list], list], cache: Optional[dict] = None) -> None:
        """Flink's ``loadBigData``: replace every offloaded part with its value; ``fetch`` gets
        the references not in ``cache`` (``{key: value}``, filled here) and returns their values."""
        load_big_data([self], fetch, cache)


def load_big_data(
    descriptors: Iterable[TaskDeploymentDescriptor], fetch: Callable[[list], list], cache: Optional[dict] = None
) -> None:
    """:meth:`TaskDeploymentDescriptor.load_big_data` for a whole deploy call: every distinct
    reference is fetched once, in a single ``fetch`` (Ray: one ``ray.get``)."""
    cache = {} if cache is None else cache
    parts = [(holder, name) for tdd in descriptors for holder, name in tdd.offloaded_parts()]
    missing: dict[str, Any] = {}
    for holder, name in parts:
        maybe = getattr(holder, name)
        if isinstance(maybe, Offloaded) and maybe.key not in cache:
            missing.setdefault(maybe.key, maybe.reference)
    if missing:
        cache.update(zip(missing, fetch(list(missing.values()))))
    loaded: dict[str, NonOffloaded] = {}
    for holder, name in parts:
        maybe = getattr(holder, name)
        if isinstance(maybe, Offloaded):
            value = loaded.get(maybe.key)
            if value is None:
                value = loaded[maybe.key] = NonOffloaded(cache[maybe.key])
            setattr(holder, name, value)


def detached_vertex(job_vertex: JobVertex) -> JobVertex:
    """A copy of the vertex without its graph links (cheap to ship to an actor)."""
    return dataclasses.replace(job_vertex, inputs=[], produced_data_sets=[])


class TaskDeploymentDescriptorFactory:
    """Flink's ``TaskDeploymentDescriptorFactory`` for one deployment (one placement) of
    ``graph``: builds the descriptors of its subtasks, each group's descriptor once.

    ``placement``: ``{(job vertex id, subtask): executor id}``; ``restore``: the
    ``CompletedCheckpoint`` every task starts from; ``offload``: puts a value into the store
    the TaskExecutors read and returns its reference (None: everything travels inline), for
    group descriptors of ``offload_min_size`` entries or more (default :data:`OFFLOAD_MIN_SIZE`).
    The caches (``shuffle_descriptors_cache`` by ConsumedPartitionGroup id,
    ``consumer_executors_cache`` by ConsumerVertexGroup id, ``task_information_cache`` and
    ``restore_cache`` by job vertex) hold what was built -- and keep what was offloaded
    referenced while the deployment runs.
    """

    def __init__(
        self,
        job_id: str,
        graph: ExecutionGraph,
        placement: dict[tuple[str, int], str],
        job_parameters: Optional[dict] = None,
        checkpoint_storage: Any = None,
        restore: Any = None,
        offload: Optional[Callable[[Any], Any]] = None,
        offload_min_size: Optional[int] = None,
    ) -> None:
        self.job_id = job_id
        self.graph = graph
        self.placement = placement
        self.job_parameters = dict(job_parameters or {})
        self.checkpoint_storage = checkpoint_storage
        self.restore = restore
        self.offload = offload
        self.offload_min_size = OFFLOAD_MIN_SIZE if offload_min_size is None else offload_min_size
        #: names this deployment's offloaded values (a TaskExecutor caches by it)
        self.deployment_id = uuid.uuid4().hex
        self.shuffle_descriptors_cache: dict[str, MaybeOffloaded] = {}
        self.consumer_executors_cache: dict[str, MaybeOffloaded] = {}
        self.restore_cache: dict[str, MaybeOffloaded] = {}
        self.task_information_cache: dict[str, MaybeOffloaded] = {}
        self.num_offloaded = 0

    def _maybe_offload(self, key: str, value: Any, size: int) -> MaybeOffloaded:
        if self.offload is None or size < self.offload_min_size:
            return NonOffloaded(value)
        self.num_offloaded += 1
        return Offloaded(f"{self.deployment_id}/{key}", self.offload(value))

    def shuffle_descriptors(self, group: ConsumedPartitionGroup) -> MaybeOffloaded:
        """The group's ShuffleDescriptorGroup, built (and offloaded) on first use."""
        key = group.group_id
        cached = self.shuffle_descriptors_cache.get(key)
        if cached is None:
            placement = self.placement
            # partition n of a result is produced by subtask n of the result's producer
            producer = self.graph.results[group.intermediate_data_set_id].producer.id
            value = ShuffleDescriptorGroup(
                [str(partition_id) for partition_id in group],
                [placement[(producer, n)] for n in group.partition_numbers],
            )
            cached = self.shuffle_descriptors_cache[key] = self._maybe_offload(key, value, len(value))
        return cached

    def consumer_executors(self, group: ConsumerVertexGroup) -> MaybeOffloaded:
        """Where the group's consumers run, built (and offloaded) on first use."""
        key = group.group_id
        cached = self.consumer_executors_cache.get(key)
        if cached is None:
            placement = self.placement
            value = ConsumerExecutors([placement[vertex_id] for vertex_id in group])
            cached = self.consumer_executors_cache[key] = self._maybe_offload(key, value, len(value))
        return cached

    def task_information(self, jv: JobVertex) -> MaybeOffloaded:
        """The vertex's graph-free copy, once per vertex; offloaded when at least
        ``offload_min_size`` subtasks share it."""
        cached = self.task_information_cache.get(jv.id)
        if cached is None:
            key = f"task/{jv.id}"
            cached = self.task_information_cache[jv.id] = self._maybe_offload(key, detached_vertex(jv), jv.parallelism)
        return cached

    def restore_handles(self, jv: JobVertex) -> MaybeOffloaded:
        """The vertex's operators' state handles of every old subtask, once per vertex."""
        cached = self.restore_cache.get(jv.id)
        if cached is None:
            restore = self.restore
            if restore is None:
                cached = NonOffloaded({})
            else:
                handles = {c.operator_id: dict(restore.operator_states.get(c.operator_id, {})) for c in jv.chain}
                size = sum(len(by_subtask) for by_subtask in handles.values())
                cached = self._maybe_offload(f"restore/{jv.id}", handles, size)
            self.restore_cache[jv.id] = cached
        return cached

    def create_deployment_descriptor(self, ev: ExecutionVertex) -> TaskDeploymentDescriptor:
        jv = ev.job_vertex.job_vertex
        timeouts = {c.node_id: c.buffer_timeout for c in jv.chain}
        out_types = {c.node_id: c.output_type for c in jv.chain}
        produced = []
        for partition in ev.produced_partitions:
            data_set = partition.result.data_set
            edge = data_set.stream_edge
            target = data_set.consumers[0].target
            (consumer_group,) = partition.get_consumer_vertex_groups()
            produced.append(
                ResultPartitionDeploymentDescriptor(
                    partition_id=partition.partition_id,
                    partition_type=data_set.result_partition_type,
                    num_subpartitions=len(consumer_group),
                    edge_id=edge.edge_id,
                    partitioner=edge.partitioner,
                    target_max_parallelism=target.max_parallelism,
                    buffer_timeout=timeouts.get(edge.source_id, 100),
                    target_name=target.name,
                    flat_records=declared_flat_type(
                        edge.output_tag.type_info if edge.output_tag is not None else out_types.get(edge.source_id)
                    ),
                    consumers=self.consumer_executors(consumer_group),
                )
            )
        gates = []
        vertex_id = ev.id
        for job_edge, group in zip(jv.inputs, ev.get_consumed_partition_groups()):
            gates.append(
                InputGateDeploymentDescriptor(
                    type_number=job_edge.type_number,
                    consumed_result_id=group.intermediate_data_set_id,
                    consumed_partition_type=group.result_partition_type,
                    consumed_subpartition_index=group.consumed_subpartition_index(vertex_id),
                    shuffle_descriptors=self.shuffle_descriptors(group),
                )
            )
        execution = ev.current_execution
        return TaskDeploymentDescriptor(
            job_id=self.job_id,
            job_vertex_id=jv.id,
            task_information=self.task_information(jv),
            subtask_index=ev.subtask_index,
            attempt_number=execution.attempt_number,
            attempt_id=execution.attempt_id,
            produced_partitions=produced,
            input_gates=gates,
            job_parameters=dict(self.job_parameters),
            checkpoint_storage=self.checkpoint_storage,
            restore=self.restore_handles(jv),
        )

    def create_deployment_descriptors(self) -> list[TaskDeploymentDescriptor]:
        """Descriptors for every subtask, producers before consumers (topological order)."""
        return [self.create_deployment_descriptor(ev) for ev in self.graph.all_vertices()]


def create_deployment_descriptors(
    job_id: str,
    graph: ExecutionGraph,
    placement: dict[tuple[str, int], str],
    job_parameters: dict | None = None,
    checkpoint_storage: Any = None,
    restore: Any = None,
    offload: Optional[Callable[[Any], Any]] = None,
) -> list[TaskDeploymentDescriptor]:
    """Descriptors for every subtask, producers before consumers (topological order);
    ``restore``: the ``CompletedCheckpoint`` every task starts from; ``offload``: see
    :class:`TaskDeploymentDescriptorFactory`."""
    factory = TaskDeploymentDescriptorFactory(
        job_id, graph, placement, job_parameters, checkpoint_storage, restore, offload=offload
    )
    return factory.create_deployment_descriptors()


def assign_slots(graph: ExecutionGraph, slots_per_executor: int) -> tuple[dict[tuple[str, int], int], int]:
    """Slot sharing: subtask i of every vertex of a group shares that group's slot i.

    Returns ``{(job vertex id, subtask): executor index}`` and the number of executors.
    Groups get consecutive slots; executors are filled ``slots_per_executor`` at a time.
    """
    group_sizes: dict[Any, int] = {}
    for ejv in graph.job_vertices:
        group = ejv.job_vertex.slot_sharing_group
        group_sizes[group] = max(group_sizes.get(group, 0), ejv.parallelism)
    offsets: dict[Any, int] = {}
    total = 0
    for group, size in group_sizes.items():
        offsets[group] = total
        total += size
    placement = {}
    for ejv in graph.job_vertices:
        offset = offsets[ejv.job_vertex.slot_sharing_group]
        for ev in ejv.vertices:
            placement[(ejv.id, ev.subtask_index)] = (offset + ev.subtask_index) // slots_per_executor
    return placement, -(-total // slots_per_executor)


def assign_task_executors(
    graph: ExecutionGraph, placement_mode: str, slots_per_executor: int, cores: int = 1
) -> tuple[dict[tuple[str, int], int], int]:
    """``{(job vertex id, subtask): executor index}`` and the number of TaskExecutors.

    ``"slot"``: Flink's placement (:func:`assign_slots`): a slot's subtasks share a process.
    ``"task"``: every subtask gets its own process. Python threads of one process share one
    core (the GIL), so Flink's default of a whole pipeline in one slot would run a pipeline
    on one core; separate processes let the stages of a pipeline use separate cores.
    ``"auto"`` (the default): as many processes as the job can keep busy on ``cores`` CPUs --
    one per subtask while there are no more subtasks than cores; else Flink's slots, dealt
    over ``cores`` processes when there are fewer slots than cores (subtasks round-robin in
    topological order, so consecutive stages land in different processes). More processes
    than cores would only time-share the cores, and every record between two processes
    crosses Ray.
    """
    if placement_mode == "slot":
        return assign_slots(graph, slots_per_executor)
    if placement_mode not in ("task", "auto"):
        raise ValueError(f"raylink.task-placement must be auto, task or slot, got {placement_mode!r}")
    keys = [(ejv.id, ev.subtask_index) for ejv in graph.job_vertices for ev in ejv.vertices]
    processes = len(keys)
    if placement_mode == "auto" and processes > cores:
        slot_placement, slots = assign_slots(graph, slots_per_executor)
        if slots >= cores:
            return slot_placement, slots
        processes = cores
    return {key: i % processes for i, key in enumerate(keys)}, processes
