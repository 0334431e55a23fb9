"""Flink's ``StreamingJobGraphGenerator``: StreamGraph -> JobGraph with operator chaining.

``create_chain`` walks recursively from every source exactly as Flink's ``StreamingJobGraphGenerator``
show: chainable out-edges extend the current chain, non-chainable ones start a
new chain at their target; the chain head creates the JobVertex and connects
every transitive out-edge as an IntermediateDataSet + JobEdge.
"""

from __future__ import annotations

import hashlib

import cloudpickle

from raylink.core.key_groups import UPPER_BOUND_MAX_PARALLELISM, compute_default_max_parallelism
from raylink.graph.chaining import is_chainable
from raylink.graph.hashing import traverse_stream_graph_and_generate_hashes
from raylink.graph.job_graph import (
    IntermediateDataSet,
    JobEdge,
    JobGraph,
    JobVertex,
    StreamConfig,
)
from raylink.graph.stream_graph import GraphError, StreamEdge, StreamGraph


def result_partition_type(shuffle_mode: str, job_type: str = "STREAMING") -> str:
    """Flink's ``determineResultPartitionType``: a BATCH edge is blocking, a PIPELINED one
    pipelined; an UNDEFINED one is blocking in a BATCH job (all edges blocking) and
    pipelined in a STREAMING one."""
    if shuffle_mode == "BATCH" or (shuffle_mode == "UNDEFINED" and job_type == "BATCH"):
        return "BLOCKING"
    return "PIPELINED_BOUNDED"


class StreamingJobGraphGenerator:
    def __init__(self, stream_graph: StreamGraph) -> None:
        self.stream_graph = stream_graph
        self.job_graph = JobGraph(stream_graph.job_name)
        self.job_graph.config = dict(stream_graph.config)
        self.job_graph.job_type = stream_graph.job_type
        self.built_vertices: set[int] = set()
        self.job_vertices: dict[int, JobVertex] = {}
        self.chained_configs: dict[int, dict[int, StreamConfig]] = {}
        self.chained_names: dict[int, str] = {}
        self.hashes: dict[int, bytes] = {}

    def create_job_graph(self) -> JobGraph:
        self.hashes = traverse_stream_graph_and_generate_hashes(self.stream_graph)
        for source_id in self.stream_graph.get_source_ids():
            self.create_chain(source_id, source_id, 0)
        return self.job_graph

    # -- chaining ---------------------------------------------------------------------
    def create_chain(self, start_id: int, current_id: int, chain_index: int) -> list[StreamEdge]:
        if start_id in self.built_vertices:
            return []
        graph = self.stream_graph
        node = graph.nodes[current_id]
        transitive_out_edges: list[StreamEdge] = []
        chainable: list[StreamEdge] = []
        non_chainable: list[StreamEdge] = []
        for edge in node.out_edges:
            (chainable if is_chainable(edge, graph) else non_chainable).append(edge)
        for edge in chainable:
            transitive_out_edges.extend(self.create_chain(start_id, edge.target_id, chain_index + 1))
        for edge in non_chainable:
            transitive_out_edges.append(edge)
            self.create_chain(edge.target_id, edge.target_id, 0)

        self.chained_names[current_id] = self._chained_name(current_id, chainable)
        config = StreamConfig(
            node_id=current_id,
            operator_id=self.hashes[current_id].hex(),
            operator_name=node.operator_name,
            chain_index=chain_index,
            operator=node.operator,
            serialized_operator=b"",
            chained_outputs=chainable,
            non_chained_outputs=non_chainable,
            is_chain_end=not chainable,
            buffer_timeout=node.buffer_timeout if node.buffer_timeout is not None else graph.buffer_timeout,
            output_type=node.output_type,
        )
        node.operator.operator_id = config.operator_id
        config.serialized_operator = self._serialize(node.operator)
        if current_id == start_id:
            vertex = self._create_job_vertex(start_id)
            config.is_chain_start = True
            config.chain_index = 0
            config.out_edges_in_order = transitive_out_edges
            config.in_edges = list(node.in_edges)
            chained = self.chained_configs.get(start_id, {})
            vertex.chain = [config] + sorted(chained.values(), key=lambda c: c.chain_index)
            for edge in transitive_out_edges:
                self._connect(start_id, edge)
        else:
            self.chained_configs.setdefault(start_id, {})[current_id] = config
        return transitive_out_edges

    def _chained_name(self, node_id: int, chainable: list[StreamEdge]) -> str:
        name = self.stream_graph.nodes[node_id].operator_name
        if len(chainable) > 1:
            inner = ", ".join(self.chained_names[e.target_id] for e in chainable)
            return f"{name} -> ({inner})"
        if len(chainable) == 1:
            return f"{name} -> {self.chained_names[chainable[0].target_id]}"
        return name

    def _serialize(self, spec) -> bytes:
        try:
            return cloudpickle.dumps(spec)
        except Exception as exc:  # user functions that cannot be shipped to a task
            raise GraphError(
                f"Could not serialize the function of operator '{spec.name}': {type(exc).__name__}: {exc}"
            ) from exc

    def _create_job_vertex(self, start_id: int) -> JobVertex:
        node = self.stream_graph.nodes[start_id]
        max_p = node.max_parallelism
        configured = max_p > 0
        if not configured:
            # capped: a parallelism above the bound gets the error below, naming the operator
            max_p = compute_default_max_parallelism(min(node.parallelism, UPPER_BOUND_MAX_PARALLELISM))
        if node.parallelism > max_p:
            raise GraphError(
                f"The parallelism ({node.parallelism}) of operator '{node.operator_name}' is higher "
                f"than its max parallelism ({max_p}). Please lower the parallelism or increase "
                "the max parallelism."
            )
        if node.is_source:
            invokable = "SourceStreamTask"
        elif len({e.type_number for e in node.in_edges}) > 1 or any(e.type_number == 2 for e in node.in_edges):
            invokable = "TwoInputStreamTask"
        else:
            invokable = "OneInputStreamTask"
        vertex = JobVertex(
            id=self.hashes[start_id].hex(),
            name=self.chained_names[start_id],
            parallelism=node.parallelism,
            max_parallelism=max_p,
            slot_sharing_group=node.slot_sharing_group,
            invokable=invokable,
            head_node_id=start_id,
            max_parallelism_configured=configured,
        )
        self.built_vertices.add(start_id)
        self.job_vertices[start_id] = vertex
        self.job_graph.add_vertex(vertex)
        return vertex

    def _connect(self, head_id: int, edge: StreamEdge) -> None:
        head = self.job_vertices[head_id]
        downstream = self.job_vertices[edge.target_id]
        data_set_id = hashlib.blake2b(
            f"{head.id}/{edge.edge_id}/{len(head.produced_data_sets)}".encode(), digest_size=16
        ).hexdigest()
        data_set = IntermediateDataSet(
            id=data_set_id,
            producer=head,
            result_partition_type=result_partition_type(edge.shuffle_mode, self.stream_graph.job_type),
            stream_edge=edge,
        )
        head.produced_data_sets.append(data_set)
        job_edge = JobEdge(
            source=data_set,
            target=downstream,
            distribution_pattern=edge.partitioner.distribution_pattern,
            partitioner=edge.partitioner,
            type_number=edge.type_number,
            stream_edge=edge,
        )
        data_set.consumers.append(job_edge)
        downstream.inputs.append(job_edge)


def create_job_graph(stream_graph: StreamGraph) -> JobGraph:
    return StreamingJobGraphGenerator(stream_graph).create_job_graph()
