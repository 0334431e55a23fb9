"""The part of Flink's ``JobMaster`` that is the same wherever tasks run.

It owns the ExecutionGraph, moves every ``Execution`` through Flink's states
(CREATED → SCHEDULED → DEPLOYING → RUNNING → FINISHED / CANCELED / FAILED),
fails the job on the first task failure (there is no restart strategy yet) and
turns the final task reports into a ``JobExecutionResult``. Subclasses place
and start the tasks (in this process, or on Ray actors) and call
``on_task_event`` with what the TaskExecutors report.
"""

from __future__ import annotations

import queue
import threading
import time
import uuid
from typing import Any, Optional

import cloudpickle

from raylink.actors.job_result import (
    COLLECT_PREFIX,
    CloseableIterator,
    JobExecutionException,
    JobExecutionResult,
)
from raylink.graph.execution_graph import ExecutionGraph, build_execution_graph


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


class JobMasterBase:
    """Execution-state bookkeeping and the JobClient API shared by the executors."""

    def __init__(self, env: Any, job_name: Optional[str]) -> None:
        self.job_id = uuid.uuid4().hex
        job_graph = env.get_job_graph(job_name)
        self.job_name = job_graph.job_name
        self.configuration = env.configuration
        self.execution_graph: ExecutionGraph = build_execution_graph(job_graph)
        self.executions = {ev.current_execution.attempt_id: ev for ev in self.execution_graph.all_vertices()}
        self._lock = threading.Lock()
        self._status = "CREATED"
        self._failure: Optional[BaseException] = None
        self._cancel_requested = False
        self._done = threading.Event()
        self._reports: dict[str, dict] = {}
        # record batches of collect sinks, in arrival order; None once the job has ended
        self.collected: "queue.Queue[Optional[list]]" = queue.Queue()
        self._started = time.perf_counter()
        self._ended: Optional[float] = None
        self.metrics_server: Any = None  # optional Prometheus endpoint (``metrics.port``)

    # -- to be provided by an executor ---------------------------------------------------------------
    def _cancel_all_tasks(self) -> None:
        raise NotImplementedError

    def _release_resources(self) -> None:
        """Free every actor / partition the job used (called once, when it ends)."""

    def _live_metrics(self) -> list[dict]:
        return []

    # -- state machine -------------------------------------------------------------------------------
    def _set_all(self, state: str) -> None:
        for ev in self.executions.values():
            ev.current_execution.state = state

    def _job_running(self) -> None:
        port = self.configuration.get_integer("metrics.port", -1)
        if port >= 0 and self.metrics_server is None:
            from raylink.actors.metrics import MetricsHttpServer

            self.metrics_server = MetricsHttpServer(self.get_metrics, self.job_name, port)
        self._status = "RUNNING"
        self._started = time.perf_counter()
        self._set_all("RUNNING")

    def on_task_event(self, event: dict) -> None:
        """A task reached FINISHED / CANCELED / FAILED, or a collect sink sent records."""
        if event.get("type") == "collected":
            self.collected.put(event["records"])
            return
        attempt_id = event["attempt_id"]
        if isinstance(event.get("error"), bytes):
            event["error"] = cloudpickle.loads(event["error"])
        cancel = False
        with self._lock:
            if attempt_id in self._reports:
                return
            self._reports[attempt_id] = event
            ev = self.executions.get(attempt_id)
            if ev is not None:
                ev.current_execution.state = event["state"]
                ev.current_execution.failure_cause = event.get("error")
            for name, records in (event.get("accumulators") or {}).items():
                if name.startswith(COLLECT_PREFIX) and records:
                    self.collected.put(list(records))
            if event["state"] == "FAILED" and self._failure is None:
                self._failure = event.get("error") or RuntimeError(f"task {event['task']} failed")
                cancel = True
            last = len(self._reports) == len(self.executions)
        if cancel:
            self._status = "FAILING"
            self._cancel_all_tasks()
        if last:
            self._finish()

    def fail(self, error: BaseException) -> None:
        """The job cannot go on (e.g. a TaskExecutor was lost): fail it now."""
        with self._lock:
            if self._done.is_set():
                return
            if self._failure is None:
                self._failure = error
        self._status = "FAILING"
        try:
            self._cancel_all_tasks()
        finally:
            self._finish()

    def _finish(self) -> None:
        with self._lock:
            if self._done.is_set():
                return
            self._ended = time.perf_counter()
            if self._failure is not None:
                self._status = "FAILED"
            elif self._cancel_requested:
                self._status = "CANCELED"
            else:
                self._status = "FINISHED"
        try:
            self._release_resources()
        finally:
            if self.metrics_server is not None:
                self.metrics_server.close()
            self._done.set()
            self.collected.put(None)

    # -- JobClient --------------------------------------------------------------------------------------
    def get_job_id(self) -> str:
        return self.job_id

    def get_job_status(self) -> str:
        return self._status

    def cancel(self) -> None:
        self._cancel_requested = True
        if not self._done.is_set():
            self._status = "CANCELLING"
            self._cancel_all_tasks()

    def wait(self, timeout: Optional[float] = None) -> bool:
        return self._done.wait(timeout)

    def collect(self, limit: Optional[int] = None) -> CloseableIterator:
        """The records of the job's collect sink as they arrive."""
        return CloseableIterator(self, limit)

    def get_job_execution_result(self, timeout: Optional[float] = None) -> JobExecutionResult:
        if not self._done.wait(timeout):
            raise TimeoutError(f"job '{self.job_name}' did not finish within {timeout} s")
        if self._status != "FINISHED":
            raise JobExecutionException(self.job_name, self._status, self._failure) from self._failure
        ordered = [self._reports[a] for a in self.executions if a in self._reports]
        return JobExecutionResult(
            job_id=self.job_id,
            job_name=self.job_name,
            net_runtime_ms=int(((self._ended or time.perf_counter()) - self._started) * 1000),
            accumulators=merge_accumulators([r.get("accumulators") or {} for r in ordered]),
            task_metrics=[r["metrics"] for r in ordered if r.get("metrics")],
        )

    def get_vertex_metrics(self) -> dict:
        """Per JobVertex, as Flink's web UI aggregates them (with back-pressure status)."""
        from raylink.actors.metrics import aggregate_by_vertex

        return aggregate_by_vertex(self.get_metrics())

    def get_metrics(self) -> list[dict]:
        """Per-subtask metrics: live while running, the final reports afterwards."""
        if self._done.is_set():
            return [r["metrics"] for r in self._reports.values() if r.get("metrics")]
        return self._live_metrics()


class JobExecutor:
    """The executor protocol the environment calls (``execute``, ``execute_async``,
    ``execute_and_collect``) for one JobClient class — Flink's ``PipelineExecutor``."""

    def __init__(self, client_class: type) -> None:
        self.client_class = client_class

    def execute_async(self, env: Any, job_name: Optional[str] = None) -> Any:
        client = self.client_class(env, job_name)
        env.transformations.clear()  # Flink clears the program once it is submitted
        return client.start()

    def execute(self, env: Any, job_name: Optional[str] = None) -> JobExecutionResult:
        return self.execute_async(env, job_name).get_job_execution_result()

    def execute_and_collect(
        self, env: Any, job_name: Optional[str], collect_id: str, limit: Optional[int] = None
    ) -> CloseableIterator:
        """Start the job; its collect sink's records stream back through the iterator."""
        return self.execute_async(env, job_name).collect(limit)
