"""What a raylink driver prints and where everything else goes: raylink's own lines on stderr,
Ray's, Spark's and other libraries' log lines in a log file of the run (no Flink counterpart as
a class: Flink's client logs through log4j to ``log/flink-*-client-*.log`` and prints only what
the CLI reports).

The contract:

* **raylink's lines.** Records of the ``raylink`` loggers at ``RAYLINK_LOG_LEVEL`` (default
  ``INFO``) and above are written to stderr as ``raylink: <message>`` (``raylink: WARNING:
  <message>`` from WARNING on), without timestamps. At INFO only the lines meant for the user
  reach the terminal: those of the loggers in :data:`TERMINAL_INFO_LOGGERS` (the ``raylink``
  logger itself, the web dashboard's URLs); a module's own INFO records (which compiled path a
  process runs, a savepoint written) go to the log file, its WARNINGs to the terminal too.
  stdout stays for the program's own output (``print()`` sinks write their ``N> record`` lines
  there, as PyFlink's). A program that configured logging itself (the root logger has a
  handler) keeps its configuration: raylink adds no terminal handler then.
* **The log file.** Every record of the ``raylink`` logger (DEBUG and up; under the program's
  own logging configuration, from the level that configuration sets) and of the libraries in
  :data:`QUIET_LOGGERS` (Ray, RayDP, py4j, PySpark, ...) goes to
  ``<runtime dir>/logs/run-<time>-<pid>/driver.log`` (:func:`run_log_dir`; the folder also
  holds what the Spark driver JVM logs, see ``connectors/spark/jvm_logging``). Those libraries'
  records stay out of the terminal unless verbose. The 20 newest run folders are kept, and
  those of programs still running: a run folder is an
  :class:`~raylink.core.folder_ownership.OwnedFolder` whose lock its program holds while it
  runs, and only folders whose lock can be taken are removed. Where the runtime folder cannot
  be used (not writable, or another user's: ``UnsafePathError``), the log goes to a new
  private temp folder instead: a log folder never stops a job.
* **Verbose.** ``RAYLINK_LOG_LEVEL=DEBUG`` (``raylink --verbose`` sets it) prints everything as
  before: raylink's DEBUG lines, the libraries' own terminal output, Ray's worker output
  forwarded to the driver.

:func:`setup_logging` is idempotent and cheap (called before every job); it imports no Ray.
Thread-safety: guarded by one lock.
"""

from __future__ import annotations

import logging
import os
import sys
import tempfile
import threading
import time
from typing import Optional

from raylink.core.folder_ownership import OwnedFolder, remove_unowned_folders
from raylink.runtime.runtime_dir import UnsafePathError, runtime_dir

#: the environment variable holding raylink's terminal log level (a ``logging`` level name)
LOG_LEVEL_ENV_VAR = "RAYLINK_LOG_LEVEL"
#: loggers of libraries whose records go to the run's log file only (unless verbose)
#: (``ray._private`` too: ``ray.init(configure_logging=False)`` clears the ``ray`` logger's handlers
#: while it starts, and its own notices -- the start, token authentication -- come from there)
QUIET_LOGGERS = ("ray", "ray._private", "raydp", "py4j", "pyspark", "filelock", "urllib3", "asyncio")
#: raylink loggers whose INFO records are for the user's terminal (others' INFO: the log file)
TERMINAL_INFO_LOGGERS = ("raylink", "raylink.rest", "raylink.cli")
#: run folders kept under ``<runtime dir>/logs``
KEPT_RUNS = 20
RUN_PREFIX = "run-"

_lock = threading.Lock()
_state: dict = {"dir": None, "owned": None, "file_handler": None, "terminal_handler": None, "quieted": False}


def log_level() -> int:
    """raylink's terminal level: ``RAYLINK_LOG_LEVEL`` (a level name or number), default INFO.
    An unknown name is an error naming the variable and the accepted names."""
    value = os.environ.get(LOG_LEVEL_ENV_VAR, "").strip()
    if not value:
        return logging.INFO
    if value.isdigit():
        return int(value)
    level = logging.getLevelName(value.upper())
    if not isinstance(level, int):
        raise ValueError(
            f"{LOG_LEVEL_ENV_VAR}={value!r} is not a log level; use one of DEBUG, INFO, WARNING, ERROR, CRITICAL"
        )
    return level


def is_verbose() -> bool:
    """True at ``RAYLINK_LOG_LEVEL=DEBUG`` (or lower): third-party output reaches the terminal."""
    return log_level() <= logging.DEBUG


def run_log_dir() -> str:
    """This process's log folder, ``<runtime dir>/logs/run-<UTC time>-<pid>-<random>`` (created,
    mode 0700, on first use, and locked by this process for its life; older run folders beyond
    the newest :data:`KEPT_RUNS` are removed unless their program still holds theirs). Where the
    runtime folder cannot be written or is unsafe, a new private temp folder."""
    with _lock:
        if _state["dir"] is None:
            stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
            prefix = f"{RUN_PREFIX}{stamp}-{os.getpid()}-"
            try:
                parent = runtime_dir("logs")
                owned = OwnedFolder.create(parent, prefix)
            except (OSError, UnsafePathError):  # a read-only or foreign runtime folder: never fatal
                path = tempfile.mkdtemp(prefix=f"raylink-{prefix}")
            else:
                _state["owned"] = owned  # its lock is held for this process's life
                path = owned.path
                remove_unowned_folders(parent, RUN_PREFIX, keep=KEPT_RUNS)
            _state["dir"] = path
        return _state["dir"]


def driver_log_path() -> str:
    """The driver's log file in :func:`run_log_dir`."""
    return os.path.join(run_log_dir(), "driver.log")


def _for_the_terminal(record: logging.LogRecord) -> bool:
    return record.levelno >= logging.WARNING or record.name in TERMINAL_INFO_LOGGERS or is_verbose()


class _TerminalFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        message = record.getMessage()
        if record.exc_info and is_verbose():
            message += "\n" + self.formatException(record.exc_info)
        if record.levelno >= logging.WARNING:
            return f"raylink: {record.levelname}: {message}"
        return message if message.startswith("raylink: ") else f"raylink: {message}"


def _file_handler() -> logging.Handler:
    handler = _state["file_handler"]
    if handler is None:
        handler = logging.FileHandler(driver_log_path(), encoding="utf-8", delay=True)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        handler.setLevel(logging.DEBUG)
        _state["file_handler"] = handler
    return handler


def setup_logging() -> None:
    """raylink's terminal handler and the run's log file (see the module doc); idempotent."""
    level = log_level()
    verbose = level <= logging.DEBUG
    raylink_logger = logging.getLogger("raylink")
    with _lock:
        if _state["terminal_handler"] is None and not logging.getLogger().handlers:
            terminal = logging.StreamHandler(sys.stderr)
            terminal.setFormatter(_TerminalFormatter())
            terminal.addFilter(_for_the_terminal)
            _state["terminal_handler"] = terminal
            raylink_logger.addHandler(terminal)
            raylink_logger.propagate = False  # the root's lastResort would print it again
        if _state["terminal_handler"] is not None:
            _state["terminal_handler"].setLevel(level)
    file_handler = _file_handler()
    if file_handler not in raylink_logger.handlers:
        raylink_logger.addHandler(file_handler)
    # raylink's DEBUG records for the log file -- only while raylink's terminal handler is the
    # logger's way out: under the program's own logging configuration they would propagate to
    # its handlers, so the logger's level is then the program's to set
    if _state["terminal_handler"] is not None and (
        raylink_logger.level == logging.NOTSET or raylink_logger.level > logging.DEBUG
    ):
        raylink_logger.setLevel(logging.DEBUG)
    if not verbose:
        quiet_third_party_loggers()


def quiet_third_party_loggers() -> None:
    """Send the records of :data:`QUIET_LOGGERS` to the run's log file instead of the terminal
    (their terminal handlers are removed; nothing propagates to the root). Call again after a
    library (re)configures its logger (Ray does on import)."""
    file_handler = _file_handler()
    for name in QUIET_LOGGERS:
        logger = logging.getLogger(name)
        for handler in list(logger.handlers):
            if handler is not file_handler and isinstance(handler, logging.StreamHandler):
                if getattr(handler, "stream", None) in (sys.stderr, sys.stdout, sys.__stderr__, sys.__stdout__):
                    logger.removeHandler(handler)
        if file_handler not in logger.handlers:
            logger.addHandler(file_handler)
        logger.propagate = False
    _state["quieted"] = True


def log_file_hint() -> Optional[str]:
    """``"logs: <folder>"`` once a run folder exists (for failure messages), else None."""
    return f"logs: {_state['dir']}" if _state["dir"] else None


__all__ = [
    "KEPT_RUNS",
    "LOG_LEVEL_ENV_VAR",
    "QUIET_LOGGERS",
    "TERMINAL_INFO_LOGGERS",
    "driver_log_path",
    "is_verbose",
    "log_file_hint",
    "log_level",
    "quiet_third_party_loggers",
    "run_log_dir",
    "setup_logging",
]
