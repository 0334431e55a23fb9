"""StreamExecutionEnvironment and Configuration: Flink key names, defaults, settings that
reach the graphs, and the public import surface."""

from __future__ import annotations

import subprocess
import sys

import pytest

from raylink.api import Configuration, DataStream, DataStreamSink, StreamExecutionEnvironment

pytestmark = pytest.mark.timeout(60)


def ident(x):
    return x


def test_get_execution_environment_returns_a_new_env_per_call():
    a = StreamExecutionEnvironment.get_execution_environment()
    b = StreamExecutionEnvironment.get_execution_environment()
    assert a is not b
    a.set_parallelism(3)
    a.from_sequence(1, 2).map(ident)
    assert b.get_parallelism() == 1
    assert b.transformations == [] and len(a.transformations) == 1


def test_defaults():
    env = StreamExecutionEnvironment.get_execution_environment()
    assert env.get_parallelism() == 1
    assert env.get_max_parallelism() == -1
    assert env.is_chaining_enabled() is True
    assert env.get_buffer_timeout() == 100
    env.from_sequence(1, 2).map(ident).print()
    assert env.get_job_graph().job_name == "raylink job"


def test_transformation_ids_count_from_one_and_virtual_ones_are_not_registered():
    env = StreamExecutionEnvironment.get_execution_environment()
    src = env.from_sequence(1, 2)
    m = src.rebalance().map(ident)
    sink = m.print()
    assert isinstance(m, DataStream) and isinstance(sink, DataStreamSink)
    assert [src.get_transformation().id, m.get_transformation().id, sink.get_transformation().id] == [1, 3, 4]
    assert [t.id for t in env.transformations] == [3, 4]


def test_parallelism_default_configures_env_and_operators():
    conf = Configuration().set_integer("parallelism.default", 3)
    env = StreamExecutionEnvironment.get_execution_environment(conf)
    assert env.get_parallelism() == 3
    env.from_sequence(1, 10).map(ident).print()
    assert [v["parallelism"] for v in env.get_job_graph().to_dict()["vertices"]] == [3]
    assert len(env.get_execution_graph().all_vertices()) == 3


def test_parallelism_default_as_string():
    conf = Configuration().set_string("parallelism.default", "4")
    assert StreamExecutionEnvironment.get_execution_environment(conf).get_parallelism() == 4


def test_configuration_keys_reach_the_graphs():
    conf = Configuration()
    conf.set_string("pipeline.name", "my job")
    conf.set_integer("pipeline.max-parallelism", 64)
    conf.set_boolean("pipeline.operator-chaining", False)
    conf.set_integer("execution.buffer-timeout", 5)
    env = StreamExecutionEnvironment.get_execution_environment(conf)
    assert not env.is_chaining_enabled()
    assert env.get_buffer_timeout() == 5
    env.from_sequence(1, 10).map(ident).print()
    job = env.get_job_graph()
    assert job.job_name == "my job"
    assert [v.max_parallelism for v in job.vertices.values()] == [64, 64, 64]
    assert all(c.buffer_timeout == 5 for v in job.vertices.values() for c in v.chain)
    assert job.config["pipeline.name"] == "my job"
    assert env.get_job_graph("explicit name").job_name == "explicit name"


def test_env_copies_its_configuration():
    conf = Configuration().set_integer("parallelism.default", 2)
    env = StreamExecutionEnvironment.get_execution_environment(conf)
    conf.set_integer("parallelism.default", 5)
    conf.set_string("pipeline.name", "changed")
    assert env.get_parallelism() == 2
    assert env.get_config().get_string("pipeline.name") == "raylink job"


def test_configuration_get_set():
    conf = Configuration()
    assert conf.key_set() == set()
    assert conf.get_integer("parallelism.default") == 1
    assert conf.get_string("execution.target") == "ray"
    assert conf.get_boolean("pipeline.operator-chaining") is True
    assert conf.get_integer("taskmanager.memory.segment-size") == 32 * 1024
    assert conf.get_integer("no.such.key", 7) == 7
    assert conf.get_string("no.such.key") is None
    assert conf.get_float("no.such.key", 0.5) == 0.5
    conf.set_string("a.b", "x").set_integer("c.d", 3).set_boolean("e.f", True).set_float("g.h", 1.5)
    assert (conf.get_string("a.b"), conf.get_integer("c.d"), conf.get_boolean("e.f"), conf.get_float("g.h")) == (
        "x",
        3,
        True,
        1.5,
    )
    assert conf.contains_key("a.b") and not conf.contains_key("parallelism.default")
    assert conf.to_dict() == {"a.b": "x", "c.d": "3", "e.f": "True", "g.h": "1.5"}
    assert conf.remove_config("a.b") is True and conf.remove_config("a.b") is False
    assert conf.key_set() == {"c.d", "e.f", "g.h"}
    conf.set_string("flag", "FALSE")
    assert conf.get_boolean("flag") is False
    other = Configuration().set_string("c.d", "9")
    assert conf.add_all(other).get_integer("c.d") == 9
    copy = Configuration(conf)
    copy.set_string("c.d", "1")
    assert conf.get_integer("c.d") == 9


def test_configuration_bad_values():
    conf = Configuration().set_string("parallelism.default", "many").set_string("flag", "yes")
    with pytest.raises(ValueError, match=r"'parallelism.default': 'many' is not an integer"):
        conf.get_integer("parallelism.default")
    with pytest.raises(ValueError, match=r"'flag': 'yes' is not a boolean"):
        conf.get_boolean("flag")
    with pytest.raises(ValueError, match="is not an integer"):
        StreamExecutionEnvironment.get_execution_environment(conf)


def test_unknown_execution_target():
    conf = Configuration().set_string("execution.target", "yarn")
    env = StreamExecutionEnvironment.get_execution_environment(conf)
    env.from_sequence(1, 2).print()
    with pytest.raises(ValueError, match=r"execution.target 'yarn' is not supported; use one of \['local', 'ray'\]"):
        env.execute()


def test_configuration_caller_default_for_unset_known_key():
    assert Configuration().get_integer("parallelism.default", 4) == 4


def test_env_max_parallelism_change_after_a_build_is_honoured():
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_max_parallelism(8)
    env.from_sequence(1, 10).map(ident).print()
    assert [v["max_parallelism"] for v in env.get_job_graph().to_dict()["vertices"]] == [8]
    env.set_max_parallelism(16)
    assert [v["max_parallelism"] for v in env.get_job_graph().to_dict()["vertices"]] == [16]


def test_top_level_reexport_in_fresh_interpreter():
    code = (
        "import raylink\nprint(raylink.StreamExecutionEnvironment.__name__)\nprint(hasattr(raylink, 'no_such_name'))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=50)
    assert proc.returncode == 0, proc.stderr[-300:]
    assert proc.stdout.split() == ["StreamExecutionEnvironment", "False"]
