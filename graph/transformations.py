"""Flink's ``Transformation`` family: what every DataStream call records.

A transformation is either *physical* (source, one-input, two-input, sink: it
becomes a StreamNode) or *virtual* (union, partition, side output: it only
shapes the edges). Ids come from a per-environment counter starting at 1.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from raylink.core.output_tag import OutputTag
from raylink.graph.operator_spec import OperatorSpec, PartitionerSpec

SOURCE = "source"
ONE_INPUT = "one_input"
TWO_INPUT = "two_input"
SINK = "sink"
UNION = "union"
PARTITION = "partition"
SIDE_OUTPUT = "side_output"

PHYSICAL_KINDS = frozenset({SOURCE, ONE_INPUT, TWO_INPUT, SINK})

CHAINING_STRATEGIES = ("ALWAYS", "HEAD", "NEVER")
SHUFFLE_MODES = ("UNDEFINED", "PIPELINED", "BATCH")

# Flink's StreamGraphGenerator.DEFAULT_SLOT_SHARING_GROUP
DEFAULT_SLOT_SHARING_GROUP = "default"


@dataclass(eq=False)
class Transformation:
    """One node of the user's logical program (Flink's ``Transformation``)."""

    id: int
    name: str
    kind: str
    inputs: list["Transformation"] = field(default_factory=list)
    parallelism: int = 1
    max_parallelism: int = -1
    operator: Optional[OperatorSpec] = None
    uid: Optional[str] = None
    description: Optional[str] = None  # set_description(): the plan's "contents"
    slot_sharing_group: Optional[str] = None
    chaining_strategy: str = "ALWAYS"
    buffer_timeout: Optional[int] = None
    # partition transformations
    partitioner: Optional[PartitionerSpec] = None
    shuffle_mode: str = "UNDEFINED"
    # side-output transformations
    output_tag: Optional[OutputTag] = None
    # the type of the produced elements, when the user declared one
    output_type: Any = None
    # non-parallel operators (e.g. from_collection) must keep parallelism 1
    non_parallel: bool = False
    # side outputs requested from this transformation: tag id -> type info
    side_output_types: dict = field(default_factory=dict)

    @property
    def is_physical(self) -> bool:
        return self.kind in PHYSICAL_KINDS

    def describe(self) -> str:
        return f"'{self.name}' (transformation {self.id})"

    def __repr__(self) -> str:
        return f"Transformation(id={self.id}, name={self.name!r}, kind={self.kind})"
