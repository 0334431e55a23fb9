"""The ``raylink loadtest`` sub-command: its arguments, ``list``, a sweep, or a soak (``--soak``).

``register_cli(subparsers)`` adds it to the ``raylink`` CLI; ``main(argv)`` runs it
alone (``python -m raylink.loadtest``). The scenario is resolved before Ray starts,
so a bad name fails at once. Called on the main thread. No Flink counterpart.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any, Optional

from raylink.core.options import ExecutionOptions, read_option
from raylink.loadtest.kafka_driver import DEFAULT_CHECKPOINT_INTERVAL_MS, DEFAULT_PARTITIONS, KafkaLoad, check_load
from raylink.loadtest.nexmark import DEFAULT_START_DELAY_S, nexmark_scenario, query_names
from raylink.loadtest.report import require_plots
from raylink.loadtest.runner import run_loadtest
from raylink.loadtest.scenarios import SCENARIOS, resolve_scenario, scenario_names, spark_scenario
from raylink.loadtest.soak import DEFAULT_SAMPLE_INTERVAL_S, parse_duration, run_soak
from raylink.loadtest.soak_report import DEFAULT_MAX_DRIFT, DEFAULT_MAX_SLOPE_MIB_PER_H

DESCRIPTION = "run a scenario at a target rate (or flat out) and report what it achieved"


def _parse_rates(text: str) -> list:
    rates = []
    for part in text.split(","):
        part = part.strip().lower()
        if part in ("max", "inf", "unlimited"):
            rates.append(None)
        else:
            value = float(part.replace("_", ""))
            if value <= 0:
                raise argparse.ArgumentTypeError(f"rate must be > 0 or 'max', got {part}")
            rates.append(value)
    return rates


def _parse_rate_steps(text: str) -> list:
    """``0:200,10:1000,50:200`` -> ``[(0.0, 200.0), (10.0, 1000.0), (50.0, 200.0)]``."""
    from raylink.api.connectors import RateLimiterStrategy

    try:
        steps = [tuple(float(x.replace("_", "")) for x in part.split(":")) for part in text.split(",") if part.strip()]
        return list(RateLimiterStrategy.steps_of(steps).steps)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"--rate-steps expects SECONDS:RATE,... starting at 0: {exc}") from None


def _parse_parallelisms(text: str) -> list:
    values = [int(p) for p in text.split(",") if p.strip()]
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"parallelism must be >= 1, got {text}")
    return values


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "scenario", help=f"one of {', '.join(scenario_names())}, or a job file defining build(env, source)"
    )
    parser.add_argument(
        "--rate",
        type=_parse_rates,
        default=[None],
        help="target records/s in total at the source, or 'max' (flat out); comma-separated "
        "for a sweep, e.g. 50000,100000,max (default max)",
    )
    parser.add_argument(
        "--rate-steps",
        type=_parse_rate_steps,
        default=None,
        metavar="S:RATE,...",
        help="a rate that changes while the job runs, e.g. 0:200,20:1000,60:200 (records/s from each second "
        "on; Flink's DataGeneratorSource, checkpointed and rescalable): with --conf job.autoscaler.enabled=true "
        "the report plots parallelism, pendingRecords and p99 latency over time",
    )
    parser.add_argument("--duration", type=float, default=None, help="seconds per run (default 10 unless --records)")
    parser.add_argument("--records", type=int, default=None, help="records per run (stop at whichever comes first)")
    parser.add_argument(
        "--parallelism",
        type=_parse_parallelisms,
        default=[1],
        help="parallelism, or several comma-separated (default 1)",
    )
    parser.add_argument("--output", default=None, help="report folder (default loadtest-<scenario>-<time>)")
    parser.add_argument("--progress", action="store_true", help="show the progress bar even when not a TTY")
    parser.add_argument(
        "--sample-interval",
        type=float,
        default=None,
        help=f"metrics sampling period in s (default 0.5; {DEFAULT_SAMPLE_INTERVAL_S:g} with --soak)",
    )
    parser.add_argument("--buffer-timeout", type=int, default=None, help="execution.buffer-timeout in ms")
    parser.add_argument(
        "--no-plots", action="store_true", help="skip the PNG plots (they need raylink[plots], i.e. matplotlib)"
    )
    parser.add_argument("--list", action="store_true", help="list the built-in scenarios and exit")
    parser.add_argument(
        "--conf",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a job configuration value, e.g. execution.target=local (repeatable)",
    )
    nexmark = parser.add_argument_group("nexmark (raylink loadtest nexmark --query q5 --rate R --duration S)")
    nexmark.add_argument(
        "--query",
        default=None,
        metavar="QN",
        help="the Nexmark query of the nexmark scenario (q0..q22, raylink.bench.nexmark.queries); its events "
        "are emitted at their dateTime as wall-clock time, latency = sink time - output record's event time",
    )
    nexmark.add_argument(
        "--start-delay",
        type=float,
        default=DEFAULT_START_DELAY_S,
        metavar="S",
        help=f"nexmark: the first event is due S s after the job is built, so deploying the job is not "
        f"measured as latency (default {DEFAULT_START_DELAY_S:g})",
    )
    kafka = parser.add_argument_group(
        "kafka (the scenario's records go through a Kafka topic, produced at --rate outside the job, read by "
        "KafkaSource; latency from each record's Kafka timestamp, consumer lag over time)"
    )
    kafka.add_argument(
        "--kafka-bootstrap-servers",
        default=None,
        metavar="HOST:PORT",
        help="the Kafka cluster to produce into and read from",
    )
    kafka.add_argument(
        "--kafka",
        action="store_true",
        help="start a local single-node Kafka broker for the run (stopped at the end; needs the jars "
        "scripts/setup.sh resolves)",
    )
    kafka.add_argument(
        "--topic", default=None, help="an existing topic to append the run's records to (default: a new topic)"
    )
    kafka.add_argument(
        "--partitions",
        type=int,
        default=DEFAULT_PARTITIONS,
        help=f"partitions of the new topic (default {DEFAULT_PARTITIONS}); record j goes to partition j %% N",
    )
    kafka.add_argument(
        "--kafka-checkpoint-interval",
        type=int,
        default=DEFAULT_CHECKPOINT_INTERVAL_MS,
        metavar="MS",
        help=f"the job's checkpoint interval: its consumer group commits offsets on each checkpoint "
        f"(default {DEFAULT_CHECKPOINT_INTERVAL_MS})",
    )
    soak = parser.add_argument_group("soak (one long run at --rate, watching TaskExecutor memory and latency)")
    soak.add_argument(
        "--soak",
        type=_parse_duration,
        default=None,
        metavar="DURATION",
        help="run once for DURATION (60s, 30m, 8h) and report the memory slope per TaskExecutor, "
        "the latency drift and a verdict (exit code 1 when it fails)",
    )
    soak.add_argument(
        "--tracemalloc",
        action="store_true",
        help="trace allocations in the TaskExecutors (slower) and report the sites that grow",
    )
    soak.add_argument("--top", type=int, default=20, help="object types / allocation sites per report (20)")
    soak.add_argument(
        "--max-slope",
        type=float,
        default=DEFAULT_MAX_SLOPE_MIB_PER_H,
        metavar="MIB_PER_H",
        help=f"memory slope that fails the verdict (default {DEFAULT_MAX_SLOPE_MIB_PER_H:g} MiB/h)",
    )
    soak.add_argument(
        "--max-drift",
        type=float,
        default=100 * DEFAULT_MAX_DRIFT,
        metavar="PERCENT",
        help=f"p99 latency drift that fails the verdict (default {100 * DEFAULT_MAX_DRIFT:.0f} %%)",
    )


def _parse_duration(text: str) -> float:
    try:
        return parse_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _parse_conf(pairs: list) -> dict:
    conf = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise SystemExit(f"--conf expects KEY=VALUE, got {pair!r}")
        conf[key.strip()] = value.strip()
    return conf


def _kafka_load(args: argparse.Namespace) -> Optional[KafkaLoad]:
    """The ``--kafka*`` options as a :class:`KafkaLoad`, or None without them."""
    if not args.kafka and not args.kafka_bootstrap_servers:
        if args.topic is not None:
            raise SystemExit("--topic needs --kafka-bootstrap-servers HOST:PORT or --kafka")
        return None
    if args.kafka and args.kafka_bootstrap_servers:
        raise SystemExit("give either --kafka (a local broker) or --kafka-bootstrap-servers HOST:PORT, not both")
    try:
        return KafkaLoad(
            bootstrap_servers=args.kafka_bootstrap_servers,
            start_broker=args.kafka,
            topic=args.topic,
            partitions=args.partitions,
            checkpoint_interval_ms=args.kafka_checkpoint_interval,
        )
    except ValueError as exc:
        raise SystemExit(str(exc)) from None


def _scenario(args: argparse.Namespace, kafka: Optional[KafkaLoad]) -> Any:
    if args.scenario == "nexmark":
        if not args.query:
            raise SystemExit(f"the nexmark scenario needs --query QN: one of {', '.join(query_names())}")
        if kafka is not None:
            raise SystemExit("the nexmark scenario has a source of its own: it does not run with --kafka")
        return nexmark_scenario(args.query, args.start_delay)
    if args.query:
        raise SystemExit(f"--query is for the nexmark scenario, not {args.scenario!r}")
    scenario = resolve_scenario(args.scenario)
    if kafka is not None and scenario.make_source is not None:
        raise SystemExit(f"scenario {scenario.name!r} has a source of its own: it does not run with --kafka")
    return scenario


def _soak(args: argparse.Namespace, output: str, scenario: Any, kafka: Optional[KafkaLoad] = None) -> int:
    """One soak run; exit code 1 when its verdict is FAIL."""
    if len(args.rate) != 1 or len(args.parallelism) != 1:
        raise SystemExit("--soak runs one rate at one parallelism: give --rate N (or max) and --parallelism P")
    from raylink.actors.cluster import ensure_ray

    conf = _parse_conf(args.conf)
    if read_option(conf, ExecutionOptions.TARGET) == "ray":
        ensure_ray()
    report = run_soak(
        scenario,
        args.rate[0],
        args.soak,
        output,
        parallelism=args.parallelism[0],
        sample_interval=args.sample_interval or DEFAULT_SAMPLE_INTERVAL_S,
        tracemalloc=args.tracemalloc,
        top=args.top,
        buffer_timeout=args.buffer_timeout,
        conf=conf,
        plots=not args.no_plots,
        progress=args.progress or sys.stderr.isatty(),
        max_slope=args.max_slope,
        max_drift=args.max_drift / 100.0,
        kafka=kafka,
    )
    return 0 if report["verdict"] != "FAIL" else 1


def command(args: argparse.Namespace) -> int:
    if args.list or args.scenario == "list":
        for s in list(SCENARIOS.values()) + [spark_scenario()]:
            state = "" if s.available else f"  [unavailable: {s.unavailable_reason}]"
            print(f"{s.name:<10} {s.description}{state}")
        print(f"{'nexmark':<10} a Nexmark query at a rate: --query QN, one of {', '.join(query_names())}")
        return 0
    duration = args.duration
    if duration is None and args.records is None:
        duration = 10.0
    stem = os.path.basename(args.scenario).replace(".py", "") + (f"-{args.query}" if args.query else "")
    kind = "soak" if args.soak else "loadtest"
    output = args.output or f"{kind}-{stem}-{time.strftime('%Y%m%d-%H%M%S')}"
    kafka = _kafka_load(args)
    scenario = _scenario(args, kafka)  # fail on a bad name before starting Ray
    if not scenario.available:
        raise SystemExit(f"scenario {scenario.name!r} is unavailable: {scenario.unavailable_reason}")
    if kafka is not None:  # no record count, or no such topic: before starting Ray or a broker
        check_load(kafka, args.rate, args.soak or duration, args.records)
    if args.rate_steps is not None:
        if kafka is not None or args.soak or scenario.make_source is not None or scenario.make_paced_source:
            raise SystemExit(f"--rate-steps needs a scenario fed by the load test's own source, not {scenario.name!r}"
                             " (nor --kafka or --soak)")  # fmt: skip
        if len(args.rate) > 1 or args.rate[0] is not None:
            raise SystemExit("--rate-steps replaces --rate: give one or the other")
        if args.duration is None:
            duration = max(t for t, _ in args.rate_steps) + 10.0
    if args.soak:
        return _soak(args, output, scenario, kafka)
    plots = not args.no_plots
    if plots:
        require_plots()  # fail before starting Ray
    from raylink.actors.cluster import ensure_ray

    conf = _parse_conf(args.conf)
    if read_option(conf, ExecutionOptions.TARGET) == "ray":
        ensure_ray()
    run_loadtest(
        scenario,
        args.rate,
        args.parallelism,
        duration,
        args.records,
        output,
        progress=args.progress or sys.stderr.isatty(),
        sample_interval=args.sample_interval or 0.5,
        buffer_timeout=args.buffer_timeout,
        plots=plots,
        conf=conf,
        kafka=kafka,
        rate_steps=args.rate_steps,
    )
    return 0


def register_cli(subparsers: Any) -> None:
    """Add ``loadtest`` to the ``raylink`` CLI's sub-commands."""
    parser = subparsers.add_parser(
        "loadtest", help="run a load-test scenario and write a report", description=f"raylink loadtest: {DESCRIPTION}"
    )
    add_arguments(parser)
    parser.set_defaults(func=command)


def main(argv: Optional[list] = None) -> int:
    parser = argparse.ArgumentParser(prog="raylink loadtest", description=DESCRIPTION)
    add_arguments(parser)
    return command(parser.parse_args(argv))


__all__ = ["DESCRIPTION", "add_arguments", "command", "main", "register_cli"]
