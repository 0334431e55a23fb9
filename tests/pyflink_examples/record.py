"""Record what PyFlink 2.3 prints for each example case into ``expected/<name>.txt``.

    python tests/pyflink_examples/record.py [NAME ...]

Runs every case (or the named ones) under a live PyFlink (``$RAYLINK_PYFLINK_VENV``,
default ``/tmp/pyflink-venv``: ``python3 -m venv /tmp/pyflink-venv &&
/tmp/pyflink-venv/bin/pip install apache-flink==2.3.0``; Java 17) and writes the
normalized output. Run it on a machine with ``RECORDED_PARALLELISM`` cores (PyFlink's
local default parallelism is the number of cores) or the parallel cases differ.
"""

from __future__ import annotations

import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from raylink.tests.pyflink_examples.cases import (  # noqa: E402
    CASES,
    EXPECTED_DIR,
    RECORDED_PARALLELISM,
    pyflink_env,
    pyflink_examples_dir,
    pyflink_python,
    run_program,
)


def main(names: list) -> int:
    python, examples = pyflink_python(), pyflink_examples_dir()
    if python is None or examples is None:
        print("no PyFlink found (set RAYLINK_PYFLINK_VENV)", file=sys.stderr)
        return 2
    if (os.cpu_count() or 1) != RECORDED_PARALLELISM:
        print(f"warning: {os.cpu_count()} cores, the recordings assume {RECORDED_PARALLELISM}", file=sys.stderr)
    os.makedirs(EXPECTED_DIR, exist_ok=True)
    status = 0
    for case in CASES:
        if names and case.name not in names:
            continue
        with tempfile.TemporaryDirectory(prefix=f"pyflink-{case.name}-") as workdir:
            run = run_program(
                case, os.path.join(examples, case.path), python, workdir, pyflink_env(python), timeout=900
            )
        if run.returncode != 0:
            print(f"{case.name}: PyFlink exited with {run.returncode}\n{run.stderr[-3000:]}", file=sys.stderr)
            status = 1
            continue
        with open(case.expected_path(), "w") as f:
            f.write(run.output)
        print(f"{case.name}: {len(run.output.splitlines())} lines recorded", file=sys.stderr)
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
