"""The unbounded Spark table source: ``env.from_spark_table(path_or_table, poll_interval=...)``.

Keeps reading a Parquet directory (a path, or a table name resolved to its location
through Spark): every ``poll_interval`` seconds each subtask lists the directory
(hidden ``_``/``.`` entries skipped, as Spark does), reads the new ``.parquet`` files
assigned to it (a stable hash of the file's path) with pyarrow, casts them to the
table's schema (:func:`~raylink.connectors.spark.arrow.conform_table`; Hive-style
``key=value`` partition directories become columns) and emits their rows. It never
ends by itself: cancel the job. Between polls it waits on an event that ``cancel``
sets, at most 100 ms at a time, so the task's mails (timers, output flushes,
cancellation) keep running. Checkpoints hold the files seen and the row reached in
the file being read.

:func:`prepare_table_source` runs on the driver (Spark resolves a table name and the
schema); each :class:`ParquetDirectorySourceOperator` runs on its source task's thread
(``cancel`` may come from another thread: it sets an event). Plays the part of
Flink's continuous ``FileSource`` (``monitorContinuously``), with static file
assignment instead of a split enumerator.
"""

from __future__ import annotations

import threading
import time
import zlib
from typing import Any, List, Optional

import pyarrow as pa

from raylink.connectors.spark.arrow import RecordEmitter, check_emit_options, conform_table
from raylink.connectors.spark.errors import java_message
from raylink.connectors.spark.files import filesystem_of
from raylink.connectors.spark.identifiers import quote_table_name
from raylink.connectors.spark.session import get_spark
from raylink.connectors.spark.types import SparkRowType, arrow_schema_of, resolve_schema, row_type
from raylink.operators.connector import CONNECTOR_SOURCE as SOURCE_KIND
from raylink.operators.sources import SourceOperator, rescaled_file_queues

IDLE_WAIT_S = 0.1


def _hidden(relative: str) -> bool:
    return any(part.startswith(("_", ".")) for part in relative.split("/"))


def _partition_values(relative: str) -> dict:
    values = {}
    for part in relative.split("/")[:-1]:
        if "=" in part:
            key, value = part.split("=", 1)
            from urllib.parse import unquote

            values[key] = None if value == "__HIVE_DEFAULT_PARTITION__" else unquote(value)
    return values


class SparkTableSource:
    """What the job graph holds for ``from_spark_table`` (location + schema + options)."""

    def __init__(
        self,
        location: str,
        arrow_schema: pa.Schema,
        poll_interval: float,
        record_format: str,
        timestamp_column: Optional[str],
        watermark_delay_ms: Optional[int],
        start_from: str,
        description: str,
    ) -> None:
        self.location = location
        self.arrow_schema = arrow_schema
        self.poll_interval = poll_interval
        self.record_format = record_format
        self.timestamp_column = timestamp_column
        self.watermark_delay_ms = watermark_delay_ms
        self.start_from = start_from
        self.description = description

    def create_operator(self, spec: Any) -> "ParquetDirectorySourceOperator":
        return ParquetDirectorySourceOperator(self)

    def __repr__(self) -> str:
        return f"SparkTableSource({self.description}, every {self.poll_interval}s)"


class ParquetDirectorySourceOperator(SourceOperator):
    """Unbounded: emits the rows of every new Parquet file of a directory (this subtask's share)."""

    def __init__(self, source: SparkTableSource, name: str = "", operator_id: str = "") -> None:
        super().__init__(None, name, operator_id)
        self.source = source
        self._seen: set = set()
        self._queue: List[str] = []
        self._table: Any = None
        self._current: Optional[str] = None  # the file ``_table`` was read from
        self._offset = 0
        self._skips: dict = {}  # file -> rows of it a restored checkpoint had emitted
        self._next_poll = 0.0
        self._wakeup = threading.Event()
        self.files_read = 0

    def open(self) -> None:
        source = self.source
        self._fs, self._root = filesystem_of(source.location)
        self._emitter = RecordEmitter(
            self, source.record_format, source.timestamp_column, source.watermark_delay_ms, source.arrow_schema.names
        )
        if source.start_from == "latest":
            self._seen.update(self._list_mine())

    def _list_mine(self) -> List[str]:
        import pyarrow.fs as pafs

        info = self._fs.get_file_info(self._root)
        if info.type == pafs.FileType.NotFound:
            return []
        rc = self.runtime_context
        selector = pafs.FileSelector(self._root, recursive=True, allow_not_found=True)
        found = []
        for entry in self._fs.get_file_info(selector):
            if entry.type != pafs.FileType.File:
                continue
            relative = entry.path[len(self._root) :].lstrip("/")
            if _hidden(relative) or not relative.endswith((".parquet", ".parq")):
                continue
            if zlib.crc32(relative.encode()) % rc.parallelism != rc.subtask_index:
                continue
            found.append((entry.mtime_ns or 0, relative))
        return [relative for _, relative in sorted(found)]

    def _poll(self) -> None:
        new = [r for r in self._list_mine() if r not in self._seen]
        self._seen.update(new)
        self._queue.extend(new)

    def _read(self, relative: str) -> Any:
        import pyarrow.parquet as pq

        path = f"{self._root.rstrip('/')}/{relative}"
        with self._fs.open_input_file(path) as f:
            table = pq.read_table(f)
        self.files_read += 1
        return conform_table(
            table, self.source.arrow_schema, _partition_values(relative), f"source {self.name!r} reading {path}"
        )

    def emit_next(self, max_records: int = 1024) -> bool:
        if self.finished or self.cancelled:
            return False
        while self._table is None or self._offset >= self._table.num_rows:
            self._table = None
            if self._queue:
                self._current = self._queue.pop(0)
                self._table = self._read(self._current)
                self._offset = self._skips.pop(self._current, 0)
                continue
            now = time.monotonic()
            if now >= self._next_poll:
                self._next_poll = now + self.source.poll_interval
                self._poll()
                if self._queue:
                    continue
            # idle: wait a little (cancel wakes us); the task runs its mails in between
            self._wakeup.wait(min(IDLE_WAIT_S, max(0.0, self._next_poll - time.monotonic())))
            return not self.cancelled
        n = min(max(1, max_records), self._table.num_rows - self._offset)
        chunk = self._table.slice(self._offset, n)
        self._offset += n
        self._emitter.emit(chunk)
        return True

    def cancel(self) -> None:
        self.cancelled = True
        self._wakeup.set()

    # -- checkpoints: the files seen and the position in the one being read ----------------------
    def snapshot_operator_state(self, _checkpoint_id: int) -> dict:
        reading = self._table is not None and self._offset < self._table.num_rows
        return {
            "seen": sorted(self._seen),
            "queue": ([self._current] if reading else []) + list(self._queue),
            "offset": self._offset if reading else 0,
        }

    def restore_operator_state(self, state: dict) -> None:
        """Continue after the checkpoint: files it had not read yet are queued again, and the
        file it was reading resumes at the row after the last one it emitted."""
        self._seen = set(state["seen"])
        self._queue = list(state["queue"])
        self._skips = {self._queue[0]: state["offset"]} if self._queue and state["offset"] else {}
        self._table, self._current, self._offset = None, None, 0

    def restore_rescaled_operator_state(self, states: list, subtask: int, parallelism: int) -> None:
        """Restored at another parallelism: every file any old subtask saw counts as seen here
        (none is read twice); old subtask ``j``'s unread files (the one it was reading resumes
        at its row) go to new subtask ``j % parallelism``; files none saw are listed anew."""
        self._seen, self._queue, self._skips = rescaled_file_queues(states, subtask, parallelism, "offset")
        self._table, self._current, self._offset = None, None, 0


def resolve_table_location(path_or_table: str, spark: Any = None) -> "tuple[str, Any, str]":
    """(location, Spark schema or None, description) of a directory path or a table name."""
    looks_like_path = "/" in path_or_table or "://" in path_or_table or path_or_table.startswith(".")
    if looks_like_path:
        return path_or_table, None, f"path {path_or_table}"
    try:
        table = quote_table_name(path_or_table)  # never raw text in SQL
    except ValueError as exc:
        raise ValueError(f"from_spark_table: {exc}") from None
    spark = spark or get_spark()
    try:
        rows = spark.sql(f"DESCRIBE TABLE EXTENDED {table}").collect()
    except Exception as exc:
        raise ValueError(f"from_spark_table: no table {path_or_table!r}: {java_message(exc)}") from None
    info = {r[0].strip(): (r[1] or "").strip() for r in rows if r[0]}
    provider = info.get("Provider", "").lower()
    if provider and provider != "parquet":
        raise ValueError(
            f"from_spark_table: table {path_or_table!r} is stored as {provider!r}; "
            "the continuous source reads Parquet tables only"
        )
    location = info.get("Location")
    if not location:
        raise ValueError(f"from_spark_table: table {path_or_table!r} has no location (a view?)")
    return location, spark.table(table).schema, f"table {path_or_table} at {location}"


def prepare_table_source(
    path_or_table: str,
    schema: Any = None,
    poll_interval: float = 1.0,
    record_format: str = "tuple",
    timestamp_column: Optional[str] = None,
    watermark_delay_ms: Optional[int] = None,
    start_from: str = "earliest",
    configuration: Any = None,
) -> "tuple[SparkTableSource, SparkRowType]":
    where = "from_spark_table"
    if not isinstance(path_or_table, str) or not path_or_table:
        raise TypeError(f"{where}: expected a directory path or a table name, got {path_or_table!r}")
    if not poll_interval or poll_interval <= 0:
        raise ValueError(f"{where}: poll_interval must be > 0 seconds, got {poll_interval!r}")
    if start_from not in ("earliest", "latest"):
        raise ValueError(f"{where}: start_from must be 'earliest' or 'latest', got {start_from!r}")
    spark = get_spark(configuration=configuration)
    location, table_schema, description = resolve_table_location(path_or_table, spark)
    if schema is not None:
        spark_schema = resolve_schema(schema, None, spark, where)
    elif table_schema is not None:
        spark_schema = table_schema
    else:
        try:
            spark_schema = spark.read.parquet(location).schema
        except Exception as exc:
            raise ValueError(
                f"{where}: cannot read a schema from {location!r} ({java_message(exc)}); "
                "pass schema= when the directory is still empty"
            ) from None
    check_emit_options(tuple(spark_schema.names), record_format, timestamp_column, watermark_delay_ms, where)
    source = SparkTableSource(
        location,
        arrow_schema_of(spark_schema),
        float(poll_interval),
        record_format,
        timestamp_column,
        watermark_delay_ms,
        start_from,
        description,
    )
    return source, row_type(spark_schema, record_format)


__all__ = [
    "IDLE_WAIT_S",
    "SOURCE_KIND",
    "ParquetDirectorySourceOperator",
    "SparkTableSource",
    "prepare_table_source",
    "resolve_table_location",
]
