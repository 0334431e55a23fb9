"""``Row`` and ``RowKind`` behave as PyFlink 2.3's (``pyflink.common.types``) and cross
every wire raylink has (its msgpack codec, pickle, Ray's cloudpickle) with their field
names and kind."""

from __future__ import annotations

import copy
import pickle

import cloudpickle
import pytest

from raylink.api import Row, RowKind
from raylink.api.types import Row as TypesRow
from raylink.api.types import RowKind as TypesRowKind
from raylink.shuffle.codec import EXT_ROW, decode, encode
from raylink.shuffle.serializer import RecordDeserializer, RecordSerializer

pytestmark = pytest.mark.timeout(30)


def test_row_and_rowkind_are_importable_where_pyflink_has_them():
    # pyflink.common.types -> raylink.api.types, pyflink.common -> raylink.api
    assert TypesRow is Row and TypesRowKind is RowKind


def test_positional_and_named_rows_read_like_pyflink():
    r = Row(1, "a")
    assert repr(r) == str(r) == "<Row(1, 'a')>"
    assert (r[0], r[1], r[-1], r[0:2], len(r), list(r)) == (1, "a", "a", [1, "a"], 2, [1, "a"])
    n = Row(name="Alice", age=11)  # PyFlink 2.3 keeps the keywords in the order given
    assert repr(n) == "Row(name='Alice', age=11)"
    assert (n.name, n.age, n["name"], n[1]) == ("Alice", 11, "Alice", 11)
    assert n.as_dict() == {"name": "Alice", "age": 11}
    assert "name" in n and "wrong_key" not in n and "a" in r  # names of a named row, values of a positional one
    nested = Row(key=1, value=Row(name="a", age=2), items=[Row(x=1)])
    assert nested.as_dict() == {"key": 1, "value": Row(name="a", age=2), "items": [Row(x=1)]}
    assert nested.as_dict(True) == {"key": 1, "value": {"name": "a", "age": 2}, "items": [{"x": 1}]}


def test_a_row_used_as_a_factory_names_the_values_it_is_called_with():
    Person = Row("name", "age")
    assert repr(Person) == "<Row('name', 'age')>"
    assert "name" in Person and "wrong_key" not in Person
    alice = Person("Alice", 11)
    assert repr(alice) == "Row(name='Alice', age=11)" and alice.age == 11
    with pytest.raises(ValueError, match="expected 2 values"):
        Person("Alice", 11, "extra")


def test_equality_and_hash_follow_pyflink():
    assert Row(name="a", age=5) == Row(age=5, name="a")  # named rows: the same names with the same values
    assert Row(name="a", age=5) != Row(name="a", age=6)
    assert Row(1, "a") == Row(1, "a") and Row(1, "a") != Row("a", 1)
    assert Row(1, "a") != (1, "a") and Row(a=1) != Row(1)  # not a tuple; named is not positional
    assert Row.of_kind(RowKind.DELETE, 1) != Row(1)  # the kind counts
    assert hash(Row(name="a", age=5)) == hash(("a", 5))
    assert len({Row(1, "a"), Row(1, "a")}) == 1


def test_row_kind_prints_flink_short_strings_and_rows_keep_their_kind():
    assert [str(k) for k in RowKind] == ["+I", "-U", "+U", "-D"]
    assert [k.short_string() for k in RowKind] == ["+I", "-U", "+U", "-D"]
    assert [k.value for k in RowKind] == [0, 1, 2, 3]
    r = Row.of_kind(RowKind.UPDATE_AFTER, 1, "a")
    assert r.get_row_kind() is RowKind.UPDATE_AFTER and list(r) == [1, "a"]
    assert Row(1).get_row_kind() is RowKind.INSERT
    r.set_row_kind(RowKind.UPDATE_BEFORE)
    assert r.get_row_kind() is RowKind.UPDATE_BEFORE
    assert Row.of_kind(RowKind.DELETE, k=1).as_dict() == {"k": 1}


def test_fields_are_set_by_position_or_name_and_nothing_else():
    r = Row(name="a", age=5)
    r["age"] = 6
    r[0] = "b"
    assert r == Row(name="b", age=6)
    with pytest.raises(AttributeError):
        r.age = 7  # PyFlink's Row: fields are not attributes to assign
    with pytest.raises(AttributeError, match="missing"):
        r.missing
    with pytest.raises(ValueError, match="'missing' is not a field of Row"):
        r["missing"]
    with pytest.raises(ValueError, match="Can not use both args and kwargs"):
        Row(1, a=2)
    with pytest.raises(TypeError, match="Cannot convert a Row class into dict"):
        Row(1, 2).as_dict()
    r.set_field_names(["n", "a"])
    assert r.as_dict() == {"n": "b", "a": 6}
    assert r.get_fields_by_names(["a", "n"]) == [6, "b"]
    with pytest.raises(ValueError, match=r"Field names \['zz'\] not exist"):
        r.get_fields_by_names(["zz"])


@pytest.mark.parametrize(
    "dumps, loads", [(pickle.dumps, pickle.loads), (cloudpickle.dumps, cloudpickle.loads), (copy.deepcopy, None)]
)
def test_rows_pickle_and_copy_with_names_and_kind(dumps, loads):
    for row in (Row(1, [2, 3]), Row(name="a", nested=Row(x=1)), Row.of_kind(RowKind.UPDATE_BEFORE, k="v")):
        out = dumps(row) if loads is None else loads(dumps(row))
        assert out == row and repr(out) == repr(row) and out.get_row_kind() is row.get_row_kind()
        assert out is not row


@pytest.mark.parametrize(
    "row",
    [
        Row(1, "a"),
        Row(name="a", age=5),
        Row.of_kind(RowKind.UPDATE_AFTER, word="w", counts=[1, 2], pair=(3, [4]), by={"k": (5,)}),
        Row(outer=Row.of_kind(RowKind.DELETE, 1, Row(deep=None))),
        Row(),
    ],
)
def test_rows_cross_the_wire_codec_with_names_kind_and_nested_types(row):
    out = decode(encode(row))
    assert type(out) is Row and out == row and repr(out) == repr(row)
    assert out.get_row_kind() is row.get_row_kind()
    for mine, theirs in zip(out, row):  # lists stay lists, tuples tuples, rows rows
        assert type(mine) is type(theirs)


def test_a_row_travels_as_its_own_ext_type_and_inside_containers():
    assert encode(Row(1))[0] in (0xD4, 0xD5, 0xD6, 0xD7, 0xD8, 0xC7)  # an ext, not a pickle of the class
    assert decode(encode(Row(1)))  # and decodes
    assert EXT_ROW == 4
    value = [("k", Row(a=1)), {"r": Row(2)}]
    assert decode(encode(value)) == value


def test_record_serializer_batches_of_rows_round_trip_in_order():
    rows = [Row.of_kind(RowKind.INSERT if i % 3 else RowKind.DELETE, word=f"w{i % 7}", n=i) for i in range(2000)]
    out = []
    s = RecordSerializer(1024, lambda b, e: out.append(b))
    s.add_records(rows[:1000])
    s.add_timestamped_records(rows[1000:1500], list(range(500)))
    for r in rows[1500:]:
        s.add_record(r)
    s.flush()
    d = RecordDeserializer()
    got = []
    for b in out:
        for group in d.feed(b):
            got.extend(getattr(group, "values", group))
    assert got == rows and [r.get_row_kind() for r in got] == [r.get_row_kind() for r in rows]
