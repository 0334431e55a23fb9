"""Key groups: Flink's formulas, stable hashing across processes, fast batch paths."""

import dataclasses
import datetime
import decimal
import json
import os
import subprocess
import sys
import textwrap
from collections import Counter

import mmh3
import pytest

from raylink.core.key_groups import (
    KeyGroupRange,
    assign_key_groups,
    assign_key_to_parallel_operator,
    assign_keys_to_operators,
    assign_to_key_group,
    compute_default_max_parallelism,
    compute_key_group_range_for_operator_index,
    compute_operator_index_for_key_group,
    murmur_hash,
    stable_hash,
)

pytestmark = pytest.mark.timeout(30)


def java_murmur(code: int) -> int:
    """Flink's MathUtils.murmurHash, transcribed from the Java source with 32-bit wrap-around."""
    m = 0xFFFFFFFF

    def rotl(x, r):
        return ((x << r) | (x >> (32 - r))) & m

    code &= m
    code = (code * 0xCC9E2D51) & m
    code = rotl(code, 15)
    code = (code * 0x1B873593) & m
    code = rotl(code, 13)
    code = (code * 5 + 0xE6546B64) & m
    code ^= 4
    code ^= code >> 16
    code = (code * 0x85EBCA6B) & m
    code ^= code >> 13
    code = (code * 0xC2B2AE35) & m
    code ^= code >> 16
    signed = code - (1 << 32) if code & 0x80000000 else code
    if signed >= 0:
        return signed
    return -signed if signed != -(1 << 31) else 0


@pytest.mark.parametrize("code", [0, 1, 2, 42, -1, -42, 2**31 - 1, -(2**31), 123456789, 0xDEADBEEF])
def test_murmur_hash_is_flinks(code):
    assert murmur_hash(code) == java_murmur(code)


@pytest.mark.parametrize("key", [0, 1, 7, 42, 1000, -5, 2**31 - 1])
def test_int_keys_land_in_flinks_key_group(key):
    # Java Integer.hashCode() is the value itself: same key group as Flink for int keys
    for max_p in (128, 256, 1000):
        assert assign_to_key_group(key, max_p) == java_murmur(key) % max_p


def test_known_values_are_pinned():
    assert stable_hash("hello") == 613153351  # MurmurHash3_x86_32("hello", seed 0)
    assert stable_hash(42) == 42
    assert assign_to_key_group("hello", 128) == java_murmur(613153351) % 128


def test_str_hashes_are_pinned_and_a_lone_surrogate_hashes_as_its_three_bytes():
    """Strings UTF-8 can encode keep the hashes (and key groups: savepoints stay valid) they had
    before lone surrogates were hashed; a lone surrogate is MurmurHash3 of its 'surrogatepass'
    bytes (mmh3 crashed on the str itself), in the scalar and the batch functions alike."""
    words = ["a", "word", "\u00e4\u00f6\u00fc", "\u6f22\u5b57", "\U0001f600", ""]
    assert [stable_hash(w) for w in words] == [1009084850, 3326792864, 769542228, 1467002891, 3199479546, 0]
    assert assign_key_groups(words, 128) == [95, 36, 16, 123, 95, 94]
    assert [assign_to_key_group(w, 32768) for w in words] == [30431, 11556, 9488, 2427, 23519, 31198]
    surrogates = [json.loads('"\\ud800"'), "x\udfff", "\udbff\udc00"]  # a pair stays two code points
    expected = [mmh3.hash(s.encode("utf-8", "surrogatepass")) & 0xFFFFFFFF for s in surrogates]
    assert [stable_hash(s) for s in surrogates] == expected
    mixed = surrogates + words
    assert assign_key_groups(mixed, 128) == [assign_to_key_group(k, 128) for k in mixed]
    assert stable_hash((surrogates[0], 1)) == (31 * (31 + expected[0]) + 1) & 0xFFFFFFFF


def test_equal_keys_hash_alike():
    assert stable_hash(1) == stable_hash(1.0) == stable_hash(True) == stable_hash(decimal.Decimal(1))
    assert stable_hash(("a", 1)) == stable_hash(("a", 1.0))
    assert stable_hash(frozenset({"a", "b"})) == stable_hash(frozenset({"b", "a"}))
    utc = datetime.timezone.utc
    plus2 = datetime.timezone(datetime.timedelta(hours=2))
    assert stable_hash(datetime.datetime(2024, 1, 1, 12, tzinfo=utc)) == stable_hash(
        datetime.datetime(2024, 1, 1, 14, tzinfo=plus2)
    )


@dataclasses.dataclass(frozen=True)
class _Key:
    a: str
    b: int


_SUBPROCESS_KEYS = [
    "hello",
    "",
    "日本語",
    b"bytes",
    42,
    -7,
    2**70,
    3.25,
    True,
    ("a", 1, None),
    ("nested", ("x", b"y")),
    frozenset({"p", "q"}),
    datetime.date(2024, 2, 29),
    datetime.datetime(2024, 1, 1, 8, 30),
]


def _values_here():
    return {
        "hash": [stable_hash(k) for k in _SUBPROCESS_KEYS],
        "kg": [assign_to_key_group(k, 128) for k in _SUBPROCESS_KEYS],
        "op": assign_keys_to_operators(["k%d" % i for i in range(200)], 128, 5),
    }


def test_stable_across_processes_with_different_hash_seeds():
    here = _values_here()
    script = textwrap.dedent(
        """
        import json, sys
        sys.path.insert(0, %r)
        from test_shuffle_key_groups import _values_here
        print(json.dumps(_values_here()))
        """
        % os.path.dirname(__file__)
    )
    for seed in ("1", "12345"):
        env = dict(os.environ, PYTHONHASHSEED=seed)
        out = subprocess.run(
            [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=60, check=True
        )
        assert json.loads(out.stdout.strip().splitlines()[-1]) == here
    # and the salted hash really differs between those processes (the reason for stable_hash)
    probe = "print(hash('hello'))"
    h1 = subprocess.run(
        [sys.executable, "-c", probe],
        env=dict(os.environ, PYTHONHASHSEED="1"),
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    h2 = subprocess.run(
        [sys.executable, "-c", probe],
        env=dict(os.environ, PYTHONHASHSEED="12345"),
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert h1 != h2


def test_dataclass_key_is_stable_and_value_based():
    assert stable_hash(_Key("a", 1)) == stable_hash(_Key("a", 1))
    assert stable_hash(_Key("a", 1)) != stable_hash(_Key("a", 2))


def test_none_key_error_text():
    with pytest.raises(ValueError, match="^Assigned key must not be null!$"):
        assign_to_key_group(None, 128)
    with pytest.raises(ValueError, match="Assigned key must not be null!"):
        assign_key_to_parallel_operator(None, 128, 4)
    with pytest.raises(ValueError, match="Assigned key must not be null!"):
        assign_keys_to_operators(["a", None, "b"], 128, 4)


@pytest.mark.parametrize(
    "keys",
    [
        ["key-%d" % i for i in range(3000)],
        list(range(-1000, 2000)),
        [("t", i) for i in range(500)] + ["s%d" % i for i in range(500)] + [1.5, b"x", 2**65],
    ],
)
def test_batch_paths_match_scalar_functions(keys):
    for max_p in (128, 100, 1):
        assert assign_key_groups(keys, max_p) == [assign_to_key_group(k, max_p) for k in keys]
    for p in (1, 3, 7):
        assert assign_keys_to_operators(keys, 128, p) == [assign_key_to_parallel_operator(k, 128, p) for k in keys]


@pytest.mark.parametrize("keys", [["user-%d" % i for i in range(20000)], list(range(20000))])
def test_keys_cover_all_channels_evenly(keys):
    for p in (2, 4, 7):
        counts = Counter(assign_keys_to_operators(keys, 128, p))
        assert set(counts) == set(range(p))
        mean = len(keys) / p
        # key groups are split unevenly by the formula itself (128 % p), allow for that
        assert all(0.6 * mean < c < 1.4 * mean for c in counts.values()), counts


def test_operator_index_formula():
    assert compute_operator_index_for_key_group(128, 3, 0) == 0
    assert compute_operator_index_for_key_group(128, 3, 42) == 0
    assert compute_operator_index_for_key_group(128, 3, 43) == 1
    assert compute_operator_index_for_key_group(128, 3, 85) == 1
    assert compute_operator_index_for_key_group(128, 3, 86) == 2
    assert compute_operator_index_for_key_group(128, 3, 127) == 2


def test_key_group_ranges_match_flink():
    ranges = [compute_key_group_range_for_operator_index(128, 3, i) for i in range(3)]
    assert ranges == [KeyGroupRange(0, 42), KeyGroupRange(43, 85), KeyGroupRange(86, 127)]
    assert [len(r) for r in ranges] == [43, 43, 42]


@pytest.mark.parametrize("max_p,p", [(128, 1), (128, 3), (128, 128), (100, 7), (32768, 13), (10, 4)])
def test_ranges_partition_key_groups_consistently_with_operator_index(max_p, p):
    covered = []
    for i in range(p):
        r = compute_key_group_range_for_operator_index(max_p, p, i)
        for kg in r:
            assert compute_operator_index_for_key_group(max_p, p, kg) == i
        covered.extend(r)
    assert covered == list(range(max_p))


def test_range_preconditions():
    with pytest.raises(ValueError, match="Maximum parallelism must not be smaller than parallelism."):
        compute_key_group_range_for_operator_index(4, 8, 0)
    with pytest.raises(ValueError):
        compute_key_group_range_for_operator_index(128, 0, 0)


def test_key_group_range_api():
    r = KeyGroupRange(5, 9)
    assert 5 in r and 9 in r and 10 not in r and len(r) == 5 and list(r) == [5, 6, 7, 8, 9]
    assert r.intersection(KeyGroupRange(8, 20)) == KeyGroupRange(8, 9)
    assert len(r.intersection(KeyGroupRange(20, 30))) == 0


def test_default_max_parallelism():
    assert compute_default_max_parallelism(1) == 128
    assert compute_default_max_parallelism(100) == 256
    assert compute_default_max_parallelism(30000) == 32768
