"""Helpers shared by the end-to-end runtime tests (``tests/test_runtime_*.py``).

Every end-to-end test takes the ``target`` fixture (``conftest.py``, one
run per entry of ``TARGETS``) and builds its environment with
``make_env(target, parallelism)``, so running the same tests on Ray is a
matter of adding ``"ray"`` to ``TARGETS``.

User functions are cloudpickled into the tasks even in the local executor, so
they must not close over driver-side objects they mutate: results come back
through ``execute_and_collect`` / ``collect_sink`` (accumulators). The few
tests that need a signal between two tasks of one job use ``signal(name)``,
a process-wide registry (``local`` only: Ray tasks live in other processes).
"""

from __future__ import annotations

import sys
import threading
from typing import Any, Iterable, Optional

from raylink.api import Configuration, StreamExecutionEnvironment
from raylink.api.functions import MapFunction, SourceFunction

#: the executors the end-to-end tests run on (add "ray" here)
TARGETS = ["local", "ray"]

#: thread name prefixes of the runtime (task threads, output flushers)
RUNTIME_THREAD_PREFIXES = ("task ", "OutputFlusher")


def make_env(target: str, parallelism: int, config: Optional[dict] = None) -> StreamExecutionEnvironment:
    """An environment for ``target`` with the given default parallelism and Flink options."""
    configuration = Configuration().set_string("execution.target", target)
    for key, value in (config or {}).items():
        if isinstance(value, bool):
            configuration.set_boolean(key, value)
        elif isinstance(value, int):
            configuration.set_integer(key, value)
        else:
            configuration.set_string(key, str(value))
    if target == "ray":
        _ship_tests_by_value()
    env = StreamExecutionEnvironment.get_execution_environment(configuration)
    env.set_parallelism(parallelism)
    return env


def _ship_tests_by_value() -> None:
    """Test modules are not importable inside Ray workers: pickle them by value."""
    import cloudpickle

    picklers = [cloudpickle]
    try:
        import ray

        picklers.append(ray.cloudpickle)
    except ImportError:  # pragma: no cover
        pass
    for name, module in list(sys.modules.items()):
        if name.endswith("runtime_jobs") or ".test_runtime_" in name or name.startswith("test_runtime_"):
            for pickler in picklers:
                pickler.register_pickle_by_value(module)


# -- threads -------------------------------------------------------------------------------------
def runtime_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith(RUNTIME_THREAD_PREFIXES)]


def leftover_runtime_threads(timeout: float = 5.0) -> list[str]:
    """Names of runtime threads still alive after joining each for up to ``timeout`` s in total."""
    import time

    deadline = time.monotonic() + timeout
    for thread in runtime_threads():
        thread.join(max(0.0, deadline - time.monotonic()))
    return [t.name for t in runtime_threads() if t.is_alive()]


# -- errors ----------------------------------------------------------------------------------------
def cause_chain(exc: Optional[BaseException]) -> list[BaseException]:
    """``exc``, its ``__cause__``, that one's ``__cause__`` … (cycle safe)."""
    chain: list[BaseException] = []
    while exc is not None and all(exc is not seen for seen in chain):
        chain.append(exc)
        exc = exc.__cause__
    return chain


# -- signals between tasks (local only) -----------------------------------------------------------
_SIGNALS: dict[str, threading.Event] = {}
_SIGNALS_LOCK = threading.Lock()


def signal(name: str) -> threading.Event:
    """The process-wide event called ``name`` (created on first use)."""
    with _SIGNALS_LOCK:
        event = _SIGNALS.get(name)
        if event is None:
            event = _SIGNALS[name] = threading.Event()
        return event


def reset_signal(name: str) -> threading.Event:
    with _SIGNALS_LOCK:
        event = _SIGNALS[name] = threading.Event()
        return event


# -- user functions ------------------------------------------------------------------------------------
class TagSubtask(MapFunction):
    """``v -> (v, index of this subtask)`` (or ``v + (index,)`` for tuples with ``extend=True``)."""

    def __init__(self, extend: bool = False) -> None:
        self.extend = extend
        self.index = -1

    def open(self, runtime_context: Any) -> None:
        self.index = runtime_context.get_index_of_this_subtask()

    def map(self, value: Any) -> Any:
        if self.extend:
            return tuple(value) + (self.index,)
        return (value, self.index)


class CountingSource(SourceFunction):
    """An unbounded source: ``0, 1, 2, …`` until cancelled."""

    def __init__(self) -> None:
        self.running = True

    def run(self, ctx: Any) -> None:
        i = 0
        while self.running:
            ctx.collect(i)
            i += 1

    def cancel(self) -> None:
        self.running = False


def collected(result: Any, collect_id: str) -> list:
    """The records a ``collect_sink(collect_id)`` gathered (``JobExecutionResult``)."""
    return list(result.accumulators.get(collect_id, []))


def multiset(values: Iterable[Any]) -> dict:
    from collections import Counter

    return dict(Counter(values))


def wait_for(condition: Any, client: Any, timeout: float = 10.0, interval: float = 0.01) -> bool:
    """Re-check ``condition()`` until it holds, the job ends or ``timeout`` s pass.

    Paced by ``client.wait(interval)`` (the job's end event), never by a bare sleep.
    """
    import time

    deadline = time.monotonic() + timeout
    while True:
        if condition():
            return True
        if time.monotonic() >= deadline or client.wait(interval):
            return bool(condition())


def running_session(executors: int = 2, pool_size: int = 8) -> Iterable[Any]:
    """A session cluster (pool and Dispatcher) on the test's Ray for the fixture's lifetime:
    the body of a ``session`` fixture (the session actor is detached, so it is always stopped)."""
    from raylink.actors.session_cluster import find_session
    from raylink.actors.session_entrypoint import start_session, stop_session

    assert find_session() is None, "a session cluster is already running on the test's Ray"
    handle = start_session(executors=executors, pool_size=pool_size)
    try:
        yield handle
    finally:
        stop_session(handle)
