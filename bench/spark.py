"""The Spark bridge against Spark itself: ``from_spark -> map -> sink_to_spark`` next to Spark's
own Python-UDF pipeline and Spark's native pipeline, on the same data, in the same run.

The data: ``--rows`` rows (default 1 M and 10 M) of ``(k int, v double)``, cached in Spark.
The pipelines, each writing ``(k, v * 2.0)`` as Parquet (``mode="overwrite"``):

* **raylink → path** (the program as a user writes it, untuned, first)::

      env.from_spark(df).map(lambda r: (r[0], r[1] * 2.0)) \\
         .sink_to_spark(path, "k int, v double", mode="overwrite", format="parquet")

* **raylink → table**: the same into a managed table (``table=``);
* **same, session**: raylink → path on a session cluster (``raylink cluster start``: warm
  TaskExecutors, no per-job process start), when one can be started;
* **Spark Python UDF**: ``df.select("k", udf(lambda v: v * 2.0)("v"))`` written to a path;
* **Spark native**: ``df.select("k", col("v") * 2.0)`` written to a path.

Every pipeline is checked once (row count and ``sum(v)`` read back by Spark). Runs are
interleaved round by round (this machine's speed drifts between minutes) and the median
of ``--rounds`` is printed, with the ratio of raylink's speed to each Spark baseline of the
same run (> 1: raylink is faster). Peak RSS (VmHWM, reset before each run through
``/proc/<pid>/clear_refs``) of the driver process, of the TaskExecutor processes (largest)
and of Spark's JVMs (driver and executor, largest) is the largest over the rounds.

Spark runs on Ray through RayDP (``raylink.connectors.spark.get_spark``) with
``--executor-cores`` cores in one executor; raylink runs at ``--parallelism``. The first
lines print how long Spark took to start, by phase.

    python bench/spark.py [--rows 1000000 10000000] [--rounds 3] [--parallelism 2]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import threading
import time
from typing import Callable, Dict, List, Optional

SCHEMA = "k int, v double"
TABLE = "raylink_bench_spark"


def double_v(r):
    return (r[0], r[1] * 2.0)


# -- memory -------------------------------------------------------------------------------------------
def _reset_peak(pid: int) -> None:
    try:
        with open(f"/proc/{pid}/clear_refs", "w") as fh:
            fh.write("5")  # resets VmHWM to the current RSS (Linux >= 4.0)
    except OSError:
        pass


def _peak_mb(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def _spark_jvm_pids() -> List[int]:
    """Spark's JVMs: the driver (pyspark's gateway) and RayDP's executors."""
    import psutil

    pids = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        cmdline = " ".join(proc.info.get("cmdline") or ())
        if "java" in cmdline and (
            "RayDPExecutor" in cmdline
            or "pyspark-shell" in cmdline
            or "raydp" in cmdline
            and "executor" in cmdline.lower()
        ):
            pids.append(proc.info["pid"])
    return pids


class PeakWatcher:
    """Peak RSS of the driver, the job's TaskExecutors and Spark's JVMs during one run."""

    def __init__(self) -> None:
        self.jvms = _spark_jvm_pids()
        self.executors: Dict[int, float] = {}
        self._stop = threading.Event()
        for pid in [os.getpid(), *self.jvms]:
            _reset_peak(pid)

    def watch(self, client) -> None:
        from raylink.actors.cluster import task_executor_pids

        def loop() -> None:
            try:
                pids = task_executor_pids(client)
            except Exception:
                return
            for pid in pids:
                _reset_peak(pid)
            while not self._stop.is_set():
                for pid in pids:
                    peak = _peak_mb(pid)
                    if peak:
                        self.executors[pid] = max(self.executors.get(pid, 0.0), peak)
                self._stop.wait(0.1)

        self._thread = threading.Thread(target=loop, daemon=True)
        self._thread.start()

    def done(self) -> dict:
        self._stop.set()
        if getattr(self, "_thread", None) is not None:
            self._thread.join(5)
        return {
            "driver": _peak_mb(os.getpid()),
            "executors": max(self.executors.values(), default=0.0),
            "spark": max((_peak_mb(p) for p in self.jvms), default=0.0),
        }


# -- the pipelines ------------------------------------------------------------------------------------
def raylink_pipeline(df, out: str, parallelism: int, table: bool, session: bool = False) -> dict:
    from raylink.api import Configuration, StreamExecutionEnvironment

    watcher = PeakWatcher()
    conf = Configuration()
    if not session:
        conf.set_string("raylink.session.enabled", "false")  # per-job TaskExecutors, as by default
    env = StreamExecutionEnvironment.get_execution_environment(conf)
    env.set_parallelism(parallelism)
    stream = env.from_spark(df).map(double_v)
    if table:
        stream.sink_to_spark(table=TABLE, schema=SCHEMA, mode="overwrite", format="parquet")
    else:
        stream.sink_to_spark(out, schema=SCHEMA, mode="overwrite", format="parquet")
    client = env.execute_async("bench spark")
    watcher.watch(client)
    client.get_job_execution_result(3600)
    return watcher.done()


def spark_udf_pipeline(df, out: str) -> dict:
    from pyspark.sql.functions import udf

    watcher = PeakWatcher()
    twice = udf(lambda v: v * 2.0, "double")
    df.select("k", twice("v").alias("v")).write.mode("overwrite").format("parquet").save(out)
    return watcher.done()


def spark_native_pipeline(df, out: str) -> dict:
    from pyspark.sql import functions as F

    watcher = PeakWatcher()
    df.select("k", (F.col("v") * 2.0).alias("v")).write.mode("overwrite").format("parquet").save(out)
    return watcher.done()


def check(spark, rows: int, out: Optional[str], expected_sum: float, what: str) -> None:
    frame = spark.table(TABLE) if out is None else spark.read.parquet(out)
    got = frame.selectExpr("count(*) AS n", "sum(v) AS s").collect()[0]
    if got["n"] != rows or abs(got["s"] - expected_sum) > 1e-6 * abs(expected_sum):
        raise AssertionError(f"{what}: wrote {got['n']} rows (sum {got['s']}), expected {rows} (sum {expected_sum})")


# -- main ---------------------------------------------------------------------------------------------
def _fmt_mb(mb: float) -> str:
    return f"{mb:,.0f}" if mb else "-"


def main(argv: Optional[List[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[1_000_000, 10_000_000])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--parallelism", type=int, default=2)
    parser.add_argument("--executor-cores", type=int, default=1)
    parser.add_argument(
        "--partitions",
        type=int,
        default=0,
        help="partitions of the cached DataFrame (default: 4 per million rows, at least 4)",
    )
    parser.add_argument(
        "--only",
        nargs="*",
        default=None,
        help="run only these pipelines (raylink-path raylink-table raylink-session spark-udf spark-native)",
    )
    args = parser.parse_args(argv)

    from pyspark.sql import functions as F

    from raylink.actors.cluster import init_ray
    from raylink.connectors.spark import get_spark, session, stop

    started = time.perf_counter()
    # a private local Ray unless RAY_ADDRESS names one (never another program's running Ray)
    init_ray(
        os.environ.get("RAY_ADDRESS") or "local", include_dashboard=False, configure_logging=False, log_to_driver=False
    )
    ray_s = time.perf_counter() - started
    started = time.perf_counter()
    spark = get_spark(num_executors=1, executor_cores=args.executor_cores)
    spark_s = time.perf_counter() - started
    phases = ", ".join(f"{k} {v:.1f} s" for k, v in getattr(session, "start_phases", dict)().items())
    print(f"Ray {ray_s:.1f} s; Spark on Ray {spark_s:.1f} s ({phases})", flush=True)
    work = tempfile.mkdtemp(prefix="raylink-bench-spark-")
    pipelines: Dict[str, Callable] = {
        "raylink -> path": lambda df, out: raylink_pipeline(df, out, args.parallelism, table=False),
        "raylink -> table": lambda df, out: raylink_pipeline(df, out, args.parallelism, table=True),
        "  same, session": lambda df, out: raylink_pipeline(df, out, args.parallelism, table=False, session=True),
        "Spark Python UDF": spark_udf_pipeline,
        "Spark native": spark_native_pipeline,
    }
    keys = {
        "raylink-path": "raylink -> path",
        "raylink-table": "raylink -> table",
        "raylink-session": "  same, session",
        "spark-udf": "Spark Python UDF",
        "spark-native": "Spark native",
    }
    if args.only:
        pipelines = {keys[o]: pipelines[keys[o]] for o in args.only}
    session = None
    if "  same, session" in pipelines:
        try:
            from raylink.actors.session_entrypoint import start_session

            session = start_session(executors=args.parallelism)
        except Exception as exc:  # no session cluster here: skip the row
            print(f"(no session cluster: {type(exc).__name__}: {exc})")
            del pipelines["  same, session"]
    times: Dict[tuple, List[float]] = {}
    peaks: Dict[tuple, dict] = {}
    try:
        frames = {}
        for rows in args.rows:
            partitions = args.partitions or max(4, 4 * rows // 1_000_000)
            df = (
                spark.range(0, rows, 1, partitions)
                .select((F.col("id") % 1000).cast("int").alias("k"), (F.col("id") * 0.5).alias("v"))
                .cache()
            )
            df.count()
            frames[rows] = (df, float(sum(range(rows))) * 0.5 * 2.0)
        for round_no in range(args.rounds):
            for rows, (df, expected_sum) in frames.items():
                for name, run in pipelines.items():
                    out = os.path.join(work, f"{name.strip().replace(' ', '_').replace(',', '')}-{rows}")
                    start = time.perf_counter()
                    peak = run(df, out)
                    elapsed = time.perf_counter() - start
                    if round_no == 0:
                        check(spark, rows, None if name.endswith("table") else out, expected_sum, name.strip())
                    times.setdefault((rows, name), []).append(elapsed)
                    best = peaks.setdefault((rows, name), {})
                    for key, value in peak.items():
                        best[key] = max(best.get(key, 0.0), value)
                    print(f"  round {round_no + 1}: {rows:>11,} rows  {name:18s} {elapsed:7.2f} s", flush=True)
        print()
        print(
            f"{'rows':>11}  {'pipeline':18s} {'median s':>9} {'rows/s':>10} {'vs UDF':>7} "
            f"{'vs native':>9}  {'peak RSS MB: driver':>19} {'TaskExec':>8} {'Spark JVM':>9}"
        )
        for rows in args.rows:
            medians = {name: statistics.median(times[(rows, name)]) for name in pipelines}
            for name, median in medians.items():
                udf_s, native_s = medians.get("Spark Python UDF"), medians.get("Spark native")
                vs_udf = f"{udf_s / median:6.2f}x" if udf_s else "-"
                vs_native = f"{native_s / median:8.2f}x" if native_s else "-"
                peak = peaks[(rows, name)]
                print(
                    f"{rows:>11,}  {name:18s} {median:9.2f} {rows / median:10,.0f} {vs_udf:>7} {vs_native:>9}  "
                    f"{_fmt_mb(peak['driver']):>19} {_fmt_mb(peak['executors']):>8} "
                    f"{_fmt_mb(peak['spark']):>9}"
                )
        print(
            f"\n(medians of {args.rounds} interleaved rounds; raylink at parallelism {args.parallelism}, "
            f"Spark: 1 executor x {args.executor_cores} core(s))"
        )
    finally:
        if session is not None:
            from raylink.actors.session_entrypoint import stop_session

            stop_session(session)
        shutil.rmtree(work, ignore_errors=True)
        try:
            spark.sql(f"DROP TABLE IF EXISTS {TABLE}")
        except Exception:
            pass
        stop()


if __name__ == "__main__":
    main()
