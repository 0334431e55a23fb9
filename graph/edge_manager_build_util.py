"""Flink's ``EdgeManagerBuildUtil``: wires a consumer ExecutionJobVertex to the IntermediateResult
it reads, by groups (mirrors ``org.apache.flink.runtime.executiongraph.EdgeManagerBuildUtil``).

* ALL_TO_ALL: one ConsumedPartitionGroup with every partition, shared by every consumer
  subtask, and one ConsumerVertexGroup with every consumer, shared by every partition.
* POINTWISE, ``S`` partitions and ``T`` consumers:

  - ``S == T``: partition ``i`` and consumer ``i`` form single-member groups;
  - ``S > T`` (n:1): consumer ``i`` reads the partitions ``[i*S//T, (i+1)*S//T)`` as one
    ConsumedPartitionGroup; each of them has the single-consumer group of ``i``;
  - ``S < T`` (1:n): partition ``j`` feeds the consumers ``[ceil(j*T/S), ceil((j+1)*T/S))``
    as one ConsumerVertexGroup; each of them reads the single-partition group of ``j``.

Every group is registered with the graph's :class:`~raylink.graph.edge_manager.EdgeManager`;
the work and the memory are O(S + T) per edge, never O(S * T).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from raylink.graph.edge_manager import (
    ConsumedPartitionGroup,
    ConsumerVertexGroup,
    EdgeManager,
    ExecutionVertexID,
    IntermediateResultPartitionID,
)

if TYPE_CHECKING:  # pragma: no cover
    from raylink.graph.execution_graph import ExecutionJobVertex, ExecutionVertex, IntermediateResult

ALL_TO_ALL = "ALL_TO_ALL"
POINTWISE = "POINTWISE"


def compute_max_edges_to_target_execution_vertex(
    target_parallelism: int, source_parallelism: int, distribution_pattern: str
) -> int:
    """The most partitions one consumer subtask reads over an edge of ``distribution_pattern``."""
    if distribution_pattern == POINTWISE:
        return (source_parallelism + target_parallelism - 1) // target_parallelism
    if distribution_pattern == ALL_TO_ALL:
        return source_parallelism
    raise ValueError(f"Unrecognized distribution pattern {distribution_pattern!r}.")


def connect_vertex_to_result(
    vertex: "ExecutionJobVertex",
    intermediate_result: "IntermediateResult",
    distribution_pattern: str,
    edge_manager: EdgeManager,
) -> None:
    """Connect every subtask of ``vertex`` to the partitions of ``intermediate_result`` it reads."""
    if distribution_pattern == POINTWISE:
        _connect_pointwise(vertex.vertices, intermediate_result, edge_manager)
    elif distribution_pattern == ALL_TO_ALL:
        _connect_all_to_all(vertex.vertices, intermediate_result, edge_manager)
    else:
        raise ValueError(f"Unrecognized distribution pattern {distribution_pattern!r}.")


def _groups(
    intermediate_result: "IntermediateResult",
    partitions: range,
    consumer_job_vertex_id: str,
    consumers: range,
    edge_manager: EdgeManager,
) -> tuple[ConsumedPartitionGroup, ConsumerVertexGroup]:
    """A ConsumedPartitionGroup and the ConsumerVertexGroup reading it, linked to each other;
    the partition group registered with the EdgeManager."""
    partition_type = intermediate_result.result_partition_type
    consumed = ConsumedPartitionGroup(intermediate_result.id, partitions, len(consumers), partition_type)
    consumer_group = ConsumerVertexGroup(consumer_job_vertex_id, consumers, partition_type)
    consumed.consumer_vertex_group = consumer_group
    consumer_group.consumed_partition_group = consumed
    edge_manager.register_consumed_partition_group(consumed)
    return consumed, consumer_group


def _connect(
    task_vertices: "list[ExecutionVertex]",
    intermediate_result: "IntermediateResult",
    partitions: range,
    consumers: range,
    edge_manager: EdgeManager,
) -> None:
    """Consumers ``consumers`` read partitions ``partitions`` as one pair of groups."""
    job_vertex_id = task_vertices[0].job_vertex.id
    consumed, consumer_group = _groups(intermediate_result, partitions, job_vertex_id, consumers, edge_manager)
    data_set = intermediate_result.id
    for number in partitions:
        edge_manager.connect_partition_with_consumer_vertex_group(
            IntermediateResultPartitionID(data_set, number), consumer_group
        )
    for index in consumers:
        edge_manager.connect_vertex_with_consumed_partition_group(ExecutionVertexID(job_vertex_id, index), consumed)


def _connect_all_to_all(
    task_vertices: "list[ExecutionVertex]", intermediate_result: "IntermediateResult", edge_manager: EdgeManager
) -> None:
    partitions = range(len(intermediate_result.partitions))
    _connect(task_vertices, intermediate_result, partitions, range(len(task_vertices)), edge_manager)


def _connect_pointwise(
    task_vertices: "list[ExecutionVertex]", intermediate_result: "IntermediateResult", edge_manager: EdgeManager
) -> None:
    source_count = len(intermediate_result.partitions)
    target_count = len(task_vertices)
    if source_count == target_count:
        for i in range(source_count):
            _connect(task_vertices, intermediate_result, range(i, i + 1), range(i, i + 1), edge_manager)
    elif source_count > target_count:
        for index in range(target_count):
            start = index * source_count // target_count
            end = (index + 1) * source_count // target_count
            _connect(task_vertices, intermediate_result, range(start, end), range(index, index + 1), edge_manager)
    else:
        for number in range(source_count):
            start = (number * target_count + source_count - 1) // source_count
            end = ((number + 1) * target_count + source_count - 1) // source_count
            _connect(task_vertices, intermediate_result, range(number, number + 1), range(start, end), edge_manager)


__all__ = ["compute_max_edges_to_target_execution_vertex", "connect_vertex_to_result"]
