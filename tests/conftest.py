"""Session fixtures: one local Ray for the whole test session (started lazily, shut down at the end)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def ray_session():
    """A fresh local Ray instance (never someone else's cluster), shared by every Ray test."""
    import ray

    started = False
    if not ray.is_initialized():
        ray.init(address="local", include_dashboard=False, configure_logging=False)
        started = True
    yield ray
    if started:
        ray.shutdown()


def pytest_collection_modifyitems(config, items):
    """Run the Ray and Spark tests after the in-process ones (cheap failures first)."""
    def weight(item):
        name = item.nodeid
        return 1 if ("ray" in name or "spark" in name or "multinode" in name) else 0

    items.sort(key=weight)
