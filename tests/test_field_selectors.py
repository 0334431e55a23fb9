"""Key selectors and maps that only read fields run as ``operator.itemgetter``: the same keys and
records, the same errors, and every other function left alone (``raylink.core.field_selectors``)."""

from __future__ import annotations

import operator

import pytest
from hypothesis import given
from hypothesis import strategies as st

from raylink.api import StreamExecutionEnvironment
from raylink.core.field_selectors import field_comparison, field_getter
from raylink.core.functions import KeySelector, MapFunction
from raylink.operators.base import resolve_key_selector
from raylink.operators.basic import StreamMap
from raylink.shuffle.partitioners import KeyGroupStreamPartitioner

pytestmark = pytest.mark.timeout(120)


def first(pair):
    return pair[0]


def by_name(row):
    return row["name"]


class FirstField(KeySelector):
    def get_key(self, value):
        return value[0]


OFFSET = 1


def rewritten(fn):
    return isinstance(field_getter(fn), operator.itemgetter)


@pytest.mark.parametrize(
    "fn",
    [lambda kv: kv[0], first, by_name, lambda r: r[-1], lambda e: (e[0], e[2]), FirstField().get_key],
    ids=["lambda", "def", "str field", "negative", "tuple of fields", "KeySelector.get_key"],
)
def test_field_lookups_become_itemgetters(fn):
    assert rewritten(fn)


@pytest.mark.parametrize(
    "fn",
    [
        lambda kv: (kv[0],),  # a 1-tuple: itemgetter(0) would return the bare field
        lambda kv: kv[OFFSET],  # a global, read at every call
        lambda kv: kv[0][1],
        lambda kv: kv[0] + "",
        lambda kv, n=0: kv[n],
        lambda *kv: kv[0],
        lambda kv: str(kv[0]),
        lambda kv: kv,
        lambda kv: kv[1.5],
        lambda kv: kv[None],
        len,
        operator.itemgetter(0),
        FirstField(),  # not a function: callers pass its get_key
    ],
)
def test_anything_else_is_left_alone(fn):
    assert field_getter(fn) is fn


def test_closures_are_left_alone():
    index = 0
    fn = lambda kv: kv[index]  # noqa: E731
    assert field_getter(fn) is fn


records = st.one_of(
    st.tuples(st.text(max_size=3), st.integers()),
    st.lists(st.integers(), max_size=3),
    st.dictionaries(st.sampled_from(["name", "x"]), st.integers(), max_size=2),
    st.text(max_size=3),
    st.integers(),
    st.none(),
)


def outcome(fn, value):
    try:
        return ("ok", fn(value))
    except Exception as e:  # noqa: BLE001 - the same exception is the point
        return ("raised", type(e), str(e))


@given(records)
def test_the_itemgetter_returns_and_raises_what_the_function_does(value):
    for fn in (first, by_name, lambda r: r[-1], lambda e: (e[0], e[1]), FirstField().get_key):
        assert outcome(field_getter(fn), value) == outcome(fn, value)


def test_operators_and_partitioners_call_the_itemgetter():
    assert isinstance(resolve_key_selector(FirstField(), "op"), operator.itemgetter)
    assert isinstance(resolve_key_selector(first, "op"), operator.itemgetter)
    assert isinstance(KeyGroupStreamPartitioner(lambda kv: kv[0]).key_selector, operator.itemgetter)
    other = lambda kv: kv[0].lower()  # noqa: E731
    assert resolve_key_selector(other, "op") is other


def test_a_keyed_job_counts_and_reports_key_errors_as_before():
    words = ["to", "be", "or", "not", "to", "be"]
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    stream = (
        env.from_collection([(w, 1) for w in words]).key_by(lambda kv: kv[0]).reduce(lambda a, b: (a[0], a[1] + b[1]))
    )
    with stream.execute_and_collect() as results:
        got = list(results)
    expected = {}
    final = {}
    for w in words:
        expected[w] = expected.get(w, 0) + 1
    for w, c in got:
        final[w] = max(final.get(w, 0), c)
    assert final == expected and len(got) == len(words)

    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    env.from_collection([(1,), 5]).key_by(lambda kv: kv[0]).reduce(lambda a, b: a).add_sink(lambda v: None)
    with pytest.raises(Exception) as failure:
        env.execute("bad key")
    assert "Could not extract key from 5" in "".join(_chain(failure.value))


def _chain(error):
    while error is not None:
        yield str(error)
        error = error.__cause__ or error.__context__


class Swap(MapFunction):
    opened = closed = 0

    def open(self, runtime_context):
        Swap.opened += 1

    def map(self, value):
        return (value[1], value[0])

    def close(self):
        Swap.closed += 1


def test_a_map_that_only_reads_fields_runs_as_an_itemgetter_and_keeps_its_lifecycle():
    from raylink.tests.test_operators_basic import start

    Swap.opened = Swap.closed = 0
    op = StreamMap(Swap())
    harness = start(op)
    assert isinstance(op._map, operator.itemgetter)
    op.process_batch([("a", 1), ("b", 2)])
    op.process_element(("c", 3))
    op.close()
    assert harness.extract_output_values() == [(1, "a"), (2, "b"), (3, "c")]
    assert (Swap.opened, Swap.closed) == (1, 1)
    other = StreamMap(lambda e: (e[1], e[0] * 2))
    start(other)
    assert not isinstance(other._map, operator.itemgetter)


def test_a_job_with_projecting_maps_gives_the_projected_records():
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    rows = [{"id": i, "name": f"n{i}"} for i in range(100)]
    projected = env.from_collection(rows).map(lambda r: (r["name"], r["id"])).map(lambda kv: (kv[1], kv[0]))
    with projected.execute_and_collect() as results:
        got = sorted(results)
    assert got == [(r["id"], r["name"]) for r in rows]


# -- filters that compare one field -------------------------------------------------------------------
KIND = 2


def compares(fn):
    return field_comparison(fn) is not None


@pytest.mark.parametrize(
    "fn",
    [
        lambda e: e[0] == KIND,
        lambda e: e[0] == 2,
        lambda e: e[1] != "x",
        lambda e: e["name"] < "m",
        lambda e: e[-1] <= 1.5,
        lambda e: e[0] > KIND,
        lambda e: e[0] >= None,
    ],
    ids=["== global", "== const", "!= str", "< by name", "<= negative", "> global", ">= None"],
)
def test_field_comparisons_run_as_operator_functions(fn):
    assert compares(fn)


@pytest.mark.parametrize(
    "fn",
    [
        lambda e: KIND == e[0],  # the operand first
        lambda e: e[0] % 3 == 0,
        lambda e: e[0][1] == 1,
        lambda e: e[0] is None,
        lambda e: e[0] in (1, 2),
        lambda e: e[0] == e[1],
        lambda e, k=2: e[0] == k,
        lambda e: e[0],
        lambda e: e[1.5] == 1,
        len,
    ],
)
def test_other_predicates_are_left_alone(fn):
    assert not compares(fn)


def test_a_closure_operand_is_left_alone():
    kind = 2
    assert not compares(lambda e: e[0] == kind)


predicates = [
    lambda e: e[0] == KIND,
    lambda e: e[0] != 2,
    lambda e: e[0] < KIND,
    lambda e: e[1] >= "b",
    lambda e: e["name"] == 1,
    lambda e: e[-1] > 0.5,
]


@given(st.lists(records, max_size=5))
def test_the_comparison_gives_and_raises_what_the_predicate_does(values):
    for fn in predicates:
        want = [outcome(fn, value) for value in values]
        compared = field_comparison(fn)
        got = []
        for value in values:  # one record per batch: an error does not hide the others' results
            try:
                got.append(("ok", next(iter(compared([value])))))
            except Exception as e:  # noqa: BLE001 - the same exception is the point
                got.append(("raised", type(e), str(e)))
        assert got == want


def test_a_global_is_read_at_each_batch_and_an_unbound_one_raises_name_error():
    global KIND
    compared = field_comparison(lambda e: e[0] == KIND)
    rows = [(1,), (2,), (3,)]
    assert list(compared(rows)) == [False, True, False]
    try:
        KIND = 3
        assert list(compared(rows)) == [False, False, True]
        del KIND
        with pytest.raises(NameError, match="KIND"):
            list(compared(rows))
    finally:
        KIND = 2


def test_a_filter_job_that_compares_a_field_keeps_what_python_keeps():
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    rows = [(i % 4, f"n{i}") for i in range(200)]
    kept = env.from_collection(rows).filter(lambda r: r[0] == KIND).filter(lambda r: r[1] != "n6")
    with kept.execute_and_collect() as results:
        got = sorted(results)
    assert got == sorted(r for r in rows if r[0] == KIND and r[1] != "n6")


def test_a_filter_operator_runs_the_comparison_on_both_batch_paths():
    from raylink.operators.basic import StreamFilter
    from raylink.tests.test_operators_basic import start

    op = StreamFilter(lambda e: e[0] == KIND)
    harness = start(op)
    assert op._compared is not None
    op.process_batch([(1, "a"), (2, "b")])
    harness.process_timestamped([((2, "c"), 5), ((3, "d"), 6), ((2, "e"), 7)])
    assert harness.output.records == [(2, "b"), (2, "c"), (2, "e")]
    assert harness.output.timestamps[1:] == [5, 7]
