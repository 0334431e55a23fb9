"""AsyncDataStream and the async wait operator: exact results in both output modes against a
reference computed here, input order (ordered) and watermarks as barriers (unordered), the
capacity bound, timeouts, retries, failures naming the operator, validation, chaining after a
legacy source, and a checkpoint taken with records in flight restored after a failure."""

from __future__ import annotations

import asyncio
import functools
import random
import time
from collections import Counter

import cloudpickle
import pytest

from raylink.api import (
    AsyncDataStream,
    AsyncFunction,
    AsyncRetryStrategy,
    CheckpointingMode,
    Encoder,
    FileSink,
    OutputFileConfig,
    RollingPolicy,
    SourceFunction,
    Time,
    async_retry_predicates,
)
from raylink.api.async_retry_strategies import ExponentialBackoffDelayRetryStrategy, FixedDelayRetryStrategy
from raylink.bench.failover import committed_lines
from raylink.operators.async_wait import STATE_NAME, AsyncWaitOperator
from raylink.operators.output import CollectingOutput
from raylink.runtime.client.job_result import JobExecutionException
from raylink.runtime.task.mailbox import MailboxExecutor, MailboxProcessor
from raylink.tests.harness import OneInputStreamOperatorTestHarness
from raylink.tests.runtime_jobs import cause_chain, make_env, reset_signal, signal, wait_for

N = 300


# -- functions (shipped to the tasks) ------------------------------------------------------------------
class TimesTen(AsyncFunction):
    """``v -> [v * 10]`` after a random pause of up to ``max_ms``; records the most calls it
    had running at once in the gauge ``maxInFlight``."""

    def __init__(self, max_ms: float = 5.0) -> None:
        self.max_ms = max_ms

    def open(self, runtime_context) -> None:
        self.running = self.most = 0
        self.random = random.Random(runtime_context.get_index_of_this_subtask())
        runtime_context.get_metrics_group().gauge("maxInFlight", lambda: self.most)

    async def async_invoke(self, value):
        self.running += 1
        self.most = max(self.most, self.running)
        try:
            await asyncio.sleep(self.random.random() * self.max_ms / 1000.0)
        finally:
            self.running -= 1
        return [value * 10]


class TaggedTimesTen(TimesTen):
    """``v -> [(subtask index, v * 10)]``."""

    def open(self, runtime_context) -> None:
        super().open(runtime_context)
        self.index = runtime_context.get_index_of_this_subtask()

    async def async_invoke(self, value):
        [result] = await super().async_invoke(value)
        return [(self.index, result)]


class SlowForTens(AsyncFunction):
    """Multiples of 10 take 5 s (they time out), the others answer at once."""

    async def async_invoke(self, value):
        if value % 10 == 0:
            await asyncio.sleep(5)
        return [("ok", value)]


class SlowForTensWithFallback(SlowForTens):
    def timeout(self, value):
        return [("timeout", value)]


class Flaky(Exception):
    pass


class FailsTwice(AsyncFunction):
    """Raises ``Flaky`` on the first two calls for a value, then answers ``(value, calls)``."""

    def __init__(self, failures: int = 2) -> None:
        self.failures = failures

    def open(self, runtime_context) -> None:
        self.calls = Counter()

    async def async_invoke(self, value):
        self.calls[value] += 1
        if self.calls[value] <= self.failures:
            raise Flaky(f"call {self.calls[value]} for {value}")
        return [(value, self.calls[value])]


class EmptyFirst(AsyncFunction):
    """No results on the first call for a value, ``[value]`` on the second."""

    def open(self, runtime_context) -> None:
        self.calls = Counter()

    async def async_invoke(self, value):
        self.calls[value] += 1
        return [] if self.calls[value] == 1 else [(value, self.calls[value])]


class Broken(AsyncFunction):
    async def async_invoke(self, value):
        if value == 7:
            raise ValueError("no answer for seven")
        return [value]


class ReturnsNone(AsyncFunction):
    async def async_invoke(self, value):
        return None


class NotAsync(AsyncFunction):
    def async_invoke(self, value):  # a plain def: refused
        return [value]


class Numbers(SourceFunction):
    """A legacy SourceFunction: 1..n."""

    def __init__(self, n: int) -> None:
        self.n = n

    def run(self, ctx) -> None:
        for value in range(1, self.n + 1):
            ctx.collect(value)


def reference(values, f=lambda v: v * 10):
    return [f(v) for v in values]


# -- end to end -----------------------------------------------------------------------------------------
@pytest.mark.timeout(180)
@pytest.mark.parametrize("mode", ["ordered", "unordered"])
def test_results_are_exact_in_both_modes_and_in_input_order_when_ordered(target, mode):
    env = make_env(target, 2)
    wait = AsyncDataStream.ordered_wait if mode == "ordered" else AsyncDataStream.unordered_wait
    stream = env.from_collection(list(range(N))).rebalance()
    out = wait(stream, TaggedTimesTen(), Time.seconds(10), capacity=7)
    got = list(out.execute_and_collect())
    assert sorted(v for _subtask, v in got) == reference(range(N))
    per_subtask = {index: [v for i, v in got if i == index] for index in (0, 1)}
    assert all(per_subtask.values())  # both subtasks worked
    # the collect sink keeps each subtask's order: ordered mode keeps the input's (increasing) order
    in_order = all(values == sorted(values) for values in per_subtask.values())
    assert in_order if mode == "ordered" else True


@pytest.mark.timeout(180)
@pytest.mark.parametrize("mode", ["ordered", "unordered"])
def test_never_more_than_capacity_calls_run_at_once(target, mode):
    env = make_env(target, 1)
    wait = AsyncDataStream.ordered_wait if mode == "ordered" else AsyncDataStream.unordered_wait
    out = wait(env.from_collection(list(range(N))), TimesTen(max_ms=20), 10_000, capacity=5)
    client = out.execute_and_collect()
    got = list(client)
    result = client.job_execution_result
    assert sorted(got) == reference(range(N))
    [most] = [
        m["operators"]["async wait operator"]["maxInFlight"]
        for m in result.task_metrics
        if "async wait operator" in m["operators"]
    ]
    assert most == 5  # 300 records arrive at once; 5 run, the rest wait for a free slot


@pytest.mark.timeout(120)
def test_timeout_gives_the_functions_fallback_results(target):
    env = make_env(target, 1)
    out = AsyncDataStream.unordered_wait(
        env.from_collection(list(range(1, 41))), SlowForTensWithFallback(), Time.milliseconds(200), capacity=50
    )
    got = sorted(out.execute_and_collect())
    assert got == sorted([("timeout", v) if v % 10 == 0 else ("ok", v) for v in range(1, 41)])


@pytest.mark.timeout(120)
def test_default_timeout_fails_the_job_naming_the_operator_and_the_input(target):
    env = make_env(target, 1)
    out = AsyncDataStream.ordered_wait(env.from_collection([1, 2, 10]), SlowForTens(), 200)
    out.print()
    with pytest.raises(JobExecutionException) as info:
        env.execute("async timeout")
    message = str(info.value)
    assert "async wait operator 'async wait operator'" in message
    assert "SlowForTens.async_invoke did not complete within 200 ms for input 10" in message
    assert any(isinstance(e, TimeoutError) for e in cause_chain(info.value))


@pytest.mark.timeout(120)
@pytest.mark.parametrize("mode", ["ordered", "unordered"])
def test_retries_on_the_exception_predicate_until_the_call_succeeds(target, mode):
    env = make_env(target, 2)
    strategy = AsyncRetryStrategy.fixed_delay(
        max_attempts=2,
        backoff_time_millis=5,
        result_predicate=None,
        exception_predicate=functools.partial(
            async_retry_predicates.exception_type_predicate, expected_error_type=Flaky
        ),
    )
    wait = AsyncDataStream.ordered_wait_with_retry if mode == "ordered" else AsyncDataStream.unordered_wait_with_retry
    out = wait(env.from_collection(list(range(50))).rebalance(), FailsTwice(), Time.seconds(20), strategy, capacity=10)
    assert sorted(out.execute_and_collect()) == [(v, 3) for v in range(50)]  # two retries each


@pytest.mark.timeout(120)
def test_retries_on_the_result_predicate_with_exponential_backoff(target):
    env = make_env(target, 1)
    strategy = AsyncRetryStrategy.exponential_backoff(
        max_attempts=3,
        initial_delay=5,
        max_retry_delay=20,
        multiplier=2.0,
        result_predicate=async_retry_predicates.empty_result_predicate,
        exception_predicate=None,
    )
    out = AsyncDataStream.unordered_wait_with_retry(
        env.from_collection(list(range(20))), EmptyFirst(), Time.seconds(20), strategy
    )
    assert sorted(out.execute_and_collect()) == [(v, 2) for v in range(20)]


@pytest.mark.timeout(120)
def test_when_retries_run_out_the_job_fails_with_the_last_error(target):
    env = make_env(target, 1)
    strategy = AsyncRetryStrategy.fixed_delay(2, 5, None, async_retry_predicates.has_exception_predicate)
    out = AsyncDataStream.ordered_wait_with_retry(
        env.from_collection([1, 2]), FailsTwice(failures=3), Time.seconds(20), strategy
    )
    out.print()
    with pytest.raises(JobExecutionException) as info:
        env.execute("out of retries")
    message = str(info.value)
    assert "FailsTwice.async_invoke failed for input 1: Flaky: call 3 for 1" in message
    assert any(isinstance(e, Flaky) for e in cause_chain(info.value))


@pytest.mark.timeout(120)
def test_a_failing_call_fails_the_job_naming_operator_function_and_input(target):
    env = make_env(target, 1)
    AsyncDataStream.unordered_wait(env.from_collection(list(range(10))), Broken(), 0).print()
    with pytest.raises(JobExecutionException) as info:
        env.execute("broken")
    assert (
        "async wait operator 'async wait operator': Broken.async_invoke failed for input 7: "
        "ValueError: no answer for seven"
    ) in str(info.value)


@pytest.mark.timeout(120)
def test_a_result_that_is_not_a_list_fails_the_job_saying_so(target):
    env = make_env(target, 1)
    AsyncDataStream.unordered_wait(env.from_collection([1]), ReturnsNone(), 0).print()
    with pytest.raises(JobExecutionException) as info:
        env.execute("none")
    assert "ReturnsNone.async_invoke returned None for input 1; it must return a list of results" in str(info.value)


@pytest.mark.timeout(120)
def test_after_a_legacy_source_the_operator_starts_its_own_task(target):
    env = make_env(target, 1)
    out = AsyncDataStream.ordered_wait(env.add_source(Numbers(200)), TimesTen(), 10_000, capacity=4)
    names = sorted(v.name for v in env.get_job_graph().vertices.values())
    assert names == ["Source: Custom Source", "async wait operator"]  # not chained: two tasks
    assert list(out.execute_and_collect()) == reference(range(1, 201))


def test_validation_names_the_problem():
    env = make_env("local", 1)
    ds = env.from_collection([1])
    with pytest.raises(TypeError, match="method 'async_invoke' of class 'NotAsync' must be declared as 'async def'"):
        AsyncDataStream.unordered_wait(ds, NotAsync(), 100)
    strategy = AsyncRetryStrategy.fixed_delay(2, 5, None, async_retry_predicates.has_exception_predicate)
    with pytest.raises(ValueError, match="a timeout is needed with an async retry strategy"):
        AsyncDataStream.ordered_wait_with_retry(ds, TimesTen(), 0, strategy)
    with pytest.raises(ValueError, match="capacity must be a positive int, got 0"):
        AsyncDataStream.ordered_wait(ds, TimesTen(), 100, capacity=0)
    with pytest.raises(ValueError, match="async retry strategy must not be None"):
        AsyncDataStream.unordered_wait_with_retry(ds, TimesTen(), 100, None)
    with pytest.raises(ValueError, match="max_attempts should be greater than zero"):
        AsyncRetryStrategy.fixed_delay(0, 5, None, None)


def test_exponential_backoff_grows_by_the_multiplier_up_to_the_maximum():
    strategy = ExponentialBackoffDelayRetryStrategy(10, 10, 50, 2.0, None, None)
    assert [strategy.get_backoff_time_millis(n) for n in range(1, 7)] == [10, 20, 40, 50, 50, 50]
    assert strategy.get_backoff_time_millis(1) == 10  # a new record starts over
    fixed = FixedDelayRetryStrategy(3, 7, None, None)
    assert [fixed.can_retry(n) for n in (1, 3, 4)] == [True, True, False]
    assert fixed.get_backoff_time_millis(2) == 7
    assert AsyncRetryStrategy.no_restart().can_retry(1) is False


# -- the operator, driven directly -------------------------------------------------------------------------
class EventsOutput(CollectingOutput):
    """Records and watermarks in one list, in emission order."""

    def __init__(self, record_context) -> None:
        super().__init__(record_context)
        self.events: list = []

    def collect(self, value) -> None:
        self.events.append(("r", value, self._record_context.timestamp))

    def collect_batch(self, values) -> None:
        for value in values:
            self.collect(value)

    def emit_watermark(self, timestamp) -> None:
        self.events.append(("w", timestamp))


class Sleeps(AsyncFunction):
    """``(name, seconds)`` -> ``[name]`` after that many seconds."""

    async def async_invoke(self, value):
        await asyncio.sleep(value[1])
        return [value[0]]


def start(function, mode="UNORDERED", capacity=10, restore=None):
    """The operator on a harness whose mailbox executor the test thread drives (its task thread)."""
    executor = MailboxExecutor(MailboxProcessor(lambda _mp: None))
    harness = OneInputStreamOperatorTestHarness(
        AsyncWaitOperator(function, 10_000, capacity, None, mode, name="async wait operator"),
        task_name="t",
        mailbox_executor=executor,
        output=EventsOutput,
    )
    harness.open(restore)
    return harness, executor


def wait_until(executor, condition, timeout=10.0):
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not reached"
        executor.yield_()  # runs the operator's result mails; blocks until one arrives


@pytest.mark.timeout(30)
def test_unordered_results_never_cross_a_watermark():
    harness, executor = start(Sleeps(), "UNORDERED")
    harness.process_elements([("a", 0.3), ("b", 0.01)], timestamp=5)
    harness.process_watermark(10)
    harness.process_elements([("c", 0.0), ("d", 0.05)], timestamp=12)
    harness.end_input()
    harness.close()
    out = harness.output
    assert out.events[:3] == [("r", "b", 5), ("r", "a", 5), ("w", 10)]  # b finished first; c waited for W
    assert sorted(out.events[3:]) == [("r", "c", 12), ("r", "d", 12)]


@pytest.mark.timeout(30)
def test_ordered_results_follow_the_input_and_watermarks_keep_their_place():
    harness, executor = start(Sleeps(), "ORDERED")
    harness.process_elements([("a", 0.2), ("b", 0.0)])
    harness.process_watermark(10)
    harness.process_elements([("c", 0.0)])
    harness.end_input()
    harness.close()
    assert harness.output.events == [("r", "a", None), ("r", "b", None), ("w", 10), ("r", "c", None)]


@pytest.mark.timeout(30)
def test_the_operator_takes_no_input_while_records_wait_for_a_slot():
    harness, executor = start(Sleeps(), "ORDERED", capacity=2)
    op = harness.operator
    harness.process_elements([(str(i), 0.05) for i in range(5)])
    waiting = op.get_available_future()
    assert waiting is not None and not waiting.done()  # 2 run, 3 wait: the task must not feed more
    wait_until(executor, waiting.done)
    assert op.get_available_future() is None
    harness.end_input()
    harness.close()
    assert [e[1] for e in harness.output.events] == ["0", "1", "2", "3", "4"] and op.max_in_flight == 2


@pytest.mark.timeout(30)
def test_records_in_flight_are_in_the_snapshot_and_run_again_after_a_restore():
    harness, executor = start(Sleeps(), "ORDERED", capacity=2)
    out = harness.output
    harness.process_elements([("done", 0.0), ("slow", 30), ("later", 0.0), ("waiting", 0.0)], timestamp=7)
    harness.process_watermark(9)
    wait_until(executor, lambda: out.events)  # "done" left; "slow" blocks the rest
    snapshot = cloudpickle.loads(cloudpickle.dumps(harness.snapshot(1)))
    harness.close()  # the failure: the slow call is cancelled
    assert out.events == [("r", "done", 7)]
    mode, elements = snapshot["operator"][STATE_NAME]
    assert elements == [("r", ("slow", 30), 7), ("r", ("later", 0.0), 7), ("r", ("waiting", 0.0), 7), ("w", 9)]

    class Fast(AsyncFunction):  # the restored job's calls answer at once
        async def async_invoke(self, value):
            return [value[0]]

    restored, _executor = start(Fast(), "ORDERED", capacity=2, restore=[snapshot])
    assert restored.operator.get_available_future() is not None  # the restored records go first
    restored.end_input()
    restored.close()
    assert restored.output.events == [("r", "slow", 7), ("r", "later", 7), ("r", "waiting", 7), ("w", 9)]


# -- a checkpoint with records in flight, restored after a failure ---------------------------------------
class StallsThenFails(AsyncFunction):
    """First attempt: records from 100 on stall 1.5 s (many checkpoints complete meanwhile),
    then record 100 fails the job. Later attempts answer at once, but the last record waits
    for the signal ``release`` (so the test reads the checkpoint before the job ends)."""

    def __init__(self, last: int, release: str) -> None:
        self.last = last
        self.release = release

    def open(self, runtime_context) -> None:
        self.attempt = runtime_context.get_attempt_number()

    async def async_invoke(self, value):
        if self.attempt == 0 and value >= 100:
            await asyncio.sleep(1.5)
            if value == 100:
                raise RuntimeError("injected failure while records are in flight")
        if value == self.last:
            released = await asyncio.get_running_loop().run_in_executor(None, signal(self.release).wait, 60)
            assert released
        return [str(value)]


def restored(stats: dict) -> bool:
    return stats["numRestarts"] == 1 and stats["lastRestoredCheckpointId"] is not None


@pytest.mark.timeout(180)
def test_a_checkpoint_with_records_in_flight_restores_them_exactly_once(tmp_path):
    n = 2000
    env = make_env(
        "local",
        1,
        {
            "restart-strategy.type": "fixed-delay",
            "restart-strategy.fixed-delay.delay": "100 ms",
            "execution.checkpointing.num-retained": 1000,
        },
    )
    env.enable_checkpointing(100, CheckpointingMode.EXACTLY_ONCE)
    env.get_checkpoint_config().set_checkpoint_storage_dir(str(tmp_path / "checkpoints"))
    sink = (
        FileSink.for_row_format(str(tmp_path / "out"), Encoder.simple_string_encoder())
        .with_output_file_config(OutputFileConfig.builder().with_part_prefix("part").build())
        .with_rolling_policy(RollingPolicy.on_checkpoint_rolling_policy())
        .build()
    )
    release = reset_signal(f"async-release-{tmp_path}")
    AsyncDataStream.ordered_wait(
        env.from_sequence(1, n), StallsThenFails(n, f"async-release-{tmp_path}"), Time.seconds(90), capacity=20
    ).sink_to(sink)
    client = env.execute_async("in flight")
    try:
        # restarted, and restored (the restart is counted before the checkpoint it restores is named)
        assert wait_for(lambda: restored(client.get_checkpoint_stats()), client, timeout=60)
        # the checkpoint the job restarted from holds the stalled records (the source was past them)
        stats = client.get_checkpoint_stats()
        storage = client.checkpoint_storage
        checkpoint = storage.load_checkpoint(stats["lastRestoredCheckpointId"])
        [operator_id] = [
            c.operator_id
            for ev in client.executions.values()
            for c in ev.job_vertex.job_vertex.chain
            if c.operator_name == "async wait operator"
        ]
        state = cloudpickle.loads(storage.read_state(checkpoint.get_state(operator_id, 0)))
    finally:
        release.set()
    _mode, elements = state["operator"][STATE_NAME]
    in_flight = [e[1] for e in elements if e[0] == "r"]
    assert in_flight[:20] == list(range(100, 120))  # the full queue, in input order
    assert client.wait(150), "the job did not finish"
    client.get_job_execution_result(1)
    assert client.get_checkpoint_stats()["numRestarts"] == 1
    assert committed_lines(tmp_path / "out") == Counter(str(v) for v in range(1, n + 1))
