"""Arrow conversion of the Spark bridge: records to Arrow batches (the sink), Arrow tables to records
(the sources), Arrow IPC blocks to a Spark DataFrame.

* **Records → Arrow.** :class:`RecordConverter` turns a list of records (tuples/lists by
  position, dicts, ``pyspark.sql.Row``\\ s or namedtuples by name, a bare value for a
  one-column schema; PyFlink ``Row``\\ s by name when named, else by position) into a
  ``pa.RecordBatch`` of the sink's schema, checking every column
  against the Arrow type; a record that does not fit raises :class:`SparkSchemaError`
  naming the operator, the record, the field and the value. :func:`conform_batch` takes a
  record batch to the sink's schema by name (cast). :func:`ipc_bytes` seals
  batches into one Arrow IPC stream (a block).
* **Arrow → records.** :class:`RecordEmitter` emits slices of Arrow tables as tuples,
  dicts or PyFlink ``Row``\\ s through a source operator (with event timestamps from a column and
  bounded-out-of-orderness watermarks); :func:`conform_table` casts a table read from a
  file to a schema by name.
* **Blocks → Spark.** :func:`blocks_to_dataframe` turns Arrow IPC blocks in the object
  store into one Spark DataFrame with the schema's exact types (RayDP; driver only).

Pure pyarrow except :func:`blocks_to_dataframe` (pyspark, raydp). A converter or an
emitter belongs to one operator (one task thread). Mirrors Spark's
``ArrowConverters`` / PyFlink's Arrow coders in role; the code is raylink's.
"""

from __future__ import annotations

import datetime as _dt
import decimal
import numbers
from itertools import groupby
from typing import Any, List, Optional, Sequence

import pyarrow as pa
import pyarrow.compute as pc

from raylink.connectors.spark.types import RECORD_FORMATS, arrow_schema_of
from raylink.core.reprs import record_repr
from raylink.core.row import Row as _Row
from raylink.core.row import make_row
from raylink.errors import RaylinkError
from raylink.operators.sources import SourceOperator


class SparkSchemaError(RaylinkError, ValueError):
    """A record does not fit the Spark sink's schema."""

    def __init__(
        self,
        message: str,
        operator: str = "",
        field: Optional[str] = None,
        value: Any = None,
        record_index: Optional[int] = None,
    ) -> None:
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

    def _fail(
        self, message: str, field: Optional[str] = None, value: Any = None, index: Optional[int] = None
    ) -> SparkSchemaError:
        return SparkSchemaError(
            f"Spark sink '{self.operator_name}': {message}", self.operator_name, field, value, index
        )

    def _row_tuple(self, row: Any, index: int) -> tuple:
        t = type(row)
        if t is tuple or t is list:
            if len(row) != self.width:
                raise self._fail(
                    f"record {index} has {len(row)} field(s) but the schema has {self.width} "
                    f"({', '.join(self.names)}): {record_repr(row)}",
                    None,
                    row,
                    index,
                )
            return tuple(row)
        if isinstance(row, dict):
            mapping = row
        elif t is _Row:
            names = getattr(row, "_fields", None)
            if names is None:  # a positional Row: by position
                return self._row_tuple(tuple(row._values), index)
            mapping = dict(zip(names, row._values))
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
                f"({', '.join(self.names)}): {record_repr(row)}",
                None,
                row,
                index,
            )
        extra = mapping.keys() - self.name_set
        if extra:
            raise self._fail(
                f"record {index} has field(s) {sorted(map(str, extra))} that are not in the schema "
                f"({', '.join(self.names)})",
                sorted(map(str, extra))[0],
                row,
                index,
            )
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
                    f"({self.spark_types[position]}, NOT NULL) is null",
                    field.name,
                    None,
                    first_index + i,
                )
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
            f"cannot hold {text} of type {type(value).__name__} ({why})",
            name,
            value,
            index,
        )


def ipc_bytes(batches: List[pa.RecordBatch], schema: pa.Schema) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, schema) as writer:
        for batch in batches:
            writer.write_batch(batch)
    return sink.getvalue().to_pybytes()


# -- Arrow -> records ---------------------------------------------------------------------------------
def _has_map(t: pa.DataType) -> bool:
    """True when values of ``t`` hold a map anywhere (nested in lists and structs too)."""
    if pa.types.is_map(t):
        return True
    if pa.types.is_struct(t):
        return any(_has_map(t.field(i).type) for i in range(t.num_fields))
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return _has_map(t.value_type)
    return False


class RecordEmitter:
    """Emits slices of Arrow tables as records (+ timestamps, watermarks) of a source operator.

    Records are built column-wise: each column becomes a Python list once (``to_pylist``;
    maps as dicts), then one tuple, dict or PyFlink ``Row`` per row (``record_format``)."""

    def __init__(
        self,
        operator: SourceOperator,
        record_format: str,
        timestamp_column: Optional[str],
        watermark_delay_ms: Optional[int],
        names: Optional[Sequence[str]] = None,
    ) -> None:
        self.operator = operator
        self.record_format = record_format
        self.timestamp_column = timestamp_column
        self.watermark_delay_ms = watermark_delay_ms
        self.names = list(names) if names is not None else None
        self.max_timestamp: Optional[int] = None
        self._maps: Optional[List[bool]] = None

    def records(self, chunk: Any) -> List[Any]:
        maps = self._maps
        if maps is None or len(maps) != chunk.num_columns:
            maps = self._maps = [_has_map(t) for t in chunk.schema.types]
        # maps as dicts; ``maps_as_pydicts`` costs ~4x on every column, so only where needed
        columns = [
            column.to_pylist(maps_as_pydicts="lossy") if has_map else column.to_pylist()
            for column, has_map in zip(chunk.columns, maps)
        ]
        fmt = self.record_format
        if fmt == "tuple":
            return list(zip(*columns)) if columns else [()] * chunk.num_rows
        names = self.names if self.names is not None else list(chunk.schema.names)
        if fmt == "dict":
            return (
                [dict(zip(names, values)) for values in zip(*columns)]
                if columns
                else [{} for _ in range(chunk.num_rows)]
            )
        if not columns:
            return [make_row(names, []) for _ in range(chunk.num_rows)]
        return [make_row(names, list(values)) for values in zip(*columns)]

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
            operator._collect_batch(records[start : start + n])
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


def check_emit_options(
    names: tuple, record_format: str, timestamp_column: Optional[str], watermark_delay_ms: Optional[int], where: str
) -> None:
    if record_format not in RECORD_FORMATS:
        raise ValueError(f"{where}: record_format must be one of {RECORD_FORMATS}, got {record_format!r}")
    if timestamp_column is not None and timestamp_column not in names:
        raise ValueError(f"{where}: timestamp_column {timestamp_column!r} is not a column of {list(names)}")
    if watermark_delay_ms is not None:
        if timestamp_column is None:
            raise ValueError(f"{where}: watermark_delay_ms needs a timestamp_column")
        if int(watermark_delay_ms) < 0:
            raise ValueError(f"{where}: watermark_delay_ms must be >= 0, got {watermark_delay_ms}")


def conform_batch(batch: pa.RecordBatch, schema: pa.Schema, operator_name: str) -> pa.RecordBatch:
    """``batch`` as a batch of exactly ``schema``: columns by name, cast where the types differ;
    a missing or extra column, or one that cannot be cast, raises :class:`SparkSchemaError`."""
    if batch.schema.equals(schema):
        return batch
    names = batch.schema.names
    missing = [n for n in schema.names if n not in names]
    extra = [n for n in names if n not in schema.names]
    if missing or extra or len(set(names)) != len(names):
        raise SparkSchemaError(
            f"Spark sink '{operator_name}': a record batch with columns {names} does not fit the schema "
            f"{schema.names} (missing {missing}, unexpected {extra})",
            operator_name,
            (missing or extra or [None])[0],
        )
    columns = []
    for field in schema:
        column = batch.column(field.name)
        if not column.type.equals(field.type):
            try:
                column = pc.cast(column, field.type)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
                raise SparkSchemaError(
                    f"Spark sink '{operator_name}': column {field.name!r} of type {column.type} cannot be "
                    f"written as {field.type}: {exc}",
                    operator_name,
                    field.name,
                ) from None
        columns.append(column)
    return pa.RecordBatch.from_arrays(columns, schema=schema)


# -- Arrow tables of files ----------------------------------------------------------------------------
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
                raise TypeError(
                    f"{where}: column {field.name!r} of type {column.type} cannot be read as {field.type}: {exc}"
                ) from None
        columns.append(column)
    return pa.Table.from_arrays(columns, schema=pa.schema(list(schema), metadata=schema.metadata))


# -- Arrow blocks -> Spark ----------------------------------------------------------------------------
def blocks_to_dataframe(spark: Any, refs: List[Any], schema: Any) -> Any:
    """One Spark DataFrame of Arrow IPC blocks (refs), with exactly ``schema``'s types."""
    from pyspark.sql import functions as F
    from raydp.spark.dataset import ray_dataset_to_spark_dataframe

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


__all__ = [
    "RecordConverter",
    "RecordEmitter",
    "SparkSchemaError",
    "blocks_to_dataframe",
    "check_emit_options",
    "conform_table",
    "conform_batch",
    "ipc_bytes",
]
