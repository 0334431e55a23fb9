"""The keyed state backends side by side (issue 31): a keyed rolling reduce over N distinct
small integer keys on the ``hashmap`` and the ``rocksdb`` backend, each size and backend in a
process of its own (so its peak RSS is its own), printed as one table:

* throughput of the reduce loop the operator runs (``operators.reduce``: the compiled loop
  over the heap's dict; RocksDB's batch path, compiled too), as a ratio to a plain dict loop
  doing the same updates in the same process (the baseline no backend can beat);
* the worst synchronous snapshot phase over the checkpoints taken (the task's pause: the heap
  backend freezes its live layers, copy-on-write; RocksDB flushes its memtable and takes a
  native checkpoint);
* the size of a full checkpoint, then of the next one after 1% of the keys changed, both
  backends with incremental checkpoints (RocksDB: only the new SST files; the heap backend:
  a file of the changed entries after the chain's full one);
* the process's peak RSS (the baseline's plain dict fills a process of its own).

    python -m raylink.bench.state [--keys 1000000,3000000,10000000] [--backends hashmap,rocksdb]

Records go through in batches of 1024 (what a task hands the operator); a checkpoint is taken
every ``--checkpoint-every`` records, as the job would with ``enable_checkpointing``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from typing import Any, List

BATCH = 1024


def _peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _batch(start: int, stop: int, step: int = 1) -> List[tuple]:
    """Records ``(key, 1)`` for keys ``start, start + step, ...`` below ``stop`` (made per batch:
    the input does not count in the peak RSS)."""
    return [(k, 1) for k in range(start, stop, step)]


def dict_loop(keys: int) -> dict:
    """The baseline, in a process of its own: the same per-key update into a plain dict."""
    state: dict = {}
    get = state.get
    elapsed = 0.0
    for i in range(0, keys, BATCH):
        batch = _batch(i, min(i + BATCH, keys))
        start = time.perf_counter()
        for value in batch:
            key = value[0]
            current = get(key)
            state[key] = value if current is None else (key, current[1] + value[1])
        elapsed += time.perf_counter() - start
    return {"backend": "dict", "keys": keys, "records_per_s": keys / elapsed, "peak_rss_mib": _peak_rss_mib()}


def _checkpoint(backend: Any, storage: Any, checkpoint_id: int) -> tuple:
    """(synchronous seconds, bytes written, bytes of the whole checkpoint with the files it
    shares) of one checkpoint, as the TaskExecutor takes it."""
    import cloudpickle

    from raylink.state.state_backend_loader import materialize_snapshot

    start = time.perf_counter()
    snapshot = backend.snapshot(checkpoint_id)
    sync = time.perf_counter() - start
    materialized, shared, uploaded = materialize_snapshot({"keyed": snapshot}, storage, checkpoint_id)
    data = cloudpickle.dumps(materialized)
    handle = storage.write_state(checkpoint_id, "reduce", 0, data, shared=shared)
    storage.finalize(checkpoint_id, {"reduce": {0: handle}})
    if hasattr(backend, "notify_checkpoint_complete"):
        backend.notify_checkpoint_complete(checkpoint_id)
    keyed = materialized["keyed"]
    shared = [size for _, _, size in getattr(keyed, "sst", {}).values()]  # RocksDB's SST files
    shared += [size for _, _, size, _ in getattr(keyed, "files", ())]  # the heap's chain
    whole = len(data) + sum(shared)
    return sync, len(data) + uploaded, whole


def run_one(backend_type: str, keys: int, checkpoint_every: int, folder: str) -> dict:
    """One backend at one size, in this process."""
    from raylink.operators.reduce import reduce_batch, reduce_batch_pure
    from raylink.state.checkpoint_storage import CheckpointStorage
    from raylink.state.rocksdb_keyed_state_backend import RocksDBKeyedStateBackend, RocksDBSettings
    from raylink.state.state_backend import HeapKeyedStateBackend

    if backend_type == "rocksdb":
        backend: Any = RocksDBKeyedStateBackend(
            (0, 127), 128, RocksDBSettings(os.path.join(folder, "local"), incremental=True)
        )
    else:
        backend = HeapKeyedStateBackend((0, 127), 128)
        backend.enable_incremental_checkpoints()
    table = backend.get_table("_op_state", "value")
    key_group_of = backend.key_group_of
    from raylink.state.state_table import REMOVED

    def first_record(key: Any, value: Any) -> Any:  # what the reduce operator does for a key's first record
        key_group_of(key)
        return value

    mapping = table.live
    if type(mapping) is dict:

        def loop(batch: list) -> None:
            reduce_batch(batch, key_of, table.live, add, first_record, table.lower, REMOVED)

    elif hasattr(mapping, "reduce_batch"):

        def loop(batch: list) -> None:
            mapping.reduce_batch(batch, key_of, add, first_record, reduce_batch)

    else:

        def loop(batch: list) -> None:
            reduce_batch_pure(batch, key_of, mapping, add, first_record)

    def add(a: tuple, b: tuple) -> tuple:
        return (a[0], a[1] + b[1])

    def key_of(value: tuple) -> Any:
        return value[0]

    storage = CheckpointStorage(os.path.join(folder, "checkpoints"), "bench", num_retained=2)
    syncs: List[float] = []
    sizes: List[int] = []
    checkpoint_id = 0
    elapsed = 0.0
    for i in range(0, keys, BATCH):
        batch = _batch(i, min(i + BATCH, keys))
        start = time.perf_counter()
        loop(batch)
        elapsed += time.perf_counter() - start
        if (i // BATCH + 1) * BATCH % checkpoint_every < BATCH:
            checkpoint_id += 1
            sync, size, _ = _checkpoint(backend, storage, checkpoint_id)
            syncs.append(sync)
            sizes.append(size)
    checkpoint_id += 1
    sync, _, full = _checkpoint(backend, storage, checkpoint_id)
    syncs.append(sync)
    for i in range(0, keys, BATCH * 100):  # 1% of the keys change
        loop(_batch(i, min(i + BATCH * 100, keys), 100))
    checkpoint_id += 1
    sync, incremental, _ = _checkpoint(backend, storage, checkpoint_id)
    syncs.append(sync)
    result = {
        "backend": backend_type,
        "keys": keys,
        "records_per_s": keys / elapsed,
        "worst_sync_ms": max(syncs) * 1000.0,
        "full_mb": full / 1e6,
        "incremental_mb": incremental / 1e6,
        "peak_rss_mib": _peak_rss_mib(),
    }
    backend.dispose()
    return result


def main(argv: Any = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keys", default="1000000,3000000,10000000")
    parser.add_argument("--backends", default="hashmap,rocksdb")
    parser.add_argument("--checkpoint-every", type=int, default=1_000_000)
    parser.add_argument("--one", help=argparse.SUPPRESS)  # backend:keys, run in this process
    args = parser.parse_args(argv)
    if args.one:
        backend_type, keys = args.one.split(":")
        if backend_type == "dict":
            print(json.dumps(dict_loop(int(keys))))
            return
        with tempfile.TemporaryDirectory(prefix="raylink-bench-state-") as folder:
            print(json.dumps(run_one(backend_type, int(keys), args.checkpoint_every, folder)))
        return
    rows = []
    for keys in [int(k) for k in args.keys.split(",")]:
        for backend_type in ["dict", *args.backends.split(",")]:
            out = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "raylink.bench.state",
                    "--one",
                    f"{backend_type}:{keys}",
                    "--checkpoint-every",
                    str(args.checkpoint_every),
                ],
                capture_output=True,
                text=True,
                check=True,
            )
            rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
    heap = {r["keys"]: r for r in rows if r["backend"] == "hashmap"}
    plain = {r["keys"]: r for r in rows if r["backend"] == "dict"}
    rows = [r for r in rows if r["backend"] != "dict"]
    header = (
        f"{'backend':8} {'keys':>10} {'rec/s':>10} {'x dict':>7} {'x heap':>7} {'sync ms':>9} "
        f"{'full MB':>8} {'incr MB':>8} {'incr %':>7} {'peak MiB':>9}"
    )
    print(header)
    print("-" * len(header))
    for r in rows:
        versus_heap = r["records_per_s"] / heap[r["keys"]]["records_per_s"] if r["keys"] in heap else float("nan")
        print(
            f"{r['backend']:8} {r['keys']:>10,} {r['records_per_s']:>10,.0f} "
            f"{r['records_per_s'] / plain[r['keys']]['records_per_s']:>7.2f} {versus_heap:>7.2f} {r['worst_sync_ms']:>9.1f} "
            f"{r['full_mb']:>8.1f} {r['incremental_mb']:>8.2f} {100 * r['incremental_mb'] / r['full_mb']:>6.1f}% "
            f"{r['peak_rss_mib']:>9.0f}"
        )


if __name__ == "__main__":
    main()
