"""raylink.runtime.job: the JobMaster's side of a job (Flink's ``JobMaster``, scheduler and
``CheckpointCoordinator``).

Holds: the JobMaster's bookkeeping shared by every target (``job_master``: executions, job
status, failover), the CheckpointCoordinator (``checkpoint_coordinator``), restart
strategies (``restart_strategy``) and the deployment descriptors and slot assignment
(``deployment``).
"""
