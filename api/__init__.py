"""The PyFlink-style DataStream API of raylink."""

from raylink.api.configuration import Configuration
from raylink.api.datastream import ConnectedStreams, DataStream, DataStreamSink, KeyedStream
from raylink.api.stream_execution_environment import StreamExecutionEnvironment
from raylink.api.types import TypeInformation, Types
from raylink.graph.output_tag import OutputTag
from raylink.graph.stream_graph import GraphError

__all__ = [
    "Configuration",
    "ConnectedStreams",
    "DataStream",
    "DataStreamSink",
    "GraphError",
    "KeyedStream",
    "OutputTag",
    "StreamExecutionEnvironment",
    "TypeInformation",
    "Types",
]
