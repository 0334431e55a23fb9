"""The Spark sink: ``stream.sink_to_spark(...)`` / ``stream.sink_to(SparkSink(...))``.

Each sink subtask buffers its records, converts them every ``batch_rows``
records into an Arrow record batch of the sink's schema (checked field by
field by :class:`~raylink.connectors.spark.arrow.RecordConverter`: a record that
does not fit fails the task naming the operator, the record, the field, the value and
the path or table written to), and seals the batches into blocks of about ``block_bytes`` (Arrow IPC
streams). Then, by target:

* **no path/table — a result DataFrame.** At end of input the blocks go *by
  value* into the task's accumulators (with checkpointing they are also the
  operator's state, so a restored subtask has them back) (``spark-sink:<id>``; the JobMaster
  concatenates the lists). TaskExecutor actors die with the job, so objects
  they ``ray.put`` would die with them; bytes returned to the driver are owned
  by the driver. ``get_spark_dataframe(result)`` (:mod:`.results`) turns them
  into one Spark DataFrame.
* **path or table — a Spark write.** The subtask writes its batches with pyarrow
  into Parquet part files in the sink's staging folder (a hidden sibling of the
  target, :mod:`.files`; one row group per ``block_bytes``) and commits them
  through the driver's bridge (:mod:`.bridge`).

  *With checkpointing* (exactly-once, Flink's Sink V2 writer + committer): at every
  checkpoint the subtask closes its part file and keeps the checkpoint's files as a
  committable in its state; only when that checkpoint completes does it ask the
  driver to commit them (``notify_checkpoint_complete``), so Spark sees exactly the
  rows of completed checkpoints. The driver commits each (checkpoint, subtask) once:
  a commit replayed after a restore adds nothing. A restored subtask commits what its
  checkpoint kept and deletes the staged files of its failed attempt that no completed
  checkpoint holds (the sources replay those rows). ``mode`` applies to the sink's
  first commit, later ones append; ``flush_interval`` is ignored (commits follow the
  checkpoints). A bounded job commits its last rows through its final checkpoint. A job
  started from a savepoint (or a retained checkpoint) of an earlier run, at any
  parallelism, continues that run's target: its commits append, and the committables the
  savepoint holds are committed once, from that run's staging folder (old subtask ``j``'s by
  new subtask ``j % parallelism``; files that run had committed already are skipped).

  *Without checkpointing*: bounded, one commit of the whole output with ``mode``
  when every subtask finished (two-phase: nothing is visible before, a failed job
  leaves nothing; a restart re-runs the job from the start and replaces the failed
  attempt's files); with ``flush_interval`` (seconds) a processing-time timer
  commits what arrived every interval as one append, so a long-running job keeps
  the table current -- a failure then re-runs the job from the start and appends
  its rows again (at-least-once: nothing is lost, rows committed before the failure
  come twice). Result DataFrames (no target) keep their blocks in the checkpoints
  with checkpointing on, so a restore neither loses nor repeats a row (restored from an earlier
  run that had not ended its input, the new run's result continues that run's). The driver commits a plain Parquet
  target (a path, or a non-partitioned Parquet table with the same columns, in
  ``append``/``overwrite``) by moving the files in (then ``REFRESH``); any other
  target (another format, ``partition_by``, ``options``, a new schema) with ONE Spark
  write that reads the staged files. No rows pass through the driver.

``format="delta"`` (``path`` or ``table``) and ``format="iceberg"`` (``table`` of raylink's
Iceberg catalog) stage files the same way, but the driver gathers every subtask's files of a
completed checkpoint (every subtask hands in a part, empty or not; one that ended counts as
present afterwards) and makes them ONE table commit, idempotent in the table itself: Delta's
``txnAppId``/``txnVersion`` and Iceberg's ``flink.job-id``/``flink.max-committed-checkpoint-id``
(the sink's id, the checkpoint id; :mod:`.delta`, :mod:`.iceberg`). The target is checked on
the driver before the job starts (a folder that is no Delta table, a column of another type).
Without checkpointing they commit as above: a bounded job once at its end (nothing visible
before, a failed job leaves nothing: exactly once), ``flush_interval`` one append per
interval (a failure re-runs the job from the start: rows committed before it come again,
at-least-once; with ``upsert_keys`` the re-run applies the same changes again, so the table
passes through older values and ends as the input leaves it).

``upsert_keys=[...]`` (Delta and Iceberg, ``mode="append"``): each commit is ONE Spark SQL
``MERGE INTO`` on those columns of the commit's changes, the last change per key winning, a
PyFlink ``Row`` of kind ``DELETE`` deleting its key's row and ``UPDATE_BEFORE`` dropped
(:mod:`.upsert`; the staged files carry two hidden columns), idempotent as above (Delta's
idempotent DML confs, Iceberg's commit properties). A key's changes must reach one sink
subtask (a keyed stream at the sink's parallelism); a null key fails the task naming it.
``merge_schema=True`` (Delta and Iceberg) adds the stream's nullable columns the table lacks
(Delta's ``mergeSchema`` write option; ``ALTER TABLE ... ADD COLUMNS`` before a MERGE and for
Iceberg); without it such a column fails before the job starts, naming it. A write the
table refuses (a Delta NOT NULL or CHECK constraint) fails the job with the format's whole
message (the constraint, the column and the value).

Arrow record batches (elements of a chained ``map_batches`` or ``from_spark``) skip the row
conversion: their columns are taken by name and cast to the sink's schema
(:func:`~raylink.connectors.spark.arrow.conform_batch`; a missing or extra column, or a column
that cannot be cast, fails the task naming the sink and the column).

Schema: explicit (DDL string, ``StructType`` or ``[(name, ddl type), ...]``) or
the stream's type (the schema ``from_spark`` puts on the stream, or
``Types.ROW_NAMED``). Records may be tuples/lists (by position), dicts or
``pyspark.sql.Row``\\ s (by name), namedtuples, or a bare value for a one-column
schema. Naive ``datetime``\\ s are taken as UTC.

A :class:`SparkSink` is made on the driver and pickled into the job graph; each
subtask's :class:`SparkSinkOperator` runs on its task thread (its flush timer too,
as a mailbox action). Plays the part of Flink's Sink V2 ``SinkWriterOperator``, with
the committer on the driver (:mod:`.bridge`).
"""

from __future__ import annotations

import json
import os
import posixpath
import uuid
from typing import Any, Dict, List, Optional

import pyarrow as pa
import ray

from raylink.connectors.spark.arrow import RecordConverter, SparkSchemaError, conform_batch, ipc_bytes
from raylink.connectors.spark.bridge import CommitError, register_sink_target
from raylink.connectors.spark.files import (
    STAGING_DIR,
    PartFileWriter,
    commit_files,
    delete_files,
    directory_exists,
    file_schema,
    filesystem_of,
    remove_folder,
    staged_files,
    staging_location,
)
from raylink.connectors.spark.identifiers import quote_table_name
from raylink.connectors.spark.results import RESULT_PREFIX, get_spark_dataframe
from raylink.connectors.spark.session import get_spark
from raylink.connectors.spark.table_formats import DELTA, check_format, require_format
from raylink.connectors.spark.types import arrow_schema_of, resolve_schema
from raylink.connectors.spark.upsert import (
    check_upsert_keys,
    staged_spark_schema,
    with_change_columns,
)
from raylink.core.row import Row as _Row
from raylink.core.row import RowKind
from raylink.operators.base import StreamOperator
from raylink.operators.connector import CONNECTOR_SINK as SINK_KIND

DEFAULT_BATCH_ROWS = 4096
DEFAULT_BLOCK_BYTES = 8 * 1024 * 1024
WRITE_MODES = ("append", "overwrite", "error", "errorifexists", "ignore")
_INSERT, _UPDATE_BEFORE, _DELETE = RowKind.INSERT, RowKind.UPDATE_BEFORE, RowKind.DELETE
#: the staging subfolder a Delta/Iceberg sink's driver moves a checkpoint's handed-in files to
GATHERED_DIR = "gathered"


# -- the operator --------------------------------------------------------------------------------------
class SparkSinkOperator(StreamOperator):
    """Buffers records into Arrow blocks; hands them to the driver (result) or to Spark (write)."""

    last_latency_marker: Any = None
    accepts_record_batches = True  # a chained source / map_batches hands whole Arrow batches

    def __init__(self, sink: "SparkSink", name: str = "", operator_id: str = "") -> None:
        super().__init__(name or sink.name, operator_id)
        self.sink = sink
        self._rows: List[Any] = []
        self._batches: List[pa.RecordBatch] = []
        self._batch_bytes = 0
        self._blocks: List[bytes] = []  # result mode: Arrow IPC streams
        self._files: Any = None  # write mode: the Parquet part files of this subtask
        self._block_rows = 0  # rows sealed since the last commit
        self._records = 0
        self._timer: Any = None
        self._closed = False
        self._ended = False  # end of input seen
        self._exactly_once = False  # commits follow completed checkpoints
        #: checkpoint id -> (staged files, rows, ended) not committed yet (the committables)
        self._pending: Dict[int, tuple] = {}
        self._rows_only: Optional[bool] = None  # record batch elements go through the row converter
        #: restored from an earlier run's savepoint/checkpoint: the target is that run's output,
        #: continued (every commit appends; ``mode`` applied to that run's first write)
        self._resumed = False
        self.commits = 0

    def open(self) -> None:
        sink = self.sink
        if sink.writes:
            self._converter = RecordConverter(sink.file_schema, sink.spark_types, self.name)
            self._files = PartFileWriter(sink.staging, sink.staged_schema, self.runtime_context.subtask_index)
            self._exactly_once = self.runtime_context.checkpointing_enabled
        else:
            self._converter = RecordConverter(sink.arrow_schema, sink.spark_types, self.name)
        if sink.flush_interval and not self._exactly_once:
            self._schedule()

    # -- input ------------------------------------------------------------------------------------
    def process_element(self, value: Any) -> None:
        if type(value) is pa.RecordBatch:
            self._add_batch(value)
            return
        self._rows.append(value)
        if len(self._rows) >= self.sink.batch_rows:
            self._convert()

    def process_batch(self, values: List[Any]) -> None:
        self._rows.extend(values)
        if len(self._rows) >= self.sink.batch_rows:
            self._convert()

    def process_latency_marker(self, marker: Any) -> None:
        self.last_latency_marker = marker

    # -- batching ---------------------------------------------------------------------------------
    def _convert(self) -> None:
        rows = self._rows
        if not rows:
            return
        self._rows = []
        deletes: List[bool] = []
        if self.sink.upsert_keys:  # a change per record: -U dropped, -D deletes its key's row
            kinds = [r._row_kind if type(r) is _Row else _INSERT for r in rows]
            if _UPDATE_BEFORE in kinds:
                rows = [r for r, k in zip(rows, kinds) if k is not _UPDATE_BEFORE]
                kinds = [k for k in kinds if k is not _UPDATE_BEFORE]
            deletes = [k is _DELETE for k in kinds]
        try:
            batch = self._converter.to_batch(rows, self._records)
        except SparkSchemaError as exc:
            raise self._naming_target(exc) from None
        if self.sink.upsert_keys:
            self._check_keys(batch)
            batch = with_change_columns(batch, deletes, self._records)
        self._records += len(rows)
        self._batches.append(batch)
        self._batch_bytes += batch.nbytes
        if self._batch_bytes >= self.sink.block_bytes:
            self._seal()

    def _add_batch(self, batch: pa.RecordBatch) -> None:
        """A record batch element (``map_batches``, ``from_spark``): no rows built, its columns
        are taken by name and cast to the sink's schema."""
        self._convert()  # rows that came before it go first
        if self._rows_only is None:
            self._rows_only = _has_nested_required_field(self._converter.schema)
        if self._rows_only:  # Arrow keeps nulls under a null parent that Parquet refuses: convert rows
            self._rows.extend(batch.to_pylist())
            self._convert()
            return
        batch = conform_batch(batch, self._converter.schema, self.name)
        if self.sink.upsert_keys:
            self._check_keys(batch)
            batch = with_change_columns(batch, [], self._records)
        self._records += batch.num_rows
        self._batches.append(batch)
        self._batch_bytes += batch.nbytes
        if self._batch_bytes >= self.sink.block_bytes:
            self._seal()

    def _naming_target(self, exc: SparkSchemaError) -> SparkSchemaError:
        """``exc`` with the sink's target named (a record that does not fit its table)."""
        if not self.sink.writes:
            return exc
        message = f"{exc.args[0]} (writing to {self.sink.describe()})"
        return SparkSchemaError(message, exc.operator, exc.field, exc.value, exc.record_index)

    def _check_keys(self, batch: pa.RecordBatch) -> None:
        """An upsert key column must not be null (the error names it and the record)."""
        for key in self.sink.upsert_keys:
            column = batch.column(batch.schema.get_field_index(key))
            if column.null_count:
                index = self._records + column.is_null().to_pylist().index(True)
                raise SparkSchemaError(
                    f"Spark sink '{self.name}': record {index} has a null upsert key column '{key}' "
                    f"(writing to {self.sink.describe()})",
                    self.name,
                    key,
                    None,
                    index,
                )

    def _seal(self) -> None:
        if not self._batches:
            return
        self._block_rows += sum(b.num_rows for b in self._batches)
        if self._files is not None:
            self._files.write_table(pa.Table.from_batches(self._batches))
        else:
            self._blocks.append(ipc_bytes(self._batches, self.sink.arrow_schema))
        self._batches, self._batch_bytes = [], 0

    # -- delivery ---------------------------------------------------------------------------------
    def _commit(self, final: bool) -> None:
        files, rows = self._files.roll(), self._block_rows
        self._block_rows = 0
        self._send({"final": final, "continuous": bool(self.sink.flush_interval), "files": files, "rows": rows})

    def _send(self, request: dict) -> None:
        """Hand ``request`` (the files to commit) to the driver's bridge; returns once committed."""
        rc = self.runtime_context
        request.update(
            id=uuid.uuid4().hex,
            sink_id=self.sink.sink_id,
            subtask=rc.subtask_index,
            parallelism=rc.parallelism,
            resumed=self._resumed,
        )
        try:
            ray.get(self.sink.bridge.commit.remote(request))
        except ray.exceptions.RayTaskError as exc:
            cause = getattr(exc, "cause", None)
            if isinstance(cause, CommitError):
                raise CommitError(str(cause)) from None
            raise RuntimeError(f"Spark sink '{self.name}': commit failed: {cause or exc}") from None
        except ray.exceptions.RayActorError:
            raise RuntimeError(
                f"Spark sink '{self.name}': the driver's Spark bridge is gone "
                "(raylink.connectors.spark.stop() was called, or the driver exited)"
            ) from None
        self.commits += 1

    def _schedule(self) -> None:
        service = self.runtime_context.processing_time_service
        due = service.current_processing_time() + int(self.sink.flush_interval * 1000)
        self._timer = service.register_timer(due, self._on_timer)

    def _on_timer(self, _timestamp: int) -> None:
        if self._closed:
            return
        self._convert()
        self._seal()
        if self._block_rows:
            self._commit(final=False)
        self._schedule()

    def end_input(self) -> None:
        self._convert()
        self._seal()
        self._ended = True
        sink = self.sink
        if self._exactly_once:
            return  # the final checkpoint holds the last files; its completion commits them
        if sink.writes:
            if self._block_rows or not sink.flush_interval:
                self._commit(final=True)
            return
        self._publish()

    def _publish(self) -> None:
        """A result DataFrame's blocks go into the task's accumulators (read by the driver)."""
        sink = self.sink
        accumulators = self.runtime_context.accumulators
        key = RESULT_PREFIX + sink.sink_id
        accumulators[key] = list(self._blocks)  # kept: a checkpoint after the end of input holds them
        accumulators[key + "#rows"] = self._block_rows
        accumulators[key + "#schema"] = sink.schema_json
        accumulators[key + "#name"] = sink.name

    # -- checkpoints (Flink's SinkWriterOperator + CommitterOperator) --------------------------------------
    def snapshot_operator_state(self, checkpoint_id: int) -> dict:
        self._convert()
        self._seal()
        mine = {"sink": self.sink.sink_id, "subtask": self.runtime_context.subtask_index}
        if not self.sink.writes:  # a result DataFrame: the blocks so far are the state
            return {"blocks": list(self._blocks), "rows": self._block_rows, "ended": self._ended, **mine}
        if self._exactly_once:
            files = self._files.roll()
            # the end is committed even without rows (an empty target is created); a Delta or Iceberg
            # target commits a checkpoint once every subtask handed in its part (empty or not)
            if files or self._ended or self.sink.target is not None:
                self._pending[checkpoint_id] = (files, self._block_rows, self._ended)
                self._block_rows = 0
        return {"pending": dict(self._pending), "staging": self.sink.staging, **mine}

    def restore_operator_state(self, state: dict) -> None:
        self._restore([(self.runtime_context.subtask_index, state)])

    def restore_rescaled_operator_state(self, states: List[Optional[dict]], subtask: int, parallelism: int) -> None:
        """Restored at another parallelism (from a savepoint or a retained checkpoint): old
        subtask ``j``'s committables (or result blocks) go to new subtask ``j % parallelism``,
        as Flink hands out a sink's recovered committables."""
        sink_id = self.sink.sink_id
        self._resumed = any(s is not None and s.get("sink", sink_id) != sink_id for s in states)
        self._restore([(j, s) for j, s in enumerate(states) if s is not None and j % parallelism == subtask])

    def _restore(self, states: List[tuple]) -> None:
        """Own state (a failover of this job) or another run's (a savepoint or retained
        checkpoint of an earlier job of the program): that run's pending committables are
        committed once by this job's driver, from that run's staging folder (the files a
        completed savepoint holds were usually committed by that run already: committing
        again adds nothing)."""
        sink_id = self.sink.sink_id
        own = [s for _j, s in states if s.get("sink", sink_id) == sink_id]
        other = [(s.get("subtask", j), s) for j, s in states if s.get("sink", sink_id) != sink_id]
        self._resumed = self._resumed or bool(other)
        if not self.sink.writes:
            # an earlier run that ended its input published these rows in its own result
            taken = own + [s for _j, s in other if not s["ended"]]
            self._blocks = [block for s in taken for block in s["blocks"]]
            self._block_rows = sum(s["rows"] for s in taken)
            self._ended = any(s["ended"] for s in own)
            if self._ended:  # restored after its end of input: the end is not run again
                self._publish()
            return
        self._pending = {c: p for s in own for c, p in s.get("pending", {}).items()}
        keep = [name for files, _rows, _ended in self._pending.values() for name in files]
        self._files.delete_stale(keep)  # a failed attempt's files no completed checkpoint holds
        self._commit_pending(max(self._pending, default=0))  # that checkpoint completed (idempotent)
        for old_subtask, state in other:
            staging = state.get("staging") or posixpath.join(posixpath.dirname(self.sink.staging), state["sink"])
            for checkpoint_id, (files, rows, _ended) in sorted(state.get("pending", {}).items()):
                self._send(
                    {
                        "checkpoint": checkpoint_id,
                        "final": False,  # this job's end of input is its own
                        "continuous": True,
                        "files": files,
                        "rows": rows,
                        "origin": (state["sink"], old_subtask, staging),
                    }
                )

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        if self._exactly_once:
            self._commit_pending(checkpoint_id)

    def _commit_pending(self, up_to: int) -> None:
        for checkpoint_id in sorted(c for c in self._pending if c <= up_to):
            files, rows, ended = self._pending[checkpoint_id]
            self._send({"checkpoint": checkpoint_id, "final": ended, "continuous": True, "files": files, "rows": rows})
            del self._pending[checkpoint_id]

    def close(self) -> None:
        self._closed = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._files is not None:  # files never handed to a commit (a failed or cancelled task)
            self._files.abort()
        self._rows, self._batches, self._blocks = [], [], []


# -- the sink (driver side + what the job graph holds) -------------------------------------------------
class SparkSink:
    """A Spark sink: ``stream.sink_to(SparkSink(schema=..., table=...))`` or via ``sink_to_spark``.

    ``flush_interval`` (seconds) makes it continuous: one Spark append per interval
    (needs ``path`` or ``table``). ``mode`` applies to the whole output of a bounded
    sink, and to the first write of a continuous one. ``upsert_keys`` (Delta, Iceberg)
    makes every commit a ``MERGE INTO`` on those columns; ``merge_schema`` adds the
    stream's nullable columns the table lacks (see the module doc).
    """

    def __init__(
        self,
        path: Optional[str] = None,
        table: Optional[str] = None,
        schema: Any = None,
        mode: str = "append",
        format: Optional[str] = None,
        partition_by: Any = None,
        options: Optional[Dict[str, str]] = None,
        flush_interval: Optional[float] = None,
        name: str = "Spark Sink",
        batch_rows: int = DEFAULT_BATCH_ROWS,
        block_bytes: int = DEFAULT_BLOCK_BYTES,
        stream_type: Any = None,
        configuration: Any = None,
        upsert_keys: Any = None,
        merge_schema: bool = False,
    ) -> None:
        if path is not None and table is not None:
            raise ValueError("sink_to_spark: give either path= or table=, not both")
        if path is not None and not isinstance(path, str):
            raise TypeError(f"sink_to_spark: path must be a string, got {type(path).__name__}")
        if table is not None and not isinstance(table, str):
            raise TypeError(f"sink_to_spark: table must be a string, got {type(table).__name__}")
        if table is not None:
            try:
                quote_table_name(table)  # a malformed name fails here, not at the job's end
            except ValueError as exc:
                raise ValueError(f"sink_to_spark: {exc}") from None
        mode = str(mode).lower()
        if mode not in WRITE_MODES:
            raise ValueError(f"sink_to_spark: mode must be one of {WRITE_MODES}, got {mode!r}")
        if flush_interval is not None:
            if float(flush_interval) <= 0:
                raise ValueError(f"sink_to_spark: flush_interval must be > 0 seconds, got {flush_interval!r}")
            if path is None and table is None:
                raise ValueError("sink_to_spark: flush_interval (continuous mode) needs a path= or table= to write to")
            if mode not in ("append", "overwrite"):
                raise ValueError(
                    f"sink_to_spark: a continuous sink supports mode 'append' or 'overwrite', got {mode!r}"
                )
        if isinstance(partition_by, str):
            partition_by = [partition_by]
        table_format = check_format(format, "sink_to_spark")
        if table_format is not None:
            if path is None and table is None:
                raise ValueError(f"sink_to_spark: format={format!r} needs a path= or table= to write to")
            if table_format != DELTA and path is not None:
                raise ValueError(
                    f"sink_to_spark: format={format!r} writes tables of raylink's Iceberg catalog: give table="
                )
            if partition_by or options:
                raise ValueError(f"sink_to_spark: format={format!r} takes no partition_by or options yet")
            if upsert_keys is not None and mode != "append":
                raise ValueError(
                    f"sink_to_spark: upsert_keys merges into the table (created when missing): mode must be "
                    f"'append', got {mode!r}"
                )
        elif upsert_keys is not None or merge_schema:
            option = "upsert_keys" if upsert_keys is not None else "merge_schema"
            raise ValueError(f"sink_to_spark: {option} needs format='delta' or format='iceberg', got {format!r}")
        if int(batch_rows) < 1 or int(block_bytes) < 1:
            raise ValueError("sink_to_spark: batch_rows and block_bytes must be >= 1")
        self.sink_id = uuid.uuid4().hex
        self.name = name
        self.path = path
        self.table = table
        self.mode = mode
        self.format = format
        self.partition_by = list(partition_by) if partition_by else None
        self.options = dict(options or {})
        self.flush_interval = float(flush_interval) if flush_interval is not None else None
        self.batch_rows = int(batch_rows)
        self.block_bytes = int(block_bytes)
        needs_spark = (schema is not None and not _is_struct(schema)) or self.writes
        spark = get_spark(configuration=configuration) if needs_spark else None
        spark_schema = resolve_schema(schema, stream_type, spark, "sink_to_spark")
        if self.partition_by:
            missing = [c for c in self.partition_by if c not in spark_schema.names]
            if missing:
                raise ValueError(
                    f"sink_to_spark: partition_by column(s) {missing} not in the schema {spark_schema.names}"
                )
        #: key columns of an upsert sink (:mod:`.upsert`), None: the sink appends
        self.upsert_keys: Optional[List[str]] = None
        if upsert_keys is not None:
            self.upsert_keys = check_upsert_keys(upsert_keys, spark_schema.names, "sink_to_spark")
        self.merge_schema = bool(merge_schema)
        self.schema_json = spark_schema.json()
        self.arrow_schema = arrow_schema_of(spark_schema)
        self.spark_types = [f.dataType.simpleString() for f in spark_schema.fields]
        self.commits: List[dict] = []  # driver side: what the driver's thread committed
        # driver side, checkpointed commits: (checkpoint id, subtask) committed, subtasks ended,
        # the first commit made (``mode`` applies to it) and whether ``ignore`` dropped the output
        self._committed: set = set()
        self._ended_subtasks: set = set()
        self._first_done = False
        self._ignored = False
        self.bridge = None
        self.location: Optional[str] = None  # a path target, absolute
        self.staging: Optional[str] = None
        self.file_schema = self.arrow_schema
        self._table_dir: Optional[str] = None  # driver side: the table's folder once committed into
        if self.writes:
            if path is not None:
                self.location = path if ":" in path.split("/", 1)[0] else os.path.abspath(path)
                self.staging = staging_location(self.location, self.sink_id)
            else:
                warehouse = spark.conf.get("spark.sql.warehouse.dir").rstrip("/")
                self.staging = f"{warehouse}/{STAGING_DIR}/{self.sink_id}"
            self.file_schema = file_schema(self.arrow_schema, self.schema_json, spark.version)
        #: the staged files' schema: an upsert sink's carry its hidden change columns too
        self.staged_schema = self.file_schema
        if self.upsert_keys and self.writes:
            staged = staged_spark_schema(spark_schema)
            self.staged_schema = file_schema(arrow_schema_of(staged), staged.json(), spark.version)
        #: a Delta or Iceberg table: one idempotent commit per checkpoint (:mod:`.delta`, :mod:`.iceberg`)
        self.target: Any = None
        self._gathered: Dict[int, Dict[int, dict]] = {}  # driver side: checkpoint -> subtask -> request
        if table_format is not None:
            require_format(spark, table_format, "sink_to_spark")
            if table_format == DELTA:
                from raylink.connectors.spark.delta import DeltaTarget

                self.target = DeltaTarget(self.location, table, self.merge_schema)
            else:
                from raylink.connectors.spark.iceberg import IcebergTarget

                self.target = IcebergTarget(table, self.merge_schema)
            self.target.check(spark, spark_schema, f"sink_to_spark '{name}'")  # before any row is written
        if self.writes:
            self.bridge = register_sink_target(self.sink_id, self)

    @property
    def writes(self) -> bool:
        return self.path is not None or self.table is not None

    # -- raylink hooks ----------------------------------------------------------------------------
    def _raylink_sink_spec(self):
        return SINK_KIND, self.name, self, {}

    def create_operator(self, spec: Any) -> SparkSinkOperator:
        return SparkSinkOperator(self)

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state.update(commits=[], _table_dir=None, _committed=set(), _ended_subtasks=set(), _gathered={})
        return state

    def describe(self) -> str:
        if self.target is not None:
            return self.target.describe()
        return f"table {self.table}" if self.table else f"path {self.path}"

    def __repr__(self) -> str:
        target = self.describe() if self.writes else "result DataFrame"
        return f"SparkSink({self.name!r} -> {target})"

    # -- driver side ------------------------------------------------------------------------------
    def spark_schema(self) -> Any:
        from pyspark.sql.types import StructType

        return StructType.fromJson(json.loads(self.schema_json))

    def commit(self, requests: List[dict], mode: str) -> str:
        """Make the staged files of ``requests`` visible with ``mode`` (the driver's thread):
        ``"files"`` when they were moved in, ``"spark"`` when Spark wrote them."""
        names = [name for r in requests for name in r["files"]]
        origin = requests[0].get("origin")
        staging = origin[2] if origin else self.staging  # an earlier run's committables: its folder
        spark = _activated(get_spark())
        try:
            if self.target is not None:  # Delta or Iceberg: one table commit
                return self._commit_table(spark, staging, names, mode, None, None)
            if self._plain_parquet() and self.table is None:
                commit_files(self.location, staging, names, mode, self.file_schema)
                spark.catalog.refreshByPath(self.location)
                return "files"
            if self._plain_parquet() and mode in ("append", "overwrite"):
                table = quote_table_name(self.table)
                location = (
                    self._table_dir
                    if mode == "append" and self._table_dir is not None and spark.catalog.tableExists(table)
                    else self._table_location(spark)
                )
                if location is not None:
                    commit_files(location, staging, names, mode, self.file_schema)
                    spark.catalog.refreshTable(table)
                    self._table_dir = location  # a continuous sink's next appends go straight there
                    return "files"
            if origin:  # staged files already gone were written by that run itself
                names = staged_files(staging, names)
                if not names:
                    return "duplicate"
            self._spark_write(spark, staging, names, mode)
            delete_files(staging, names)
            return "spark"
        finally:
            if not any(r.get("continuous") for r in requests):  # a bounded sink's one commit
                self.cleanup()

    def commit_checkpoint(self, request: dict) -> str:
        """Commit one subtask's files of one completed checkpoint (the driver's thread), once:
        a request replayed after a restore commits nothing again. ``mode`` applies to the
        sink's first commit, later ones append; the staging folder goes when every subtask
        committed its end of input."""
        if self.target is not None:
            return self._commit_table_checkpoint(request)
        origin = request.get("origin")  # (sink id, subtask, staging) of an earlier run's committable
        key = (request["checkpoint"], *(origin[:2] if origin else (request["subtask"],)))
        first = not self._first_done and not request.get("resumed")  # a resumed run continues a target
        if key in self._committed:
            how = "duplicate"
        elif self._ignored or (first and self.mode == "ignore" and self._target_exists()):
            self._ignored, how = True, "ignored"
        else:  # a failure raises with the staged files kept: the restored subtask commits them again
            how = self.commit([request], self.mode if first else "append")
            self._first_done = True
        self._committed.add(key)
        delete_files(origin[2] if origin else self.staging, request["files"])  # left by a duplicate or an ignore
        if request["final"]:
            self._ended_subtasks.add(request["subtask"])
            if len(self._ended_subtasks) >= request["parallelism"]:
                self.cleanup()
        return how

    # -- Delta and Iceberg targets -------------------------------------------------------------------
    def _commit_table(
        self, spark: Any, staging: str, names: List[str], mode: str, app_id: Optional[str], version: Optional[int]
    ) -> str:
        """ONE commit of the staged files ``names`` into the Delta/Iceberg target (idempotent
        for ``app_id``/``version`` when given); the staged files are deleted after it. A
        refused write raises :class:`CommitError` with the table format's whole message on one
        line (Delta's constraint errors list the offending values on their next lines)."""
        try:
            return self._commit_table_files(spark, staging, names, mode, app_id, version)
        except Exception as exc:
            raise CommitError(_one_line(exc)) from None

    def _commit_table_files(
        self, spark: Any, staging: str, names: List[str], mode: str, app_id: Optional[str], version: Optional[int]
    ) -> str:
        if not names and version is None and self.target.exists(spark):
            return "empty"  # a bounded job without rows leaves an existing table as it is
        if self.upsert_keys:
            paths = [f"{staging}/{n}" for n in names]
            staged_schema = staged_spark_schema(self.spark_schema())

            def staged(session: Any) -> Any:
                if paths:
                    return session.read.schema(staged_schema).parquet(*paths)
                return session.createDataFrame([], staged_schema)

            how = self.target.merge(spark, staged, self.spark_schema(), self.upsert_keys, app_id, version)
            delete_files(staging, names)
            return how
        if names:
            df = spark.read.schema(self.spark_schema()).parquet(*[f"{staging}/{n}" for n in names])
        else:
            df = spark.createDataFrame([], self.spark_schema())
        how = self.target.commit(spark, df, mode, app_id, version)
        delete_files(staging, names)
        return how

    def _commit_table_checkpoint(self, request: dict) -> str:
        """Gather every subtask's part of a completed checkpoint, then commit them as ONE table
        commit (the sink's id as Delta's ``txnAppId`` / Iceberg's ``flink.job-id``, the
        checkpoint id as the version): replayed parts, and a commit the table already holds,
        add nothing. A subtask that committed its end of input counts as present (empty) in
        later checkpoints, which it takes no part in. An earlier run's committable (restored
        from its savepoint) is committed alone, keyed by that run's sink and subtask."""
        spark = _activated(get_spark())
        checkpoint = request["checkpoint"]
        origin = request.get("origin")
        if origin:
            names = staged_files(origin[2], request["files"])  # files that run committed are gone
            if not names:
                return "duplicate"
            return self._commit_table(spark, origin[2], names, "append", f"{origin[0]}-{origin[1]}", checkpoint)
        if (checkpoint,) in self._committed:
            delete_files(self.staging, request["files"])
            return "duplicate"
        group = self._gathered.setdefault(checkpoint, {})
        if request["subtask"] not in group:  # a part handed in again after a restore: taken already
            # the driver takes the files out of the subtask's reach: a restored subtask whose
            # state no longer lists them (handed in before its checkpoint) deletes its stale files
            _take_files(self.staging, request["files"])
            group[request["subtask"]] = request
        how = "staged"
        for pending in sorted(self._gathered):  # in checkpoint order: txnVersion / checkpoint ids only grow
            group = self._gathered[pending]
            parallelism = max(r["parallelism"] for r in group.values())
            if len(set(group) | self._ended_subtasks) < parallelism:
                break
            how = self._commit_group(spark, pending, list(group.values()))
            del self._gathered[pending]  # after the commit: a failed one is tried again with every part
        return how

    def _commit_group(self, spark: Any, checkpoint: int, requests: List[dict]) -> str:
        names = [name for r in requests for name in r["files"]]
        first = not self._first_done and not any(r.get("resumed") for r in requests)
        ended = {r["subtask"] for r in requests if r["final"]}
        gathered = f"{self.staging}/{GATHERED_DIR}"
        if self._ignored or (first and self.mode == "ignore" and self.target.exists(spark)):
            self._ignored, how = True, "ignored"
            delete_files(gathered, names)
        elif not names and (self.target.exists(spark) or not ended):
            how = "empty"  # nothing to commit (an empty target is created at the end only)
        else:  # a failure raises with the staged files kept: the restored subtasks hand them in again
            how = self._commit_table(spark, gathered, names, self.mode if first else "append", self.sink_id, checkpoint)
            self._first_done = True
        self._committed.add((checkpoint,))
        self._ended_subtasks |= ended
        if ended and len(self._ended_subtasks) >= max(r["parallelism"] for r in requests):
            self.cleanup()
        return how

    def _target_exists(self) -> bool:
        if self.table is not None:
            return get_spark().catalog.tableExists(quote_table_name(self.table))
        return directory_exists(self.location)

    def _plain_parquet(self) -> bool:
        return (self.format or "parquet").lower() == "parquet" and not self.partition_by and not self.options

    def _table_location(self, spark: Any) -> Optional[str]:
        """The directory to move files into for a plain Parquet table (created when missing),
        None when Spark must write (another provider, partitions, other columns ...)."""
        table = quote_table_name(self.table)
        schema = self.spark_schema()
        if not spark.catalog.tableExists(table):
            spark.catalog.createTable(table, schema=schema, source="parquet")
        else:
            current = spark.table(table).schema  # a Parquet table's columns are all nullable: compare types only
            if [(f.name, f.dataType.simpleString()) for f in current.fields] != [
                (f.name, f.dataType.simpleString()) for f in schema.fields
            ]:
                return None
        info = _describe(spark, table)
        if (info.get("Provider") or "").lower() != "parquet" or info.get("partitioned") or not info.get("Location"):
            return None
        return info["Location"]

    def _spark_write(self, spark: Any, staging: str, names: List[str], mode: str) -> None:
        """ONE Spark write of the staged files (formats, partitioning, options Spark owns)."""
        if names:
            df = spark.read.schema(self.spark_schema()).parquet(*[f"{staging}/{n}" for n in names])
        else:
            df = spark.createDataFrame([], self.spark_schema())
        fmt = self.format
        table = quote_table_name(self.table) if self.table is not None else None
        if table is not None and fmt is None:
            fmt = _table_provider(spark, table) or "parquet"
        writer = df.write.mode(mode).format(fmt or "parquet")
        if self.partition_by:
            writer = writer.partitionBy(*self.partition_by)
        if self.options:
            writer = writer.options(**self.options)
        if table is not None:
            writer.saveAsTable(table)
        else:
            writer.save(self.path)

    def discard(self, requests: List[dict]) -> None:
        """Delete staged files that will never be committed (a replaced or failed attempt)."""
        delete_files(self.staging, [name for r in requests for name in r["files"]])

    def cleanup(self) -> None:
        """Remove the staging folder (``raylink.connectors.spark.stop()``)."""
        if self.staging is not None:
            remove_folder(self.staging)

    def get_dataframe(self, result: Any, spark: Any = None) -> Any:
        """The result DataFrame of this sink in the job of ``result`` (see :mod:`.results`)."""
        return get_spark_dataframe(result, self, spark)


def _take_files(staging: str, names: List[str]) -> None:
    """Move staged files into the staging folder's driver-owned subfolder (:data:`GATHERED_DIR`);
    a file already moved (or gone) is skipped."""
    if not names:
        return
    fs, folder = filesystem_of(staging)
    fs.create_dir(f"{folder}/{GATHERED_DIR}", recursive=True)
    for name in names:
        try:
            fs.move(f"{folder}/{name}", f"{folder}/{GATHERED_DIR}/{name}")
        except (FileNotFoundError, OSError):
            pass


def _one_line(exc: BaseException, limit: int = 2000) -> str:
    """A (py4j-wrapped Java) exception's whole message on one line, at most ``limit`` characters."""
    text = str(exc)
    java = getattr(exc, "java_exception", None)
    if java is not None:
        try:
            text = java.getMessage() or text
        except Exception:
            pass
    text = " ".join(line.strip() for line in text.splitlines() if line.strip()) or type(exc).__name__
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _activated(spark: Any) -> Any:
    """``spark`` made the active session of this thread's JVM thread (the bridge's driver
    thread commits): in a thread without one, Spark plans ``saveAsTable`` for the Delta
    session catalog (a V1 Parquet table's overwrite became an unsupported REPLACE TABLE)."""
    try:
        spark._jvm.org.apache.spark.sql.SparkSession.setActiveSession(spark._jsparkSession)
    except Exception:  # a session without a JVM of its own here (attached): taken as it is
        pass
    return spark


def _has_nested_required_field(schema: pa.Schema) -> bool:
    """A struct (at any depth) with a field declared non-nullable (Spark's ``named_struct`` of
    non-null values): where the struct is null, Spark's Arrow batches hold nulls in that field,
    which the Parquet writer refuses; the row converter writes such values."""

    def required_in_struct(data_type: pa.DataType) -> bool:
        if pa.types.is_map(data_type):  # its entries' key is required, and an entry is never null
            return required_in_struct(data_type.key_type) or required_in_struct(data_type.item_type)
        children = [data_type.field(i) for i in range(data_type.num_fields)]
        if pa.types.is_struct(data_type) and any(not f.nullable for f in children):
            return True
        return any(required_in_struct(f.type) for f in children)

    return any(required_in_struct(field.type) for field in schema)


def _is_struct(schema: Any) -> bool:
    try:
        from pyspark.sql.types import StructType
    except ImportError:  # pragma: no cover
        return False
    return isinstance(schema, StructType)


def _describe(spark: Any, table: str) -> Dict[str, Any]:
    """``DESCRIBE TABLE EXTENDED`` of ``table`` (already quoted) as ``{key: value}``, plus
    ``partitioned`` (the table has partition columns)."""
    info: Dict[str, Any] = {"partitioned": False}
    detailed = False
    for row in spark.sql(f"DESCRIBE TABLE EXTENDED {table}").collect():
        key = (row[0] or "").strip()
        if key == "# Partition Information":
            info["partitioned"] = True
        elif key == "# Detailed Table Information":
            detailed = True
        elif detailed and key and not key.startswith("#"):
            info.setdefault(key, (row[1] or "").strip())
    return info


def _table_provider(spark: Any, table: str) -> Optional[str]:
    """The table's provider (format), ``table`` already quoted (:func:`quote_table_name`)."""
    if not spark.catalog.tableExists(table):
        return None
    return _describe(spark, table).get("Provider") or None


__all__ = [
    "DEFAULT_BATCH_ROWS",
    "DEFAULT_BLOCK_BYTES",
    "RESULT_PREFIX",
    "SINK_KIND",
    "WRITE_MODES",
    "SparkSink",
    "SparkSinkOperator",
]
