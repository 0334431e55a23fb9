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


def _soak(args: argparse.Namespace, output: str, scenario: Any) -> int:
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
    )
    return 0 if report["verdict"] != "FAIL" else 1


def command(args: argparse.Namespace) -> int:
    if args.list or args.scenario == "list":
        for s in list(SCENARIOS.values()) + [spark_scenario()]:
            state = "" if s.available else f"  [unavailable: {s.unavailable_reason}]"
            print(f"{s.name:<10} {s.description}{state}")
        return 0
    duration = args.duration
    if duration is None and args.records is None:
        duration = 10.0
    stem = os.path.basename(args.scenario).replace(".py", "")
    kind = "soak" if args.soak else "loadtest"
    output = args.output or f"{kind}-{stem}-{time.strftime('%Y%m%d-%H%M%S')}"
    scenario = resolve_scenario(args.scenario)  # fail on a bad name before starting Ray
    if not scenario.available:
        raise SystemExit(f"scenario {scenario.name!r} is unavailable: {scenario.unavailable_reason}")
    if args.soak:
        return _soak(args, output, scenario)
    plots = not args.no_plots
    if plots:
        require_plots()  # fail before starting Ray
    from raylink.actors.cluster import ensure_ray

    conf = _parse_conf(args.conf)
    if read_option(conf, ExecutionOptions.TARGET) == "ray":
        ensure_ray()
    run_loadtest(
        args.scenario,
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
