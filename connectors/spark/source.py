"""Spark sources: ``env.from_spark(df)`` (bounded) and ``env.from_spark_table(...)`` (unbounded).

**from_spark.** At the driver the DataFrame becomes Ray blocks through RayDP
(``ray.data.from_spark(df)``); the blocks are materialised, Spark's cached copy
is released, and the block refs are registered with the driver's bridge actor
(see :mod:`raylink.connectors.spark.bridge`). Only a small
:class:`SparkDataFrameSource` (source id, bridge handle, column names, options)
goes into the job graph — never the DataFrame. Source parallelism is
``min(number of blocks, requested)``; subtask *i* of *p* reads the contiguous
block range ``[i*n//p, (i+1)*n//p)``, ``ray.get``\\ s one block at a time and
emits slices of it as tuples (default) or dicts. With ``timestamp_column`` every
record carries that column as its event timestamp (ms), and with
``watermark_delay_ms`` the source emits bounded-out-of-orderness watermarks.

**from_spark_table.** Keeps reading a Parquet directory (a path, or a table
name resolved to its location through Spark): every ``poll_interval`` seconds
each subtask lists the directory (hidden ``_``/``.`` entries skipped, as Spark
does), reads the new ``.parquet`` files assigned to it (a stable hash of the
file's path) with pyarrow, casts them to the table's schema (Hive-style
``key=value`` partition directories become columns) and emits their rows. It
never ends by itself: cancel the job. Between polls it waits on an event that
``cancel`` sets, at most 100 ms at a time, so the task's mails (timers, output
flushes, cancellation) keep running.
"""

from __future__ import annotations

import os
import threading
import time
import uuid
import zlib
from itertools import groupby
from typing import Any, List, Optional

import pyarrow as pa
import pyarrow.compute as pc

from raylink.operators.sources import SourceOperator

from raylink.connectors.spark.types import RECORD_FORMATS, SparkRowType, row_type

SOURCE_KIND = "source_connector"
IDLE_WAIT_S = 0.1


# -- turning Arrow into records ---------------------------------------------------------------------
class _RecordEmitter:
    """Emits slices of Arrow tables as records (+ timestamps, watermarks) of a source operator."""

    def __init__(self, operator: SourceOperator, record_format: str, timestamp_column: Optional[str],
                 watermark_delay_ms: Optional[int]) -> None:
        self.operator = operator
        self.record_format = record_format
        self.timestamp_column = timestamp_column
        self.watermark_delay_ms = watermark_delay_ms
        self.max_timestamp: Optional[int] = None

    def records(self, chunk: Any) -> List[Any]:
        if self.record_format == "dict":
            return chunk.to_pylist()
        columns = [column.to_pylist() for column in chunk.columns]
        if not columns:
            return [()] * chunk.num_rows
        return list(zip(*columns))

    def timestamps(self, chunk: Any) -> List[Optional[int]]:
        name = self.timestamp_column
        column = chunk.column(name)
        t = column.type
        if pa.types.is_timestamp(t):
            micros = pc.cast(column, pa.timestamp("us", tz=t.tz)).cast(pa.int64())
            return [None if v is None else v // 1000 for v in micros.to_pylist()]
        if pa.types.is_date(t):
            days = pc.cast(column, pa.date32()).cast(pa.int32())
            return [None if v is None else v * 86_400_000 for v in days.to_pylist()]
        if pa.types.is_integer(t):
            return column.to_pylist()
        raise TypeError(
            f"source {self.operator.name!r}: timestamp_column {name!r} has type {t}; "
            "expected a timestamp, date or integer (epoch ms) column"
        )

    def emit(self, chunk: Any) -> int:
        operator = self.operator
        records = self.records(chunk)
        rc = operator.record_context
        if self.timestamp_column is None:
            rc.timestamp = None
            operator._collect_batch(records)
            return len(records)
        timestamps = self.timestamps(chunk)
        start = 0
        for ts, run in groupby(timestamps):
            n = sum(1 for _ in run)
            rc.timestamp = ts
            operator._collect_batch(records[start:start + n])
            start += n
        rc.timestamp = None
        known = [t for t in timestamps if t is not None]
        if known:
            top = max(known)
            if self.max_timestamp is None or top > self.max_timestamp:
                self.max_timestamp = top
        if self.watermark_delay_ms is not None and self.max_timestamp is not None:
            watermark = self.max_timestamp - self.watermark_delay_ms - 1
            if watermark > operator.current_watermark:
                operator.current_watermark = watermark
                operator.output.emit_watermark(watermark)  # type: ignore[union-attr]
        return len(records)


def _check_emit_options(names: tuple, record_format: str, timestamp_column: Optional[str],
                        watermark_delay_ms: Optional[int], where: str) -> None:
    if record_format not in RECORD_FORMATS:
        raise ValueError(f"{where}: record_format must be one of {RECORD_FORMATS}, got {record_format!r}")
    if timestamp_column is not None and timestamp_column not in names:
        raise ValueError(f"{where}: timestamp_column {timestamp_column!r} is not a column of {list(names)}")
    if watermark_delay_ms is not None:
        if timestamp_column is None:
            raise ValueError(f"{where}: watermark_delay_ms needs a timestamp_column")
        if int(watermark_delay_ms) < 0:
            raise ValueError(f"{where}: watermark_delay_ms must be >= 0, got {watermark_delay_ms}")


# -- from_spark: bounded source over Ray blocks -------------------------------------------------------
class SparkDataFrameSource:
    """What the job graph holds for ``from_spark`` (picklable; no DataFrame, no block refs)."""

    def __init__(self, source_id: str, bridge: Any, num_blocks: int, names: tuple, record_format: str,
                 timestamp_column: Optional[str], watermark_delay_ms: Optional[int], num_rows: int) -> None:
        self.source_id = source_id
        self.bridge = bridge
        self.num_blocks = num_blocks
        self.names = names
        self.record_format = record_format
        self.timestamp_column = timestamp_column
        self.watermark_delay_ms = watermark_delay_ms
        self.num_rows = num_rows

    def create_operator(self, spec: Any) -> "SparkBlockSourceOperator":
        return SparkBlockSourceOperator(self)

    def __repr__(self) -> str:
        return f"SparkDataFrameSource({self.num_rows} rows in {self.num_blocks} blocks)"


def block_range(num_blocks: int, subtask_index: int, parallelism: int) -> range:
    """Subtask ``subtask_index``'s contiguous share of ``num_blocks`` blocks."""
    return range(subtask_index * num_blocks // parallelism, (subtask_index + 1) * num_blocks // parallelism)


class SparkBlockSourceOperator(SourceOperator):
    """Reads this subtask's Ray blocks (Arrow tables) and emits their rows."""

    def __init__(self, source: SparkDataFrameSource, name: str = "", operator_id: str = "") -> None:
        super().__init__(None, name, operator_id)
        self.source = source
        self._refs: List[Any] = []
        self._table: Any = None
        self._offset = 0
        self._released = False
        self.num_blocks_read = 0

    def open(self) -> None:
        import ray

        source = self.source
        rc = self.runtime_context
        self._emitter = _RecordEmitter(self, source.record_format, source.timestamp_column,
                                       source.watermark_delay_ms)
        share = block_range(source.num_blocks, rc.subtask_index, rc.parallelism)
        if len(share):
            refs = ray.get(source.bridge.get_blocks.remote(source.source_id))
            self._refs = list(refs[share.start:share.stop])
        else:
            self._release()

    def _release(self) -> None:
        if self._released:
            return
        self._released = True
        self._refs = []
        rc = self.runtime_context
        try:
            self.source.bridge.release_blocks.remote(self.source.source_id, rc.subtask_index, rc.parallelism)
        except Exception:  # the bridge is gone (driver stopped it): nothing to release
            pass

    def emit_next(self, max_records: int = 1024) -> bool:
        import ray

        if self.finished or self.cancelled:
            return False
        while self._table is None or self._offset >= self._table.num_rows:
            if not self._refs:
                self._table = None
                self._release()
                self._finish()
                return False
            ref = self._refs.pop(0)
            self._table = ray.get(ref)
            del ref
            self._offset = 0
            self.num_blocks_read += 1
        n = min(max(1, max_records), self._table.num_rows - self._offset)
        chunk = self._table.slice(self._offset, n)
        self._offset += n
        self._emitter.emit(chunk)
        return True

    def close(self) -> None:
        self._table = None
        self._release()
        super().close()


def _is_dataframe(df: Any) -> bool:
    try:
        from pyspark.sql import DataFrame
    except ImportError:  # pragma: no cover - pyspark is a dependency
        return False
    return isinstance(df, DataFrame)


def prepare_spark_source(df: Any, record_format: str = "tuple", timestamp_column: Optional[str] = None,
                         watermark_delay_ms: Optional[int] = None,
                         where: str = "from_spark") -> "tuple[SparkDataFrameSource, SparkRowType]":
    """Turn ``df`` into registered Ray blocks; return the graph-side source and the stream type."""
    if not _is_dataframe(df):
        raise TypeError(
            f"{where}: expected a pyspark.sql.DataFrame (of a Spark-on-Ray session), got "
            f"{type(df).__module__}.{type(df).__qualname__}"
        )
    import ray

    from raydp.spark.dataset import release_spark_recoverable

    from raylink.connectors.spark.bridge import get_bridge
    from raylink.connectors.spark.session import is_raydp_session

    if not is_raydp_session(df.sparkSession):
        raise ValueError(
            f"{where}: the DataFrame belongs to a Spark session that does not run on Ray "
            f"(master {df.sparkSession.sparkContext.master!r}); create it with a session from "
            "raylink.connectors.spark.get_spark() or raydp.init_spark(...)"
        )
    schema = df.schema
    _check_emit_options(tuple(schema.names), record_format, timestamp_column, watermark_delay_ms, where)
    dataset = ray.data.from_spark(df)
    refs = dataset.to_arrow_refs()
    if refs:
        ray.wait(refs, num_returns=len(refs), fetch_local=False)  # materialised in the object store ...
    num_rows = dataset.count()
    release_spark_recoverable(df)  # ... so Spark's cached copy can go
    source_id = uuid.uuid4().hex
    bridge = get_bridge()
    ray.get(bridge.put_blocks.remote(source_id, list(refs)))
    del dataset
    source = SparkDataFrameSource(source_id, bridge, len(refs), tuple(schema.names), record_format,
                                  timestamp_column, watermark_delay_ms, num_rows)
    return source, row_type(schema, record_format)


class SparkSource:
    """``env.from_source(SparkSource(df, ...))``: the same bounded source as ``from_spark``.

    The blocks are prepared when the stream is created (``_raylink_source_spec``).
    """

    def __init__(self, df: Any, record_format: str = "tuple", timestamp_column: Optional[str] = None,
                 watermark_delay_ms: Optional[int] = None) -> None:
        if not _is_dataframe(df):
            raise TypeError(f"SparkSource: expected a pyspark.sql.DataFrame, got {type(df).__name__}")
        self._df = df
        self._options = (record_format, timestamp_column, watermark_delay_ms)
        self.type_info: Optional[SparkRowType] = None

    def _raylink_source_spec(self):
        source, type_info = prepare_spark_source(self._df, *self._options, where="SparkSource")
        self.type_info = type_info
        return SOURCE_KIND, source, {}, False


# -- from_spark_table: unbounded Parquet directory source --------------------------------------------
def _filesystem(location: str) -> "tuple[Any, str]":
    import pyarrow.fs as pafs

    if "://" in location:
        if location.startswith("file://"):
            return pafs.LocalFileSystem(), location[len("file://"):] or "/"
        return pafs.FileSystem.from_uri(location)
    if location.startswith("file:"):
        location = location[len("file:"):]
    return pafs.LocalFileSystem(), os.path.abspath(location)


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


def conform_table(table: Any, schema: pa.Schema, partition_values: dict, where: str) -> Any:
    """``table`` with exactly ``schema``'s columns: cast by name, partition columns from the
    path, missing columns null."""
    n = table.num_rows
    columns = []
    for field in schema:
        if field.name in table.column_names:
            column = table.column(field.name)
        elif field.name in partition_values:
            column = pa.array([partition_values[field.name]] * n, type=pa.string())
        else:
            column = pa.nulls(n, type=field.type)
        if not column.type.equals(field.type):
            try:
                column = pc.cast(column, field.type)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
                raise TypeError(f"{where}: column {field.name!r} of type {column.type} cannot be read as "
                                f"{field.type}: {exc}") from None
        columns.append(column)
    return pa.Table.from_arrays(columns, schema=pa.schema(list(schema), metadata=schema.metadata))


class SparkTableSource:
    """What the job graph holds for ``from_spark_table`` (location + schema + options)."""

    def __init__(self, location: str, arrow_schema: pa.Schema, poll_interval: float, record_format: str,
                 timestamp_column: Optional[str], watermark_delay_ms: Optional[int],
                 start_from: str, description: str) -> None:
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
        self._skip = 0  # rows of the next file read that a restored checkpoint had emitted
        self._next_poll = 0.0
        self._wakeup = threading.Event()
        self.files_read = 0

    def open(self) -> None:
        source = self.source
        self._fs, self._root = _filesystem(source.location)
        self._emitter = _RecordEmitter(self, source.record_format, source.timestamp_column,
                                       source.watermark_delay_ms)
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
            relative = entry.path[len(self._root):].lstrip("/")
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
        return conform_table(table, self.source.arrow_schema, _partition_values(relative),
                             f"source {self.name!r} reading {path}")

    def emit_next(self, max_records: int = 1024) -> bool:
        if self.finished or self.cancelled:
            return False
        while self._table is None or self._offset >= self._table.num_rows:
            self._table = None
            if self._queue:
                self._current = self._queue.pop(0)
                self._table = self._read(self._current)
                self._offset, self._skip = self._skip, 0
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
        return {"seen": sorted(self._seen),
                "queue": ([self._current] if reading else []) + list(self._queue),
                "offset": self._offset if reading else 0}

    def restore_operator_state(self, state: dict) -> None:
        """Continue after the checkpoint: files it had not read yet are queued again, and the
        file it was reading resumes at the row after the last one it emitted."""
        self._seen = set(state["seen"])
        self._queue = list(state["queue"])
        self._skip = state["offset"]
        self._table, self._current, self._offset = None, None, 0


def resolve_table_location(path_or_table: str, spark: Any = None) -> "tuple[str, Any, str]":
    """(location, Spark schema or None, description) of a directory path or a table name."""
    looks_like_path = "/" in path_or_table or "://" in path_or_table or path_or_table.startswith(".")
    if looks_like_path:
        return path_or_table, None, f"path {path_or_table}"
    from raylink.connectors.spark.identifiers import quote_table_name
    from raylink.connectors.spark.session import get_spark
    from raylink.connectors.spark.types import _java_message

    try:
        table = quote_table_name(path_or_table)  # never raw text in SQL
    except ValueError as exc:
        raise ValueError(f"from_spark_table: {exc}") from None
    spark = spark or get_spark()
    try:
        rows = spark.sql(f"DESCRIBE TABLE EXTENDED {table}").collect()
    except Exception as exc:
        raise ValueError(f"from_spark_table: no table {path_or_table!r}: {_java_message(exc)}") from None
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


def prepare_table_source(path_or_table: str, schema: Any = None, poll_interval: float = 1.0,
                         record_format: str = "tuple", timestamp_column: Optional[str] = None,
                         watermark_delay_ms: Optional[int] = None,
                         start_from: str = "earliest",
                         configuration: Any = None) -> "tuple[SparkTableSource, SparkRowType]":
    where = "from_spark_table"
    if not isinstance(path_or_table, str) or not path_or_table:
        raise TypeError(f"{where}: expected a directory path or a table name, got {path_or_table!r}")
    if not poll_interval or poll_interval <= 0:
        raise ValueError(f"{where}: poll_interval must be > 0 seconds, got {poll_interval!r}")
    if start_from not in ("earliest", "latest"):
        raise ValueError(f"{where}: start_from must be 'earliest' or 'latest', got {start_from!r}")
    from raylink.connectors.spark.session import get_spark
    from raylink.connectors.spark.types import arrow_schema_of, resolve_schema

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
            from raylink.connectors.spark.types import _java_message

            raise ValueError(
                f"{where}: cannot read a schema from {location!r} ({_java_message(exc)}); "
                "pass schema= when the directory is still empty"
            ) from None
    _check_emit_options(tuple(spark_schema.names), record_format, timestamp_column, watermark_delay_ms, where)
    source = SparkTableSource(location, arrow_schema_of(spark_schema), float(poll_interval), record_format,
                              timestamp_column, watermark_delay_ms, start_from, description)
    return source, row_type(spark_schema, record_format)


__all__ = [
    "SOURCE_KIND",
    "SparkSource",
    "SparkDataFrameSource",
    "SparkBlockSourceOperator",
    "SparkTableSource",
    "ParquetDirectorySourceOperator",
    "prepare_spark_source",
    "prepare_table_source",
    "resolve_table_location",
    "block_range",
    "conform_table",
]
