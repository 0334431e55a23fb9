"""The driver's side of the Spark bridge: one small Ray actor plus one thread.

Spark's driver (the py4j JVM of the session) lives only in the driver process,
while sources and sinks run in TaskExecutor actors. The bridge connects them:

* **Blocks of ``from_spark``.** The driver registers the DataFrame's Ray block
  refs with the bridge actor (nested in a list, so Ray counts the actor as a
  borrower); a source subtask fetches them with ``get_blocks`` (it becomes a
  borrower too) and ``ray.get``\\ s its share. The refs never travel inside the
  pickled job graph (that would pin them for ever), and the bridge drops a
  source's refs once every subtask has read them.
* **Spark writes of the sink.** A sink subtask puts its Arrow blocks in the
  object store and calls ``commit`` on the bridge actor, which blocks until the
  driver's commit thread has written them with Spark (RayDP's Arrow-blocks →
  DataFrame conversion, then ``DataFrameWriter``) and acknowledged. The subtask
  owns the blocks and waits, so they live until Spark has read them. A bounded
  sink sends one final commit per subtask: the first ones are only *staged* (acked at
  once, so no subtask waits on another -- a failing sibling cannot hang the job),
  the last one triggers *one* Spark write of all of them (so ``mode="overwrite"``
  means the whole output) and waits for it; the staged blocks stay alive because
  the job, and so every TaskExecutor, lasts until that last subtask finishes. A
  continuous sink (``flush_interval``) commits every interval, each an append.
  A commit fails (instead of waiting for ever) when the driver's commit thread
  has not polled for ``DRIVER_GONE_S``.

The actor is created by (and so owned by) the driver; ``shutdown_bridge`` (from
``raylink.connectors.spark.stop``) ends the thread and kills the actor.
"""

from __future__ import annotations

import atexit
import logging
import threading
import time
import uuid
from collections import deque
from typing import Any, Dict, List, Optional

import ray

log = logging.getLogger(__name__)

COMMIT_POLL_S = 1.0
WAIT_SLICE_S = 1.0
DRIVER_GONE_S = 30.0


class CommitError(RuntimeError):
    """A Spark write of a sink failed (message says which sink, target and why)."""


@ray.remote(num_cpus=0, max_concurrency=64)
class SparkBridgeActor:
    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._blocks: Dict[str, list] = {}
        self._readers: Dict[str, set] = {}
        self._requests: deque = deque()
        self._results: Dict[str, Optional[str]] = {}
        self._closed = False
        self._last_take = time.monotonic()

    # -- blocks of from_spark ------------------------------------------------------------------
    def put_blocks(self, source_id: str, refs: list) -> int:
        self._blocks[source_id] = list(refs)
        self._readers[source_id] = set()
        return len(refs)

    def get_blocks(self, source_id: str) -> list:
        refs = self._blocks.get(source_id)
        if refs is None:
            raise KeyError(
                f"the blocks of Spark source {source_id} are gone (already read by a finished job, "
                "or released by raylink.connectors.spark.stop()); call env.from_spark(df) again"
            )
        return refs

    def release_blocks(self, source_id: str, subtask_index: int, parallelism: int) -> None:
        readers = self._readers.get(source_id)
        if readers is None:
            return
        readers.add(subtask_index)
        if len(readers) >= parallelism:
            self._blocks.pop(source_id, None)
            self._readers.pop(source_id, None)

    def num_sources(self) -> int:
        return len(self._blocks)

    # -- commits of Spark sinks ----------------------------------------------------------------
    def commit(self, request: dict) -> None:
        """Called by a sink subtask: returns once the driver wrote the blocks (or raises)."""
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
                        "(driver busy or gone); the Spark write did not happen")
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
_bridge: Dict[str, Any] = {"actor": None, "thread": None, "stop": None, "targets": {}}


def get_bridge() -> Any:
    """The bridge actor of this driver (created on first use)."""
    with _lock:
        actor = _bridge["actor"]
        if actor is None:
            actor = SparkBridgeActor.options(name=f"raylink-spark-bridge-{uuid.uuid4().hex[:8]}").remote()
            _bridge["actor"] = actor
        return actor


def register_sink_target(sink_id: str, target: Any) -> Any:
    """Make the commit thread able to write ``sink_id``'s blocks; returns the bridge actor."""
    with _lock:
        actor = get_bridge()
        _bridge["targets"][sink_id] = target
        if _bridge["thread"] is None:
            stop = threading.Event()
            thread = threading.Thread(target=_commit_loop, args=(actor, stop), name="raylink-spark-commit",
                                      daemon=True)
            _bridge.update(thread=thread, stop=stop)
            thread.start()
        return actor


def shutdown_bridge(timeout: float = 10.0) -> None:
    """End the commit thread and kill the bridge actor (``stop()``, and at interpreter exit).

    Never starts Ray: once the user's ``ray.shutdown()`` ran (or Ray's own exit hook did), the
    actor died with the session and only the thread is left to stop. Every Ray call here and in
    the commit thread is guarded by ``ray.is_initialized()`` -- an actor call or ``ray.get``
    on a shut-down driver would otherwise start a new local Ray (Ray's auto-init).
    """
    with _lock:
        actor, thread, stop = _bridge["actor"], _bridge["thread"], _bridge["stop"]
        _bridge.update(actor=None, thread=None, stop=None, targets={})
    if stop is not None:
        stop.set()
    if actor is not None and ray.is_initialized():
        try:
            ray.get(actor.close.remote(), timeout=timeout)
        except Exception:
            pass
    if thread is not None:
        thread.join(timeout)
    if actor is not None and ray.is_initialized():
        try:
            ray.kill(actor, no_restart=True)
        except Exception:
            pass


def _commit_loop(actor: Any, stop: threading.Event) -> None:
    pending: Dict[str, Dict[int, dict]] = {}  # bounded sinks: staged final commits by subtask
    started: set = set()  # continuous sinks that made their first write
    while not stop.is_set():
        if not ray.is_initialized():  # the driver shut Ray down: a call now would start a new one
            return
        try:
            requests = ray.get(actor.take_commits.remote(COMMIT_POLL_S))
        except Exception as exc:  # the actor is gone: the bridge was shut down
            if not stop.is_set():
                log.warning("raylink Spark bridge: commit loop ends: %s", exc)
            return
        for request in requests:
            sink_id = request["sink_id"]
            target = _bridge["targets"].get(sink_id)
            if target is None:
                _ack(actor, [request], f"unknown Spark sink {sink_id} (created in another driver?)")
                continue
            if request.get("continuous"):
                mode = target.mode if sink_id not in started else "append"
                started.add(sink_id)
                _write_and_ack(actor, target, [request], mode)
                continue
            group = pending.setdefault(sink_id, {})
            group[request["subtask"]] = request
            if len(group) >= request["parallelism"]:
                del pending[sink_id]
                _write_and_ack(actor, target, list(group.values()), target.mode, ack=[request])
            else:
                _ack(actor, [request], None)  # staged; the last subtask waits for the write


def _ack(actor: Any, requests: List[dict], error: Optional[str]) -> None:
    if not ray.is_initialized():
        return
    try:
        ray.get(actor.commit_done.remote([r["id"] for r in requests], error))
    except Exception:
        pass


def _write_and_ack(actor: Any, target: Any, requests: List[dict], mode: str,
                   ack: Optional[List[dict]] = None) -> None:
    refs = [ref for r in requests for ref in r["blocks"]]
    rows = sum(r["rows"] for r in requests)
    error = None
    start = time.perf_counter()
    try:
        target.write(refs, mode)
    except Exception as exc:  # report to every waiting subtask
        from raylink.connectors.spark.types import _java_message

        error = (f"Spark sink '{target.name}' could not write {rows} row(s) to {target.describe()} "
                 f"(mode {mode!r}): {type(exc).__name__}: {_java_message(exc)}")
        log.warning("%s", error)
    else:
        target.commits.append({"rows": rows, "blocks": len(refs), "mode": mode,
                               "seconds": round(time.perf_counter() - start, 3)})
    _ack(actor, requests if ack is None else ack, error)


atexit.register(shutdown_bridge)

__all__ = ["SparkBridgeActor", "CommitError", "get_bridge", "register_sink_target", "shutdown_bridge"]
