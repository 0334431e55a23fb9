"""Whether raylink's compiled modules may be used: ``RAYLINK_PURE_PYTHON`` set to anything but
``""``/``"0"`` asks every module with a compiled twin (``core._row``, ``shuffle._hotpath``) for
its pure-Python version; so does a module that was not built. Each module decides once, when it
is imported. Thread-safe: reads the environment only."""

from __future__ import annotations

import os

__all__ = ["PURE_PYTHON_ENV", "pure_python_forced"]

#: set to 1 to force the pure-Python twins
PURE_PYTHON_ENV = "RAYLINK_PURE_PYTHON"


def pure_python_forced() -> bool:
    """True if ``RAYLINK_PURE_PYTHON`` asks for the pure-Python twins."""
    return os.environ.get(PURE_PYTHON_ENV, "") not in ("", "0")
