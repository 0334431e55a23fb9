"""Per-operator runtime context: Flink's ``StreamingRuntimeContext``.

One task (one OperatorChain) shares a ``RecordContext`` (the timestamp of the
record being processed — records are bare values on the hot path), an
``accumulators`` dict and a processing-time service between all of its
operators; each operator gets its own ``StreamingRuntimeContext`` (its name, id
and, when keyed, its ``keyed_state_backend``). ``derive()`` builds the context
of a sibling operator of the same task.
"""

from __future__ import annotations

from typing import Any, Dict, Optional

from raylink.api.functions import RuntimeContext
from raylink.operators.processing_time import SystemProcessingTimeService

DEFAULT_MAX_PARALLELISM = 128


class RecordContext:
    """Mutable holder of the current record's timestamp (``None``: no timestamp)."""

    __slots__ = ("timestamp",)

    def __init__(self, timestamp: Optional[int] = None) -> None:
        self.timestamp = timestamp

    def __repr__(self) -> str:
        return f"RecordContext(timestamp={self.timestamp!r})"


class Counter:
    """Flink's ``SimpleCounter``."""

    __slots__ = ("count",)

    def __init__(self) -> None:
        self.count = 0

    def inc(self, n: int = 1) -> None:
        self.count += n

    def dec(self, n: int = 1) -> None:
        self.count -= n

    def get_count(self) -> int:
        return self.count


class MetricGroup:
    """Minimal metric group: named counters and gauges, nested groups."""

    def __init__(self, name: str = "") -> None:
        self.name = name
        self.counters: Dict[str, Counter] = {}
        self.gauges: Dict[str, Any] = {}
        self.groups: Dict[str, "MetricGroup"] = {}

    def counter(self, name: str) -> Counter:
        return self.counters.setdefault(name, Counter())

    def gauge(self, name: str, supplier: Any) -> Any:
        self.gauges[name] = supplier
        return supplier

    def add_group(self, name: str, extra: Optional[str] = None) -> "MetricGroup":
        full = name if extra is None else f"{name}.{extra}"
        return self.groups.setdefault(full, MetricGroup(full))


_NO_KEYED_STATE = (
    "Keyed state can only be used on a 'keyed stream', i.e., after a 'keyBy()' operation."
)


class StreamingRuntimeContext(RuntimeContext):
    """Everything a running operator (and its user function) may ask about its task."""

    def __init__(
        self,
        task_name: str = "",
        operator_name: str = "",
        operator_id: str = "",
        subtask_index: int = 0,
        parallelism: int = 1,
        max_parallelism: int = DEFAULT_MAX_PARALLELISM,
        attempt_number: int = 0,
        record_context: Optional[RecordContext] = None,
        accumulators: Optional[Dict[str, Any]] = None,
        processing_time_service: Any = None,
        keyed_state_backend: Any = None,
        job_parameters: Optional[Dict[str, str]] = None,
        metrics_group: Optional[MetricGroup] = None,
    ) -> None:
        if not 0 <= subtask_index < parallelism:
            raise ValueError(f"subtask index {subtask_index} out of range for parallelism {parallelism}")
        if max_parallelism < parallelism:
            raise ValueError(f"max parallelism {max_parallelism} < parallelism {parallelism}")
        self.task_name = task_name
        self.operator_name = operator_name
        self.operator_id = operator_id
        self.subtask_index = subtask_index
        self.parallelism = parallelism
        self.max_parallelism = max_parallelism
        self.attempt_number = attempt_number
        self.record_context = record_context if record_context is not None else RecordContext()
        self.accumulators = accumulators if accumulators is not None else {}
        # The task must pass its mailbox-routed service; this default fires on timer threads.
        self.processing_time_service = (
            processing_time_service if processing_time_service is not None else SystemProcessingTimeService()
        )
        self.keyed_state_backend = keyed_state_backend
        self.job_parameters = job_parameters if job_parameters is not None else {}
        self.metrics_group = metrics_group if metrics_group is not None else MetricGroup(operator_name)

    def derive(self, operator_name: str, operator_id: str = "") -> "StreamingRuntimeContext":
        """Context for another operator of the same task: shares record context,
        accumulators, processing-time service and job parameters; no keyed backend."""
        return StreamingRuntimeContext(
            task_name=self.task_name,
            operator_name=operator_name,
            operator_id=operator_id,
            subtask_index=self.subtask_index,
            parallelism=self.parallelism,
            max_parallelism=self.max_parallelism,
            attempt_number=self.attempt_number,
            record_context=self.record_context,
            accumulators=self.accumulators,
            processing_time_service=self.processing_time_service,
            job_parameters=self.job_parameters,
        )

    # -- RuntimeContext ---------------------------------------------------------------
    def get_task_name(self) -> str:
        return self.task_name

    def get_number_of_parallel_subtasks(self) -> int:
        return self.parallelism

    def get_max_number_of_parallel_subtasks(self) -> int:
        return self.max_parallelism

    def get_index_of_this_subtask(self) -> int:
        return self.subtask_index

    def get_attempt_number(self) -> int:
        return self.attempt_number

    def get_task_name_with_subtasks(self) -> str:
        return f"{self.task_name} ({self.subtask_index + 1}/{self.parallelism})"

    def get_job_parameter(self, key: str, default_value: Optional[str] = None) -> Optional[str]:
        return self.job_parameters.get(key, default_value)

    def get_metrics_group(self) -> MetricGroup:
        return self.metrics_group

    def _backend(self) -> Any:
        backend = self.keyed_state_backend
        if backend is None:
            raise RuntimeError(_NO_KEYED_STATE)
        return backend

    def get_state(self, state_descriptor: Any) -> Any:
        return self._backend().get_or_create_state(state_descriptor, "value")

    def get_list_state(self, state_descriptor: Any) -> Any:
        return self._backend().get_or_create_state(state_descriptor, "list")

    def get_map_state(self, state_descriptor: Any) -> Any:
        return self._backend().get_or_create_state(state_descriptor, "map")

    def get_reducing_state(self, state_descriptor: Any) -> Any:
        return self._backend().get_or_create_state(state_descriptor, "reducing")

    def __repr__(self) -> str:
        return (
            f"StreamingRuntimeContext({self.operator_name!r}, subtask={self.subtask_index}"
            f"/{self.parallelism}, max_parallelism={self.max_parallelism})"
        )


__all__ = ["RecordContext", "StreamingRuntimeContext", "MetricGroup", "Counter", "DEFAULT_MAX_PARALLELISM"]
