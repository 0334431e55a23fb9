"""raylink.runtime.client: what the program's side holds of a job (Flink's ``flink-clients``).

Holds: the executor registry ``execution.target`` picks from (``executors``), the job client
and results (``job_result``: ``JobClient``, ``JobExecutionResult``, the collect iterator), the
REST client of a session cluster's Dispatcher (``rest_cluster_client``) and what it shares with
the Dispatcher (``rest_endpoint``: the endpoint file, the signed wire protocol), and the job's
Python dependencies (``python_dependencies``).
"""
