"""Benchmark of one chained task (Flink's ``OperatorChain`` with ``ChainingOutput``s):
sequence source -> map -> filter -> sink, built from raylink operators, against a
plain Python loop calling the same user functions over the same numbers, in the
same run. Two chain paths are measured:

* batch: the source emits lists; every operator runs ``process_batch``;
* per-record: the chain entry splits the source's lists and every operator
  runs ``process_element`` (one ``collect`` -> ``process_element`` hop per record).

Run ``python bench/chain.py [--records N]`` or ``python -m raylink.bench.chain``.
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import time
from typing import Any, Callable, List, Optional, Sequence

if __package__ in (None, ""):  # executed as a script: make the checkout importable as raylink
    _root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    try:
        import raylink  # noqa: F401
    except ImportError:  # pragma: no cover - only without `pip install -e`
        import importlib.util

        spec = importlib.util.spec_from_file_location(
            "raylink", os.path.join(_root, "__init__.py"), submodule_search_locations=[_root]
        )
        module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
        sys.modules["raylink"] = module
        spec.loader.exec_module(module)  # type: ignore[union-attr]

from raylink.operators.basic import StreamFilter, StreamMap
from raylink.operators.output import DiscardingOutput
from raylink.operators.processing_time import ManualProcessingTimeService
from raylink.operators.runtime_context import StreamingRuntimeContext
from raylink.operators.sinks import StreamSink
from raylink.operators.sources import SequenceSourceOperator


# -- the user functions (shared by the chain and the plain loop) -----------------------------
def map_fn(x: int) -> int:
    return x * 3 + 1


def filter_fn(x: int) -> bool:
    return x % 5 != 0


class Total:
    """Sink state: the sum of everything received (checks both sides agree)."""

    def __init__(self) -> None:
        self.value = 0

    def make_sink(self) -> Callable[[int], None]:
        def sink_fn(x: int) -> None:
            self.value += x

        return sink_fn


# -- chaining outputs ------------------------------------------------------------------------
class ChainingOutput:
    """Minimal ``ChainingOutput``: ``collect`` is the next operator's ``process_element``,
    ``collect_batch`` its ``process_batch``."""

    __slots__ = ("collect", "collect_batch", "collect_side", "emit_watermark", "emit_latency_marker")

    def __init__(self, operator: Any) -> None:
        self.collect = operator.process_element
        self.collect_batch = operator.process_batch
        self.collect_side = lambda tag, value: None
        self.emit_watermark = operator.process_watermark
        self.emit_latency_marker = operator.process_latency_marker

    def close(self) -> None:
        pass


class PerRecordChainingOutput(ChainingOutput):
    """Same, but batches are handed on one record at a time."""

    __slots__ = ()

    def __init__(self, operator: Any) -> None:
        super().__init__(operator)
        process = operator.process_element

        def per_record(values: List[Any]) -> None:
            for value in values:
                process(value)

        self.collect_batch = per_record


def build_chain(n: int, total: Total, output_cls: type) -> SequenceSourceOperator:
    """source -> map -> filter -> sink wired tail-first, opened tail-first (like the chain)."""
    context = StreamingRuntimeContext(task_name="bench", processing_time_service=ManualProcessingTimeService())
    source = SequenceSourceOperator(0, n - 1, name="Source: Sequence")
    mapper = StreamMap(map_fn, name="Map")
    filt = StreamFilter(filter_fn, name="Filter")
    sink = StreamSink(total.make_sink(), name="Sink")
    sink.setup(DiscardingOutput(), context.derive("Sink"))
    filt.setup(output_cls(sink), context.derive("Filter"))
    mapper.setup(output_cls(filt), context.derive("Map"))
    source.setup(output_cls(mapper), context.derive("Source"))
    for op in (sink, filt, mapper, source):
        op.open()
    return source


def run_chain(n: int, batch_size: int, output_cls: type) -> "tuple[float, int]":
    total = Total()
    source = build_chain(n, total, output_cls)
    emit_next = source.emit_next
    t0 = time.perf_counter()
    while emit_next(batch_size):
        pass
    return time.perf_counter() - t0, total.value


def run_plain(n: int) -> "tuple[float, int]":
    total = Total()
    sink_fn = total.make_sink()
    t0 = time.perf_counter()
    for v in range(n):
        m = map_fn(v)
        if filter_fn(m):
            sink_fn(m)
    return time.perf_counter() - t0, total.value


def best_of(repeat: int, fn: Callable[[], "tuple[float, int]"]) -> "tuple[float, int]":
    results = []
    for _ in range(repeat):
        gc.collect()
        results.append(fn())
    return min(results)


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=2_000_000, help="records per run (default 2,000,000)")
    parser.add_argument("--batch-size", type=int, default=1024, help="records per source emit_next (default 1024)")
    parser.add_argument("--repeat", type=int, default=3, help="runs per variant, best kept (default 3)")
    args = parser.parse_args(argv)
    n, batch, repeat = args.records, args.batch_size, args.repeat

    plain_s, plain_total = best_of(repeat, lambda: run_plain(n))
    batch_s, batch_total = best_of(repeat, lambda: run_chain(n, batch, ChainingOutput))
    record_s, record_total = best_of(repeat, lambda: run_chain(n, batch, PerRecordChainingOutput))
    if not plain_total == batch_total == record_total:
        print(f"MISMATCH: plain {plain_total} batch {batch_total} per-record {record_total}", file=sys.stderr)
        return 1

    rows = [
        ("plain Python loop (baseline)", plain_s),
        (f"raylink chain, batch path ({batch}/emit)", batch_s),
        ("raylink chain, per-record path", record_s),
    ]
    print(
        f"source -> map -> filter -> sink, {n:,} records, one task, best of {repeat}, Python {sys.version.split()[0]}"
    )
    print(f"{'variant':<40} {'seconds':>8} {'records/s':>14} {'vs plain':>9}")
    for label, seconds in rows:
        print(f"{label:<40} {seconds:>8.3f} {n / seconds:>14,.0f} {plain_s / seconds:>8.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
