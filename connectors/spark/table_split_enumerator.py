"""The split enumerator of the continuous Delta/Iceberg source: the driver reads the table's
commits through Spark and answers the source subtasks' "what came after my position?".

Spark's session (and so the formats' libraries in its JVM) lives only in the driver process,
while the readers run in TaskExecutor actors. A :class:`TableSplitEnumeratorActor` (a small Ray
actor, owned by the driver) takes the readers' requests; one driver thread per source
(:class:`TableEnumerator`) long-polls it for the positions asked about, reads the commits after
each through a :class:`~raylink.connectors.spark.table_log.TableLog` (Delta's ``DeltaLog``,
Iceberg's ``Table``) and posts the answers. Nothing is read while no reader asks, so a cancelled
job costs one idle actor call per second until ``raylink.connectors.spark.stop()`` (or the
driver's exit) ends the thread and kills the actor.

A position is the id of the last commit a reader listed (Delta version, Iceberg snapshot id) or,
before its first, the source's start ``("start", initial, start_after)``: the whole snapshot
``initial`` (a version or snapshot id, or None) and then every commit after ``start_after``.
Answers are lists of :class:`~raylink.connectors.spark.table_log.TableCommit` in commit order;
each added file is a split. Which reader owns a split is a pure function
(:func:`split_owner`: a stable hash of the file's location over the parallelism), so the
enumerator keeps no assignment state and a restore at another parallelism shares the files out
again by the same function -- the way raylink's Kafka source owns partitions. Plays the part of
Flink's ``ContinuousIcebergEnumerator`` / ``SplitEnumerator`` with its ``monitor-interval``
discovery. The actor's methods run on its thread pool under one condition variable; the driver
thread is the only user of its ``TableLog``.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
import zlib
from typing import Any, Dict, Optional

import ray

from raylink.connectors.spark.errors import java_message

log = logging.getLogger(__name__)

TAKE_POLL_S = 1.0
#: how long one reader request waits for the driver before it asks again
ASK_WAIT_S = 30.0


def split_owner(location: str, parallelism: int) -> int:
    """The subtask that reads the file at ``location`` (stable across runs and processes)."""
    return zlib.crc32(location.encode()) % parallelism


def position_key(position: Any) -> Any:
    """A hashable form of a position (Ray turns tuples into lists on the way)."""
    return tuple(position) if isinstance(position, list) else position


@ray.remote(num_cpus=0, max_concurrency=64)
class TableSplitEnumeratorActor:
    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._wanted: Dict[Any, float] = {}  # position -> when it was first asked
        self._answers: Dict[Any, tuple] = {}  # position -> (answered at, answer)
        self._closed = False

    def ask(self, position: Any, timeout: float = ASK_WAIT_S) -> Optional[dict]:
        """A reader: the commits after ``position`` read after this call came in
        (``{"commits": [...]}`` or ``{"error": ...}``), None when the driver has not answered
        within ``timeout``."""
        key = position_key(position)
        asked = time.monotonic()
        deadline = asked + timeout
        with self._cond:
            self._wanted.setdefault(key, asked)
            self._cond.notify_all()
            while True:
                if self._closed:
                    return {"error": "the continuous table source's enumerator was shut down (spark stop())"}
                answered = self._answers.get(key)
                if answered is not None and answered[0] >= asked:
                    return answered[1]
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                self._cond.wait(min(left, 1.0))

    def take_wanted(self, timeout: float) -> list:
        """The driver thread (long poll): the positions asked about since the last take."""
        with self._cond:
            if not self._wanted and not self._closed:
                self._cond.wait(timeout)
            out = list(self._wanted)
            self._wanted.clear()
            return out

    def answer(self, answers: list) -> None:
        """The driver thread: ``[(position, answer)]`` read after the positions were taken."""
        now = time.monotonic()
        with self._cond:
            for key, value in answers:
                self._answers[position_key(key)] = (now, value)
            self._cond.notify_all()

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()


class TableEnumerator:
    """The driver's side: the actor, and the thread that answers it with ``table_log``."""

    def __init__(self, table_log: Any) -> None:
        self.table_log = table_log
        self.source_id = uuid.uuid4().hex
        self.actor = TableSplitEnumeratorActor.options(name=f"raylink-table-enumerator-{self.source_id[:8]}").remote()
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._loop, name=f"raylink-table-enumerator-{self.source_id[:8]}", daemon=True
        )

    def start(self) -> None:
        from raylink.connectors.spark.bridge import register_source_release

        register_source_release(self.source_id, self.stop)  # stop() ends it with the Spark bridge
        self._thread.start()

    def answer(self, position: Any) -> dict:
        """The commits after ``position`` (on the driver)."""
        table_log = self.table_log
        try:
            if isinstance(position, (list, tuple)):  # ("start", initial, start_after)
                _, initial, start_after = position
                commits = [table_log.initial(initial)] if initial is not None else []
                commits += table_log.commits_after(start_after)
            else:
                commits = table_log.commits_after(position)
        except ValueError as exc:
            return {"error": str(exc)}
        except Exception as exc:
            return {
                "error": f"reading the commits of {table_log.description} failed: "
                f"{type(exc).__name__}: {java_message(exc)}"
            }
        return {"commits": [c.to_wire() for c in commits]}

    def _loop(self) -> None:
        actor = self.actor
        while not self._stop.is_set():
            if not ray.is_initialized():  # the driver shut Ray down: a call now would start a new one
                return
            try:
                wanted = ray.get(actor.take_wanted.remote(TAKE_POLL_S))
                if wanted:
                    ray.get(actor.answer.remote([(key, self.answer(key)) for key in wanted]))
            except Exception as exc:  # the actor is gone: stopped
                if not self._stop.is_set():
                    log.warning("raylink table enumerator %s ends: %s", self.table_log.description, exc)
                return

    def stop(self) -> None:
        self._stop.set()
        if ray.is_initialized():
            try:
                ray.get(self.actor.close.remote(), timeout=10)
                ray.kill(self.actor, no_restart=True)
            except Exception:
                pass


__all__ = ["TableEnumerator", "TableSplitEnumeratorActor", "position_key", "split_owner"]
