"""raylink.cli: the ``raylink`` command (Flink's ``CliFrontend`` and ``flink run``).

What it holds, one module per sub-command group:

* ``main`` -- the argparse parser and :func:`~raylink.cli.main.main` (the entry point);
* ``run`` -- ``raylink run job.py``: the program here, its job on Ray or in-process;
* ``jobs`` -- ``submit``, ``list``, ``status``, ``logs``, ``cancel`` through Ray's Job
  Submission API;
* ``plan`` -- ``raylink plan job.py``: the JobGraph without running it;
* ``config`` -- ``raylink config``: the options registry as a table (and the README's);
* ``demo`` -- ``raylink demo``: the clicks demo;
* ``debug`` -- ``raylink debug memory JOB_ID``: what a running job's TaskExecutors hold;
* ``conf`` -- ``--conf`` / ``--conf-file`` parsing and validation (through the registry);
* ``progress`` -- per-vertex progress and the executor wrapper ``raylink run`` installs;
* ``common`` -- exit codes, error reporting, cluster addresses and auth tokens.

What it may import: everything of raylink (``api``, ``runtime``, ``actors``,
``connectors``, ``loadtest``); Ray only through ``actors`` (never ``import ray`` here);
nothing imports it back. Sub-command modules are imported only when their command runs
(and Ray only by the handlers that need it), so this package is cheap to import.
"""
