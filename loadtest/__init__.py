"""raylink.loadtest: ``raylink loadtest``, a load-test harness that runs a scenario at a target rate
(or flat out) and reports what it achieved.

A run is one job: a rate-limited source, the scenario's operators and a latency
sink; while it runs the driver samples back pressure, busy time and TaskExecutor
memory. Outputs (``--output DIR``): ``report.json``, ``report.md`` and PNG plots.

Holds:

* :mod:`~raylink.loadtest.functions`: the job's source, sink and UDFs (run in TaskExecutors);
* :mod:`~raylink.loadtest.scenarios`: the built-in scenarios and user job files;
* :mod:`~raylink.loadtest.runner`: one run (job + metric sampling) and a sweep of runs;
* :mod:`~raylink.loadtest.report`: summaries, ``report.md``, the plots (``raylink[plots]``);
* :mod:`~raylink.loadtest.soak`: ``--soak DURATION``, one long run sampling TaskExecutor memory;
* :mod:`~raylink.loadtest.soak_report`: the soak's memory slopes, latency drift, verdict and files;
* :mod:`~raylink.loadtest.kafka_driver`: ``--kafka``, the scenario through a Kafka topic (producer, lag);
* :mod:`~raylink.loadtest.nexmark`: the ``nexmark`` scenario (a Nexmark query at a rate);
* :mod:`~raylink.loadtest.command`: the ``raylink loadtest`` sub-command.

May import: everything in raylink (it drives jobs like a user program: ``api``,
``runtime.metrics``, ``actors.cluster`` to connect to Ray, ``connectors.spark`` for the
``spark`` scenario, ``connectors.kafka`` for the broker and topics, ``bench.nexmark`` for the
``nexmark`` scenario); nothing in raylink imports it but the CLI. It never imports Ray
itself. The names below are its public API.
"""

from raylink.loadtest.command import _parse_rates, add_arguments, command, main, register_cli
from raylink.loadtest.functions import (
    ACC_LATENCY,
    ACC_SINK_BUCKETS,
    ACC_SINK_COUNT,
    ACC_SOURCE,
    ACC_SOURCE_BUCKETS,
    BATCH_SAMPLES,
    BUCKETS_PER_S,
    SINK_NAME,
    SOURCE_NAME,
    LatencySink,
    RateLimitedSource,
    wide_payload,
    wordcount_line,
)
from raylink.loadtest.kafka_driver import KafkaDriver, KafkaLoad
from raylink.loadtest.nexmark import EventTimeLatencySink, NexmarkLoadSource, nexmark_scenario
from raylink.loadtest.report import summarize, write_markdown, write_plots
from raylink.loadtest.runner import RATE_TOLERANCE, Progress, percentiles, run_loadtest, run_one
from raylink.loadtest.scenarios import SCENARIOS, Scenario, load_job_file, resolve_scenario, spark_scenario
from raylink.loadtest.soak import parse_duration, run_soak
from raylink.loadtest.soak_report import analyze, latency_windows, slope_per_hour

__all__ = [
    "ACC_LATENCY",
    "ACC_SINK_BUCKETS",
    "ACC_SINK_COUNT",
    "ACC_SOURCE",
    "ACC_SOURCE_BUCKETS",
    "BATCH_SAMPLES",
    "BUCKETS_PER_S",
    "RATE_TOLERANCE",
    "SCENARIOS",
    "SINK_NAME",
    "SOURCE_NAME",
    "EventTimeLatencySink",
    "KafkaDriver",
    "KafkaLoad",
    "LatencySink",
    "NexmarkLoadSource",
    "Progress",
    "RateLimitedSource",
    "Scenario",
    "add_arguments",
    "analyze",
    "command",
    "latency_windows",
    "load_job_file",
    "main",
    "nexmark_scenario",
    "parse_duration",
    "percentiles",
    "register_cli",
    "resolve_scenario",
    "run_loadtest",
    "run_one",
    "run_soak",
    "slope_per_hour",
    "spark_scenario",
    "summarize",
    "wide_payload",
    "wordcount_line",
    "write_markdown",
    "write_plots",
]
