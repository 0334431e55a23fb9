"""Where a savepoint may be written on request, how its files are protected, and which savepoints
may be restored (no Flink counterpart: Flink's REST API writes a savepoint wherever
``target-directory`` says, and its restore trusts the folder it is given).

A savepoint is restored by unpickling its state files, so whoever can write or swap those files
runs code in the job. Hence:

* **Targets** (:func:`check_savepoint_target`). A target folder named by a remote caller -- the
  REST API's ``POST /jobs/:jobid/savepoints`` and ``/stop``, the session Dispatcher (the CLI's
  ``raylink savepoint`` / ``stop``, a ``RestJobClient``) -- must use an fsspec scheme in
  ``rest.savepoint.allowed-schemes`` (default ``file``; the schemes of the configured roots are
  allowed too) and lie under a configured root: ``state.savepoints.dir``,
  ``execution.checkpointing.dir`` or a folder of ``rest.savepoint.allowed-roots``. Anything
  else raises :class:`SavepointTargetError` (a ``ValueError``, 400 over HTTP) naming the options,
  before anything is written. Local paths are compared after resolving ``..`` and symbolic
  links. A local target is refused as well when the folder it names, or any existing folder
  above it (its root included), is owned by another uid than this user's or root's, or is
  writable by its group or others without the sticky bit (:func:`folder_chain_problems`, the
  very rule a restore applies, so a savepoint written on request can be restored): another user
  could otherwise rename, delete or swap the savepoint. A sticky folder this user or root owns,
  as ``/tmp``, is fine. A program's own in-process ``JobClient`` is not checked: it runs the
  user's code, which can write any file anyway.
* **Files** (:func:`make_private_dirs`, :func:`restrict_to_owner`). On the local file system a
  savepoint's folder (and every folder created on the way to it) is created with mode 0700 and
  its files end with mode 0600; the checkpoint storage creates its job, ``chk-<n>`` and
  ``shared`` folders (and a missing ``execution.checkpointing.dir``) with mode 0700 too. Once
  created, the folder and those above it are checked by the same rule as targets (a folder
  another user slipped in after the target was checked is refused, nothing written in it).
* **Restores** (:func:`check_restorable`). A local savepoint or retained checkpoint is restored
  only when its folder, every file and folder under it, every state file it names and every
  folder above them is owned by this user (or root) and writable by nobody else (a folder
  others may write is accepted only with the sticky bit, as ``/tmp``); otherwise
  :class:`UnsafeSavepointError` names each offending path. Other file systems are trusted to
  their own access control.

Stateless functions; safe from any thread.
"""

from __future__ import annotations

import dataclasses
import os
import posixpath
import stat
from typing import Any, Iterable, Optional

from raylink.core.options import CheckpointingOptions, RestOptions, SavepointConfigOptions
from raylink.errors import RaylinkError

_LOCAL_SCHEMES = frozenset({"file", "local"})
_ROOT_OPTIONS = (
    f"{SavepointConfigOptions.SAVEPOINT_DIRECTORY.key} (state.savepoints.dir), "
    f"{CheckpointingOptions.CHECKPOINTS_DIRECTORY.key} or {RestOptions.SAVEPOINT_ALLOWED_ROOTS.key}"
)


class SavepointTargetError(RaylinkError, ValueError):
    """A savepoint target outside the configured roots or of a scheme not allowed; nothing was written."""


class UnsafeSavepointError(RaylinkError, ValueError):
    """A savepoint (or retained checkpoint) another user could have changed; ``paths`` names them."""

    def __init__(self, location: str, problems: list[str]) -> None:
        shown = "; ".join(problems[:10]) + (f"; and {len(problems) - 10} more" if len(problems) > 10 else "")
        super().__init__(
            f"refusing to restore from {location}: restoring unpickles its files, and another user could have "
            f"changed them: {shown}. Copy the savepoint to a folder only you can write (chmod go-w) and restore "
            f"from there"
        )
        self.location = location
        self.problems = problems

    def __reduce__(self):
        return (UnsafeSavepointError, (self.location, self.problems))


# -- targets ----------------------------------------------------------------------------------------------
def _scheme(url: str) -> str:
    head, sep, _ = url.partition("://")
    return head.lower() if sep else "file"


def _local_path(url: str) -> str:
    """The resolved absolute path of a local ``url`` (``file://`` or a plain path)."""
    path = url[len("file://") :] if url.lower().startswith("file://") else url
    path = path[len("local://") :] if path.lower().startswith("local://") else path
    return os.path.realpath(os.path.abspath(os.path.expanduser(path)))


def _split(value: Optional[str]) -> list[str]:
    return [part.strip() for part in (value or "").split(",") if part.strip()]


def allowed_roots(configuration: Any) -> list[str]:
    """The configured folders savepoint targets may lie under (paths or URLs, as configured)."""
    roots = [
        configuration.get(SavepointConfigOptions.SAVEPOINT_DIRECTORY),
        configuration.get(CheckpointingOptions.CHECKPOINTS_DIRECTORY),
        *_split(configuration.get(RestOptions.SAVEPOINT_ALLOWED_ROOTS)),
    ]
    return [str(root) for root in roots if root]


def allowed_schemes(configuration: Any) -> set[str]:
    """``rest.savepoint.allowed-schemes`` and the schemes of the configured roots."""
    schemes = {s.lower() for s in _split(configuration.get(RestOptions.SAVEPOINT_ALLOWED_SCHEMES))}
    schemes |= {_scheme(root) for root in allowed_roots(configuration)}
    if schemes & _LOCAL_SCHEMES:
        schemes |= _LOCAL_SCHEMES
    return schemes


def _under(target: str, root: str) -> bool:
    if _scheme(root) in _LOCAL_SCHEMES:
        if _scheme(target) not in _LOCAL_SCHEMES:
            return False
        resolved, base = _local_path(target), _local_path(root)
        return resolved == base or resolved.startswith(base.rstrip(os.sep) + os.sep)
    if _scheme(root) != _scheme(target):
        return False
    base = root.rstrip("/")
    return target == base or target.startswith(base + "/")


def check_savepoint_target(target: Optional[str], configuration: Any, what: str = "savepoint") -> Optional[str]:
    """``target`` (None: the configured default, returned as None) when a remote caller may have
    a savepoint written there (see the module doc), else :class:`SavepointTargetError` naming
    the options. A local target is returned as a resolved absolute path."""
    if target is None:
        return None
    text = str(target).strip()
    if not text:
        raise SavepointTargetError(f"{what}: the savepoint target directory is empty")
    if "::" in text:
        raise SavepointTargetError(
            f"{what}: savepoint target {text!r} is a chained fsspec URL, which is not allowed as a target"
        )
    scheme = _scheme(text)
    schemes = allowed_schemes(configuration)
    if scheme not in schemes:
        raise SavepointTargetError(
            f"{what}: savepoint target {text!r} uses the scheme {scheme!r}, which is not allowed "
            f"({RestOptions.SAVEPOINT_ALLOWED_SCHEMES.key} and the configured roots allow: "
            f"{', '.join(sorted(schemes))}); nothing was written"
        )
    if scheme not in _LOCAL_SCHEMES and any(part == ".." for part in text.split("://", 1)[1].split("/")):
        raise SavepointTargetError(f"{what}: savepoint target {text!r} holds a '..' segment")
    roots = allowed_roots(configuration)
    matching = [root for root in roots if _under(text, root)]
    if not matching:
        where = f"the allowed roots are {', '.join(roots)}" if roots else "no root is configured"
        raise SavepointTargetError(
            f"{what}: savepoint target {text!r} is not under a configured savepoint root ({where}); set "
            f"{_ROOT_OPTIONS} to allow it; nothing was written"
        )
    if scheme not in _LOCAL_SCHEMES:
        return text
    resolved = _local_path(text)
    problems = folder_chain_problems(resolved)
    if problems:
        raise SavepointTargetError(
            f"{what}: savepoint target {text!r} is refused: {'; '.join(problems)}, so another user could rename, "
            f"delete or swap the savepoint; its root {matching[0]} is set by {_root_option(matching[0], configuration)}; "
            f"use a root only you (or root) own and can write (chmod go-w); nothing was written"
        )
    return resolved


def _root_option(root: str, configuration: Any) -> str:
    """The name of the option that configured ``root``."""
    if str(configuration.get(SavepointConfigOptions.SAVEPOINT_DIRECTORY) or "") == root:
        return f"{SavepointConfigOptions.SAVEPOINT_DIRECTORY.key} (state.savepoints.dir)"
    if str(configuration.get(CheckpointingOptions.CHECKPOINTS_DIRECTORY) or "") == root:
        return CheckpointingOptions.CHECKPOINTS_DIRECTORY.key
    return RestOptions.SAVEPOINT_ALLOWED_ROOTS.key


def folder_chain_problems(folder: str) -> list[str]:
    """Why another user could rename, replace or add to the local ``folder`` (an absolute, resolved
    path) or a folder above it: each existing one among them owned by another uid than this
    user's or root's, or writable by its group or others without the sticky bit (a sticky folder
    as ``/tmp`` is fine when this user or root owns it). Missing folders are skipped (whoever
    creates them makes them 0700). The one rule both a savepoint's target and its restore apply."""
    problems = []
    for path in (folder, *_ancestors(folder)):
        try:
            st = os.stat(path)
        except OSError:
            continue
        problem = _problem(path, st, is_ancestor=True)
        if problem:
            problems.append(problem)
    return problems


# -- files ------------------------------------------------------------------------------------------------
def _is_local(fs: Any) -> bool:
    protocols = (fs.protocol,) if isinstance(fs.protocol, str) else tuple(fs.protocol)
    return bool(_LOCAL_SCHEMES & set(protocols))


def make_private_dirs(fs: Any, folder: str) -> None:
    """``fs.makedirs(folder, exist_ok=True)``; on the local file system every folder it creates
    has mode 0700 (folders already there keep their mode), and :class:`SavepointTargetError`
    names any folder of the chain another user owns or may write (:func:`folder_chain_problems`,
    checked again after creating, so a folder another user slipped in meanwhile is refused)."""
    if not _is_local(fs):
        fs.makedirs(folder, exist_ok=True)
        return
    missing = []
    path = os.path.abspath(folder)
    while not os.path.isdir(path):
        missing.append(os.path.basename(path))
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    path = os.path.realpath(path)
    _refuse_unsafe(folder, folder_chain_problems(path))  # before anything is created in it
    for name in reversed(missing):
        path = os.path.join(path, name)
        try:
            os.mkdir(path, 0o700)
            os.chmod(path, 0o700)  # whatever the umask took away
        except FileExistsError:
            if os.path.islink(path):  # slipped in meanwhile: it may point anywhere
                _refuse_unsafe(folder, [f"{path} is a symbolic link owned by uid {os.lstat(path).st_uid}"])
        _refuse_unsafe(folder, folder_chain_problems(path))


def _refuse_unsafe(folder: str, problems: list[str]) -> None:
    if problems:
        raise SavepointTargetError(
            f"refusing to write into {folder}: {'; '.join(problems)}, so another user could rename, delete or "
            f"swap what is written there; use a folder only you (or root) own and can write (chmod go-w)"
        )


def restrict_to_owner(fs: Any, folder: str) -> None:
    """On the local file system: ``folder`` and the folders under it 0700, its files 0600."""
    if not _is_local(fs):
        return
    os.chmod(folder, 0o700)
    for parent, dirs, files in os.walk(folder):
        for name in dirs:
            os.chmod(os.path.join(parent, name), 0o700, follow_symlinks=False)
        for name in files:
            path = os.path.join(parent, name)
            if not os.path.islink(path):
                os.chmod(path, 0o600)


# -- restores ---------------------------------------------------------------------------------------------
def _problem(path: str, st: os.stat_result, is_ancestor: bool = False) -> Optional[str]:
    uid = os.getuid()
    if st.st_uid not in (uid, 0):
        return f"{path} is owned by uid {st.st_uid}"
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        if is_ancestor and stat.S_ISDIR(st.st_mode) and st.st_mode & stat.S_ISVTX and st.st_uid in (uid, 0):
            return None  # a sticky folder as /tmp: others cannot rename what is ours in it
        return f"{path} is writable by its group or others (mode {oct(stat.S_IMODE(st.st_mode))})"
    return None


def _ancestors(path: str) -> Iterable[str]:
    parent = os.path.dirname(path)
    while parent and parent != path:
        yield parent
        path, parent = parent, os.path.dirname(parent)


def state_file_paths(completed: Any) -> list[str]:
    """Every local file a restored checkpoint's handles name (paths and ``file://`` URLs found in
    its handles' fields, nested ones included, that are files)."""
    found: list[str] = []
    seen: set[int] = set()

    def walk(value: Any) -> None:
        if isinstance(value, str):
            if (value.startswith("/") or value.lower().startswith("file://")) and os.path.isfile(_local_path(value)):
                found.append(value)
            return
        if isinstance(value, (bytes, bytearray, int, float, bool)) or value is None or id(value) in seen:
            return
        seen.add(id(value))
        if isinstance(value, dict):
            for item in value.values():
                walk(item)
        elif isinstance(value, (list, tuple, set, frozenset)):
            for item in value:
                walk(item)
        elif dataclasses.is_dataclass(value):
            for field in dataclasses.fields(value):
                walk(getattr(value, field.name))

    walk(getattr(completed, "operator_states", {}))
    return found


def check_restorable(location: str, state_files: Iterable[str] = ()) -> None:
    """Raise :class:`UnsafeSavepointError` unless the local savepoint ``location`` (a folder or its
    ``_metadata``) and the local ``state_files`` it names are safe to unpickle (see the module doc)."""
    text = str(location).rstrip("/")
    if _scheme(text) not in _LOCAL_SCHEMES:
        return
    folder = _local_path(text)
    if posixpath.basename(folder) == "_metadata":
        folder = os.path.dirname(folder)
    problems: list[str] = []
    checked: set[str] = set()

    def check(path: str, is_ancestor: bool = False) -> None:
        if path in checked:
            return
        checked.add(path)
        try:
            st = os.stat(path)
        except OSError:
            return  # missing: the restore itself names it
        problem = _problem(path, st, is_ancestor)
        if problem:
            problems.append(problem)

    if not os.path.isdir(folder):
        return  # not a folder: the restore itself says what is wrong
    check(folder)
    checked.update(_ancestors(folder))
    problems.extend(folder_chain_problems(os.path.dirname(folder)))  # as targets are checked
    for parent, dirs, files in os.walk(folder):
        for name in dirs + files:
            check(os.path.join(parent, name))
    for named in state_files:
        if _scheme(named) not in _LOCAL_SCHEMES:
            continue
        path = _local_path(named)
        check(path)
        for parent in _ancestors(path):
            check(parent, is_ancestor=True)
    if problems:
        raise UnsafeSavepointError(folder, problems)


__all__ = [
    "SavepointTargetError",
    "UnsafeSavepointError",
    "allowed_roots",
    "allowed_schemes",
    "check_restorable",
    "check_savepoint_target",
    "folder_chain_problems",
    "make_private_dirs",
    "restrict_to_owner",
    "state_file_paths",
]
