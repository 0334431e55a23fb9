"""Delta Lake tables of the Spark sink and source: one idempotent commit per checkpoint.

A :class:`DeltaTarget` is a Delta table given by folder (``path``) or by name in Spark's
session catalog (``table``, ``USING delta``). The sink commits the rows a completed
checkpoint staged with ONE Spark write carrying Delta's application transaction
(``txnAppId`` = the sink's id, ``txnVersion`` = the checkpoint id; what Spark's
``foreachBatch`` sinks use): Delta records the pair in the same commit and skips a later
write of the same app id with a version not above it, so a commit replayed after a restore
adds nothing. :meth:`DeltaTarget.committed_version` reads the recorded version back.

:meth:`DeltaTarget.check` runs on the driver before a job starts: an existing folder that
holds no ``_delta_log``, a table of another format, or a column whose type differs from
the sink's fails there, naming what is wrong. Driver only (Spark's session); stateless
apart from its names, so thread-safe. Mirrors Delta's ``WriteIntoDelta`` idempotent
writes as Spark Structured Streaming's ``foreachBatch`` uses them.
"""

from __future__ import annotations

from typing import Any, List, Optional

from raylink.connectors.spark.files import directory_exists, filesystem_of
from raylink.connectors.spark.identifiers import quote_table_name


class DeltaTarget:
    """A Delta table by ``path`` (a folder) or ``table`` (a name in Spark's session catalog)."""

    format = "delta"

    def __init__(self, path: Optional[str] = None, table: Optional[str] = None) -> None:
        self.path = path
        self.table = table

    def describe(self) -> str:
        return f"Delta table {self.table}" if self.table else f"Delta table at {self.path}"

    def _sql_name(self) -> str:
        return quote_table_name(self.table) if self.table else "delta.`" + self.path.replace("`", "``") + "`"

    def exists(self, spark: Any) -> bool:
        if self.table is not None:
            return bool(spark.catalog.tableExists(quote_table_name(self.table)))
        return _has_delta_log(self.path)

    def location(self, spark: Any) -> Optional[str]:
        if self.table is None:
            return self.path
        if not self.exists(spark):
            return None
        return spark.sql(f"DESCRIBE DETAIL {self._sql_name()}").collect()[0]["location"]

    def check(self, spark: Any, schema: Any, what: str) -> None:
        """Fail (ValueError) when the target is not a Delta table or a column's type differs."""
        if self.table is None:
            if directory_exists(self.path) and not _has_delta_log(self.path):
                raise ValueError(
                    f"{what}: {self.path} is not a Delta table (the folder exists and has no _delta_log); "
                    "give an empty or new folder, or a Delta table's folder"
                )
            if not _has_delta_log(self.path):
                return
        elif not self.exists(spark):
            return
        else:
            provider = (spark.sql(f"DESCRIBE DETAIL {self._sql_name()}").collect()[0]["format"] or "").lower()
            if provider != "delta":
                raise ValueError(f"{what}: table {self.table} is a {provider or 'non-Delta'} table, not a Delta table")
        if schema is not None:
            check_columns(self.describe(), spark.read.format("delta").load(self.location(spark)).schema, schema, what)

    def committed_version(self, spark: Any, app_id: str) -> int:
        """The last ``txnVersion`` committed with ``app_id`` (-1: none)."""
        location = self.location(spark)
        if location is None or not _has_delta_log(location):
            return -1
        jvm = spark.sparkContext._jvm
        log = jvm.org.apache.spark.sql.delta.DeltaLog.forTable(spark._jsparkSession, location)
        none = jvm.scala.Option.empty()
        found = log.update(False, none, none).transactions().get(app_id)  # (stalenessAcceptable, ts, table)
        return int(found.get()) if found.isDefined() else -1

    def commit(self, spark: Any, df: Any, mode: str, app_id: Optional[str], version: Optional[int]) -> str:
        """ONE Delta write of ``df`` (with the application transaction when ``app_id`` is
        given): ``"duplicate"`` when ``version`` was committed for ``app_id`` already."""
        if app_id is not None and version is not None and self.committed_version(spark, app_id) >= version:
            return "duplicate"
        writer = df.write.format("delta").mode(mode)
        if app_id is not None and version is not None:
            writer = writer.option("txnAppId", app_id).option("txnVersion", str(version))
        if self.table is None:
            writer.save(self.path)
        elif self.exists(spark):  # into the table's folder: saveAsTable's append checks the catalog's empty schema
            writer.save(self.location(spark))
            spark.catalog.refreshTable(quote_table_name(self.table))
        else:
            writer.saveAsTable(quote_table_name(self.table))
        return "delta"

    def history(self, spark: Any) -> List[Any]:
        """``DESCRIBE HISTORY`` rows, oldest first."""
        return sorted(spark.sql(f"DESCRIBE HISTORY {self._sql_name()}").collect(), key=lambda r: r["version"])

    def read(self, spark: Any, version_as_of: Optional[int] = None, timestamp_as_of: Any = None) -> Any:
        """The table's rows at its latest version, at ``version_as_of`` or at ``timestamp_as_of``."""
        clause = ""
        if version_as_of is not None:
            clause = f" VERSION AS OF {int(version_as_of)}"
        elif timestamp_as_of is not None:
            clause = " TIMESTAMP AS OF '" + str(timestamp_as_of).replace("'", "''") + "'"
        return spark.sql(f"SELECT * FROM {self._sql_name()}{clause}")


def _has_delta_log(location: str) -> bool:
    fs, folder = filesystem_of(location)
    import pyarrow.fs as pafs

    return fs.get_file_info(folder.rstrip("/") + "/_delta_log").type == pafs.FileType.Directory


def check_columns(target: str, table_schema: Any, schema: Any, what: str) -> None:
    """Every column of ``schema`` the table has must have the table's type (ValueError naming
    the table, the column and both types; a column the table lacks is named too)."""
    existing = {f.name.lower(): f for f in table_schema.fields}
    for field in schema.fields:
        have = existing.get(field.name.lower())
        if have is None:
            raise ValueError(
                f"{what}: {target} has no column {field.name!r} (its columns: {[f.name for f in table_schema.fields]})"
            )
        if have.dataType.simpleString() != field.dataType.simpleString():
            raise ValueError(
                f"{what}: column {field.name!r} of {target} is {have.dataType.simpleString()}, "
                f"the stream's is {field.dataType.simpleString()}"
            )


__all__ = ["DeltaTarget", "check_columns"]
