"""PyFlink's ``pyflink.datastream.checkpointing_mode``: exactly-once or at-least-once
checkpoints (Flink's ``CheckpointingMode``).

The class lives in ``raylink.core.checkpointing``; this module is where ``raylink migrate`` sends an import of
PyFlink's module. Stateless.
"""

from raylink.core.checkpointing import CheckpointingMode

__all__ = ["CheckpointingMode"]
