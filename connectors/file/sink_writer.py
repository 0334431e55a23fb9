"""The runtime of the exactly-once :class:`~raylink.connectors.file.sink.FileSink`:
its ``SinkWriter`` and ``Committer`` (Flink's ``FileWriter``, ``FileWriterBucket``,
``OutputStreamBasedPartFileWriter`` and ``FileCommitter``).

Part file lifecycle, per bucket folder ``<base path>/<bucket id>``:

* **in-progress** — the writer appends records to a hidden file
  ``.<prefix>-<subtask>-<n><suffix>.inprogress.<uuid>``; the rolling policy decides when
  it is closed (by size before a record, by time at the periodic bucket check, at a
  checkpoint). A checkpoint that does not close it records its path and length in the
  writer state (``snapshot_state``) after flushing it.
* **pending** — a closed in-progress file; ``prepare_commit()`` (at the barrier) returns
  one :class:`FileSinkCommittable` per pending file.
* **finished** — :class:`FileCommitter` renames the pending file to
  ``<prefix>-<subtask>-<n><suffix>`` after the checkpoint completed. Committing again is a
  no-op (the hidden file is gone and the visible one is there).

Restore (``FileSink.restore_writer`` with the states of checkpoint ``n``): the first bytes of
the in-progress file of ``n``, as many as recorded at ``n``, are copied into a fresh hidden
in-progress file that is written on — what came after ``n`` is replayed by the sources — and
the part counter continues from ``n``; the file of ``n`` itself is never written again, so a
zombie of the failed attempt still appending to it (a task on a host cut off from the
cluster) reaches no committed file; the pending
files of ``n`` are committed from the committables kept with ``n``. Files begun after ``n``
stay hidden forever (as in Flink for local files). Resuming needs a filesystem that can
truncate and append: the local one and ``memory://``; on every other fsspec filesystem
each checkpoint closes the in-progress files instead (Flink's bulk-format behaviour), so
the writer state never holds one.

Readers skip names starting with ``.`` or ``_`` (Flink's and Spark's/Hadoop's convention),
so they never see an in-progress or pending file.

Thread-safety: a ``FileWriter`` belongs to one task thread (timer callbacks included); a
``FileCommitter`` to one thread at a time. Writer states and committables are frozen
dataclasses of plain values (picklable, safe to hand to another thread).
"""

from __future__ import annotations

import logging
import posixpath
import uuid
from dataclasses import dataclass
from typing import Any, Optional, Sequence

import fsspec
from fsspec.implementations.local import LocalFileSystem
from fsspec.implementations.memory import MemoryFileSystem

from raylink.connectors.file.sink_config import BucketAssignerContext, SimpleStringEncoder
from raylink.core.sink import (
    Committer,
    CommittingSinkWriter,
    SinkWriterContext,
    StatefulSinkWriter,
    SystemClock,
    WriterInitContext,
)
from raylink.errors import RaylinkError

log = logging.getLogger(__name__)


class FileSinkError(RaylinkError, RuntimeError):
    """A part file the FileSink cannot write, restore or commit; the message names it."""


# -- state and committables (plain data) ------------------------------------------------------------
@dataclass(frozen=True)
class InProgressFileRecoverable:
    """An in-progress part file at a checkpoint: enough to truncate it back and go on."""

    path: str  # the hidden in-progress file (filesystem path)
    target_path: str  # its visible name once committed
    length: int  # bytes at the checkpoint
    creation_time: int  # epoch ms (for the rolling policy)


@dataclass(frozen=True)
class FileWriterBucketState:
    """One bucket at a checkpoint (Flink's ``FileWriterBucketState``)."""

    bucket_id: str
    bucket_path: str
    in_progress: Optional[InProgressFileRecoverable]


@dataclass(frozen=True)
class FileWriterState:
    """A writer at a checkpoint: its buckets and the next part counter."""

    subtask: int
    part_counter: int
    buckets: tuple[FileWriterBucketState, ...]


@dataclass(frozen=True)
class FileSinkCommittable:
    """A pending part file to publish (Flink's ``FileSinkCommittable``)."""

    bucket_id: str
    path: str  # hidden pending file
    target_path: str  # visible name
    size: int


def _filesystem(base_path: str, storage_options: dict[str, Any]) -> tuple[fsspec.AbstractFileSystem, str]:
    try:
        fs, root = fsspec.core.url_to_fs(base_path, **storage_options)
    except (ImportError, ValueError) as exc:
        raise FileSinkError(f"FileSink: cannot open the output path {base_path!r}: {exc}") from exc
    return fs, (root.rstrip("/") or "/")


# -- the writer -------------------------------------------------------------------------------------
class _InProgressPart:
    """An open in-progress part file (Flink's ``OutputStreamBasedPartFileWriter``); also the
    ``part_file`` a ``RollingPolicy`` sees and the stream a custom ``Encoder`` writes to."""

    __slots__ = (
        "bucket_id",
        "path",
        "target_path",
        "creation_time",
        "last_update_time",
        "size",
        "bulk",
        "_file",
        "_raw_write",
    )

    def __init__(
        self, bucket_id: str, path: str, target_path: str, file: Any, creation_time: int, now: int, size: int
    ) -> None:
        self.bucket_id = bucket_id
        self.path = path
        self.target_path = target_path
        self.creation_time = creation_time
        self.last_update_time = now
        self.size = size
        self.bulk: Any = None  # a bulk format's writer (the whole file is one format)
        self._file = file
        self._raw_write = file.write

    def write(self, data: bytes) -> int:
        """Stream interface for custom encoders: counts what is written."""
        written = self._raw_write(data)
        written = len(data) if written is None else written
        self.size += written
        return written

    def persist(self) -> InProgressFileRecoverable:
        """Flushes to the filesystem; the state that allows resuming after a failure."""
        self._file.flush()
        return InProgressFileRecoverable(self.path, self.target_path, self.size, self.creation_time)

    def close_for_commit(self, bucket_id: str) -> FileSinkCommittable:
        if self.bulk is not None:  # the rest of the format (a Parquet footer): the file is complete
            self.bulk.finish()
            self.size = self._file.tell()
        self._file.close()
        return FileSinkCommittable(bucket_id, self.path, self.target_path, self.size)

    def dispose(self) -> None:
        try:
            self._file.close()
        except OSError as exc:  # the file stays recoverable from the last checkpoint
            log.warning("closing in-progress part file %s failed: %s", self.path, exc)


class _Bucket:
    """One bucket folder of a writer (Flink's ``FileWriterBucket``)."""

    __slots__ = ("bucket_id", "bucket_path", "in_progress", "pending", "folder_ready")

    def __init__(self, bucket_id: str, bucket_path: str) -> None:
        self.bucket_id = bucket_id
        self.bucket_path = bucket_path
        self.in_progress: Optional[_InProgressPart] = None
        self.pending: list[FileSinkCommittable] = []
        self.folder_ready = False

    def close_part(self) -> None:
        if self.in_progress is not None:
            self.pending.append(self.in_progress.close_for_commit(self.bucket_id))
            self.in_progress = None

    @property
    def active(self) -> bool:
        return self.in_progress is not None or bool(self.pending)


class FileWriter(StatefulSinkWriter, CommittingSinkWriter):
    """The FileSink's writer for one subtask (Flink's ``FileWriter``); see the module docstring.

    ``FileSink.create_writer`` / ``restore_writer`` build it. With a
    ``processing_time_service`` in the context, open part files are checked against the
    rolling policy every ``bucket_check_interval`` ms through its timers; without one,
    time-based rolling does not happen (size and checkpoint rolling do).
    """

    def __init__(self, sink: Any, context: WriterInitContext, recovered_state: Sequence[FileWriterState] = ()) -> None:
        self._sink = sink
        self._fs, self._root = _filesystem(sink.base_path, sink.storage_options)
        self._local = isinstance(self._fs, LocalFileSystem)
        self._bulk = sink.bulk_writer_factory
        #: truncate + append work here, so in-progress files may span checkpoints (a bulk
        #: format's file never does: it is complete only when closed)
        self.supports_resume = self._bulk is None and (self._local or isinstance(self._fs, MemoryFileSystem))
        self._subtask = context.subtask_id
        self._prefix = sink.output_file_config.get_part_prefix()
        self._suffix = sink.output_file_config.get_part_suffix()
        self._assigner = sink.bucket_assigner
        self._policy = sink.rolling_policy
        self._encoder = sink.encoder
        encoder_type = type(sink.encoder)
        self._to_bytes = (
            sink.encoder.to_bytes
            if isinstance(sink.encoder, SimpleStringEncoder) and encoder_type.encode is SimpleStringEncoder.encode
            else None
        )
        self._time_service = context.processing_time_service
        self._clock = (self._time_service or SystemClock).get_current_processing_time
        self._buckets: dict[str, _Bucket] = {}
        self._part_counter = 0
        self._end_of_input = False
        self._closed = False
        self._assigner_context = BucketAssignerContext()
        for state in recovered_state:
            self._restore(state)
        if self._time_service is not None:
            self._time_service.register_timer(self._clock() + sink.bucket_check_interval, self.on_processing_time)

    # -- SinkWriter -------------------------------------------------------------------------------
    def write(self, element: Any, context: Optional[SinkWriterContext] = None) -> None:
        now = self._clock()
        ctx = self._assigner_context
        ctx._processing_time = now
        if context is not None:
            ctx._timestamp = context.timestamp
            ctx._watermark = context.current_watermark
        else:
            ctx._timestamp = None
        bucket_id = self._assigner.get_bucket_id(element, ctx)
        bucket = self._buckets.get(bucket_id)
        if bucket is None:
            bucket = self._new_bucket(bucket_id)
        part = bucket.in_progress
        if part is None or self._policy.should_roll_on_event(part, element):
            part = self._roll(bucket, now)
        if part.bulk is not None:
            part.bulk.add_element(element)
        elif self._to_bytes is not None:
            data = self._to_bytes(element)
            part._raw_write(data)
            part.size += len(data)
        else:
            self._encoder.encode(element, part)
        part.last_update_time = now

    def write_watermark(self, watermark: int) -> None:
        self._assigner_context._watermark = watermark

    def flush(self, end_of_input: bool) -> None:
        """``end_of_input``: the next ``prepare_commit`` closes every in-progress file."""
        if end_of_input:
            self._end_of_input = True

    def prepare_commit(self) -> list[FileSinkCommittable]:
        committables: list[FileSinkCommittable] = []
        close_all = self._end_of_input or not self.supports_resume
        for bucket_id in list(self._buckets):
            bucket = self._buckets[bucket_id]
            part = bucket.in_progress
            if part is not None and (close_all or self._policy.should_roll_on_checkpoint(part)):
                bucket.close_part()
            committables.extend(bucket.pending)
            bucket.pending.clear()
            if not bucket.active:
                del self._buckets[bucket_id]
        return committables

    def snapshot_state(self, checkpoint_id: int) -> list[FileWriterState]:
        buckets = []
        for bucket in self._buckets.values():
            recoverable = None
            if bucket.in_progress is not None:
                try:
                    recoverable = bucket.in_progress.persist()
                except OSError as exc:
                    raise FileSinkError(
                        f"FileSink subtask {self._subtask}: flushing in-progress part file "
                        f"{self._display(bucket.in_progress.path)!r} for checkpoint "
                        f"{checkpoint_id} failed: {exc}"
                    ) from exc
            buckets.append(FileWriterBucketState(bucket.bucket_id, bucket.bucket_path, recoverable))
        return [FileWriterState(self._subtask, self._part_counter, tuple(buckets))]

    def on_processing_time(self, time: int) -> None:
        """The periodic bucket check: rolls part files the policy's time rules say to."""
        if self._closed:
            return
        for bucket in self._buckets.values():
            part = bucket.in_progress
            if part is not None and self._policy.should_roll_on_processing_time(part, time):
                bucket.close_part()
        if self._time_service is not None:
            self._time_service.register_timer(time + self._sink.bucket_check_interval, self.on_processing_time)

    def close(self) -> None:
        """Closes open files without committing them (they stay recoverable)."""
        self._closed = True
        for bucket in self._buckets.values():
            if bucket.in_progress is not None:
                bucket.in_progress.dispose()
                bucket.in_progress = None

    # -- introspection (tests, metrics) -------------------------------------------------------------
    @property
    def part_counter(self) -> int:
        return self._part_counter

    def in_progress_paths(self) -> list[str]:
        return [b.in_progress.path for b in self._buckets.values() if b.in_progress is not None]

    # -- internals --------------------------------------------------------------------------------
    def _display(self, path: str) -> str:
        return path if self._local else self._fs.unstrip_protocol(path)

    def _new_bucket(self, bucket_id: str) -> _Bucket:
        if not isinstance(bucket_id, str):
            raise TypeError(f"FileSink: bucket assigner {self._assigner!r} returned {bucket_id!r}, not a str")
        parts = bucket_id.split("/") if bucket_id else []
        if bucket_id.startswith("/") or any(p in ("", ".", "..") for p in parts):
            raise ValueError(
                f"FileSink: bucket assigner {self._assigner!r} returned bucket id {bucket_id!r}; "
                f"it must be a relative folder path ('' for the base path) without '.' or '..'"
            )
        bucket = _Bucket(bucket_id, posixpath.join(self._root, bucket_id) if bucket_id else self._root)
        self._buckets[bucket_id] = bucket
        return bucket

    def _roll(self, bucket: _Bucket, now: int) -> _InProgressPart:
        bucket.close_part()
        fs = self._fs
        try:
            if not bucket.folder_ready:
                fs.makedirs(bucket.bucket_path, exist_ok=True)
                bucket.folder_ready = True
            while True:
                name = f"{self._prefix}-{self._subtask}-{self._part_counter}{self._suffix}"
                self._part_counter += 1
                target = posixpath.join(bucket.bucket_path, name)
                if not fs.exists(target):
                    break
                log.warning(
                    "FileSink subtask %d: %s exists already, skipping that part number",
                    self._subtask,
                    self._display(target),
                )
            path = posixpath.join(bucket.bucket_path, f".{name}.inprogress.{uuid.uuid4()}")
            file = open(path, "wb") if self._local else fs.open(path, "wb")
        except OSError as exc:
            raise FileSinkError(
                f"FileSink subtask {self._subtask}: cannot create a part file in "
                f"{self._display(bucket.bucket_path)!r}: {exc}"
            ) from exc
        part = bucket.in_progress = _InProgressPart(bucket.bucket_id, path, target, file, now, now, 0)
        if self._bulk is not None:
            part.bulk = self._bulk.create(file)
        return part

    def _restore(self, state: FileWriterState) -> None:
        if not isinstance(state, FileWriterState):
            raise TypeError(f"FileSink subtask {self._subtask}: cannot restore from {state!r}")
        self._part_counter = max(self._part_counter, state.part_counter)
        for bucket_state in state.buckets:
            bucket = self._buckets.get(bucket_state.bucket_id)
            if bucket is None:
                bucket = _Bucket(bucket_state.bucket_id, bucket_state.bucket_path)
                self._buckets[bucket_state.bucket_id] = bucket
            if bucket_state.in_progress is None:
                continue
            part = self._resume(bucket_state.bucket_id, bucket_state.in_progress)
            if bucket.in_progress is None:
                bucket.in_progress = part
            else:  # two old subtasks' states for one bucket (rescaling): commit this one as is
                bucket.pending.append(part.close_for_commit(bucket.bucket_id))

    def _resume(self, bucket_id: str, recoverable: InProgressFileRecoverable) -> _InProgressPart:
        """Continues the in-progress file of the checkpoint in a fresh hidden copy of its first
        ``length`` bytes (the checkpoint's content), written on from there.

        The checkpoint's own file is left as it is: a zombie of the failed attempt (a task on a
        host cut off from the cluster, still running) may still append to it, and whatever it
        writes there reaches no file this attempt commits. It also stays the source of a second
        restore from the same checkpoint. (Flink's local ``LocalRecoverableFsDataOutputStream``
        truncates the file in place and relies on the old writer being dead.)"""
        shown = self._display(recoverable.path)
        if not self.supports_resume:
            raise FileSinkError(
                f"FileSink subtask {self._subtask}: cannot resume in-progress part file {shown!r} "
                f"on {type(self._fs).__name__} (no truncate/append)"
            )
        fs = self._fs
        try:
            size = fs.info(recoverable.path)["size"]
        except FileNotFoundError:
            raise FileSinkError(
                f"FileSink subtask {self._subtask}: in-progress part file {shown!r} of the checkpoint "
                f"({recoverable.length} bytes then) is missing; cannot restore its records"
            ) from None
        if size < recoverable.length:
            raise FileSinkError(
                f"FileSink subtask {self._subtask}: in-progress part file {shown!r} holds {size} bytes, "
                f"fewer than the {recoverable.length} the checkpoint recorded; cannot restore its records"
            )
        folder = posixpath.dirname(recoverable.path)
        name = posixpath.basename(recoverable.target_path)
        path = posixpath.join(folder, f".{name}.inprogress.{uuid.uuid4()}")
        try:
            file = open(path, "wb") if self._local else fs.open(path, "wb")
            with open(recoverable.path, "rb") if self._local else fs.open(recoverable.path, "rb") as source:
                left = recoverable.length
                while left > 0:
                    chunk = source.read(min(left, 1 << 20))
                    if not chunk:
                        break
                    file.write(chunk)
                    left -= len(chunk)
            file.flush()
            if left:
                file.close()
                raise OSError(f"it ended {left} bytes before the checkpoint's length")
        except OSError as exc:
            raise FileSinkError(
                f"FileSink subtask {self._subtask}: cannot resume in-progress part file {shown!r}: {exc}"
            ) from exc
        return _InProgressPart(
            bucket_id,
            path,
            recoverable.target_path,
            file,
            recoverable.creation_time,
            self._clock(),
            recoverable.length,
        )


# -- the committer ----------------------------------------------------------------------------------
class FileCommitter(Committer):
    """Publishes pending part files by renaming them (Flink's ``FileCommitter``); idempotent:
    a committable whose hidden file is gone and whose visible file exists is done already."""

    def __init__(self, base_path: str, storage_options: Optional[dict[str, Any]] = None) -> None:
        self._base_path = base_path
        self._fs, _ = _filesystem(base_path, dict(storage_options or {}))
        self._local = isinstance(self._fs, LocalFileSystem)

    def commit(self, committables: Sequence[FileSinkCommittable]) -> None:
        for committable in committables:
            self._commit_one(committable)

    def _display(self, path: str) -> str:
        return path if self._local else self._fs.unstrip_protocol(path)

    def _size(self, path: str) -> Optional[int]:
        try:
            return self._fs.info(path)["size"]
        except FileNotFoundError:
            return None

    def _commit_one(self, committable: FileSinkCommittable) -> None:
        source, target = committable.path, committable.target_path
        source_size = self._size(source)
        target_size = self._size(target)
        if source_size is None:
            if target_size is not None:
                return  # committed before (a commit repeated after a failure)
            raise FileSinkError(
                f"FileSink: cannot commit part file {self._display(target)!r}: neither it nor its pending "
                f"file {self._display(source)!r} exists"
            )
        if source_size != committable.size:
            raise FileSinkError(
                f"FileSink: pending part file {self._display(source)!r} holds {source_size} bytes, "
                f"{committable.size} were written; not committing it as {self._display(target)!r}"
            )
        if target_size is not None:
            if target_size != committable.size:
                raise FileSinkError(
                    f"FileSink: cannot commit {self._display(source)!r}: {self._display(target)!r} exists "
                    f"with other content ({target_size} bytes, expected {committable.size})"
                )
            # an interrupted non-atomic rename (copy done, delete not): finish it
            self._fs.rm_file(source)
            return
        try:
            self._fs.mv(source, target)
        except OSError as exc:
            raise FileSinkError(
                f"FileSink: committing {self._display(source)!r} as {self._display(target)!r} failed: {exc}"
            ) from exc


__all__ = [
    "FileCommitter",
    "FileSinkCommittable",
    "FileSinkError",
    "FileWriter",
    "FileWriterBucketState",
    "FileWriterState",
    "InProgressFileRecoverable",
]
