"""End to end: failing user functions, cancellation and bad input end the job cleanly,
with an error that names the operator and the cause, and no runtime thread left."""

from __future__ import annotations

import pickle
import threading
import time

import pytest

from raylink.api.functions import KeyedProcessFunction, MapFunction, SourceFunction
from raylink.runtime.client.job_result import JobExecutionException
from raylink.runtime.task.task_events import RemoteTraceback
from raylink.tests.runtime_jobs import (
    CountingSource,
    cause_chain,
    leftover_runtime_threads,
    make_env,
    reset_signal,
    wait_for,
)

pytestmark = pytest.mark.timeout(60)

SMALL_BUFFERS = {"taskmanager.memory.segment-size": 1024, "taskmanager.network.numberOfBuffers": 64}


@pytest.fixture(autouse=True)
def no_runtime_threads_before():
    assert leftover_runtime_threads() == []


class Boom(Exception):
    pass


def explode_at_777(x):
    if x == 777:
        raise ValueError(f"boom at {x}")
    return x


class ExplodingSource(SourceFunction):
    def run(self, ctx):
        for i in range(100):
            ctx.collect(i)
        raise Boom("source gave up")


class ExplodingOpen(MapFunction):
    def open(self, runtime_context):
        raise Boom(f"cannot open subtask {runtime_context.get_index_of_this_subtask()}")

    def map(self, value):
        return value


class ExplodingKeyed(KeyedProcessFunction):
    def process_element(self, value, ctx):
        if ctx.get_current_key() == 3 and value > 500:
            raise Boom(f"bad key {ctx.get_current_key()}")
        yield value


def failing_head(env):
    env.from_sequence(1, 2000).rebalance().map(explode_at_777).name("exploding-map").set_parallelism(2).add_sink(
        lambda x: None
    )


def failing_chained(env):
    env.from_sequence(1, 2000).map(lambda x: x + 0).name("harmless").map(explode_at_777).name("exploding-map").add_sink(
        lambda x: None
    )


def failing_source(env):
    env.add_source(ExplodingSource(), "exploding-source").map(lambda x: x).add_sink(lambda x: None)


def failing_open(env):
    env.from_sequence(1, 10).rebalance().map(ExplodingOpen()).name("exploding-open").add_sink(lambda x: None)


def failing_keyed(env):
    env.from_sequence(1, 2000).key_by(lambda x: x % 7).process(ExplodingKeyed()).name("exploding-keyed").add_sink(
        lambda x: None
    )


def failing_sink(env):
    env.from_sequence(1, 2000).rebalance().add_sink(explode_at_777).name("exploding-sink")


def failing_under_back_pressure(env):
    # a long input behind small buffers: the sources are back-pressured when the map fails
    env.from_sequence(1, 2_000_000).rebalance().map(explode_at_777).name("exploding-map").add_sink(lambda x: None)


FAILURES = {
    "head": (failing_head, "exploding-map", ValueError, "boom at 777"),
    "chained": (failing_chained, "exploding-map", ValueError, "boom at 777"),
    "source": (failing_source, "Source: exploding-source", Boom, "source gave up"),
    "open": (failing_open, "exploding-open", Boom, "cannot open subtask"),
    "keyed": (failing_keyed, "exploding-keyed", Boom, "bad key 3"),
    "sink": (failing_sink, "Sink: exploding-sink", ValueError, "boom at 777"),
    "back-pressured": (failing_under_back_pressure, "exploding-map", ValueError, "boom at 777"),
}


@pytest.mark.parametrize("where", list(FAILURES))
def test_raising_user_function_fails_the_job_naming_operator_and_cause(target, where):
    build, operator, error_type, text = FAILURES[where]
    env = make_env(target, 2, SMALL_BUFFERS)
    build(env)
    with pytest.raises(JobExecutionException) as info:
        env.execute()
    error = info.value
    message = str(error)
    assert error.status == "FAILED"
    assert f"'{operator}'" in message
    assert f"{error_type.__name__}: {text}" in message
    chain = cause_chain(error)
    originals = [e for e in chain if type(e) is error_type]
    assert len(originals) == 1 and text in str(originals[0]), [repr(e) for e in chain]
    # the original exception ends the chain, followed only by its traceback in the task
    assert chain[-2] is originals[0] and isinstance(chain[-1], RemoteTraceback), [repr(e) for e in chain]
    assert f"{error_type.__name__}: {text}" in chain[-1].text
    assert leftover_runtime_threads() == []


def test_failure_is_reported_by_execute_async_client(target):
    env = make_env(target, 2)
    failing_head(env)
    client = env.execute_async()
    assert client.wait(20)
    assert client.get_job_status() == "FAILED"
    with pytest.raises(JobExecutionException, match="boom at 777"):
        client.get_job_execution_result(5)
    states = sorted(m["state"] for m in client.get_metrics())
    assert "FAILED" in states and set(states) <= {"FAILED", "CANCELED", "FINISHED"}
    assert leftover_runtime_threads() == []


def test_task_error_keeps_its_cause_chain_across_a_process_boundary(target):
    env = make_env(target, 2)
    failing_head(env)
    with pytest.raises(JobExecutionException) as info:
        env.execute()
    task_error = info.value.__cause__
    shipped = pickle.loads(pickle.dumps(task_error))
    assert [type(e) for e in cause_chain(shipped)] == [type(task_error), ValueError]


# -- cancellation -------------------------------------------------------------------------------------------
class SignalFirstRecord(MapFunction):
    def __init__(self, signal_name):
        self.signal_name = signal_name

    def map(self, value):
        from raylink.tests.runtime_jobs import signal

        signal(self.signal_name).set()
        return value


def wait_until_records_flow(client, target, started, timeout=10.0):
    if target == "local":
        return started.wait(timeout)
    return wait_for(lambda: sum(m.get("numRecordsIn", 0) for m in client.get_metrics()) > 0, client, timeout)


def slow_identity(x):
    if x % 16 == 0:
        time.sleep(0.001)
    return x


@pytest.mark.parametrize("parallelism,slow", [(1, False), (3, False), (2, True)], ids=["p1", "p3", "p2-back-pressured"])
def test_cancel_unbounded_job(target, parallelism, slow):
    name = f"cancel-{parallelism}-{slow}"
    started = reset_signal(name)
    env = make_env(target, parallelism, SMALL_BUFFERS)
    (
        env.add_source(CountingSource(), "counting")
        .rebalance()
        .map(SignalFirstRecord(name))
        .name("tap")
        .key_by(lambda x: x % 10)
        .map(slow_identity if slow else (lambda x: x))
        .add_sink(lambda x: None)
    )
    client = env.execute_async()
    assert wait_until_records_flow(client, target, started)
    assert client.get_job_status() == "RUNNING"
    if slow:  # cancel() arrives while the source is blocked on a full output pool

        def source_back_pressured():
            return any(
                m["task"].startswith("Source: ") and m["backPressuredTimeMsPerSecond"] > 0 for m in client.get_metrics()
            )

        assert wait_for(source_back_pressured, client)
    client.cancel()
    assert client.wait(5), "job did not end within 5 s of cancel()"
    assert client.get_job_status() == "CANCELED"
    with pytest.raises(JobExecutionException) as info:
        client.get_job_execution_result(5)
    assert info.value.status == "CANCELED"
    assert {m["state"] for m in client.get_metrics()} == {"CANCELED"}
    assert leftover_runtime_threads() == []


def test_cancel_long_bounded_job(target):
    env = make_env(target, 2, SMALL_BUFFERS)
    started = reset_signal("cancel-bounded")
    env.from_sequence(1, 50_000_000).rebalance().map(SignalFirstRecord("cancel-bounded")).add_sink(lambda x: None)
    client = env.execute_async()
    assert wait_until_records_flow(client, target, started)
    client.cancel()
    assert client.wait(5)
    assert client.get_job_status() == "CANCELED"
    assert leftover_runtime_threads() == []


# -- bad input ---------------------------------------------------------------------------------------------
def lock_at_5(x):
    return threading.Lock() if x == 5 else x


def test_unserialisable_record_across_an_exchange_fails_naming_operator_and_type(target):
    env = make_env(target, 2)
    env.from_sequence(1, 10).map(lock_at_5).name("make-lock").rebalance().map(lambda x: x).add_sink(lambda x: None)
    with pytest.raises(JobExecutionException) as info:
        env.execute()
    message = str(info.value)
    assert info.value.status == "FAILED"
    assert "'make-lock'" in message
    assert "Cannot serialize a value of type '_thread.lock'" in message
    assert leftover_runtime_threads() == []


def test_unserialisable_record_error_keeps_its_types(target):
    env = make_env(target, 2)
    env.from_sequence(1, 10).map(lock_at_5).name("make-lock").rebalance().map(lambda x: x).add_sink(lambda x: None)
    with pytest.raises(JobExecutionException) as info:
        env.execute()
    chain = cause_chain(info.value)
    assert any(isinstance(e, TypeError) and "_thread.lock" in str(e) for e in chain), [repr(e) for e in chain]


def test_unserialisable_records_are_fine_inside_a_chain(target):
    env = make_env(target, 2)
    out = list(
        env.from_sequence(1, 6)
        .map(lambda x: threading.Lock())
        .map(lambda lock: type(lock).__name__)
        .execute_and_collect()
    )
    assert out == ["lock"] * 6


def test_none_key_fails_with_assigned_key_must_not_be_null(target):
    env = make_env(target, 2)
    env.from_sequence(1, 100).map(lambda x: x).name("make-keys").key_by(lambda x: None if x == 42 else x % 3).reduce(
        lambda a, b: a + b
    ).add_sink(lambda x: None)
    with pytest.raises(JobExecutionException) as info:
        env.execute()
    message = str(info.value)
    assert "Assigned key must not be null" in message
    assert "'make-keys'" in message
    assert any(type(e) is ValueError and "Assigned key must not be null" in str(e) for e in cause_chain(info.value))
    assert leftover_runtime_threads() == []


def test_none_key_in_a_chained_keyed_operator_also_fails(target):
    # key_by with equal parallelism still crosses a HASH exchange; the keyed operator checks again
    env = make_env(target, 1)
    env.from_collection([(None, 1)]).key_by(lambda t: t[0]).reduce(lambda a, b: a).add_sink(lambda x: None)
    with pytest.raises(JobExecutionException, match="Assigned key must not be null"):
        env.execute()
    assert leftover_runtime_threads() == []
