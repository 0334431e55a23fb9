"""Broadcast state end to end (``DataStream.broadcast(MapStateDescriptor)``, ``connect`` with a
``BroadcastStream``, ``BroadcastProcessFunction`` / ``KeyedBroadcastProcessFunction``): the
results against plain Python on the same data, the JobGraph Flink builds for it, the contexts'
rules (read-only side, undeclared states, keyed state, timers, side outputs), and the state
surviving a checkpoint, a failure and a rescaled restore."""

from __future__ import annotations

from collections import Counter

import pytest

from raylink.api import (
    CheckpointingMode,
    CheckpointListener,
    Encoder,
    FileSink,
    OutputFileConfig,
    OutputTag,
    RollingPolicy,
    RuntimeExecutionMode,
    TimestampAssigner,
    Types,
    WatermarkStrategy,
)
from raylink.api.datastream import BroadcastConnectedStream, BroadcastStream
from raylink.api.functions import BroadcastProcessFunction, KeyedBroadcastProcessFunction, MapFunction
from raylink.api.state import BroadcastState, ListStateDescriptor, MapStateDescriptor, ReadOnlyBroadcastState
from raylink.bench.failover import committed_lines
from raylink.graph.stream_graph import GraphError
from raylink.operators.broadcast import CoBroadcastWithNonKeyedOperator
from raylink.tests.harness import TwoInputStreamOperatorTestHarness
from raylink.tests.runtime_jobs import cause_chain, make_env

pytestmark = pytest.mark.timeout(120)

RULES = MapStateDescriptor("rules", Types.STRING(), Types.INT())
PENDING = ListStateDescriptor("pending", Types.INT())
KEYS = 7


# -- functions -------------------------------------------------------------------------------------------
class Enrich(KeyedBroadcastProcessFunction):
    """``v -> (v % KEYS, v * factor)``: elements that come before the factor wait in keyed
    state; the broadcast side flushes them with ``apply_to_keyed_state`` (so the result does
    not depend on which input arrives first)."""

    def open(self, runtime_context):
        self.pending = runtime_context.get_list_state(PENDING)

    def process_element(self, value, ctx):
        factor = ctx.get_broadcast_state(RULES).get("factor")
        if factor is None:
            self.pending.add(value)
        else:
            yield (ctx.get_current_key(), value * factor)

    def process_broadcast_element(self, rule, ctx):
        ctx.get_broadcast_state(RULES).put(rule[0], rule[1])
        flushed = []

        def flush(key, state):
            flushed.extend((key, v * rule[1]) for v in state.get())
            state.clear()

        ctx.apply_to_keyed_state(PENDING, flush)
        yield from flushed


def enrich_reference(n, factor=3):
    return sorted((v % KEYS, v * factor) for v in range(1, n + 1))


class SeeRules(BroadcastProcessFunction):
    """``v -> (v, sorted items of the broadcast state)``; the broadcast side stores each rule."""

    def process_element(self, value, ctx):
        state = ctx.get_broadcast_state(RULES)
        yield (value, tuple(sorted(state.items())))

    def process_broadcast_element(self, rule, ctx):
        ctx.get_broadcast_state(RULES)[rule[0]] = rule[1]


# -- results -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("parallelism", [1, 3])
def test_keyed_broadcast_enriches_every_element_exactly_once(target, parallelism):
    env = make_env(target, parallelism)
    rules = env.from_collection([("factor", 3)])
    data = env.from_sequence(1, 300).key_by(lambda v: v % KEYS)
    out = list(data.connect(rules.broadcast(RULES)).process(Enrich()).execute_and_collect())
    assert sorted(out) == enrich_reference(300)


def test_non_keyed_broadcast_sees_the_rules_in_every_subtask_in_batch_mode(target):
    """BATCH processes the broadcast side first: every element of every subtask sees all rules."""
    env = make_env(target, 3)
    env.set_runtime_mode(RuntimeExecutionMode.BATCH)
    rules = [("a", 1), ("b", 2), ("a", 10)]  # the later "a" overwrites the first one
    data = env.from_sequence(1, 60).rebalance()
    out = list(data.connect(env.from_collection(rules).broadcast(RULES)).process(SeeRules()).execute_and_collect())
    assert sorted(out) == [(v, (("a", 10), ("b", 2))) for v in range(1, 61)]


def test_non_keyed_broadcast_in_streaming_mode_processes_every_element_once(target):
    env = make_env(target, 3)
    rules = [("a", 1), ("b", 2)]
    data = env.from_sequence(1, 200).rebalance()
    out = list(data.connect(env.from_collection(rules).broadcast(RULES)).process(SeeRules()).execute_and_collect())
    assert sorted(v for v, _ in out) == list(range(1, 201))
    # an element sees no rule, the first rule or both, whichever had arrived in its subtask
    assert {items for _, items in out} <= {(), (("a", 1),), (("a", 1), ("b", 2))}


class Stamp(TimestampAssigner):
    def extract_timestamp(self, value, record_timestamp):
        return value * 10


class TimerReadsRules(KeyedBroadcastProcessFunction):
    """An event-time timer 5 ms after each element; ``on_timer`` reads the broadcast state."""

    def process_element(self, value, ctx):
        ctx.timer_service().register_event_time_timer(ctx.timestamp() + 5)

    def process_broadcast_element(self, rule, ctx):
        ctx.get_broadcast_state(RULES).put(*rule)

    def on_timer(self, timestamp, ctx):
        state = ctx.get_broadcast_state(RULES)
        assert isinstance(state, ReadOnlyBroadcastState)
        yield (ctx.get_current_key(), timestamp, ctx.time_domain().name, state.get("factor"))


def test_keyed_broadcast_timers_fire_with_the_broadcast_state(target):
    """The operator's watermark is the minimum of both inputs', so the timers fire once the
    rules input has ended, i.e. with the rule in the state."""
    env = make_env(target, 2)
    data = (
        env.from_sequence(1, 40)
        .assign_timestamps_and_watermarks(
            WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(Stamp())
        )
        .key_by(lambda v: v % 3)
    )
    rules = env.from_collection([("factor", 4)]).broadcast(RULES)
    out = list(data.connect(rules).process(TimerReadsRules()).execute_and_collect())
    assert sorted(out) == sorted((v % 3, v * 10 + 5, "EVENT_TIME", 4) for v in range(1, 41))


ODD = OutputTag("odd", Types.INT())


class SplitOdd(BroadcastProcessFunction):
    def process_element(self, value, ctx):
        if value % 2:
            ctx.output(ODD, value)  # the context's side output
        else:
            yield value

    def process_broadcast_element(self, value, ctx):
        yield ODD, -value  # a yielded (tag, value) pair


def test_side_outputs_from_both_sides(target):
    env = make_env(target, 2)
    main = env.from_sequence(1, 20).connect(env.from_collection([100]).broadcast(RULES)).process(SplitOdd())
    odd = main.get_side_output(ODD)
    assert sorted(odd.execute_and_collect()) == sorted([v for v in range(1, 21) if v % 2] + [-100, -100])


# -- the contexts' rules ------------------------------------------------------------------------------------------
class WritesOnReadSide(BroadcastProcessFunction):
    def process_element(self, value, ctx):
        ctx.get_broadcast_state(RULES).put("x", value)
        yield value

    def process_broadcast_element(self, value, ctx):
        pass


class AsksUndeclared(BroadcastProcessFunction):
    def process_element(self, value, ctx):
        yield ctx.get_broadcast_state(MapStateDescriptor("typo", Types.STRING(), Types.INT())).get("x")

    def process_broadcast_element(self, value, ctx):
        pass


@pytest.mark.parametrize(
    "function, message",
    [
        (WritesOnReadSide(), "read-only on the non-broadcast side"),
        (AsksUndeclared(), "The requested state does not exist"),
    ],
)
def test_misuse_of_the_broadcast_state_fails_the_job_naming_the_operator(function, message):
    env = make_env("local", 1)
    env.from_sequence(1, 3).connect(env.from_collection([("a", 1)]).broadcast(RULES)).process(function).print()
    with pytest.raises(Exception) as info:
        env.execute()
    text = " | ".join(str(e) for e in cause_chain(info.value))
    assert message in text and "Co-Process-Broadcast" in text


class KeyedEcho(KeyedBroadcastProcessFunction):
    def process_element(self, value, ctx):
        yield value

    def process_broadcast_element(self, value, ctx):
        pass


class NonKeyedEcho(BroadcastProcessFunction):
    def process_element(self, value, ctx):
        yield value

    def process_broadcast_element(self, value, ctx):
        pass


def test_api_checks_the_function_kind_and_the_descriptors():
    env = make_env("local", 1)
    ds = env.from_sequence(1, 3)
    bs = env.from_collection([1]).broadcast(RULES)
    assert isinstance(bs, BroadcastStream) and bs.broadcast_state_descriptors == [RULES]
    assert isinstance(ds.connect(bs), BroadcastConnectedStream)
    with pytest.raises(TypeError, match="BroadcastProcessFunction should be applied to non-keyed DataStream"):
        ds.key_by(lambda v: v).connect(bs).process(NonKeyedEcho())
    with pytest.raises(TypeError, match="KeyedBroadcastProcessFunction should be applied to keyed DataStream"):
        ds.connect(bs).process(KeyedEcho())
    with pytest.raises(TypeError, match="must be MapStateDescriptor"):
        ds.broadcast(ListStateDescriptor("l", Types.INT()))
    with pytest.raises(TypeError, match="process_broadcast_element"):
        ds.connect(bs).process(lambda v, ctx: v)
    with pytest.raises(GraphError, match="Cannot override partitioning for KeyedStream"):
        ds.key_by(lambda v: v).broadcast(RULES)
    assert type(ds.broadcast()).__name__ == "DataStream"  # without descriptors: the partitioning only


@pytest.mark.parametrize("keyed", [False, True])
def test_job_graph_has_two_inputs_and_a_broadcast_edge(keyed):
    env = make_env("local", 2)
    ds = env.from_sequence(1, 10)
    if keyed:
        ds = ds.key_by(lambda v: v % 2)
    bs = env.from_collection([("a", 1)]).broadcast(RULES)
    ds.connect(bs).process(KeyedEcho() if keyed else NonKeyedEcho()).print()
    job = env.get_job_graph()
    (vertex,) = [v for v in job.vertices.values() if "Co-Process-Broadcast" in v.name]
    assert vertex.invokable == "TwoInputStreamTask"
    assert vertex.name.startswith("Keyed-Co-Process-Broadcast" if keyed else "Co-Process-Broadcast")
    edges = sorted((e.type_number, e.ship_strategy, e.distribution_pattern) for e in vertex.inputs)
    assert edges == [
        (1, "HASH" if keyed else "FORWARD", "ALL_TO_ALL" if keyed else "POINTWISE"),
        (2, "BROADCAST", "ALL_TO_ALL"),
    ]


# -- checkpoints -----------------------------------------------------------------------------------------------
class Count(BroadcastProcessFunction):
    def process_element(self, value, ctx):
        yield (value, tuple(sorted(ctx.get_broadcast_state(RULES).items())))

    def process_broadcast_element(self, value, ctx):
        state = ctx.get_broadcast_state(RULES)
        assert isinstance(state, BroadcastState)
        state.put(value, (state.get(value) or 0) + 1)


@pytest.mark.parametrize("old, new", [(2, 2), (2, 5), (4, 1), (3, 2)])
def test_broadcast_state_is_snapshotted_by_every_subtask_and_restored_round_robin(old, new):
    """Each new subtask ``i`` gets the copy of old subtask ``i % old`` (Flink's rule); here the
    copies differ on purpose (subtask ``j`` saw ``j + 1`` broadcast elements) to see which one."""
    first = [
        TwoInputStreamOperatorTestHarness(
            CoBroadcastWithNonKeyedOperator(Count(), [RULES]), task_name="t", subtask_index=j, parallelism=old
        ).open()
        for j in range(old)
    ]
    for j, harness in enumerate(first):
        for _ in range(j + 1):
            harness.process_element2("seen")
    snapshots = [harness.snapshot(1) for harness in first]
    assert all(s["operator"]["rules"] == ("broadcast", [("seen", j + 1)]) for j, s in enumerate(snapshots))
    for i in range(new):
        harness = TwoInputStreamOperatorTestHarness(
            CoBroadcastWithNonKeyedOperator(Count(), [RULES]), task_name="t", subtask_index=i, parallelism=new
        ).open(restore=snapshots)
        harness.process_element1("x")
        assert harness.extract_output_values() == [("x", (("seen", i % old + 1),))]


class PacedFailOnce(MapFunction, CheckpointListener):
    """1 ms every 2 records (the workload runs a few seconds); on its first attempt subtask 0
    fails once, at its first record from ``fail_from`` on that comes after a completed checkpoint."""

    def __init__(self, fail_from):
        self.fail_from = fail_from
        self.attempt = 0
        self.checkpointed = False

    def open(self, runtime_context):
        self.attempt = runtime_context.get_attempt_number()
        self.first_subtask = runtime_context.get_index_of_this_subtask() == 0

    def notify_checkpoint_complete(self, checkpoint_id):
        self.checkpointed = True

    def map(self, value):
        import time

        if value % 2 == 0:
            time.sleep(0.001)
        if self.attempt == 0 and self.first_subtask and self.checkpointed and value >= self.fail_from:
            raise RuntimeError(f"injected failure at record {value}")
        return value


class EnrichMarkingRules(Enrich):
    """``Enrich`` that also emits ``("rule", attempt)`` for every broadcast element it processes."""

    def open(self, runtime_context):
        super().open(runtime_context)
        self.attempt = runtime_context.get_attempt_number()

    def process_broadcast_element(self, rule, ctx):
        yield ("rule", self.attempt)
        yield from super().process_broadcast_element(rule, ctx)


@pytest.mark.timeout(240)
def test_broadcast_state_survives_a_failure_through_the_checkpoint(target, tmp_path):
    """The rules source has finished before the failure, so after the restart the factor can only
    come from the restored broadcast state; the exactly-once FileSink shows every element once."""
    n, parallelism = 6000, 2
    env = make_env(
        target, parallelism, {"restart-strategy.type": "fixed-delay", "restart-strategy.fixed-delay.delay": "200 ms"}
    )
    env.enable_checkpointing(300, CheckpointingMode.EXACTLY_ONCE)
    env.get_checkpoint_config().set_checkpoint_storage_dir(str(tmp_path / "checkpoints"))
    sink = (
        FileSink.for_row_format(str(tmp_path / "out"), Encoder.simple_string_encoder())
        .with_output_file_config(OutputFileConfig.builder().with_part_prefix("part").build())
        .with_rolling_policy(RollingPolicy.on_checkpoint_rolling_policy())
        .build()
    )
    data = env.from_sequence(1, n).map(PacedFailOnce(n // 3)).key_by(lambda v: v % KEYS)
    rules = env.from_collection([("factor", 3)]).broadcast(RULES)
    (data.connect(rules).process(EnrichMarkingRules()).map(lambda kv: f"{kv[0]},{kv[1]}").sink_to(sink))
    client = env.execute_async()
    assert client.wait(200), "the job did not finish"
    assert client.get_job_status() == "FINISHED"
    stats = client.get_checkpoint_stats()
    assert stats["numRestarts"] == 1 and stats["lastRestoredCheckpointId"] is not None
    got = committed_lines(tmp_path / "out")
    want = Counter(f"{k},{v}" for k, v in enrich_reference(n))
    want["rule,0"] = parallelism  # each subtask processed the rule once, before the failure
    assert got == want, (sum(got.values()), sum(want.values()), set(got) - set(want))
