"""PyFlink's ``ExecutionConfig`` (``env.get_config()``), a view of the environment's
``Configuration`` (Flink's ``org.apache.flink.api.common.ExecutionConfig``).

Setters write the Flink option they stand for into the shared ``Configuration`` (which
the job hands to every task), so ``env.get_config().set_auto_watermark_interval(50)`` and
``pipeline.auto-watermark-interval: 50 ms`` are the same setting; parallelism and max
parallelism are the environment's own (``env.set_parallelism`` and
``get_config().set_parallelism`` are one setting). What each setter maps onto:

* auto watermark interval -> ``pipeline.auto-watermark-interval`` (used by the runtime);
* latency tracking interval -> ``metrics.latency.interval`` (used: latency markers);
* task cancellation interval / timeout -> ``task.cancellation.interval`` / ``.timeout`` (used);
* global job parameters -> ``pipeline.global-job-parameters`` (``RuntimeContext.get_job_parameter``);
* object reuse, closure cleaner, auto-generated uids, snapshot compression -> their
  ``pipeline.*`` / ``execution.checkpointing.*`` options, recorded and returned; raylink's
  behaviour does not change with them (see each option's description in ``raylink config``);
* Kryo / Avro / generic-type switches and registered Kryo / POJO types: Java serializers,
  which raylink does not have (PyFlink 2.3 cannot call them either): they raise
  ``UnsupportedFeatureError``.

Every other attribute is the ``Configuration``'s (``get_config().get_string(...)`` keeps
working). Not thread-safe (program-building time only).
"""

from __future__ import annotations

import json
from typing import Any, Dict

from raylink.api.pyflink_compat.unsupported import UnsupportedFeatureError
from raylink.core.configuration import Configuration
from raylink.core.options import (
    CheckpointingOptions,
    CoreOptions,
    MetricOptions,
    PipelineOptions,
    TaskManagerOptions,
    job_parameter,
    parse_global_job_parameters,
)

AUTO_WATERMARK_INTERVAL = PipelineOptions.AUTO_WATERMARK_INTERVAL.key
DEFAULT_AUTO_WATERMARK_INTERVAL_MS = PipelineOptions.AUTO_WATERMARK_INTERVAL.default

_JAVA_SERIALIZERS = (
    "raylink has no JVM and no Java serializers: records travel as Python objects (msgspec for "
    "declared flat types, pickle otherwise); declare types with Types.* instead"
)


def _millis(value: Any, method: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{method}: the interval must be an int (ms), got {value!r}")
    return value


class ExecutionConfig:
    """The settings of one job's execution (PyFlink's ``ExecutionConfig``)."""

    #: use the environment's default parallelism (Flink's ``PARALLELISM_DEFAULT``)
    PARALLELISM_DEFAULT = -1
    #: Flink's ``PARALLELISM_UNKNOWN``
    PARALLELISM_UNKNOWN = -2

    def __init__(self, configuration: Configuration, env: Any = None) -> None:
        # env: the StreamExecutionEnvironment this is the config of (it imports this module)
        self._configuration = configuration
        self._env = env

    def _set(self, key: str, value: str) -> "ExecutionConfig":
        self._configuration.set_string(key, value)
        return self

    # -- watermarks and latency markers ------------------------------------------------
    def set_auto_watermark_interval(self, interval: int) -> "ExecutionConfig":
        """Emit periodic watermarks every ``interval`` ms (0 disables them; default 200)."""
        if isinstance(interval, bool) or not isinstance(interval, int):
            raise TypeError(f"set_auto_watermark_interval: interval must be an int (ms), got {interval!r}")
        if interval < 0:
            raise ValueError(f"set_auto_watermark_interval: interval must not be negative, got {interval}")
        return self._set(AUTO_WATERMARK_INTERVAL, f"{interval} ms")

    def get_auto_watermark_interval(self) -> int:
        return self._configuration.get(PipelineOptions.AUTO_WATERMARK_INTERVAL)

    def set_latency_tracking_interval(self, interval: int) -> "ExecutionConfig":
        """Latency markers from the sources every ``interval`` ms (0 or less: off)."""
        interval = _millis(interval, "set_latency_tracking_interval")
        return self._set(MetricOptions.LATENCY_INTERVAL.key, f"{max(interval, 0)} ms")

    def get_latency_tracking_interval(self) -> int:
        return self._configuration.get(MetricOptions.LATENCY_INTERVAL)

    # -- parallelism (the environment's) ------------------------------------------------
    def set_parallelism(self, parallelism: int) -> "ExecutionConfig":
        """The job's default parallelism; ``PARALLELISM_DEFAULT`` (-1) goes back to
        ``parallelism.default``."""
        if parallelism != self.PARALLELISM_DEFAULT and (not isinstance(parallelism, int) or parallelism < 1):
            raise ValueError(
                "Parallelism must be at least one, or ExecutionConfig.PARALLELISM_DEFAULT (use system default)."
            )
        if parallelism == self.PARALLELISM_DEFAULT:
            parallelism = self._configuration.get(CoreOptions.DEFAULT_PARALLELISM)
        if self._env is not None:
            self._env.set_parallelism(parallelism)
        else:
            self._set(CoreOptions.DEFAULT_PARALLELISM.key, str(parallelism))
        return self

    def get_parallelism(self) -> int:
        if self._env is not None:
            return self._env.get_parallelism()
        return self._configuration.get(CoreOptions.DEFAULT_PARALLELISM)

    def set_max_parallelism(self, max_parallelism: int) -> "ExecutionConfig":
        if isinstance(max_parallelism, int) and not isinstance(max_parallelism, bool) and max_parallelism <= 0:
            raise ValueError("The maximum parallelism must be greater than 0.")
        if self._env is not None:
            self._env.set_max_parallelism(max_parallelism)
        else:
            self._set(
                PipelineOptions.MAX_PARALLELISM.key, str(PipelineOptions.MAX_PARALLELISM.convert(max_parallelism))
            )
        return self

    def get_max_parallelism(self) -> int:
        if self._env is not None:
            return self._env.get_max_parallelism()
        return self._configuration.get(PipelineOptions.MAX_PARALLELISM)

    # -- task cancellation ---------------------------------------------------------------
    def set_task_cancellation_interval(self, interval: int) -> "ExecutionConfig":
        """Milliseconds between two interrupts of a task being cancelled (> 0)."""
        interval = _millis(interval, "set_task_cancellation_interval")
        TaskManagerOptions.TASK_CANCELLATION_INTERVAL.convert(interval)  # raises naming the option
        return self._set(TaskManagerOptions.TASK_CANCELLATION_INTERVAL.key, f"{interval} ms")

    def get_task_cancellation_interval(self) -> int:
        return self._configuration.get(TaskManagerOptions.TASK_CANCELLATION_INTERVAL)

    def set_task_cancellation_timeout(self, timeout: int) -> "ExecutionConfig":
        """Milliseconds after which a task that ignores its cancellation fails (0: never)."""
        timeout = _millis(timeout, "set_task_cancellation_timeout")
        if timeout < 0:
            raise ValueError("Timeout needs to be >= 0.")
        return self._set(TaskManagerOptions.TASK_CANCELLATION_TIMEOUT.key, f"{timeout} ms")

    def get_task_cancellation_timeout(self) -> int:
        return self._configuration.get(TaskManagerOptions.TASK_CANCELLATION_TIMEOUT)

    # -- user parameters -----------------------------------------------------------------
    def set_global_job_parameters(self, global_job_parameters_dict: Dict) -> "ExecutionConfig":
        """Parameters every function reads with ``RuntimeContext.get_job_parameter(key)``
        (values become strings, as in PyFlink)."""
        if not isinstance(global_job_parameters_dict, dict):
            raise TypeError(
                f"set_global_job_parameters: expected a dict, got {type(global_job_parameters_dict).__name__}"
            )
        params = {str(k): str(v) for k, v in global_job_parameters_dict.items()}
        return self._set(PipelineOptions.GLOBAL_JOB_PARAMETERS.key, json.dumps(params))

    def get_global_job_parameters(self) -> Dict[str, str]:
        return parse_global_job_parameters(self._configuration.get(PipelineOptions.GLOBAL_JOB_PARAMETERS))

    # -- recorded switches ----------------------------------------------------------------
    def enable_object_reuse(self) -> "ExecutionConfig":
        return self._set(PipelineOptions.OBJECT_REUSE.key, "true")

    def disable_object_reuse(self) -> "ExecutionConfig":
        return self._set(PipelineOptions.OBJECT_REUSE.key, "false")

    def is_object_reuse_enabled(self) -> bool:
        return self._configuration.get(PipelineOptions.OBJECT_REUSE)

    def enable_closure_cleaner(self) -> "ExecutionConfig":
        return self._set(PipelineOptions.CLOSURE_CLEANER_LEVEL.key, "recursive")

    def disable_closure_cleaner(self) -> "ExecutionConfig":
        return self._set(PipelineOptions.CLOSURE_CLEANER_LEVEL.key, "none")

    def is_closure_cleaner_enabled(self) -> bool:
        return self._configuration.get(PipelineOptions.CLOSURE_CLEANER_LEVEL) != "none"

    def enable_auto_generated_uids(self) -> "ExecutionConfig":
        return self._set(PipelineOptions.AUTO_GENERATE_UIDS.key, "true")

    def disable_auto_generated_uids(self) -> "ExecutionConfig":
        return self._set(PipelineOptions.AUTO_GENERATE_UIDS.key, "false")

    def has_auto_generated_uids_enabled(self) -> bool:
        return self._configuration.get(PipelineOptions.AUTO_GENERATE_UIDS)

    def set_use_snapshot_compression(self, use_snapshot_compression: bool) -> "ExecutionConfig":
        value = "true" if use_snapshot_compression else "false"
        return self._set(CheckpointingOptions.SNAPSHOT_COMPRESSION.key, value)

    def is_use_snapshot_compression(self) -> bool:
        return self._configuration.get(CheckpointingOptions.SNAPSHOT_COMPRESSION)

    # -- Java serializers: not in raylink -------------------------------------------------
    def _java_serializers(self, method: str) -> Any:
        raise UnsupportedFeatureError(
            f"ExecutionConfig.{method}", "Kryo/Avro serializer configuration", _JAVA_SERIALIZERS
        )

    def enable_force_kryo(self) -> "ExecutionConfig":
        return self._java_serializers("enable_force_kryo")

    def disable_force_kryo(self) -> "ExecutionConfig":
        return self._java_serializers("disable_force_kryo")

    def is_force_kryo_enabled(self) -> bool:
        return self._java_serializers("is_force_kryo_enabled")

    def enable_force_avro(self) -> "ExecutionConfig":
        return self._java_serializers("enable_force_avro")

    def disable_force_avro(self) -> "ExecutionConfig":
        return self._java_serializers("disable_force_avro")

    def is_force_avro_enabled(self) -> bool:
        return self._java_serializers("is_force_avro_enabled")

    def enable_generic_types(self) -> "ExecutionConfig":
        return self._java_serializers("enable_generic_types")

    def disable_generic_types(self) -> "ExecutionConfig":
        return self._java_serializers("disable_generic_types")

    def has_generic_types_disabled(self) -> bool:
        return self._java_serializers("has_generic_types_disabled")

    def get_default_kryo_serializer_classes(self) -> Dict[str, str]:
        return self._java_serializers("get_default_kryo_serializer_classes")

    def get_registered_kryo_types(self) -> list:
        return self._java_serializers("get_registered_kryo_types")

    def get_registered_pojo_types(self) -> list:
        return self._java_serializers("get_registered_pojo_types")

    # -- the rest ------------------------------------------------------------------------
    def get_configuration(self) -> Configuration:
        return self._configuration

    def __getattr__(self, name: str) -> Any:
        return getattr(self._configuration, name)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ExecutionConfig) and self._configuration is other._configuration

    def __hash__(self) -> int:
        return id(self._configuration)

    def __repr__(self) -> str:
        return f"ExecutionConfig({self._configuration!r})"


__all__ = [
    "ExecutionConfig",
    "AUTO_WATERMARK_INTERVAL",
    "DEFAULT_AUTO_WATERMARK_INTERVAL_MS",
    "parse_global_job_parameters",
    "job_parameter",
]
