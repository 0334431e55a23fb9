"""Slow parts and cancellation, on both targets: a slow source's records leave within the
buffer timeout, a cancel ends a job busy in a slow or blocking user function, and
``execute_and_collect`` back-pressures the job instead of buffering without bound."""

from __future__ import annotations

import threading
import time

import pytest

from raylink.api.functions import MapFunction, SourceFunction
from raylink.runtime.client.job_result import JobExecutionException
from raylink.tests.runtime_jobs import make_env, signal, wait_for

BUFFER_TIMEOUT_MS = 100
#: the buffer timeout plus room for a loaded 2-core machine's scheduling; without the timeout's flush
#: the first of the 12 records (0.1 s apart, far too few to fill a buffer) would wait ~1.1 s for the end
LATENCY_BOUND_S = (BUFFER_TIMEOUT_MS + 300) / 1000.0


def slow_timestamps(count: int, per_second: float):
    """A generator source: ``count`` wall-clock timestamps, ``per_second`` of them a second."""
    for _ in range(count):
        time.sleep(1.0 / per_second)  # the source is slow: that is the workload
        yield time.time()


class SlowTimestampSource(SourceFunction):
    """The same as a legacy SourceFunction (runs on its own thread)."""

    def __init__(self, count: int, per_second: float) -> None:
        self.count = count
        self.per_second = per_second
        self.running = True

    def run(self, ctx) -> None:
        for _ in range(self.count):
            if not self.running:
                return
            time.sleep(1.0 / self.per_second)
            ctx.collect(time.time())

    def cancel(self) -> None:
        self.running = False


def delay_since(ts: float) -> float:
    return time.time() - ts


def slow_source(kind: str, count: int, per_second: float, env):
    if kind == "generator":
        return env.add_source(lambda: slow_timestamps(count, per_second), "slow generator")
    return env.add_source(SlowTimestampSource(count, per_second), "slow source function")


@pytest.mark.timeout(60)
@pytest.mark.parametrize("kind", ["generator", "source_function"])
@pytest.mark.parametrize("chained", [True, False], ids=["chained", "exchange"])
def test_a_slow_source_delivers_each_record_within_the_buffer_timeout(target, kind, chained):
    env = make_env(target, 1, {"execution.buffer-timeout": BUFFER_TIMEOUT_MS})
    stream = slow_source(kind, 12, 10.0, env)
    if not chained:
        stream = stream.rebalance()
    stream.map(delay_since).collect_sink("delays")
    delays = env.execute().get_accumulator_result("delays")
    assert len(delays) == 12
    assert max(delays) <= LATENCY_BOUND_S, [round(d * 1000) for d in delays]


# -- cancellation -----------------------------------------------------------------------------------
class SlowMap(MapFunction):
    """10 ms a record; tells the driver (local: an event) that records flow."""

    def __init__(self, name: str, target: str) -> None:
        self.name = name
        self.local = target == "local"

    def map(self, value):
        if self.local:
            from raylink.tests.runtime_jobs import signal

            signal(self.name).set()
        time.sleep(0.01)
        return value


def wait_until_running(client, target: str, name: str) -> None:
    if target == "local":
        assert signal(name).wait(30), "no record reached the slow map"
    else:
        assert wait_for(
            lambda: any(m["numRecordsIn"] > 0 for m in client.get_metrics() if m["task"].startswith("Map")),
            client,
            timeout=30,
        )


def time_to_cancel(client) -> float:
    start = time.monotonic()
    client.cancel()
    assert client.wait(10), "the job did not end within 10 s of cancel()"
    return time.monotonic() - start


@pytest.mark.timeout(90)
def test_cancel_behind_a_slow_map_ends_within_a_second(target):
    name = f"slow-map-{target}"
    signal(name).clear()
    env = make_env(target, 1)
    env.from_sequence(1, 10**9).rebalance().map(SlowMap(name, target)).add_sink(lambda v: None)
    client = env.execute_async()
    wait_until_running(client, target, name)
    assert time_to_cancel(client) < 1.0
    assert client.get_job_status() == "CANCELED"


@pytest.mark.timeout(90)
@pytest.mark.parametrize("kind", ["generator", "source_function"])
def test_cancel_of_a_slow_source_ends_within_a_second(target, kind):
    env = make_env(target, 1)
    slow_source(kind, 10**6, 10.0, env).rebalance().map(delay_since).add_sink(lambda v: None)
    client = env.execute_async()
    assert wait_for(
        lambda: any(m["numRecordsOut"] > 0 for m in client.get_metrics() if m["task"].startswith("Source")),
        client,
        timeout=30,
    )
    assert time_to_cancel(client) < 1.0
    assert client.get_job_status() == "CANCELED"


class BlockingMap(MapFunction):
    """Blocks in C (not interruptible) until the test releases it (local) or forever (Ray)."""

    def __init__(self, name: str, target: str) -> None:
        self.name = name
        self.target = target

    def map(self, value):
        if self.target == "local":
            from raylink.tests.runtime_jobs import signal

            signal(self.name + "-entered").set()
            signal(self.name).wait()  # released by the test when it is done
        else:
            time.sleep(3600)
        return value


@pytest.mark.timeout(90)
def test_a_blocking_function_fails_the_job_after_the_cancellation_timeout(target):
    name = f"blocking-{target}"
    signal(name).clear()
    signal(name + "-entered").clear()
    env = make_env(target, 1, {"task.cancellation.timeout": 2000, "task.cancellation.interval": 500})
    env.from_sequence(1, 10).rebalance().map(BlockingMap(name, target)).add_sink(lambda v: None)
    client = env.execute_async()
    try:
        if target == "local":
            assert signal(name + "-entered").wait(30)
        else:  # a record reached the map (which may run in another process than the source)
            assert wait_for(
                lambda: any(m["numRecordsIn"] > 0 for m in client.get_metrics() if m["task"].startswith("Map")),
                client,
                timeout=30,
            )
        start = time.monotonic()
        client.cancel()
        assert client.wait(10), "the job outlived its cancellation timeout"
        took = time.monotonic() - start
        assert 1.9 <= took < 5.0, took
        assert client.get_job_status() == "FAILED"
        with pytest.raises(JobExecutionException) as info:
            client.get_job_execution_result(1)
        message = str(info.value)
        assert "task.cancellation.timeout" in message and "2000 ms" in message
        assert "map" in message  # the stack it is stuck in names the user function
        if target == "ray":
            from raylink.tests.test_ray_runtime import task_executors_gone

            assert task_executors_gone(client)
    finally:
        signal(name).set()


# -- execute_and_collect ----------------------------------------------------------------------------
@pytest.mark.timeout(90)
def test_collect_with_a_limit_on_an_unbounded_job_returns_at_once(target):
    env = make_env(target, 1)
    results = env.from_sequence(1, 10**12).map(lambda v: v * 2).execute_and_collect(limit=5)
    start = time.monotonic()
    got = list(results)
    took = time.monotonic() - start
    assert got == [2, 4, 6, 8, 10]
    assert took < 0.5, took
    assert results.job_client.wait(10)
    assert results.job_client.get_job_status() == "CANCELED"


@pytest.mark.timeout(120)
def test_a_slow_collect_reader_back_pressures_the_job(target):
    """A reader taking 1 ms a record: the source is held back (bounded buffering)
    instead of running ahead of the reader by millions of records."""
    env = make_env(target, 1, {"raylink.collect.max-buffered-records": 1000})
    stream = env.from_sequence(1, 10**12).map(lambda v: v)
    read = 0
    with stream.execute_and_collect() as results:
        client = results.job_client
        deadline = time.monotonic() + 3.0
        for value in results:
            read += 1
            assert value == read
            time.sleep(0.001)  # the slow reader (the workload)
            if time.monotonic() > deadline:
                break
        emitted = max(m["numRecordsOut"] for m in client.get_metrics() if m["task"].startswith("Source"))
    # in flight at most: the collect buffer, one fetch, and the network buffers of one exchange
    assert read >= 500
    assert emitted - read < 300_000, (emitted, read)
    assert client.wait(10) and client.get_job_status() == "CANCELED"


@pytest.mark.timeout(60)
def test_collect_returns_every_record_of_a_bounded_job_in_order(target):
    env = make_env(target, 1, {"raylink.collect.max-buffered-records": 100})
    got = list(env.from_sequence(1, 50_000).map(lambda v: v + 1).execute_and_collect())
    assert got == list(range(2, 50_002))


@pytest.mark.timeout(60)
def test_collect_at_parallelism_three_returns_every_record_once(target):
    env = make_env(target, 3, {"raylink.collect.max-buffered-records": 100})
    got = list(env.from_sequence(1, 30_000).rebalance().map(lambda v: v).execute_and_collect())
    assert sorted(got) == list(range(1, 30_001))


@pytest.mark.timeout(60)
def test_collect_reports_a_failure_after_the_records_before_it(target):
    def fail_at(v):
        if v == 5000:
            raise ValueError("record 5000 is bad")
        return v

    env = make_env(target, 1, {"raylink.collect.max-buffered-records": 100})
    got = []
    with pytest.raises(JobExecutionException, match="record 5000 is bad"):
        for value in env.from_sequence(1, 10_000).map(fail_at).execute_and_collect():
            got.append(value)
    assert got == list(range(1, len(got) + 1))


def test_collect_buffer_blocks_its_writer_until_read():
    from raylink.operators.collect import CollectBuffer

    buffer = CollectBuffer(max_records=2)
    buffer.add([1, 2])
    added = threading.Event()

    def writer():
        buffer.add([3])
        added.set()

    thread = threading.Thread(target=writer, daemon=True)
    thread.start()
    assert not added.wait(0.2), "add() did not block on a full buffer"
    assert buffer.take() == ([1, 2], False)
    assert added.wait(5)
    assert buffer.close() == [3]
    assert buffer.take() == ([], True)
    buffer.add([4])  # after close: dropped, never blocks
    assert len(buffer) == 0
    thread.join(5)
