"""Per-operator runtime context: Flink's ``StreamingRuntimeContext``.

One task (one OperatorChain) shares a ``RecordContext`` (the timestamp of the
record being processed — records are bare values on the hot path), an
``accumulators`` dict and a processing-time service between all of its
operators; each operator gets its own ``StreamingRuntimeContext`` (its name, id
and, when keyed, its ``keyed_state_backend``). ``derive()`` builds the context
of a sibling operator of the same task. Keyed state (``get_state``,
``get_list_state``, ``get_map_state``, ``get_reducing_state``,
``get_aggregating_state``) is scoped to the key the operator set for the record
or timer being processed; every keyed operator (map/flat_map/filter/reduce/process
of a ``KeyedStream``, keyed two-input operators, windows) sets it. Used on the
task thread only.
"""

from __future__ import annotations

from typing import Any, Dict, Optional

from raylink.core.functions import Function, RuntimeContext
from raylink.core.options import job_parameter
from raylink.metrics.metricbase import Counter, MetricGroup
from raylink.operators.processing_time import SystemProcessingTimeService

DEFAULT_MAX_PARALLELISM = 128


class RecordContext:
    """Mutable holder of the current record's timestamp (``None``: no timestamp)."""

    __slots__ = ("timestamp",)

    def __init__(self, timestamp: Optional[int] = None) -> None:
        self.timestamp = timestamp

    def __repr__(self) -> str:
        return f"RecordContext(timestamp={self.timestamp!r})"


_NO_KEYED_STATE = "Keyed state can only be used on a 'keyed stream', i.e., after a 'keyBy()' operation."


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
        mailbox_executor: Any = None,
        checkpointing_enabled: bool = False,
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
        #: the task's mailbox (Flink's ``MailboxExecutor``: ``execute(mail)`` from any thread,
        #: ``yield_()`` on the task thread); None outside a task
        self.mailbox_executor = mailbox_executor
        #: the task takes checkpoints (Flink's ``isCheckpointingEnabled``): a two-phase-commit
        #: sink then commits only on completed checkpoints, the final one included
        self.checkpointing_enabled = checkpointing_enabled

    def is_checkpointing_enabled(self) -> bool:
        return self.checkpointing_enabled

    def derive(self, operator_name: str, operator_id: str = "") -> "StreamingRuntimeContext":
        """Context for another operator of the same task: shares record context,
        accumulators, processing-time service, mailbox and job parameters; no keyed backend."""
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
            mailbox_executor=self.mailbox_executor,
            checkpointing_enabled=self.checkpointing_enabled,
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
        """``key`` of the global job parameters (``ExecutionConfig.set_global_job_parameters``),
        else of the job's configuration, else ``default_value``."""
        value = job_parameter(self.job_parameters, key)
        return self.job_parameters.get(key, default_value) if value is None else value

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

    def get_aggregating_state(self, state_descriptor: Any) -> Any:
        return self._backend().get_or_create_state(state_descriptor, "aggregating")

    def __repr__(self) -> str:
        return (
            f"StreamingRuntimeContext({self.operator_name!r}, subtask={self.subtask_index}"
            f"/{self.parallelism}, max_parallelism={self.max_parallelism})"
        )


def may_use_keyed_state(function: Any) -> bool:
    """Whether ``function`` can reach its ``RuntimeContext`` (and so keyed state): an object
    (or one of a pair) with an ``open`` of its own, which the operator calls with the context.
    Plain callables and functions keeping ``Function``'s empty ``open`` never see one, so a
    keyed operator need not set the current key for them (decided once, when it is built)."""
    if isinstance(function, (tuple, list)):
        return any(may_use_keyed_state(f) for f in function)
    if function is None or isinstance(function, type):
        return False
    open_ = getattr(type(function), "open", None)
    return callable(open_) and open_ is not Function.open


def holds_keyed_state(operator: Any) -> bool:
    """After ``open``: whether the functions of a keyed ``operator`` (built for a function that
    ``may_use_keyed_state``) need the current key per record — they registered keyed state in
    ``open`` or kept their runtime context to get state later. When they did neither, the
    operator skips setting keys and its backend refuses states registered later, with an
    error saying why (a function without a ``__dict__`` is assumed to keep the context)."""
    backend = operator.keyed_state_backend
    if backend.descriptor_state_names():
        return True
    context = operator.runtime_context
    for function in getattr(operator, "_lifecycle", ()):
        attributes = getattr(function, "__dict__", None)
        if attributes is None or any(value is context for value in attributes.values()):
            return True
    backend.refuse_new_states(
        f"operator {operator.name!r}: keyed state {{name!r}} was requested after open() by a function that "
        "neither got keyed state in open() nor kept its runtime context, so the operator does not set the "
        "current key per record; get keyed state in open() (as PyFlink programs do) or keep the runtime "
        "context on the function (self.runtime_context = runtime_context)"
    )
    return False


__all__ = [
    "holds_keyed_state",
    "RecordContext",
    "StreamingRuntimeContext",
    "MetricGroup",
    "Counter",
    "DEFAULT_MAX_PARALLELISM",
    "may_use_keyed_state",
]
