"""Deterministic operator ids: Flink's ``StreamGraphHasherV2``.

A node with a user ``uid`` is identified by a hash of that uid alone. Every other
node is hashed breadth-first from the sources by its traversal position, the
positions of its chainable outputs, and the hashes of its inputs, so the same
program yields the same ids in every process and run. Ids are 16 bytes, shown
as 32 hex characters like Flink's ``OperatorID``.
"""

from __future__ import annotations

import hashlib
from collections import deque

from raylink.graph.chaining import is_chainable
from raylink.graph.stream_graph import GraphError, StreamGraph, StreamNode


def _digest(*parts: bytes) -> bytes:
    h = hashlib.blake2b(digest_size=16)
    for part in parts:
        h.update(part)
    return h.digest()


def _int_bytes(value: int) -> bytes:
    return value.to_bytes(4, "big", signed=True)


def hash_uid(uid: str) -> bytes:
    return _digest(b"uid:", uid.encode("utf-8"))


def traverse_stream_graph_and_generate_hashes(graph: StreamGraph) -> dict[int, bytes]:
    """Return ``{stream node id: 16-byte operator id}`` for every node of ``graph``."""
    hashes: dict[int, bytes] = {}
    used_uids: dict[str, int] = {}
    visited: set[int] = set()
    remaining: deque[StreamNode] = deque()
    for source_id in graph.get_source_ids():
        remaining.append(graph.nodes[source_id])
        visited.add(source_id)
    while remaining:
        node = remaining.popleft()
        if _generate_node_hash(node, hashes, graph, used_uids):
            for edge in node.out_edges:
                if edge.target_id not in visited:
                    remaining.append(graph.nodes[edge.target_id])
                    visited.add(edge.target_id)
        else:
            # not all inputs hashed yet: come back when another path reaches it
            visited.discard(node.id)
    missing = set(graph.nodes) - set(hashes)
    if missing:  # pragma: no cover - only for graphs with cycles
        raise GraphError(f"could not hash stream nodes {sorted(missing)} (cycle?)")
    return hashes


def _generate_node_hash(
    node: StreamNode, hashes: dict[int, bytes], graph: StreamGraph, used_uids: dict[str, int]
) -> bool:
    if node.uid is not None:
        if node.uid in used_uids and used_uids[node.uid] != node.id:
            raise GraphError(
                f"Hash collision on user-specified ID {node.uid!r}. Most likely cause is a "
                "non-unique ID. Please check that all IDs specified via `uid(str)` are unique."
            )
        used_uids[node.uid] = node.id
        hashes[node.id] = hash_uid(node.uid)
        return True
    if any(edge.source_id not in hashes for edge in node.in_edges):
        return False
    position = _int_bytes(len(hashes))
    parts = [b"node:", position]
    for edge in node.out_edges:
        if is_chainable(edge, graph):
            parts.append(position)
    digest = bytearray(_digest(*parts))
    for edge in node.in_edges:
        other = hashes[edge.source_id]
        for j in range(len(digest)):
            digest[j] = ((digest[j] * 37) ^ other[j]) & 0xFF
    hashes[node.id] = bytes(digest)
    return True
