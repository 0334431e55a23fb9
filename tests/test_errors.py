"""Every exception raylink defines is a ``RaylinkError`` and keeps its built-in base."""

from __future__ import annotations

import importlib
import pkgutil
import threading

import pytest

import raylink
from raylink import RaylinkError
from raylink.api import GraphError, StreamExecutionEnvironment
from raylink.runtime.client.job_result import JobExecutionException
from raylink.shuffle.codec import SerializationError, encode
from raylink.tests.runtime_jobs import make_env

pytestmark = pytest.mark.timeout(60)

#: deliberately outside the root: BaseExceptions that unwind a task / the CLI (an ``except
#: Exception`` must not catch them); private (``_Name``) control-flow exceptions are left out too
NOT_RAYLINK_ERRORS = {
    "raylink.runtime.task.stream_task.CancelTaskException",
    "raylink.cli.progress.Terminated",
}


def raylink_modules() -> list:
    """Every module of the package (not the tests); ones whose optional extra is missing are left out."""
    modules = []
    for info in pkgutil.walk_packages(raylink.__path__, "raylink."):
        if info.name.startswith(("raylink.tests", "raylink.examples")) or info.name.endswith("__main__"):
            continue
        try:
            modules.append(importlib.import_module(info.name))
        except ImportError:  # e.g. the Spark connector without raylink[spark]
            continue
    return modules


def test_every_exception_class_raylink_defines_is_a_raylink_error():
    found = {}
    for module in raylink_modules():
        for value in vars(module).values():
            if isinstance(value, type) and issubclass(value, BaseException) and value.__module__ == module.__name__:
                found[f"{value.__module__}.{value.__qualname__}"] = value
    assert len(found) >= 25, sorted(found)  # the walk did find them
    outside = sorted(
        name
        for name, cls in found.items()  # private ones never leave their module
        if not issubclass(cls, RaylinkError) and name not in NOT_RAYLINK_ERRORS and not cls.__name__.startswith("_")
    )
    assert outside == []
    # each keeps a built-in base besides the root (except the root itself and the CLI's own)
    bare = sorted(
        name
        for name, cls in found.items()
        if issubclass(cls, RaylinkError)
        and not any(
            b for b in cls.__mro__[1:] if b.__module__ == "builtins" and b not in (Exception, BaseException, object)
        )
    )
    assert bare == ["raylink.cli.common.CliError", "raylink.errors.RaylinkError"]


def test_cancel_task_exception_is_not_caught_by_except_exception():
    from raylink.runtime.task.stream_task import CancelTaskException

    assert not issubclass(CancelTaskException, Exception)
    assert not issubclass(CancelTaskException, RaylinkError)


def test_one_except_catches_a_graph_error_a_serialization_error_and_a_failed_job():
    env = StreamExecutionEnvironment.get_execution_environment()
    with pytest.raises(RaylinkError) as info:
        env.from_collection([1, 2]).map(lambda v: v).set_parallelism(0)
    assert isinstance(info.value, GraphError)

    with pytest.raises(RaylinkError) as info:
        encode(threading.Lock())
    assert isinstance(info.value, SerializationError) and isinstance(info.value, TypeError)

    env = make_env("local", 1)
    env.from_collection([1, 2, 3]).map(lambda v: 1 // 0).add_sink(lambda v: None)
    with pytest.raises(RaylinkError) as info:
        env.execute("fails")
    assert isinstance(info.value, JobExecutionException) and isinstance(info.value, RuntimeError)
    assert str(info.value).startswith("Job 'fails' failed: Operator 'Map'") and "ZeroDivisionError" in str(info.value)


def test_builtin_bases_still_catch_them():
    env = StreamExecutionEnvironment.get_execution_environment()
    with pytest.raises(ValueError, match="parallelism"):
        env.from_collection([1, 2]).map(lambda v: v).set_parallelism(0)
    assert raylink.RaylinkError is RaylinkError
    from raylink.api import RaylinkError as from_api

    assert from_api is RaylinkError
