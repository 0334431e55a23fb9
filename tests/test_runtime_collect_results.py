"""``execute_and_collect`` hands back the very records the job produced, with their types,
whatever encoding carried them from a TaskExecutor (``shuffle.collect_codec``: marshal for
flat batches, cloudpickle for the rest), and nothing lost or duplicated when many takes
carry them; a record that cannot travel fails the job naming its type."""

from __future__ import annotations

import enum
import threading
from collections import Counter
from decimal import Decimal

import pytest

from raylink.core.row import Row
from raylink.runtime.client.job_result import JobExecutionException
from raylink.tests.runtime_jobs import make_env

pytestmark = pytest.mark.timeout(120)


class Level(enum.IntEnum):
    LOW = 1
    HIGH = 2


def mixed(i: int):
    """Records of every kind: flat batches and batches that must be pickled alternate."""
    kind = i % 8
    if kind == 0:
        return (f"w{i % 13}", i)
    if kind == 1:
        return i * 0.5
    if kind == 2:
        return Row(id=i, name=f"n{i}")
    if kind == 3:
        return {"i": i, "l": [i, None]}
    if kind == 4:
        return (i, 2**70 + i, b"\x00" * (i % 3), None, True)
    if kind == 5:
        return bytearray(b"b%d" % i)
    if kind == 6:
        return (Level.HIGH if i % 2 else Level.LOW, Decimal(i) / 4)
    return f"s{i}"


def typed(value):
    if isinstance(value, (tuple, list)):
        return (type(value), tuple(typed(v) for v in value))
    if isinstance(value, dict):
        return (dict, tuple((k, typed(v)) for k, v in value.items()))
    if isinstance(value, Row):
        return (Row, value.as_dict() if hasattr(value, "as_dict") else tuple(value))
    return (type(value), value)


@pytest.mark.parametrize("batch", [1, 64])
def test_records_of_every_kind_come_back_with_their_types(target, batch):
    env = make_env(target, 1)
    values = list(range(4000))
    stream = env.from_collection(values)
    if batch == 1:  # one record per batch: every kind alone
        stream = stream.rebalance()
    with stream.map(mixed).execute_and_collect() as results:
        got = list(results)
    assert [typed(v) for v in got] == [typed(mixed(i)) for i in values]


def test_a_rolling_count_at_parallelism_2_collects_every_update_once(target):
    """The bench's shape (key_by -> reduce -> collect) over more records than one take carries."""
    words = [f"w{(i * 7919) % 501}" for i in range(60_000)]
    env = make_env(target, 2, {"raylink.collect.max-buffered-records": 2048})
    counts = (
        env.from_collection(words)
        .map(lambda w: (w, 1))
        .key_by(lambda pair: pair[0])
        .reduce(lambda a, b: (a[0], a[1] + b[1]))
    )
    with counts.execute_and_collect() as results:
        got = list(results)
    expected = []  # brute force: every word's running count
    running: Counter = Counter()
    for w in words:
        running[w] += 1
        expected.append((w, running[w]))
    assert sorted(got) == sorted(expected)
    per_word: dict = {}
    for w, c in got:  # in order per key: each key's counts arrive as they grew
        per_word.setdefault(w, []).append(c)
    assert all(cs == list(range(1, len(cs) + 1)) for cs in per_word.values())


def locked(i: int):
    return (i, threading.Lock()) if i == 100 else (i, None)


@pytest.mark.timeout(120)
def test_a_record_that_cannot_travel_to_the_driver_fails_the_job_naming_its_type(ray_session):
    env = make_env("ray", 1)
    got = []
    with pytest.raises(JobExecutionException, match="cannot pickle '_thread.lock'"):
        for value in env.from_collection(list(range(200))).map(locked).execute_and_collect():
            got.append(value)
    assert got == [(i, None) for i in range(len(got))]
