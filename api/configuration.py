"""PyFlink's ``pyflink.common.configuration``: ``Configuration`` (``raylink.core.configuration``).

Only re-exports: the implementation lives on a lower floor."""

from raylink.core.configuration import (
    CONF_ENV_VAR,
    Configuration,
)

__all__ = [
    "Configuration",
    "CONF_ENV_VAR",
]
