"""raylink.runtime: the Ray-free task runtime (Flink's ``flink-runtime`` minus the RPC layer).

Holds: the StreamTask and its mailbox, the OperatorChain, the plain TaskExecutor (tasks,
partitions, gates, checkpoint snapshots) and what it reports (``task_events``), the task
states (``execution_state``), deployment descriptors and slot assignment, the
JobMaster's bookkeeping (JobMasterBase, JobExecutionResult, CloseableIterator), the
CheckpointCoordinator, checkpoint storage and restart strategies, metrics and the
in-process MiniCluster executor (``execution.target = local``), and the executor registry.

May import: ``api`` (options, configuration, ``JobStatus``), ``errors``, ``graph``, ``operators``, ``shuffle``.
Never imports Ray or ``actors/``; ``actors/`` wraps these classes for Ray.
"""
