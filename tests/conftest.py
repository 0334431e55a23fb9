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


def pytest_collection_modifyitems(config, items):
    """Run the Ray and Spark tests after the in-process ones (cheap failures first)."""
    def weight(item):
        name = item.nodeid
        uses_ray = "ray_session" in getattr(item, "fixturenames", ()) or "spark" in getattr(item, "fixturenames", ())
        return 1 if (uses_ray or "ray" in name or "spark" in name or "multinode" in name) else 0

    items.sort(key=weight)


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
    session = get_spark(num_executors=1, executor_cores=1, executor_memory="1G",
                        warehouse_dir=str(warehouse))
    yield session
    stop(shutdown_ray=False)  # the Spark bridge and the session raylink started
    raydp.stop_spark()  # no-op when stop() already stopped it
