"""The Spark sink: ``stream.sink_to_spark(...)`` / ``stream.sink_to(SparkSink(...))``.

Each sink subtask buffers its records, converts them every ``batch_rows``
records into an Arrow record batch of the sink's schema (checked field by
field: a record that does not fit fails the task naming the operator, the
record, the field and the value), and seals the batches into blocks of about
``block_bytes`` (Arrow IPC streams). Then, by target:

* **no path/table — a result DataFrame.** At end of input the blocks go *by
  value* into the task's accumulators (``spark-sink:<id>``; the JobMaster
  concatenates the lists). TaskExecutor actors die with the job, so objects
  they ``ray.put`` would die with them; bytes returned to the driver are owned
  by the driver. ``get_spark_dataframe(result)`` puts them in the object store
  from the driver and turns them into one Spark DataFrame
  (RayDP's ``ray_dataset_to_spark_dataframe``, the core of ``ray.data.from_arrow_refs(refs)
  .to_spark(spark)``); RayDP's master actor keeps the
  refs alive for the lifetime of the Spark session.
* **path or table — a Spark write.** The blocks are ``ray.put`` by the subtask
  and committed through the driver's bridge (:mod:`.bridge`): bounded, one
  Spark write of the whole output with ``mode`` when every subtask finished;
  with ``flush_interval`` (seconds) a processing-time timer commits what
  arrived every interval as one append, so a long-running job keeps the table
  current.

Schema: explicit (DDL string, ``StructType`` or ``[(name, ddl type), ...]``) or
the stream's type (the schema ``from_spark`` puts on the stream, or
``Types.ROW_NAMED``). Records may be tuples/lists (by position), dicts or
``pyspark.sql.Row``\\ s (by name), namedtuples, or a bare value for a one-column
schema. Naive ``datetime``\\ s are taken as UTC.
"""

from __future__ import annotations

import datetime as _dt
import decimal
import json
import numbers
import uuid
from typing import Any, Dict, List, Optional, Sequence

import pyarrow as pa

from raylink.operators.base import StreamOperator

from raylink.connectors.spark.identifiers import quote_table_name
from raylink.connectors.spark.types import SPARK_SCHEMA_METADATA
from raylink.shuffle.reprs import record_repr

SINK_KIND = "sink_connector"
RESULT_PREFIX = "spark-sink:"
DEFAULT_BATCH_ROWS = 4096
DEFAULT_BLOCK_BYTES = 8 * 1024 * 1024
WRITE_MODES = ("append", "overwrite", "error", "errorifexists", "ignore")


class SparkSchemaError(ValueError):
    """A record does not fit the Spark sink's schema."""

    def __init__(self, message: str, operator: str = "", field: Optional[str] = None,
                 value: Any = None, record_index: Optional[int] = None) -> None:
        super().__init__(message)
        self.operator = operator
        self.field = field
        self.value = value
        self.record_index = record_index

    def __reduce__(self):
        value = self.value
        try:
            import pickle

            pickle.dumps(value)
        except Exception:
            value = record_repr(value)
        return (SparkSchemaError, (self.args[0], self.operator, self.field, value, self.record_index))


# -- records -> Arrow --------------------------------------------------------------------------------
def _allowed_types(t: pa.DataType) -> Optional[tuple]:
    """Python classes a column of Arrow type ``t`` accepts (None: let pyarrow decide)."""
    if pa.types.is_boolean(t):
        return (bool,)
    if pa.types.is_integer(t):
        return (numbers.Integral,)  # int, numpy integers; bool is refused below
    if pa.types.is_floating(t):
        return (numbers.Real,)
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return (str,)
    if pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return (bytes, bytearray)
    if pa.types.is_decimal(t):
        return (decimal.Decimal, numbers.Integral)
    if pa.types.is_timestamp(t):
        return (_dt.datetime,)
    if pa.types.is_date(t):
        return (_dt.date,)
    return None


_NoneType = type(None)


class RecordConverter:
    """Records → ``pa.RecordBatch`` of ``schema``, with errors that name the misfit."""

    def __init__(self, schema: pa.Schema, spark_types: Sequence[str], operator_name: str) -> None:
        self.schema = schema
        self.names = list(schema.names)
        self.name_set = frozenset(self.names)
        self.width = len(self.names)
        self.spark_types = list(spark_types)
        self.operator_name = operator_name
        self.allowed = [_allowed_types(f.type) for f in schema]

    def _fail(self, message: str, field: Optional[str] = None, value: Any = None,
              index: Optional[int] = None) -> SparkSchemaError:
        return SparkSchemaError(f"Spark sink '{self.operator_name}': {message}", self.operator_name,
                                field, value, index)

    def _row_tuple(self, row: Any, index: int) -> tuple:
        t = type(row)
        if t is tuple or t is list:
            if len(row) != self.width:
                raise self._fail(
                    f"record {index} has {len(row)} field(s) but the schema has {self.width} "
                    f"({', '.join(self.names)}): {record_repr(row)}", None, row, index)
            return tuple(row)
        if isinstance(row, dict):
            mapping = row
        elif callable(getattr(row, "asDict", None)) and getattr(row, "__fields__", None):
            mapping = row.asDict()
        elif isinstance(row, tuple) and hasattr(row, "_fields"):
            mapping = row._asdict()
        elif isinstance(row, (tuple, list)):
            return self._row_tuple(tuple(row), index)
        elif self.width == 1:
            return (row,)
        else:
            raise self._fail(
                f"record {index} of type {t.__name__} cannot be written as a row of "
                f"({', '.join(self.names)}): {record_repr(row)}", None, row, index)
        extra = mapping.keys() - self.name_set
        if extra:
            raise self._fail(
                f"record {index} has field(s) {sorted(map(str, extra))} that are not in the schema "
                f"({', '.join(self.names)})", sorted(map(str, extra))[0], row, index)
        return tuple(mapping.get(name) for name in self.names)

    def _columns(self, rows: List[Any], first_index: int) -> List[tuple]:
        width = self.width
        if all(type(r) is tuple for r in rows) and all(len(r) == width for r in rows):
            tuples = rows
        else:
            tuples = [self._row_tuple(r, first_index + i) for i, r in enumerate(rows)]
        if not tuples:
            return [() for _ in range(width)]
        return list(zip(*tuples))

    def to_batch(self, rows: List[Any], first_index: int) -> pa.RecordBatch:
        columns = self._columns(rows, first_index)
        arrays = []
        for position, (field, values) in enumerate(zip(self.schema, columns)):
            allowed = self.allowed[position]
            if allowed is not None:
                kinds = set(map(type, values))
                kinds.discard(_NoneType)
                bad = [k for k in kinds if not issubclass(k, allowed) or (k is bool and bool not in allowed)]
                if bad:
                    i = next(i for i, v in enumerate(values) if type(v) in bad)
                    raise self._value_error(position, values[i], first_index + i, "wrong type")
            try:
                array = pa.array(values, type=field.type, from_pandas=False)
            except (pa.ArrowException, OverflowError, TypeError, ValueError) as exc:
                i, value = self._first_bad(field.type, values)
                raise self._value_error(position, value, first_index + i, f"{type(exc).__name__}: {exc}") from None
            if not field.nullable and array.null_count:
                i = next(i for i, v in enumerate(values) if v is None)
                raise self._fail(
                    f"record {first_index + i} does not fit the schema: field '{field.name}' "
                    f"({self.spark_types[position]}, NOT NULL) is null", field.name, None, first_index + i)
            arrays.append(array)
        return pa.RecordBatch.from_arrays(arrays, schema=self.schema)

    @staticmethod
    def _first_bad(t: pa.DataType, values: tuple) -> "tuple[int, Any]":
        for i, v in enumerate(values):
            try:
                pa.array([v], type=t, from_pandas=False)
            except Exception:
                return i, v
        return 0, values[0] if values else None

    def _value_error(self, position: int, value: Any, index: int, why: str) -> SparkSchemaError:
        name = self.names[position]
        text = record_repr(value, 200)
        return self._fail(
            f"record {index} does not fit the schema: field '{name}' ({self.spark_types[position]}) "
            f"cannot hold {text} of type {type(value).__name__} ({why})", name, value, index)


def ipc_bytes(batches: List[pa.RecordBatch], schema: pa.Schema) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, schema) as writer:
        for batch in batches:
            writer.write_batch(batch)
    return sink.getvalue().to_pybytes()


# -- the operator --------------------------------------------------------------------------------------
class SparkSinkOperator(StreamOperator):
    """Buffers records into Arrow blocks; hands them to the driver (result) or to Spark (write)."""

    last_latency_marker: Any = None

    def __init__(self, sink: "SparkSink", name: str = "", operator_id: str = "") -> None:
        super().__init__(name or sink.name, operator_id)
        self.sink = sink
        self._rows: List[Any] = []
        self._batches: List[pa.RecordBatch] = []
        self._batch_bytes = 0
        self._blocks: List[Any] = []  # bytes (result mode) or ObjectRefs (write mode)
        self._block_rows = 0
        self._records = 0
        self._timer: Any = None
        self._closed = False
        self.commits = 0

    def open(self) -> None:
        sink = self.sink
        self._converter = RecordConverter(sink.arrow_schema, sink.spark_types, self.name)
        if sink.flush_interval:
            self._schedule()

    # -- input ------------------------------------------------------------------------------------
    def process_element(self, value: Any) -> None:
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
        batch = self._converter.to_batch(rows, self._records)
        self._records += len(rows)
        self._batches.append(batch)
        self._batch_bytes += batch.nbytes
        if self._batch_bytes >= self.sink.block_bytes:
            self._seal()

    def _seal(self) -> None:
        if not self._batches:
            return
        data = ipc_bytes(self._batches, self.sink.arrow_schema)
        self._block_rows += sum(b.num_rows for b in self._batches)
        self._batches, self._batch_bytes = [], 0
        if self.sink.writes:
            import ray

            self._blocks.append(ray.put(data))
        else:
            self._blocks.append(data)

    # -- delivery ---------------------------------------------------------------------------------
    def _commit(self, final: bool) -> None:
        import ray

        sink = self.sink
        rc = self.runtime_context
        blocks, rows = self._blocks, self._block_rows
        self._blocks, self._block_rows = [], 0
        request = {
            "id": uuid.uuid4().hex, "sink_id": sink.sink_id, "subtask": rc.subtask_index,
            "parallelism": rc.parallelism, "final": final, "continuous": bool(sink.flush_interval),
            "blocks": blocks, "rows": rows,
        }
        try:
            ray.get(sink.bridge.commit.remote(request))
        except ray.exceptions.RayTaskError as exc:
            from raylink.connectors.spark.bridge import CommitError

            cause = getattr(exc, "cause", None)
            if isinstance(cause, CommitError):
                raise CommitError(str(cause)) from None
            raise RuntimeError(f"Spark sink '{self.name}': commit failed: {cause or exc}") from None
        except ray.exceptions.RayActorError:
            raise RuntimeError(
                f"Spark sink '{self.name}': the driver's Spark bridge is gone "
                "(raylink.connectors.spark.stop() was called, or the driver exited)") from None
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
        if self._blocks:
            self._commit(final=False)
        self._schedule()

    def end_input(self) -> None:
        self._convert()
        self._seal()
        sink = self.sink
        if sink.writes:
            if self._blocks or not sink.flush_interval:
                self._commit(final=True)
            return
        accumulators = self.runtime_context.accumulators
        key = RESULT_PREFIX + sink.sink_id
        accumulators.setdefault(key, []).extend(self._blocks)
        accumulators[key + "#rows"] = accumulators.get(key + "#rows", 0) + self._block_rows
        accumulators[key + "#schema"] = sink.schema_json
        accumulators[key + "#name"] = sink.name
        self._blocks, self._block_rows = [], 0

    def close(self) -> None:
        self._closed = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._rows, self._batches, self._blocks = [], [], []


# -- the sink (driver side + what the job graph holds) -------------------------------------------------
class SparkSink:
    """A Spark sink: ``stream.sink_to(SparkSink(schema=..., table=...))`` or via ``sink_to_spark``.

    ``flush_interval`` (seconds) makes it continuous: one Spark append per interval
    (needs ``path`` or ``table``). ``mode`` applies to the whole output of a bounded
    sink, and to the first write of a continuous one.
    """

    def __init__(self, path: Optional[str] = None, table: Optional[str] = None, schema: Any = None,
                 mode: str = "append", format: Optional[str] = None, partition_by: Any = None,
                 options: Optional[Dict[str, str]] = None, flush_interval: Optional[float] = None,
                 name: str = "Spark Sink", batch_rows: int = DEFAULT_BATCH_ROWS,
                 block_bytes: int = DEFAULT_BLOCK_BYTES, stream_type: Any = None,
                 configuration: Any = None) -> None:
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
                raise ValueError(f"sink_to_spark: a continuous sink supports mode 'append' or 'overwrite', got {mode!r}")
        if isinstance(partition_by, str):
            partition_by = [partition_by]
        if int(batch_rows) < 1 or int(block_bytes) < 1:
            raise ValueError("sink_to_spark: batch_rows and block_bytes must be >= 1")
        from raylink.connectors.spark.session import get_spark
        from raylink.connectors.spark.types import arrow_schema_of, resolve_schema

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
                raise ValueError(f"sink_to_spark: partition_by column(s) {missing} not in the schema {spark_schema.names}")
        self.schema_json = spark_schema.json()
        self.arrow_schema = arrow_schema_of(spark_schema)
        self.spark_types = [f.dataType.simpleString() for f in spark_schema.fields]
        self.commits: List[dict] = []  # driver side: what the commit thread wrote
        self.bridge = None
        if self.writes:
            from raylink.connectors.spark.bridge import register_sink_target

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
        state["commits"] = []
        return state

    def describe(self) -> str:
        return f"table {self.table}" if self.table else f"path {self.path}"

    def __repr__(self) -> str:
        target = self.describe() if self.writes else "result DataFrame"
        return f"SparkSink({self.name!r} -> {target})"

    # -- driver side ------------------------------------------------------------------------------
    def spark_schema(self) -> Any:
        from pyspark.sql.types import StructType

        return StructType.fromJson(json.loads(self.schema_json))

    def write(self, refs: List[Any], mode: str) -> None:
        """Write blocks with Spark (called by the driver's commit thread)."""
        from raylink.connectors.spark.session import get_spark

        spark = get_spark()
        df = blocks_to_dataframe(spark, refs, self.spark_schema())
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

    def get_dataframe(self, result: Any, spark: Any = None) -> Any:
        return get_spark_dataframe(result, self, spark)


def _is_struct(schema: Any) -> bool:
    try:
        from pyspark.sql.types import StructType
    except ImportError:  # pragma: no cover
        return False
    return isinstance(schema, StructType)


def _table_provider(spark: Any, table: str) -> Optional[str]:
    """The table's provider (format), ``table`` already quoted (:func:`quote_table_name`)."""
    if not spark.catalog.tableExists(table):
        return None
    for row in spark.sql(f"DESCRIBE TABLE EXTENDED {table}").collect():
        if row[0] and row[0].strip() == "Provider":
            return (row[1] or "").strip() or None
    return None


def _keep_alive(spark: Any, refs: List[Any]) -> None:
    """Keep block refs alive as long as the Spark session (RayDP's master holds them,
    as RayDP does for its own conversions); else for the life of this process."""
    import ray

    try:
        from raydp.spark.ray_cluster_master import RAYDP_SPARK_MASTER_SUFFIX

        holder = ray.get_actor(spark.sparkContext.appName + RAYDP_SPARK_MASTER_SUFFIX)
        ray.get(holder.add_objects.remote(uuid.uuid4().hex, list(refs)))
    except Exception:
        _KEPT.append(list(refs))


_KEPT: List[list] = []


def blocks_to_dataframe(spark: Any, refs: List[Any], schema: Any) -> Any:
    """One Spark DataFrame of Arrow IPC blocks (refs), with exactly ``schema``'s types."""
    from pyspark.sql import functions as F
    from raydp.spark.dataset import ray_dataset_to_spark_dataframe

    from raylink.connectors.spark.types import arrow_schema_of

    if not refs:
        return spark.createDataFrame([], schema)
    # What ``ray.data.from_arrow_refs(refs).to_spark(spark)`` does, minus Ray Data's
    # metadata tasks: those need a whole free CPU, which a small cluster running a
    # job (TaskExecutors hold fractional CPUs) may not have -- the write would hang.
    # Spark's executors read the IPC blocks straight from the object store.
    df = ray_dataset_to_spark_dataframe(spark, arrow_schema_of(schema), list(refs))
    got = [(f.name, f.dataType.simpleString()) for f in df.schema.fields]
    if got != [(f.name, f.dataType.simpleString()) for f in schema.fields]:  # e.g. timestamp_ntz
        df = df.select([F.col(f"`{f.name}`").cast(f.dataType).alias(f.name) for f in schema.fields])
    return df


def result_sinks(result: Any) -> Dict[str, str]:
    """``{sink_id: sink name}`` of the Spark result sinks in a ``JobExecutionResult``."""
    accumulators = result.accumulators if hasattr(result, "accumulators") else dict(result)
    return {
        key[len(RESULT_PREFIX):-len("#name")]: value
        for key, value in accumulators.items()
        if key.startswith(RESULT_PREFIX) and key.endswith("#name")
    }


def get_spark_dataframe(result: Any, sink: Any = None, spark: Any = None) -> Any:
    """The Spark DataFrame a result-mode Spark sink produced in the job of ``result``.

    ``sink``: the ``SparkSink``, the ``DataStreamSink`` returned by ``sink_to_spark``,
    a sink name, or ``None`` when the job has exactly one Spark result sink.
    """
    import ray

    from raylink.connectors.spark.session import get_spark

    accumulators = result.accumulators
    sinks = result_sinks(result)
    sink_id = None
    if sink is None:
        if len(sinks) != 1:
            raise ValueError(
                f"get_spark_dataframe: the job has {len(sinks)} Spark result sinks "
                f"({sorted(sinks.values())}); say which one")
        sink_id = next(iter(sinks))
    else:
        function = getattr(getattr(getattr(sink, "_transformation", None), "operator", None), "function", None)
        if isinstance(function, SparkSink):
            sink = function
        if isinstance(sink, SparkSink):
            sink_id = sink.sink_id
        elif isinstance(sink, str):
            matches = [i for i, n in sinks.items() if n == sink]
            if len(matches) != 1:
                raise ValueError(f"get_spark_dataframe: {len(matches)} Spark result sinks are named {sink!r}")
            sink_id = matches[0]
        if sink_id not in sinks:
            raise ValueError(
                "get_spark_dataframe: that Spark sink produced no result in this job (it writes to a "
                "path/table, belongs to another job, or the job did not finish)")
    key = RESULT_PREFIX + sink_id
    from pyspark.sql.types import StructType

    schema = StructType.fromJson(json.loads(accumulators[key + "#schema"]))
    spark = spark or get_spark()
    refs = [ray.put(block) for block in accumulators.get(key, []) if block]
    if refs:
        _keep_alive(spark, refs)
    return blocks_to_dataframe(spark, refs, schema)


def result_rows(result: Any, sink: Any = None) -> int:
    """Rows a Spark result sink produced (without building the DataFrame)."""
    sinks = result_sinks(result)
    ids = list(sinks) if sink is None else [getattr(sink, "sink_id", sink)]
    return sum(result.accumulators.get(RESULT_PREFIX + i + "#rows", 0) for i in ids)


__all__ = [
    "SINK_KIND",
    "SparkSink",
    "SparkSinkOperator",
    "SparkSchemaError",
    "RecordConverter",
    "get_spark_dataframe",
    "result_sinks",
    "result_rows",
    "blocks_to_dataframe",
    "SPARK_SCHEMA_METADATA",
]
