"""Flink's ``ExecutionGraph``: the parallel, schedulable form of a JobGraph (``DefaultExecutionGraph``, ``EdgeManagerBuildUtil``).

``ExecutionJobVertex`` per JobVertex (topological order), ``ExecutionVertex`` per
subtask, ``IntermediateResult`` per data set with one ``IntermediateResultPartition``
per producer subtask, ``ExecutionEdge`` per consumed partition, ``Execution`` per
deployment attempt. POINTWISE wiring follows Flink's ``ExecutionVertex.connectPointwise``.
"""

from __future__ import annotations

import math
import uuid
from dataclasses import dataclass, field
from typing import Optional

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
    result: "IntermediateResult"
    partition_number: int
    producer: "ExecutionVertex"
    consumers: list["ExecutionEdge"] = field(default_factory=list)

    @property
    def partition_id(self) -> str:
        return f"{self.result.id}#{self.partition_number}"

    @property
    def number_of_subpartitions(self) -> int:
        return len(self.consumers)


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
    """A consumer subtask reading one producer partition, at one subpartition index."""

    source: IntermediateResultPartition
    target: "ExecutionVertex"
    input_number: int  # index of the JobEdge in the consumer's inputs
    job_edge: JobEdge
    subpartition_index: int = 0


@dataclass(eq=False)
class ExecutionVertex:
    job_vertex: "ExecutionJobVertex"
    subtask_index: int
    produced_partitions: list[IntermediateResultPartition] = field(default_factory=list)
    input_edges: list[list[ExecutionEdge]] = field(default_factory=list)  # per JobEdge
    executions: list[Execution] = field(default_factory=list)

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


@dataclass(eq=False)
class ExecutionJobVertex:
    job_vertex: JobVertex
    vertices: list[ExecutionVertex] = field(default_factory=list)
    produced: list[IntermediateResult] = field(default_factory=list)

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
    """Built from a JobGraph with :func:`build_execution_graph`."""

    def __init__(self, job_graph: JobGraph) -> None:
        self.job_graph = job_graph
        self.job_vertices: list[ExecutionJobVertex] = []
        self.results: dict[str, IntermediateResult] = {}
        self.state = "CREATED"

    def get_job_vertex(self, vertex_id: str) -> ExecutionJobVertex:
        return next(v for v in self.job_vertices if v.id == vertex_id)

    def all_vertices(self) -> list[ExecutionVertex]:
        return [ev for ejv in self.job_vertices for ev in ejv.vertices]

    def edges(self) -> list[ExecutionEdge]:
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
    """Flink's ``ExecutionGraph.attachJobGraph``: create and wire every parallel object."""
    graph = ExecutionGraph(job_graph)
    by_id: dict[str, ExecutionJobVertex] = {}
    for job_vertex in job_graph.get_vertices_sorted_topologically_from_sources():
        ejv = ExecutionJobVertex(job_vertex)
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
        # connect to the predecessors (already built: topological order)
        for input_number, job_edge in enumerate(job_vertex.inputs):
            result = graph.results[job_edge.source.id]
            partitions = result.partitions
            for ev in ejv.vertices:
                if job_edge.distribution_pattern == "ALL_TO_ALL":
                    sources = partitions
                else:
                    indices = pointwise_sources(ev.subtask_index, len(partitions), len(ejv.vertices))
                    sources = [partitions[i] for i in indices]
                edges = []
                for partition in sources:
                    edge = ExecutionEdge(partition, ev, input_number, job_edge)
                    edge.subpartition_index = len(partition.consumers)
                    partition.consumers.append(edge)
                    edges.append(edge)
                ev.input_edges.append(edges)
        by_id[job_vertex.id] = ejv
        graph.job_vertices.append(ejv)
    return graph
