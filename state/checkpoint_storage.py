"""Checkpoint storage on any filesystem fsspec knows: where state files and ``_metadata`` go,
which completed checkpoints are kept, and which one a restore starts from.

Mirrors three Flink classes in one place:

* ``FsCheckpointStorageAccess`` / ``FsCheckpointStreamFactory`` — the layout
  ``<execution.checkpointing.dir>/<job id>/chk-<n>/``: every state blob a subtask writes
  for checkpoint ``n`` is a file in that folder (:meth:`CheckpointStorage.write_state`),
  except blobs smaller than ``execution.checkpointing.data-inline-threshold``, which travel
  inline in their handle and end up in the metadata (Flink's ``ByteStreamStateHandle``);
* ``CompletedCheckpoint`` + the metadata file — :meth:`CheckpointStorage.finalize` writes
  ``chk-<n>/_metadata`` *last*, under a temporary hidden name renamed into place where the
  filesystem renames (object stores write it with one atomic PUT), so a reader never sees
  a half-written ``_metadata``. The file is versioned (magic, format version, CRC-32 of the
  body) and names every state handle (relative path and size, or the inline bytes) per
  operator id and subtask, with the checkpoint id, trigger and completion timestamps and
  the checkpoint properties;
* ``DefaultCompletedCheckpointStore`` — retention (``execution.checkpointing.num-retained``,
  Flink 1's ``state.checkpoints.num-retained``, default 1): once checkpoint ``n`` completes,
  older completed checkpoints beyond the retained number are deleted (savepoints count, but
  the latest checkpoint that is not a savepoint stays unless the job stopped: Flink's
  ``CheckpointSubsumeHelper``), as are unfinished folders of lower ids (Flink subsumes
  pending checkpoints older than a completed one). Shared files (incremental RocksDB and
  heap checkpoints) go when no retained or restoring checkpoint names them: a
  :class:`~raylink.state.shared_state_registry.SharedStateRegistry` counts, in memory, the
  references of what this store completed and what it read back (a restore, or the
  ``_metadata`` of a checkpoint an earlier run left); while the files a retained checkpoint
  names are unknown (its ``_metadata`` unreadable) no shared file is deleted, a subsumed
  checkpoint loses its ``_metadata`` first and keeps its folder until that succeeded, and a
  failed delete is retried at the next checkpoint — a storage fault never deletes what a
  retained checkpoint needs and never fails a checkpoint that completed;
  :meth:`CheckpointStorage.latest_completed` finds the checkpoint a restore starts from,
  falling back (logged warning) past a corrupt or missing ``_metadata`` or a state file
  that vanished, and raising :class:`CheckpointStorageError` naming the files when no
  checkpoint that completed is usable (or the storage cannot be read: no fallback then).

A folder without ``_metadata`` is indistinguishable on disk from a checkpoint that never
completed: it only counts as *lost* (an error when nothing older is usable) when this store
saw it complete or an unusable ``_metadata`` exists; otherwise a restore with nothing
usable starts from scratch (``latest_completed()`` returns ``None``).

Thread-safety: ``write_state`` and ``read_state`` may run concurrently from any number of
threads (the asynchronous phase of snapshots). ``finalize``, ``abort``,
``latest_completed`` and retention serialise on an internal lock. Instances pickle (to ship
to TaskExecutors): the filesystem is re-created from the URL on the other side; the
record of completed checkpoints stays with the original (the JobMaster's) instance.
"""

from __future__ import annotations

import logging
import os
import posixpath
import re
import struct
import threading
import time
import uuid
import zlib
from dataclasses import dataclass, field, replace
from functools import partial
from typing import TYPE_CHECKING, Any, Mapping, Optional, Tuple, Union

import msgpack

from raylink.core.options import CheckpointingOptions, ConfigOption
from raylink.errors import RaylinkError
from raylink.state.savepoint_targets import make_private_dirs, restrict_to_owner
from raylink.state.shared_state_registry import SharedStateRegistry

if TYPE_CHECKING:
    import fsspec

log = logging.getLogger(__name__)

#: the name of the metadata file of a completed checkpoint (Flink's ``_metadata``)
METADATA_FILE_NAME = "_metadata"
#: prefix of a checkpoint's folder (Flink's ``chk-``)
CHECKPOINT_DIR_PREFIX = "chk-"
#: the folder of a job's (or a savepoint's) files shared between checkpoints
SHARED_DIR_NAME = "shared"
#: prefix of a savepoint's folder (Flink's ``savepoint-<job id prefix>-<random>``)
SAVEPOINT_DIR_PREFIX = "savepoint-"
#: metadata format written by this version; older versions stay readable
METADATA_VERSION = 1
_MAGIC = b"RLCK"
_HEADER = struct.Struct(">4sII")  # magic, format version, CRC-32 of the body
_CHK_DIR = re.compile(r"^chk-(\d+)$")
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")
# filesystems whose single PUT is atomic and whose rename is a copy: write _metadata directly
_ATOMIC_PUT_PROTOCOLS = frozenset({"s3", "s3a", "gs", "gcs", "abfs", "abfss", "az", "adl", "oss"})


def _url_to_fs(url: str, **storage_options: Any) -> Tuple[Any, str]:
    """fsspec's ``url_to_fs``, imported on first use (a job that never writes a checkpoint or
    savepoint does not load fsspec)."""
    import fsspec.core

    return fsspec.core.url_to_fs(url, **storage_options)


class CheckpointStorageError(RaylinkError, RuntimeError):
    """Checkpoint storage that cannot be used: not writable, a corrupt or missing file, no
    usable checkpoint. ``path`` names the file or folder concerned."""

    def __init__(self, message: str, path: Optional[str] = None) -> None:
        super().__init__(message)
        self.path = path


class _UnusableCheckpoint(CheckpointStorageError):
    """A checkpoint folder a restore cannot start from (corrupt/missing metadata or state)."""

    def __init__(self, message: str, path: str, metadata_missing: bool = False) -> None:
        super().__init__(message, path)
        self.metadata_missing = metadata_missing


# -- state handles --------------------------------------------------------------------------------
@dataclass(frozen=True)
class FileStateHandle:
    """State in a file of the checkpoint storage (Flink's ``FileStateHandle``).

    ``path`` is the filesystem path (no protocol) of the file, ``size`` its length in bytes;
    ``shared`` the files under the job's ``shared/`` folder the state refers to (an
    incremental RocksDB checkpoint's SST files, Flink's shared state handles).
    """

    path: str
    size: int
    shared: Tuple[str, ...] = ()

    @property
    def state_size(self) -> int:
        return self.size


@dataclass(frozen=True)
class ByteStreamStateHandle:
    """Small state carried inline and stored in ``_metadata`` (Flink's ``ByteStreamStateHandle``)."""

    handle_name: str
    data: bytes = field(repr=False)
    shared: Tuple[str, ...] = ()

    @property
    def state_size(self) -> int:
        return len(self.data)


StateHandle = Union[FileStateHandle, ByteStreamStateHandle]


@dataclass(frozen=True)
class CompletedCheckpoint:
    """A checkpoint whose ``_metadata`` is written (Flink's ``CompletedCheckpoint``).

    ``operator_states`` maps operator id -> subtask index -> the state handle that subtask
    wrote; ``external_pointer`` is the checkpoint's folder as a URL (what
    :meth:`CheckpointStorage.load_checkpoint` accepts).
    """

    job_id: str
    checkpoint_id: int
    trigger_timestamp: int
    completion_timestamp: int
    operator_states: dict[str, dict[int, StateHandle]]
    properties: dict[str, Any]
    external_pointer: str
    metadata_path: str
    metadata_version: int = METADATA_VERSION

    @property
    def state_size(self) -> int:
        """Bytes of state over all handles (Flink's ``getStateSize``)."""
        return sum(h.state_size for subtasks in self.operator_states.values() for h in subtasks.values())

    def get_state(self, operator_id: str, subtask: int) -> Optional[StateHandle]:
        """The handle ``subtask`` of ``operator_id`` wrote, ``None`` if it wrote none."""
        return self.operator_states.get(operator_id, {}).get(subtask)


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _dir_key_text() -> str:
    option = CheckpointingOptions.CHECKPOINTS_DIRECTORY
    return f"configuration key {option.key!r} (formerly {option.fallback_keys[0]!r})"


def _option_value(config: Any, option: ConfigOption) -> Any:
    """``option`` read from a ``Configuration`` under its key or a fallback key, converted."""
    for key in (option.key, *option.fallback_keys):
        if config.contains_key(key):
            return option.convert(config.get_string(key))
    return option.default


class CheckpointStorage:
    """One job's checkpoints under ``checkpoints_dir`` (a local path or an fsspec URL).

    ``num_retained`` completed checkpoints are kept; state blobs shorter than
    ``inline_threshold`` bytes are kept inline (0: every blob is a file).
    ``storage_options`` are passed to the fsspec filesystem (credentials, endpoints).
    """

    def __init__(
        self,
        checkpoints_dir: str,
        job_id: str,
        *,
        num_retained: int = 1,
        inline_threshold: int = 0,
        storage_options: Optional[Mapping[str, Any]] = None,
    ) -> None:
        if not checkpoints_dir or not str(checkpoints_dir).strip():
            raise CheckpointStorageError(f"no checkpoint directory: set {_dir_key_text()}")
        if not job_id or "/" in job_id:
            raise ValueError(f"job id {job_id!r} cannot name a folder")
        if num_retained < 1:
            raise ValueError(f"{CheckpointingOptions.MAX_RETAINED_CHECKPOINTS.key} must be >= 1, got {num_retained}")
        if inline_threshold < 0:
            raise ValueError(f"inline threshold must be >= 0, got {inline_threshold}")
        self.checkpoints_dir = str(checkpoints_dir).rstrip("/") or "/"
        self.job_id = job_id
        self.num_retained = num_retained
        self.inline_threshold = inline_threshold
        self.storage_options = dict(storage_options or {})
        self._init_runtime_state()

    def _init_runtime_state(self) -> None:
        self._lock = threading.RLock()
        self._fs_and_root: Optional[tuple[fsspec.AbstractFileSystem, str]] = None
        self._completed_ids: set[int] = set()  # retained: ids this store knows completed
        self._discarding: set[int] = set()  # subsumed, their _metadata not deleted yet
        self._savepoint_ids: set[int] = set()  # completed checkpoints that were savepoints
        self._stopping = False  # the latest completed with the job stopping (stop-with-savepoint)
        self._newest_seen = 0  # the newest checkpoint id listed, finalized or aborted
        self._registry = SharedStateRegistry()  # the shared files each known checkpoint names
        self._scanned = False

    @classmethod
    def from_configuration(
        cls, config: Any, job_id: str, default_directory: Optional[str] = None
    ) -> "CheckpointStorage":
        """The storage the ``execution.checkpointing.*`` keys of ``config`` (a
        ``Configuration``) describe; ``default_directory`` when no directory is set."""
        directory = _option_value(config, CheckpointingOptions.CHECKPOINTS_DIRECTORY) or default_directory
        if not directory:
            raise CheckpointStorageError(f"no checkpoint directory: set {_dir_key_text()}")
        return cls(
            directory,
            job_id,
            num_retained=_option_value(config, CheckpointingOptions.MAX_RETAINED_CHECKPOINTS),
            inline_threshold=_option_value(config, CheckpointingOptions.FS_SMALL_FILE_THRESHOLD),
        )

    # -- pickling: ship the configuration, rebuild the filesystem and the lock ------------------
    def __getstate__(self) -> dict[str, Any]:
        return {
            "checkpoints_dir": self.checkpoints_dir,
            "job_id": self.job_id,
            "num_retained": self.num_retained,
            "inline_threshold": self.inline_threshold,
            "storage_options": self.storage_options,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._init_runtime_state()

    def __repr__(self) -> str:
        return f"CheckpointStorage({self.job_directory!r}, num_retained={self.num_retained})"

    # -- paths ------------------------------------------------------------------------------------
    @property
    def _fs(self) -> fsspec.AbstractFileSystem:
        return self._filesystem()[0]

    def _filesystem(self) -> tuple[fsspec.AbstractFileSystem, str]:
        if self._fs_and_root is None:
            try:
                fs, root = _url_to_fs(self.checkpoints_dir, **self.storage_options)
            except (ImportError, ValueError) as exc:
                raise CheckpointStorageError(
                    f"checkpoint directory {self.checkpoints_dir!r} ({_dir_key_text()}) cannot be opened: {exc}",
                    self.checkpoints_dir,
                ) from exc
            self._fs_and_root = (fs, root.rstrip("/") or "/")
        return self._fs_and_root

    @property
    def job_directory(self) -> str:
        """``<checkpoints dir>/<job id>`` as a URL (or local path)."""
        return f"{self.checkpoints_dir}/{self.job_id}"

    def checkpoint_directory(self, checkpoint_id: int) -> str:
        """``<checkpoints dir>/<job id>/chk-<n>`` as a URL (or local path)."""
        return f"{self.job_directory}/{CHECKPOINT_DIR_PREFIX}{checkpoint_id}"

    def _job_path(self) -> str:
        return posixpath.join(self._filesystem()[1], self.job_id)

    def _chk_path(self, checkpoint_id: int) -> str:
        if checkpoint_id < 0:
            raise ValueError(f"illegal negative checkpoint id {checkpoint_id}")
        return posixpath.join(self._job_path(), f"{CHECKPOINT_DIR_PREFIX}{checkpoint_id}")

    def _display(self, path: str) -> str:
        """A filesystem path as the user would write it (URL unless local)."""
        return _url(self._fs, path)

    def _not_writable(self, path: str, exc: BaseException) -> CheckpointStorageError:
        return CheckpointStorageError(
            f"checkpoint storage {self._display(path)!r} is not writable ({_dir_key_text()}): "
            f"{type(exc).__name__}: {exc}",
            self._display(path),
        )

    # -- setup ------------------------------------------------------------------------------------
    def initialize_base_locations(self) -> None:
        """Creates the job folder and proves it is writable (Flink's
        ``initializeBaseLocationsForCheckpoint``); call once before the first trigger so a
        wrong ``execution.checkpointing.dir`` fails the job at once."""
        fs, job_path = self._fs, self._job_path()
        probe = posixpath.join(job_path, f"._probe-{uuid.uuid4().hex}")
        try:
            make_private_dirs(fs, job_path)  # local: 0700
            fs.pipe_file(probe, b"")
        except OSError as exc:
            raise self._not_writable(job_path, exc) from exc
        try:
            fs.rm_file(probe)
        except OSError as exc:  # written, so writable: a leftover probe is harmless
            log.warning("could not delete the probe file %s: %s", self._display(probe), exc)

    # -- the task side: state files ---------------------------------------------------------------
    def write_state(
        self, checkpoint_id: int, operator_id: str, subtask: int, data: bytes, shared: Tuple[str, ...] = ()
    ) -> StateHandle:
        """Stores one state blob of ``subtask`` of ``operator_id`` for ``checkpoint_id``;
        ``shared``: the shared files (:meth:`write_shared_file`) the blob refers to.

        Blocking I/O: call it off the task thread. Blobs below the inline threshold are not
        written but returned inline.
        """
        if subtask < 0:
            raise ValueError(f"illegal subtask index {subtask} of operator {operator_id!r}")
        name = f"{_UNSAFE.sub('_', str(operator_id)) or 'op'}-{subtask}-{uuid.uuid4().hex}"
        if len(data) < self.inline_threshold:
            return ByteStreamStateHandle(name, bytes(data), tuple(shared))
        chk_path = self._chk_path(checkpoint_id)
        path = posixpath.join(chk_path, name)
        fs = self._fs
        try:
            make_private_dirs(fs, chk_path)
            fs.pipe_file(path, bytes(data))
        except OSError as exc:
            raise self._not_writable(chk_path, exc) from exc
        return FileStateHandle(path, len(data), tuple(shared))

    def write_shared_file(self, checkpoint_id: int, local_path: str, name: str) -> Tuple[str, int]:
        """Uploads local file ``local_path`` for checkpoint ``checkpoint_id`` as
        ``<job>/shared/<checkpoint id>-<name>`` (a file later checkpoints may refer to as
        well); returns its path and size. Blocking I/O. Should the checkpoint never complete,
        the file goes when it is aborted or subsumed."""
        shared_path = posixpath.join(self._job_path(), SHARED_DIR_NAME)
        path = posixpath.join(shared_path, f"{int(checkpoint_id)}-{name}")
        fs = self._fs
        try:
            make_private_dirs(fs, shared_path)
            fs.put_file(local_path, path)
        except OSError as exc:
            raise self._not_writable(shared_path, exc) from exc
        return path, os.path.getsize(local_path)

    def read_state(self, handle: StateHandle) -> bytes:
        """The bytes ``handle`` names; a missing or truncated file raises an error naming it."""
        return read_state_handle(handle, self._fs)

    # -- the coordinator side ----------------------------------------------------------------------
    def finalize(
        self,
        checkpoint_id: int,
        handles_by_operator: Mapping[str, Mapping[int, StateHandle]],
        properties: Optional[Mapping[str, Any]] = None,
        *,
        trigger_timestamp: Optional[int] = None,
        savepoint: bool = False,
        synchronous: bool = False,
    ) -> CompletedCheckpoint:
        """Writes ``chk-<n>/_metadata`` naming every handle, then applies retention.

        ``properties`` (msgpack-serialisable values) are stored as given;
        ``trigger_timestamp`` (epoch ms) defaults to now. ``savepoint``: the checkpoint of a
        savepoint (it never subsumes the latest checkpoint, which later incremental checkpoints
        build on), ``synchronous`` with the job stopping (no checkpoint follows).
        """
        completion = _now_ms()
        trigger = completion if trigger_timestamp is None else int(trigger_timestamp)
        props = dict(properties or {})
        chk_path = self._chk_path(checkpoint_id)
        operators = {str(operator_id): dict(subtasks) for operator_id, subtasks in handles_by_operator.items()}
        raw = self._metadata_bytes(checkpoint_id, operators, chk_path, trigger, completion, props)
        meta_path = posixpath.join(chk_path, METADATA_FILE_NAME)
        fs = self._fs
        with self._lock:
            self._newest_seen = max(self._newest_seen, checkpoint_id)
            try:
                make_private_dirs(fs, chk_path)
                if fs.exists(meta_path):
                    raise CheckpointStorageError(
                        f"checkpoint {checkpoint_id} of job {self.job_id} is already complete: "
                        f"{self._display(meta_path)!r} exists",
                        self._display(meta_path),
                    )
                self._write_atomically(meta_path, raw)
            except OSError as exc:
                raise self._not_writable(chk_path, exc) from exc
            completed = CompletedCheckpoint(
                job_id=self.job_id,
                checkpoint_id=checkpoint_id,
                trigger_timestamp=trigger,
                completion_timestamp=completion,
                operator_states=operators,
                properties=props,
                external_pointer=self.checkpoint_directory(checkpoint_id),
                metadata_path=self._display(meta_path),
            )
            self._completed_ids.add(checkpoint_id)
            if savepoint:
                self._savepoint_ids.add(checkpoint_id)
            self._stopping = synchronous
            self._registry.register_all(checkpoint_id, self._shared_paths(completed))
            self._registry.checkpoint_completed(checkpoint_id)
            try:
                self._subsume(checkpoint_id)
            except OSError as exc:  # retention is retried at the next checkpoint; this one completed
                log.warning("retention of job %s after checkpoint %d stopped: %s", self.job_id, checkpoint_id, exc)
        return completed

    def abort(self, checkpoint_id: int) -> None:
        """Deletes the folder of a checkpoint that will not complete (nothing if absent).
        A completed checkpoint is never deleted this way (a late abort is logged)."""
        with self._lock:
            self._newest_seen = max(self._newest_seen, checkpoint_id)
            if checkpoint_id in self._completed_ids:
                log.warning("not deleting checkpoint %d of job %s on abort: it completed", checkpoint_id, self.job_id)
                return
            self._delete_dir(checkpoint_id)
            if self._all_retained_known():
                self._delete_unfinished_shared([checkpoint_id])

    def _metadata_bytes(
        self,
        checkpoint_id: int,
        operators: dict,
        chk_path: str,
        trigger: int,
        completion: int,
        props: dict,
        shared_dir: str = "../" + SHARED_DIR_NAME,
    ) -> bytes:
        """The ``_metadata`` file of a checkpoint whose files lie in ``chk_path`` (named relative)
        and whose shared files lie in ``shared_dir`` relative to it."""
        shared_path = posixpath.normpath(posixpath.join(chk_path, shared_dir))
        body = {
            "shared_dir": shared_dir,
            "job_id": self.job_id,
            "checkpoint_id": checkpoint_id,
            "trigger_timestamp": trigger,
            "completion_timestamp": completion,
            "properties": props,
            "operators": [
                [
                    operator_id,
                    [
                        self._encode_handle(int(i), h, chk_path, operator_id, shared_path)
                        for i, h in sorted(subs.items())
                    ],
                ]
                for operator_id, subs in operators.items()
            ],
        }
        try:
            payload = msgpack.packb(body, use_bin_type=True)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"checkpoint {checkpoint_id}: properties {props!r} cannot be stored: {exc}") from exc
        return _HEADER.pack(_MAGIC, METADATA_VERSION, zlib.crc32(payload)) + payload

    def write_savepoint(self, completed: CompletedCheckpoint, target_directory: str) -> str:
        """Copy ``completed`` into a new self-contained folder under ``target_directory`` (a
        path or an fsspec URL; Flink's ``savepoint-<job id prefix>-<random>`` name) and return
        the folder: every state file, then ``_metadata`` naming them relative to it, so the
        folder can be moved or copied elsewhere and still be restored from. Its properties say
        ``savepoint``. Blocking I/O."""
        try:
            fs, root = _url_to_fs(str(target_directory), **self.storage_options)
        except (ImportError, ValueError) as exc:
            raise CheckpointStorageError(
                f"savepoint directory {target_directory!r} cannot be opened: {exc}", str(target_directory)
            ) from exc
        name = f"{SAVEPOINT_DIR_PREFIX}{self.job_id[:6]}-{uuid.uuid4().hex[:12]}"
        folder = posixpath.join(root.rstrip("/") or "/", name)
        operators: dict[str, dict[int, StateHandle]] = {}
        try:
            make_private_dirs(fs, folder)  # local: 0700, every folder made on the way too
            for operator_id, subtasks in completed.operator_states.items():
                copied = operators[operator_id] = {}
                for subtask, handle in subtasks.items():
                    if isinstance(handle, FileStateHandle):
                        path = posixpath.join(folder, posixpath.basename(handle.path))
                        fs.pipe_file(path, self.read_state(handle))
                        handle = FileStateHandle(path, handle.size, handle.shared)
                    if handle.shared:  # self-contained: its own copy of every shared file
                        fs.makedirs(posixpath.join(folder, SHARED_DIR_NAME), exist_ok=True)
                        copies = []
                        for source in handle.shared:
                            target = posixpath.join(folder, SHARED_DIR_NAME, posixpath.basename(source))
                            src_fs, src_path = _url_to_fs(source) if "://" in source else (self._fs, source)
                            fs.pipe_file(target, src_fs.cat_file(src_path))
                            copies.append(target)
                        handle = replace(handle, shared=tuple(copies))
                    copied[subtask] = handle
            props = dict(completed.properties, savepoint=True)
            raw = self._metadata_bytes(
                completed.checkpoint_id,
                operators,
                folder,
                completed.trigger_timestamp,
                completed.completion_timestamp,
                props,
                shared_dir=SHARED_DIR_NAME,
            )
            fs.pipe_file(posixpath.join(folder, METADATA_FILE_NAME), raw)  # last: a folder without it is no savepoint
            restrict_to_owner(fs, folder)  # local: its files 0600
        except OSError as exc:
            raise CheckpointStorageError(
                f"savepoint directory {target_directory!r} is not writable: {type(exc).__name__}: {exc}",
                str(target_directory),
            ) from exc
        return _url(fs, folder)

    def latest_completed(self) -> Optional[CompletedCheckpoint]:
        """The newest usable completed checkpoint, ``None`` when none ever completed.

        Skips (logged warning) a folder with a corrupt or missing ``_metadata`` or a state
        file it names that vanished or shrank; raises :class:`CheckpointStorageError` naming
        the files when checkpoints completed but none is usable.
        """
        with self._lock:
            try:
                return self._latest_completed()
            except CheckpointStorageError:
                raise
            except OSError as exc:  # unreachable storage: no fallback, that could skip state
                raise CheckpointStorageError(
                    f"cannot read checkpoint storage {self.job_directory!r} ({_dir_key_text()}): "
                    f"{type(exc).__name__}: {exc}",
                    self.job_directory,
                ) from exc

    def _latest_completed(self) -> Optional[CompletedCheckpoint]:
        try:
            self._ensure_scanned()
        except OSError as exc:  # every listed folder is tried below all the same
            log.warning("checkpoints of job %s not all scanned: %s", self.job_id, exc)
        candidates = sorted(set(self._list_checkpoint_ids()) | self._completed_ids, reverse=True)
        problems: list[_UnusableCheckpoint] = []
        for checkpoint_id in candidates:
            try:
                completed = self._load(checkpoint_id)
            except _UnusableCheckpoint as exc:
                lost = not exc.metadata_missing or checkpoint_id in self._completed_ids
                if lost:
                    problems.append(exc)
                log.warning(
                    "checkpoint %d of job %s is not usable, trying an older one: %s", checkpoint_id, self.job_id, exc
                )
                continue
            if problems:
                log.warning(
                    "restoring job %s from checkpoint %d (newer ones were not usable)", self.job_id, checkpoint_id
                )
            self._completed_ids.add(checkpoint_id)
            self._discarding.discard(checkpoint_id)  # subsumed but kept (a failed delete): retained again
            return completed
        if problems:
            files = ", ".join(repr(p.path) for p in problems)
            raise CheckpointStorageError(
                f"no usable completed checkpoint for job {self.job_id} in "
                f"{self.job_directory!r}: {'; '.join(str(p) for p in problems)} (files: {files})",
                problems[0].path,
            )
        return None

    def completed_checkpoint_ids(self) -> list[int]:
        """Ids of the completed checkpoints this store retains, oldest first."""
        with self._lock:
            self._ensure_scanned()
            return sorted(self._completed_ids)

    def load_checkpoint(self, checkpoint_id: int) -> CompletedCheckpoint:
        """Checkpoint ``checkpoint_id`` of this job, its metadata and state files verified."""
        with self._lock:
            return self._load(checkpoint_id)

    def next_checkpoint_id(self) -> int:
        """An id above every checkpoint folder of this job (the coordinator's counter start
        after a restore, so a corrupt newer folder is never reused)."""
        with self._lock:
            try:
                listed = self._list_checkpoint_ids()
            except OSError as exc:
                raise CheckpointStorageError(
                    f"cannot list checkpoint storage {self.job_directory!r} ({_dir_key_text()}): "
                    f"{type(exc).__name__}: {exc}",
                    self.job_directory,
                ) from exc
            return max([0, *listed, *self._completed_ids, *self._discarding]) + 1

    def shutdown(self, discard: bool) -> None:
        """Job ended: with ``discard`` deletes the job's folder and every checkpoint in it
        (Flink's ``CompletedCheckpointStore.shutdown`` for a globally terminal job)."""
        if not discard:
            return
        with self._lock:
            try:
                self._fs.rm(self._job_path(), recursive=True)
            except FileNotFoundError:
                pass
            except OSError as exc:  # the job ended: what is left behind is logged, never an error
                log.warning("could not delete the checkpoints of job %s: %s", self.job_id, exc)
            self._completed_ids.clear()
            self._discarding.clear()
            self._savepoint_ids.clear()
            self._registry.clear()

    # -- internals ----------------------------------------------------------------------------------
    def _encode_handle(
        self, subtask: int, handle: StateHandle, chk_path: str, operator_id: str, shared_path: str = ""
    ) -> list:
        if isinstance(handle, ByteStreamStateHandle):
            entry = [subtask, "inline", handle.handle_name, bytes(handle.data)]
        elif isinstance(handle, FileStateHandle):
            if posixpath.dirname(handle.path) == chk_path:
                entry = [subtask, "file", posixpath.basename(handle.path), handle.size]
            else:
                entry = [subtask, "file-absolute", handle.path, handle.size]
        else:
            raise TypeError(f"operator {operator_id!r} subtask {subtask}: {handle!r} is not a state handle")
        if handle.shared:  # names in the shared folder, else (elsewhere) the path
            entry.append(
                [p[len(shared_path) + 1 :] if posixpath.dirname(p) == shared_path else p for p in handle.shared]
            )
        return entry

    def _write_atomically(self, path: str, data: bytes) -> None:
        fs = self._fs
        protocols = {fs.protocol} if isinstance(fs.protocol, str) else set(fs.protocol)
        if protocols & _ATOMIC_PUT_PROTOCOLS:
            fs.pipe_file(path, data)
            return
        tmp = posixpath.join(posixpath.dirname(path), f".{posixpath.basename(path)}.inprogress.{uuid.uuid4().hex}")
        fs.pipe_file(tmp, data)
        try:
            fs.mv(tmp, path)
        except BaseException:
            try:
                fs.rm_file(tmp)
            except OSError:
                pass
            raise

    def _list_checkpoint_ids(self) -> list[int]:
        local = self.checkpoints_dir if "://" not in str(self.checkpoints_dir) else None
        if self._fs_and_root is None and local is not None and not os.path.isdir(os.path.join(local, self.job_id)):
            return []  # a new job on a local folder: no filesystem layer loaded for nothing
        try:
            names = self._fs.ls(self._job_path(), detail=False)
        except FileNotFoundError:
            return []
        ids = []
        for name in names:
            match = _CHK_DIR.match(posixpath.basename(name.rstrip("/")))
            if match:
                ids.append(int(match.group(1)))
        self._newest_seen = max([self._newest_seen, *ids])
        return ids

    def _ensure_scanned(self) -> None:
        """Learns which checkpoints of an earlier run completed (their ``_metadata`` exists).
        A folder whose ``_metadata`` cannot be looked up raises ``OSError`` (scanned again
        next time): never taken for a checkpoint that did not complete."""
        if self._scanned:
            return
        fs = self._fs
        unknown: Optional[OSError] = None
        for checkpoint_id in self._list_checkpoint_ids():
            if checkpoint_id in self._completed_ids or checkpoint_id in self._discarding:
                continue
            try:
                fs.info(posixpath.join(self._chk_path(checkpoint_id), METADATA_FILE_NAME))
            except FileNotFoundError:
                continue
            except OSError as exc:
                unknown = exc
                continue
            self._completed_ids.add(checkpoint_id)
        if unknown is not None:
            raise unknown
        self._scanned = True

    def _shared_paths(self, completed: CompletedCheckpoint) -> set[str]:
        """The shared files ``completed`` names, as paths of this store's filesystem."""
        strip = type(self._fs)._strip_protocol
        return {
            strip(p) if "://" in p else p
            for subtasks in completed.operator_states.values()
            for h in subtasks.values()
            for p in h.shared
        }

    def _known(self, checkpoint_id: int) -> bool:
        """Whether the shared files of ``checkpoint_id`` are known: registered, or registered
        now from its ``_metadata``. An unreadable or corrupt ``_metadata`` leaves them unknown."""
        if self._registry.is_registered(checkpoint_id):
            return True
        chk_path = self._chk_path(checkpoint_id)
        meta_path = posixpath.join(chk_path, METADATA_FILE_NAME)
        try:
            raw = self._fs.cat_file(meta_path)
        except FileNotFoundError:  # deleted by hand: it names nothing any more
            log.warning(
                "checkpoint %d of job %s lost its %s: shared files only it named stay behind",
                checkpoint_id,
                self.job_id,
                self._display(meta_path),
            )
            self._registry.register_all(checkpoint_id, ())
            return True
        except OSError as exc:
            log.warning("shared files of checkpoint %d of job %s unknown: %s", checkpoint_id, self.job_id, exc)
            return False
        try:
            completed = self._decode(raw, self._display(meta_path), chk_path, checkpoint_id)
        except CheckpointStorageError as exc:
            log.warning("shared files of checkpoint %d of job %s unknown: %s", checkpoint_id, self.job_id, exc)
            return False
        self._registry.register_all(checkpoint_id, self._shared_paths(completed))
        return True

    def _all_retained_known(self) -> bool:
        return all([self._known(c) for c in sorted(self._completed_ids)])

    def _subsume(self, newest_id: int) -> None:
        """Retention (Flink's ``DefaultCompletedCheckpointStore`` subsumption): completed
        checkpoints beyond ``num_retained`` are discarded, then the shared files no retained
        or restoring checkpoint names, then unfinished folders older than ``newest_id``.

        Nothing is deleted on a guess: a subsumed checkpoint whose files are unknown or whose
        ``_metadata`` could not be deleted keeps its folder (retried at the next checkpoint);
        while any retained checkpoint's files are unknown no shared file is deleted; a failed
        deletion is retried at the next checkpoint."""
        try:
            self._ensure_scanned()
        except OSError as exc:  # retention over what is known; the rest at the next checkpoint
            log.warning("checkpoints of job %s not all scanned: %s", self.job_id, exc)
        for checkpoint_id in self._subsumed_ids():
            self._completed_ids.discard(checkpoint_id)
            self._savepoint_ids.discard(checkpoint_id)
            self._discarding.add(checkpoint_id)
        all_known = self._all_retained_known()
        for checkpoint_id in sorted(self._discarding):
            self._discard_subsumed(checkpoint_id)
        if not all_known:
            log.warning(
                "keeping every shared state file of job %s: the files a retained checkpoint names are "
                "unknown (its metadata could not be read); retried at the next checkpoint",
                self.job_id,
            )
            return
        self._delete_unused_shared()
        self._delete_unfinished(newest_id)

    def _subsumed_ids(self) -> list[int]:
        """The oldest completed checkpoints beyond ``num_retained`` (savepoints counted), never
        the latest one nor the latest that is not a savepoint, which later incremental
        checkpoints may build on, unless the job stopped with the latest (Flink's
        ``CheckpointSubsumeHelper``, FLINK-21351)."""
        ordered = sorted(self._completed_ids)
        if len(ordered) <= self.num_retained:
            return []
        latest = ordered[-1]
        checkpoints = [c for c in ordered if c not in self._savepoint_ids]
        kept = checkpoints[-1] if checkpoints and not self._stopping else None
        subsumed = []
        for checkpoint_id in ordered:
            if len(ordered) - len(subsumed) <= self.num_retained:
                break
            if checkpoint_id != latest and checkpoint_id != kept:
                subsumed.append(checkpoint_id)
        return subsumed

    def _discard_subsumed(self, checkpoint_id: int) -> None:
        """A subsumed checkpoint goes: its ``_metadata`` first (a folder without it is no
        checkpoint), then its references to shared files, then the rest of its folder."""
        if not self._known(checkpoint_id):
            return  # its metadata is read again at the next checkpoint
        meta_path = posixpath.join(self._chk_path(checkpoint_id), METADATA_FILE_NAME)
        try:
            self._fs.rm_file(meta_path)
        except FileNotFoundError:
            pass
        except OSError as exc:
            log.warning("could not delete %s (retried later): %s", self._display(meta_path), exc)
            return
        self._discarding.discard(checkpoint_id)
        self._registry.unregister(checkpoint_id)
        self._delete_dir(checkpoint_id)

    def _delete_unused_shared(self) -> None:
        """Delete the job's shared files no registered checkpoint names (a failure: retried)."""
        shared_root = posixpath.join(self._job_path(), SHARED_DIR_NAME) + "/"
        for path in sorted(self._registry.unused()):
            if not path.startswith(shared_root):  # not this job's file: never deleted here
                self._registry.discarded(path)
                continue
            try:
                self._fs.rm_file(path)
            except FileNotFoundError:
                pass
            except OSError as exc:
                log.warning("could not delete shared state file %s (retried later): %s", self._display(path), exc)
                continue
            self._registry.discarded(path)

    def _delete_unfinished(self, newest_id: int) -> None:
        """Delete the folders (and new shared files) of checkpoints older than ``newest_id``
        that never completed (Flink subsumes pending checkpoints older than a completed one)."""
        try:
            listed = self._list_checkpoint_ids()
        except OSError as exc:
            log.warning("could not list the checkpoints of job %s: %s", self.job_id, exc)
            return
        unfinished = []
        for checkpoint_id in listed:
            if checkpoint_id >= newest_id or checkpoint_id in self._completed_ids or checkpoint_id in self._discarding:
                continue
            try:
                self._fs.info(posixpath.join(self._chk_path(checkpoint_id), METADATA_FILE_NAME))
            except FileNotFoundError:
                self._delete_dir(checkpoint_id)
                unfinished.append(checkpoint_id)
                continue
            except OSError:
                continue  # cannot tell: looked at again at the next checkpoint
            self._completed_ids.add(checkpoint_id)  # completed after all: retention decides next time
        if unfinished:
            self._delete_unfinished_shared(unfinished)

    def _delete_unfinished_shared(self, checkpoint_ids: list[int]) -> None:
        """Delete the shared files uploaded for checkpoints that will never complete (named
        ``<checkpoint id>-...``) that no registered checkpoint names. Call only when every
        retained checkpoint's files are known."""
        shared_path = posixpath.join(self._job_path(), SHARED_DIR_NAME)
        try:
            names = [posixpath.basename(p.rstrip("/")) for p in self._fs.ls(shared_path, detail=False)]
        except OSError:
            return
        prefixes = tuple(f"{c}-" for c in checkpoint_ids)
        for name in sorted(n for n in names if n.startswith(prefixes)):
            path = posixpath.join(shared_path, name)
            if self._registry.is_referenced(path):
                continue
            try:
                self._fs.rm_file(path)
            except OSError:
                pass

    def _delete_dir(self, checkpoint_id: int) -> None:
        path = self._chk_path(checkpoint_id)
        try:
            self._fs.rm(path, recursive=True)
        except FileNotFoundError:
            pass
        except OSError as exc:  # a leftover folder is harmless; the next retention retries
            log.warning("could not delete checkpoint folder %s: %s", self._display(path), exc)

    def _load(self, checkpoint_id: int) -> CompletedCheckpoint:
        chk_path = self._chk_path(checkpoint_id)
        meta_path = posixpath.join(chk_path, METADATA_FILE_NAME)
        shown = self._display(meta_path)
        try:
            raw = self._fs.cat_file(meta_path)
        except FileNotFoundError:
            raise _UnusableCheckpoint(f"metadata file {shown!r} is missing", shown, metadata_missing=True) from None
        completed = self._decode(raw, shown, chk_path, checkpoint_id)
        self._verify_state_files(completed, chk_path, shown)
        # a restore reads it: its shared files are this store's to keep (Flink's registerAllAfterRestored)
        # until a checkpoint newer than any the store knows now (no checkpoint in flight) completes
        newest_known = max([checkpoint_id, self._newest_seen, *self._completed_ids, *self._discarding])
        self._registry.register_all_after_restored(checkpoint_id, self._shared_paths(completed), newest_known)
        return _with_urls(self._fs, completed)

    def _decode(self, raw: bytes, shown: str, chk_path: str, checkpoint_id: int) -> CompletedCheckpoint:
        return _decode_metadata(raw, shown, chk_path, checkpoint_id, self.checkpoint_directory(checkpoint_id))

    def _verify_state_files(self, completed: CompletedCheckpoint, chk_path: str, shown: str) -> None:
        _verify_state_files(self._fs, self._display, completed, shown)


def _url(fs: Any, path: str) -> str:
    """``path`` of ``fs`` as a user writes it: a plain path on the local filesystem, else a URL."""
    protocols = (fs.protocol,) if isinstance(fs.protocol, str) else tuple(fs.protocol)
    return path if "file" in protocols or "local" in protocols else fs.unstrip_protocol(path)


def read_state_handle(handle: StateHandle, fs: Any = None) -> bytes:
    """The bytes ``handle`` names: inline, a path of ``fs`` (the local filesystem when None) or
    a URL of any filesystem (a restored savepoint's files); a missing or truncated file raises
    an error naming it."""
    if isinstance(handle, ByteStreamStateHandle):
        return handle.data
    path = handle.path
    if fs is None or "://" in path:
        fs, path = _url_to_fs(path)
    shown = _url(fs, path)
    try:
        data = fs.cat_file(path)
    except FileNotFoundError as exc:
        raise CheckpointStorageError(f"state file {shown!r} of a checkpoint is missing", shown) from exc
    if len(data) != handle.size:
        raise CheckpointStorageError(
            f"state file {shown!r} holds {len(data)} bytes, the checkpoint recorded {handle.size}", shown
        )
    return data


def load_completed_checkpoint(path: str, storage_options: Optional[Mapping[str, Any]] = None) -> CompletedCheckpoint:
    """The savepoint or retained checkpoint in folder ``path`` (a path or an fsspec URL; its
    ``_metadata`` file is accepted too), every state file it names verified (Flink's
    ``Checkpoints.loadCheckpointMetadata``). Its file handles name the files by URL (by path on
    the local filesystem), so any TaskExecutor reads them wherever the folder was moved.
    Raises :class:`CheckpointStorageError` naming the folder or the file that is wrong."""
    text = str(path).rstrip("/")
    try:
        fs, folder = _url_to_fs(text, **dict(storage_options or {}))
    except (ImportError, ValueError) as exc:
        raise CheckpointStorageError(f"savepoint path {text!r} cannot be opened: {exc}", text) from exc
    if posixpath.basename(folder) == METADATA_FILE_NAME:
        folder = posixpath.dirname(folder)
    meta_path = posixpath.join(folder, METADATA_FILE_NAME)
    shown = _url(fs, meta_path)
    try:
        raw = fs.cat_file(meta_path)
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
        what = "does not exist" if not fs.exists(folder) else f"holds no {METADATA_FILE_NAME} file"
        raise CheckpointStorageError(
            f"{text!r} is not a savepoint or a completed checkpoint: it {what}", _url(fs, folder)
        ) from None
    except OSError as exc:
        raise CheckpointStorageError(f"cannot read {shown!r}: {type(exc).__name__}: {exc}", shown) from exc
    try:
        completed = _decode_metadata(raw, shown, folder, None, _url(fs, folder))
        _verify_state_files(fs, partial(_url, fs), completed, shown)
    except _UnusableCheckpoint as exc:
        raise CheckpointStorageError(str(exc), exc.path) from None
    return _with_urls(fs, completed, files=True)


def _with_urls(fs: Any, completed: CompletedCheckpoint, files: bool = False) -> CompletedCheckpoint:
    """``completed`` with its shared files (and with ``files`` its state files) named by URL
    unless ``fs`` is the local filesystem, so any process reads them from where they are."""
    if _url(fs, "/") == "/":
        return completed
    operators = {
        op: {
            i: replace(
                FileStateHandle(_url(fs, h.path), h.size) if files and isinstance(h, FileStateHandle) else h,
                shared=tuple(_url(fs, p) for p in h.shared),
            )
            for i, h in subtasks.items()
        }
        for op, subtasks in completed.operator_states.items()
    }
    return replace(completed, operator_states=operators)


def _decode_metadata(
    raw: bytes, shown: str, chk_path: str, checkpoint_id: Optional[int], external_pointer: str
) -> CompletedCheckpoint:
    """A ``_metadata`` file's checkpoint; its relative file names resolved against ``chk_path``;
    ``checkpoint_id`` None accepts any id (a savepoint's)."""

    def corrupt(why: str) -> _UnusableCheckpoint:
        return _UnusableCheckpoint(f"metadata file {shown!r} is corrupt: {why}", shown)

    if len(raw) < _HEADER.size:
        raise corrupt(f"{len(raw)} bytes, shorter than its header")
    magic, version, crc = _HEADER.unpack_from(raw)
    if magic != _MAGIC:
        raise corrupt("not a raylink checkpoint metadata file")
    if not 1 <= version <= METADATA_VERSION:
        raise corrupt(f"format version {version}, this raylink reads versions 1..{METADATA_VERSION}")
    payload = raw[_HEADER.size :]
    if zlib.crc32(payload) != crc:
        raise corrupt("checksum mismatch (truncated or overwritten)")
    try:
        body = msgpack.unpackb(payload, raw=False, strict_map_key=False)
        if checkpoint_id is not None and body["checkpoint_id"] != checkpoint_id:
            raise corrupt(f"it describes checkpoint {body['checkpoint_id']}, not {checkpoint_id}")
        operators: dict[str, dict[int, StateHandle]] = {}
        shared_path = posixpath.normpath(posixpath.join(chk_path, body.get("shared_dir", "../" + SHARED_DIR_NAME)))
        for operator_id, entries in body["operators"]:
            subtasks: dict[int, StateHandle] = {}
            for entry in entries:
                subtask, kind, name, value = entry[:4]
                shared = tuple(
                    n if "/" in n else posixpath.join(shared_path, n) for n in (entry[4] if len(entry) > 4 else ())
                )
                if kind == "inline":
                    subtasks[subtask] = ByteStreamStateHandle(name, value, shared)
                elif kind == "file":
                    subtasks[subtask] = FileStateHandle(posixpath.join(chk_path, name), value, shared)
                elif kind == "file-absolute":
                    subtasks[subtask] = FileStateHandle(name, value, shared)
                else:
                    raise corrupt(f"unknown state handle kind {kind!r}")
            operators[operator_id] = subtasks
        return CompletedCheckpoint(
            job_id=body["job_id"],
            checkpoint_id=body["checkpoint_id"],
            trigger_timestamp=body["trigger_timestamp"],
            completion_timestamp=body["completion_timestamp"],
            operator_states=operators,
            properties=dict(body["properties"]),
            external_pointer=external_pointer,
            metadata_path=shown,
            metadata_version=version,
        )
    except _UnusableCheckpoint:
        raise
    except (ValueError, TypeError, KeyError, msgpack.UnpackException) as exc:
        raise corrupt(f"{type(exc).__name__}: {exc}") from None


def _verify_state_files(fs: Any, display: Any, completed: CompletedCheckpoint, shown: str) -> None:
    """Every file the metadata names exists with its recorded size (one listing per folder)."""
    sizes: dict[str, dict[str, int]] = {}

    def listed(folder: str) -> dict[str, int]:
        """The sizes of the files in ``folder`` by name (listed once)."""
        if folder not in sizes:
            try:
                listing = fs.ls(folder, detail=True)
                sizes[folder] = {posixpath.basename(e["name"].rstrip("/")): e.get("size") for e in listing}
            except FileNotFoundError:
                sizes[folder] = {}
        return sizes[folder]

    for operator_id, subtasks in completed.operator_states.items():
        for subtask, handle in subtasks.items():
            for path in handle.shared:
                if posixpath.basename(path) not in listed(posixpath.dirname(path)):
                    raise _UnusableCheckpoint(
                        f"shared state file {display(path)!r} of operator {operator_id!r} subtask {subtask}, "
                        f"named in {shown!r}, is missing",
                        display(path),
                    )
            if not isinstance(handle, FileStateHandle):
                continue
            actual = listed(posixpath.dirname(handle.path)).get(posixpath.basename(handle.path))
            file_shown = display(handle.path)
            if actual is None:
                raise _UnusableCheckpoint(
                    f"state file {file_shown!r} of operator {operator_id!r} subtask {subtask}, "
                    f"named in {shown!r}, is missing",
                    file_shown,
                )
            if actual != handle.size:
                raise _UnusableCheckpoint(
                    f"state file {file_shown!r} of operator {operator_id!r} subtask {subtask} holds "
                    f"{actual} bytes, {shown!r} recorded {handle.size}",
                    file_shown,
                )


__all__ = [
    "ByteStreamStateHandle",
    "CHECKPOINT_DIR_PREFIX",
    "CheckpointStorage",
    "CheckpointStorageError",
    "CompletedCheckpoint",
    "FileStateHandle",
    "METADATA_FILE_NAME",
    "METADATA_VERSION",
    "SAVEPOINT_DIR_PREFIX",
    "SHARED_DIR_NAME",
    "load_completed_checkpoint",
    "read_state_handle",
    "StateHandle",
]
