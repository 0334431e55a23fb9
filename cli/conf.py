"""Job configuration from the command line: ``--conf-file job.yaml`` and ``--conf key=value``.

Keys are Flink's names where Flink has one (``parallelism.default``,
``taskmanager.numberOfTaskSlots``, ``execution.buffer-timeout``, ...); each value is
checked and converted by the option registered for its key (:mod:`raylink.core.options`),
keys nobody registered pass through with a warning naming the closest known key. A YAML
file may be flat (``parallelism.default: 2``) or nested like Flink's
``config.yaml`` (``parallelism: {default: 2}``). Values are normalised to what
the runtime reads: durations (``"100 ms"``, ``"2s"``) to milliseconds, memory
sizes (``"512m"``, ``"2 gb"``; binary units as in Flink) to bytes.

The result travels to the job as JSON in the ``RAYLINK_CONF`` environment
variable, which ``StreamExecutionEnvironment`` merges under explicit settings.
"""

from __future__ import annotations

import os
from typing import Any, Optional

import yaml

from raylink.core.configuration import CONF_ENV_VAR, environment_settings
from raylink.core.options import IllegalConfigurationError, all_options, find_option, unknown_key_message
from raylink.errors import RaylinkError


class ConfError(RaylinkError, ValueError):
    """A configuration file or value the CLI cannot use (exit code 2)."""


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
    """Check ``value`` against the option registered for ``key`` and convert it to what the
    runtime reads (durations to ms, memory sizes to bytes); unknown keys pass through."""
    if value is None:
        raise ConfError(f"configuration key {key!r} has no value")
    option = find_option(key)
    if option is None:
        return value if isinstance(value, (str, int, float, bool)) else str(value)
    try:
        return option.convert(value, key)
    except IllegalConfigurationError as exc:
        raise ConfError(str(exc)) from None


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
        for key in conf
        if find_option(key) is None
    ]
    return conf, warnings


def conf_from_environment() -> dict[str, Any]:
    """What ``RAYLINK_CONF`` holds already (e.g. set by ``raylink submit``)."""
    try:
        data = environment_settings()
    except ValueError as exc:
        raise ConfError(str(exc)) from None
    try:  # checked like --conf: a bad inherited value is a usage error here, not a traceback later
        return {key: normalize(key, value) for key, value in data.items()}
    except ConfError as exc:
        raise ConfError(f"{CONF_ENV_VAR}: {exc}") from None


def keys_help() -> str:
    """``  key  description`` for every registered option (the ``--help`` of run and submit)."""
    options = list(all_options())
    width = max(len(o.display_key) for o in options)
    return "\n".join(f"  {o.display_key.ljust(width)}  {o.description}" for o in options)
