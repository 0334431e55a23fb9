"""Assigning timestamps and generating watermarks: Flink's ``TimestampsAndWatermarksOperator``.

For every record the strategy's ``TimestampAssigner`` computes the new timestamp
from the value and the timestamp the record carried (``Long.MIN_VALUE`` when none);
the record leaves with it and the ``WatermarkGenerator`` sees it (``on_event``).
Every ``pipeline.auto-watermark-interval`` ms (default 200; 0 disables) the
generator's ``on_periodic_emit`` runs through the task's processing-time service —
so on the task thread, between records — and once more at end of input. A
watermark is emitted only when it advances. Watermarks from upstream are swallowed
except the end-of-input ``Long.MAX_VALUE`` one. Idleness marked by the generator
is emitted as a ``WatermarkStatus`` where the output supports it.

Batch paths: ``process_batch`` / ``process_timestamped_batch`` call the user's
assigner once per record (an assigner whose body only reads a field, ``return value[4]``,
runs as the ``operator.itemgetter`` doing that: ``core.field_selectors``), check the
batch's timestamps are ints in one C pass (``sum``; a record whose timestamp is not is
named in the error) and hand the generator the whole batch (``on_timestamps``: one call;
the built-in generators take the maximum in C).
Not thread-safe: one instance per subtask, driven by its task thread.
"""

from __future__ import annotations

from typing import Any, List, Optional

from raylink.core.field_selectors import field_getter
from raylink.core.options import PipelineOptions, read_option
from raylink.core.reprs import record_repr
from raylink.core.watermark_strategy import (
    RecordTimestampAssigner,
    WatermarkOutput,
    WatermarkStrategy,
    watermark_timestamp,
)
from raylink.operators.base import MAX_WATERMARK, MIN_WATERMARK, StreamOperator


def auto_watermark_interval(job_parameters: Any) -> int:
    """``pipeline.auto-watermark-interval`` of the job, in ms (0: no periodic watermarks)."""
    return read_option(job_parameters or {}, PipelineOptions.AUTO_WATERMARK_INTERVAL)


class _WatermarkEmitter(WatermarkOutput):
    """Flink's ``WatermarkEmitter``: forwards advancing watermarks, toggles idleness."""

    __slots__ = ("_operator", "current_watermark", "idle")

    def __init__(self, operator: "TimestampsAndWatermarksOperator") -> None:
        self._operator = operator
        self.current_watermark = MIN_WATERMARK
        self.idle = False

    def emit_watermark(self, watermark: Any) -> None:
        ts = watermark_timestamp(watermark)
        if ts <= self.current_watermark:
            return
        self.current_watermark = ts
        if self.idle:
            self.idle = False
            self._operator._forward_status(idle=False)
        self._operator.current_watermark = ts
        self._operator.output.emit_watermark(ts)  # type: ignore[union-attr]

    def mark_idle(self) -> None:
        if not self.idle:
            self.idle = True
            self._operator._forward_status(idle=True)

    def mark_active(self) -> None:
        if self.idle:
            self.idle = False
            self._operator._forward_status(idle=False)


def _all_int(timestamps: List[Any]) -> bool:
    """True if every timestamp is an int: ``sum`` in C stays an exact ``int`` only while every
    term is one (a float, Decimal or NumPy integer turns the total into its type; None or a
    string raises). One pass, about a third of a per-element ``type`` check; int subclasses
    (bool) pass as the ints they are."""
    try:
        return type(sum(timestamps)) is int
    except TypeError:
        return False


def _bad_timestamp(operator: str, timestamps: List[Any], values: List[Any]) -> TypeError:
    for value, ts in zip(values, timestamps):
        if not isinstance(ts, int):
            return TypeError(
                f"operator {operator!r}: the timestamp assigner returned {ts!r} ({type(ts).__name__}) for "
                f"record {record_repr(value)}; timestamps must be int milliseconds"
            )
    return TypeError(f"operator {operator!r}: the timestamp assigner returned a non-int timestamp")


class TimestampsAndWatermarksOperator(StreamOperator):
    """Runs a ``WatermarkStrategy`` on one subtask's records."""

    def __init__(self, strategy: WatermarkStrategy, name: str = "", operator_id: str = "") -> None:
        super().__init__(name or "Timestamps/Watermarks", operator_id)
        if not callable(getattr(strategy, "create_watermark_generator", None)):
            raise TypeError(
                f"assign_timestamps_and_watermarks: expected a WatermarkStrategy, got {type(strategy).__name__}"
            )
        self.strategy = strategy
        self._timer: Any = None
        self._closed = False
        self.watermark_interval = PipelineOptions.AUTO_WATERMARK_INTERVAL.default
        self.input_watermark = MIN_WATERMARK

    def open(self) -> None:
        rc = self.runtime_context
        self._pts = rc.processing_time_service
        assigner = self.strategy.create_timestamp_assigner()
        self._keeps_timestamps = type(assigner) is RecordTimestampAssigner
        self._extract = assigner.extract_timestamp
        # an assigner that only reads a field (``return value[4]``) runs as its itemgetter
        getter = field_getter(self._extract, unused_args=1)
        self._field = None if getter is self._extract else getter
        open_hook = getattr(assigner, "open", None)
        if callable(open_hook):
            open_hook(rc)
        self.generator = self.strategy.create_watermark_generator(clock=self._pts.current_processing_time)
        self._on_event = self.generator.on_event
        self._on_timestamps = self.generator.on_timestamps
        self.wm_output = _WatermarkEmitter(self)
        self.watermark_interval = auto_watermark_interval(rc.job_parameters)
        if self.watermark_interval > 0:
            self._timer = self._pts.register_timer(
                self._pts.current_processing_time() + self.watermark_interval, self._on_periodic_emit
            )

    # -- records ---------------------------------------------------------------------------
    def process_element(self, value: Any) -> None:
        rc = self.record_context
        previous = rc.timestamp
        ts = self._extract(value, MIN_WATERMARK if previous is None else previous)
        if not isinstance(ts, int):
            raise _bad_timestamp(self.name, [ts], [value])
        rc.timestamp = ts
        self._collect(value)
        rc.timestamp = previous
        self._on_event(value, ts, self.wm_output)

    def process_batch(self, values: List[Any]) -> None:
        if not values:
            return
        rc = self.record_context
        previous = rc.timestamp
        if self._keeps_timestamps:
            if previous is None:
                timestamps = [MIN_WATERMARK] * len(values)
            else:
                self._collect_batch(values)
                self._on_timestamps(values, [previous] * len(values), self.wm_output)
                return
        elif self._field is not None:
            timestamps = list(map(self._field, values))
        else:
            record_ts = MIN_WATERMARK if previous is None else previous
            extract = self._extract
            # a comprehension, not map(): a call from bytecode into the assigner costs less than
            # one from C (CPython 3.11 pushes its frame without entering the eval loop again)
            timestamps = [extract(value, record_ts) for value in values]
        self._emit_batch(values, timestamps)
        rc.timestamp = previous

    def process_timestamped_batch(self, values: List[Any], timestamps: List[int]) -> None:
        """Records that each carry their own timestamp (a run read from the network)."""
        if self._field is not None:
            timestamps = list(map(self._field, values))
        elif not self._keeps_timestamps:
            timestamps = list(map(self._extract, values, timestamps))
        self._emit_batch(values, timestamps)

    def _emit_batch(self, values: List[Any], timestamps: List[Any]) -> None:
        if not _all_int(timestamps):
            raise _bad_timestamp(self.name, timestamps, values)
        self._collect_timestamped(values, timestamps)
        self._on_timestamps(values, timestamps, self.wm_output)

    # -- watermarks ------------------------------------------------------------------------
    def process_watermark(self, timestamp: int) -> None:
        # upstream watermarks are ignored, except the end of input (it must not be held back)
        self.input_watermark = timestamp
        if timestamp == MAX_WATERMARK:
            self.wm_output.emit_watermark(MAX_WATERMARK)

    def _on_periodic_emit(self, _timestamp: int) -> None:
        self._timer = None
        if self._closed:
            return
        self.generator.on_periodic_emit(self.wm_output)
        self._timer = self._pts.register_timer(
            self._pts.current_processing_time() + self.watermark_interval, self._on_periodic_emit
        )

    def _forward_status(self, idle: bool) -> None:
        emit = self._emit_watermark_status
        if emit is not None:
            emit(idle)

    def process_watermark_status(self, idle: bool) -> None:
        """Upstream idleness is not forwarded: this operator's generator decides (as its
        watermarks replace the upstream ones)."""

    def current_input_watermark(self) -> int:
        return self.input_watermark

    @property
    def is_idle(self) -> bool:
        return self.wm_output.idle

    # -- lifecycle -------------------------------------------------------------------------
    def end_input(self) -> None:
        """Flink's ``finish``: one last periodic emit at end of input."""
        if not self._closed:
            self.generator.on_periodic_emit(self.wm_output)

    def close(self) -> None:
        self._closed = True
        timer: Optional[Any] = self._timer
        if timer is not None:
            timer.cancel()
            self._timer = None


__all__ = [
    "TimestampsAndWatermarksOperator",
    "auto_watermark_interval",
]


class OperatorInput:
    """An ``Output`` that hands everything to a ``TimestampsAndWatermarksOperator`` owned by
    a source (Flink's ``SourceOperator`` runs the ``WatermarkStrategy`` of ``fromSource``
    itself, so the graphs have no extra node); side outputs and latency markers bypass it."""

    __slots__ = (
        "collect",
        "collect_batch",
        "collect_timestamped_batch",
        "emit_watermark",
        "emit_watermark_status",
        "collect_side",
        "emit_latency_marker",
    )

    def __init__(self, operator: TimestampsAndWatermarksOperator, output: Any) -> None:
        self.collect = operator.process_element
        self.collect_batch = operator.process_batch
        self.collect_timestamped_batch = operator.process_timestamped_batch
        self.emit_watermark = operator.process_watermark
        self.emit_watermark_status = operator.process_watermark_status
        self.collect_side = output.collect_side
        self.emit_latency_marker = output.emit_latency_marker
