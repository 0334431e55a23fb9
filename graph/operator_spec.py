"""What the graph layer knows about an operator and an exchange.

``OperatorSpec`` stands in for Flink's ``StreamOperatorFactory`` inside a
``StreamNode``: the operator *kind* and the user function as given. The runtime
(``raylink.operators.factory.create_operator``) turns it into a StreamOperator.
``PartitionerSpec`` stands in for a ``StreamPartitioner`` on a ``StreamEdge``:
only the ship-strategy name plus what the partitioner needs (key selector,
custom function); ``raylink.shuffle.partitioners`` builds the real one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Optional

SHIP_STRATEGIES = (
    "FORWARD",
    "REBALANCE",
    "RESCALE",
    "SHUFFLE",
    "BROADCAST",
    "GLOBAL",
    "HASH",
    "CUSTOM",
)

# Flink: ForwardPartitioner and RescalePartitioner map to POINTWISE, all others ALL_TO_ALL.
POINTWISE_STRATEGIES = frozenset({"FORWARD", "RESCALE"})


@dataclass
class OperatorSpec:
    """Kind + user function of one operator (Flink's SimpleOperatorFactory)."""

    kind: str
    function: Any = None
    params: dict = field(default_factory=dict)
    key_selector: Optional[Callable] = None
    name: str = ""
    operator_id: str = ""
    chaining_strategy: str = "ALWAYS"
    # "BATCH" in a job run in BATCH mode (set by the StreamGraphGenerator, as Flink's
    # translators pick the batch form of an operator and sorted inputs for keyed ones)
    execution_mode: str = "STREAMING"


@dataclass
class PartitionerSpec:
    """A StreamPartitioner by name: ``ship_strategy`` is one of SHIP_STRATEGIES."""

    ship_strategy: str
    key_selector: Optional[Callable] = None
    custom_partitioner: Optional[Callable] = None

    def __post_init__(self) -> None:
        if self.ship_strategy not in SHIP_STRATEGIES:
            raise ValueError(f"unknown ship strategy {self.ship_strategy!r}")

    @property
    def is_forward(self) -> bool:
        return self.ship_strategy == "FORWARD"

    @property
    def distribution_pattern(self) -> str:
        return "POINTWISE" if self.ship_strategy in POINTWISE_STRATEGIES else "ALL_TO_ALL"

    def __str__(self) -> str:
        return self.ship_strategy


FORWARD = PartitionerSpec("FORWARD")
REBALANCE = PartitionerSpec("REBALANCE")
