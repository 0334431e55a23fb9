"""Flink's high-availability services on any fsspec file system: what a JobMaster needs to
recover its jobs after its process died.

``high-availability.type: filesystem`` with ``high-availability.storageDir`` (a folder or any
fsspec URL every node reaches) keeps, under ``<storageDir>/<high-availability.cluster-id>/``:

* ``jobgraphs/<job id>`` -- :class:`JobGraphStore` (Flink's ``JobGraphStore``): the submitted
  program (its JobGraph and configuration, pickled as a detached submission ships it), written
  before the job is deployed and removed once the job reached a globally terminal state;
* ``checkpoints/<job id>/counter`` -- :class:`CheckpointIDCounter` (Flink's
  ``CheckpointIDCounter``): the next checkpoint id, written before a checkpoint with that id
  is triggered, so a recovered JobMaster never reuses an id (a sink's committables are kept by id);
* ``checkpoints/<job id>/completed`` -- :class:`CompletedCheckpointStore` (Flink's
  ``DefaultCompletedCheckpointStore``): the pointers (folders) of the latest completed
  checkpoints, oldest first; a checkpoint is added after its ``_metadata`` is written and
  before it counts (before any task hears it completed: no sink commits what a recovered
  JobMaster would not restore).

Every file is replaced atomically (written beside, then renamed), so a JobMaster killed while
writing leaves the previous version. Whoever owns a job's entries is told by Ray: there is one
named JobMaster actor per job (one Dispatcher per session), restarted by Ray when its process
dies, so no second writer exists (Ray's actor restart plays the part of Flink's leader
election). A job graph is unpickled only from a folder no other user can write
(:func:`~raylink.state.savepoint_targets.check_restorable`).

``high-availability.type: none`` (the default): :func:`create_ha_services` returns None and
nothing is written; a JobMaster whose process dies takes its job with it (as Flink's).

Thread-safety: each store guards its file with a lock; the stores of one job are used by
its JobMaster only.
"""

from __future__ import annotations

import json
import posixpath
import threading
import uuid
from typing import Any, Optional

import cloudpickle
import fsspec

from raylink.core.options import HighAvailabilityOptions, IllegalConfigurationError, read_option
from raylink.errors import RaylinkError
from raylink.state.savepoint_targets import check_restorable

#: how many completed checkpoint pointers the store keeps (the newest is the one restored)
RETAINED_POINTERS = 5


class HighAvailabilityStoreError(RaylinkError, RuntimeError):
    """The high-availability store could not be read or written (names the file and the option)."""


def ha_enabled(configuration: Any) -> bool:
    """``high-availability.type`` is not ``none``."""
    return str(read_option(configuration, HighAvailabilityOptions.TYPE) or "none").lower() != "none"


class _Folder:
    """One folder of the store on its fsspec file system; atomic replace of small files."""

    def __init__(self, url: str) -> None:
        self.url = url.rstrip("/")
        self.fs, self.root = fsspec.core.url_to_fs(self.url)

    def path(self, *parts: str) -> str:
        return posixpath.join(self.root, *parts)

    def write(self, name: str, data: bytes) -> None:
        target = self.path(name)
        folder = posixpath.dirname(target)
        tmp = posixpath.join(folder, f".{posixpath.basename(target)}.{uuid.uuid4().hex}.tmp")
        try:
            self.fs.makedirs(folder, exist_ok=True)
            with self.fs.open(tmp, "wb") as fh:
                fh.write(data)
            self.fs.mv(tmp, target)
        except OSError as exc:
            raise HighAvailabilityStoreError(
                f"cannot write {self.url}/{name} ({HighAvailabilityOptions.STORAGE_PATH.key}): "
                f"{type(exc).__name__}: {exc}"
            ) from exc

    def read(self, name: str) -> Optional[bytes]:
        try:
            with self.fs.open(self.path(name), "rb") as fh:
                return fh.read()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise HighAvailabilityStoreError(
                f"cannot read {self.url}/{name} ({HighAvailabilityOptions.STORAGE_PATH.key}): "
                f"{type(exc).__name__}: {exc}"
            ) from exc

    def list(self, name: str) -> list[str]:
        try:
            return sorted(posixpath.basename(p) for p in self.fs.ls(self.path(name), detail=False))
        except FileNotFoundError:
            return []

    def remove(self, name: str) -> None:
        try:
            self.fs.rm(self.path(name), recursive=True)
        except FileNotFoundError:
            pass


class JobGraphStore:
    """Flink's ``JobGraphStore``: the submitted programs of the jobs not yet globally terminal."""

    def __init__(self, folder: _Folder) -> None:
        self._folder = folder
        self._lock = threading.Lock()

    def put_job_graph(self, job_id: str, program: bytes) -> None:
        """Record job ``job_id``'s pickled program (before the job is deployed)."""
        with self._lock:
            self._folder.write(f"jobgraphs/{job_id}", program)

    def recover_job_graph(self, job_id: str) -> Optional[bytes]:
        """Job ``job_id``'s pickled program, None when it is not (or no longer) stored. Refuses
        (``UnsafeSavepointError``) a local store another user could have written."""
        with self._lock:
            data = self._folder.read(f"jobgraphs/{job_id}")
            if data is not None:  # local folders only: another user must not have written it
                check_restorable(f"{self._folder.url}/jobgraphs", [f"{self._folder.url}/jobgraphs/{job_id}"])
            return data

    def get_job_ids(self) -> list[str]:
        """The ids of every stored job (those a recovering Dispatcher resumes)."""
        with self._lock:
            return [name for name in self._folder.list("jobgraphs") if not name.startswith(".")]

    def remove_job_graph(self, job_id: str) -> None:
        with self._lock:
            self._folder.remove(f"jobgraphs/{job_id}")


class CheckpointIDCounter:
    """Flink's ``CheckpointIDCounter``: the next checkpoint id of a job, stored before it is used."""

    def __init__(self, folder: _Folder, job_id: str) -> None:
        self._folder = folder
        self._name = f"checkpoints/{job_id}/counter"
        self._lock = threading.Lock()
        raw = folder.read(self._name)
        self._next = int(raw.decode()) if raw else 1

    def get(self) -> int:
        """The next id to be handed out."""
        with self._lock:
            return self._next

    def set_count(self, next_id: int) -> None:
        """The next id is ``next_id`` (never lowered)."""
        with self._lock:
            if next_id > self._next:
                self._folder.write(self._name, str(next_id).encode())
                self._next = next_id

    def get_and_increment(self) -> int:
        """An id no JobMaster of this job has handed out before (stored before it is returned)."""
        with self._lock:
            current = self._next
            self._folder.write(self._name, str(current + 1).encode())
            self._next = current + 1
            return current


class CompletedCheckpointStore:
    """Flink's ``DefaultCompletedCheckpointStore`` (pointers only: the state stays in the
    checkpoint storage): the latest completed checkpoints of a job, newest last."""

    def __init__(self, folder: _Folder, job_id: str, retained: int = RETAINED_POINTERS) -> None:
        self._folder = folder
        self._name = f"checkpoints/{job_id}/completed"
        self._retained = max(1, retained)
        self._lock = threading.Lock()
        raw = folder.read(self._name)
        self._pointers: list[dict] = json.loads(raw.decode()) if raw else []

    def add_checkpoint(self, checkpoint_id: int, pointer: str) -> None:
        """Record a completed checkpoint (its folder); raises when the store cannot be written
        (the checkpoint then does not count)."""
        with self._lock:
            pointers = [p for p in self._pointers if p["id"] != checkpoint_id]
            pointers.append({"id": int(checkpoint_id), "pointer": str(pointer)})
            pointers = sorted(pointers, key=lambda p: p["id"])[-self._retained :]
            self._folder.write(self._name, json.dumps(pointers).encode())
            self._pointers = pointers

    def latest(self) -> Optional[tuple[int, str]]:
        """``(id, folder)`` of the latest completed checkpoint, None when none completed."""
        with self._lock:
            return (self._pointers[-1]["id"], self._pointers[-1]["pointer"]) if self._pointers else None

    def checkpoint_ids(self) -> list[int]:
        with self._lock:
            return [p["id"] for p in self._pointers]


class HighAvailabilityServices:
    """Flink's ``HighAvailabilityServices`` of ``high-availability.type: filesystem``."""

    def __init__(self, storage_dir: str, cluster_id: str = "default") -> None:
        self.storage_dir = storage_dir
        self.cluster_id = cluster_id
        self._folder = _Folder(posixpath.join(storage_dir.rstrip("/"), cluster_id.strip("/") or "default"))
        self._job_graphs = JobGraphStore(self._folder)

    @property
    def url(self) -> str:
        """The cluster's folder of the store."""
        return self._folder.url

    def get_job_graph_store(self) -> JobGraphStore:
        return self._job_graphs

    def create_checkpoint_id_counter(self, job_id: str) -> CheckpointIDCounter:
        return CheckpointIDCounter(self._folder, job_id)

    def create_completed_checkpoint_store(self, job_id: str) -> CompletedCheckpointStore:
        return CompletedCheckpointStore(self._folder, job_id)

    def cleanup_job_data(self, job_id: str) -> None:
        """The job reached a globally terminal state: forget its graph, counter and pointers."""
        self._job_graphs.remove_job_graph(job_id)
        self._folder.remove(f"checkpoints/{job_id}")

    # small records of a recovering component (the Dispatcher's address)
    def put_record(self, name: str, value: dict) -> None:
        self._folder.write(f"records/{name}", json.dumps(value).encode())

    def get_record(self, name: str) -> Optional[dict]:
        raw = self._folder.read(f"records/{name}")
        return json.loads(raw.decode()) if raw else None

    def remove_record(self, name: str) -> None:
        self._folder.remove(f"records/{name}")


def create_ha_services(configuration: Any) -> Optional[HighAvailabilityServices]:
    """The services ``configuration`` asks for; None with ``high-availability.type: none``.
    A type without ``high-availability.storageDir`` is refused naming both keys."""
    if not ha_enabled(configuration):
        return None
    storage_dir = read_option(configuration, HighAvailabilityOptions.STORAGE_PATH)
    if not storage_dir:
        raise IllegalConfigurationError(
            f"{HighAvailabilityOptions.TYPE.key}: "
            f"{read_option(configuration, HighAvailabilityOptions.TYPE)} needs "
            f"{HighAvailabilityOptions.STORAGE_PATH.key} (a folder or URL every node reaches)"
        )
    storage_dir = str(storage_dir)
    if "://" not in storage_dir:
        import os

        storage_dir = os.path.abspath(storage_dir)
    return HighAvailabilityServices(storage_dir, str(read_option(configuration, HighAvailabilityOptions.CLUSTER_ID)))


def serialize_program(job_graph: Any, configuration: Any) -> bytes:
    """The program a JobGraphStore keeps (what a detached submission ships)."""
    return cloudpickle.dumps({"job_graph": job_graph, "configuration": configuration})


__all__ = [
    "CheckpointIDCounter",
    "CompletedCheckpointStore",
    "HighAvailabilityServices",
    "HighAvailabilityStoreError",
    "JobGraphStore",
    "create_ha_services",
    "ha_enabled",
    "serialize_program",
]
