"""``execution.target = "local"``: a whole job in this process — Flink's MiniCluster.

Builds the ExecutionGraph, one ``ResultPartition`` per produced partition (output
buffer pools carved from one ``NetworkBufferPool``), ``LocalInputChannel``s for
every consumed subpartition, and one ``StreamTask`` thread per subtask. The
first failing task fails the job and cancels the others; nothing outlives it.
"""

from __future__ import annotations

import threading
import time
import uuid
from typing import Any, Optional

from raylink.actors.job_result import (
    CloseableIterator,
    JobExecutionException,
    JobExecutionResult,
)
from raylink.actors.stream_task import CANCELED, FAILED, FINISHED, StreamTask
from raylink.graph.execution_graph import ExecutionGraph, ExecutionVertex, build_execution_graph
from raylink.shuffle.buffer_pool import NetworkBufferPool
from raylink.shuffle.input_gate import InputGate, LocalInputChannel, StreamTaskNetworkInput, UnionInputGate
from raylink.shuffle.partitioners import create_partitioner
from raylink.shuffle.record_writer import RecordWriter
from raylink.shuffle.result_partition import ResultPartition


def merge_accumulators(per_task: list[dict]) -> dict:
    """Lists are concatenated (subtask order), numbers summed, anything else: last wins."""
    merged: dict = {}
    for accumulators in per_task:
        for name, value in accumulators.items():
            if name not in merged:
                merged[name] = list(value) if isinstance(value, list) else value
            elif isinstance(value, list):
                merged[name].extend(value)
            elif isinstance(value, (int, float)) and isinstance(merged[name], (int, float)):
                merged[name] += value
            else:
                merged[name] = value
    return merged


class NetworkSettings:
    """Flink's network options, read from the job's configuration."""

    def __init__(self, conf: Any) -> None:
        self.buffer_size = conf.get_integer("taskmanager.memory.segment-size")
        self.num_buffers = conf.get_integer("taskmanager.network.numberOfBuffers")
        self.buffers_per_channel = conf.get_integer("taskmanager.network.memory.buffers-per-channel")
        self.floating_per_gate = conf.get_integer("taskmanager.network.memory.floating-buffers-per-gate")

    def output_pool_size(self, num_subpartitions: int) -> tuple[int, int]:
        """(min, max) buffers of a result partition's pool, as Flink sizes it."""
        return (
            num_subpartitions + 1,
            num_subpartitions * self.buffers_per_channel + self.floating_per_gate,
        )


def build_tasks(
    graph: ExecutionGraph,
    vertices: list[ExecutionVertex],
    settings: NetworkSettings,
    network_pool: NetworkBufferPool,
    partitions: dict[str, ResultPartition],
    on_state_change: Any,
    job_parameters: Optional[dict] = None,
) -> list[StreamTask]:
    """Create the partitions each vertex produces, then its task wired to local channels."""
    for ev in vertices:
        for produced in ev.produced_partitions:
            n = produced.number_of_subpartitions
            low, high = settings.output_pool_size(n)
            partitions[produced.partition_id] = ResultPartition(
                n,
                produced.result.result_partition_type,
                network_pool.create_buffer_pool(low, high),
                produced.partition_id,
            )
    tasks = []
    for ev in vertices:
        jv = ev.job_vertex.job_vertex
        buffer_timeouts = {c.node_id: c.buffer_timeout for c in jv.chain}
        writers: dict[str, RecordWriter] = {}
        for produced in ev.produced_partitions:
            edge = produced.result.data_set.stream_edge
            target = produced.result.data_set.consumers[0].target
            partitioner = create_partitioner(edge.partitioner, max_parallelism=target.max_parallelism)
            writers[edge.edge_id] = RecordWriter(
                partitions[produced.partition_id],
                partitioner,
                buffer_timeout_ms=buffer_timeouts.get(edge.source_id, 100),
                buffer_size=settings.buffer_size,
                name=f"{jv.name} -> {target.name}",
            )
        gates_by_input: dict[int, list[InputGate]] = {}
        for input_edges in ev.input_edges:
            if not input_edges:
                continue
            type_number = input_edges[0].job_edge.type_number
            channels = [
                LocalInputChannel(partitions[e.source.partition_id].subpartitions[e.subpartition_index])
                for e in input_edges
            ]
            gates_by_input.setdefault(max(type_number, 1), []).append(InputGate(channels))
        inputs = []
        for index in sorted(gates_by_input):
            gates = gates_by_input[index]
            for gate in gates:
                gate.request_partitions()
            gate = gates[0] if len(gates) == 1 else UnionInputGate(gates)
            inputs.append(StreamTaskNetworkInput(gate, index - 1))
        tasks.append(
            StreamTask(
                jv,
                ev.subtask_index,
                writers,
                inputs,
                attempt_number=ev.current_execution.attempt_number,
                on_state_change=on_state_change,
                job_parameters=job_parameters,
            )
        )
    return tasks


class LocalJobClient:
    """Flink's ``JobClient`` for a job running in this process."""

    def __init__(self, env: Any, job_name: Optional[str]) -> None:
        self.job_id = uuid.uuid4().hex
        job_graph = env.get_job_graph(job_name)
        self.job_name = job_graph.job_name
        self.execution_graph = build_execution_graph(job_graph)
        settings = NetworkSettings(env.configuration)
        self._network_pool = NetworkBufferPool(settings.num_buffers, settings.buffer_size)
        self._partitions: dict[str, ResultPartition] = {}
        self._lock = threading.Lock()
        self._status = "CREATED"
        self._failure: Optional[BaseException] = None
        self._cancel_requested = False
        self._done = threading.Event()
        self.tasks = build_tasks(
            self.execution_graph,
            self.execution_graph.all_vertices(),
            settings,
            self._network_pool,
            self._partitions,
            self._on_task_state,
            env.configuration.to_dict(),
        )
        self._remaining = len(self.tasks)
        self._started = time.perf_counter()
        self._ended: Optional[float] = None

    def start(self) -> "LocalJobClient":
        self._status = "RUNNING"
        self._started = time.perf_counter()
        for task in self.tasks:
            task.start()
        return self

    def _on_task_state(self, task: StreamTask, state: str, error: Optional[BaseException]) -> None:
        if state not in (FINISHED, CANCELED, FAILED):
            return
        cancel_others = False
        with self._lock:
            if state == FAILED and self._failure is None:
                self._failure = error
                cancel_others = True
            self._remaining -= 1
            last = self._remaining == 0
        if cancel_others:
            for other in self.tasks:
                if other is not task:
                    other.cancel()
        if last:
            self._finish_job()

    def _finish_job(self) -> None:
        self._ended = time.perf_counter()
        for partition in self._partitions.values():
            partition.release()
        if self._failure is not None:
            self._status = "FAILED"
        elif self._cancel_requested:
            self._status = "CANCELED"
        else:
            self._status = "FINISHED"
        self._done.set()

    # -- JobClient ----------------------------------------------------------------------------------
    def get_job_id(self) -> str:
        return self.job_id

    def get_job_status(self) -> str:
        return self._status

    def cancel(self) -> None:
        self._cancel_requested = True
        for task in self.tasks:
            task.cancel()

    def wait(self, timeout: Optional[float] = None) -> bool:
        return self._done.wait(timeout)

    def get_job_execution_result(self, timeout: Optional[float] = None) -> JobExecutionResult:
        if not self._done.wait(timeout):
            raise TimeoutError(f"job '{self.job_name}' did not finish within {timeout} s")
        for task in self.tasks:
            task.join(5)
        if self._status != "FINISHED":
            raise JobExecutionException(self.job_name, self._status, self._failure) from self._failure
        runtime_ms = int(((self._ended or time.perf_counter()) - self._started) * 1000)
        return JobExecutionResult(
            job_id=self.job_id,
            job_name=self.job_name,
            net_runtime_ms=runtime_ms,
            accumulators=merge_accumulators([t.accumulators for t in self.tasks]),
            task_metrics=self.get_metrics(),
        )

    def get_metrics(self) -> list[dict]:
        metrics = []
        for task in self.tasks:
            m = task.metrics()
            m["vertex_name"] = task.job_vertex.name
            metrics.append(m)
        return metrics


def execute_async(env: Any, job_name: Optional[str] = None) -> LocalJobClient:
    client = LocalJobClient(env, job_name)
    env.transformations.clear()  # Flink clears the program once it is submitted
    return client.start()


def execute(env: Any, job_name: Optional[str] = None) -> JobExecutionResult:
    return execute_async(env, job_name).get_job_execution_result()


def execute_and_collect(
    env: Any, job_name: Optional[str], collect_id: str, limit: Optional[int] = None
) -> CloseableIterator:
    result = execute(env, job_name)
    records = result.accumulators.get(collect_id, [])
    if limit is not None:
        records = records[:limit]
    return CloseableIterator(records, result)
