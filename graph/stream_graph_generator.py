"""Flink's ``StreamGraphGenerator``: transformations -> StreamGraph.

Walks the transformations recursively (inputs first, each once), turns physical
ones into StreamNodes and virtual ones into virtual node ids, adds the edges,
and decides each node's slot sharing group the way Flink does: the group the
user set, else the group all inputs agree on, else ``"default"``.
"""

from __future__ import annotations

from typing import Optional

from raylink.graph import transformations as T
from raylink.graph.stream_graph import GraphError, StreamGraph, StreamNode
from raylink.graph.transformations import DEFAULT_SLOT_SHARING_GROUP, Transformation

UPPER_BOUND_MAX_PARALLELISM = 1 << 15


def validate_parallelism(parallelism: int, what: str) -> None:
    if not isinstance(parallelism, int) or isinstance(parallelism, bool) or parallelism < 1:
        raise GraphError(
            f"The parallelism of an operator must be at least 1 (operator {what}, got {parallelism!r})."
        )


def validate_max_parallelism(max_parallelism: int, what: str) -> None:
    if (
        not isinstance(max_parallelism, int)
        or isinstance(max_parallelism, bool)
        or not 0 < max_parallelism <= UPPER_BOUND_MAX_PARALLELISM
    ):
        raise GraphError(
            f"The maximum parallelism must be at least 1 and smaller than or equal to "
            f"{UPPER_BOUND_MAX_PARALLELISM} (operator {what}, got {max_parallelism!r})."
        )


class StreamGraphGenerator:
    """Builds a StreamGraph from the sink-side list of transformations."""

    def __init__(
        self,
        transformations: list[Transformation],
        job_name: str = "raylink job",
        chaining_enabled: bool = True,
        default_max_parallelism: int = -1,
        buffer_timeout: int = 100,
        global_shuffle_mode: Optional[str] = None,
    ) -> None:
        self.transformations = transformations
        self.job_name = job_name
        self.chaining_enabled = chaining_enabled
        self.default_max_parallelism = default_max_parallelism
        self.buffer_timeout = buffer_timeout
        self.global_shuffle_mode = global_shuffle_mode
        self._already_transformed: dict[int, list[int]] = {}
        self._next_virtual_id = -1

    def generate(self) -> StreamGraph:
        self.graph = StreamGraph(self.job_name, self.chaining_enabled)
        self.graph.buffer_timeout = self.buffer_timeout
        self.graph.default_shuffle_mode = self.global_shuffle_mode or "UNDEFINED"
        for transformation in self.transformations:
            self._transform(transformation)
        if not self.graph.sources:
            raise GraphError("No operators defined in streaming topology. Cannot execute.")
        return self.graph

    # -- helpers ------------------------------------------------------------------
    def _new_virtual_id(self) -> int:
        vid = self._next_virtual_id
        self._next_virtual_id -= 1
        return vid

    def _resolve(self, node_id: int) -> int:
        graph = self.graph
        while node_id < 0:
            if node_id in graph.virtual_partition_nodes:
                node_id = graph.virtual_partition_nodes[node_id][0]
            else:
                node_id = graph.virtual_side_output_nodes[node_id][0]
        return node_id

    def _slot_sharing_group(self, specified: Optional[str], input_ids: list[int]) -> str:
        if specified is not None:
            return specified
        group = None
        for input_id in input_ids:
            candidate = self.graph.nodes[self._resolve(input_id)].slot_sharing_group
            if group is None:
                group = candidate
            elif group != candidate:
                return DEFAULT_SLOT_SHARING_GROUP
        return group if group is not None else DEFAULT_SLOT_SHARING_GROUP

    # -- the recursive walk ----------------------------------------------------------
    def _transform(self, t: Transformation) -> list[int]:
        done = self._already_transformed.get(t.id)
        if done is not None:
            return done
        if t.kind == T.UNION:
            ids = [i for inp in t.inputs for i in self._transform(inp)]
        elif t.kind == T.PARTITION:
            ids = []
            mode = t.shuffle_mode
            if self.global_shuffle_mode and mode == "UNDEFINED":
                mode = self.global_shuffle_mode
            for input_id in self._transform(t.inputs[0]):
                vid = self._new_virtual_id()
                self.graph.add_virtual_partition_node(input_id, vid, t.partitioner, mode)
                ids.append(vid)
        elif t.kind == T.SIDE_OUTPUT:
            ids = []
            for input_id in self._transform(t.inputs[0]):
                vid = self._new_virtual_id()
                self.graph.add_virtual_side_output_node(input_id, vid, t.output_tag)
                ids.append(vid)
        else:
            ids = self._transform_physical(t)
        self._already_transformed[t.id] = ids
        return ids

    def _transform_physical(self, t: Transformation) -> list[int]:
        validate_parallelism(t.parallelism, t.describe())
        max_parallelism = t.max_parallelism
        if max_parallelism <= 0 and self.default_max_parallelism > 0:
            max_parallelism = self.default_max_parallelism
        if t.non_parallel and t.parallelism != 1:
            raise GraphError(
                f"The parallelism of non parallel operator must be 1 (operator {t.describe()})."
            )
        if max_parallelism > 0:
            validate_max_parallelism(max_parallelism, t.describe())
            if t.parallelism > max_parallelism:
                raise GraphError(
                    f"The parallelism ({t.parallelism}) of operator {t.describe()} is higher than "
                    f"its max parallelism ({max_parallelism}). Please lower the parallelism or "
                    "increase the max parallelism."
                )
        input_ids = [self._transform(inp) for inp in t.inputs]
        flat_inputs = [i for ids in input_ids for i in ids]
        name = t.name
        if t.kind == T.SOURCE:
            name = f"Source: {t.name}"
        elif t.kind == T.SINK:
            name = f"Sink: {t.name}"
        spec = t.operator
        spec.name = name
        spec.chaining_strategy = t.chaining_strategy
        node = StreamNode(
            id=t.id,
            operator_name=name,
            operator=spec,
            parallelism=t.parallelism,
            max_parallelism=max_parallelism,
            slot_sharing_group=self._slot_sharing_group(t.slot_sharing_group, flat_inputs),
            uid=t.uid,
            buffer_timeout=t.buffer_timeout if t.buffer_timeout is not None else self.buffer_timeout,
            output_type=t.output_type,
            is_source=t.kind == T.SOURCE,
            is_sink=t.kind == T.SINK,
        )
        self.graph.add_node(node)
        if t.kind == T.TWO_INPUT:
            for type_number, ids in ((1, input_ids[0]), (2, input_ids[1])):
                for input_id in ids:
                    self.graph.add_edge(input_id, t.id, type_number)
        else:
            for input_id in flat_inputs:
                self.graph.add_edge(input_id, t.id, 0)
        return [t.id]
