"""End to end: the network stack under jobs — back pressure and bounded buffers, records
larger than a buffer, buffer timeouts (flush rules) and the task I/O metrics."""

from __future__ import annotations

import base64
import math
import random
import time
from collections import Counter

import pytest

from raylink.api import OutputTag
from raylink.api.functions import ProcessFunction, SourceFunction
from raylink.tests.runtime_jobs import collected, make_env, reset_signal, signal

pytestmark = pytest.mark.timeout(60)


# -- back pressure ---------------------------------------------------------------------------------------
NUM_RECORDS = 20_000
SEGMENT = 1024
SMALL_NETWORK = {
    "taskmanager.memory.segment-size": SEGMENT,
    "taskmanager.network.numberOfBuffers": 32,
    "taskmanager.network.memory.buffers-per-channel": 2,
    "taskmanager.network.memory.floating-buffers-per-gate": 2,
    # on Ray a remote channel's credit is two batches of buffers: keep it at 2 x 2 buffers,
    # or the whole output (~60 KiB) fits in the channels' credit and nothing ever waits
    "raylink.network.max-batch-bytes": 2 * SEGMENT,
}
SOURCE_BATCH = 1024  # records a source emits per default action (StreamTask.SOURCE_BATCH_SIZE)
MAX_RECORD_BYTES = 3  # msgpack of an int <= 65535


def slow_identity(x):
    if x % 16 == 0:
        time.sleep(0.001)  # a slow consumer: ~1 ms per 16 records
    return x


def test_slow_sink_back_pressures_the_source_with_bounded_buffers(target):
    env = make_env(target, 2, SMALL_NETWORK)
    (
        env.from_sequence(1, NUM_RECORDS)
        .set_parallelism(1)
        .name("numbers")
        .rebalance()
        .map(slow_identity)
        .name("slow")
        .set_parallelism(2)
        .collect_sink("received")
    )
    client = env.execute_async()

    partition = pool = None
    if target == "local":
        (partition,) = client.task_executor.partitions.values()  # the source's rebalance output
        pool = partition.buffer_pool
    max_in_use = max_backlog = samples = 0
    live_back_pressure = 0.0
    max_out_pool_usage = 0.0
    while not client.wait(0.002):
        samples += 1
        if pool is not None:
            max_in_use = max(max_in_use, pool.num_in_use)
            max_backlog = max(max_backlog, *(sub.backlog for sub in partition.subpartitions))
        for m in client.get_metrics():
            if m["task"].startswith("Source: "):
                live_back_pressure = max(live_back_pressure, m["backPressuredTimeMsPerSecond"])
                max_out_pool_usage = max(max_out_pool_usage, m["outPoolUsage"])
    result = client.get_job_execution_result(30)

    assert sorted(collected(result, "received")) == list(range(1, NUM_RECORDS + 1))
    (source,) = [m for m in result.task_metrics if m["task"].startswith("Source: ")]
    assert source["numRecordsOut"] == NUM_RECORDS
    # the per-second gauge of a finished task covers only its last second; the life total does not
    assert source["accumulateBackPressuredTimeMs"] > 0
    assert live_back_pressure > 0, "back pressure was not visible while the job ran"
    assert samples >= 20

    # the pool holds (2 channels x 2 + 2 floating) buffers; beyond that a task may only overdraft
    # the buffers of the one batch it is emitting plus one flushed partial buffer per channel.
    channels = 2
    max_buffers = channels * 2 + 2
    overdraft = math.ceil(SOURCE_BATCH * MAX_RECORD_BYTES / SEGMENT) + 2 * channels
    bound = max_buffers + overdraft
    total = math.ceil(NUM_RECORDS * MAX_RECORD_BYTES / SEGMENT)
    assert bound * 3 < total  # the bound is meaningful: an unbounded exchange could queue everything
    assert max_out_pool_usage <= bound / max_buffers
    if pool is not None:
        assert pool.max_buffers == max_buffers
        assert 0 < max_in_use <= bound
        assert 0 < max_backlog <= bound
        assert pool.num_in_use == 0  # every permit came back


# -- records larger than a buffer ----------------------------------------------------------------------------
def test_five_mib_records_cross_a_32_kib_buffer_exchange_intact(target):
    rng = random.Random(5)
    big_bytes = rng.randbytes(5 * 1024 * 1024)
    big_str = "äöü€" + base64.b64encode(big_bytes[: 5 * 1024 * 1024 // 4 * 3]).decode() + "€"
    records = [b"head", big_bytes, ("tuple", big_bytes[:1000], 7), big_str, "tail"]
    env = make_env(target, 2, {"taskmanager.memory.segment-size": 32 * 1024})
    out = list(env.from_collection(records).rebalance().map(lambda v: v).set_parallelism(2).execute_and_collect())
    assert len(out) == len(records)
    assert Counter(map(repr, out)) == Counter(map(repr, records))
    assert [type(v) for v in out if isinstance(v, tuple)] == [tuple]


# -- buffer timeout ---------------------------------------------------------------------------------------------
WAIT_FOR_DELIVERY_S = 2.0


class OneThenWait(SourceFunction):
    """Emits "first", then waits until a downstream task has received it (or gives up)."""

    def __init__(self, signal_name, wait_s):
        self.signal_name = signal_name
        self.wait_s = wait_s
        self.running = True

    def run(self, ctx):
        delivered = signal(self.signal_name)
        ctx.collect("first")
        deadline = time.monotonic() + self.wait_s
        while self.running and not delivered.is_set() and time.monotonic() < deadline:
            delivered.wait(0.05)
        ctx.collect(("delivered before the next record", delivered.is_set()))

    def cancel(self):
        self.running = False


class SignalOn:
    def __init__(self, signal_name, value):
        self.signal_name = signal_name
        self.value = value

    def __call__(self, v):
        if v == self.value:
            signal(self.signal_name).set()
        return v


def run_one_then_wait(timeout_ms):
    """On the local target only: source and sink signal each other through an in-process event."""
    name = f"source-delivered-{timeout_ms}"
    reset_signal(name)
    env = make_env("local", 2)
    env.set_buffer_timeout(timeout_ms)
    out = list(
        env.add_source(OneThenWait(name, WAIT_FOR_DELIVERY_S), "one-then-wait")
        .set_parallelism(1)
        .rebalance()
        .map(SignalOn(name, "first"))
        .execute_and_collect()
    )
    return sorted(map(repr, out))


DELIVERED = sorted(map(repr, ["first", ("delivered before the next record", True)]))


def test_buffer_timeout_zero_delivers_a_source_record_before_the_source_goes_on():
    # deadlocks (and the source gives up after 2 s) unless "first" is flushed at once
    assert run_one_then_wait(0) == DELIVERED


def test_buffer_timeout_100_delivers_a_waiting_source_record_within_the_timeout():
    assert run_one_then_wait(100) == DELIVERED


SIDE = OutputTag("side")


class SideThenWait(ProcessFunction):
    """On 1: emit it to the side output; on 2: wait until the side record was received."""

    def __init__(self, signal_name, wait_s):
        self.signal_name = signal_name
        self.wait_s = wait_s

    def process_element(self, value, ctx):
        if value == 1:
            ctx.output(SIDE, "side-1")
        else:
            delivered = signal(self.signal_name)
            delivered.wait(self.wait_s)
            yield ("delivered before the next record", delivered.is_set())


def run_side_then_wait(timeout_ms, wait_s):
    """On the local target only: the two tasks signal each other through an in-process event."""
    name = f"side-delivered-{timeout_ms}"
    reset_signal(name)
    env = make_env("local", 2)
    env.set_buffer_timeout(timeout_ms)
    main = env.from_collection([1, 2]).process(SideThenWait(name, wait_s)).name("side-then-wait").set_parallelism(1)
    side = main.get_side_output(SIDE).rebalance().map(SignalOn(name, "side-1")).set_parallelism(2)
    out = list(main.rebalance().map(lambda v: v).union(side).execute_and_collect())
    return sorted(map(repr, out))


def test_buffer_timeout_zero_flushes_every_record_at_once():
    out = run_side_then_wait(0, WAIT_FOR_DELIVERY_S)
    assert out == sorted(map(repr, ["side-1", ("delivered before the next record", True)]))


def test_buffer_timeout_minus_one_delivers_partial_buffers_only_at_end_of_input():
    out = run_side_then_wait(-1, 0.3)
    # nothing flushed the partial buffer while the task waited, yet the record arrived at the end
    assert out == sorted(map(repr, ["side-1", ("delivered before the next record", False)]))


@pytest.mark.parametrize("timeout_ms", [-1, 0, 100])
def test_partial_buffers_are_delivered_at_end_of_input(target, timeout_ms):
    env = make_env(target, 2)
    env.set_buffer_timeout(timeout_ms)
    out = list(
        env.from_collection(["a", "b", "c"])
        .rebalance()
        .map(str.upper)
        .set_parallelism(2)
        .key_by(lambda s: s)
        .map(lambda s: s + "!")
        .set_parallelism(3)
        .execute_and_collect()
    )
    assert sorted(out) == ["A!", "B!", "C!"]


# -- metrics ---------------------------------------------------------------------------------------------------------
def test_records_in_and_out_add_up_across_exchanges(target):
    n = 9000
    kept = sum(1 for x in range(1, n + 1) if x % 3)
    env = make_env(target, 2)
    (
        env.from_sequence(1, n)
        .filter(lambda x: x % 3)
        .name("drop-thirds")
        .rebalance()
        .map(lambda x: x * 2)
        .name("double")
        .set_parallelism(3)
        .key_by(lambda x: x % 5)
        .map(lambda x: x)
        .name("keyed")
        .add_sink(lambda x: None)
        .name("discard")
    )
    result = env.execute()
    tasks = {}
    for m in result.task_metrics:
        tasks.setdefault(m["vertex_name"], []).append(m)
    assert {name: len(ms) for name, ms in tasks.items()} == {
        "Source: Sequence Source -> drop-thirds": 2,
        "double": 3,
        "keyed -> Sink: discard": 2,
    }

    def total(vertex, metric):
        return sum(m[metric] for m in tasks[vertex])

    assert total("Source: Sequence Source -> drop-thirds", "numRecordsIn") == 0
    assert total("Source: Sequence Source -> drop-thirds", "numRecordsOut") == kept
    assert total("double", "numRecordsIn") == kept
    assert total("double", "numRecordsOut") == kept
    assert total("keyed -> Sink: discard", "numRecordsIn") == kept
    assert total("keyed -> Sink: discard", "numRecordsOut") == 0
    assert all(m["state"] == "FINISHED" for m in result.task_metrics)
    vertex = result.vertex_metrics()
    assert vertex["double"]["numRecordsIn"] == kept and vertex["double"]["subtasks"] == 3


# -- declared output types and batched remote transport ------------------------------------------------------------
def as_pair_list(x):
    return [f"k{x % 3}", x]  # a list record


def test_a_declared_tuple_type_delivers_tuples_and_undeclared_lists_stay_lists(target):
    from raylink.api import Types

    env = make_env(target, 2)
    numbers = env.from_sequence(1, 300)
    numbers.map(as_pair_list, output_type=Types.TUPLE([Types.STRING(), Types.INT()])).rebalance().map(
        lambda v: v
    ).collect_sink("typed")
    numbers.map(as_pair_list).rebalance().map(lambda v: v).collect_sink("untyped")
    result = env.execute()
    typed, untyped = collected(result, "typed"), collected(result, "untyped")
    # PyFlink's coders convert to the declared type: the list arrives as a tuple
    assert sorted(typed) == sorted((f"k{x % 3}", x) for x in range(1, 301))
    assert all(type(v) is tuple for v in typed)
    assert sorted(untyped) == sorted([f"k{x % 3}", x] for x in range(1, 301))
    assert all(type(v) is list for v in untyped)


def test_remote_buffers_travel_in_batches_within_their_credit(ray_session):
    env = make_env("ray", 1)
    n = 60_000
    (
        env.from_sequence(1, n)
        .slot_sharing_group("producer")
        .map(lambda x: (f"word{x % 100}", x))
        .name("pairs")
        .key_by(lambda kv: kv[0])
        .sum(1)
        .slot_sharing_group("consumer")
        .collect_sink("sums")
    )
    result = env.execute()
    finals = {}
    for word, total in collected(result, "sums"):
        finals[word] = max(finals.get(word, 0), total)
    assert finals == {f"word{k}": sum(range(k or 100, n + 1, 100)) for k in range(100)}
    stats = [s for s in result.executor_stats if s.get("remoteBuffersSent")]
    sent = sum(s["remoteBuffersSent"] for s in stats)
    calls = sum(s["remoteCalls"] for s in stats)
    assert sent > 20  # a real remote exchange
    assert calls * 3 <= sent  # several 32 KiB buffers per Ray call
    consumer = next(s for s in result.executor_stats if s.get("remoteChannels"))
    assert consumer["maxBuffersInFlightPerChannel"] <= consumer["creditPerChannel"]


class OneAtATime(SourceFunction):
    """Collects its records one by one: with buffer timeout 0 each is flushed on its own."""

    def __init__(self, n):
        self.n = n

    def run(self, ctx):
        for i in range(self.n):
            ctx.collect(i)

    def cancel(self):
        pass


def test_records_flushed_one_by_one_share_remote_calls_while_one_is_under_way(ray_session):
    env = make_env("ray", 1)
    env.set_buffer_timeout(0)  # every record is flushed as soon as it is emitted
    n = 20_000
    (
        env.add_source(OneAtATime(n))
        .slot_sharing_group("producer")
        .rebalance()
        .map(lambda x: x)
        .slot_sharing_group("consumer")
        .collect_sink("out")
    )
    result = env.execute()
    assert sorted(collected(result, "out")) == list(range(n))
    (producer,) = [s for s in result.executor_stats if s.get("remoteBuffersSent")]
    assert producer["remoteBuffersSent"] >= n  # a buffer per record: nothing waited for a batch
    assert 1 <= producer["maxCallsInFlight"] <= 2  # raylink.network.max-calls-in-flight
    # what was flushed while a call was under way left together with the next one
    assert producer["remoteCalls"] * 16 <= producer["remoteBuffersSent"]
