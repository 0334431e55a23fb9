"""Job configuration from the command line: ``--conf-file job.yaml`` and ``--conf key=value``.

Keys are Flink's names where Flink has one (``parallelism.default``,
``taskmanager.numberOfTaskSlots``, ``execution.buffer-timeout``, ...). A YAML
file may be flat (``parallelism.default: 2``) or nested like Flink's
``config.yaml`` (``parallelism: {default: 2}``). Values are normalised to what
the runtime reads: durations (``"100 ms"``, ``"2s"``) to milliseconds, memory
sizes (``"512m"``, ``"2 gb"``; binary units as in Flink) to bytes.

The result travels to the job as JSON in the ``RAYLINK_CONF`` environment
variable, which ``StreamExecutionEnvironment`` merges under explicit settings.
"""

from __future__ import annotations

import json
import os
from typing import Any, Callable, Optional

from raylink.api.configuration import CONF_ENV_VAR
from raylink.api.options import (  # noqa: F401 - parsers and limits shared with the options registry
    MAX_SEGMENT_SIZE,
    MIN_BUFFER_SIZE,
    MIN_SEGMENT_SIZE,
    IllegalConfigurationError,
    find_option,
    parse_bool,
    parse_duration_ms,
    parse_memory,
    unknown_key_message,
)

import yaml


class ConfError(ValueError):
    """A configuration file or value the CLI cannot use (exit code 2)."""


def _int(minimum: Optional[int] = None) -> Callable[[Any], int]:
    def convert(value: Any) -> int:
        if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
            raise ValueError(f"{value!r} is not an integer")
        try:
            out = int(str(value).strip()) if not isinstance(value, (int, float)) else int(value)
        except ValueError:
            raise ValueError(f"{value!r} is not an integer") from None
        if minimum is not None and out < minimum:
            raise ValueError(f"{out} is below the minimum {minimum}")
        return out
    return convert


def _positive_float(value: Any) -> float:
    try:
        out = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{value!r} is not a number") from None
    if isinstance(value, bool) or out <= 0:
        raise ValueError(f"{value!r} must be a number > 0")
    return out


def _choice(*options: str) -> Callable[[Any], str]:
    def convert(value: Any) -> str:
        text = str(value).strip().lower()
        if text not in options:
            raise ValueError(f"{value!r} is not one of {', '.join(options)}")
        return text
    return convert


def _buffer_timeout(value: Any) -> int:
    out = parse_duration_ms(value)
    if out < -1:
        raise ValueError(f"{value!r} must be >= -1 (-1: flush only full buffers)")
    return out


def _max_parallelism(value: Any) -> int:
    out = _int()(value)
    if out != -1 and not 1 <= out <= 32768:
        raise ValueError(f"{out} must be -1 (derived) or between 1 and 32768")
    return out


def _memory(value: Any) -> int:
    out = parse_memory(value)
    if out < 0:
        raise ValueError(f"{value!r} must not be negative")
    return out


def _duration_positive(value: Any) -> int:
    out = parse_duration_ms(value)
    if out <= 0:
        raise ValueError(f"{value!r} must be > 0")
    return out


def _segment_size(value: Any) -> int:
    """Flink's check of ``taskmanager.memory.segment-size``: at least 4 KiB, a power of two."""
    out = parse_memory(value)
    if out < MIN_SEGMENT_SIZE:
        raise ValueError(f"{out} bytes is below the minimum memory segment size of {MIN_SEGMENT_SIZE} (4kb)")
    if out > MAX_SEGMENT_SIZE:
        raise ValueError(f"{out} bytes is above the maximum memory segment size of {MAX_SEGMENT_SIZE} (1gb)")
    if out & (out - 1):
        raise ValueError(f"{out} bytes is not a power of 2 (memory segment sizes must be, e.g. 32kb)")
    return out


def _memory_at_least(minimum: int) -> Callable[[Any], int]:
    def convert(value: Any) -> int:
        out = parse_memory(value)
        if out < minimum:
            raise ValueError(f"{value!r} is below the minimum of {minimum} bytes")
        return out
    return convert


def _port(value: Any) -> int:
    """A TCP port: 0 (any free port) to 65535, or -1 (off)."""
    out = _int()(value)
    if not -1 <= out <= 65535:
        raise ValueError(f"{out} is not a port (0-65535, 0 = any free port, -1 = off)")
    return out


# key -> (converter, help); the keys the CLI knows and checks.
KNOWN_KEYS: dict[str, tuple[Callable[[Any], Any], str]] = {
    "parallelism.default": (_int(1), "default parallelism of operators"),
    "pipeline.max-parallelism": (_max_parallelism, "max parallelism (number of key groups); -1 derives it"),
    "pipeline.operator-chaining": (parse_bool, "chain operators (true/false)"),
    "pipeline.name": (str, "job name when execute() gets none"),
    "execution.target": (_choice("ray", "local"), "ray (TaskExecutor actors) or local (threads in this process)"),
    "execution.buffer-timeout": (_buffer_timeout, "flush interval of output buffers (ms, or '100 ms'); 0 flushes every record, -1 only full buffers"),
    "execution.shuffle-mode": (_choice("pipelined", "batch"), "pipelined or batch (blocking) exchanges"),
    "taskmanager.numberOfTaskSlots": (_int(1), "slots per TaskExecutor actor"),
    "taskmanager.cpu.cores": (_positive_float, "Ray CPUs reserved per TaskExecutor actor"),
    "taskmanager.memory.process.size": (_memory, "Ray memory reserved per TaskExecutor actor (bytes, or 512m / 2g)"),
    "taskmanager.memory.segment-size": (_segment_size, "network buffer size: a power of 2, at least 4kb (default 32kb)"),
    "taskmanager.network.numberOfBuffers": (_int(1), "network buffers per TaskExecutor"),
    "taskmanager.network.memory.buffers-per-channel": (_int(0), "exclusive buffers (initial credit) per remote channel"),
    "taskmanager.network.memory.floating-buffers-per-gate": (_int(0), "floating buffers per input gate"),
    "raylink.network.max-batch-bytes": (_memory_at_least(1), "bytes a remote call aims to carry (batching)"),
    "raylink.network.max-batch-delay": (_duration_positive, "longest a full buffer waits for its batch (ms)"),
    "taskmanager.network.memory.buffer-debloat.enabled": (parse_bool, "size remote buffers by the consumer's throughput (default true)"),
    "taskmanager.network.memory.buffer-debloat.target": (_duration_positive, "time a gate's buffers of data take to process (ms, or '1 s')"),
    "taskmanager.network.memory.buffer-debloat.period": (_duration_positive, "how often buffer sizes are recomputed (ms)"),
    "taskmanager.network.memory.buffer-debloat.samples": (_int(1), "throughput measurements averaged"),
    "taskmanager.network.memory.buffer-debloat.threshold-percentages": (_int(1), "smallest size change announced (%)"),
    "raylink.network.buffer-debloat.initial-size": (_memory_at_least(MIN_BUFFER_SIZE), "size of remote buffers before the first measurement"),
    "metrics.port": (_port, "port of the job's Prometheus /metrics endpoint on the driver, 127.0.0.1 (0: any free port; default -1: off)"),
    "raylink.progress": (_choice("auto", "tty", "log", "off"), "progress display of `raylink run`"),
    "raylink.progress.interval": (_duration_positive, "progress refresh interval (ms, or '2 s')"),
}


def _flatten(data: Any, prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in data.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(_flatten(value, name + "."))
        else:
            out[name] = value
    return out


def normalize(key: str, value: Any) -> Any:
    """Check and convert one value for ``key`` (unknown keys pass through unchanged)."""
    if value is None:
        raise ConfError(f"configuration key {key!r} has no value")
    entry = KNOWN_KEYS.get(key)
    if entry is None:
        option = find_option(key)
        if option is not None:  # registered (api/options.py) but without a CLI converter here
            try:
                option.convert(value)
            except IllegalConfigurationError as exc:
                raise ConfError(str(exc)) from None
        return value if isinstance(value, (str, int, float, bool)) else str(value)
    try:
        return entry[0](value)
    except ValueError as exc:
        raise ConfError(f"configuration key {key!r}: {exc}") from None


def load_conf_file(path: str) -> dict[str, Any]:
    if not os.path.isfile(path):
        raise ConfError(f"no such configuration file: {path}")
    try:
        with open(path, encoding="utf-8") as fh:
            data = yaml.safe_load(fh)
    except yaml.YAMLError as exc:
        raise ConfError(f"{path} is not valid YAML: {exc}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfError(f"{path} must hold a mapping of configuration keys, got {type(data).__name__}")
    return _flatten(data)


def parse_pair(text: str) -> tuple[str, Any]:
    key, sep, value = text.partition("=")
    key = key.strip()
    if not sep or not key:
        raise ConfError(f"--conf expects key=value, got {text!r}")
    value = value.strip()
    try:  # numbers and booleans as YAML reads them; anything else stays text
        parsed = yaml.safe_load(value) if value else ""
    except yaml.YAMLError:
        parsed = value
    return key, parsed if isinstance(parsed, (int, float, bool)) else value


def build_conf(conf_file: Optional[str], pairs: list[str]) -> tuple[dict[str, Any], list[str]]:
    """The job configuration (file first, then ``--conf`` pairs) and warnings for unknown keys."""
    raw: dict[str, Any] = {}
    if conf_file:
        raw.update(load_conf_file(conf_file))
    for pair in pairs or []:
        key, value = parse_pair(pair)
        raw[key] = value
    conf = {key: normalize(key, value) for key, value in raw.items()}
    warnings = [
        f"raylink: warning: {unknown_key_message(key)} (passed to the job unchanged)"
        for key in conf if key not in KNOWN_KEYS and find_option(key) is None
    ]
    return conf, warnings


def conf_from_environment() -> dict[str, Any]:
    """What ``RAYLINK_CONF`` holds already (e.g. set by ``raylink submit``)."""
    text = os.environ.get(CONF_ENV_VAR)
    if not text:
        return {}
    try:
        data = json.loads(text)
    except ValueError:
        raise ConfError(f"{CONF_ENV_VAR} is not valid JSON: {text[:80]!r}") from None
    if not isinstance(data, dict):
        raise ConfError(f"{CONF_ENV_VAR} must be a JSON object")
    try:  # checked like --conf: a bad inherited value is a usage error here, not a traceback later
        return {key: normalize(key, value) for key, value in data.items()}
    except ConfError as exc:
        raise ConfError(f"{CONF_ENV_VAR}: {exc}") from None


def keys_help() -> str:
    width = max(len(k) for k in KNOWN_KEYS)
    return "\n".join(f"  {key.ljust(width)}  {text}" for key, (_, text) in KNOWN_KEYS.items())
