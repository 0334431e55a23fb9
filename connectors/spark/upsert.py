"""Upserts of the Spark sink into Delta and Iceberg tables: ``sink_to_spark(..., upsert_keys=[...])``.

A sink with upsert keys stages each record as a *change* of the row with its keys: the
record's columns plus two hidden columns, :data:`DELETE_COLUMN` (the record is a PyFlink
``Row`` of kind ``DELETE``) and :data:`SEQUENCE_COLUMN` (its place in the subtask's stream).
A ``Row`` of kind ``UPDATE_BEFORE`` is dropped (the ``UPDATE_AFTER`` that follows it carries
the new row), as Flink's upsert sinks (upsert-kafka, Iceberg's upsert mode) do; every other
record (``INSERT``, ``UPDATE_AFTER``, a tuple, dict or ``pyspark.sql.Row``) is an upsert.

Every commit (one per completed checkpoint with checkpointing, else at the end of input or
every ``flush_interval``) applies the commit's changes with ONE Spark SQL statement::

    MERGE INTO target t USING latest s ON t.k1 = s.k1 AND ...
    WHEN MATCHED AND s.<delete> THEN DELETE
    WHEN MATCHED THEN UPDATE SET <every column>
    WHEN NOT MATCHED AND NOT s.<delete> THEN INSERT (<every column>) VALUES (...)

where ``latest`` keeps, per key, only the commit's last change (the highest sequence number):
the table ends as if the changes had been applied one by one. The order is the stream order
of one sink subtask, so a key's changes must all reach the same subtask (the stream keyed by
the upsert keys, e.g. the output of a ``key_by(...).reduce(...)`` at the sink's parallelism;
Flink's upsert sinks ask the same). Key columns must not be null (checked per record by the
operator, naming the column).

Pure functions of Spark DataFrames and names; thread-safe.
"""

from __future__ import annotations

import uuid
from typing import Any, List, Sequence

import pyarrow as pa

from raylink.connectors.spark.identifiers import quote_identifier

#: hidden staged column: the record deletes the row with its keys
DELETE_COLUMN = "__raylink_delete"
#: hidden staged column: the record's place in its subtask's stream (the last change wins)
SEQUENCE_COLUMN = "__raylink_seq"


def check_upsert_keys(keys: Any, columns: Sequence[str], what: str) -> List[str]:
    """``keys`` as a list of column names of ``columns`` (ValueError naming what is wrong)."""
    if isinstance(keys, str):
        keys = [keys]
    keys = list(keys or [])
    if not keys or not all(isinstance(k, str) and k for k in keys):
        raise ValueError(f"{what}: upsert_keys must be a non-empty list of column names, got {keys!r}")
    missing = [k for k in keys if k not in columns]
    if missing:
        raise ValueError(f"{what}: upsert_keys column(s) {missing} not in the schema {list(columns)}")
    if len(set(keys)) != len(keys):
        raise ValueError(f"{what}: upsert_keys names a column twice: {keys!r}")
    return keys


def staged_spark_schema(schema: Any) -> Any:
    """The Spark schema of an upsert sink's staged files: ``schema`` plus the hidden columns."""
    from pyspark.sql.types import BooleanType, LongType, StructField, StructType

    return StructType(
        list(schema.fields)
        + [StructField(DELETE_COLUMN, BooleanType(), False), StructField(SEQUENCE_COLUMN, LongType(), False)]
    )


def with_change_columns(batch: pa.RecordBatch, deletes: List[bool], first_sequence: int) -> pa.RecordBatch:
    """``batch`` plus the hidden columns: ``deletes`` per row, sequence numbers from ``first_sequence``."""
    n = batch.num_rows
    arrays = list(batch.columns) + [
        pa.array(deletes if deletes else [False] * n, pa.bool_()),
        pa.array(range(first_sequence, first_sequence + n), pa.int64()),
    ]
    fields = list(batch.schema) + [
        pa.field(DELETE_COLUMN, pa.bool_(), nullable=False),
        pa.field(SEQUENCE_COLUMN, pa.int64(), nullable=False),
    ]
    return pa.RecordBatch.from_arrays(arrays, schema=pa.schema(fields))


def latest_changes(staged: Any, keys: Sequence[str]) -> Any:
    """Per key, the staged change with the highest sequence number (without that column)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    rank = "__raylink_rank"
    window = Window.partitionBy(*[F.col(quote_identifier(k)) for k in keys]).orderBy(F.col(SEQUENCE_COLUMN).desc())
    return staged.withColumn(rank, F.row_number().over(window)).where(F.col(rank) == 1).drop(rank, SEQUENCE_COLUMN)


def merge_statement(target: str, source: str, columns: Sequence[str], keys: Sequence[str]) -> str:
    """The ``MERGE INTO`` of the module doc (``target`` and ``source`` quoted already)."""
    q = quote_identifier
    on = " AND ".join(f"t.{q(k)} = s.{q(k)}" for k in keys)
    updates = ", ".join(f"t.{q(c)} = s.{q(c)}" for c in columns if c not in keys) or ", ".join(
        f"t.{q(k)} = s.{q(k)}" for k in keys
    )
    names = ", ".join(q(c) for c in columns)
    values = ", ".join(f"s.{q(c)}" for c in columns)
    deleted = f"s.{q(DELETE_COLUMN)}"
    return (
        f"MERGE INTO {target} t USING {source} s ON {on} "
        f"WHEN MATCHED AND {deleted} THEN DELETE "
        f"WHEN MATCHED THEN UPDATE SET {updates} "
        f"WHEN NOT MATCHED AND NOT {deleted} THEN INSERT ({names}) VALUES ({values})"
    )


def merge(session: Any, target: str, staged: Any, columns: Sequence[str], keys: Sequence[str]) -> None:
    """Apply ``staged`` (a DataFrame of ``session`` with the hidden columns) to ``target``."""
    view = f"raylink_upsert_{uuid.uuid4().hex}"
    latest_changes(staged, keys).createOrReplaceTempView(view)
    try:
        session.sql(merge_statement(target, quote_identifier(view), columns, keys)).collect()
    finally:
        session.catalog.dropTempView(view)


__all__ = [
    "DELETE_COLUMN",
    "SEQUENCE_COLUMN",
    "check_upsert_keys",
    "latest_changes",
    "merge",
    "merge_statement",
    "staged_spark_schema",
    "with_change_columns",
]
