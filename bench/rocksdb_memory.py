"""RocksDB's native memory against the keyed backend's bound (issue 42): a database opened as the
``rocksdb`` state backend opens it (:func:`raylink.state.rocksdb_options.open_db`, one block cache
of ``--memory`` MiB holding the memtables, data, index and filter blocks) is filled with N keys
shaped as the backend writes them (key group, 8-byte key, 16-byte value), then read by random
point lookups (half of them keys stored nowhere, which consult the bloom filters), and RocksDB's
own accounting is printed next to the bound:

* ``block-cache`` - ``rocksdb.block-cache-usage`` (memtables' reservations, data, index and
  filter blocks), of which ``pinned`` (``rocksdb.block-cache-pinned-usage``);
* ``readers`` - ``rocksdb.estimate-table-readers-mem``: index and filter memory held outside
  the cache by the open files (what grows with the number of keys when it is not charged);
* ``memtables`` - ``rocksdb.size-all-mem-tables`` (charged to the cache through the write
  buffer manager, so also inside ``block-cache``);
* ``rss`` - the process's resident memory growth since before the database was opened.

The last column is ``(block-cache + readers) / bound``: at most about 1 when the bound holds.

    python -m raylink.bench.rocksdb_memory [--keys 1000000,10000000] [--memory 64] [--lookups 1000000]

Each size runs in a process of its own (its resident memory is its own). On 2026-12-02 (2 cores,
64 MiB bound, 1 M lookups) at 10 M keys: block cache 63.9 MiB (12.1 pinned), readers 0.02 MiB,
ratio 1.00, RSS growth 91 MiB; with index and filters kept outside the cache (the settings
before) readers were 13.2 MiB, ratio 1.20, RSS growth 157 MiB.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import struct
import subprocess
import sys
import tempfile
import time
from typing import Any, Optional

BATCH = 10_000
MIB = 1024 * 1024


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _key(i: int) -> bytes:
    # what the backend writes: a 2-byte key group, then the key's bytes (namespace included)
    return struct.pack(">HQ", i % 128, i)


def _properties(db: Any) -> dict:
    def prop(name: str) -> int:
        return int(db.property_int_value(name) or 0)

    return {
        "block_cache": prop("rocksdb.block-cache-usage"),
        "pinned": prop("rocksdb.block-cache-pinned-usage"),
        "readers": prop("rocksdb.estimate-table-readers-mem"),
        "memtables": prop("rocksdb.size-all-mem-tables"),
        "live_sst": prop("rocksdb.total-sst-files-size"),
    }


def run_one(keys: int, memory_mib: int, lookups: int, folder: str) -> dict:
    import rocksdict

    from raylink.state.rocksdb_options import RocksDBSettings, open_db

    rss_before = _rss_bytes()
    settings = RocksDBSettings(local_directory=folder, memory_bytes=memory_mib * MIB)
    db = open_db(os.path.join(folder, "db"), settings)
    value = b"v" * 16
    start = time.perf_counter()
    for first in range(0, keys, BATCH):
        batch = rocksdict.WriteBatch(raw_mode=True)
        for i in range(first, min(first + BATCH, keys)):
            batch.put(_key(i), value)
        db.write(batch)
    write_s = time.perf_counter() - start
    after_write = _properties(db)
    rng = random.Random(42)
    found = 0
    peak = dict(after_write)
    start = time.perf_counter()
    for n in range(lookups):
        i = rng.randrange(keys) if n % 2 == 0 else keys + rng.randrange(keys)  # a hit, then a miss
        found += db.get(_key(i)) is not None
        if n % 100_000 == 0:
            peak = {k: max(v, peak[k]) for k, v in _properties(db).items()}
    read_s = time.perf_counter() - start
    final = _properties(db)
    peak = {k: max(v, peak[k]) for k, v in final.items()}
    rss = _rss_bytes() - rss_before
    db.close()
    if found != (lookups + 1) // 2:  # every even lookup is a stored key, every odd one is not
        raise AssertionError(f"{found} of {(lookups + 1) // 2} stored keys found")
    return {
        "keys": keys,
        "bound": settings.memory_bytes,
        "write_s": write_s,
        "read_s": read_s,
        "after_write": after_write,
        "peak": peak,
        "rss": rss,
    }


def _row(r: dict) -> str:
    p = r["peak"]
    ratio = (p["block_cache"] + p["readers"]) / r["bound"]
    return (
        f"{r['keys']:>11,}  {r['bound'] / MIB:>6.0f}  {p['block_cache'] / MIB:>11.1f}  {p['pinned'] / MIB:>6.1f}  "
        f"{p['readers'] / MIB:>7.2f}  {p['memtables'] / MIB:>9.1f}  {p['live_sst'] / MIB:>7.0f}  "
        f"{r['rss'] / MIB:>6.0f}  {r['write_s']:>7.1f}  {r['read_s']:>6.1f}  {ratio:>6.2f}"
    )


def main(argv: Optional[list] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keys", default="1000000,10000000", help="comma-separated key counts")
    parser.add_argument("--memory", type=int, default=64, help="the backend's bound in MiB")
    parser.add_argument("--lookups", type=int, default=1_000_000, help="random point lookups after the writes")
    parser.add_argument("--one", help=argparse.SUPPRESS)  # keys, run in this process
    args = parser.parse_args(argv)
    if args.one:
        with tempfile.TemporaryDirectory(prefix="raylink-rocksdb-memory-") as folder:
            print(json.dumps(run_one(int(args.one), args.memory, args.lookups, folder)))
        return
    print(
        f"{'keys':>11}  {'bound':>6}  {'block-cache':>11}  {'pinned':>6}  {'readers':>7}  {'memtables':>9}  "
        f"{'sst':>7}  {'rss':>6}  {'write s':>7}  {'read s':>6}  {'ratio':>6}"
    )
    print(f"{'':>11}  {'MiB':>6}  {'MiB':>11}  {'MiB':>6}  {'MiB':>7}  {'MiB':>9}  {'MiB':>7}  {'MiB':>6}")
    for keys in [int(k) for k in args.keys.split(",") if k]:
        cmd = [sys.executable, "-m", "raylink.bench.rocksdb_memory", "--one", str(keys)]
        cmd += ["--memory", str(args.memory), "--lookups", str(args.lookups)]
        out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
        print(_row(json.loads(out.strip().splitlines()[-1])), flush=True)


if __name__ == "__main__":
    main()
