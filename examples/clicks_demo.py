"""The clicks demo: Spark builds a day of click events as a Delta table, raylink aggregates
them per page, Spark gets the result back as Delta tables.

``python -m raylink demo`` (or ``python examples/clicks_demo.py``) with nothing
configured:

1. starts a local Ray and Spark on it (RayDP; 1 executor, 1 core) with its
   warehouse in ``./warehouse``;
2. builds the input Delta table ``clicks_raw`` with Spark: one day of synthetic click
   events (``user, page, ts, ms`` as raw strings, as they come from a log), a few
   of them malformed (no user, empty page, unparsable time or duration);
3. runs a raylink job on Ray: ``from_spark_table(..., format="delta")`` (Spark reads the
   table's latest version and turns it into Arrow batches while the job deploys; the
   sources read them from Spark's executors) → parse (malformed rows to a side
   output) → ``key_by(page)`` → per-page aggregate (clicks, distinct users,
   average/max duration, first/last click, peak hour) emitted at the end of input;
4. writes the aggregate to the Delta table ``clicks_per_page`` and the malformed
   rows to ``clicks_malformed`` (``sink_to_spark(table=..., format="delta",
   mode="overwrite")``: one Delta commit per table when the input ends),
   reads them back with Spark, with each table's Delta version, and prints a short summary;
5. stops Spark and Ray (only what it started).

Needs the ``raylink[spark]`` extra (``pip install 'raylink[spark]'`` and a Java 17
runtime); ``scripts/demo.sh`` installs both.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from datetime import datetime, timezone
from typing import Optional

from raylink.api import Configuration, OutputTag, StreamExecutionEnvironment
from raylink.api.functions import KeyedProcessFunction, ProcessFunction
from raylink.api.state import ValueStateDescriptor

END_OF_INPUT = (1 << 63) - 1  # the final watermark of a bounded source: fires per-key results
MALFORMED = OutputTag("malformed")
PER_PAGE_SCHEMA = (
    "page string, clicks bigint, users bigint, avg_ms double, max_ms bigint, "
    "first_click timestamp, last_click timestamp, peak_hour int"
)
MALFORMED_SCHEMA = "reason string, user string, page string, ts string, ms string"
TABLES = ("clicks_raw", "clicks_per_page", "clicks_malformed")

if __name__ != "__main__":  # imported (e.g. by ``raylink demo``): ship the functions by value
    from raylink.actors.cluster import ship_by_value

    ship_by_value(sys.modules[__name__])

INPUT_SQL = """
WITH events AS (
  SELECT id,
         pmod(hash(id, 'page'), 100)                                           AS r,
         pmod(hash(id, 'user'), {users})                                       AS u,
         timestamp_seconds(1714521600                     -- 2024-05-01 00:00:00 UTC
                           + cast(id * 86400 / {rows} AS bigint)
                           + pmod(hash(id, 'jitter'), 30))                     AS at
  FROM range(0, {rows}, 1, {partitions})
)
SELECT CASE WHEN id % 997 = 0 THEN NULL ELSE concat('user', cast(u AS string)) END AS user,
       CASE WHEN id % 1499 = 0 THEN ''
            WHEN r < 30 THEN '/home'    WHEN r < 50 THEN '/search'  WHEN r < 65 THEN '/product'
            WHEN r < 75 THEN '/cart'    WHEN r < 82 THEN '/checkout' WHEN r < 90 THEN '/blog'
            WHEN r < 96 THEN '/account' ELSE '/help' END                                  AS page,
       CASE WHEN id % 1009 = 0 THEN 'yesterday'
            ELSE date_format(at, "yyyy-MM-dd'T'HH:mm:ss") END                             AS ts,
       CASE WHEN id % 1201 = 0 THEN 'n/a'
            ELSE cast(20 + pmod(hash(id, 'ms'), 1500) + r * 7 AS string) END              AS ms
FROM events
"""


class ParseClick(ProcessFunction):
    """Raw strings → ``(page, user, ts, ms)``; anything malformed → side output with the reason."""

    def process_element(self, row, ctx):
        user, page, ts, ms = row
        reason = None
        if not user:
            reason = "missing user"
        elif not page:
            reason = "missing page"
        else:
            try:
                when = datetime.fromisoformat(ts).replace(tzinfo=timezone.utc)
            except (TypeError, ValueError):
                reason = "bad timestamp"
            else:
                try:
                    duration = int(ms)
                except (TypeError, ValueError):
                    reason = "bad duration"
                else:
                    yield page, user, when, duration
                    return
        yield MALFORMED, (reason, user, page, ts, ms)


class PageStats(KeyedProcessFunction):
    """Per page: clicks, distinct users, total/max ms, first/last click, clicks per hour."""

    def open(self, runtime_context):
        self.stats = runtime_context.get_state(ValueStateDescriptor("stats"))
        self.users = runtime_context.get_state(ValueStateDescriptor("users"))

    def process_element(self, click, ctx):
        page, user, when, ms = click
        stats = self.stats.value()
        if stats is None:
            stats = [0, 0, 0, when, when, [0] * 24]
            self.users.update(set())
            ctx.timer_service().register_event_time_timer(END_OF_INPUT)
        users = self.users.value()
        users.add(user)
        stats[0] += 1
        stats[1] += ms
        stats[2] = max(stats[2], ms)
        stats[3] = min(stats[3], when)
        stats[4] = max(stats[4], when)
        stats[5][when.hour] += 1
        self.stats.update(stats)
        self.users.update(users)

    def on_timer(self, timestamp, ctx):
        clicks, total_ms, max_ms, first, last, hours = self.stats.value()
        peak = max(range(24), key=hours.__getitem__)
        yield (ctx.get_current_key(), clicks, len(self.users.value()), total_ms / clicks, max_ms, first, last, peak)


def build_job(env: StreamExecutionEnvironment, clicks_table: str) -> None:
    """The raylink job over the input Delta table; returns nothing (sinks are registered)."""
    parsed = env.from_spark_table(clicks_table, format="delta").process(ParseClick()).name("Parse")
    (
        parsed.key_by(lambda click: click[0])
        .process(PageStats())
        .sink_to_spark(
            table="clicks_per_page", schema=PER_PAGE_SCHEMA, format="delta", mode="overwrite", name="Per-page Table"
        )
    )
    (
        parsed.get_side_output(MALFORMED).sink_to_spark(
            table="clicks_malformed",
            schema=MALFORMED_SCHEMA,
            format="delta",
            mode="overwrite",
            name="Malformed Table",
        )
    )


def _drop_old_tables(spark, warehouse: str) -> None:
    """Tables of a previous run: the catalog is per session, the files stay in the warehouse."""
    for table in TABLES:
        spark.sql(f"DROP TABLE IF EXISTS {table}")
        folder = os.path.join(warehouse, table)
        if os.path.isdir(folder):
            shutil.rmtree(folder)


def _delta_version(spark, table: str) -> int:
    """The table's latest Delta version, as ``DESCRIBE HISTORY`` lists it."""
    return spark.sql(f"DESCRIBE HISTORY {table} LIMIT 1").collect()[0]["version"]


def run(
    rows: int = 100_000, users: int = 5_000, parallelism: int = 2, warehouse: str = "warehouse", out=sys.stdout
) -> dict:
    """Run the demo end to end; returns the numbers it printed."""
    from raylink.connectors.spark import get_spark, stop

    warehouse = os.path.abspath(warehouse)
    os.makedirs(warehouse, exist_ok=True)
    started = time.perf_counter()
    try:
        spark = get_spark(warehouse_dir=warehouse)
        ready = time.perf_counter()
        warehouse = spark.conf.get("spark.sql.warehouse.dir").replace("file:", "")
        _drop_old_tables(spark, warehouse)
        spark.sql(
            "CREATE TABLE clicks_raw USING delta AS "
            + INPUT_SQL.format(rows=rows, users=users, partitions=max(2, parallelism))
        )
        built = time.perf_counter()

        env = StreamExecutionEnvironment.get_execution_environment(Configuration())
        env.set_parallelism(parallelism)
        build_job(env, "clicks_raw")  # Spark starts on the table's rows in the background
        job_start = time.perf_counter()
        result = env.execute("clicks demo")
        job_end = time.perf_counter()

        # read back with Spark: two queries (the per-page table is a row per page)
        per_page = spark.table("clicks_per_page").orderBy("clicks", ascending=False).collect()
        reasons = spark.table("clicks_malformed").groupBy("reason").count().orderBy("reason").collect()
        versions = {t: _delta_version(spark, t) for t in TABLES}
        read_back = time.perf_counter()
        pages, bad = len(per_page), sum(r["count"] for r in reasons)
        counted = sum(row.clicks for row in per_page)
        summary = {
            "rows_in": rows,
            "pages": pages,
            "clicks_aggregated": counted,
            "malformed": bad,
            "spark_start_s": ready - started,
            "input_s": built - ready,
            "job_build_s": job_start - built,
            "job_s": job_end - job_start,
            "read_back_s": read_back - job_end,
            "job_runtime_ms": result.get_net_runtime(),
            "vertex_metrics": result.vertex_metrics(),
            "warehouse": warehouse,
        }
        p = lambda *a: print(*a, file=out)  # noqa: E731
        p(
            f"raylink demo: {rows:,} click events (Delta table clicks_raw) -> {pages} pages in "
            f"clicks_per_page ({counted:,} clicks), {bad} malformed rows in clicks_malformed"
        )
        p(
            f"  rows in {rows:,} = aggregated {counted:,} + malformed {bad}: "
            f"{'ok' if counted + bad == rows else 'MISMATCH'}"
        )
        p(
            f"  time: Spark on Ray {ready - started:.1f} s, input table {built - ready:.1f} s, "
            f"job built {job_start - built:.1f} s, raylink job {job_end - job_start:.1f} s "
            f"(runtime {result.get_net_runtime() / 1000:.1f} s, incl. reading from Spark and the table commits), "
            f"read back {read_back - job_end:.1f} s"
        )
        p("  per vertex (records in / out, subtasks):")
        for name, m in result.vertex_metrics().items():
            p(f"    {name}: {m['numRecordsIn']:,} / {m['numRecordsOut']:,} x{m['subtasks']}")
        p("  top pages (read back with Spark):")
        for row in per_page[:5]:
            p(
                f"    {row.page:<10} {row.clicks:>7,} clicks {row.users:>5,} users "
                f"avg {row.avg_ms:6.1f} ms  peak hour {row.peak_hour:02d}:00"
            )
        p("  malformed: " + ", ".join(f"{r['reason']} {r['count']}" for r in reasons))
        p(
            f"  Delta tables under {warehouse}: "
            + ", ".join(f"{table} version {version}" for table, version in versions.items())
        )
        return summary
    finally:
        stopping = time.perf_counter()
        from raylink.connectors.spark.session import attached_to_shared_spark

        stopped = "the session cluster's Spark left running" if attached_to_shared_spark() else "Spark and Ray stopped"
        stop()  # the Spark session and the local Ray raylink started; nothing else
        summary_total = time.perf_counter() - started
        print(f"  total {summary_total:.1f} s; {stopped} ({summary_total - (stopping - started):.1f} s)", file=out)


def main(argv: Optional[list] = None) -> int:
    parser = argparse.ArgumentParser(prog="raylink demo", description=__doc__.splitlines()[0])
    add_arguments(parser)
    args = parser.parse_args(argv)
    run(args.rows, args.users, args.parallelism, args.warehouse)
    return 0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--rows", type=int, default=100_000, help="click events in the day (default 100000)")
    parser.add_argument("--users", type=int, default=5_000, help="distinct users (default 5000)")
    parser.add_argument("--parallelism", type=int, default=2, help="job parallelism (default 2)")
    parser.add_argument("--warehouse", default="warehouse", help="Spark warehouse folder (default ./warehouse)")


if __name__ == "__main__":
    sys.exit(main())
