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

from raylink.graph.edge_manager import (
    ConsumedPartitionGroup,
    ConsumerVertexGroup,
    EdgeManager,
    ExecutionVertexID,
    IntermediateResultPartitionID,
)

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
    consumer_vertex_id: str,
    consumer_count: int,
    result_id: str,
    partition_count: int,
    result_partition_type: str,
    distribution_pattern: str,
    edge_manager: EdgeManager,
) -> None:
    """Connect the ``consumer_count`` subtasks of the job vertex ``consumer_vertex_id`` to the
    ``partition_count`` partitions (of type ``result_partition_type``) of the intermediate result
    ``result_id`` they read over an edge of ``distribution_pattern``."""
    connect = _Connector(consumer_vertex_id, result_id, result_partition_type, edge_manager)
    if distribution_pattern == POINTWISE:
        _connect_pointwise(connect, partition_count, consumer_count)
    elif distribution_pattern == ALL_TO_ALL:
        connect(range(partition_count), range(consumer_count))
    else:
        raise ValueError(f"Unrecognized distribution pattern {distribution_pattern!r}.")


class _Connector:
    """Connects consumers of one job vertex to partitions of one intermediate result, a pair of
    groups at a time."""

    __slots__ = ("consumer_vertex_id", "result_id", "partition_type", "edge_manager")

    def __init__(self, consumer_vertex_id: str, result_id: str, partition_type: str, edge_manager: EdgeManager) -> None:
        self.consumer_vertex_id = consumer_vertex_id
        self.result_id = result_id
        self.partition_type = partition_type
        self.edge_manager = edge_manager

    def __call__(self, partitions: range, consumers: range) -> None:
        """Consumers ``consumers`` read partitions ``partitions`` as one pair of groups: a
        ConsumedPartitionGroup and the ConsumerVertexGroup reading it, linked to each other, the
        partition group registered with the EdgeManager."""
        edge_manager = self.edge_manager
        consumed = ConsumedPartitionGroup(self.result_id, partitions, len(consumers), self.partition_type)
        consumer_group = ConsumerVertexGroup(self.consumer_vertex_id, consumers, self.partition_type)
        consumed.consumer_vertex_group = consumer_group
        consumer_group.consumed_partition_group = consumed
        edge_manager.register_consumed_partition_group(consumed)
        for number in partitions:
            edge_manager.connect_partition_with_consumer_vertex_group(
                IntermediateResultPartitionID(self.result_id, number), consumer_group
            )
        for index in consumers:
            edge_manager.connect_vertex_with_consumed_partition_group(
                ExecutionVertexID(self.consumer_vertex_id, index), consumed
            )


def _connect_pointwise(connect: _Connector, source_count: int, target_count: int) -> None:
    if source_count == target_count:
        for i in range(source_count):
            connect(range(i, i + 1), range(i, i + 1))
    elif source_count > target_count:
        for index in range(target_count):
            start = index * source_count // target_count
            end = (index + 1) * source_count // target_count
            connect(range(start, end), range(index, index + 1))
    else:
        for number in range(source_count):
            start = (number * target_count + source_count - 1) // source_count
            end = ((number + 1) * target_count + source_count - 1) // source_count
            connect(range(number, number + 1), range(start, end))


__all__ = ["compute_max_edges_to_target_execution_vertex", "connect_vertex_to_result"]
