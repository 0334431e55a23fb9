"""Timestamps and watermarks: PyFlink's ``pyflink.common.watermark_strategy`` with Flink's
``WatermarkStrategy`` / ``WatermarkGenerator`` / ``TimestampAssigner`` semantics.

A ``WatermarkStrategy`` is a builder of two per-subtask objects, created when the
operator opens: a ``TimestampAssigner`` (``extract_timestamp(value,
record_timestamp) -> int`` ms) and a ``WatermarkGenerator`` (``on_event`` per record,
``on_periodic_emit`` every ``pipeline.auto-watermark-interval``). The built-in
generators are Flink's: bounded out-of-orderness (watermark = max timestamp seen -
bound - 1), monotonous timestamps (bound 0), no watermarks, and the idleness wrapper
(``with_idleness``: an input without records for the timeout is marked idle).

As in PyFlink, ``with_timestamp_assigner`` / ``with_idleness`` configure the strategy
they are called on and return it. Generators are not thread-safe; each subtask gets
its own. The operator that runs them is
``raylink.operators.timestamps.TimestampsAndWatermarksOperator``.
"""

from __future__ import annotations

import copy
import time
from typing import Any, Callable, Optional

from raylink.core.time import Duration, to_millis

LONG_MIN = -(1 << 63)
LONG_MAX = (1 << 63) - 1


def watermark_timestamp(watermark: Any) -> int:
    """The timestamp of an int or of a watermark object (``timestamp`` attribute or getter)."""
    if isinstance(watermark, int) and not isinstance(watermark, bool):
        return watermark
    ts = getattr(watermark, "timestamp", None)
    if ts is None:
        ts = getattr(watermark, "get_timestamp", None)
    if callable(ts):
        ts = ts()
    if isinstance(ts, int) and not isinstance(ts, bool):
        return ts
    raise TypeError(f"a watermark must be an int (ms) or have an int timestamp, got {watermark!r}")


class Watermark:
    """A watermark a ``WatermarkGenerator`` emits (Flink's ``eventtime.Watermark``)."""

    __slots__ = ("timestamp",)

    def __init__(self, timestamp: int) -> None:
        self.timestamp = int(timestamp)

    def get_timestamp(self) -> int:
        return self.timestamp

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Watermark) and other.timestamp == self.timestamp

    def __hash__(self) -> int:
        return hash(self.timestamp)

    def __repr__(self) -> str:
        return f"Watermark({self.timestamp})"


class WatermarkOutput:
    """Where a generator emits (Flink's ``WatermarkOutput``)."""

    def emit_watermark(self, watermark: Any) -> None:
        """Emit a watermark (an int in ms or a ``Watermark``); ignored unless it advances."""
        raise NotImplementedError

    def mark_idle(self) -> None:
        """This output is idle: it does not hold back the watermark downstream."""
        raise NotImplementedError

    def mark_active(self) -> None:
        """This output is active again (also implied by the next watermark)."""
        raise NotImplementedError


class WatermarkGenerator:
    """Generates watermarks from events and/or periodically (Flink's ``WatermarkGenerator``)."""

    def on_event(self, event: Any, event_timestamp: int, output: WatermarkOutput) -> None:
        """Called for every record, after its timestamp was assigned."""

    def on_periodic_emit(self, output: WatermarkOutput) -> None:
        """Called every ``pipeline.auto-watermark-interval`` ms (and once at end of input)."""

    def on_timestamps(self, events: list, timestamps: list, output: WatermarkOutput) -> None:
        """raylink extension: ``on_event`` for a batch (built-in generators override it)."""
        on_event = self.on_event
        for event, ts in zip(events, timestamps):
            on_event(event, ts, output)


class BoundedOutOfOrdernessWatermarks(WatermarkGenerator):
    """Watermark = highest timestamp seen - ``max_out_of_orderness_ms`` - 1 (emitted periodically)."""

    def __init__(self, max_out_of_orderness_ms: int) -> None:
        if max_out_of_orderness_ms < 0:
            raise ValueError(f"max out of orderness cannot be negative, got {max_out_of_orderness_ms} ms")
        self.out_of_orderness = max_out_of_orderness_ms
        # start so that the first periodic watermark is Long.MIN_VALUE (no underflow)
        self.max_timestamp = LONG_MIN + max_out_of_orderness_ms + 1

    def on_event(self, event: Any, event_timestamp: int, output: WatermarkOutput) -> None:
        if event_timestamp > self.max_timestamp:
            self.max_timestamp = event_timestamp

    def on_timestamps(self, events: list, timestamps: list, output: WatermarkOutput) -> None:
        if timestamps:
            highest = max(timestamps)
            if highest > self.max_timestamp:
                self.max_timestamp = highest

    def on_periodic_emit(self, output: WatermarkOutput) -> None:
        output.emit_watermark(self.max_timestamp - self.out_of_orderness - 1)


class AscendingTimestampsWatermarks(BoundedOutOfOrdernessWatermarks):
    """Monotonously ascending timestamps: bounded out-of-orderness with bound 0."""

    def __init__(self) -> None:
        super().__init__(0)


class NoWatermarksGenerator(WatermarkGenerator):
    """Emits no watermarks (only the end-of-input watermark passes the operator)."""

    def on_timestamps(self, events: list, timestamps: list, output: WatermarkOutput) -> None:
        pass


class WatermarksWithIdleness(WatermarkGenerator):
    """Marks the output idle when no record arrived for ``idle_timeout_ms`` (Flink's
    ``WatermarksWithIdleness``): checked at each periodic emit; the first check without
    activity starts the inactivity period, later ones compare against the timeout."""

    def __init__(
        self, watermarks: WatermarkGenerator, idle_timeout_ms: int, clock: Optional[Callable[[], int]] = None
    ) -> None:
        if idle_timeout_ms <= 0:
            raise ValueError(f"idle timeout must be positive, got {idle_timeout_ms} ms")
        self.watermarks = watermarks
        self.idle_timeout = idle_timeout_ms
        self._clock = clock or (lambda: time.monotonic_ns() // 1_000_000)
        self._counter = 0
        self._last_counter = 0
        self._inactive_since: Optional[int] = None
        self.idle = False

    def on_event(self, event: Any, event_timestamp: int, output: WatermarkOutput) -> None:
        self.watermarks.on_event(event, event_timestamp, output)
        self._counter += 1

    def on_timestamps(self, events: list, timestamps: list, output: WatermarkOutput) -> None:
        self.watermarks.on_timestamps(events, timestamps, output)
        self._counter += len(timestamps)

    def _check_if_idle(self) -> bool:
        if self._counter != self._last_counter:
            self._last_counter = self._counter
            self._inactive_since = None
            return False
        now = self._clock()
        if self._inactive_since is None:
            self._inactive_since = now
            return False
        return now - self._inactive_since > self.idle_timeout

    def on_periodic_emit(self, output: WatermarkOutput) -> None:
        if self._check_if_idle():
            if not self.idle:
                self.idle = True
                output.mark_idle()
        else:
            self.idle = False
            self.watermarks.on_periodic_emit(output)


class TimestampAssigner:
    """Assigns an event timestamp (ms) to each record (Flink's ``TimestampAssigner``)."""

    def extract_timestamp(self, value: Any, record_timestamp: int) -> int:
        """``record_timestamp``: the record's current timestamp, ``Long.MIN_VALUE`` if none."""
        raise NotImplementedError


class RecordTimestampAssigner(TimestampAssigner):
    """Keeps the timestamp the record already carries (the default without an assigner)."""

    def extract_timestamp(self, value: Any, record_timestamp: int) -> int:
        return record_timestamp


class _CallableTimestampAssigner(TimestampAssigner):
    def __init__(self, function: Callable[..., int]) -> None:
        self.function = function
        try:
            import inspect

            params = [
                p
                for p in inspect.signature(function).parameters.values()
                if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
            ]
            self.takes_record_timestamp = len(params) >= 2
        except (TypeError, ValueError):
            self.takes_record_timestamp = True

    def extract_timestamp(self, value: Any, record_timestamp: int) -> int:
        if self.takes_record_timestamp:
            return self.function(value, record_timestamp)
        return self.function(value)


class WatermarkStrategy:
    """How a stream gets timestamps and watermarks (PyFlink's ``WatermarkStrategy``).

    Use the factories (``for_monotonous_timestamps``, ``for_bounded_out_of_orderness``,
    ``no_watermarks``, ``for_generator``) and refine with ``with_timestamp_assigner`` /
    ``with_idleness``.
    """

    def __init__(self, generator_factory: Callable[[], WatermarkGenerator], description: str = "custom") -> None:
        self._generator_factory = generator_factory
        self._description = description
        self._timestamp_assigner: Optional[TimestampAssigner] = None
        self._idle_timeout_ms: Optional[int] = None

    # -- factories ------------------------------------------------------------------------
    @staticmethod
    def for_monotonous_timestamps() -> "WatermarkStrategy":
        return WatermarkStrategy(AscendingTimestampsWatermarks, "for_monotonous_timestamps()")

    @staticmethod
    def for_bounded_out_of_orderness(max_out_of_orderness: Any) -> "WatermarkStrategy":
        bound = to_millis(max_out_of_orderness, "for_bounded_out_of_orderness: max_out_of_orderness")
        if bound < 0:
            raise ValueError(f"for_bounded_out_of_orderness: max_out_of_orderness cannot be negative, got {bound} ms")
        return WatermarkStrategy(
            lambda: BoundedOutOfOrdernessWatermarks(bound), f"for_bounded_out_of_orderness({bound} ms)"
        )

    @staticmethod
    def no_watermarks() -> "WatermarkStrategy":
        return WatermarkStrategy(NoWatermarksGenerator, "no_watermarks()")

    @staticmethod
    def for_generator(generator_supplier: Any) -> "WatermarkStrategy":
        """A strategy whose generator comes from ``generator_supplier`` (a ``WatermarkGenerator``
        class or a zero-argument callable returning one), e.g. for punctuated watermarks."""
        if not callable(generator_supplier):
            raise TypeError(
                f"for_generator: expected a WatermarkGenerator class or factory, got {generator_supplier!r}"
            )
        return WatermarkStrategy(generator_supplier, f"for_generator({generator_supplier!r})")

    # -- refinements (configure this strategy and return it, as PyFlink does) ---------------
    def with_timestamp_assigner(self, timestamp_assigner: Any) -> "WatermarkStrategy":
        """``timestamp_assigner``: a ``TimestampAssigner`` or ``callable(value[, record_ts]) -> ms``."""
        extract = getattr(timestamp_assigner, "extract_timestamp", None)
        if callable(extract) and not isinstance(timestamp_assigner, type):
            self._timestamp_assigner = timestamp_assigner
        elif callable(timestamp_assigner):
            self._timestamp_assigner = _CallableTimestampAssigner(timestamp_assigner)
        else:
            raise TypeError(
                "with_timestamp_assigner: expected a TimestampAssigner or a callable, "
                f"got {type(timestamp_assigner).__name__}"
            )
        return self

    def with_idleness(self, idle_timeout: Any) -> "WatermarkStrategy":
        timeout = to_millis(idle_timeout, "with_idleness: idle_timeout")
        if timeout <= 0:
            raise ValueError(f"with_idleness: idle_timeout must be positive, got {timeout} ms")
        self._idle_timeout_ms = timeout
        return self

    def with_watermark_alignment(
        self, watermark_group: str, max_allowed_watermark_drift: Any, update_interval: Any = None
    ) -> "WatermarkStrategy":
        raise NotImplementedError(
            "WatermarkStrategy.with_watermark_alignment is not supported by raylink yet "
            "(watermarks of the inputs are combined by the minimum rule, without pausing sources)"
        )

    # -- what the operator asks for -------------------------------------------------------------
    def get_timestamp_assigner(self) -> Optional[TimestampAssigner]:
        return self._timestamp_assigner

    def get_idle_timeout(self) -> Optional[int]:
        return self._idle_timeout_ms

    def create_timestamp_assigner(self) -> TimestampAssigner:
        assigner = self._timestamp_assigner
        return copy.deepcopy(assigner) if assigner is not None else RecordTimestampAssigner()

    def create_watermark_generator(self, clock: Optional[Callable[[], int]] = None) -> WatermarkGenerator:
        """A new generator (one per subtask); ``clock`` (ms) drives idleness detection."""
        generator = self._generator_factory()
        if not callable(getattr(generator, "on_event", None)) or not callable(
            getattr(generator, "on_periodic_emit", None)
        ):
            raise TypeError(
                f"watermark strategy {self._description}: the generator factory returned {generator!r}, "
                "which has no on_event / on_periodic_emit"
            )
        if not callable(getattr(generator, "on_timestamps", None)):
            generator.on_timestamps = WatermarkGenerator.on_timestamps.__get__(generator)  # type: ignore[attr-defined]
        if self._idle_timeout_ms is not None:
            generator = WatermarksWithIdleness(generator, self._idle_timeout_ms, clock)
        return generator

    def emits_watermarks(self) -> bool:
        return self._generator_factory is not NoWatermarksGenerator

    def __repr__(self) -> str:
        extra = f".with_idleness({self._idle_timeout_ms} ms)" if self._idle_timeout_ms else ""
        return f"WatermarkStrategy.{self._description}{extra}"


class AssignerWithPeriodicWatermarksWrapper:
    """PyFlink's name for a legacy periodic assigner wrapper: not supported (no JVM classes)."""

    def __init__(self, *_args: Any, **_kwargs: Any) -> None:
        raise NotImplementedError(
            "AssignerWithPeriodicWatermarksWrapper wraps a Java assigner; use "
            "WatermarkStrategy.for_generator with a Python WatermarkGenerator instead"
        )


__all__ = [
    "Duration",
    "Watermark",
    "WatermarkOutput",
    "WatermarkGenerator",
    "BoundedOutOfOrdernessWatermarks",
    "AscendingTimestampsWatermarks",
    "NoWatermarksGenerator",
    "WatermarksWithIdleness",
    "TimestampAssigner",
    "RecordTimestampAssigner",
    "WatermarkStrategy",
    "AssignerWithPeriodicWatermarksWrapper",
    "watermark_timestamp",
]
