"""Apache Iceberg tables of the Spark sink and source: one idempotent commit per checkpoint.

An :class:`IcebergTarget` is a table of the Iceberg catalog raylink's Spark session defines
(:data:`~raylink.connectors.spark.table_formats.ICEBERG_CATALOG`, a Hadoop catalog in the
warehouse; ``t`` and ``db.t`` are taken in it, ``iceberg.db.t`` as given). The sink commits
the rows a completed checkpoint staged with ONE append whose snapshot summary carries
``flink.job-id`` (the sink's id) and ``flink.max-committed-checkpoint-id`` (the checkpoint),
as Flink's ``IcebergFilesCommitter`` writes them (through the writer's
``snapshot-property.<key>`` options). Before committing checkpoint N it reads the summaries
of the table's current snapshot and its ancestors (:meth:`IcebergTarget.max_committed_checkpoint`,
what that committer does on restore) and skips N when it is not above the highest committed,
so a commit replayed after a restore adds nothing.

Driver only (Spark's session); stateless apart from its name, so thread-safe.
"""

from __future__ import annotations

from typing import Any, List, Optional

from raylink.connectors.spark.delta import check_columns
from raylink.connectors.spark.table_formats import iceberg_table_name

JOB_ID = "flink.job-id"
MAX_COMMITTED_CHECKPOINT_ID = "flink.max-committed-checkpoint-id"


class IcebergTarget:
    """A table of raylink's Iceberg catalog."""

    format = "iceberg"
    path = None

    def __init__(self, table: str) -> None:
        self.table = table
        self.name = iceberg_table_name(table)  # quoted

    def describe(self) -> str:
        return f"Iceberg table {self.name.replace('`', '')}"

    def exists(self, spark: Any) -> bool:
        return bool(spark.catalog.tableExists(self.name))

    def check(self, spark: Any, schema: Any, what: str) -> None:
        """Fail (ValueError) when a column's type differs from the table's."""
        if self.exists(spark):
            check_columns(self.describe(), spark.table(self.name).schema, schema, what)

    def max_committed_checkpoint(self, spark: Any, job_id: str) -> int:
        """The highest checkpoint id committed by ``job_id`` on the current snapshot's
        ancestry (-1: none), read from the snapshot summaries."""
        if not self.exists(spark):
            return -1
        rows = spark.sql(
            f"SELECT s.summary FROM {self.name}.snapshots s JOIN {self.name}.history h "
            "ON s.snapshot_id = h.snapshot_id WHERE h.is_current_ancestor ORDER BY s.committed_at DESC"
        ).collect()
        for row in rows:
            summary = row["summary"] or {}
            if summary.get(JOB_ID) == job_id and summary.get(MAX_COMMITTED_CHECKPOINT_ID) is not None:
                return int(summary[MAX_COMMITTED_CHECKPOINT_ID])
        return -1

    def commit(self, spark: Any, df: Any, mode: str, app_id: Optional[str], version: Optional[int]) -> str:
        """ONE Iceberg commit of ``df``; ``"duplicate"`` when checkpoint ``version`` of
        ``app_id`` was committed already."""
        exists = self.exists(spark)
        if app_id is not None and version is not None and exists:
            if self.max_committed_checkpoint(spark, app_id) >= version:
                return "duplicate"
        if not exists:
            namespace = self.name.rsplit(".", 1)[0]
            spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {namespace}")
        writer = df.writeTo(self.name)
        if app_id is not None and version is not None:
            writer = writer.option(f"snapshot-property.{JOB_ID}", app_id).option(
                f"snapshot-property.{MAX_COMMITTED_CHECKPOINT_ID}", str(version)
            )
        if not exists:
            writer.using("iceberg").create()
        elif mode == "overwrite":
            from pyspark.sql.functions import lit

            writer.overwrite(lit(True))
        elif mode in ("error", "errorifexists"):
            raise ValueError(f"{self.describe()} exists already (mode {mode!r})")
        else:
            writer.append()
        return "iceberg"

    def history(self, spark: Any) -> List[Any]:
        """The snapshots (``snapshot_id``, ``committed_at``, ``operation``, ``summary``), oldest first."""
        if not self.exists(spark):
            return []
        return spark.sql(
            f"SELECT snapshot_id, committed_at, operation, summary FROM {self.name}.snapshots ORDER BY committed_at"
        ).collect()

    def read(self, spark: Any, snapshot_id: Optional[int] = None, timestamp_as_of: Any = None) -> Any:
        """The table's rows at its current snapshot, at ``snapshot_id`` or at ``timestamp_as_of``."""
        clause = ""
        if snapshot_id is not None:
            clause = f" VERSION AS OF {int(snapshot_id)}"
        elif timestamp_as_of is not None:
            clause = " TIMESTAMP AS OF '" + str(timestamp_as_of).replace("'", "''") + "'"
        return spark.sql(f"SELECT * FROM {self.name}{clause}")


__all__ = ["IcebergTarget", "JOB_ID", "MAX_COMMITTED_CHECKPOINT_ID"]
