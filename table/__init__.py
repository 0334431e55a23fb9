"""PyFlink's Table API and SQL (``pyflink.table``, where ``raylink migrate`` sends its imports), which
raylink does not support: raylink is the DataStream runtime, and its relational layer is Spark SQL.

Every name of ``raylink.table`` and of any ``raylink.table.<module>`` is importable, so a
migrated program loads; constructing or using one (``StreamTableEnvironment.create(env)``,
``DataTypes.INT()``, ``col("a")``) raises
:class:`~raylink.api.pyflink_compat.unsupported.UnsupportedFeatureError`, which names the Spark SQL
alternative (``env.from_spark(df)``, ``env.from_spark_table(path)``, ``sink_to_spark``).

The stand-ins, and the submodules (made on import), come from :mod:`raylink.api.pyflink_compat`.
"""

from raylink.api.pyflink_compat.stand_ins import TABLE_FEATURE as FEATURE
from raylink.api.pyflink_compat.stand_ins import table_getattr as _table_getattr
from raylink.api.pyflink_compat.unsupported import UnsupportedFeatureError

__getattr__ = _table_getattr(__name__)

__all__ = ["FEATURE", "UnsupportedFeatureError"]
