"""PyFlink 2.3's DataStream examples (``pyflink/examples/datastream`` in the ``apache-flink``
wheel) as test cases: which ones run here, with which arguments, and how their output
is compared.

The programs are never copied into this repository: they are read from an installed
wheel (an importable ``pyflink`` or the venv in ``$RAYLINK_PYFLINK_VENV``, default
``/tmp/pyflink-venv``), migrated with ``raylink migrate`` into a temporary folder and
run there. What PyFlink printed for each case is recorded in ``expected/<name>.txt``
(``record.py`` re-records it from a live PyFlink).

Output comparison: the lines PyFlink's and Beam's loggers print at import (the programs
point ``logging`` at stdout) are dropped; an ``ordered`` case (a parallelism-1 program)
compares line by line; otherwise the ``N> `` subtask prefixes are dropped and the lines
sorted, since which subtask prints a record (and the interleaving) differs from run to
run in Flink too. A case with an output folder compares the sorted lines of every
finished part file written there instead of stdout.
"""

from __future__ import annotations

import glob
import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass, field
from typing import Optional, Sequence, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
EXPECTED_DIR = os.path.join(HERE, "expected")

#: the parallelism PyFlink's local environment had when the outputs were recorded (its
#: default is the number of cores); raylink runs the examples with the same default
RECORDED_PARALLELISM = 2

#: the input file of the ``--input`` cases: our own text, written by the test
INPUT_LINES = (
    "the quick brown fox jumps over the lazy dog",
    "a stream is a table that keeps changing",
    "the dog sleeps and the fox runs",
    "",
    "state and time make a stream processor",
)


@dataclass(frozen=True)
class ExampleCase:
    """One run of one example program."""

    name: str  # expected/<name>.txt and the test id
    path: str  # relative to pyflink/examples/datastream
    args: Tuple[str, ...] = ()  # "{input}" / "{output}" are replaced by paths in the run's folder
    ordered: bool = True  # compare line by line (else: without subtask prefixes, sorted)
    output_dir: bool = False  # compare the files written under {output}, not stdout
    xfail: Optional[str] = None  # the raylink feature still missing, when the case cannot pass yet

    def expected_path(self) -> str:
        return os.path.join(EXPECTED_DIR, self.name + ".txt")


#: every example that needs neither a message broker nor the Table API, and variants of
#: them reading/writing files
CASES: Tuple[ExampleCase, ...] = (
    ExampleCase("basic_operations", "basic_operations.py"),
    ExampleCase("process_json_data", "process_json_data.py", ordered=False),
    ExampleCase("state_access", "state_access.py", ordered=False),
    ExampleCase("event_time_timer", "event_time_timer.py", ordered=False),
    ExampleCase("word_count", "word_count.py"),
    ExampleCase("word_count_input", "word_count.py", ("--input", "{input}")),
    ExampleCase("word_count_output", "word_count.py", ("--output", "{output}"), output_dir=True),
    ExampleCase("tumbling_count_window", "windowing/tumbling_count_window.py"),
    ExampleCase(
        "tumbling_count_window_output", "windowing/tumbling_count_window.py", ("--output", "{output}"), output_dir=True
    ),
    ExampleCase("tumbling_time_window", "windowing/tumbling_time_window.py"),
    ExampleCase("sliding_time_window", "windowing/sliding_time_window.py"),
    ExampleCase("session_with_gap_window", "windowing/session_with_gap_window.py"),
    ExampleCase("session_with_dynamic_gap_window", "windowing/session_with_dynamic_gap_window.py"),
)

#: the examples left out, and why
EXCLUDED = {
    "asyncio/remote_model_inference.py": "Table API source (datagen through StreamTableEnvironment)",
    "streaming_word_count.py": "Table API source (datagen through StreamTableEnvironment)",
    "connectors/elasticsearch.py": "needs an Elasticsearch cluster",
    "connectors/kafka_avro_format.py": "needs a Kafka broker",
    "connectors/kafka_bytearray_format.py": "needs a Kafka broker",
    "connectors/kafka_csv_format.py": "needs a Kafka broker",
    "connectors/kafka_json_format.py": "needs a Kafka broker",
    "connectors/kafka_row_field_extractor_example.py": "needs a Kafka broker",
    "connectors/pulsar.py": "needs a Pulsar broker",
}

#: log lines PyFlink and Beam print at import when a program logs INFO to stdout
_NOISE = (
    re.compile(r"^Using Any for unsupported type: "),
    re.compile(r"^No module named google\.cloud\.bigquery_storage_v1\. "),
    re.compile(r"^PYFLINK_CYTHON_ENABLED: "),
)
_SUBTASK_PREFIX = re.compile(r"^(?:[^\s>]*:)?\d+> ")


# -- finding PyFlink -------------------------------------------------------------------------------
def pyflink_venv() -> str:
    return os.environ.get("RAYLINK_PYFLINK_VENV", "/tmp/pyflink-venv")


def pyflink_python() -> Optional[str]:
    """A Python interpreter that can run PyFlink programs (a venv with apache-flink, or this
    interpreter when it imports pyflink), or None."""
    venv_python = os.path.join(pyflink_venv(), "bin", "python")
    if glob.glob(os.path.join(pyflink_venv(), "lib", "python*", "site-packages", "pyflink", "__init__.py")):
        return venv_python
    try:
        import pyflink  # noqa: F401
    except ImportError:
        return None
    return sys.executable


def pyflink_examples_dir() -> Optional[str]:
    """``pyflink/examples/datastream`` of the installed wheel, or None."""
    found = glob.glob(
        os.path.join(pyflink_venv(), "lib", "python*", "site-packages", "pyflink", "examples", "datastream")
    )
    if found:
        return found[0]
    try:
        import pyflink
    except ImportError:
        return None
    path = os.path.join(os.path.dirname(pyflink.__file__), "examples", "datastream")
    return path if os.path.isdir(path) else None


# -- running a case ----------------------------------------------------------------------------------
@dataclass
class Run:
    """What one run of a case produced."""

    returncode: int
    stdout: str
    stderr: str
    output: str = ""  # normalized, what is compared
    files: list = field(default_factory=list)


def normalize(text: str, ordered: bool) -> str:
    lines = [line for line in text.splitlines() if not any(p.match(line) for p in _NOISE)]
    if not ordered:
        lines = sorted(_SUBTASK_PREFIX.sub("", line) for line in lines)
    return "".join(line + "\n" for line in lines)


def _finished_part_files(folder: str) -> list:
    """Flink's committed part files (in-progress / pending files start with a dot)."""
    found = []
    for root, dirs, files in os.walk(folder):
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        found.extend(os.path.join(root, f) for f in files if not f.startswith("."))
    return sorted(found)


def prepare(case: ExampleCase, workdir: str) -> Sequence[str]:
    """The program's arguments with ``{input}``/``{output}`` set to paths in ``workdir``
    (the input file is written there)."""
    input_path = os.path.join(workdir, "input.txt")
    output_path = os.path.join(workdir, "output")
    if any("{input}" in a for a in case.args):
        with open(input_path, "w") as f:
            f.write("\n".join(INPUT_LINES) + "\n")
    return [a.replace("{input}", input_path).replace("{output}", output_path) for a in case.args]


def run_program(case: ExampleCase, program: str, python: str, workdir: str, env: dict, timeout: float) -> Run:
    """Run ``program`` (the example, original or migrated) for ``case`` in ``workdir``."""
    args = prepare(case, workdir)
    proc = subprocess.run(
        [python, program, *args], cwd=workdir, env=env, capture_output=True, text=True, timeout=timeout
    )
    run = Run(proc.returncode, proc.stdout, proc.stderr)
    if case.output_dir:
        lines = []
        for path in _finished_part_files(os.path.join(workdir, "output")):
            run.files.append(os.path.relpath(path, workdir))
            with open(path) as f:
                lines.extend(f.read().splitlines())
        run.output = "".join(line + "\n" for line in sorted(lines))
    else:
        run.output = normalize(proc.stdout, case.ordered)
    return run


def raylink_env(target: str = "local") -> dict:
    """The environment a migrated example runs in: raylink's configuration through
    ``RAYLINK_CONF`` (the target and PyFlink's recorded default parallelism)."""
    env = dict(os.environ)
    env["RAYLINK_CONF"] = json.dumps({"execution.target": target, "parallelism.default": RECORDED_PARALLELISM})
    env["PYTHONUNBUFFERED"] = "1"
    return env


def pyflink_env(python: str) -> dict:
    """PyFlink starts its Python workers with ``python`` from PATH: put the venv first."""
    env = dict(os.environ)
    env.pop("RAYLINK_CONF", None)
    env["PATH"] = os.path.dirname(python) + os.pathsep + env.get("PATH", "")
    env["PYTHONUNBUFFERED"] = "1"
    return env


def read_expected(case: ExampleCase) -> Optional[str]:
    try:
        with open(case.expected_path()) as f:
            return f.read()
    except FileNotFoundError:
        return None
