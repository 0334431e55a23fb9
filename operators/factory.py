"""Operator kind -> operator: what Flink's ``SimpleOperatorFactory.createStreamOperator`` does.

``create_operator(spec)`` is the single place that maps an ``OperatorSpec``
(duck-typed: ``kind``, ``function``, ``params``, ``key_selector``, ``name``,
``operator_id``) to a fresh, not yet set-up operator instance. On a keyed stream
(``key_selector`` / ``params["key_selector1"]`` set) a map, flat-map, filter, reduce,
co-map or co-flat-map whose function may use keyed state
(``runtime_context.may_use_keyed_state``) gets the variant that sets the current key
per record; every other function keeps the plain operator. In a BATCH job
(``execution_mode == "BATCH"``) ``operators.batch.for_batch_execution`` turns a reduce or
aggregation into the batch reduce and gives every keyed operator a sorted input.
"""

from __future__ import annotations

from typing import Any, Callable, Dict

from raylink.operators.base import StreamOperator
from raylink.operators.basic import (
    KeyedStreamFilter,
    KeyedStreamFlatMap,
    KeyedStreamMap,
    StreamFilter,
    StreamFlatMap,
    StreamMap,
)
from raylink.operators.batch import for_batch_execution
from raylink.operators.broadcast import CoBroadcastWithKeyedOperator, CoBroadcastWithNonKeyedOperator
from raylink.operators.co import (
    CoProcessOperator,
    CoStreamFlatMap,
    CoStreamMap,
    KeyedCoProcessOperator,
    KeyedCoStreamFlatMap,
    KeyedCoStreamMap,
)
from raylink.operators.connector import CONNECTOR_SINK, CONNECTOR_SOURCE, create_connector_operator
from raylink.operators.map_batches import create_map_batches_operator
from raylink.operators.process import KeyedProcessOperator, ProcessOperator
from raylink.operators.reduce import (
    StreamGroupedAggregateOperator,
    StreamGroupedReduceOperator,
    StreamGroupedReduceOperatorWithKeyedState,
)
from raylink.operators.runtime_context import may_use_keyed_state
from raylink.operators.sink_writer import sink_writer_operator
from raylink.operators.sinks import CollectSinkOperator, PrintSinkOperator, StreamSink
from raylink.operators.sources import CollectionSourceOperator, SequenceSourceOperator, SourceFunctionOperator
from raylink.operators.timestamps import TimestampsAndWatermarksOperator
from raylink.operators.window import create_window_operator


def _params(spec: Any) -> Dict[str, Any]:
    return getattr(spec, "params", None) or {}


def _async_wait_operator() -> type:
    """``AsyncWaitOperator``, imported when a job has one (it brings asyncio along)."""
    from raylink.operators.async_wait import AsyncWaitOperator

    return AsyncWaitOperator


def _required(spec: Any, key: str) -> Any:
    params = _params(spec)
    if key not in params:
        raise ValueError(f"operator {spec.name!r} of kind {spec.kind!r} needs params[{key!r}]")
    return params[key]


def _one_input(
    plain: Callable[..., StreamOperator], keyed: Callable[..., StreamOperator]
) -> Callable[[Any], StreamOperator]:
    """Builder of a one-input kind: the keyed variant on a keyed stream for a function that
    may use keyed state, else the plain operator."""

    def build(spec: Any) -> StreamOperator:
        if spec.key_selector is not None and may_use_keyed_state(spec.function):
            return keyed(spec.function, spec.key_selector)
        return plain(spec.function)

    return build


def _two_input(
    plain: Callable[..., StreamOperator], keyed: Callable[..., StreamOperator]
) -> Callable[[Any], StreamOperator]:
    """Same for a co-map / co-flat-map of (keyed) ConnectedStreams."""

    def build(spec: Any) -> StreamOperator:
        params = _params(spec)
        if "key_selector1" in params and may_use_keyed_state(spec.function):
            return keyed(spec.function, params["key_selector1"], params.get("key_selector2"))
        return plain(spec.function)

    return build


def _reduce(spec: Any) -> StreamOperator:
    if may_use_keyed_state(spec.function):
        return StreamGroupedReduceOperatorWithKeyedState(spec.function, spec.key_selector)
    return StreamGroupedReduceOperator(spec.function, spec.key_selector)


_BUILDERS: Dict[str, Callable[[Any], StreamOperator]] = {
    "source_collection": lambda s: CollectionSourceOperator(_required(s, "elements")),
    "source_sequence": lambda s: SequenceSourceOperator(_required(s, "start"), _required(s, "end")),
    "source_function": lambda s: SourceFunctionOperator(s.function),
    "map": _one_input(StreamMap, KeyedStreamMap),
    "flat_map": _one_input(StreamFlatMap, KeyedStreamFlatMap),
    "filter": _one_input(StreamFilter, KeyedStreamFilter),
    "map_batches": create_map_batches_operator,
    "process": lambda s: ProcessOperator(s.function),
    "keyed_process": lambda s: KeyedProcessOperator(s.function, s.key_selector),
    "reduce": _reduce,
    "aggregate": lambda s: StreamGroupedAggregateOperator(_required(s, "agg"), _params(s).get("field"), s.key_selector),
    "co_map": _two_input(CoStreamMap, KeyedCoStreamMap),
    "co_flat_map": _two_input(CoStreamFlatMap, KeyedCoStreamFlatMap),
    "co_process": lambda s: CoProcessOperator(s.function),
    "keyed_co_process": lambda s: KeyedCoProcessOperator(
        s.function, _required(s, "key_selector1"), _required(s, "key_selector2")
    ),
    "co_broadcast_process": lambda s: CoBroadcastWithNonKeyedOperator(
        s.function,
        _required(s, "broadcast_state_descriptors"),
        broadcast_first=getattr(s, "execution_mode", "STREAMING") == "BATCH",
    ),
    "keyed_co_broadcast_process": lambda s: CoBroadcastWithKeyedOperator(
        s.function, s.key_selector, _required(s, "broadcast_state_descriptors")
    ),
    "timestamps": lambda s: TimestampsAndWatermarksOperator(s.function),
    "async_wait": lambda s: _async_wait_operator()(
        s.function,
        _params(s).get("timeout_ms", 0),
        _params(s).get("capacity", 100),
        _params(s).get("retry_strategy"),
        _params(s).get("output_mode", "UNORDERED"),
    ),
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
    strategy = spec.params.get("watermark_strategy") if spec.params else None
    if strategy is not None:  # env.from_source(source, strategy, ...)
        if not hasattr(operator, "watermark_strategy"):
            raise TypeError(
                f"source {name!r}: a {type(operator).__name__} cannot run a watermark strategy "
                "(from_source takes one only for sources built on SourceOperator)"
            )
        operator.watermark_strategy = strategy
    if getattr(spec, "execution_mode", "STREAMING") == "BATCH":  # the batch reduce, sorted keyed inputs
        operator = for_batch_execution(spec, operator)
    return operator


__all__ = ["create_operator", "chaining_strategy_for_kind", "OPERATOR_KINDS"]
