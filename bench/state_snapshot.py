"""How long a checkpoint stops the task, for a heap keyed state backend holding N keys: the
synchronous phase (``HeapKeyedStateBackend.snapshot()``, on the task thread, between two
records) next to the asynchronous phase (grouping by key group and pickling, on the
TaskExecutor's checkpoint writer thread), as ratios to a baseline from the same run: one
C-level copy of a dict of N entries (what no snapshot can go below).

    python -m raylink.bench.state_snapshot [--keys 1000000,3000000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Optional

import cloudpickle

from raylink.core.state import ValueStateDescriptor
from raylink.state.state_backend import HeapKeyedStateBackend


def filled_backend(keys: int) -> HeapKeyedStateBackend:
    """A backend of one subtask of one (p=1, max parallelism 128) with ``keys`` word counts."""
    backend = HeapKeyedStateBackend((0, 127), 128)
    state = backend.get_or_create_state(ValueStateDescriptor("count", None))
    for i in range(keys):
        backend.set_current_key(f"word-{i}")
        state.update((f"word-{i}", i))
    return backend


def measure(keys: int, repeat: int) -> dict:
    backend = filled_backend(keys)
    values = next(iter(backend._tables.values())).values
    baseline, sync, asynchronous = [], [], []
    for _ in range(max(1, repeat)):  # interleaved: a slow spell of the machine hits all three
        start = time.perf_counter()
        dict(values)
        baseline.append(time.perf_counter() - start)
        start = time.perf_counter()
        snapshot = backend.snapshot()
        sync.append(time.perf_counter() - start)
        start = time.perf_counter()
        cloudpickle.dumps(snapshot)
        asynchronous.append(time.perf_counter() - start)
    return {
        "baseline": statistics.median(baseline),
        "sync": statistics.median(sync),
        "async": statistics.median(asynchronous),
    }


def main(argv: Optional[list] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", default="1000000,3000000", help="comma-separated key counts")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    print("keyed state snapshot of a heap backend, medians of", args.repeat, "runs")
    print(f"{'keys':>10}{'dict copy (s)':>15}{'task paused (s)':>17}{'vs copy':>9}{'async (s)':>11}{'vs copy':>9}")
    for keys in (int(k) for k in args.keys.split(",")):
        m = measure(keys, args.repeat)
        print(
            f"{keys:>10,}{m['baseline']:>15.3f}{m['sync']:>17.3f}{m['sync'] / m['baseline']:>8.1f}x"
            f"{m['async']:>11.3f}{m['async'] / m['baseline']:>8.1f}x"
        )


if __name__ == "__main__":
    main()
