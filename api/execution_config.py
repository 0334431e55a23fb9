"""PyFlink's ``ExecutionConfig`` (``env.get_config()``), a view of the environment's
``Configuration``.

Setters write the Flink option they stand for into the shared ``Configuration``
(which the job hands to every task), so ``env.get_config().set_auto_watermark_interval(50)``
and ``pipeline.auto-watermark-interval: 50 ms`` are the same setting. Every other
attribute is the ``Configuration``'s (``get_config().get_string(...)`` keeps working).
Not thread-safe (program-building time only).
"""

from __future__ import annotations

from typing import Any

from raylink.api.configuration import Configuration
from raylink.api.options import PipelineOptions

AUTO_WATERMARK_INTERVAL = PipelineOptions.AUTO_WATERMARK_INTERVAL.key
DEFAULT_AUTO_WATERMARK_INTERVAL_MS = PipelineOptions.AUTO_WATERMARK_INTERVAL.default


class ExecutionConfig:
    """The settings of one job's execution (PyFlink's ``ExecutionConfig``)."""

    def __init__(self, configuration: Configuration) -> None:
        self._configuration = configuration

    def set_auto_watermark_interval(self, interval: int) -> "ExecutionConfig":
        """Emit periodic watermarks every ``interval`` ms (0 disables them; default 200)."""
        if isinstance(interval, bool) or not isinstance(interval, int):
            raise TypeError(f"set_auto_watermark_interval: interval must be an int (ms), got {interval!r}")
        if interval < 0:
            raise ValueError(f"set_auto_watermark_interval: interval must not be negative, got {interval}")
        self._configuration.set_string(AUTO_WATERMARK_INTERVAL, f"{interval} ms")
        return self

    def get_auto_watermark_interval(self) -> int:
        return self._configuration.get(PipelineOptions.AUTO_WATERMARK_INTERVAL)

    def get_configuration(self) -> Configuration:
        return self._configuration

    def __getattr__(self, name: str) -> Any:
        return getattr(self._configuration, name)

    def __repr__(self) -> str:
        return f"ExecutionConfig({self._configuration!r})"


__all__ = ["ExecutionConfig", "AUTO_WATERMARK_INTERVAL", "DEFAULT_AUTO_WATERMARK_INTERVAL_MS"]
