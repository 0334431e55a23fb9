"""The PyFlink oracle of ``tests/test_pyflink_examples.py``: runs each example case under a live
PyFlink and checks that it still prints what ``tests/pyflink_examples/expected/`` recorded, or
records it again (``--record``). Kept out of the test suite: it needs the whole
``apache-flink`` install (measured here: 140 s to install, 844 MB with its dependencies) and a
JVM per program (13 cases: ~6 min on the 2-vCPU box), while the suite needs only the example
programs and these recordings.

    .venv/bin/python scripts/pyflink_oracle.py --setup           # once: the venv with apache-flink
    .venv/bin/python scripts/pyflink_oracle.py [NAME ...]        # compare with the recordings
    .venv/bin/python scripts/pyflink_oracle.py --record [NAME ...]

The PyFlink venv is ``$RAYLINK_PYFLINK_VENV`` (default ``/tmp/pyflink-venv``); PyFlink needs
Java 17 on PATH. Run it on a machine with ``RECORDED_PARALLELISM`` cores: PyFlink's local
default parallelism is the number of cores, so the parallel cases differ elsewhere. The
programs run are the venv's own ``pyflink/examples/datastream``, checked equal to the ones the
suite unpacks from the wheel.
"""

from __future__ import annotations

import argparse
import difflib
import filecmp
import glob
import os
import subprocess
import sys
import tempfile
import time
from typing import Optional

from raylink.tests.pyflink_examples.cases import (
    CASES,
    PYFLINK_VERSION,
    RECORDED_PARALLELISM,
    example_programs,
    pyflink_examples_dir,
    read_expected,
    run_program,
)


def pyflink_venv() -> str:
    return os.environ.get("RAYLINK_PYFLINK_VENV", "/tmp/pyflink-venv")


def venv_examples() -> Optional[str]:
    """``pyflink/examples/datastream`` in the PyFlink venv, or None when it has no PyFlink."""
    found = glob.glob(
        os.path.join(pyflink_venv(), "lib", "python*", "site-packages", "pyflink", "examples", "datastream")
    )
    return found[0] if found else None


def pyflink_env(python: str) -> dict:
    """PyFlink starts its Python workers with ``python`` from PATH: put the venv first."""
    env = dict(os.environ)
    env.pop("RAYLINK_CONF", None)
    env["PATH"] = os.path.dirname(python) + os.pathsep + env.get("PATH", "")
    env["PYTHONUNBUFFERED"] = "1"
    return env


def setup() -> int:
    venv = pyflink_venv()
    started = time.perf_counter()
    if not os.path.exists(os.path.join(venv, "bin", "python")):
        subprocess.run([sys.executable, "-m", "venv", venv], check=True)
    pip = [os.path.join(venv, "bin", "python"), "-m", "pip", "install", "--quiet", f"apache-flink=={PYFLINK_VERSION}"]
    code = subprocess.run(pip).returncode
    print(f"{venv}: apache-flink {PYFLINK_VERSION} in {time.perf_counter() - started:.0f} s", file=sys.stderr)
    return code


def same_programs(ours: str, theirs: str) -> list:
    """Example programs that differ between the suite's copy and the venv's."""
    programs = example_programs(ours) | example_programs(theirs)
    return sorted(
        p
        for p in programs
        if not (
            os.path.exists(os.path.join(ours, p))
            and os.path.exists(os.path.join(theirs, p))
            and filecmp.cmp(os.path.join(ours, p), os.path.join(theirs, p), shallow=False)
        )
    )


def main(argv: Optional[list] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", help="cases to run (default: all)")
    parser.add_argument("--record", action="store_true", help="write the outputs into the recordings")
    parser.add_argument("--setup", action="store_true", help=f"install apache-flink {PYFLINK_VERSION} into the venv")
    args = parser.parse_args(argv)
    if args.setup:
        return setup()
    examples = venv_examples()
    if examples is None:
        print(f"no PyFlink in {pyflink_venv()} (run with --setup, or set RAYLINK_PYFLINK_VENV)", file=sys.stderr)
        return 2
    python = os.path.join(pyflink_venv(), "bin", "python")
    differ = same_programs(pyflink_examples_dir(), examples)
    if differ:
        print(f"the venv's examples are not apache-flink {PYFLINK_VERSION}'s: {', '.join(differ)}", file=sys.stderr)
        return 2
    if (os.cpu_count() or 1) != RECORDED_PARALLELISM:
        print(f"warning: {os.cpu_count()} cores, the recordings assume {RECORDED_PARALLELISM}", file=sys.stderr)
    unknown = set(args.names) - {c.name for c in CASES}
    if unknown:
        parser.error(f"no such case: {', '.join(sorted(unknown))}")
    status = 0
    for case in CASES:
        if args.names and case.name not in args.names:
            continue
        started = time.perf_counter()
        with tempfile.TemporaryDirectory(prefix=f"pyflink-{case.name}-") as workdir:
            run = run_program(
                case, os.path.join(examples, case.path), python, workdir, pyflink_env(python), timeout=900
            )
        took = f"{time.perf_counter() - started:.0f} s"
        if run.returncode != 0:
            print(f"{case.name}: PyFlink exited with {run.returncode} ({took})\n{run.stderr[-3000:]}", file=sys.stderr)
            status = 1
            continue
        expected = read_expected(case)
        if args.record:
            with open(case.expected_path(), "w") as f:
                f.write(run.output)
            print(f"{case.name}: {len(run.output.splitlines())} lines recorded ({took})")
        elif run.output == expected:
            print(f"{case.name}: PyFlink prints the recorded output ({took})")
        else:
            status = 1
            diff = difflib.unified_diff(
                (expected or "").splitlines(True), run.output.splitlines(True), "recorded", "PyFlink"
            )
            print(f"{case.name}: PyFlink's output differs from the recording ({took})\n{''.join(diff)}")
    return status


if __name__ == "__main__":
    sys.exit(main())
