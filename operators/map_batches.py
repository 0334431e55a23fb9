"""``DataStream.map_batches(fn, batch_format)``: a user function over columnar batches.

The naming model is Ray Data's ``Dataset.map_batches(fn, batch_format="pyarrow" | "pandas")``
(Flink has no such call; the operator plays the part of a ``StreamMap`` whose element is a
whole Arrow record batch). ``fn`` gets a ``pyarrow.RecordBatch`` (``"pyarrow"``) or a
``pandas.DataFrame`` (``"pandas"``) and returns the same kind (a ``pyarrow.Table`` is
accepted too); anything else fails the task naming the operator, as does a batch whose
schema differs from the first batch the function returned.

Columnar where the data is: a ``pyarrow.RecordBatch`` is a stream element of its own. An
upstream that holds Arrow data (``from_spark``, another ``map_batches``) hands whole batches
to this operator when it is chained to it; rows (tuples, dicts, PyFlink ``Row``\\ s) from a
row operator are gathered into a batch of up to ``batch_size`` rows, which is handed to
``fn`` when it is full, :data:`FLUSH_AFTER_MS` after its first row (a processing-time
timer, so a slow unbounded input is not held back), before every checkpoint's snapshot (so no buffered row is missing
from a checkpoint: the rows go downstream ahead of the barrier) and at the end of input.
What ``fn`` returns goes on as ONE batch element when every consumer of this operator is
chained to it and takes batches (:data:`ACCEPTS_RECORD_BATCHES`: another ``map_batches``,
the Spark sink); otherwise it is exploded into tuple rows, so a row function downstream
keeps working and rows are built only where one needs them.

On a ``KeyedStream`` (:class:`KeyedMapBatchesOperator`), ``fn`` gets the rows of one key at a
time: the rows gathered since the last flush are split by key (each key's rows in arrival
order, the keys in the order they first arrived), and the backend's current key is that key
while ``fn`` runs, so keyed state a function object registered in ``open(runtime_context)``
is that key's (Ray Data's ``groupby(...).map_groups(fn)``, over a stream). Rows reach it across
the keyed exchange; an Arrow batch reaching it is split into rows first.

Per-record event timestamps do not survive a batch (the batches carry none). One instance
per subtask, driven by the task thread only (not thread-safe, like every operator). A function
object's ``open(runtime_context)`` / ``close()`` are called as for ``map``.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence

from raylink.operators.base import AbstractUdfStreamOperator
from raylink.operators.basic import _KeyedContext

BATCH_FORMATS = ("pyarrow", "pandas")
DEFAULT_BATCH_SIZE = 4096
#: gathered rows wait at most this long for their batch to fill (a slow unbounded input)
FLUSH_AFTER_MS = 100
#: class attribute of an operator that takes ``pyarrow.RecordBatch`` elements as ``N`` rows
ACCEPTS_RECORD_BATCHES = "accepts_record_batches"


def downstream_accepts_batches(output: Any) -> bool:
    """True when every main output of ``output`` (an operator's ``OutputCollector``) is a
    chained operator that takes record batch elements (no network edge, no row consumer)."""
    main = getattr(output, "_main", None)
    if not main:
        return False
    return all(getattr(getattr(o, "operator", None), ACCEPTS_RECORD_BATCHES, False) for o in main)


def rows_of(batch: Any) -> List[tuple]:
    """The rows of ``batch`` as tuples (column-wise ``to_pylist`` once, then ``zip``)."""
    columns = [column.to_pylist() for column in batch.columns]
    return list(zip(*columns)) if columns else [()] * batch.num_rows


def batch_of_rows(rows: List[Any], names: Optional[Sequence[str]]) -> Any:
    """Rows (tuples/lists by position, dicts or PyFlink ``Row``\\ s by name) as one record batch;
    positional rows take ``names`` (``f0``, ``f1`` ... without)."""
    import pyarrow as pa

    first = rows[0]
    if isinstance(first, dict):
        return pa.RecordBatch.from_pylist(rows)
    as_dict = getattr(first, "as_dict", None)
    if callable(as_dict) and getattr(first, "_fields", None):  # a named PyFlink Row
        return pa.RecordBatch.from_pylist([r.as_dict() for r in rows])
    if not isinstance(first, (tuple, list)):  # a bare value: one column
        return pa.RecordBatch.from_arrays([pa.array(rows)], names=[names[0] if names else "f0"])
    width = len(first)
    columns = list(zip(*rows))
    if names is None or len(names) != width:
        names = [f"f{i}" for i in range(width)]
    return pa.RecordBatch.from_arrays([pa.array(list(c)) for c in columns], names=list(names))


class MapBatchesOperator(AbstractUdfStreamOperator):
    """Calls ``fn`` on each Arrow batch (or the rows gathered into one); emits batches or rows."""

    accepts_record_batches = True

    def __init__(
        self,
        function: Any,
        batch_format: str = "pyarrow",
        batch_size: int = DEFAULT_BATCH_SIZE,
        input_names: Optional[Sequence[str]] = None,
        name: str = "",
        operator_id: str = "",
    ) -> None:
        super().__init__(function, name or "Map Batches", operator_id)
        if batch_format not in BATCH_FORMATS:
            raise ValueError(f"map_batches: batch_format must be one of {BATCH_FORMATS}, got {batch_format!r}")
        self.batch_format = batch_format
        self.batch_size = batch_size
        self.input_names = tuple(input_names) if input_names is not None else None
        self._rows: List[Any] = []
        self._schema: Any = None  # the schema of the first batch fn returned
        self.emit_batches = False
        self.batches_in = 0
        self._timer: Any = None  # the flush timer of the rows gathered so far

    def open(self) -> None:
        import pyarrow as pa

        self._pa = pa
        fn = self.function
        if not callable(fn):  # an object with map_batches(batch)
            fn = getattr(fn, "map_batches", None)
        if not callable(fn):
            raise TypeError(
                f"map_batches {self.name!r}: expected a callable or an object with map_batches(batch), "
                f"got {type(self.function).__name__}"
            )
        if fn is not self.function:
            self._lifecycle.append(self.function)  # its open(runtime_context) / close()
        self._fn = fn
        self.emit_batches = downstream_accepts_batches(self.output)
        self._open_functions()

    # -- input ------------------------------------------------------------------------------------
    def process_element(self, value: Any) -> None:
        if isinstance(value, self._pa.RecordBatch):
            self._flush()  # rows that came first go first
            self._apply(value)
            return
        self._rows.append(value)
        if len(self._rows) >= self.batch_size:
            self._flush()
        elif self._timer is None:
            self._schedule()

    def process_batch(self, values: List[Any]) -> None:
        record_batch = self._pa.RecordBatch
        for value in values:
            if isinstance(value, record_batch):
                self.process_element(value)
                continue
            self._rows.append(value)
            if len(self._rows) >= self.batch_size:
                self._flush()
        if self._rows and self._timer is None:
            self._schedule()

    def _schedule(self) -> None:
        service = getattr(self.runtime_context, "processing_time_service", None)
        if service is not None:
            self._timer = service.register_timer(service.current_processing_time() + FLUSH_AFTER_MS, self._on_timer)

    def _on_timer(self, _timestamp: int) -> None:
        self._timer = None
        self._flush()

    def _flush(self) -> None:
        rows = self._rows
        if not rows:
            return
        self._rows = []
        try:
            batch = batch_of_rows(rows, self.input_names)
        except (self._pa.ArrowException, TypeError, ValueError) as exc:
            raise TypeError(
                f"map_batches {self.name!r}: the input rows do not form an Arrow batch: {type(exc).__name__}: {exc}"
            ) from None
        self._apply(batch)

    # -- the function -----------------------------------------------------------------------------
    def _apply(self, batch: Any) -> None:
        pa = self._pa
        self.batches_in += 1
        if self.batch_format == "pandas":
            result = self._fn(batch.to_pandas())
            result = self._from_pandas(result)
        else:
            result = self._fn(batch)
        if isinstance(result, pa.Table):  # one batch of it (combine_chunks: one chunk per column)
            batches = result.combine_chunks().to_batches()
            result = batches[0] if batches else pa.RecordBatch.from_pylist([], schema=result.schema)
        if not isinstance(result, pa.RecordBatch):
            raise TypeError(
                f"map_batches {self.name!r}: the function returned {type(result).__module__}."
                f"{type(result).__qualname__}; expected a pyarrow.RecordBatch (batch_format={self.batch_format!r})"
            )
        if self._schema is None:
            self._schema = result.schema
        elif not result.schema.equals(self._schema):
            raise TypeError(
                f"map_batches {self.name!r}: the function returned a batch with schema "
                f"[{_describe(result.schema)}] after batches with [{_describe(self._schema)}]"
            )
        if result.num_rows == 0:
            return
        if self.emit_batches:
            self._collect(result)
        else:
            self._collect_batch(rows_of(result))

    def _from_pandas(self, result: Any) -> Any:
        import pandas as pd

        if isinstance(result, pd.DataFrame):
            try:
                return self._pa.RecordBatch.from_pandas(result, preserve_index=False)
            except (self._pa.ArrowException, TypeError, ValueError) as exc:
                raise TypeError(
                    f"map_batches {self.name!r}: the returned pandas.DataFrame has no Arrow form: {exc}"
                ) from None
        if isinstance(result, (self._pa.RecordBatch, self._pa.Table)):
            return result
        raise TypeError(
            f"map_batches {self.name!r}: the function returned {type(result).__module__}."
            f"{type(result).__qualname__}; expected a pandas.DataFrame (batch_format='pandas')"
        )

    # -- checkpoints and the end --------------------------------------------------------------------
    def snapshot_operator_state(self, checkpoint_id: int) -> None:
        """Gathered rows go through ``fn`` and downstream before the barrier (nothing is kept)."""
        self._flush()
        return None

    def end_input(self) -> None:
        self._flush()


class KeyedMapBatchesOperator(_KeyedContext, MapBatchesOperator):
    """``map_batches`` of a ``KeyedStream``: ``fn`` over the gathered rows of one key at a time,
    that key the backend's current key (its keyed state is that key's)."""

    accepts_record_batches = False  # rows come across the keyed exchange

    def __init__(self, function: Any, key_selector: Any, *args: Any, **kwargs: Any) -> None:
        """``key_selector``, then :class:`MapBatchesOperator`'s arguments."""
        MapBatchesOperator.__init__(self, function, *args, **kwargs)
        self.key_selector = key_selector
        self._sets_key = True

    def process_element(self, value: Any) -> None:
        if isinstance(value, self._pa.RecordBatch):
            self.process_batch(rows_of(value))
            return
        super().process_element(value)

    def process_batch(self, values: List[Any]) -> None:
        record_batch = self._pa.RecordBatch
        if any(isinstance(value, record_batch) for value in values):
            values = [
                row for value in values for row in (rows_of(value) if isinstance(value, record_batch) else (value,))
            ]
        super().process_batch(values)

    def _flush(self) -> None:
        rows = self._rows
        if not rows:
            return
        self._rows = []
        by_key: Dict[Any, List[Any]] = {}
        key_of = self._key_of
        for row in rows:
            key = key_of(row)
            group = by_key.get(key)
            if group is None:
                by_key[key] = [row]
            else:
                group.append(row)
        set_key = self.keyed_state_backend.set_current_key
        for key, group in by_key.items():
            set_key(key)  # raises, naming the key, for None or another subtask's key
            try:
                batch = batch_of_rows(group, self.input_names)
            except (self._pa.ArrowException, TypeError, ValueError) as exc:
                raise TypeError(
                    f"map_batches {self.name!r}: the input rows of key {key!r} do not form an Arrow batch: "
                    f"{type(exc).__name__}: {exc}"
                ) from None
            self._apply(batch)


def _describe(schema: Any) -> str:
    return ", ".join(f"{f.name}: {f.type}" for f in schema)


def create_map_batches_operator(spec: Any) -> MapBatchesOperator:
    params = getattr(spec, "params", None) or {}
    args = (
        spec.function,
        params.get("batch_format", "pyarrow"),
        params.get("batch_size", DEFAULT_BATCH_SIZE),
        params.get("input_names"),
    )
    key_selector = getattr(spec, "key_selector", None)
    if key_selector is not None:
        return KeyedMapBatchesOperator(args[0], key_selector, *args[1:])
    return MapBatchesOperator(*args)


__all__ = [
    "ACCEPTS_RECORD_BATCHES",
    "BATCH_FORMATS",
    "DEFAULT_BATCH_SIZE",
    "FLUSH_AFTER_MS",
    "KeyedMapBatchesOperator",
    "MapBatchesOperator",
    "batch_of_rows",
    "create_map_batches_operator",
    "downstream_accepts_batches",
    "rows_of",
]
