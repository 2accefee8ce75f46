"""The human side of the rollup: ``summary.md`` and ``busiest_topics.png``.

Theory of operation
-------------------
``jobs/metrics_rollup.py`` hands over its cached rollup, which besides the Parquet windows
holds the pseudo-window ``all`` spanning the whole input (computed by the same code). The
report filters the metrics it shows (and the ``all`` rows, or the peak per-window rates) in
Spark and collects only those, so it costs little however large the input. The chart uses matplotlib's Agg backend (no display needed). Output goes to a local
directory, or through Hadoop's FileSystem when the output is a URI (``hdfs://...``).

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
DELAYED_METRICS = (
    DELAYED_REJECTED,
    FIXED_DELAY_OVERRIDDEN,
    SUBSCRIPTION_DELAYED,
    DELAYED_INDEX_BYTES,
)
REPORTED_METRICS = (IN_MESSAGES, OUT_MESSAGES, BACKLOG, *DELAYED_METRICS)
CHART_NAME = "busiest_topics.png"
SUMMARY_NAME = "summary.md"


def fmt_ts(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, tz=dt.UTC).strftime("%Y-%m-%d %H:%M:%S")


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
        "",
    ]
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


def draw_chart(path: Path, bars: list[tuple[str, float, float]], subtitle: str) -> None:
    """Horizontal bars of messages in/out for the busiest topics (Agg backend, no display)."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    height = 2.0 + 0.45 * max(len(bars), 3)
    fig, ax = plt.subplots(figsize=(10, height), dpi=100)
    try:
        if bars:
            names = [b[0] for b in reversed(bars)]
            ys = range(len(names))
            ax.barh(
                [y + 0.2 for y in ys],
                [b[1] for b in reversed(bars)],
                height=0.4,
                label="messages in",
            )
            ax.barh(
                [y - 0.2 for y in ys],
                [b[2] for b in reversed(bars)],
                height=0.4,
                label="messages out",
            )
            ax.set_yticks(list(ys), names)
            ax.set_xlabel("messages")
            ax.legend(loc="lower right")
        else:
            ax.text(0.5, 0.5, f"no {IN_MESSAGES} samples in the input", ha="center", va="center")
            ax.set_axis_off()
        ax.set_title(f"Busiest topics by messages in\n{subtitle}")
        fig.tight_layout()
        fig.savefig(path, format="png")
    finally:
        plt.close(fig)


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
) -> None:
    """Collect the small aggregates and write summary.md and the chart under ``out_dir``."""
    from pyspark.sql import functions as F

    totals = result.filter(
        (F.col("window") == ALL_WINDOW)
        & (F.col("metric").isin(*REPORTED_METRICS) | (F.col("kind") == "histogram"))
    )
    total_rows = [r.asDict() for r in totals.collect()]
    summary, bars = build_summary(input_path, windows, stats, total_rows, _peak_rates(result), top)
    subtitle = f"{fmt_ts(stats.min_ts)} .. {fmt_ts(stats.max_ts)} UTC"
    remote = re.match(r"^[A-Za-z][A-Za-z0-9+.-]*://", out_dir) and not out_dir.startswith("file:")
    if not remote:
        local = Path(re.sub(r"^file:(//)?", "", out_dir))
        local.mkdir(parents=True, exist_ok=True)
        (local / SUMMARY_NAME).write_text(summary, encoding="utf-8")
        draw_chart(local / CHART_NAME, bars, subtitle)
        return
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / SUMMARY_NAME).write_text(summary, encoding="utf-8")
        draw_chart(Path(tmp) / CHART_NAME, bars, subtitle)
        spark = result.sparkSession
        jvm = spark.sparkContext._jvm
        assert jvm is not None
        hadoop_path = jvm.org.apache.hadoop.fs.Path
        conf = spark.sparkContext._jsc.hadoopConfiguration()
        fs = hadoop_path(out_dir).getFileSystem(conf)
        for name in (SUMMARY_NAME, CHART_NAME):
            src, dst = hadoop_path(str(Path(tmp) / name)), hadoop_path(f"{out_dir}/{name}")
            fs.copyFromLocalFile(False, True, src, dst)
