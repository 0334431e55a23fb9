"""raylink.connectors: the runtime side of connectors, what runs in TaskExecutors and on the driver
for the sources and sinks of the DataStream API.

Holds :mod:`~raylink.connectors.file_sink` (the exactly-once ``FileSink``'s writer and
committer; its API is :mod:`raylink.api.connectors.file_system`) and
:mod:`~raylink.connectors.spark` (the Spark bridge through RayDP; the ``raylink[spark]``
extra).

May import: Ray and every other raylink package except ``cli`` and ``loadtest``
(``api``, ``graph``, ``operators``, ``shuffle``, ``runtime``, ``actors``). The
dependency points one way: ``runtime`` and ``actors`` never import ``connectors``
(connectors register hooks, e.g. the Spark result reader); the API imports a connector
module lazily, only when its method (``sink_to_spark``, ``FileSink``'s writer) is used.
"""
