"""The compiled ``Row`` (``core._row.RowBase`` under ``core.row``'s class body) against its
pure-Python twin ``PureRow``: every operation a PyFlink user or a codec has on a row gives the
same result, or raises the same error (type and text), on both, for every kind of input --
positional and named rows of any field values (nested rows, lists, tuples, None, lone
surrogates, ints beyond 64 bits), indexes that are ints, negative, out of range, beyond an
index-sized int, bools, slices, names present and absent, other types.

The compiled class is built here from the module when it is there, so the comparison runs
whichever row is active (CI also runs this file with ``RAYLINK_PURE_PYTHON=1``); it needs the
compiled module, and skips without it except where it is required (``RAYLINK_REQUIRE_COMPILED``
or ``CI``: there it fails).
"""

from __future__ import annotations

import copy
import os
import pickle

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from raylink.core import row as row_module
from raylink.core.row import PureRow, Row, RowKind, make_pure_row, make_row

try:
    from raylink.core import _row as native
except ImportError:
    native = None

REQUIRED = any(
    os.environ.get(name, "").lower() not in ("", "0", "false") for name in ("RAYLINK_REQUIRE_COMPILED", "CI")
)
pytestmark = [
    pytest.mark.timeout(120),
    pytest.mark.skipif(native is None and not REQUIRED, reason="the compiled Row is not built (bash scripts/setup.sh)"),
]
SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

#: the compiled class: the active ``Row`` when it is compiled, else one built here over the base
CompiledRow = (
    None
    if native is None
    else Row
    if row_module.NATIVE_ROW is not None
    else row_module._row_class(native.RowBase, "CompiledRow")
)

any_text = st.text(alphabet=st.characters(categories=["Cs", "Lu", "Ll", "Nd"]), max_size=5)
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False),
    any_text,
    st.binary(max_size=4),
)
values = st.recursive(
    scalars, lambda inner: st.one_of(st.lists(inner, max_size=3), st.tuples(inner, inner)), max_leaves=6
)
names = st.lists(st.text(alphabet="abcxyz", min_size=1, max_size=3), min_size=0, max_size=5, unique=True)
kinds = st.sampled_from(list(RowKind))
indexes = st.one_of(
    st.integers(min_value=-7, max_value=7),
    st.integers(min_value=2**64, max_value=2**70),
    st.booleans(),
    st.slices(6),
    st.text(alphabet="abcxyz_", max_size=3),
    st.floats(allow_nan=False),
    st.none(),
    st.tuples(st.integers(0, 2)),
)


def outcome(call):
    """``("ok", value)`` or ``("raised", type, text)`` of ``call()``."""
    try:
        return ("ok", call())
    except Exception as e:  # the twins must raise the same
        return ("raised", type(e), str(e))


def normal(value):
    """A result made comparable across the two classes: rows by their repr, kind and class
    role (compiled/pure), containers element-wise."""
    if isinstance(value, (PureRow, CompiledRow)):
        return ("row", repr(value), value.get_row_kind(), [normal(v) for v in value])
    if isinstance(value, list):
        return [normal(v) for v in value]
    if isinstance(value, tuple):
        return tuple(normal(v) for v in value)
    if isinstance(value, dict):
        return {k: normal(v) for k, v in value.items()}
    return value


def same(pure_call, compiled_call):
    got, expected = outcome(compiled_call), outcome(pure_call)
    assert normal(got) == normal(expected)
    return expected


@st.composite
def row_specs(draw):
    """``(args, kwargs, kind)`` of a row: positional, or named (possibly nested) with a kind."""
    field_values = draw(st.lists(values, max_size=5))
    kind = draw(kinds)
    if draw(st.booleans()):
        return tuple(field_values), {}, kind
    keys = draw(names)
    kwargs = {k: draw(values) for k in keys}
    if kwargs and draw(st.booleans()):  # a nested named row
        kwargs[keys[0]] = ("nested", draw(values))
    return (), kwargs, kind


def build(cls, spec):
    args, kwargs, kind = spec
    kwargs = {k: cls(inner=v[1]) if isinstance(v, tuple) and v[:1] == ("nested",) else v for k, v in kwargs.items()}
    return cls.of_kind(kind, *args, **kwargs)


@SETTINGS
@given(row_specs(), st.lists(indexes, min_size=1, max_size=6))
def test_reads_of_a_row_are_the_same_on_both(spec, items):
    pure, compiled = build(PureRow, spec), build(CompiledRow, spec)
    for item in items:
        same(lambda: pure[item], lambda: compiled[item])
        same(lambda: item in pure, lambda: item in compiled)
        if isinstance(item, str):
            same(lambda: getattr(pure, item), lambda: getattr(compiled, item))
    same(lambda: list(pure), lambda: list(compiled))
    same(
        lambda: (len(pure), repr(pure), str(pure), pure.get_row_kind()),
        lambda: (len(compiled), repr(compiled), str(compiled), compiled.get_row_kind()),
    )
    same(lambda: hash(pure), lambda: hash(compiled))
    same(lambda: pure.as_dict(), lambda: compiled.as_dict())
    same(lambda: pure.as_dict(True), lambda: compiled.as_dict(True))
    field_names = list(spec[1])
    same(
        lambda: pure.get_fields_by_names(field_names[::-1] + ["zz"]),
        lambda: compiled.get_fields_by_names(field_names[::-1] + ["zz"]),
    )
    same(lambda: pure.get_fields_by_names(field_names[::-1]), lambda: compiled.get_fields_by_names(field_names[::-1]))
    same(
        lambda: (pure._is_retract_msg(), pure._is_accumulate_msg()),
        lambda: (compiled._is_retract_msg(), compiled._is_accumulate_msg()),
    )


@SETTINGS
@given(row_specs(), row_specs(), st.lists(st.tuples(indexes, values), min_size=1, max_size=4))
def test_writes_and_comparisons_are_the_same_on_both(spec, other_spec, writes):
    pure, compiled = build(PureRow, spec), build(CompiledRow, spec)
    for item, value in writes:
        same(lambda: pure.__setitem__(item, value), lambda: compiled.__setitem__(item, value))
        if isinstance(item, str):
            same(lambda: setattr(pure, item, value), lambda: setattr(compiled, item, value))
        same(lambda: list(pure), lambda: list(compiled))
    other_pure, other_compiled = build(PureRow, other_spec), build(CompiledRow, other_spec)
    same(
        lambda: (pure == other_pure, pure != other_pure),
        lambda: (compiled == other_compiled, compiled != other_compiled),
    )
    same(lambda: pure == build(PureRow, spec), lambda: compiled == build(CompiledRow, spec))
    same(lambda: pure == tuple(pure), lambda: compiled == tuple(compiled))  # not a tuple
    same(lambda: pure.set_row_kind(RowKind.DELETE), lambda: compiled.set_row_kind(RowKind.DELETE))
    same(
        lambda: pure.set_field_names(["f%d" % i for i in range(len(pure))]),
        lambda: compiled.set_field_names(["f%d" % i for i in range(len(compiled))]),
    )
    same(lambda: (repr(pure), pure.as_dict()), lambda: (repr(compiled), compiled.as_dict()))
    same(lambda: setattr(pure, "_row_kind", RowKind.INSERT), lambda: setattr(compiled, "_row_kind", RowKind.INSERT))
    same(lambda: pure.get_row_kind(), lambda: compiled.get_row_kind())


@SETTINGS
@given(row_specs())
def test_pickles_copies_and_factories_are_the_same_on_both(spec):
    pure, compiled = build(PureRow, spec), build(CompiledRow, spec)
    # pickle rebuilds the process's active Row: the same row from either class
    same(lambda: pickle.loads(pickle.dumps(pure)), lambda: pickle.loads(pickle.dumps(compiled)))
    same(lambda: copy.deepcopy(pure), lambda: copy.deepcopy(compiled))
    same(lambda: copy.copy(pure), lambda: copy.copy(compiled))
    factory_pure, factory_compiled = PureRow("a", "b", "c"), CompiledRow("a", "b", "c")
    args = [v for v in pure][:4]
    same(lambda: factory_pure(*args), lambda: factory_compiled(*args))
    assert type(factory_compiled(*args[:3])) is CompiledRow and type(factory_pure(*args[:3])) is PureRow


@SETTINGS
@given(st.one_of(st.none(), names), st.lists(values, max_size=5), kinds)
def test_make_row_is_the_same_on_both(fields, field_values, kind):
    if fields is not None:
        field_values = (field_values + [None] * len(fields))[: len(fields)]
    pure = make_pure_row(PureRow, fields, list(field_values), kind)
    compiled = native.make_row(CompiledRow, fields, list(field_values), kind)
    assert type(pure) is PureRow and type(compiled) is CompiledRow
    same(
        lambda: (repr(pure), list(pure), pure.get_row_kind(), pure._from_dict),
        lambda: (repr(compiled), list(compiled), compiled.get_row_kind(), compiled._from_dict),
    )
    assert (
        compiled == CompiledRow.of_kind(kind, *field_values)
        if fields is None
        else compiled.as_dict() == dict(zip(fields, field_values))
    )
    assert type(make_row(fields, list(field_values), kind)) is Row


def test_the_compiled_row_refuses_what_the_pure_one_refuses():
    for cls in (PureRow, CompiledRow):
        with pytest.raises(ValueError, match="Can not use both args and kwargs"):
            cls(1, a=2)
        with pytest.raises(TypeError, match="Cannot convert a Row class into dict"):
            cls(1).as_dict()
        with pytest.raises(AttributeError):
            cls(a=1).b = 2  # not a field attribute to assign, nor a new attribute
        with pytest.raises(AttributeError):
            cls(1)._other  # noqa: B018
        with pytest.raises(KeyError):
            cls(1)["a"] = 2  # a positional row has no names to assign by
        with pytest.raises(ValueError, match="'a' is not a field of <Row\\(1\\)>"):
            cls(1)["a"]
        assert cls(1, 2)[-1] == 2 and cls(1, 2)[True] == 2 and cls(1, 2)[0:1] == [1]
