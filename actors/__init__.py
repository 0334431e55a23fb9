"""raylink.actors: everything that is a Ray actor or talks to Ray.

Holds: the TaskExecutor actor (a thin Ray wrapper of :class:`raylink.runtime.task_executor.TaskExecutor`),
the Ray job client and executor (``execution.target = ray``) with ``init_ray``, and the
network between TaskExecutors over Ray actor calls (:mod:`raylink.actors.ray_transport`).

May import: Ray and every Ray-free package (``api``, ``graph``, ``operators``, ``shuffle``,
``runtime``). Nothing Ray-free imports this package.
"""
