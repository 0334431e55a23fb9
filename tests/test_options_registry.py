"""The options registry (``core/options.py``) is the one home of every configuration key:
the code reads no key it does not register, ``raylink config`` shows what it registers,
and the README's option table is the registry's (``raylink config --markdown``)."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Iterator, Optional

import pytest

from raylink.api import Configuration, StreamExecutionEnvironment
from raylink.api import options as registry
from raylink.api.options import (
    ExecutionOptions,
    IllegalConfigurationError,
    NettyShuffleEnvironmentOptions,
    SparkConnectorOptions,
    find_option,
    read_option,
)
from raylink.cli.config import markdown_table
from raylink.cli.main import main as cli_main

pytestmark = pytest.mark.timeout(60)

ROOT = Path(__file__).resolve().parents[1]
#: folders of the checkout that are not raylink's code (the tests may use any key they like)
NOT_CODE = {"tests", "examples", "scripts", "deploy", ".venv", ".git", "raylink.egg-info", "__pycache__"}
#: calls whose first argument is a configuration key (Configuration's and dict's accessors)
KEY_METHODS = {
    "get",
    "get_string",
    "get_integer",
    "get_boolean",
    "get_float",
    "get_long",
    "contains_key",
    "remove_config",
    "pop",
    "setdefault",
    "set_string",
    "set_integer",
    "set_boolean",
    "set_float",
}
WRITE_METHODS = {"set_string", "set_integer", "set_boolean", "set_float", "setdefault"}
#: a configuration key: dotted lower-case words (``taskmanager.numberOfTaskSlots`` has one capital)
KEY_SHAPE = re.compile(r"[a-z][A-Za-z0-9_-]*(\.[A-Za-z0-9_-]+)+\.?")
#: the first words of configuration keys: those raylink registers and the rest of Flink's (a key
#: elsewhere, e.g. an accumulator name ``loadtest.source``, is not a configuration key)
NAMESPACES = {option.key.split(".")[0] for option in registry.all_options()} | {
    "jobmanager",
    "taskmanager",
    "state",
    "execution",
    "pipeline",
    "restart-strategy",
    "metrics",
    "rest",
    "web",
    "high-availability",
    "cluster",
    "heartbeat",
    "blob",
    "slot",
    "security",
    "env",
    "table",
    "python",
    "io",
    "fs",
    "classloader",
    "scheduler",
    "slotmanager",
    "resourcemanager",
    "kubernetes",
    "yarn",
    "raylink",
}


#: keys of other systems' clients that share a first word with Flink's options: raylink hands them
#: to that client (a Kafka consumer's or producer's properties), never to its Configuration
FOREIGN_CLIENT_KEYS = {"client.id"}


def _module_strings(tree: ast.Module) -> dict[str, str]:
    """Module-level ``NAME = "text"`` constants (so ``conf.get(CONF_KEY)`` is resolved too)."""
    out = {}
    for node in tree.body:
        if (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name)
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)
        ):
            out[node.targets[0].id] = node.value.value
    return out


def _text(node: ast.AST, names: dict[str, str]) -> Optional[str]:
    """The string ``node`` evaluates to, when it is built from literals and module constants."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.Name):
        return names.get(node.id)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _text(node.left, names), _text(node.right, names)
        return None if left is None or right is None else left + right
    return None


def key_uses(source: str) -> Iterator[tuple[int, str, str]]:
    """``(line, key, how)`` for every configuration key ``source`` reads or writes by string:
    ``how`` is ``read`` or ``write``."""
    with warnings.catch_warnings():  # a module's own escape-sequence warnings are not ours to report
        warnings.simplefilter("ignore")
        tree = ast.parse(source)
    names = _module_strings(tree)

    def key_like(node: ast.AST) -> Optional[str]:
        text = _text(node, names)
        if text is None or not KEY_SHAPE.fullmatch(text) or text.split(".")[0] not in NAMESPACES:
            return None
        if text in FOREIGN_CLIENT_KEYS:
            return None
        return text

    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and node.args:
            func = node.func
            method = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
            if method in KEY_METHODS or method == "read_option":
                for arg in node.args[:2] if method == "read_option" else node.args[:1]:
                    key = key_like(arg)
                    if key is not None:
                        yield node.lineno, key, "write" if method in WRITE_METHODS else "read"
        elif isinstance(node, ast.Subscript):
            key = key_like(node.slice)
            if key is not None:
                yield node.lineno, key, "write" if isinstance(node.ctx, ast.Store) else "read"
        elif isinstance(node, ast.Compare) and any(isinstance(op, (ast.In, ast.NotIn)) for op in node.ops):
            key = key_like(node.left)
            if key is not None:
                yield node.lineno, key, "read"


def code_files() -> Iterator[Path]:
    for folder, dirs, files in os.walk(ROOT):
        dirs[:] = sorted(d for d in dirs if d not in NOT_CODE and not d.startswith("."))
        for name in sorted(files):
            if name.endswith(".py"):
                yield Path(folder) / name


def all_key_uses() -> list[tuple[str, int, str, str]]:
    uses = []
    for path in code_files():
        rel = path.relative_to(ROOT).as_posix()
        for line, key, how in key_uses(path.read_text(encoding="utf-8")):
            uses.append((rel, line, key, how))
    return uses


# -- every key the code uses is registered -------------------------------------------------------------
def test_the_scanner_finds_string_keys():
    source = r"""
KEY = "raylink.spark.executors"
PREFIX = "taskmanager.network.memory.buffer-debloat."

def f(conf, settings):
    conf.get("raylink.new-key", 3)
    settings["pipeline.name"] = "x"
    conf.get_integer(KEY)
    conf.get_boolean(PREFIX + "enabled")
    if "metrics.port" in settings:
        read_option(settings, "execution.target")
    conf.set_string("restart-strategy.type", "none")
    spark.conf.get("spark.sql.warehouse.dir")       # Spark's own key
    acc.setdefault("loadtest.source", [])           # an accumulator's name
    logging.getLogger("raylink.cli")                # a logger, not a key
    os.environ.get("RAY_ADDRESS")
"""
    assert sorted(key_uses(source)) == [
        (6, "raylink.new-key", "read"),
        (7, "pipeline.name", "write"),
        (8, "raylink.spark.executors", "read"),
        (9, "taskmanager.network.memory.buffer-debloat.enabled", "read"),
        (10, "metrics.port", "read"),
        (11, "execution.target", "read"),
        (12, "restart-strategy.type", "write"),
    ]
    assert find_option("raylink.new-key") is None  # so this use would fail the next test


def test_every_key_the_code_uses_is_registered():
    uses = all_key_uses()
    assert len({path for path, *_ in uses}) >= 3  # the scan sees the package (bench writes keys)
    unregistered = [f"{path}:{line}: {key!r}" for path, line, key, _ in uses if find_option(key) is None]
    assert unregistered == [], "configuration keys not registered in core/options.py:\n" + "\n".join(unregistered)


def test_the_package_reads_keys_only_through_their_options():
    """Reading ``conf.get_integer("x.y")`` / ``settings["x.y"]`` duplicates a key (and often its
    default) outside the registry; code reads ``conf.get(Option)`` / ``read_option(settings, Option)``."""
    reads = [
        f"{path}:{line}: {key!r}"
        for path, line, key, how in all_key_uses()
        if how == "read" and path != "core/options.py"
    ]
    assert reads == [], "read these through their ConfigOption:\n" + "\n".join(reads)


# -- the registry ---------------------------------------------------------------------------------------
def test_options_are_well_formed():
    seen = set()
    for option in registry.all_options():
        assert option.key not in seen, f"{option.key} registered twice"
        seen.add(option.key)
        assert option.type in ("int", "float", "bool", "str", "duration", "memory", "enum"), option.key
        assert option.description.strip(), f"{option.key} has no description"
        assert (option.type == "enum") == bool(option.choices), option.key
        if option.default is not None:  # the default is a value of the option's type that passes its check
            assert option.convert(option.default) == option.default, option.key
        for fallback in option.fallback_keys:
            assert find_option(fallback) is option
    assert len(seen) >= 50


def test_defaults_live_in_the_registry():
    conf = Configuration()
    assert conf.get_integer("taskmanager.network.numberOfBuffers") == 2048
    assert conf.get_integer("metrics.port") == -1  # the option's default, not the getter's 0
    assert conf.get_string("execution.checkpointing.dir") is None  # no default
    assert conf.get(ExecutionOptions.BUFFER_TIMEOUT) == 100
    assert (
        read_option(
            {"taskmanager.network.memory.buffer-debloat.target": "2 s"},
            NettyShuffleEnvironmentOptions.BUFFER_DEBLOAT_TARGET,
        )
        == 2000
    )
    assert read_option(None, NettyShuffleEnvironmentOptions.BUFFER_DEBLOAT_TARGET) == 1000


def test_prefix_options_cover_every_longer_key():
    assert find_option("raylink.spark.conf.spark.sql.shuffle.partitions") is SparkConnectorOptions.CONF
    assert find_option("raylink.spark.conf.") is None and find_option("raylink.spark.confx") is None


def test_spark_options_are_checked_where_read():
    conf = Configuration().set_string("raylink.spark.executors", "0")
    with pytest.raises(IllegalConfigurationError, match=r"'raylink.spark.executors': 0 is below the minimum 1"):
        conf.get(SparkConnectorOptions.EXECUTORS)


def test_environment_reads_typed_values_through_options():
    conf = (
        Configuration().set_string("execution.buffer-timeout", "1 s").set_string("pipeline.operator-chaining", "false")
    )
    env = StreamExecutionEnvironment.get_execution_environment(conf)
    assert env.get_buffer_timeout() == 1000
    env.from_collection([1, 2]).map(lambda x: x).print()
    assert len(env.get_job_graph().get_vertices_sorted_topologically_from_sources()) == 3  # not chained


# -- raylink config ------------------------------------------------------------------------------------
def run_config(capsys, *argv: str) -> tuple[int, str, str]:
    code = cli_main(["config", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_config_lists_every_option_with_type_and_default(capsys):
    code, out, err = run_config(capsys)
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert lines[0].split() == ["KEY", "TYPE", "DEFAULT", "DESCRIPTION"]
    rows = {line.split()[0]: line.split()[1:3] for line in lines[1:] if line.strip() and " " in line.strip()}
    for option in registry.all_options():
        assert option.display_key in rows, option.key
    assert rows["execution.buffer-timeout"] == ["duration", "100"]  # "100 ms" split on spaces
    assert rows["taskmanager.memory.segment-size"] == ["memory", "32kb"]
    assert rows["execution.target"] == ["enum", "ray"]
    line = next(x for x in lines if x.startswith("parallelism.default "))
    assert line.endswith("  Default parallelism of operators.")


def test_config_shows_one_option(capsys):
    code, out, err = run_config(capsys, "state.checkpoints.num-retained")
    assert (code, err) == (0, "")
    assert out.splitlines() == [
        "key:           execution.checkpointing.num-retained",
        "note:          state.checkpoints.num-retained is a fallback key of execution.checkpointing.num-retained",
        "type:          int",
        "default:       1",
        "group:         CheckpointingOptions",
        "fallback keys: state.checkpoints.num-retained",
        "description:   Completed checkpoints kept; older ones are deleted.",
    ]
    code, out, _ = run_config(capsys, "execution.shuffle-mode")
    assert "values:      pipelined, batch" in out.splitlines()


def test_config_unknown_key_exits_2_with_the_closest_key(capsys):
    code, out, err = run_config(capsys, "execution.bufer-timeout")
    assert (code, out) == (2, "")
    assert err == (
        "raylink config: unknown configuration key 'execution.bufer-timeout' "
        "(did you mean 'execution.buffer-timeout'?)\n"
    )
    code, out, err = run_config(capsys, "no.such.thing")
    assert (code, err) == (2, "raylink config: unknown configuration key 'no.such.thing'\n")


def test_config_markdown_is_the_readme_table(capsys):
    code, out, _ = run_config(capsys, "--markdown")
    assert code == 0 and out == markdown_table() + "\n"
    rows = [line for line in out.splitlines() if line.startswith("| `")]
    assert len(rows) == len(list(registry.all_options()))
    assert "| `raylink.spark.conf.<key>` | str | (none) |" in out
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    match = re.search(r"<!-- options:start[^>]*-->\n(.*?)\n<!-- options:end -->", readme, re.S)
    assert match, "README.md lost its option table markers"
    assert match.group(1) == markdown_table(), (
        "the README's option table differs from the registry: paste `raylink config --markdown` between the markers"
    )


def test_config_command_runs_without_ray():
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from raylink.cli.main import main; "
            "code = main(['config', 'parallelism.default']); "
            "assert 'ray' not in sys.modules, 'ray imported'; sys.exit(code)",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT.parent,
        timeout=50,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("key:         parallelism.default\n")
