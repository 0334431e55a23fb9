"""The program's idle TaskExecutors, kept for its next job: Flink's ``ResourceManager``, which
releases an idle TaskManager only after ``resourcemanager.taskmanager-timeout`` (30 s).

When an attached job whose JobMaster runs in this driver finishes, its TaskExecutor actors
and their placement group are not killed at once: every actor is reset in the background
(the job's tasks, state, threads, buffers and connections dropped: ``TaskExecutorActor.reset``,
as the session cluster's pool does) and, when each came back clean, the set waits here. The
program's next job in the same runtime environment whose TaskExecutors ask for no more and
none larger than the set's (:func:`fits`: the same bundles, or a job at a lower parallelism)
takes the set whole, binds its first actors to itself and deploys on them: no process starts.
The others wait idle until the job gives the whole set back (Flink's ResourceManager, too,
offers any job the slots of its idle TaskManagers). A job that asks for something else
releases the set first (it must not wait for resources its own program holds idle); the
timeout releases it otherwise. The actors are the driver's, so they end with the program.

One set at most (the last finished job's). Thread-safe: a lock guards the set; the reset
runs on a daemon thread and the timeout on a daemon timer.
"""

from __future__ import annotations

import json
import logging
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

import ray
from ray.util.placement_group import remove_placement_group

#: how long a reset may take, and how long a job waits for one in progress
RESET_TIMEOUT_S = 10.0


def warm_key(runtime_env: Optional[dict]) -> str:
    """The runtime environment a job's TaskExecutors run in: a warm set serves equal keys only."""
    return json.dumps(runtime_env, sort_keys=True, default=str)


def fits(held: list, asked: list) -> bool:
    """Whether a set of TaskExecutors with the Ray resources ``held`` (one bundle each, in order)
    serves a job asking ``asked``: no more executors, and the job's i-th asks for the same kinds
    of resources as the set's i-th, none more of any (Flink's ResourceManager, too, fulfils a
    slot request with a slot of its profile or a larger one)."""
    return len(asked) <= len(held) and all(
        want.keys() == have.keys() and all(want[k] <= have[k] for k in want) for want, have in zip(asked, held)
    )


@dataclass
class WarmSet:
    """A finished job's TaskExecutor actors (in bundle order), their placement group's bundles
    and the placement group."""

    key: str
    bundles: list
    placement_group: Any
    handles: list
    ray_job: str  # the driver's Ray job: handles of an earlier connection are void
    ready: threading.Event = field(default_factory=threading.Event)
    clean: bool = False
    timer: Optional[threading.Timer] = None


class WarmExecutors:
    """See the module docstring; :data:`WARM_EXECUTORS` is the program's one instance."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._set: Optional[WarmSet] = None
        self.reused = 0  # sets taken by a later job (what the tests and bench/startup.py read)

    def offer(
        self,
        key: str,
        bundles: list,
        placement_group: Any,
        handles: list,
        timeout_s: float,
        quiesce: Callable[[], None],
    ) -> None:
        """Keep a finished job's executors for ``timeout_s``; in the background, once
        ``quiesce()`` returned (the job's JobMaster polls them no more), resets them (any not
        clean: the whole set is released)."""
        warm = WarmSet(key, list(bundles), placement_group, list(handles), ray.get_runtime_context().get_job_id())
        with self._lock:
            previous, self._set = self._set, warm
        if previous is not None:
            _release(previous)
        threading.Thread(
            target=self._reset, args=(warm, timeout_s, quiesce), name="warm executors reset", daemon=True
        ).start()

    def _reset(self, warm: WarmSet, timeout_s: float, quiesce: Callable[[], None]) -> None:
        try:
            quiesce()
            refs = [h.reset.remote(RESET_TIMEOUT_S) for h in warm.handles]
            reports = ray.get(refs, timeout=RESET_TIMEOUT_S * 2)
            warm.clean = all(r.get("clean") for r in reports)
        except Exception:  # noqa: BLE001 - an executor died or hung: the set is not reused
            warm.clean = False
        warm.ready.set()
        with self._lock:
            if self._set is not warm:
                return  # taken or replaced meanwhile
            if not warm.clean:
                self._set = None
            else:
                warm.timer = threading.Timer(timeout_s, self._expire, args=(warm,))
                warm.timer.name, warm.timer.daemon = "warm executors timeout", True
                warm.timer.start()
                return
        logging.getLogger("raylink").debug("the finished job's TaskExecutors did not reset cleanly: released")
        _release(warm)

    def _expire(self, warm: WarmSet) -> None:
        with self._lock:
            if self._set is not warm:
                return
            self._set = None
        _release(warm)

    def take(self, key: str, bundles: list) -> Optional[WarmSet]:
        """The warm set for a job whose TaskExecutors ask ``bundles`` in runtime environment
        ``key`` (waiting for its reset), or None; a set that does not fit (:func:`fits`) is
        released, so the job's own placement never waits for it."""
        with self._lock:
            warm, self._set = self._set, None
        if warm is None:
            return None
        if warm.ray_job != ray.get_runtime_context().get_job_id():
            return None  # of an earlier Ray connection: gone with it
        if (
            warm.key != key
            or not fits(warm.bundles, bundles)
            or not warm.ready.wait(RESET_TIMEOUT_S * 2)
            or not warm.clean
        ):
            _release(warm)
            return None
        if warm.timer is not None:
            warm.timer.cancel()
        try:  # every actor still alive (a process may have died while idle)
            ray.get([h.location.remote() for h in warm.handles], timeout=RESET_TIMEOUT_S)
        except Exception:  # noqa: BLE001
            _release(warm)
            return None
        self.reused += 1
        return warm

    def release(self) -> None:
        """Release the warm set now (if any)."""
        with self._lock:
            warm, self._set = self._set, None
        if warm is not None and warm.ray_job == ray.get_runtime_context().get_job_id():
            _release(warm)

    def idle(self) -> int:
        """How many TaskExecutors wait here (reset or resetting)."""
        with self._lock:
            return 0 if self._set is None else len(self._set.handles)


def _release(warm: WarmSet) -> None:
    if warm.timer is not None:
        warm.timer.cancel()
    for handle in warm.handles:
        try:
            ray.kill(handle, no_restart=True)
        except Exception:  # noqa: BLE001 - already gone (or Ray disconnected)
            pass
    try:
        remove_placement_group(warm.placement_group)
    except Exception:  # noqa: BLE001
        pass


#: the program's warm TaskExecutors
WARM_EXECUTORS = WarmExecutors()

__all__ = ["RESET_TIMEOUT_S", "WARM_EXECUTORS", "WarmExecutors", "WarmSet", "fits", "warm_key"]
