"""The compiled per-record path against its pure-Python twins (``raylink.shuffle.hotpath``).

The twin comparisons need the compiled module (``bash scripts/setup.sh`` builds it) and skip
without it, except where it is required (``RAYLINK_REQUIRE_COMPILED=1``, which
``scripts/test.sh`` sets, or ``CI``): there they fail. The brute-force references and the
selector tests run either way. CI runs this file twice: as is, and with
``RAYLINK_PURE_PYTHON=1`` (``scripts/test.sh``); the twins are compared in both runs.

The strategies reach what the API accepts: str with lone surrogates (category Cs), ints far
beyond 64 bits, NaN, bytes, None, nested tuples/lists/dicts, Rows; channels negative, beyond
the channel count and beyond 64 bits; empty batches. A compiled function and its twin give
the same result or raise the same error (type, text and cause).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from decimal import Decimal
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from raylink.core.key_groups import (
    assign_key_groups,
    assign_key_to_parallel_operator,
    assign_to_key_group,
    compute_default_max_parallelism,
    murmur_hash,
    operator_index_table,
    stable_hash,
)
from raylink.core.row import Row
from raylink.operators import basic, reduce, window
from raylink.shuffle import codec, hotpath, shareable
from raylink.shuffle.elements import TimestampedRecords
from raylink.shuffle.partitioners import (
    KeyGroupStreamPartitioner,
    bucket_by_channel_pure,
    bucket_pairs_by_channel_pure,
    key_error,
)
from raylink.shuffle.record_writer import RecordWriter
from raylink.shuffle.result_partition import ResultPartition
from raylink.shuffle.serializer import RecordDeserializer, RecordSerializer
from raylink.state import rocksdb_state
from raylink.state.state_table import REMOVED

try:
    from raylink.shuffle import _hotpath as native
except ImportError:
    native = None

ROOT = Path(__file__).resolve().parent.parent
#: where the compiled module must be there (scripts/test.sh, CI): its tests fail without it
REQUIRED = any(
    os.environ.get(name, "").lower() not in ("", "0", "false") for name in ("RAYLINK_REQUIRE_COMPILED", "CI")
)
needs_native = pytest.mark.skipif(
    native is None and not REQUIRED, reason="the compiled per-record path is not built (bash scripts/setup.sh)"
)
SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])

#: any Python str: lone surrogates (Cs) among other letters, as ``json.loads('"\\ud800"')`` makes
any_text = st.text(alphabet=st.characters(categories=["Cs", "Lu", "Ll", "Lo", "Nd"]), max_size=6)
scalars = st.one_of(
    st.text(max_size=12),
    any_text,
    st.integers(min_value=-(2**70), max_value=2**70),
    st.booleans(),
    st.floats(allow_nan=False),
    st.binary(max_size=6),
)
huge_ints = st.integers(min_value=-(2**200), max_value=2**200)
scalar_keys = st.one_of(
    st.text(max_size=12),
    st.text(alphabet=st.characters(codec="utf-8"), max_size=5),  # non-ASCII, 2-4 byte UTF-8
    any_text,
    st.integers(min_value=-(2**70), max_value=2**70),
    huge_ints,
    st.booleans(),
    st.floats(allow_nan=True),
    st.binary(max_size=6),
)
#: nested containers as keys: tuples (None items too), lists and dicts (unhashable: hashed
#: stably, never cached), Rows
nested_keys = st.recursive(
    scalar_keys,
    lambda inner: st.one_of(
        st.tuples(inner, st.one_of(inner, st.none())),
        st.lists(inner, max_size=3),
        st.dictionaries(st.text(max_size=3), inner, max_size=2),
        st.builds(lambda a, b: Row(a=a, b=b), inner, inner),
    ),
    max_leaves=4,
)
keys = st.one_of(
    st.text(max_size=12),
    st.text(alphabet=st.characters(codec="utf-8"), max_size=5),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.booleans(),
    st.floats(allow_nan=True),
    st.tuples(st.text(max_size=4), st.integers()),
    scalar_keys,
    nested_keys,
)


def _brute_channels(key_list, max_parallelism, parallelism):
    return [assign_key_to_parallel_operator(k, max_parallelism, parallelism) for k in key_list]


# -- murmur and key groups -----------------------------------------------------------
@needs_native
@SETTINGS
@given(st.integers(min_value=-(2**40), max_value=2**40))
def test_murmur_hash_is_flinks(code):
    assert native.murmur_hash(code) == murmur_hash(code)
    for max_parallelism in (1, 7, 128, 32768):
        assert native.key_group_of_hash(code, max_parallelism) == murmur_hash(code) % max_parallelism


@needs_native
@SETTINGS
@given(st.one_of(keys, st.none()), st.sampled_from([1, 7, 128, 32768]))
def test_compiled_key_group_of_a_key_equals_the_pure_twin(key, max_parallelism):
    # the heap state backend's key group of every key it holds: a process on the pure path must
    # find the same key group for a key (restoring its snapshot, or a rescaled one)
    compiled = _outcome(native.assign_to_key_group, stable_hash, key, max_parallelism)
    assert compiled == _outcome(assign_to_key_group, key, max_parallelism)
    assert compiled[0] == "ok" or key is None


@needs_native
def test_deeply_nested_tuple_keys_hash_alike_and_a_pathological_one_raises_instead_of_crashing():
    key = 1
    for i in range(40):  # past the depth the compiled hash recurses to
        key = (key, i, None)
    assert native.assign_to_key_group(stable_hash, key, 128) == assign_to_key_group(key, 128)
    for _ in range(100_000):  # deeper than any stack: both raise RecursionError, the process lives
        key = (key,)
    for twin in (lambda: native.assign_to_key_group(stable_hash, key, 128), lambda: assign_to_key_group(key, 128)):
        with pytest.raises(RecursionError):
            twin()


# -- keyed channel selection and bucketing -----------------------------------------------
@SETTINGS
@given(st.lists(keys, max_size=60), st.integers(1, 5), st.sampled_from([None, 7, 128, 1000]))
def test_keyed_channels_and_buckets_match_brute_force(key_list, parallelism, max_parallelism):
    """On whichever path is active: channels as Flink assigns them, buckets in order."""
    p = KeyGroupStreamPartitioner(lambda v: v[0], max(max_parallelism or 0, parallelism) or None)
    p.setup(parallelism)
    values = [(k, i) for i, k in enumerate(key_list)]
    expected = _brute_channels(key_list, p.max_parallelism, parallelism)
    assert p.select_channels(values) == expected
    assert p.select_channels(values) == expected  # the second time from the key -> channel cache
    assert [p.select_channel(v) for v in values] == expected  # a record emitted alone: the same cache
    assert p.bucket(values) == [[v for v, c in zip(values, expected) if c == ch] for ch in range(parallelism)]


@needs_native
@SETTINGS
@given(st.lists(keys, max_size=60), st.integers(1, 5), st.integers(0, 3))
def test_compiled_key_channels_equal_the_pure_twin(key_list, parallelism, cache_size_exp):
    max_parallelism = compute_default_max_parallelism(parallelism)
    table = operator_index_table(max_parallelism, parallelism)
    cache: dict = {}
    cache_size = 4**cache_size_exp  # small caches get cleared in the middle of a batch
    pure = KeyGroupStreamPartitioner(lambda v: v, max_parallelism)
    pure.setup(parallelism)
    got = native.select_key_channels(lambda v: v, key_list, max_parallelism, table, cache, cache_size, stable_hash)
    assert got == pure.select_channels_pure(key_list)
    buckets = native.bucket_by_key(
        lambda v: v, key_list, max_parallelism, table, cache, cache_size, stable_hash, parallelism
    )
    assert buckets == pure.bucket_pure(key_list)
    assert len(cache) <= cache_size
    assert all(cache[k] == c for k, c in zip(key_list, got) if _hashable(k) and k in cache)
    assert native.check_keys(lambda v: v, key_list, stable_hash) is None
    assert pure.check_keys_pure(key_list) is None


def _hashable(key) -> bool:
    try:
        hash(key)
    except TypeError:
        return False
    return True


@needs_native
@SETTINGS
@given(st.lists(st.integers(0, 4), max_size=50))
def test_compiled_bucket_by_channel_equals_the_pure_twin(channels):
    values = [f"v{i}" for i in range(len(channels))]
    assert native.bucket_by_channel(values, channels, 5) == bucket_by_channel_pure(values, channels, 5)


@needs_native
@SETTINGS
@given(st.lists(st.integers(0, 4), max_size=50))
def test_compiled_bucket_pairs_by_channel_equals_the_pure_twin(channels):
    values = [f"v{i}" for i in range(len(channels))]
    timestamps = [i * 10 for i in range(len(channels))]
    got = native.bucket_pairs_by_channel(values, timestamps, channels, 5)
    assert got == bucket_pairs_by_channel_pure(values, timestamps, channels, 5)
    assert got == (  # brute force: each channel's records and their own timestamps, in order
        [[v for v, c in zip(values, channels) if c == ch] for ch in range(5)],
        [[t for t, c in zip(timestamps, channels) if c == ch] for ch in range(5)],
    )
    for fn in (native.bucket_pairs_by_channel, bucket_pairs_by_channel_pure):
        with pytest.raises(ValueError, match="1 values but 0 timestamps"):
            fn(["v"], [], [0], 5)


@needs_native
@SETTINGS
@given(st.one_of(st.lists(st.integers(), min_size=1), st.lists(st.floats(allow_nan=False), min_size=1)))
def test_compiled_min_max_equals_the_builtins(values):
    assert native.min_max(values) == window.min_max_pure(values) == (min(values), max(values))
    for fn in (native.min_max, window.min_max_pure):
        with pytest.raises(ValueError):
            fn([])


_DECLARED = {
    "STRING": st.text(max_size=4),
    "INT": st.integers(-(2**31) - 2, 2**31 + 1),
    "LONG": st.integers(-(2**64), 2**64),
    "BYTE": st.integers(-130, 130),
    "BOOLEAN": st.booleans(),
    "DOUBLE": st.floats(allow_nan=False),
}
_any_field = st.one_of(*_DECLARED.values(), st.none(), st.binary(max_size=2))


@needs_native
@SETTINGS
@given(
    st.lists(st.sampled_from(sorted(_DECLARED)), min_size=1, max_size=3),
    st.booleans(),
    st.lists(st.one_of(st.lists(_any_field, min_size=1, max_size=3).map(tuple), _any_field), max_size=12),
)
def test_compiled_declared_type_check_equals_the_pure_twin_and_packs_the_same(names, as_tuple, values):
    """A batch passes as it is exactly when it is of its declared type and widths; then its
    bytes are those of the msgspec conversion it replaces."""
    from raylink.api import Types

    declared = codec.DeclaredFlatType.of(
        Types.TUPLE([getattr(Types, n)() for n in names]) if as_tuple else getattr(Types, names[0])()
    )
    fields = declared._fast
    compiled = native.conforms_flat(values, fields, as_tuple)
    assert compiled == codec.conforms_flat_pure(values, fields, as_tuple)
    if compiled and not any(v is None or as_tuple and None in v for v in values):
        conformed = declared.conform_batch(values)
        assert conformed == values == codec.msgspec.convert(values, declared._batch_type, strict=True)
        assert (conformed is values) == (codec.conforms_flat is not None)  # as it is on the compiled path


@needs_native
@SETTINGS
@given(st.lists(keys, max_size=60))
def test_compiled_key_check_for_one_channel_hashes_every_key_as_channel_selection(key_list):
    assert native.check_keys(lambda v: v, key_list, stable_hash) is None
    with pytest.raises(ValueError, match="Assigned key must not be null"):
        native.check_keys(lambda v: v, key_list + [None], stable_hash)
    with pytest.raises(KeyError):
        native.check_keys(lambda v: v["k"], [{"k": k} for k in key_list] + [{}], stable_hash)


@pytest.mark.parametrize("parallelism", [1, 2])
def test_bad_keys_get_the_same_worded_errors_on_both_paths(parallelism):
    """One channel too: the keys are extracted and hashed as for two (Flink's writer selects a
    channel for every record), so a key that fails at p=2 fails at p=1."""
    p = KeyGroupStreamPartitioner(lambda v: v["k"], 128)
    p.setup(parallelism)
    with pytest.raises(RuntimeError, match=r"Could not extract key from \(1, 2\)"):
        p.select_channels([{"k": "a"}, (1, 2)])
    with pytest.raises(RuntimeError, match="Could not extract key"):
        p.bucket([{"k": "a"}, (1, 2)])
    with pytest.raises(ValueError, match="Assigned key must not be null"):
        p.select_channels([{"k": "a"}, {"k": None}])
    with pytest.raises(ValueError, match="Assigned key must not be null"):
        p.bucket([{"k": "a"}, {"k": None}])
    with pytest.raises(ValueError, match="Assigned key must not be null"):
        p.select_channel({"k": None})
    records = [{"k": "a"}, {"k": ["a", "list"]}]  # a list key: not hashable, but hashed stably
    assert p.bucket(records) == [
        [r for r in records if assign_key_to_parallel_operator(r["k"], 128, parallelism) == c]
        for c in range(parallelism)
    ]
    unhashable = KeyGroupStreamPartitioner(lambda v: v, 128)
    unhashable.setup(3)
    lists = [[1, 2], [3], [1, 2]]
    assert unhashable.select_channels(lists) == [assign_key_to_parallel_operator(k, 128, 3) for k in lists]


# -- any str, any value: the same channel and key group on both paths ----------------------------
@SETTINGS
@given(st.lists(any_text, max_size=20), st.integers(1, 5))
def test_every_str_hashes_as_its_surrogatepass_bytes_and_plain_str_as_before(texts, parallelism):
    """A lone surrogate is hashed as its three bytes (mmh3 is never handed a str it cannot
    encode: that crashes it); a str UTF-8 can encode keeps its hash (mmh3 of the str), so
    key groups and savepoints stay valid."""
    import mmh3

    for text in texts + ["a", "word", "\u00e4\u6f22"]:
        expected = mmh3.hash(text.encode("utf-8", "surrogatepass")) & 0xFFFFFFFF
        assert stable_hash(text) == expected
        if not any(0xD800 <= ord(ch) <= 0xDFFF for ch in text):
            assert stable_hash(text) == mmh3.hash(text) & 0xFFFFFFFF
    assert assign_key_groups(texts, 128) == [assign_to_key_group(t, 128) for t in texts]
    p = KeyGroupStreamPartitioner(lambda v: v, 128)
    p.setup(parallelism)
    assert p.select_channels(texts) == _brute_channels(texts, 128, parallelism)


class _BadHash:
    """A key whose ``__hash__`` raises (a dict lookup fails; pickling it works)."""

    def __hash__(self):
        raise ValueError("no hash for _BadHash")

    def __eq__(self, other):
        return self is other


def _outcome(fn, *args):
    """What ``fn(*args)`` gives: its result, or its error's type and text and its cause's."""
    try:
        return ("ok", fn(*args))
    except Exception as e:
        cause = e.__cause__
        return ("error", type(e), str(e), type(cause), str(cause) if cause is not None else None)


#: a record: (what its key selector does, key): "key" returns the key; "raise" raises; "none"
#: returns None; "lock" returns an unpicklable key; "badhash" a key whose __hash__ raises
records_with_bad_keys = st.lists(
    st.one_of(
        st.tuples(st.just("key"), keys),
        st.tuples(st.sampled_from(["raise", "none", "lock", "badhash"]), st.integers(0, 3)),
    ),
    max_size=12,
)


def _counting_key_of(calls):
    import threading

    lock, bad = threading.Lock(), _BadHash()

    def key_of(record):
        calls.append(record)
        what, key = record
        if what == "raise":
            raise KeyError(f"no key in record {key}")
        return {"key": key, "none": None, "lock": lock, "badhash": bad}[what]

    return key_of


@needs_native
@SETTINGS
@given(records_with_bad_keys, st.integers(1, 4))
def test_key_loops_give_the_twins_result_or_error_and_run_the_selector_once_per_record(records, parallelism):
    """Channels, buckets and the one-channel key check: the same result on both paths, or the
    same error for the first bad record in order (a selector's failure worded, its own error
    the cause); the key selector called once per record up to the failing one, never again."""
    max_parallelism = compute_default_max_parallelism(parallelism)
    table = operator_index_table(max_parallelism, parallelism)
    runs = {}
    for name, loop in (
        (
            "select",
            lambda key_of: native.select_key_channels(
                key_of, records, max_parallelism, table, {}, 4, stable_hash, key_error
            ),
        ),
        (
            "bucket",  # one channel: the keys checked, one bucket (the partitioner's compiled bucket)
            lambda key_of: (
                native.bucket_by_key(
                    key_of, records, max_parallelism, table, {}, 4, stable_hash, parallelism, key_error
                )
                if parallelism > 1
                else native.check_keys(key_of, records, stable_hash, key_error) or [records]
            ),
        ),
        ("check", lambda key_of: native.check_keys(key_of, records, stable_hash, key_error)),
    ):
        calls: list = []
        runs[name] = (_outcome(loop, _counting_key_of(calls)), calls)
    for name, method in (("select", "select_channels_pure"), ("bucket", "bucket_pure"), ("check", "check_keys_pure")):
        calls = []
        pure = KeyGroupStreamPartitioner(_counting_key_of(calls), max_parallelism)
        pure.setup(parallelism if name != "check" else 2)  # check: the one-channel twin of any count
        pure_outcome = _outcome(getattr(pure, method), records)
        compiled_outcome, compiled_calls = runs[name]
        assert repr(compiled_outcome) == repr(pure_outcome)  # repr: NaN keys compare by text
        # never twice: each path called the selector on a prefix of the records, once each (the
        # compiled loop stops at the first failing record, the pure one extracts every key first)
        for seen in (compiled_calls, calls):
            assert seen == records[: len(seen)]
        if pure_outcome[0] == "ok":
            assert calls == compiled_calls == records
    if all(what == "key" for what, _ in records):
        assert runs["select"][0] == ("ok", _brute_channels([k for _, k in records], max_parallelism, parallelism))
    # the one-channel check hashes stably without a cache (no __hash__): it fails on the first
    # record whose selector raises or whose key is None or unpicklable, the selector run up to it
    bad_at = next((i for i, (what, _) in enumerate(records) if what in ("raise", "none", "lock")), None)
    if bad_at is None:
        assert runs["check"][0] == ("ok", None)
    else:
        assert runs["check"][0][0] == "error" and len(runs["check"][1]) == bad_at + 1


def test_key_selector_errors_are_worded_on_both_paths_with_the_users_error_as_cause():
    records = [("key", "a"), ("raise", 7), ("key", "b")]
    for path in ("compiled", "pure"):
        calls: list = []
        p = KeyGroupStreamPartitioner(_counting_key_of(calls), 128)
        p.setup(2)
        fn = p.bucket if path == "compiled" else p.bucket_pure
        with pytest.raises(RuntimeError, match=r"Could not extract key from \('raise', 7\)") as info:
            fn(records)
        assert isinstance(info.value.__cause__, KeyError) and "no key in record 7" in str(info.value.__cause__)
        assert calls == records[:2]


def _bucket_outcome(fn, values, channels, num_channels):
    return repr(_outcome(fn, values, channels, num_channels))


channel_values = st.one_of(st.integers(-3, 7), st.integers(-(2**70), 2**70), st.sampled_from([-1, 2**63, -(2**63)]))


@needs_native
@SETTINGS
@given(st.lists(channel_values, max_size=30), st.integers(0, 5), st.integers(-1, 1), st.integers(-1, 1))
def test_bucketing_by_channel_agrees_on_any_channel_and_length(channels, num_channels, extra_values, extra_ts):
    """Negative, too large or 64-bit-overflowing channels and lists of different lengths: the
    same ValueError on both paths (the compiled loop once read out of bounds), else the same
    buckets, which are the brute force's."""
    n = max(0, len(channels) + extra_values)
    values = [f"v{i}" for i in range(n)]
    timestamps = [i * 10 for i in range(max(0, n + extra_ts))]
    compiled = _bucket_outcome(native.bucket_by_channel, values, channels, num_channels)
    assert compiled == _bucket_outcome(bucket_by_channel_pure, values, channels, num_channels)
    pairs = repr(_outcome(native.bucket_pairs_by_channel, values, timestamps, channels, num_channels))
    assert pairs == repr(_outcome(bucket_pairs_by_channel_pure, values, timestamps, channels, num_channels))
    valid = len(values) == len(channels) and all(0 <= c < num_channels for c in channels)
    if valid:
        assert native.bucket_by_channel(values, channels, num_channels) == [
            [v for v, c in zip(values, channels) if c == ch] for ch in range(num_channels)
        ]
    else:
        assert "ValueError" in compiled
    if valid and len(timestamps) == len(values):
        assert "ok" in pairs
    else:
        assert "ValueError" in pairs


@needs_native
def test_bucketing_refuses_a_negative_channel_instead_of_crashing():
    """``bucket_by_channel(['a'], [-1], 2)`` crashed the process (compiled) or filled the last
    bucket (pure): now both refuse it alike, with empty batches still fine."""
    for fn in (native.bucket_by_channel, bucket_by_channel_pure):
        with pytest.raises(ValueError, match=r"^record 0 has channel -1, not one in \[0, 2\)$"):
            fn(["a"], [-1], 2)
        with pytest.raises(ValueError, match=r"^record 1 has channel 2, not one in \[0, 2\)$"):
            fn(["a", "b"], [0, 2], 2)
        with pytest.raises(ValueError, match="^1 values but 2 channels$"):
            fn(["a"], [0, 1], 2)
        assert fn([], [], 3) == [[], [], []]
    for fn in (native.bucket_pairs_by_channel, bucket_pairs_by_channel_pure):
        with pytest.raises(ValueError, match=r"^record 0 has channel -1, not one in \[0, 2\)$"):
            fn(["a"], [5], [-1], 2)
        assert fn([], [], [], 2) == ([[], []], [[], []])


@needs_native
def test_compiled_key_loops_check_the_table_and_the_cached_channels():
    """A key-group table shorter than the max parallelism, a cached channel beyond the channel
    count: errors, never a read out of bounds; a poisoned cache fails the pure twin alike."""
    table = operator_index_table(128, 2)
    for loop, extra in ((native.select_key_channels, ()), (native.bucket_by_key, (2,))):
        with pytest.raises(ValueError, match="a key-group table of 2 entries for max parallelism 128"):
            loop(lambda v: v, ["a"], 128, table[:2], {}, 4, stable_hash, *extra)
        with pytest.raises(ValueError, match="max parallelism 0"):
            loop(lambda v: v, ["a"], 0, table, {}, 4, stable_hash, *extra)
        assert loop(lambda v: v, [], 128, table, {}, 4, stable_hash, *extra) == ([] if not extra else [[], []])
    poisoned = {("k", 1): 7}
    compiled = _outcome(native.bucket_by_key, lambda v: v, [("k", 1)], 128, table, dict(poisoned), 4, stable_hash, 2)
    pure = KeyGroupStreamPartitioner(lambda v: v, 128)
    pure.setup(2)
    pure._channel_of.update(poisoned)
    assert repr(compiled) == repr(_outcome(pure.bucket_pure, [("k", 1)]))
    assert compiled[1] is ValueError and compiled[2] == "record 0 has channel 7, not one in [0, 2)"


@needs_native
def test_compiled_checks_agree_with_their_twins_on_bad_arguments():
    """Empty or malformed declared fields, a zero max parallelism, a record too short for the
    sum of pairs: the same error on both paths."""
    for fields in ((), ((int, 0),), ("INT",)):
        assert repr(_outcome(native.conforms_flat, [1], fields, False)) == repr(
            _outcome(codec.conforms_flat_pure, [1], fields, False)
        )
    with pytest.raises(ValueError, match="at least one field"):
        native.conforms_flat([1], (), True)
    for fn in (native.key_group_of_hash, lambda h, m: murmur_hash(h) % m):
        with pytest.raises(ZeroDivisionError):
            fn(5, 0)
    for fn in (native.sum_pairs_batch, reduce.sum_pairs_batch_pure):
        with pytest.raises(IndexError):
            fn([("a", 1), ("a",)], lambda v: v[0], {}, lambda k, v: v)
    for fn in (native.min_max, window.min_max_pure):
        assert repr(fn([float("nan"), 1.0, 3.0])) == repr(
            (min([float("nan"), 1.0, 3.0]), max([float("nan"), 1.0, 3.0]))
        )


@needs_native
def test_every_compiled_function_takes_an_empty_batch_as_its_twin():
    table = operator_index_table(128, 3)
    p = KeyGroupStreamPartitioner(lambda v: v, 128)
    p.setup(3)
    assert (
        native.select_key_channels(lambda v: v, [], 128, table, {}, 4, stable_hash) == p.select_channels_pure([]) == []
    )
    assert native.bucket_by_key(lambda v: v, [], 128, table, {}, 4, stable_hash, 3) == p.bucket_pure([]) == [[], [], []]
    assert native.check_keys(lambda v: v, [], stable_hash) is None and p.check_keys_pure([]) is None
    assert native.is_flat_batch([]) is codec.is_flat_batch_pure([]) is True
    assert native.conforms_flat([], ((int, None, None),), False) is codec.conforms_flat_pure(
        [], ((int, None, None),), False
    )
    assert native.reduce_batch([], None, {}, None, None) == reduce.reduce_batch_pure([], None, {}, None, None) == []
    assert native.sum_pairs_batch([], None, {}, None) == reduce.sum_pairs_batch_pure([], None, {}, None) == ([], 0)
    for compiled, pure in (
        (native.keyed_map_batch, basic.keyed_map_batch_pure),
        (native.keyed_flat_map_batch, basic.keyed_flat_map_batch_pure),
        (native.keyed_filter_batch, basic.keyed_filter_batch_pure),
    ):
        assert compiled([], None, None, None) == pure([], None, None, None) == []
    assert native.state_db_keys([], 128, [b""] * 128, {}, 10, rocksdb_state._pack) == rocksdb_state.state_db_keys_pure(
        [], 128, [b""] * 128, {}, 10, rocksdb_state._pack
    )
    empty = ({}, {}, rocksdb_state.dump_key, rocksdb_state._pack, rocksdb_state.dump_value)
    assert native.state_entries(*empty) == rocksdb_state.state_entries_pure(*empty) == ([], [])


# -- flatness / shareability -------------------------------------------------------------
class _Str(str):
    pass


class _Int(int):
    pass


#: tuples of scalars and of such tuples, nested up to 6 deep (flat up to ``codec.FLAT_NESTING``)
nested_tuples = st.recursive(
    scalars,
    lambda inner: st.one_of(st.tuples(inner), st.tuples(inner, inner), st.tuples(inner, inner, inner)),
    max_leaves=8,
).filter(lambda v: type(v) is tuple)
#: the same with what is not flat somewhere inside (a list, a subclass of str, a bytearray)
nested_with_others = st.recursive(
    st.one_of(scalars, st.sampled_from([[1], _Str("s"), bytearray(b"x")])),
    lambda inner: st.one_of(st.tuples(inner), st.tuples(inner, inner)),
    max_leaves=6,
).filter(lambda v: type(v) is tuple)

batches = st.one_of(
    st.lists(scalars, max_size=20),
    st.lists(nested_tuples, max_size=10),
    st.lists(st.one_of(nested_tuples, nested_with_others), max_size=8),
    st.lists(st.tuples(scalars, scalars), max_size=20),
    st.lists(st.one_of(st.tuples(scalars), st.tuples(scalars, scalars, scalars)), max_size=20),
    st.lists(
        st.one_of(
            scalars,
            st.tuples(scalars, st.sampled_from([_Str("s"), _Int(3), Decimal("1.5"), [1], bytearray(b"x"), None])),
            st.sampled_from([[1], {"a": 1}, _Str("x"), bytearray(b"y")]),
        ),
        max_size=12,
    ),
)


@needs_native
@SETTINGS
@given(batches)
def test_compiled_flatness_and_shareability_equal_the_pure_twins(values):
    assert native.is_flat_batch(values) == codec.is_flat_batch_pure(values)
    assert native.is_flat_batch(tuple(values)) == codec.is_flat_batch_pure(values)
    compiled = shareable.compiled_is_shareable_batch(native.is_flat_batch)
    assert compiled(values) == shareable.is_shareable_batch_pure(values)


def _shape(value):
    """``value`` with the type of every part: what a round trip must keep."""
    if type(value) in (tuple, list):
        return type(value), [_shape(v) for v in value]
    return type(value), value


@needs_native
def test_flat_nesting_is_the_same_on_both_and_ends_where_it_says():
    assert native.FLAT_NESTING == codec.FLAT_NESTING == 4
    deepest, too_deep = ((((1,),),),), (((((1,),),),),)
    for batch, flat in (
        ([deepest, (1, "a")], True),
        ([too_deep], False),
        ([(1, ([2],))], False),
        ([((1,), None)], True),
    ):
        assert native.is_flat_batch(batch) is codec.is_flat_batch_pure(batch) is flat
        assert all(map(codec.is_flat_value, batch)) is flat


@SETTINGS
@given(st.lists(st.one_of(nested_tuples, nested_with_others), max_size=12), st.booleans())
def test_nested_tuples_cross_the_wire_with_every_part_of_its_type(values, timestamped):
    # brute force: the very values, tuples as tuples and lists as lists at every depth
    out: list = []
    s = RecordSerializer(256, lambda b, e: out.append(b))
    if timestamped:
        s.add_timestamped_records(values, list(range(len(values))))
    else:
        s.add_records(values)
    for v in values:
        s.add_record(v)
    s.flush()
    d, got = RecordDeserializer(), []
    for b in out:
        for group in d.feed(b):
            got.extend(getattr(group, "values", group))
    assert [_shape(v) for v in got] == [_shape(v) for v in values * 2]


# -- operator loops ------------------------------------------------------------------------
pairs = st.lists(st.tuples(st.sampled_from("abcdef"), st.integers(-100, 100)), max_size=40)


def _no_key_selector(value):
    raise AssertionError("the key selector ran although the keys were given")


def _run_reduce(fn, values, state, fail_at, lower=(), given_keys=False, emit=True):
    seen_new = []

    def reducer(a, b):
        if b[1] == fail_at:
            raise ValueError(f"bad {b}")
        return (a[0], a[1] + b[1])

    def on_miss(k, v):
        seen_new.append((k, v))
        return (k, -v[1]) if k == "f" else v  # what a miss stores is the callback's to say

    try:
        if given_keys:  # the RocksDB backend's way: the keys computed once, before its fetch
            keys = [v[0] for v in values]
            out = fn(values, _no_key_selector, state, reducer, on_miss, lower, REMOVED, keys, emit=emit)
        else:
            out = fn(values, lambda v: v[0], state, reducer, on_miss, lower, REMOVED, emit=emit)
    except ValueError as e:
        out = str(e)
    return out, state, seen_new


@needs_native
@SETTINGS
@given(
    pairs,
    st.dictionaries(st.sampled_from("abc"), st.tuples(st.just("x"), st.integers())),
    st.integers(-3, 3),
    st.lists(
        st.dictionaries(st.sampled_from("abcdef"), st.one_of(st.tuples(st.just("y"), st.integers()), st.just(REMOVED))),
        max_size=3,
    ),
    st.booleans(),
    st.booleans(),
)
def test_compiled_reduce_loop_equals_the_pure_twin(values, state, fail_at, lower, given_keys, emit):
    """Also over older layers (copy-on-write snapshots): a key the live dict misses is read from
    the newest layer holding it, a removed one starts again; with the keys given; and storing
    only (``emit=False``: a window's pane)."""
    lower = tuple(lower)
    compiled = _run_reduce(native.reduce_batch, values, dict(state), fail_at, lower, given_keys, emit)
    assert compiled == _run_reduce(reduce.reduce_batch_pure, values, dict(state), fail_at, lower, given_keys, emit)
    if not emit and not isinstance(compiled[0], str):
        assert compiled[0] is None
    for fn in (native.reduce_batch, reduce.reduce_batch_pure):
        with pytest.raises(ValueError, match="1 values but 0 keys"):
            fn([("a", 1)], _no_key_selector, {}, None, None, (), REMOVED, [])


@SETTINGS
@given(pairs)
def test_reduce_loop_matches_brute_force(values):
    """On whichever path is active: the running sum per key, record by record."""
    state: dict = {}
    out = reduce.reduce_batch(values, lambda v: v[0], state, lambda a, b: (a[0], a[1] + b[1]), lambda k, v: v)
    totals: dict = {}
    expected = []
    for k, n in values:
        totals[k] = totals.get(k, 0) + n
        expected.append((k, totals[k]))
    assert out == expected
    assert state == {k: (k, t) for k, t in totals.items()}
    stored: dict = {}
    assert (
        reduce.reduce_batch(
            values, lambda v: v[0], stored, lambda a, b: (a[0], a[1] + b[1]), lambda k, v: v, emit=False
        )
        is None
    )
    assert stored == state


@needs_native
@SETTINGS
@given(
    st.lists(
        st.one_of(st.tuples(st.sampled_from("abcd"), st.integers()), st.tuples(st.just("z"), st.just(1), st.just(2))),
        max_size=40,
    ),
    st.booleans(),
)
def test_compiled_sum_of_pairs_loop_equals_the_pure_twin(values, given_keys):
    runs = []
    lower = ({"a": ("a", 100)}, {"b": REMOVED, "c": ("c", 5)})
    for fn in (native.sum_pairs_batch, reduce.sum_pairs_batch_pure):
        state: dict = {}
        new = []

        def on_miss(k, v, new=new):
            new.append(k)
            return v

        if given_keys:
            out, stop = fn(values, _no_key_selector, state, on_miss, lower, REMOVED, [v[0] for v in values])
        else:
            out, stop = fn(values, lambda v: v[0], state, on_miss, lower, REMOVED)
        runs.append((out, stop, state, new))
    assert runs[0] == runs[1]


@needs_native
@SETTINGS
@given(st.lists(st.integers(-20, 20), max_size=40))
def test_compiled_keyed_loops_equal_the_pure_twins(values):
    for compiled, pure, fn in (
        (native.keyed_map_batch, basic.keyed_map_batch_pure, lambda v: v * 2),
        (native.keyed_flat_map_batch, basic.keyed_flat_map_batch_pure, lambda v: iter(range(v % 3))),
        (native.keyed_filter_batch, basic.keyed_filter_batch_pure, lambda v: v % 2),
    ):
        logs = []
        for loop in (compiled, pure):
            keys_set: list = []
            out = loop(values, lambda v: v % 5, keys_set.append, fn)
            logs.append((out, keys_set))
        assert logs[0] == logs[1]


# -- the RocksDB backend's batch steps -----------------------------------------------------
state_keys = st.one_of(
    st.integers(-(2**70), 2**70),  # beyond 64 bits: msgpack cannot, the generic path takes the batch
    st.text(max_size=6),
    any_text,  # a lone surrogate: msgpack refuses it, the generic path (pickle) takes the batch
    st.sampled_from([True, None, 1.5, ("t", 1)]),  # other types: the generic path too
)
state_values = st.recursive(
    st.one_of(scalars, st.none()),
    lambda inner: st.one_of(
        st.tuples(inner, inner), st.lists(inner, max_size=2), st.frozensets(st.integers(), max_size=2)
    ),
    max_leaves=4,
)


@needs_native
@SETTINGS
@given(st.lists(state_keys, max_size=30), st.integers(0, 127), st.integers(0, 40))
def test_compiled_state_key_bytes_equal_the_pure_twin(key_list, start, known_limit):
    """Key groups, prefixes and key bytes of a batch, or None for the generic path (a key of
    another type, too large, or of another subtask's key group)."""
    prefix_of_group = [None] * start + [bytes([g, 0, 9]) for g in range(start, 128)]
    runs = []
    for fn in (native.state_db_keys, rocksdb_state.state_db_keys_pure):
        known = {"old": 5}
        runs.append((fn(key_list, 128, prefix_of_group, known, known_limit, rocksdb_state._pack), known))
    assert runs[0] == runs[1]
    out, known = runs[0]
    if out is not None:  # the generic path would give the same bytes
        for key, db_key in zip(key_list, out):
            assert db_key == prefix_of_group[known[key]] + rocksdb_state.dump_key(key)
            assert known[key] == assign_to_key_group(key, 128)


@needs_native
@SETTINGS
@given(st.dictionaries(st.integers(0, 10**6), state_values, max_size=30), st.booleans())
def test_compiled_state_entries_equal_the_pure_twin_and_read_back_exactly(cache, use_pack):
    """The bytes written for a cache: identical on both paths, in key order, and every value
    reads back equal and of the same types (tuples stay tuples, lists lists, bools bools)."""
    db_keys = {k: rocksdb_state.dump_key(k) for k in list(cache)[::2]}
    pack = rocksdb_state._pack if use_pack else None
    runs = [
        fn(cache, db_keys, rocksdb_state.dump_key, pack, rocksdb_state.dump_value)
        for fn in (native.state_entries, rocksdb_state.state_entries_pure)
    ]
    assert runs[0] == runs[1]
    ordered, blobs = runs[0]
    assert ordered == sorted(rocksdb_state.dump_key(k) for k in cache)
    for db_key, blob in zip(ordered, blobs):
        value = cache[rocksdb_state.load_key(db_key)]
        loaded = rocksdb_state.load_value(blob)
        assert loaded == value and _types(loaded) == _types(value)


def _types(value):
    """The types of a value, through tuples and lists."""
    if type(value) in (tuple, list):
        return type(value), [_types(v) for v in value]
    return type(value)


# -- bytes on the wire ----------------------------------------------------------------------
_EMIT = r"""
import hashlib, json, random, sys
from raylink.shuffle import hotpath
from raylink.shuffle.partitioners import create_partitioner
from raylink.shuffle.record_writer import RecordWriter
from raylink.shuffle.serializer import RecordDeserializer, RecordSerializer
from raylink.shuffle.result_partition import ResultPartition

def emitted(seed):
    rnd = random.Random(seed)
    part = ResultPartition(rnd.choice([1, 3]), "PIPELINED")
    w = RecordWriter(part, create_partitioner("HASH", key_selector=lambda v: v[0], max_parallelism=128),
                     buffer_timeout_ms=-1, buffer_size=256)
    for _ in range(20):
        n = rnd.randrange(0, 40)
        batch = [(rnd.choice(["a", "bb", "ccc", "\u00e4\u6f22", "\ud800", "x\udfff", str(rnd.random())]),
                  rnd.choice([rnd.randrange(-5, 10**12), 2**70, -(2**100)]),
                  rnd.choice([None, 1.5, b"x", True, float("nan"), ("t", ["l", "\ud800"]), {"k": 1}]))
                 for _ in range(n)]
        pick = rnd.random()
        if pick < 0.3:
            w.emit_timestamped_batch(batch, rnd.randrange(10**9))
        elif pick < 0.6:
            w.emit_timestamped_batch(batch, [rnd.randrange(10**9) for _ in batch])
        else:
            w.emit_batch(batch)
    w.finish()
    digest = hashlib.sha256()
    for sub in part.subpartitions:
        while (b := sub.poll_buffer()) is not None:
            digest.update(bytes([sub.index, b.is_event]) + bytes(b.buffer))
    return digest.hexdigest()

print(json.dumps({"native": hotpath.NATIVE is not None, "digests": [emitted(s) for s in range(int(sys.argv[1]))]}))
"""


def _emit_in_subprocess(pure: bool, seeds: int) -> dict:
    env = dict(os.environ, RAYLINK_PURE_PYTHON="1" if pure else "")
    out = subprocess.run(
        [sys.executable, "-c", _EMIT, str(seeds)], env=env, capture_output=True, text=True, timeout=120, check=True
    )
    return json.loads(out.stdout)


@needs_native
@pytest.mark.timeout(240)
def test_record_writer_bytes_are_identical_on_both_paths():
    compiled = _emit_in_subprocess(pure=False, seeds=30)
    pure = _emit_in_subprocess(pure=True, seeds=30)
    assert compiled["native"] and not pure["native"]
    assert compiled["digests"] == pure["digests"]


def _received(part: ResultPartition) -> list:
    """The elements each subpartition of ``part`` holds, decoded: one list per channel."""
    from raylink.shuffle.serializer import RecordDeserializer

    received = []
    for sub in part.subpartitions:
        d = RecordDeserializer()
        items: list = []
        while (b := sub.poll_buffer()) is not None:
            items.extend(d.feed(b.buffer))
        received.append(items)
    return received


def test_keyed_writer_sends_every_record_to_its_key_groups_channel():
    """On whichever path is active: what each subpartition receives, against brute force."""
    part = ResultPartition(3, "PIPELINED")
    w = RecordWriter(part, KeyGroupStreamPartitioner(lambda v: v[0], 128), buffer_timeout_ms=-1, buffer_size=128)
    batches = [[(f"k{(i * 7 + j) % 23}", j) for j in range(i % 11)] for i in range(30)]
    for batch in batches:
        w.emit_batch(batch)
    w.flush_all()
    received = [[v for batch in items for v in batch] for items in _received(part)]
    everything = [v for batch in batches for v in batch]
    assert received == [
        [v for v in everything if assign_key_to_parallel_operator(v[0], 128, 3) == ch] for ch in range(3)
    ]
    # nothing lost or duplicated: every record arrived exactly once over all channels
    assert sorted(v for items in received for v in items) == sorted(everything)


@pytest.mark.parametrize("channels", [1, 3])
def test_keyed_writer_keeps_each_records_timestamp_with_it(channels):
    """On whichever path is active: runs of records with a timestamp each reach their key
    group's channel with their own timestamps, in order (brute force)."""
    part = ResultPartition(channels, "PIPELINED")
    w = RecordWriter(part, KeyGroupStreamPartitioner(lambda v: v[0], 128), buffer_timeout_ms=-1, buffer_size=128)
    batches = [[(f"k{(i * 7 + j) % 23}", j) for j in range(i % 11)] for i in range(30)]
    for i, batch in enumerate(batches):
        w.emit_timestamped_batch(batch, [i * 100 + j for j in range(len(batch))])
    w.flush_all()
    received = _received(part)
    assert all(isinstance(run, TimestampedRecords) for items in received for run in items)
    received = [[pair for run in items for pair in zip(run.values, run.timestamps)] for items in received]
    everything = [(v, i * 100 + j) for i, batch in enumerate(batches) for j, v in enumerate(batch)]
    assert received == [
        [(v, t) for v, t in everything if assign_key_to_parallel_operator(v[0], 128, channels) == ch]
        for ch in range(channels)
    ]


@pytest.mark.parametrize("channels", [1, 3])
def test_keyed_writer_runs_the_key_selector_on_timestamped_runs(channels):
    """A key selector that fails fails a timestamped run on one channel as on three."""

    def key_of(v):
        if v == 3:
            raise ValueError("no key for 3")
        return v

    w = RecordWriter(
        ResultPartition(channels, "PIPELINED"), KeyGroupStreamPartitioner(key_of, 128), buffer_timeout_ms=-1
    )
    with pytest.raises(RuntimeError, match="Could not extract key from 3") as info:
        w.emit_timestamped_batch([1, 2, 3], [10, 20, 30])
    assert "no key for 3" in str(info.value.__cause__)


# -- the selector ----------------------------------------------------------------------------
def _selector_state(env_value: str) -> dict:
    code = (
        "import json; from raylink.shuffle import hotpath; from raylink.shuffle.partitioners import "
        "KeyGroupStreamPartitioner as K; from raylink.operators import reduce; "
        "print(json.dumps({'native': hotpath.NATIVE is not None, 'active': hotpath.log_active(), "
        "'pure_select': K.select_channels is K.select_channels_pure, "
        "'pure_reduce': reduce.reduce_batch is reduce.reduce_batch_pure}))"
    )
    env = dict(os.environ, RAYLINK_PURE_PYTHON=env_value)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60, check=True)
    return json.loads(out.stdout)


@pytest.mark.timeout(120)
def test_pure_python_env_forces_the_twins():
    state = _selector_state("1")
    assert state == {
        "native": False,
        "active": "pure Python (RAYLINK_PURE_PYTHON=1)",
        "pure_select": True,
        "pure_reduce": True,
    }
    default = _selector_state("")
    assert default["native"] == (native is not None)
    assert default["pure_select"] == default["pure_reduce"] == (native is None)
    assert default["active"].startswith("compiled" if native is not None else "pure Python")


def test_this_process_uses_what_the_environment_asks_for():
    forced = os.environ.get(hotpath.PURE_PYTHON_ENV, "") not in ("", "0")
    assert (hotpath.NATIVE is None) == (forced or native is None)


def test_the_compiled_module_is_built_where_it_is_required():
    """scripts/test.sh (and CI) require the compiled module: its twin tests must not skip."""
    assert native is not None or not REQUIRED, "the compiled per-record path did not build (bash scripts/setup.sh)"


@needs_native
def test_a_deeply_nested_state_value_fails_as_its_twin_instead_of_crashing():
    """The compiled plain-value check recursed the C stack as deep as the value (a million
    nested tuples crashed the process): it stops at msgpack's nesting limit, and such a value
    fails alike on both paths (pickle's RecursionError)."""
    value = 1
    for _ in range(1_000_000):
        value = (value,)
    entries = ({1: value}, {}, rocksdb_state.dump_key, rocksdb_state._pack, rocksdb_state.dump_value)
    for fn in (native.state_entries, rocksdb_state.state_entries_pure):
        with pytest.raises(RecursionError):
            fn(*entries)


@needs_native
@pytest.mark.parametrize("depth", [510, 511, 512, 700])
def test_state_values_around_msgpacks_nesting_limit_are_stored_alike_on_both_paths(depth):
    """Tuples nested up to msgpack's limit are packed, deeper ones pickled: the same bytes on both
    paths (the pure twin recursed without a limit and raised RecursionError past ~1000 levels),
    and each reads back as it was."""
    value = 1
    for _ in range(depth):
        value = (value,)
    entries = ({1: value}, {}, rocksdb_state.dump_key, rocksdb_state._pack, rocksdb_state.dump_value)
    compiled = native.state_entries(*entries)
    assert compiled == rocksdb_state.state_entries_pure(*entries)
    assert rocksdb_state.load_value(compiled[1][0]) == value
