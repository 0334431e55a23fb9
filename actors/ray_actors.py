"""The Ray actor classes: thin wrappers over the plain runtime classes.

``TaskExecutorActor`` is a threaded actor (control calls, the transport's
``receive_buffers`` / ``add_credit`` / ``request_partition`` and the JobMaster's
long poll run concurrently) around a :class:`TaskExecutor` and its
:class:`~raylink.actors.ray_transport.RayTransport`.

Every TaskExecutor actor is named ``<job id>/<executor id>`` in the ``raylink``
namespace (:func:`task_executor_actor_name`), so an admin command in another
process finds a running job's executors (:func:`find_task_executors`, used by
``raylink debug memory``) and :func:`memory_reports` asks them what their memory holds.
A session cluster's pooled executors (:mod:`raylink.actors.session_cluster`) are
unnamed: ``bind`` gives one to a job, ``reset`` takes it back and reports whether
anything of that job is left.
"""

from __future__ import annotations

import time
import weakref
from typing import Any, Optional

import cloudpickle
import ray

from raylink.actors.ray_transport import RayTransport
from raylink.core.options import RaylinkOptions, read_option
from raylink.operators import print_channel
from raylink.runtime.hardware import hardware_description
from raylink.runtime.job.deployment import load_big_data
from raylink.runtime.memory_report import trim_heap
from raylink.runtime.process_tuning import NodeCpuRegistry, tune_gc, tune_switch_interval
from raylink.runtime.task.task_executor import NetworkSettings, TaskExecutor, wait_unreachable

#: the Ray namespace of the named TaskExecutor actors
TASK_EXECUTOR_NAMESPACE = "raylink"


def task_executor_actor_name(job_id: str, executor_id: str) -> str:
    """The Ray actor name of TaskExecutor ``executor_id`` of job ``job_id``."""
    return f"{job_id}/{executor_id}"


def find_task_executors(job_id: str, timeout: float = 10.0) -> dict[str, Any]:
    """``{executor id: actor handle}`` of the running job whose id is (or starts with) ``job_id``.

    Every named TaskExecutor is asked whom it serves: an actor is named after the job that
    started it, and a program's warm executors serve its later jobs too
    (:mod:`raylink.actors.warm_executors`). Raises ``LookupError`` naming the running jobs
    when none, or several, match."""
    handles = [
        ray.get_actor(a["name"], namespace=TASK_EXECUTOR_NAMESPACE)
        for a in ray.util.list_named_actors(all_namespaces=True)
        if a.get("namespace") == TASK_EXECUTOR_NAMESPACE and "/" in a.get("name", "")
    ]
    refs = {h.serves.remote(): h for h in handles}
    ready, _ = ray.wait(list(refs), num_returns=len(refs), timeout=timeout) if refs else ([], [])
    served: dict[str, dict] = {}
    for ref in ready:
        try:
            job, executor = ray.get(ref)
        except Exception:  # noqa: BLE001 - an executor that ended meanwhile
            continue
        if job:  # an idle warm executor serves none
            served.setdefault(job, {})[executor] = refs[ref]
    jobs = sorted(served)
    matching = [j for j in jobs if j.startswith(job_id)] if job_id else []
    if len(matching) != 1:
        known = ", ".join(jobs) or "none"
        why = "no running job" if not matching else f"{len(matching)} running jobs"
        raise LookupError(f"{why} with id {job_id!r} on this Ray cluster (running jobs: {known})")
    return dict(sorted(served[matching[0]].items()))


def memory_reports(
    handles: dict, top: int = 20, tracemalloc: bool = False, timeout: Optional[float] = 60.0
) -> list[dict]:
    """Each executor's ``TaskExecutor.memory_report`` (those that answer within ``timeout``)."""
    refs = {h.memory_report.remote(top, tracemalloc): e for e, h in handles.items()}
    ready, _ = ray.wait(list(refs), num_returns=len(refs), timeout=timeout)
    out = []
    for ref in ready:
        try:
            out.append(ray.get(ref))
        except Exception as exc:  # noqa: BLE001 - an executor that ended meanwhile
            out.append({"executor": refs[ref], "error": f"{type(exc).__name__}: {exc}"})
    return sorted(out, key=lambda r: r.get("executor", ""))


def trim_heaps(handles: dict, timeout: float) -> dict:
    """``malloc_trim`` in every executor: ``{executor: RSS change in bytes}`` (those that answer
    within ``timeout``)."""
    refs = {h.trim_heap.remote(): e for e, h in handles.items()}
    ready, _ = ray.wait(list(refs), num_returns=len(refs), timeout=timeout)
    out = {}
    for ref in ready:
        try:
            out[refs[ref]] = ray.get(ref)
        except Exception:  # noqa: BLE001 - an executor that ended meanwhile
            pass
    return out


@ray.remote
class TaskExecutorActor:
    """One TaskExecutor process. A per-job executor is built for its job; a session cluster's
    pooled executor (built with no settings) is ``bind``-ed to each job it serves and ``reset``
    when the job lets it go."""

    def __init__(
        self,
        executor_id: str = "pooled",
        settings: Optional[dict] = None,
        max_batch_bytes: int = RaylinkOptions.MAX_BATCH_BYTES.default,
        job_id: str = "",
    ) -> None:
        self._printed = print_channel.install()  # print() sinks' lines go to the driver (next_events)
        self.job_id = job_id  # the job served ("": none, pooled)
        self._bind(executor_id, settings or {}, max_batch_bytes, freeze=True)

    def _bind(self, executor_id: str, settings: dict, max_batch_bytes: int, freeze: bool = False) -> None:
        # a pooled executor freezes only what it imported, never a previous job's objects
        tune_gc(read_option(settings, RaylinkOptions.GC_THRESHOLD), freeze)
        tune_switch_interval(float(read_option(settings, RaylinkOptions.SWITCH_INTERVAL)))
        network = NetworkSettings(settings)
        self.transport = RayTransport(
            executor_id,
            self._partition,
            buffer_size=network.buffer_size,
            max_batch_bytes=max_batch_bytes,
            max_batch_delay_ms=float(read_option(settings, RaylinkOptions.MAX_BATCH_DELAY)),
            max_calls_in_flight=int(read_option(settings, RaylinkOptions.MAX_CALLS_IN_FLIGHT)),
        )
        self.te = TaskExecutor(executor_id, network, self.transport)
        self._pin = bool(read_option(settings, RaylinkOptions.TASK_MANAGER_PIN_TASK_THREADS))

    def _partition(self, partition_id: str) -> Any:
        return self.te.partitions[partition_id]

    # -- session cluster pool ---------------------------------------------------------------
    def bind(self, executor_id: str, settings: dict, max_batch_bytes: int, peers: dict, job_id: str = "") -> dict:
        """Serve job ``job_id`` as ``executor_id`` (a pooled executor, reset): a new TaskExecutor
        and transport with the job's settings and peers; returns :meth:`location`."""
        if self.te.tasks:
            raise RuntimeError(
                f"TaskExecutor {self.te.executor_id} still hosts tasks "
                f"({len(self.te.tasks)}): reset it before binding it to another job"
            )
        self.job_id = job_id
        self._bind(executor_id, settings, max_batch_bytes)
        self.transport.register_peers(peers)
        self._printed.take()  # print() lines a previous job left (it was cancelled) are not this job's
        return self.location()

    def reset(self, timeout: float = 5.0) -> dict:
        """Back to the pool: the previous job's tasks, state, threads, buffers and transport
        connections dropped; the report (``TaskExecutor.reset``'s, plus ``connections``) says
        whether anything is left (``clean``)."""
        report = self.te.reset(timeout)
        self.job_id = ""
        if self.te.task_cpus is not None:
            NodeCpuRegistry().release()  # the next job decides again (a new TaskExecutor)
        report["previous"]["connections"] = len(self.transport.peers)
        self.transport.close()
        old = [weakref.ref(self.te), weakref.ref(self.transport)]
        self._bind("pooled", {}, RaylinkOptions.MAX_BATCH_BYTES.default)
        # a long poll of the previous job (next_events, take_collected) may still hold the old
        # executor for a moment: it was woken by the reset, wait for it to return
        alive = wait_unreachable(old, time.monotonic() + timeout)
        report["connections"] = alive  # the previous executor and its transport are unreachable
        report["clean"] = report["clean"] and not alive
        report.update(self.location())
        return report

    def serves(self) -> tuple[str, str]:
        """``(job id, executor id)`` of the job this executor serves (``""`` for none)."""
        return self.job_id, self.te.executor_id

    # -- control (JobMaster) ------------------------------------------------------------------
    def location(self) -> dict:
        """Where this TaskExecutor runs and its hardware (Flink's ``HardwareDescription``,
        read when it registers with a job)."""
        ctx = ray.get_runtime_context()
        import os

        return {
            "node_id": ctx.get_node_id(),
            "host": ray.util.get_node_ip_address(),
            "pid": os.getpid(),
            "hardware": hardware_description(),
        }

    def register_peers(self, peers: dict) -> None:
        self.transport.register_peers(peers)

    def deploy(self, descriptors: list) -> list:
        """Deploy a call's descriptors; what the JobMaster offloaded (``ray.put``: group
        descriptors shared by many subtasks) is fetched once per call (one ``ray.get``)."""
        load_big_data(descriptors, ray.get)
        if self._pin and self.te.task_cpus is None and len(self.te.tasks) + len(descriptors) >= 2:
            self.te.task_cpus = NodeCpuRegistry().claim()  # its task threads take turns on the GIL anyway
        return [self.te.deploy(tdd) for tdd in descriptors]

    def start(self) -> None:
        self.te.start()

    def cancel(self) -> None:
        self.te.cancel()

    # records and accumulators go back pickled by the same cloudpickle that shipped the user's
    # code: a class defined in the job's ``__main__`` then comes back as the driver's own class
    def next_events(self, timeout: float) -> bytes:
        """``(task events, printed chunks)``: the events taken first, so every line a task printed
        before it reported comes with that report or before it (the driver writes it first)."""
        events = self.te.next_events(timeout)
        return cloudpickle.dumps((events, self._printed.take()))

    def take_collected(self, timeout: float, attempt_ids: Optional[list] = None) -> bytes:
        # each sink's records as bytes of their own (the collect buffer encoded them batch by
        # batch: shuffle.collect_codec): a Dispatcher passes them on as they are
        taken = self.te.take_collected(timeout, attempt_ids)
        return cloudpickle.dumps(
            [
                (a, c, records if type(records) is bytes or not records else cloudpickle.dumps(records), closed)
                for a, c, records, closed in taken
            ]
        )

    def trigger_checkpoint(self, checkpoint_id: int, timestamp: int, stop: Optional[str] = None) -> None:
        self.te.trigger_checkpoint(checkpoint_id, timestamp, stop)

    def notify_checkpoint(self, checkpoint_id: int, complete: bool) -> None:
        self.te.notify_checkpoint(checkpoint_id, complete)

    def metrics(self) -> list:
        return self.te.metrics()

    def stats(self) -> dict:
        return self.te.stats()

    def memory_report(self, top: int = 20, tracemalloc: bool = False) -> dict:
        return self.te.memory_report(top, tracemalloc)

    def trim_heap(self) -> Any:
        """``malloc_trim``: free heap pages back to the OS; the RSS change in bytes (None: not glibc)."""
        return trim_heap()

    def shutdown(self) -> None:
        self.te.shutdown()

    # -- transport (other TaskExecutors): no task events, they would cost the GCS a report per call --
    @ray.method(enable_task_events=False)
    def request_partition(
        self, consumer_id: str, channel_id: str, partition_id: str, subpartition_index: int, initial_credit: int
    ) -> None:
        self.transport.request_partition(consumer_id, channel_id, partition_id, subpartition_index, initial_credit)

    @ray.method(enable_task_events=False)
    def receive_buffers(self, producer_id: str, seq: int, batch: list) -> None:
        self.transport.receive_buffers(producer_id, seq, batch)

    @ray.method(enable_task_events=False)
    def add_credit(self, consumer_id: str, credits: list) -> None:
        self.transport.add_credit(consumer_id, credits)

    @ray.method(enable_task_events=False)
    def set_buffer_size(self, consumer_id: str, sizes: list) -> None:
        self.transport.set_buffer_size(consumer_id, sizes)
