"""Stream operators (Flink's ``org.apache.flink.streaming.api.operators``): pure Python, no Ray.

May import: ``core``, ``graph``, ``shuffle``, ``state``, ``metrics`` and ``errors``; never
``runtime`` or a floor above it.

Build operators from graph specs with ``create_operator(spec)``; drive them
with ``setup(output, runtime_context)``, ``open()``, ``process_element`` /
``process_batch`` / ``process_watermark`` (``emit_next`` for sources),
``end_input()`` and ``close()``.
"""

from raylink.operators.base import (
    MAX_WATERMARK,
    MIN_WATERMARK,
    AbstractUdfStreamOperator,
    StreamOperator,
    TwoInputStreamOperator,
)
from raylink.operators.factory import OPERATOR_KINDS, chaining_strategy_for_kind, create_operator
from raylink.operators.output import CollectingOutput, DiscardingOutput, Output
from raylink.operators.processing_time import (
    ManualProcessingTimeService,
    ProcessingTimeService,
    SystemProcessingTimeService,
)
from raylink.operators.runtime_context import RecordContext, StreamingRuntimeContext
from raylink.operators.sources import SourceOperator

__all__ = [
    "MAX_WATERMARK",
    "MIN_WATERMARK",
    "AbstractUdfStreamOperator",
    "StreamOperator",
    "TwoInputStreamOperator",
    "SourceOperator",
    "OPERATOR_KINDS",
    "chaining_strategy_for_kind",
    "create_operator",
    "Output",
    "CollectingOutput",
    "DiscardingOutput",
    "ProcessingTimeService",
    "ManualProcessingTimeService",
    "SystemProcessingTimeService",
    "RecordContext",
    "StreamingRuntimeContext",
]
