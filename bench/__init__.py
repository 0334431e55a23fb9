"""raylink.bench: benchmark scripts that measure raylink against a baseline in the same run.

Holds one script per measurement (``chain``, ``serde``, ``wordcount``, ``windows``,
``checkpoint``, ``failover``), each runnable as ``python -m raylink.bench.<name>`` or
``python bench/<name>.py`` with ``--help``, and :mod:`~raylink.bench.run_all`, which runs
the quick ones and prints one table of ratios to their baselines.

May import: everything in raylink, like a user program (``api``, and the layers a
micro-benchmark drives directly: ``operators``, ``shuffle``, ``runtime``); for Ray only
``actors`` (:mod:`raylink.actors.cluster`: connect, shut down, find TaskExecutor processes;
:mod:`raylink.actors.local_ray`: a private Ray head), never Ray itself. Nothing imports it but the tests that reuse a script's reference.
"""
