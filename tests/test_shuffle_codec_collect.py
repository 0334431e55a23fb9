"""The encoding of ``execute_and_collect``'s results (``shuffle.collect_codec``): every batch
comes back as the very records, with their types, whichever encoding it took; flat batches take
``marshal`` and anything ``marshal`` would change takes cloudpickle; the compiled and the
pure-Python flatness check give the same bytes. CI runs this file on both per-record paths
(``scripts/test.sh``)."""

from __future__ import annotations

import enum
import os
import threading
from dataclasses import dataclass
from decimal import Decimal

import cloudpickle
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from raylink.core.row import Row
from raylink.shuffle import codec, collect_codec
from raylink.shuffle.codec import SerializationError
from raylink.shuffle.collect_codec import FLAT, JOINED, decode_records, encode_batch, join_batches

try:
    from raylink.shuffle import _hotpath as native
except ImportError:
    native = None

#: where the compiled module must be there (scripts/test.sh, CI): its tests fail without it
REQUIRED = bool(os.environ.get("RAYLINK_REQUIRE_COMPILED") or os.environ.get("CI"))
SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


class Color(enum.IntEnum):
    RED = 1


class Name(str):
    pass


@dataclass(frozen=True)
class Point:
    x: int
    y: float


scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**90), max_value=2**90),
    st.floats(allow_nan=False),
    st.text(max_size=10),
    st.text(alphabet=st.characters(codec="utf-8"), max_size=4),
    st.binary(max_size=6),
)
others = st.one_of(  # what marshal must not see: subclasses, buffers, user objects, containers
    st.sampled_from([Color.RED, Name("n"), bytearray(b"ab"), Decimal("1.5"), Point(1, 2.0), frozenset({1})]),
    st.lists(scalars, max_size=3),
    st.dictionaries(st.text(max_size=3), scalars, max_size=3),
    st.builds(lambda a, b: Row(a=a, b=b), scalars, scalars),
)
flat_batches = st.one_of(
    st.lists(scalars, max_size=30),
    st.integers(min_value=0, max_value=4).flatmap(
        lambda width: st.lists(st.tuples(*[scalars] * width), min_size=1, max_size=30)
    ),
)
any_batches = st.lists(st.one_of(scalars, others, st.tuples(scalars, others)), max_size=20)


def typed(value):
    """``value`` with the type of every part: equal values of another type (1 and True,
    bytes and bytearray, a str subclass) compare different."""
    if isinstance(value, (tuple, list)):
        return (type(value), tuple(typed(v) for v in value))
    if isinstance(value, dict):
        return (dict, tuple((typed(k), typed(v)) for k, v in value.items()))
    if isinstance(value, float) and value != value:
        return (float, "nan")
    return (type(value), value)


def same(a: list, b: list) -> bool:
    return typed(a) == typed(b)


@SETTINGS
@given(flat_batches)
def test_a_flat_batch_takes_marshal_and_comes_back_as_it_was(batch):
    data = encode_batch(batch)
    assert data[0] == FLAT
    assert same(decode_records(data), batch)


@SETTINGS
@given(any_batches)
def test_every_batch_comes_back_with_its_values_and_types(batch):
    data = encode_batch(batch)
    assert data[0] == (FLAT if codec.is_flat_batch_pure(batch) else 0x80)  # 0x80: a pickle
    assert same(decode_records(data), batch)


@SETTINGS
@given(st.lists(st.one_of(flat_batches, any_batches), min_size=1, max_size=5))
def test_joined_batches_come_back_in_order(batches):
    data = join_batches([encode_batch(b) for b in batches])
    assert data[0] == (JOINED if len(batches) > 1 else encode_batch(batches[0])[0])
    assert same(decode_records(data), [r for b in batches for r in b])


@pytest.mark.skipif(
    native is None and not REQUIRED, reason="the compiled per-record path is not built (bash scripts/setup.sh)"
)
@SETTINGS
@given(st.one_of(flat_batches, any_batches))
def test_the_compiled_and_the_pure_flatness_check_give_the_same_bytes(batch):
    original = collect_codec.is_flat_batch
    collect_codec.is_flat_batch = native.is_flat_batch
    try:
        by_compiled = encode_batch(batch)
        collect_codec.is_flat_batch = codec.is_flat_batch_pure
        by_pure = encode_batch(batch)
    finally:
        collect_codec.is_flat_batch = original
    assert by_compiled == by_pure == encode_batch(batch)  # and the active path's


def test_a_reduce_key_shared_by_many_records_is_written_once():
    key = "a-rather-long-word-" * 4
    batch = [(key, i) for i in range(1000)]
    data = encode_batch(batch)
    assert len(data) < 1000 * 16 < 1000 * len(key)  # the key once, then a reference per record
    decoded = decode_records(data)
    assert decoded == batch and len({id(k) for k, _ in decoded}) == 1


def test_plain_pickled_bytes_still_decode():
    batch = [Row(a=1), {"k": [1, 2]}]
    assert decode_records(cloudpickle.dumps(batch)) == batch


def test_an_unpicklable_record_is_refused_naming_its_type():
    with pytest.raises(SerializationError, match="type 'tuple': TypeError: cannot pickle '_thread.lock'") as info:
        encode_batch([("ok", 1), ("bad", threading.Lock())])
    assert isinstance(info.value, TypeError)
    with pytest.raises(SerializationError, match="Cannot serialize a value of type '_thread.lock'"):
        encode_batch([threading.Lock()])
