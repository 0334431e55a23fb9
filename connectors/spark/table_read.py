"""Bounded reads of one snapshot of a Delta or Iceberg table through Spark
(``env.from_spark_table(..., format="delta" | "iceberg")``).

:func:`read_snapshot` runs on the driver: it checks the table exists (and is of the format
named) and returns Spark's DataFrame of the snapshot asked for, which ``from_spark`` then
streams (its read position in the checkpoints); :func:`resolve_table` is that check, shared
with the continuous source (:mod:`.table_changes_source`, ``continuous=True``), which follows
the table's new commits. Thread-safe (Spark's session is).
"""

from __future__ import annotations

import os
from typing import Any, Optional

from raylink.connectors.spark.delta import DeltaTarget
from raylink.connectors.spark.iceberg import IcebergTarget
from raylink.connectors.spark.session import get_spark
from raylink.connectors.spark.table_formats import DELTA, ICEBERG, TABLE_FORMATS, require_format


def read_snapshot(
    path_or_table: str,
    fmt: str,
    version_as_of: Optional[int] = None,
    timestamp_as_of: Any = None,
    snapshot_id: Optional[int] = None,
    configuration: Any = None,
) -> Any:
    """A Spark DataFrame of one snapshot of a Delta table (a folder or a name in Spark's
    session catalog; ``version_as_of`` or ``timestamp_as_of``) or an Iceberg table (a name in
    raylink's Iceberg catalog; ``snapshot_id`` or ``timestamp_as_of``), read by Spark.
    A missing table, a folder that is not a Delta table, or options of the other format fail
    (ValueError) naming what is wrong."""
    what = "from_spark_table"
    name = str(fmt).lower()
    if name not in TABLE_FORMATS:
        raise ValueError(f"{what}: format must be one of {TABLE_FORMATS}, got {fmt!r}")
    if not isinstance(path_or_table, str) or not path_or_table:
        raise ValueError(f"{what}: a table name or folder is needed, got {path_or_table!r}")
    given = [
        k
        for k, v in (
            ("version_as_of", version_as_of),
            ("timestamp_as_of", timestamp_as_of),
            ("snapshot_id", snapshot_id),
        )
        if v is not None
    ]
    if len(given) > 1:
        raise ValueError(f"{what}: give at most one of version_as_of, timestamp_as_of, snapshot_id (got {given})")
    if name == DELTA and snapshot_id is not None:
        raise ValueError(f"{what}: snapshot_id is for Iceberg tables; a Delta table takes version_as_of")
    if name == ICEBERG and version_as_of is not None:
        raise ValueError(f"{what}: version_as_of is for Delta tables; an Iceberg table takes snapshot_id")
    spark = get_spark(configuration=configuration)
    target, name = resolve_table(spark, path_or_table, name)
    if name == DELTA:
        return target.read(spark, version_as_of=version_as_of, timestamp_as_of=timestamp_as_of)
    return target.read(spark, snapshot_id=snapshot_id, timestamp_as_of=timestamp_as_of)


def resolve_table(spark: Any, path_or_table: str, fmt: str) -> "tuple[Any, str]":
    """``(DeltaTarget or IcebergTarget, format)`` of an existing table; a missing table, a folder
    that is not a Delta table or a table of another format fails (ValueError) naming it."""
    what = "from_spark_table"
    name = str(fmt).lower()
    if name not in TABLE_FORMATS:
        raise ValueError(f"{what}: format must be one of {TABLE_FORMATS}, got {fmt!r}")
    if not isinstance(path_or_table, str) or not path_or_table:
        raise ValueError(f"{what}: a table name or folder is needed, got {path_or_table!r}")
    require_format(spark, name, what)
    if name == DELTA:
        is_path = "/" in path_or_table or path_or_table.startswith((".", "~"))
        target = DeltaTarget(path=os.path.abspath(path_or_table)) if is_path else DeltaTarget(table=path_or_table)
        if not target.exists(spark):
            if is_path and os.path.exists(target.path):
                raise ValueError(f"{what}: {target.path} is not a Delta table (it has no _delta_log)")
            raise ValueError(f"{what}: {target.describe()} does not exist")
        if not is_path:
            target.check(spark, None, what)
        return target, name
    target = IcebergTarget(path_or_table)
    if not target.exists(spark):
        raise ValueError(f"{what}: {target.describe()} does not exist")
    return target, name


__all__ = ["read_snapshot", "resolve_table"]
