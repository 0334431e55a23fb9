"""The bounded Spark source: ``env.from_spark(df)`` and ``env.from_source(SparkSource(df))``.

``from_spark`` returns at once: a driver thread has Spark convert the DataFrame into
Arrow record batches cached on Spark's executors, per partition (RayDP's recoverable
RDD, ``ObjectStoreWriter.prepareRecoverableRDD``: Spark's own ``toArrowBatchRdd``,
persisted ``MEMORY_AND_DISK``), while the job is built and deployed, and posts the
partitions' whereabouts to the driver's bridge actor (:mod:`.bridge`). Each source
subtask then reads its contiguous share of the partitions (``[i*n//p, (i+1)*n//p)``)
straight from the Spark executor actors that hold them (a Ray cross-language call,
``RayDPExecutor.getRDDPartition``: one Arrow IPC stream per partition, fetched one
ahead of the one being emitted) -- no Ray Data, no driver in the data path, at most two
partitions in a subtask's memory. Rows are built from Arrow columns
(:class:`~raylink.connectors.spark.arrow.RecordEmitter`: tuples, dicts or PyFlink
``Row``\\ s) -- unless every consumer of the source is chained to it and takes Arrow
batches (``map_batches``, the Spark sink; no ``timestamp_column``): then each Arrow record
batch Spark made goes on whole, as one element, and no row is built. Without checkpointing a restarted subtask reads its share again, and once
every subtask has finished the cached RDD is released. With checkpointing, checkpoints
hold the partitions emitted and the row reached in the one being emitted; a restored
subtask goes on from there, and a subtask releases its share once a completed
checkpoint holds its end (a restore never reads it again). ``raylink.connectors.spark.stop()``
releases whatever is left (a cancelled or failed job's).

With ``timestamp_column`` every record carries that column as its event timestamp
(ms), and with ``watermark_delay_ms`` the source emits bounded-out-of-orderness
watermarks. Source parallelism is ``min(partitions, requested)``.

:func:`prepare_spark_source` runs on the driver; each :class:`SparkBlockSourceOperator`
runs on its source task's thread. Plays the part of a bounded Flink Source (Flink's
``SourceOperator`` over splits, the partitions being the splits, assigned statically).
"""

from __future__ import annotations

import threading
import uuid
from typing import Any, List, Optional

import ray

from raylink.connectors.spark.arrow import RecordEmitter, check_emit_options
from raylink.connectors.spark.bridge import register_source_release, set_source_release
from raylink.connectors.spark.errors import java_message
from raylink.connectors.spark.session import is_raydp_session, spark_namespace, wait_driver_connected
from raylink.connectors.spark.types import SparkRowType, row_type
from raylink.operators.connector import CONNECTOR_SOURCE as SOURCE_KIND
from raylink.operators.map_batches import downstream_accepts_batches
from raylink.operators.sources import SourceOperator

#: how long one wait for the partitions lasts (the task runs its mails in between)
INFO_WAIT_S = 0.1
#: the executor actors RayDP names after Spark's executor ids
EXECUTOR_ACTOR = "raydp-executor-{}"


class SparkDataFrameSource:
    """What the job graph holds for ``from_spark`` (picklable; no DataFrame, no block refs)."""

    def __init__(
        self,
        source_id: str,
        bridge: Any,
        num_blocks: int,
        names: tuple,
        record_format: str,
        timestamp_column: Optional[str],
        watermark_delay_ms: Optional[int],
    ) -> None:
        self.source_id = source_id
        self.bridge = bridge
        self.num_blocks = num_blocks  # Spark partitions when the source was made
        self.names = names
        self.record_format = record_format
        self.timestamp_column = timestamp_column
        self.watermark_delay_ms = watermark_delay_ms

    def create_operator(self, spec: Any) -> "SparkBlockSourceOperator":
        return SparkBlockSourceOperator(self)

    def __repr__(self) -> str:
        return f"SparkDataFrameSource({self.num_blocks} partitions: {', '.join(self.names)})"


def block_range(num_blocks: int, subtask_index: int, parallelism: int) -> range:
    """Subtask ``subtask_index``'s contiguous share of ``num_blocks`` partitions."""
    return range(subtask_index * num_blocks // parallelism, (subtask_index + 1) * num_blocks // parallelism)


def _enable_cross_language_calls() -> None:
    """Calls to RayDP's Java executor actors need Ray's ``load_code_from_local`` (as RayDP's own
    fetch task sets it)."""
    from ray._private.worker import global_worker

    global_worker.set_load_code_from_local(True)


class SparkBlockSourceOperator(SourceOperator):
    """Reads this subtask's Spark partitions (Arrow IPC streams) from the executors and emits their rows."""

    def __init__(self, source: SparkDataFrameSource, name: str = "", operator_id: str = "") -> None:
        super().__init__(None, name, operator_id)
        self.source = source
        self._info: Optional[dict] = None
        self._todo: List[int] = []
        self._next: Any = None  # (partition, ref) fetched ahead
        self._batches: Any = None  # the record batches of the partition being emitted
        self._batch: Any = None
        self._offset = 0
        self._released = False
        self._executors: dict = {}  # Spark executor id -> its RayDP actor
        self.num_blocks_read = 0
        # checkpoints: partitions emitted whole, the one being emitted and its rows emitted so far
        self._done: List[int] = []
        self._partition: Optional[int] = None
        self._emitted = 0
        self._skip = 0  # rows of the partition being opened that the restored checkpoint had emitted
        self._restored: Optional[dict] = None
        self._end_checkpoint: Optional[int] = None  # the first checkpoint taken after the last row
        self.emit_batches = False  # whole Arrow batches to chained map_batches / Spark sink

    def open(self) -> None:
        source = self.source
        self._emitter = RecordEmitter(
            self, source.record_format, source.timestamp_column, source.watermark_delay_ms, source.names
        )
        # columnar all the way: every consumer is chained and takes record batches (no timestamps to carry)
        self.emit_batches = source.timestamp_column is None and downstream_accepts_batches(self.output)

    # -- partitions ---------------------------------------------------------------------------------
    def _await_info(self) -> bool:
        """True once the partitions are known (False: not yet, ask again)."""
        info = ray.get(self.source.bridge.source_info.remote(self.source.source_id, INFO_WAIT_S))
        if info is None:
            return False
        if "error" in info:
            raise RuntimeError(f"source {self.name!r}: {info['error']}")
        rc = self.runtime_context
        self._info = info
        self._todo = list(block_range(info["num_partitions"], rc.subtask_index, rc.parallelism))
        restored = self._restored
        if restored is not None:  # resume: the partitions being read first, then those not begun
            done, reading = set(restored["done"]), restored["reading"]
            self._done = sorted(done)
            todo = [p for p in self._todo if p not in done]
            self._todo = [p for p in todo if p in reading] + [p for p in todo if p not in reading]
        if self._todo:
            _enable_cross_language_calls()
            self._fetch_ahead()
        return True

    def _fetch_ahead(self) -> None:
        if not self._todo:
            self._next = None
            return
        info = self._info
        partition = self._todo.pop(0)
        executor_id = info["executors"][partition]
        executor = self._executors.get(executor_id)
        if executor is None:
            executor = self._executors[executor_id] = ray.get_actor(
                EXECUTOR_ACTOR.format(executor_id), namespace=info["namespace"]
            )
        ref = executor.getRDDPartition.remote(info["rdd_id"], partition, info["schema_json"], info["driver_agent_url"])
        self._next = (partition, ref)

    def _open_next_partition(self) -> bool:
        import pyarrow as pa

        if self._next is None:
            return False
        partition, ref = self._next
        self._fetch_ahead()  # the executor serializes the next partition while this one is emitted
        try:
            data = ray.get(ref)
        except Exception as exc:
            raise RuntimeError(
                f"source {self.name!r}: reading Spark partition {partition} failed: "
                f"{type(exc).__name__}: {java_message(exc)}"
            ) from None
        self._batches = iter(pa.ipc.open_stream(pa.BufferReader(data)))
        self.num_blocks_read += 1
        restored = self._restored
        self._skip = restored["reading"].get(partition, 0) if restored is not None else 0
        self._partition, self._emitted = partition, self._skip
        return True

    def _release(self) -> None:
        if self._released:
            return
        self._released = True
        self._batches = self._batch = self._next = None
        rc = self.runtime_context
        try:
            self.source.bridge.release_source.remote(self.source.source_id, rc.subtask_index, rc.parallelism)
        except Exception:  # the bridge is gone (driver stopped it): nothing to release
            pass

    def emit_next(self, max_records: int = 1024) -> bool:
        if self.finished or self.cancelled:
            return False
        if self._info is None and not self._await_info():
            return True  # not ready yet: the task runs its mails, then asks again
        while self._batch is None or self._offset >= self._batch.num_rows:
            batch = next(self._batches, None) if self._batches is not None else None
            if batch is None:
                if self._partition is not None:
                    self._done.append(self._partition)
                    self._partition = None
                if not self._open_next_partition():
                    if not self.runtime_context.checkpointing_enabled:
                        self._release()  # else once a checkpoint holds the end (a restore reads again)
                    self._finish()
                    return False
                continue
            self._batch, self._offset = batch, 0
            if self._skip:  # rows the restored checkpoint had emitted already
                self._offset = min(self._skip, batch.num_rows)
                self._skip -= self._offset
        n = self._batch.num_rows - self._offset
        if not self.emit_batches:
            n = min(max(1, max_records), n)
        chunk = self._batch if n == self._batch.num_rows else self._batch.slice(self._offset, n)
        self._offset += n
        self._emitted += n
        if self.emit_batches:  # one element of n rows; the position still counts rows
            self.record_context.timestamp = None
            self._collect(chunk)
        else:
            self._emitter.emit(chunk)
        return True

    # -- checkpoints: the partitions emitted and the rows reached in the one being emitted -------------
    def snapshot_operator_state(self, checkpoint_id: int) -> dict:
        if self.finished and self._end_checkpoint is None:
            self._end_checkpoint = checkpoint_id
        if self._info is None and self._restored is not None:  # not started since the restore
            return dict(self._restored)
        reading = {} if self._partition is None else {self._partition: self._emitted}
        return {"done": list(self._done), "reading": reading, "ended": self.finished}

    def restore_operator_state(self, state: dict) -> None:
        self._restored = _position(state)
        if state.get("ended"):  # restored finished (it reads nothing): released at the next completed checkpoint
            self._end_checkpoint = 0

    def restore_rescaled_operator_state(self, states: list, subtask: int, parallelism: int) -> None:
        """Restored at another parallelism: the partitions any old subtask emitted are done, the
        ones being read resume after their emitted rows, wherever the new split puts them."""
        old = [_position(s) for s in states if s is not None]
        self._restored = {
            "done": sorted({p for s in old for p in s["done"]}),
            "reading": {p: rows for s in old for p, rows in s["reading"].items()},
            "ended": len(old) == len(states) and all(s["ended"] for s in old),
        }
        if self._restored["ended"]:
            self._end_checkpoint = 0

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        """A completed checkpoint holds this subtask's end: no restore reads its partitions again."""
        if self._end_checkpoint is not None and checkpoint_id >= self._end_checkpoint:
            self._release()

    def close(self) -> None:
        if not self.runtime_context.checkpointing_enabled:  # else at the checkpoint that holds the end
            self._release()
        super().close()


def _position(state: dict) -> dict:
    """A checkpointed position as ``{"done", "reading": {partition: rows emitted}, "ended"}``
    (also from the one-partition form earlier versions wrote)."""
    if "reading" in state:
        return dict(state)
    partition = state.get("partition")
    reading = {} if partition is None else {partition: state.get("rows", 0)}
    return {"done": list(state["done"]), "reading": reading, "ended": bool(state.get("ended"))}


def _is_dataframe(df: Any) -> bool:
    try:
        from pyspark.sql import DataFrame
    except ImportError:  # pragma: no cover - pyspark is a dependency
        return False
    return isinstance(df, DataFrame)


def _cache_partitions(df: Any, source_id: str, bridge: Any, where: str) -> None:
    """(driver thread) Spark converts ``df`` into cached Arrow batches; post where they are."""
    from pyspark.storagelevel import StorageLevel

    try:
        wait_driver_connected()
        spark = df.sparkSession
        sc = spark.sparkContext
        writer = sc._jvm.org.apache.spark.sql.raydp.ObjectStoreWriter
        info = writer.prepareRecoverableRDD(df._jdf, sc._getJavaStorageLevel(StorageLevel.MEMORY_AND_DISK))
        rdd_id = info.rddId()

        def release() -> None:
            writer.releaseRecoverableRDD(rdd_id)

        if not set_source_release(source_id, release):  # stop() ran meanwhile
            release()
            return
        payload = {
            "rdd_id": rdd_id,
            "num_partitions": info.numPartitions(),
            "schema_json": info.schemaJson(),
            "driver_agent_url": info.driverAgentUrl(),
            "executors": list(info.locations()),
            "namespace": spark_namespace() or ray.get_runtime_context().namespace,
        }  # RayDP's actors live in the Spark driver's (the session cluster's, when shared)
    except Exception as exc:
        payload = {
            "error": f"{where}: Spark could not produce the DataFrame's rows: {type(exc).__name__}: {java_message(exc)}"
        }
    if ray.is_initialized():
        try:
            ray.get(bridge.put_source.remote(source_id, payload))
        except Exception:  # the bridge was shut down meanwhile
            pass


def num_partitions(df: Any) -> int:
    """The partitions Spark will produce ``df`` in (plans it; runs nothing for a plan without
    adaptive stages)."""
    return int(df._jdf.toArrowBatchRdd().getNumPartitions())


def prepare_spark_source(
    df: Any,
    record_format: str = "tuple",
    timestamp_column: Optional[str] = None,
    watermark_delay_ms: Optional[int] = None,
    where: str = "from_spark",
) -> "tuple[SparkDataFrameSource, SparkRowType]":
    """Start Spark on ``df``'s partitions (a driver thread); return the graph-side source and the stream type."""
    if not _is_dataframe(df):
        raise TypeError(
            f"{where}: expected a pyspark.sql.DataFrame (of a Spark-on-Ray session), got "
            f"{type(df).__module__}.{type(df).__qualname__}"
        )
    if not is_raydp_session(df.sparkSession):
        raise ValueError(
            f"{where}: the DataFrame belongs to a Spark session that does not run on Ray "
            f"(master {df.sparkSession.sparkContext.master!r}); create it with a session from "
            "raylink.connectors.spark.get_spark() or raydp.init_spark(...)"
        )
    schema = df.schema
    check_emit_options(tuple(schema.names), record_format, timestamp_column, watermark_delay_ms, where)
    partitions = num_partitions(df)
    source_id = uuid.uuid4().hex
    bridge = register_source_release(source_id, lambda: None)
    threading.Thread(
        target=_cache_partitions,
        args=(df, source_id, bridge, where),
        name=f"raylink-spark-source-{source_id[:8]}",
        daemon=True,
    ).start()
    source = SparkDataFrameSource(
        source_id, bridge, partitions, tuple(schema.names), record_format, timestamp_column, watermark_delay_ms
    )
    return source, row_type(schema, record_format)


class SparkSource:
    """``env.from_source(SparkSource(df, ...))``: the same bounded source as ``from_spark``.

    Spark starts on the partitions when the stream is created (``_raylink_source_spec``).
    """

    def __init__(
        self,
        df: Any,
        record_format: str = "tuple",
        timestamp_column: Optional[str] = None,
        watermark_delay_ms: Optional[int] = None,
    ) -> None:
        if not _is_dataframe(df):
            raise TypeError(f"SparkSource: expected a pyspark.sql.DataFrame, got {type(df).__name__}")
        self._df = df
        self._options = (record_format, timestamp_column, watermark_delay_ms)
        self.type_info: Optional[SparkRowType] = None

    def _raylink_source_spec(self):
        source, type_info = prepare_spark_source(self._df, *self._options, where="SparkSource")
        self.type_info = type_info
        return SOURCE_KIND, source, {}, False


__all__ = [
    "SOURCE_KIND",
    "SparkBlockSourceOperator",
    "SparkDataFrameSource",
    "SparkSource",
    "block_range",
    "num_partitions",
    "prepare_spark_source",
]
