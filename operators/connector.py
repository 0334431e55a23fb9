"""Operators contributed by connectors: the operator kinds ``source_connector`` and
``sink_connector``.

The ``OperatorSpec``'s function is a connector object (for example the Spark
bridge's ``SparkDataFrameSource`` or ``SparkSink``) with a method
``create_operator(spec) -> StreamOperator``; it is pickled into the job graph
and builds a fresh operator in every subtask. A source's operator implements
``emit_next(max_records) -> bool`` like the built-in sources. This keeps
``operators/`` free of connector imports: the dependency points from
``connectors/`` to ``operators/`` only.
"""

from __future__ import annotations

from typing import Any

from raylink.operators.base import StreamOperator

CONNECTOR_SOURCE = "source_connector"
CONNECTOR_SINK = "sink_connector"


def create_connector_operator(spec: Any) -> StreamOperator:
    factory = getattr(spec.function, "create_operator", None)
    if not callable(factory):
        raise TypeError(
            f"operator {getattr(spec, 'name', '')!r} of kind {spec.kind!r}: the function must be a "
            f"connector object with create_operator(spec), got {type(spec.function).__name__}"
        )
    operator = factory(spec)
    if not isinstance(operator, StreamOperator):
        raise TypeError(
            f"operator {getattr(spec, 'name', '')!r}: {type(spec.function).__name__}.create_operator "
            f"returned {type(operator).__name__}, not a StreamOperator"
        )
    if spec.kind == CONNECTOR_SOURCE and not callable(getattr(operator, "emit_next", None)):
        raise TypeError(f"operator {getattr(spec, 'name', '')!r}: a connector source needs emit_next()")
    return operator


__all__ = ["CONNECTOR_SOURCE", "CONNECTOR_SINK", "create_connector_operator"]
