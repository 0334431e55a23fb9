"""Partitioners: channel choices of every ship strategy; batch == per-record."""

from collections import Counter

import pytest

from raylink.core.key_groups import assign_key_to_parallel_operator
from raylink.shuffle.partitioners import (
    BroadcastPartitioner,
    CustomPartitionerWrapper,
    ForwardPartitioner,
    GlobalPartitioner,
    KeyGroupStreamPartitioner,
    RebalancePartitioner,
    RescalePartitioner,
    ShufflePartitioner,
    create_partitioner,
)

pytestmark = pytest.mark.timeout(30)


def make(p, n):
    p.setup(n)
    return p


def test_forward_and_global_always_zero():
    assert make(ForwardPartitioner(), 1).select_channels(list(range(5))) == [0] * 5
    g = make(GlobalPartitioner(), 4)
    assert [g.select_channel(v) for v in range(10)] == [0] * 10
    assert g.select_channels(list(range(10))) == [0] * 10


def test_rescale_is_round_robin_from_zero():
    r = make(RescalePartitioner(), 3)
    assert [r.select_channel(v) for v in range(7)] == [0, 1, 2, 0, 1, 2, 0]
    assert r.select_channels(list(range(5))) == [1, 2, 0, 1, 2]
    assert r.select_channel("x") == 0


def test_rebalance_round_robin_from_random_start():
    starts = set()
    for _ in range(40):
        r = make(RebalancePartitioner(), 4)
        seq = [r.select_channel(v) for v in range(8)]
        first = seq[0]
        starts.add(first)
        assert seq == [(first + i) % 4 for i in range(8)]
    assert len(starts) > 1  # the start is random, as in Flink


@pytest.mark.parametrize("cls", [RebalancePartitioner, RescalePartitioner])
@pytest.mark.parametrize("n,batches", [(1, [3, 5]), (3, [1, 2, 10, 0, 7]), (5, [5, 13, 4])])
def test_round_robin_batch_equals_per_record(cls, n, batches):
    a = make(cls(), n)
    b = a.copy()
    for k in batches:
        values = list(range(k))
        assert a.select_channels(values) == [b.select_channel(v) for v in values]


def test_shuffle_random_covers_channels():
    s = make(ShufflePartitioner(seed=1), 4)
    chans = s.select_channels(list(range(4000))) + [s.select_channel(v) for v in range(400)]
    counts = Counter(chans)
    assert set(counts) == {0, 1, 2, 3}
    assert all(800 < c < 1400 for c in counts.values())


def test_broadcast_selects_all_and_refuses_single_selection():
    b = make(BroadcastPartitioner(), 3)
    assert b.is_broadcast and b.all_channels() == [0, 1, 2]
    with pytest.raises(NotImplementedError, match="Broadcast partitioner does not support select channels."):
        b.select_channel(1)


def test_key_group_partitioner_matches_key_groups():
    p = make(KeyGroupStreamPartitioner(lambda v: v[0], 128), 4)
    values = [("user%d" % (i % 50), i) for i in range(1000)]
    expect = [assign_key_to_parallel_operator(v[0], 128, 4) for v in values]
    assert p.select_channels(values) == expect
    assert [p.select_channel(v) for v in values] == expect
    # same key -> same channel
    by_key = {}
    for v, c in zip(values, expect):
        assert by_key.setdefault(v[0], c) == c
    assert set(expect) == {0, 1, 2, 3}


def test_key_group_partitioner_default_max_parallelism_and_none_key():
    p = make(KeyGroupStreamPartitioner(lambda v: v), 4)
    assert p.max_parallelism == 128
    with pytest.raises(ValueError, match="Assigned key must not be null!"):
        p.select_channels(["a", None])
    with pytest.raises(ValueError, match="Assigned key must not be null!"):
        p.select_channel(None)


def test_key_extraction_error_names_the_record():
    p = make(KeyGroupStreamPartitioner(lambda v: v["id"], 128), 2)
    with pytest.raises(RuntimeError, match="Could not extract key from"):
        p.select_channels([{"id": 1}, {"no": 2}])


def _selector_failing_on(bad, calls):
    def key_of(v):
        calls.append(v)
        if v == bad:
            raise KeyError(f"no key in {v}")
        return v

    return key_of


@pytest.mark.parametrize("channels", [1, 3])
@pytest.mark.parametrize("call", ["select_channels", "bucket"])
def test_a_key_selector_runs_once_per_record_even_when_it_fails(channels, call):
    """On whichever path is active: the records up to the failing one, each once (the compiled
    path once reran its pure twin, and with it the selector, on any error)."""
    calls: list = []
    p = make(KeyGroupStreamPartitioner(_selector_failing_on(2, calls), 128), channels)
    with pytest.raises(RuntimeError, match="Could not extract key from 2") as info:
        getattr(p, call)([0, 1, 2, 3])
    assert isinstance(info.value.__cause__, KeyError)
    assert calls[:3] == [0, 1, 2] and sorted(calls) == sorted(set(calls))  # never twice
    custom_calls: list = []
    c = make(CustomPartitionerWrapper(lambda key, n: key % n, _selector_failing_on(2, custom_calls)), channels)
    with pytest.raises(RuntimeError, match="Could not extract key from 2"):
        c.select_channels([0, 1, 2, 3])
    assert custom_calls == [0, 1, 2]


def test_a_partitioner_set_up_again_forgets_the_channels_of_its_old_channel_count():
    p = make(KeyGroupStreamPartitioner(lambda v: v, 128), 4)
    keys = [f"k{i}" for i in range(50)] + [("t", i) for i in range(50)]
    p.select_channels(keys)
    copy = p.copy()  # shares nothing that matters once set up
    copy.setup(2)
    assert copy.bucket(keys) == [[k for k in keys if assign_key_to_parallel_operator(k, 128, 2) == c] for c in (0, 1)]
    assert p.select_channels(keys) == [assign_key_to_parallel_operator(k, 128, 4) for k in keys]


def test_custom_partitioner():
    c = make(CustomPartitionerWrapper(lambda key, n: key % n, lambda v: v[1]), 3)
    values = [("a", i) for i in range(9)]
    assert c.select_channels(values) == [i % 3 for i in range(9)]
    assert c.select_channel(("z", 5)) == 2
    bad = make(CustomPartitionerWrapper(lambda key, n: n, lambda v: v), 3)
    with pytest.raises(ValueError, match="custom partitioner returned 3"):
        bad.select_channels([1])
    with pytest.raises(ValueError):
        bad.select_channel(1)


@pytest.mark.parametrize(
    "name,cls",
    [
        ("FORWARD", ForwardPartitioner),
        ("REBALANCE", RebalancePartitioner),
        ("RESCALE", RescalePartitioner),
        ("SHUFFLE", ShufflePartitioner),
        ("BROADCAST", BroadcastPartitioner),
        ("GLOBAL", GlobalPartitioner),
        ("HASH", KeyGroupStreamPartitioner),
        ("CUSTOM", CustomPartitionerWrapper),
    ],
)
def test_factory(name, cls):
    p = create_partitioner(name, key_selector=lambda v: v, max_parallelism=64, partitioner_fn=lambda k, n: 0)
    assert type(p) is cls and str(p) == name


def test_factory_accepts_spec_objects_and_rejects_unknown():
    class Spec:
        ship_strategy = "CUSTOM"
        key_selector = staticmethod(lambda v: v)
        custom_partitioner = staticmethod(lambda k, n: 1)

    p = make(create_partitioner(Spec()), 2)
    assert p.select_channel(7) == 1
    with pytest.raises(ValueError, match="unknown ship strategy"):
        create_partitioner("ROUND_ROBIN")
    with pytest.raises(ValueError):
        create_partitioner("HASH")  # no key selector
