"""Records that do not fit what the program says about them: positional aggregations
on fields a record does not have, records that do not match a declared output type,
and record classes defined in the job script (``__main__``) on Ray.

Each gets exact results where the program is right, and a clear error naming the
operator and the field (or the reason) where it is not -- never a silent wrong
result and never a hang.
"""

from __future__ import annotations

import enum
import os
import random
import subprocess
import sys
import textwrap
import uuid
from collections import namedtuple
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

import pytest

from raylink.api import Types
from raylink.runtime.client.job_result import JobExecutionException
from raylink.runtime.task.task_events import RemoteTraceback
from raylink.tests.runtime_jobs import make_env

pytestmark = pytest.mark.timeout(120)

HERE = __name__  # this module, as record classes defined here are named


def ship_this_module_by_value() -> None:
    """Ray workers cannot import the test modules: their functions and classes travel by value."""
    import cloudpickle
    import ray

    for pickler in (cloudpickle, ray.cloudpickle):
        pickler.register_pickle_by_value(sys.modules[__name__])


# -- positional aggregations ---------------------------------------------------------------------
def rolling_reference(records, agg, pos, kpos=0):
    """What Flink's SumAggregator / ComparableAggregator emit, by brute force: for every record
    the running aggregate of its key (field ``kpos``) so far: the key's first record with
    position ``pos`` replaced, or (``*_by``) the record holding the extreme value."""
    out, seen = [], {}
    for record in records:
        key = record[kpos]
        history = seen.setdefault(key, [])
        history.append(record)
        first = history[0]
        values = [r[pos] for r in history]
        if agg in ("sum", "min", "max"):
            new = sum(values) if agg == "sum" else min(values) if agg == "min" else max(values)
            out.append(first[:pos] + (new,) + first[pos + 1 :])
        else:  # the whole record holding the min / max, the first one on ties
            best = min(values) if agg == "min_by" else max(values)
            out.append(history[values.index(best)])
    return out


def triples(n: int, seed: int):
    rng = random.Random(seed)
    return [(f"k{rng.randrange(7)}", rng.randrange(-50, 50), rng.randrange(1000)) for _ in range(n)]


@pytest.mark.parametrize("agg", ["sum", "min", "max", "min_by", "max_by"])
@pytest.mark.parametrize("pos", [1, 2])
def test_positional_aggregations_match_a_brute_force_reference(agg, pos):
    records = triples(400, seed=pos * 10 + len(agg))
    check_against_reference(records, agg, pos)


@pytest.mark.parametrize("pos", [0, 1])
def test_sum_over_pairs_matches_a_brute_force_reference(pos):
    rng = random.Random(pos)
    kpos = 1 - pos  # (key, n).sum(1): the word-count fast path; (n, key).sum(0)
    records = [(rng.randrange(5), f"k{rng.randrange(9)}")[:: 1 if kpos else -1] for _ in range(600)]
    check_against_reference(records, "sum", pos, kpos)


def check_against_reference(records, agg, pos, kpos=0):
    env = make_env("local", 2)
    getattr(env.from_collection(records).key_by(lambda t: t[kpos]), agg)(pos).collect_sink("out")
    got = env.execute().get_accumulator_result("out")
    expected = rolling_reference(records, agg, pos, kpos)
    # one key's records stay in order (one source subtask, one channel per key); keys interleave
    for key in {r[kpos] for r in records}:
        assert [r for r in got if r[kpos] == key] == [r for r in expected if r[kpos] == key]
    assert len(got) == len(records)


def test_sum_of_a_position_beyond_the_pairs_arity_fails_naming_operator_and_position():
    env = make_env("local", 1)
    env.from_collection([(1, 10), (1, 20)]).key_by(lambda t: t[0]).sum(2).name("Totals").collect_sink("out")
    with pytest.raises(JobExecutionException) as ei:
        env.execute()  # was: (1, 10), (2, 10) -- field 0, the key, summed
    message = str(ei.value)
    assert "Operator 'Totals'" in message
    assert "sum 'Totals': field position 2 is out of bounds: the record has 2 fields ((1, 10))" in message


@pytest.mark.parametrize("agg", ["min", "max", "min_by", "max_by"])
def test_every_positional_aggregation_checks_the_position_of_a_keys_first_record(agg):
    env = make_env("local", 1)
    records = [("a", 1, 5), ("a", 2, 6), ("b", 3)]  # key b's first record has no position 2
    getattr(env.from_collection(records).key_by(lambda t: t[0]), agg)(2).collect_sink("out")
    with pytest.raises(
        JobExecutionException,
        match=rf"{agg} 'Keyed Aggregation': field position 2 is out of "
        r"bounds: the record has 2 fields \(\('b', 3\)\)",
    ):
        env.execute()


def test_out_of_bounds_aggregation_fails_on_ray_with_the_same_error(ray_session):
    ship_this_module_by_value()
    env = make_env("ray", 2)
    env.from_collection([(f"k{i % 4}", i) for i in range(40)]).key_by(lambda t: t[0]).max_by(5).collect_sink("out")
    with pytest.raises(
        JobExecutionException,
        match=r"max_by 'Keyed Aggregation': field position 5 is out of "
        r"bounds: the record has 2 fields",
    ):
        env.execute()


# -- declared output types ---------------------------------------------------------------------
class Color(enum.Enum):
    RED = 1


class Level(enum.IntEnum):
    HIGH = 3


@dataclass(frozen=True)
class Event:
    word: str
    n: int


PAIRS = Types.TUPLE([Types.STRING(), Types.INT()])
WHEN = datetime(2024, 5, 1, 12, 0)
ID = uuid.UUID(int=7)


def emit_then(bad):
    """A flat_map function: two good pairs per line, then ``bad``."""

    def split(line):
        return [(w, 1) for w in line.split()] + [bad]

    return split


@pytest.mark.parametrize(
    "bad, error",
    [
        (("w", WHEN), "field 1 of a record declared Types.TUPLE([STRING, INT]) is a datetime.datetime, not an INT"),
        ((WHEN, 1), "field 0 of a record declared Types.TUPLE([STRING, INT]) is a datetime.datetime, not a STRING"),
        (
            (Decimal("1.5"), 1),
            "field 0 of a record declared Types.TUPLE([STRING, INT]) is a decimal.Decimal, not a STRING",
        ),
        ((ID, 1), "field 0 of a record declared Types.TUPLE([STRING, INT]) is an uuid.UUID, not a STRING"),
        (("w", Color.RED), f"field 1 of a record declared Types.TUPLE([STRING, INT]) is a {HERE}.Color, not an INT"),
        (("w", 2.5), "field 1 of a record declared Types.TUPLE([STRING, INT]) is a float, not an INT"),
        (("w", [1]), "field 1 of a record declared Types.TUPLE([STRING, INT]) is a list, not an INT"),
        ({"w", 1}, "a record declared Types.TUPLE([STRING, INT]) is a set"),
        (Event("w", 1), f"a record declared Types.TUPLE([STRING, INT]) is a {HERE}.Event"),
        (("w", 1, 2), "a record declared Types.TUPLE([STRING, INT]) has 3 fields"),
    ],
)
def test_a_record_that_does_not_match_the_declared_type_fails_naming_operator_field_and_type(bad, error):
    env = make_env("local", 2)
    env.from_collection(["a b", "c d"]).flat_map(emit_then(bad), output_type=PAIRS).name("Split").rebalance().map(
        lambda v: v
    ).collect_sink("out")
    with pytest.raises(JobExecutionException) as ei:
        env.execute()
    message = str(ei.value)
    assert "Operator 'Split'" in message and "RecordTypeError" in message
    assert error + ": " in message


def test_a_declared_type_converts_as_pyflink_and_keeps_exact_results():
    Pair = namedtuple("Pair", "word n")
    words = [f"w{i % 13}" for i in range(500)]

    def shapes(i):  # the same pair as a tuple, a list, a namedtuple, with an IntEnum count
        w = words[i]
        return [(w, 1), [w, 1], Pair(w, 1), (w, Level.HIGH)]

    env = make_env("local", 2)
    env.from_collection(list(range(len(words)))).flat_map(shapes, output_type=PAIRS).key_by(lambda t: t[0]).sum(
        1
    ).collect_sink("out")
    got = env.execute().get_accumulator_result("out")
    assert {type(r) for r in got} == {tuple} and {type(r[1]) for r in got} == {int}
    finals = {}
    for word, total in got:
        finals[word] = max(finals.get(word, 0), total)
    assert finals == {w: words.count(w) * 6 for w in set(words)}


def test_without_a_declared_type_every_value_arrives_as_it_was():
    values = [
        ("w", WHEN),
        (Decimal("1.5"), ID),
        {"w", 1},
        Event("w", 1),
        ("w", Color.RED),
        ["w", [1, 2]],
        ("w", Level.HIGH),
        frozenset({3}),
        {"k": (1, [2])},
        2**70,
    ]

    env = make_env("local", 2)
    env.from_collection(list(range(len(values)))).map(lambda i, v=values: v[i]).key_by(lambda v: 0).map(
        lambda v: v
    ).collect_sink("out")
    got = env.execute().get_accumulator_result("out")
    assert sorted(map(repr, got)) == sorted(map(repr, values))
    assert {type(v) for v in got} == {type(v) for v in values}


# -- record classes defined in the job script ----------------------------------------------------
JOB_SCRIPT = """
from collections import namedtuple
from dataclasses import dataclass

from raylink.api import StreamExecutionEnvironment


@dataclass(frozen=True)
class Click:
    user: str
    page: str
    ms: int


PageTotal = namedtuple("PageTotal", "page clicks ms")
RAW = [(f"u{i % 5}", f"/p{i % 7}", 10 + i) for i in range(300)]

env = StreamExecutionEnvironment.get_execution_environment()
env.set_parallelism(2)
(
    env.from_collection(RAW)
    .map(lambda raw: Click(*raw))
    .key_by(lambda click: click.page)  # Clicks cross to the other TaskExecutor
    .map(lambda click: PageTotal(click.page, 1, click.ms))
    .key_by(lambda total: total.page)  # and PageTotals
    .reduce(lambda a, b: PageTotal(a.page, a.clicks + b.clicks, a.ms + b.ms))
    .collect_sink("totals")
)
result = env.execute("main classes")
totals = result.get_accumulator_result("totals")
print("several executors", len({m["executor"] for m in result.task_metrics}) > 1)
print("records", len(totals))
for page in sorted({t.page for t in totals}):
    print(repr(max((t for t in totals if t.page == page), key=lambda t: t.clicks)))
# records of a __main__ class come back to the driver as instances of the driver's own class
back = list(env.from_collection(RAW[:20]).map(lambda raw: Click(*raw)).rebalance()
            .map(lambda click: click).execute_and_collect())
print("collected equal", sorted(back, key=lambda c: c.ms) == [Click(*raw) for raw in RAW[:20]],
      all(type(c) is Click for c in back))
"""


@pytest.mark.timeout(180)
def test_record_classes_defined_in_the_job_script_travel_between_task_executors_on_ray(ray_session, tmp_path):
    script = tmp_path / "clicks_job.py"
    script.write_text(textwrap.dedent(JOB_SCRIPT))
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAYLINK_")}
    env["RAY_ADDRESS"] = ray_session.get_runtime_context().gcs_address
    proc = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=150
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    raw = [(f"u{i % 5}", f"/p{i % 7}", 10 + i) for i in range(300)]
    expected = (
        ["several executors True", "records 300"]
        + [
            f"PageTotal(page='/p{p}', clicks={sum(1 for r in raw if r[1] == f'/p{p}')}, "
            f"ms={sum(r[2] for r in raw if r[1] == f'/p{p}')})"
            for p in range(7)
        ]
        + ["collected equal True True"]
    )
    assert proc.stdout.splitlines() == expected


class Holder:
    def __init__(self):
        import threading

        self.lock = threading.Lock()


def test_an_unserialisable_record_fails_saying_why(target):
    if target == "ray":
        ship_this_module_by_value()
    env = make_env(target, 2)
    env.from_collection([1, 2]).map(lambda i: (i, Holder())).name("Wrap").rebalance().map(lambda v: v).collect_sink(
        "out"
    )
    with pytest.raises(JobExecutionException) as ei:
        env.execute()
    message = str(ei.value)
    assert "Operator 'Wrap'" in message
    assert (
        f"Cannot serialize a value of type '{HERE}.Holder': TypeError: cannot pickle '_thread.lock' object" in message
    )


def test_a_failing_key_selectors_own_error_and_traceback_reach_the_driver(target):
    """At parallelism 1 too (the partitioner runs the key selector on its one channel); on
    Ray the traceback crosses from the TaskExecutor as text."""
    if target == "ray":
        ship_this_module_by_value()
    env = make_env(target, 1)

    def key_of(record):
        if record == 30:
            raise ValueError(f"no key for {record}")
        return record % 3

    env.from_sequence(1, 60).key_by(key_of).map(lambda x: x).add_sink(lambda _v: None)
    with pytest.raises(JobExecutionException) as failure:
        env.execute("bad key")
    chain, error = [], failure.value
    while error is not None:
        chain.append(error)
        error = error.__cause__
    assert "Could not extract key from 30" in str(failure.value)
    (remote,) = [e for e in chain if isinstance(e, RemoteTraceback)]
    assert remote is chain[-1]
    assert "in key_of" in remote.text and "ValueError: no key for 30" in remote.text
