"""Flink's ``ExecutionGraph``: the parallel, schedulable form of a JobGraph (mirrors
``DefaultExecutionGraph``, ``ExecutionJobVertex``, ``ExecutionVertex``, ``IntermediateResult``,
``IntermediateResultPartition``, ``Execution``).

``ExecutionJobVertex`` per JobVertex (topological order), ``ExecutionVertex`` per
subtask, ``IntermediateResult`` per data set with one ``IntermediateResultPartition``
per producer subtask, ``Execution`` per deployment attempt. Who reads what is held by
groups in the graph's :class:`~raylink.graph.edge_manager.EdgeManager` (Flink's
FLINK-21110: ``ConsumedPartitionGroup`` / ``ConsumerVertexGroup``, wired by
:mod:`~raylink.graph.edge_manager_build_util`), so the graph grows with the number of
subtasks, not with the product of producer and consumer parallelism. ``ExecutionEdge``
survives as a per-pair view built on request (inspection and tests).
"""

from __future__ import annotations

import math
import uuid
from dataclasses import dataclass, field
from typing import Optional

from raylink.graph.edge_manager import (
    ConsumedPartitionGroup,
    ConsumerVertexGroup,
    EdgeManager,
    ExecutionVertexID,
    IntermediateResultPartitionID,
)
from raylink.graph.edge_manager_build_util import connect_vertex_to_result
from raylink.graph.job_graph import IntermediateDataSet, JobEdge, JobGraph, JobVertex


def pointwise_sources(consumer_index: int, num_sources: int, num_targets: int) -> list[int]:
    """Indices of the producer partitions consumer ``consumer_index`` reads (POINTWISE)."""
    if num_sources == num_targets:
        return [consumer_index]
    if num_sources > num_targets:
        start = consumer_index * num_sources // num_targets
        end = (consumer_index + 1) * num_sources // num_targets
        return list(range(start, end))
    # fewer producers than consumers: partition j feeds [ceil(j*T/S), ceil((j+1)*T/S))
    for j in range(num_sources):
        if math.ceil(j * num_targets / num_sources) <= consumer_index < math.ceil((j + 1) * num_targets / num_sources):
            return [j]
    raise AssertionError("unreachable")  # pragma: no cover


@dataclass(eq=False)
class Execution:
    """One attempt to run an ExecutionVertex (Flink's ``Execution``)."""

    vertex: "ExecutionVertex"
    attempt_number: int
    attempt_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    state: str = "CREATED"
    failure_cause: Optional[BaseException] = None
    assigned_location: Optional[str] = None


@dataclass(eq=False)
class IntermediateResultPartition:
    """The output of one producer subtask on one IntermediateResult (Flink's
    ``IntermediateResultPartition``); its consumers are one ConsumerVertexGroup in the
    graph's EdgeManager (one subpartition per consumer subtask)."""

    result: "IntermediateResult"
    partition_number: int
    producer: "ExecutionVertex"

    @property
    def id(self) -> IntermediateResultPartitionID:
        return IntermediateResultPartitionID(self.result.id, self.partition_number)

    @property
    def partition_id(self) -> str:
        return f"{self.result.id}#{self.partition_number}"

    @property
    def edge_manager(self) -> EdgeManager:
        return self.producer.job_vertex.graph.edge_manager

    def get_consumer_vertex_groups(self) -> list[ConsumerVertexGroup]:
        return self.edge_manager.get_consumer_vertex_groups_for_partition(self.id)

    def get_consumed_partition_groups(self) -> list[ConsumedPartitionGroup]:
        """The ConsumedPartitionGroups this partition belongs to."""
        return self.edge_manager.get_consumed_partition_groups_by_id(self.id)

    @property
    def number_of_subpartitions(self) -> int:
        """One per consumer subtask (Flink's ``getNumberOfSubpartitions``)."""
        return sum(len(group) for group in self.get_consumer_vertex_groups())

    @property
    def consumers(self) -> list["ExecutionEdge"]:
        """Per-pair view, in subpartition order: built on each call, O(consumers) --
        for inspection and tests; the runtime reads :meth:`get_consumer_vertex_groups`."""
        graph = self.producer.job_vertex.graph
        edges = []
        for group in self.get_consumer_vertex_groups():
            consumed = group.get_consumed_partition_group()
            for vertex_id in group:
                target = graph.get_execution_vertex(vertex_id)
                input_number = graph.edge_manager.get_consumed_partition_groups_for_vertex(vertex_id).index(consumed)
                job_edge = target.job_vertex.job_vertex.inputs[input_number]
                edges.append(ExecutionEdge(self, target, input_number, job_edge, len(edges)))
        return edges


@dataclass(eq=False)
class IntermediateResult:
    data_set: IntermediateDataSet
    producer: "ExecutionJobVertex"
    partitions: list[IntermediateResultPartition] = field(default_factory=list)

    @property
    def id(self) -> str:
        return self.data_set.id

    @property
    def result_partition_type(self) -> str:
        return self.data_set.result_partition_type


@dataclass(eq=False)
class ExecutionEdge:
    """A consumer subtask reading one producer partition, at one subpartition index.

    Not stored: a view the graph builds on request (``ExecutionVertex.input_edges``,
    ``IntermediateResultPartition.consumers``, ``ExecutionGraph.edges()``) from its groups,
    as Flink removed ``ExecutionEdge`` in FLINK-21110."""

    source: IntermediateResultPartition
    target: "ExecutionVertex"
    input_number: int  # index of the JobEdge in the consumer's inputs
    job_edge: JobEdge
    subpartition_index: int = 0


@dataclass(eq=False)
class ExecutionVertex:
    """One parallel subtask of a JobVertex (Flink's ``ExecutionVertex``); what it reads is a
    ConsumedPartitionGroup per input in the graph's EdgeManager."""

    job_vertex: "ExecutionJobVertex"
    subtask_index: int
    produced_partitions: list[IntermediateResultPartition] = field(default_factory=list)
    executions: list[Execution] = field(default_factory=list)

    @property
    def id(self) -> ExecutionVertexID:
        return ExecutionVertexID(self.job_vertex.id, self.subtask_index)

    @property
    def name(self) -> str:
        jv = self.job_vertex
        return f"{jv.name} ({self.subtask_index + 1}/{jv.parallelism})"

    @property
    def current_execution(self) -> Execution:
        return self.executions[-1]

    def new_attempt(self) -> Execution:
        execution = Execution(self, len(self.executions))
        self.executions.append(execution)
        return execution

    def get_consumed_partition_groups(self) -> list[ConsumedPartitionGroup]:
        """One per input (JobEdge), in input order."""
        return self.job_vertex.graph.edge_manager.get_consumed_partition_groups_for_vertex(self.id)

    def get_number_of_inputs(self) -> int:
        return len(self.get_consumed_partition_groups())

    @property
    def input_edges(self) -> list[list[ExecutionEdge]]:
        """Per input, a per-pair view of what this subtask reads: built on each call,
        O(partitions read) -- for inspection and tests; the runtime reads
        :meth:`get_consumed_partition_groups`."""
        graph = self.job_vertex.graph
        inputs = self.job_vertex.job_vertex.inputs
        out = []
        for input_number, group in enumerate(self.get_consumed_partition_groups()):
            subpartition = group.consumed_subpartition_index(self.id)
            out.append(
                [
                    ExecutionEdge(
                        graph.get_result_partition(partition_id), self, input_number, inputs[input_number], subpartition
                    )
                    for partition_id in group
                ]
            )
        return out


@dataclass(eq=False)
class ExecutionJobVertex:
    job_vertex: JobVertex
    vertices: list[ExecutionVertex] = field(default_factory=list)
    produced: list[IntermediateResult] = field(default_factory=list)
    graph: Optional["ExecutionGraph"] = field(default=None, repr=False)

    @property
    def id(self) -> str:
        return self.job_vertex.id

    @property
    def name(self) -> str:
        return self.job_vertex.name

    @property
    def parallelism(self) -> int:
        return self.job_vertex.parallelism

    @property
    def max_parallelism(self) -> int:
        return self.job_vertex.max_parallelism


class ExecutionGraph:
    """Built from a JobGraph with :func:`build_execution_graph`; its connections live in
    ``edge_manager`` (Flink's ``DefaultExecutionGraph.getEdgeManager``)."""

    def __init__(self, job_graph: JobGraph) -> None:
        self.job_graph = job_graph
        self.job_vertices: list[ExecutionJobVertex] = []
        self.results: dict[str, IntermediateResult] = {}
        self.state = "CREATED"
        self.edge_manager = EdgeManager()
        self._job_vertices_by_id: dict[str, ExecutionJobVertex] = {}

    def add_job_vertex(self, ejv: ExecutionJobVertex) -> None:
        ejv.graph = self
        self.job_vertices.append(ejv)
        self._job_vertices_by_id[ejv.id] = ejv

    def get_job_vertex(self, vertex_id: str) -> ExecutionJobVertex:
        return self._job_vertices_by_id[vertex_id]

    def get_execution_vertex(self, vertex_id: ExecutionVertexID) -> ExecutionVertex:
        return self._job_vertices_by_id[vertex_id[0]].vertices[vertex_id[1]]

    def get_result_partition(self, partition_id: IntermediateResultPartitionID) -> IntermediateResultPartition:
        return self.results[partition_id[0]].partitions[partition_id[1]]

    def all_vertices(self) -> list[ExecutionVertex]:
        return [ev for ejv in self.job_vertices for ev in ejv.vertices]

    def edges(self) -> list[ExecutionEdge]:
        """Every (partition, consumer) pair as an ExecutionEdge view: O(pairs), n² on an
        ALL_TO_ALL edge -- for inspection and tests only."""
        return [e for ev in self.all_vertices() for per_input in ev.input_edges for e in per_input]

    def to_dict(self) -> dict:
        return {
            "vertices": [
                {"job_vertex": ev.job_vertex.id, "subtask_index": ev.subtask_index, "name": ev.name}
                for ev in self.all_vertices()
            ],
            "edges": [
                {
                    "data_set": e.source.result.id,
                    "source": [e.source.producer.job_vertex.id, e.source.producer.subtask_index],
                    "target": [e.target.job_vertex.id, e.target.subtask_index],
                    "subpartition": e.subpartition_index,
                }
                for e in self.edges()
            ],
        }


def build_execution_graph(job_graph: JobGraph) -> ExecutionGraph:
    """Flink's ``ExecutionGraph.attachJobGraph``: create every parallel object and connect each
    consumer to its inputs by groups (:func:`~raylink.graph.edge_manager_build_util.connect_vertex_to_result`)."""
    graph = ExecutionGraph(job_graph)
    for job_vertex in job_graph.get_vertices_sorted_topologically_from_sources():
        ejv = ExecutionJobVertex(job_vertex)
        graph.add_job_vertex(ejv)
        for data_set in job_vertex.produced_data_sets:
            result = IntermediateResult(data_set, ejv)
            ejv.produced.append(result)
            graph.results[result.id] = result
        for index in range(job_vertex.parallelism):
            ev = ExecutionVertex(ejv, index)
            for result in ejv.produced:
                partition = IntermediateResultPartition(result, index, ev)
                result.partitions.append(partition)
                ev.produced_partitions.append(partition)
            ev.new_attempt()
            ejv.vertices.append(ev)
        # connect to the predecessors (already built: topological order), one input at a time
        for job_edge in job_vertex.inputs:
            read = graph.results[job_edge.source.id]
            connect_vertex_to_result(
                ejv.id,
                len(ejv.vertices),
                read.id,
                len(read.partitions),
                read.result_partition_type,
                job_edge.distribution_pattern,
                graph.edge_manager,
            )
    return graph
