"""raylink.actors: the Ray side of each role of ``raylink.runtime``; everything that is a Ray actor
or talks to Ray.

Holds: the TaskExecutor actor (``ray_actors``: a thin Ray wrapper of
:class:`raylink.runtime.task.task_executor.TaskExecutor`), the network between TaskExecutors
over Ray actor calls (``ray_transport``), the JobMaster on Ray and its job client
(``ray_executor``: ``execution.target = ray``, ``init_ray``), a program's finished jobs'
TaskExecutors kept for its next job (``warm_executors``), the session cluster's pool of warm
TaskExecutors (``session_cluster``) and its Dispatcher's REST server (``dispatcher``; the client
is :mod:`raylink.runtime.client.rest_cluster_client`), starting and stopping a session
(``session_entrypoint``) and the ``ray`` executor's choice between the two
(``session_executor``); and what the tools above use instead of importing Ray: connecting
(``cluster``), a local Ray head (``local_ray``), Ray's Job Submission API (``job_submission``).

May import: Ray and ``runtime`` and every floor below it. Only ``connectors`` and the tools
above (``cli``, ``bench``, ``loadtest``, through this package only) import it.
"""
