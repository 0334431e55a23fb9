"""Keys and records of every kind the API accepts, through a keyed exchange end to end.

A lone surrogate is an ordinary Python str (``json.loads('"\\ud800"')``); it once crashed the
process hashing it (mmh3) and failed the msgpack codec. Here such keys -- and records holding
huge ints, NaN, bytes, nested containers -- travel and are counted exactly on the local target
and on Ray, and on both per-record paths (the session's path in process, the other one in a
child process on the local target; ``scripts/test.sh`` runs this file once more with
``RAYLINK_PURE_PYTHON=1``). A key selector runs at most twice per record (Flink: once in the
partitioner, once in the keyed operator), counted in a file every process appends to. A key
selector that fails, or a None key, fails the job with one error naming the operator and the
cause.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from raylink.runtime.client.job_result import JobExecutionException
from raylink.shuffle import hotpath
from raylink.tests.runtime_jobs import make_env

pytestmark = pytest.mark.timeout(180)

SURROGATE = json.loads('"\\ud800"')
WORDS = [SURROGATE, "a"] * 3


def ship_this_module_by_value() -> None:
    """Ray workers cannot import the test modules: their functions travel by value."""
    import cloudpickle
    import ray

    for pickler in (cloudpickle, ray.cloudpickle):
        pickler.register_pickle_by_value(sys.modules[__name__])


def _env(target: str, parallelism: int):
    env = make_env(target, parallelism)
    if target == "ray":
        ship_this_module_by_value()
    return env


def running_counts(words):
    """Brute force: what ``key_by(word).sum(1)`` emits, as a multiset (every key's 1..n)."""
    seen: Counter = Counter()
    out = []
    for w in words:
        seen[w] += 1
        out.append((w, seen[w]))
    return Counter(out)


def counting_key_selector(calls_file: str):
    """``t[0]``, appending one line per call to ``calls_file`` (any process: O_APPEND)."""

    def key_of(record):
        with open(calls_file, "a") as f:
            f.write("k\n")
        return record[0]

    return key_of


def _calls(calls_file: Path) -> int:
    return len(calls_file.read_text().splitlines()) if calls_file.exists() else 0


@pytest.mark.parametrize("parallelism", [1, 2])
def test_surrogate_keys_are_counted_exactly_and_the_key_selector_runs_at_most_twice(target, parallelism, tmp_path):
    """The issue's job: no crash, exact running counts, and no key selector call beyond
    Flink's two per record (partitioner and keyed operator)."""
    calls_file = tmp_path / "calls"
    env = _env(target, parallelism)
    got = (
        env.from_collection(WORDS)
        .map(lambda w: (w, 1))
        .key_by(counting_key_selector(str(calls_file)))
        .sum(1)
        .execute_and_collect()
    )
    assert Counter(got) == running_counts(WORDS)
    calls = _calls(calls_file)
    assert len(WORDS) <= calls <= 2 * len(WORDS)


_CHILD = r"""
import json, sys
from collections import Counter
from raylink.shuffle import hotpath
from raylink.tests.runtime_jobs import make_env
words = [json.loads('"\\ud800"'), "a", "x\udfff\u00e4", "\U0001f600"] * 3
env = make_env("local", 2)
got = env.from_collection(words).map(lambda w: (w, 1)).key_by(lambda t: t[0]).sum(1).execute_and_collect()
finals = {}
for k, n in got:
    finals[k] = max(n, finals.get(k, 0))
print(json.dumps({"native": hotpath.NATIVE is not None, "finals": sorted(finals.items())}, ensure_ascii=True))
"""


@pytest.mark.parametrize("path", ["compiled", "pure"])
def test_surrogate_key_job_on_each_path_in_its_own_process(path):
    """Both per-record paths whatever this process runs: a child process per path (a crash
    would show as a signal, not an exception), exact final counts."""
    env = dict(os.environ, RAYLINK_PURE_PYTHON="1" if path == "pure" else "")
    out = subprocess.run(
        [sys.executable, "-c", _CHILD], env=env, capture_output=True, text=True, timeout=150, check=False
    )
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["native"] == (path == "compiled" and hotpath_built())
    words = [SURROGATE, "a", "x\udfff\u00e4", "\U0001f600"] * 3
    assert [tuple(kv) for kv in result["finals"]] == sorted(Counter(words).items())


def hotpath_built() -> bool:
    try:
        from raylink.shuffle import _hotpath  # noqa: F401
    except ImportError:
        return False
    return True


#: records the API accepts, of kinds that once failed or might: lone surrogates, ints beyond
#: 64 bits, NaN, bytes, None fields, nested tuples/lists/dicts
ODD_RECORDS = [
    (SURROGATE, 1),
    ("x\udfff", 2**100),
    ("n", float("nan")),
    (b"\xff\x00", -(2**70)),
    ("nested", (1, [SURROGATE, {"k": (None, b"b")}])),
    ("none", None),
    (2**80, "huge int key"),
    ((1, SURROGATE), "tuple key"),
]


def test_odd_records_travel_a_keyed_exchange_unchanged(target):
    """Every record arrives once, equal to what was sent (NaN compared by text), keyed by a
    field of each kind (surrogate str, huge int, bytes, tuple)."""
    env = _env(target, 2)
    got = env.from_collection(ODD_RECORDS).key_by(lambda r: r[0]).map(lambda r: r).execute_and_collect()
    assert sorted(map(repr, got)) == sorted(map(repr, ODD_RECORDS))


def failing_key_selector(record):
    if record == "boom":
        raise KeyError("no key in 'boom'")
    return record


def test_a_failing_key_selector_fails_the_job_with_one_worded_error(target):
    env = _env(target, 2)
    stream = env.from_collection(["a", "boom", "b"]).map(lambda w: w).name("Words")
    with pytest.raises(JobExecutionException) as info:
        list(stream.key_by(failing_key_selector).map(lambda w: w).execute_and_collect())
    message = str(info.value)
    assert "Words" in message and "Could not extract key from 'boom'" in message
    assert "no key in 'boom'" in _chain_text(info.value)


def test_a_none_key_fails_the_job_naming_the_operator(target):
    env = _env(target, 2)
    stream = env.from_collection([("a", 1), (None, 2)]).map(lambda r: r).name("Pairs")
    with pytest.raises(JobExecutionException) as info:
        list(stream.key_by(lambda r: r[0]).sum(1).execute_and_collect())
    message = str(info.value)
    assert "Pairs" in message and "Assigned key must not be null!" in message


def _chain_text(error: BaseException) -> str:
    """The text of an error and of its causes (a remote traceback's text included)."""
    parts = []
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        parts.append(f"{type(error).__name__}: {error}")
        error = error.__cause__ or error.__context__
    return "\n".join(parts)


def test_this_module_runs_on_the_path_the_environment_asks_for():
    forced = os.environ.get(hotpath.PURE_PYTHON_ENV, "") not in ("", "0")
    assert (hotpath.NATIVE is None) == (forced or not hotpath_built())
