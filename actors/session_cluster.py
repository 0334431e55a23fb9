"""A session cluster on Ray (Flink's session mode): a pool of warm TaskExecutors that jobs reuse.

Flink's session cluster keeps a Dispatcher / ResourceManager and its TaskManagers
running between jobs, so a job starts without starting processes. Here the
cluster is a **detached named actor** (``raylink-session`` in the ``raylink``
namespace, :class:`SessionClusterActor`) that owns a pool of idle
``TaskExecutorActor`` processes (Flink's ``SlotPool`` / ``ResourceManager`` part). The
JobMaster stays in the driver (``RayJobClient``): it *leases* executors from the
session instead of starting actors in a placement group, binds them to its job
(``TaskExecutorActor.bind``) and *releases* them when the job ends or restarts.
A released executor is ``reset`` (its previous job's tasks, state, threads, buffers
and transport connections dropped and verified gone) and goes back to the pool
when the report is clean and the pool holds fewer than
``raylink.session.pool-size`` idle executors; otherwise it is killed. A lost
executor is dropped, and the next lease starts a new one (a restarting job gets a
full deployment again). Executors are created by the session actor, so they are
owned by it: stopping the session
(:func:`~raylink.actors.session_entrypoint.stop_session`) kills them all.

Executors are pooled by Ray runtime environment (a job with Python dependencies
gets executors started in its environment; the plain ones are shared). They
reserve no CPUs (a pool of idle processes must not block other Ray work) and
are spread over the nodes.

Jobs also reach the session over HTTP, from drivers that never connect to Ray: its
Dispatcher (:mod:`raylink.actors.dispatcher`) runs their JobMasters, which lease from this
pool as a connected driver's do. :mod:`raylink.actors.session_entrypoint` starts and stops
the two together.

:func:`find_session` needs a connected Ray. The actor is an asyncio actor: its calls
interleave on one event loop, so its bookkeeping needs no locks.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any, Optional

import ray

from raylink.actors.ray_actors import TASK_EXECUTOR_NAMESPACE, TaskExecutorActor

#: the session cluster actor's name and namespace
SESSION_NAME = "raylink-session"
SESSION_NAMESPACE = TASK_EXECUTOR_NAMESPACE
RESET_TIMEOUT_S = 5.0


def _env_key(runtime_env: Optional[dict]) -> str:
    return json.dumps(runtime_env, sort_keys=True) if runtime_env else ""


@ray.remote(num_cpus=0)
class SessionClusterActor:
    """The pool of warm TaskExecutors and its bookkeeping (see the module docstring)."""

    def __init__(self, pool_size: int, info: Optional[dict] = None) -> None:
        self.pool_size = pool_size
        self.info = dict(info or {})
        self.started = time.time()
        self._idle: dict[str, list] = {}  # env key -> [(handle, location)]
        self._runtime_envs: dict[str, Optional[dict]] = {}
        self._leased: dict[str, list] = {}  # job id -> [(handle, env key)]
        self._resetting: set = set()  # asyncio tasks resetting released executors
        self._locations: dict[str, Any] = {}  # actor id -> {node_id, pid} of executors leased
        self.counters = {"created": 0, "reused": 0, "discarded": 0, "lost": 0, "jobs": 0}
        self.last_resets: list[dict] = []
        self.resets_seen = 0  # numbers the reports: ``reset_reports(since)`` takes the newer ones

    def _create(self, runtime_env: Optional[dict]) -> Any:
        self.counters["created"] += 1
        return TaskExecutorActor.options(
            num_cpus=0, max_concurrency=32, runtime_env=runtime_env, scheduling_strategy="SPREAD"
        ).remote()

    async def prewarm(self, count: int, runtime_env: Optional[dict] = None) -> int:
        """Start executors until ``count`` idle ones (in ``runtime_env``) are ready; returns the idle count."""
        key = _env_key(runtime_env)
        self._runtime_envs[key] = runtime_env
        idle = self._idle.setdefault(key, [])
        handles = [self._create(runtime_env) for _ in range(max(0, count - len(idle)))]
        locations = await asyncio.gather(*[h.location.remote() for h in handles])
        idle.extend(zip(handles, locations))
        return len(idle)

    async def lease(self, job_id: str, count: int, runtime_env: Optional[dict] = None) -> list:
        """``count`` executors for job ``job_id``: ``[(handle, location)]``, idle ones first
        (waiting for executors being reset), new ones for the rest."""
        key = _env_key(runtime_env)
        self._runtime_envs[key] = runtime_env
        idle = self._idle.setdefault(key, [])
        if len(idle) < count and self._resetting:
            await asyncio.wait(set(self._resetting), timeout=RESET_TIMEOUT_S * 2)
        taken, self._idle[key] = idle[:count], idle[count:]
        if taken:  # an idle executor may have died meanwhile: check while the new ones start
            alive = await asyncio.gather(*[h.location.remote() for h, _ in taken], return_exceptions=True)
            lost = sum(isinstance(a, BaseException) for a in alive)
            self.counters["lost"] += lost
            taken = [(h, a) for (h, _), a in zip(taken, alive) if not isinstance(a, BaseException)]
        self.counters["reused"] += len(taken)
        handles = [self._create(runtime_env) for _ in range(count - len(taken))]
        locations = await asyncio.gather(*[h.location.remote() for h in handles])
        leased = taken + list(zip(handles, locations))
        self._leased.setdefault(job_id, []).extend((h, key) for h, _ in leased)
        self._locations.update((h._actor_id.hex(), location) for h, location in leased)
        self.counters["jobs"] += 1
        return leased

    async def release(self, job_id: str, handles: list) -> int:
        """Take back executors of job ``job_id`` (all of its leased ones when ``handles`` is
        empty): each is reset in the background, then pooled or killed. Returns at once."""
        leased = self._leased.get(job_id, [])
        ids = {h._actor_id for h in handles} if handles else None
        back = [(h, k) for h, k in leased if ids is None or h._actor_id in ids]
        self._leased[job_id] = [(h, k) for h, k in leased if ids is not None and h._actor_id not in ids]
        if not self._leased[job_id]:
            del self._leased[job_id]
        for handle, key in back:
            self._locations.pop(handle._actor_id.hex(), None)
            task = asyncio.ensure_future(self._reset(handle, key))
            self._resetting.add(task)
            task.add_done_callback(self._resetting.discard)
        return len(back)

    async def _reset(self, handle: Any, key: str) -> None:
        try:
            report = await handle.reset.remote(RESET_TIMEOUT_S)
        except Exception:  # noqa: BLE001 - the executor is gone (a failover's lost actor)
            self.counters["lost"] += 1
            return
        self.resets_seen += 1
        report = dict(report, actor_id=handle._actor_id.hex(), seq=self.resets_seen)
        self.last_resets = (self.last_resets + [report])[-64:]
        idle = self._idle.setdefault(key, [])
        if report.get("clean") and sum(len(v) for v in self._idle.values()) < self.pool_size:
            location = {k: report[k] for k in ("node_id", "pid") if k in report}
            idle.append((handle, location or None))
            return
        self.counters["discarded"] += 1
        ray.kill(handle, no_restart=True)

    async def wait_idle(self, timeout: float = 30.0) -> int:
        """Wait for released executors to be reset; returns the idle count."""
        if self._resetting:
            await asyncio.wait(set(self._resetting), timeout=timeout)
        return sum(len(v) for v in self._idle.values())

    def leased_locations(self, job_id: str) -> list[dict]:
        """Where job ``job_id``'s executors run: ``{"node_id", "pid"}`` each (what an operator
        needs to find, or a failover test to kill, a job's TaskExecutor processes)."""
        return [self._locations.get(h._actor_id.hex()) or {} for h, _ in self._leased.get(job_id, [])]

    def idle_actor_ids(self) -> list[str]:
        return [h._actor_id.hex() for v in self._idle.values() for h, _ in v]

    def status(self) -> dict:
        return {
            "name": SESSION_NAME,
            "namespace": SESSION_NAMESPACE,
            "uptimeS": round(time.time() - self.started, 1),
            "poolSize": self.pool_size,
            "idle": sum(len(v) for v in self._idle.values()),
            "leased": {job: len(v) for job, v in self._leased.items()},
            "resetting": len(self._resetting),
            **self.counters,
            "resets": self.resets_seen,
            **self.info,
        }

    def reset_reports(self, since: int = 0) -> list[dict]:
        """The last 64 resets' reports numbered above ``since`` (each has its ``seq``)."""
        return [r for r in self.last_resets if r["seq"] > since]

    async def shutdown(self) -> int:
        """Kill every executor (idle, leased, resetting); returns how many."""
        handles = [h for v in self._idle.values() for h, _ in v] + [h for v in self._leased.values() for h, _ in v]
        for task in list(self._resetting):
            task.cancel()
        self._idle.clear()
        self._leased.clear()
        for handle in handles:
            try:
                ray.kill(handle, no_restart=True)
            except Exception:  # noqa: BLE001 - already gone
                pass
        return len(handles)


# -- driver side -------------------------------------------------------------------------------------
def find_session() -> Optional[Any]:
    """The running session cluster's actor handle on the connected Ray, else None."""
    try:
        return ray.get_actor(SESSION_NAME, namespace=SESSION_NAMESPACE)
    except ValueError:
        return None


__all__ = [
    "SESSION_NAME",
    "SESSION_NAMESPACE",
    "SessionClusterActor",
    "find_session",
]
