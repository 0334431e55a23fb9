"""raylink.connectors: one folder per connector, each whole — its API classes and the runtime
side that runs in TaskExecutors and on the driver.

* :mod:`~raylink.connectors.file` — the exactly-once ``FileSink`` and the ``FileSource``;
* :mod:`~raylink.connectors.spark` — the Spark bridge through RayDP (``env.from_spark``,
  ``from_spark_table``, ``sink_to_spark``; the ``raylink[spark]`` extra).

May import: ``actors`` and every floor below it (``runtime``, ``operators``, ``state``,
``shuffle``, ``graph``, ``core``), Ray and Spark (in ``spark/`` only). Never ``api`` or the
tools above it: the API imports a connector (the Spark one lazily, when its method is called,
since it needs the extra), never the other way round; ``runtime`` and ``actors`` never import
``connectors`` (connectors register hooks, e.g. the Spark result reader).
"""
