"""Codec: round trips keep Python types; unserialisable values name their type."""

import dataclasses
import datetime
import decimal
import threading
from collections import namedtuple

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from raylink.shuffle import codec
from raylink.shuffle.codec import SerializationError, decode, encode
from raylink.shuffle.elements import (
    END_OF_PARTITION,
    CheckpointBarrier,
    EndOfPartition,
    LatencyMarker,
    StreamStatus,
    TimestampedRecords,
    Watermark,
    WatermarkStatus,
)

pytestmark = pytest.mark.timeout(30)


@dataclasses.dataclass
class Point:
    x: int
    y: str


Pair = namedtuple("Pair", "a b")


def rt(v):
    return decode(encode(v))


def same(a, b):
    """Equality that also checks container types all the way down."""
    if type(a) is not type(b):
        return False
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, float) and a != a:
        return b != b
    return a == b


@pytest.mark.parametrize(
    "value",
    [
        None, True, False, 0, -1, 2**63 - 1, -(2**63), 2**64 - 1, 2**70, -(2**80), 1.5, float("inf"),
        "", "héllo", b"", b"\x00\xff", bytearray(b"ab"),
        (), ("a", 1), [], [1, 2], ("k", [1, (2, [3])]), [(1, 2), [3, 4]],
        {"a": 1}, {"a": [1, 2], "b": (3, 4)}, {(1, 2): "tuple key", 3: None},
        datetime.datetime(2024, 5, 17, 12, 30), datetime.date(2020, 1, 1), decimal.Decimal("3.14"),
        {1, 2, 3}, frozenset({"x"}), Point(1, "a"), Pair(1, [2]), [Point(2, "b"), {"s": {1}}],
    ],
)
def test_round_trip_keeps_types(value):
    assert same(rt(value), value)


def test_tuples_stay_tuples_and_lists_stay_lists():
    v = (1, [2, (3, [4, ()])], {"k": [5]})
    out = rt(v)
    assert type(out) is tuple and type(out[1]) is list and type(out[1][1]) is tuple
    assert type(out[1][1][1]) is list and type(out[2]["k"]) is list
    assert out == v


def test_nan_round_trip():
    out = rt(float("nan"))
    assert out != out


json_like = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text() | st.binary(),
    lambda children: st.lists(children, max_size=5)
    | st.lists(children, max_size=5).map(tuple)
    | st.dictionaries(st.text(max_size=5) | st.integers(), children, max_size=5),
    max_leaves=30,
)


@settings(max_examples=300, deadline=None)
@given(json_like)
def test_hypothesis_round_trip(value):
    assert same(rt(value), value)


@settings(max_examples=100, deadline=None)
@given(st.lists(json_like, max_size=20))
def test_hypothesis_batch_prepare(values):
    prepared = codec.prepare_batch(values)
    out = codec.decode_all(b"".join(codec._pack_nested(v) for v in prepared))
    assert same(out, values)


@pytest.mark.parametrize(
    "element",
    [
        Watermark(0), Watermark(-5), Watermark.MAX, Watermark.MIN,
        WatermarkStatus.IDLE, WatermarkStatus.ACTIVE, LatencyMarker(123, "op-1", 3),
        CheckpointBarrier(7, 1700000000000), END_OF_PARTITION,
        TimestampedRecords([("a", 1), [2]], [10, 20]),
    ],
)
def test_control_elements_round_trip(element):
    out = rt(element)
    assert out == element and type(out) is type(element)


def test_singletons_survive_decoding():
    assert rt(END_OF_PARTITION) is END_OF_PARTITION
    assert EndOfPartition() is END_OF_PARTITION
    assert rt(WatermarkStatus.IDLE) is WatermarkStatus.IDLE
    assert StreamStatus(idle=True) is WatermarkStatus.IDLE
    assert WatermarkStatus.ACTIVE.status == 0 and WatermarkStatus.IDLE.status == -1


def test_event_codec():
    data = codec.encode_event(CheckpointBarrier(3, 4))
    assert codec.decode_event(data) == CheckpointBarrier(3, 4)
    with pytest.raises(TypeError):
        codec.encode_event(("not", "an", "event"))


def test_unserialisable_lambda_names_type():
    with pytest.raises(SerializationError) as ei:
        encode(("key", lambda x: x))
    assert isinstance(ei.value, TypeError)
    assert ei.value.value_type.__name__ == "function"
    assert "function" in str(ei.value)


def test_unserialisable_lock_names_type():
    lock = threading.Lock()
    with pytest.raises(SerializationError) as ei:
        encode([1, {"l": lock}])
    assert ei.value.value_type is type(lock)
    assert "lock" in str(ei.value)


def test_serialization_error_with_operator():
    with pytest.raises(SerializationError) as ei:
        encode(threading.Lock())
    err = ei.value.with_operator("Map -> Filter")
    assert "Map -> Filter" in str(err) and "lock" in str(err)
    assert err.value_type is ei.value.value_type


def test_corrupt_data_raises():
    with pytest.raises(codec.DeserializationError):
        decode(b"\xc1")  # never used by msgpack


# -- flat batches: msgspec writes what msgpack's packer would --------------------------------------------
_int64 = st.integers(min_value=-(2**63), max_value=2**64 - 1)
_scalar = st.one_of(st.none(), st.booleans(), _int64, st.floats(allow_nan=False), st.text(), st.binary())
_flat_batches = st.one_of(st.lists(_scalar, min_size=1, max_size=70),
                          st.lists(st.tuples(st.text(), _int64, _scalar), min_size=1, max_size=70))


@settings(max_examples=150, deadline=None)
@given(_flat_batches)
def test_a_flat_batch_packs_to_the_bytes_of_msgpack(values):
    assert codec.is_flat_batch(values)
    buf = bytearray(b"prefix")
    assert codec.pack_flat_batch_into(values, buf)
    reference = codec.make_packer().pack(values)
    assert bytes(buf) == b"prefix" + reference[codec.array_header_size(len(values)):]
    assert codec.decode_all(bytes(buf[6:])) == values


def test_a_flat_batch_with_an_int_beyond_64_bits_is_left_to_the_codec():
    buf = bytearray(b"x")
    assert not codec.pack_flat_batch_into([("a", 1), ("b", 2**70)], buf)
    assert buf == b"x"  # nothing half-written
