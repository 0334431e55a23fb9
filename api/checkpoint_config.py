"""PyFlink's ``pyflink.datastream.checkpoint_config``: the checkpointing settings of an
environment (Flink's ``CheckpointConfig``).

The class lives in ``raylink.core.checkpointing``; this module is where ``raylink migrate`` sends an import of
PyFlink's module. Unaligned checkpoints: ``enable_unaligned_checkpoints()`` /
``disable_unaligned_checkpoints()`` / ``is_unaligned_checkpoints_enabled()`` and
``set_aligned_checkpoint_timeout(Duration)`` (alias ``set_alignment_timeout``). Stateless.
"""

from raylink.core.checkpointing import CheckpointConfig

__all__ = ["CheckpointConfig"]
