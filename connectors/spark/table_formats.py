"""Delta Lake and Apache Iceberg in raylink's Spark session: the jars, the catalog settings,
and how a table of either format is named.

``scripts/spark_jars.sh`` (run by ``scripts/setup.sh``) resolves ``io.delta:delta-spark_2.12``
with ``delta-storage`` and ``org.apache.iceberg:iceberg-spark-runtime-3.5_2.12`` with Maven
into ``.cache/spark-jars/libs`` of the checkout (``RAYLINK_SPARK_JARS_DIR`` names another
folder). :func:`table_format_configs` hands them to the Spark raylink starts as local jars
(``spark.jars``: nothing is downloaded when a job starts) with

* Delta's SQL extension and catalog as Spark's session catalog (``spark_catalog``), so a
  ``USING delta`` table is kept in the warehouse like any other and a Delta folder is read
  and written by path;
* an Iceberg catalog named :data:`ICEBERG_CATALOG` (``SparkCatalog``, type ``hadoop``) whose
  warehouse is ``<spark.sql.warehouse.dir>/iceberg``, plus Iceberg's SQL extension.

Without the jars nothing is added (a sink or source asking for the format then fails naming
the setup step). Pure functions, thread-safe.
"""

from __future__ import annotations

import glob
import os
from typing import Dict, List, Optional

from raylink.connectors.spark.identifiers import quote_identifier, split_table_name

DELTA = "delta"
ICEBERG = "iceberg"
TABLE_FORMATS = (DELTA, ICEBERG)
#: the Iceberg catalog raylink's Spark session defines (tables ``iceberg.<namespace>.<table>``)
ICEBERG_CATALOG = "iceberg"
ICEBERG_DEFAULT_NAMESPACE = "default"
JARS_DIR_ENV = "RAYLINK_SPARK_JARS_DIR"
DELTA_EXTENSION = "io.delta.sql.DeltaSparkSessionExtension"
DELTA_CATALOG = "org.apache.spark.sql.delta.catalog.DeltaCatalog"
ICEBERG_EXTENSION = "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions"
ICEBERG_SPARK_CATALOG = "org.apache.iceberg.spark.SparkCatalog"
_JAR_PATTERNS = {
    DELTA: ("delta-spark_2.12-*.jar", "delta-storage-*.jar"),
    ICEBERG: ("iceberg-spark-runtime-3.5_2.12-*.jar",),
}


def jars_dir() -> str:
    """The folder ``scripts/spark_jars.sh`` fills (``RAYLINK_SPARK_JARS_DIR`` overrides)."""
    override = os.environ.get(JARS_DIR_ENV)
    if override:
        return os.path.abspath(override)
    package_root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    return os.path.join(package_root, ".cache", "spark-jars", "libs")


def format_jars(fmt: str, folder: Optional[str] = None) -> List[str]:
    """The local jars of ``fmt`` ("delta" or "iceberg"), [] when one of them is missing."""
    folder = folder or jars_dir()
    found = []
    for pattern in _JAR_PATTERNS[fmt]:
        matches = sorted(glob.glob(os.path.join(folder, pattern)))
        if not matches:
            return []
        found.append(matches[-1])
    return found


def table_format_configs(warehouse_dir: Optional[str] = None) -> Dict[str, str]:
    """Spark configs for every table format whose jars are present (see the module doc)."""
    delta, iceberg = format_jars(DELTA), format_jars(ICEBERG)
    configs: Dict[str, str] = {}
    if not delta and not iceberg:
        return configs
    configs["spark.jars"] = ",".join(delta + iceberg)
    extensions = []
    if delta:
        extensions.append(DELTA_EXTENSION)
        configs["spark.sql.catalog.spark_catalog"] = DELTA_CATALOG
    if iceberg:
        extensions.append(ICEBERG_EXTENSION)
        warehouse = os.path.abspath(warehouse_dir or "spark-warehouse")
        prefix = f"spark.sql.catalog.{ICEBERG_CATALOG}"
        configs[prefix] = ICEBERG_SPARK_CATALOG
        configs[f"{prefix}.type"] = "hadoop"
        configs[f"{prefix}.warehouse"] = os.path.join(warehouse, "iceberg")
    configs["spark.sql.extensions"] = ",".join(extensions)
    return configs


def check_format(fmt: Optional[str], what: str) -> Optional[str]:
    """``fmt`` lower-cased when it is a table format raylink commits into itself, else None."""
    if fmt is None:
        return None
    name = str(fmt).lower()
    return name if name in TABLE_FORMATS else None


def require_format(spark, fmt: str, what: str) -> None:
    """Fail naming the setup step when the running Spark session cannot keep ``fmt`` tables."""
    conf = spark.conf
    if fmt == DELTA:
        extensions = (conf.get("spark.sql.extensions", "") or "").split(",")
        ready = any(name.strip() == DELTA_EXTENSION for name in extensions)  # one of the listed classes
    else:
        ready = bool(conf.get(f"spark.sql.catalog.{ICEBERG_CATALOG}", ""))
    if not ready:
        raise ValueError(
            f"{what}: the Spark session has no {fmt} support: its jars were not found in {jars_dir()} "
            f"when Spark started (run scripts/spark_jars.sh, or start Spark with the {fmt} jars and "
            "catalog settings yourself)"
        )


def iceberg_table_name(table: str) -> str:
    """``table`` as a quoted name in raylink's Iceberg catalog: ``t`` -> ``iceberg.default.t``,
    ``db.t`` -> ``iceberg.db.t``; a name starting with the catalog is kept."""
    parts = split_table_name(table)
    if parts[0] != ICEBERG_CATALOG or len(parts) < 3:
        if len(parts) == 1:
            parts = [ICEBERG_DEFAULT_NAMESPACE, *parts]
        parts = [ICEBERG_CATALOG, *parts]
    return ".".join(quote_identifier(part) for part in parts)


__all__ = [
    "DELTA",
    "ICEBERG",
    "ICEBERG_CATALOG",
    "TABLE_FORMATS",
    "check_format",
    "format_jars",
    "iceberg_table_name",
    "jars_dir",
    "require_format",
    "table_format_configs",
]
