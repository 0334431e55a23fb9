"""bench/kafka.py keeps working: a tiny run against the session's broker, started as a user
starts it (``python bench/kafka.py``: its folder first on ``sys.path``), prints every row of its
table, and every row moved exactly the records the bench produced (read back from the output
topics with ``read_committed``, or counted by the discarding sink)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from raylink.bench import kafka as bench

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(300)]

RECORDS = 300


def test_the_kafka_bench_prints_every_row_and_each_row_moved_every_record(kafka_broker):
    script = os.path.join(os.path.dirname(os.path.abspath(bench.__file__)), "kafka.py")
    args = ["--records", str(RECORDS), "--repeat", "1", "--bootstrap-servers", kafka_broker.bootstrap_servers]
    done = subprocess.run([sys.executable, script, *args], capture_output=True, text=True, timeout=280)
    assert done.returncode == 0, done.stderr[-3000:]
    table = done.stdout.strip()
    lines = table.splitlines()
    rows = bench.row_keys()
    words = RECORDS // bench.WORDS_PER_LINE * bench.WORDS_PER_LINE
    for _, label, _ in rows:
        matching = [line for line in lines if line.startswith(label)]
        assert len(matching) == 1, (label, table)
        count = int(matching[0][len(label) :].split()[0].replace(",", ""))
        expected = words if "count" in label else RECORDS
        assert count == expected, (label, table)
    assert len(lines) == 2 + len(rows)
