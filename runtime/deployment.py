"""Flink's deployment descriptors: what the JobMaster sends a TaskExecutor per subtask.

``TaskDeploymentDescriptor`` = the vertex's chain (a graph-free copy of its
JobVertex), the subtask, the result partitions it produces
(``ResultPartitionDeploymentDescriptor``) and, per logical input, the
subpartitions it consumes and which TaskExecutor holds each producer
(``InputGateDeploymentDescriptor``). Built from the ExecutionGraph plus a
placement ``{(job vertex id, subtask): executor id}``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from raylink.api.types import declared_flat_type
from raylink.graph.execution_graph import ExecutionGraph, ExecutionVertex
from raylink.graph.job_graph import JobVertex
from raylink.graph.operator_spec import PartitionerSpec


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
    #: the executor consuming each subpartition (remote ones start with debloated buffers)
    consumer_executors: list[str] = field(default_factory=list)


@dataclass
class InputChannelDeploymentDescriptor:
    partition_id: str
    subpartition_index: int
    producer_executor: str


@dataclass
class InputGateDeploymentDescriptor:
    type_number: int
    channels: list[InputChannelDeploymentDescriptor] = field(default_factory=list)


@dataclass
class TaskDeploymentDescriptor:
    job_id: str
    job_vertex: JobVertex
    subtask_index: int
    attempt_number: int
    attempt_id: str
    produced_partitions: list[ResultPartitionDeploymentDescriptor]
    input_gates: list[InputGateDeploymentDescriptor]
    job_parameters: dict = field(default_factory=dict)
    #: where the task writes its checkpointed state (None: checkpointing is off)
    checkpoint_storage: Any = None
    #: the completed checkpoint the task starts from: {operator id: {old subtask: state handle}}
    restore_handles: dict = field(default_factory=dict)

    @property
    def task_name(self) -> str:
        jv = self.job_vertex
        return f"{jv.name} ({self.subtask_index + 1}/{jv.parallelism})"


def detached_vertex(job_vertex: JobVertex) -> JobVertex:
    """A copy of the vertex without its graph links (cheap to ship to an actor)."""
    return dataclasses.replace(job_vertex, inputs=[], produced_data_sets=[])


def create_deployment_descriptor(
    job_id: str,
    ev: ExecutionVertex,
    placement: dict[tuple[str, int], str],
    job_parameters: dict | None = None,
    detached: dict[str, JobVertex] | None = None,
    checkpoint_storage: Any = None,
    restore: Any = None,
) -> TaskDeploymentDescriptor:
    jv = ev.job_vertex.job_vertex
    timeouts = {c.node_id: c.buffer_timeout for c in jv.chain}
    out_types = {c.node_id: c.output_type for c in jv.chain}
    produced = []
    for partition in ev.produced_partitions:
        data_set = partition.result.data_set
        edge = data_set.stream_edge
        target = data_set.consumers[0].target
        produced.append(
            ResultPartitionDeploymentDescriptor(
                partition_id=partition.partition_id,
                partition_type=data_set.result_partition_type,
                num_subpartitions=partition.number_of_subpartitions,
                edge_id=edge.edge_id,
                partitioner=edge.partitioner,
                target_max_parallelism=target.max_parallelism,
                buffer_timeout=timeouts.get(edge.source_id, 100),
                target_name=target.name,
                flat_records=declared_flat_type(
                    edge.output_tag.type_info if edge.output_tag is not None else out_types.get(edge.source_id)
                ),
                consumer_executors=[
                    placement[(c.target.job_vertex.id, c.target.subtask_index)]
                    for c in sorted(partition.consumers, key=lambda c: c.subpartition_index)
                ],
            )
        )
    gates = []
    for input_edges in ev.input_edges:
        if not input_edges:
            continue
        gate = InputGateDeploymentDescriptor(type_number=input_edges[0].job_edge.type_number)
        for e in input_edges:
            producer = e.source.producer
            gate.channels.append(
                InputChannelDeploymentDescriptor(
                    partition_id=e.source.partition_id,
                    subpartition_index=e.subpartition_index,
                    producer_executor=placement[(producer.job_vertex.id, producer.subtask_index)],
                )
            )
        gates.append(gate)
    if detached is not None:
        vertex = detached.setdefault(jv.id, detached_vertex(jv))
    else:
        vertex = detached_vertex(jv)
    execution = ev.current_execution
    return TaskDeploymentDescriptor(
        job_id=job_id,
        job_vertex=vertex,
        subtask_index=ev.subtask_index,
        attempt_number=execution.attempt_number,
        attempt_id=execution.attempt_id,
        produced_partitions=produced,
        input_gates=gates,
        job_parameters=dict(job_parameters or {}),
        checkpoint_storage=checkpoint_storage,
        restore_handles={}
        if restore is None
        else {config.operator_id: dict(restore.operator_states.get(config.operator_id, {})) for config in jv.chain},
    )


def create_deployment_descriptors(
    job_id: str,
    graph: ExecutionGraph,
    placement: dict[tuple[str, int], str],
    job_parameters: dict | None = None,
    checkpoint_storage: Any = None,
    restore: Any = None,
) -> list[TaskDeploymentDescriptor]:
    """Descriptors for every subtask, producers before consumers (topological order);
    ``restore``: the ``CompletedCheckpoint`` every task starts from."""
    detached: dict[str, JobVertex] = {}
    return [
        create_deployment_descriptor(job_id, ev, placement, job_parameters, detached, checkpoint_storage, restore)
        for ev in graph.all_vertices()
    ]


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
