"""Flink's ``TaskExecutor``: hosts StreamTasks, owns the network buffers and the transport.

A plain class, so the in-process executor and tests drive it directly; the Ray
actor in :mod:`raylink.actors.ray_actors` is a thin wrapper. ``deploy`` builds a
subtask's result partitions, record writers and input gates (a
``LocalInputChannel`` when the producer lives here, a credit-based remote
channel through the transport otherwise); ``start`` requests the partitions and
starts the task thread. What the tasks report (:mod:`raylink.runtime.task.task_events`: final
states, checkpoint acknowledgements and declines) goes straight to the JobMaster's
``on_task_event`` when it runs in this process, else is queued for its long poll
(``next_events``). Thread-safe: tasks report from their own threads. ``reset`` (a
session cluster's pooled executor between two jobs) drops every task and verifies
that nothing of them is left.
"""

from __future__ import annotations

import gc
import threading
import time
import weakref
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Collection, Optional

import cloudpickle

from raylink.core.options import NettyShuffleEnvironmentOptions, RaylinkOptions, TaskManagerOptions, read_option
from raylink.operators.collect import CollectBuffer
from raylink.runtime.client.job_result import collect_ids
from raylink.runtime.execution_state import ExecutionState
from raylink.runtime.job.deployment import TaskDeploymentDescriptor
from raylink.runtime.memory_report import process_memory_report
from raylink.runtime.task.stream_task import StreamTask
from raylink.runtime.task.task_events import (
    AcknowledgeCheckpoint,
    DeclineCheckpoint,
    FinalCheckpointRequest,
    TaskEvent,
    TaskStateEvent,
    portable_error,
)
from raylink.shuffle.buffer_debloater import BufferDebloater, DebloatSettings
from raylink.shuffle.buffer_pool import NetworkBufferPool
from raylink.shuffle.credit import create_floating_pool
from raylink.shuffle.input_gate import InputGate, LocalInputChannel, StreamTaskNetworkInput, UnionInputGate
from raylink.shuffle.partitioners import create_partitioner
from raylink.shuffle.record_writer import RecordWriter
from raylink.shuffle.result_partition import ResultPartition
from raylink.state.checkpoint_storage import read_state_handle
from raylink.state.state_backend_loader import bind_shared_files, materialize_snapshot

#: how long a remote take of collected records waits for more once some are queued (see take_collected):
#: Flink's default buffer timeout. A remote answer costs 1-2 ms of CPU on each side, so a fast stream
#: is answered in few large takes (at half a buffer's bound) and a slow one within this delay
COLLECT_LINGER_S = 0.1


def process_memory() -> dict:
    """This process's resident set now and at its peak, in bytes (Linux; peak only elsewhere)."""
    import resource
    import sys

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    out = {"peakRssBytes": peak if sys.platform == "darwin" else peak * 1024}
    try:
        with open("/proc/self/statm") as f:
            out["rssBytes"] = int(f.read().split()[1]) * resource.getpagesize()
    except (OSError, ValueError, IndexError):
        pass
    return out


def _queued(channel: Any) -> int:
    """Buffers and events queued in an input channel: a remote channel's received deque, a
    local channel's subpartition backlog."""
    received = getattr(channel, "_received", None)
    if received is not None:
        return len(received)
    subpartition = getattr(channel, "subpartition", None)
    return subpartition.backlog if subpartition is not None else 0


def wait_unreachable(refs: list, deadline: float) -> int:
    """Collect garbage until every object behind the weak references ``refs`` is gone or
    ``deadline`` (``time.monotonic()``) passes; returns how many are still alive. Waits on the
    objects' finalization (a weak reference callback), never a fixed sleep."""
    gone = threading.Event()
    watched = [weakref.ref(r(), lambda _r: gone.set()) for r in refs if r() is not None]
    while True:
        gc.collect()
        alive = sum(r() is not None for r in watched)
        if not alive or time.monotonic() > deadline:
            return alive
        gone.clear()
        gone.wait(0.05)


class NetworkSettings:
    """Flink's network options (``NettyShuffleEnvironmentConfiguration``), read through the
    options registry from a ``Configuration``, a plain dict of settings, or ``None`` (defaults)."""

    def __init__(self, conf: Any = None) -> None:
        net = NettyShuffleEnvironmentOptions
        # unchecked: the runtime runs with segments below Flink's 4kb minimum (the CLI refuses them)
        self.buffer_size = read_option(conf, TaskManagerOptions.MEMORY_SEGMENT_SIZE, validate=False)
        self.num_buffers = read_option(conf, net.NETWORK_NUM_BUFFERS)
        self.buffers_per_channel = read_option(conf, net.NETWORK_BUFFERS_PER_CHANNEL)
        self.floating_per_gate = read_option(conf, net.NETWORK_EXTRA_BUFFERS_PER_GATE)
        self.debloat = DebloatSettings(
            enabled=read_option(conf, net.BUFFER_DEBLOAT_ENABLED),
            target_ms=read_option(conf, net.BUFFER_DEBLOAT_TARGET),
            period_ms=read_option(conf, net.BUFFER_DEBLOAT_PERIOD),
            samples=read_option(conf, net.BUFFER_DEBLOAT_SAMPLES),
            threshold_percentages=read_option(conf, net.BUFFER_DEBLOAT_THRESHOLD_PERCENTAGES),
            max_size=self.buffer_size,
            initial_size=read_option(conf, RaylinkOptions.DEBLOAT_INITIAL_SIZE),
        )

    def output_pool_size(self, num_subpartitions: int) -> tuple[int, int]:
        """(min, max) buffers of a result partition's pool, as Flink sizes it."""
        return (
            num_subpartitions + 1,
            num_subpartitions * self.buffers_per_channel + self.floating_per_gate,
        )


class TaskExecutor:
    """The tasks of one process (Flink's TaskExecutor / TaskManager)."""

    def __init__(
        self,
        executor_id: str,
        settings: Optional[NetworkSettings] = None,
        transport: Any = None,
        num_slots: int = 1,
        on_task_event: Optional[Callable[[TaskEvent], None]] = None,
        task_cpus: Optional[frozenset] = None,
    ) -> None:
        self.executor_id = executor_id
        #: the CPUs every task thread runs on (None: any)
        self.task_cpus = task_cpus
        self.settings = settings or NetworkSettings()
        self.num_slots = num_slots
        self.network_pool = NetworkBufferPool(self.settings.num_buffers, self.settings.buffer_size)
        self.transport = transport
        self.partitions: dict[str, ResultPartition] = {}
        self.tasks: dict[str, StreamTask] = {}
        self._gates: dict[str, list] = {}
        self._events: list[TaskEvent] = []
        self._events_cond = threading.Condition()
        #: the JobMaster's callback when it runs in this process (else events queue for next_events)
        self._on_task_event = on_task_event
        # execute_and_collect: attempt id -> {collect id: buffer}, until the reader saw it closed
        self._collect_cond = threading.Condition()
        self._collect_buffers: dict[str, dict[str, CollectBuffer]] = {}
        #: attempt id -> [start, end] epoch ms on this process's clock: when the task thread was
        #: started and when it reached its final state (the REST API's subtask start/end-time)
        self._task_times: dict[str, list] = {}
        # the asynchronous phase of checkpoints: serialise and write snapshots off the task threads
        self._checkpoint_writer = ThreadPoolExecutor(1, thread_name_prefix=f"checkpoint writer {executor_id}")
        #: the threads alive before any task ran: a reset checks that every other one ended
        self._baseline_threads = set(threading.enumerate())

    # -- deployment ------------------------------------------------------------------------------
    def deploy(self, tdd: TaskDeploymentDescriptor) -> str:
        settings = self.settings
        writers: dict[str, RecordWriter] = {}
        for rpdd in tdd.produced_partitions:
            low, high = settings.output_pool_size(rpdd.num_subpartitions)
            if self.transport is not None:
                high += self.transport.extra_output_buffers()
            partition = ResultPartition(
                rpdd.num_subpartitions,
                rpdd.partition_type,
                self.network_pool.create_buffer_pool(low, high),
                rpdd.partition_id,
            )
            self.partitions[rpdd.partition_id] = partition
            writers[rpdd.edge_id] = RecordWriter(
                partition,
                create_partitioner(rpdd.partitioner, max_parallelism=rpdd.target_max_parallelism),
                buffer_timeout_ms=rpdd.buffer_timeout,
                buffer_size=settings.buffer_size,
                name=f"{tdd.job_vertex.name} -> {rpdd.target_name}",
                flat_records=rpdd.flat_records,
            )
            # readers placed on this executor (all of them, on the local target) are task threads
            # of this process
            writers[rpdd.edge_id].hand_over_objects(
                i for i, consumer in enumerate(rpdd.consumer_executors) if consumer == self.executor_id
            )
            if self.transport is not None and settings.debloat.enabled:
                # buffers for other executors start small, before the consumer's partition
                # request arrives; its debloater resizes them from its first measurement
                for index, consumer in enumerate(rpdd.consumer_executors):
                    if consumer != self.executor_id:
                        partition.subpartitions[index].set_buffer_size(settings.debloat.initial_size)
        gates_by_input: dict[int, list[InputGate]] = {}
        debloat = settings.debloat if settings.debloat.enabled else None
        for gdd in tdd.input_gates:
            floating_pool = None
            channels = []
            remote = []
            for cdd in gdd.channels:
                if cdd.producer_executor == self.executor_id:
                    subpartition = self.partitions[cdd.partition_id].subpartitions[cdd.subpartition_index]
                    channels.append(LocalInputChannel(subpartition))
                    continue
                if self.transport is None:
                    raise RuntimeError(
                        f"task {tdd.task_name}: producer on executor {cdd.producer_executor} "
                        "but this TaskExecutor has no network transport"
                    )
                if floating_pool is None:
                    floating = max(
                        settings.floating_per_gate, self.transport.min_floating_buffers(settings.buffers_per_channel)
                    )
                    floating_pool = create_floating_pool(self.network_pool, floating)
                remote.append(
                    self.transport.create_input_channel(
                        cdd.producer_executor,
                        cdd.partition_id,
                        cdd.subpartition_index,
                        floating_pool,
                        settings.buffers_per_channel,
                        self.network_pool,
                    )
                )
                channels.append(remote[-1])
            gate = InputGate(channels)
            if remote and debloat:  # Flink's buffer debloating, for the remote channels of the gate
                gate.debloater = BufferDebloater(
                    debloat, len(remote) * settings.buffers_per_channel + (floating_pool.max_buffers or 0)
                )
                gate.debloated_channels = remote
            gates_by_input.setdefault(max(gdd.type_number, 1), []).append(gate)
        inputs = []
        all_gates = []
        for index in sorted(gates_by_input):
            gates = gates_by_input[index]
            all_gates.extend(gates)
            gate = gates[0] if len(gates) == 1 else UnionInputGate(gates)
            inputs.append(StreamTaskNetworkInput(gate, index - 1))
        accumulators = self._create_collect_buffers(tdd)
        task = StreamTask(
            tdd.job_vertex,
            tdd.subtask_index,
            writers,
            inputs,
            attempt_number=tdd.attempt_number,
            accumulators=accumulators,
            on_state_change=self._on_state_change,
            job_parameters=tdd.job_parameters,
            buffer_size=settings.buffer_size,
            restore=self._load_restore(tdd),
            checkpoint_sink=self._checkpoint_sink if tdd.checkpoint_storage is not None else None,
            attempt_id=tdd.attempt_id,
            checkpoint_storage=tdd.checkpoint_storage,
            cpus=self.task_cpus,
        )
        self.tasks[tdd.attempt_id] = task
        self._gates[tdd.attempt_id] = all_gates
        return tdd.attempt_id

    # -- checkpoints -------------------------------------------------------------------------------
    @staticmethod
    def _load_restore(tdd: TaskDeploymentDescriptor) -> Optional[dict]:
        """The snapshots of every old subtask of each of the task's operators (state loading)."""
        if not tdd.restore_handles:
            return None
        storage = tdd.checkpoint_storage  # None: a savepoint restored without checkpointing
        read = storage.read_state if storage is not None else read_state_handle
        restore = {}
        for operator_id, by_subtask in tdd.restore_handles.items():
            if by_subtask:
                count = max(by_subtask) + 1
                restore[operator_id] = [
                    bind_shared_files(cloudpickle.loads(read(by_subtask[i])), by_subtask[i])
                    if i in by_subtask
                    else None
                    for i in range(count)
                ]
        return restore

    def _checkpoint_sink(self, task: StreamTask, checkpoint_id: int, snapshots: Optional[dict], stats: dict) -> None:
        """Task thread: write ``snapshots`` off the task thread (Flink's asynchronous phase), then
        acknowledge to the JobMaster; ``snapshots`` None declines."""
        if stats.get("final_checkpoint_requested"):
            self._report(FinalCheckpointRequest(task.attempt_id))
            return
        if snapshots is None:
            self._decline(task, checkpoint_id, stats.get("declined", "declined"))
            return
        self._checkpoint_writer.submit(self._write_snapshot, task, checkpoint_id, snapshots, stats)

    def _write_snapshot(self, task: StreamTask, checkpoint_id: int, snapshots: dict, stats: dict) -> None:
        started = time.perf_counter()
        storage = task.checkpoint_storage
        handles: dict = {}
        size = 0
        for operator_id, snapshot in snapshots.items():
            name = next((c.operator_name for c in task.job_vertex.chain if c.operator_id == operator_id), operator_id)
            try:
                snapshot, shared, uploaded = materialize_snapshot(snapshot, storage, checkpoint_id)
                data = cloudpickle.dumps(snapshot)
            except Exception as exc:
                self._decline(
                    task,
                    checkpoint_id,
                    f"the state of operator '{name}' in task {task.name} "
                    f"cannot be serialised: {type(exc).__name__}: {exc}",
                )
                return
            try:
                handles[operator_id] = {
                    task.subtask_index: storage.write_state(
                        checkpoint_id, operator_id, task.subtask_index, data, shared=shared
                    )
                }
            except Exception as exc:
                self._decline(task, checkpoint_id, f"task {task.name} could not write its state: {exc}")
                return
            size += len(data) + uploaded
        stats = dict(stats, async_ms=(time.perf_counter() - started) * 1000.0, size=size)
        self._report(AcknowledgeCheckpoint(task.attempt_id, checkpoint_id, handles, stats))

    def trigger_checkpoint(self, checkpoint_id: int, timestamp: int, stop: Optional[str] = None) -> None:
        """The JobMaster's trigger: the source tasks here inject barrier ``checkpoint_id``, and
        so do tasks waiting for their final checkpoint with every input ended; ``stop`` makes it
        a stop-with-savepoint (``StreamTask.trigger_checkpoint``)."""
        for task in self.tasks.values():
            task.trigger_checkpoint(checkpoint_id, timestamp, stop)

    def notify_checkpoint(self, checkpoint_id: int, complete: bool) -> None:
        for task in self.tasks.values():
            task.notify_checkpoint(checkpoint_id, complete)

    def _decline(self, task: StreamTask, checkpoint_id: int, reason: str) -> None:
        self._report(DeclineCheckpoint(task.attempt_id, checkpoint_id, reason))

    def _report(self, event: TaskEvent) -> None:
        """To the JobMaster: directly (in-process executor), else queued for its long poll."""
        if self._on_task_event is not None:
            self._on_task_event(event)
            return
        with self._events_cond:
            self._events.append(event)
            self._events_cond.notify_all()

    def _create_collect_buffers(self, tdd: TaskDeploymentDescriptor) -> dict:
        """Bounded buffers for the task's ``execute_and_collect`` sinks (its accumulators)."""
        limit = read_option(tdd.job_parameters, RaylinkOptions.COLLECT_MAX_BUFFERED_RECORDS)
        encode = self.transport is not None  # the reader is in another process: it gets bytes
        buffers = {cid: CollectBuffer(self._collect_cond, limit, encode) for cid in collect_ids(tdd.job_vertex)}
        if buffers:
            self._collect_buffers[tdd.attempt_id] = buffers
        return dict(buffers)

    def start(self, attempt_ids: Optional[list[str]] = None) -> None:
        ids = list(self.tasks) if attempt_ids is None else attempt_ids
        for attempt_id in ids:
            for gate in self._gates[attempt_id]:
                gate.request_partitions()
        for attempt_id in ids:
            self._task_times[attempt_id] = [int(time.time() * 1000), -1]
            self.tasks[attempt_id].start()

    def cancel(self, attempt_ids: Optional[list[str]] = None) -> None:
        for attempt_id in list(self.tasks) if attempt_ids is None else attempt_ids:
            task = self.tasks.get(attempt_id)
            if task is not None:
                task.cancel()
            for buffer in self._collect_buffers.get(attempt_id, {}).values():
                buffer.release()  # a sink blocked on its reader gives way to the cancel

    # -- state reporting ---------------------------------------------------------------------------
    def _on_state_change(self, task: StreamTask, state: ExecutionState, error: Optional[BaseException]) -> None:
        if not state.is_terminal():
            return
        times = self._task_times.get(task.attempt_id)
        if times is not None:
            times[1] = int(time.time() * 1000)
        finished = state is ExecutionState.FINISHED
        if not finished:  # give back the buffers of channels that will never end
            for gate in self._gates.get(task.attempt_id, []):
                gate.release()
        accumulators = dict(task.accumulators) if finished else {}
        for collect_id, buffer in self._collect_buffers.get(task.attempt_id, {}).items():
            # what the reader has not taken yet (at most one bound) travels with the report
            remaining = buffer.close()
            if finished:
                accumulators[collect_id] = remaining
        self._report(
            TaskStateEvent(
                task.attempt_id, task.name, state, portable_error(error), accumulators, self._task_metrics(task)
            )
        )

    def next_events(self, timeout: float = 1.0) -> list[TaskEvent]:
        """Long poll: task state changes since the last call."""
        with self._events_cond:
            if not self._events:
                self._events_cond.wait(timeout)
            events, self._events = self._events, []
        return events

    def _collect_buffers_of(self, attempt_ids: Optional[Collection[str]]) -> list:
        """``(attempt id, {collect id: buffer})`` of ``attempt_ids`` (every attempt's when None)."""
        return [(a, bs) for a, bs in self._collect_buffers.items() if attempt_ids is None or a in attempt_ids]

    def _wait_for_collected(self, timeout: float, attempt_ids: Optional[Collection[str]] = None) -> None:
        """(holding the collect condition) Until a sink closed, half a buffer's bound is queued,
        :data:`COLLECT_LINGER_S` passed since the first queued record, or ``timeout``: one answer
        then carries thousands of records (a remote call costs milliseconds of CPU on each side).
        Without a transport the reader is a thread of this process: it gets records at once."""
        linger = COLLECT_LINGER_S if self.transport is not None else 0.0
        deadline = time.monotonic() + timeout
        since = None
        while True:
            buffers = [b for _, bs in self._collect_buffers_of(attempt_ids) for b in bs.values()]
            now = time.monotonic()
            if not buffers:  # none yet, or reset: one wait, as a plain long poll
                self._collect_cond.wait(max(0.0, deadline - now))
                return
            queued = sum(len(b) for b in buffers)
            if any(b.closed or b.half_full() for b in buffers):
                return
            if queued and since is None:
                since = now
            until = deadline if since is None else min(deadline, since + linger)
            if until <= now:
                return
            self._collect_cond.wait(until - now)

    def take_collected(
        self, timeout: float = 1.0, attempt_ids: Optional[Collection[str]] = None
    ) -> list[tuple[str, str, list, bool]]:
        """Long poll of the ``execute_and_collect`` reader: ``(attempt id, collect id, records,
        closed)`` per collect sink with news. Taking frees room, so a blocked sink goes on.
        A closed sink is reported once; its last records travel with its task's report.
        ``attempt_ids`` limits it to those subtasks: a session's executor may run another job's
        sinks by the time a late take of the previous job reaches it."""
        with self._collect_cond:
            self._wait_for_collected(timeout, attempt_ids)
            buffers = self._collect_buffers
            out = []
            for attempt_id, by_id in self._collect_buffers_of(attempt_ids):
                closed_all = True
                for collect_id, buffer in by_id.items():
                    records, closed = buffer.take()
                    closed_all = closed_all and closed
                    if records or closed:
                        out.append((attempt_id, collect_id, records, closed))
                if closed_all:
                    del buffers[attempt_id]
            return out

    # -- metrics -----------------------------------------------------------------------------------
    def _task_metrics(self, task: StreamTask) -> dict:
        metrics = task.metrics()
        metrics["vertex_name"] = task.job_vertex.name
        times = self._task_times.get(task.attempt_id)
        if times is not None:
            metrics["startTime"], metrics["endTime"] = times
        metrics["executor"] = self.executor_id
        gates = self._gates.get(task.attempt_id, [])
        channels = [c for g in gates for c in g.channels if hasattr(c, "max_buffers_in_flight")]
        if channels:
            metrics["maxBuffersInFlightPerChannel"] = max(c.max_buffers_in_flight for c in channels)
            pool = channels[0].floating_pool
            metrics["creditPerChannel"] = channels[0].initial_credit + (pool.max_buffers or 0 if pool else 0)
            floating = [c.floating_pool for c in channels if c.floating_pool is not None]
            metrics["inPoolUsage"] = max((p.usage() for p in floating), default=0.0)
        debloaters = [g.debloater for g in gates if getattr(g, "debloater", None) is not None]
        if debloaters:  # Flink's debloatedBufferSize gauge
            metrics["debloatedBufferSize"] = min(d.buffer_size for d in debloaters)
        chain = getattr(task, "chain", None)
        if chain is not None and getattr(chain, "operators", None):  # Flink's current input/output watermark
            metrics["currentInputWatermark"] = chain.head.current_watermark
            metrics["currentOutputWatermark"] = chain.operators[-1].current_watermark
        metrics.update(process_memory())
        return metrics

    def metrics(self) -> list[dict]:
        return [self._task_metrics(t) for t in self.tasks.values()]

    def stats(self) -> dict:
        out = {
            "executor": self.executor_id,
            "tasks": len(self.tasks),
            "networkPoolUsage": self.network_pool.usage(),
            **process_memory(),
        }
        if self.transport is not None:
            out.update(self.transport.stats())
        return out

    def memory_report(self, top: int = 20, tracemalloc: bool = False) -> dict:
        """What this process's memory holds (:mod:`raylink.runtime.memory_report`: RSS, heap,
        Python objects by type, tracemalloc sites if ``tracemalloc`` or already tracing) plus
        this executor's network buffers in use, queued buffers per channel and state entries
        per operator (the figures a soak test follows over hours)."""
        out = {"executor": self.executor_id, "tasks": len(self.tasks), **process_memory_report(top, tracemalloc)}
        pool = self.network_pool
        out["networkBuffers"] = {
            "total": pool.total_buffers,
            "free": pool.free_buffers,
            "inUse": pool.total_buffers - pool.free_buffers,
        }
        channels: dict = {}
        state: dict = {}
        state_bytes: dict = {}
        for task in list(self.tasks.values()):
            inputs = [_queued(c) for g in self._gates.get(task.attempt_id, []) for c in g.channels]
            outputs = [s.backlog for w in task.record_writers.values() for s in w.partition.subpartitions]
            channels[task.name] = {"in": inputs, "out": outputs}
            chain = getattr(task, "chain", None)
            for name, operator in zip(getattr(chain, "names", ()), getattr(chain, "operators", ())):
                backend = getattr(operator, "keyed_state_backend", None)
                if backend is not None:
                    key = f"{name} {task.name.rsplit(' ', 1)[-1]}"
                    state[key] = backend.num_state_entries()
                    state_bytes[key] = backend.state_size_bytes()
        out["queuedBuffers"] = channels
        out["stateEntries"] = state
        out["stateBytes"] = state_bytes  # keyed state size per operator (heap: estimated)
        if self.transport is not None:
            out["transport"] = self.transport.stats()
        with self._events_cond:
            out["pendingEvents"] = len(self._events)
        return out

    # -- teardown ----------------------------------------------------------------------------------
    def join(self, timeout: Optional[float] = None) -> bool:
        return all(task.join(timeout) for task in self.tasks.values())

    def _release_gates(self) -> None:
        for gates in self._gates.values():
            for gate in gates:
                gate.release()

    def shutdown(self, timeout: float = 5.0) -> None:
        self.cancel()
        self.join(timeout)
        self.release_resources()
        if self.transport is not None:
            self.transport.close()

    def release_resources(self) -> None:
        """Free the result partitions' buffers and stop the checkpoint writer (tasks ended)."""
        for partition in self.partitions.values():
            partition.release()
        self._checkpoint_writer.shutdown(wait=False)

    def reset(self, timeout: float = 5.0) -> dict:
        """Make this executor as a new one (a session cluster's pool hands it to the next job):
        cancel and join the tasks, free every buffer, drop the tasks, partitions, gates, collect
        buffers and queued events, then verify and report what is left — ``tasks`` still
        registered, ``liveTasks`` (task objects, with their operators and state, still reachable
        after a collection), ``threads`` (names of threads started since this executor was built
        that are still alive after ``timeout``), ``buffersInUse`` of the network pool — and
        ``clean``, all of them zero. The previous job's figures come back as ``previous``."""
        deadline = time.monotonic() + timeout
        tasks = list(self.tasks.values())
        previous = {"tasks": len(tasks), "partitions": len(self.partitions)}
        refs = [weakref.ref(t) for t in tasks]
        self.cancel()
        self.join(max(0.0, deadline - time.monotonic()))
        self._release_gates()  # in a call of its own: no loop variable here keeps the last gate
        self.release_resources()
        if self.transport is not None:  # its channels lead to the tasks that read them
            self.transport.close()
        self.tasks.clear()
        self.partitions.clear()
        self._gates.clear()
        with self._collect_cond:  # long polls of the previous job's JobMaster return now
            self._collect_buffers.clear()
            self._collect_cond.notify_all()
        with self._events_cond:
            self._events.clear()
            self._events_cond.notify_all()
        del tasks
        leaked = [
            t
            for t in threading.enumerate()
            if t not in self._baseline_threads
            and not isinstance(t, threading._DummyThread)
            and t is not threading.current_thread()
        ]
        for thread in leaked:
            thread.join(max(0.0, deadline - time.monotonic()))
        self._checkpoint_writer = ThreadPoolExecutor(1, thread_name_prefix=f"checkpoint writer {self.executor_id}")
        # a call of the previous job still running on another actor thread (a checkpoint
        # trigger, a long poll) may hold a task for a moment after it was woken: wait for it
        live_tasks = wait_unreachable(refs, deadline)
        pool = self.network_pool
        report = {
            "executor": self.executor_id,
            "previous": previous,
            "tasks": len(self.tasks),
            "liveTasks": live_tasks,
            "threads": sorted(t.name for t in leaked if t.is_alive()),
            "buffersInUse": pool.total_buffers - pool.free_buffers,
        }
        report["clean"] = not (report["tasks"] or report["liveTasks"] or report["threads"] or report["buffersInUse"])
        return report
