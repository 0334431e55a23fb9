"""The compiled per-record path against its pure-Python twins (``raylink.shuffle.hotpath``).

The twin comparisons need the compiled module (``bash scripts/setup.sh`` builds it) and skip
without it; the brute-force references and the selector tests run either way. CI runs this
file twice: as is, and with ``RAYLINK_PURE_PYTHON=1`` (``scripts/test.sh``).
"""

from __future__ import annotations

import hashlib
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
    assign_key_to_parallel_operator,
    assign_to_key_group,
    compute_default_max_parallelism,
    murmur_hash,
    operator_index_table,
    stable_hash,
)
from raylink.operators import basic, reduce, window
from raylink.shuffle import codec, hotpath, shareable
from raylink.shuffle.elements import TimestampedRecords
from raylink.shuffle.partitioners import (
    KeyGroupStreamPartitioner,
    bucket_by_channel_pure,
    bucket_pairs_by_channel_pure,
)
from raylink.shuffle.record_writer import RecordWriter
from raylink.shuffle.result_partition import ResultPartition
from raylink.state import rocksdb_state
from raylink.state.state_table import REMOVED

try:
    from raylink.shuffle import _hotpath as native
except ImportError:
    native = None

ROOT = Path(__file__).resolve().parent.parent
needs_native = pytest.mark.skipif(native is None, reason="the compiled per-record path is not built")
SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])

scalars = st.one_of(
    st.text(max_size=12),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.booleans(),
    st.floats(allow_nan=False),
    st.binary(max_size=6),
)
keys = st.one_of(
    st.text(max_size=12),
    st.text(alphabet=st.characters(codec="utf-8"), max_size=5),  # non-ASCII, 2-4 byte UTF-8
    st.integers(min_value=-(2**70), max_value=2**70),
    st.booleans(),
    st.floats(allow_nan=True),
    st.tuples(st.text(max_size=4), st.integers()),
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
    assert all(cache[k] == c for k, c in zip(key_list, got) if k in cache)


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


# -- flatness / shareability -------------------------------------------------------------
class _Str(str):
    pass


class _Int(int):
    pass


batches = st.one_of(
    st.lists(scalars, max_size=20),
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
from raylink.shuffle.result_partition import ResultPartition

def emitted(seed):
    rnd = random.Random(seed)
    part = ResultPartition(rnd.choice([1, 3]), "PIPELINED")
    w = RecordWriter(part, create_partitioner("HASH", key_selector=lambda v: v[0], max_parallelism=128),
                     buffer_timeout_ms=-1, buffer_size=256)
    for _ in range(20):
        n = rnd.randrange(0, 40)
        batch = [(rnd.choice(["a", "bb", "ccc", "\u00e4\u6f22", str(rnd.random())]), rnd.randrange(-5, 10**12),
                  rnd.choice([None, 1.5, b"x", True])) for _ in range(n)]
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
    assert hashlib.sha256(repr(received).encode()).hexdigest()  # decodable, in order


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
