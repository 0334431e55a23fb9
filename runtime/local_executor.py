"""``execution.target = "local"``: a whole job in this process — Flink's MiniCluster.

One in-process :class:`TaskExecutor` hosts every subtask as a thread with local
channels only; the JobMaster bookkeeping is shared with the Ray executor. While a local
job runs, this process has a TaskExecutor's switch interval and young-generation threshold,
and the task threads run on one CPU (:class:`LocalProcessTuning`); the program's own
settings come back when the last local job ends.
"""

from __future__ import annotations

from typing import Any, Optional

from raylink.runtime.client.job_result import JobExecutionResult
from raylink.runtime.client.python_dependencies import apply_locally
from raylink.runtime.execution_state import ExecutionState
from raylink.runtime.job.deployment import create_deployment_descriptors
from raylink.runtime.job.job_master import JobExecutor, JobMasterBase
from raylink.runtime.process_tuning import LocalProcessTuning
from raylink.runtime.task.task_executor import NetworkSettings, TaskExecutor

LOCAL = "local"


class LocalJobClient(JobMasterBase):
    """Flink's ``JobClient`` for a job running in this process."""

    def __init__(self, env: Any, job_name: Optional[str]) -> None:
        super().__init__(env, job_name)
        apply_locally(self.configuration)  # env.add_python_file & co.: this interpreter's path
        self._task_cpus = LocalProcessTuning.acquire(self.configuration)
        try:
            self._deploy(self.restored_from)
        except BaseException:
            LocalProcessTuning.release()
            raise

    def _deploy(self, restore: Any) -> None:
        self.task_executor = TaskExecutor(
            LOCAL, NetworkSettings(self.configuration), on_task_event=self.on_task_event, task_cpus=self._task_cpus
        )
        placement = {(ev.job_vertex.id, ev.subtask_index): LOCAL for ev in self.executions.values()}
        with self._lock:
            self._set_all(ExecutionState.SCHEDULED)
            for ev in self.executions.values():
                ev.current_execution.assigned_location = LOCAL
            self._set_all(ExecutionState.DEPLOYING)
        for tdd in create_deployment_descriptors(
            self.job_id,
            self.execution_graph,
            placement,
            self.configuration.to_dict(),
            self.checkpoint_storage,
            restore,
        ):
            self.task_executor.deploy(tdd)
        self.tasks = list(self.task_executor.tasks.values())

    def start(self) -> "LocalJobClient":
        self._job_running()
        self._start_tasks()
        self._start_checkpointing()
        return self

    def _start_tasks(self) -> None:
        self.task_executor.start()

    def _cancel_all_tasks(self) -> None:
        self.task_executor.cancel()

    def _trigger_checkpoint(self, checkpoint_id: int, timestamp: int, stop: Optional[str] = None) -> None:
        self.task_executor.trigger_checkpoint(checkpoint_id, timestamp, stop)

    def _notify_checkpoint(self, checkpoint_id: int, complete: bool) -> None:
        self.task_executor.notify_checkpoint(checkpoint_id, complete)

    def _release_executors(self) -> None:
        self.task_executor.shutdown()

    def _release_resources(self) -> None:
        try:
            self.task_executor.release_resources()
        finally:
            LocalProcessTuning.release()

    def _take_collected(self, timeout: float) -> list[tuple[str, str, list, bool]]:
        return self.task_executor.take_collected(timeout)

    def _live_metrics(self) -> list[dict]:
        return self.task_executor.metrics()

    def get_job_execution_result(self, timeout: Optional[float] = None) -> JobExecutionResult:
        if self._done.wait(timeout):
            self.task_executor.join(5)  # task threads end right after their last report
        return super().get_job_execution_result(timeout)


#: registered for its ``execution.target`` through the ``raylink.executors`` entry points
EXECUTOR = JobExecutor(LocalJobClient)
