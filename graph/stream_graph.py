"""Flink's ``StreamGraph``, ``StreamNode`` and ``StreamEdge``.

Physical transformations become StreamNodes. Partition and side-output
transformations become *virtual* node ids that ``add_edge`` resolves
(Flink's ``StreamGraph.addEdgeInternal``): their partitioner or output tag is
carried onto the real StreamEdge between the physical nodes.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Optional

from raylink.core.output_tag import OutputTag
from raylink.errors import RaylinkError
from raylink.graph.operator_spec import FORWARD, REBALANCE, OperatorSpec, PartitionerSpec


class GraphError(RaylinkError, ValueError):
    """A program that cannot be turned into a valid graph."""


@dataclass(eq=False)
class StreamEdge:
    """An edge between two physical StreamNodes (Flink's ``StreamEdge``)."""

    source_id: int
    target_id: int
    type_number: int  # 0 for one-input targets, 1/2 for the inputs of two-input targets
    partitioner: PartitionerSpec
    output_tag: Optional[OutputTag] = None
    shuffle_mode: str = "UNDEFINED"
    edge_id: str = ""

    def __post_init__(self) -> None:
        tag = self.output_tag.tag_id if self.output_tag else ""
        self.edge_id = f"{self.source_id}_{self.target_id}_{self.type_number}_{tag}_{self.partitioner.ship_strategy}"

    def __repr__(self) -> str:
        return f"StreamEdge({self.source_id} -> {self.target_id}, {self.partitioner})"


@dataclass(eq=False)
class StreamNode:
    """One physical operator of the StreamGraph (Flink's ``StreamNode``)."""

    id: int
    operator_name: str
    operator: OperatorSpec
    parallelism: int
    max_parallelism: int = -1
    slot_sharing_group: Optional[str] = "default"
    uid: Optional[str] = None
    description: Optional[str] = None
    buffer_timeout: Optional[int] = None
    output_type: Any = None  # declared TypeInformation (Flink's typeSerializerOut), or None
    is_source: bool = False
    is_sink: bool = False
    in_edges: list[StreamEdge] = field(default_factory=list)
    out_edges: list[StreamEdge] = field(default_factory=list)

    @property
    def chaining_strategy(self) -> str:
        return self.operator.chaining_strategy

    @property
    def pact(self) -> str:
        if self.is_source:
            return "Data Source"
        if self.is_sink:
            return "Data Sink"
        return "Operator"

    def __repr__(self) -> str:
        return f"StreamNode({self.id}, {self.operator_name!r}, p={self.parallelism})"


class StreamGraph:
    """The first DAG: operators and the edges between them (Flink's ``StreamGraph``)."""

    def __init__(self, job_name: str = "raylink job", chaining_enabled: bool = True) -> None:
        self.job_name = job_name
        self.chaining_enabled = chaining_enabled
        self.nodes: dict[int, StreamNode] = {}
        self.sources: list[int] = []
        self.sinks: list[int] = []
        self.virtual_partition_nodes: dict[int, tuple[int, PartitionerSpec, str]] = {}
        self.virtual_side_output_nodes: dict[int, tuple[int, OutputTag]] = {}
        self.buffer_timeout: int = 100
        self.default_shuffle_mode: str = "UNDEFINED"
        # Flink's JobType: BATCH makes every exchange whose mode is UNDEFINED blocking
        self.job_type: str = "STREAMING"
        self.config: dict = {}

    # -- building -----------------------------------------------------------------
    def add_node(self, node: StreamNode) -> StreamNode:
        if node.id in self.nodes:
            raise GraphError(f"duplicate StreamNode id {node.id}")
        self.nodes[node.id] = node
        if node.is_source:
            self.sources.append(node.id)
        if node.is_sink:
            self.sinks.append(node.id)
        return node

    def add_virtual_partition_node(
        self, original_id: int, virtual_id: int, partitioner: PartitionerSpec, shuffle_mode: str
    ) -> None:
        self.virtual_partition_nodes[virtual_id] = (original_id, partitioner, shuffle_mode)

    def add_virtual_side_output_node(self, original_id: int, virtual_id: int, tag: OutputTag) -> None:
        self.virtual_side_output_nodes[virtual_id] = (original_id, tag)

    def add_edge(self, upstream_id: int, downstream_id: int, type_number: int = 0) -> None:
        self._add_edge_internal(upstream_id, downstream_id, type_number, None, None, None)

    def _add_edge_internal(
        self,
        upstream_id: int,
        downstream_id: int,
        type_number: int,
        partitioner: Optional[PartitionerSpec],
        output_tag: Optional[OutputTag],
        shuffle_mode: Optional[str],
    ) -> None:
        if upstream_id in self.virtual_side_output_nodes:
            original, tag = self.virtual_side_output_nodes[upstream_id]
            self._add_edge_internal(original, downstream_id, type_number, partitioner, output_tag or tag, shuffle_mode)
            return
        if upstream_id in self.virtual_partition_nodes:
            original, virtual_partitioner, virtual_mode = self.virtual_partition_nodes[upstream_id]
            # the partitioner closest to the downstream node wins (Flink: only if none yet)
            self._add_edge_internal(
                original,
                downstream_id,
                type_number,
                partitioner or virtual_partitioner,
                output_tag,
                virtual_mode,
            )
            return
        upstream = self.nodes[upstream_id]
        downstream = self.nodes[downstream_id]
        if partitioner is None:
            partitioner = FORWARD if upstream.parallelism == downstream.parallelism else REBALANCE
        if partitioner.is_forward and upstream.parallelism != downstream.parallelism:
            raise GraphError(
                "Forward partitioning does not allow change of parallelism. "
                f"Upstream operation: {upstream.operator_name} parallelism: {upstream.parallelism}, "
                f"downstream operation: {downstream.operator_name} parallelism: "
                f"{downstream.parallelism} You must use another partitioning strategy, "
                "such as broadcast, rebalance, shuffle or global."
            )
        edge = StreamEdge(
            upstream_id,
            downstream_id,
            type_number,
            partitioner,
            output_tag,
            shuffle_mode or self.default_shuffle_mode,
        )
        upstream.out_edges.append(edge)
        downstream.in_edges.append(edge)

    # -- reading ------------------------------------------------------------------
    def get_stream_node(self, node_id: int) -> StreamNode:
        return self.nodes[node_id]

    def get_stream_nodes(self) -> list[StreamNode]:
        return [self.nodes[i] for i in sorted(self.nodes)]

    def get_source_ids(self) -> list[int]:
        return sorted(self.sources)

    def edges(self) -> list[StreamEdge]:
        return [e for n in self.get_stream_nodes() for e in n.out_edges]

    def to_execution_plan(self) -> dict:
        """Flink's JSONGenerator output: nodes with id, type, pact, contents, parallelism."""
        nodes = []
        for node in self.get_stream_nodes():
            entry = {
                "id": node.id,
                "type": node.operator_name,
                "pact": node.pact,
                "contents": node.description or node.operator_name,
                "parallelism": node.parallelism,
            }
            if node.in_edges:
                entry["predecessors"] = [
                    {
                        "id": e.source_id,
                        "ship_strategy": e.partitioner.ship_strategy,
                        "side": "second",
                    }
                    for e in node.in_edges
                ]
            nodes.append(entry)
        return {"nodes": nodes}

    def get_execution_plan(self) -> str:
        return json.dumps(self.to_execution_plan(), indent=2)
