"""The human side of the rollup: ``summary.md`` and ``rollup.png``.

Theory of operation
-------------------
``jobs/metrics_rollup.py`` hands over its cached rollup, which besides the Parquet windows
holds the pseudo-window ``all`` spanning the whole input (computed by the same code). The
report filters the metrics it shows (and the ``all`` rows, the peak per-window rates, and
the time series of the chart) in Spark and collects only those, so it costs little however
large the input: the chart's series use the smallest window that gives at most
:data:`MAX_CHART_POINTS` points, and are summed over topics in Spark except for the few
busiest. The picture uses matplotlib's Agg backend (no display needed). Output goes to a
local directory, or through Hadoop's FileSystem when the output is a URI (``hdfs://...``).

Rates are per second of covered time (the time the counted increases took), so the
summary states how much of each window size the input covers.

Topic-level figures prefer a topic's series without a ``subscription`` label; when a topic
only has per-subscription series of a metric, they are summed.
"""

from __future__ import annotations

import datetime as dt
import logging
import math
import re
import tempfile
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

from jobs.rollup_aggregate import ALL_WINDOW

log = logging.getLogger("horae.rollup")


class InputFigures(Protocol):
    """What the summary reports about the input (``metrics_rollup.InputStats`` implements it)."""

    files_read: int
    files_skipped: list[tuple[str, str]]  # (path, reason)
    rows: int
    bad_lines: int
    bad_by_file: list[tuple[str, int]]  # (path, bad lines)
    nan_values: int
    unknown_types: int
    first_ts_by_broker: dict[str, int]
    min_ts: int
    max_ts: int
    clusters: list[str]


IN_MESSAGES = "pulsar_in_messages_total"
OUT_MESSAGES = "pulsar_out_messages_total"
DELAYED_REJECTED = "pulsar_broker_topic_messages_delayed_rejected_total"
FIXED_DELAY_OVERRIDDEN = "pulsar_broker_topic_messages_fixed_delay_overridden_total"
SUBSCRIPTION_DELAYED = "pulsar_subscription_delayed"
DELAYED_INDEX_BYTES = "pulsar_delayed_message_index_size_bytes"
BACKLOG = "pulsar_msg_backlog"
DELAYED_CANCELLED = "pulsar_subscription_delayed_cancels_applied_total"
DELAYED_DUE = "horae_subscription_delayed_due_total"
DELAYED_METRICS = (
    DELAYED_REJECTED,
    FIXED_DELAY_OVERRIDDEN,
    SUBSCRIPTION_DELAYED,
    DELAYED_INDEX_BYTES,
)
REPORTED_METRICS = (
    IN_MESSAGES,
    OUT_MESSAGES,
    BACKLOG,
    *DELAYED_METRICS,
    DELAYED_CANCELLED,
    DELAYED_DUE,
)
# The picture's time series: (metric, column of the rollup row, label, panel).
TIMELINE = (
    (SUBSCRIPTION_DELAYED, "last", "scheduled (pending)", "delayed"),
    (DELAYED_DUE, "increase", "fell due", "delayed"),
    (DELAYED_CANCELLED, "increase", "cancelled", "delayed"),
    (DELAYED_REJECTED, "increase", "rejected (max delay)", "delayed"),
    (DELAYED_INDEX_BYTES, "last", "index bytes", "index"),
)
MAX_CHART_POINTS = 1500
CHART_TOPICS = 5
CHART_NAME = "rollup.png"
SUMMARY_NAME = "summary.md"


def fmt_ts(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, tz=dt.UTC).strftime("%Y-%m-%d %H:%M:%S")


def fmt_span(ms: float) -> str:
    """A duration as the summary prints it: ``1h 2m 3s``, ``75s``, ``250ms``."""
    if ms < 1000:
        return f"{int(ms)}ms"
    seconds = int(ms // 1000)
    parts = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            parts.append(f"{seconds // size}{unit}")
            seconds %= size
    if seconds or not parts:
        parts.append(f"{seconds}s")
    return " ".join(parts)


def window_coverage(min_ts: int, max_ts: int, window_ms: int) -> tuple[int, int, float]:
    """(windows touched, windows only partly covered, least covered fraction) of a size.

    A window is covered where it lies between the first and the last snapshot.
    """
    first, last = min_ts // window_ms, max_ts // window_ms
    fractions = []
    for index in (first, last) if last > first else (first,):
        start = index * window_ms
        overlap = min(max_ts, start + window_ms) - max(min_ts, start)
        fractions.append(max(overlap, 0) / window_ms)
    partial = sum(1 for f in fractions if f < 1.0)
    return last - first + 1, partial, min(fractions)


def _coverage_lines(
    stats: InputFigures, windows: Sequence[str], window_ms: dict[str, int]
) -> list[str]:
    span = stats.max_ts - stats.min_ts
    lines = [
        f"- Covered span: {fmt_span(span)} (first to last snapshot). Rates are per second of "
        "covered time (the time the counted increases took), not per window length, so a "
        "partly covered window reports its true average rate"
    ]
    for name in windows:
        ms = window_ms.get(name)
        if not ms:
            continue
        count, partial, least = window_coverage(stats.min_ts, stats.max_ts, ms)
        if partial:
            lines.append(
                f"  - {name}: {count} window(s), {partial} partly covered "
                f"(the least: {least:.0%} of its length)"
            )
        else:
            lines.append(f"  - {name}: {count} window(s), all fully covered")
    return lines


def _num(value: float | None) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if float(value).is_integer() and abs(value) < 1e15:
        return f"{int(value):,}"
    return f"{value:,.3f}" if abs(value) < 1000 else f"{value:,.1f}"


def _short(topic: str) -> str:
    return re.sub(r"^(non-)?persistent://", "", topic) or "(no topic)"


def _topic_values(
    rows: Iterable[dict[str, Any]], metric: str, column: str
) -> dict[tuple[str, str], float]:
    """(cluster, topic) -> value of ``column``: topic-level series, else summed subscriptions."""
    topic_level: dict[tuple[str, str], float] = defaultdict(float)
    per_sub: dict[tuple[str, str], float] = defaultdict(float)
    for row in rows:
        if row["metric"] != metric or not row["topic"] or row[column] is None:
            continue
        key = (row["cluster"], row["topic"])
        target = per_sub if row["subscription"] else topic_level
        target[key] += float(row[column])
    merged = dict(per_sub)
    merged.update(topic_level)
    return merged


def _table(headers: Sequence[str], rows: Iterable[Sequence[str]]) -> list[str]:
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(cells) + " |" for cells in rows]
    return lines


def build_summary(
    input_path: str,
    windows: Sequence[str],
    stats: InputFigures,
    totals: list[dict[str, Any]],
    peaks: dict[str, dict[tuple[str, str], float]],
    top: int,
    window_ms: dict[str, int] | None = None,
) -> tuple[str, list[tuple[str, float, float]]]:
    """The Markdown text, and the chart's (topic, in, out) bars."""
    brokers = sorted(stats.first_ts_by_broker)
    lines = [
        "# Horae metrics rollup",
        "",
        f"- Input: `{input_path}`: {stats.files_read} files read, {len(stats.files_skipped)} skipped",
        f"- Samples: {stats.rows:,} from {len(brokers)} broker(s) ({', '.join(brokers)}); "
        f"clusters: {', '.join(stats.clusters) or '-'}",
        f"- Time range: {fmt_ts(stats.min_ts)} .. {fmt_ts(stats.max_ts)} UTC; windows: {', '.join(windows)}",
        *_coverage_lines(stats, windows, window_ms or {}),
        f"- Bad lines skipped: {stats.bad_lines:,}; unknown-type samples carried as gauges: "
        f"{stats.unknown_types:,}; NaN samples ignored: {stats.nan_values:,}",
        "",
    ]
    if stats.files_skipped or stats.bad_by_file:
        lines += ["## Skipped input", ""]
        lines += [f"- `{path}`: {reason}" for path, reason in stats.files_skipped]
        lines += [f"- `{path}`: {count} bad line(s)" for path, count in stats.bad_by_file]
        lines.append("")

    msgs_in = _topic_values(totals, IN_MESSAGES, "increase")
    msgs_out = _topic_values(totals, OUT_MESSAGES, "increase")
    rate_in = _topic_values(totals, IN_MESSAGES, "rate_per_s")
    busiest = sorted(msgs_in, key=lambda k: (-msgs_in[k], k))[:top]
    lines += [f"## Busiest topics by messages in ({IN_MESSAGES})", ""]
    if busiest:
        headers = ["#", "cluster", "topic", "messages in", "messages out", "avg in/s"]
        headers += [f"peak in/s ({w})" for w in windows]
        body = []
        for rank, key in enumerate(busiest, 1):
            cells = [
                str(rank),
                key[0],
                f"`{key[1]}`",
                _num(msgs_in[key]),
                _num(msgs_out.get(key)),
                _num(rate_in.get(key)),
            ]
            cells += [_num(peaks.get(w, {}).get(key)) for w in windows]
            body.append(cells)
        lines += _table(headers, body)
    else:
        lines.append(f"No {IN_MESSAGES} samples in the input.")
    lines.append("")

    lines += _delayed_section(totals)
    backlog = _topic_values(totals, BACKLOG, "last")
    if backlog:
        lines += [f"## Largest backlogs ({BACKLOG}, last value)", ""]
        worst = sorted(backlog, key=lambda k: (-backlog[k], k))[:top]
        lines += _table(
            ["cluster", "topic", "backlog"], [[k[0], f"`{k[1]}`", _num(backlog[k])] for k in worst]
        )
        lines.append("")
    lines += _latency_section(totals, top)
    bars = [(_short(k[1]), msgs_in[k], msgs_out.get(k, 0.0)) for k in busiest]
    return "\n".join(lines) + "\n", bars


def _delayed_section(totals: list[dict[str, Any]]) -> list[str]:
    rows = [r for r in totals if r["metric"] in DELAYED_METRICS]
    lines = ["## Delayed delivery", ""]
    if not rows:
        return [*lines, "No delayed-delivery metrics in the input.", ""]
    rejected = sum(r["increase"] or 0.0 for r in rows if r["metric"] == DELAYED_REJECTED)
    overridden = sum(r["increase"] or 0.0 for r in rows if r["metric"] == FIXED_DELAY_OVERRIDDEN)
    lines += [
        f"- Messages rejected for exceeding the max delivery delay ({DELAYED_REJECTED}): {_num(rejected)}",
        f"- Deliver-at times overridden by a fixed delay ({FIXED_DELAY_OVERRIDDEN}): {_num(overridden)}",
    ]
    for metric, what in (
        (DELAYED_DUE, "Delayed messages that fell due"),
        (DELAYED_CANCELLED, "Scheduled messages cancelled"),
    ):
        counted = [r["increase"] or 0.0 for r in totals if r["metric"] == metric]
        if counted:
            lines.append(f"- {what} ({metric}): {_num(sum(counted))}")
    lines.append("")
    table: dict[tuple[str, str, str], dict[str, str]] = defaultdict(dict)
    for r in rows:
        cells = table[(r["cluster"], r["topic"], r["subscription"])]
        if r["metric"] in (DELAYED_REJECTED, FIXED_DELAY_OVERRIDDEN):
            cells[r["metric"]] = _num(r["increase"])
        else:
            cells[r["metric"]] = f"{_num(r['max'])} / {_num(r['last'])}"
    headers = [
        "cluster",
        "topic",
        "subscription",
        "rejected",
        "fixed delay overridden",
        "delayed msgs (max / last)",
        "index bytes (max / last)",
    ]
    body = [
        [c, f"`{t}`" if t else "-", s or "-", *(cells.get(m, "-") for m in DELAYED_METRICS)]
        for (c, t, s), cells in sorted(table.items())
    ]
    return [*lines, *_table(headers, body), ""]


def _latency_section(totals: list[dict[str, Any]], top: int) -> list[str]:
    rows = [r for r in totals if r["kind"] == "histogram" and r["increase"]]
    if not rows:
        return []
    rows.sort(key=lambda r: (-(r["increase"] or 0.0), r["metric"], r["topic"]))
    lines = ["## Histograms over the whole range (p50 / p95 / p99, in the metric's unit)", ""]
    body = [
        [
            r["metric"],
            f"`{r['topic']}`" if r["topic"] else "-",
            r["labels"] or "-",
            _num(r["increase"]),
            _num(r["p50"]),
            _num(r["p95"]),
            _num(r["p99"]),
        ]
        for r in rows[: top * 2]
    ]
    return [
        *lines,
        *_table(["metric", "topic", "labels", "observations", "p50", "p95", "p99"], body),
        "",
    ]


@dataclass
class Timeline:
    """The picture's time series, collected from one window size (``window``)."""

    window: str = ""
    # topic -> [(window start ms, messages in/s, messages out/s)]
    rates: dict[str, list[tuple[int, float | None, float | None]]] = field(default_factory=dict)
    # label -> [(window start ms, value)], for the delayed-delivery panel
    delayed: dict[str, list[tuple[int, float]]] = field(default_factory=dict)
    index_bytes: list[tuple[int, float]] = field(default_factory=list)


def draw_chart(
    path: Path,
    bars: list[tuple[str, float, float]],
    subtitle: str,
    timeline: Timeline | None = None,
) -> None:
    """The rollup's picture (Agg backend, no display): three panels, top to bottom.

    Messages in/out of the busiest topics over the whole range; their rates over time; the
    delayed-delivery figures over time (scheduled, fell due, cancelled, rejected per window,
    and the index size on a second axis).
    """
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import dates as mdates
    from matplotlib import pyplot as plt

    timeline = timeline or Timeline()
    height = 9.0 + 0.3 * max(len(bars), 3)
    fig, (ax, rates_ax, delayed_ax) = plt.subplots(
        3, 1, figsize=(11, height), dpi=100, gridspec_kw={"height_ratios": [1.2, 1, 1]}
    )
    try:
        _draw_bars(ax, bars, subtitle)
        times = _draw_rates(rates_ax, timeline, mdates)
        times |= _draw_delayed(delayed_ax, timeline, mdates)
        for axis in (rates_ax, delayed_ax):
            if times:
                lo, hi = min(times), max(times)
                axis.set_xlim(_when(mdates, lo), _when(mdates, hi if hi > lo else lo + 60_000))
            locator = mdates.AutoDateLocator(tz=dt.UTC)  # type: ignore[no-untyped-call]
            axis.xaxis.set_major_locator(locator)
            formatter = mdates.ConciseDateFormatter(locator, tz=dt.UTC)  # type: ignore[no-untyped-call]
            axis.xaxis.set_major_formatter(formatter)
            axis.set_xlabel(f"time (UTC), {timeline.window or '-'} windows")
        fig.tight_layout()
        fig.savefig(path, format="png")
    finally:
        plt.close(fig)


def _when(mdates: Any, ms: int) -> float:
    return float(mdates.date2num(dt.datetime.fromtimestamp(ms / 1000, tz=dt.UTC)))


def _draw_bars(ax: Any, bars: list[tuple[str, float, float]], subtitle: str) -> None:
    if bars:
        names = [b[0] for b in reversed(bars)]
        ys = range(len(names))
        ax.barh(
            [y + 0.2 for y in ys], [b[1] for b in reversed(bars)], height=0.4, label="messages in"
        )
        ax.barh(
            [y - 0.2 for y in ys], [b[2] for b in reversed(bars)], height=0.4, label="messages out"
        )
        ax.set_yticks(list(ys), names)
        ax.set_xlabel("messages")
        ax.legend(loc="lower right")
    else:
        ax.text(0.5, 0.5, f"no {IN_MESSAGES} samples in the input", ha="center", va="center")
        ax.set_axis_off()
    ax.set_title(f"Busiest topics by messages in\n{subtitle}")


def _draw_rates(ax: Any, timeline: Timeline, mdates: Any) -> set[int]:
    times: set[int] = set()
    for topic, points in timeline.rates.items():
        points = sorted(points)
        xs = [_when(mdates, t) for t, _, _ in points]
        times.update(t for t, _, _ in points)
        line = ax.plot(
            xs,
            [i if i is not None else math.nan for _, i, _ in points],
            marker=".",
            label=f"{topic} in",
        )
        ax.plot(
            xs,
            [o if o is not None else math.nan for _, _, o in points],
            linestyle="--",
            color=line[0].get_color(),
            label=f"{topic} out",
        )
    if timeline.rates:
        ax.legend(loc="upper left", fontsize="small", ncol=2)
    else:
        ax.text(
            0.5,
            0.5,
            "no message rates in the input",
            ha="center",
            va="center",
            transform=ax.transAxes,
        )
    ax.set_ylabel("messages/s")
    ax.set_title("Messages in (solid) and out (dashed) per second of the busiest topics")
    return times


def _draw_delayed(ax: Any, timeline: Timeline, mdates: Any) -> set[int]:
    times: set[int] = set()
    for label, points in timeline.delayed.items():
        points = sorted(points)
        times.update(t for t, _ in points)
        ax.plot(
            [_when(mdates, t) for t, _ in points], [v for _, v in points], marker=".", label=label
        )
    if timeline.index_bytes:
        points = sorted(timeline.index_bytes)
        times.update(t for t, _ in points)
        twin = ax.twinx()
        twin.plot(
            [_when(mdates, t) for t, _ in points],
            [v for _, v in points],
            color="grey",
            linestyle=":",
            label="index bytes",
        )
        twin.set_ylabel("index bytes")
        twin.legend(loc="upper right", fontsize="small")
    if timeline.delayed:
        ax.legend(loc="upper left", fontsize="small")
    elif not timeline.index_bytes:
        ax.text(
            0.5,
            0.5,
            "no delayed-delivery metrics in the input",
            ha="center",
            va="center",
            transform=ax.transAxes,
        )
    ax.set_ylabel("messages (pending: last; others: per window)")
    ax.set_title("Delayed delivery: scheduled, fell due, cancelled, rejected")
    return times


def chart_window(
    windows: Sequence[str], window_ms: dict[str, int], min_ts: int, max_ts: int
) -> str:
    """The smallest window size that gives at most MAX_CHART_POINTS points, else the largest."""
    sized = sorted((window_ms[w], w) for w in windows if w in window_ms)
    for ms, name in sized:
        if window_coverage(min_ts, max_ts, ms)[0] <= MAX_CHART_POINTS:
            return name
    return sized[-1][1] if sized else ""


def _timeline(result: DataFrame, window: str, topics: Sequence[str]) -> Timeline:
    """Collect the picture's series from the rollup: a few rows per window start."""
    from pyspark.sql import functions as F

    timeline = Timeline(window=window)
    if not window:
        return timeline
    of_window = result.filter(F.col("window") == window)
    rows = (
        of_window.filter(
            F.col("metric").isin(IN_MESSAGES, OUT_MESSAGES)
            & F.col("topic").isin(*topics)
            & (F.col("subscription") == "")
        )
        .groupBy("topic", "metric", F.unix_millis("window_start").alias("t"))
        .agg(F.sum("rate_per_s").alias("v"))
        .collect()
        if topics
        else []
    )
    by_topic: dict[str, dict[int, list[float | None]]] = defaultdict(dict)
    for r in rows:
        point = by_topic[_short(r["topic"])].setdefault(int(r["t"]), [None, None])
        point[0 if r["metric"] == IN_MESSAGES else 1] = r["v"]
    timeline.rates = {
        topic: [(t, v[0], v[1]) for t, v in points.items()] for topic, points in by_topic.items()
    }
    summed = [
        F.sum(F.when(F.col("metric") == metric, F.col(column))).alias(f"m{i}")
        for i, (metric, column, _, _) in enumerate(TIMELINE)
    ]
    wanted = of_window.filter(F.col("metric").isin(*[m for m, _, _, _ in TIMELINE]))
    for r in wanted.groupBy(F.unix_millis("window_start").alias("t")).agg(*summed).collect():
        for i, (_, _, label, panel) in enumerate(TIMELINE):
            value = r[f"m{i}"]
            if value is None:
                continue
            if panel == "index":
                timeline.index_bytes.append((int(r["t"]), float(value)))
            else:
                timeline.delayed.setdefault(label, []).append((int(r["t"]), float(value)))
    return timeline


def _busiest_topics(totals: list[dict[str, Any]], count: int) -> list[str]:
    msgs_in = _topic_values(totals, IN_MESSAGES, "increase")
    return [k[1] for k in sorted(msgs_in, key=lambda k: (-msgs_in[k], k))[:count]]


def _peak_rates(result: DataFrame) -> dict[str, dict[tuple[str, str], float]]:
    """window -> (cluster, topic) -> highest messages-in rate of any window of that size."""
    from pyspark.sql import functions as F

    rows = (
        result.filter(
            (F.col("metric") == IN_MESSAGES)
            & (F.col("topic") != "")
            & (F.col("window") != ALL_WINDOW)
        )
        .groupBy("window", "cluster", "topic", "subscription")
        .agg(F.max("rate_per_s").alias("rate_per_s"))
        .collect()
    )
    by_window: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        by_window[r["window"]].append({**r.asDict(), "metric": IN_MESSAGES})
    return {w: _topic_values(items, IN_MESSAGES, "rate_per_s") for w, items in by_window.items()}


def write_report(
    out_dir: str,
    input_path: str,
    windows: Sequence[str],
    stats: InputFigures,
    result: DataFrame,
    top: int,
    window_ms: dict[str, int] | None = None,
) -> None:
    """Collect the small aggregates and write summary.md and the picture under ``out_dir``."""
    from pyspark.sql import functions as F

    sizes = window_ms or {}
    totals = result.filter(
        (F.col("window") == ALL_WINDOW)
        & (F.col("metric").isin(*REPORTED_METRICS) | (F.col("kind") == "histogram"))
    )
    total_rows = [r.asDict() for r in totals.collect()]
    summary, bars = build_summary(
        input_path, windows, stats, total_rows, _peak_rates(result), top, sizes
    )
    busiest = _busiest_topics(total_rows, CHART_TOPICS)
    timeline = _timeline(result, chart_window(windows, sizes, stats.min_ts, stats.max_ts), busiest)
    subtitle = f"{fmt_ts(stats.min_ts)} .. {fmt_ts(stats.max_ts)} UTC ({fmt_span(stats.max_ts - stats.min_ts)})"
    remote = re.match(r"^[A-Za-z][A-Za-z0-9+.-]*://", out_dir) and not out_dir.startswith("file:")
    if not remote:
        local = Path(re.sub(r"^file:(//)?", "", out_dir))
        local.mkdir(parents=True, exist_ok=True)
        (local / SUMMARY_NAME).write_text(summary, encoding="utf-8")
        draw_chart(local / CHART_NAME, bars, subtitle, timeline)
        return
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / SUMMARY_NAME).write_text(summary, encoding="utf-8")
        draw_chart(Path(tmp) / CHART_NAME, bars, subtitle, timeline)
        spark = result.sparkSession
        jvm = spark.sparkContext._jvm
        assert jvm is not None
        hadoop_path = jvm.org.apache.hadoop.fs.Path
        conf = spark.sparkContext._jsc.hadoopConfiguration()
        fs = hadoop_path(out_dir).getFileSystem(conf)
        for name in (SUMMARY_NAME, CHART_NAME):
            src, dst = hadoop_path(str(Path(tmp) / name)), hadoop_path(f"{out_dir}/{name}")
            fs.copyFromLocalFile(False, True, src, dst)
