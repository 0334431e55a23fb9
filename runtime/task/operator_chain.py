"""Flink's ``OperatorChain``: the operators of one JobVertex wired inside one task.

Chained operators talk through ``ChainingOutput`` whose ``collect`` *is* the next
operator's ``process_element`` (same thread, no copy, no serialization).
Outputs that leave the chain are ``RecordWriterOutput``s. Each operator gets one
``OutputCollector`` that holds its main outputs and its side outputs by tag;
with several main outputs it broadcasts (Flink's ``BroadcastingOutputCollector``).
Operators are opened tail-first and closed head-first, each one's ``end_input``
before its ``close`` so what it emits on close still reaches the next one.
"""

from __future__ import annotations

import time
from collections import deque
from typing import Any, Callable, Optional

import cloudpickle

from raylink.errors import RaylinkError
from raylink.graph.job_graph import StreamConfig
from raylink.operators.factory import create_operator
from raylink.operators.runtime_context import StreamingRuntimeContext
from raylink.shuffle.elements import WatermarkStatus
from raylink.shuffle.hotpath import log_active


class OperatorError(RaylinkError, RuntimeError):
    """A user function or operator failed; ``operator_name`` names the failing operator."""

    def __init__(self, operator_name: str, task_name: str, cause: BaseException) -> None:
        super().__init__(f"Operator '{operator_name}' in task '{task_name}' failed: {type(cause).__name__}: {cause}")
        self.operator_name = operator_name
        self.task_name = task_name
        self.cause = cause
        self.__cause__ = cause

    def __reduce__(self):
        return (OperatorError, (self.operator_name, self.task_name, self.cause))


def _noop(*_args: Any) -> None:
    return None


class ChainingOutput:
    """Hands records straight to the next chained operator."""

    __slots__ = (
        "collect",
        "collect_batch",
        "collect_timestamped_batch",
        "emit_watermark",
        "emit_latency_marker",
        "emit_watermark_status",
        "operator",
    )

    def __init__(self, operator: Any, latency_handler: Optional[Callable[[Any], None]] = None) -> None:
        self.operator = operator
        self.collect = operator.process_element
        self.collect_batch = operator.process_batch
        # records with a timestamp each, for operators that take them as one batch (else None)
        self.collect_timestamped_batch = getattr(operator, "process_timestamped_batch", None)
        self.emit_watermark = operator.process_watermark
        self.emit_latency_marker = latency_handler or operator.process_latency_marker
        self.emit_watermark_status = getattr(operator, "process_watermark_status", _noop)  # (idle: bool)


class RecordWriterOutput:
    """Serialises records into a RecordWriter (an edge that leaves the chain)."""

    __slots__ = ("writer", "record_context", "collect", "collect_batch", "collect_timestamped_batch")

    def __init__(self, writer: Any, record_context: Any) -> None:
        self.writer = writer
        self.record_context = record_context
        self.collect = self._collect
        self.collect_batch = self._collect_batch
        self.collect_timestamped_batch = writer.emit_timestamped_batch  # (values, timestamps)

    def _collect(self, value: Any) -> None:
        ts = self.record_context.timestamp
        if ts is None:
            self.writer.emit(value)
        else:
            self.writer.emit_timestamped(value, ts)

    def _collect_batch(self, values: list) -> None:
        ts = self.record_context.timestamp
        if ts is None:
            self.writer.emit_batch(values)
        else:
            self.writer.emit_timestamped_batch(values, ts)

    def emit_watermark(self, timestamp: int) -> None:
        self.writer.emit_watermark(timestamp)

    def emit_watermark_status(self, idle: bool) -> None:
        self.writer.broadcast_emit(WatermarkStatus.IDLE if idle else WatermarkStatus.ACTIVE)

    def emit_latency_marker(self, marker: Any) -> None:
        self.writer.random_emit(marker)


class OutputCollector:
    """The ``Output`` one operator writes to: main outputs, side outputs by tag id."""

    def __init__(self, main: list, side: dict[str, list]) -> None:
        self._main = main
        self._side = side
        self._all = main + [o for outs in side.values() for o in outs]
        if len(main) == 1:
            self.collect = main[0].collect
            self.collect_batch = main[0].collect_batch
            timestamped = getattr(main[0], "collect_timestamped_batch", None)
            if timestamped is not None:  # else operators emit such records one by one
                self.collect_timestamped_batch = timestamped
        elif not main:
            self.collect = _noop
            self.collect_batch = _noop
        else:
            self.collect = self._broadcast
            self.collect_batch = self._broadcast_batch
            # a stream several chained operators read: a timestamped run goes to each as one batch
            if all(getattr(o, "collect_timestamped_batch", None) is not None for o in main):
                self.collect_timestamped_batch = self._broadcast_timestamped_batch

    def _broadcast(self, value: Any) -> None:
        for output in self._main:
            output.collect(value)

    def _broadcast_batch(self, values: list) -> None:
        for output in self._main:
            output.collect_batch(values if output is self._main[-1] else list(values))

    def _broadcast_timestamped_batch(self, values: list, timestamps: list) -> None:
        last = self._main[-1]
        for output in self._main:  # each its own lists: an operator may keep or change them
            if output is last:
                output.collect_timestamped_batch(values, timestamps)
            else:
                output.collect_timestamped_batch(list(values), list(timestamps))

    def collect_side(self, output_tag: Any, value: Any) -> None:
        outputs = self._side.get(output_tag.tag_id)
        if outputs:  # side outputs nobody consumes are dropped, as in Flink
            for output in outputs:
                output.collect(value)

    def emit_watermark(self, timestamp: int) -> None:
        for output in self._all:
            output.emit_watermark(timestamp)

    def emit_latency_marker(self, marker: Any) -> None:
        for output in self._all:
            output.emit_latency_marker(marker)

    def emit_watermark_status(self, idle: bool) -> None:
        for output in self._all:
            output.emit_watermark_status(idle)

    def close(self) -> None:
        pass


class OperatorChain:
    """Builds and drives the operators of one task from the vertex's StreamConfigs."""

    def __init__(
        self,
        configs: list[StreamConfig],
        record_writers: dict[str, Any],
        context: StreamingRuntimeContext,
        keyed_backend_factory: Optional[Callable[[Any], Any]] = None,
    ) -> None:
        self.configs = configs
        self.context = context
        log_active()  # which per-record path this TaskExecutor runs (compiled or pure Python), once per process
        # end-to-end latencies (ms) of the latency markers that reached a sink of this chain
        self.latency_samples: deque = deque(maxlen=10_000)
        self.operators: list[Any] = []
        self.names: list[str] = []
        by_node: dict[int, Any] = {}
        for config in configs:
            spec = cloudpickle.loads(config.serialized_operator)
            operator = create_operator(spec)
            by_node[config.node_id] = operator
            self.operators.append(operator)
            self.names.append(config.operator_name)
        # operators without outputs (sinks) end latency markers: their latency is recorded here
        self._sinks = {id(by_node[c.node_id]) for c in configs if not c.chained_outputs and not c.non_chained_outputs}
        for config in configs:
            main: list = []
            side: dict[str, list] = {}
            edges = [(e, False) for e in config.non_chained_outputs] + [(e, True) for e in config.chained_outputs]
            for edge, chained in edges:
                if chained:
                    target = by_node[edge.target_id]
                    output = ChainingOutput(target, self.latency_handler(target))
                else:
                    output = RecordWriterOutput(record_writers[edge.edge_id], context.record_context)
                if edge.output_tag is None:
                    main.append(output)
                else:
                    side.setdefault(edge.output_tag.tag_id, []).append(output)
            operator = by_node[config.node_id]
            op_context = context.derive(config.operator_name, config.operator_id)
            spec = operator_spec(operator)
            if keyed_backend_factory is not None and _is_keyed(spec):
                op_context.keyed_state_backend = keyed_backend_factory(spec)
            operator.setup(OutputCollector(main, side), op_context)
        self.head = self.operators[0]

    def latency_handler(self, operator: Any) -> Callable[[Any], None]:
        """Where a latency marker for ``operator`` goes: recorded at sinks, else the operator."""
        return self._record_latency if id(operator) in self._sinks else operator.process_latency_marker

    def _record_latency(self, marker: Any) -> None:
        self.latency_samples.append(time.time() * 1000.0 - marker.marked_time)

    # -- lifecycle ------------------------------------------------------------------------
    def open(self) -> None:
        for operator in reversed(self.operators):
            operator.open()

    def finish(self, head_inputs_ended: bool = True) -> None:
        """End the input of every operator head-first (Flink's ``endInput`` + ``finish``): what
        they emit at the end goes downstream now, before the task's final checkpoint."""
        for index, operator in enumerate(self.operators):
            if index > 0 or not head_inputs_ended:
                operator.end_input()

    def close(self) -> None:
        """Release every operator head-first, after ``finish`` (and after the final checkpoint
        completed, where the task takes one: a two-phase-commit sink has committed by then)."""
        for operator in self.operators:
            operator.close()

    def close_quietly(self) -> None:
        for operator in self.operators:
            try:
                operator.close()
            except Exception:  # already failing: keep the first error
                pass

    def failing_operator_name(self, exc: BaseException) -> str:
        """Name the innermost chained operator on the exception's stack (zero hot-path cost)."""
        names = {id(op): name for op, name in zip(self.operators, self.names)}
        found = None
        tb = exc.__traceback__
        while tb is not None:
            owner = tb.tb_frame.f_locals.get("self")
            if owner is not None and id(owner) in names:
                found = names[id(owner)]
            tb = tb.tb_next
        return found or self.names[0]


def operator_spec(operator: Any) -> Any:
    return getattr(operator, "spec", None)


def _is_keyed(spec: Any) -> bool:
    if spec is None:
        return False
    return spec.key_selector is not None or "key_selector1" in (spec.params or {})


def exception_with_operator(chain: Optional[OperatorChain], task_name: str, exc: BaseException) -> OperatorError:
    if isinstance(exc, OperatorError):
        return exc
    name = chain.failing_operator_name(exc) if chain is not None else task_name
    error = OperatorError(name, task_name, exc)
    error.__cause__ = exc
    return error


__all__ = [
    "ChainingOutput",
    "OperatorChain",
    "OperatorError",
    "OutputCollector",
    "RecordWriterOutput",
    "exception_with_operator",
]
