"""Known keys with enumerated values refuse every other value (issue 28, item 5).

Each option of the registry that declares accepted values is fed a value outside them where
configuration enters -- ``Configuration``'s setters, a fallback key, ``RAYLINK_CONF``, the
CLI's ``--conf`` -- and at submission; each time the error names the key and the accepted
values. Good values, in any case as Flink parses enums, still work.
``state.backend.type: forst`` (not supported yet) fails clearly instead of running on the heap. No Ray.
"""

from __future__ import annotations

import json

import pytest

from raylink.api import Configuration, StreamExecutionEnvironment
from raylink.api.options import (
    CheckpointingOptions,
    ExecutionOptions,
    IllegalConfigurationError,
    RestartStrategyOptions,
    StateBackendOptions,
    all_options,
    check_enumerated_value,
    find_option,
    validate_enumerated_values,
)
from raylink.cli.conf import ConfError, build_conf, conf_from_environment
from raylink.cli.main import main as cli_main
from raylink.errors import RaylinkError

pytestmark = pytest.mark.timeout(60)

ENUMERATED = [option for option in all_options() if option.enumerated]
FORST = "configuration key 'state.backend.type': 'forst' is not supported yet; accepted: hashmap, rocksdb"


def _bad(option) -> str:
    return f"configuration key {option.key!r}: 'no-such-value' is not one of {', '.join(option.choices)}"


def test_the_keys_that_declare_accepted_values():
    assert {o.key: o.choices for o in ENUMERATED} == {
        "pipeline.closure-cleaner-level": ("none", "top_level", "recursive"),
        "execution.shuffle-mode": ("pipelined", "batch"),
        "execution.runtime-mode": ("streaming", "batch", "automatic"),
        "execution.checkpointing.mode": ("exactly_once", "at_least_once"),
        "state.backend.type": ("hashmap", "rocksdb"),
        "restart-strategy.type": (
            "none",
            "off",
            "disable",
            "fixed-delay",
            "fixeddelay",
            "exponential-delay",
            "exponentialdelay",
            "failure-rate",
            "failurerate",
        ),
        "raylink.task-placement": ("auto", "task", "slot"),
        "raylink.placement-strategy": ("spread", "pack"),
        "job.autoscaler.metrics.busy-time.aggregator": ("max", "avg", "min"),
        "raylink.progress": ("auto", "tty", "log", "off"),
        "high-availability.type": ("none", "filesystem"),
    }
    assert StateBackendOptions.STATE_BACKEND.unsupported == ("forst",)
    for option in all_options():  # a value is accepted or not supported yet, never both
        assert not set(option.unsupported) & set(option.choices), option.key
        assert not option.unsupported or option.type == "enum", option.key
    assert find_option("state.backend") is StateBackendOptions.STATE_BACKEND  # Flink's deprecated key


@pytest.mark.parametrize("option", ENUMERATED, ids=lambda o: o.key)
def test_a_bad_value_is_refused_where_it_is_set(option):
    conf = Configuration()
    with pytest.raises(IllegalConfigurationError) as caught:
        conf.set_string(option.key, "no-such-value")
    assert str(caught.value) == _bad(option)
    assert isinstance(caught.value, RaylinkError) and isinstance(caught.value, ValueError)
    assert not conf.contains_key(option.key)  # nothing was stored
    with pytest.raises(IllegalConfigurationError, match=f"^{_bad(option)}$"):
        conf.set(option, "no-such-value")
    with pytest.raises(IllegalConfigurationError, match=rf"^configuration key {option.key!r}: 7 is not one of "):
        conf.set_integer(option.key, 7)
    with pytest.raises(IllegalConfigurationError, match=rf"^configuration key {option.key!r}: True is not one of "):
        conf.set_boolean(option.key, True)


@pytest.mark.parametrize("option", ENUMERATED, ids=lambda o: o.key)
def test_accepted_values_work_in_any_case(option):
    for choice in option.choices:
        for given in (choice, choice.upper(), f" {choice.title()} "):
            conf = Configuration().set_string(option.key, given)
            assert conf.get(option) == choice
            assert conf.get_string(option.key) == given  # stored as given, as Flink keeps it
            validate_enumerated_values(conf)


@pytest.mark.parametrize("option", ENUMERATED, ids=lambda o: o.key)
def test_a_bad_value_in_raylink_conf_is_refused(option, monkeypatch):
    monkeypatch.setenv("RAYLINK_CONF", json.dumps({option.key: "no-such-value"}))
    with pytest.raises(IllegalConfigurationError) as caught:
        Configuration.from_environment()
    assert str(caught.value) == f"RAYLINK_CONF: {_bad(option)}"
    with pytest.raises(IllegalConfigurationError, match=f"^RAYLINK_CONF: {_bad(option)}$"):
        StreamExecutionEnvironment.get_execution_environment()
    with pytest.raises(ConfError, match=f"^RAYLINK_CONF: {_bad(option)}$"):  # the CLI's reading of it
        conf_from_environment()


@pytest.mark.parametrize("option", ENUMERATED, ids=lambda o: o.key)
def test_a_bad_value_on_the_command_line_is_refused(option):
    with pytest.raises(ConfError) as caught:
        build_conf(None, [f"{option.key}=no-such-value"])
    assert str(caught.value) == _bad(option)


def test_flink_s_spellings_of_the_enumerated_keys():
    conf = Configuration()
    for mode in ("STREAMING", "BATCH", "AUTOMATIC", "batch"):
        conf.set_string("execution.runtime-mode", mode)
    for mode in ("EXACTLY_ONCE", "AT_LEAST_ONCE"):
        assert conf.set_string("execution.checkpointing.mode", mode).get(CheckpointingOptions.CHECKPOINTING_MODE) == (
            mode.lower()
        )
    for kind in ("fixed-delay", "FixedDelay", "EXPONENTIAL-DELAY", "failure-rate", "none", "off", "disable"):
        conf.set_string("restart-strategy.type", kind)
    assert conf.set_string("state.backend.type", "HashMap").get(StateBackendOptions.STATE_BACKEND) == "hashmap"
    with pytest.raises(IllegalConfigurationError, match="'exactly-once' is not one of exactly_once, at_least_once"):
        conf.set_string("execution.checkpointing.mode", "exactly-once")  # Flink's enum names have underscores
    with pytest.raises(IllegalConfigurationError, match=r"'restart-strategy.type': 'fixed_delay' is not one of none, "):
        conf.set_string("restart-strategy.type", "fixed_delay")


def test_forst_is_refused_clearly_wherever_it_is_given(monkeypatch):
    for value in ("forst", "ForSt", " FORST "):
        with pytest.raises(IllegalConfigurationError) as caught:
            Configuration().set_string("state.backend.type", value)
        assert str(caught.value) == FORST.replace("'forst'", repr(value))
    with pytest.raises(IllegalConfigurationError) as caught:
        Configuration().set_string("state.backend", "forst")  # the fallback key, named as given
    assert str(caught.value) == (
        "configuration key 'state.backend' (a fallback key of 'state.backend.type'): 'forst' is not "
        "supported yet; accepted: hashmap, rocksdb"
    )
    with pytest.raises(IllegalConfigurationError, match="'nosuch' is not one of hashmap, rocksdb"):
        Configuration().set(StateBackendOptions.STATE_BACKEND, "nosuch")
    assert Configuration().set_string("state.backend.type", "RocksDB").get(StateBackendOptions.STATE_BACKEND) == (
        "rocksdb"
    )
    with pytest.raises(ConfError) as cli:
        build_conf(None, ["state.backend.type=forst"])
    assert str(cli.value) == FORST
    monkeypatch.setenv("RAYLINK_CONF", json.dumps({"state.backend.type": "forst"}))
    with pytest.raises(IllegalConfigurationError) as env:
        StreamExecutionEnvironment.get_execution_environment()
    assert str(env.value) == f"RAYLINK_CONF: {FORST}"


def test_raylink_run_with_forst_exits_2_naming_the_key(capsys):
    code = cli_main(["run", "--conf", "state.backend.type=forst", "examples/word_count.py"])
    out, err = capsys.readouterr()
    assert (code, out, err) == (2, "", f"raylink: {FORST}\n")


def test_a_value_that_bypassed_the_setters_is_refused_at_submission():
    """A configuration whose value never went through a setter (an older client's pickled
    Configuration): the job is not built, let alone run."""
    conf = Configuration().set_string("execution.target", "local")
    conf._data["state.backend.type"] = "forst"
    env = StreamExecutionEnvironment.get_execution_environment(conf)
    env.from_collection([1, 2, 3]).map(lambda x: x * 2).print()
    with pytest.raises(IllegalConfigurationError, match=f"^{FORST}$"):
        env.get_stream_graph()
    with pytest.raises(IllegalConfigurationError, match=f"^{FORST}$"):
        env.execute("never runs")
    with pytest.raises(IllegalConfigurationError, match=f"^{FORST}$"):
        validate_enumerated_values({"parallelism.default": "2", "state.backend.type": "forst"})
    validate_enumerated_values({"state.backend.type": "hashmap", "unknown.key": "anything", "parallelism.default": 0})


def test_other_keys_are_checked_where_they_are_read():
    """Only enumerated keys are refused on entry: unknown keys pass through, other types are
    converted (and range-checked) when read, as before."""
    conf = Configuration().set_string("no.such.key", "whatever").set_string("parallelism.default", "many")
    check_enumerated_value("raylink.spark.conf.spark.master", "anything")
    with pytest.raises(ValueError, match="'parallelism.default': 'many' is not an integer"):
        conf.get_integer("parallelism.default")


def test_execution_target_is_extensible_so_its_lookup_checks_it():
    """Installed packages may register executors (the raylink.executors entry points): a
    setter cannot know them all, so the lookup names the registered targets instead."""
    assert not ExecutionOptions.TARGET.enumerated
    conf = Configuration().set_string("execution.target", "yarn")
    env = StreamExecutionEnvironment.get_execution_environment(conf)
    env.from_sequence(1, 2).print()
    with pytest.raises(ValueError, match=r"^execution.target 'yarn' is not supported; use one of \['local', 'ray'\]"):
        env.execute()


def test_raylink_config_shows_accepted_and_not_yet_supported_values(capsys):
    assert cli_main(["config", "state.backend.type"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[:3] == [
        "key:               state.backend.type",
        "type:              enum",
        "values:            hashmap, rocksdb",
    ]
    assert "not supported yet: forst" in lines
    assert cli_main(["config", "restart-strategy.type"]) == 0
    assert (
        "values:        none, off, disable, fixed-delay, fixeddelay, exponential-delay, exponentialdelay, "
        "failure-rate, failurerate"
    ) in capsys.readouterr().out.splitlines()
    assert RestartStrategyOptions.RESTART_STRATEGY.unsupported == ()
