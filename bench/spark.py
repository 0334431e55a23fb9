"""The Spark bridge against Spark itself, on equal cores: ``from_spark -> map -> sink_to_spark``
next to Spark's own row-wise Python UDF, its ``pandas_udf`` and its native expressions, on
the same data, in the same run.

The data: ``--rows`` rows (default 1 M and 5 M) of ``(k int, v double)``, cached in Spark.
The pipelines, each writing ``(k, v * 2.0)`` as Parquet (``mode="overwrite"``):

* **raylink → path** (the program as a user writes it, untuned, first)::

      env.from_spark(df).map(lambda r: (r[0], r[1] * 2.0)) \\
         .sink_to_spark(path, "k int, v double", mode="overwrite", format="parquet")

* **raylink map_batches**: the same on Arrow batches, no rows built anywhere::

      env.from_spark(df).map_batches(double_v_batch) \\
         .sink_to_spark(path, "k int, v double", mode="overwrite", format="parquet")

  (``double_v_batch``: ``pc.multiply`` of column ``v`` by 2.0, a new ``RecordBatch``);
* **raylink → table**: the same as the first into a managed table (``table=``);
* **same, cold start**: raylink → path starting TaskExecutor processes of its own (the first
  job of a program; the other raylink rows, after the warm-up, run on the executors the
  program's previous job left warm: ``resourcemanager.taskmanager-timeout``);
* **same, session**: raylink → path on a session cluster (``raylink cluster start``: warm
  TaskExecutors, no per-job process start), when one can be started;
* **Spark Python UDF**: ``df.select("k", udf(lambda v: v * 2.0)("v"))`` (row by row);
* **Spark pandas_udf**: ``df.select("k", pandas_udf(lambda s: s * 2.0)("v"))`` (Series to
  Series over Arrow batches);
* **Spark native**: ``df.select("k", col("v") * 2.0)``.

Equal cores: Spark runs on Ray through RayDP (``raylink.connectors.spark.get_spark``) with one
executor of ``--executor-cores`` cores, by default as many as raylink's ``--parallelism``
(its subtasks per operator).

Every pipeline is checked once (row count and ``sum(v)`` read back by Spark), and run once on
a small frame before timing (Spark's Python workers and JIT, Ray's worker pool). Runs are
interleaved round by round, the order rotated each round (this machine's speed swings by
±40 % within minutes); the table gives medians of ``--rounds``: the wall clock of each run
(a raylink run from submission to its result: TaskExecutor start and deployment included)
and, for raylink, the time its tasks ran; and the ratio of each pipeline's wall clock to
Spark's three of the same run (> 1: faster than that baseline). Peak RSS (VmHWM, reset before
each run through ``/proc/<pid>/clear_refs``) of the driver process, of the TaskExecutor
processes (largest) and of Spark's JVMs (driver and executor, largest) is the largest over
the rounds. The first line says how long Ray and Spark took to start, by phase.

``--format delta`` or ``--format iceberg`` writes every pipeline's output as that table format
instead of Parquet: raylink through ``sink_to_spark(..., format="delta")`` (a Delta folder;
``raylink -> table`` a Delta table) or ``sink_to_spark(table="db.<name>", format="iceberg")``,
Spark through ``.write.format("delta")`` or ``writeTo(...).using("iceberg").createOrReplace()``
(read back as that format for the check). Two more rows then show a streaming job's cost of the
table commit: ``raylink, checkpoints`` (the same job with checkpointing every
``--checkpoint-interval`` ms: one table commit per completed checkpoint) and ``raylink, upsert``
(the same with ``upsert_keys=["k"]``: one ``MERGE INTO`` per checkpoint, 1,000 keys; its ratios
compare a MERGE with plain writes). Under the table, the commits' median seconds next to the
checkpoints' median duration (trigger to completion, sampled from the job's checkpoint
statistics) give the commit's share of a checkpoint's cycle (trigger to commit).

    python bench/spark.py [--rows 1000000 5000000] [--rounds 3] [--parallelism 2] [--format delta]
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


def double_v_batch(batch):
    """``double_v`` on a whole Arrow record batch (``map_batches``)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    return pa.RecordBatch.from_arrays([batch.column(0), pc.multiply(batch.column(1), 2.0)], names=["k", "v"])


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
class Output:
    """Where a pipeline writes and how it is read back: a Parquet or Delta folder, or a table
    (``name``: the table's name for Spark, Iceberg's in raylink's Iceberg catalog)."""

    def __init__(self, fmt: str, path: str, table: Optional[str] = None) -> None:
        from raylink.connectors.spark.table_formats import iceberg_table_name

        self.fmt, self.path, self.table = fmt, path, table
        if fmt == "iceberg" and table is None:  # an Iceberg table per pipeline, named after its folder
            self.table = f"db.{os.path.basename(path).replace('-', '_')}"
        self.name = iceberg_table_name(self.table) if fmt == "iceberg" else self.table

    def sink_args(self) -> dict:
        return {"table": self.table} if self.table else {"path": self.path}

    def spark_write(self, frame) -> None:
        if self.fmt == "iceberg":
            frame.sparkSession.sql(f"CREATE NAMESPACE IF NOT EXISTS {self.name.rsplit('.', 1)[0]}")
            frame.writeTo(self.name).using("iceberg").createOrReplace()
        else:
            frame.write.mode("overwrite").format(self.fmt).save(self.path)

    def read(self, spark):
        return spark.table(self.name) if self.name else spark.read.format(self.fmt).load(self.path)

    def drop(self, spark) -> None:
        if self.name:
            spark.sql(f"DROP TABLE IF EXISTS {self.name}")


def raylink_pipeline(
    df,
    out: Output,
    parallelism: int,
    session: bool = False,
    batches: bool = False,
    checkpoint_ms: int = 0,
    upsert: bool = False,
    cold: bool = False,
) -> dict:
    from raylink.actors.cluster import release_warm_executors
    from raylink.api import Configuration, StreamExecutionEnvironment
    from raylink.connectors.spark.sink import SparkSink

    watcher = PeakWatcher()
    conf = Configuration()
    if not session:
        conf.set_string("raylink.session.enabled", "false")  # per-job TaskExecutors, as by default
    if cold:  # processes of its own, as a program's first job (left warm for the next row)
        release_warm_executors()
    if checkpoint_ms:
        conf.set_string("execution.checkpointing.interval", f"{checkpoint_ms} ms")
        conf.set_string("execution.checkpointing.dir", os.path.join(os.path.dirname(out.path), "checkpoints"))
    env = StreamExecutionEnvironment.get_execution_environment(conf)
    env.set_parallelism(parallelism)
    source = env.from_spark(df)
    stream = source.map_batches(double_v_batch) if batches else source.map(double_v)
    if checkpoint_ms:  # the sink's own object: its driver side lists the commits it made
        if upsert:
            out.drop(df.sparkSession)
            stream = stream.key_by(lambda r: r[0])
        extra = {"upsert_keys": ["k"]} if upsert else {"mode": "overwrite"}
        sink = SparkSink(schema=SCHEMA, format=out.fmt, **out.sink_args(), **extra)
        stream.sink_to(sink)
    else:
        stream.sink_to_spark(schema=SCHEMA, mode="overwrite", format=out.fmt, **out.sink_args())
    client = env.execute_async("bench spark")
    watcher.watch(client)
    durations = _CheckpointDurations(client) if checkpoint_ms else None
    result = client.get_job_execution_result(3600)
    measured = {**watcher.done(), "tasks_s": result.net_runtime_ms / 1000}
    if durations is not None:
        measured["checkpoint_s"] = durations.done()
        measured["commit_s"] = [c["seconds"] for c in sink.commits if c["how"] in ("delta", "iceberg", "merge")]
    return measured


class _CheckpointDurations:
    """The durations (trigger to completion) of a running job's completed checkpoints, sampled
    from its checkpoint statistics every 50 ms."""

    def __init__(self, client) -> None:
        self._seen: Dict[int, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, args=(client,), daemon=True)
        self._thread.start()

    def _loop(self, client) -> None:
        while not self._stop.is_set():
            try:
                stats = client.get_checkpoint_stats()
            except Exception:
                return
            if stats.get("lastCheckpointId") is not None and stats.get("lastCheckpointDuration") is not None:
                self._seen[stats["lastCheckpointId"]] = stats["lastCheckpointDuration"] / 1000
            self._stop.wait(0.05)

    def done(self) -> List[float]:
        self._stop.set()
        self._thread.join(5)
        return list(self._seen.values())


def spark_udf_pipeline(df, out: Output) -> dict:
    from pyspark.sql.functions import udf

    watcher = PeakWatcher()
    twice = udf(lambda v: v * 2.0, "double")
    out.spark_write(df.select("k", twice("v").alias("v")))
    return watcher.done()


def spark_pandas_udf_pipeline(df, out: Output) -> dict:
    from pyspark.sql.functions import pandas_udf

    watcher = PeakWatcher()
    twice = pandas_udf(lambda v: v * 2.0, "double")  # pd.Series -> pd.Series, Arrow batches
    out.spark_write(df.select("k", twice("v").alias("v")))
    return watcher.done()


def spark_native_pipeline(df, out: Output) -> dict:
    from pyspark.sql import functions as F

    watcher = PeakWatcher()
    out.spark_write(df.select("k", (F.col("v") * 2.0).alias("v")))
    return watcher.done()


def check(spark, rows: int, out: Output, expected_sum: float, what: str, upsert: bool = False) -> None:
    frame = out.read(spark)
    if upsert:  # one row per key k = i % 1000, holding one of its rows (v = i): which one, the
        # order the parallel source read them in decides
        got = frame.selectExpr(
            "count(*) AS n", "count(DISTINCT k) AS keys", "sum(int(CAST(v AS BIGINT) % 1000 != k)) AS bad"
        )
        got = got.collect()[0]
        if got["n"] != min(rows, 1000) or got["keys"] != got["n"] or got["bad"]:
            raise AssertionError(
                f"{what}: upserted {got['n']} rows over {got['keys']} keys, {got['bad']} of another key"
            )
        return
    got = frame.selectExpr("count(*) AS n", "sum(v) AS s").collect()[0]
    if got["n"] != rows or abs(got["s"] - expected_sum) > 1e-6 * abs(expected_sum):
        raise AssertionError(f"{what}: wrote {got['n']} rows (sum {got['s']}), expected {rows} (sum {expected_sum})")


# -- main ---------------------------------------------------------------------------------------------
def _fmt_mb(mb: float) -> str:
    return f"{mb:,.0f}" if mb else "-"


BASELINES = (("Spark Python UDF", "vs UDF"), ("Spark pandas_udf", "vs pandas"), ("Spark native", "vs native"))


def table(rows_list: List[int], names: List[str], times: dict, tasks: dict, peaks: dict) -> str:
    """One line per (rows, pipeline): median wall clock and tasks-running seconds, rows/s, the
    wall clock's ratio to each Spark baseline of the same run, peak RSS."""
    head = f"{'rows':>11}  {'pipeline':20s} {'wall s':>7} {'tasks s':>7} {'rows/s':>10}"
    head += "".join(f" {label:>9}" for _, label in BASELINES)
    lines = [head + f"  {'peak RSS MB: driver':>19} {'TaskExec':>8} {'Spark JVM':>9}"]
    for rows in rows_list:
        medians = {name: statistics.median(times[(rows, name)]) for name in names}
        for name in names:
            median = medians[name]
            task_s = tasks.get((rows, name))
            line = f"{rows:>11,}  {name:20s} {median:7.2f} "
            line += f"{statistics.median(task_s):7.2f}" if task_s else f"{'-':>7}"
            line += f" {rows / median:10,.0f}"
            for base, _label in BASELINES:
                line += f" {medians[base] / median:8.2f}x" if base in medians else f" {'-':>9}"
            peak = peaks[(rows, name)]
            line += f"  {_fmt_mb(peak['driver']):>19} {_fmt_mb(peak['executors']):>8} {_fmt_mb(peak['spark']):>9}"
            lines.append(line)
    return "\n".join(lines)


def main(argv: Optional[List[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[1_000_000, 5_000_000])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--parallelism", type=int, default=2)
    parser.add_argument(
        "--executor-cores", type=int, default=0, help="cores of Spark's executor (default: --parallelism)"
    )
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
        help="run only these pipelines (raylink-path raylink-batches raylink-table raylink-cold raylink-session "
        "spark-udf spark-pandas spark-native)",
    )
    parser.add_argument("--no-warmup", action="store_true", help="time the first run of each pipeline too")
    parser.add_argument(
        "--format",
        choices=("parquet", "delta", "iceberg"),
        default="parquet",
        help="the table format every pipeline writes",
    )
    parser.add_argument(
        "--checkpoint-interval", type=int, default=1000, help="ms, of the checkpointed rows (--format delta|iceberg)"
    )
    args = parser.parse_args(argv)
    fmt = args.format
    cores = args.executor_cores or args.parallelism

    from pyspark.sql import functions as F

    from raylink.actors.cluster import init_ray
    from raylink.connectors.spark import get_spark, session, stop

    started = time.perf_counter()
    # a private local Ray unless RAY_ADDRESS names one (never another program's running Ray)
    init_ray(
        os.environ.get("RAY_ADDRESS") or "local", include_dashboard=False, configure_logging=False, log_to_driver=False
    )
    ray_s = time.perf_counter() - started
    from raylink.actors.cluster import available_cpus

    # Spark runs ``cores`` tasks at once in its executor whatever Ray reserves for the executor's
    # actor; Ray reserves at most all CPUs but one, or raylink's TaskExecutors could not be placed
    reserved = max(1, min(cores, int(available_cpus()) - 1))
    started = time.perf_counter()
    spark = get_spark(
        num_executors=1,
        executor_cores=cores,
        configs={"spark.ray.raydp_spark_executor.actor.resource.cpu": str(reserved)},
    )
    spark_s = time.perf_counter() - started
    phases = ", ".join(f"{k} {v:.1f} s" for k, v in getattr(session, "start_phases", dict)().items())
    print(f"Ray {ray_s:.1f} s; Spark on Ray {spark_s:.1f} s ({phases})", flush=True)
    work = tempfile.mkdtemp(prefix="raylink-bench-spark-")
    every_ms = args.checkpoint_interval
    pipelines: Dict[str, Callable] = {
        "raylink -> path": lambda df, out: raylink_pipeline(df, out, args.parallelism),
        "raylink map_batches": lambda df, out: raylink_pipeline(df, out, args.parallelism, batches=True),
        "raylink -> table": lambda df, out: raylink_pipeline(df, out, args.parallelism),
        "  same, cold start": lambda df, out: raylink_pipeline(df, out, args.parallelism, cold=True),
        "  same, session": lambda df, out: raylink_pipeline(df, out, args.parallelism, session=True),
        "raylink, checkpoints": lambda df, out: raylink_pipeline(df, out, args.parallelism, checkpoint_ms=every_ms),
        "raylink, upsert": lambda df, out: raylink_pipeline(
            df, out, args.parallelism, checkpoint_ms=every_ms, upsert=True
        ),
        "Spark Python UDF": spark_udf_pipeline,
        "Spark pandas_udf": spark_pandas_udf_pipeline,
        "Spark native": spark_native_pipeline,
    }
    keys = {
        "raylink-path": "raylink -> path",
        "raylink-batches": "raylink map_batches",
        "raylink-table": "raylink -> table",
        "raylink-cold": "  same, cold start",
        "raylink-session": "  same, session",
        "raylink-checkpoints": "raylink, checkpoints",
        "raylink-upsert": "raylink, upsert",
        "spark-udf": "Spark Python UDF",
        "spark-pandas": "Spark pandas_udf",
        "spark-native": "Spark native",
    }
    if fmt == "parquet":  # a Parquet sink commits nothing per checkpoint worth a row; it upserts nothing
        del pipelines["raylink, checkpoints"], pipelines["raylink, upsert"]
    elif fmt == "iceberg":  # every Iceberg output is a table already
        del pipelines["raylink -> table"]
        pipelines["raylink -> iceberg"] = pipelines.pop("raylink -> path")
        keys["raylink-path"] = "raylink -> iceberg"
    else:
        pipelines["raylink -> delta"] = pipelines.pop("raylink -> path")
        keys["raylink-path"] = "raylink -> delta"
    if args.only:
        pipelines = {keys[o]: pipelines[keys[o]] for o in args.only if keys[o] in pipelines}
    session_cluster = None
    if "  same, session" in pipelines:
        try:
            from raylink.actors.session_entrypoint import start_session

            session_cluster = start_session(executors=args.parallelism)
        except Exception as exc:  # no session cluster here: skip the row
            print(f"(no session cluster: {type(exc).__name__}: {exc})")
            del pipelines["  same, session"]
    names = list(pipelines)
    times: Dict[tuple, List[float]] = {}
    tasks: Dict[tuple, List[float]] = {}
    peaks: Dict[tuple, dict] = {}
    commits: Dict[str, Dict[str, List[float]]] = {}  # checkpointed rows: commit and checkpoint seconds

    def frame(rows: int):
        partitions = args.partitions or max(4, 4 * rows // 1_000_000)
        df = (
            spark.range(0, rows, 1, partitions)
            .select((F.col("id") % 1000).cast("int").alias("k"), (F.col("id") * 0.5).alias("v"))
            .cache()
        )
        df.count()
        return df, float(sum(range(rows))) * 0.5 * 2.0

    def output(name: str, rows: int) -> Output:
        path = os.path.join(work, f"{name.strip().replace(' ', '_').replace(',', '').replace('>', '')}-{rows}")
        return Output(fmt, path, TABLE if name.endswith("table") else None)

    try:
        if not args.no_warmup:
            small, _ = frame(10_000)
            for name, run in pipelines.items():
                run(small, output(name, 10_000))
            small.unpersist()
        frames = {rows: frame(rows) for rows in args.rows}
        for round_no in range(args.rounds):
            order = names[round_no % len(names) :] + names[: round_no % len(names)]  # rotated each round
            for rows, (df, expected_sum) in frames.items():
                for name in order:
                    out = output(name, rows)
                    start = time.perf_counter()
                    peak = pipelines[name](df, out)
                    elapsed = time.perf_counter() - start
                    if round_no == 0:
                        check(spark, rows, out, expected_sum, name.strip(), upsert=name.endswith("upsert"))
                    for key in ("commit_s", "checkpoint_s"):
                        commits.setdefault(name, {}).setdefault(key, []).extend(peak.pop(key, []))
                    times.setdefault((rows, name), []).append(elapsed)
                    if "tasks_s" in peak:
                        tasks.setdefault((rows, name), []).append(peak.pop("tasks_s"))
                    best = peaks.setdefault((rows, name), {})
                    for key, value in peak.items():
                        best[key] = max(best.get(key, 0.0), value)
                    print(f"  round {round_no + 1}: {rows:>11,} rows  {name:20s} {elapsed:7.2f} s", flush=True)
        print()
        print(table(args.rows, names, times, tasks, peaks))
        print(
            f"\n(medians of {args.rounds} interleaved rounds; wall s: submission to result, tasks s: the job's tasks "
            f"running; vs X: X's wall s / this wall s; raylink at parallelism {args.parallelism}, "
            f"Spark: 1 executor x {spark.sparkContext.getConf().get('spark.executor.cores', '?')} core(s); "
            f"writing {fmt})"
        )
        for name, seconds in commits.items():
            if not seconds.get("commit_s"):
                continue
            commit = statistics.median(seconds["commit_s"])
            checkpoint = statistics.median(seconds["checkpoint_s"]) if seconds.get("checkpoint_s") else 0.0
            print(
                f"{name.strip()}: {len(seconds['commit_s'])} {fmt} commits, median {commit:.2f} s; checkpoints' median "
                f"duration {checkpoint:.2f} s: the commit is {commit / (commit + checkpoint):.0%} of a checkpoint's "
                "cycle (trigger to commit)"
            )
    finally:
        if session_cluster is not None:
            from raylink.actors.session_entrypoint import stop_session

            stop_session(session_cluster)
        shutil.rmtree(work, ignore_errors=True)
        for name in names:
            for rows in [10_000, *args.rows]:
                try:
                    output(name, rows).drop(spark)
                except Exception:
                    pass
        stop()


if __name__ == "__main__":
    main()
