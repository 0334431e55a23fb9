"""PyFlink 2.3's own DataStream examples, migrated with ``raylink migrate`` and run on the
local target, print what PyFlink prints (``tests/pyflink_examples``: the cases, how output
is compared, and the recorded PyFlink output).

The programs come from the installed ``apache-flink`` wheel (``$RAYLINK_PYFLINK_VENV``,
default ``/tmp/pyflink-venv``, or an importable ``pyflink``); without it these tests are
skipped — PyFlink's code is not part of this repository. When PyFlink can run here, the
``slow`` tests also check that it still prints the recorded output.
"""

from __future__ import annotations

import os
import sys

import pytest

from raylink.migrate import main as migrate
from raylink.tests.pyflink_examples.cases import (
    CASES,
    EXCLUDED,
    pyflink_env,
    pyflink_examples_dir,
    pyflink_python,
    raylink_env,
    read_expected,
    run_program,
)

EXAMPLES = pyflink_examples_dir()
NO_WHEEL = (
    "the apache-flink 2.3 wheel is not installed (python3 -m venv /tmp/pyflink-venv && "
    "/tmp/pyflink-venv/bin/pip install apache-flink==2.3.0)"
)


def _params(cases):
    return [
        pytest.param(c, id=c.name, marks=[pytest.mark.xfail(strict=True, reason=c.xfail)] if c.xfail else [])
        for c in cases
    ]


@pytest.fixture(scope="module")
def migrated(tmp_path_factory):
    """The wheel's examples folder, migrated by ``raylink migrate -o``."""
    if EXAMPLES is None:
        pytest.skip(NO_WHEEL)
    out = tmp_path_factory.mktemp("migrated-examples")
    assert migrate(["-q", "-o", str(out), EXAMPLES]) == 0
    return out


def _diff(expected: str, got: str) -> str:
    import difflib

    return "".join(difflib.unified_diff(expected.splitlines(True), got.splitlines(True), "PyFlink", "raylink"))


@pytest.mark.timeout(300)
@pytest.mark.parametrize("case", _params(CASES))
def test_the_migrated_example_prints_what_pyflink_prints(case, migrated, tmp_path):
    expected = read_expected(case)
    assert expected is not None, f"no recorded output: python tests/pyflink_examples/record.py {case.name}"
    program = os.path.join(str(migrated), case.path)
    with open(program) as f:
        assert "pyflink" not in "".join(line for line in f if line.startswith(("import ", "from ")))
    run = run_program(case, program, sys.executable, str(tmp_path), raylink_env("local"), timeout=240)
    assert run.returncode == 0, f"exit {run.returncode}\n{run.stderr[-4000:]}"
    assert run.output == expected, _diff(expected, run.output) + "\n" + run.stderr[-2000:]


def test_every_example_of_the_wheel_is_a_case_or_excluded_with_a_reason():
    if EXAMPLES is None:
        pytest.skip(NO_WHEEL)
    found = set()
    for folder, _dirs, files in os.walk(EXAMPLES):
        for name in files:
            if name.endswith(".py") and name != "__init__.py":
                found.add(os.path.relpath(os.path.join(folder, name), EXAMPLES))
    assert found == {c.path for c in CASES} | set(EXCLUDED)


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.parametrize("case", [pytest.param(c, id=c.name) for c in CASES])
def test_pyflink_still_prints_the_recorded_output(case, tmp_path):
    python = pyflink_python()
    if python is None or EXAMPLES is None:
        pytest.skip(NO_WHEEL)
    run = run_program(case, os.path.join(EXAMPLES, case.path), python, str(tmp_path), pyflink_env(python), timeout=840)
    assert run.returncode == 0, run.stderr[-4000:]
    expected = read_expected(case)
    assert run.output == expected, _diff(expected, run.output)
