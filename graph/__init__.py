"""raylink.graph: the three graphs of a job (Flink's ``streaming.api.graph`` and ``runtime.jobgraph`` /
``executiongraph``).

Holds: the transformations the API records (``transformations``), the StreamGraph and its generator
(``stream_graph``, ``stream_graph_generator``), operator chaining and the JobGraph (``chaining``,
``job_graph``, ``job_graph_generator``), stable operator ids (``hashing``) and the ExecutionGraph of
subtasks and partitions (``execution_graph``), connected by shared partition groups (``edge_manager``,
``edge_manager_build_util``); ``operator_spec`` is the plain description of an operator the
graphs carry. Pure data and functions: no threads, no I/O.

May import: the standard library, ``raylink.errors`` and ``raylink.core`` (``OutputTag``). Never
imports Ray or any floor above (``shuffle``, ``state``, ``operators``, ``runtime``, ``actors``,
``connectors``, ``api``): every other layer builds on these graphs.
"""
