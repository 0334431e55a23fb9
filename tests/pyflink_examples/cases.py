"""PyFlink 2.3's DataStream examples (``pyflink/examples/datastream`` in the ``apache-flink``
wheel) as test cases: which ones run here, with which arguments, and how their output
is compared.

The programs are never copied into this repository: :func:`pyflink_examples_dir` takes them
from the ``apache-flink`` wheel itself (2.8 MB, fetched once with ``pip download --no-deps``
into a cache folder; only the example files are unpacked; no JVM, no PyFlink install). The
suite migrates them with ``raylink migrate`` into a temporary folder and runs them there.
What PyFlink printed for each case is recorded in ``expected/<name>.txt``;
``scripts/pyflink_oracle.py`` runs the cases under a live PyFlink (a venv with the whole
``apache-flink`` and Java) to check those recordings or record them again.

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
import tempfile
import zipfile
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

_KAFKA = "runs against the session's Kafka broker in tests/test_kafka_examples.py (its reader never ends)"

#: the examples left out here, and why
EXCLUDED = {
    "asyncio/remote_model_inference.py": "Table API source (datagen through StreamTableEnvironment)",
    "streaming_word_count.py": "Table API source (datagen through StreamTableEnvironment)",
    "connectors/elasticsearch.py": "needs an Elasticsearch cluster",
    "connectors/kafka_avro_format.py": _KAFKA,
    "connectors/kafka_bytearray_format.py": _KAFKA,
    "connectors/kafka_csv_format.py": _KAFKA,
    "connectors/kafka_json_format.py": _KAFKA,
    "connectors/kafka_row_field_extractor_example.py": _KAFKA,
    "connectors/pulsar.py": "needs a Pulsar broker",
}

#: log lines PyFlink and Beam print at import when a program logs INFO to stdout
_NOISE = (
    re.compile(r"^Using Any for unsupported type: "),
    re.compile(r"^No module named google\.cloud\.bigquery_storage_v1\. "),
    re.compile(r"^PYFLINK_CYTHON_ENABLED: "),
)
_SUBTASK_PREFIX = re.compile(r"^(?:[^\s>]*:)?\d+> ")


# -- the example programs -------------------------------------------------------------------------
#: the apache-flink release the cases and the recordings are from
PYFLINK_VERSION = "2.3.0"
_EXAMPLES = "pyflink/examples/datastream/"


def examples_cache_dir() -> str:
    """Where the examples of the wheel are unpacked (``$RAYLINK_PYFLINK_EXAMPLES_CACHE``, else
    ``$XDG_CACHE_HOME/raylink`` or ``~/.cache/raylink``)."""
    base = os.environ.get("RAYLINK_PYFLINK_EXAMPLES_CACHE")
    if not base:
        base = os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "raylink")
    return os.path.join(base, f"apache-flink-{PYFLINK_VERSION}-examples")


def pyflink_examples_dir() -> str:
    """``pyflink/examples/datastream`` of the apache-flink wheel, unpacked from the wheel the
    first time (``pip download --no-deps`` of the pinned release; one wheel of it, whatever
    this machine's platform: only its ``.py`` examples are read). Raises ``RuntimeError``
    with pip's output when the wheel cannot be had."""
    target = os.path.join(examples_cache_dir(), "datastream")
    if os.path.isdir(target):
        return target
    os.makedirs(examples_cache_dir(), exist_ok=True)
    with tempfile.TemporaryDirectory(dir=examples_cache_dir()) as tmp:
        pip = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:"]
        pip += ["--platform", "manylinux2014_x86_64", "--python-version", "3.11", "--dest", tmp]
        proc = subprocess.run([*pip, f"apache-flink=={PYFLINK_VERSION}"], capture_output=True, text=True, timeout=600)
        wheels = glob.glob(os.path.join(tmp, "apache_flink-*.whl"))
        if proc.returncode != 0 or not wheels:
            raise RuntimeError(
                f"could not download the apache-flink {PYFLINK_VERSION} wheel for its example programs "
                f"(exit {proc.returncode}):\n{proc.stderr[-3000:]}"
            )
        staged = os.path.join(tmp, "datastream")
        with zipfile.ZipFile(wheels[0]) as wheel:
            for name in wheel.namelist():
                if name.startswith(_EXAMPLES) and name.endswith(".py"):
                    path = os.path.join(staged, *name[len(_EXAMPLES) :].split("/"))
                    os.makedirs(os.path.dirname(path), exist_ok=True)
                    with wheel.open(name) as src, open(path, "wb") as dst:
                        dst.write(src.read())
        try:
            os.rename(staged, target)  # atomic: a concurrent run sees all of it or nothing
        except OSError:
            if not os.path.isdir(target):
                raise
    return target


def example_programs(folder: str) -> set:
    """The example programs under ``folder`` (paths relative to it)."""
    found = set()
    for root, _dirs, files in os.walk(folder):
        for name in files:
            if name.endswith(".py") and name != "__init__.py":
                found.add(os.path.relpath(os.path.join(root, name), folder))
    return found


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


def read_expected(case: ExampleCase) -> Optional[str]:
    try:
        with open(case.expected_path()) as f:
            return f.read()
    except FileNotFoundError:
        return None
