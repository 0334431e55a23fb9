"""Flink's ``JobGraph``: ``JobVertex``, ``IntermediateDataSet``, ``JobEdge``, ``StreamConfig``.

A JobVertex is one operator chain; each output that leaves a chain becomes an
IntermediateDataSet consumed through a JobEdge. ``StreamConfig`` is the
per-operator configuration a task needs to rebuild its chain at runtime.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any, Optional

from raylink.graph.operator_spec import OperatorSpec, PartitionerSpec
from raylink.graph.stream_graph import StreamEdge


@dataclass(eq=False)
class StreamConfig:
    """Everything one operator of a chain needs at runtime (Flink's ``StreamConfig``)."""

    node_id: int
    operator_id: str
    operator_name: str
    chain_index: int
    operator: OperatorSpec
    serialized_operator: bytes
    chained_outputs: list[StreamEdge] = field(default_factory=list)
    non_chained_outputs: list[StreamEdge] = field(default_factory=list)
    is_chain_start: bool = False
    is_chain_end: bool = False
    # only on the chain head:
    out_edges_in_order: list[StreamEdge] = field(default_factory=list)
    in_edges: list[StreamEdge] = field(default_factory=list)
    buffer_timeout: int = 100
    output_type: Any = None  # the operator's declared output TypeInformation (Flink: TYPE_SERIALIZER_OUT)


@dataclass(eq=False)
class IntermediateDataSet:
    """The output of a JobVertex on one non-chained StreamEdge."""

    id: str
    producer: "JobVertex"
    result_partition_type: str  # PIPELINED_BOUNDED | PIPELINED | BLOCKING
    stream_edge: StreamEdge
    consumers: list["JobEdge"] = field(default_factory=list)


@dataclass(eq=False)
class JobEdge:
    """Connects an IntermediateDataSet to the JobVertex consuming it."""

    source: IntermediateDataSet
    target: "JobVertex"
    distribution_pattern: str  # POINTWISE | ALL_TO_ALL
    partitioner: PartitionerSpec
    type_number: int  # 0 one-input, 1 / 2 for two-input vertices
    stream_edge: StreamEdge

    @property
    def ship_strategy(self) -> str:
        return self.partitioner.ship_strategy


@dataclass(eq=False)
class JobVertex:
    """One operator chain, scheduled as ``parallelism`` subtasks."""

    id: str
    name: str
    parallelism: int
    max_parallelism: int
    slot_sharing_group: Optional[str]
    invokable: str  # SourceStreamTask | OneInputStreamTask | TwoInputStreamTask
    head_node_id: int
    chain: list[StreamConfig] = field(default_factory=list)  # head first, by chain index
    inputs: list[JobEdge] = field(default_factory=list)
    produced_data_sets: list[IntermediateDataSet] = field(default_factory=list)
    max_parallelism_configured: bool = False

    @property
    def head_config(self) -> StreamConfig:
        return self.chain[0]

    @property
    def operator_ids(self) -> list[str]:
        return [c.operator_id for c in self.chain]

    def is_input_vertex(self) -> bool:
        return not self.inputs

    def __repr__(self) -> str:
        return f"JobVertex({self.name!r}, p={self.parallelism})"


class JobGraph:
    """The chained, optimised logical plan (Flink's ``JobGraph``)."""

    def __init__(self, job_name: str) -> None:
        self.job_name = job_name
        self.vertices: dict[str, JobVertex] = {}
        self.config: dict = {}
        self.job_type = "STREAMING"  # Flink's JobType: BATCH jobs run without checkpoints

    def add_vertex(self, vertex: JobVertex) -> None:
        self.vertices[vertex.id] = vertex

    def get_vertex(self, vertex_id: str) -> JobVertex:
        return self.vertices[vertex_id]

    def get_vertices_sorted_topologically_from_sources(self) -> list[JobVertex]:
        """Kahn's algorithm; ties broken by the head operator's StreamNode id."""
        pending = {v.id: len(v.inputs) for v in self.vertices.values()}
        ready = deque(sorted((v for v in self.vertices.values() if not v.inputs), key=lambda v: v.head_node_id))
        ordered: list[JobVertex] = []
        while ready:
            vertex = ready.popleft()
            ordered.append(vertex)
            for data_set in vertex.produced_data_sets:
                for edge in data_set.consumers:
                    pending[edge.target.id] -= 1
                    if pending[edge.target.id] == 0:  # this graph's vertex of that id (a copy's own)
                        ready.append(self.vertices[edge.target.id])
        if len(ordered) != len(self.vertices):  # pragma: no cover - cycles cannot be built
            raise ValueError("The job graph is cyclic.")
        return ordered

    def edges(self) -> list[JobEdge]:
        return [e for v in self.get_vertices_sorted_topologically_from_sources() for e in v.inputs]

    def to_dict(self) -> dict:
        vertices = self.get_vertices_sorted_topologically_from_sources()
        return {
            "job_name": self.job_name,
            "job_type": self.job_type,
            "vertices": [
                {
                    "id": v.id,
                    "name": v.name,
                    "parallelism": v.parallelism,
                    "max_parallelism": v.max_parallelism,
                    "slot_sharing_group": v.slot_sharing_group,
                    "operators": [{"id": c.operator_id, "name": c.operator_name} for c in v.chain],
                }
                for v in vertices
            ],
            "edges": [
                {
                    "source": e.source.producer.id,
                    "target": e.target.id,
                    "data_set": e.source.id,
                    "distribution_pattern": e.distribution_pattern,
                    "ship_strategy": e.ship_strategy,
                    "result_partition_type": e.source.result_partition_type,
                    "side_output": e.stream_edge.output_tag.tag_id if e.stream_edge.output_tag else None,
                }
                for v in vertices
                for e in v.inputs
            ],
        }
