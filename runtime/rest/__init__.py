"""Flink's REST API and web dashboard (``flink-runtime``'s ``rest`` and ``webmonitor``), Ray-free:
the JSON views (:mod:`.job_views`), the routes over a job lookup (:mod:`.web_monitor_endpoint`),
the per-job driver's server thread (:mod:`.rest_server`) and the dashboard's files (``static/``)."""
