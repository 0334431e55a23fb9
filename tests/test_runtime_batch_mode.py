"""Execution modes end to end (``env.set_runtime_mode`` / ``execution.runtime-mode``): BATCH
runs every exchange blocking and its keyed operators read their input sorted by key, so a
reduce or an aggregation emits one final value per key (in the key order PyFlink's batch
jobs print), timers fire at the end of each key, the broadcast side comes first and
checkpointing is off; AUTOMATIC picks BATCH exactly when every source is bounded. Results
are checked against plain Python on the same data."""

from __future__ import annotations

import pickle
from collections import Counter

import pytest

from raylink.api import (
    Configuration,
    RuntimeExecutionMode,
    StreamExecutionEnvironment,
    Time,
    TimestampAssigner,
    TumblingEventTimeWindows,
    Types,
    WatermarkStrategy,
)
from raylink.api.functions import (
    KeyedBroadcastProcessFunction,
    KeyedCoProcessFunction,
    KeyedProcessFunction,
    SourceFunction,
)
from raylink.api.options import IllegalConfigurationError
from raylink.api.state import MapStateDescriptor, ValueStateDescriptor
from raylink.graph.stream_graph import GraphError
from raylink.operators.base import MAX_WATERMARK, MIN_WATERMARK
from raylink.tests.runtime_jobs import make_env

pytestmark = pytest.mark.timeout(120)

LINES = [
    "the quick brown fox jumps over the lazy dog",
    "a fox is quick and a dog is lazy",
    "The dog and THE fox, the end",
]


def words(lines=LINES):
    return [w for line in lines for w in line.split()]


def pyflink_key_order(keys):
    """The order Flink's batch sort gives PyFlink's keys (pickled bytes, length first)."""
    return sorted(keys, key=lambda k: (len(pickle.dumps(k)), pickle.dumps(k)))


def word_count(env, lines=LINES):
    return (
        env.from_collection(lines)
        .flat_map(lambda line: line.split())
        .map(lambda w: (w, 1), output_type=Types.TUPLE([Types.STRING(), Types.INT()]))
        .key_by(lambda p: p[0])
        .reduce(lambda a, b: (a[0], a[1] + b[1]))
    )


# -- BATCH: final results only --------------------------------------------------------------------------
@pytest.mark.parametrize("parallelism", [1, 3])
def test_batch_word_count_emits_one_final_count_per_word(target, parallelism):
    env = make_env(target, parallelism)
    env.set_runtime_mode(RuntimeExecutionMode.BATCH)
    out = list(word_count(env).execute_and_collect())
    totals = Counter(words())
    assert sorted(out) == sorted(totals.items())  # no rolling counts: exactly one record per word
    if parallelism == 1:
        assert [w for w, _ in out] == pyflink_key_order(totals)


def test_batch_word_count_prints_what_pyflink_prints(capsys):
    env = make_env("local", 1)
    env.set_runtime_mode(RuntimeExecutionMode.BATCH)
    word_count(env).print()
    env.execute()
    totals = Counter(words())
    printed = [line for line in capsys.readouterr().out.splitlines() if line]
    assert printed == [f"({w},{totals[w]})" for w in pyflink_key_order(totals)]


def test_streaming_word_count_emits_rolling_counts_for_comparison():
    env = make_env("local", 2)
    env.set_runtime_mode(RuntimeExecutionMode.STREAMING)
    out = list(word_count(env).execute_and_collect())
    assert len(out) == len(words())


RECORDS = [("a", 3, "x"), ("b", 1, "y"), ("a", 7, "z"), ("c", 5, "u"), ("b", 9, "v"), ("a", 7, "w"), ("c", 2, "t")]


def final_aggregate(agg, records=RECORDS, field=1):
    """The last rolling value of ``agg`` per key, computed here."""
    out = {}
    for r in records:
        cur = out.get(r[0])
        if cur is None:
            out[r[0]] = r
        elif agg == "sum":
            out[r[0]] = cur[:field] + (cur[field] + r[field],) + cur[field + 1 :]
        elif agg in ("min", "max"):
            better = min if agg == "min" else max
            out[r[0]] = cur[:field] + (better(cur[field], r[field]),) + cur[field + 1 :]
        elif agg == "min_by":
            out[r[0]] = cur if cur[field] <= r[field] else r
        else:
            out[r[0]] = cur if cur[field] >= r[field] else r
    return sorted(out.values())


@pytest.mark.parametrize("agg", ["sum", "min", "max", "min_by", "max_by"])
def test_batch_aggregations_emit_the_final_value_per_key(agg):
    env = make_env("local", 2)
    env.set_runtime_mode(RuntimeExecutionMode.BATCH)
    keyed = env.from_collection(RECORDS).key_by(lambda r: r[0])
    out = list(getattr(keyed, agg)(1).execute_and_collect())
    assert sorted(out) == final_aggregate(agg)


class ByField(TimestampAssigner):
    def extract_timestamp(self, value, record_timestamp):
        return value[1]


def test_batch_event_time_windows_count_every_record(target):
    """Watermarks are perfect in BATCH: out-of-order records are never late."""
    data = [("a", 1), ("a", 12), ("b", 3), ("a", 2), ("b", 25), ("a", 4), ("b", 5), ("a", 19)]
    env = make_env(target, 2)
    env.set_runtime_mode(RuntimeExecutionMode.BATCH)
    stream = env.from_collection(data).assign_timestamps_and_watermarks(
        WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(ByField())
    )
    counts = (
        stream.map(lambda r: (r[0], 1))
        .key_by(lambda r: r[0])
        .window(TumblingEventTimeWindows.of(Time.milliseconds(10)))
        .reduce(lambda x, y: (x[0], x[1] + y[1]))
    )
    want = Counter((k, ts // 10) for k, ts in data)
    assert sorted(counts.execute_and_collect()) == sorted((k, n) for (k, _), n in want.items())


class Timers(KeyedProcessFunction):
    """Per element an event-time timer at ts + 5 and a processing-time timer an hour ahead;
    ``on_timer`` tries to register one more (ignored: the timer service is quiesced)."""

    def process_element(self, value, ctx):
        timers = ctx.timer_service()
        timers.register_event_time_timer(ctx.timestamp() + 5)
        timers.register_processing_time_timer(10**13)  # far in the future
        yield ("element", ctx.get_current_key(), ctx.timestamp(), timers.current_watermark())

    def on_timer(self, timestamp, ctx):
        ctx.timer_service().register_event_time_timer(timestamp + 1)
        yield ("timer", ctx.get_current_key(), ctx.time_domain().name, ctx.timer_service().current_watermark())


def test_batch_timers_fire_at_the_end_of_each_key(target):
    data = [("b", 10), ("a", 3), ("b", 1), ("a", 7), ("c", 4)]
    env = make_env(target, 1)
    env.set_runtime_mode(RuntimeExecutionMode.BATCH)
    stream = env.from_collection(data).assign_timestamps_and_watermarks(
        WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(ByField())
    )
    out = list(stream.key_by(lambda r: r[0]).process(Timers()).execute_and_collect())
    want = []
    for key in pyflink_key_order({k for k, _ in data}):
        stamps = sorted(ts for k, ts in data if k == key)  # a key's records by timestamp
        want += [("element", key, ts, MIN_WATERMARK) for ts in stamps]
        want += [("timer", key, "EVENT_TIME", MAX_WATERMARK) for _ in stamps]
        want += [("timer", key, "PROCESSING_TIME", MAX_WATERMARK)]  # processing time fires at the end too
    assert out == want


class Discounts(KeyedCoProcessFunction):
    """Input 1: orders ``(customer, ts, amount)``; input 2: discounts ``(customer, ts, percent)``."""

    def open(self, runtime_context):
        self.percent = runtime_context.get_state(ValueStateDescriptor("percent", Types.INT()))

    def process_element1(self, order, ctx):
        yield (order[0], order[2] * (100 - (self.percent.value() or 0)) // 100)

    def process_element2(self, discount, ctx):
        self.percent.update(discount[2])


def test_batch_keyed_two_inputs_are_merged_by_key_and_timestamp(target):
    """Each customer's discount (timestamp 0) is processed before their orders, whichever
    input delivers first."""
    env = make_env(target, 2)
    env.set_runtime_mode(RuntimeExecutionMode.BATCH)
    wm = WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(ByField())
    orders = [(c, ts, 100 * ts) for c in ("ann", "bob", "cy") for ts in (1, 2, 3)]
    discounts = [("ann", 0, 10), ("bob", 0, 50)]
    out = (
        env.from_collection(orders)
        .assign_timestamps_and_watermarks(wm)
        .connect(env.from_collection(discounts).assign_timestamps_and_watermarks(wm))
        .key_by(lambda o: o[0], lambda d: d[0])
        .process(Discounts())
    )
    percent = {c: p for c, _, p in discounts}
    assert sorted(out.execute_and_collect()) == sorted(
        (c, amount * (100 - percent.get(c, 0)) // 100) for c, _, amount in orders
    )


RULES = MapStateDescriptor("rules", Types.STRING(), Types.INT())


class Scale(KeyedBroadcastProcessFunction):
    def process_element(self, value, ctx):
        yield (value, ctx.get_broadcast_state(RULES).get("factor"))

    def process_broadcast_element(self, rule, ctx):
        ctx.get_broadcast_state(RULES).put(*rule)


def test_batch_keyed_broadcast_processes_the_broadcast_side_first(target):
    env = make_env(target, 2)
    env.set_runtime_mode(RuntimeExecutionMode.BATCH)
    data = env.from_sequence(1, 100).key_by(lambda v: v % 5)
    out = data.connect(env.from_collection([("factor", 7)]).broadcast(RULES)).process(Scale())
    assert sorted(out.execute_and_collect()) == [(v, 7) for v in range(1, 101)]


# -- the job graph -------------------------------------------------------------------------------------
def job_edges(env):
    return [(e["ship_strategy"], e["result_partition_type"]) for e in env.get_job_graph().to_dict()["edges"]]


def pipeline(env):
    (env.from_sequence(1, 100).map(lambda v: (v % 3, v)).key_by(lambda p: p[0]).sum(1).rebalance().map(str).print())
    return env


def test_batch_job_graph_keeps_the_chains_and_makes_every_exchange_blocking():
    streaming = pipeline(make_env("local", 2))
    batch = pipeline(make_env("local", 2, {"execution.runtime-mode": "batch"}))
    names = [v["name"] for v in streaming.get_job_graph().to_dict()["vertices"]]
    assert [v["name"] for v in batch.get_job_graph().to_dict()["vertices"]] == names
    assert names[0] == "Source: Sequence Source -> Map"
    assert batch.get_job_graph().job_type == "BATCH" and streaming.get_job_graph().job_type == "STREAMING"
    assert job_edges(batch) == [("HASH", "BLOCKING"), ("REBALANCE", "BLOCKING")]
    assert job_edges(streaming) == [("HASH", "PIPELINED_BOUNDED"), ("REBALANCE", "PIPELINED_BOUNDED")]


def test_an_explicitly_pipelined_exchange_stays_pipelined_in_batch():
    env = make_env("local", 2, {"execution.runtime-mode": "BATCH"})
    env.from_sequence(1, 10).rebalance().set_shuffle_mode("PIPELINED").map(str).print()
    assert job_edges(env) == [("REBALANCE", "PIPELINED_BOUNDED")]


# -- AUTOMATIC and the option ------------------------------------------------------------------------------
class Finite(SourceFunction):
    def run(self, ctx):
        for i in range(5):
            ctx.collect(("k", i))

    def cancel(self):
        pass


class DeclaredBounded(Finite):
    def get_boundedness(self):
        return "BOUNDED"


class DeclaredUnbounded(Finite):
    def get_boundedness(self):
        return "CONTINUOUS_UNBOUNDED"


@pytest.mark.parametrize(
    "source, job_type",
    [
        (lambda env: env.from_collection([("k", 1), ("k", 2)]), "BATCH"),
        (lambda env: env.from_sequence(1, 5).map(lambda v: ("k", v)), "BATCH"),
        (lambda env: env.add_source(DeclaredBounded()), "BATCH"),
        (lambda env: env.add_source(Finite()), "STREAMING"),  # a SourceFunction of unknown boundedness
        (lambda env: env.add_source(DeclaredUnbounded()), "STREAMING"),
    ],
)
def test_automatic_is_batch_exactly_when_every_source_is_bounded(source, job_type):
    env = make_env("local", 1)
    env.set_runtime_mode(RuntimeExecutionMode.AUTOMATIC)
    source(env).key_by(lambda r: r[0]).sum(1).print()
    assert env.get_stream_graph().job_type == job_type


def test_automatic_with_a_bounded_and_an_unknown_source_is_streaming():
    env = make_env("local", 1, {"execution.runtime-mode": "automatic"})
    env.from_collection([("k", 1)]).union(env.add_source(Finite())).key_by(lambda r: r[0]).sum(1).print()
    assert env.get_stream_graph().job_type == "STREAMING"
    env = make_env("local", 1, {"execution.runtime-mode": "automatic"})
    env.from_collection([("k", 1)]).union(env.from_sequence(1, 3).map(lambda v: ("k", v))).key_by(lambda r: r[0]).sum(
        1
    ).print()
    assert env.get_stream_graph().job_type == "BATCH"


def test_automatic_runs_a_bounded_job_in_batch(target):
    env = make_env(target, 2, {"execution.runtime-mode": "AUTOMATIC"})
    assert sorted(word_count(env).execute_and_collect()) == sorted(Counter(words()).items())


def test_batch_with_an_unbounded_source_fails_naming_the_rule():
    env = make_env("local", 1)
    env.set_runtime_mode(RuntimeExecutionMode.BATCH)
    env.add_source(DeclaredUnbounded(), "ticks").print()
    with pytest.raises(
        GraphError, match="Detected an UNBOUNDED source .*'ticks'.* with the 'execution.runtime-mode' set to 'BATCH'"
    ):
        env.get_stream_graph()


def test_runtime_mode_option_values_and_errors():
    with pytest.raises(IllegalConfigurationError, match="execution.runtime-mode.*streaming, batch, automatic"):
        Configuration().set_string("execution.runtime-mode", "fast")  # refused where it is set
    env = StreamExecutionEnvironment.get_execution_environment()
    env.from_sequence(1, 3).print()
    env.set_runtime_mode(RuntimeExecutionMode.BATCH)
    assert env.configuration.get_string("execution.runtime-mode") == "BATCH"
    assert env.get_stream_graph().job_type == "BATCH"
    with pytest.raises(ValueError, match="not a runtime execution mode"):
        env.set_runtime_mode("sometimes")
    assert RuntimeExecutionMode.of("automatic") is RuntimeExecutionMode.AUTOMATIC
    assert [m.value for m in RuntimeExecutionMode] == [0, 1, 2]  # PyFlink's values


def test_batch_ignores_checkpointing_with_a_warning(target, tmp_path):
    env = make_env(target, 2)
    env.set_runtime_mode(RuntimeExecutionMode.BATCH)
    env.enable_checkpointing(100)
    env.get_checkpoint_config().set_checkpoint_storage_dir(str(tmp_path / "checkpoints"))
    word_count(env).print()
    with pytest.warns(UserWarning, match="BATCH execution mode, which takes no checkpoints"):
        client = env.execute_async()
    assert client.wait(60) and client.get_job_status() == "FINISHED"
    assert "numberOfCompletedCheckpoints" not in client.get_checkpoint_stats()
    assert not (tmp_path / "checkpoints").exists()
