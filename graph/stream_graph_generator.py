"""Flink's ``StreamGraphGenerator``: transformations -> StreamGraph.

Walks the transformations recursively (inputs first, each once), turns physical
ones into StreamNodes and virtual ones into virtual node ids, adds the edges,
and decides each node's slot sharing group the way Flink does: the group the
user set, else the group all inputs agree on, else ``"default"``.

The runtime mode (``execution.runtime-mode``) is resolved here, as Flink's generator
does: AUTOMATIC is BATCH when every source is bounded, else STREAMING; BATCH with a
source that declares itself unbounded fails. A BATCH graph has job type BATCH (its
exchanges are blocking, see ``job_graph_generator``) and every operator spec is marked
``execution_mode="BATCH"`` (the runtime then picks the batch operators and sorts keyed
inputs). A source is bounded when its function says so (``get_boundedness()``, Flink's
``Source.getBoundedness``), when it is a collection or sequence source, or when a
SourceFunction is given a collection; other SourceFunctions are of unknown boundedness
(unbounded for AUTOMATIC, allowed in BATCH).
"""

from __future__ import annotations

from typing import Optional

from raylink.core.key_groups import UPPER_BOUND_MAX_PARALLELISM
from raylink.graph import transformations as T
from raylink.graph.stream_graph import GraphError, StreamGraph, StreamNode
from raylink.graph.transformations import DEFAULT_SLOT_SHARING_GROUP, Transformation

RUNTIME_MODES = ("STREAMING", "BATCH", "AUTOMATIC")
_BOUNDED_SOURCE_KINDS = frozenset({"source_collection", "source_sequence"})


def source_boundedness(source: Transformation) -> Optional[bool]:
    """Whether a source transformation is bounded (True), unbounded (False) or not known (None)."""
    spec = source.operator
    function = getattr(spec, "function", None)
    declared = getattr(function, "get_boundedness", None)
    if callable(declared) and not isinstance(function, type):
        value = declared()
        return str(getattr(value, "name", value)).upper() == "BOUNDED"
    if spec is not None and spec.kind in _BOUNDED_SOURCE_KINDS:
        return True
    if isinstance(function, (list, tuple)):
        return True
    return None


def validate_parallelism(parallelism: int, what: str) -> None:
    if not isinstance(parallelism, int) or isinstance(parallelism, bool) or parallelism < 1:
        raise GraphError(f"The parallelism of an operator must be at least 1 (operator {what}, got {parallelism!r}).")


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
        runtime_mode: str = "STREAMING",
    ) -> None:
        self.transformations = transformations
        self.job_name = job_name
        self.chaining_enabled = chaining_enabled
        self.default_max_parallelism = default_max_parallelism
        self.buffer_timeout = buffer_timeout
        self.global_shuffle_mode = global_shuffle_mode
        if str(runtime_mode).upper() not in RUNTIME_MODES:
            raise GraphError(f"unknown runtime mode {runtime_mode!r}: one of {', '.join(RUNTIME_MODES)}")
        self.runtime_mode = str(runtime_mode).upper()
        self.job_type = "STREAMING"
        self._already_transformed: dict[int, list[int]] = {}
        self._next_virtual_id = -1

    def generate(self) -> StreamGraph:
        self.graph = StreamGraph(self.job_name, self.chaining_enabled)
        self.graph.buffer_timeout = self.buffer_timeout
        self.graph.default_shuffle_mode = self.global_shuffle_mode or "UNDEFINED"
        self.job_type = self.graph.job_type = self._resolve_job_type()
        for transformation in self.transformations:
            self._transform(transformation)
        if not self.graph.sources:
            raise GraphError("No operators defined in streaming topology. Cannot execute.")
        return self.graph

    # -- runtime mode ---------------------------------------------------------------
    def _sources(self) -> list[Transformation]:
        seen: set[int] = set()
        stack = list(self.transformations)
        found: list[Transformation] = []
        while stack:
            t = stack.pop()
            if t.id in seen:
                continue
            seen.add(t.id)
            if t.kind == T.SOURCE:
                found.append(t)
            stack.extend(t.inputs)
        return sorted(found, key=lambda t: t.id)

    def _resolve_job_type(self) -> str:
        """STREAMING or BATCH: Flink's ``StreamGraphGenerator.shouldExecuteInBatchMode``."""
        if self.runtime_mode == "STREAMING":
            return "STREAMING"
        boundedness = [(t, source_boundedness(t)) for t in self._sources()]
        if self.runtime_mode == "AUTOMATIC":
            return "BATCH" if all(b is True for _, b in boundedness) else "STREAMING"
        unbounded = [t for t, b in boundedness if b is False]
        if unbounded:
            raise GraphError(
                f"Detected an UNBOUNDED source ({unbounded[0].describe()}) with the "
                "'execution.runtime-mode' set to 'BATCH'. This combination is not allowed, please set "
                "the 'execution.runtime-mode' to STREAMING or AUTOMATIC"
            )
        return "BATCH"

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
            raise GraphError(f"The parallelism of non parallel operator must be 1 (operator {t.describe()}).")
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
        spec.execution_mode = self.job_type
        node = StreamNode(
            id=t.id,
            operator_name=name,
            operator=spec,
            parallelism=t.parallelism,
            max_parallelism=max_parallelism,
            slot_sharing_group=self._slot_sharing_group(t.slot_sharing_group, flat_inputs),
            uid=t.uid,
            description=t.description,
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
