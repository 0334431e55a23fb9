"""``execution.target = "ray"``: the session cluster's Dispatcher over HTTP when one is
reachable, else the JobMaster in the driver on Ray (Flink's ``AbstractSessionClusterExecutor``).

The choice (:func:`raylink.runtime.client.rest_endpoint.find_endpoint`) is made per job, and
this module imports no Ray: a driver whose job goes to the Dispatcher never loads it.
:mod:`raylink.actors.ray_executor` (which connects to Ray) is imported only for a job that
runs its JobMaster here. Stateless, so thread-safe.
"""

from __future__ import annotations

from typing import Any, Optional

from raylink.runtime.client.executors import PipelineExecutor
from raylink.runtime.client.rest_cluster_client import RestJobClient
from raylink.runtime.client.rest_endpoint import find_endpoint


class SessionClusterExecutor(PipelineExecutor):
    """``execution.target = "ray"``: Flink's session-cluster executor when a session's
    Dispatcher is reachable over HTTP (see :func:`find_endpoint`), else the JobMaster in this
    driver (:mod:`raylink.actors.ray_executor`, which connects to Ray)."""

    def execute(self, env: Any, job_name: Optional[str] = None) -> Any:
        """Run the job to its end; Ctrl-C in the driver cancels a job it submitted over HTTP
        (its JobMaster does not end with the driver)."""
        client = self.execute_async(env, job_name)
        try:
            return client.get_job_execution_result()
        except KeyboardInterrupt:
            if isinstance(client, RestJobClient):
                client.close()  # the interrupted poll's answer is still on its connection
                client.cancel()
            raise

    def execute_async(self, env: Any, job_name: Optional[str] = None) -> Any:
        endpoint = find_endpoint(env.configuration)
        if endpoint is not None:
            try:
                client = RestJobClient.submit(endpoint, env, job_name)
            except ConnectionRefusedError:  # a session stopped without removing its file
                pass
            else:
                env.transformations.clear()  # Flink clears the program once it is submitted
                return client
        from raylink.actors.ray_executor import EXECUTOR

        return EXECUTOR.execute_async(env, job_name)


#: registered for ``execution.target = "ray"`` through the ``raylink.executors`` entry points
EXECUTOR = SessionClusterExecutor()

__all__ = ["EXECUTOR", "SessionClusterExecutor"]
