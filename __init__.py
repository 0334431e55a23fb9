"""raylink: Apache Flink's streaming runtime rebuilt in Python on Ray.

The repository root is this package (``pyproject.toml`` maps ``raylink`` to ``.``).
The public DataStream API lives in :mod:`raylink.api` and is re-exported here.
"""

import importlib

from raylink.errors import RaylinkError  # a leaf module: importing it stays light

__version__ = "0.1.0"


def __getattr__(name):  # lazy re-export so ``import raylink.graph`` stays light
    if name.startswith("__"):
        raise AttributeError(name)
    api = importlib.import_module("raylink.api")
    try:
        return getattr(api, name)
    except AttributeError:
        raise AttributeError(f"module 'raylink' has no attribute {name!r}") from None
