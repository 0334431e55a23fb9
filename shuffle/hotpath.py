"""Which per-record path runs: the compiled one (``raylink.shuffle._hotpath``) or its pure-Python twins.

The compiled module holds the per-batch framework loops (keyed channel selection with Flink's
murmur key-group hash, bucketing per channel, the flatness check, the rolling reduce, the
keyed map/flat_map/filter loops, a window run's timestamp bounds and the RocksDB backend's
batch steps); the modules that own those loops (``shuffle.partitioners``,
``shuffle.record_writer``, ``shuffle.codec``, ``operators.reduce``, ``operators.basic``,
``operators.window``, ``state.rocksdb_state``) keep
their pure-Python versions as the reference and the fallback, and pick one through
``NATIVE`` when they are imported. ``NATIVE`` is None -- the pure-Python path -- when
``RAYLINK_PURE_PYTHON`` is set to anything but ``""``/``"0"``, or when the compiled module is
not built (no C compiler at install: ``scripts/setup.sh`` builds it; with
``RAYLINK_REQUIRE_COMPILED=1``, as ``scripts/test.sh`` sets, a failed build fails setup and the
twin tests instead). Both give the same channels, bytes and records, or the same error
(``tests/test_shuffle_hotpath.py``); the compiled path never falls back to a twin at run time.

The choice is made once per process, at import; :func:`log_active` logs it (once per
process: a TaskExecutor logs it when it starts). Thread-safe: read-only after import.
"""

from __future__ import annotations

import logging
import os
from types import ModuleType
from typing import Optional

from raylink.core.compiled import PURE_PYTHON_ENV, pure_python_forced

__all__ = ["NATIVE", "PURE_PYTHON_ENV", "ACTIVE", "log_active"]

_log = logging.getLogger(__name__)


def _load() -> "tuple[Optional[ModuleType], str]":
    if pure_python_forced():
        return None, f"pure Python ({PURE_PYTHON_ENV}={os.environ[PURE_PYTHON_ENV]})"
    try:
        from raylink.shuffle import _hotpath
    except ImportError as e:
        return None, f"pure Python (the compiled module is not built: {e}; bash scripts/setup.sh builds it)"
    return _hotpath, "compiled (raylink.shuffle._hotpath)"


#: the compiled module, or None on the pure-Python path
NATIVE, ACTIVE = _load()
_logged = False


def log_active(logger: Optional[logging.Logger] = None) -> str:
    """Log (DEBUG, once per process: the run's log file) which per-record path is active;
    returns its description."""
    global _logged
    if not _logged:
        _logged = True
        (logger or _log).debug("raylink per-record path: %s", ACTIVE)
    return ACTIVE
