"""PyFlink 2.3's own DataStream examples, migrated with ``raylink migrate`` and run on the
local target, print what PyFlink prints (``tests/pyflink_examples``: the cases, how output
is compared, and the recorded PyFlink output).

The programs come from the ``apache-flink`` wheel (fetched once with ``pip download
--no-deps``, 2.8 MB, only its examples unpacked; PyFlink's code is not part of this
repository). No PyFlink runs here: the recordings in ``tests/pyflink_examples/expected`` are
what it printed, checked against (or recorded again from) a live PyFlink by
``scripts/pyflink_oracle.py`` outside the suite, since that needs the whole apache-flink
install (~850 MB with its dependencies) and a JVM per program.
"""

from __future__ import annotations

import os
import sys

import pytest

from raylink.migrate import main as migrate
from raylink.tests.pyflink_examples.cases import (
    CASES,
    EXCLUDED,
    example_programs,
    pyflink_examples_dir,
    raylink_env,
    read_expected,
    run_program,
)


def _params(cases):
    return [
        pytest.param(c, id=c.name, marks=[pytest.mark.xfail(strict=True, reason=c.xfail)] if c.xfail else [])
        for c in cases
    ]


@pytest.fixture(scope="module")
def examples():
    """The wheel's ``pyflink/examples/datastream`` folder (downloaded on first use; a failure
    to download fails the tests, it does not skip them)."""
    return pyflink_examples_dir()


@pytest.fixture(scope="module")
def migrated(examples, tmp_path_factory):
    """The wheel's examples folder, migrated by ``raylink migrate -o``."""
    out = tmp_path_factory.mktemp("migrated-examples")
    assert migrate(["-q", "-o", str(out), examples]) == 0
    return out


def _diff(expected: str, got: str) -> str:
    import difflib

    return "".join(difflib.unified_diff(expected.splitlines(True), got.splitlines(True), "PyFlink", "raylink"))


@pytest.mark.timeout(300)
@pytest.mark.parametrize("case", _params(CASES))
def test_the_migrated_example_prints_what_pyflink_prints(case, migrated, tmp_path):
    expected = read_expected(case)
    assert expected is not None, f"no recorded output: python scripts/pyflink_oracle.py --record {case.name}"
    program = os.path.join(str(migrated), case.path)
    with open(program) as f:
        assert "pyflink" not in "".join(line for line in f if line.startswith(("import ", "from ")))
    run = run_program(case, program, sys.executable, str(tmp_path), raylink_env("local"), timeout=240)
    assert run.returncode == 0, f"exit {run.returncode}\n{run.stderr[-4000:]}"
    assert run.output == expected, _diff(expected, run.output) + "\n" + run.stderr[-2000:]


def test_every_example_of_the_wheel_is_a_case_or_excluded_with_a_reason(examples):
    assert example_programs(examples) == {c.path for c in CASES} | set(EXCLUDED)


def test_every_case_has_a_recorded_pyflink_output():
    missing = [c.name for c in CASES if read_expected(c) is None]
    assert not missing, f"record them: python scripts/pyflink_oracle.py --record {' '.join(missing)}"
