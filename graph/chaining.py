"""Flink's ``StreamingJobGraphGenerator.isChainable``: when two operators share a task.

The nine conditions of Flink's ``StreamingJobGraphGenerator.isChainable``, checked in Flink's order,
and Flink's rule that a yielding operator (the async wait operator) is not chained into a chain
headed by a legacy ``SourceFunction``.
"""

from __future__ import annotations

from raylink.graph.stream_graph import StreamEdge, StreamGraph, StreamNode


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
        and not (downstream.operator.kind in YIELDING_KINDS and _runs_legacy_source(_chain_head(upstream, graph)))
    )


#: operators that wait for their task's mailbox (Flink's ``YieldingOperatorFactory``): never in a
#: chain headed by a legacy ``SourceFunction``, whose records come from another thread
YIELDING_KINDS = frozenset({"async_wait"})


def _chain_head(node: StreamNode, graph: StreamGraph) -> StreamNode:
    while len(node.in_edges) == 1 and is_chainable(node.in_edges[0], graph):
        node = graph.nodes[node.in_edges[0].source_id]
    return node


def _runs_legacy_source(node: StreamNode) -> bool:
    function = node.operator.function
    return (
        node.operator.kind == "source_function"
        and not isinstance(function, type)
        and callable(getattr(function, "run", None))
    )
