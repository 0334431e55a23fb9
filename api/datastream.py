"""PyFlink's ``DataStream``, ``KeyedStream``, ``ConnectedStreams``, ``BroadcastStream``,
``BroadcastConnectedStream`` and ``DataStreamSink``.

As PyFlink's ``data_stream`` module (where ``raylink migrate`` sends its imports), it also
has the windowed streams (``WindowedStream``, ``AllWindowedStream``; ``count_window`` /
``count_window_all`` with Flink's Java definition) and the collect iterator
(``CloseableIterator``). A windowed stream is pure API: configure the trigger, evictor,
allowed lateness and late-data side output, then one of ``reduce`` / ``aggregate`` /
``apply`` / ``process`` records one window transformation (operator kind ``"window"``)
whose function is an ``operators.window.WindowOperatorDescriptor``; ``window_all`` keys the
stream by a constant (Flink's ``NullByteKeySelector``) and runs at parallelism 1.

Every call only records a :class:`~raylink.graph.transformations.Transformation`
in the environment; nothing runs until ``execute``. Function arguments may be
plain callables or PyFlink-style function objects (``MapFunction`` …); they are
checked here so a bad argument fails when the program is built, naming the
operator.
"""

from __future__ import annotations

from enum import Enum
from operator import itemgetter
from typing import Any, Callable, Optional, Protocol, Union

from raylink.api.slot_sharing_group import SlotSharingGroup
from raylink.api.window import (
    CountEvictor,
    CountTrigger,
    GlobalWindows,
    MergingWindowAssigner,
    PurgingTrigger,
    Trigger,
    WindowAssigner,
)
from raylink.core.functions import BroadcastProcessFunction, KeyedBroadcastProcessFunction, NullByteKeySelector
from raylink.core.output_tag import OutputTag
from raylink.core.state import MapStateDescriptor
from raylink.core.time import to_millis
from raylink.core.types import Row, TypeInformation, Types, declared_type
from raylink.graph import transformations as T
from raylink.graph.operator_spec import OperatorSpec, PartitionerSpec
from raylink.graph.stream_graph import GraphError
from raylink.graph.stream_graph_generator import validate_max_parallelism, validate_parallelism
from raylink.operators.aggregation import check_declared_field
from raylink.operators.window import WindowOperatorDescriptor
from raylink.runtime.client.job_result import CloseableIterator  # noqa: F401 - in PyFlink's data_stream too

WINDOW_KIND = "window"
TIMESTAMPS_KIND = "timestamps"


class StreamEnvironment(Protocol):
    """What a stream asks of the ``StreamExecutionEnvironment`` that made it (the environment
    builds streams of this module, so the reference back is declared here, not imported):
    Flink's ``DataStream.getExecutionEnvironment`` and the transformations it adds."""

    configuration: Any

    def get_config(self) -> Any: ...

    def register_slot_sharing_group(self, slot_sharing_group: SlotSharingGroup) -> Any: ...

    def _add_transformation(
        self,
        kind: str,
        name: str,
        inputs: list[T.Transformation],
        operator: Optional[OperatorSpec] = None,
        register: bool = True,
        **fields: Any,
    ) -> T.Transformation: ...

    def _execute_and_collect(self, stream: "DataStream", job_name: Optional[str], limit: Optional[int]) -> Any: ...


def check_function(func: Any, method: str, operator: str, argument: str = "function") -> None:
    """Accept a callable or an object with ``method``; otherwise fail naming the operator."""
    if callable(getattr(func, method, None)) or callable(func):
        return
    raise TypeError(
        f"{operator}: {argument} must be a callable or an object with a '{method}' method, got {type(func).__name__}"
    )


def key_selector_callable(key_selector: Any, operator: str = "key_by") -> Callable:
    check_function(key_selector, "get_key", operator, "key_selector")
    get_key = getattr(key_selector, "get_key", None)
    return get_key if callable(get_key) else key_selector


class _Configurable:
    """The per-operator setters Flink puts on ``SingleOutputStreamOperator``."""

    _transformation: T.Transformation

    def _require_physical(self, what: str) -> T.Transformation:
        t = self._transformation
        if not t.is_physical:
            raise GraphError(
                f"{what} is only supported on operators, not on the {t.kind.replace('_', ' ')} {t.describe()}."
            )
        return t

    def name(self, name: str):
        self._require_physical("name()").name = name
        return self

    def get_name(self) -> str:
        return self._transformation.name

    def uid(self, uid: str):
        self._require_physical("uid()").uid = uid
        return self

    def set_uid_hash(self, uid_hash: str):  # accepted for PyFlink compatibility
        return self.uid(uid_hash)

    def set_parallelism(self, parallelism: int):
        t = self._require_physical("set_parallelism()")
        validate_parallelism(parallelism, t.describe())
        if t.non_parallel and parallelism != 1:
            raise GraphError(f"The parallelism of non parallel operator must be 1 (operator {t.describe()}).")
        t.parallelism = parallelism
        return self

    def get_parallelism(self) -> int:
        return self._transformation.parallelism

    def set_max_parallelism(self, max_parallelism: int):
        t = self._require_physical("set_max_parallelism()")
        validate_max_parallelism(max_parallelism, t.describe())
        t.max_parallelism = max_parallelism
        return self

    def slot_sharing_group(self, slot_sharing_group: Any):
        """Put this operator into a slot sharing group: a name, or a ``SlotSharingGroup``
        (whose resources are registered with the environment, see :mod:`raylink.api.slot_sharing_group`)."""
        t = self._require_physical("slot_sharing_group()")
        if isinstance(slot_sharing_group, SlotSharingGroup):
            env = getattr(self, "_env", None)
            if env is not None:
                env.register_slot_sharing_group(slot_sharing_group)
            slot_sharing_group = slot_sharing_group.get_name()
        elif not isinstance(slot_sharing_group, str):
            raise TypeError(
                f"slot_sharing_group: expected a name (str) or a SlotSharingGroup, got {type(slot_sharing_group).__name__}"
            )
        t.slot_sharing_group = slot_sharing_group
        return self

    def set_description(self, description: str):
        """A longer text for the operator, shown as the execution plan's ``contents``."""
        self._require_physical("set_description()").description = description
        return self

    def start_new_chain(self):
        self._require_physical("start_new_chain()").chaining_strategy = "HEAD"
        return self

    def disable_chaining(self):
        self._require_physical("disable_chaining()").chaining_strategy = "NEVER"
        return self

    def set_buffer_timeout(self, timeout_millis: int):
        if timeout_millis < -1:
            raise ValueError("Timeout parameter must be greater than or equal to -1")
        self._require_physical("set_buffer_timeout()").buffer_timeout = timeout_millis
        return self


# the one-input kinds that run keyed (with keyed state) when applied to a KeyedStream
_KEYED_KINDS = frozenset({"map", "flat_map", "filter", "map_batches", "reduce", "aggregate", "keyed_process"})


class DataStream(_Configurable):
    """A stream of elements of one type (PyFlink's ``DataStream``)."""

    def __init__(self, env: "StreamEnvironment", transformation: T.Transformation) -> None:
        self._env = env
        self._transformation = transformation

    def get_execution_environment(self) -> "StreamEnvironment":
        return self._env

    def get_transformation(self) -> T.Transformation:
        return self._transformation

    def get_type(self):
        return self._transformation.output_type

    def get_execution_config(self):
        """The environment's ``ExecutionConfig``."""
        return self._env.get_config()

    def force_non_parallel(self) -> "DataStream":
        """Parallelism and max parallelism 1 for this operator, for good: a later
        ``set_parallelism`` other than 1 fails."""
        t = self._require_physical("force_non_parallel()")
        t.parallelism, t.max_parallelism, t.non_parallel = 1, 1, True
        return self

    def cache(self) -> "CachedDataStream":
        """PyFlink's ``cache()``: a ``CachedDataStream`` of this operator's output. raylink does
        not keep intermediate results between jobs: every job that uses the stream computes it
        again (same records; the upstream functions run again)."""
        self._require_physical("cache()")
        return CachedDataStream(self._env, self._transformation)

    # -- one-input operators ------------------------------------------------------------
    def _one_input(self, kind: str, name: str, function: Any, output_type: Any = None, **params: Any) -> "DataStream":
        spec = OperatorSpec(kind=kind, function=function, params=params)
        key_selector = getattr(self, "_key_selector", None)
        if key_selector is not None and kind in _KEYED_KINDS:  # keyed: the function may use keyed state
            spec.key_selector = key_selector
        t = self._env._add_transformation(
            T.ONE_INPUT, name, [self._transformation], operator=spec, output_type=output_type
        )
        return DataStream(self._env, t)

    def map(self, func: Any, output_type: Any = None) -> "DataStream":
        check_function(func, "map", "Map")
        return self._one_input("map", "Map", func, output_type)

    def flat_map(self, func: Any, output_type: Any = None) -> "DataStream":
        check_function(func, "flat_map", "Flat Map")
        return self._one_input("flat_map", "Flat Map", func, output_type)

    def filter(self, func: Any) -> "DataStream":
        check_function(func, "filter", "Filter")
        return self._one_input("filter", "Filter", func, self._transformation.output_type)

    def process(self, func: Any, output_type: Any = None) -> "DataStream":
        check_function(func, "process_element", "Process")
        return self._one_input("process", "Process", func, output_type)

    def map_batches(
        self,
        func: Any,
        batch_format: str = "pyarrow",
        batch_size: int = 4096,
        output_type: Any = None,
    ) -> "DataStream":
        """Ray Data's ``map_batches`` on a stream: ``func(batch) -> batch`` over Arrow record
        batches (``batch_format="pyarrow"``) or pandas DataFrames (``"pandas"``). Batches of
        ``from_spark`` reach ``func`` as Spark made them, rows of a row operator are gathered
        ``batch_size`` at a time (and before every checkpoint); the result goes on as batches
        to a chained ``map_batches`` / ``sink_to_spark``, as tuple rows to anything else.
        On a ``KeyedStream``, ``func`` gets the gathered rows of one key at a time, that key
        current for its keyed state. See :mod:`raylink.operators.map_batches`."""
        if batch_format not in ("pyarrow", "pandas"):
            raise ValueError(f"map_batches: batch_format must be 'pyarrow' or 'pandas', got {batch_format!r}")
        if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size < 1:
            raise ValueError(f"map_batches: batch_size must be a positive int, got {batch_size!r}")
        if not callable(func) and not callable(getattr(func, "map_batches", None)):
            raise TypeError(
                f"map_batches: expected a callable or an object with map_batches(batch), got {type(func).__name__}"
            )
        input_type = self._transformation.output_type
        # positional rows take the input type's column names (from_spark's schema, a ROW_NAMED)
        names = getattr(input_type, "names", None) or getattr(input_type, "field_names", None)
        return self._one_input(
            "map_batches",
            "Map Batches",
            func,
            output_type,
            batch_format=batch_format,
            batch_size=batch_size,
            input_names=tuple(names) if names else None,
        )

    def project(self, *field_indexes: int) -> "DataStream":
        """The fields ``field_indexes`` of a ``Types.TUPLE`` stream, in that order, as tuples."""
        declared = self._transformation.output_type
        if not (isinstance(declared, TypeInformation) and declared.name == "TUPLE"):
            raise TypeError(
                f"project: only Tuple DataStreams can be projected (declare the stream's type with "
                f"Types.TUPLE([...])), this stream's type is {declared!r}"
            )
        if not field_indexes:
            raise ValueError("project: needs at least one field index")
        fields = declared.get_field_types()
        for index in field_indexes:
            if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < len(fields):
                raise IndexError(
                    f"project: field index {index!r} is out of bounds of the input type {declared!r} "
                    f"(0..{len(fields) - 1})"
                )
        output_type = Types.TUPLE([fields[i] for i in field_indexes])
        return DataStream(self._env, self._transformation)._one_input(
            "map", "Projection", _Projection(field_indexes), output_type
        )

    # -- partitioning -----------------------------------------------------------------
    def _partition(self, partitioner: PartitionerSpec, shuffle_mode: str = "UNDEFINED") -> "DataStream":
        if shuffle_mode not in T.SHUFFLE_MODES:
            raise ValueError(f"shuffle_mode must be one of {T.SHUFFLE_MODES}, got {shuffle_mode!r}")
        t = self._env._add_transformation(
            T.PARTITION,
            "Partition",
            [self._transformation],
            partitioner=partitioner,
            shuffle_mode=shuffle_mode,
            output_type=self._transformation.output_type,
            register=False,
        )
        return DataStream(self._env, t)

    def key_by(self, key_selector: Any, key_type: Any = None) -> "KeyedStream":
        if isinstance(key_selector, (str, int)) and not isinstance(key_selector, bool):
            field = repr(key_selector) if isinstance(key_selector, str) else key_selector
            raise TypeError(
                f"key_by: key_selector must be a callable or an object with a 'get_key' method, got "
                f"{type(key_selector).__name__} {key_selector!r} (as in PyFlink, a field is selected by "
                f"a function: key_by(lambda record: record[{field}]))"
            )
        selector = key_selector_callable(key_selector)
        partitioned = self._partition(PartitionerSpec("HASH", key_selector=selector))
        return KeyedStream(self._env, partitioned._transformation, selector, self)

    def forward(self) -> "DataStream":
        return self._partition(PartitionerSpec("FORWARD"))

    def rebalance(self) -> "DataStream":
        return self._partition(PartitionerSpec("REBALANCE"))

    def rescale(self) -> "DataStream":
        return self._partition(PartitionerSpec("RESCALE"))

    def shuffle(self) -> "DataStream":
        return self._partition(PartitionerSpec("SHUFFLE"))

    def broadcast(
        self, broadcast_state_descriptor: Any = None, *other_broadcast_state_descriptors: Any
    ) -> "Union[DataStream, BroadcastStream]":
        """Send every element to every parallel instance of the next operator. With
        ``MapStateDescriptor``s, a ``BroadcastStream`` whose broadcast states they declare
        (connect it to a stream and ``process`` it with a broadcast process function)."""
        stream = self._partition(PartitionerSpec("BROADCAST"))
        if broadcast_state_descriptor is None:
            return stream
        descriptors = [broadcast_state_descriptor, *other_broadcast_state_descriptors]
        for descriptor in descriptors:
            if not isinstance(descriptor, MapStateDescriptor):
                raise TypeError(
                    f"broadcast: broadcast_state_descriptor must be MapStateDescriptor, got {type(descriptor).__name__}"
                )
        return BroadcastStream(stream, descriptors)

    def global_(self) -> "DataStream":
        return self._partition(PartitionerSpec("GLOBAL"))

    def partition_custom(self, partitioner: Any, key_selector: Any) -> "DataStream":
        check_function(partitioner, "partition", "partition_custom", "partitioner")
        fn = getattr(partitioner, "partition", None)
        fn = fn if callable(fn) else partitioner
        selector = key_selector_callable(key_selector, "partition_custom")
        return self._partition(PartitionerSpec("CUSTOM", key_selector=selector, custom_partitioner=fn))

    def set_shuffle_mode(self, shuffle_mode: str) -> "DataStream":
        """Exchange mode of a partitioned stream's edge: PIPELINED or BATCH (blocking)."""
        if shuffle_mode not in T.SHUFFLE_MODES:
            raise ValueError(f"shuffle_mode must be one of {T.SHUFFLE_MODES}, got {shuffle_mode!r}")
        t = self._transformation
        if t.kind != T.PARTITION:
            raise GraphError(
                "set_shuffle_mode() applies to a partitioned stream (after forward(), "
                f"rebalance(), key_by() …), not to {t.describe()}."
            )
        t.shuffle_mode = shuffle_mode
        return self

    # -- combining ----------------------------------------------------------------------
    def union(self, *streams: "DataStream") -> "DataStream":
        for s in streams:
            if not isinstance(s, DataStream):
                raise TypeError(f"union: expected DataStreams, got {type(s).__name__}")
        t = self._env._add_transformation(
            T.UNION,
            "Union",
            [self._transformation] + [s._transformation for s in streams],
            output_type=self._transformation.output_type,
            register=False,
        )
        return DataStream(self._env, t)

    def connect(
        self, stream: "Union[DataStream, BroadcastStream]"
    ) -> "Union[ConnectedStreams, BroadcastConnectedStream]":
        """``ConnectedStreams`` of this stream and ``stream``; with a ``BroadcastStream``, a
        ``BroadcastConnectedStream`` (this stream is the non-broadcast input)."""
        if isinstance(stream, BroadcastStream):
            return BroadcastConnectedStream(self, stream, stream.broadcast_state_descriptors)
        if not isinstance(stream, DataStream):
            raise TypeError(
                f"connect: expected a DataStream, got {type(stream).__name__} "
                "(or a BroadcastStream, made by broadcast(MapStateDescriptor))"
            )
        return ConnectedStreams(self, stream)

    def get_side_output(self, output_tag: OutputTag) -> "DataStream":
        if not isinstance(output_tag, OutputTag):
            raise TypeError(f"get_side_output: expected an OutputTag, got {type(output_tag).__name__}")
        producer = self._transformation
        known = producer.side_output_types
        if output_tag.tag_id in known and known[output_tag.tag_id] != output_tag.type_info:
            raise GraphError(
                f"A side output with a matching id ({output_tag.tag_id!r}) was already requested "
                f"from operator {producer.describe()} with a different type "
                f"({known[output_tag.tag_id]!r} vs {output_tag.type_info!r}). This is not allowed, "
                "side output ids need to be unique."
            )
        known[output_tag.tag_id] = output_tag.type_info
        t = self._env._add_transformation(
            T.SIDE_OUTPUT,
            "SideOutput",
            [producer],
            output_tag=output_tag,
            output_type=output_tag.type_info,
            register=False,
        )
        return DataStream(self._env, t)

    # -- sinks ------------------------------------------------------------------------------
    def _sink(self, kind: str, name: str, function: Any = None, **params: Any) -> "DataStreamSink":
        spec = OperatorSpec(kind=kind, function=function, params=params)
        t = self._env._add_transformation(T.SINK, name, [self._transformation], operator=spec)
        return DataStreamSink(t, self._env)

    def add_sink(self, sink_func: Any) -> "DataStreamSink":
        if callable(getattr(sink_func, "create_writer", None)):  # Sink V2 given the legacy way: FlinkKafkaProducer
            return self.sink_to(sink_func)
        check_function(sink_func, "invoke", "Sink", "sink_func")
        return self._sink("sink", "Unnamed", sink_func)

    def sink_to(self, sink: Any) -> "DataStreamSink":
        bind = getattr(sink, "_raylink_bind_input_type", None)
        if callable(bind):  # FileSink: its SimpleStringEncoder writes records as Flink prints them
            sink = bind(self._transformation.output_type)
        hook = getattr(sink, "_raylink_sink_spec", None)
        if callable(hook):
            kind, name, function, params = hook()
            return self._sink(kind, name, function, **params)
        if callable(getattr(sink, "create_writer", None)):  # Flink's Sink V2 (writer + committer)
            return self._sink("sink_v2", type(sink).__name__, None, sink=sink)
        check_function(sink, "invoke", "Sink", "sink")
        return self._sink("sink", "Unnamed", sink)

    def sink_to_spark(
        self,
        path: Optional[str] = None,
        table: Optional[str] = None,
        schema: Any = None,
        mode: str = "append",
        format: Optional[str] = None,
        partition_by: Any = None,
        flush_interval: Optional[float] = None,
        options: Optional[dict] = None,
        name: str = "Spark Sink",
        **kwargs: Any,
    ) -> "DataStreamSink":
        """Write the stream to Spark (RayDP). Without ``path``/``table`` the records come back
        as one Spark DataFrame: ``raylink.connectors.spark.get_spark_dataframe(result)``;
        with one, a Spark write (``mode``, ``format``, ``partition_by``) when the input ends,
        or one append every ``flush_interval`` seconds. ``schema``: a Spark DDL string or
        ``StructType``, else the stream's type. See :mod:`raylink.connectors.spark.sink`."""
        from raylink.connectors.spark.sink import SparkSink

        sink = SparkSink(
            path=path,
            table=table,
            schema=schema,
            mode=mode,
            format=format,
            partition_by=partition_by,
            options=options,
            flush_interval=flush_interval,
            name=name,
            stream_type=self._transformation.output_type,
            configuration=self._env.configuration,
            **kwargs,
        )
        return self.sink_to(sink)

    def print(self, sink_identifier: Optional[str] = None) -> "DataStreamSink":
        """Print every record to stdout as PyFlink prints it for this stream's declared type
        (``(a,5)`` for a TUPLE, ``+I[a,5]`` for a ROW, ``str(record)`` without a type), after
        ``N> `` (the subtask, when parallel) or ``sink_identifier:N> ``."""
        return self._sink(
            "print",
            "Print to Std. Out",
            None,
            prefix=sink_identifier,
            input_type=declared_type(self._transformation.output_type),
        )

    def collect_sink(self, collect_id: str) -> "DataStreamSink":
        """A sink whose records the job hands back to the driver (``execute_and_collect``)."""
        return self._sink("collect", "Collect Sink", None, collect_id=collect_id)

    def execute_and_collect(self, job_execution_name: Optional[str] = None, limit: Optional[int] = None):
        return self._env._execute_and_collect(self, job_execution_name, limit)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._transformation!r})"

    # -- event time and windows (the windowed streams below) ----------------------------------------------
    def assign_timestamps_and_watermarks(self, watermark_strategy: Any) -> "DataStream":
        return assign_timestamps_and_watermarks(self, watermark_strategy)

    def window_all(self, window_assigner: Any) -> Any:
        return AllWindowedStream(self, window_assigner)

    def count_window_all(self, size: int, slide: int = 0) -> Any:
        return count_window_all(self, size, slide)


_KEYED_UNSUPPORTED = "for KeyedStream is not supported."


class KeyedStream(DataStream):
    """A stream partitioned by key (PyFlink's ``KeyedStream``)."""

    class AccumulateType(Enum):
        """The built-in aggregations (``sum``, ``min``, ``max``, ``min_by``, ``max_by``)."""

        MIN = 1
        MAX = 2
        MIN_BY = 3
        MAX_BY = 4
        SUM = 5

    def __init__(
        self,
        env: "StreamEnvironment",
        transformation: T.Transformation,
        key_selector: Callable,
        origin: DataStream,
    ) -> None:
        super().__init__(env, transformation)
        self._key_selector = key_selector
        self._origin = origin

    def get_key_selector(self) -> Callable:
        return self._key_selector

    def reduce(self, func: Any) -> DataStream:
        check_function(func, "reduce", "Keyed Reduce")
        return self._one_input("reduce", "Keyed Reduce", func, self._transformation.output_type)

    def _aggregate(self, agg: str, field: Any) -> DataStream:
        if field is not None and not isinstance(field, (int, str)):
            raise TypeError(f"{agg}: the field must be a position (int) or a name (str), got {field!r}")
        check_declared_field(agg, field, declared_type(self._transformation.output_type), "Keyed Aggregation")
        return self._one_input(
            "aggregate", "Keyed Aggregation", None, self._transformation.output_type, agg=agg, field=field
        )

    def sum(self, position_to_sum: Any = 0) -> DataStream:
        return self._aggregate("sum", position_to_sum)

    def min(self, position_to_min: Any = 0) -> DataStream:
        return self._aggregate("min", position_to_min)

    def max(self, position_to_max: Any = 0) -> DataStream:
        return self._aggregate("max", position_to_max)

    def min_by(self, position_to_min_by: Any = 0) -> DataStream:
        return self._aggregate("min_by", position_to_min_by)

    def max_by(self, position_to_max_by: Any = 0) -> DataStream:
        return self._aggregate("max_by", position_to_max_by)

    def process(self, func: Any, output_type: Any = None) -> DataStream:
        check_function(func, "process_element", "KeyedProcess")
        return self._one_input("keyed_process", "KeyedProcess", func, output_type)

    # -- what PyFlink refuses on a KeyedStream ------------------------------------------
    def _refuse_partitioning(self, *args: Any, **kwargs: Any):
        raise GraphError("Cannot override partitioning for KeyedStream.")

    forward = rebalance = rescale = shuffle = broadcast = global_ = _refuse_partitioning
    partition_custom = _refuse_partitioning

    def set_parallelism(self, parallelism: int):
        raise GraphError("Set parallelism " + _KEYED_UNSUPPORTED)

    def set_max_parallelism(self, max_parallelism: int):
        raise GraphError("Set max parallelism " + _KEYED_UNSUPPORTED)

    def name(self, name: str):
        raise GraphError("Set name " + _KEYED_UNSUPPORTED)

    def uid(self, uid: str):
        raise GraphError("Set uid " + _KEYED_UNSUPPORTED)

    def slot_sharing_group(self, slot_sharing_group: str):
        raise GraphError("Setting slot sharing group " + _KEYED_UNSUPPORTED)

    def start_new_chain(self):
        raise GraphError("Start new chain " + _KEYED_UNSUPPORTED)

    def disable_chaining(self):
        raise GraphError("Disable chaining " + _KEYED_UNSUPPORTED)

    def get_name(self) -> str:
        raise GraphError("Get name of KeyedStream is not supported.")

    def set_uid_hash(self, uid_hash: str):
        raise GraphError("Set uid hash " + _KEYED_UNSUPPORTED)

    def set_buffer_timeout(self, timeout_millis: int):
        raise GraphError("Set buffer timeout " + _KEYED_UNSUPPORTED)

    def set_description(self, description: str):
        raise GraphError("Set description " + _KEYED_UNSUPPORTED)

    def force_non_parallel(self):
        raise GraphError("Set force non-parallel " + _KEYED_UNSUPPORTED)

    def cache(self):
        raise GraphError("Cache " + _KEYED_UNSUPPORTED)

    def project(self, *field_indexes: int) -> DataStream:
        return DataStream(self._env, self._transformation).project(*field_indexes)

    def execute_and_collect(self, job_execution_name: Optional[str] = None, limit: Optional[int] = None):
        """As PyFlink: every record as ``Row(f0=key, f1=record)``, in the order the records
        reach the (parallelism 1) collect sink. PyFlink gives the key as its ``key_type``
        declares it (pickled bytes without one); here it is always the key itself."""
        selector = self._key_selector
        origin = self._origin._transformation
        # pair each record with its key where it is produced (chained, same parallelism) so the
        # hash exchange into the collect sink keeps the records' order per channel
        pairs = DataStream(self._env, origin)._one_input("map", "Map", lambda value: Row(f0=selector(value), f1=value))
        pairs._transformation.parallelism = origin.parallelism
        pairs._transformation.max_parallelism = origin.max_parallelism
        keyed = pairs._partition(PartitionerSpec("HASH", key_selector=itemgetter(0)))
        return self._env._execute_and_collect(keyed, job_execution_name, limit)

    # -- windows (the windowed streams below) ----------------------------------------------------------
    def window(self, window_assigner: Any) -> Any:
        return WindowedStream(self, window_assigner)

    def count_window(self, size: int, slide: int = 0) -> Any:
        return count_window(self, size, slide)


class ConnectedStreams:
    """Two streams of possibly different types, processed by one two-input operator."""

    def __init__(self, stream1: DataStream, stream2: DataStream) -> None:
        self.stream1 = stream1
        self.stream2 = stream2

    def _is_keyed(self) -> bool:
        return isinstance(self.stream1, KeyedStream) and isinstance(self.stream2, KeyedStream)

    def key_by(self, key_selector1: Any, key_selector2: Any, key_type: Any = None) -> "ConnectedStreams":
        return ConnectedStreams(self.stream1.key_by(key_selector1), self.stream2.key_by(key_selector2))

    def _two_input(self, kind: str, name: str, func: Any, output_type: Any) -> DataStream:
        params = {}
        if self._is_keyed():
            params = {
                "key_selector1": self.stream1._key_selector,
                "key_selector2": self.stream2._key_selector,
            }
        spec = OperatorSpec(kind=kind, function=func, params=params)
        env = self.stream1._env
        t = env._add_transformation(
            T.TWO_INPUT,
            name,
            [self.stream1._transformation, self.stream2._transformation],
            operator=spec,
            output_type=output_type,
        )
        return DataStream(env, t)

    @staticmethod
    def _check_pair(func: Any, methods: tuple[str, str], operator: str) -> None:
        if isinstance(func, tuple) and len(func) == 2 and all(callable(f) for f in func):
            return
        if all(callable(getattr(func, m, None)) for m in methods):
            return
        raise TypeError(
            f"{operator}: expected an object with '{methods[0]}' and '{methods[1]}' methods "
            f"or a pair of callables, got {type(func).__name__}"
        )

    def map(self, func: Any, output_type: Any = None) -> DataStream:
        self._check_pair(func, ("map1", "map2"), "Co-Map")
        return self._two_input("co_map", "Co-Map", func, output_type)

    def flat_map(self, func: Any, output_type: Any = None) -> DataStream:
        self._check_pair(func, ("flat_map1", "flat_map2"), "Co-Flat Map")
        return self._two_input("co_flat_map", "Co-Flat Map", func, output_type)

    def process(self, func: Any, output_type: Any = None) -> DataStream:
        self._check_pair(func, ("process_element1", "process_element2"), "Co-Process")
        if self._is_keyed():
            return self._two_input("keyed_co_process", "KeyedCoProcess", func, output_type)
        return self._two_input("co_process", "Co-Process", func, output_type)


class BroadcastStream:
    """A stream with broadcast state(s) (PyFlink's ``BroadcastStream``), made by
    ``DataStream.broadcast(descriptor, ...)``. It only connects: ``ds.connect(bs)`` or
    ``keyed.connect(bs)`` give a ``BroadcastConnectedStream``."""

    def __init__(self, input_stream: DataStream, broadcast_state_descriptors: list) -> None:
        self.input_stream = input_stream  # the broadcast-partitioned stream
        self.broadcast_state_descriptors = list(broadcast_state_descriptors)

    def get_execution_environment(self) -> "StreamEnvironment":
        return self.input_stream.get_execution_environment()


class BroadcastConnectedStream:
    """A (keyed or non-keyed) stream connected with a ``BroadcastStream`` (PyFlink's
    ``BroadcastConnectedStream``); ``process`` runs a ``BroadcastProcessFunction`` (non-keyed)
    or a ``KeyedBroadcastProcessFunction`` (keyed) over the pair. The operator's first input
    is the non-broadcast stream, its second the broadcast one (BROADCAST partitioning)."""

    def __init__(
        self, non_broadcast_stream: DataStream, broadcast_stream: BroadcastStream, broadcast_state_descriptors: list
    ) -> None:
        self.non_broadcast_stream = non_broadcast_stream
        self.broadcast_stream = broadcast_stream
        self.broadcast_state_descriptors = list(broadcast_state_descriptors)

    def _is_keyed_stream(self) -> bool:
        return isinstance(self.non_broadcast_stream, KeyedStream)

    def process(self, func: Any, output_type: Any = None) -> DataStream:
        keyed = self._is_keyed_stream()
        if isinstance(func, BroadcastProcessFunction) and keyed:
            raise TypeError("BroadcastProcessFunction should be applied to non-keyed DataStream")
        if isinstance(func, KeyedBroadcastProcessFunction) and not keyed:
            raise TypeError("KeyedBroadcastProcessFunction should be applied to keyed DataStream")
        expected = "KeyedBroadcastProcessFunction" if keyed else "BroadcastProcessFunction"
        if not all(callable(getattr(func, m, None)) for m in ("process_element", "process_broadcast_element")):
            raise TypeError(
                f"{'Keyed-' if keyed else ''}Co-Process-Broadcast: expected a {expected} (an object with "
                f"'process_element' and 'process_broadcast_element' methods), got {type(func).__name__}"
            )
        spec = OperatorSpec(
            kind="keyed_co_broadcast_process" if keyed else "co_broadcast_process",
            function=func,
            params={"broadcast_state_descriptors": list(self.broadcast_state_descriptors)},
        )
        if keyed:
            spec.key_selector = self.non_broadcast_stream._key_selector  # type: ignore[attr-defined]
        env = self.non_broadcast_stream.get_execution_environment()
        t = env._add_transformation(
            T.TWO_INPUT,
            "Keyed-Co-Process-Broadcast" if keyed else "Co-Process-Broadcast",
            [self.non_broadcast_stream.get_transformation(), self.broadcast_stream.input_stream.get_transformation()],
            operator=spec,
            output_type=output_type,
        )
        return DataStream(env, t)


class DataStreamSink(_Configurable):
    """The end of a stream (PyFlink's ``DataStreamSink``): only the operator setters."""

    def __init__(self, transformation: T.Transformation, env: "Optional[StreamEnvironment]" = None) -> None:
        self._transformation = transformation
        self._env = env

    def get_transformation(self) -> T.Transformation:
        return self._transformation


class _Projection:
    """``DataStream.project``'s map function: a tuple of the chosen fields."""

    __slots__ = ("_get", "_single")

    def __init__(self, field_indexes: tuple) -> None:
        self._get = itemgetter(*field_indexes)
        self._single = len(field_indexes) == 1

    def map(self, value: Any) -> tuple:
        return (self._get(value),) if self._single else self._get(value)

    def __reduce__(self):
        return (_Projection, (self._get.__reduce__()[1],))


_CACHED_UNSUPPORTED = "for CachedDataStream is not supported."


class CachedDataStream(DataStream):
    """PyFlink's ``CachedDataStream`` (made by ``DataStream.cache()``): the stream itself, whose
    operator can no longer be configured. raylink recomputes it in every job that uses it,
    so ``invalidate()`` has nothing to release."""

    def invalidate(self) -> None:
        """Nothing to release: raylink keeps no cached result."""

    def _refuse(self, what: str) -> Any:
        raise GraphError(f"{what} {_CACHED_UNSUPPORTED}")

    def set_parallelism(self, parallelism: int):
        return self._refuse("Set parallelism")

    def set_max_parallelism(self, max_parallelism: int):
        return self._refuse("Set max parallelism")

    def name(self, name: str):
        return self._refuse("Set name")

    def get_name(self) -> str:
        raise GraphError("Get name of CachedDataStream is not supported.")

    def uid(self, uid: str):
        return self._refuse("Set uid")

    def set_uid_hash(self, uid_hash: str):
        return self._refuse("Set uid hash")

    def force_non_parallel(self):
        return self._refuse("Set force non-parallel")

    def set_buffer_timeout(self, timeout_millis: int):
        return self._refuse("Set buffer timeout")

    def start_new_chain(self):
        return self._refuse("Start new chain")

    def disable_chaining(self):
        return self._refuse("Disable chaining")

    def slot_sharing_group(self, slot_sharing_group: Any):
        return self._refuse("Setting slot sharing group")

    def set_description(self, description: str):
        return self._refuse("Set description")


# -- windowed streams (PyFlink keeps them in data_stream too) -----------------------------------------
def _function_name(function: Any) -> str:
    if function is None:
        return "PassThrough"
    name = type(function).__name__
    return getattr(function, "__name__", name) if name == "function" else name


def _check_methods(function: Any, methods: tuple, what: str) -> None:
    missing = [m for m in methods if not callable(getattr(function, m, None))]
    if missing:
        raise TypeError(
            f"{what}: expected an object with {', '.join(m + '()' for m in missing)}, got {type(function).__name__}"
        )


class _WindowedStreamBase:
    _ALL = False

    def __init__(self, keyed_stream: "KeyedStream", window_assigner: WindowAssigner) -> None:
        if not callable(getattr(window_assigner, "assign_windows", None)):
            raise TypeError(f"{self._api_name()}: expected a WindowAssigner, got {type(window_assigner).__name__}")
        self._keyed_stream = keyed_stream
        self._window_assigner = window_assigner
        self._trigger: Optional[Trigger] = None
        self._evictor: Any = None
        self._allowed_lateness = 0
        self._late_data_output_tag: Optional[OutputTag] = None

    def _api_name(self) -> str:
        return "window_all" if self._ALL else "window"

    def get_execution_environment(self) -> Any:
        return self._keyed_stream.get_execution_environment()

    def get_input_type(self) -> Any:
        return self._keyed_stream.get_type()

    # -- configuration -----------------------------------------------------------------------------
    def trigger(self, trigger: Trigger):
        if not callable(getattr(trigger, "on_element", None)):
            raise TypeError(f"trigger: expected a Trigger, got {type(trigger).__name__}")
        if isinstance(self._window_assigner, MergingWindowAssigner) and not trigger.can_merge():
            raise TypeError("A merging window assigner cannot be used with a trigger that does not support merging.")
        self._trigger = trigger
        return self

    def evictor(self, evictor: Any):
        if not (callable(getattr(evictor, "evict_before", None)) and callable(getattr(evictor, "evict_after", None))):
            raise TypeError(f"evictor: expected an Evictor, got {type(evictor).__name__}")
        if isinstance(self._window_assigner, MergingWindowAssigner):
            raise TypeError("Cannot use a merging WindowAssigner with an Evictor.")
        self._evictor = evictor
        return self

    def allowed_lateness(self, time_ms: Any):
        lateness = to_millis(time_ms, "allowed_lateness")
        if lateness < 0:
            raise ValueError("The allowed lateness cannot be negative.")
        self._allowed_lateness = lateness
        return self

    def side_output_late_data(self, output_tag: OutputTag):
        if not isinstance(output_tag, OutputTag):
            raise TypeError(f"side_output_late_data: expected an OutputTag, got {type(output_tag).__name__}")
        self._late_data_output_tag = output_tag
        return self

    # -- window functions --------------------------------------------------------------------------
    def _window_function_kind(self, function: Any, what: str) -> str:
        """ "process" or "window" (all-window variants for ``window_all``)."""
        if callable(getattr(function, "process", None)) and not isinstance(function, type):
            return "process_all" if self._ALL else "process"
        if callable(getattr(function, "apply", None)) or callable(function):
            return "all_window" if self._ALL else "window"
        raise TypeError(
            f"{what}: the window function must be a {'AllWindowFunction' if self._ALL else 'WindowFunction'}, "
            f"a {'ProcessAllWindowFunction' if self._ALL else 'ProcessWindowFunction'} or a callable, "
            f"got {type(function).__name__}"
        )

    def _incremental(self, function: Any, window_function: Any, what: str) -> tuple:
        """(function kind, operator name) of an incremental ``reduce`` / ``aggregate``, with
        or without a window function evaluating its result."""
        if window_function is None:
            return "pass", _function_name(function)
        kind = self._window_function_kind(window_function, what)
        return kind, f"{_function_name(function)}, {_function_name(window_function)}"

    def reduce(self, reduce_function: Any, window_function: Any = None, output_type: Any = None) -> "DataStream":
        """Reduce each pane incrementally; emit the result (or pass it to ``window_function``)."""
        if not (callable(getattr(reduce_function, "reduce", None)) or callable(reduce_function)):
            raise TypeError(
                f"Window Reduce: reduce_function must be a ReduceFunction or a callable, "
                f"got {type(reduce_function).__name__}"
            )
        kind, name = self._incremental(reduce_function, window_function, "Window Reduce")
        if window_function is None and output_type is None:
            output_type = self.get_input_type()
        return self._build(
            "reducing",
            name,
            output_type,
            reduce_function=reduce_function,
            window_function=window_function,
            function_kind=kind,
        )

    def aggregate(
        self,
        aggregate_function: Any,
        window_function: Any = None,
        accumulator_type: Any = None,
        output_type: Any = None,
    ) -> "DataStream":
        """Aggregate each pane incrementally with an ``AggregateFunction``."""
        _check_methods(aggregate_function, ("create_accumulator", "add", "get_result"), "Window Aggregate")
        if isinstance(self._window_assigner, MergingWindowAssigner):
            _check_methods(aggregate_function, ("merge",), "Window Aggregate over merging windows")
        kind, name = self._incremental(aggregate_function, window_function, "Window Aggregate")
        return self._build(
            "aggregating",
            name,
            output_type,
            aggregate_function=aggregate_function,
            window_function=window_function,
            function_kind=kind,
        )

    def apply(self, window_function: Any, output_type: Any = None) -> "DataStream":
        """Buffer each pane and evaluate it with a (All)WindowFunction: ``apply([key,] window, inputs)``."""
        if not (callable(getattr(window_function, "apply", None)) or callable(window_function)):
            raise TypeError(
                f"Window Apply: expected a WindowFunction or a callable, got {type(window_function).__name__}"
            )
        kind = "all_window" if self._ALL else "window"
        return self._build(
            "list", _function_name(window_function), output_type, window_function=window_function, function_kind=kind
        )

    def process(self, process_window_function: Any, output_type: Any = None) -> "DataStream":
        """Buffer each pane and evaluate it with a Process(All)WindowFunction."""
        if not callable(getattr(process_window_function, "process", None)):
            raise TypeError(
                f"Window Process: expected a {'ProcessAllWindowFunction' if self._ALL else 'ProcessWindowFunction'}, "
                f"got {type(process_window_function).__name__}"
            )
        kind = "process_all" if self._ALL else "process"
        return self._build(
            "list",
            _function_name(process_window_function),
            output_type,
            window_function=process_window_function,
            function_kind=kind,
        )

    def _build(self, contents: str, function_name: str, output_type: Any, **functions: Any) -> "DataStream":
        trigger = self._trigger or self._window_assigner.get_default_trigger(self.get_execution_environment())
        descriptor = WindowOperatorDescriptor(
            assigner=self._window_assigner,
            trigger=trigger,
            evictor=self._evictor,
            allowed_lateness=self._allowed_lateness,
            late_data_output_tag=self._late_data_output_tag,
            contents=contents,
            **functions,
        )
        keyed = self._keyed_stream
        env = keyed.get_execution_environment()
        spec = OperatorSpec(kind=WINDOW_KIND, function=descriptor, key_selector=keyed.get_key_selector())
        t = env._add_transformation(
            T.ONE_INPUT,
            descriptor.describe(function_name, self._ALL),
            [keyed.get_transformation()],
            operator=spec,
            output_type=output_type,
        )
        if self._ALL:
            t.parallelism = 1
            t.non_parallel = True
        return DataStream(env, t)


class WindowedStream(_WindowedStreamBase):
    """A keyed stream cut into windows (PyFlink's ``WindowedStream``)."""


class AllWindowedStream(_WindowedStreamBase):
    """A non-keyed stream cut into windows, evaluated by one subtask (PyFlink's ``AllWindowedStream``)."""

    _ALL = True

    def __init__(self, data_stream: "DataStream", window_assigner: WindowAssigner) -> None:
        super().__init__(data_stream.key_by(NullByteKeySelector()), window_assigner)


def _count_window(stream: Any, size: int, slide: int, all_windows: bool) -> Any:
    what = "count_window_all" if all_windows else "count_window"
    for name, value in (("size", size), ("slide", slide)):
        if not isinstance(value, int) or isinstance(value, bool):
            raise TypeError(f"{what}: {name} must be an int, got {value!r}")
    if size <= 0:
        raise ValueError(f"{what}: size must be positive, got {size}")
    if slide < 0:
        raise ValueError(f"{what}: slide must not be negative, got {slide}")
    windowed = (
        AllWindowedStream(stream, GlobalWindows.create())
        if all_windows
        else WindowedStream(stream, GlobalWindows.create())
    )
    if slide == 0:  # Flink: tumbling count windows purge on every firing
        return windowed.trigger(PurgingTrigger.of(CountTrigger.of(size)))
    # Flink: the last `size` elements, every `slide` elements (the first firings hold fewer)
    return windowed.evictor(CountEvictor.of(size)).trigger(CountTrigger.of(slide))


def count_window(keyed_stream: "KeyedStream", size: int, slide: int = 0) -> WindowedStream:
    """Flink's ``KeyedStream.countWindow``: ``slide`` 0 fires every ``size`` elements of a key with
    exactly them (``GlobalWindows`` + ``PurgingTrigger(CountTrigger(size))``); otherwise every
    ``slide`` elements of a key with its last ``size`` elements (``GlobalWindows`` +
    ``CountEvictor(size)`` + ``CountTrigger(slide)``: every element is kept until evicted, and a
    reduce / aggregate runs over what the evictor leaves when the window fires).

    The contents follow the order in which a key's elements reach the window operator: it is the
    input order when they come from one upstream subtask (or each key from one), but a
    ``rebalance`` before the ``key_by`` interleaves the upstream subtasks, in Flink as well."""
    return _count_window(keyed_stream, size, slide, False)


def count_window_all(data_stream: "DataStream", size: int, slide: int = 0) -> AllWindowedStream:
    """Flink's ``DataStream.countWindowAll``: :func:`count_window` over the whole stream, in one
    subtask (in the order elements reach it: interleaved when several upstream subtasks feed it)."""
    return _count_window(data_stream, size, slide, True)


def assign_timestamps_and_watermarks(data_stream: "DataStream", watermark_strategy: Any) -> "DataStream":
    """Flink's ``assignTimestampsAndWatermarks``: a chained operator at the input's parallelism."""
    if not callable(getattr(watermark_strategy, "create_watermark_generator", None)):
        raise TypeError(
            f"assign_timestamps_and_watermarks: expected a WatermarkStrategy, got {type(watermark_strategy).__name__}"
        )
    source = data_stream.get_transformation()
    env = data_stream.get_execution_environment()
    spec = OperatorSpec(kind=TIMESTAMPS_KIND, function=watermark_strategy)
    t = env._add_transformation(
        T.ONE_INPUT, "Timestamps/Watermarks", [source], operator=spec, output_type=source.output_type
    )
    t.parallelism = source.parallelism
    return DataStream(env, t)
