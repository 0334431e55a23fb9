"""Job configuration: ``--conf-file`` (YAML) and ``--conf key=value`` with Flink's key names,
handed to the program in RAYLINK_CONF and merged under explicit settings."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from raylink.api import Configuration, StreamExecutionEnvironment
from raylink.api.options import parse_duration_ms, parse_memory
from raylink.cli.conf import ConfError, build_conf

pytestmark = pytest.mark.timeout(60)

ROOT = Path(__file__).resolve().parents[1]

SHOW_CONF = """
import json
from raylink.api import Configuration, StreamExecutionEnvironment

env = StreamExecutionEnvironment.get_execution_environment()
conf = env.get_config()
print(json.dumps({
    "parallelism": env.get_parallelism(),
    "max_parallelism": env.get_max_parallelism(),
    "buffer_timeout": env.get_buffer_timeout(),
    "slots": conf.get_integer("taskmanager.numberOfTaskSlots"),
    "cpus": conf.get_float("taskmanager.cpu.cores"),
    "memory": conf.get_integer("taskmanager.memory.process.size"),
    "exclusive": conf.get_integer("taskmanager.network.memory.buffers-per-channel"),
    "floating": conf.get_integer("taskmanager.network.memory.floating-buffers-per-gate"),
}, sort_keys=True))
explicit = Configuration().set_integer("parallelism.default", 7)
print(StreamExecutionEnvironment.get_execution_environment(explicit).get_parallelism())
env.from_collection([1]).map(lambda x: x).print()
env.execute("show conf")
"""


def raylink(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAYLINK_")}
    return subprocess.run(
        [sys.executable, "-m", "raylink", *args], capture_output=True, text=True, cwd=cwd, timeout=50, env=env
    )


def test_memory_and_duration_units():
    assert parse_memory(1024) == 1024
    assert parse_memory("64kb") == 64 * 1024
    assert parse_memory("512 m") == 512 << 20
    assert parse_memory("2g") == 2 << 30
    assert parse_memory("1.5 gb") == 3 << 29
    assert parse_duration_ms(100) == 100
    assert parse_duration_ms("100 ms") == 100
    assert parse_duration_ms("2s") == 2000
    assert parse_duration_ms("1 min") == 60_000
    assert parse_duration_ms("-1") == -1
    for bad in ("lots", "5 parsecs", True):
        with pytest.raises(ValueError):
            parse_memory(bad)


def test_file_then_pairs_flat_and_nested(tmp_path):
    path = tmp_path / "job.yaml"
    path.write_text(
        "parallelism:\n  default: 2\ntaskmanager:\n  numberOfTaskSlots: 3\n  cpu.cores: 0.5\n"
        "  memory.process.size: 256m\nexecution.buffer-timeout: 20 ms\n"
    )
    conf, warnings = build_conf(
        str(path), ["parallelism.default=4", "pipeline.max-parallelism=64", "pipeline.operator-chaining=false"]
    )
    assert conf == {
        "parallelism.default": 4,
        "taskmanager.numberOfTaskSlots": 3,
        "taskmanager.cpu.cores": 0.5,
        "taskmanager.memory.process.size": 256 << 20,
        "execution.buffer-timeout": 20,
        "pipeline.max-parallelism": 64,
        "pipeline.operator-chaining": False,
    }
    assert warnings == []


def test_unknown_keys_pass_through_with_a_warning():
    conf, warnings = build_conf(None, ["my.option=abc", "my.number=3"])
    assert conf == {"my.option": "abc", "my.number": 3}
    assert warnings == [
        "raylink: warning: unknown configuration key 'my.option' (passed to the job unchanged)",
        "raylink: warning: unknown configuration key 'my.number' (passed to the job unchanged)",
    ]


@pytest.mark.parametrize(
    "pair, message",
    [
        ("parallelism.default=0", "configuration key 'parallelism.default': 0 is below the minimum 1"),
        ("parallelism.default=two", "configuration key 'parallelism.default': 'two' is not an integer"),
        (
            "execution.buffer-timeout=-5",
            "configuration key 'execution.buffer-timeout': -5 must be >= -1 (-1: flush only full buffers)",
        ),
        ("taskmanager.cpu.cores=0", "configuration key 'taskmanager.cpu.cores': 0 must be a number > 0"),
        (
            "pipeline.max-parallelism=40000",
            "configuration key 'pipeline.max-parallelism': 40000 must be -1 (derived) or between 1 and 32768",
        ),
        ("execution.target=yarn", "configuration key 'execution.target': 'yarn' is not one of ray, local"),
        ("novalue", "--conf expects key=value, got 'novalue'"),
    ],
)
def test_bad_values_are_rejected(pair, message):
    with pytest.raises(ConfError) as info:
        build_conf(None, [pair])
    assert str(info.value) == message


def test_environment_conf_under_explicit_settings(monkeypatch):
    monkeypatch.setenv("RAYLINK_CONF", json.dumps({"parallelism.default": 3, "execution.buffer-timeout": 5}))
    env = StreamExecutionEnvironment.get_execution_environment()
    assert (env.get_parallelism(), env.get_buffer_timeout()) == (3, 5)
    explicit = StreamExecutionEnvironment.get_execution_environment(
        Configuration().set_integer("parallelism.default", 2)
    )
    assert (explicit.get_parallelism(), explicit.get_buffer_timeout()) == (2, 5)
    monkeypatch.setenv("RAYLINK_CONF", "[1, 2]")
    with pytest.raises(ValueError, match="RAYLINK_CONF must be a JSON object, got list"):
        StreamExecutionEnvironment.get_execution_environment()
    monkeypatch.delenv("RAYLINK_CONF")
    assert StreamExecutionEnvironment.get_execution_environment().get_parallelism() == 1


def test_the_program_sees_the_cli_configuration(tmp_path):
    job = tmp_path / "show_conf.py"
    job.write_text(SHOW_CONF)
    conf_file = tmp_path / "job.yaml"
    conf_file.write_text(
        "execution.target: local\nparallelism.default: 2\ntaskmanager:\n  numberOfTaskSlots: 2\n"
        "  network.memory.buffers-per-channel: 4\n"
    )
    proc = raylink(
        "run",
        "--conf-file",
        str(conf_file),
        "--conf",
        "parallelism.default=3",
        "--conf",
        "execution.buffer-timeout=1s",
        "--conf",
        "pipeline.max-parallelism=256",
        "--conf",
        "taskmanager.cpu.cores=0.25",
        "--conf",
        "taskmanager.memory.process.size=1g",
        "--conf",
        "taskmanager.network.memory.floating-buffers-per-gate=16",
        str(job),
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert json.loads(lines[0]) == {
        "parallelism": 3,
        "max_parallelism": 256,
        "buffer_timeout": 1000,
        "slots": 2,
        "cpus": 0.25,
        "memory": 1 << 30,
        "exclusive": 4,
        "floating": 16,
    }
    assert lines[1] == "7"  # an explicit Configuration wins over the CLI's
    assert len(lines) == 3 and re.fullmatch(r"[123]> 1", lines[2]), lines  # the job ran with parallelism 3


def test_bad_configuration_exits_2(tmp_path):
    proc = raylink("run", "--conf", "taskmanager.numberOfTaskSlots=0", "examples/word_count.py")
    assert (proc.returncode, proc.stdout) == (2, "")
    assert proc.stderr == ("raylink: configuration key 'taskmanager.numberOfTaskSlots': 0 is below the minimum 1\n")
    proc = raylink("run", "--conf-file", str(tmp_path / "missing.yaml"), "examples/word_count.py")
    assert (proc.returncode, proc.stderr) == (2, f"raylink: no such configuration file: {tmp_path}/missing.yaml\n")
    bad = tmp_path / "list.yaml"
    bad.write_text("- parallelism.default\n")
    proc = raylink("run", "--conf-file", str(bad), "examples/word_count.py")
    assert (proc.returncode, proc.stderr) == (
        2,
        f"raylink: {bad} must hold a mapping of configuration keys, got list\n",
    )
    proc = raylink(
        "submit",
        "--conf",
        "execution.shuffle-mode=sideways",
        "--address",
        "http://127.0.0.1:1",
        "examples/word_count.py",
    )
    assert (proc.returncode, proc.stderr) == (
        2,
        "raylink: configuration key 'execution.shuffle-mode': 'sideways' is not one of pipelined, batch\n",
    )
