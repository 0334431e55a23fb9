"""The built-in load-test scenarios and user job files: what runs between the load source and the latency sink.

A :class:`Scenario` builds the job's middle from the source stream of
``(emit_time_ns, payload)`` records (``build(env, source)``), names the payload of
record *i*, an optional sink delay (a slow sink) and, for a scenario with a source of
its own (``spark``), a ``make_source``. The built-ins (:data:`SCENARIOS`) keep the
emit stamp in field 0 down to the sink.

User job files (``raylink loadtest path/to/job.py``) define::

    def build(env, source):      # source: DataStream of (emit_time_ns, payload)
        return source.map(...)   # a DataStream whose records keep the stamp in field 0
                                 # (or None: the file adds its own sinks, no latency measured)
    def payload(i): ...          # optional: payload of record i (default: i)

Scenarios are immutable after creation; :data:`SCENARIOS` is read-only. No Flink
counterpart (Flink's load tests live outside its repository).
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from typing import Any, Callable, Optional

from raylink.extras import missing_modules
from raylink.loadtest.functions import (
    WIDE_BYTES,
    WORDS_PER_LINE,
    add_keep_latest_stamp,
    default_payload,
    double,
    identity,
    not_div3,
    split_stamped,
    stamp_row,
    touch,
    wide_payload,
    word_of,
    wordcount_line,
)


@dataclass
class Scenario:
    name: str
    description: str
    build: Callable[[Any, Any], Any]  # (env, source stream) -> stream to measure (or None)
    payload: Callable[[int], Any] = default_payload
    sink_delay_s: float = 0.0
    available: bool = True
    unavailable_reason: str = ""
    # replaces the rate-limited source: (env, records) -> DataStream of (emit_time_ns, payload)
    make_source: Optional[Callable[[Any, Optional[int]], Any]] = None
    # replaces the rate-limited source, paced by the scenario itself:
    # (env, rate, duration_s, records, buckets_per_s) -> DataStream
    make_paced_source: Optional[Callable[..., Any]] = None
    # replaces the latency sink: (max_samples, delay_s, buckets_per_s, window_s) -> SinkFunction
    make_sink: Optional[Callable[..., Any]] = None
    # what the scenario's last build chose (settings a report shows), filled by make_paced_source
    run_info: Optional[dict] = None


def _build_chain(env: Any, source: Any) -> Any:
    return source.map(double).name("Map").filter(not_div3).name("Filter")


def _build_wordcount(env: Any, source: Any) -> Any:
    return (
        source.flat_map(split_stamped)
        .name("Split")
        .key_by(word_of)
        .reduce(add_keep_latest_stamp)
        .name("Count")
        .slot_sharing_group("keyed")
    )


def _build_wide(env: Any, source: Any) -> Any:
    return source.rebalance().map(touch).name("Touch").slot_sharing_group("downstream")


def _build_slowsink(env: Any, source: Any) -> Any:
    return source.map(identity).name("Map").rebalance().map(identity).name("Forward").slot_sharing_group("sink")


def _spark_source(env: Any, records: Optional[int]) -> Any:
    """``spark.range(records)`` read through ``env.from_spark`` (RayDP), stamped on ingestion."""
    from raylink.connectors.spark import get_spark

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = get_spark()
    df = spark.range(int(records or 100_000))
    return env.from_spark(df).map(stamp_row).name("Stamp")


def _spark_available() -> "tuple[bool, str]":
    missing = missing_modules("spark")
    if missing:
        return False, (f"needs raylink[spark]: pip install 'raylink[spark]' ({', '.join(missing)} not installed)")
    return True, ""


SCENARIOS: dict[str, Scenario] = {
    "chain": Scenario("chain", "source -> map -> filter -> sink, all chained in one task", _build_chain),
    "wordcount": Scenario(
        "wordcount",
        f"lines of {WORDS_PER_LINE} words -> flat_map -> key_by word -> "
        "rolling count -> sink (keyed exchange between two TaskExecutors)",
        _build_wordcount,
        payload=wordcount_line,
    ),
    "wide": Scenario(
        "wide",
        f"records with a {WIDE_BYTES} B payload, rebalanced to another TaskExecutor",
        _build_wide,
        payload=wide_payload,
    ),
    "slowsink": Scenario(
        "slowsink",
        "source -> map, rebalanced to a sink that sleeps 100 us per record (~10k records/s per subtask): back pressure",
        _build_slowsink,
        sink_delay_s=100e-6,
    ),
}


def spark_scenario() -> Scenario:
    ok, why = _spark_available()
    return Scenario(
        "spark",
        "spark.range(--records) via env.from_spark (RayDP), stamped on ingestion, -> map "
        "-> filter -> sink; flat out only (a bounded DataFrame has no rate); starts Spark on Ray",
        _build_chain,
        available=ok,
        unavailable_reason=why,
        make_source=_spark_source,
    )


def scenario_names() -> list[str]:
    """The built-in scenario names (``spark``, ``nexmark`` last)."""
    return list(SCENARIOS) + ["spark", "nexmark"]


def load_job_file(path: str) -> Scenario:
    import runpy

    namespace = runpy.run_path(path, run_name="raylink_loadtest_job")
    build = namespace.get("build")
    if not callable(build):
        raise SystemExit(
            f"{path}: a load-test job file must define build(env, source) "
            "(source: DataStream of (emit_time_ns, payload); return the stream to measure)"
        )
    return Scenario(
        os.path.basename(path), f"user job {path}", build, payload=namespace.get("payload") or default_payload
    )


def resolve_scenario(name: str) -> Scenario:
    if name in SCENARIOS:
        return SCENARIOS[name]
    if name == "spark":
        return spark_scenario()
    if name == "nexmark":
        raise SystemExit("the nexmark scenario needs its query: raylink loadtest nexmark --query QN")
    if os.path.isfile(name):
        return load_job_file(name)
    raise SystemExit(
        f"unknown scenario {name!r}: one of {', '.join(scenario_names())} "
        "or the path of a job file defining build(env, source)"
    )


__all__ = ["SCENARIOS", "Scenario", "load_job_file", "resolve_scenario", "scenario_names", "spark_scenario"]
