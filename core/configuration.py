"""PyFlink's ``Configuration``: string keys (Flink's names), typed getters and setters.

``get(option)`` / ``set(option, value)`` take a registered ``ConfigOption``
(:mod:`raylink.core.options`, the one home of every key, its type and default) and
convert the value to the option's type. The string-key getters (``get_integer`` ...)
return the stored value as that type, else the caller's default, else the registered
option's default -- the registry is where defaults live; this module keeps none.

A known key with enumerated values (``execution.runtime-mode``, ``state.backend.type``,
...) is checked when it is set -- by every setter and by ``RAYLINK_CONF`` -- and a value
outside its accepted set raises ``IllegalConfigurationError`` naming the key and the
accepted values; other values are converted (and checked) when read.
Not thread-safe: a ``Configuration`` is built by one thread, then read.
"""

from __future__ import annotations

import json
import os
from typing import Any, Optional

from raylink.core.options import ConfigOption, IllegalConfigurationError, check_enumerated_value, find_option

# A JSON object of configuration keys for every environment created in this
# process (the CLI sets it); explicit settings win over it.
CONF_ENV_VAR = "RAYLINK_CONF"


_UNSET = object()


def environment_settings() -> dict[str, Any]:
    """The settings in ``RAYLINK_CONF`` (a JSON object; set by the raylink CLI), as they are;
    empty when unset. ``ValueError`` when it is not valid JSON or not an object."""
    text = os.environ.get(CONF_ENV_VAR)
    if not text:
        return {}
    try:
        data = json.loads(text)
    except ValueError:
        raise ValueError(f"{CONF_ENV_VAR} is not valid JSON: {text[:80]!r}") from None
    if not isinstance(data, dict):
        raise ValueError(f"{CONF_ENV_VAR} must be a JSON object, got {type(data).__name__}")
    return data


class Configuration:
    """A flat key/value configuration with Flink's key names."""

    def __init__(self, other: Optional["Configuration"] = None) -> None:
        self._data: dict[str, Any] = dict(other._data) if other is not None else {}

    def _put(self, key: str, value: Any) -> "Configuration":
        check_enumerated_value(key, value)  # an enumerated key's value outside its accepted set fails here
        self._data[key] = value
        return self

    def set_string(self, key: str, value: str) -> "Configuration":
        return self._put(key, str(value))

    def set_integer(self, key: str, value: int) -> "Configuration":
        return self._put(key, int(value))

    def set_boolean(self, key: str, value: bool) -> "Configuration":
        return self._put(key, bool(value))

    def set_float(self, key: str, value: float) -> "Configuration":
        return self._put(key, float(value))

    def _get(self, key: str, default_value: Any, fallback: Any) -> Any:
        """The set value; else the caller's default; else the registered option's default."""
        if key in self._data:
            return self._data[key]
        if default_value is not _UNSET:
            return default_value
        option = find_option(key)
        if option is None or option.default is None:
            return fallback
        return option.default

    def get(self, option: ConfigOption, default_value: Any = _UNSET) -> Any:
        """The value of a registered ``ConfigOption`` (``core/options.py``), converted to its
        type (durations in ms, memory sizes in bytes), from its key or a fallback key."""
        for key in (option.key, *option.fallback_keys):
            if key in self._data:
                return option.convert(self._data[key])
        return option.default if default_value is _UNSET else default_value

    def set(self, option: ConfigOption, value: Any) -> "Configuration":
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
        """The configuration in ``RAYLINK_CONF`` (JSON object), empty when unset; an enumerated
        key's value outside its accepted set raises ``IllegalConfigurationError``."""
        conf = Configuration()
        for key, value in environment_settings().items():
            try:
                conf._put(key, value)
            except IllegalConfigurationError as exc:
                raise IllegalConfigurationError(f"{CONF_ENV_VAR}: {exc}") from None
        return conf

    def __repr__(self) -> str:
        return f"Configuration({self._data!r})"
