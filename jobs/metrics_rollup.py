"""Roll Horae's metric snapshots up into per-window Parquet, a Markdown summary and a chart.

Run it with ``deploy/spark/submit-rollup.sh`` (spark-submit, the ``jobs`` package as a
``--py-files`` zip), as ``horae rollup ...`` (the broker CLI calls :func:`main`), or as
``python -m jobs.metrics_rollup --input DIR --output DIR [--window 1m,1h]``.

Theory of operation
-------------------
Input is the snapshot schema of ``jobs/SCHEMA.md`` (gzip JSON Lines, one sample per line); it
is the only thing this module knows about the broker, and it imports nothing from it.

1. **Discover** (``jobs/rollup_inputs.py``). Local input is listed and every ``.gz`` is
   test-decompressed in the driver before Spark starts, so a corrupt file is named in a
   warning and skipped, and an empty or missing directory exits 2 without starting a JVM.
   Remote input (``hdfs://``, ``s3a://``) is listed through Hadoop; corrupt files there are
   skipped by ``spark.sql.files.ignoreCorruptFiles`` and reported in Spark's log only.
2. **Parse.** Spark's JSON reader in PERMISSIVE mode; a line that is not an object of the
   schema (or lacks ts/broker/metric/value) is counted per file and skipped. Unknown metric
   names need nothing special; an unknown ``type`` is carried as a gauge.
3. **Per series.** A series is (broker, cluster, metric, all labels). Over each counter
   series ordered by ts, every sample contributes its increase since the previous one; a
   drop in value is a reset (the broker restarted), and then the post-reset value is the
   increase. A series' first sample contributes 0 if it is in its broker's first snapshot
   of the input (its history before is unknown) and its value otherwise (it was born since,
   starting from zero). Each contribution belongs to the window holding its sample, so
   file arrival order (late files) does not matter, and an increase across a gap lands in
   the window of the first sample after the gap.
4. **Per window and group** (``jobs/rollup_aggregate.py``; cluster, namespace, topic, subscription, metric, other labels):
   counters sum their contributions (``increase``) and divide by the time those increases
   took (``covered_s``), not the window's nominal length, so a partly covered window's rate
   is the true average rate;
   gauges get min/avg/max/last per broker series, then summed over brokers; histograms get
   p50/p95/p99 from the window's bucket increases, as Prometheus ``histogram_quantile``
   over ``sum by (le) (increase(x_bucket[w]))`` does.
5. **Write** Parquet under ``OUTPUT/rollup/date=YYYY-MM-DD/window=1m/`` (dynamic partition
   overwrite: a rerun replaces only the partitions it produces), then ``summary.md`` and
   ``rollup.png`` (``jobs/rollup_report.py``).

Steps 2 and 3 share one cached frame: the JSON is parsed once. The job's modules always import
each other as the ``jobs`` package: run as a script by spark-submit, ``jobs`` comes from the zip
that ``deploy/spark/submit-rollup.sh`` builds and passes as ``--py-files`` (on the driver's
path and shipped to every executor); run from a checkout, use ``python -m jobs.metrics_rollup``.

Exit codes: 0 when anything could be rolled up, 2 when nothing could be read (missing or
empty input, every file corrupt, no valid line), 1 on an unexpected failure.
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession
    from pyspark.sql.types import StructType

from jobs import rollup_report
from jobs.rollup_aggregate import ALL_WINDOW, GROUP_LABELS, Window, rollup
from jobs.rollup_inputs import (
    InputListing,
    discover_local,
    discover_remote,
    is_remote,
    local_path,
)

log = logging.getLogger("horae.rollup")

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_NO_INPUT = 2

KNOWN_TYPES = ("counter", "gauge", "histogram", "summary", "untyped")
_WINDOW_RE = re.compile(r"^(\d+)([smhd])$")
_UNIT_MS = {"s": 1_000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


@dataclass(slots=True)
class InputStats:
    """What the parse stage saw; feeds the log and the summary."""

    files_read: int = 0
    files_skipped: list[tuple[str, str]] = field(default_factory=list)
    rows: int = 0
    bad_lines: int = 0
    bad_by_file: list[tuple[str, int]] = field(default_factory=list)
    nan_values: int = 0
    unknown_types: int = 0
    first_ts_by_broker: dict[str, int] = field(default_factory=dict)
    min_ts: int = 0
    max_ts: int = 0
    clusters: list[str] = field(default_factory=list)


def parse_windows(text: str) -> list[Window]:
    """``"1m,1h"`` -> windows, shortest first; raises ValueError on anything else."""
    windows: dict[int, Window] = {}
    for part in (p.strip() for p in text.split(",")):
        match = _WINDOW_RE.match(part)
        if match is None or int(match.group(1)) == 0:
            raise ValueError(
                f"bad window {part!r}: use a positive number and s, m, h or d, e.g. 1m"
            )
        ms = int(match.group(1)) * _UNIT_MS[match.group(2)]
        windows.setdefault(ms, Window(part, ms))
    return [windows[ms] for ms in sorted(windows)]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="metrics_rollup",
        description="Roll Horae metric snapshots (jobs/SCHEMA.md) up into per-window Parquet, "
        "a Markdown summary and a PNG chart of the busiest topics.",
    )
    parser.add_argument(
        "--input", required=True, help="snapshot directory (<data>/metrics), local or a Hadoop URI"
    )
    parser.add_argument(
        "--output", required=True, help="output directory (rollup/, summary.md, rollup.png)"
    )
    parser.add_argument(
        "--window", default="1m,1h", help="comma-separated windows: Ns, Nm, Nh, Nd (default 1m,1h)"
    )
    parser.add_argument(
        "--master", default=None, help="Spark master (default: spark-submit's, else local[*])"
    )
    parser.add_argument(
        "--shuffle-partitions", type=int, default=None, help="spark.sql.shuffle.partitions"
    )
    parser.add_argument(
        "--conf", action="append", default=[], metavar="KEY=VALUE", help="extra Spark config"
    )
    parser.add_argument(
        "--top", type=int, default=10, help="topics in the summary and chart (default 10)"
    )
    parser.add_argument(
        "--no-validate", action="store_true", help="skip the driver-side gzip check of local files"
    )
    return parser


# -- stage 2: parse ----------------------------------------------------------------------------


def _raw_schema() -> StructType:
    from pyspark.sql import types as T

    return T.StructType(
        [
            T.StructField("ts", T.LongType()),
            T.StructField("broker", T.StringType()),
            T.StructField("cluster", T.StringType()),
            T.StructField("metric", T.StringType()),
            T.StructField("type", T.StringType()),
            T.StructField("labels", T.MapType(T.StringType(), T.StringType())),
            T.StructField("value", T.DoubleType()),
            T.StructField("_corrupt_record", T.StringType()),
        ]
    )


def _canonical_labels(excluded: Sequence[str]) -> Column:
    """Labels minus ``excluded`` as a stable ``k=v,k=v`` string (sorted by key)."""
    from pyspark.sql import functions as F

    names = ", ".join(f"'{name}'" for name in excluded)
    return F.expr(
        "array_join(transform(array_sort(map_entries(map_filter(coalesce(labels, map()), "
        f"(k, v) -> k NOT IN ({names})))), e -> concat(e.key, '=', e.value)), ',')"
    )


_SERIES_COLUMNS = ("broker", "cluster", "metric", *GROUP_LABELS, "labels")


def read_samples(spark: SparkSession, files: list[str]) -> DataFrame:
    """Parse the files into normalised samples; bad lines are kept, flagged ``bad``."""
    from pyspark.sql import functions as F

    raw = (
        spark.read.schema(_raw_schema())
        .option("mode", "PERMISSIVE")
        .option("columnNameOfCorruptRecord", "_corrupt_record")
        .json(files)
    )
    bad = (
        F.col("_corrupt_record").isNotNull()
        | F.col("ts").isNull()
        | F.col("broker").isNull()
        | F.col("metric").isNull()
        | F.col("value").isNull()
    )
    ftype = F.lower(F.coalesce(F.col("type"), F.lit("untyped")))
    metric = F.col("metric")
    is_bucket = (
        (ftype == "histogram") & metric.endswith("_bucket") & F.col("labels")["le"].isNotNull()
    )
    kind = (
        F.when(metric.endswith("_created"), F.lit("gauge"))
        .when(ftype == "counter", F.lit("counter"))
        .when(is_bucket, F.lit("bucket"))
        .when(
            ftype.isin("histogram", "summary")
            & (metric.endswith("_sum") | metric.endswith("_count")),
            F.lit("counter"),
        )
        .otherwise(F.lit("gauge"))
    )
    base_excluded = ("cluster", *GROUP_LABELS)
    labels = F.col("labels")
    # Most Pulsar series carry only the group labels (plus `le` on buckets): answer those
    # without the lambda-based canonical form, which Spark evaluates row by row.
    n_labels = F.coalesce(F.size(labels), F.lit(0))
    n_group = sum((labels[name].isNotNull().cast("int") for name in base_excluded), F.lit(0))
    has_le = labels["le"].isNotNull()
    other_labels = (
        F.when(n_labels == n_group, F.lit(""))
        .when(has_le & (n_labels == n_group + 1), F.concat(F.lit("le="), labels["le"]))
        .otherwise(_canonical_labels(base_excluded))
    )
    hist_labels = F.when(n_labels == n_group + 1, F.lit("")).otherwise(
        _canonical_labels((*base_excluded, "le"))
    )
    ok = ~bad & ~F.isnan(F.col("value"))
    normalised = raw.select(
        bad.alias("bad"),
        ok.alias("ok"),
        F.when(bad, F.col("_metadata.file_path")).alias("bad_file"),
        F.col("ts"),
        F.col("broker"),
        F.coalesce(F.col("cluster"), F.lit("")).alias("cluster"),
        metric.alias("metric"),
        (~ftype.isin(*KNOWN_TYPES)).alias("unknown_type"),
        kind.alias("kind"),
        *[F.coalesce(labels[name], F.lit("")).alias(name) for name in GROUP_LABELS],
        other_labels.alias("labels"),
        F.when(is_bucket, labels["le"].try_cast("double")).alias("le"),
        F.when(is_bucket, hist_labels).alias("hist_labels"),
        F.col("value"),
    )
    # A series is identified by 96 bits of hash of its columns (and of `ok`, so bad and NaN
    # lines never sit between two samples of a series): the series sort then compares a
    # long and an int instead of seven strings. A collision is ~1e-16 likely at 10M series.
    identity = (F.col("ok"), *[F.col(c) for c in _SERIES_COLUMNS])
    return normalised.withColumn("series_id", F.xxhash64(*identity)).withColumn(
        "series_id2", F.hash(*identity)
    )


def with_series_deltas(samples: DataFrame) -> DataFrame:
    """Add each counter sample's increase since the previous sample of its series.

    ``delta`` is null on a series' first sample (``is_first``); ``interval_ms`` is the time
    that increase took (since the previous sample), the time a rate divides by. The first-sample rule needs
    the brokers' first timestamps and is applied at aggregation (:func:`_increase`). Bad and
    NaN lines stay in the frame (flag ``ok`` false, series of their own) for the statistics.
    """
    from pyspark.sql import Window as W
    from pyspark.sql import functions as F

    series = W.partitionBy("series_id", "series_id2").orderBy("ts", "value")
    prev = F.lag("value").over(series)
    prev_ts = F.lag("ts").over(series)
    counting = F.col("ok") & F.col("kind").isin("counter", "bucket")
    return samples.select(
        "*",
        prev.isNull().alias("is_first"),
        F.when(counting & prev.isNotNull(), F.col("ts") - prev_ts).alias("interval_ms"),
        F.when(counting & prev.isNotNull() & (F.col("value") < prev), F.lit(1))
        .otherwise(F.lit(0))
        .alias("reset"),
        F.when(counting & (F.col("value") >= prev), F.col("value") - prev)
        .when(counting & (F.col("value") < prev), F.col("value"))
        .alias("delta"),
    )


def collect_stats(samples: DataFrame, stats: InputStats) -> None:
    """One pass over the cached series: counts, bad lines, each broker's first timestamp."""
    from pyspark.sql import functions as F

    ok = F.col("ok")
    per_broker = (
        samples.groupBy("broker")
        .agg(
            F.count(F.lit(1)).alias("lines"),
            F.sum(F.col("bad").cast("long")).alias("bad"),
            F.sum((~F.col("bad") & F.isnan("value")).cast("long")).alias("nan"),
            F.sum((ok & F.col("unknown_type")).cast("long")).alias("unknown"),
            F.min(F.when(ok, F.col("ts"))).alias("first"),
            F.max(F.when(ok, F.col("ts"))).alias("last"),
            F.collect_set(F.when(ok, F.col("cluster"))).alias("clusters"),
        )
        .collect()
    )
    clusters: set[str] = set()
    for row in per_broker:
        stats.bad_lines += int(row["bad"] or 0)
        stats.nan_values += int(row["nan"] or 0)
        stats.unknown_types += int(row["unknown"] or 0)
        stats.rows += int(row["lines"]) - int(row["bad"] or 0) - int(row["nan"] or 0)
        if row["first"] is not None:
            stats.first_ts_by_broker[row["broker"]] = int(row["first"])
            stats.max_ts = max(stats.max_ts, int(row["last"]))
            clusters.update(row["clusters"])
    if stats.first_ts_by_broker:
        stats.min_ts = min(stats.first_ts_by_broker.values())
    stats.clusters = sorted(clusters)
    if stats.bad_lines:
        per_file = samples.filter("bad").groupBy("bad_file").count().orderBy("bad_file").collect()
        stats.bad_by_file = [(str(r["bad_file"]), int(r["count"])) for r in per_file]


# -- driver ------------------------------------------------------------------------------------


def _configure_logging() -> None:
    """INFO progress lines on stderr, unless the caller (the horae CLI) set logging up."""
    log.setLevel(logging.INFO)
    if not log.handlers and not logging.getLogger().handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(
            logging.Formatter("%(asctime)s rollup %(levelname)s %(message)s", "%H:%M:%S")
        )
        log.addHandler(handler)


def _spark_session(args: argparse.Namespace) -> tuple[SparkSession, bool]:
    """The active session if there is one (tests, notebooks), else a new one we own."""
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        return active, False
    builder = SparkSession.builder.appName("horae-metrics-rollup")
    master = args.master
    if master is None and "PYSPARK_GATEWAY_PORT" not in os.environ:
        master = "local[*]"  # not under spark-submit
    if master is not None:
        builder = builder.master(master)
    if master is not None and master.startswith("local"):
        builder = builder.config("spark.ui.enabled", "false")
        if args.shuffle_partitions is None:
            builder = builder.config("spark.sql.shuffle.partitions", str(2 * (os.cpu_count() or 1)))
    if args.shuffle_partitions is not None:
        builder = builder.config("spark.sql.shuffle.partitions", str(args.shuffle_partitions))
    for item in args.conf:
        key, sep, value = item.partition("=")
        if not sep:
            raise ValueError(f"--conf wants KEY=VALUE, got {item!r}")
        builder = builder.config(key.strip(), value.strip())
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    return spark, True


def run(spark: SparkSession, args: argparse.Namespace, listing: InputListing | None = None) -> int:
    """The job proper on a given session; ``main`` wraps it with parsing and session setup."""
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    started = time.monotonic()
    windows = parse_windows(args.window)
    # Runtime SQL settings the results depend on, set even on a borrowed session.
    spark.conf.set("spark.sql.session.timeZone", "UTC")
    spark.conf.set("spark.sql.files.ignoreCorruptFiles", "true")
    spark.conf.set("spark.sql.files.ignoreMissingFiles", "true")  # retention may race us
    spark.conf.set("spark.sql.sources.partitionOverwriteMode", "dynamic")

    if listing is None:
        log.info("[1/5] listing %s", args.input)
        listing = discover_remote(spark, args.input)
        if not listing.files:
            log.error("no snapshot files (*.jsonl.gz) under %s: nothing to roll up", args.input)
            return EXIT_NO_INPUT
        log.warning("remote input: corrupt files are skipped by Spark and reported in its log only")
    stats = InputStats(files_read=len(listing.files), files_skipped=list(listing.skipped))

    log.info("[2/5] parsing %d files", len(listing.files))
    # The one cache: parsed samples in series order with their deltas. Statistics, every
    # window and the summary read it; the JSON is parsed once.
    series = with_series_deltas(read_samples(spark, listing.files))
    series = series.persist(StorageLevel.MEMORY_AND_DISK)
    result: DataFrame | None = None
    try:
        collect_stats(series, stats)
        for path, count in stats.bad_by_file:
            log.warning("skipped %d bad line(s) in %s", count, path)
        if stats.nan_values:
            log.info("ignored %d NaN samples", stats.nan_values)
        if stats.unknown_types:
            log.warning("%d samples of an unknown type were carried as gauges", stats.unknown_types)
        if stats.rows == 0:
            log.error("no valid sample in %d files: nothing to roll up", stats.files_read)
            return EXIT_NO_INPUT
        log.info(
            "parsed %d samples from %d broker(s) (%s .. %s UTC), %d bad lines skipped",
            stats.rows,
            len(stats.first_ts_by_broker),
            rollup_report.fmt_ts(stats.min_ts),
            rollup_report.fmt_ts(stats.max_ts),
            stats.bad_lines,
        )

        log.info("[3/5] rolling up windows %s", ", ".join(w.name for w in windows))
        span = (stats.min_ts, stats.max_ts)
        result = rollup(series, windows, span, stats.first_ts_by_broker)
        result = result.persist(StorageLevel.MEMORY_AND_DISK)
        out_dir = args.output.rstrip("/")
        log.info("[4/5] writing Parquet to %s/rollup", out_dir)
        written = result.filter(F.col("window") != ALL_WINDOW)
        written.write.mode("overwrite").partitionBy("date", "window").parquet(f"{out_dir}/rollup")
        series.unpersist()
        counts = {r["window"]: int(r["count"]) for r in written.groupBy("window").count().collect()}
        for window in windows:
            log.info("window %s: %d rows", window.name, counts.get(window.name, 0))

        log.info("[5/5] writing %s/summary.md and the chart", out_dir)
        rollup_report.write_report(
            out_dir,
            args.input,
            [w.name for w in windows],
            stats,
            result,
            args.top,
            {w.name: w.ms for w in windows},
        )
    finally:
        series.unpersist()
        if result is not None:
            result.unpersist()
    log.info("done in %.1fs", time.monotonic() - started)
    return EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    """CLI entry point; returns the exit code (0 ok, 1 failure, 2 nothing readable)."""
    _configure_logging()
    args = build_parser().parse_args(list(argv) if argv is not None else None)
    try:
        parse_windows(args.window)
    except ValueError as exc:
        log.error("%s", exc)
        return EXIT_NO_INPUT
    listing: InputListing | None = None
    if not is_remote(args.input):
        root = local_path(args.input)
        if not root.is_dir():
            log.error("input directory %s does not exist: nothing to roll up", root)
            return EXIT_NO_INPUT
        log.info("[1/5] listing and checking %s", root)
        listing = discover_local(root, validate=not args.no_validate)
        for path, reason in listing.skipped:
            log.warning("skipping %s: %s", path, reason)
        if not listing.files:
            what = (
                "every snapshot file is unreadable"
                if listing.skipped
                else "no snapshot files (*.jsonl.gz)"
            )
            log.error("%s under %s: nothing to roll up", what, root)
            return EXIT_NO_INPUT
    try:
        import pyspark  # noqa: F401
    except ImportError:
        log.error("pyspark is not installed: pip install 'horae[jobs]'")
        return EXIT_FAILED
    spark, owned = _spark_session(args)
    try:
        return run(spark, args, listing)
    except Exception:
        log.exception("rollup failed")
        return EXIT_FAILED
    finally:
        if owned:
            spark.stop()


if __name__ == "__main__":
    sys.exit(main())
