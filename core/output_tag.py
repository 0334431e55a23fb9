"""Side-output tags: Flink's ``org.apache.flink.util.OutputTag``.

Lives in ``graph/`` because the API, the StreamGraph (virtual side-output nodes,
``StreamEdge.output_tag``) and the runtime (routing in the OperatorChain) all use it.
"""

from __future__ import annotations

from typing import Any


class OutputTag:
    """A typed, named side output. Two tags are equal when their ids are equal."""

    _is_output_tag = True  # cheap duck-typed marker for the operators' hot path

    __slots__ = ("tag_id", "type_info")

    def __init__(self, tag_id: str, type_info: Any = None) -> None:
        if not isinstance(tag_id, str) or not tag_id:
            raise ValueError("OutputTag id must be a non-empty string")
        self.tag_id = tag_id
        self.type_info = type_info

    def __eq__(self, other: object) -> bool:
        return isinstance(other, OutputTag) and other.tag_id == self.tag_id

    def __hash__(self) -> int:
        return hash(("OutputTag", self.tag_id))

    def __repr__(self) -> str:
        return f"OutputTag({self.tag_id!r}, {self.type_info!r})"

    def __reduce__(self):
        return (OutputTag, (self.tag_id, self.type_info))
