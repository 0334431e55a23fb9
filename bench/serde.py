"""Serialization benchmark: raylink's RecordSerializer/RecordDeserializer vs bare msgpack.

Serializes + deserializes N ``(str, int)`` tuples through 32 KiB buffers and
prints records/s next to bare ``msgpack.packb(list)`` / ``msgpack.unpackb``
of the same list, measured in the same run, and the ratio (target >= 0.70 for
the batch path).

    python -m raylink.bench.serde [--records N] [--batch B] [--repeat R]
    python bench/serde.py         [--records N] ...
"""

from __future__ import annotations

import argparse
import gc
import time
from typing import Callable, List, Optional, Tuple

import msgpack

from raylink.shuffle.input_gate import InputGate, LocalInputChannel
from raylink.shuffle.partitioners import create_partitioner
from raylink.shuffle.record_writer import RecordWriter
from raylink.shuffle.result_partition import ResultPartition
from raylink.shuffle.serializer import DEFAULT_BUFFER_SIZE, RecordDeserializer, RecordSerializer


def make_records(n: int) -> List[Tuple[str, int]]:
    return [("key-%d" % (i % 10007), i) for i in range(n)]


def _timed(fn: Callable[[], object]) -> Tuple[float, object]:
    gc.collect()
    t0 = time.perf_counter()
    result = fn()
    return time.perf_counter() - t0, result


class Case:
    """One row: a serialize step and a deserialize step (or one combined step)."""

    def __init__(self, name: str, ser: Callable[[], object], de: Optional[Callable[[object], int]], n: int) -> None:
        self.name, self._ser, self._de, self.n = name, ser, de, n
        self.t_ser = self.t_de = float("inf")

    def run_once(self) -> None:
        t, data = _timed(self._ser)
        self.t_ser = min(self.t_ser, t)
        if self._de is None:
            assert data == self.n, (self.name, data)
            return
        t, count = _timed(lambda: self._de(data))
        assert count == self.n, (self.name, count)
        self.t_de = min(self.t_de, t)

    @property
    def total(self) -> float:
        return self.t_ser + (0.0 if self._de is None else self.t_de)


def _bare_de(use_list: bool) -> Callable[[bytes], int]:
    return lambda data: len(msgpack.unpackb(data, use_list=use_list))


def _serialize_batches(batches: List[list]) -> List[bytes]:
    bufs: List[bytes] = []
    s = RecordSerializer(DEFAULT_BUFFER_SIZE, lambda b, e: bufs.append(b))
    add = s.add_records
    for b in batches:
        add(b)
    s.flush()
    assert all(len(b) == DEFAULT_BUFFER_SIZE for b in bufs[:-1])
    return bufs


def _serialize_timestamped_batches(batches: List[list], stamps: List[List[int]]) -> List[bytes]:
    bufs: List[bytes] = []
    s = RecordSerializer(DEFAULT_BUFFER_SIZE, lambda b, e: bufs.append(b))
    add = s.add_timestamped_records
    for b, t in zip(batches, stamps):
        add(b, t)
    s.flush()
    return bufs


def _serialize_per_record(records: list) -> List[bytes]:
    bufs: List[bytes] = []
    s = RecordSerializer(DEFAULT_BUFFER_SIZE, lambda b, e: bufs.append(b))
    add = s.add_record
    for v in records:
        add(v)
    s.flush()
    return bufs


def _deserialize(bufs: List[bytes]) -> int:
    """Decode every buffer and keep all records alive (as bare unpackb does)."""
    d = RecordDeserializer()
    feed = d.feed
    runs: list = []
    for b in bufs:
        runs += feed(b)
    return sum(map(len, runs))


def _keyed_exchange(batches: List[list], channels: int = 4) -> int:
    """RecordWriter (HASH on field 0) -> local InputGate -> per-channel deserializers."""
    part = ResultPartition(channels, "PIPELINED")
    w = RecordWriter(part, create_partitioner("HASH", key_selector=_key0, max_parallelism=128), buffer_timeout_ms=-1)
    gate = InputGate([LocalInputChannel(s) for s in part.subpartitions])
    gate.request_partitions()
    for b in batches:
        w.emit_batch(b)
    w.finish()
    des = [RecordDeserializer() for _ in range(channels)]
    runs: list = []
    while (r := gate.poll_next()) is not None:
        ch, boe = r
        if type(boe) is bytes:
            runs += des[ch].feed(boe)
    return sum(map(len, runs))


def _key0(v):
    return v[0]


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=1_000_000, help="number of (str, int) records")
    ap.add_argument("--batch", type=int, default=1000, help="records per add_records call")
    ap.add_argument("--repeat", type=int, default=3, help="best of R runs")
    args = ap.parse_args(argv)
    n = args.records
    records = make_records(n)
    # the batches are the serializer's input, as the whole list is bare packb's input
    batches = [records[i : i + args.batch] for i in range(0, n, args.batch)]
    stamps = [[v[1] for v in b] for b in batches]

    cases = [
        Case("bare msgpack packb(list) + unpackb(use_list=False)", lambda: msgpack.packb(records), _bare_de(False), n),
        Case("bare msgpack packb(list) + unpackb() [lists out]", lambda: msgpack.packb(records), _bare_de(True), n),
        Case(
            f"RecordSerializer.add_records(batch={args.batch}) + feed",
            lambda: _serialize_batches(batches),
            _deserialize,
            n,
        ),
        Case(
            "RecordSerializer.add_timestamped_records(batch) + feed",
            lambda: _serialize_timestamped_batches(batches, stamps),
            _deserialize,
            n,
        ),
        Case(
            "RecordSerializer.add_record (per record) + feed", lambda: _serialize_per_record(records), _deserialize, n
        ),
        Case("keyed RecordWriter.emit_batch (HASH, 4 ch) + gate + feed", lambda: _keyed_exchange(batches), None, n),
    ]
    for _ in range(args.repeat):  # interleaved, so background load hits all rows alike
        for c in cases:
            c.run_once()

    base = cases[0].total
    print(
        f"raylink serde: {n:,} (str, int) records, {DEFAULT_BUFFER_SIZE // 1024} KiB buffers, "
        f"best of {args.repeat} (interleaved)"
    )
    print(f"{'path':58s} {'ser M/s':>8s} {'deser M/s':>9s} {'total M/s':>9s} {'ratio':>6s}")
    for c in cases:
        if c._de is None:
            ser, de = f"{'-':>8s}", f"{'-':>9s}"
        else:
            ser, de = f"{n / c.t_ser / 1e6:8.2f}", f"{n / c.t_de / 1e6:9.2f}"
        print(f"{c.name:58s} {ser} {de} {n / c.total / 1e6:9.2f} {base / c.total:6.2f}")
    print(
        "total = records / (ser time + deser time); ratio = total / total of the first row "
        "(bare msgpack, same tuples out)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
