"""PyFlink's ``pyflink.datastream.checkpoint_config``: the checkpointing settings of an
environment (Flink's ``CheckpointConfig``).

The class lives in ``raylink.api.checkpointing``; this module is where ``raylink migrate`` sends an import of
PyFlink's module. Stateless.
"""

from raylink.api.checkpointing import CheckpointConfig

__all__ = ["CheckpointConfig"]
