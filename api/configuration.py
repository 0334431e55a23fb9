"""PyFlink's ``Configuration``: string keys (Flink's names), typed getters and setters."""

from __future__ import annotations

import json
import os
from typing import Any, Optional

# Flink's option keys and defaults that raylink honours.
DEFAULTS: dict[str, Any] = {
    "parallelism.default": 1,
    "pipeline.max-parallelism": -1,
    "pipeline.operator-chaining": True,
    "pipeline.name": "raylink job",
    "execution.buffer-timeout": 100,
    "execution.target": "ray",
    "execution.shuffle-mode": "pipelined",
    "taskmanager.numberOfTaskSlots": 1,
    "taskmanager.memory.segment-size": 32 * 1024,
    "taskmanager.network.numberOfBuffers": 2048,
    "taskmanager.network.memory.buffers-per-channel": 2,
    "taskmanager.network.memory.floating-buffers-per-gate": 8,
    # resources per TaskExecutor actor, passed to Ray (0 memory: no reservation)
    "taskmanager.cpu.cores": 0.01,
    "taskmanager.memory.process.size": 0,
    # `raylink run`: auto | tty | log | off, refreshed every interval ms
    "raylink.progress": "auto",
    "raylink.progress.interval": 1000,
}

# A JSON object of configuration keys for every environment created in this
# process (the CLI sets it); explicit settings win over it.
CONF_ENV_VAR = "RAYLINK_CONF"


_UNSET = object()


class Configuration:
    """A flat key/value configuration with Flink's key names."""

    def __init__(self, other: Optional["Configuration"] = None) -> None:
        self._data: dict[str, Any] = dict(other._data) if other is not None else {}

    def set_string(self, key: str, value: str) -> "Configuration":
        self._data[key] = str(value)
        return self

    def set_integer(self, key: str, value: int) -> "Configuration":
        self._data[key] = int(value)
        return self

    def set_boolean(self, key: str, value: bool) -> "Configuration":
        self._data[key] = bool(value)
        return self

    def set_float(self, key: str, value: float) -> "Configuration":
        self._data[key] = float(value)
        return self

    def _get(self, key: str, default_value: Any, fallback: Any) -> Any:
        """The set value; else the caller's default; else Flink's default for the key."""
        if key in self._data:
            return self._data[key]
        if default_value is not _UNSET:
            return default_value
        return DEFAULTS.get(key, fallback)

    def get(self, option: Any, default_value: Any = _UNSET) -> Any:
        """The value of a registered ``ConfigOption`` (``api/options.py``), converted to its
        type (durations in ms, memory sizes in bytes), from its key or a fallback key."""
        for key in (option.key, *option.fallback_keys):
            if key in self._data:
                return option.convert(self._data[key])
        return option.default if default_value is _UNSET else default_value

    def set(self, option: Any, value: Any) -> "Configuration":
        """Set a registered ``ConfigOption`` (checked now, so a bad value fails here)."""
        option.convert(value)
        self._data[option.key] = value
        return self

    def get_string(self, key: str, default_value: Any = _UNSET) -> Optional[str]:
        value = self._get(key, default_value, None)
        return None if value is None else str(value)

    def get_integer(self, key: str, default_value: Any = _UNSET) -> int:
        value = self._get(key, default_value, 0)
        try:
            return int(value)
        except (TypeError, ValueError):
            raise ValueError(f"configuration key {key!r}: {value!r} is not an integer") from None

    def get_boolean(self, key: str, default_value: Any = _UNSET) -> bool:
        value = self._get(key, default_value, False)
        if isinstance(value, str):
            if value.lower() not in ("true", "false"):
                raise ValueError(f"configuration key {key!r}: {value!r} is not a boolean")
            return value.lower() == "true"
        return bool(value)

    def get_float(self, key: str, default_value: Any = _UNSET) -> float:
        return float(self._get(key, default_value, 0.0))

    def contains_key(self, key: str) -> bool:
        return key in self._data

    def remove_config(self, key: str) -> bool:
        return self._data.pop(key, None) is not None

    def key_set(self) -> set[str]:
        return set(self._data)

    def to_dict(self) -> dict[str, str]:
        return {k: str(v) for k, v in self._data.items()}

    def add_all(self, other: "Configuration") -> "Configuration":
        self._data.update(other._data)
        return self

    @staticmethod
    def from_environment() -> "Configuration":
        """The configuration in ``RAYLINK_CONF`` (JSON object), empty when unset."""
        conf = Configuration()
        text = os.environ.get(CONF_ENV_VAR)
        if text:
            try:
                data = json.loads(text)
            except ValueError:
                raise ValueError(f"{CONF_ENV_VAR} is not valid JSON: {text[:80]!r}") from None
            if not isinstance(data, dict):
                raise ValueError(f"{CONF_ENV_VAR} must be a JSON object, got {type(data).__name__}")
            conf._data.update(data)
        return conf

    def __repr__(self) -> str:
        return f"Configuration({self._data!r})"
