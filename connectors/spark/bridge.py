"""The driver's side of the Spark bridge: one small Ray actor plus one thread.

Spark's driver (the py4j JVM of the session) lives only in the driver process,
while sources and sinks run in TaskExecutor actors. The bridge connects them:

* **Partitions of ``from_spark``.** A driver thread has Spark turn the DataFrame into
  Arrow record batches cached on Spark's executors (RayDP's recoverable RDD) and posts
  where they are (RDD id, executor actor per partition, Arrow schema) with
  ``put_source``; a source subtask waits for that with ``source_info`` and then reads
  its partitions straight from the executors (see :mod:`.dataframe_source`). When
  every subtask has finished (``release_source``) the bridge asks the driver thread to
  release the cached RDD. Nothing but names and numbers travels in the job graph.
* **Commits of the sink.** A sink subtask writes Parquet files into its sink's staging
  folder and calls ``commit`` on the bridge actor, which blocks until the driver's
  thread has committed them (a file move, or one Spark write; :mod:`.sink`) and
  acknowledged. A bounded sink sends one final commit per subtask: the first ones are
  only *staged* (acked at once, so no subtask waits on another -- a failing sibling
  cannot hang the job), the last one triggers *one* commit of all of them (so
  ``mode="overwrite"`` means the whole output) and waits for it; a restarted subtask's
  new final commit replaces its old one (whose files are deleted). A continuous sink
  (``flush_interval``) commits every interval, each an append. With checkpointing, each
  subtask commits the files of every completed checkpoint (``checkpoint`` in the request),
  each (checkpoint, subtask) once (``SparkSink.commit_checkpoint``). A commit fails (instead
  of waiting for ever) when the driver's thread has not polled for ``DRIVER_GONE_S``; while
  it commits (a Spark write may take longer than that on a loaded machine) it says it is
  alive every ``DRIVER_ALIVE_EVERY_S`` (``driver_alive``).

The actor is created by (and so owned by) the driver; ``shutdown_bridge`` (from
``raylink.connectors.spark.stop``) ends the thread and kills the actor. The actor's
methods run on its thread pool (``max_concurrency``) under one condition variable; the
driver-side functions are thread-safe (one lock). Plays the part of Flink's
``SplitEnumerator`` (handing out splits) and of the Sink V2 ``Committer`` on the driver.
"""

from __future__ import annotations

import atexit
import logging
import threading
import time
import uuid
from collections import deque
from contextlib import contextmanager
from typing import Any, Callable, Dict, Iterator, List, Optional

import ray

from raylink.connectors.spark.errors import java_message
from raylink.errors import RaylinkError

log = logging.getLogger(__name__)

COMMIT_POLL_S = 1.0
WAIT_SLICE_S = 1.0
DRIVER_GONE_S = 30.0
DRIVER_ALIVE_EVERY_S = 5.0


class CommitError(RaylinkError, RuntimeError):
    """A Spark write of a sink failed (message says which sink, target and why)."""


@ray.remote(num_cpus=0, max_concurrency=64)
class SparkBridgeActor:
    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._sources: Dict[str, dict] = {}
        self._readers: Dict[str, set] = {}
        self._released: set = set()
        self._requests: deque = deque()
        self._results: Dict[str, Optional[str]] = {}
        self._closed = False
        self._last_take = time.monotonic()

    # -- partitions of from_spark ---------------------------------------------------------------
    def put_source(self, source_id: str, info: dict) -> None:
        """Called by the driver once Spark has the source's partitions (or failed: ``error``)."""
        with self._cond:
            self._sources[source_id] = info
            self._readers[source_id] = set()
            self._cond.notify_all()

    def source_info(self, source_id: str, timeout: float) -> Optional[dict]:
        """Called by a source subtask: the partitions' whereabouts, None if not ready within ``timeout``."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while source_id not in self._sources:
                if source_id in self._released:
                    return {
                        "error": (
                            f"the partitions of Spark source {source_id} are gone (already read by a finished "
                            "job, or released by raylink.connectors.spark.stop()); call env.from_spark(df) again"
                        )
                    }
                if self._closed:
                    return {"error": "the Spark bridge was shut down (raylink.connectors.spark.stop())"}
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                self._cond.wait(min(left, WAIT_SLICE_S))
            return self._sources[source_id]

    def release_source(self, source_id: str, subtask_index: int, parallelism: int) -> None:
        """Called by a source subtask that finished; the last one has the driver release the RDD."""
        with self._cond:
            readers = self._readers.get(source_id)
            if readers is None:
                return
            readers.add(subtask_index)
            if len(readers) >= parallelism:
                info = self._sources.pop(source_id, None)
                self._readers.pop(source_id, None)
                self._released.add(source_id)
                if info is not None and "error" not in info:
                    self._requests.append({"kind": "release", "source_id": source_id})
                    self._cond.notify_all()

    def num_sources(self) -> int:
        return len(self._sources)

    # -- commits of Spark sinks ----------------------------------------------------------------
    def commit(self, request: dict) -> None:
        """Called by a sink subtask: returns once the driver committed its files (or raises)."""
        request_id = request["id"]
        with self._cond:
            if self._closed:
                raise CommitError("the Spark bridge was shut down (raylink.connectors.spark.stop())")
            self._requests.append(request)
            self._cond.notify_all()
            while request_id not in self._results:
                if self._closed:
                    raise CommitError("the Spark bridge was shut down while a Spark write was pending")
                if time.monotonic() - self._last_take > DRIVER_GONE_S:
                    raise CommitError(
                        f"the driver's Spark commit thread has not answered for {DRIVER_GONE_S:.0f} s "
                        "(driver busy or gone); the Spark write did not happen"
                    )
                self._cond.wait(WAIT_SLICE_S)
            error = self._results.pop(request_id)
        if error is not None:
            raise CommitError(error)

    def take_commits(self, timeout: float) -> list:
        """Called by the driver's commit thread (long poll)."""
        with self._cond:
            self._last_take = time.monotonic()
            if not self._requests and not self._closed:
                self._cond.wait(timeout)
            self._last_take = time.monotonic()
            out = list(self._requests)
            self._requests.clear()
            return out

    def driver_alive(self) -> None:
        """Called by the driver's thread while it commits: it is busy, not gone."""
        with self._cond:
            self._last_take = time.monotonic()

    def commit_done(self, request_ids: list, error: Optional[str]) -> None:
        with self._cond:
            for request_id in request_ids:
                self._results[request_id] = error
            self._cond.notify_all()

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()


# -- driver side ------------------------------------------------------------------------------------
_lock = threading.RLock()
_bridge: Dict[str, Any] = {"actor": None, "thread": None, "stop": None, "targets": {}, "releases": {}}


def get_bridge() -> Any:
    """The bridge actor of this driver (created on first use)."""
    with _lock:
        actor = _bridge["actor"]
        if actor is None:
            actor = SparkBridgeActor.options(name=f"raylink-spark-bridge-{uuid.uuid4().hex[:8]}").remote()
            _bridge["actor"] = actor
        return actor


def _ensure_thread() -> Any:
    with _lock:
        actor = get_bridge()
        if _bridge["thread"] is None:
            stop = threading.Event()
            thread = threading.Thread(target=_driver_loop, args=(actor, stop), name="raylink-spark-bridge", daemon=True)
            _bridge.update(thread=thread, stop=stop)
            thread.start()
        return actor


def register_sink_target(sink_id: str, target: Any) -> Any:
    """Make the driver's thread able to commit ``sink_id``'s files; returns the bridge actor.

    ``target`` has ``commit(requests, mode)`` (the files of ``requests`` become visible with
    ``mode``), ``discard(requests)`` (drop files that will never be committed), ``name``,
    ``describe()`` and a ``commits`` list."""
    with _lock:
        _bridge["targets"][sink_id] = target
        return _ensure_thread()


def register_source_release(source_id: str, release: Callable[[], None]) -> Any:
    """Run ``release`` on the driver's thread once every subtask of ``source_id`` finished
    (or at :func:`shutdown_bridge`); returns the bridge actor."""
    with _lock:
        _bridge["releases"][source_id] = release
        return _ensure_thread()


def set_source_release(source_id: str, release: Callable[[], None]) -> bool:
    """Replace the release of a registered source; False (nothing set) when the bridge was shut
    down since (the caller releases at once)."""
    with _lock:
        if source_id not in _bridge["releases"]:
            return False
        _bridge["releases"][source_id] = release
        return True


def _run_release(source_id: str) -> None:
    with _lock:
        release = _bridge["releases"].pop(source_id, None)
    if release is not None:
        try:
            release()
        except Exception as exc:  # the session is stopping: its caches go with it
            log.debug("raylink Spark bridge: releasing source %s: %s", source_id, exc)


def shutdown_bridge(timeout: float = 10.0) -> None:
    """End the driver's thread, release what sources still hold and kill the bridge actor
    (``stop()``, and at interpreter exit).

    Never starts Ray: once the user's ``ray.shutdown()`` ran (or Ray's own exit hook did), the
    actor died with the session and only the thread is left to stop. Every Ray call here and in
    the driver's thread is guarded by ``ray.is_initialized()`` -- an actor call or ``ray.get``
    on a shut-down driver would otherwise start a new local Ray (Ray's auto-init).
    """
    with _lock:
        actor, thread, stop = _bridge["actor"], _bridge["thread"], _bridge["stop"]
        releases, targets = _bridge["releases"], _bridge["targets"]
        _bridge.update(actor=None, thread=None, stop=None, targets={}, releases={})
    if stop is not None:
        stop.set()
    if actor is not None and ray.is_initialized():
        try:
            ray.get(actor.close.remote(), timeout=timeout)
        except Exception:
            pass
    if thread is not None:
        thread.join(timeout)
    for release in releases.values():
        try:
            release()
        except Exception:
            pass
    for target in targets.values():
        cleanup = getattr(target, "cleanup", None)
        if cleanup is not None:
            try:
                cleanup()
            except Exception:
                pass
    if actor is not None and ray.is_initialized():
        try:
            ray.kill(actor, no_restart=True)
        except Exception:
            pass


def _driver_loop(actor: Any, stop: threading.Event) -> None:
    pending: Dict[str, Dict[int, dict]] = {}  # bounded sinks: staged final commits by subtask
    started: set = set()  # continuous sinks that made their first write
    while not stop.is_set():
        if not ray.is_initialized():  # the driver shut Ray down: a call now would start a new one
            return
        try:
            requests = ray.get(actor.take_commits.remote(COMMIT_POLL_S))
        except Exception as exc:  # the actor is gone: the bridge was shut down
            if not stop.is_set():
                log.warning("raylink Spark bridge: driver loop ends: %s", exc)
            return
        for request in requests:
            if request.get("kind") == "release":
                _run_release(request["source_id"])
                continue
            sink_id = request["sink_id"]
            target = _bridge["targets"].get(sink_id)
            if target is None:
                _ack(actor, [request], f"unknown Spark sink {sink_id} (created in another driver?)")
                continue
            if request.get("checkpoint") is not None:  # exactly-once: one completed checkpoint's files
                _commit_and_ack(actor, target, [request], "checkpoint", commit=target.commit_checkpoint)
                continue
            if request.get("continuous"):
                mode = target.mode if sink_id not in started else "append"
                started.add(sink_id)
                _commit_and_ack(actor, target, [request], mode)
                continue
            group = pending.setdefault(sink_id, {})
            replaced = group.get(request["subtask"])
            if replaced is not None:  # a restarted subtask: its earlier attempt's files never count
                _discard(target, [replaced])
            group[request["subtask"]] = request
            if len(group) >= request["parallelism"]:
                del pending[sink_id]
                _commit_and_ack(actor, target, list(group.values()), target.mode, ack=[request])
            else:
                _ack(actor, [request], None)  # staged; the last subtask waits for the commit


def _ack(actor: Any, requests: List[dict], error: Optional[str]) -> None:
    if not ray.is_initialized():
        return
    try:
        ray.get(actor.commit_done.remote([r["id"] for r in requests], error))
    except Exception:
        pass


def _discard(target: Any, requests: List[dict]) -> None:
    try:
        target.discard(requests)
    except Exception as exc:
        log.warning("raylink Spark bridge: could not delete staged files of %s: %s", target.name, exc)


@contextmanager
def _saying_alive(actor: Any) -> Iterator[None]:
    """Around a commit on the driver's thread: another thread tells the bridge actor every
    ``DRIVER_ALIVE_EVERY_S`` that the driver is busy, so waiting subtasks keep waiting."""
    done = threading.Event()

    def beat() -> None:
        while not done.wait(DRIVER_ALIVE_EVERY_S):
            try:
                actor.driver_alive.remote()
            except Exception:  # the actor is gone: the waiting subtasks learn it themselves
                return

    thread = threading.Thread(target=beat, name="raylink-spark-bridge-alive", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()


def _commit_and_ack(
    actor: Any,
    target: Any,
    requests: List[dict],
    mode: str,
    ack: Optional[List[dict]] = None,
    commit: Optional[Callable[[dict], str]] = None,
) -> None:
    """Commit ``requests`` with ``mode`` (or one checkpoint's request with ``commit``) and
    acknowledge; a failed commit's files are discarded, except a checkpoint's (its restored
    subtask commits them again)."""
    rows = sum(r["rows"] for r in requests)
    files = sum(len(r["files"]) for r in requests)
    error = None
    start = time.perf_counter()
    try:
        with _saying_alive(actor):
            how = commit(requests[0]) if commit is not None else target.commit(requests, mode)
    except Exception as exc:  # report to every waiting subtask
        error = (
            f"Spark sink '{target.name}' could not write {rows} row(s) to {target.describe()} "
            f"(mode {mode!r}): {type(exc).__name__}: {java_message(exc)}"
        )
        log.warning("%s", error)
        if commit is None:
            _discard(target, requests)
    else:
        target.commits.append(
            {"rows": rows, "files": files, "mode": mode, "how": how, "seconds": round(time.perf_counter() - start, 3)}
        )
    _ack(actor, requests if ack is None else ack, error)


atexit.register(shutdown_bridge)

__all__ = [
    "SparkBridgeActor",
    "CommitError",
    "get_bridge",
    "register_sink_target",
    "register_source_release",
    "set_source_release",
    "shutdown_bridge",
]
