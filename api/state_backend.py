"""PyFlink's ``pyflink.datastream.state_backend``: the state backend a job's keyed state lives
in, set with ``env.set_state_backend(...)``.

* :class:`HashMapStateBackend` -- keyed state as Python objects on the TaskExecutors' heap
  (``state.backend.type: hashmap``, the default);
* :class:`EmbeddedRocksDBStateBackend` -- keyed state in an embedded RocksDB on the
  TaskExecutor's local disk (``state.backend.type: rocksdb``), incremental checkpoints
  with ``enable_incremental_checkpointing=True`` (``execution.checkpointing.incremental``),
  working folders from ``set_db_storage_paths`` (``state.backend.rocksdb.localdir``).

A backend object only writes those configuration keys into the environment's
configuration (``configure``); the runtime reads the keys (``raylink.state``). Plain
value objects; not shared between threads.
"""

from __future__ import annotations

from typing import Any, List, Optional

from raylink.core.options import CheckpointingOptions, StateBackendOptions


class StateBackend:
    """Base of the state backends (PyFlink's ``StateBackend``)."""

    TYPE = ""

    def configure(self, configuration: Any) -> None:
        """Write this backend's keys into ``configuration`` (a raylink ``Configuration``)."""
        configuration.set_string(StateBackendOptions.STATE_BACKEND.key, self.TYPE)

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class HashMapStateBackend(StateBackend):
    """Keyed state as Python objects on the heap, snapshotted into checkpoints."""

    TYPE = "hashmap"


class EmbeddedRocksDBStateBackend(StateBackend):
    """Keyed state in an embedded RocksDB per keyed operator subtask; ``enable_incremental_
    checkpointing`` None leaves ``execution.checkpointing.incremental`` as configured."""

    TYPE = "rocksdb"

    def __init__(self, enable_incremental_checkpointing: Optional[bool] = None) -> None:
        self._incremental = enable_incremental_checkpointing
        self._paths: List[str] = []

    def is_incremental_checkpoints_enabled(self) -> bool:
        return bool(self._incremental)

    def set_db_storage_paths(self, *paths: str) -> None:
        """The local folders the RocksDB working files go to (``state.backend.rocksdb.localdir``);
        none: the system's temporary directory."""
        for path in paths:
            if not isinstance(path, str) or not path.strip() or "," in path:
                raise ValueError(f"EmbeddedRocksDBStateBackend: {path!r} is not a local directory path")
        self._paths = [p.strip() for p in paths]

    def get_db_storage_paths(self) -> List[str]:
        return list(self._paths)

    def configure(self, configuration: Any) -> None:
        super().configure(configuration)
        if self._incremental is not None:
            configuration.set_string(CheckpointingOptions.INCREMENTAL_CHECKPOINTS.key, str(self._incremental).lower())
        if self._paths:
            configuration.set_string(StateBackendOptions.ROCKSDB_LOCAL_DIRECTORIES.key, ",".join(self._paths))

    def __repr__(self) -> str:
        return f"EmbeddedRocksDBStateBackend(incremental={self._incremental}, paths={self._paths})"


__all__ = ["EmbeddedRocksDBStateBackend", "HashMapStateBackend", "StateBackend"]
