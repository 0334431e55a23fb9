"""The PyFlink modules raylink has only as stand-ins, as data, and the import finder that makes them.

Flink's Java connectors (``raylink.api.connectors.jdbc``, ``.pulsar``, ...: PyFlink's
``pyflink.datastream.connectors.<name>``), its Java formats (``raylink.api.formats`` and
``raylink.api.formats.<name>``) and the Table API (``raylink.table`` and any
``raylink.table.<module>``) are not files: :class:`StandInFinder` (on ``sys.meta_path``, asked
after the files) makes each module on import from the tables below. Every name PyFlink exports
is importable, so a migrated program loads; constructing or using one raises
:class:`~raylink.api.pyflink_compat.unsupported.UnsupportedFeatureError` naming the alternative.
A Table API module hands out a stand-in for any public name (there are too many to list).

Thread-safe: imports hold the import lock; the tables are read-only.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
from typing import Any, Callable, Dict, List, Optional, Tuple

from raylink.api.pyflink_compat.unsupported import (
    FILES_OR_SPARK,
    NO_JVM,
    SPARK_SQL,
    define_unsupported,
    own_source,
    unsupported_module_getattr,
)

#: Flink's Java connectors: module name -> (feature, alternative, the names PyFlink exports)
JAVA_CONNECTORS: Dict[str, Tuple[str, str, List[str]]] = {
    "cassandra": (
        "the Cassandra connector (Java)",
        own_source("cassandra-driver"),
        [
            "CassandraSink",
            "ConsistencyLevel",
            "MapperOptions",
            "ClusterBuilder",
            "CassandraCommitter",
            "CassandraFailureHandler",
        ],
    ),
    "dynamic_kafka": (
        "the dynamic Kafka connector (Java)",
        own_source("a Kafka client (confluent-kafka, kafka-python)"),
        [
            "DynamicKafkaSource",
            "DynamicKafkaSourceBuilder",
            "KafkaMetadataService",
            "KafkaRecordDeserializationSchema",
            "KafkaStreamSetSubscriber",
            "KafkaStreamSubscriber",
            "StreamPatternSubscriber",
            "SingleClusterTopicMetadataService",
        ],
    ),
    "elasticsearch": (
        "the Elasticsearch connector (Java)",
        own_source("the elasticsearch client"),
        [
            "FlushBackoffType",
            "ElasticsearchEmitter",
            "Elasticsearch6SinkBuilder",
            "Elasticsearch7SinkBuilder",
            "ElasticsearchSink",
        ],
    ),
    "hybrid_source": (
        "the hybrid source (Java)",
        f"{NO_JVM}; chain the sources in Python: a SourceFunction for env.add_source(...) that reads one after the other",
        ["HybridSource", "HybridSourceBuilder"],
    ),
    "jdbc": (
        "the JDBC connector (Java)",
        own_source("a DB-API driver (or sink_to_spark for Spark's JDBC writer)"),
        ["JdbcSink", "JdbcConnectionOptions", "JdbcExecutionOptions"],
    ),
    "kinesis": (
        "the Kinesis connector (Java)",
        own_source("boto3"),
        [
            "KinesisShardAssigner",
            "KinesisDeserializationSchema",
            "WatermarkTracker",
            "PartitionKeyGenerator",
            "FlinkKinesisConsumer",
            "KinesisStreamsSink",
            "KinesisStreamsSinkBuilder",
            "KinesisFirehoseSink",
            "KinesisFirehoseSinkBuilder",
        ],
    ),
    "pulsar": (
        "the Pulsar connector (Java)",
        own_source("pulsar-client"),
        [
            "PulsarSource",
            "PulsarSourceBuilder",
            "StartCursor",
            "StopCursor",
            "RangeGenerator",
            "PulsarSink",
            "PulsarSinkBuilder",
            "MessageDelayer",
            "TopicRoutingMode",
        ],
    ),
    "rabbitmq": (
        "the RabbitMQ connector (Java)",
        own_source("pika"),
        ["RMQConnectionConfig", "RMQSource", "RMQSink"],
    ),
}


def _python_format(library: str) -> str:
    return (
        f"{NO_JVM}; records are Python objects: (de)serialize them in a map function with {library}, "
        f"or {FILES_OR_SPARK}"
    )


#: Flink's Java formats: module name -> (feature, alternative, the names PyFlink exports)
JAVA_FORMATS: Dict[str, Tuple[str, str, List[str]]] = {
    "avro": (
        "the Avro format (Java)",
        _python_format("fastavro"),
        ["AvroInputFormat"],  # the row schemas and AvroBulkWriters are api/formats/avro.py's
    ),
    "csv": (
        "the CSV format (Java)",
        _python_format("the csv module"),
        [
            "CsvSchema",
            "CsvSchemaBuilder",
            "CsvReaderFormat",
            "CsvBulkWriters",
        ],  # the row schemas are api/formats/csv.py's
    ),
    "orc": ("the ORC format (Java)", _python_format("pyarrow.orc"), ["OrcBulkWriters"]),
    "parquet": (
        "the Parquet format (Java)",
        _python_format("pyarrow.parquet"),
        ["AvroParquetReaders", "AvroParquetWriters", "ParquetColumnarRowInputFormat"],  # + ParquetBulkWriters
    ),
}

#: the Table API's feature, as its stand-ins name it
TABLE_FEATURE = "the Table API and SQL (pyflink.table)"

CONNECTORS_PACKAGE = "raylink.api.connectors"
FORMATS_PACKAGE = "raylink.api.formats"
TABLE_PACKAGE = "raylink.table"

_RAISES = "raises :class:`~raylink.api.pyflink_compat.unsupported.UnsupportedFeatureError` naming the alternative."


def table_getattr(module: str) -> Callable[[str], Any]:
    """The ``__getattr__`` of a Table API module: a stand-in for every public name."""
    return unsupported_module_getattr(module, TABLE_FEATURE, SPARK_SQL)


def _pyflink_name(name: str) -> str:
    if name.startswith("raylink.api."):
        return "pyflink.datastream." + name[len("raylink.api.") :]
    return name.replace("raylink.", "pyflink.", 1)


def _fill_connector(module: Any, short: str) -> None:
    feature, alternative, names = JAVA_CONNECTORS[short]
    module.__doc__ = (
        f"PyFlink's ``{_pyflink_name(module.__name__)}``: {feature[: -len(' (Java)')]}, one of Flink's Java "
        f"connectors, which raylink does not have. Every name PyFlink exports is importable, so a migrated "
        f"program loads; constructing or using one {_RAISES}"
    )
    module.__all__ = define_unsupported(vars(module), names, feature, alternative)


def _fill_format(module: Any, short: str) -> None:
    feature, alternative, names = JAVA_FORMATS[short]
    module.__doc__ = (
        f"PyFlink's ``{_pyflink_name(module.__name__)}``: one of Flink's Java formats, which raylink does "
        f"not have. Every name PyFlink exports is importable; constructing or using one {_RAISES}"
    )
    module.__all__ = define_unsupported(vars(module), names, feature, alternative)


def _fill_formats_package(module: Any) -> None:
    module.__path__ = []
    module.__doc__ = (
        "PyFlink's ``pyflink.datastream.formats``: Flink's Java (de)serialization formats (JSON, CSV, "
        "Avro, ORC, Parquet), which raylink does not have — its records are Python objects. The "
        f"submodules make every PyFlink name importable; using one {_RAISES}"
    )


def _fill_table_module(module: Any) -> None:
    module.__path__ = []
    module.__doc__ = f"PyFlink's ``{_pyflink_name(module.__name__)}``: not supported by raylink."
    module.__getattr__ = table_getattr(module.__name__)


def _filler(fullname: str) -> Optional[Tuple[Callable[[Any], None], bool]]:
    """How to make the stand-in module ``fullname`` and whether it is a package; None: not one."""
    parent, _, short = fullname.rpartition(".")
    if parent == CONNECTORS_PACKAGE and short in JAVA_CONNECTORS:
        return (lambda module: _fill_connector(module, short)), False
    if fullname == FORMATS_PACKAGE:
        return _fill_formats_package, True
    if parent == FORMATS_PACKAGE and short in JAVA_FORMATS:
        return (lambda module: _fill_format(module, short)), False
    if fullname.startswith(TABLE_PACKAGE + "."):
        return _fill_table_module, True
    return None


class StandInFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Makes the stand-in modules above; answers for no other name."""

    def find_spec(
        self, fullname: str, path: Any = None, target: Any = None
    ) -> Optional[importlib.machinery.ModuleSpec]:
        made = _filler(fullname)
        if made is None:
            return None
        return importlib.machinery.ModuleSpec(fullname, self, is_package=made[1])

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> None:
        return None  # the default module object

    def exec_module(self, module: Any) -> None:
        made = _filler(module.__name__)
        assert made is not None
        made[0](module)


def install() -> None:
    """Put the finder on ``sys.meta_path`` (once; after the path finders, so files win)."""
    if not any(isinstance(f, StandInFinder) for f in sys.meta_path):
        sys.meta_path.append(StandInFinder())


__all__ = ["JAVA_CONNECTORS", "JAVA_FORMATS", "TABLE_FEATURE", "StandInFinder", "install", "table_getattr"]
