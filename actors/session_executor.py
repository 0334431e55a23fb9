"""``execution.target = "ray"``: the session cluster's Dispatcher over HTTP when one is
reachable, else the JobMaster in the driver on Ray (Flink's ``AbstractSessionClusterExecutor``).

The choice (:func:`raylink.runtime.client.rest_endpoint.find_endpoint`) is made per job, and
this module imports no Ray: a driver whose job goes to the Dispatcher never loads it.
:mod:`raylink.actors.ray_executor` (which connects to Ray) is imported only for a job that
runs its JobMaster here. A detached (``execution.attached: false``) or highly available
(``high-availability.type``) job without a session runs its JobMaster in an actor of its own
(:mod:`raylink.actors.job_master_actor`); ``execute()`` of a detached job returns at once.

With nothing to run on -- no ``RAY_ADDRESS``, no Ray connected in this process, none running on
this machine (:func:`~raylink.actors.local_ray.ray_in_reach`) -- and ``execution.target`` left
at its default, the job runs in this process (the ``local`` target, Flink's MiniCluster, as
PyFlink's ``python job.py`` does) instead of paying a Ray start (5-20 s here) for it;
``RAY_ADDRESS=local`` or ``execution.target: ray`` starts a Ray instead.

Stateless, so thread-safe.
"""

from __future__ import annotations

import logging
from typing import Any, Optional

from raylink.actors.local_ray import ray_in_reach
from raylink.core.options import ExecutionOptions, IllegalConfigurationError
from raylink.runtime.client.executors import PipelineExecutor
from raylink.runtime.client.job_progress import wait_with_progress
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
        if not env.configuration.get(ExecutionOptions.ATTACHED):  # Flink: execute() returns at once
            from raylink.actors.job_master_actor import DetachedJobExecutionResult

            return DetachedJobExecutionResult(client.get_job_id(), client.job_name, 0)
        try:
            return wait_with_progress(client)  # a progress line on stderr every 10 s after 5 s
        except KeyboardInterrupt:
            if isinstance(client, RestJobClient):
                client.close()  # the interrupted poll's answer is still on its connection
                client.cancel()
            raise

    def execute_async(self, env: Any, job_name: Optional[str] = None) -> Any:
        if not env.configuration.contains_key(ExecutionOptions.TARGET.key):
            reason = ray_in_reach()
            if reason is None and not env.configuration.get(ExecutionOptions.ATTACHED):
                raise IllegalConfigurationError(
                    f"{ExecutionOptions.ATTACHED.key}: false needs a running Ray cluster for the job to "
                    f"outlive this program (set RAY_ADDRESS or start one with ray start); none is in reach"
                )
            if reason is None:
                from raylink.runtime.local_executor import EXECUTOR as LOCAL

                logging.getLogger("raylink").debug(
                    "no Ray to run on (no RAY_ADDRESS, none connected or running on this machine): "
                    "the job runs in this process (execution.target: local)"
                )
                env.configuration.set_string(ExecutionOptions.TARGET.key, "local")  # the job's record of it
                return LOCAL.execute_async(env, job_name)
            logging.getLogger("raylink").debug("the job runs on Ray: %s", reason)
        endpoint = find_endpoint(env.configuration)
        if endpoint is not None:
            try:
                client = RestJobClient.submit(endpoint, env, job_name)
            except ConnectionRefusedError:  # a session stopped without removing its file
                pass
            else:
                env.transformations.clear()  # Flink clears the program once it is submitted
                return client
        from raylink.actors.job_master_actor import runs_in_actor, submit_job

        if runs_in_actor(env.configuration):  # detached or highly available: a JobMaster actor
            client = submit_job(env, job_name)
            env.transformations.clear()  # Flink clears the program once it is submitted
            return client
        from raylink.actors.ray_executor import EXECUTOR

        return EXECUTOR.execute_async(env, job_name)


#: registered for ``execution.target = "ray"`` through the ``raylink.executors`` entry points
EXECUTOR = SessionClusterExecutor()

__all__ = ["EXECUTOR", "SessionClusterExecutor"]
