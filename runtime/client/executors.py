"""Where ``execution.target`` finds the executor that runs a job: Flink's
``PipelineExecutorServiceLoader`` and ``PipelineExecutorFactory``.

Executors register themselves. raylink's own (``local``: threads in this process, Flink's
MiniCluster; ``ray``: TaskExecutor actors) and any other installed package's are declared
in the ``raylink.executors`` entry-point group (Python's counterpart of Flink's Java
``ServiceLoader``) and loaded on first use; code can also call :func:`register_executor`.

:func:`executor_context` is the hook a launcher uses to wrap whatever executor a program
picks (Flink's ``StreamContextEnvironment.setAsContext``): the CLI shows progress around
every job a program runs, and ``raylink plan`` stops a program at its first ``execute``.

Thread-safety: registration and the context stack are guarded by one lock; a pushed wrapper
applies to every thread of the process until its ``with`` block exits.
"""

from __future__ import annotations

import abc
import contextlib
import threading
from importlib.metadata import entry_points
from typing import Any, Callable, Iterator, Optional

from raylink.runtime.logging_setup import setup_logging

ENTRY_POINT_GROUP = "raylink.executors"


class PipelineExecutor(abc.ABC):
    """Runs a program's job (Flink's ``PipelineExecutor``)."""

    @abc.abstractmethod
    def execute_async(self, env: Any, job_name: Optional[str] = None) -> Any:
        """Submit the job; return its ``JobClient``."""

    def execute(self, env: Any, job_name: Optional[str] = None) -> Any:
        """Run the job to its end; return its ``JobExecutionResult``."""
        return self.execute_async(env, job_name).get_job_execution_result()

    def execute_and_collect(
        self, env: Any, job_name: Optional[str], collect_id: str, limit: Optional[int] = None
    ) -> Any:
        """Start the job; its collect sink's records stream back through the iterator."""
        return self.execute_async(env, job_name).collect(limit)


ExecutorWrapper = Callable[[Any, PipelineExecutor], PipelineExecutor]

_lock = threading.Lock()
_executors: dict[str, PipelineExecutor] = {}
_entry_points_loaded = False
_wrappers: list[ExecutorWrapper] = []


def register_executor(target: str, executor: PipelineExecutor) -> None:
    """Make ``executor`` the one ``execution.target = target`` runs on."""
    with _lock:
        _executors[target] = executor


def _load_entry_points(target: Optional[str] = None) -> None:
    """Load the executors declared for ``target`` (every declared one if None). Loading only
    the one asked for keeps the others' imports out of the program (the ``ray`` target's
    Ray, ~0.3 s, out of a job on the ``local`` target)."""
    global _entry_points_loaded
    with _lock:
        if _entry_points_loaded:
            return
        if target is None:
            _entry_points_loaded = True
            declared = list(entry_points(group=ENTRY_POINT_GROUP))
        else:
            declared = list(entry_points(group=ENTRY_POINT_GROUP, name=target))
    for ep in declared:
        if ep.name not in _executors:
            register_executor(ep.name, ep.load())


def available_targets() -> list[str]:
    """Every registered ``execution.target``."""
    _load_entry_points()
    with _lock:
        return sorted(_executors)


def get_executor(target: str, env: Any = None) -> PipelineExecutor:
    """The executor for ``target``, wrapped by the launcher's context if one is active (raylink's
    terminal lines and the run's log file are set up first: :mod:`raylink.runtime.logging_setup`)."""
    setup_logging()
    with _lock:
        executor = _executors.get(target)
    if executor is None:
        _load_entry_points(target)
        with _lock:
            executor = _executors.get(target)
    if executor is None:
        known = available_targets()
        hint = (
            ""
            if known
            else (
                " (no executor is registered: install raylink, e.g. "
                "`pip install -e .`, so its entry points are declared)"
            )
        )
        raise ValueError(f"execution.target {target!r} is not supported; use one of {known}{hint}")
    with _lock:
        wrappers = list(_wrappers)
    for wrap in wrappers:
        executor = wrap(env, executor)
    return executor


@contextlib.contextmanager
def executor_context(wrapper: ExecutorWrapper) -> Iterator[None]:
    """Within the block, every executor a program picks is ``wrapper(env, executor)``."""
    with _lock:
        _wrappers.append(wrapper)
    try:
        yield
    finally:
        with _lock:
            _wrappers.remove(wrapper)
