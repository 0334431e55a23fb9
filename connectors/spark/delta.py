"""Delta Lake tables of the Spark sink and source: one idempotent commit per checkpoint.

A :class:`DeltaTarget` is a Delta table given by folder (``path``) or by name in Spark's
session catalog (``table``, ``USING delta``). The sink commits the rows a completed
checkpoint staged with ONE Spark write carrying Delta's application transaction
(``txnAppId`` = the sink's id, ``txnVersion`` = the checkpoint id; what Spark's
``foreachBatch`` sinks use): Delta records the pair in the same commit and skips a later
write of the same app id with a version not above it, so a commit replayed after a restore
adds nothing. :meth:`DeltaTarget.committed_version` reads the recorded version back.

With ``upsert_keys`` the commit is ONE ``MERGE INTO`` (:mod:`.upsert`) run in a child session
of the sink's (``SparkSession.newSession``: its own SQL conf, the same catalog and executors)
whose ``spark.databricks.delta.write.txnAppId`` / ``txnVersion`` carry the same pair: Delta's
idempotent DML (``DeltaSQLConf.DELTA_IDEMPOTENT_DML_TXN_APP_ID``, Delta 2.3+) records it in
the MERGE's commit and skips a replayed one. The child session keeps the pair away from
other writes of the user's session.

``merge_schema``: a column the stream has and the table lacks is added to the table
(nullable only): an append carries Delta's ``mergeSchema`` write option (same commit), a
MERGE is preceded by ``ALTER TABLE ... ADD COLUMNS``. Without it such a column fails
:meth:`DeltaTarget.check`; a write Delta's schema enforcement refuses (a NOT NULL or CHECK
constraint of the table) fails the commit with Delta's message, which names the column.

:meth:`DeltaTarget.check` runs on the driver before a job starts: an existing folder that
holds no ``_delta_log``, a table of another format, or a column whose type differs from
the sink's fails there, naming what is wrong. Driver only (Spark's session); stateless
apart from its names, so thread-safe. Mirrors Delta's ``WriteIntoDelta`` idempotent
writes as Spark Structured Streaming's ``foreachBatch`` uses them.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence

from raylink.connectors.spark.files import directory_exists, filesystem_of
from raylink.connectors.spark.identifiers import quote_identifier, quote_table_name
from raylink.connectors.spark.upsert import merge

TXN_APP_ID_CONF = "spark.databricks.delta.write.txnAppId"
TXN_VERSION_CONF = "spark.databricks.delta.write.txnVersion"


class DeltaTarget:
    """A Delta table by ``path`` (a folder) or ``table`` (a name in Spark's session catalog)."""

    format = "delta"

    def __init__(self, path: Optional[str] = None, table: Optional[str] = None, merge_schema: bool = False) -> None:
        self.path = path
        self.table = table
        self.merge_schema = bool(merge_schema)

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
            table_schema = spark.read.format("delta").load(self.location(spark)).schema
            check_columns(self.describe(), table_schema, schema, what, self.merge_schema)

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
        if self.merge_schema:
            writer = writer.option("mergeSchema", "true")
        if self.table is None:
            writer.save(self.path)
        elif self.exists(spark):  # into the table's folder: saveAsTable's append checks the catalog's empty schema
            writer.save(self.location(spark))
            spark.catalog.refreshTable(quote_table_name(self.table))
        else:  # a new table: created by the write (an overwrite of no table is its creation; with
            # Iceberg's session extension beside Delta's, saveAsTable's overwrite of a new Delta table is
            # planned as a V2 overwrite that Delta refuses: "does not support truncate in batch mode")
            writer.mode("append" if mode == "overwrite" else mode).saveAsTable(quote_table_name(self.table))
        return "delta"

    def merge(
        self,
        spark: Any,
        staged: Callable[[Any], Any],
        schema: Any,
        keys: Sequence[str],
        app_id: Optional[str],
        version: Optional[int],
    ) -> str:
        """ONE ``MERGE INTO`` of the changes ``staged(session)`` reads (:mod:`.upsert`), with
        the application transaction when ``app_id`` is given; the table (``schema``) is
        created empty first when missing. ``"duplicate"`` when ``version`` was committed."""
        if app_id is not None and version is not None and self.committed_version(spark, app_id) >= version:
            return "duplicate"
        if not self.exists(spark):
            self.commit(spark, spark.createDataFrame([], schema), "append", None, None)
        elif self.merge_schema:
            add_missing_columns(spark, self._sql_name(), self._current_schema(spark), schema)
        conf = {TXN_APP_ID_CONF: app_id, TXN_VERSION_CONF: str(version)} if app_id is not None else {}
        with child_session(spark, conf) as session:
            merge(session, self._sql_name(), staged(session), schema.names, keys)
        if self.table is not None:
            spark.catalog.refreshTable(quote_table_name(self.table))
        return "merge"

    def _current_schema(self, spark: Any) -> Any:
        return spark.read.format("delta").load(self.location(spark)).schema

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


@contextmanager
def child_session(spark: Any, conf: Dict[str, str]) -> Iterator[Any]:
    """A new session of ``spark``'s context (``newSession``: its own SQL conf and temporary
    views, the same catalogs) with ``conf`` set, the active session of this thread meanwhile."""
    session = spark.newSession()
    for key, value in conf.items():
        session.conf.set(key, value)
    active = spark._jvm.org.apache.spark.sql.SparkSession
    active.setActiveSession(session._jsparkSession)
    try:
        yield session
    finally:
        active.setActiveSession(spark._jsparkSession)


def add_missing_columns(spark: Any, sql_name: str, table_schema: Any, schema: Any) -> List[str]:
    """``ALTER TABLE sql_name ADD COLUMNS`` for the columns of ``schema`` the table lacks
    (nullable); returns their names."""
    existing = {f.name.lower() for f in table_schema.fields}
    new = [f for f in schema.fields if f.name.lower() not in existing]
    if new:
        columns = ", ".join(f"{quote_identifier(f.name)} {f.dataType.simpleString()}" for f in new)
        spark.sql(f"ALTER TABLE {sql_name} ADD COLUMNS ({columns})")
    return [f.name for f in new]


def check_columns(target: str, table_schema: Any, schema: Any, what: str, merge_schema: bool = False) -> None:
    """Every column of ``schema`` the table has must have the table's type (ValueError naming
    the table, the column and both types); a column the table lacks is named too, unless
    ``merge_schema`` adds it (nullable columns only)."""
    existing = {f.name.lower(): f for f in table_schema.fields}
    for field in schema.fields:
        have = existing.get(field.name.lower())
        if have is None and merge_schema:
            if not field.nullable:
                raise ValueError(
                    f"{what}: merge_schema adds nullable columns only, and column {field.name!r} "
                    f"({field.dataType.simpleString()} NOT NULL) is not in {target}"
                )
            continue
        if have is None:
            raise ValueError(
                f"{what}: {target} has no column {field.name!r} (its columns: "
                f"{[f.name for f in table_schema.fields]}; merge_schema=True adds it)"
            )
        if have.dataType.simpleString() != field.dataType.simpleString():
            raise ValueError(
                f"{what}: column {field.name!r} of {target} is {have.dataType.simpleString()}, "
                f"the stream's is {field.dataType.simpleString()}"
            )


__all__ = ["DeltaTarget", "add_missing_columns", "check_columns", "child_session"]
