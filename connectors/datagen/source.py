"""The DataGen source's user side: Flink's ``DataGeneratorSource`` and ``RateLimiterStrategy``
(``org.apache.flink.connector.datagen.source``, ``org.apache.flink.api.connector.source.util.
ratelimit``).

``DataGeneratorSource(generator_function, count, rate_limiter_strategy)`` emits
``generator_function(i)`` for the indices ``0 .. count - 1``, split over the source's subtasks as
``NumberSequenceSource`` splits them; its position is in every checkpoint and a restore at another
parallelism shares out what is left (:mod:`raylink.connectors.datagen.source_operator`). The
generator is a callable of the index or an object with ``map(index)`` (Flink's
``GeneratorFunction``); it must be deterministic for exactly-once results after a failure.

**Rates.** ``RateLimiterStrategy.per_second(r)`` emits ``r`` records per second over all
subtasks (each its share), ``no_op()`` as fast as the job takes them (the default). raylink adds
``steps([(0, r0), (t1, r1), ...])``: ``r0`` records/s from the moment the source first runs,
``r1`` from ``t1`` seconds after it, and so on -- a load whose rate changes while the job runs,
as autoscaler tests and load tests need. The schedule is kept across restarts and rescales (its
start time is in the checkpoint). A rate-limited source reports Flink's ``pendingRecords``: the
records its schedule made due that it has not emitted yet (its backlog), which is what
``job.autoscaler.*`` reads as lag. While ahead of its schedule a subtask waits idle (it counts
as idle time, not busy, as Flink's rate-limited source reader).

Immutable once built; pickled into the job graph.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence, Union

from raylink.operators.connector import CONNECTOR_SOURCE

GeneratorFunction = Union[Callable[[int], Any], Any]


@dataclass(frozen=True)
class RateLimiterStrategy:
    """Records per second over the whole source, as a step schedule: ``steps[i] = (seconds since
    the source first ran, rate)``; ``steps == ()`` is no limit (Flink's ``noOp``)."""

    steps: tuple = ()

    @staticmethod
    def per_second(records_per_second: float) -> "RateLimiterStrategy":
        """Flink's ``RateLimiterStrategy.perSecond``: at most this many records a second in total."""
        return RateLimiterStrategy.steps_of([(0.0, records_per_second)])

    @staticmethod
    def no_op() -> "RateLimiterStrategy":
        """Flink's ``RateLimiterStrategy.noOp``: as fast as the job takes the records."""
        return RateLimiterStrategy(())

    @staticmethod
    def steps_of(schedule: Sequence[Sequence[float]]) -> "RateLimiterStrategy":
        """raylink: ``[(0, r0), (t1, r1), ...]`` -- the rate from each time (seconds after the source
        first ran) on; times start at 0 and increase, rates are > 0."""
        steps = []
        for entry in schedule:
            if len(entry) != 2:
                raise ValueError(f"RateLimiterStrategy: a step is (seconds, records per second), got {entry!r}")
            at, rate = float(entry[0]), float(entry[1])
            if not math.isfinite(rate) or rate <= 0:
                raise ValueError(f"RateLimiterStrategy: a rate must be > 0 records/s, got {entry[1]!r}")
            if steps and at <= steps[-1][0]:
                raise ValueError(f"RateLimiterStrategy: step times must increase, got {at} after {steps[-1][0]}")
            steps.append((at, rate))
        if not steps or steps[0][0] != 0:
            raise ValueError("RateLimiterStrategy: the first step starts at 0 seconds")
        return RateLimiterStrategy(tuple(steps))

    @property
    def limited(self) -> bool:
        return bool(self.steps)

    def rate_at(self, seconds: float) -> float:
        """The rate ``seconds`` after the start (the first step's before it)."""
        index = bisect.bisect_right([at for at, _ in self.steps], seconds) - 1
        return self.steps[max(index, 0)][1]

    def due(self, seconds: float) -> float:
        """How many records the schedule has made due ``seconds`` after its start (its integral)."""
        total = 0.0
        steps = self.steps
        for i, (at, rate) in enumerate(steps):
            if seconds <= at:
                break
            end = steps[i + 1][0] if i + 1 < len(steps) else math.inf
            total += (min(seconds, end) - at) * rate
        return total

    def time_of(self, records: float) -> float:
        """The seconds after the start at which ``records`` are due (the inverse of :meth:`due`)."""
        steps = self.steps
        done = 0.0
        for i, (at, rate) in enumerate(steps):
            end = steps[i + 1][0] if i + 1 < len(steps) else math.inf
            span = (end - at) * rate
            if records <= done + span:
                return at + (records - done) / rate
            done += span
        return math.inf  # pragma: no cover - the last step never ends


class DataGeneratorSource:
    """Flink's ``DataGeneratorSource(generatorFunction, count, rateLimiterStrategy, typeInfo)``:
    ``generator_function(i)`` for ``i`` in ``0 .. count - 1`` (for ``env.from_source``)."""

    def __init__(
        self,
        generator_function: GeneratorFunction,
        count: int,
        rate_limiter_strategy: Optional[RateLimiterStrategy] = None,
        type_info: Any = None,
    ) -> None:
        if not (callable(generator_function) or callable(getattr(generator_function, "map", None))):
            raise TypeError(
                "DataGeneratorSource: generator_function must be a callable of the index or have map(index), "
                f"got {type(generator_function).__name__}"
            )
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise ValueError(f"DataGeneratorSource: count must be an integer >= 0, got {count!r}")
        if rate_limiter_strategy is not None and not isinstance(rate_limiter_strategy, RateLimiterStrategy):
            raise TypeError(
                "DataGeneratorSource: rate_limiter_strategy must be a RateLimiterStrategy, "
                f"got {type(rate_limiter_strategy).__name__}"
            )
        self.generator_function = generator_function
        self.count = count
        self.rate_limiter_strategy = rate_limiter_strategy or RateLimiterStrategy.no_op()
        self.type_info = type_info

    def get_boundedness(self) -> str:
        """BOUNDED, as Flink's (the job runs in STREAMING mode unless told otherwise)."""
        return "BOUNDED"

    def _raylink_source_spec(self) -> tuple:
        """(operator kind, function, parameters, non-parallel) for ``env.from_source``."""
        return CONNECTOR_SOURCE, self, {}, False

    def create_operator(self, spec: Any) -> Any:
        from raylink.connectors.datagen.source_operator import DataGeneratorSourceOperator

        return DataGeneratorSourceOperator(self, getattr(spec, "name", ""), getattr(spec, "operator_id", ""))

    def __repr__(self) -> str:
        return f"DataGeneratorSource({self.count} records, {self.rate_limiter_strategy})"


__all__ = ["DataGeneratorSource", "GeneratorFunction", "RateLimiterStrategy"]
