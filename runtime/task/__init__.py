"""raylink.runtime.task: one TaskExecutor and the subtasks it runs (Flink's ``TaskExecutor``,
``Task`` / ``StreamTask``).

Holds: the plain TaskExecutor (``task_executor``: tasks, network buffers, partitions and
gates, the transport hook), the StreamTask on its mailbox thread (``stream_task``,
``mailbox``), its checkpoint side (``subtask_checkpoint_coordinator``, ``channel_state_handling``),
the OperatorChain (``operator_chain``), cancellation (``task_canceler``) and what
a TaskExecutor reports to the JobMaster (``task_events``).
"""
