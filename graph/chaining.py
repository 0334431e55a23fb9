"""Flink's ``StreamingJobGraphGenerator.isChainable``: when two operators share a task.

The nine conditions of seed 001 (and seed 000), checked in Flink's order.
"""

from __future__ import annotations

from raylink.graph.stream_graph import StreamEdge, StreamGraph


def is_chainable(edge: StreamEdge, graph: StreamGraph) -> bool:
    upstream = graph.nodes[edge.source_id]
    downstream = graph.nodes[edge.target_id]
    return (
        len(downstream.in_edges) == 1
        and downstream.operator is not None
        and upstream.operator is not None
        and upstream.slot_sharing_group == downstream.slot_sharing_group
        and downstream.chaining_strategy == "ALWAYS"
        and upstream.chaining_strategy in ("HEAD", "ALWAYS")
        and edge.partitioner.is_forward
        and edge.shuffle_mode != "BATCH"
        and upstream.parallelism == downstream.parallelism
        and graph.chaining_enabled
    )
