"""Operational safety of the runtime: bounded record reprs in error messages, Spark table names
quoted in SQL text, a busy metrics.port named and every actor released, and no stray Ray started by
the Spark bridge's exit cleanup."""

from __future__ import annotations

import socket
import subprocess
import sys
import textwrap
import time

import pytest

from raylink.api import Configuration, StreamExecutionEnvironment
from raylink.connectors.spark.identifiers import quote_table_name, split_table_name
from raylink.core.reprs import MAX_RECORD_REPR, record_repr
from raylink.runtime.metrics import MetricsPortError
from raylink.shuffle.partitioners import CustomPartitionerWrapper, KeyGroupStreamPartitioner

pytestmark = pytest.mark.timeout(120)

BIG = "x" * 20_000_000  # a 20 MB record field


# -- record reprs in error messages --------------------------------------------------------------------
def test_record_repr_is_bounded_and_keeps_the_start():
    for value in (
        BIG,
        ("k", BIG),
        {"id": 1, "payload": BIG},
        [BIG] * 1000,
        list(range(10**6)),
        b"y" * 10_000_000,
        [[[[[[1]]]]]],
    ):
        text = record_repr(value)
        assert len(text) <= MAX_RECORD_REPR, (type(value), len(text))
    assert record_repr(("k", BIG)).startswith("('k', 'xxxx")
    assert record_repr({"id": 1, "payload": BIG}).startswith("{'id': 1, 'payload': 'xxx")
    assert record_repr([1, 2, 3]) == "[1, 2, 3]"  # small records are shown whole
    assert record_repr(("a", 1, None)) == "('a', 1, None)"


def test_record_repr_survives_a_broken_or_huge_repr():
    class Broken:
        def __repr__(self):
            raise RuntimeError("no repr")

    class Huge:
        def __repr__(self):
            return "H" * 5_000_000

    assert "Broken" in record_repr(Broken())
    assert len(record_repr(Huge())) <= MAX_RECORD_REPR


@pytest.mark.parametrize(
    "partitioner",
    [
        KeyGroupStreamPartitioner(lambda v: v["id"], 128),
        CustomPartitionerWrapper(lambda key, n: 0, lambda v: v["id"]),
    ],
)
def test_a_failing_key_selector_does_not_embed_a_20mb_record(partitioner):
    partitioner.setup(2)
    record = {"no_id": 7, "payload": BIG}
    calls = [lambda: partitioner.select_channel(record)]
    if isinstance(partitioner, KeyGroupStreamPartitioner):
        calls.append(lambda: partitioner.select_channels([{"id": 1}, record]))
    for call in calls:
        with pytest.raises(RuntimeError) as info:
            call()
        message = str(info.value)
        assert message.startswith("Could not extract key from {'no_id': 7, 'payload': 'xxx")
        assert len(message) < 1000, len(message)
        assert isinstance(info.value.__cause__, KeyError)  # the user's error stays the cause


# -- Spark identifiers -----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "name, quoted",
    [
        ("clicks", "`clicks`"),
        ("db.clicks", "`db`.`clicks`"),
        ("spark_catalog.db.clicks", "`spark_catalog`.`db`.`clicks`"),
        ("`my db`.`we``ird`", "`my db`.`we``ird`"),
        ("a.`b.c`", "`a`.`b.c`"),
        ("union", "`union`"),
        ("clicks; DROP TABLE victim", "`clicks; DROP TABLE victim`"),
        ("clicks -- comment", "`clicks -- comment`"),
        ("`x``; DROP TABLE victim; --`", "`x``; DROP TABLE victim; --`"),
    ],
)
def test_table_names_are_quoted_per_part(name, quoted):
    assert quote_table_name(name) == quoted
    assert split_table_name(quoted) == split_table_name(name)  # quoting is stable


@pytest.mark.parametrize(
    "name, error",
    [
        ("", "not a table name: ''"),
        ("db..t", "table name 'db..t' has an empty part"),
        ("t.", "table name 't.' ends with a dot"),
        (
            "x` ; DROP TABLE victim; --",
            "table name 'x` ; DROP TABLE victim; --': a backtick inside an unquoted part (quote the part: `a``b`)",
        ),
        ("`open", "table name '`open' has an unclosed backtick"),
        ("`a`b", "table name '`a`b': unexpected text after a quoted part at 3"),
    ],
)
def test_malformed_table_names_are_rejected(name, error):
    with pytest.raises(ValueError) as info:
        quote_table_name(name)
    assert str(info.value) == error


@pytest.mark.timeout(300)
def test_spark_table_names_never_become_sql(spark, tmp_path):
    """A table whose name is a SQL keyword resolves (it was a parse error), and a hostile name
    is one identifier that matches no table: the victim table is still there."""
    from raylink.connectors.spark.table_source import resolve_table_location

    spark.sql("CREATE TABLE IF NOT EXISTS victim (x INT) USING parquet")
    spark.sql("CREATE TABLE IF NOT EXISTS `union` (x INT, s STRING) USING parquet")
    location, schema, description = resolve_table_location("union", spark)
    assert schema.names == ["x", "s"] and location.endswith("/union") and description.startswith("table union")
    for hostile in ("victim; DROP TABLE victim", "victim -- x", "victim x"):
        with pytest.raises(ValueError, match=r"from_spark_table: no table"):
            resolve_table_location(hostile, spark)
    with pytest.raises(ValueError, match="a backtick inside an unquoted part"):
        resolve_table_location("victim`; DROP TABLE victim; --", spark)
    assert spark.catalog.tableExists("victim")


# -- metrics.port -------------------------------------------------------------------------------------------
@pytest.fixture
def busy_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


def metrics_env(target: str, port: int) -> StreamExecutionEnvironment:
    conf = Configuration().set_string("execution.target", target).set_integer("metrics.port", port)
    env = StreamExecutionEnvironment.get_execution_environment(conf)
    env.set_parallelism(2)
    env.from_collection(list(range(100))).map(lambda x: x + 1).key_by(lambda x: x % 2).sum(0)
    return env


def test_busy_metrics_port_names_the_key_and_port(busy_port):
    env = metrics_env("local", busy_port)
    with pytest.raises(MetricsPortError) as info:
        env.execute("metrics on a busy port")
    assert str(info.value) == (
        f"metrics.port {busy_port} is already in use on 127.0.0.1 (choose another port, "
        f"0 for any free one, or -1 to turn it off)"
    )


@pytest.mark.timeout(180)
def test_busy_metrics_port_on_ray_releases_every_task_executor(ray_session, busy_port):
    import ray

    from raylink.actors.ray_executor import RayJobClient

    client = RayJobClient(metrics_env("ray", busy_port), "metrics on a busy port")  # what execute_async does
    assert len(client.handles) >= 2  # TaskExecutor actors were started and deployed
    with pytest.raises(MetricsPortError, match=f"metrics.port {busy_port} is already in use"):
        client.start()
    for handle in client.handles.values():  # a call to a killed actor fails (it does not wait for ever)
        with pytest.raises(ray.exceptions.RayActorError):
            ray.get(handle.location.remote(), timeout=60)
    assert client.wait(0) and client.get_job_status() == "FAILED"


# -- the Spark bridge's exit cleanup ------------------------------------------------------------------------
BRIDGE_SCRIPT = textwrap.dedent("""
    import time
    import ray
    ray.init(num_cpus=1, include_dashboard=False)
    from raylink.connectors.spark.bridge import register_sink_target
    register_sink_target("sink-1", object())   # the bridge actor, its commit thread, the atexit hook
    ray.shutdown()                             # the user's own shutdown
    print("EXITING", time.time(), flush=True)
""")


@pytest.mark.timeout(180)
def test_bridge_cleanup_at_exit_never_starts_ray(tmp_path):
    script = tmp_path / "bridge_exit.py"
    script.write_text(BRIDGE_SCRIPT)
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=150)
    ended = time.time()
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output
    assert output.count("Started a local Ray instance") == 1, output
    exiting = float(next(line.split()[1] for line in proc.stdout.splitlines() if line.startswith("EXITING")))
    assert ended - exiting < 8.0, f"{ended - exiting:.1f} s from the last line to the process's end"
