"""Flink's ``EdgeManager`` with ``ConsumedPartitionGroup`` / ``ConsumerVertexGroup`` (FLINK-21110).

Mirrors ``org.apache.flink.runtime.executiongraph.EdgeManager`` and
``org.apache.flink.runtime.scheduler.strategy.ConsumedPartitionGroup`` /
``ConsumerVertexGroup`` / ``ExecutionVertexID`` and
``org.apache.flink.runtime.jobgraph.IntermediateResultPartitionID``.

Instead of one ``ExecutionEdge`` per (producer partition, consumer subtask) pair -- n² of
them on an n-way ALL_TO_ALL edge -- the ExecutionGraph holds groups: every consumer of
an ALL_TO_ALL edge shares one ConsumedPartitionGroup (all the producer's partitions) and
every partition one ConsumerVertexGroup (all the consumers), so the graph grows with the
number of subtasks. Every group :mod:`raylink.graph.edge_manager_build_util` makes is a
contiguous run of partition numbers / subtask indices, kept as a ``range``: a group costs
the same whether it holds 1 or 5,000 members.

Each partition has exactly one ConsumerVertexGroup (Flink's check: a result partition has
a single consumer; the JobGraph generator gives each IntermediateDataSet one JobEdge), so
a consumer reads subpartition ``subtask index - first subtask of the group`` of every
partition of its ConsumedPartitionGroup (:meth:`ConsumedPartitionGroup.consumed_subpartition_index`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterator, NamedTuple, Optional

from raylink.graph.stream_graph import GraphError


class ExecutionVertexID(NamedTuple):
    """Flink's ``ExecutionVertexID``: (job vertex id, subtask index) -- equal to the
    ``(job vertex id, subtask)`` keys of a placement."""

    job_vertex_id: str
    subtask_index: int


class IntermediateResultPartitionID(NamedTuple):
    """Flink's ``IntermediateResultPartitionID``: (intermediate data set id, partition number).
    ``str()`` is the runtime's partition id, ``"<data set id>#<partition number>"``."""

    intermediate_data_set_id: str
    partition_number: int

    def __str__(self) -> str:
        return f"{self.intermediate_data_set_id}#{self.partition_number}"


@dataclass(eq=False)
class ConsumedPartitionGroup:
    """Partitions of one IntermediateResult that consumers read together (Flink's
    ``ConsumedPartitionGroup``); iterating yields their IntermediateResultPartitionIDs."""

    intermediate_data_set_id: str
    partition_numbers: range
    #: how many consumer subtasks read this group (Flink's ``getNumConsumers``)
    num_consumers: int
    result_partition_type: str
    consumer_vertex_group: Optional["ConsumerVertexGroup"] = field(default=None, repr=False)

    @property
    def group_id(self) -> str:
        """Names the group within its job: the data set and the run of partitions (a cache key)."""
        r = self.partition_numbers
        return f"{self.intermediate_data_set_id}[{r.start}:{r.stop}]"

    def __iter__(self) -> Iterator[IntermediateResultPartitionID]:
        data_set = self.intermediate_data_set_id
        return (IntermediateResultPartitionID(data_set, n) for n in self.partition_numbers)

    def __len__(self) -> int:
        return len(self.partition_numbers)

    def size(self) -> int:
        return len(self.partition_numbers)

    def is_empty(self) -> bool:
        return not self.partition_numbers

    def get_first(self) -> IntermediateResultPartitionID:
        return IntermediateResultPartitionID(self.intermediate_data_set_id, self.partition_numbers[0])

    def __contains__(self, partition_id: object) -> bool:
        return (
            isinstance(partition_id, tuple)
            and partition_id[0] == self.intermediate_data_set_id
            and partition_id[1] in self.partition_numbers
        )

    def get_consumer_vertex_group(self) -> "ConsumerVertexGroup":
        if self.consumer_vertex_group is None:
            raise GraphError(f"ConsumedPartitionGroup {self.group_id} has no consumer vertex group")
        return self.consumer_vertex_group

    def consumed_subpartition_index(self, consumer: ExecutionVertexID) -> int:
        """The subpartition ``consumer`` reads of each partition of this group: its place in
        the partitions' (single) ConsumerVertexGroup."""
        return self.get_consumer_vertex_group().index_of(consumer)


@dataclass(eq=False)
class ConsumerVertexGroup:
    """Subtasks of one JobVertex that consume the same partitions (Flink's ``ConsumerVertexGroup``);
    iterating yields their ExecutionVertexIDs, in subpartition order."""

    job_vertex_id: str
    subtask_indices: range
    result_partition_type: str
    consumed_partition_group: Optional[ConsumedPartitionGroup] = field(default=None, repr=False)

    @property
    def group_id(self) -> str:
        """Names the group within its job: the job vertex and the run of subtasks (a cache key)."""
        r = self.subtask_indices
        return f"{self.job_vertex_id}[{r.start}:{r.stop}]"

    def __iter__(self) -> Iterator[ExecutionVertexID]:
        job_vertex = self.job_vertex_id
        return (ExecutionVertexID(job_vertex, i) for i in self.subtask_indices)

    def __len__(self) -> int:
        return len(self.subtask_indices)

    def size(self) -> int:
        return len(self.subtask_indices)

    def is_empty(self) -> bool:
        return not self.subtask_indices

    def get_first(self) -> ExecutionVertexID:
        return ExecutionVertexID(self.job_vertex_id, self.subtask_indices[0])

    def __contains__(self, vertex_id: object) -> bool:
        return (
            isinstance(vertex_id, tuple) and vertex_id[0] == self.job_vertex_id and vertex_id[1] in self.subtask_indices
        )

    def index_of(self, vertex_id: ExecutionVertexID) -> int:
        """``vertex_id``'s position in the group: the subpartition it reads."""
        if vertex_id not in self:
            raise GraphError(f"{vertex_id} is not in ConsumerVertexGroup {self.group_id}")
        return vertex_id[1] - self.subtask_indices.start

    def get_consumed_partition_group(self) -> ConsumedPartitionGroup:
        if self.consumed_partition_group is None:
            raise GraphError(f"ConsumerVertexGroup {self.group_id} has no consumed partition group")
        return self.consumed_partition_group


class EdgeManager:
    """All connections between the subtasks of an ExecutionGraph (Flink's ``EdgeManager``):
    per partition its ConsumerVertexGroups, per subtask its ConsumedPartitionGroups (one per
    input, in input order), per partition the ConsumedPartitionGroups containing it."""

    def __init__(self) -> None:
        self._partition_consumers: dict[IntermediateResultPartitionID, list[ConsumerVertexGroup]] = {}
        self._vertex_consumed_partitions: dict[ExecutionVertexID, list[ConsumedPartitionGroup]] = {}
        self._consumed_partitions_by_id: dict[IntermediateResultPartitionID, list[ConsumedPartitionGroup]] = {}

    def connect_partition_with_consumer_vertex_group(
        self, result_partition_id: IntermediateResultPartitionID, consumer_vertex_group: ConsumerVertexGroup
    ) -> None:
        consumers = self._partition_consumers.setdefault(result_partition_id, [])
        if consumers:  # Flink's checkState
            raise GraphError(f"There can only be a single consumer for the result partition {result_partition_id}.")
        consumers.append(consumer_vertex_group)

    def connect_vertex_with_consumed_partition_group(
        self, execution_vertex_id: ExecutionVertexID, consumed_partition_group: ConsumedPartitionGroup
    ) -> None:
        self._vertex_consumed_partitions.setdefault(execution_vertex_id, []).append(consumed_partition_group)

    def register_consumed_partition_group(self, group: ConsumedPartitionGroup) -> None:
        by_id = self._consumed_partitions_by_id
        for partition_id in group:
            by_id.setdefault(partition_id, []).append(group)

    def get_consumer_vertex_groups_for_partition(
        self, result_partition_id: IntermediateResultPartitionID
    ) -> list[ConsumerVertexGroup]:
        return self._partition_consumers.get(result_partition_id, [])

    def get_consumed_partition_groups_for_vertex(
        self, execution_vertex_id: ExecutionVertexID
    ) -> list[ConsumedPartitionGroup]:
        return self._vertex_consumed_partitions.get(execution_vertex_id, [])

    def get_consumed_partition_groups_by_id(
        self, result_partition_id: IntermediateResultPartitionID
    ) -> list[ConsumedPartitionGroup]:
        return self._consumed_partitions_by_id.get(result_partition_id, [])


__all__ = [
    "ConsumedPartitionGroup",
    "ConsumerVertexGroup",
    "EdgeManager",
    "ExecutionVertexID",
    "IntermediateResultPartitionID",
]
