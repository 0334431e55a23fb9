"""Operator kind -> operator: what Flink's ``SimpleOperatorFactory.createStreamOperator`` does.

``create_operator(spec)`` is the single place that maps an ``OperatorSpec``
(duck-typed: ``kind``, ``function``, ``params``, ``key_selector``, ``name``,
``operator_id``) to a fresh, not yet set-up operator instance.
"""

from __future__ import annotations

from typing import Any, Callable, Dict

from raylink.operators.basic import StreamFilter, StreamFlatMap, StreamMap
from raylink.operators.base import StreamOperator
from raylink.operators.connector import CONNECTOR_SINK, CONNECTOR_SOURCE, create_connector_operator
from raylink.operators.co import CoProcessOperator, CoStreamFlatMap, CoStreamMap, KeyedCoProcessOperator
from raylink.operators.process import KeyedProcessOperator, ProcessOperator
from raylink.operators.reduce import StreamGroupedAggregateOperator, StreamGroupedReduceOperator
from raylink.operators.sinks import CollectSinkOperator, PrintSinkOperator, StreamSink
from raylink.operators.sources import CollectionSourceOperator, SequenceSourceOperator, SourceFunctionOperator
from raylink.operators.sink_writer import sink_writer_operator
from raylink.operators.timestamps import TimestampsAndWatermarksOperator
from raylink.operators.window import create_window_operator


def _params(spec: Any) -> Dict[str, Any]:
    return getattr(spec, "params", None) or {}


def _required(spec: Any, key: str) -> Any:
    params = _params(spec)
    if key not in params:
        raise ValueError(f"operator {spec.name!r} of kind {spec.kind!r} needs params[{key!r}]")
    return params[key]


_BUILDERS: Dict[str, Callable[[Any], StreamOperator]] = {
    "source_collection": lambda s: CollectionSourceOperator(_required(s, "elements")),
    "source_sequence": lambda s: SequenceSourceOperator(_required(s, "start"), _required(s, "end")),
    "source_function": lambda s: SourceFunctionOperator(s.function),
    "map": lambda s: StreamMap(s.function),
    "flat_map": lambda s: StreamFlatMap(s.function),
    "filter": lambda s: StreamFilter(s.function),
    "process": lambda s: ProcessOperator(s.function),
    "keyed_process": lambda s: KeyedProcessOperator(s.function, s.key_selector),
    "reduce": lambda s: StreamGroupedReduceOperator(s.function, s.key_selector),
    "aggregate": lambda s: StreamGroupedAggregateOperator(
        _required(s, "agg"), _params(s).get("field"), s.key_selector
    ),
    "co_map": lambda s: CoStreamMap(s.function),
    "co_flat_map": lambda s: CoStreamFlatMap(s.function),
    "co_process": lambda s: CoProcessOperator(s.function),
    "keyed_co_process": lambda s: KeyedCoProcessOperator(
        s.function, _required(s, "key_selector1"), _required(s, "key_selector2")
    ),
    "timestamps": lambda s: TimestampsAndWatermarksOperator(s.function),
    "window": lambda s: create_window_operator(s.function, s.key_selector),
    "sink": lambda s: StreamSink(s.function),
    "print": lambda s: PrintSinkOperator(_params(s).get("prefix"), bool(_params(s).get("stderr", False))),
    "collect": lambda s: CollectSinkOperator(_required(s, "collect_id")),
    "sink_v2": sink_writer_operator,
    CONNECTOR_SOURCE: create_connector_operator,
    CONNECTOR_SINK: create_connector_operator,
}

OPERATOR_KINDS = frozenset(_BUILDERS)

_HEAD_KINDS = frozenset({"source_collection", "source_sequence", "source_function", CONNECTOR_SOURCE})


def chaining_strategy_for_kind(kind: str) -> str:
    """Default chaining strategy of an operator kind ("HEAD" for sources, else "ALWAYS")."""
    if kind not in _BUILDERS:
        raise ValueError(f"unknown operator kind {kind!r}")
    return "HEAD" if kind in _HEAD_KINDS else "ALWAYS"


def create_operator(spec: Any) -> StreamOperator:
    """A new operator for ``spec``; call ``setup(output, runtime_context)`` then ``open()``."""
    builder = _BUILDERS.get(spec.kind)
    if builder is None:
        raise ValueError(
            f"unknown operator kind {spec.kind!r} for operator {getattr(spec, 'name', '')!r}; "
            f"known kinds: {', '.join(sorted(_BUILDERS))}"
        )
    operator = builder(spec)
    name = getattr(spec, "name", "")
    if name:
        operator.name = name
    operator.operator_id = getattr(spec, "operator_id", "") or ""
    operator.spec = spec  # the chain reads it back (e.g. to decide on a keyed backend)
    return operator


__all__ = ["create_operator", "chaining_strategy_for_kind", "OPERATOR_KINDS"]
