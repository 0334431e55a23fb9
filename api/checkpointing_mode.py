"""PyFlink's ``pyflink.datastream.checkpointing_mode``: exactly-once or at-least-once
checkpoints (Flink's ``CheckpointingMode``).

The class lives in ``raylink.api.checkpointing``; this module is where ``raylink migrate`` sends an import of
PyFlink's module. Stateless.
"""

from raylink.api.checkpointing import CheckpointingMode

__all__ = ["CheckpointingMode"]
