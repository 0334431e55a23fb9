"""PyFlink's Table API and SQL (``pyflink.table`` and its submodules), which raylink does not
support: raylink is the DataStream runtime, and its relational layer is Spark SQL.

Every name of ``raylink.table`` and of any ``raylink.table.<module>`` is importable, so a
migrated program loads; constructing or using one (``StreamTableEnvironment.create(env)``,
``DataTypes.INT()``, ``col("a")``) raises
:class:`~raylink.api.unsupported.UnsupportedFeatureError`, which names the Spark SQL
alternative (``env.from_spark(df)``, ``env.from_spark_table(path)``, ``sink_to_spark``).

The submodules are made on import by a finder on ``sys.meta_path`` that answers only for
``raylink.table.*`` names. Thread-safe (imports hold the import lock).
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
from typing import Any, Optional

from raylink.api.unsupported import SPARK_SQL, UnsupportedFeatureError, unsupported_module_getattr

FEATURE = "the Table API and SQL (pyflink.table)"

__getattr__ = unsupported_module_getattr(__name__, FEATURE, SPARK_SQL)


class _TableModuleFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Makes every ``raylink.table.<module>`` a module of stand-ins."""

    def find_spec(
        self, fullname: str, path: Any = None, target: Any = None
    ) -> Optional[importlib.machinery.ModuleSpec]:
        if fullname.startswith(__name__ + "."):
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> None:
        return None  # the default module object

    def exec_module(self, module: Any) -> None:
        module.__path__ = []
        pyflink_name = module.__name__.replace("raylink.", "pyflink.", 1)
        module.__doc__ = f"PyFlink's ``{pyflink_name}``: not supported by raylink."
        module.__getattr__ = unsupported_module_getattr(module.__name__, FEATURE, SPARK_SQL)


if not any(isinstance(f, _TableModuleFinder) for f in sys.meta_path):
    sys.meta_path.append(_TableModuleFinder())

__all__ = ["FEATURE", "UnsupportedFeatureError"]
