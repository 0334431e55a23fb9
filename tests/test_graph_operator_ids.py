"""Deterministic operator ids (Flink's StreamGraphHasherV2): stable across
interpreter processes, fixed by a user uid, and a duplicate uid is refused."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from raylink.api import GraphError, OutputTag, StreamExecutionEnvironment, Types

pytestmark = pytest.mark.timeout(60)


def ident(x):
    return x


def keep(x):
    return True


def route(value, ctx):
    return [value]


def add(a, b):
    return a + b


PROGRAM = r"""
import json
from raylink.api import StreamExecutionEnvironment, OutputTag, Types
env = StreamExecutionEnvironment.get_execution_environment()
env.set_parallelism(2)
tag = OutputTag("late", Types.STRING())
words = env.from_collection(["to be", "or not"]).name("lines").flat_map(lambda l: l.split())
routed = words.process(lambda v, ctx: [v]).name("router")
routed.get_side_output(tag).rebalance().map(lambda x: x).uid("late-mapper").print()
numbers = env.from_sequence(1, 5).map(str).set_parallelism(3)
numbers.union(routed).key_by(lambda w: w).reduce(lambda a, b: a + b).print()
print(json.dumps(env.get_job_graph("stable").to_dict(), sort_keys=True))
"""


def _run_program(hash_seed: str) -> dict:
    env = dict(os.environ, PYTHONHASHSEED=hash_seed)
    proc = subprocess.run([sys.executable, "-c", PROGRAM], capture_output=True, text=True, env=env, timeout=50)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_operator_ids_stable_across_processes_with_different_hash_seeds():
    first = _run_program("1")
    second = _run_program("4242")
    assert first == second
    ids = [op["id"] for v in first["vertices"] for op in v["operators"]]
    assert len(ids) == 9 and len(set(ids)) == 9
    assert all(re.fullmatch(r"[0-9a-f]{32}", i) for i in ids)
    # the same program built in this process gives the same ids again
    local = {}
    exec(compile(PROGRAM.replace("print(json.dumps", "RESULT = (json.dumps"), "<program>", "exec"), local)
    assert json.loads(local["RESULT"]) == first


def _ids_by_name(env) -> dict:
    return {op["name"]: op["id"] for v in env.get_job_graph().to_dict()["vertices"] for op in v["operators"]}


def _program(extra_filter: bool, uid: str | None = "my-map", parallelism: int = 2):
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(parallelism)
    s = env.from_sequence(1, 10)
    if extra_filter:
        s = s.filter(keep).name("extra")
    m = s.map(ident).name("m")
    if uid:
        m.uid(uid)
    m.print()
    return env


def test_uid_fixes_operator_id_regardless_of_position():
    plain = _ids_by_name(_program(extra_filter=False))
    moved = _ids_by_name(_program(extra_filter=True))
    assert plain["m"] == moved["m"]
    # ... while the generated ids of the operators around it depend on the topology
    assert plain["Sink: Print to Std. Out"] != moved["Sink: Print to Std. Out"]
    # and a different uid gives a different id
    assert _ids_by_name(_program(False, uid="other"))["m"] != plain["m"]


def test_uid_id_independent_of_parallelism_and_chaining():
    base = _ids_by_name(_program(False))["m"]
    assert _ids_by_name(_program(False, parallelism=3))["m"] == base
    env = _program(False)
    env.disable_operator_chaining()
    assert _ids_by_name(env)["m"] == base


def test_generated_ids_depend_on_position_not_on_run():
    a = _ids_by_name(_program(False, uid=None))
    b = _ids_by_name(_program(False, uid=None))
    c = _ids_by_name(_program(True, uid=None))
    assert a == b
    assert a["m"] != c["m"]


def test_generated_ids_depend_on_chaining():
    chained = _ids_by_name(_program(False, uid=None))
    env = _program(False, uid=None)
    env.disable_operator_chaining()
    unchained = _ids_by_name(env)
    # a node's hash includes its chainable outputs (StreamGraphHasherV2: the number of chainable outputs)
    assert chained["Source: Sequence Source"] != unchained["Source: Sequence Source"]


def test_job_vertex_id_is_head_operator_id_and_ids_unique():
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    tag = OutputTag("x", Types.INT())
    p = env.from_sequence(1, 10).process(route)
    p.get_side_output(tag).key_by(ident).reduce(add).print()
    p.rebalance().map(ident).print()
    d = env.get_job_graph().to_dict()
    assert all(v["id"] == v["operators"][0]["id"] for v in d["vertices"])
    ids = [op["id"] for v in d["vertices"] for op in v["operators"]]
    assert len(ids) == len(set(ids)) == len(env.get_stream_graph().nodes)
    data_sets = [e["data_set"] for e in d["edges"]]
    assert len(data_sets) == len(set(data_sets)) == 2


def test_duplicate_uid_raises():
    env = StreamExecutionEnvironment.get_execution_environment()
    s = env.from_sequence(1, 10)
    s.map(ident).uid("dup").print()
    s.filter(keep).uid("dup").print()
    with pytest.raises(GraphError, match=r"Hash collision on user-specified ID 'dup'"):
        env.get_job_graph()


def test_uid_on_source_and_sink():
    env = StreamExecutionEnvironment.get_execution_environment()
    env.from_sequence(1, 10).uid("src").map(ident).print().uid("sink")
    ids = _ids_by_name(env)
    env2 = StreamExecutionEnvironment.get_execution_environment()
    env2.from_sequence(1, 10).uid("src").filter(keep).map(ident).print().uid("sink")
    ids2 = _ids_by_name(env2)
    assert ids["Source: Sequence Source"] == ids2["Source: Sequence Source"]
    assert ids["Sink: Print to Std. Out"] == ids2["Sink: Print to Std. Out"]
    assert ids["Map"] != ids2["Map"]
