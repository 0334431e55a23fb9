"""bench/nexmark.py keeps working: a tiny run prints a row per query with every column, and each
query's job output (read back at p=2) equals its plain loop's ("equal: yes"); the PyFlink and SQL
columns, not asked for, are skipped saying why. No timing is asserted."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import SimpleNamespace

import pytest

pytestmark = pytest.mark.timeout(300)

QUERIES = ["q0", "q4", "q5", "q7", "q11", "q19"]


def _bench():
    path = Path(__file__).resolve().parents[1] / "bench" / "nexmark.py"  # a script beside the package
    spec = importlib.util.spec_from_file_location("raylink_bench_nexmark_script", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_nexmark_bench_prints_a_row_per_query_whose_job_equals_its_loop():
    table = _bench().run(800, QUERIES, repeat=1, rate=100, target="local", pyflink_python="")
    lines = table.splitlines()
    header = next(line for line in lines if line.startswith("query"))
    for column in ("loop ev/s", "p=1 run", "p=1 wall", "p=2 run", "p=2 wall", "PyFlink p=2", "SQL wall", "equal"):
        assert column in header, (column, table)
    for query in QUERIES:
        rows = [line.split() for line in lines if line.split()[:1] == [query]]
        assert len(rows) == 1, (query, table)
        cells = rows[0]
        assert len(cells) == 1 + 1 + 8 + 3 + 1 + 2, (query, table)
        assert cells[-1] == "yes" and int(cells[-2].replace(",", "")) > 0, (query, table)
    assert "PyFlink column skipped: not asked for" in table
    assert "Flink SQL column skipped" in table


def test_an_unknown_query_is_refused_naming_it(capsys):
    with pytest.raises(SystemExit):
        _bench().main(["--queries", "q0,q99"])
    assert "q99" in capsys.readouterr().err


def test_a_pyflink_query_that_fails_is_named_and_the_others_keep_their_times(tmp_path):
    # the PyFlink venv's python as the bench calls it: its run prints the failed queries, then the times
    python = tmp_path / "python"
    python.write_text(
        "#!/bin/sh\n"
        'echo \'{"failed": {"q5": "Py4JJavaError: job failed ... Caused by: boom"}}\'\n'
        "echo '{\"q0\": [1.5, 2.0]}'\n"
    )
    python.chmod(0o755)
    times, reason = _bench().pyflink_times(str(python), "events.pickle", SimpleNamespace(events=10), ["q0", "q5"], 2)
    assert times == {"q0": (1.5, 2.0)}
    assert reason == "q5 failed: Py4JJavaError: job failed ... Caused by: boom"
