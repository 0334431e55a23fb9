"""PyFlink's ``pyflink.datastream.checkpoint_config``: the checkpointing settings of an
environment (Flink's ``CheckpointConfig``).

The class lives in ``raylink.core.checkpointing``; this module is where ``raylink migrate`` sends an import of
PyFlink's module. Stateless.
"""

from raylink.core.checkpointing import CheckpointConfig

__all__ = ["CheckpointConfig"]
