"""PyFlink's ``FileSource`` (``pyflink.datastream.connectors.file_system``): records read
from files, for ``env.from_source(source, watermark_strategy, name)``.

``FileSource.for_record_stream_format(StreamFormat.text_line_format(), *paths).build()``
reads every file under the paths (directories recursively; names starting with ``.`` or
``_`` are skipped, as Flink's default file filter does) and emits one record per line,
without its line terminator. Files ending in ``.gz``/``.gzip``, ``.bz2``, ``.xz`` or
``.deflate`` are decompressed, as Flink's stream formats do. By default the source is
bounded (``process_static_file_set``: the files present when a subtask starts);
``monitor_continuously(interval)`` makes it unbounded: it lists the paths again every
``interval`` and reads each new file once. A path is a local path or any fsspec URL.

Files are spread over the source's subtasks by a stable hash of their path (Flink hands
splits out on request instead; every file is read by exactly one subtask either way),
each subtask reading its files in path order. Checkpoints hold the files read and the
line reached in the current one, so a restored job goes on where the checkpoint was
(Flink's ``TextLineInputFormat`` also re-reads and skips lines on recovery).

These classes are configuration: plain, picklable, read-only once built. The reading
happens in :mod:`raylink.connectors.file.source_operator` on the source task's thread.
"""

from __future__ import annotations

import codecs
import enum
from typing import Any, Optional, Tuple

from raylink.core.options import parse_duration_ms
from raylink.operators.connector import CONNECTOR_SOURCE


class Boundedness(enum.Enum):
    """Whether a source ends (Flink's ``Boundedness``)."""

    BOUNDED = "BOUNDED"
    CONTINUOUS_UNBOUNDED = "CONTINUOUS_UNBOUNDED"


class StreamFormat:
    """Reads the records of one file from its byte stream (Flink's ``StreamFormat``)."""

    def __init__(self, kind: str, charset_name: str = "UTF-8") -> None:
        self.kind = kind
        self.charset_name = charset_name

    @staticmethod
    def text_line_format(charset_name: str = "UTF-8") -> "StreamFormat":
        """One record per line, decoded with ``charset_name``, without its line terminator
        (``\\n``, ``\\r\\n`` or ``\\r``) — Flink's ``TextLineInputFormat``."""
        try:
            codecs.lookup(charset_name)
        except LookupError:
            raise ValueError(f"StreamFormat.text_line_format: unknown charset {charset_name!r}") from None
        return StreamFormat("text_line", charset_name)

    def __repr__(self) -> str:
        return f"StreamFormat.text_line_format({self.charset_name!r})"


class BulkFormat:
    """Flink's ``BulkFormat`` (ORC, Parquet, ... readers of the JVM): not available in raylink."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise NotImplementedError(
            "BulkFormat: raylink has no JVM bulk formats (ORC/Parquet/Avro readers); read Parquet "
            "tables with env.from_spark_table(path) or env.from_spark(df), or text with "
            "FileSource.for_record_stream_format(StreamFormat.text_line_format(), path)"
        )


class FileEnumeratorProvider:
    """How files are listed (Flink's ``FileEnumeratorProvider``); raylink's enumerator lists
    files recursively and never splits one, so both providers behave the same."""

    def __init__(self, splittable: bool) -> None:
        self.splittable = splittable

    @staticmethod
    def default_splittable_file_enumerator() -> "FileEnumeratorProvider":
        return FileEnumeratorProvider(True)

    @staticmethod
    def default_non_splittable_file_enumerator() -> "FileEnumeratorProvider":
        return FileEnumeratorProvider(False)


class FileSplitAssignerProvider:
    """Which subtask reads which file (Flink's ``FileSplitAssignerProvider``); raylink assigns
    by a hash of the path whatever the provider."""

    @staticmethod
    def locality_aware_split_assigner() -> "FileSplitAssignerProvider":
        return FileSplitAssignerProvider()


class FileSource:
    """Reads files as a stream of records (see the module docstring)."""

    def __init__(
        self,
        stream_format: StreamFormat,
        paths: Tuple[str, ...],
        discovery_interval_ms: Optional[int] = None,
        storage_options: Optional[dict] = None,
    ) -> None:
        if not isinstance(stream_format, StreamFormat):
            raise TypeError(
                f"FileSource: {stream_format!r} is not a StreamFormat (e.g. StreamFormat.text_line_format())"
            )
        if not paths:
            raise ValueError("FileSource: at least one path is required")
        for path in paths:
            if not isinstance(path, str) or not path.strip():
                raise ValueError(f"FileSource: path {path!r} must be a non-empty path or URL")
        if discovery_interval_ms is not None and discovery_interval_ms <= 0:
            raise ValueError(
                f"FileSource.monitor_continuously: the discovery interval must be > 0, got {discovery_interval_ms} ms"
            )
        self.stream_format = stream_format
        self.paths = tuple(paths)
        self.discovery_interval_ms = discovery_interval_ms
        self.storage_options = dict(storage_options or {})

    @staticmethod
    def for_record_stream_format(stream_format: StreamFormat, *paths: str) -> "FileSourceBuilder":
        """A builder of a source reading ``paths`` (files or directories) with ``stream_format``."""
        return FileSourceBuilder(stream_format, paths)

    @staticmethod
    def for_bulk_file_format(bulk_format: Any, *paths: str) -> "FileSourceBuilder":
        BulkFormat()  # raises, naming the alternatives
        raise AssertionError("unreachable")

    def get_boundedness(self) -> Boundedness:
        return Boundedness.BOUNDED if self.discovery_interval_ms is None else Boundedness.CONTINUOUS_UNBOUNDED

    # -- the runtime side ---------------------------------------------------------------------------
    def _raylink_source_spec(self) -> Tuple[str, Any, dict, bool]:
        """(operator kind, function, parameters, non-parallel) for ``env.from_source``."""
        return CONNECTOR_SOURCE, self, {}, False

    def create_operator(self, spec: Any) -> Any:
        from raylink.connectors.file.source_operator import FileSourceOperator  # fsspec: where the source runs

        return FileSourceOperator(self)

    def __repr__(self) -> str:
        mode = "bounded" if self.discovery_interval_ms is None else f"monitoring every {self.discovery_interval_ms} ms"
        return f"FileSource({self.stream_format!r}, {list(self.paths)!r}, {mode})"


class FileSourceBuilder:
    """Configures a :class:`FileSource` (PyFlink's ``FileSourceBuilder``)."""

    def __init__(self, stream_format: StreamFormat, paths: Tuple[str, ...]) -> None:
        self._format = stream_format
        self._paths = tuple(paths)
        self._interval: Optional[int] = None
        self._storage_options: dict = {}

    def monitor_continuously(self, discovery_interval: Any) -> "FileSourceBuilder":
        """Unbounded: list the paths again every ``discovery_interval`` (a ``Duration``,
        milliseconds or a text like ``"10 s"``) and read the files that appeared."""
        self._interval = parse_duration_ms(discovery_interval)
        if self._interval <= 0:
            raise ValueError(
                f"FileSource.monitor_continuously: the discovery interval must be > 0, got {discovery_interval!r}"
            )
        return self

    def process_static_file_set(self) -> "FileSourceBuilder":
        """Bounded (the default): read the files present at the start, then end."""
        self._interval = None
        return self

    def set_file_enumerator(self, file_enumerator: FileEnumeratorProvider) -> "FileSourceBuilder":
        return self

    def set_split_assigner(self, split_assigner: FileSplitAssignerProvider) -> "FileSourceBuilder":
        return self

    def with_storage_options(self, **storage_options: Any) -> "FileSourceBuilder":
        """fsspec options of the input filesystem (credentials, endpoint; raylink's addition)."""
        self._storage_options.update(storage_options)
        return self

    def build(self) -> FileSource:
        return FileSource(self._format, self._paths, self._interval, self._storage_options)


__all__ = [
    "Boundedness",
    "BulkFormat",
    "FileEnumeratorProvider",
    "FileSource",
    "FileSourceBuilder",
    "FileSplitAssignerProvider",
    "StreamFormat",
]
