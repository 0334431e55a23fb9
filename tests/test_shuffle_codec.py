"""Codec: round trips keep Python types; unserialisable values name their type."""

import dataclasses
import datetime
import decimal
import enum
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
        None,
        True,
        False,
        0,
        -1,
        2**63 - 1,
        -(2**63),
        2**64 - 1,
        2**70,
        -(2**80),
        1.5,
        float("inf"),
        "",
        "héllo",
        b"",
        b"\x00\xff",
        bytearray(b"ab"),
        (),
        ("a", 1),
        [],
        [1, 2],
        ("k", [1, (2, [3])]),
        [(1, 2), [3, 4]],
        {"a": 1},
        {"a": [1, 2], "b": (3, 4)},
        {(1, 2): "tuple key", 3: None},
        datetime.datetime(2024, 5, 17, 12, 30),
        datetime.date(2020, 1, 1),
        decimal.Decimal("3.14"),
        {1, 2, 3},
        frozenset({"x"}),
        Point(1, "a"),
        Pair(1, [2]),
        [Point(2, "b"), {"s": {1}}],
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
    lambda children: (
        st.lists(children, max_size=5)
        | st.lists(children, max_size=5).map(tuple)
        | st.dictionaries(st.text(max_size=5) | st.integers(), children, max_size=5)
    ),
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
        Watermark(0),
        Watermark(-5),
        Watermark.MAX,
        Watermark.MIN,
        WatermarkStatus.IDLE,
        WatermarkStatus.ACTIVE,
        LatencyMarker(123, "op-1", 3),
        CheckpointBarrier(7, 1700000000000),
        END_OF_PARTITION,
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
_flat_batches = st.one_of(
    st.lists(_scalar, min_size=1, max_size=70), st.lists(st.tuples(st.text(), _int64, _scalar), min_size=1, max_size=70)
)


@settings(max_examples=150, deadline=None)
@given(_flat_batches)
def test_a_flat_batch_packs_to_the_bytes_of_msgpack(values):
    assert codec.is_flat_batch(values)
    buf = bytearray(b"prefix")
    assert codec.pack_flat_batch_into(values, buf)
    reference = codec.make_packer().pack(values)
    assert bytes(buf) == b"prefix" + reference[codec.array_header_size(len(values)) :]
    assert codec.decode_all(bytes(buf[6:])) == values


@settings(max_examples=150, deadline=None)
@given(_flat_batches, st.data())
def test_a_flat_timestamped_run_is_written_as_msgpack_would_write_it(values, data):
    timestamps = data.draw(st.one_of(_int64, st.lists(_int64, min_size=len(values), max_size=len(values))))
    encoded = codec.encode_timestamped(values, timestamps)
    packer = codec.make_packer()
    reference = packer.pack(codec.ExtType(codec.EXT_TIMESTAMPED, packer.pack((timestamps, values))))
    assert encoded == reference
    (run,) = codec.decode_all(encoded)
    assert run.values == values
    assert run.timestamps == (timestamps if type(timestamps) is list else [timestamps] * len(values))


def test_a_timestamped_run_that_msgspec_cannot_write_takes_the_codecs_packer():
    values = [("a", 1), ("b", 2)]
    for timestamps in ([1, 2**70], [1, True], 2**70):
        (run,) = codec.decode_all(codec.encode_timestamped(values, timestamps))
        assert run.values == values
        assert run.timestamps == (timestamps if type(timestamps) is list else [timestamps] * 2)
    with pytest.raises(ValueError, match="2 values but 1 timestamps"):
        codec.encode_timestamped(values, [1])


def test_a_flat_batch_with_an_int_beyond_64_bits_is_left_to_the_codec():
    buf = bytearray(b"x")
    assert not codec.pack_flat_batch_into([("a", 1), ("b", 2**70)], buf)
    assert buf == b"x"  # nothing half-written


def test_the_reason_a_value_cannot_be_serialized_survives_pickling():
    import pickle

    with pytest.raises(SerializationError) as ei:
        encode(("k", threading.Lock()))
    assert "cannot pickle '_thread.lock' object" in str(ei.value)
    shipped = pickle.loads(pickle.dumps(ei.value.with_operator("Wrap")))  # as it reaches the driver
    assert str(shipped) == str(ei.value.with_operator("Wrap"))
    assert shipped.reason == "TypeError: cannot pickle '_thread.lock' object"


def local_record_classes():
    """Classes pickle cannot find by name, as a job script's ``__main__`` classes are in a TaskExecutor."""

    @dataclasses.dataclass(frozen=True)
    class Click:
        user: str
        ms: int

    class Kind(enum.Enum):
        VIEW = "view"

    Total = namedtuple("Total", "page n")
    return Click, Kind, Total


def test_records_of_classes_pickle_cannot_find_by_name_travel_by_value_once_per_stream():
    from raylink.shuffle.serializer import RecordDeserializer, RecordSerializer

    Click, Kind, Total = local_record_classes()
    records = [Click("u1", 5), (Kind.VIEW, Total("/a", 1)), [Click("u2", 7)], {"k": Total("/b", 2)}]
    stream, sizes = RecordSerializer(1 << 16), []
    for record in records * 2:
        stream.add_record(record)
        sizes.append(stream.pending_bytes - sum(sizes))
    stream.add_records(records)
    stream.flush()
    decoder = RecordDeserializer()
    out = [v for b, _ in stream.take_full_buffers() for g in decoder.feed(b) for v in g]
    assert out == records * 3
    assert type(out[0]) is Click and out[2][0] is not records[2][0]  # the classes themselves, new instances
    # the first record of a class carries it (cloudpickle's bytes); later ones only its id
    assert sizes[0] > 500 and sizes[4] < 100
    assert rt(Click("u3", 1)) == Click("u3", 1)  # outside a stream: the class travels with every value


def test_a_record_by_value_refers_to_its_class_only_after_a_stream_carried_it():
    from raylink.shuffle.serializer import RecordDeserializer, RecordSerializer

    Click = local_record_classes()[0]
    stream = RecordSerializer(1 << 16)
    stream.add_record(Click("u1", 1))
    stream.flush()
    first = stream.take_full_buffers()
    stream.add_record(Click("u2", 2))
    stream.flush()
    later = stream.take_full_buffers()
    codec._received_classes.clear()  # a process that never decoded the first buffer
    with pytest.raises(codec.DeserializationError, match="did not reach this process"):
        RecordDeserializer().feed(later[0][0])
    decoder = RecordDeserializer()
    assert [v for b, _ in first + later for g in decoder.feed(b) for v in g] == [Click("u1", 1), Click("u2", 2)]


def test_an_unserialisable_field_of_a_by_value_record_says_why():
    Click = local_record_classes()[0]
    with pytest.raises(SerializationError, match=r"Click': TypeError: cannot pickle '_thread.lock' object"):
        encode(Click("u", threading.Lock()))


# -- declared types: PyFlink's coder semantics on the wire ---------------------------------------------
def _through(declaration, batches=(), singles=(), timestamped=()):
    """Records written under ``declaration`` (batches, single records, timestamped batches), decoded."""
    from raylink.shuffle.serializer import RecordDeserializer, RecordSerializer

    s = RecordSerializer(256, flat_records=declaration)
    for batch in batches:
        s.add_records(list(batch))
    for value in singles:
        s.add_record(value)
    for batch in timestamped:
        s.add_timestamped_records(list(batch), 7)
    s.flush()
    decoder = RecordDeserializer()
    return [v for b, _ in s.take_full_buffers() for g in decoder.feed(b) for v in getattr(g, "values", g)]


def test_a_declared_float_is_32_bit_in_batches_single_and_timestamped_records():
    from raylink.api import Types

    f32 = 0.10000000149011612
    pairs = Types.TUPLE([Types.STRING(), Types.FLOAT()])
    out = _through(
        pairs, batches=[[("a", 0.1), ["b", 1]]], singles=[("c", 0.1)], timestamped=[[("d", 0.1), ("e", 0.1)]]
    )
    assert out == [("a", f32), ("b", 1.0), ("c", f32), ("d", f32), ("e", f32)]
    assert _through(Types.FLOAT(), batches=[[0.1, None, 2]]) == [f32, None, 2.0]
    with pytest.raises(
        codec.RecordTypeError,
        match=r"field 1 of a record declared Types.TUPLE\(\[STRING, FLOAT\]\) "
        r"is 1e\+39, out of the range of a FLOAT",
    ):
        _through(pairs, batches=[[("a", 0.5), ("b", 1e39)]])


@pytest.mark.parametrize(
    "name, lo, hi",
    [("BYTE", -128, 127), ("SHORT", -32768, 32767), ("INT", -(2**31), 2**31 - 1), ("LONG", -(2**63), 2**63 - 1)],
)
def test_declared_ints_are_range_checked_to_their_width_in_every_path(name, lo, hi):
    from raylink.api import Types

    t = getattr(Types, name)()
    assert _through(t, batches=[[lo, hi, None]], singles=[lo], timestamped=[[hi, lo]]) == [lo, hi, None, lo, hi, lo]
    for bad in (lo - 1, hi + 1):
        for path in ("batches", "singles", "timestamped"):
            records = [bad] if path == "singles" else [[0, bad]]
            range_error = rf"is {bad}, out of the range of an? {name} \({lo} to {hi}\)"
            with pytest.raises(codec.RecordTypeError, match=range_error):
                _through(t, **{path: records})


def test_a_declared_row_compiles_to_a_converting_declaration_and_arrives_as_named_rows():
    from raylink.api import Row, RowKind, Types

    kv = Types.ROW_NAMED(["k", "v"], [Types.STRING(), Types.LIST(Types.FLOAT())])
    compiled = codec.DeclaredFlatType.of(kv)
    assert isinstance(compiled, codec.DeclaredType) and not compiled.is_flat
    assert codec.DeclaredFlatType.of(Types.TUPLE([Types.STRING(), Types.INT()])).is_flat
    assert codec.DeclaredFlatType.of(Types.PICKLED_BYTE_ARRAY()) is None and codec.DeclaredFlatType.of(None) is None
    out = _through(
        kv,
        batches=[[("a", [0.1]), Row(v=[1], k="b")]],
        singles=[Row.of_kind(RowKind.DELETE, "c", [])],
        timestamped=[[["d", (2,)], {"k": "e", "v": None}]],
    )
    assert [repr(r) for r in out] == [
        "Row(k='a', v=[0.10000000149011612])",
        "Row(k='b', v=[1.0])",
        "Row(k='c', v=[])",
        "Row(k='d', v=[2.0])",
        "Row(k='e', v=None)",
    ]
    assert {type(r) for r in out} == {Row} and out[2].get_row_kind() is RowKind.DELETE
    with pytest.raises(
        codec.RecordTypeError,
        match=r"element 0 of field 'v' of a record declared Types.ROW_NAMED"
        r"\(\['k', 'v'\], \[STRING, LIST\(FLOAT\)\]\) is a str",
    ):
        _through(kv, batches=[[("a", ["x"])]])


def test_other_declared_types_arrive_as_their_python_values():
    import datetime
    import decimal

    from raylink.api import Types

    when = datetime.datetime(2024, 5, 1, 12, 0, 0, 123456)
    cases = [
        (Types.SQL_TIMESTAMP(), when, datetime.datetime(2024, 5, 1, 12, 0, 0, 123000)),
        (Types.SQL_DATE(), when, datetime.date(2024, 5, 1)),
        (Types.BIG_DEC(), 1.5, decimal.Decimal("1.5")),
        (Types.MAP(Types.STRING(), Types.LIST(Types.INT())), {"a": (1, 2)}, {"a": [1, 2]}),
        (Types.OBJECT_ARRAY(Types.TUPLE([Types.INT()])), [[1], None], [(1,), None]),
        (Types.PRIMITIVE_ARRAY(Types.BYTE()), bytearray(b"xy"), b"xy"),
    ]
    for declaration, value, expected in cases:
        out = _through(declaration, batches=[[value]], singles=[value])
        assert out == [expected, expected] and all(same(o, expected) for o in out), declaration
