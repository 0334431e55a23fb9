"""End to end: every partitioner between two operators of parallelism 1..4.

Records are ``(x, upstream subtask)`` tagged by the downstream operator with its
own subtask index, so each test sees exactly which subtask every record
reached. The sequence source emits each subtask's share in ascending order,
which makes round-robin placement exactly predictable.
"""

from __future__ import annotations

import itertools
from collections import Counter, defaultdict

import pytest

from raylink.api.functions import MapFunction
from raylink.core.key_groups import assign_to_key_group
from raylink.state.state_backend import key_group_range_for_subtask
from raylink.tests.runtime_jobs import TARGETS, TagSubtask, make_env

pytestmark = pytest.mark.timeout(60)

N = 600
PARALLELISMS = [1, 2, 3, 4]
PAIRS = list(itertools.product(PARALLELISMS, PARALLELISMS))


RAY_PAIRS = [(1, 4), (3, 2), (4, 4)]  # Ray covers a few shapes; the local target all 16


def shapes(pairs: list, ray_pairs: list) -> list:
    """``(target, p_up, p_down)`` cases: every pair on the local target, ``ray_pairs`` on Ray
    (only what runs is generated; ``target`` stays the fixture, so Ray cases start Ray)."""
    return [
        pytest.param(t, *pair, id=f"{t}-{pair[0]}-{pair[1]}")
        for t in TARGETS
        for pair in pairs
        if t == "local" or pair in ray_pairs
    ]


#: (target, p_up, p_down) of the tests over all upstream x downstream parallelisms
PAIR_CASES = shapes(PAIRS, RAY_PAIRS)
#: (target, p) of the tests of one parallelism on both sides (Ray: the equal shape it covers)
SAME_CASES = [
    pytest.param(c.values[0], c.values[1], id=f"{c.values[0]}-{c.values[1]}")
    for c in shapes([(p, p) for p in PARALLELISMS], RAY_PAIRS)
]


class KeyedTag(MapFunction):
    """``(x, up) -> (x, up, down, max parallelism of the downstream operator)``."""

    def open(self, runtime_context):
        self.index = runtime_context.get_index_of_this_subtask()
        self.max_parallelism = runtime_context.get_max_number_of_parallel_subtasks()

    def map(self, value):
        return value + (self.index, self.max_parallelism)


def run(target, p_up, p_down, partition, downstream=None, chained=True):
    """source(p_up) -> tag up -> partition -> tag down (p_down) -> collect; returns (x, up, down, …)."""
    env = make_env(target, p_down)
    upstream = env.from_sequence(1, N).set_parallelism(p_up).map(TagSubtask()).set_parallelism(p_up)
    down = partition(upstream).map(downstream or TagSubtask(extend=True)).set_parallelism(p_down)
    if not chained:
        down.disable_chaining()
    out = list(down.execute_and_collect())
    assert all(0 <= r[1] < p_up and 0 <= r[2] < p_down for r in out)
    return out


def by_upstream(out):
    """upstream subtask -> [downstream subtask of each of its records, in emission (= value) order]."""
    grouped = defaultdict(list)
    for x, up, down, *_ in sorted(out):
        grouped[up].append(down)
    return grouped


def assert_each_record_once(out):
    assert sorted(r[0] for r in out) == list(range(1, N + 1))


# -- Flink's POINTWISE wiring (EdgeManagerBuildUtil.connectPointwise) -------------------------------
def pointwise_targets(up, p_up, p_down):
    """Downstream subtasks connected to upstream subtask ``up`` (ordered = its channel order)."""
    if p_up == p_down:
        return [up]
    if p_up > p_down:
        return [d for d in range(p_down) if d * p_up // p_down <= up < (d + 1) * p_up // p_down]
    start = (up * p_down + p_up - 1) // p_up
    end = ((up + 1) * p_down + p_up - 1) // p_up
    return list(range(start, end))


def test_pointwise_reference_matches_the_seed_examples():
    # EdgeManagerBuildUtil: 4 -> 2 two partitions each; 3 -> 2 one task gets 2, the other 1;
    # 2 -> 4 each partition feeds 2 tasks; 2 -> 3 one partition feeds 2, the other 1
    assert [pointwise_targets(u, 4, 2) for u in range(4)] == [[0], [0], [1], [1]]
    assert sorted(Counter(t for u in range(3) for t in pointwise_targets(u, 3, 2)).values()) == [1, 2]
    assert [pointwise_targets(u, 2, 4) for u in range(2)] == [[0, 1], [2, 3]]
    assert sorted(len(pointwise_targets(u, 2, 3)) for u in range(2)) == [1, 2]


# -- the partitioners ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("chained", [True, False], ids=["chained", "network"])
@pytest.mark.parametrize("target,p", SAME_CASES, indirect=["target"])
def test_forward_keeps_every_record_in_its_subtask(target, p, chained):
    out = run(target, p, p, lambda s: s.forward(), chained=chained)
    assert_each_record_once(out)
    assert [r for r in out if r[1] != r[2]] == []
    assert sorted(Counter(r[1] for r in out)) == list(range(p))


@pytest.mark.parametrize("target,p_up,p_down", PAIR_CASES, indirect=["target"])
def test_rebalance_round_robins_over_all_downstream_subtasks(target, p_up, p_down):
    out = run(target, p_up, p_down, lambda s: s.rebalance())
    assert_each_record_once(out)
    for up, downs in by_upstream(out).items():
        start = downs[0]
        assert downs == [(start + i) % p_down for i in range(len(downs))], f"upstream {up}"


@pytest.mark.parametrize("target,p_up,p_down", PAIR_CASES, indirect=["target"])
def test_rescale_round_robins_over_the_pointwise_targets(target, p_up, p_down):
    out = run(target, p_up, p_down, lambda s: s.rescale())
    assert_each_record_once(out)
    grouped = by_upstream(out)
    assert sorted(grouped) == list(range(p_up))
    for up, downs in grouped.items():
        targets = pointwise_targets(up, p_up, p_down)
        assert downs == [targets[i % len(targets)] for i in range(len(downs))], f"upstream {up}"


@pytest.mark.parametrize("target,p_up,p_down", PAIR_CASES, indirect=["target"])
def test_shuffle_delivers_every_record_once_to_random_subtasks(target, p_up, p_down):
    out = run(target, p_up, p_down, lambda s: s.shuffle())
    assert_each_record_once(out)
    per_down = Counter(r[2] for r in out)
    assert sorted(per_down) == list(range(p_down))  # 600 random picks reach every subtask


@pytest.mark.parametrize("target,p_up,p_down", PAIR_CASES, indirect=["target"])
def test_broadcast_delivers_every_record_to_every_subtask(target, p_up, p_down):
    out = run(target, p_up, p_down, lambda s: s.broadcast())
    assert len(out) == N * p_down
    for down in range(p_down):
        assert sorted(r[0] for r in out if r[2] == down) == list(range(1, N + 1)), f"downstream {down}"


@pytest.mark.parametrize("target,p_up,p_down", PAIR_CASES, indirect=["target"])
def test_global_sends_everything_to_subtask_zero(target, p_up, p_down):
    out = run(target, p_up, p_down, lambda s: s.global_())
    assert_each_record_once(out)
    assert {r[2] for r in out} == {0}
    assert {r[1] for r in out} == set(range(p_up))


@pytest.mark.parametrize("target,p_up,p_down", PAIR_CASES, indirect=["target"])
def test_partition_custom_uses_the_user_partitioner(target, p_up, p_down):
    out = run(target, p_up, p_down, lambda s: s.partition_custom(lambda key, n: (key * 7) % n, lambda r: r[0]))
    assert_each_record_once(out)
    assert [r for r in out if r[2] != (r[0] * 7) % p_down] == []


@pytest.mark.parametrize("target,p_up,p_down", PAIR_CASES, indirect=["target"])
def test_key_by_sends_each_key_to_the_subtask_owning_its_key_group(target, p_up, p_down):
    def key(r):
        return f"key-{r[0] % 37}"

    out = run(target, p_up, p_down, lambda s: s.key_by(key), downstream=KeyedTag())
    assert_each_record_once(out)
    subtask_of = defaultdict(set)
    for r in out:
        subtask_of[key(r)].add(r[2])
    assert {k: len(v) for k, v in subtask_of.items() if len(v) != 1} == {}
    max_parallelism = {r[3] for r in out}
    assert len(max_parallelism) == 1
    (maxp,) = max_parallelism
    for k, (down,) in subtask_of.items():
        lo, hi = key_group_range_for_subtask(maxp, p_down, down)
        assert lo <= assign_to_key_group(k, maxp) <= hi, k
    if p_down > 1:
        assert len({d for (d,) in subtask_of.values()}) > 1  # 37 keys do not all land on one subtask


@pytest.mark.parametrize("p", [1, 3])
@pytest.mark.parametrize("partition", ["key_by", "partition_custom"])
def test_a_failing_key_selector_fails_the_job_at_parallelism_1_as_at_3(target, p, partition):
    """The partitioner runs the key selector on one channel too (Flink's writer always
    selects a channel): a key that cannot be extracted fails a p=1 test run as it would the
    job at p=3, although the plain map behind it never reads the key."""

    def key(r):
        if r[0] == 300:
            raise ValueError("no key for 300")
        return r[0]

    def by(s):
        return s.key_by(key) if partition == "key_by" else s.partition_custom(lambda k, n: k % n, key)

    with pytest.raises(Exception) as failure:
        run(target, p, p, by)
    messages = []
    error = failure.value
    while error is not None:
        messages.append(str(error))
        error = error.__cause__ or error.__context__
    assert any("Could not extract key from (300, " in m for m in messages), messages
    assert any("no key for 300" in m for m in messages), messages
