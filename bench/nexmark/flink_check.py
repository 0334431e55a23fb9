"""Flink's own answers to the Nexmark queries, next to raylink's, over the same events: a check
run outside the test suite (it needs a JVM, Flink's jars and a Nexmark checkout).

``python -m raylink.bench.nexmark.flink_check --nexmark <nexmark checkout> --flink-lib <dir of
Flink's jars, e.g. PyFlink's pyflink/lib> [--queries q0,q1,...]``

For each query it writes the generated events as JSON lines (timestamps as SQL
``yyyy-MM-dd HH:mm:ss.SSS``, UTC), runs Nexmark's ``queries/qN.sql`` (read from the checkout,
its blackhole sink replaced by a JSON file sink) with Flink's Table API in BATCH mode (the
final answer of every query; q11's session windows in STREAMING mode; ``table.local-time-zone`` UTC) through a small Java launcher, runs
``raylink.bench.nexmark.queries.qN`` at parallelism 2 over the same events (the last update per
key, for updating queries) and prints, per query, whether the two multisets of rows are equal.

Not checked: q10 (Flink's query writes partitioned files itself), q12 (processing time),
q13 (needs the side-input file in the checkout's layout). q14's ``count_char`` (a Java UDF of
nexmark-flink) is compiled here under its class name from a few lines of Java (``javac``).
Thread-safety: a command-line tool, one run at a time per work folder.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from raylink.bench.nexmark.generator import NexmarkConfig, events
from raylink.bench.nexmark.queries import QUERIES, watermark_strategy
from raylink.bench.nexmark.source import NexmarkSource

#: the configs the tests use: 40 s of event time at 100 events/s; 13 h from 06:30; midnight
CONFIGS = {
    "windowed": NexmarkConfig(events=4000, events_per_second=100),
    "daylong": NexmarkConfig(
        events=4000, events_per_second=1, num_event_generators=12, base_time=20000 * 86_400_000 + 23_400_000
    ),
    "midnight": NexmarkConfig(events=4000, events_per_second=1, base_time=20000 * 86_400_000 - 1_800_000),
}
CONFIG_OF = {"q14": "daylong", "q15": "midnight", "q16": "midnight", "q17": "midnight"}
#: updating queries: how many leading columns are the key (None: q19's auction and rank_number)
UPDATING: Dict[str, Optional[int]] = {"q4": 1, "q9": 1, "q15": 1, "q16": 2, "q17": 2, "q18": 2, "q19": None}
#: queries Flink's batch planner cannot run (SESSION group windows): run in STREAMING mode over
#: the bounded input (insert-only results, the windows fire at its end)
STREAMING = {"q11"}
DEFAULT_QUERIES = [q for q in QUERIES if q not in ("q10", "q12", "q13")]

_TIMESTAMP_FIELDS = {"dateTime", "expires"}
_LAUNCHER = """
import java.nio.file.Files;
import java.nio.file.Path;
import org.apache.flink.table.api.EnvironmentSettings;
import org.apache.flink.table.api.TableEnvironment;
import org.apache.flink.table.api.TableResult;

public class RunSql {
    public static void main(String[] args) throws Exception {
        EnvironmentSettings mode = args[1].equals("batch")
            ? EnvironmentSettings.inBatchMode() : EnvironmentSettings.inStreamingMode();
        TableEnvironment env = TableEnvironment.create(mode);
        env.getConfig().set("table.local-time-zone", "UTC");
        env.getConfig().set("parallelism.default", "1");
        for (String statement : Files.readString(Path.of(args[0])).split(";\\\\s*\\\\n")) {
            if (statement.isBlank()) continue;
            TableResult result = env.executeSql(statement);
            if (statement.strip().toUpperCase().startsWith("INSERT")) result.await();
        }
    }
}
"""
_DATAGEN = """CREATE TABLE datagen (
    event_type INT,
    person ROW<id BIGINT, name VARCHAR, emailAddress VARCHAR, creditCard VARCHAR, city VARCHAR,
        state VARCHAR, `dateTime` TIMESTAMP(3), extra VARCHAR>,
    auction ROW<id BIGINT, itemName VARCHAR, description VARCHAR, initialBid BIGINT, reserve BIGINT,
        `dateTime` TIMESTAMP(3), expires TIMESTAMP(3), seller BIGINT, category BIGINT, extra VARCHAR>,
    bid ROW<auction BIGINT, bidder BIGINT, price BIGINT, channel VARCHAR, url VARCHAR,
        `dateTime` TIMESTAMP(3), extra VARCHAR>,
    `dateTime` AS CASE WHEN event_type = 0 THEN person.`dateTime`
        WHEN event_type = 1 THEN auction.`dateTime` ELSE bid.`dateTime` END,
    WATERMARK FOR `dateTime` AS `dateTime` - INTERVAL '4' SECOND
) WITH ('connector' = 'filesystem', 'path' = '{path}', 'format' = 'json',
        'json.timestamp-format.standard' = 'SQL');
"""
_SQL_TIMESTAMP = re.compile(r"^\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(\.\d+)?$")


def sql_timestamp(ms: int) -> str:
    moment = datetime.datetime.fromtimestamp(ms / 1000, datetime.timezone.utc)
    return moment.strftime("%Y-%m-%d %H:%M:%S.") + "%03d" % (ms % 1000)


def epoch_ms(text: str) -> int:
    moment = datetime.datetime.fromisoformat(text.replace(" ", "T")).replace(tzinfo=datetime.timezone.utc)
    return int(round(moment.timestamp() * 1000))


def write_events(config: NexmarkConfig, path: Path) -> None:
    """The events as JSON lines of the ``datagen`` table's shape."""
    with open(path, "w", encoding="utf-8") as out:
        for event in events(config.events or 0, config):
            item = event.as_dict(recursive=True)
            item.pop("dateTime")
            for kind in ("person", "auction", "bid"):
                nested = item[kind]
                if nested is not None:
                    for name in _TIMESTAMP_FIELDS & nested.keys():
                        nested[name] = sql_timestamp(nested[name])
            out.write(json.dumps(item) + "\n")


def _statements(text: str) -> List[str]:
    text = "\n".join(line.split("--", 1)[0] for line in text.splitlines())
    return [s.strip() for s in text.split(";") if s.strip()]


def query_script(nexmark: Path, query: str, events_dir: Path, out_dir: Path) -> str:
    """Nexmark's DDL views and ``qN.sql`` over ``events_dir``, its sink a JSON folder."""
    resources = nexmark / "nexmark-flink" / "src" / "main" / "resources" / "queries"
    views = (resources / "ddl_views.sql").read_text().replace("${NEXMARK_TABLE}", "datagen")
    parts = [_DATAGEN.format(path=events_dir)] + [s + ";" for s in _statements(views)]
    sink = (
        f"'connector' = 'filesystem', 'path' = '{out_dir}', 'format' = 'json', 'json.timestamp-format.standard' = 'SQL'"
    )
    for statement in _statements((resources / f"{query}.sql").read_text()):
        if statement.upper().startswith("CREATE TABLE"):
            statement = re.sub(r"WITH\s*\((.|\n)*\)\s*$", f"WITH ({sink})", statement)
        parts.append(statement + ";")
    return "\n".join(parts) + "\n"


_COUNT_CHAR = """package com.github.nexmark.flink.udf;

import org.apache.flink.table.functions.ScalarFunction;

/** q14's count_char(s, c): how often the character c occurs in s (0 for null). */
public class CountChar extends ScalarFunction {
    public long eval(String s, String c) {
        long count = 0;
        if (s != null) {
            for (int i = 0; i < s.length(); i++) {
                if (s.charAt(i) == c.charAt(0)) count++;
            }
        }
        return count;
    }
}
"""


def _udf_classes(flink_lib: Path, work: Path) -> Path:
    """q14's ``count_char`` compiled under the class name Nexmark's SQL registers."""
    classes = work / "udf"
    if not (classes / "com" / "github" / "nexmark" / "flink" / "udf" / "CountChar.class").exists():
        source = work / "CountChar.java"
        source.write_text(_COUNT_CHAR)
        command = ["javac", "-cp", f"{flink_lib}/*", "-d", str(classes), str(source)]
        subprocess.run(command, check=True, capture_output=True, timeout=300)
    return classes


def run_flink(script: str, flink_lib: Path, work: Path, mode: str = "batch") -> None:
    (work / "RunSql.java").write_text(_LAUNCHER)
    (work / "query.sql").write_text(script)
    classpath = f"{flink_lib}/*{os.pathsep}{_udf_classes(flink_lib, work)}"
    command = ["java", "-cp", classpath, str(work / "RunSql.java"), str(work / "query.sql"), mode]
    done = subprocess.run(command, capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        causes = [line for line in done.stderr.splitlines() if "Exception:" in line]
        raise RuntimeError(f"Flink failed ({done.returncode}): {causes[-1] if causes else done.stderr[-2000:]}")


def read_flink_rows(out_dir: Path) -> List[tuple]:
    rows = []
    for root, dirs, files in os.walk(out_dir):
        dirs[:] = [d for d in dirs if not d.startswith((".", "_"))]
        for name in files:
            if name.startswith((".", "_")):
                continue
            with open(os.path.join(root, name), encoding="utf-8") as lines:
                for line in lines:
                    if line.strip():
                        values = json.loads(line).values()
                        rows.append(tuple(_plain(v) for v in values))
    return rows


def _plain(value: Any) -> Any:
    if isinstance(value, str) and _SQL_TIMESTAMP.match(value):
        return epoch_ms(value)
    return value


def raylink_rows(query: str, config: NexmarkConfig, parallelism: int = 2) -> List[tuple]:
    from raylink.api import Configuration, StreamExecutionEnvironment

    env = StreamExecutionEnvironment.get_execution_environment(Configuration().set_string("execution.target", "local"))
    env.set_parallelism(parallelism)
    stream = env.from_source(NexmarkSource(config), watermark_strategy(), "nexmark")
    rows = list(QUERIES[query](stream).execute_and_collect())
    if query not in UPDATING:
        return rows
    key_columns, last = UPDATING[query], {}
    for row in rows:
        last[row[:key_columns] if key_columns else (row[0], row[-1])] = row
    return list(last.values())


def compare(query: str, nexmark: Path, flink_lib: Path, work: Path) -> Tuple[bool, int, int, list]:
    """(equal, raylink rows, Flink rows, a few rows only one side has)."""
    config = CONFIGS[CONFIG_OF.get(query, "windowed")]
    events_dir = work / "events"
    events_dir.mkdir(exist_ok=True)
    write_events(config, events_dir / "events.json")
    out_dir = work / f"out-{query}"
    mode = "streaming" if query in STREAMING else "batch"
    run_flink(query_script(nexmark, query, events_dir, out_dir), flink_lib, work, mode)
    ours, theirs = Counter(raylink_rows(query, config)), Counter(read_flink_rows(out_dir))
    differ = list(((ours - theirs) + (theirs - ours)).elements())[:3]
    return ours == theirs, sum(ours.values()), sum(theirs.values()), differ


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nexmark", required=True, type=Path, help="a checkout of github.com/nexmark/nexmark")
    parser.add_argument("--flink-lib", required=True, type=Path, help="the folder of Flink's jars")
    parser.add_argument("--queries", default=",".join(DEFAULT_QUERIES))
    args = parser.parse_args(argv)
    failed = 0
    with tempfile.TemporaryDirectory(prefix="nexmark-flink-check-") as work:
        for query in args.queries.split(","):
            try:
                equal, ours, theirs, differ = compare(query, args.nexmark, args.flink_lib, Path(work))
            except (RuntimeError, subprocess.SubprocessError) as exc:
                failed += 1
                print(f"{query:4} FAILED  {exc}", flush=True)
                continue
            failed += not equal
            print(f"{query:4} {'equal' if equal else 'DIFFER'}  raylink {ours} rows, Flink {theirs} rows", flush=True)
            for row in differ:
                print(f"      only on one side: {str(row)[:200]}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
