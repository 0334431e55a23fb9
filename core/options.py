"""The options registry: every configuration key raylink reads, in one place.

Each key is a :class:`ConfigOption` — Flink's shape: key, type, default,
description, fallback (deprecated) keys — grouped in classes named after Flink's
option classes (``CoreOptions``, ``PipelineOptions``, ``ExecutionOptions``,
``TaskManagerOptions``, ``NettyShuffleEnvironmentOptions``, ``MetricOptions``,
``CheckpointingOptions``, ``StateBackendOptions``, ``RestartStrategyOptions``) plus
raylink's own (``RaylinkOptions``, ``SparkConnectorOptions``). ``Configuration.get(option)``, the
defaults of a ``Configuration``, the CLI's ``--conf`` validation, ``raylink config``
and the README's option table all read this module; a key read anywhere else is a
bug (``tests/test_options_registry.py`` walks the code for string keys). A *prefix*
option (``raylink.spark.conf.<key>``) stands for every key that starts with it.

Values are stored as given (text from a YAML file or ``--conf``, Python values
from code) and converted when read: durations (``100``, ``"100 ms"``, ``"2 s"``)
to milliseconds, memory sizes (``"32kb"``, ``"512m"``; binary units as in Flink)
to bytes. Conversion errors name the key.

**Enumerated values.** An ``enum`` option declares the values it accepts (``choices``,
matched case-insensitively, as Flink parses enums) and, apart, Flink's values raylink does
not support yet (``unsupported``: ``state.backend.type: rocksdb``). Any other value of a
known key is an error naming the key and the accepted values
(:class:`IllegalConfigurationError`) -- never silently something else. It is checked where
a value enters: ``Configuration``'s setters and ``RAYLINK_CONF``
(:func:`check_enumerated_value`), the CLI's ``--conf`` / ``--conf-file``, and again when a
job is submitted (:func:`validate_enumerated_values`). An ``extensible`` option
(``execution.target``, whose values are the registered executors) is checked where it is
looked up instead.

Pure data and functions; import-light (no Ray, no graph). The registry is filled at
import; :func:`register` (adding a connector's option class) is not thread-safe.
"""

from __future__ import annotations

import difflib
import json
import re
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterator, Optional

from raylink.errors import RaylinkError


class IllegalConfigurationError(RaylinkError, ValueError):
    """A configuration value that cannot be used (Flink's ``IllegalConfigurationException``)."""


# -- value parsers (each raises ValueError with a message that names the value) ------------------
_MEMORY_UNITS = {
    "": 1,
    "b": 1,
    "bytes": 1,
    "k": 1 << 10,
    "kb": 1 << 10,
    "kibibytes": 1 << 10,
    "m": 1 << 20,
    "mb": 1 << 20,
    "mebibytes": 1 << 20,
    "g": 1 << 30,
    "gb": 1 << 30,
    "gibibytes": 1 << 30,
    "t": 1 << 40,
    "tb": 1 << 40,
    "tebibytes": 1 << 40,
}
_DURATION_UNITS = {
    "": 1,
    "ms": 1,
    "milli": 1,
    "millis": 1,
    "millisecond": 1,
    "milliseconds": 1,
    "s": 1000,
    "sec": 1000,
    "secs": 1000,
    "second": 1000,
    "seconds": 1000,
    "min": 60_000,
    "m": 60_000,
    "minute": 60_000,
    "minutes": 60_000,
    "h": 3_600_000,
    "hour": 3_600_000,
    "hours": 3_600_000,
    "d": 86_400_000,
    "day": 86_400_000,
    "days": 86_400_000,
}
_AMOUNT = re.compile(r"^\s*(-?\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$")


def parse_memory(value: Any) -> int:
    """Flink's ``MemorySize``: ``1024``, ``"64kb"``, ``"512 m"``, ``"2g"`` -> bytes."""
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is not a memory size")
    if isinstance(value, (int, float)):
        return int(value)
    match = _AMOUNT.match(str(value))
    unit = match.group(2).lower() if match else None
    if not match or unit not in _MEMORY_UNITS:
        raise ValueError(f"{value!r} is not a memory size (e.g. 1073741824, 512m, 2g)")
    return int(float(match.group(1)) * _MEMORY_UNITS[unit])


def parse_duration_ms(value: Any) -> int:
    """Flink's ``Duration``: ``100`` (ms), ``"100 ms"``, ``"2s"``, ``"1 min"`` -> milliseconds."""
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is not a duration")
    if isinstance(value, (int, float)):
        return int(value)
    if hasattr(value, "to_milliseconds"):  # raylink.api Duration / Time
        return int(value.to_milliseconds())
    match = _AMOUNT.match(str(value))
    unit = match.group(2).lower() if match else None
    if not match or unit not in _DURATION_UNITS:
        raise ValueError(f"{value!r} is not a duration (e.g. 100, 100 ms, 2 s)")
    return int(float(match.group(1)) * _DURATION_UNITS[unit])


def parse_int(value: Any) -> int:
    if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
        raise ValueError(f"{value!r} is not an integer")
    try:
        return int(value) if isinstance(value, (int, float)) else int(str(value).strip())
    except ValueError:
        raise ValueError(f"{value!r} is not an integer") from None


def parse_float(value: Any) -> float:
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is not a number")
    try:
        return float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{value!r} is not a number") from None


def parse_bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text not in ("true", "false"):
        raise ValueError(f"{value!r} is not a boolean (true or false)")
    return text == "true"


def parse_str(value: Any) -> str:
    return str(value)


_PARSERS: dict[str, Callable[[Any], Any]] = {
    "int": parse_int,
    "float": parse_float,
    "bool": parse_bool,
    "str": parse_str,
    "duration": parse_duration_ms,
    "memory": parse_memory,
    "enum": parse_str,
}


# -- the option -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class ConfigOption:
    """One configuration key (Flink's ``ConfigOption``).

    ``type`` is one of ``int float bool str duration memory enum``: durations read
    as milliseconds, memory sizes as bytes. ``check(value)`` validates a converted
    value (raises ValueError); ``choices`` lists an enum's accepted values (lower case;
    a value is matched case-insensitively), ``unsupported`` the values Flink accepts that
    raylink does not support yet (refused, with that said). ``extensible``: code may
    register more values than ``choices`` (``execution.target``'s executors), so only the
    CLI and the value's reader check it, not every setter. A ``prefix`` option's key ends
    with ``.`` and stands for every longer key starting with it
    (``raylink.spark.conf.spark.sql.shuffle.partitions``).
    """

    key: str
    type: str
    default: Any
    description: str
    fallback_keys: tuple[str, ...] = ()
    choices: tuple[str, ...] = ()
    check: Optional[Callable[[Any], None]] = None
    prefix: bool = False
    unsupported: tuple[str, ...] = ()
    extensible: bool = False

    @property
    def enumerated(self) -> bool:
        """True for an option whose every value is checked against its ``choices`` on entry."""
        return self.type == "enum" and not self.extensible

    @property
    def display_key(self) -> str:
        """The key as documented: ``raylink.spark.conf.<key>`` for a prefix option."""
        return self.key + "<key>" if self.prefix else self.key

    def matches(self, key: str) -> bool:
        """True if ``key`` is this option's key, a fallback key, or (prefix) starts with it."""
        if self.prefix:
            return key.startswith(self.key) and len(key) > len(self.key)
        return key == self.key or key in self.fallback_keys

    def convert(self, value: Any, key: Optional[str] = None) -> Any:
        """``value`` as this option's type, validated; errors name the key (``key``: the
        fallback key the value was given under)."""
        return self._convert(value, True, key)

    def parse(self, value: Any, key: Optional[str] = None) -> Any:
        """``value`` as this option's type without the range check (``check``); errors name the
        key (``key``: the fallback key the value was given under)."""
        return self._convert(value, False, key)

    def _convert(self, value: Any, validate: bool, key: Optional[str] = None) -> Any:
        try:
            out = _PARSERS[self.type](value)
            if self.type == "enum":
                out = out.strip().lower()
                if out in self.unsupported:
                    raise ValueError(f"{value!r} is not supported yet; accepted: {', '.join(self.choices)}")
                if out not in self.choices:
                    raise ValueError(f"{value!r} is not one of {', '.join(self.choices)}")
            if validate and self.check is not None:
                self.check(out)
        except ValueError as exc:
            if key is None or key == self.key or self.prefix:
                name = repr(key or self.key)
            else:
                name = f"{key!r} (a fallback key of {self.key!r})"
            raise IllegalConfigurationError(f"configuration key {name}: {exc}") from None
        return out

    @property
    def has_default(self) -> bool:
        return self.default is not None

    def default_text(self) -> str:
        """The default as a user writes it (``100 ms``, ``32kb``, ``true``; ``(none)``)."""
        value = self.default
        if value is None:
            return "(none)"
        if isinstance(value, bool):
            return str(value).lower()
        if self.type == "duration":
            for unit, size in (("d", 86_400_000), ("h", 3_600_000), ("min", 60_000), ("s", 1000)):
                if value and value % size == 0:
                    return f"{value // size} {unit}"
            return f"{value} ms"
        if self.type == "memory":
            for unit, size in (("gb", 1 << 30), ("mb", 1 << 20), ("kb", 1 << 10)):
                if value and value % size == 0:
                    return f"{value // size}{unit}"
        return str(value)


def option(key: str, type: str, default: Any, description: str, **kwargs: Any) -> ConfigOption:
    return ConfigOption(key, type, default, description, **kwargs)


def _at_least(minimum: float, what: str = "") -> Callable[[Any], None]:
    def check(value: Any) -> None:
        if value < minimum:
            raise ValueError(f"{value} is below the minimum {minimum}{what}")

    return check


def _positive(value: Any) -> None:
    if value <= 0:
        raise ValueError(f"{value} must be > 0")


def _positive_number(value: float) -> None:
    if value <= 0:
        raise ValueError(f"{value:g} must be a number > 0")


def _not_negative(value: Any) -> None:
    if value < 0:
        raise ValueError(f"{value} must not be negative")


def _bytes_at_least(minimum: int) -> Callable[[int], None]:
    def check(value: int) -> None:
        if value < minimum:
            raise ValueError(f"{value} is below the minimum of {minimum} bytes")

    return check


def _port_or_off(value: int) -> None:
    if not -1 <= value <= 65535:
        raise ValueError(f"{value} is not a port (0-65535, 0 = any free port, -1 = off)")


def _max_parallelism(value: int) -> None:
    if value != -1 and not 1 <= value <= 32768:
        raise ValueError(f"{value} must be -1 (derived) or between 1 and 32768")


def _buffer_timeout(value: int) -> None:
    if value < -1:
        raise ValueError(f"{value} must be >= -1 (-1: flush only full buffers)")


#: Flink's ``MemoryManager.MIN_PAGE_SIZE``: the smallest memory segment
MIN_SEGMENT_SIZE = 4 * 1024
#: the largest power of two a Java int holds (Flink down-casts the segment size to int)
MAX_SEGMENT_SIZE = 1 << 30
#: Flink's ``taskmanager.memory.min-segment-size`` (the smallest debloated buffer)
MIN_BUFFER_SIZE = 256


def _segment_size(value: int) -> None:
    """Flink's check of ``taskmanager.memory.segment-size``: at least 4 KiB, a power of two."""
    if value < MIN_SEGMENT_SIZE:
        raise ValueError(f"{value} bytes is below the minimum memory segment size of {MIN_SEGMENT_SIZE} (4kb)")
    if value > MAX_SEGMENT_SIZE:
        raise ValueError(f"{value} bytes is above the maximum memory segment size of {MAX_SEGMENT_SIZE} (1gb)")
    if value & (value - 1):
        raise ValueError(f"{value} bytes is not a power of 2 (memory segment sizes must be, e.g. 32kb)")


def _inline_threshold(value: int) -> None:
    if not 0 <= value <= 1 << 20:
        raise ValueError(f"{value} bytes is outside 0 .. 1mb")


# -- the options, grouped as Flink groups them ------------------------------------------------------
class CoreOptions:
    DEFAULT_PARALLELISM = option(
        "parallelism.default", "int", 1, "Default parallelism of operators.", check=_at_least(1)
    )


class PipelineOptions:
    NAME = option("pipeline.name", "str", "raylink job", "Job name when execute() is given none.")
    MAX_PARALLELISM = option(
        "pipeline.max-parallelism",
        "int",
        -1,
        "Max parallelism (number of key groups); -1 derives it from the parallelism.",
        check=_max_parallelism,
    )
    OPERATOR_CHAINING = option("pipeline.operator-chaining", "bool", True, "Chain operators where Flink would.")
    AUTO_WATERMARK_INTERVAL = option(
        "pipeline.auto-watermark-interval",
        "duration",
        200,
        "How often periodic watermarks are emitted (0 disables them).",
        check=_at_least(0),
    )
    OBJECT_REUSE = option(
        "pipeline.object-reuse",
        "bool",
        False,
        "Recorded for PyFlink's ExecutionConfig; chained raylink operators always hand records on without a copy.",
    )
    GLOBAL_JOB_PARAMETERS = option(
        "pipeline.global-job-parameters",
        "str",
        None,
        "User parameters (key:value,key:value or a JSON object) every function reads with "
        "RuntimeContext.get_job_parameter(key).",
    )
    CLOSURE_CLEANER_LEVEL = option(
        "pipeline.closure-cleaner-level",
        "enum",
        "recursive",
        "Recorded for PyFlink's ExecutionConfig; functions are shipped with cloudpickle, no closure is cleaned.",
        choices=("none", "top_level", "recursive"),
    )
    AUTO_GENERATE_UIDS = option(
        "pipeline.auto-generate-uids",
        "bool",
        True,
        "Recorded for PyFlink's ExecutionConfig; operators without a uid() get a generated one either way.",
    )


class ExecutionOptions:
    BUFFER_TIMEOUT = option(
        "execution.buffer-timeout",
        "duration",
        100,
        "Longest a record waits in an output buffer (and a source step); 0 flushes every record, -1 only full buffers.",
        check=_buffer_timeout,
    )
    TARGET = option(
        "execution.target",
        "enum",
        "ray",
        "Where a job runs: ray (TaskExecutor actors) or local (threads in this process).",
        choices=("ray", "local"),
        extensible=True,  # an installed package may register more executors (raylink.executors)
    )
    SHUFFLE_MODE = option(
        "execution.shuffle-mode",
        "enum",
        "pipelined",
        "pipelined or batch (blocking) exchanges.",
        choices=("pipelined", "batch"),
    )
    RUNTIME_MODE = option(
        "execution.runtime-mode",
        "enum",
        "streaming",
        "streaming, batch (blocking exchanges, keyed operators emit final results) or "
        "automatic (batch when every source is bounded).",
        choices=("streaming", "batch", "automatic"),
    )
    ATTACHED = option(
        "execution.attached",
        "bool",
        True,
        "true: the job's JobMaster runs in the program's process (with high availability: in an actor "
        "the program owns) and the job ends with the program; false (raylink run --detached): the "
        "JobMaster runs in a detached Ray actor, execute() returns once the job runs, and the job "
        "outlives the program.",
    )


class HighAvailabilityOptions:
    """Flink's ``HighAvailabilityOptions`` (raylink's JobMaster actor restarts are its leader election)."""

    TYPE = option(
        "high-availability.type",
        "enum",
        "none",
        "none, or filesystem: job graphs, checkpoint counters and completed checkpoints go to "
        "high-availability.storageDir and a JobMaster (or session Dispatcher) whose process dies is "
        "restarted by Ray and recovers its jobs from there.",
        choices=("none", "filesystem"),
        unsupported=("zookeeper", "kubernetes"),
        fallback_keys=("high-availability",),
    )
    STORAGE_PATH = option(
        "high-availability.storageDir",
        "str",
        None,
        "Folder or URL (any fsspec file system every node reaches) of the high-availability store; "
        "needed when high-availability.type is not none.",
        fallback_keys=("high-availability.storage-path",),
    )
    CLUSTER_ID = option(
        "high-availability.cluster-id",
        "str",
        "default",
        "The sub-folder of high-availability.storageDir this cluster's jobs are kept under.",
    )
    JOB_MASTER_MAX_RESTARTS = option(
        "raylink.jobmaster.max-restarts",
        "int",
        -1,
        "How often Ray restarts a JobMaster (or Dispatcher) actor whose process died, with "
        "high availability on (-1: without limit; without high availability: never).",
        check=_at_least(-1),
    )
    JOB_STORE_EXPIRATION = option(
        "jobstore.expiration-time",
        "int",
        3600,
        "Seconds a detached job's JobMaster actor is kept after the job ended (its status and result "
        "readable); it goes 60 s after a client has read the result.",
        check=_at_least(0),
    )


class ClientOptions:
    HEARTBEAT_TIMEOUT = option(
        "client.heartbeat.timeout",
        "duration",
        180_000,
        "A job submitted to the session cluster over HTTP whose driver has not read its "
        "execute_and_collect results for this long is cancelled (its driver is gone).",
        check=_positive,
    )


class TaskManagerOptions:
    NUM_TASK_SLOTS = option(
        "taskmanager.numberOfTaskSlots", "int", 1, "Slots per TaskExecutor actor.", check=_at_least(1)
    )
    CPU_CORES = option(
        "taskmanager.cpu.cores", "float", 0.01, "Ray CPUs reserved per TaskExecutor actor.", check=_positive_number
    )
    TOTAL_PROCESS_MEMORY = option(
        "taskmanager.memory.process.size",
        "memory",
        0,
        "Ray memory reserved per TaskExecutor actor (0: no reservation).",
        check=_not_negative,
    )
    MEMORY_SEGMENT_SIZE = option(
        "taskmanager.memory.segment-size",
        "memory",
        32 * 1024,
        "Network buffer size: a power of 2, at least 4kb.",
        check=_segment_size,
    )
    TASK_CANCELLATION_INTERVAL = option(
        "task.cancellation.interval",
        "duration",
        30_000,
        "Time between two interrupts of a task being cancelled.",
        check=_positive,
    )
    TASK_CANCELLATION_TIMEOUT = option(
        "task.cancellation.timeout",
        "duration",
        180_000,
        "A cancelled task still running after this long is failed "
        "(on Ray its TaskExecutor process is killed); 0 waits forever.",
        check=_at_least(0),
    )


class ResourceManagerOptions:
    TASK_MANAGER_TIMEOUT = option(
        "resourcemanager.taskmanager-timeout",
        "duration",
        30_000,
        "How long a finished job's idle TaskExecutors are kept for the program's next job on Ray "
        "(reused when it asks for no more and no larger TaskExecutors; released at once when it asks for others, "
        "and always when the program exits); 0 releases them when their job ends.",
        check=_at_least(0),
    )


def _utilization(value: float) -> None:
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"{value:g} must be a utilization between 0 and 1")


class AutoScalerOptions:
    """The Flink autoscaler's keys (``org.apache.flink.autoscaler.config.AutoScalerOptions``),
    read by :mod:`raylink.runtime.job.autoscaler`; Flink's defaults."""

    ENABLED = option(
        "job.autoscaler.enabled",
        "bool",
        False,
        "Run the autoscaler: it measures every vertex's true processing rate and the rate its input "
        "needs, and rescales the running job (same job id) when a vertex is outside its utilization band.",
    )
    SCALING_ENABLED = option(
        "job.autoscaler.scaling.enabled",
        "bool",
        True,
        "false: the autoscaler evaluates and reports the parallelism it recommends but changes nothing.",
    )
    CONTROL_LOOP_INTERVAL = option(
        "autoscaler.standalone.control-loop.interval",
        "duration",
        10_000,
        "How often the autoscaler takes a metric sample and decides (Flink's standalone autoscaler).",
        check=_at_least(1),
    )
    METRICS_WINDOW = option(
        "job.autoscaler.metrics.window",
        "duration",
        900_000,
        "The window the autoscaler averages its metric samples over before it decides.",
        check=_at_least(1),
    )
    STABILIZATION_INTERVAL = option(
        "job.autoscaler.stabilization.interval",
        "duration",
        300_000,
        "After the job (re)starts RUNNING, how long its samples do not count and nothing is scaled.",
        check=_at_least(0),
    )
    TARGET_UTILIZATION = option(
        "job.autoscaler.utilization.target",
        "float",
        0.7,
        "The busy fraction the autoscaler sizes every vertex for.",
        fallback_keys=("job.autoscaler.target.utilization",),
        check=_utilization,
    )
    TARGET_UTILIZATION_BOUNDARY = option(
        "job.autoscaler.target.utilization.boundary",
        "float",
        0.3,
        "A vertex is left alone while its utilization is within target +- boundary "
        "(unless utilization.max / utilization.min say otherwise).",
        check=_utilization,
    )
    UTILIZATION_MAX = option(
        "job.autoscaler.utilization.max",
        "float",
        None,
        "Scale a vertex up above this utilization (default: target + boundary).",
        check=_utilization,
    )
    UTILIZATION_MIN = option(
        "job.autoscaler.utilization.min",
        "float",
        None,
        "Scale a vertex down below this utilization (default: target - boundary).",
        check=_utilization,
    )
    SCALE_DOWN_INTERVAL = option(
        "job.autoscaler.scale-down.interval",
        "duration",
        3_600_000,
        "A scale-down waits this long after it was first recommended and then takes the highest "
        "parallelism recommended meanwhile; 0 scales down at once.",
        fallback_keys=("job.autoscaler.scale-up.grace-period",),
        check=_at_least(0),
    )
    VERTEX_MIN_PARALLELISM = option(
        "job.autoscaler.vertex.min-parallelism",
        "int",
        1,
        "The autoscaler scales no vertex below this (or below its current parallelism, if lower).",
        check=_at_least(1),
    )
    VERTEX_MAX_PARALLELISM = option(
        "job.autoscaler.vertex.max-parallelism",
        "int",
        200,
        "The autoscaler scales no vertex above this (or its current parallelism, if higher), nor "
        "above the vertex's max parallelism.",
        check=_at_least(1),
    )
    MAX_SCALE_DOWN_FACTOR = option(
        "job.autoscaler.scale-down.max-factor",
        "float",
        0.6,
        "At most this fraction of a vertex's parallelism goes in one scale-down (1: no limit).",
        check=_utilization,
    )
    MAX_SCALE_UP_FACTOR = option(
        "job.autoscaler.scale-up.max-factor",
        "float",
        100000.0,
        "A scale-up multiplies a vertex's parallelism by at most 1 + this.",
        check=_at_least(0),
    )
    CATCH_UP_DURATION = option(
        "job.autoscaler.catch-up.duration",
        "duration",
        1_800_000,
        "The time the job should take to work off its sources' backlog (pendingRecords) after a "
        "scaling; 0 sizes for the input rate only.",
        check=_at_least(0),
    )
    RESTART_TIME = option(
        "job.autoscaler.restart.time",
        "duration",
        300_000,
        "The time a rescale is expected to take (its backlog is caught up within catch-up.duration too).",
        check=_at_least(0),
    )
    BACKLOG_PROCESSING_LAG_THRESHOLD = option(
        "job.autoscaler.backlog-processing.lag-threshold",
        "duration",
        300_000,
        "A source whose backlog takes longer than this at its input rate means the job is catching "
        "up: no scale-down, and a scale-up only at full utilization.",
        check=_at_least(0),
    )
    BUSY_TIME_AGGREGATOR = option(
        "job.autoscaler.metrics.busy-time.aggregator",
        "enum",
        "max",
        "How a vertex's busy time is aggregated over its subtasks: max, avg or min.",
        choices=("max", "avg", "min"),
    )
    VERTEX_EXCLUDE_IDS = option(
        "job.autoscaler.vertex.exclude.ids",
        "str",
        "",
        "Comma-separated JobVertex ids the autoscaler never rescales.",
    )
    HISTORY_MAX_COUNT = option(
        "job.autoscaler.history.max.count",
        "int",
        3,
        "Past scaling decisions kept per vertex (shown over REST).",
        check=_at_least(0),
    )


class NettyShuffleEnvironmentOptions:
    NETWORK_NUM_BUFFERS = option(
        "taskmanager.network.numberOfBuffers", "int", 2048, "Network buffers per TaskExecutor.", check=_at_least(1)
    )
    NETWORK_BUFFERS_PER_CHANNEL = option(
        "taskmanager.network.memory.buffers-per-channel",
        "int",
        2,
        "Exclusive buffers (initial credit) per remote channel.",
        check=_at_least(0),
    )
    NETWORK_EXTRA_BUFFERS_PER_GATE = option(
        "taskmanager.network.memory.floating-buffers-per-gate",
        "int",
        8,
        "Floating buffers per input gate.",
        check=_at_least(0),
    )
    BUFFER_DEBLOAT_ENABLED = option(
        "taskmanager.network.memory.buffer-debloat.enabled",
        "bool",
        True,
        "Size remote buffers by the consumer's throughput (on by default here).",
    )
    BUFFER_DEBLOAT_TARGET = option(
        "taskmanager.network.memory.buffer-debloat.target",
        "duration",
        1000,
        "Time a gate's buffered data should take to process.",
        check=_positive,
    )
    BUFFER_DEBLOAT_PERIOD = option(
        "taskmanager.network.memory.buffer-debloat.period",
        "duration",
        200,
        "How often buffer sizes are recomputed.",
        check=_positive,
    )
    BUFFER_DEBLOAT_SAMPLES = option(
        "taskmanager.network.memory.buffer-debloat.samples",
        "int",
        20,
        "Throughput measurements averaged.",
        check=_at_least(1),
    )
    BUFFER_DEBLOAT_THRESHOLD_PERCENTAGES = option(
        "taskmanager.network.memory.buffer-debloat.threshold-percentages",
        "int",
        25,
        "Smallest buffer size change announced (%).",
        check=_at_least(1),
    )


class MetricOptions:
    LATENCY_INTERVAL = option(
        "metrics.latency.interval",
        "duration",
        0,
        "Interval of latency markers from the sources (0: off).",
        check=_at_least(0),
    )
    PORT = option(
        "metrics.port",
        "int",
        -1,
        "Port of the job's Prometheus /metrics endpoint on the driver, 127.0.0.1 (0: any free port; -1: off).",
        check=_port_or_off,
    )


def _port(value: int) -> None:
    if not 0 <= value <= 65535:
        raise ValueError(f"{value} is not a port (0-65535, 0 = any free port)")


class RestOptions:
    """Flink's ``RestOptions``: where a job's driver serves the REST API and the web dashboard."""

    PORT = option(
        "rest.port",
        "int",
        8081,
        "Port of the REST API and web dashboard on the driver of a job on the ray target (the next "
        "free port when it is taken; 0: any free port).",
        check=_port,
    )
    BIND_ADDRESS = option(
        "rest.bind-address", "str", "127.0.0.1", "Address the driver's REST API and web dashboard listen on."
    )
    ENABLED = option(
        "raylink.rest.enabled",
        "bool",
        True,
        "Serve Flink's REST API and the web dashboard on the driver while a job runs: by default for a "
        "job on the ray target; a job on the local target serves it only when this is set to true.",
    )
    SERVER_HEADER_TIMEOUT = option(
        "rest.server.header-timeout",
        "duration",
        10_000,
        "How long a client of a REST server (a job's driver, the session cluster's Dispatcher) may take "
        "from connecting (TLS handshake included) to the end of its first request's headers; a slower "
        "connection is closed (raylink's; Flink has no such limit).",
        check=_positive,
    )
    SERVER_IDLE_TIMEOUT = option(
        "rest.server.idle-timeout",
        "duration",
        30_000,
        "How long a REST server keeps an idle keep-alive connection open, and the longest a later "
        "request on it may take to arrive in full (raylink's).",
        check=_positive,
    )
    SERVER_MAX_CONNECTIONS = option(
        "rest.server.max-connections",
        "int",
        256,
        "Connections a REST server holds at once; when full, a new connection closes the one that waited "
        "longest for its request's headers, else it is refused (raylink's).",
        check=_at_least(8),
    )
    SIGNATURE_VALIDITY = option(
        "rest.signature.validity",
        "duration",
        300_000,
        "How long a request signed for the session cluster's Dispatcher stays valid (either side of "
        "its timestamp); the Dispatcher remembers every nonce it accepted for this long and refuses "
        "a replayed, stale or future-dated request with 401.",
        check=_positive,
    )
    SAVEPOINT_ALLOWED_ROOTS = option(
        "rest.savepoint.allowed-roots",
        "str",
        None,
        "Comma-separated folders (paths or fsspec URLs) a savepoint target named over the REST API, "
        "the Dispatcher or the CLI may lie under, besides state.savepoints.dir and "
        "execution.checkpointing.dir; a target elsewhere is refused (400) and nothing is written.",
    )
    SAVEPOINT_ALLOWED_SCHEMES = option(
        "rest.savepoint.allowed-schemes",
        "str",
        "file",
        "Comma-separated fsspec schemes a savepoint target may use (besides those of the configured "
        "savepoint and checkpoint folders and rest.savepoint.allowed-roots); file: the local file "
        "system only.",
    )


class SecurityOptions:
    """Flink's ``SecurityOptions`` for the REST servers' TLS. Flink reads a JKS keystore and
    truststore (``security.ssl.rest.keystore`` / ``truststore``); raylink reads PEM files instead."""

    SSL_REST_ENABLED = option(
        "security.ssl.rest.enabled",
        "bool",
        False,
        "Serve the REST API and the dashboard over HTTPS (required for a rest.bind-address that is not "
        "a loopback address); the certificate is security.ssl.rest.cert-file.",
    )
    SSL_REST_CERT_FILE = option(
        "security.ssl.rest.cert-file",
        "str",
        None,
        "PEM file with the REST server's certificate chain (raylink's PEM form of Flink's "
        "security.ssl.rest.keystore); may hold the private key too.",
    )
    SSL_REST_KEY_FILE = option(
        "security.ssl.rest.key-file",
        "str",
        None,
        "PEM file with the private key of security.ssl.rest.cert-file, when that file does not hold it.",
    )


class WebOptions:
    """Flink's ``WebOptions``: what the REST API and the web dashboard keep."""

    CHECKPOINTS_HISTORY_SIZE = option(
        "web.checkpoints.history",
        "int",
        10,
        "Checkpoints (in progress, completed or failed) whose statistics the JobMaster keeps for "
        "the REST API's checkpoint history, newest first, whether or not anyone asked for them.",
        check=_at_least(0),
    )


class RaylinkOptions:
    MAX_BATCH_BYTES = option(
        "raylink.network.max-batch-bytes",
        "memory",
        1 << 20,
        "Bytes a remote call between TaskExecutors aims to carry.",
        check=_bytes_at_least(1),
    )
    MAX_BATCH_DELAY = option(
        "raylink.network.max-batch-delay", "duration", 20, "Longest a full buffer waits for its batch.", check=_positive
    )
    MAX_CALLS_IN_FLIGHT = option(
        "raylink.network.max-calls-in-flight",
        "int",
        2,
        "Remote calls with buffers a TaskExecutor has under way to one peer; what is flushed meanwhile "
        "leaves together when one completes.",
        check=_at_least(1),
    )
    DEBLOAT_INITIAL_SIZE = option(
        "raylink.network.buffer-debloat.initial-size",
        "memory",
        4096,
        "Size of remote buffers before the first throughput measurement.",
        check=_bytes_at_least(MIN_BUFFER_SIZE),
    )
    GC_THRESHOLD = option(
        "raylink.taskmanager.gc-threshold",
        "int",
        50_000,
        "Allocations between two young-generation collections in a TaskExecutor, and on the local target "
        "while a job runs (0: Python's default).",
        check=_at_least(0),
    )
    SWITCH_INTERVAL = option(
        "raylink.taskmanager.switch-interval",
        "duration",
        1,
        "How long a TaskExecutor thread holds the GIL while another waits (Python's switch interval; "
        "its default is 5 ms). The local target sets it while a job runs.",
        check=_positive,
    )
    TASK_MANAGER_PIN_TASK_THREADS = option(
        "raylink.taskmanager.pin-task-threads",
        "bool",
        True,
        "Linux: a TaskExecutor process that runs two or more tasks runs their threads on one CPU, the one "
        "the fewest other pinned processes of the node use. They take turns on the GIL anyway; on one CPU the "
        "objects they pass each other stay in its cache. Threads a task starts inherit the CPU (a native "
        "library's thread pool too); false for functions that compute in native threads (numpy, torch) or "
        "release the GIL for long.",
    )
    LOCAL_PIN_TASK_THREADS = option(
        "raylink.local.pin-task-threads",
        "bool",
        True,
        "Local target, Linux: run the task threads of this process's jobs on one CPU. They take turns on the "
        "GIL anyway; on one CPU the objects they pass each other stay in its cache. Threads a task starts "
        "inherit the CPU (a native library's thread pool too); false for functions that compute in native "
        "threads (numpy, torch) or release the GIL for long.",
    )
    COLLECT_MAX_BUFFERED_RECORDS = option(
        "raylink.collect.max-buffered-records",
        "int",
        128 * 1024,
        "Records an execute_and_collect sink subtask holds for its reader before it blocks (back pressure; "
        "a reader in another process also gets at most 4 MiB of encoded records per sink before it blocks). "
        "A remote reader is answered once half of it is queued, or 100 ms after the first record.",
        check=_at_least(1),
    )
    COLLECT_PARALLEL_SINK = option(
        "raylink.collect.parallel-sink",
        "bool",
        True,
        "execute_and_collect's sink runs chained to the operator it reads, at its parallelism (each "
        "subtask's records in order, subtasks interleaved as at one sink); false, and after a "
        "partitioning (key_by, rebalance, union): one sink subtask, as Flink's CollectStreamSink.",
    )
    TASK_PLACEMENT = option(
        "raylink.task-placement",
        "enum",
        "auto",
        "How subtasks map to TaskExecutor processes on Ray: auto (as many processes as the "
        "cluster's CPUs can keep busy: one per subtask while there are no more subtasks than "
        "CPUs, else Flink's slots, spread over at least as many processes as CPUs), task (each "
        "subtask its own process, so pipeline stages use separate cores despite Python's GIL) "
        "or slot (Flink's: a slot's subtasks share one process, taskmanager.numberOfTaskSlots "
        "slots per process). Slot sharing groups stay in the JobGraph either way.",
        choices=("auto", "task", "slot"),
    )
    PLACEMENT_STRATEGY = option(
        "raylink.placement-strategy",
        "enum",
        "spread",
        "How a job's TaskExecutors are placed over Ray's nodes (its placement group's strategy): "
        "spread (over every node, so a job uses every host) or pack (on as few nodes as fit, so "
        "nodes a scale-in empties are idle and Ray's autoscaler can remove them).",
        choices=("spread", "pack"),
    )
    SESSION_ENABLED = option(
        "raylink.session.enabled",
        "bool",
        True,
        "Run jobs on the session cluster (`raylink cluster start`) when one is running "
        "on the Ray cluster the driver connects to; false always starts per-job "
        "TaskExecutors.",
    )
    SESSION_REST_SUBMISSION = option(
        "raylink.session.rest-submission",
        "bool",
        True,
        "A driver not connected to Ray submits its job to the session cluster's Dispatcher "
        "over HTTP (the job's JobMaster runs in the session cluster, so the driver never "
        "imports or connects to Ray); false connects the driver to Ray and runs the "
        "JobMaster in it. Only for drivers on the machine that started the session.",
    )
    SESSION_POOL_SIZE = option(
        "raylink.session.pool-size",
        "int",
        16,
        "Most idle TaskExecutors a session cluster keeps warm for the next jobs "
        "(it grows past this on demand while jobs run).",
        check=_at_least(0),
    )
    PROGRESS = option(
        "raylink.progress",
        "enum",
        "auto",
        "Progress display of `raylink run`: auto (tty on a terminal, else off), tty (redrawn "
        "in place), log (appended blocks) or off.",
        choices=("auto", "tty", "log", "off"),
    )
    PROGRESS_INTERVAL = option(
        "raylink.progress.interval", "duration", 1000, "Progress refresh interval.", check=_positive
    )


class CheckpointingOptions:
    SNAPSHOT_COMPRESSION = option(
        "execution.checkpointing.snapshot-compression",
        "bool",
        False,
        "Recorded for PyFlink's ExecutionConfig; checkpoint files are written uncompressed.",
    )
    CHECKPOINTS_DIRECTORY = option(
        "execution.checkpointing.dir",
        "str",
        None,
        "Where checkpoints are stored: a local path or any fsspec URL "
        "(file://, memory://, s3://, hdfs://, ...); one folder per job.",
        fallback_keys=("state.checkpoints.dir", "state.backend.fs.checkpointdir"),
    )
    MAX_RETAINED_CHECKPOINTS = option(
        "execution.checkpointing.num-retained",
        "int",
        1,
        "Completed checkpoints kept; older ones are deleted.",
        fallback_keys=("state.checkpoints.num-retained",),
        check=_at_least(1),
    )
    FS_SMALL_FILE_THRESHOLD = option(
        "execution.checkpointing.data-inline-threshold",
        "memory",
        20 * 1024,
        "State smaller than this is stored inline in the _metadata file (at most 1mb).",
        fallback_keys=("state.storage.fs.memory-threshold", "state.backend.fs.memory-threshold"),
        check=_inline_threshold,
    )
    INCREMENTAL_CHECKPOINTS = option(
        "execution.checkpointing.incremental",
        "bool",
        False,
        "Checkpoints write only what changed since the last completed one (the rocksdb backend: "
        "its new SST files; the hashmap backend: a file of the entries written or removed since, "
        "after a full one that a chain of at most 8 such files starts from); older files are "
        "shared with earlier checkpoints under the job's shared/ folder and deleted when no "
        "retained checkpoint refers to them.",
        fallback_keys=("state.backend.incremental",),
    )
    CHECKPOINTING_INTERVAL = option(
        "execution.checkpointing.interval",
        "duration",
        None,
        "Interval of periodic checkpoints (unset: checkpointing is off).",
        check=_at_least(10, " ms"),
    )
    CHECKPOINTING_MODE = option(
        "execution.checkpointing.mode",
        "enum",
        "exactly_once",
        "exactly_once or at_least_once (barriers are aligned for both; unaligned checkpoints need exactly_once).",
        choices=("exactly_once", "at_least_once"),
    )
    CHECKPOINTING_TIMEOUT = option(
        "execution.checkpointing.timeout",
        "duration",
        600_000,
        "A checkpoint not complete after this long is expired (declined).",
        check=_positive,
    )
    MIN_PAUSE_BETWEEN_CHECKPOINTS = option(
        "execution.checkpointing.min-pause",
        "duration",
        0,
        "Least time between the end of a checkpoint and the next trigger.",
        check=_at_least(0),
    )
    MAX_CONCURRENT_CHECKPOINTS = option(
        "execution.checkpointing.max-concurrent-checkpoints",
        "int",
        1,
        "Checkpoints in progress at once.",
        check=_at_least(1),
    )
    ENABLE_UNALIGNED = option(
        "execution.checkpointing.unaligned.enabled",
        "bool",
        False,
        "Unaligned checkpoints: barriers overtake the buffers in flight, which are persisted as "
        "channel state and replayed on restore (exactly_once mode only; savepoints stay aligned).",
        fallback_keys=("execution.checkpointing.unaligned",),
    )
    ALIGNED_CHECKPOINT_TIMEOUT = option(
        "execution.checkpointing.aligned-checkpoint-timeout",
        "duration",
        0,
        "With unaligned checkpoints on and this > 0, a checkpoint starts aligned and switches to "
        "unaligned when its alignment has taken longer than this since the checkpoint started.",
        fallback_keys=("execution.checkpointing.alignment-timeout",),
        check=_at_least(0),
    )
    TOLERABLE_FAILURE_NUMBER = option(
        "execution.checkpointing.tolerable-failed-checkpoints",
        "int",
        0,
        "Consecutive failed checkpoints tolerated before the job fails over.",
        check=_at_least(0),
    )


class SavepointConfigOptions:
    """Flink's ``SavepointConfigOptions`` and ``CheckpointingOptions.SAVEPOINT_DIRECTORY``."""

    SAVEPOINT_PATH = option(
        "execution.savepoint.path",
        "str",
        None,
        "A savepoint (or retained checkpoint) folder the job starts from: its state is matched "
        "to the operators by uid (or their generated ids) and redistributed when the "
        "parallelism changed.",
    )
    SAVEPOINT_IGNORE_UNCLAIMED_STATE = option(
        "execution.savepoint.ignore-unclaimed-state",
        "bool",
        False,
        "Start even when the savepoint holds state of an operator the job no longer has "
        "(that state is dropped); without it such a savepoint is refused, naming the operator.",
    )
    SAVEPOINT_DIRECTORY = option(
        "execution.checkpointing.savepoint-dir",
        "str",
        None,
        "Where savepoints go when trigger_savepoint / stop_with_savepoint name no folder.",
        fallback_keys=("state.savepoints.dir",),
    )


class StateBackendOptions:
    STATE_BACKEND = option(
        "state.backend.type",
        "enum",
        "hashmap",
        "The state backend: hashmap (keyed state as Python objects on the TaskExecutors' heap, "
        "snapshotted into checkpoints) or rocksdb (keyed state in an embedded RocksDB on the "
        "TaskExecutor's local disk, checkpointed from RocksDB's own checkpoints; incremental with "
        "execution.checkpointing.incremental). Flink's forst is not supported yet.",
        fallback_keys=("state.backend",),
        choices=("hashmap", "rocksdb"),
        unsupported=("forst",),
    )
    ROCKSDB_LOCAL_DIRECTORIES = option(
        "state.backend.rocksdb.localdir",
        "str",
        None,
        "Where the rocksdb backend keeps its working files on the TaskExecutor (unset: a "
        "raylink-rocksdb-<uid> folder of this user in the system's temporary directory, a private temporary "
        "folder if another user holds that name); several directories "
        "separated by ',' are used round robin by subtask.",
        fallback_keys=("state.backend.rocksdb.local-dir",),
    )
    ROCKSDB_MEMORY_FIXED_PER_SLOT = option(
        "state.backend.rocksdb.memory.fixed-per-slot",
        "memory",
        None,
        "Memory of one rocksdb keyed backend (its write buffers and block cache together); "
        "unset: taskmanager.memory.managed.fraction of taskmanager.memory.process.size per slot "
        "when set, else 128mb.",
    )
    ROCKSDB_WRITE_BUFFER_RATIO = option(
        "state.backend.rocksdb.memory.write-buffer-ratio",
        "float",
        0.5,
        "The share of a rocksdb backend's memory its write buffers (memtables) may take.",
        check=lambda v: _fraction_check("state.backend.rocksdb.memory.write-buffer-ratio", v),
    )
    ROCKSDB_WRITE_BATCH_SIZE = option(
        "state.backend.rocksdb.write-batch-size",
        "memory",
        2 * 1024 * 1024,
        "Values a rocksdb keyed backend keeps as Python objects before writing them to RocksDB in "
        "one batch (bytes of their serialised form, roughly; Flink's write batch size).",
    )
    MANAGED_MEMORY_FRACTION = option(
        "taskmanager.memory.managed.fraction",
        "float",
        0.4,
        "The share of taskmanager.memory.process.size given to the rocksdb backends of a "
        "TaskExecutor (split between its slots).",
        check=lambda v: _fraction_check("taskmanager.memory.managed.fraction", v),
    )


def _fraction_check(key: str, value: float) -> None:
    if not 0.0 < value < 1.0:
        raise ValueError(f"{key} must be in (0, 1), got {value}")


class RestartStrategyOptions:
    RESTART_STRATEGY = option(
        "restart-strategy.type",
        "enum",
        None,
        "none, fixed-delay, exponential-delay or failure-rate (unset: "
        "exponential-delay with checkpointing on, none otherwise).",
        fallback_keys=("restart-strategy",),
        choices=(
            "none",
            "off",
            "disable",
            "fixed-delay",
            "fixeddelay",
            "exponential-delay",
            "exponentialdelay",
            "failure-rate",
            "failurerate",
        ),
    )
    FIXED_DELAY_ATTEMPTS = option(
        "restart-strategy.fixed-delay.attempts",
        "int",
        1,
        "Restarts before the job fails (fixed-delay).",
        check=_at_least(0),
    )
    FIXED_DELAY_DELAY = option(
        "restart-strategy.fixed-delay.delay",
        "duration",
        1000,
        "Wait before a restart (fixed-delay).",
        check=_at_least(0),
    )
    EXPONENTIAL_INITIAL_BACKOFF = option(
        "restart-strategy.exponential-delay.initial-backoff",
        "duration",
        1000,
        "First wait before a restart (exponential-delay).",
        check=_at_least(0),
    )
    EXPONENTIAL_MAX_BACKOFF = option(
        "restart-strategy.exponential-delay.max-backoff",
        "duration",
        60_000,
        "Longest wait before a restart (exponential-delay).",
        check=_at_least(0),
    )
    EXPONENTIAL_MULTIPLIER = option(
        "restart-strategy.exponential-delay.backoff-multiplier",
        "float",
        1.5,
        "Factor between two waits (exponential-delay).",
        check=_at_least(1),
    )
    EXPONENTIAL_RESET_THRESHOLD = option(
        "restart-strategy.exponential-delay.reset-backoff-threshold",
        "duration",
        3_600_000,
        "A job running this long without failure starts again at the initial backoff.",
        check=_positive,
    )
    EXPONENTIAL_JITTER = option(
        "restart-strategy.exponential-delay.jitter-factor",
        "float",
        0.1,
        "Random share added to or taken from each wait.",
        check=_at_least(0),
    )
    EXPONENTIAL_ATTEMPTS = option(
        "restart-strategy.exponential-delay.attempts-before-reset-backoff",
        "int",
        2_147_483_647,
        "Restarts before the job fails (exponential-delay).",
        check=_at_least(0),
    )
    FAILURE_RATE_MAX_FAILURES = option(
        "restart-strategy.failure-rate.max-failures-per-interval",
        "int",
        1,
        "Failures within one interval before the job fails (failure-rate).",
        check=_at_least(1),
    )
    FAILURE_RATE_INTERVAL = option(
        "restart-strategy.failure-rate.failure-rate-interval",
        "duration",
        60_000,
        "The interval failures are counted in (failure-rate).",
        check=_positive,
    )
    FAILURE_RATE_DELAY = option(
        "restart-strategy.failure-rate.delay",
        "duration",
        1000,
        "Wait before a restart (failure-rate).",
        check=_at_least(0),
    )


class PythonOptions:
    """The job's Python dependencies (``env.add_python_file`` and friends set them)."""

    PYTHON_FILES = option(
        "python.files",
        "str",
        None,
        "Python files, folders, zips or wheels put on the TaskExecutors' path (comma separated).",
    )
    PYTHON_ARCHIVES = option(
        "python.archives",
        "str",
        None,
        "Archives extracted in the TaskExecutors' working folder (path#target_dir, comma separated).",
    )
    PYTHON_REQUIREMENTS = option(
        "python.requirements",
        "str",
        None,
        "A requirements.txt installed for the TaskExecutors (requirements.txt#cache_dir: offline from the cache).",
    )
    PYTHON_EXECUTABLE = option(
        "python.executable", "str", None, "The Python interpreter of the TaskExecutors on Ray (unset: the driver's)."
    )


class SparkConnectorOptions:
    """The Spark bridge (``raylink.connectors.spark.get_spark``): the Spark-on-Ray session
    raylink starts through RayDP when the program started none."""

    EXECUTORS = option(
        "raylink.spark.executors", "int", 1, "Spark executors raylink starts on Ray.", check=_at_least(1)
    )
    EXECUTOR_CORES = option("raylink.spark.executor-cores", "int", 1, "Cores per Spark executor.", check=_at_least(1))
    EXECUTOR_MEMORY = option(
        "raylink.spark.executor-memory", "str", "1G", "Memory per Spark executor, in Spark's notation (512m, 2G)."
    )
    WAREHOUSE_DIR = option(
        "raylink.spark.warehouse-dir",
        "str",
        None,
        "Spark SQL warehouse folder (unset: Spark's default, ./spark-warehouse).",
    )
    USE_SESSION_CLUSTER = option(
        "raylink.spark.use-session-cluster",
        "bool",
        True,
        "Attach to the warm Spark session of a running session cluster (raylink cluster start --spark) "
        "instead of starting one; false: this program starts a Spark session of its own.",
    )
    CONF = option(
        "raylink.spark.conf.",
        "str",
        None,
        "Any Spark configuration key, passed to the Spark session raylink starts "
        "(raylink.spark.conf.spark.sql.shuffle.partitions=8).",
        prefix=True,
    )


OPTION_GROUPS = (
    CoreOptions,
    PipelineOptions,
    ExecutionOptions,
    HighAvailabilityOptions,
    ClientOptions,
    TaskManagerOptions,
    ResourceManagerOptions,
    AutoScalerOptions,
    NettyShuffleEnvironmentOptions,
    MetricOptions,
    RestOptions,
    SecurityOptions,
    WebOptions,
    CheckpointingOptions,
    SavepointConfigOptions,
    StateBackendOptions,
    RestartStrategyOptions,
    PythonOptions,
    RaylinkOptions,
    SparkConnectorOptions,
)


def group_options(group: type) -> list[ConfigOption]:
    """The options an option class declares, in declaration order."""
    return [value for value in vars(group).values() if isinstance(value, ConfigOption)]


def all_options() -> Iterator[ConfigOption]:
    """Every registered option, group by group."""
    for group in OPTION_GROUPS:
        yield from group_options(group)


_BY_KEY: dict[str, ConfigOption] = {}
_PREFIXES: list[ConfigOption] = []


def _index(group: type) -> None:
    for opt in group_options(group):
        if opt.prefix:
            _PREFIXES.append(opt)
            continue
        _BY_KEY[opt.key] = opt
        for fallback in opt.fallback_keys:
            _BY_KEY.setdefault(fallback, opt)


def register(group: type) -> type:
    """Add an option class (e.g. a connector's) to the registry; returns it (a decorator)."""
    global OPTION_GROUPS
    if group not in OPTION_GROUPS:
        OPTION_GROUPS = OPTION_GROUPS + (group,)
        _index(group)
    return group


for _group in OPTION_GROUPS:
    _index(_group)


def parse_global_job_parameters(text: Optional[str]) -> Dict[str, str]:
    """``pipeline.global-job-parameters`` as a dict: a JSON object or Flink's ``k:v,k:v`` form."""
    if not text:
        return {}
    text = text.strip()
    if text.startswith("{"):
        try:
            return {str(k): str(v) for k, v in json.loads(text).items()}
        except ValueError:
            text = text[1:-1]
    pairs = (item.split(":", 1) for item in text.split(",") if item.strip())
    return {k.strip().strip("'\""): v.strip().strip("'\"") for k, v in pairs}


def read_option(settings: Any, option: ConfigOption, *, validate: bool = True) -> Any:
    """``option`` from a ``Configuration``, a plain dict of settings (a task's job
    parameters) or ``None``, converted; its default when unset. ``validate=False`` skips
    the option's range check (the runtime accepts e.g. segments below Flink's minimum,
    which the CLI refuses)."""
    if hasattr(settings, "get") and not isinstance(settings, dict):  # a Configuration
        if validate:
            return settings.get(option)
        settings = settings.to_dict()
    for key in (option.key, *option.fallback_keys):
        if settings and key in settings:
            return option.convert(settings[key]) if validate else option.parse(settings[key])
    return option.default


def job_parameter(settings: Any, key: str) -> Optional[str]:
    """``key`` of the global job parameters in a task's settings (its job parameters), or None."""
    return parse_global_job_parameters(read_option(settings, PipelineOptions.GLOBAL_JOB_PARAMETERS)).get(key)


def check_enumerated_value(key: str, value: Any) -> None:
    """Raise :class:`IllegalConfigurationError` (naming the key and the accepted values) when
    ``key`` is a known key with enumerated values and ``value`` is not one of them; other keys
    and types are checked when read."""
    found = find_option(key)
    if found is not None and found.enumerated:
        found.parse(value, key)


def validate_enumerated_values(settings: Any) -> None:
    """:func:`check_enumerated_value` for every key of ``settings`` (a ``Configuration`` or a
    dict): a job is not submitted with a value its options do not accept."""
    items = settings.items() if isinstance(settings, dict) else settings.to_dict().items()
    for key, value in items:
        check_enumerated_value(key, value)


def find_option(key: str) -> Optional[ConfigOption]:
    """The option registered for ``key`` (or one of its fallback keys, or a prefix of it)."""
    found = _BY_KEY.get(key)
    if found is None:
        found = next((opt for opt in _PREFIXES if opt.matches(key)), None)
    return found


def closest_key(key: str) -> Optional[str]:
    """The registered key ``key`` most likely misspells, if any is close."""
    matches = difflib.get_close_matches(key, list(_BY_KEY), n=1, cutoff=0.75)
    return matches[0] if matches else None


def unknown_key_message(key: str) -> str:
    hint = closest_key(key)
    return f"unknown configuration key {key!r}" + (f" (did you mean {hint!r}?)" if hint else "")


__all__ = [
    "CheckpointingOptions",
    "SavepointConfigOptions",
    "ConfigOption",
    "CoreOptions",
    "ExecutionOptions",
    "HighAvailabilityOptions",
    "IllegalConfigurationError",
    "MetricOptions",
    "NettyShuffleEnvironmentOptions",
    "PipelineOptions",
    "PythonOptions",
    "RaylinkOptions",
    "ResourceManagerOptions",
    "RestartStrategyOptions",
    "SparkConnectorOptions",
    "StateBackendOptions",
    "TaskManagerOptions",
    "all_options",
    "check_enumerated_value",
    "closest_key",
    "find_option",
    "group_options",
    "job_parameter",
    "parse_global_job_parameters",
    "parse_duration_ms",
    "parse_memory",
    "read_option",
    "register",
    "unknown_key_message",
    "validate_enumerated_values",
]
