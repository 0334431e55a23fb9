"""The Nexmark queries on PyFlink 2.3's DataStream API: the very ``queries.qN`` functions raylink
runs, timed by ``bench/nexmark.py``'s PyFlink column. Run by that bench with the Python of a
venv that has ``apache-flink==2.3.0`` (and not raylink):

``python pyflink_run.py --replay EVENTS.pickle --events N --parallelism 2 --queries q0,q5``

It lays out a ``raylink`` package of shims in a temporary folder -- ``raylink.api`` re-exports
PyFlink's classes under the names ``queries`` imports (PyFlink's own: ``KeyedProcessFunction``,
``SlidingEventTimeWindows``, ``WatermarkStrategy`` ...), ``raylink.core.row.make_row`` builds a
tuple -- and copies ``generator.py`` and ``queries.py`` into it unchanged, ships the folder to
PyFlink's Python workers (``add_python_file``) and imports ``queries`` from it. Each query's job:
``NumberSequenceSource(0, N - 1)`` -> ``map`` to the replayed event of that index (the events as
nested tuples, pickled by the bench) -> ``assign_timestamps_and_watermarks(watermark_strategy())``
-> ``qN`` -> Flink's ``DiscardingSink``. Prints two JSON lines: ``{"failed": {query: error}}``, the queries whose job
failed, then query -> ``[net runtime s, wall s incl. job submission]``. Thread-safety: a command-line tool.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from typing import Any, List, Optional

_API = """
from pyflink.common import Duration, Types, WatermarkStrategy
from pyflink.datastream.functions import (
    AggregateFunction, KeyedCoProcessFunction, KeyedProcessFunction, ProcessWindowFunction,
)
from pyflink.datastream.state import ListStateDescriptor, MapStateDescriptor, ValueStateDescriptor
from pyflink.datastream.window import (
    EventTimeSessionWindows, SlidingEventTimeWindows, TumblingEventTimeWindows,
    TumblingProcessingTimeWindows,
)
try:
    from pyflink.common.time import Time
except ImportError:  # Flink 2 dropped Time: the windows take Durations
    class Time:
        @staticmethod
        def seconds(value):
            return Duration.of_seconds(value)

        @staticmethod
        def milliseconds(value):
            return Duration.of_millis(value)
"""

_SHIMS = {
    "raylink/__init__.py": "",
    "raylink/api/__init__.py": _API,
    "raylink/api/datastream.py": "from pyflink.datastream import DataStream\n",
    "raylink/api/watermark_strategy.py": "from pyflink.common.watermark_strategy import TimestampAssigner\n",
    "raylink/core/__init__.py": "",
    "raylink/core/row.py": "def make_row(fields, values, row_kind=None):\n    return tuple(values)\n",
    "raylink/bench/__init__.py": "",
    "raylink/bench/nexmark/__init__.py": "",
    "raylink/bench/nexmark/replay.py": '''
import pickle

from pyflink.datastream.functions import MapFunction


class Replay(MapFunction):
    """Index -> the replayed event of that index (loaded once per worker)."""

    def __init__(self, path):
        self.path = path
        self.events = None

    def open(self, runtime_context):
        with open(self.path, "rb") as data:
            self.events = pickle.load(data)

    def map(self, index):
        return self.events[index]
''',
}


def lay_out_shims(folder: str) -> str:
    """The shim ``raylink`` package with ``generator.py`` and ``queries.py`` under ``folder``."""
    for relative, text in _SHIMS.items():
        path = os.path.join(folder, relative)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as out:
            out.write(text)
    here = os.path.dirname(os.path.abspath(__file__))
    for name in ("generator.py", "queries.py"):
        shutil.copy(os.path.join(here, name), os.path.join(folder, "raylink", "bench", "nexmark", name))
    return folder


def _discarding_sink() -> Any:
    from pyflink.datastream.connectors.base import Sink
    from pyflink.java_gateway import get_gateway

    return Sink(get_gateway().jvm.org.apache.flink.streaming.api.functions.sink.v2.DiscardingSink())


def run_query(query: str, shims: str, replay: str, events: int, parallelism: int) -> tuple:
    from pyflink.common import Configuration
    from pyflink.common import WatermarkStrategy as FlinkWatermarks
    from pyflink.datastream import StreamExecutionEnvironment
    from pyflink.datastream.connectors.number_seq import NumberSequenceSource

    from raylink.bench.nexmark.queries import QUERIES, watermark_strategy
    from raylink.bench.nexmark.replay import Replay

    conf = Configuration()
    conf.set_string("python.executable", sys.executable)  # the workers: this venv's Python
    env = StreamExecutionEnvironment.get_execution_environment(conf)
    env.set_parallelism(parallelism)
    env.add_python_file(os.path.join(shims, "raylink"))
    indices = env.from_source(NumberSequenceSource(0, events - 1), FlinkWatermarks.no_watermarks(), "nexmark")
    stream = indices.map(Replay(replay)).assign_timestamps_and_watermarks(watermark_strategy())
    QUERIES[query](stream).sink_to(_discarding_sink())
    start = time.perf_counter()
    result = env.execute(f"nexmark {query}")
    wall = time.perf_counter() - start
    return min(wall, result.get_net_runtime() / 1000), wall


def _summary(error: Exception) -> str:
    """The error's first line and its last Java ``Caused by:`` line (a Py4J error holds the stack)."""
    lines = [line.strip() for line in str(error).strip().splitlines() if line.strip()] or [""]
    causes = [line for line in lines if line.startswith("Caused by:")]
    return f"{type(error).__name__}: {lines[0]}" + (f" ... {causes[-1]}" if causes else "")


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replay", required=True)
    parser.add_argument("--events", type=int, required=True)
    parser.add_argument("--parallelism", type=int, default=2)
    parser.add_argument("--queries", required=True)
    args = parser.parse_args(argv)
    folder = tempfile.mkdtemp(prefix="nexmark-pyflink-")
    try:
        sys.path.insert(0, lay_out_shims(folder))
        times, failed = {}, {}
        for query in args.queries.split(","):
            try:
                times[query] = run_query(query, folder, args.replay, args.events, args.parallelism)
            except Exception as error:  # one query's failure leaves the others' times
                failed[query] = _summary(error)
                print(f"{query}: failed: {failed[query]}", file=sys.stderr, flush=True)
                continue
            print(f"{query}: {times[query][0]:.2f} s", file=sys.stderr, flush=True)
        print(json.dumps({"failed": failed}), flush=True)
        print(json.dumps(times), flush=True)  # last: the times
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
