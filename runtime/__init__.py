"""raylink.runtime: the Ray-free runtime (Flink's ``flink-runtime`` minus the RPC layer), by role.

* ``task/``   — the TaskExecutor and its StreamTasks: mailbox, OperatorChain, cancellation,
  the events it reports;
* ``job/``    — the JobMaster: executions and failover, the CheckpointCoordinator, restart
  strategies, deployment descriptors and slot assignment;
* ``client/`` — the program's side: the executor registry (``execution.target``), JobClient
  and results, the REST client of a session cluster, Python dependencies;
* here: the task states (``execution_state``), job metrics (``metrics``), the in-process
  MiniCluster executor (``local_executor``, ``execution.target = local``), the process
  settings of task threads (``process_tuning``), memory reports (``memory_report``) and the
  user's private runtime folder (``runtime_dir``).

May import: ``core``, ``graph``, ``shuffle``, ``state``, ``operators``, ``errors``, ``metrics``.
Never imports Ray, ``actors``, ``connectors`` or ``api``; ``actors/`` wraps these classes for Ray.
"""
