"""Session fixtures: one local Ray for the whole test session (started lazily, shut down at the end),
and the ``target`` every runtime end-to-end test runs on."""

from __future__ import annotations

import pytest

from raylink.tests.runtime_jobs import TARGETS


@pytest.fixture(scope="session")
def ray_session():
    """A fresh local Ray instance (never someone else's cluster), shared by every Ray test."""
    import ray

    started = False
    if not ray.is_initialized():
        from raylink.actors.ray_executor import init_ray

        init_ray("local", include_dashboard=False, configure_logging=False)
        started = True
    yield ray
    if started:
        ray.shutdown()


@pytest.fixture(params=TARGETS)
def target(request):
    """Runs a runtime end-to-end test once per executor target."""
    if request.param == "ray":
        request.getfixturevalue("ray_session")
    return request.param


@pytest.fixture(params=["hashmap", "rocksdb"])
def state_backend(request, monkeypatch, tmp_path_factory):
    """Runs a keyed-state test once per state backend: ``state.backend.type`` with incremental
    checkpoints (rocksdb with its own local folder) through ``RAYLINK_CONF``, under what the
    test configures itself; after a rocksdb run the folder must exist (the backend ran)."""
    import json
    import os

    conf = json.loads(os.environ.get("RAYLINK_CONF") or "{}")
    conf["state.backend.type"] = request.param
    localdir = None
    if request.param == "rocksdb":
        localdir = str(tmp_path_factory.mktemp("rocksdb-local"))
        os.rmdir(localdir)
        conf["state.backend.rocksdb.localdir"] = localdir
    conf["execution.checkpointing.incremental"] = "true"
    monkeypatch.setenv("RAYLINK_CONF", json.dumps(conf))
    yield request.param
    if localdir is not None:
        assert os.path.isdir(localdir), "the job ran no RocksDB backend"


def _uses(item, *fixtures) -> bool:
    names = getattr(item, "fixturenames", ())
    return any(name in names for name in fixtures)


def pytest_collection_modifyitems(config, items):
    """Mark what each test needs (``ray``, ``spark``, ``kafka``, ``multinode``; see pyproject.toml's
    markers, so ``-m "not ray"`` runs only the in-process tests) and run the in-process
    tests first, then Ray, then Spark (tests starting a Spark of their own before the session-wide
    ``spark`` fixture starts its one), then multi-node clusters (cheap failures first)."""
    for item in items:
        callspec = getattr(item, "callspec", None)
        on_ray = callspec is not None and callspec.params.get("target") == "ray"
        if on_ray or _uses(item, "ray_session", "spark") or item.get_closest_marker("multinode"):
            item.add_marker(pytest.mark.ray)
        if _uses(item, "spark"):
            item.add_marker(pytest.mark.spark)
        if _uses(item, "kafka_broker"):
            item.add_marker(pytest.mark.kafka)

    def weight(item):
        if item.get_closest_marker("multinode"):
            return 3
        if item.get_closest_marker("spark"):  # a Spark of the test's own first, then the shared fixture's
            return 2 if _uses(item, "spark") else 1.5
        kafka = 0.25 if item.get_closest_marker("kafka") else 0  # after the others of their tier
        return (1 if item.get_closest_marker("ray") else 0) + kafka

    items.sort(key=weight)


@pytest.fixture(scope="session")
def kafka_broker():
    """One real single-node Kafka broker (KRaft) for the whole test session, started when a test
    first asks for it, stopped at the end (:class:`raylink.connectors.kafka.broker.KafkaBroker`;
    its jars come from scripts/kafka_jars.sh, run by setup)."""
    from raylink.connectors.kafka.broker import KafkaBroker

    with KafkaBroker() as broker:
        yield broker


@pytest.fixture(scope="session")
def spark(ray_session, tmp_path_factory):
    """One Spark-on-Ray session (RayDP) for the whole test session: 1 executor x 1 core,
    1 GiB, its warehouse in a temporary folder; stopped at the end (``raydp.stop_spark()``,
    before ``ray_session`` shuts Ray down)."""
    import os
    import sys

    import raydp

    from raylink.connectors.spark import get_spark, stop

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    warehouse = tmp_path_factory.mktemp("spark-warehouse")
    session = get_spark(num_executors=1, executor_cores=1, executor_memory="1G", warehouse_dir=str(warehouse))
    yield session
    stop(shutdown_ray=False)  # the Spark bridge and the session raylink started
    raydp.stop_spark()  # no-op when stop() already stopped it
