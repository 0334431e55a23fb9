"""``KeyedStream.map_batches``: the function gets the gathered rows of one key at a time (Arrow
batches or pandas frames), that key current for its keyed state, locally and on Ray, on both
state backends. Every result is compared with plain Python computed here over the same records."""

from __future__ import annotations

from collections import defaultdict

import pyarrow as pa
import pytest

from raylink.api import Types, ValueStateDescriptor
from raylink.runtime.client.job_result import JobExecutionException
from raylink.tests.runtime_jobs import make_env

pytestmark = pytest.mark.timeout(180)

RECORDS = [(f"k{(i * 7 + i // 5) % 23}", (i * 31) % 17) for i in range(3000)]


class RunningTotals:
    """Per batch: ``(key, rows, sum of values, the key's running sum after it)``; the running sum
    is keyed state. Fails the job if a batch holds more than one key."""

    def __init__(self, pandas: bool = False) -> None:
        self.pandas = pandas

    def open(self, runtime_context):
        self.total = runtime_context.get_state(ValueStateDescriptor("total", Types.LONG()))

    def map_batches(self, batch):
        if self.pandas:
            keys, values = list(batch["f0"]), [int(v) for v in batch["f1"]]
        else:
            keys, values = batch.column("f0").to_pylist(), batch.column("f1").to_pylist()
        if len(set(keys)) != 1:
            raise AssertionError(f"a batch of keys {sorted(set(keys))}")
        total = (self.total.value() or 0) + sum(values)
        self.total.update(total)
        out = pa.RecordBatch.from_arrays(
            [pa.array([keys[0]]), pa.array([len(values)]), pa.array([sum(values)]), pa.array([total])],
            names=["key", "rows", "sum", "total"],
        )
        return out.to_pandas() if self.pandas else out


def check(results):
    """Per key: the batches' rows and sums add up to the key's records, and the running totals
    are the prefix sums of the batch sums in order (state carried from batch to batch)."""
    expected_rows, expected_sum = defaultdict(int), defaultdict(int)
    for key, value in RECORDS:
        expected_rows[key] += 1
        expected_sum[key] += value
    per_key = defaultdict(list)
    for key, rows, batch_sum, total in results:
        per_key[key].append((rows, batch_sum, total))
    assert set(per_key) == set(expected_rows)
    for key, batches in per_key.items():
        assert sum(r for r, _, _ in batches) == expected_rows[key]
        running = 0
        for _, batch_sum, total in batches:
            running += batch_sum
            assert total == running
        assert running == expected_sum[key]


@pytest.mark.parametrize("batch_format", ["pyarrow", "pandas"])
def test_keyed_map_batches_gets_one_key_per_batch_with_that_keys_state(target, state_backend, batch_format):
    env = make_env(target, 2)
    stream = (
        env.from_collection(RECORDS)
        .key_by(lambda r: r[0])
        .map_batches(RunningTotals(pandas=batch_format == "pandas"), batch_format=batch_format, batch_size=64)
    )
    with stream.execute_and_collect() as results:
        out = list(results)
    check(out)
    # rows were gathered into batches of several rows of a key (not one call per row)
    assert len(out) < len(RECORDS) / 2


def test_keyed_map_batches_refuses_a_null_key():
    env = make_env("local", 1)
    env.from_collection(RECORDS[:10]).key_by(lambda r: None).map_batches(RunningTotals()).add_sink(print)
    with pytest.raises(JobExecutionException, match="Assigned key must not be null"):
        env.execute("null key")
