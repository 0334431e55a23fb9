"""The Python dependencies of a job: what ``env.add_python_file`` / ``add_python_archive`` /
``set_python_requirements`` / ``set_python_executable`` record, and how they reach the
TaskExecutors — Flink's ``PythonDependencyInfo`` and ``PythonDependencyUtils``.

They are kept under Flink's configuration keys (so ``-D``/``RAYLINK_CONF`` can set them
too): ``python.files`` (comma separated), ``python.archives`` (``path#target_dir``,
comma separated), ``python.requirements`` (``requirements.txt#cache_dir``) and
``python.executable``. Flink's rules for ``python.files`` hold: a ``.py`` file is
importable by its module name (its folder goes on the path), a directory's modules and
packages are importable (the directory goes on the path), a ``.zip`` is extracted and its
root goes on the path, a ``.whl`` is installed.

* On Ray, :func:`ray_runtime_env` turns them into the TaskExecutor actors' runtime
  environment: ``py_modules`` (each ``.py`` file, each module/package of a directory or
  extracted zip, each wheel), ``working_dir`` (the archives, each extracted into a folder
  named after its target dir or file name — Flink's layout, so relative paths resolve),
  ``pip`` (the requirements; with a cache dir, installed offline from it) and
  ``py_executable``. Ray ships them to every node.
* On the local target the functions run in this interpreter: :func:`apply_locally` puts
  the files on ``sys.path``; archives, requirements and another executable cannot apply
  to a running interpreter, so they get a warning saying what to do instead.

Stateless apart from a per-process cache of extracted zips (guarded by a lock). Nothing
here imports Ray: it only builds the runtime-environment dict.
"""

from __future__ import annotations

import hashlib
import logging
import os
import sys
import tempfile
import threading
import zipfile
from dataclasses import dataclass, field
from typing import Any, List, Optional, Tuple

from raylink.core.options import PythonOptions

log = logging.getLogger(__name__)

PYTHON_FILES = PythonOptions.PYTHON_FILES.key
PYTHON_ARCHIVES = PythonOptions.PYTHON_ARCHIVES.key
PYTHON_REQUIREMENTS = PythonOptions.PYTHON_REQUIREMENTS.key
PYTHON_EXECUTABLE = PythonOptions.PYTHON_EXECUTABLE.key
FILE_DELIMITER = ","
PARAM_DELIMITER = "#"

_SKIP = ("__pycache__",)
_lock = threading.Lock()
_applied_locally: set = set()


@dataclass
class PythonDependencyInfo:
    """The Python dependencies a job's configuration names (Flink's ``PythonDependencyInfo``)."""

    files: List[str] = field(default_factory=list)
    archives: List[Tuple[str, str]] = field(default_factory=list)  # (archive, target dir)
    requirements: Optional[Tuple[str, Optional[str]]] = None  # (requirements.txt, cache dir)
    executable: Optional[str] = None

    @staticmethod
    def from_configuration(conf: Any) -> "PythonDependencyInfo":
        info = PythonDependencyInfo()
        files = conf.get_string(PYTHON_FILES, None)
        if files:
            info.files = [f for f in files.split(FILE_DELIMITER) if f]
        archives = conf.get_string(PYTHON_ARCHIVES, None)
        if archives:
            for entry in archives.split(FILE_DELIMITER):
                if entry:
                    path, _, target = entry.partition(PARAM_DELIMITER)
                    info.archives.append((path, target or os.path.basename(path)))
        requirements = conf.get_string(PYTHON_REQUIREMENTS, None)
        if requirements:
            path, _, cache = requirements.partition(PARAM_DELIMITER)
            info.requirements = (path, cache or None)
        info.executable = conf.get_string(PYTHON_EXECUTABLE, None) or None
        return info

    def is_empty(self) -> bool:
        return not (self.files or self.archives or self.requirements or self.executable)


# -- recording them (the environment's methods) -------------------------------------------------------
def _existing(path: str, what: str) -> str:
    if not isinstance(path, str) or not path:
        raise TypeError(f"{what}: the path must be a non-empty string, got {path!r}")
    absolute = os.path.abspath(os.path.expanduser(path))
    if not os.path.exists(absolute):
        raise FileNotFoundError(f"{what}: no such file or directory: {path}")
    return absolute


def _append(conf: Any, key: str, entry: str) -> None:
    old = conf.get_string(key, None)
    entries = [e for e in old.split(FILE_DELIMITER) if e] if old else []
    if entry not in entries:
        entries.append(entry)
    conf.set_string(key, FILE_DELIMITER.join(entries))


def add_python_file(conf: Any, file_path: str) -> None:
    """Record a ``.py`` file, a directory, a ``.zip`` or a ``.whl`` for ``python.files``."""
    path = _existing(file_path, "add_python_file")
    if os.path.isfile(path) and not path.endswith((".py", ".zip", ".whl")):
        raise ValueError(f"add_python_file: {file_path} must be a .py file, a directory, a .zip or a .whl")
    if path.endswith(".zip") and not zipfile.is_zipfile(path):
        raise ValueError(f"add_python_file: {file_path} is not a zip file")
    _append(conf, PYTHON_FILES, path)


def add_python_archive(conf: Any, archive_path: str, target_dir: Optional[str] = None) -> None:
    """Record a zip archive to extract into the workers' working directory, in a folder
    named ``target_dir`` (default: the archive's file name), as Flink's ``python.archives``."""
    path = _existing(archive_path, "add_python_archive")
    if not zipfile.is_zipfile(path):
        raise ValueError(
            f"add_python_archive: {archive_path} is not a zip file (Flink takes zip-format "
            "archives only: zip, jar, whl, egg)"
        )
    if target_dir is not None and (not target_dir or os.path.isabs(target_dir) or ".." in target_dir.split("/")):
        raise ValueError(f"add_python_archive: target_dir {target_dir!r} must be a relative folder name")
    _append(conf, PYTHON_ARCHIVES, path + (PARAM_DELIMITER + target_dir if target_dir else ""))


def set_python_requirements(
    conf: Any, requirements_file_path: str, requirements_cache_dir: Optional[str] = None
) -> None:
    """Record a requirements file (and a folder of package files to install from offline)."""
    path = _existing(requirements_file_path, "set_python_requirements")
    value = path
    if requirements_cache_dir is not None:
        cache = _existing(requirements_cache_dir, "set_python_requirements")
        if not os.path.isdir(cache):
            raise ValueError(f"set_python_requirements: the cache dir {requirements_cache_dir} is not a directory")
        value += PARAM_DELIMITER + cache
    conf.set_string(PYTHON_REQUIREMENTS, value)


# -- shipping them ------------------------------------------------------------------------------------
def _extracted(zip_path: str) -> str:
    """A folder holding the zip's content, extracted once per process and zip version."""
    st = os.stat(zip_path)
    digest = hashlib.sha1(f"{zip_path}:{st.st_size}:{st.st_mtime_ns}".encode()).hexdigest()[:16]
    target = os.path.join(
        tempfile.gettempdir(), "raylink-python-deps", digest, os.path.splitext(os.path.basename(zip_path))[0]
    )
    with _lock:
        if not os.path.isdir(target):
            partial = target + ".partial"
            with zipfile.ZipFile(zip_path) as z:
                z.extractall(partial)
            os.replace(partial, target)
    return target


def _modules_of(folder: str) -> List[str]:
    """The modules and packages directly in ``folder`` (what putting it on the path exposes)."""
    found = []
    for name in sorted(os.listdir(folder)):
        path = os.path.join(folder, name)
        if name.startswith(".") or name in _SKIP:
            continue
        if os.path.isdir(path) or name.endswith(".py"):
            found.append(path)
    return found


def _path_entries(path: str) -> List[str]:
    """Flink's ``python.files`` rule: the ``sys.path`` entries a dependency adds."""
    if os.path.isdir(path):
        return [path]
    if path.endswith(".py"):
        return [os.path.dirname(path)]
    if path.endswith(".zip"):
        return [_extracted(path)]
    return [path]  # a wheel of pure Python modules is importable from the path


def _archives_folder(archives: List[Tuple[str, str]]) -> str:
    """One folder with every archive extracted into its target dir (Ray's ``working_dir``)."""
    key = "|".join(f"{p}:{os.path.getmtime(p)}#{t}" for p, t in archives)
    root = os.path.join(tempfile.gettempdir(), "raylink-python-archives", hashlib.sha1(key.encode()).hexdigest()[:16])
    with _lock:
        if not os.path.isdir(root):
            partial = root + ".partial"
            for path, target in archives:
                with zipfile.ZipFile(path) as z:
                    z.extractall(os.path.join(partial, target))
            os.replace(partial, root)
    return root


def ray_runtime_env(conf: Any) -> dict:
    """The runtime-environment fields that ship the job's Python dependencies ({} if none)."""
    info = PythonDependencyInfo.from_configuration(conf)
    env: dict = {}
    modules: List[str] = []
    for path in info.files:
        if not os.path.exists(path):
            raise FileNotFoundError(f"{PYTHON_FILES}: no such file or directory: {path}")
        if os.path.isdir(path):
            modules.extend(_modules_of(path))
        elif path.endswith(".zip"):
            modules.extend(_modules_of(_extracted(path)))
        else:
            modules.append(path)  # a .py file or a .whl
    if modules:
        env["py_modules"] = modules
    if info.archives:
        env["working_dir"] = _archives_folder(info.archives)
    if info.requirements is not None:
        requirements, cache = info.requirements
        with open(requirements) as f:
            packages = [line.strip() for line in f if line.strip() and not line.lstrip().startswith("#")]
        pip: dict = {"packages": packages}
        if cache:
            pip["pip_install_options"] = ["--no-index", "--find-links", cache]
        env["pip"] = pip
    if info.executable:
        env["py_executable"] = info.executable
    return env


def apply_locally(conf: Any) -> None:
    """Make the job's Python files importable in this interpreter (the local target);
    warn about what cannot apply to a running interpreter."""
    info = PythonDependencyInfo.from_configuration(conf)
    if info.is_empty():
        return
    for path in info.files:
        for entry in _path_entries(path):
            if entry not in sys.path:
                sys.path.insert(0, entry)
    for what, present, advice in (
        (
            "add_python_archive",
            info.archives,
            "the local target runs functions in this process and its working directory; extract the "
            "archives there yourself, or run on Ray (execution.target: ray)",
        ),
        (
            "set_python_requirements",
            info.requirements,
            "the local target runs functions in this interpreter; install the requirements into it "
            "(pip install -r FILE)",
        ),
        ("set_python_executable", info.executable, "the local target runs functions in this interpreter"),
    ):
        key = (what, repr(present))
        if present and key not in _applied_locally:
            _applied_locally.add(key)
            log.warning("%s is not applied on the local target: %s", what, advice)


__all__ = [
    "PYTHON_ARCHIVES",
    "PYTHON_EXECUTABLE",
    "PYTHON_FILES",
    "PYTHON_REQUIREMENTS",
    "PythonDependencyInfo",
    "add_python_archive",
    "add_python_file",
    "apply_locally",
    "ray_runtime_env",
    "set_python_requirements",
]
