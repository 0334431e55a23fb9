"""Every Python str and every odd value the API accepts crosses the wire codecs unchanged.

A str with a lone surrogate (``json.loads('"\\ud800"')``) is an ordinary Python str; Flink
carries any Java string. The msgpack codec writes it as its 'surrogatepass' bytes (its strict
packers refuse it, the codec repacks) and reads it back; the collect codec (marshal, pickle)
does too. Checked on every entry a record takes: one value, a batch (flat or not), timestamped
records and runs, a declared flat or structured type, and the collect path -- with huge ints,
NaN, bytes, None and nested containers beside it. A str UTF-8 can encode keeps its exact bytes.
"""

from __future__ import annotations

import json
import math

import msgpack
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from raylink.api import Types
from raylink.core.row import Row
from raylink.shuffle import codec, collect_codec
from raylink.shuffle.elements import TimestampedRecords
from raylink.shuffle.serializer import RecordDeserializer, RecordSerializer

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
SURROGATE = json.loads('"\\ud800"')

any_text = st.text(alphabet=st.characters(categories=["Cs", "Lu", "Ll", "Lo", "Nd", "So"]), max_size=6)
scalars = st.one_of(
    any_text,
    st.integers(-(2**100), 2**100),
    st.floats(allow_nan=True),
    st.binary(max_size=4),
    st.none(),
    st.booleans(),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.tuples(inner, inner),
        st.lists(inner, max_size=3),
        st.dictionaries(any_text, inner, max_size=2),
        st.builds(lambda a, b: Row(a=a, b=b), inner, inner),
    ),
    max_leaves=6,
)


def same(a, b) -> bool:
    """Equal, NaN equal to NaN, and of the same types (tuples stay tuples, lists lists)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return a == b or (math.isnan(a) and math.isnan(b))
    if isinstance(a, (tuple, list)):
        return len(a) == len(b) and all(map(same, a, b))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, Row):
        return repr(a) == repr(b)
    return a == b


def _through_serializer(write, buffer_size=64):
    ser = RecordSerializer(buffer_size=buffer_size)
    write(ser)
    ser.flush()
    d = RecordDeserializer()
    out = []
    for buffer, _ in ser.take_full_buffers():
        out.extend(d.feed(buffer))
    return out


@SETTINGS
@given(values)
def test_one_value_comes_back_as_it_was(value):
    assert same(codec.decode(codec.encode(value)), value)


@SETTINGS
@given(st.lists(values, max_size=8), st.lists(scalars, max_size=8), st.integers(0, 10**9))
@example(["a", [1], SURROGATE, ("b", [SURROGATE])], ["x", SURROGATE, 2**70], 5)
@example([("a", 1), (SURROGATE, 2)], [SURROGATE], 0)
def test_every_serializer_entry_carries_any_str(records, flat, ts):
    """Batches flat and not, single records, timestamped records and runs: every record back,
    equal and in order (a repacked batch loses none of the records packed before the str)."""
    got = _through_serializer(
        lambda ser: (
            ser.add_records(records),
            ser.add_records(flat),
            [ser.add_record(r) for r in records],
            [ser.add_timestamped_record(r, ts) for r in flat],
            ser.add_timestamped_records(records, [ts + i for i in range(len(records))]) if len(records) > 1 else None,
        )
    )
    plain = [v for item in got if type(item) is list for v in item]
    timestamped = [v for item in got if isinstance(item, TimestampedRecords) for v in item.values]
    assert same(plain, records + flat + records)
    assert same(timestamped, flat + (records if len(records) > 1 else []))


@SETTINGS
@given(st.lists(st.tuples(any_text, st.integers(-(2**31), 2**31 - 1)), max_size=10), any_text)
def test_declared_types_carry_any_str(pairs, text):
    """A declared flat TUPLE(STRING, INT) and a structured ROW: the same records back."""
    flat = RecordSerializer(buffer_size=64, flat_records=Types.TUPLE([Types.STRING(), Types.INT()]))
    flat.add_records(pairs)
    flat.add_record((text, 1))
    flat.flush()
    d = RecordDeserializer()
    got = [v for buffer, _ in flat.take_full_buffers() for item in d.feed(buffer) for v in item]
    assert got == pairs + [(text, 1)]
    row_type = Types.ROW_NAMED(["s", "l"], [Types.STRING(), Types.LIST(Types.STRING())])
    structured = RecordSerializer(buffer_size=64, flat_records=row_type)
    structured.add_records([Row(s=text, l=[text, SURROGATE])])
    structured.flush()
    d = RecordDeserializer()
    rows = [v for buffer, _ in structured.take_full_buffers() for item in d.feed(buffer) for v in item]
    assert [(r.s, r.l) for r in rows] == [(text, [text, SURROGATE])]


@SETTINGS
@given(st.lists(values, max_size=8), st.lists(any_text, max_size=8))
@example([(SURROGATE, [SURROGATE]), float("nan")], [SURROGATE, "a"])
def test_collected_batches_carry_any_str(records, texts):
    for batch in (records, texts):
        assert same(collect_codec.decode_records(collect_codec.encode_batch(batch)), batch)
    joined = collect_codec.join_batches([collect_codec.encode_batch(records), collect_codec.encode_batch(texts)])
    assert same(collect_codec.decode_records(joined), records + texts)


@SETTINGS
@given(st.text(max_size=8))
def test_a_str_utf8_can_encode_keeps_its_exact_bytes(text):
    """What every other msgpack reader reads: unchanged for a str without a lone surrogate."""
    assert codec.encode(text) == msgpack.packb(text, use_bin_type=True)


def test_a_lone_surrogate_is_written_as_its_three_bytes():
    assert codec.encode(SURROGATE) == b"\xa3\xed\xa0\x80"
    assert codec.pack_surrogatepass(("a", SURROGATE)) == b"\x92\xa1a\xa3\xed\xa0\x80"
    assert codec.decode(b"\xa3\xed\xa0\x80") == SURROGATE
