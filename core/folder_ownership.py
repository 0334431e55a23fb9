"""Working folders owned by a live process, and the cleanup of those whose owner is gone (no
Flink counterpart: Flink's TaskManager deletes its ``tmp`` folders on shutdown and its
``FileChannelManagerImpl`` per process; a SIGKILLed Python process runs no cleanup at all).

The contract: an owner creates its folder with :meth:`OwnedFolder.create` and holds an
exclusive ``flock`` on the lock file inside it (:data:`LOCK_FILE_NAME`) for as long as it
lives; the kernel drops the lock when the process ends, however it ends. A cleaner
(:func:`remove_unowned_folders`) removes a folder only while *it* holds that lock, so a folder
whose owner still runs is never removed, whatever its process id says (a reused pid, a
process of another PID namespace or container, a folder on a shared disk).

A folder gets its final name only once its lock is held: it is made as ``.new-<name>``, its
lock file is created and locked under a private name and renamed into place, then the folder
is renamed, so a cleaner never sees a folder of a live owner without its lock, nor a lock file
it could take before its owner does.
Folders of another user, symbolic links and names outside the cleaner's prefix are left
alone; a folder with the prefix but no lock file (made by an older raylink) is removed.

Locks are ``fcntl.flock`` locks: per open file, released when the owner closes the file or
exits; a child forked without ``exec`` shares (and so prolongs) its parent's lock. Thread-safe:
each call works on its own descriptors.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import stat
import tempfile
from typing import Optional

#: the lock file an owner holds inside its folder
LOCK_FILE_NAME = ".owner.lock"
#: the prefix of a folder that is not yet locked and renamed
_NEW = ".new-"


class OwnedFolder:
    """A folder this process owns: its lock is held until :meth:`release` (or the process ends)."""

    def __init__(self, path: str, lock_fd: int) -> None:
        self.path = path
        self._fd: Optional[int] = lock_fd

    @classmethod
    def create(cls, parent: str, prefix: str, mode: int = 0o700) -> "OwnedFolder":
        """A new folder ``<parent>/<prefix><random>`` (mode ``mode``), owned by this process."""
        temp = tempfile.mkdtemp(prefix=_NEW + prefix, dir=parent)  # unique, mode 0700
        try:
            if mode != 0o700:
                os.chmod(temp, mode)
            # the lock file is locked under a private name, then renamed into place: a cleaner that
            # finds LOCK_FILE_NAME always finds it locked (a flock follows its file through a rename)
            unlocked = os.path.join(temp, _NEW + LOCK_FILE_NAME)
            fd = _lock(unlocked, create=True, wait=False)
            assert fd is not None  # a new file nobody else has opened
            os.rename(unlocked, os.path.join(temp, LOCK_FILE_NAME))
            path = os.path.join(parent, os.path.basename(temp)[len(_NEW) :])
            os.rename(temp, path)
        except BaseException:
            shutil.rmtree(temp, ignore_errors=True)
            raise
        return cls(path, fd)

    @property
    def held(self) -> bool:
        return self._fd is not None

    def release(self, remove: bool = False) -> None:
        """Give the folder up (``remove``: delete it first, while still holding its lock)."""
        if self._fd is None:
            return
        try:
            if remove:
                shutil.rmtree(self.path, ignore_errors=True)
        finally:
            os.close(self._fd)
            self._fd = None

    def __repr__(self) -> str:
        return f"OwnedFolder({self.path!r}, held={self.held})"


def _lock(path: str, create: bool, wait: bool) -> Optional[int]:
    """A descriptor of ``path`` holding its exclusive lock; None when another holds it."""
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | (os.O_CREAT if create else 0)
    fd = os.open(path, flags, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
    except BlockingIOError:
        os.close(fd)
        return None
    except BaseException:
        os.close(fd)
        raise
    return fd


def is_owned(path: str) -> bool:
    """True while a live process holds the lock of folder ``path`` (False: none does, or no lock file)."""
    try:
        fd = _lock(os.path.join(path, LOCK_FILE_NAME), create=False, wait=False)
    except FileNotFoundError:
        return False
    except OSError:  # not readable by us (another user's): treat as owned
        return True
    if fd is None:
        return True
    os.close(fd)
    return False


def remove_unowned_folders(parent: str, prefix: str, keep: int = 0) -> list[str]:
    """Remove the folders ``<parent>/<prefix>*`` of this user whose owner is gone (their lock can
    be taken), sparing the ``keep`` newest by name whoever owns them; returns the removed paths.
    A folder is removed while this process holds its lock; every error leaves a folder as it is."""
    try:
        names = sorted(n for n in os.listdir(parent) if n.startswith(prefix) or n.startswith(_NEW + prefix))
    except OSError:
        return []
    finished = [n for n in names if not n.startswith(_NEW)]
    spared = set(finished[len(finished) - keep :]) if keep > 0 else set()
    removed = []
    for name in names:
        if name in spared:
            continue
        path = os.path.join(parent, name)
        try:
            st = os.lstat(path)
        except OSError:
            continue
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
            continue
        try:
            fd = _lock(os.path.join(path, LOCK_FILE_NAME), create=False, wait=False)
        except FileNotFoundError:
            if name.startswith(_NEW):  # being made right now: its lock file comes next
                continue
            fd = -1  # an older raylink's folder: no owner can hold it
        except OSError:
            continue
        if fd is None:  # its owner lives
            continue
        try:
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
        finally:
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)
    return removed


__all__ = ["LOCK_FILE_NAME", "OwnedFolder", "is_owned", "remove_unowned_folders"]
