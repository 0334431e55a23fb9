"""Parquet files of the Spark bridge: the sink's staging folder, its part files, and commits by file moves.

* **Where.** :func:`filesystem_of` maps a location (a local path, ``file:``, or a URI
  pyarrow knows: ``s3://``, ``gs://``, ``hdfs://`` ...) to a ``pyarrow.fs`` filesystem and
  a path in it. A sink stages its files in ``<parent>/.raylink-staging/<sink id>`` next
  to its target (same filesystem: a commit is a rename), hidden from Spark's readers.
* **Part files.** :class:`PartFileWriter` writes one sink subtask's record batches into
  Parquet part files with pyarrow (one row group per ``flush``), with the footer keys
  Spark writes itself (``org.apache.spark.sql.parquet.row.metadata``: the exact Spark
  schema; ``org.apache.spark.version``: no calendar rebasing of old dates).
* **File commits.** :func:`commit_files` makes staged files visible in a directory with
  a Spark write mode (``append``, ``overwrite``, ``error``/``errorifexists``,
  ``ignore``), as Spark's own commit does: renames, then a ``_SUCCESS`` marker.

A writer belongs to one sink subtask (one task thread); the other functions are
stateless. The files must be on storage every TaskExecutor and Spark executor reaches
(a shared filesystem or an object store on a multi-node cluster), as for Spark's own
writes. Mirrors the role of Flink's ``FileSink`` bucket writer and committer (and
Spark's ``FileOutputCommitter``); the code is raylink's.
"""

from __future__ import annotations

import os
import posixpath
import uuid
from typing import Any, List, Optional

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

STAGING_DIR = ".raylink-staging"
SUCCESS_MARKER = "_SUCCESS"
#: Parquet footer keys Spark reads back (ParquetReadSupport / DataSourceUtils)
SPARK_ROW_METADATA = b"org.apache.spark.sql.parquet.row.metadata"
SPARK_VERSION_METADATA = b"org.apache.spark.version"


def filesystem_of(location: str) -> "tuple[Any, str]":
    """``(pyarrow filesystem, path in it)`` of a location."""
    if "://" in location:
        if location.startswith("file://"):
            return pafs.LocalFileSystem(), location[len("file://") :] or "/"
        return pafs.FileSystem.from_uri(location)
    if location.startswith("file:"):
        location = location[len("file:") :]
    return pafs.LocalFileSystem(), os.path.abspath(location)


def staging_location(target: str, sink_id: str) -> str:
    """The staging folder of a sink writing into the directory ``target`` (a location): a
    hidden sibling of it (inside it, for a bucket's root)."""
    stripped = target.rstrip("/")
    parent = posixpath.dirname(stripped)
    if not parent or parent.endswith(":") or parent.endswith(":/"):
        parent = stripped
    return f"{parent}/{STAGING_DIR}/{sink_id}"


def file_schema(arrow_schema: pa.Schema, schema_json: str, spark_version: str) -> pa.Schema:
    """``arrow_schema`` with the footer keys Spark reads back."""
    metadata = dict(arrow_schema.metadata or {})
    metadata[SPARK_ROW_METADATA] = schema_json.encode()
    metadata[SPARK_VERSION_METADATA] = spark_version.encode()
    return arrow_schema.with_metadata(metadata)


class PartFileWriter:
    """One sink subtask's Parquet part files in a staging folder: ``write`` batches, ``flush``
    them as a row group, ``roll`` to close the current file and get the finished ones."""

    def __init__(self, staging: str, schema: pa.Schema, subtask_index: int) -> None:
        self.fs, self.folder = filesystem_of(staging)
        self.schema = schema
        self.subtask_prefix = f"part-{subtask_index:05d}-"
        self.prefix = f"{self.subtask_prefix}{uuid.uuid4().hex}"
        self._seq = 0
        self._writer: Optional[pq.ParquetWriter] = None
        self._path: Optional[str] = None
        self._finished: List[str] = []
        self._created = False

    def write_table(self, table: pa.Table) -> None:
        if self._writer is None:
            if not self._created:
                self.fs.create_dir(self.folder, recursive=True)
                self._created = True
            self._path = f"{self.folder}/{self.prefix}-c{self._seq:03d}.snappy.parquet"
            self._seq += 1
            self._writer = pq.ParquetWriter(self._path, self.schema, filesystem=self.fs, compression="snappy")
        self._writer.write_table(table, row_group_size=max(1, table.num_rows))

    def roll(self) -> List[str]:
        """Close the file being written; the names of the files finished since the last call."""
        if self._writer is not None:
            self._writer.close()
            self._finished.append(posixpath.basename(self._path))
            self._writer, self._path = None, None
        finished, self._finished = self._finished, []
        return finished

    def delete_stale(self, keep: List[str]) -> None:
        """Delete this subtask's staged files that are not in ``keep`` (left by a failed attempt
        and held by no completed checkpoint; its rows are replayed)."""
        mine = self.subtask_prefix
        keep_set = set(keep)
        for entry in self.fs.get_file_info(pafs.FileSelector(self.folder, allow_not_found=True)):
            name = posixpath.basename(entry.path)
            if name.startswith(mine) and name not in keep_set and not name.startswith(self.prefix):
                try:
                    self.fs.delete_file(entry.path)
                except (FileNotFoundError, OSError):
                    pass

    def abort(self) -> None:
        """Close and delete what was never handed to a commit."""
        for name in self.roll():
            try:
                self.fs.delete_file(f"{self.folder}/{name}")
            except (FileNotFoundError, OSError):
                pass


def delete_files(staging: str, names: List[str]) -> None:
    """Delete staged files (by name) of the staging folder ``staging``."""
    fs, folder = filesystem_of(staging)
    for name in names:
        try:
            fs.delete_file(f"{folder}/{name}")
        except (FileNotFoundError, OSError):
            pass


def staged_files(staging: str, names: List[str]) -> List[str]:
    """Those of ``names`` still in the staging folder ``staging`` (the others were committed)."""
    fs, folder = filesystem_of(staging)
    infos = fs.get_file_info([f"{folder}/{name}" for name in names])
    return [name for name, info in zip(names, infos) if info.type != pafs.FileType.NotFound]


def _move(fs: Any, source: str, destination: str) -> None:
    try:
        fs.move(source, destination)
    except OSError:  # another device (a table stored elsewhere): copy, then delete
        fs.copy_file(source, destination)
        fs.delete_file(source)


def remove_folder(location: str) -> None:
    """Delete a staging folder and, when empty, its ``.raylink-staging`` parent."""
    fs, folder = filesystem_of(location)
    try:
        fs.delete_dir(folder)
    except (FileNotFoundError, OSError):
        pass
    parent = posixpath.dirname(folder.rstrip("/"))
    if posixpath.basename(parent) == STAGING_DIR:
        try:
            if not fs.get_file_info(pafs.FileSelector(parent, allow_not_found=True)):
                fs.delete_dir(parent)
        except (FileNotFoundError, OSError):
            pass


def _visible_entries(fs: Any, folder: str) -> List[Any]:
    return [
        entry
        for entry in fs.get_file_info(pafs.FileSelector(folder, allow_not_found=True))
        if not posixpath.basename(entry.path).startswith(("_", "."))
    ]


def directory_exists(location: str) -> bool:
    fs, folder = filesystem_of(location)
    return fs.get_file_info(folder).type != pafs.FileType.NotFound


def commit_files(location: str, staging: str, names: List[str], mode: str, schema: pa.Schema) -> int:
    """Move the staged files ``names`` (of the folder ``staging``) into the directory
    ``location`` with a Spark write ``mode``; returns the files made visible.

    ``overwrite`` first deletes what the directory held (hidden entries too, as Spark does);
    ``error``/``errorifexists`` refuses an existing directory and ``ignore`` leaves it alone,
    deleting the staged files. No files at all still leave one empty part file with the
    schema, as Spark writes for an empty DataFrame."""
    fs, folder = filesystem_of(location)
    _, staged = filesystem_of(staging)
    exists = fs.get_file_info(folder).type != pafs.FileType.NotFound
    if exists and mode in ("error", "errorifexists"):
        delete_files(staging, names)
        raise FileExistsError(
            f"[PATH_ALREADY_EXISTS] Path {location} already exists. "
            'Set mode as "overwrite" to overwrite the existing path.'
        )
    if exists and mode == "ignore":
        delete_files(staging, names)
        return 0
    if exists and mode == "overwrite":
        for entry in fs.get_file_info(pafs.FileSelector(folder, allow_not_found=True)):
            if entry.type == pafs.FileType.Directory:
                fs.delete_dir(entry.path)
            else:
                fs.delete_file(entry.path)
    fs.create_dir(folder, recursive=True)
    if not names and (mode == "overwrite" or not _visible_entries(fs, folder)):
        empty = f"{folder}/part-00000-{uuid.uuid4().hex}-c000.snappy.parquet"
        pq.write_table(schema.empty_table(), empty, filesystem=fs, compression="snappy")
    for name in names:
        source, destination = f"{staged}/{name}", f"{folder}/{name}"
        if fs.get_file_info(source).type == pafs.FileType.NotFound and (
            fs.get_file_info(destination).type != pafs.FileType.NotFound
        ):
            continue  # moved by an earlier try of this commit
        _move(fs, source, destination)
    with fs.open_output_stream(f"{folder}/{SUCCESS_MARKER}"):
        pass
    return len(names)


__all__ = [
    "PartFileWriter",
    "STAGING_DIR",
    "commit_files",
    "delete_files",
    "directory_exists",
    "file_schema",
    "filesystem_of",
    "remove_folder",
    "staging_location",
]
