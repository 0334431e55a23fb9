"""What each commit of a Delta or Iceberg table added, read through the formats' own libraries
inside Spark's JVM (never by parsing the log or the metadata by hand).

* **Delta** -- ``DeltaLog.getChanges(version)``, the call Spark's Delta streaming source
  (``DeltaSource``) reads new versions with: every version's ``AddFile``/``RemoveFile``
  actions. A version is read as Spark's source reads it: its ``AddFile``\\ s with
  ``dataChange=true`` are new rows; a commit whose files all have ``dataChange=false``
  (``OPTIMIZE``, compaction, ``REORG``) adds no rows and is skipped; a commit that removes
  rows (``RemoveFile`` with ``dataChange=true``) fails the job naming the table, the version
  and its operation -- unless ``ignoreDeletes`` (commits that only remove files are skipped)
  or ``skipChangeCommits`` (every commit that removes rows is skipped whole, adds included)
  is set, the options of Spark's Delta source. The initial snapshot (no ``startingVersion``)
  is every file of the version the source starts at (``Snapshot.allFiles``).
* **Iceberg** -- the ``Table`` API (``Spark3Util.loadIcebergTable``): the current snapshot's
  ancestry, each snapshot's ``operation`` and ``addedDataFiles``, as Flink's
  ``IcebergSource`` in streaming mode (``ContinuousSplitPlannerImpl``) plans them: ``append``
  snapshots are read; ``replace`` (``rewrite_data_files``, compaction) is skipped;
  ``overwrite`` and ``delete`` fail naming the table and the snapshot unless
  ``streaming-skip-overwrite-snapshots`` / ``streaming-skip-delete-snapshots`` is set (the
  options of Iceberg's Spark streaming source, ``SparkMicroBatchStream``). The
  initial scan (``starting-strategy`` ``TABLE_SCAN_THEN_INCREMENTAL``, the default) is
  every data file of the current snapshot.

A commit is a :class:`TableCommit`: its id (Delta version, Iceberg snapshot id), an ``order``
(Delta version, Iceberg sequence number or timestamp), what to do (``append``, ``skip`` or
``refuse`` with the reason) and the files it added (absolute locations; Delta's partition
values, which its data files do not hold). Driver only (Spark's session); one
:class:`TableLog` is used by one thread at a time.
"""

from __future__ import annotations

import urllib.parse
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

from raylink.connectors.spark.errors import java_message

APPEND, SKIP, REFUSE = "append", "skip", "refuse"

#: Spark's Delta streaming source options raylink takes (``DeltaOptions``)
DELTA_OPTIONS = ("startingVersion", "startingTimestamp", "ignoreDeletes", "skipChangeCommits", "ignoreChanges")
#: Iceberg's source options raylink takes (Flink's ``FlinkReadOptions`` for the start, Spark's
#: streaming read options for skipping)
ICEBERG_OPTIONS = (
    "starting-strategy",
    "start-snapshot-id",
    "start-snapshot-timestamp",
    "streaming-skip-delete-snapshots",
    "streaming-skip-overwrite-snapshots",
)
ICEBERG_STRATEGIES = (
    "TABLE_SCAN_THEN_INCREMENTAL",
    "INCREMENTAL_FROM_LATEST_SNAPSHOT",
    "INCREMENTAL_FROM_EARLIEST_SNAPSHOT",
    "INCREMENTAL_FROM_SNAPSHOT_ID",
    "INCREMENTAL_FROM_SNAPSHOT_TIMESTAMP",
)


@dataclass
class TableCommit:
    """One commit of the table as the continuous source reads it."""

    id: int
    order: int
    action: str  # APPEND, SKIP or REFUSE
    operation: str
    files: List[Tuple[str, Dict[str, Optional[str]]]] = field(default_factory=list)
    reason: str = ""

    def to_wire(self) -> list:
        return [self.id, self.order, self.action, self.operation, self.files, self.reason]

    @staticmethod
    def from_wire(value: list) -> "TableCommit":
        return TableCommit(value[0], value[1], value[2], value[3], [(p, dict(v)) for p, v in value[4]], value[5])


def _truthy(value: Any) -> bool:
    return str(value).strip().lower() in ("true", "1", "yes")


class TableLog:
    """The commits of one table: where the source starts (:meth:`start`) and what every commit
    after a position added (:meth:`commits_after`)."""

    description: str

    def start(self) -> Tuple[Optional[int], Optional[int]]:
        """``(initial, start_after)``: the id of the version or snapshot read whole first (or
        None), and the id of the commit after which changes are read (None: from the first)."""
        raise NotImplementedError

    def initial(self, commit_id: int) -> TableCommit:
        """Every data file of version or snapshot ``commit_id`` (the initial snapshot)."""
        raise NotImplementedError

    def commits_after(self, position: Optional[int]) -> List[TableCommit]:
        """The commits after ``position`` up to the latest, oldest first."""
        raise NotImplementedError


def check_options(fmt: str, options: Dict[str, Any], description: str) -> Dict[str, str]:
    """The options as strings; an option of the other format or an unknown one fails naming it."""
    known = DELTA_OPTIONS if fmt == "delta" else ICEBERG_OPTIONS
    out = {}
    for key, value in dict(options or {}).items():
        if key not in known:
            raise ValueError(
                f"from_spark_table: unknown option {key!r} for the continuous {fmt} source of {description} "
                f"(its options: {', '.join(known)})"
            )
        out[key] = str(value)
    return out


# -- Delta ----------------------------------------------------------------------------------------------
class DeltaTableLog(TableLog):
    """A Delta table's versions through ``DeltaLog`` (Spark's Delta source reads the same)."""

    def __init__(self, spark: Any, location: str, description: str, options: Dict[str, str]) -> None:
        self.spark = spark
        self.location = location.rstrip("/")
        self.description = description
        self.options = options
        jvm = spark.sparkContext._jvm
        self._jvm = jvm
        self._log = jvm.org.apache.spark.sql.delta.DeltaLog.forTable(spark._jsparkSession, self.location)
        self._cache: Dict[int, TableCommit] = {}
        skip_changes = _truthy(options.get("skipChangeCommits", "false"))
        self._skip_changes = skip_changes or _truthy(options.get("ignoreChanges", "false"))
        self._ignore_deletes = _truthy(options.get("ignoreDeletes", "false"))

    def latest_version(self) -> int:
        none = self._jvm.scala.Option.empty()
        return int(self._log.update(False, none, none).version())

    def start(self) -> Tuple[Optional[int], Optional[int]]:
        latest = self.latest_version()
        if latest < 0:
            raise ValueError(f"from_spark_table: {self.description} has no version yet")
        starting = self.options.get("startingVersion")
        stamp = self.options.get("startingTimestamp")
        if starting is not None and stamp is not None:
            raise ValueError("from_spark_table: give startingVersion or startingTimestamp, not both")
        if starting is not None:
            if starting.strip().lower() == "latest":
                return None, latest
            try:
                version = int(starting)
            except ValueError:
                raise ValueError(
                    f"from_spark_table: startingVersion must be a version number or 'latest', got {starting!r}"
                ) from None
            if version < 0 or version > latest:
                raise ValueError(
                    f"from_spark_table: startingVersion {version} of {self.description} is not between 0 and "
                    f"its latest version {latest}"
                )
            return None, version - 1
        if stamp is not None:
            return None, self._version_before(stamp, latest)
        return latest, latest

    def _version_before(self, stamp: str, latest: int) -> int:
        """The version before the first one committed at or after ``stamp`` (Delta's
        ``startingTimestamp``); a time after the latest commit fails, as in Spark."""
        try:
            rows = self.spark.sql(f"DESCRIBE HISTORY delta.`{self.location.replace('`', '``')}`").where(
                f"timestamp >= to_timestamp('{stamp.replace(chr(39), '')}')"
            )
            found = rows.selectExpr("min(version)").collect()[0][0]
        except Exception as exc:
            raise ValueError(
                f"from_spark_table: startingTimestamp {stamp!r} of {self.description}: {java_message(exc)}"
            ) from None
        if found is None:
            raise ValueError(
                f"from_spark_table: startingTimestamp {stamp!r} is after the latest commit of {self.description} "
                f"(version {latest})"
            )
        return int(found) - 1

    def _absolute(self, path: str) -> str:
        if "://" in path or path.startswith("/") or path.startswith("file:"):
            return path
        return f"{self.location}/{urllib.parse.unquote(path)}"

    def _partition_values(self, action: Any) -> Dict[str, Optional[str]]:
        values = {}
        entries = action.partitionValues().iterator()
        while entries.hasNext():
            entry = entries.next()
            value = entry._2()
            values[str(entry._1())] = None if value is None else str(value)
        return values

    def _check_readable(self, action: Any, version: int) -> None:
        if action.deletionVector() is not None:
            raise ValueError(
                f"from_spark_table: {self.description}: file {action.path()} of version {version} has a deletion "
                "vector, which the continuous source cannot apply; start after it (startingVersion)"
            )

    def initial(self, version: int) -> TableCommit:
        none = self._jvm.scala.Option.empty()
        snapshot = self._log.getSnapshotAt(version, none, none)
        files = []
        for action in snapshot.allFiles().collectAsList():
            self._check_readable(action, version)
            files.append((self._absolute(action.path()), self._partition_values(action)))
        files.sort()
        return TableCommit(version, version, APPEND, "SNAPSHOT", files)

    def commits_after(self, position: Optional[int]) -> List[TableCommit]:
        first = 0 if position is None else position + 1
        latest = self.latest_version()
        missing = [v for v in range(first, latest + 1) if v not in self._cache]
        if missing:
            changes = self._log.getChanges(missing[0], False)
            while changes.hasNext():
                pair = changes.next()
                version = int(pair._1())
                if version > latest:
                    break
                if version not in self._cache:
                    self._cache[version] = self._classify(version, pair._2())
        return [self._cache[v] for v in range(first, latest + 1) if v in self._cache]

    def _classify(self, version: int, actions: Any) -> TableCommit:
        added, removed, operation = [], 0, ""
        for i in range(actions.size()):
            action = actions.apply(i)
            kind = action.getClass().getSimpleName()
            if kind == "AddFile" and action.dataChange():
                added.append(action)
            elif kind == "RemoveFile" and action.dataChange():
                removed += 1
            elif kind == "CommitInfo":
                operation = str(action.operation())
        if removed:
            if self._skip_changes or (self._ignore_deletes and not added):
                return TableCommit(version, version, SKIP, operation, reason="removes rows")
            allow = "skipChangeCommits" if added else "ignoreDeletes or skipChangeCommits"
            return TableCommit(
                version,
                version,
                REFUSE,
                operation,
                reason=(
                    f"{self.description}: version {version} ({operation or 'a commit'}) removes rows "
                    f"({removed} file(s) with dataChange=true); the continuous source reads appends only: "
                    f"set option {allow} to skip such commits"
                ),
            )
        if not added:
            return TableCommit(version, version, SKIP, operation, reason="no data change")
        files = []
        for action in added:
            self._check_readable(action, version)
            files.append((self._absolute(action.path()), self._partition_values(action)))
        files.sort()
        return TableCommit(version, version, APPEND, operation, files)


# -- Iceberg ----------------------------------------------------------------------------------------------
class IcebergTableLog(TableLog):
    """An Iceberg table's snapshots through Iceberg's ``Table`` API (Flink's source plans the same)."""

    def __init__(self, spark: Any, name: str, description: str, options: Dict[str, str]) -> None:
        self.spark = spark
        self.name = name
        self.description = description
        self.options = options
        self._jvm = spark.sparkContext._jvm
        self._table = self._jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(spark._jsparkSession, name)
        self._cache: Dict[int, TableCommit] = {}
        self._skip_delete = _truthy(options.get("streaming-skip-delete-snapshots", "false"))
        self._skip_overwrite = _truthy(options.get("streaming-skip-overwrite-snapshots", "false"))

    def _ancestry(self) -> List[Any]:
        """The current snapshot and its ancestors, oldest first."""
        self._table.refresh()
        chain = []
        snapshot = self._table.currentSnapshot()
        while snapshot is not None:
            chain.append(snapshot)
            parent = snapshot.parentId()
            snapshot = self._table.snapshot(parent) if parent is not None else None
        chain.reverse()
        return chain

    def start(self) -> Tuple[Optional[int], Optional[int]]:
        chain = self._ancestry()
        opts = self.options
        strategy = opts.get("starting-strategy")
        if strategy is None:
            strategy = (
                "INCREMENTAL_FROM_SNAPSHOT_ID"
                if "start-snapshot-id" in opts
                else "INCREMENTAL_FROM_SNAPSHOT_TIMESTAMP"
                if "start-snapshot-timestamp" in opts
                else "TABLE_SCAN_THEN_INCREMENTAL"
            )
        strategy = strategy.upper()
        if strategy not in ICEBERG_STRATEGIES:
            raise ValueError(
                f"from_spark_table: starting-strategy must be one of {ICEBERG_STRATEGIES}, got {strategy!r}"
            )
        if strategy == "TABLE_SCAN_THEN_INCREMENTAL":
            if not chain:
                return None, None
            return int(chain[-1].snapshotId()), int(chain[-1].snapshotId())
        if strategy == "INCREMENTAL_FROM_LATEST_SNAPSHOT":
            return None, int(chain[-1].snapshotId()) if chain else None
        if strategy == "INCREMENTAL_FROM_EARLIEST_SNAPSHOT":
            return None, None
        if strategy == "INCREMENTAL_FROM_SNAPSHOT_ID":
            wanted = opts.get("start-snapshot-id")
            if wanted is None:
                raise ValueError("from_spark_table: INCREMENTAL_FROM_SNAPSHOT_ID needs option start-snapshot-id")
            for i, snapshot in enumerate(chain):
                if str(snapshot.snapshotId()) == str(wanted).strip():
                    return None, int(chain[i - 1].snapshotId()) if i else None
            raise ValueError(
                f"from_spark_table: start-snapshot-id {wanted} is not an ancestor of the current snapshot of "
                f"{self.description}"
            )
        stamp = opts.get("start-snapshot-timestamp")
        if stamp is None:
            raise ValueError(
                "from_spark_table: INCREMENTAL_FROM_SNAPSHOT_TIMESTAMP needs option start-snapshot-timestamp"
            )
        try:
            millis = int(stamp)
        except ValueError:
            raise ValueError(f"from_spark_table: start-snapshot-timestamp must be epoch milliseconds, got {stamp!r}")
        for i, snapshot in enumerate(chain):
            if int(snapshot.timestampMillis()) >= millis:
                return None, int(chain[i - 1].snapshotId()) if i else None
        raise ValueError(
            f"from_spark_table: start-snapshot-timestamp {millis} is after the current snapshot of {self.description}"
        )

    @staticmethod
    def _order(snapshot: Any) -> int:
        sequence = int(snapshot.sequenceNumber())
        return sequence if sequence > 0 else int(snapshot.timestampMillis())

    def initial(self, snapshot_id: int) -> TableCommit:
        """Every data file of snapshot ``snapshot_id`` (the initial table scan)."""
        snapshot = self._table.snapshot(int(snapshot_id))
        if snapshot is None:
            raise ValueError(f"from_spark_table: {self.description} has no snapshot {snapshot_id} (expired?)")
        files = []
        tasks = self._table.newScan().useSnapshot(snapshot.snapshotId()).planFiles()
        try:
            iterator = tasks.iterator()
            while iterator.hasNext():
                task = iterator.next()
                if task.deletes().size():
                    raise ValueError(
                        f"from_spark_table: {self.description}: snapshot {snapshot.snapshotId()} has row-level "
                        "delete files, which the continuous source cannot apply; start after it (start-snapshot-id)"
                    )
                files.append(str(task.file().location()))
        finally:
            tasks.close()
        sid = int(snapshot.snapshotId())
        return TableCommit(sid, self._order(snapshot), APPEND, "SCAN", [(path, {}) for path in sorted(set(files))])

    def _classify(self, snapshot: Any) -> TableCommit:
        sid, order, operation = int(snapshot.snapshotId()), self._order(snapshot), str(snapshot.operation())
        if operation == "append":
            files = sorted((str(f.location()), {}) for f in snapshot.addedDataFiles(self._table.io()))
            return TableCommit(sid, order, APPEND, operation, files)
        if operation == "replace":
            return TableCommit(sid, order, SKIP, operation, reason="rewrites files")
        option = {"delete": "streaming-skip-delete-snapshots", "overwrite": "streaming-skip-overwrite-snapshots"}.get(
            operation
        )
        if option is not None and (self._skip_delete if operation == "delete" else self._skip_overwrite):
            return TableCommit(sid, order, SKIP, operation, reason="option " + option)
        return TableCommit(
            sid,
            order,
            REFUSE,
            operation,
            reason=(
                f"{self.description}: snapshot {sid} is an {operation!r} snapshot; the continuous source reads "
                f"'append' snapshots only" + (f": set option {option} to skip such snapshots" if option else "")
            ),
        )

    def commits_after(self, position: Optional[int]) -> List[TableCommit]:
        chain = self._ancestry()
        ids = [int(s.snapshotId()) for s in chain]
        if position is None:
            start = 0
        elif position in ids:
            start = ids.index(position) + 1
        else:
            raise ValueError(
                f"from_spark_table: snapshot {position} the source has read up to is no longer an ancestor of the "
                f"current snapshot of {self.description} (expired or rolled back)"
            )
        out = []
        for snapshot in chain[start:]:
            sid = int(snapshot.snapshotId())
            commit = self._cache.get(sid)
            if commit is None:
                commit = self._cache[sid] = self._classify(snapshot)
            out.append(commit)
        return out


__all__ = [
    "APPEND",
    "DELTA_OPTIONS",
    "DeltaTableLog",
    "ICEBERG_OPTIONS",
    "IcebergTableLog",
    "REFUSE",
    "SKIP",
    "TableCommit",
    "TableLog",
    "check_options",
]
