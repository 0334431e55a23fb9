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

With ``upsert_keys`` the commit is ONE ``MERGE INTO`` (:mod:`.upsert`; Iceberg's SQL
extension runs it as a row-level operation) after the same check; its snapshot carries the
same two summary properties through Iceberg's commit properties for SQL statements
(``org.apache.iceberg.spark.CommitMetadata``: the properties its ``withCommitProperties``
sets for the statements a callable runs, in a thread-local the commit reads). raylink sets
that thread-local itself around the statement, on the JVM thread py4j pins to the bridge's
driver thread (``withCommitProperties`` would need a py4j callback server for its callable);
:func:`commit_properties` fails naming the Iceberg class when the runtime jar has it no more.

``merge_schema``: a column the stream has and the table lacks is added to the table
(``ALTER TABLE ... ADD COLUMNS``, nullable only) before the commit that first carries it.

Driver only (Spark's session); stateless apart from its name, so thread-safe.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence

from raylink.connectors.spark.delta import add_missing_columns, check_columns
from raylink.connectors.spark.table_formats import iceberg_table_name
from raylink.connectors.spark.upsert import merge

JOB_ID = "flink.job-id"
MAX_COMMITTED_CHECKPOINT_ID = "flink.max-committed-checkpoint-id"
#: Iceberg's holder of the commit properties of SQL statements (a thread-local)
COMMIT_METADATA_CLASS = "org.apache.iceberg.spark.CommitMetadata"


class IcebergTarget:
    """A table of raylink's Iceberg catalog."""

    format = "iceberg"
    path = None

    def __init__(self, table: str, merge_schema: bool = False) -> None:
        self.table = table
        self.name = iceberg_table_name(table)  # quoted
        self.merge_schema = bool(merge_schema)

    def describe(self) -> str:
        return f"Iceberg table {self.name.replace('`', '')}"

    def exists(self, spark: Any) -> bool:
        return bool(spark.catalog.tableExists(self.name))

    def check(self, spark: Any, schema: Any, what: str) -> None:
        """Fail (ValueError) when a column's type differs from the table's."""
        if self.exists(spark):
            check_columns(self.describe(), spark.table(self.name).schema, schema, what, self.merge_schema)

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
        elif self.merge_schema:
            add_missing_columns(spark, self.name, spark.table(self.name).schema, df.schema)
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

    def merge(
        self,
        spark: Any,
        staged: Callable[[Any], Any],
        schema: Any,
        keys: Sequence[str],
        app_id: Optional[str],
        version: Optional[int],
    ) -> str:
        """ONE ``MERGE INTO`` of the changes ``staged(session)`` reads (:mod:`.upsert`), its
        snapshot summary carrying ``app_id``/``version`` when given; the table (``schema``) is
        created empty first when missing. ``"duplicate"`` when ``version`` was committed."""
        if not self.exists(spark):
            self.commit(spark, spark.createDataFrame([], schema), "append", None, None)
        elif app_id is not None and version is not None and self.max_committed_checkpoint(spark, app_id) >= version:
            return "duplicate"
        elif self.merge_schema:
            add_missing_columns(spark, self.name, spark.table(self.name).schema, schema)
        properties = {JOB_ID: app_id, MAX_COMMITTED_CHECKPOINT_ID: str(version)} if app_id is not None else {}
        with commit_properties(spark, properties):  # the sink's session: its catalog caches the table
            merge(spark, self.name, staged(spark), schema.names, keys)
        return "merge"

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


@contextmanager
def commit_properties(spark: Any, properties: Dict[str, str]) -> Iterator[None]:
    """Iceberg commits made by this thread's Spark statements meanwhile carry ``properties``
    in their snapshot summaries (see the module doc)."""
    if not properties:
        yield
        return
    jvm = spark._jvm
    try:
        holder = jvm.org.apache.iceberg.spark.CommitMetadata._java_lang_class.getDeclaredField("COMMIT_PROPERTIES")
        holder.setAccessible(True)
        local = holder.get(None)
    except Exception as exc:  # another Iceberg runtime than the one set up
        raise RuntimeError(
            f"the Iceberg runtime has no {COMMIT_METADATA_CLASS}.COMMIT_PROPERTIES to carry the sink's "
            f"commit properties {sorted(properties)} ({type(exc).__name__})"
        ) from None
    values = jvm.java.util.HashMap()
    for key, value in properties.items():
        values.put(key, value)
    local.set(values)
    try:
        yield
    finally:
        local.remove()


__all__ = ["IcebergTarget", "JOB_ID", "MAX_COMMITTED_CHECKPOINT_ID", "commit_properties"]
