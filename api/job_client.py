"""PyFlink's ``JobClient`` by job id: reattach to a job from any process connected to the
cluster (Flink's ``ClusterClient.getJobStatus / cancel / triggerSavepoint`` by ``JobID``).

``JobClient.of(job_id)`` finds the job's JobMaster actor -- a detached job
(``execution.attached: false``) or a highly available one (``high-availability.type``) --
and returns its client (status, cancel, savepoints, checkpoint statistics, metrics, the
execution result); ``JobClient.list()`` lists those jobs. A job whose JobMaster lives in its
driver is reachable only through the client ``execute_async`` returned there. Ray is imported
only when called (:mod:`raylink.actors.job_master_actor`).
"""

from __future__ import annotations

from typing import Any


class JobClient:
    """Entry points to the jobs of the connected Ray cluster by id."""

    @staticmethod
    def of(job_id: str) -> Any:
        """The JobClient of job ``job_id``; ``ValueError`` naming it when no JobMaster actor holds it."""
        from raylink.actors.job_master_actor import JobMasterActorClient

        return JobMasterActorClient.of(job_id)

    @staticmethod
    def list() -> list[dict]:
        """Every detached or highly available job of the cluster: id, name, status, oldest first."""
        from raylink.actors.job_master_actor import list_jobs

        return list_jobs()


__all__ = ["JobClient"]
