"""raylink.runtime: the Ray-free task runtime (Flink's ``flink-runtime`` minus the RPC layer).

Holds: the StreamTask and its mailbox, the OperatorChain, the plain TaskExecutor (tasks,
partitions, gates, checkpoint snapshots), deployment descriptors and slot assignment, the
JobMaster's bookkeeping (JobMasterBase, JobExecutionResult, CloseableIterator), the
CheckpointCoordinator, checkpoint storage and restart strategies, metrics and the
in-process MiniCluster executor (``execution.target = local``), and the executor registry.

May import: ``api`` (options and configuration), ``graph``, ``operators``, ``shuffle``.
Never imports Ray or ``actors/``; ``actors/`` wraps these classes for Ray.
"""
