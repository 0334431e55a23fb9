"""Load-test reports: the one-line summaries, ``report.md`` (a table per run) and the PNG plots.

Input is the report dict :func:`raylink.loadtest.runner.run_loadtest` builds (its
``runs`` are :func:`~raylink.loadtest.runner.run_one`'s dicts). The plots
(throughput over time, latency percentiles vs. rate, scaling vs. parallelism,
TaskExecutor memory, and for runs through Kafka the consumer lag over time) need matplotlib, the ``raylink[plots]`` extra; everything else is
plain text. Pure functions of their arguments (matplotlib's Agg backend, one figure at
a time), safe to call from any thread that owns its report. No Flink counterpart.
"""

from __future__ import annotations

import os
from typing import Any, Optional

from raylink.extras import require_extra

PLOTS = ("throughput.png", "latency_vs_rate.png", "scaling.png", "memory.png")


def require_plots() -> None:
    """Fail early, naming the extra, when matplotlib is missing."""
    require_extra("plots", "the load-test plots", hint=" (or run raylink loadtest with --no-plots)")


def _mib(n: Optional[int]) -> str:
    return "-" if n is None else f"{n / 2**20:.0f}"


def _rate(r: Optional[float]) -> str:
    return "max" if r is None else f"{r:,.0f}"


def _count(n: Optional[int]) -> str:
    return "-" if n is None else f"{n:,}"


def write_markdown(report: dict, path: str) -> None:
    lines = [
        f"# raylink loadtest: {report['scenario']}",
        "",
        report.get("description", ""),
        "",
        f"{report['host']['cpus']} CPUs, Python {report['host']['python']}, {report['createdAt']}",
        "",
        "| P | target rec/s | achieved rec/s | held | records | at sink | p50 ms | p95 ms | p99 ms "
        "| bottleneck | max back pressure | peak RSS / TE (MiB) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in report["runs"]:
        lat = r["latencyMs"]
        bp = ", ".join(f"{n}: {v['maxBackPressureStatus']}" for n, v in r["vertices"].items())
        held = "-" if r["rateHeld"] is None else ("yes" if r["rateHeld"] else "**no**")
        mem = ", ".join(_mib(m["peakRssBytes"]) for m in r["memory"].values()) or "-"
        f = lambda k: f"{lat[k]:.1f}" if k in lat else "-"
        at_sink = "-" if r["recordsAtSink"] is None else f"{r['recordsAtSink']:,}"
        lines.append(
            f"| {r['parallelism']} | {_rate(r['targetRate'])} | {r['achievedRate']:,.0f} | {held} | "
            f"{r['recordsEmitted']:,} | {at_sink} | "
            f"{f('p50')} | {f('p95')} | {f('p99')} | {r['bottleneck'] or '-'} | {bp} | {mem} |"
        )
    kafka_runs = [r for r in report["runs"] if r.get("kafka")]
    if kafka_runs:
        lines += [
            "",
            "## Kafka",
            "",
            "| P | target rec/s | topic | partitions | produced | produce rec/s | max lag (committed) "
            "| max pendingRecords | final lag |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for r in kafka_runs:
            k = r["kafka"]
            final = (k.get("final") or {}).get("committedLag")
            lines.append(
                f"| {r['parallelism']} | {_rate(r['targetRate'])} | {k['topic']} | {k['partitions']} | "
                f"{k['recordsProduced']:,} | {k['produceRate']:,.0f} | {_count(k.get('maxCommittedLag'))} | "
                f"{_count(k.get('maxPendingRecords'))} | {_count(final)} |"
            )
        lines += [
            "",
            "Records are produced outside the job at the target rate (record j to partition j mod N), each "
            "with its Kafka timestamp set to the produce time; latency is the sink's clock minus that "
            "timestamp (1 ms resolution). Lag: log end offsets minus the job's consumer group's committed "
            "offsets (committed on each completed checkpoint), summed over the partitions, read from the broker "
            "every sample interval; pendingRecords: the source's own gauge (log end minus next offset to read).",
        ]
    scaled = [r for r in report["runs"] if r.get("autoscaler")]
    if scaled:
        lines += ["", "## Autoscaler", ""]
        for r in scaled:
            steps = ", ".join(f"{t:g} s: {rate:,.0f}/s" for t, rate in r.get("rateSteps") or [])
            lines.append(f"P={r['parallelism']}, rate steps {steps or '-'}; its events:")
            lines.append("")
            start = r["autoscaler"]["parallelism"][0]["timestamp"] if r["autoscaler"]["parallelism"] else 0
            for event in r["autoscaler"]["events"]:
                lines.append(f"- +{(event['timestamp'] - start) / 1000:.1f} s {event['reason']}: {event['message']}")
            lines.append("")
    lines += ["", "## Summary", ""] + [f"- {s}" for s in report["summary"]]
    lines += ["", "## Plots", ""] + [f"![{p}]({p})" for p in report["plots"]]
    lines += [
        "",
        "Back pressure: Flink's levels over the sampled per-second ratios (OK <= 10 %, LOW <= 50 %, "
        "HIGH above), the worst seen during the run. Bottleneck: the busiest vertex that is not itself "
        "back pressured (`runtime.metrics.bottleneck`), the most frequent verdict over the samples. "
        "Latency: sink time minus the source's emit stamp (reservoir sample per sink subtask).",
    ]
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def write_plots(report: dict, out_dir: str) -> list[str]:
    """Write the four PNG plots (:data:`PLOTS`) into ``out_dir``, and ``lag.png`` (Kafka consumer lag
    over time) when a run went through Kafka; their file names."""
    require_plots()
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = report["runs"]
    written = []

    def save(fig: Any, name: str) -> None:
        fig.tight_layout()
        fig.savefig(os.path.join(out_dir, name), dpi=110)
        plt.close(fig)
        written.append(name)

    fig, ax = plt.subplots(figsize=(8, 4.5))
    for r in runs:
        label = f"P={r['parallelism']} rate={_rate(r['targetRate'])}"
        for end, style in (("source", "-"), ("sink", "--")):
            series = r["throughputSeries"][end]
            if len(series) > 2:  # drop the partial first and last quarter seconds
                series = series[1:-1]
            if series:
                ax.plot([t for t, _ in series], [v for _, v in series], style, label=f"{label} {end}")
        if r["targetRate"]:
            ax.axhline(r["targetRate"], color="grey", lw=0.8, ls=":")
    ax.set_xlabel("time since first record (s)")
    ax.set_ylabel("records/s")
    ax.set_title(f"{report['scenario']}: throughput over time (dotted: target)")
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7)
    save(fig, "throughput.png")

    fig, ax = plt.subplots(figsize=(8, 4.5))
    for p in sorted({r["parallelism"] for r in runs}):
        rs = sorted((r for r in runs if r["parallelism"] == p and r["latencyMs"]), key=lambda r: r["achievedRate"])
        xs = [r["achievedRate"] for r in rs]
        for q, marker in (("p50", "o"), ("p95", "s"), ("p99", "^")):
            ax.plot(xs, [r["latencyMs"][q] for r in rs], marker=marker, label=f"P={p} {q}")
    ax.set_xlabel("achieved throughput (records/s)")
    ax.set_ylabel("end-to-end latency (ms)")
    ax.set_yscale("log")
    ax.set_title(f"{report['scenario']}: latency percentiles vs. rate")
    ax.grid(alpha=0.3, which="both")
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7)
    save(fig, "latency_vs_rate.png")

    fig, ax = plt.subplots(figsize=(8, 4.5))
    for target in sorted({r["targetRate"] or 0 for r in runs}):
        rs = sorted((r for r in runs if (r["targetRate"] or 0) == target), key=lambda r: r["parallelism"])
        ax.plot(
            [r["parallelism"] for r in rs],
            [r["achievedRate"] for r in rs],
            marker="o",
            label=f"target {_rate(target or None)}",
        )
    ax.set_xlabel("parallelism")
    ax.set_ylabel("achieved records/s")
    ax.set_title(f"{report['scenario']}: scaling vs. parallelism")
    ax.set_xticks(sorted({r["parallelism"] for r in runs}))
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    save(fig, "scaling.png")

    fig, ax = plt.subplots(figsize=(8, 4.5))
    for r in runs:
        for ex, m in r["memory"].items():
            series = m["rssSeries"]
            if series:
                ax.plot(
                    [t for t, _ in series],
                    [v / 2**20 for _, v in series],
                    marker=".",
                    label=f"P={r['parallelism']} rate={_rate(r['targetRate'])} {ex[-4:]}",
                )
    ax.set_xlabel("time since start (s)")
    ax.set_ylabel("TaskExecutor RSS (MiB)")
    ax.set_title(f"{report['scenario']}: TaskExecutor memory")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=6)
    save(fig, "memory.png")

    for i, r in enumerate(r for r in runs if r.get("rateSteps")):
        save(_autoscaling_figure(plt, report["scenario"], r), "autoscaling.png" if i == 0 else f"autoscaling-{i}.png")

    kafka_runs = [r for r in runs if r.get("kafka")]
    if kafka_runs:
        fig, ax = plt.subplots(figsize=(8, 4.5))
        for r in kafka_runs:
            label = f"P={r['parallelism']} rate={_rate(r['targetRate'])}"
            series = r["kafka"]["lagSeries"]
            ax.plot([x["t"] for x in series], [x["committedLag"] for x in series], marker=".", label=f"{label} lag")
            pending = [(x["t"], x["pendingRecords"]) for x in series if x["pendingRecords"] is not None]
            if pending:
                ax.plot([t for t, _ in pending], [v for _, v in pending], "--", label=f"{label} pendingRecords")
        ax.set_xlabel("time since the job started (s)")
        ax.set_ylabel("records")
        ax.set_title(f"{report['scenario']}: Kafka consumer lag (log end - committed offsets)")
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
        save(fig, "lag.png")
    return written


def _rates(samples: list, which: int, key: str) -> list:
    """Records/s of the first (0) or last (-1) vertex between consecutive samples (a rescale
    restarts the counts: that interval is left out)."""
    out = []
    for before, after in zip(samples, samples[1:]):
        names = list(after.get("vertices", {}))
        if not names or names[which] not in before.get("vertices", {}):
            continue
        a, b = before["vertices"][names[which]].get(key), after["vertices"][names[which]].get(key)
        if a is not None and b is not None and b >= a and after["t"] > before["t"]:
            out.append((after["t"], (b - a) / (after["t"] - before["t"])))
    return out


def _autoscaling_figure(plt: Any, scenario: str, run: dict) -> Any:
    """A run with ``--rate-steps``: the target rate and the sink's throughput, every vertex's
    parallelism, and the source's pendingRecords with the sink's p99 latency, over time."""
    samples = run["metricSamples"]
    ts = [s["t"] for s in samples]
    fig, (rate_ax, par_ax, lag_ax) = plt.subplots(3, 1, figsize=(8, 8), sharex=True)
    steps = run["rateSteps"]
    end = max(ts[-1] if ts else 0.0, steps[-1][0])
    xs = [t for t, _ in steps] + [end]
    rate_ax.step(xs, [r for _, r in steps] + [steps[-1][1]], where="post", color="grey", ls=":", label="target rate")
    for end, key, label in ((0, "numRecordsOut", "from the source"), (-1, "numRecordsIn", "into the last vertex")):
        series = _rates(samples, end, key)
        if series:
            rate_ax.plot([t for t, _ in series], [v for _, v in series], label=label)
    rate_ax.set_ylabel("records/s")
    rate_ax.set_title(f"{scenario}: a rate that steps (autoscaler {'on' if run.get('autoscaler') else 'off'})")
    rate_ax.legend(fontsize=7)
    names = sorted({n for s in samples for n in s.get("parallelism", {})})
    for name in names:
        par_ax.step(ts, [s.get("parallelism", {}).get(name, 0) for s in samples], where="post", label=name[:40])
    par_ax.set_ylabel("parallelism")
    par_ax.set_ylim(bottom=0)
    par_ax.legend(fontsize=6)
    lag_ax.plot(ts, [s.get("pendingRecords", 0) for s in samples], color="tab:red", label="source pendingRecords")
    lag_ax.set_ylabel("pendingRecords", color="tab:red")
    lag_ax.set_ylim(bottom=0)
    p99 = [(s["t"], s["latencyP99Ms"]) for s in samples if s.get("latencyP99Ms") is not None]
    if p99:
        lat_ax = lag_ax.twinx()
        lat_ax.plot([t for t, _ in p99], [v for _, v in p99], color="tab:blue", label="p99 latency")
        lat_ax.set_ylabel("p99 latency (ms, last second)", color="tab:blue")
        lat_ax.set_yscale("log")
    lag_ax.set_xlabel("time since the job started (s)")
    for ax in (rate_ax, par_ax, lag_ax):
        ax.grid(alpha=0.3)
    return fig


def summarize(runs: list[dict]) -> list[str]:
    out = []
    for r in runs:
        head = f"P={r['parallelism']}, rate {_rate(r['targetRate'])}:"
        lat = r["latencyMs"]
        latency = (
            f"latency p50/p95/p99 {lat['p50']:.1f}/{lat['p95']:.1f}/{lat['p99']:.1f} ms"
            if lat
            else "no latency measured"
        )
        if r.get("rateSteps"):
            head = (
                f"P={r['parallelism']}, rate steps "
                + ", ".join(f"{t:g} s: {v:,.0f}/s" for t, v in r["rateSteps"])
                + ":"
            )
            scalings = (r.get("autoscaler") or {}).get("scalings", 0)
            # a rescale ends the sink's subtasks with their counts: only the last deployment's are in
            held = f"{scalings} autoscaler rescales (parallelism over time: autoscaling.png)"
        elif r["targetRate"] is None:
            held = f"saturated at {r['achievedRate']:,.0f} records/s"
        elif r["rateHeld"]:
            held = f"rate held ({r['achievedRate']:,.0f} records/s)"
        else:
            held = (
                f"rate NOT held: {r['achievedRate']:,.0f} of {r['targetRate']:,.0f} records/s "
                f"({100 * r['achievedRate'] / r['targetRate']:.0f} %)"
            )
        high = [n for n, v in r["vertices"].items() if v["maxBackPressureStatus"] == "HIGH"]
        bp = f"HIGH back pressure on {', '.join(high)}" if high else "no HIGH back pressure"
        growth = [
            m["rssGrowthSecondHalfBytes"] for m in r["memory"].values() if m["rssGrowthSecondHalfBytes"] is not None
        ]
        mem = (
            f"peak RSS/TaskExecutor {max(m['peakRssBytes'] for m in r['memory'].values()) / 2**20:.0f} MiB, "
            f"RSS growth over the 2nd half {max(growth) / 2**20:+.1f} MiB"
            if growth
            else ""
        )
        neck = r["bottleneck"] or ("none (rate held)" if r["rateHeld"] else "none found")
        kafka = r.get("kafka")
        lag = (
            f"; Kafka {kafka['topic']}: {kafka['recordsProduced']:,} produced, consumer lag up to "
            f"{_count(kafka.get('maxCommittedLag'))} records"
            if kafka
            else ""
        )
        out.append(f"{head} {held}; {latency}; bottleneck: {neck}; {bp}" + (f"; {mem}" if mem else "") + lag)
    maxed = [r for r in runs if r["targetRate"] is None]
    if maxed:
        best = max(maxed, key=lambda r: r["achievedRate"])
        out.append(f"saturation point: {best['achievedRate']:,.0f} records/s at parallelism {best['parallelism']}")
    return out


__all__ = ["PLOTS", "require_plots", "summarize", "write_markdown", "write_plots"]
