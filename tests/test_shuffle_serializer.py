"""RecordSerializer / RecordDeserializer: spanning records, order, grouping, events."""

import enum
import os
import random
from decimal import Decimal

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from raylink.shuffle import codec
from raylink.shuffle.codec import SerializationError
from raylink.shuffle.elements import (
    END_OF_PARTITION,
    CheckpointBarrier,
    LatencyMarker,
    TimestampedRecords,
    Watermark,
    WatermarkStatus,
)
from raylink.shuffle.serializer import (
    DEFAULT_BUFFER_SIZE,
    OBJECT_RUN_MIN,
    ObjectBuffer,
    RecordDeserializer,
    RecordPackers,
    RecordSerializer,
)
from raylink.shuffle.shareable import is_shareable_batch

pytestmark = pytest.mark.timeout(30)


def collect(buffer_size=DEFAULT_BUFFER_SIZE):
    out = []
    return RecordSerializer(buffer_size, lambda b, e: out.append((b, e))), out


def decode_stream(buffers):
    """What a reader gets from a channel: bytes through a deserializer, in-process runs
    (``ObjectBuffer``) as they are."""
    d = RecordDeserializer()
    items = []
    for b, is_event in buffers:
        if is_event:
            items.append(codec.decode_event(b))
        elif type(b) is ObjectBuffer:
            assert not d.has_partial_record  # the bytes before a run were handed over whole
            items.extend(b.items)
        else:
            items.extend(d.feed(b))
    assert not d.has_partial_record
    return items


def flat_records(items):
    out = []
    for it in items:
        if type(it) is list:
            out.extend(it)
        elif type(it) is TimestampedRecords:
            out.extend(it.values)
    return out


def test_default_buffer_size_is_32k():
    assert DEFAULT_BUFFER_SIZE == 32 * 1024


def test_5mib_record_spans_32k_buffers_intact():
    big = os.urandom(5 * 1024 * 1024)
    s, out = collect()
    s.add_record(("big", big))
    # the record does not fit: all full buffers were handed over, the tail waits for a flush
    assert len(out) == (5 * 1024 * 1024) // DEFAULT_BUFFER_SIZE
    s.flush()
    assert len(out) == 161
    sizes = [len(b) for b, _ in out]
    assert all(n == DEFAULT_BUFFER_SIZE for n in sizes[:-1])
    assert 0 < sizes[-1] <= DEFAULT_BUFFER_SIZE

    d = RecordDeserializer()
    for b, _ in out[:-1]:
        assert d.feed(b) == []  # nothing complete before the last piece
        assert d.has_partial_record
    last = d.feed(out[-1][0])
    assert last == [[("big", big)]]
    assert not d.has_partial_record


def test_large_record_in_batch_path_spans_and_neighbours_survive():
    big = "x" * 200_000
    s, out = collect(4096)
    s.add_records([("a", 1), big, ("b", [2])])
    s.flush()
    assert all(len(b) == 4096 for b, _ in out[:-1])
    assert flat_records(decode_stream(out)) == [("a", 1), big, ("b", [2])]


@pytest.mark.parametrize("buffer_size", [16, 100, 4096])
def test_many_small_records_cross_boundaries_in_order(buffer_size):
    rnd = random.Random(7)
    values = [("k%d" % rnd.randrange(1000), i, rnd.random()) for i in range(5000)]
    s, out = collect(buffer_size)
    for i in range(0, 2000):
        s.add_record(values[i])
    s.add_records(values[2000:4500])
    for v in values[4500:]:
        s.add_record(v)
    s.flush()
    assert len(out) > 1
    assert all(len(b) == buffer_size for b, _ in out[:-1])
    assert flat_records(decode_stream(out)) == values


def test_plain_buffer_decodes_as_single_run():
    s, out = collect(1 << 20)
    s.add_records(list(range(100)))
    s.flush()
    d = RecordDeserializer()
    items = d.feed(out[0][0])
    assert items == [list(range(100))]
    assert type(items[0]) is list


def test_grouping_of_runs_and_control_elements():
    s, out = collect(1 << 16)
    s.add_records([1, 2])
    s.add_element(Watermark(10))
    s.add_record(3)
    s.add_timestamped_record("a", 100)
    s.add_timestamped_records(["b", "c"], [101, 102])
    s.add_element(WatermarkStatus.IDLE)
    s.add_element(LatencyMarker(5, "op", 0))
    s.add_records([4, [5]])
    s.flush()
    assert len(out) == 1
    items = RecordDeserializer().feed(out[0][0])
    assert items == [
        [1, 2],
        Watermark(10),
        [3],
        TimestampedRecords(["a", "b", "c"], [100, 101, 102]),
        WatermarkStatus.IDLE,
        LatencyMarker(5, "op", 0),
        [4, [5]],
    ]


def test_long_timestamped_batch_is_cut_into_runs_and_reassembled():
    values = [(i, str(i)) for i in range(5000)]
    stamps = list(range(1000, 6000))
    s, out = collect(1024)
    s.add_timestamped_records(values, stamps)
    s.flush()
    got_v, got_t = [], []
    for it in decode_stream(out):
        assert type(it) is TimestampedRecords
        got_v.extend(it.values)
        got_t.extend(it.timestamps)
    assert got_v == values and got_t == stamps
    with pytest.raises(ValueError):
        s.add_timestamped_records([1], [])


def test_event_finishes_current_buffer_and_travels_alone():
    s, out = collect(1024)
    s.add_record("before")
    s.add_event(CheckpointBarrier(1, 2))
    s.add_record("after")
    assert [e for _, e in out] == [False, True]
    assert codec.decode_event(out[1][0]) == CheckpointBarrier(1, 2)
    s.add_event(END_OF_PARTITION)
    assert [e for _, e in out] == [False, True, False, True]
    assert decode_stream(out) == [["before"], CheckpointBarrier(1, 2), ["after"], END_OF_PARTITION]


def test_event_on_empty_serializer_emits_only_the_event():
    s, out = collect()
    s.add_event(END_OF_PARTITION)
    assert len(out) == 1 and out[0][1] is True


def test_flush_is_noop_when_empty_and_partial_buffer_only_on_flush():
    s, out = collect(1024)
    assert s.flush() is False
    s.add_record("x")
    assert out == [] and s.pending_bytes > 0
    assert s.flush() is True
    assert len(out) == 1 and len(out[0][0]) < 1024
    assert s.flush() is False


def test_take_full_buffers_without_sink():
    s = RecordSerializer(64)
    s.add_records(["y" * 30] * 10)
    full = s.take_full_buffers()
    assert full and all(len(b) == 64 and not e for b, e in full)
    assert s.take_full_buffers() == []


def test_add_element_rejects_events_and_add_event_rejects_records():
    s, _ = collect()
    with pytest.raises(TypeError):
        s.add_element(CheckpointBarrier(1, 1))
    with pytest.raises(TypeError):
        s.add_event(("record",))


def test_unserialisable_record_raises_and_earlier_records_survive():
    import threading

    s, out = collect(1 << 16)
    with pytest.raises(SerializationError) as ei:
        s.add_records([("ok", 1), ("bad", threading.Lock()), ("never", 2)])
    assert "lock" in str(ei.value)
    with pytest.raises(SerializationError):
        s.add_record(lambda: None)
    s.add_record(("fine", 3))
    s.flush()
    assert flat_records(decode_stream(out)) == [("ok", 1), ("fine", 3)]


def test_metrics_count_buffers_and_bytes():
    s, out = collect(100)
    s.add_records(list(range(1000)))
    s.flush()
    assert s.num_buffers == len(out)
    assert s.num_bytes == sum(len(b) for b, _ in out)


def _flatten(items):
    out = []
    for it in items:
        if type(it) is list:
            out.extend(("rec", v, None) for v in it)
        elif type(it) is TimestampedRecords:
            out.extend(("rec", v, t) for v, t in zip(it.values, it.timestamps))
        else:
            out.append(("ctl", it, None))
    return out


@pytest.mark.parametrize("buffer_size", [16, 23, 64, 1 << 16])
def test_timestamped_records_mixed_with_everything_across_tiny_buffers(buffer_size):
    rnd = random.Random(buffer_size)
    s, out = collect(buffer_size)
    expect = []
    for i in range(1500):
        r = rnd.random()
        if r < 0.5:
            v = ("t", i, [i] if i % 7 == 0 else i)
            s.add_timestamped_record(v, 1000 + i)
            expect.append(("rec", v, 1000 + i))
        elif r < 0.7:
            s.add_record(("p", i))
            expect.append(("rec", ("p", i), None))
        elif r < 0.8:
            vals = [("b", i, k) for k in range(rnd.randrange(1, 4))]
            stamps = [i * 10 + k for k in range(len(vals))]
            s.add_timestamped_records(vals, stamps)
            expect.extend(("rec", v, t) for v, t in zip(vals, stamps))
        elif r < 0.9:
            s.add_records([i, str(i)])
            expect.extend([("rec", i, None), ("rec", str(i), None)])
        else:
            s.add_element(Watermark(i))
            expect.append(("ctl", Watermark(i), None))
    s.flush()
    assert _flatten(decode_stream(out)) == expect


def test_timestamped_run_of_single_records_is_one_run():
    s, out = collect(1 << 16)
    for i in range(100):
        s.add_timestamped_record(("v", i), i * 2)
    s.flush()
    items = RecordDeserializer().feed(out[0][0])
    assert items == [TimestampedRecords([("v", i) for i in range(100)], [i * 2 for i in range(100)])]


def test_timestamp_mark_waiting_for_its_record_counts_as_partial():
    s, out = collect(1 << 16)
    s.add_timestamped_record("x" * 50, 7)
    s.flush()
    data = out[0][0]
    d = RecordDeserializer()
    assert d.feed(data[:10]) == []  # just the 10-byte timestamp marker
    assert d.has_partial_record
    assert d.feed(data[10:]) == [TimestampedRecords(["x" * 50], [7])]
    assert not d.has_partial_record


def test_batch_with_one_shared_timestamp():
    s, out = collect(256)
    values = [("s", i) for i in range(3000)]
    s.add_timestamped_records(values, 42)
    s.add_timestamped_records(["one"], 43)
    s.flush()
    items = decode_stream(out)
    assert all(type(it) is TimestampedRecords for it in items)
    assert [v for it in items for v in it.values] == values + ["one"]
    assert [t for it in items for t in it.timestamps] == [42] * 3000 + [43]


def test_a_declared_flat_stream_converts_as_pyflink_does_and_undeclared_lists_stay_lists():
    from collections import namedtuple

    from raylink.api import Types

    assert Types.TUPLE([Types.STRING(), Types.INT()]).is_flat
    assert Types.STRING().is_flat
    assert not Types.TUPLE([Types.STRING(), Types.LIST(Types.INT())]).is_flat
    assert not Types.PICKLED_BYTE_ARRAY().is_flat and not Types.ROW([Types.INT()]).is_flat
    Pair = namedtuple("Pair", "word n")
    records = [("a", 1), ["b", 2], Pair("c", 3), ("d", None)]
    flat = RecordSerializer(64, flat_records=Types.TUPLE([Types.STRING(), Types.INT()]))
    flat.add_records(records)
    flat.add_record(["e", 5])
    out = decoded(flat)
    # PyFlink's tuple coder: a list or namedtuple declared as a TUPLE arrives as a tuple
    assert out == [("a", 1), ("b", 2), ("c", 3), ("d", None), ("e", 5)]
    assert {type(v) for v in out} == {tuple}
    checked = RecordSerializer(64)
    checked.add_records(records)
    out = decoded(checked)
    assert out == records and type(out[1]) is list


def test_a_declared_flat_stream_rejects_a_record_of_another_type_naming_field_and_type():
    from datetime import datetime

    from raylink.api import Types

    s = RecordSerializer(64, flat_records=Types.TUPLE([Types.STRING(), Types.INT()]))
    for bad, message in [
        (("c", 3.5), "field 1 of a record declared Types.TUPLE([STRING, INT]) is a float, not an INT"),
        (
            ("c", datetime(2024, 5, 1)),
            "field 1 of a record declared Types.TUPLE([STRING, INT]) is a datetime.datetime, not an INT",
        ),
        ((7, 1), "field 0 of a record declared Types.TUPLE([STRING, INT]) is an int, not a STRING"),
        ({"c", 1}, "a record declared Types.TUPLE([STRING, INT]) is a set"),
        (("c", 1, 2), "a record declared Types.TUPLE([STRING, INT]) has 3 fields"),
    ]:
        with pytest.raises(codec.RecordTypeError) as ei:
            s.add_records([("ok", 1), bad])
        assert str(ei.value).startswith(message + ": ")
        with pytest.raises(codec.RecordTypeError):
            s.add_record(bad)
        with pytest.raises(codec.RecordTypeError):
            s.add_timestamped_records([("ok", 1), bad], 5)
    assert decoded(s) == []  # nothing of a rejected batch was written


def decoded(serializer):
    serializer.flush()
    decode = RecordDeserializer()
    return [v for b, _ in serializer.take_full_buffers() for g in decode.feed(b) for v in g]


def test_ints_beyond_64_bits_in_a_flat_batch_still_round_trip():
    s = RecordSerializer(64)
    s.add_records([("a", 1), ("b", 2**70), ("c", -(2**64))])
    assert decoded(s) == [("a", 1), ("b", 2**70), ("c", -(2**64))]


def test_a_declared_long_rejects_ints_beyond_64_bits_as_pyflink_s_coder_does():
    from raylink.api import Types

    s = RecordSerializer(64, flat_records=Types.TUPLE([Types.STRING(), Types.LONG()]))
    with pytest.raises(
        codec.RecordTypeError,
        match=r"^field 1 of a record declared Types\.TUPLE\(\[STRING, LONG\]\) "
        r"is 1180591620717411303424, out of the range of a LONG "
        r"\(-9223372036854775808 to 9223372036854775807\): ",
    ):
        s.add_records([("a", 1), ("b", 2**70)])
    s.add_records([("a", 2**63 - 1), ("b", -(2**63))])
    assert decoded(s) == [("a", 2**63 - 1), ("b", -(2**63))]


class Opaque:
    def __init__(self, v):
        self.v = v

    def __eq__(self, other):
        return type(other) is Opaque and other.v == self.v


def test_a_declared_flat_batch_holding_an_unknown_type_is_rejected_and_an_undeclared_one_pickles_it():
    from raylink.api import Types

    s = RecordSerializer(64, flat_records=Types.TUPLE([Types.STRING(), Types.INT()]))
    with pytest.raises(
        codec.RecordTypeError,
        match=r"field 1 of a record declared Types\.TUPLE\(\[STRING, INT\]\) "
        r"is an? .*Opaque, not an INT",
    ):
        s.add_records([("a", 1), ("b", Opaque(7)), ["c", 3]])
    s = RecordSerializer(64)
    s.add_records([("a", 1), ("b", Opaque(7)), ["c", 3]])
    assert decoded(s) == [("a", 1), ("b", Opaque(7)), ["c", 3]]


def test_flat_batches_of_every_size_decode_in_order_across_buffers():
    for n in (1, 15, 16, 65535, 65536):  # every msgpack array header size
        s = RecordSerializer(1024)
        values = [(f"w{i % 97}", i) for i in range(n)]
        s.add_records(values)
        assert decoded(s) == values


# -- in-process hand-over (hand_over_objects) ------------------------------------------------------------------


def handing_over(buffer_size=DEFAULT_BUFFER_SIZE, flat_type=None):
    out = []
    s = RecordSerializer(buffer_size, lambda b, e: out.append((b, e)), flat_records=flat_type)
    s.hand_over_objects = True
    return s, out


def test_a_flat_batch_is_handed_over_as_objects_after_the_bytes_before_it():
    s, out = handing_over()
    s.add_record(("before", 1))
    batch = [(f"k{i}", i) for i in range(OBJECT_RUN_MIN)]
    s.add_records(batch)
    s.add_timestamped_records(batch, 7)
    s.flush()
    kinds = [type(b).__name__ for b, _ in out]
    assert kinds == ["bytes", "ObjectBuffer", "ObjectBuffer"]
    assert out[1][0].items[0] == batch and out[1][0].items[0] is not batch  # a copy of the caller's list
    assert out[1][0].items[0][0] is batch[0]  # the records themselves: immutable, shared
    assert _flatten(decode_stream(out)) == (
        [("rec", ("before", 1), None)] + [("rec", v, None) for v in batch] + [("rec", v, 7) for v in batch]
    )


def test_mutable_records_and_small_batches_are_still_encoded():
    s, out = handing_over()
    lists = [[i, i] for i in range(OBJECT_RUN_MIN)]  # mutable records: a shared one could change under the reader
    s.add_records(lists)
    s.add_records([(i,) for i in range(OBJECT_RUN_MIN - 1)])  # too few to be worth a buffer of their own
    s.flush()
    assert all(type(b) is bytes for b, _ in out)
    lists[0].append("changed later")
    assert flat_records(decode_stream(out))[:2] == [[0, 0], [1, 1]]


def test_a_declared_flat_type_is_conformed_before_the_hand_over():
    from raylink.api import Types

    s, out = handing_over(flat_type=Types.TUPLE([Types.STRING(), Types.INT()]))
    s.add_records([[f"k{i}", i] for i in range(OBJECT_RUN_MIN)])  # lists become tuples, as encoded ones do
    s.flush()
    ((run, _),) = out
    assert type(run) is ObjectBuffer
    assert run.items == [[(f"k{i}", i) for i in range(OBJECT_RUN_MIN)]]


def test_a_batch_already_of_its_declared_type_is_handed_over_as_a_copy():
    from raylink.api import Types

    s, out = handing_over(flat_type=Types.TUPLE([Types.STRING(), Types.INT()]))
    batch = [(f"k{i}", i) for i in range(OBJECT_RUN_MIN)]
    s.add_records(batch)
    s.flush()
    batch.clear()  # the caller reuses its list
    ((run, _),) = out
    assert run.items == [[(f"k{i}", i) for i in range(OBJECT_RUN_MIN)]]


scalars = st.one_of(st.integers(-(2**63), 2**63 - 1), st.text(max_size=5), st.floats(allow_nan=False), st.none())
records = st.one_of(scalars, st.tuples(scalars, scalars), st.lists(scalars, max_size=2))
operations = st.lists(
    st.one_of(
        st.tuples(st.just("record"), records),
        st.tuples(st.just("batch"), st.lists(records, max_size=80)),
        st.tuples(st.just("flat"), st.lists(st.tuples(scalars, scalars), min_size=OBJECT_RUN_MIN, max_size=80)),
        st.tuples(st.just("stamped"), st.lists(st.tuples(scalars, scalars), min_size=1, max_size=80)),
        st.tuples(st.just("watermark"), st.integers(0, 10**6)),
        st.tuples(st.just("flush"), st.none()),
    ),
    max_size=25,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(operations, st.sampled_from([16, 64, 4096]))
def test_a_reader_sees_the_same_elements_with_and_without_the_hand_over(ops, buffer_size):
    plain, plain_out = collect(buffer_size)
    fast, fast_out = handing_over(buffer_size)
    for s in (plain, fast):
        for i, (kind, arg) in enumerate(ops):
            if kind == "record":
                s.add_record(arg)
            elif kind in ("batch", "flat"):
                s.add_records(arg)
            elif kind == "stamped":
                s.add_timestamped_records(arg, [i * 100 + k for k in range(len(arg))])
            elif kind == "watermark":
                s.add_element(Watermark(arg))
            else:
                s.flush()
        s.flush()
    assert _flatten(decode_stream(fast_out)) == _flatten(decode_stream(plain_out))


# -- which batches may be shared (shareable.is_shareable_batch) ------------------------------------------------


class Colour(enum.IntEnum):
    RED = 1


class Tag(str, enum.Enum):
    HOT = "hot"


class Name(str):
    pass


class Box:
    def __init__(self, v):
        self.v = v

    def __eq__(self, other):
        return type(other) is Box and other.v == self.v


#: values that cannot change once made (sharing one is what a decoded copy gives)
IMMUTABLE = (str, int, float, bool, bytes, type(None), Colour, Tag, Name, Decimal)
#: a field's values by kind: the plain ones give a batch its shape, the others break or bend it
field_kinds = [
    st.integers(-(2**63), 2**63 - 1),
    st.text(max_size=3),
    st.floats(allow_nan=False),
    st.booleans(),
    st.binary(max_size=3),
    st.none(),
    st.sampled_from([Colour.RED, Tag.HOT, Name("n"), Decimal("1.5")]),
    st.binary(max_size=3).map(bytearray),
    st.lists(st.integers(), max_size=2),
    st.builds(Box, st.integers()),
    st.tuples(st.integers()),
    st.tuples(st.tuples(st.text(max_size=2)), st.integers()),  # nested: flat, shared
    st.tuples(st.tuples(st.lists(st.integers(), max_size=1))),  # a list inside: copied
]


def _immutable(value):
    """A value nothing can change: an immutable scalar, or a tuple of such values."""
    return type(value) in IMMUTABLE or type(value) is tuple and all(map(_immutable, value))


@st.composite
def batches(draw):
    """Rows of one shape (each field of one kind), some fields of some rows of another kind."""
    width = draw(st.integers(1, 3))
    shape = [draw(st.sampled_from(field_kinds[:6])) for _ in range(width)]
    rows = []
    for _ in range(draw(st.integers(1, 12))):
        kinds = [draw(st.sampled_from(field_kinds)) if draw(st.integers(0, 4)) == 0 else k for k in shape]
        rows.append(tuple(draw(k) for k in kinds))
    return rows


@settings(max_examples=400, deadline=None)
@given(batches())
def test_a_batch_is_shared_only_if_no_field_of_it_can_change(values):
    shared = is_shareable_batch(values)
    if shared:
        assert all(_immutable(f) for row in values for f in row)
    if codec.is_flat_batch(values):  # every batch the exact check accepts is shared
        assert shared


def test_a_bytearray_or_a_list_record_is_never_shared():
    assert is_shareable_batch([(b"a", 1)] * 3)
    assert not is_shareable_batch([(b"a", 1), (bytearray(b"a"), 1)])  # msgspec's bytes would take it
    assert not is_shareable_batch([("a", 1), ["a", 1]])  # a list record, even one of the shape
    assert not is_shareable_batch([("a", 1), ("a", [1])])
    assert is_shareable_batch([("a", 1), ("a", None), (None, 2.5)])  # None in any field, other shapes: exact check


def test_enum_members_and_decimals_are_handed_over_and_read_as_decoding_them_would():
    # a first row of plain types sets the shape; members of int/str enums and a Decimal in a float field fit it
    rows = [(1, "hot", 2.5, 0)] + [(Colour.RED, Tag.HOT, Decimal("2.5"), i) for i in range(1, OBJECT_RUN_MIN)]
    plain, plain_out = collect()
    fast, fast_out = handing_over()
    for s in (plain, fast):
        s.add_records(rows)
        s.flush()
    assert type(fast_out[0][0]) is ObjectBuffer  # shared, not encoded
    shared, decoded_rows = flat_records(decode_stream(fast_out)), flat_records(decode_stream(plain_out))
    assert shared == decoded_rows == rows
    assert [tuple(map(type, r)) for r in shared] == [tuple(map(type, r)) for r in decoded_rows]


def test_a_deserializer_creates_its_unpacker_with_the_first_buffer_and_drops_it_when_cleared():
    s, out = collect(64)
    records = [("k%d" % i, i, [i, "x" * (i % 7)]) for i in range(40)]  # lists: not flat, packed record by record
    s.add_records(records[:20])
    s.flush()
    d = RecordDeserializer()
    assert d._unpacker is None and not d.has_partial_record  # an idle channel holds no unpacker
    got = []
    for b, _ in out:
        got.extend(d.feed(b))
    assert d._unpacker is not None and not d.has_partial_record
    d.clear()
    assert d._unpacker is None and not d.has_partial_record
    out.clear()
    s.add_records(records[20:])  # a new stream after the clear: decoded by a new unpacker
    s.flush()
    for b, _ in out:
        got.extend(d.feed(b))
    assert flat_records(got) == records


def test_serializers_sharing_packers_keep_their_streams_apart():
    import threading

    packers = RecordPackers()
    outs = [[], []]
    sers = [RecordSerializer(48, lambda b, e, o=o: o.append((b, e)), packers=packers) for o in outs]
    expected = [[], []]
    for i in range(30):
        ch = i % 2
        batch = [("r", ch, i, [i]), {"i": i}]  # not flat: the shared batch packer
        sers[ch].add_records(batch)
        expected[ch] += batch
        sers[1 - ch].add_record(("one", i))  # the shared single-value packer in between
        expected[1 - ch].append(("one", i))
    with pytest.raises(SerializationError):  # the records before a failing one are kept, in their stream only
        sers[0].add_records([("ok", 0), ("bad", threading.Lock())])
    expected[0].append(("ok", 0))
    sers[1].add_records([("after", 1)])
    expected[1].append(("after", 1))
    for s in sers:
        s.flush()
    assert [flat_records(decode_stream(o)) for o in outs] == expected
