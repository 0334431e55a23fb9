"""The Spark bridge behind the ``raylink[spark]`` extra, and the one-way dependency on connectors.

No Spark is started here: the checks run in fresh interpreters (where pyspark/raydp can be
made missing) or read the source tree.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.timeout(120)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=100, cwd=ROOT
    )


def test_importing_raylink_and_its_api_loads_no_optional_dependency():
    proc = run_python("""
        import sys
        import raylink, raylink.api
        from raylink.api import StreamExecutionEnvironment
        loaded = sorted(m for m in sys.modules
                        if m.split(".")[0] in ("pyspark", "raydp", "matplotlib")
                        or m.startswith(("raylink.connectors.spark", "raylink.loadtest")))
        print("LOADED", loaded)
    """)
    assert proc.returncode == 0, proc.stderr
    assert "LOADED []" in proc.stdout, proc.stdout


def test_a_job_on_the_local_target_does_not_load_ray():
    """Only the executor of the job's target is loaded: a local job starts without Ray's ~0.3 s."""
    proc = run_python("""
        import sys
        from raylink.api import Configuration, StreamExecutionEnvironment
        conf = Configuration()
        conf.set_string("execution.target", "local")
        env = StreamExecutionEnvironment.get_execution_environment(conf)
        with env.from_collection([1, 2, 3]).map(lambda x: x * 2).execute_and_collect() as results:
            print("OUT", sorted(results), "ray" in sys.modules)
    """)
    assert proc.returncode == 0, proc.stderr
    assert "OUT [2, 4, 6] False" in proc.stdout, proc.stdout


@pytest.mark.parametrize(
    "call",
    [
        "env.from_collection([(1, 'a')]).sink_to_spark()",
        "env.from_spark_table('/tmp/no-such-table-dir')",
        "__import__('raylink.connectors.spark')",
    ],
)
def test_spark_bridge_without_the_extra_names_it(call):
    proc = run_python(f"""
        import sys
        sys.modules["pyspark"] = None   # as if raylink[spark] were not installed
        sys.modules["raydp"] = None
        from raylink.api import Configuration, StreamExecutionEnvironment
        from raylink.errors import RaylinkError
        env = StreamExecutionEnvironment.get_execution_environment(
            Configuration().set_string("execution.target", "local"))
        try:
            {call}
        except ImportError as exc:  # a MissingExtraError is both an ImportError and a RaylinkError
            print("ERROR", isinstance(exc, RaylinkError), exc)
    """)
    assert proc.returncode == 0, proc.stderr
    assert (
        "ERROR True the Spark bridge needs raylink[spark]: pip install 'raylink[spark]' (pyspark, raydp not installed)"
    ) in proc.stdout, proc.stdout + proc.stderr


def test_missing_extra_error_names_the_extra_and_pickles(monkeypatch):
    import pickle

    from raylink.errors import RaylinkError
    from raylink.extras import MissingExtraError, require_extra

    require_extra("spark", "the Spark bridge")  # installed in the test environment: no error
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # as if raylink[plots] were not installed
    with pytest.raises(MissingExtraError) as info:
        require_extra("plots", "the load-test plots")
    copy = pickle.loads(pickle.dumps(info.value))
    assert isinstance(copy, RaylinkError) and isinstance(copy, ImportError)
    assert str(copy) == (
        "the load-test plots needs raylink[plots]: pip install 'raylink[plots]' (matplotlib not installed)"
    )
    assert copy.extra == "plots" and copy.missing == ("matplotlib",)


def _raylink_imports(path: str) -> set[str]:
    with open(path) as f:
        tree = ast.parse(f.read(), path)
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return {m for m in found if m.startswith("raylink.")}


def test_runtime_and_actors_never_import_connectors_cli_or_loadtest():
    offenders = []
    for package in ("runtime", "actors", "shuffle", "graph", "operators"):
        for name in sorted(os.listdir(os.path.join(ROOT, package))):
            if name.endswith(".py"):
                path = os.path.join(ROOT, package, name)
                bad = sorted(
                    m
                    for m in _raylink_imports(path)
                    if m.startswith(("raylink.connectors", "raylink.cli", "raylink.loadtest"))
                )
                offenders += [f"{package}/{name}: {m}" for m in bad]
    assert offenders == []


def test_job_result_reads_spark_results_through_the_registered_reader():
    """``JobExecutionResult.get_spark_dataframe`` reaches the connector through its registry."""
    import raylink.connectors.spark  # noqa: F401  (registers the "spark" reader)
    from raylink.runtime.client.job_result import JobExecutionResult

    result = JobExecutionResult("job", "no spark sink", 1, accumulators={"other": 1})
    with pytest.raises(ValueError, match=r"the job has 0 Spark result sinks \(\[\]\); say which one"):
        result.get_spark_dataframe()


def test_spark_coordinator_jvms_start_quick_and_the_executors_keep_hotspot_defaults():
    pytest.importorskip("raydp")
    from raylink.connectors.spark.session import COORDINATOR_JAVA_OPTIONS, spark_configs

    configs = spark_configs({"spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=4", "spark.executor.cores": "2"})
    driver = configs["spark.driver.extraJavaOptions"]
    assert "--add-opens=java.base/java.nio=ALL-UNNAMED" in driver
    # the user's flag comes after raylink's, so HotSpot takes the user's
    assert driver.index(COORDINATOR_JAVA_OPTIONS) < driver.index("-XX:TieredStopAtLevel=4")
    assert COORDINATOR_JAVA_OPTIONS in configs["spark.ray.raydp_app_master.extraJavaOptions"]
    executor = configs["spark.executor.extraJavaOptions"]
    assert "--add-opens=java.base/java.nio=ALL-UNNAMED" in executor and "TieredStopAtLevel" not in executor
    assert configs["spark.executor.cores"] == "2"


def test_spark_settles_rays_token_default_only_for_a_new_local_ray(monkeypatch):
    """The driver JVM starts before a new local Ray and inherits its auth mode; when Ray is
    another cluster (an address), nothing is settled and the JVM starts after ``ray.init``."""
    pytest.importorskip("raydp")
    from raylink.connectors.spark.session import _prepare_new_local_ray

    monkeypatch.delenv("RAY_AUTH_MODE", raising=False)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    assert _prepare_new_local_ray("10.255.255.1:6379") is False
    assert "RAY_AUTH_MODE" not in os.environ
    assert _prepare_new_local_ray("local") is True
    assert os.environ["RAY_AUTH_MODE"] == "token"  # what ray.init sets for a new local cluster
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    assert _prepare_new_local_ray("local") is True
    assert os.environ["RAY_AUTH_MODE"] == "disabled"  # the user's choice stands
