"""bench/kafka.py keeps working: a tiny run against the session's broker prints every row of its
table, and every row moved exactly the records the bench produced (read back from the output
topics with ``read_committed``, or counted by the discarding sink)."""

from __future__ import annotations

import pytest

from raylink.bench import kafka as bench

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(300)]

RECORDS = 300


def test_the_kafka_bench_prints_every_row_and_each_row_moved_every_record(kafka_broker):
    table = bench.run(RECORDS, 1, "local", kafka_broker.bootstrap_servers)
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
