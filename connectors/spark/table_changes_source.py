"""The continuous Delta/Iceberg source: ``env.from_spark_table(table_or_path, format="delta" |
"iceberg", continuous=True, poll_interval=..., options={...})`` follows a table, emitting the
rows of every file each new commit adds, in commit order, once.

**Splits.** A split is one data file a commit added (Delta's ``AddFile`` with
``dataChange=true``, an Iceberg ``append`` snapshot's data file), or one file of the snapshot
the source starts from. The driver's enumerator (:mod:`.table_split_enumerator`) reads the
table's commits through Spark (:mod:`.table_log`: ``DeltaLog.getChanges``, Iceberg's
``Table`` API) when a reader asks; each reader asks every ``poll_interval`` seconds (Flink's
``monitor-interval``) for the commits after the last one it listed, keeps the files it owns
(:func:`~.table_split_enumerator.split_owner`) and reads them with pyarrow, one after another
in commit order, casting them to the table's schema (Delta's partition values become columns).
Commits that only rewrite files (``OPTIMIZE``, ``rewrite_data_files``) are skipped; commits
that remove rows fail the job naming the table, the version and the option that skips them
(Spark's Delta source's ``ignoreDeletes`` / ``skipChangeCommits``, Iceberg's Spark streaming
source's ``streaming-skip-delete-snapshots`` / ``streaming-skip-overwrite-snapshots``).

**Starting position** (``options``): Delta as Spark's Delta source -- none: the latest version's
snapshot, then every later commit; ``startingVersion`` (a version, or ``latest``: only commits
after the latest); ``startingTimestamp`` (from the first commit at or after it). Iceberg as
Flink's source -- ``starting-strategy`` (``TABLE_SCAN_THEN_INCREMENTAL``, the default,
``INCREMENTAL_FROM_LATEST_SNAPSHOT``, ``INCREMENTAL_FROM_EARLIEST_SNAPSHOT``,
``INCREMENTAL_FROM_SNAPSHOT_ID`` with ``start-snapshot-id``,
``INCREMENTAL_FROM_SNAPSHOT_TIMESTAMP`` with ``start-snapshot-timestamp`` in epoch ms).

**Checkpoints** hold the reader's position (the last commit listed), its files not read yet in
commit order and the row reached in the one being read; a restore resumes exactly there. At
another parallelism the pending files of every old reader are pooled and owned anew, and files
of commits an old reader had not listed yet (up to the newest position among them) are added, so
each file is read once. The source never ends: cancel the job (or stop it with a savepoint).

:func:`prepare_table_changes_source` runs on the driver; each :class:`TableChangesSourceOperator`
runs on its source task's thread (``cancel`` may come from another thread: it sets an event).
Plays the part of Spark's Delta streaming source and Flink's ``IcebergSource`` in streaming mode
(FLIP-27: enumerator on the coordinator side, readers on the subtasks).
"""

from __future__ import annotations

import threading
import time
from typing import Any, Dict, List, Optional

import pyarrow as pa
import ray

from raylink.connectors.spark.arrow import RecordEmitter, check_emit_options, conform_table
from raylink.connectors.spark.files import filesystem_of
from raylink.connectors.spark.table_log import APPEND, REFUSE, TableCommit
from raylink.connectors.spark.table_split_enumerator import ASK_WAIT_S, position_key, split_owner
from raylink.connectors.spark.types import SparkRowType, arrow_schema_of, row_type
from raylink.operators.connector import CONNECTOR_SOURCE as SOURCE_KIND
from raylink.operators.sources import SourceOperator

IDLE_WAIT_S = 0.1
#: how long a restore at another parallelism waits for the enumerator's answers
RESTORE_WAIT_S = 300.0


class TableChangesSource:
    """What the job graph holds for a continuous ``from_spark_table`` (picklable)."""

    def __init__(
        self,
        description: str,
        enumerator: Any,
        start: tuple,
        arrow_schema: pa.Schema,
        poll_interval: float,
        record_format: str,
        timestamp_column: Optional[str],
        watermark_delay_ms: Optional[int],
    ) -> None:
        self.description = description
        self.enumerator = enumerator  # the TableSplitEnumeratorActor
        self.start = start  # ("start", initial, start_after)
        self.arrow_schema = arrow_schema
        self.poll_interval = poll_interval
        self.record_format = record_format
        self.timestamp_column = timestamp_column
        self.watermark_delay_ms = watermark_delay_ms

    def create_operator(self, spec: Any) -> "TableChangesSourceOperator":
        return TableChangesSourceOperator(self)

    def __repr__(self) -> str:
        return f"TableChangesSource({self.description}, every {self.poll_interval}s)"


def _ask(enumerator: Any, position: Any, what: str) -> List[TableCommit]:
    """(blocking) the commits after ``position``; a refused or failed read raises."""
    deadline = time.monotonic() + RESTORE_WAIT_S
    while True:
        answer = ray.get(enumerator.ask.remote(position, ASK_WAIT_S))
        if answer is not None:
            break
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what}: the table enumerator on the driver did not answer in {RESTORE_WAIT_S:.0f} s")
    if "error" in answer:
        raise ValueError(f"{what}: {answer['error']}")
    return [TableCommit.from_wire(c) for c in answer["commits"]]


class TableChangesSourceOperator(SourceOperator):
    """Reads this subtask's share of the files the table's new commits add (module docstring)."""

    def __init__(self, source: TableChangesSource, name: str = "", operator_id: str = "") -> None:
        super().__init__(None, name, operator_id)
        self.source = source
        self._position: Any = source.start
        # files to read, in commit order: [commit id, commit order, path, partition values, rows emitted]
        self._pending: List[list] = []
        self._table: Any = None
        self._asking: Any = None  # the enumerator call in flight
        self._refused: Optional[str] = None  # the error of a commit the source refuses to read past
        self._next_poll = 0.0
        self._wakeup = threading.Event()
        self.files_read = 0

    def open(self) -> None:
        source = self.source
        self._emitter = RecordEmitter(
            self, source.record_format, source.timestamp_column, source.watermark_delay_ms, source.arrow_schema.names
        )

    # -- discovery ---------------------------------------------------------------------------------
    def _take(self, commits: List[TableCommit]) -> None:
        rc = self.runtime_context
        for commit in commits:
            if commit.action == REFUSE:  # fails once the files of the commits before it are read
                self._refused = f"from_spark_table source {self.name!r}: {commit.reason}"
                return
            if commit.action == APPEND:
                for path, partition in commit.files:
                    if split_owner(path, rc.parallelism) == rc.subtask_index:
                        self._pending.append([commit.id, commit.order, path, partition, 0])
            self._position = commit.id

    def _poll(self) -> bool:
        """Asks the enumerator (without blocking); True when new files were queued."""
        if self._asking is None:
            if time.monotonic() < self._next_poll:
                return False
            self._asking = self.source.enumerator.ask.remote(self._position, ASK_WAIT_S)
        ready, _ = ray.wait([self._asking], timeout=0)
        if not ready:
            return False
        answer, self._asking = ray.get(self._asking), None
        self._next_poll = time.monotonic() + self.source.poll_interval
        if answer is None:  # the driver was busy: ask again
            return False
        if "error" in answer:
            raise ValueError(f"from_spark_table source {self.name!r}: {answer['error']}")
        before = len(self._pending)
        self._take([TableCommit.from_wire(c) for c in answer["commits"]])
        return len(self._pending) > before

    # -- reading -----------------------------------------------------------------------------------
    def _read(self, entry: list) -> Any:
        import pyarrow.parquet as pq

        _, _, path, partition, _ = entry
        fs, inner = filesystem_of(path)
        with fs.open_input_file(inner) as f:
            table = pq.read_table(f)
        self.files_read += 1
        return conform_table(table, self.source.arrow_schema, partition, f"source {self.name!r} reading {path}")

    def emit_next(self, max_records: int = 1024) -> bool:
        if self.finished or self.cancelled:
            return False
        while self._table is None or self._pending[0][4] >= self._table.num_rows:
            if self._table is not None:  # the file is read whole
                self._pending.pop(0)
                self._table = None
            if self._pending:
                self._table = self._read(self._pending[0])
                continue
            if self._refused is not None:
                raise ValueError(self._refused)
            if self._poll():
                continue
            # idle: wait a little (cancel wakes us); the task runs its mails in between
            self._wakeup.wait(IDLE_WAIT_S)
            return not self.cancelled
        entry = self._pending[0]
        n = min(max(1, max_records), self._table.num_rows - entry[4])
        chunk = self._table.slice(entry[4], n)
        entry[4] += n
        self._emitter.emit(chunk)
        return True

    def cancel(self) -> None:
        self.cancelled = True
        self._wakeup.set()

    # -- checkpoints: the position, the files not read yet and the row reached ------------------------
    def snapshot_operator_state(self, _checkpoint_id: int) -> dict:
        return {"position": self._position, "pending": [list(e) for e in self._pending]}

    def restore_operator_state(self, state: dict) -> None:
        self._position = position_key(state["position"])
        self._pending = [list(e) for e in state["pending"]]
        self._table, self._asking = None, None

    def restore_rescaled_operator_state(self, states: list, subtask: int, parallelism: int) -> None:
        """Restored at another parallelism: every old reader's pending files (the one it was
        reading at its row) and the files of commits it had not listed yet, up to the newest
        position among the old readers, go to their owner under the new parallelism."""
        old = [s for s in states if s is not None]
        old_parallelism = len(states)
        positions = [position_key(s["position"]) for s in old]
        newest = positions[0] if old else self.source.start
        listed: Dict[int, List[TableCommit]] = {}
        if len(set(positions)) > 1:
            what = f"from_spark_table source {self.name!r}"
            for j, state in enumerate(states):
                if state is not None:
                    listed[j] = _ask(self.source.enumerator, position_key(state["position"]), what)
            ids = {j: [c.id for c in commits] for j, commits in listed.items()}
            # the newest position is in the commits after every other one
            newest = next(
                (
                    p
                    for p in positions
                    if not isinstance(p, tuple)
                    and all(p in ids[j] or position_key(states[j]["position"]) == p for j in ids)
                ),
                None,
            )
            if newest is None:
                raise RuntimeError(f"{what}: the restored readers' positions {positions} are not on one history")
        pending: List[list] = []
        for j, state in enumerate(states):
            if state is None:
                continue
            pending.extend(list(e) for e in state["pending"])
            if j in listed and position_key(state["position"]) != newest:
                commits = listed[j]
                upto = [c.id for c in commits].index(newest) + 1
                for commit in commits[:upto]:
                    if commit.action == REFUSE:
                        break
                    if commit.action == APPEND:
                        pending.extend(
                            [commit.id, commit.order, path, partition, 0]
                            for path, partition in commit.files
                            if split_owner(path, old_parallelism) == j
                        )
        self._position = newest
        mine = [e for e in pending if split_owner(e[2], parallelism) == subtask]
        self._pending = sorted(mine, key=lambda e: e[1])  # commit order (stable within a commit)
        self._table, self._asking = None, None


def prepare_table_changes_source(
    path_or_table: str,
    fmt: str,
    options: Optional[Dict[str, Any]] = None,
    poll_interval: float = 1.0,
    record_format: str = "tuple",
    timestamp_column: Optional[str] = None,
    watermark_delay_ms: Optional[int] = None,
    configuration: Any = None,
) -> "tuple[TableChangesSource, SparkRowType]":
    """(driver) Check the table, resolve the starting position, start the enumerator."""
    from raylink.connectors.spark.session import get_spark
    from raylink.connectors.spark.table_log import DeltaTableLog, IcebergTableLog, check_options
    from raylink.connectors.spark.table_read import resolve_table
    from raylink.connectors.spark.table_split_enumerator import TableEnumerator

    where = "from_spark_table"
    if not poll_interval or poll_interval <= 0:
        raise ValueError(f"{where}: poll_interval (the monitor interval) must be > 0 seconds, got {poll_interval!r}")
    spark = get_spark(configuration=configuration)
    target, name = resolve_table(spark, path_or_table, fmt)
    opts = check_options(name, options or {}, target.describe())
    if name == "delta":
        location = target.location(spark)
        table_log: Any = DeltaTableLog(spark, location, target.describe(), opts)
        schema = spark.read.format("delta").load(location).schema
    else:
        table_log = IcebergTableLog(spark, target.name.replace("`", ""), target.describe(), opts)
        schema = spark.table(target.name).schema
    check_emit_options(tuple(schema.names), record_format, timestamp_column, watermark_delay_ms, where)
    initial, start_after = table_log.start()
    enumerator = TableEnumerator(table_log)
    enumerator.start()
    source = TableChangesSource(
        target.describe(),
        enumerator.actor,
        ("start", initial, start_after),
        arrow_schema_of(schema),
        float(poll_interval),
        record_format,
        timestamp_column,
        watermark_delay_ms,
    )
    return source, row_type(schema, record_format)


__all__ = [
    "SOURCE_KIND",
    "TableChangesSource",
    "TableChangesSourceOperator",
    "prepare_table_changes_source",
]
