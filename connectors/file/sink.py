"""PyFlink's ``pyflink.datastream.connectors.file_system`` sink API: ``FileSink`` and what
configures it (``Encoder``, ``OutputFileConfig``, ``RollingPolicy``, ``BucketAssigner``).

``FileSink.for_row_format(path, Encoder.simple_string_encoder())...build()`` is an
exactly-once sink in Flink's Sink V2 shape (:mod:`raylink.core.sink`): records go
to hidden in-progress part files (``.part-<subtask>-<n>.inprogress.<uuid>``) in the bucket
folder ``<path>/<bucket id>``; a checkpoint turns closed part files into pending ones, and
only the commit after that checkpoint completes renames them to visible
``<prefix>-<subtask>-<n><suffix>`` files. The writer and committer live in
:mod:`raylink.connectors.file.sink_writer`; ``path`` is a local path or any fsspec URL.

What configures it is in :mod:`raylink.connectors.file.sink_config`; the sink itself is plain
configuration too, picklable, shared read-only by every subtask.
"""

from __future__ import annotations

import copy
import os
from typing import Any, Optional, Sequence

from raylink.connectors.file.sink_config import (
    BucketAssigner,
    DateTimeBucketAssigner,
    DefaultRollingPolicy,
    Encoder,
    OnCheckpointRollingPolicy,
    OutputFileConfig,
    RollingPolicy,
    SimpleStringEncoder,
)
from raylink.core.options import parse_duration_ms
from raylink.core.sink import Sink, SupportsCommitter, SupportsWriterState, WriterInitContext

# -- FileSink ---------------------------------------------------------------------------------------
_DEFAULT_BUCKET_CHECK_INTERVAL = 60_000


class FileSink(Sink, SupportsWriterState, SupportsCommitter):
    """Exactly-once file sink (Flink's ``FileSink``; see the module docstring).

    Part files go through three states: *in-progress* (hidden, being written), *pending*
    (closed at a checkpoint, still hidden) and *finished* (renamed to its visible name by
    the committer once that checkpoint completed). On restore the in-progress file of the
    checkpoint is truncated back to its length at that checkpoint and pending files are
    committed (again, idempotently), so readers see every record once. Resuming an
    in-progress file needs a filesystem that can truncate and append (the local one and
    ``memory://``); on others every checkpoint closes the in-progress files.
    """

    def __init__(
        self,
        base_path: str,
        encoder: Optional[Encoder],
        bucket_assigner: BucketAssigner,
        rolling_policy: RollingPolicy,
        output_file_config: OutputFileConfig,
        bucket_check_interval: int = _DEFAULT_BUCKET_CHECK_INTERVAL,
        storage_options: Optional[dict[str, Any]] = None,
        bulk_writer_factory: Any = None,
    ) -> None:
        if not isinstance(base_path, str) or not base_path.strip():
            raise ValueError(f"FileSink: base path {base_path!r} must be a non-empty path or URL")
        if bulk_writer_factory is not None:
            if not callable(getattr(bulk_writer_factory, "create", None)):
                raise TypeError(
                    f"FileSink: {bulk_writer_factory!r} is not a bulk writer factory "
                    f"(e.g. ParquetBulkWriters.for_row_type(...))"
                )
            if not isinstance(rolling_policy, OnCheckpointRollingPolicy):
                raise TypeError(
                    f"FileSink: a bulk format rolls its part files at every checkpoint; its rolling policy "
                    f"must be an OnCheckpointRollingPolicy, got {rolling_policy!r}"
                )
        elif not isinstance(encoder, Encoder):
            raise TypeError(f"FileSink: {encoder!r} is not an Encoder (e.g. Encoder.simple_string_encoder())")
        if not isinstance(bucket_assigner, BucketAssigner):
            raise TypeError(f"FileSink: {bucket_assigner!r} is not a BucketAssigner")
        if not isinstance(rolling_policy, RollingPolicy):
            raise TypeError(f"FileSink: {rolling_policy!r} is not a RollingPolicy")
        if not isinstance(output_file_config, OutputFileConfig):
            raise TypeError(f"FileSink: {output_file_config!r} is not an OutputFileConfig")
        if bucket_check_interval <= 0:
            raise ValueError(f"FileSink: bucket check interval must be > 0 ms, got {bucket_check_interval}")
        # a relative local path is the driver's (its tasks, or a session's Dispatcher, run elsewhere)
        self.base_path = base_path if ":" in base_path.split("/", 1)[0] else os.path.abspath(base_path)
        self.encoder = encoder
        self.bucket_assigner = bucket_assigner
        self.rolling_policy = rolling_policy
        self.output_file_config = output_file_config
        self.bucket_check_interval = bucket_check_interval
        self.storage_options = dict(storage_options or {})
        self.bulk_writer_factory = bulk_writer_factory

    def __repr__(self) -> str:
        return (
            f"FileSink({self.base_path!r}, {self.bulk_writer_factory or self.encoder!r}, {self.bucket_assigner!r}, "
            f"{self.rolling_policy!r}, {self.output_file_config!r})"
        )

    def _raylink_bind_input_type(self, type_info: Any) -> "FileSink":
        """This sink for a stream of ``type_info``: a ``SimpleStringEncoder`` writes its
        records as Flink's ``toString`` does (``DataStream.sink_to`` calls this)."""
        encoder = self.encoder
        if type_info is None or type(encoder) is not SimpleStringEncoder or encoder.record_type is not None:
            return self
        bound = copy.copy(self)
        bound.encoder = SimpleStringEncoder(encoder.charset_name, type_info)
        return bound

    # -- Sink V2 --------------------------------------------------------------------------------
    def create_writer(self, context: WriterInitContext):
        """A fresh :class:`raylink.connectors.file.sink_writer.FileWriter` for the subtask."""
        return self.restore_writer(context, ())

    def restore_writer(self, context: WriterInitContext, recovered_state: Sequence[Any]):
        """A ``FileWriter`` continuing from ``FileWriterState`` s of a checkpoint."""
        from raylink.connectors.file.sink_writer import FileWriter  # fsspec: where the sink runs

        return FileWriter(self, context, recovered_state)

    def create_committer(self):
        """A :class:`raylink.connectors.file.sink_writer.FileCommitter`."""
        from raylink.connectors.file.sink_writer import FileCommitter

        return FileCommitter(self.base_path, self.storage_options)

    # -- builders (PyFlink's) -------------------------------------------------------------------
    @staticmethod
    def for_row_format(base_path: str, encoder: Encoder) -> "FileSink.RowFormatBuilder":
        """A row-encoded sink writing to ``base_path`` with ``encoder``."""
        return FileSink.RowFormatBuilder(base_path, encoder)

    @staticmethod
    def for_bulk_format(base_path: str, writer_factory: Any) -> "FileSink.BulkFormatBuilder":
        """A bulk-encoded sink (e.g. ``ParquetBulkWriters.for_row_type(...)``) writing to
        ``base_path``; its part files roll at every checkpoint."""
        return FileSink.BulkFormatBuilder(base_path, writer_factory)

    class RowFormatBuilder:
        """Builder of a row-format :class:`FileSink` (date-time buckets, default rolling
        policy, ``part`` files and a 60 s bucket check interval unless set)."""

        def __init__(self, base_path: str, encoder: Encoder) -> None:
            self._base_path = base_path
            self._encoder = encoder
            self._bucket_assigner: BucketAssigner = DateTimeBucketAssigner()
            self._rolling_policy: RollingPolicy = DefaultRollingPolicy()
            self._output_file_config = OutputFileConfig()
            self._bucket_check_interval = _DEFAULT_BUCKET_CHECK_INTERVAL
            self._storage_options: dict[str, Any] = {}
            self._bulk_writer_factory: Any = None

        def with_bucket_check_interval(self, interval: int) -> "FileSink.RowFormatBuilder":
            """How often (ms) open part files are checked against the rolling policy's time rules."""
            self._bucket_check_interval = parse_duration_ms(interval)
            return self

        def with_bucket_assigner(self, bucket_assigner: BucketAssigner) -> "FileSink.RowFormatBuilder":
            self._bucket_assigner = bucket_assigner
            return self

        def with_rolling_policy(self, rolling_policy: RollingPolicy) -> "FileSink.RowFormatBuilder":
            self._rolling_policy = rolling_policy
            return self

        def with_output_file_config(self, output_file_config: OutputFileConfig) -> "FileSink.RowFormatBuilder":
            self._output_file_config = output_file_config
            return self

        def with_storage_options(self, **storage_options: Any) -> "FileSink.RowFormatBuilder":
            """fsspec options of the output filesystem (credentials, endpoint; raylink's addition)."""
            self._storage_options.update(storage_options)
            return self

        def build(self) -> "FileSink":
            return FileSink(
                self._base_path,
                self._encoder,
                self._bucket_assigner,
                self._rolling_policy,
                self._output_file_config,
                self._bucket_check_interval,
                self._storage_options,
                bulk_writer_factory=self._bulk_writer_factory,
            )

    class BulkFormatBuilder(RowFormatBuilder):
        """Builder of a bulk-format :class:`FileSink` (PyFlink's ``BulkFormatBuilder``): the
        row format's setters, rolling on checkpoint (``OnCheckpointRollingPolicy``, the only
        policy a bulk format takes)."""

        def __init__(self, base_path: str, writer_factory: Any) -> None:
            super().__init__(base_path, None)
            self._bulk_writer_factory = writer_factory
            self._rolling_policy = OnCheckpointRollingPolicy()


__all__ = ["FileSink"]
