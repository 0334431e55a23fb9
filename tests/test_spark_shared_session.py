"""The session cluster's warm Spark session (``raylink cluster start --spark``).

Programs in other processes attach to it with a plain ``get_spark()``: they use the same Spark
application, see each other's tables, read with ``from_spark`` and write with
``sink_to_spark`` exactly; leaving does not stop it; ``raylink cluster stop`` does, with
RayDP's actors. A stopped or unreachable shared session is refused with a clear error.
The Spark application here is the test's own (started and stopped by the test), so the test
runs before the session-wide ``spark`` fixture starts another (see conftest's ordering).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from raylink.tests.test_runtime_session_cluster import ROOT, _cli

JOB = """
import json, sys
from raylink.api import StreamExecutionEnvironment
from raylink.connectors.spark import get_spark, get_spark_dataframe

spark = get_spark()
seen = [t.name for t in spark.catalog.listTables()]
df = spark.range(0, 1000, 1, 2).selectExpr("cast(id as int) as k", "cast(id as double) as v")
env = StreamExecutionEnvironment.get_execution_environment()
env.set_parallelism(2)
table = sys.argv[1]
env.from_spark(df).map(lambda r: (r[0], r[1] * 2.0)).sink_to_spark(table=table, schema="k int, v double")
env.from_spark(df).filter(lambda r: r[0] < 3).sink_to_spark(schema="k int, v double")
result = env.execute("shared spark")
small = sorted(tuple(r) for r in get_spark_dataframe(result).collect())
sums = list(spark.table(table).selectExpr("sum(k)", "sum(v)", "count(*)").collect()[0])
print(json.dumps({"app": spark.sparkContext.applicationId, "seen": seen, "sums": sums, "small": small}))
spark.stop()  # leaves the shared session; it keeps running for the next program
"""


def _job(tmp_path, address, table):
    script = tmp_path / "job.py"
    script.write_text(JOB)
    run = subprocess.run(
        [sys.executable, str(script), table],
        capture_output=True,
        text=True,
        cwd=ROOT.parent,
        env={**os.environ, "RAY_ADDRESS": address},
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads([line for line in run.stdout.splitlines() if line.startswith("{")][-1])


def _status(address):
    status = _cli("status", "--json", address=address)
    assert status.returncode == 0, status.stderr
    return json.loads(status.stdout)["spark"]


@pytest.mark.slow
@pytest.mark.spark
@pytest.mark.timeout(600)
def test_jobs_in_other_processes_share_the_warm_spark_session_until_the_cluster_stops(ray_session, tmp_path):
    import ray

    from raylink.connectors.spark.shared_session import find_shared_spark

    address = ray.get_runtime_context().gcs_address
    warehouse = tmp_path / "warehouse"
    started = _cli("start", "--executors", "1", "--spark", "--spark-warehouse", str(warehouse), address=address)
    master = None
    try:
        assert started.returncode == 0, started.stderr[-3000:]
        assert "warm Spark session" in started.stdout
        spark = _status(address)
        assert spark["running"] and not spark["stopped"] and "gatewaySecret" not in spark
        assert spark["warehouse"].replace("file:", "") == str(warehouse)
        from raydp.spark.ray_cluster_master import RAYDP_SPARK_MASTER_SUFFIX

        master = ray.get_actor(spark["appName"] + RAYDP_SPARK_MASTER_SUFFIX, namespace=spark["namespace"])

        first = _job(tmp_path, address, "doubled")
        second = _job(tmp_path, address, "doubled_again")
        for run in (first, second):
            assert run["app"] == spark["applicationId"]  # attached, not started
            assert run["sums"] == [sum(range(1000)), 2.0 * sum(range(1000)), 1000]
            assert run["small"] == [[0, 0.0], [1, 1.0], [2, 2.0]]
        assert "doubled" in second["seen"]  # the first job's table, in the same catalog
        assert (warehouse / "doubled").is_dir() and (warehouse / "doubled_again").is_dir()
        after = _status(address)  # the jobs left; the session stays
        assert after["applicationId"] == spark["applicationId"] and not after["stopped"]
    finally:
        stopped = _cli("stop", address=address)
    assert stopped.returncode == 0, stopped.stderr
    assert "warm Spark session" in stopped.stdout and "stopped" in stopped.stdout
    assert find_shared_spark() is None
    # RayDP's master (and with it the executors) went with the session: a call fails on its death
    with pytest.raises(ray.exceptions.RayActorError):
        ray.get(master.get_ray_address.remote(), timeout=60)


@pytest.mark.timeout(60)
def test_a_stopped_or_unreachable_shared_session_is_refused_with_what_to_do():
    pytest.importorskip("pyspark")
    from raylink.connectors.spark.session import SparkStartError
    from raylink.connectors.spark.shared_session import attach

    with pytest.raises(SparkStartError, match="was stopped.*raylink cluster stop"):
        attach({"stopped": True, "applicationId": "app-1", "nodeIp": "10.0.0.1"})
    with pytest.raises(SparkStartError, match="node 203.0.113.9.*use-session-cluster=false"):
        attach({"stopped": False, "applicationId": "app-1", "nodeIp": "203.0.113.9"})
