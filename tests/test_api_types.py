"""Declared types act as PyFlink 2.3's coders do: records of a ``Types.ROW`` stream
arrive as named ``Row``s, ``Types.FLOAT`` is 32-bit, ``Types.INT`` is range-checked,
the composite types convert to their Python values; aggregations find Row fields by
name; ``print()`` writes what PyFlink prints. The expected texts were checked against
PyFlink 2.3.0 itself."""

from __future__ import annotations

import datetime
import decimal
import re

import pytest

from raylink.api import Row, RowKind, Types
from raylink.api.time import Instant
from raylink.api.types import apply_declared_type
from raylink.core.declared_types import RecordTypeError, record_converter
from raylink.operators.aggregation import InvalidFieldReferenceError
from raylink.operators.print_format import java_double_string, java_float_string, record_formatter
from raylink.runtime.client.job_result import JobExecutionException
from raylink.tests.runtime_jobs import make_env

pytestmark = pytest.mark.timeout(120)

KV = Types.ROW_NAMED(["key", "value"], [Types.STRING(), Types.INT()])
ID_INFO = Types.ROW_NAMED(["id", "info"], [Types.INT(), Types.STRING()])


def convert(type_info, value):
    return record_converter(type_info)(value)


# -- the conversions --------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "type_info, value, expected",
    [
        (Types.FLOAT(), 0.1, 0.10000000149011612),  # 32 bits, as struct.pack('f')
        (Types.FLOAT(), 3, 3.0),
        (Types.FLOAT(), float("inf"), float("inf")),
        (Types.DOUBLE(), 0.1, 0.1),
        (Types.DOUBLE(), decimal.Decimal("2.5"), 2.5),
        (Types.INT(), 2**31 - 1, 2**31 - 1),
        (Types.INT(), True, 1),
        (Types.LONG(), -(2**63), -(2**63)),
        (Types.SHORT(), -32768, -32768),
        (Types.BYTE(), 127, 127),
        (Types.BOOLEAN(), 1, True),
        (Types.STRING(), "s", "s"),
        (Types.CHAR(), "c", "c"),
        (Types.BIG_DEC(), 1.5, decimal.Decimal("1.5")),
        (Types.BIG_DEC(), "2.50", decimal.Decimal("2.50")),
        (Types.SQL_DATE(), datetime.datetime(2024, 5, 1, 12), datetime.date(2024, 5, 1)),
        (Types.SQL_TIME(), datetime.time(1, 2, 3, 456789), datetime.time(1, 2, 3, 456000)),
        (
            Types.SQL_TIMESTAMP(),
            datetime.datetime(2024, 5, 1, 12, 0, 0, 123456),
            datetime.datetime(2024, 5, 1, 12, 0, 0, 123000),
        ),
        (
            Types.SQL_TIMESTAMP(),
            datetime.datetime(2024, 5, 1, 12, tzinfo=datetime.timezone(datetime.timedelta(hours=2))),
            datetime.datetime(2024, 5, 1, 12),
        ),  # the wall-clock time, without the zone
        (Types.INSTANT(), Instant(5, 6), Instant(5, 6)),
        (Types.PICKLED_BYTE_ARRAY(), {1, 2}, {1, 2}),
        (Types.PRIMITIVE_ARRAY(Types.BYTE()), bytearray(b"ab"), b"ab"),
        (Types.PRIMITIVE_ARRAY(Types.INT()), (1, 2), [1, 2]),
        (Types.BASIC_ARRAY(Types.FLOAT()), [0.1, None], [0.10000000149011612, None]),
        (Types.OBJECT_ARRAY(Types.STRING()), ("a", None), ["a", None]),
        (Types.LIST(Types.LONG()), [1, 2], [1, 2]),
        (Types.MAP(Types.STRING(), Types.FLOAT()), {"a": 0.1, "b": None}, {"a": 0.10000000149011612, "b": None}),
        (Types.TUPLE([Types.STRING(), Types.FLOAT()]), ["a", 0.1], ("a", 0.10000000149011612)),
        (
            Types.TUPLE([Types.STRING(), Types.TUPLE([Types.INT(), Types.LIST(Types.INT())])]),
            ("a", [1, (2, 3)]),
            ("a", (1, [2, 3])),
        ),
        (Types.INT(), None, None),
    ],
)
def test_values_convert_as_pyflink_coders_convert_them(type_info, value, expected):
    out = convert(type_info, value)
    assert out == expected and type(out) is type(expected)


def test_a_row_type_delivers_named_rows_from_tuples_lists_dicts_and_rows():
    t = Types.ROW_NAMED(["name", "age"], [Types.STRING(), Types.FLOAT()])
    for value in (("a", 0.1), ["a", 0.1], {"age": 0.1, "name": "a"}, Row(age=0.1, name="a"), Row("a", 0.1)):
        out = convert(t, value)
        assert type(out) is Row and repr(out) == "Row(name='a', age=0.10000000149011612)"
    assert convert(t, Row.of_kind(RowKind.UPDATE_BEFORE, "a", 1)).get_row_kind() is RowKind.UPDATE_BEFORE
    # Types.ROW names its fields f0, f1 ... (Flink's RowTypeInfo defaults)
    assert repr(convert(Types.ROW([Types.STRING(), Types.INT()]), ("a", 5))) == "Row(f0='a', f1=5)"
    nested = convert(Types.ROW([Types.ROW_NAMED(["x"], [Types.INT()])]), [(1,)])
    assert repr(nested) == "Row(f0=Row(x=1))"


@pytest.mark.parametrize(
    "type_info, value, message",
    [
        (
            Types.INT(),
            2**31,
            "a record declared Types.INT() is 2147483648, out of the range of an INT "
            "(-2147483648 to 2147483647): 2147483648",
        ),
        (
            Types.SHORT(),
            40000,
            "a record declared Types.SHORT() is 40000, out of the range of a SHORT (-32768 to 32767)",
        ),
        (Types.BYTE(), -129, "a record declared Types.BYTE() is -129, out of the range of a BYTE (-128 to 127)"),
        (Types.LONG(), 2**63, "a record declared Types.LONG() is 9223372036854775808, out of the range of a LONG"),
        (Types.FLOAT(), 1e39, "a record declared Types.FLOAT() is 1e+39, out of the range of a FLOAT"),
        (Types.INT(), 1.5, "a record declared Types.INT() is a float, not an INT"),
        (
            Types.TUPLE([Types.STRING(), Types.INT()]),
            ("w", 2**40),
            "field 1 of a record declared Types.TUPLE([STRING, INT]) is 1099511627776, out of the range of an INT",
        ),
        (
            KV,
            ("w", 2**40),
            "field 'value' of a record declared Types.ROW_NAMED(['key', 'value'], [STRING, INT]) "
            "is 1099511627776, out of the range of an INT",
        ),
        (
            KV,
            Row(key="w", other=1),
            "a record declared Types.ROW_NAMED(['key', 'value'], [STRING, INT]) is a Row "
            "without a field 'value' (its fields: ['key', 'other'])",
        ),
        (KV, ("w", 1, 2), "a record declared Types.ROW_NAMED(['key', 'value'], [STRING, INT]) has 3 fields"),
        (KV, None, "a record declared Types.ROW_NAMED(['key', 'value'], [STRING, INT]) is a NoneType"),
        (
            Types.TUPLE([Types.STRING(), Types.LIST(Types.INT())]),
            ("w", [1, "x"]),
            "element 1 of field 1 of a record declared Types.TUPLE([STRING, LIST(INT)]) is a str, not an INT",
        ),
        (
            Types.PRIMITIVE_ARRAY(Types.INT()),
            [1, None],
            "element 1 of a record declared Types.PRIMITIVE_ARRAY(INT) is None, which a PRIMITIVE_ARRAY(INT) cannot hold",
        ),
        (
            Types.MAP(Types.STRING(), Types.INT()),
            {"k": "v"},
            "the value of key 'k' of a record declared Types.MAP(STRING, INT) is a str, not an INT",
        ),
        (Types.SQL_TIMESTAMP(), datetime.date(2024, 5, 1), "is a datetime.date, not a SQL_TIMESTAMP"),
        (Types.BIG_DEC(), "abc", "is a str, not a BIG_DEC"),
    ],
)
def test_a_value_that_does_not_convert_is_named_with_where_it_sits(type_info, value, message):
    with pytest.raises(RecordTypeError) as ei:
        convert(type_info, value)
    assert message in str(ei.value)


def test_types_reject_what_is_no_type_information():
    with pytest.raises(
        TypeError,
        match=r"Types.ROW: .* is not a TypeInformation "
        r"\(write Types.INT\(\), not Types.INT\)",
    ):
        Types.ROW([Types.INT])
    with pytest.raises(ValueError, match=r"Types.ROW_NAMED: 1 field names \['a'\] for 2 field types"):
        Types.ROW_NAMED(["a"], [Types.INT(), Types.INT()])
    assert KV.get_field_names() == ["key", "value"] and KV.get_field_index("value") == 1
    assert Types.ROW([Types.INT()]).get_field_names() == ["f0"]


def test_a_typed_collection_is_converted_when_the_program_is_built():
    assert apply_declared_type(KV, [("a", 1)]) == [Row(key="a", value=1)]
    env = make_env("local", 1)
    with pytest.raises(
        RecordTypeError,
        match=r"from_collection: element 1: field 'value' of a record declared "
        r"Types.ROW_NAMED\(\['key', 'value'\], \[STRING, INT\]\) is a str",
    ):
        env.from_collection([("a", 1), ("b", "x")], type_info=KV)


# -- jobs ---------------------------------------------------------------------------------------------
def test_a_row_named_collection_arrives_as_rows_in_the_next_function():
    env = make_env("local", 1)
    ds = env.from_collection([(1, "a"), (2, "b")], type_info=ID_INFO)
    ds.map(lambda data: (data.id * 10, data["info"], data[1], type(data).__name__)).collect_sink("out")
    assert env.execute().get_accumulator_result("out") == [(10, "a", "a", "Row"), (20, "b", "b", "Row")]


def test_records_leaving_a_chain_arrive_as_the_declared_type(target):
    env = make_env(target, 2)
    rows = (
        env.from_collection(list(range(6)))
        .map(lambda i: (f"k{i % 2}", i * 0.1), output_type=Types.ROW_NAMED(["k", "v"], [Types.STRING(), Types.FLOAT()]))
        .rebalance()
        .map(lambda r: (type(r).__name__, r.k, r["v"], repr(r)))
    )
    rows.collect_sink("out")
    got = sorted(env.execute().get_accumulator_result("out"))
    assert got == sorted(
        ("Row", f"k{i % 2}", struct32(i * 0.1), f"Row(k='k{i % 2}', v={struct32(i * 0.1)!r})") for i in range(6)
    )


def struct32(x):
    import struct

    return struct.unpack("f", struct.pack("f", x))[0]


def test_sum_min_and_min_by_find_row_fields_by_name_and_position(target):
    env = make_env(target, 2)
    src = env.from_collection([("a", 3), ("a", 2), ("b", 5), ("a", 4)], type_info=KV)
    src.key_by(lambda r: r["key"]).sum("value").collect_sink("sum")
    src.key_by(lambda r: r.key).sum(1).collect_sink("sum1")
    src.key_by(lambda r: r[0]).min("value").collect_sink("min")
    src.key_by(lambda r: r[0]).min_by("value").collect_sink("min_by")
    src.key_by(lambda r: r[0]).max_by("value").collect_sink("max_by")
    result = env.execute()

    def a_then_b(name):
        rows = result.get_accumulator_result(name)
        assert {type(r) for r in rows} == {Row} and all(r.as_dict().keys() == {"key", "value"} for r in rows)
        return [r.value for r in rows if r.key == "a"], [r.value for r in rows if r.key == "b"]

    assert a_then_b("sum") == a_then_b("sum1") == ([3, 5, 9], [5])
    assert a_then_b("min") == ([3, 2, 2], [5])
    assert a_then_b("min_by") == ([3, 2, 2], [5])
    assert a_then_b("max_by") == ([3, 3, 4], [5])


def test_an_aggregation_on_a_field_the_declared_type_lacks_fails_naming_operator_and_field():
    env = make_env("local", 1)
    keyed = env.from_collection([("a", 1)], type_info=KV).key_by(lambda r: r[0])
    with pytest.raises(
        InvalidFieldReferenceError,
        match=r"sum 'Keyed Aggregation': field 'nope' does not exist: "
        r"the stream's type .* has the fields \['key', 'value'\]",
    ):
        keyed.sum("nope")
    with pytest.raises(InvalidFieldReferenceError, match=r"max 'Keyed Aggregation': field position 2 is out of bounds"):
        keyed.max(2)
    untyped = env.from_collection([Row(key="a", value=1)]).key_by(lambda r: r[0]).min_by("nope")
    untyped.collect_sink("out")
    with pytest.raises(
        JobExecutionException,
        match=r"min_by 'Keyed Aggregation': field 'nope' does not exist: "
        r"the Row's fields are \['key', 'value'\]",
    ):
        env.execute()


def test_key_by_a_field_name_fails_with_the_pyflink_way_to_write_it():
    env = make_env("local", 1)
    with pytest.raises(
        TypeError,
        match=r"key_by: key_selector must be a callable or an object with a 'get_key' "
        r"method, got str 'key' .*key_by\(lambda record: record\['key'\]\)",
    ):
        env.from_collection([("a", 1)], type_info=KV).key_by("key")


def test_an_int_out_of_range_fails_the_job_naming_operator_field_and_value():
    env = make_env("local", 2)
    (
        env.from_collection([0, 1])
        .map(lambda i: ("w", i * 2**31), output_type=Types.TUPLE([Types.STRING(), Types.INT()]))
        .name("Widen")
        .rebalance()
        .map(lambda v: v)
        .collect_sink("out")
    )
    with pytest.raises(JobExecutionException) as ei:
        env.execute()
    message = str(ei.value)
    assert "Operator 'Widen'" in message and "RecordTypeError" in message
    assert (
        "field 1 of a record declared Types.TUPLE([STRING, INT]) is 2147483648, out of the range of an INT"
    ) in message


# -- print -------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "type_info, record, text",
    [
        (None, ("a", 5), "('a', 5)"),
        (None, Row(name="x", age=3), "Row(name='x', age=3)"),
        (Types.PICKLED_BYTE_ARRAY(), [1, 2], "[1, 2]"),
        (Types.TUPLE([Types.STRING(), Types.INT()]), ("a", 5), "(a,5)"),
        (
            Types.TUPLE([Types.STRING(), Types.TUPLE([Types.STRING(), Types.DOUBLE()])]),
            ("a", ("b", 1.5)),
            "(a,(b,1.5))",
        ),
        (
            Types.TUPLE([Types.SQL_DATE(), Types.SQL_TIME()]),
            (datetime.date(2024, 5, 1), datetime.time(1, 2, 3, 456789)),
            "(2024-05-01,01:02:03)",
        ),
        (
            Types.TUPLE([Types.STRING(), Types.INT(), Types.ROW([Types.INT(), Types.STRING()])]),
            ("a", None, Row(1, "b")),
            "(a,null,+I[1, b])",
        ),
        (KV, ("a", 5), "+I[a,5]"),
        (KV, Row.of_kind(RowKind.UPDATE_AFTER, key="a", value=5), "+U[a,5]"),
        (
            Types.ROW([Types.STRING(), Types.FLOAT(), Types.LIST(Types.INT()), Types.MAP(Types.STRING(), Types.INT())]),
            Row("k", 0.1, [1, 1], {"a": 1}),
            "+I[k,0.1,[1, 1],{'a': 1}]",
        ),
        (
            Types.ROW([Types.STRING(), Types.ROW([Types.INT(), Types.STRING()])]),
            Row("k", Row(1, "z")),
            "+I[k,<Row(1, 'z')>]",
        ),
        (Types.DOUBLE(), 1e7, "1.0E7"),
        (Types.FLOAT(), 0.1, "0.1"),
        (Types.BOOLEAN(), True, "true"),
        (Types.LIST(Types.INT()), [1, 2], "[1, 2]"),
        (Types.MAP(Types.STRING(), Types.INT()), {"a": 1, "b": 2}, "{a=1, b=2}"),
        (Types.SQL_TIMESTAMP(), datetime.datetime(2024, 5, 1, 12, 0, 0, 123456), "2024-05-01 12:00:00.123"),
        (Types.SQL_TIMESTAMP(), datetime.datetime(2024, 5, 1, 12), "2024-05-01 12:00:00.0"),
        (Types.BIG_DEC(), decimal.Decimal("1.50"), "1.50"),
        (Types.INSTANT(), Instant(1714564800, 5_000_000), "2024-05-01T12:00:00.005Z"),
    ],
)
def test_print_formats_a_record_as_pyflink_prints_it(type_info, record, text):
    assert record_formatter(type_info)(record) == text


@pytest.mark.parametrize(
    "x, text",
    [
        (1.0, "1.0"),
        (0.1, "0.1"),
        (1e7, "1.0E7"),
        (1.5e-4, "1.5E-4"),
        (123456789.0, "1.23456789E8"),
        (float("nan"), "NaN"),
        (-0.0, "-0.0"),
        (0.001, "0.001"),
        (9999999.0, "9999999.0"),
        (-2.5e300, "-2.5E300"),
        (float("-inf"), "-Infinity"),
    ],
)
def test_doubles_print_as_java_prints_them(x, text):
    assert java_double_string(x) == text


def test_floats_print_as_java_prints_a_float32():
    assert [java_float_string(struct32(x)) for x in (0.1, 1 / 3, 3.14159, 16777217.0, 1e-5)] == [
        "0.1",
        "0.33333334",
        "3.14159",
        "1.6777216E7",
        "1.0E-5",
    ]


def test_print_writes_tuples_rows_and_plain_values_as_pyflink_with_subtask_prefixes(capsys):
    env = make_env("local", 1)
    src = env.from_collection([(1, "a"), (2, "b")], type_info=ID_INFO)
    src.print()
    src.map(lambda r: (r.info, r.id), output_type=Types.TUPLE([Types.STRING(), Types.INT()])).print()
    src.map(lambda r: (r.info, r.id)).print("plain")
    env.execute()
    assert sorted(capsys.readouterr().out.splitlines()) == sorted(
        ["+I[1,a]", "+I[2,b]", "(a,1)", "(b,2)", "plain> ('a', 1)", "plain> ('b', 2)"]
    )
    env = make_env("local", 2)
    env.from_collection([("a", 1), ("b", 2), ("c", 3)], type_info=KV).rebalance().map(
        lambda r: r, output_type=KV
    ).print("ID")
    env.execute()
    lines = capsys.readouterr().out.splitlines()
    assert sorted(re.sub(r"^ID:[12]> ", "", line) for line in lines) == ["+I[a,1]", "+I[b,2]", "+I[c,3]"]
    assert all(re.match(r"^ID:[12]> ", line) for line in lines)
