"""raylink's test suite (``bash scripts/test.sh``): in-process tests, beside them (a pytest of
their own) tests on a local Ray (``ray`` marker), with Spark through RayDP (``spark``) and on a multi-node ``ray.cluster_utils.Cluster``
(``multinode``); ``tests/conftest.py`` sets the markers and starts Ray and Spark once per session.

May import anything of raylink; UDFs shipped to Ray come from importable modules (``runtime_jobs``) or
from modules named ``test_runtime_*`` (shipped by value).
"""
