"""Checkpointing as a program sees it: PyFlink's ``CheckpointingMode`` and
``CheckpointConfig`` (``env.enable_checkpointing`` / ``env.get_checkpoint_config()``),
Flink's ``CheckpointedFunction`` and ``CheckpointListener`` for user functions, and the
operator state a ``CheckpointedFunction`` keeps (``get_list_state`` /
``get_union_list_state`` of the ``FunctionInitializationContext``).

``CheckpointConfig`` is a view over the environment's ``Configuration``: every
setting is an ``execution.checkpointing.*`` key (``core/options.py``), so a job's
YAML file or ``--conf`` configures the same things.
"""

from __future__ import annotations

import enum
from typing import Any, Optional

from raylink.core.configuration import Configuration
from raylink.core.options import CheckpointingOptions
from raylink.core.time import Duration

#: where checkpoints go when ``execution.checkpointing.dir`` is not set (under the working directory)
DEFAULT_CHECKPOINTS_DIR = "raylink-checkpoints"


class CheckpointingMode(enum.Enum):
    """Flink's checkpointing guarantee; barriers are aligned for both unless unaligned
    checkpoints are on (exactly-once only)."""

    EXACTLY_ONCE = 0
    AT_LEAST_ONCE = 1


class CheckpointConfig:
    """PyFlink's ``CheckpointConfig`` over ``execution.checkpointing.*``."""

    def __init__(self, configuration: Configuration) -> None:
        self._conf = configuration

    def _get(self, option: Any) -> Any:
        return self._conf.get(option)

    # -- interval and mode --------------------------------------------------------------------------
    def is_checkpointing_enabled(self) -> bool:
        return self.get_checkpoint_interval() > 0

    def get_checkpoint_interval(self) -> int:
        return self._get(CheckpointingOptions.CHECKPOINTING_INTERVAL) or -1

    def set_checkpoint_interval(self, checkpoint_interval: int) -> "CheckpointConfig":
        if checkpoint_interval < 10:
            raise ValueError("Checkpoint interval must be larger than or equal to 10 ms")
        self._conf.set_string(CheckpointingOptions.CHECKPOINTING_INTERVAL.key, f"{int(checkpoint_interval)} ms")
        return self

    def get_checkpointing_mode(self) -> CheckpointingMode:
        return CheckpointingMode[self._get(CheckpointingOptions.CHECKPOINTING_MODE).upper()]

    def set_checkpointing_mode(self, mode: CheckpointingMode) -> "CheckpointConfig":
        self._conf.set_string(CheckpointingOptions.CHECKPOINTING_MODE.key, mode.name.lower())
        return self

    # -- unaligned checkpoints ----------------------------------------------------------------------
    def enable_unaligned_checkpoints(self, enabled: bool = True) -> "CheckpointConfig":
        """Barriers overtake the buffers in flight, which become part of the checkpoint
        (``execution.checkpointing.unaligned.enabled``; exactly-once mode only)."""
        self._conf.set_boolean(CheckpointingOptions.ENABLE_UNALIGNED.key, bool(enabled))
        return self

    def disable_unaligned_checkpoints(self) -> "CheckpointConfig":
        return self.enable_unaligned_checkpoints(False)

    def is_unaligned_checkpoints_enabled(self) -> bool:
        return bool(self._get(CheckpointingOptions.ENABLE_UNALIGNED))

    def set_aligned_checkpoint_timeout(self, alignment_timeout: Any) -> "CheckpointConfig":
        """Start aligned and switch to unaligned once the alignment took longer than this since
        the checkpoint started (a ``Duration`` or ms; 0: always unaligned)."""
        millis = alignment_timeout.to_millis() if hasattr(alignment_timeout, "to_millis") else int(alignment_timeout)
        if millis < 0:
            raise ValueError("The aligned checkpoint timeout must not be negative.")
        self._conf.set_string(CheckpointingOptions.ALIGNED_CHECKPOINT_TIMEOUT.key, f"{millis} ms")
        return self

    set_alignment_timeout = set_aligned_checkpoint_timeout

    def get_aligned_checkpoint_timeout(self) -> Duration:
        return Duration.of_millis(self._get(CheckpointingOptions.ALIGNED_CHECKPOINT_TIMEOUT))

    get_alignment_timeout = get_aligned_checkpoint_timeout

    # -- limits -------------------------------------------------------------------------------------
    def get_checkpoint_timeout(self) -> int:
        return self._get(CheckpointingOptions.CHECKPOINTING_TIMEOUT)

    def set_checkpoint_timeout(self, checkpoint_timeout: int) -> "CheckpointConfig":
        if checkpoint_timeout < 1:
            raise ValueError("Checkpoint timeout must be larger than or equal to 1 ms")
        self._conf.set_string(CheckpointingOptions.CHECKPOINTING_TIMEOUT.key, f"{int(checkpoint_timeout)} ms")
        return self

    def get_min_pause_between_checkpoints(self) -> int:
        return self._get(CheckpointingOptions.MIN_PAUSE_BETWEEN_CHECKPOINTS)

    def set_min_pause_between_checkpoints(self, min_pause_between_checkpoints: int) -> "CheckpointConfig":
        if min_pause_between_checkpoints < 0:
            raise ValueError("Pause value must be zero or positive")
        self._conf.set_string(
            CheckpointingOptions.MIN_PAUSE_BETWEEN_CHECKPOINTS.key, f"{int(min_pause_between_checkpoints)} ms"
        )
        return self

    def get_max_concurrent_checkpoints(self) -> int:
        return self._get(CheckpointingOptions.MAX_CONCURRENT_CHECKPOINTS)

    def set_max_concurrent_checkpoints(self, max_concurrent_checkpoints: int) -> "CheckpointConfig":
        if max_concurrent_checkpoints < 1:
            raise ValueError("The maximum number of concurrent attempts must be at least one.")
        self._conf.set_integer(CheckpointingOptions.MAX_CONCURRENT_CHECKPOINTS.key, max_concurrent_checkpoints)
        return self

    def get_tolerable_checkpoint_failure_number(self) -> int:
        return self._get(CheckpointingOptions.TOLERABLE_FAILURE_NUMBER)

    def set_tolerable_checkpoint_failure_number(self, number: int) -> "CheckpointConfig":
        if number < 0:
            raise ValueError("The tolerable failure checkpoint number must be non-negative.")
        self._conf.set_integer(CheckpointingOptions.TOLERABLE_FAILURE_NUMBER.key, number)
        return self

    # -- storage ------------------------------------------------------------------------------------
    def set_checkpoint_storage_dir(self, checkpoint_path: str) -> "CheckpointConfig":
        self._conf.set_string(CheckpointingOptions.CHECKPOINTS_DIRECTORY.key, checkpoint_path)
        return self

    def get_checkpoint_storage_dir(self) -> Optional[str]:
        return self._get(CheckpointingOptions.CHECKPOINTS_DIRECTORY)


class CheckpointListener:
    """Flink's ``CheckpointListener``: told when a checkpoint it took part in completed or
    was aborted (two-phase-commit sinks commit on ``notify_checkpoint_complete``)."""

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        pass

    def notify_checkpoint_aborted(self, checkpoint_id: int) -> None:
        pass


class CheckpointedFunction:
    """Flink's ``CheckpointedFunction``: a function with operator (non-keyed) state.

    ``initialize_state(context)`` runs when the task starts, before any record — fresh or
    restored (``context.is_restored()``); get list states from
    ``context.get_operator_state_store()``. ``snapshot_state(context)`` runs at every
    checkpoint, in the task thread, between two records: bring those states up to date.
    A legacy ``SourceFunction`` must emit and update its state under
    ``ctx.get_checkpoint_lock()`` for the two to agree.
    """

    def snapshot_state(self, context: "FunctionSnapshotContext") -> None:
        raise NotImplementedError

    def initialize_state(self, context: "FunctionInitializationContext") -> None:
        raise NotImplementedError


class FunctionSnapshotContext:
    def __init__(self, checkpoint_id: int, checkpoint_timestamp: int) -> None:
        self._checkpoint_id = checkpoint_id
        self._checkpoint_timestamp = checkpoint_timestamp

    def get_checkpoint_id(self) -> int:
        return self._checkpoint_id

    def get_checkpoint_timestamp(self) -> int:
        return self._checkpoint_timestamp


class FunctionInitializationContext:
    def __init__(self, operator_state_store: Any, restored: bool) -> None:
        self._store = operator_state_store
        self._restored = restored

    def is_restored(self) -> bool:
        return self._restored

    def get_operator_state_store(self) -> Any:
        return self._store


__all__ = [
    "CheckpointConfig",
    "DEFAULT_CHECKPOINTS_DIR",
    "CheckpointListener",
    "CheckpointedFunction",
    "CheckpointingMode",
    "FunctionInitializationContext",
    "FunctionSnapshotContext",
]
