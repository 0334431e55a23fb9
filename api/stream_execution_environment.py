"""PyFlink's ``StreamExecutionEnvironment``: where a program starts and how it is run.

It records transformations, turns them into the three graphs on demand
(``get_stream_graph`` / ``get_job_graph`` / ``get_execution_graph``), and hands
the job to the executor registered for ``execution.target`` (``"local"``: threads in
this process, Flink's MiniCluster; ``"ray"``: Ray actors; see :mod:`raylink.runtime.client.executors`).
"""

from __future__ import annotations

import itertools
import warnings
from typing import Any, Iterable, Optional

from raylink.api.datastream import DataStream
from raylink.api.execution_config import ExecutionConfig
from raylink.api.execution_mode import RuntimeExecutionMode
from raylink.api.slot_sharing_group import SlotSharingGroup
from raylink.api.state_backend import EmbeddedRocksDBStateBackend, HashMapStateBackend, StateBackend
from raylink.core.checkpointing import CheckpointConfig
from raylink.core.configuration import Configuration
from raylink.core.options import (
    CheckpointingOptions,
    CoreOptions,
    ExecutionOptions,
    PipelineOptions,
    RaylinkOptions,
    StateBackendOptions,
    validate_enumerated_values,
)
from raylink.core.types import apply_declared_type
from raylink.graph import transformations as T
from raylink.graph.execution_graph import ExecutionGraph, build_execution_graph
from raylink.graph.job_graph import JobGraph
from raylink.graph.job_graph_generator import create_job_graph
from raylink.graph.operator_spec import OperatorSpec
from raylink.graph.stream_graph import StreamGraph
from raylink.graph.stream_graph_generator import (
    StreamGraphGenerator,
    validate_max_parallelism,
    validate_parallelism,
)
from raylink.runtime.client.executors import get_executor
from raylink.runtime.client.python_dependencies import (
    PYTHON_EXECUTABLE,
    add_python_archive,
    add_python_file,
    set_python_requirements,
)


class StreamExecutionEnvironment:
    """The context a streaming program runs in (PyFlink's ``StreamExecutionEnvironment``)."""

    def __init__(self, configuration: Optional[Configuration] = None) -> None:
        # RAYLINK_CONF (set by the raylink CLI) under the explicit configuration
        self.configuration = Configuration.from_environment()
        if configuration is not None:
            self.configuration.add_all(configuration)
        conf = self.configuration
        self._parallelism = conf.get_integer(CoreOptions.DEFAULT_PARALLELISM.key)  # checked as a parallelism
        validate_parallelism(self._parallelism, CoreOptions.DEFAULT_PARALLELISM.key)
        self._max_parallelism = conf.get(PipelineOptions.MAX_PARALLELISM)
        self._chaining = conf.get(PipelineOptions.OPERATOR_CHAINING)
        self._buffer_timeout = conf.get(ExecutionOptions.BUFFER_TIMEOUT)
        self.transformations: list[T.Transformation] = []
        self._ids = itertools.count(1)
        self._collect_ids = itertools.count(1)
        self._slot_sharing_groups: dict = {}

    @staticmethod
    def get_execution_environment(configuration: Optional[Configuration] = None) -> "StreamExecutionEnvironment":
        return StreamExecutionEnvironment(configuration)

    # -- settings -----------------------------------------------------------------------
    def set_parallelism(self, parallelism: int) -> "StreamExecutionEnvironment":
        validate_parallelism(parallelism, "environment")
        self._parallelism = parallelism
        return self

    def get_parallelism(self) -> int:
        return self._parallelism

    def set_max_parallelism(self, max_parallelism: int) -> "StreamExecutionEnvironment":
        validate_max_parallelism(max_parallelism, "environment")
        self._max_parallelism = max_parallelism
        return self

    def get_max_parallelism(self) -> int:
        return self._max_parallelism

    def disable_operator_chaining(self) -> "StreamExecutionEnvironment":
        self._chaining = False
        return self

    def is_chaining_enabled(self) -> bool:
        return self._chaining

    def set_buffer_timeout(self, timeout_millis: int) -> "StreamExecutionEnvironment":
        if timeout_millis < -1:
            raise ValueError("Timeout parameter must be greater than or equal to -1")
        self._buffer_timeout = timeout_millis
        return self

    def get_buffer_timeout(self) -> int:
        return self._buffer_timeout

    def enable_checkpointing(self, interval: int, mode: Any = None) -> "StreamExecutionEnvironment":
        """Checkpoint every ``interval`` ms (``execution.checkpointing.interval``); with
        checkpointing on, a failed job restarts from its latest checkpoint (Flink's
        default restart strategy: exponential delay)."""
        config = self.get_checkpoint_config()
        config.set_checkpoint_interval(interval)
        if mode is not None:
            config.set_checkpointing_mode(mode)
        return self

    def get_checkpoint_config(self) -> "CheckpointConfig":
        """PyFlink's ``CheckpointConfig``: a view of this environment's ``execution.checkpointing.*``."""
        return CheckpointConfig(self.configuration)

    def get_checkpoint_interval(self) -> int:
        return self.get_checkpoint_config().get_checkpoint_interval()

    def set_state_backend(self, state_backend: StateBackend) -> "StreamExecutionEnvironment":
        """Where keyed state lives (PyFlink's ``set_state_backend``): ``HashMapStateBackend()``
        or ``EmbeddedRocksDBStateBackend(...)``; writes ``state.backend.type`` and the backend's
        other keys into this environment's configuration."""
        if not isinstance(state_backend, StateBackend):
            raise TypeError(
                f"set_state_backend: expected a HashMapStateBackend or EmbeddedRocksDBStateBackend, "
                f"got {type(state_backend).__name__}"
            )
        state_backend.configure(self.configuration)
        return self

    def get_state_backend(self) -> StateBackend:
        """The backend ``state.backend.type`` names (a new object describing it)."""
        kind = self.configuration.get(StateBackendOptions.STATE_BACKEND)
        if kind == "rocksdb":
            backend = EmbeddedRocksDBStateBackend(self.configuration.get(CheckpointingOptions.INCREMENTAL_CHECKPOINTS))
            paths = self.configuration.get(StateBackendOptions.ROCKSDB_LOCAL_DIRECTORIES)
            if paths:
                backend.set_db_storage_paths(*[p for p in paths.split(",") if p.strip()])
            return backend
        return HashMapStateBackend()

    def set_runtime_mode(self, execution_mode: Any) -> "StreamExecutionEnvironment":
        """Run the job in ``RuntimeExecutionMode.STREAMING`` (the default), ``BATCH`` (blocking
        exchanges, keyed operators emit final results, no checkpoints) or ``AUTOMATIC``
        (BATCH when every source is bounded); sets ``execution.runtime-mode``."""
        mode = RuntimeExecutionMode.of(execution_mode)
        self.configuration.set_string(ExecutionOptions.RUNTIME_MODE.key, mode.name)
        return self

    # -- Python dependencies (raylink.runtime.client.python_dependencies) ------------------
    def add_python_file(self, file_path: str) -> "StreamExecutionEnvironment":
        """Make a ``.py`` file, a directory of modules, a ``.zip`` or a ``.whl`` importable
        by the job's functions on every TaskExecutor (``python.files``)."""
        add_python_file(self.configuration, file_path)
        return self

    def add_python_archive(self, archive_path: str, target_dir: Optional[str] = None) -> "StreamExecutionEnvironment":
        """Extract a zip archive into the TaskExecutors' working directory, in the folder
        ``target_dir`` (default: the archive's file name) (``python.archives``)."""
        add_python_archive(self.configuration, archive_path, target_dir)
        return self

    def set_python_requirements(
        self, requirements_file_path: str, requirements_cache_dir: Optional[str] = None
    ) -> "StreamExecutionEnvironment":
        """Install a requirements file on the TaskExecutors (offline from
        ``requirements_cache_dir`` when given) (``python.requirements``)."""
        set_python_requirements(self.configuration, requirements_file_path, requirements_cache_dir)
        return self

    def set_python_executable(self, python_exec: str) -> "StreamExecutionEnvironment":
        """The Python interpreter of the TaskExecutors on Ray (``python.executable``)."""
        self.configuration.set_string(PYTHON_EXECUTABLE, python_exec)
        return self

    def add_jars(self, *jars_path: str) -> "StreamExecutionEnvironment":
        """Accepted for PyFlink programs; raylink has no JVM, so the jars are not used."""
        self._no_jvm("add_jars", jars_path)
        return self

    def add_classpaths(self, *classpaths: str) -> "StreamExecutionEnvironment":
        """Accepted for PyFlink programs; raylink has no JVM, so the classpaths are not used."""
        self._no_jvm("add_classpaths", classpaths)
        return self

    @staticmethod
    def _no_jvm(method: str, paths: tuple) -> None:
        warnings.warn(
            f"{method}({', '.join(map(repr, paths))}) is ignored: raylink runs without a JVM, so Java "
            "jars and classpaths have no effect; Java connectors are not available (see "
            "raylink.api.connectors for the Python ones)",
            UserWarning,
            stacklevel=3,
        )

    def get_config(self) -> "ExecutionConfig":
        """PyFlink's ``ExecutionConfig``: a view of this environment's ``Configuration``."""
        return ExecutionConfig(self.configuration, self)

    def register_slot_sharing_group(self, slot_sharing_group: Any) -> "StreamExecutionEnvironment":
        """Declare a ``SlotSharingGroup``'s resources (recorded, see :mod:`raylink.api.slot_sharing_group`)."""
        if not isinstance(slot_sharing_group, SlotSharingGroup):
            raise TypeError(
                f"register_slot_sharing_group: expected a SlotSharingGroup, got {type(slot_sharing_group).__name__}"
            )
        self._slot_sharing_groups[slot_sharing_group.get_name()] = slot_sharing_group
        return self

    def get_slot_sharing_groups(self) -> dict:
        """The registered ``SlotSharingGroup``s by name."""
        return dict(self._slot_sharing_groups)

    # -- sources ------------------------------------------------------------------------
    def _add_transformation(
        self,
        kind: str,
        name: str,
        inputs: list[T.Transformation],
        operator: Optional[OperatorSpec] = None,
        register: bool = True,
        **fields: Any,
    ) -> T.Transformation:
        t = T.Transformation(
            id=next(self._ids),
            name=name,
            kind=kind,
            inputs=inputs,
            parallelism=self._parallelism,
            operator=operator,
            chaining_strategy="HEAD" if kind == T.SOURCE else "ALWAYS",
            **fields,
        )
        if register and kind != T.SOURCE:
            self.transformations.append(t)
        return t

    def _source(
        self,
        kind: str,
        name: str,
        function: Any = None,
        type_info: Any = None,
        non_parallel: bool = False,
        **params: Any,
    ) -> DataStream:
        spec = OperatorSpec(kind=kind, function=function, params=params, chaining_strategy="HEAD")
        t = self._add_transformation(
            T.SOURCE, name, [], operator=spec, output_type=type_info, non_parallel=non_parallel
        )
        if non_parallel:
            t.parallelism = 1
        return DataStream(self, t)

    def from_collection(self, collection: Iterable, type_info: Any = None) -> DataStream:
        """A non-parallel source over a finite collection (parallelism 1, as in Flink)."""
        if isinstance(collection, (str, bytes)) or not hasattr(collection, "__iter__"):
            raise TypeError(
                f"from_collection: collection must be a list or other iterable, got {type(collection).__name__}"
            )
        return self._source(
            "source_collection",
            "Collection Source",
            None,
            type_info,
            non_parallel=True,
            elements=apply_declared_type(type_info, list(collection)),  # as the type's coder delivers them
        )

    def from_sequence(self, start: int, end: int) -> DataStream:
        """A parallel source of the integers ``start..end`` (inclusive)."""
        if not isinstance(start, int) or not isinstance(end, int):
            raise TypeError("from_sequence: start and end must be integers")
        if end < start:
            raise ValueError(f"from_sequence: start ({start}) must be <= end ({end})")
        return self._source("source_sequence", "Sequence Source", None, None, start=start, end=end)

    def add_source(self, source_func: Any, source_name: str = "Custom Source", type_info: Any = None) -> DataStream:
        """A source from a ``SourceFunction``, an iterable, or a callable returning an iterable."""
        if callable(getattr(source_func, "_raylink_source_spec", None)):  # a connector's (FlinkKafkaConsumer)
            return self.from_source(source_func, None, source_name, type_info)
        if not (
            callable(getattr(source_func, "run", None)) or callable(source_func) or hasattr(source_func, "__iter__")
        ):
            raise TypeError(
                f"add_source: source_func must be a SourceFunction, an iterable or a callable, "
                f"got {type(source_func).__name__}"
            )
        return self._source("source_function", source_name, source_func, type_info)

    def from_source(
        self, source: Any, watermark_strategy: Any = None, source_name: str = "Custom Source", type_info: Any = None
    ) -> DataStream:
        """A stream from ``source``; ``watermark_strategy`` runs inside the source operator, as
        in Flink's ``SourceOperator`` (``WatermarkStrategy.no_watermarks()`` or None: none)."""
        hook = getattr(source, "_raylink_source_spec", None)
        produced = getattr(source, "get_produced_type", None)
        if type_info is None and callable(produced):  # Flink's ResultTypeQueryable
            type_info = produced()
        if callable(hook):
            kind, function, params, non_parallel = hook()
            stream = self._source(kind, source_name, function, type_info, non_parallel=non_parallel, **params)
        else:
            stream = self.add_source(source, source_name, type_info)
        if watermark_strategy is not None:
            if not callable(getattr(watermark_strategy, "create_watermark_generator", None)):
                raise TypeError(
                    f"from_source '{source_name}': watermark_strategy must be a WatermarkStrategy, "
                    f"got {type(watermark_strategy).__name__}"
                )
            stream._transformation.operator.params["watermark_strategy"] = watermark_strategy
        return stream

    def from_spark(
        self,
        df: Any,
        parallelism: Optional[int] = None,
        record_format: str = "tuple",
        timestamp_column: Optional[str] = None,
        watermark_delay_ms: Optional[int] = None,
        source_name: str = "Spark Source",
    ) -> DataStream:
        """A bounded source over a Spark DataFrame (of a Spark-on-Ray session).

        The DataFrame becomes Ray blocks through RayDP now; the source subtasks
        (``min(blocks, parallelism)``, default the environment's parallelism) split the
        blocks and emit rows as tuples (``record_format="tuple"``) or dicts (``"dict"``).
        The stream's type carries the Spark schema. ``timestamp_column`` gives each
        record its event timestamp; ``watermark_delay_ms`` adds bounded-out-of-orderness
        watermarks. See :mod:`raylink.connectors.spark.dataframe_source`.
        """
        from raylink.connectors.spark.dataframe_source import SOURCE_KIND, prepare_spark_source

        if parallelism is not None:
            validate_parallelism(parallelism, "from_spark")
        function, type_info = prepare_spark_source(df, record_format, timestamp_column, watermark_delay_ms)
        stream = self._source(SOURCE_KIND, source_name, function, type_info)
        stream._transformation.parallelism = max(1, min(function.num_blocks, parallelism or self._parallelism))
        return stream

    def from_spark_table(
        self,
        path_or_table: str,
        poll_interval: float = 1.0,
        schema: Any = None,
        record_format: str = "tuple",
        timestamp_column: Optional[str] = None,
        watermark_delay_ms: Optional[int] = None,
        start_from: str = "earliest",
        source_name: str = "Spark Table Source",
        format: Optional[str] = None,
        version_as_of: Optional[int] = None,
        timestamp_as_of: Any = None,
        snapshot_id: Optional[int] = None,
        continuous: bool = False,
        options: Optional[dict] = None,
    ) -> DataStream:
        """An unbounded source that keeps reading the Parquet files of a directory or Spark
        table (a table name resolves to its location through Spark) as they appear,
        polling every ``poll_interval`` seconds. See :mod:`raylink.connectors.spark.table_source`.

        ``format="delta"`` (a Delta folder or table) or ``"iceberg"`` (a table of raylink's
        Iceberg catalog): a bounded read of one snapshot through Spark -- the latest, or
        ``version_as_of`` / ``timestamp_as_of`` (Delta), ``snapshot_id`` / ``timestamp_as_of``
        (Iceberg); see :func:`raylink.connectors.spark.table_read.read_snapshot`.

        ``continuous=True`` with ``format="delta"`` or ``"iceberg"``: an unbounded source that
        follows the table, emitting the rows each new commit appends, in commit order, once
        (checkpointed; compaction skipped, deletes refused unless an option skips them), asking
        for new commits every ``poll_interval`` seconds. ``options`` take Spark's Delta source
        names (``startingVersion``, ``startingTimestamp``, ``ignoreDeletes``,
        ``skipChangeCommits``) or Iceberg's (Flink's ``starting-strategy``,
        ``start-snapshot-id``, ``start-snapshot-timestamp``; Spark's
        ``streaming-skip-delete-snapshots``, ``streaming-skip-overwrite-snapshots``); see
        :mod:`raylink.connectors.spark.table_changes_source`."""
        if continuous or options:
            if format is None or str(format).lower() not in ("delta", "iceberg"):
                raise ValueError(
                    "from_spark_table: continuous=True and options need format='delta' or 'iceberg' "
                    f"(got {format!r}); a Parquet folder or table is followed without them"
                )
            if not continuous:
                raise ValueError("from_spark_table: options are for the continuous source; pass continuous=True")
            if version_as_of is not None or timestamp_as_of is not None or snapshot_id is not None:
                raise ValueError(
                    "from_spark_table: version_as_of, timestamp_as_of and snapshot_id read one snapshot; the "
                    "continuous source starts with options startingVersion / startingTimestamp (Delta) or "
                    "start-snapshot-id / start-snapshot-timestamp (Iceberg)"
                )
            from raylink.connectors.spark.table_changes_source import SOURCE_KIND, prepare_table_changes_source

            function, type_info = prepare_table_changes_source(
                path_or_table,
                format,
                options,
                poll_interval,
                record_format,
                timestamp_column,
                watermark_delay_ms,
                self.configuration,
            )
            return self._source(SOURCE_KIND, source_name, function, type_info)
        if format is not None and str(format).lower() in ("delta", "iceberg"):
            from raylink.connectors.spark.table_read import read_snapshot

            df = read_snapshot(path_or_table, format, version_as_of, timestamp_as_of, snapshot_id, self.configuration)
            return self.from_spark(
                df,
                record_format=record_format,
                timestamp_column=timestamp_column,
                watermark_delay_ms=watermark_delay_ms,
                source_name=source_name,
            )
        if format is not None and str(format).lower() != "parquet":
            raise ValueError(f"from_spark_table: format must be 'parquet', 'delta' or 'iceberg', got {format!r}")
        if version_as_of is not None or timestamp_as_of is not None or snapshot_id is not None:
            raise ValueError(
                "from_spark_table: version_as_of, timestamp_as_of and snapshot_id need format='delta' or 'iceberg'"
            )
        from raylink.connectors.spark.table_source import SOURCE_KIND, prepare_table_source

        function, type_info = prepare_table_source(
            path_or_table,
            schema,
            poll_interval,
            record_format,
            timestamp_column,
            watermark_delay_ms,
            start_from,
            self.configuration,
        )
        return self._source(SOURCE_KIND, source_name, function, type_info)

    # -- the graphs ---------------------------------------------------------------------
    def get_stream_graph(self, job_name: Optional[str] = None) -> StreamGraph:
        if not self.transformations:
            raise RuntimeError("No operators defined in streaming topology. Cannot execute.")
        validate_enumerated_values(self.configuration)  # every job is built (and submitted) through here
        mode = self.configuration.get(ExecutionOptions.SHUFFLE_MODE)
        graph = StreamGraphGenerator(
            self.transformations,
            job_name=job_name or self.configuration.get(PipelineOptions.NAME),
            chaining_enabled=self._chaining,
            default_max_parallelism=self._max_parallelism,
            buffer_timeout=self._buffer_timeout,
            global_shuffle_mode="BATCH" if str(mode).lower() == "batch" else None,
            runtime_mode=self.configuration.get(ExecutionOptions.RUNTIME_MODE),
        ).generate()
        graph.config = self.configuration.to_dict()
        if graph.job_type == "BATCH" and self.get_checkpoint_config().is_checkpointing_enabled():
            warnings.warn(
                "Checkpointing is enabled (execution.checkpointing.interval) but the job runs in BATCH "
                "execution mode, which takes no checkpoints: the setting is ignored.",
                stacklevel=3,
            )
        return graph

    def get_execution_plan(self) -> str:
        return self.get_stream_graph().get_execution_plan()

    def get_job_graph(self, job_name: Optional[str] = None) -> JobGraph:
        return create_job_graph(self.get_stream_graph(job_name))

    def get_execution_graph(self, job_name: Optional[str] = None) -> ExecutionGraph:
        return build_execution_graph(self.get_job_graph(job_name))

    # -- execution ---------------------------------------------------------------------
    def _executor(self):
        # the raw text: get_executor names the registered executors when it is unknown
        return get_executor(self.configuration.get_string(ExecutionOptions.TARGET.key), self)

    def execute(self, job_name: Optional[str] = None):
        """Run the job to completion and return its ``JobExecutionResult``."""
        return self._executor().execute(self, job_name)

    def execute_async(self, job_name: Optional[str] = None):
        """Start the job and return a ``JobClient``."""
        return self._executor().execute_async(self, job_name)

    def _execute_and_collect(self, stream: DataStream, job_name: Optional[str], limit: Optional[int]):
        """PyFlink's ``execute_and_collect``: a ``CloseableIterator`` over the records, or with
        ``limit`` the list of the first ``limit`` of them (the job is cancelled after them).
        The collect sink runs chained to an operator at its parallelism, so the records arrive
        in their order per upstream subtask without a network exchange of their own; after a
        partitioning (``key_by``, ``rebalance``, ``union``, ...), or with
        ``raylink.collect.parallel-sink=false``, it runs at parallelism 1, as Flink's
        ``CollectStreamSink`` (the records in their order per channel)."""
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit <= 0):
            raise ValueError(f"execute_and_collect: limit must be greater than 0, got {limit!r}")
        collect_id = f"collect-{next(self._collect_ids)}"
        sink = stream.collect_sink(collect_id)._transformation
        upstream = stream._transformation
        if self.configuration.get(RaylinkOptions.COLLECT_PARALLEL_SINK) and upstream.is_physical:
            sink.parallelism, sink.max_parallelism = upstream.parallelism, upstream.max_parallelism
        else:  # after an explicit exchange (key_by, rebalance, union, ...): its one reader, as Flink
            sink.parallelism, sink.non_parallel = 1, True
        iterator = self._executor().execute_and_collect(self, job_name, collect_id, limit)
        return iterator if limit is None else iterator.read_all()
