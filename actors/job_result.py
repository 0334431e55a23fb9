"""What a finished or running job hands back: Flink's ``JobExecutionResult``,
``JobClient`` and ``JobExecutionException``, plus the collect iterator of
``execute_and_collect``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterator, Optional


class JobExecutionException(RuntimeError):
    """The job ended FAILED (or was cancelled); ``__cause__`` is the task's error."""

    def __init__(self, job_name: str, status: str, cause: Optional[BaseException]) -> None:
        detail = f": {cause}" if cause is not None else ""
        super().__init__(f"Job '{job_name}' {status.lower()}{detail}")
        self.job_name = job_name
        self.status = status
        self.cause = cause


@dataclass
class JobExecutionResult:
    """Flink's ``JobExecutionResult``: runtime, accumulators and per-task metrics."""

    job_id: str
    job_name: str
    net_runtime_ms: int
    accumulators: dict = field(default_factory=dict)
    task_metrics: list = field(default_factory=list)
    executor_stats: list = field(default_factory=list)
    locations: dict = field(default_factory=dict)

    def get_job_id(self) -> str:
        return self.job_id

    def get_net_runtime(self) -> int:
        return self.net_runtime_ms

    def get_all_accumulator_results(self) -> dict:
        return dict(self.accumulators)

    def get_accumulator_result(self, name: str) -> Any:
        return self.accumulators.get(name)

    def vertex_metrics(self) -> dict:
        """Per JobVertex: summed record/buffer counts, max busy/back-pressure (Flink's UI)."""
        out: dict = {}
        for m in self.task_metrics:
            agg = out.setdefault(
                m["vertex_name"],
                {"numRecordsIn": 0, "numRecordsOut": 0, "numBuffersOut": 0, "backPressuredTimeMsPerSecond": 0.0,
                 "busyTimeMsPerSecond": 0.0, "subtasks": 0},
            )
            for key in ("numRecordsIn", "numRecordsOut", "numBuffersOut"):
                agg[key] += m.get(key, 0)
            for key in ("backPressuredTimeMsPerSecond", "busyTimeMsPerSecond"):
                agg[key] = max(agg[key], m.get(key, 0.0))
            agg["subtasks"] += 1
        return out


class CloseableIterator:
    """Iterator over collected records usable as ``with env.execute_and_collect() as it``."""

    def __init__(self, records: list, result: Optional[JobExecutionResult] = None) -> None:
        self._records = records
        self._iter: Iterator = iter(records)
        self.job_execution_result = result

    def __iter__(self) -> "CloseableIterator":
        return self

    def __next__(self) -> Any:
        return next(self._iter)

    def close(self) -> None:
        self._iter = iter(())

    def __enter__(self) -> "CloseableIterator":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
