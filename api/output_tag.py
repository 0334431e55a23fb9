"""PyFlink's ``pyflink.datastream.output_tag``: the tag of a side output (Flink's ``OutputTag``).

The class lives in ``raylink.core.output_tag``; this module is where ``raylink migrate`` sends an import of
PyFlink's module. Stateless.
"""

from raylink.core.output_tag import OutputTag

__all__ = ["OutputTag"]
