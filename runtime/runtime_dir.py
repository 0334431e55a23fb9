"""This user's private runtime directory and the files raylink keeps in it (no Flink counterpart:
Flink's processes find each other through its HA services, not through local files).

What lives here: the session clusters' endpoint files (``sessions/gcs-<port>.json``, the
Dispatcher's URL and token), the node's pinned-CPU registry (``pinned-cpus.json``) and the
log of a local Ray that ``raylink cluster start`` started (``logs/cluster-ray-<port>.log``).

**Where.** ``$XDG_RUNTIME_DIR/raylink`` when ``XDG_RUNTIME_DIR`` is set (a per-user folder the
login manager made); else ``~/.cache/raylink/<host name>`` when the home folder is a folder of
this user that only it may write (per machine, as a home may be shared over NFS: endpoint files
are named by a GCS port and the CPU registry by process ids of this machine); else -- no usable
home -- ``<temp dir>/raylink-<uid>`` (``tempfile.gettempdir()``). A folder in the shared temp
dir is the only one another user can create first (squat): it is used only without a usable
home, and callers that merely run a job on the local target (the driver's log folder, CPU
pinning) fall back to a private ``mkdtemp`` or to no pinning when the runtime folder is refused,
so a squatted folder never stops a local job. Processes that see a different
``XDG_RUNTIME_DIR`` (or home, or temp dir) use different folders.

**The contract.** Another local user must not be able to plant or swap what raylink reads
here, nor redirect what it writes:

* every folder (:func:`runtime_dir`) is created with mode 0700 and, before each use, must be
  a real folder (not a symbolic link) owned by :func:`os.getuid` and writable by nobody else;
  otherwise :class:`UnsafePathError` names the folder and what is wrong. A folder of this
  user that others may only read (an older raylink made ``raylink-<uid>`` 0755) is
  narrowed to 0700;
* files are opened with ``O_NOFOLLOW`` (:func:`open_private_file`): a symbolic link in
  their place, a file of another owner or one others may write is refused the same way;
* files are written atomically (:func:`write_private_file`): a new file of a random name in
  the same checked folder, then renamed over the old one (a rename replaces a link, never
  writes through it).

Stateless apart from the file system; safe across threads and processes (``mkdir`` and
``rename`` are atomic; two writers of one file leave one whole version).
"""

from __future__ import annotations

import contextlib
import os
import socket
import stat
import tempfile
from typing import Optional

from raylink.errors import RaylinkError

#: the environment variable naming the per-user runtime folder (freedesktop.org's)
RUNTIME_DIR_ENV_VAR = "XDG_RUNTIME_DIR"
#: bits of a folder's or file's mode that let others change it
#: the runtime folder's place under a usable home folder (then the host name)
HOME_SUBDIR = (".cache", "raylink")
_WRITABLE_BY_OTHERS = stat.S_IWGRP | stat.S_IWOTH
_NOT_OWNER = stat.S_IRWXG | stat.S_IRWXO


class UnsafePathError(RaylinkError, RuntimeError):
    """A runtime folder or file another local user could control; names the path and what is
    wrong with it. Not an ``OSError``: code that treats a missing file as "none there" must
    not treat this one so."""

    def __init__(self, path: str, problem: str) -> None:
        super().__init__(
            f"refusing to use {path}: {problem}; raylink keeps its session endpoints and state there and "
            f"another user could plant or swap them. Remove it (or set ${RUNTIME_DIR_ENV_VAR} to a folder "
            f"only you can write) and try again"
        )
        self.path = path
        self.problem = problem

    def __reduce__(self):
        return (UnsafePathError, (self.path, self.problem))


def _private_home() -> Optional[str]:
    """This user's home folder when it is a folder (not a link) owned by this user, writable by
    it and by nobody else; else None."""
    home = os.path.expanduser("~")
    if not home or home == "~" or not os.path.isabs(home):
        return None
    try:
        st = os.lstat(home)
    except OSError:
        return None
    if not stat.S_ISDIR(st.st_mode) or _owner_problem(st) or not os.access(home, os.W_OK):
        return None
    return home


def base_dir() -> str:
    """This user's raylink runtime folder (its path; :func:`runtime_dir` creates and checks it):
    ``$XDG_RUNTIME_DIR/raylink``, else ``~/.cache/raylink/<host name>``, else
    ``<temp dir>/raylink-<uid>`` (see the module doc)."""
    xdg = os.environ.get(RUNTIME_DIR_ENV_VAR)
    if xdg:
        return os.path.join(xdg, "raylink")
    home = _private_home()
    if home is not None:
        return os.path.join(home, *HOME_SUBDIR, socket.gethostname() or "localhost")
    return os.path.join(tempfile.gettempdir(), f"raylink-{os.getuid()}")


def runtime_dir(*parts: str) -> str:
    """The folder ``parts`` under :func:`base_dir`, each level created with mode 0700 if missing
    and checked (:func:`check_private_dir`); raises :class:`UnsafePathError`."""
    path = base_dir()
    home = None if os.environ.get(RUNTIME_DIR_ENV_VAR) else _private_home()
    if home is not None and path.startswith(home + os.sep):
        folder = home
        for part in HOME_SUBDIR:  # ~/.cache may be there already (0755 is fine: only we write it)
            folder = os.path.join(folder, part)
            _ensure_dir(folder, narrow=part != HOME_SUBDIR[0])
    _check_parent(os.path.dirname(path))
    _ensure_dir(path)
    for part in parts:
        path = os.path.join(path, part)
        _ensure_dir(path)
    return path


def _ensure_dir(path: str, narrow: bool = True) -> None:
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    else:
        os.chmod(path, 0o700)  # whatever the umask took away
    check_private_dir(path, narrow)


def _check_parent(parent: str) -> None:
    """The folder holding :func:`base_dir` must not let others rename what is in it: writable by
    others only with the sticky bit (as ``/tmp``)."""
    st = os.stat(parent)
    if st.st_mode & stat.S_IWOTH and not st.st_mode & stat.S_ISVTX:
        raise UnsafePathError(parent, "others may write it and it has no sticky bit (others could swap its folders)")


def _owner_problem(st: os.stat_result) -> str:
    uid = os.getuid()
    if st.st_uid != uid:
        return f"it is owned by uid {st.st_uid}, not by you (uid {uid})"
    if st.st_mode & _WRITABLE_BY_OTHERS:
        return f"it is writable by its group or by others (mode {oct(stat.S_IMODE(st.st_mode))})"
    return ""


def check_private_dir(path: str, narrow: bool = True) -> None:
    """Raise :class:`UnsafePathError` unless ``path`` is a folder (not a link) owned by this user
    and writable by nobody else; narrow one others may read to 0700 (unless not ``narrow``)."""
    st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode):
        raise UnsafePathError(path, "it is a symbolic link, not a folder")
    if not stat.S_ISDIR(st.st_mode):
        raise UnsafePathError(path, "it is not a folder")
    problem = _owner_problem(st)
    if problem:
        raise UnsafePathError(path, problem)
    if narrow and st.st_mode & _NOT_OWNER:
        os.chmod(path, 0o700)


def open_private_file(path: str, flags: int) -> int:
    """``os.open(path, flags)`` with ``O_NOFOLLOW`` (a new file gets mode 0600); the descriptor
    of a regular file of this user that nobody else may write, else :class:`UnsafePathError`.
    A missing file raises ``FileNotFoundError`` as ``os.open`` does."""
    try:
        # O_NONBLOCK: a FIFO in the file's place must not hang the open (no effect on a regular file)
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o600)
    except OSError:
        if os.path.islink(path):  # ELOOP on Linux, EMLINK / EFTYPE elsewhere
            raise UnsafePathError(path, "it is a symbolic link") from None
        raise
    try:
        st = os.fstat(fd)
        problem = "it is not a regular file" if not stat.S_ISREG(st.st_mode) else _owner_problem(st)
        if problem:
            raise UnsafePathError(path, problem)
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_private_file(path: str) -> bytes:
    """The contents of ``path``, opened by :func:`open_private_file`."""
    with os.fdopen(open_private_file(path, os.O_RDONLY), "rb") as fh:
        return fh.read()


def write_private_file(path: str, data: bytes) -> None:
    """Replace ``path`` by a file of mode 0600 holding ``data``, atomically: written under a
    random name in ``path``'s folder (check it first, e.g. it is a :func:`runtime_dir`), then
    renamed over ``path``."""
    folder, name = os.path.split(path)
    fd, temp = tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp", dir=folder)  # O_EXCL, mode 0600
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(temp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.remove(temp)
        raise


def remove_private_file(path: str) -> None:
    """Remove ``path`` if it is there (a link is removed, never what it points to)."""
    with contextlib.suppress(FileNotFoundError):
        os.remove(path)


__all__ = [
    "HOME_SUBDIR",
    "RUNTIME_DIR_ENV_VAR",
    "UnsafePathError",
    "base_dir",
    "check_private_dir",
    "open_private_file",
    "read_private_file",
    "remove_private_file",
    "runtime_dir",
    "write_private_file",
]
