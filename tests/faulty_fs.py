"""A local filesystem behind the ``faulty://`` protocol whose operations fail on a schedule: the
storage faults of an object store (a read, a listing, a delete that times out once, or keeps
failing) brought to the local disk for the checkpoint storage tests.

``faulty:///tmp/x`` is the local path ``/tmp/x``. :class:`FaultyFileSystem` is a real fsspec
``AbstractFileSystem`` (registered under ``faulty`` by :func:`register`), so the code under test
reaches it exactly as it reaches S3: through ``fsspec.core.url_to_fs`` and the filesystem's
methods. Each method first asks the process-wide :data:`SCHEDULE` whether to fail; a failure
happens before the operation (nothing is done) and raises an ``OSError`` that is not a
``FileNotFoundError`` (an error, not an answer).

Operation kinds: ``read`` (cat_file, open for reading, get_file), ``write`` (pipe_file,
put_file, open for writing, mv, makedirs), ``list`` (ls, find), ``info`` (info, exists) and
``delete`` (rm_file, and each file of a recursive rm).

Thread-safety: the schedule takes a lock; the filesystem's methods may run on any thread.
"""

from __future__ import annotations

import errno
import threading
from dataclasses import dataclass
from typing import Any, Optional

import fsspec
from fsspec.implementations.local import LocalFileSystem
from fsspec.spec import AbstractFileSystem

PROTOCOL = "faulty"
KINDS = ("read", "write", "list", "info", "delete")


@dataclass
class FaultRule:
    """Fail operations of ``kind`` on paths containing ``path_part``: the next ``count`` ones,
    or every one while the rule stands (``count`` None: a fault for good), after letting the
    first ``after`` ones through."""

    kind: str
    path_part: str = ""
    count: Optional[int] = 1
    after: int = 0

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"fault kind {self.kind!r} is not one of {KINDS}")


class FaultSchedule:
    """The faults to inject, and how many were."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._rules: list[FaultRule] = []
        self.injected: dict[str, int] = {kind: 0 for kind in KINDS}

    def add(self, rule: FaultRule) -> None:
        with self._lock:
            self._rules.append(rule)

    def heal(self) -> None:
        """No more faults."""
        with self._lock:
            self._rules.clear()

    def reset(self) -> None:
        with self._lock:
            self._rules.clear()
            self.injected = {kind: 0 for kind in KINDS}

    def check(self, kind: str, path: str) -> None:
        """Raise the scheduled fault for an operation of ``kind`` on ``path``, if any."""
        with self._lock:
            for rule in self._rules:
                if rule.kind == kind and rule.path_part in path:
                    if rule.after > 0:
                        rule.after -= 1
                        continue
                    if rule.count is not None:
                        rule.count -= 1
                        if rule.count <= 0:
                            self._rules.remove(rule)
                    self.injected[kind] += 1
                    break
            else:
                return
        raise OSError(errno.EIO, f"injected {kind} fault", path)


#: the faults of every FaultyFileSystem instance (fsspec caches one instance per protocol)
SCHEDULE = FaultSchedule()


class FaultyFileSystem(AbstractFileSystem):
    """The local filesystem under ``faulty://``, failing as :data:`SCHEDULE` says."""

    protocol = PROTOCOL
    root_marker = "/"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.local = LocalFileSystem()

    @classmethod
    def _strip_protocol(cls, path: Any) -> Any:
        if isinstance(path, list):
            return [cls._strip_protocol(p) for p in path]
        path = str(path)
        if path.startswith(PROTOCOL + "://"):
            path = path[len(PROTOCOL) + 3 :]
        return path.rstrip("/") or "/"

    # -- reads ------------------------------------------------------------------------------------
    def cat_file(self, path: str, start: Optional[int] = None, end: Optional[int] = None, **kwargs: Any) -> bytes:
        path = self._strip_protocol(path)
        SCHEDULE.check("read", path)
        return self.local.cat_file(path, start=start, end=end)

    def get_file(self, rpath: str, lpath: str, **kwargs: Any) -> None:
        rpath = self._strip_protocol(rpath)
        SCHEDULE.check("read", rpath)
        self.local.get_file(rpath, lpath)

    def _open(self, path: str, mode: str = "rb", **kwargs: Any) -> Any:
        path = self._strip_protocol(path)
        SCHEDULE.check("read" if "r" in mode else "write", path)
        return self.local._open(path, mode=mode, **kwargs)

    # -- writes -----------------------------------------------------------------------------------
    def pipe_file(self, path: str, value: bytes, **kwargs: Any) -> None:
        path = self._strip_protocol(path)
        SCHEDULE.check("write", path)
        self.local.pipe_file(path, value)

    def put_file(self, lpath: str, rpath: str, **kwargs: Any) -> None:
        rpath = self._strip_protocol(rpath)
        SCHEDULE.check("write", rpath)
        self.local.put_file(lpath, rpath)

    def mv(self, path1: str, path2: str, **kwargs: Any) -> None:
        path1, path2 = self._strip_protocol(path1), self._strip_protocol(path2)
        SCHEDULE.check("write", path2)
        self.local.mv(path1, path2)

    def makedirs(self, path: str, exist_ok: bool = False) -> None:
        path = self._strip_protocol(path)
        SCHEDULE.check("write", path)
        self.local.makedirs(path, exist_ok=exist_ok)

    def mkdir(self, path: str, create_parents: bool = True, **kwargs: Any) -> None:
        path = self._strip_protocol(path)
        SCHEDULE.check("write", path)
        self.local.mkdir(path, create_parents=create_parents)

    # -- listings ---------------------------------------------------------------------------------
    def ls(self, path: str, detail: bool = True, **kwargs: Any) -> list:
        path = self._strip_protocol(path)
        SCHEDULE.check("list", path)
        return self.local.ls(path, detail=detail)

    def info(self, path: str, **kwargs: Any) -> dict:
        path = self._strip_protocol(path)
        SCHEDULE.check("info", path)
        return self.local.info(path)

    # -- deletes ----------------------------------------------------------------------------------
    def rm_file(self, path: str) -> None:
        path = self._strip_protocol(path)
        SCHEDULE.check("delete", path)
        self.local.rm_file(path)

    def _rm(self, path: str) -> None:
        self.rm_file(path)

    def rm(self, path: Any, recursive: bool = False, maxdepth: Optional[int] = None) -> None:
        """A file, or a folder file by file (an object store's recursive delete: a fault may
        stop it half-way)."""
        for p in [path] if isinstance(path, str) else path:
            p = self._strip_protocol(p)
            if not self.local.isdir(p):
                self.rm_file(p)
                continue
            if not recursive:
                raise IsADirectoryError(errno.EISDIR, "is a directory", p)
            for name in sorted(self.local.find(p)):
                self.rm_file(name)
            SCHEDULE.check("delete", p)
            self.local.rm(p, recursive=True)


def register() -> None:
    """``faulty://`` URLs open a :class:`FaultyFileSystem` in this process."""
    fsspec.register_implementation(PROTOCOL, FaultyFileSystem, clobber=True)


def url(path: Any) -> str:
    """The ``faulty://`` URL of local path ``path``."""
    return f"{PROTOCOL}://{path}"


__all__ = ["FaultRule", "FaultSchedule", "FaultyFileSystem", "KINDS", "SCHEDULE", "register", "url"]
