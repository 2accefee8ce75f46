"""Stage 3 of the rollup: per-window aggregation of the parsed series (pure DataFrame code).

Theory of operation
-------------------
Input is the cached frame of ``jobs/metrics_rollup.py``: one row per valid sample, in series
order, with ``is_first``, ``delta`` (increase since the previous sample of a counter series,
reset-aware) and ``reset``. :func:`rollup` explodes each sample into every requested window
size plus :data:`ALL_WINDOW` (the whole input, for the summary) in one pass, so the number
of Spark stages does not grow with the number of windows, then:

* counters and histogram buckets: contributions summed per broker, then over brokers
  (two hash aggregations; ``brokers`` counts the first level's rows). A rate divides the
  increase by the time it took (``covered``: from the previous sample of the earliest
  contribution to the latest one), never by the window's nominal length: a window the
  input only partly covers (the first and last, or a 1-hour window over 75 s of data) gets
  its true average rate, and no window's rate is below the whole range's average (the
  windows' covered spans are disjoint parts of the whole range's);
* gauges: min/avg/max/last per broker series, then summed over brokers;
* histograms: Prometheus ``histogram_quantile`` over the window's bucket increases.

Every part is shaped to :data:`OUTPUT_COLUMNS` and unioned. Spark's ANSI mode is on by
default in Spark 4: array indexing below is guarded so it never reaches out of bounds.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

# Labels that are columns of the output; every other label stays in the `labels` string.
GROUP_LABELS = ("namespace", "topic", "subscription")

# Columns of the rollup table, in order (the Parquet schema; SCHEMA.md documents them).
OUTPUT_COLUMNS: tuple[tuple[str, str], ...] = (
    ("window_start", "timestamp"),
    ("window_end", "timestamp"),
    ("cluster", "string"),
    ("namespace", "string"),
    ("topic", "string"),
    ("subscription", "string"),
    ("metric", "string"),
    ("labels", "string"),
    ("kind", "string"),
    ("samples", "long"),
    ("brokers", "int"),
    ("resets", "long"),
    ("increase", "double"),
    ("rate_per_s", "double"),
    ("covered_s", "double"),
    ("min", "double"),
    ("avg", "double"),
    ("max", "double"),
    ("last", "double"),
    ("p50", "double"),
    ("p95", "double"),
    ("p99", "double"),
    ("date", "string"),
    ("window", "string"),
)
QUANTILES = (("p50", 0.5), ("p95", 0.95), ("p99", 0.99))


@dataclass(frozen=True, slots=True)
class Window:
    """A tumbling window: ``name`` as given on the command line ("1m"), length in ms."""

    name: str
    ms: int


def _increase(first_ts_by_broker: dict[str, int]) -> Column:
    """A counter sample's contribution, with the first-sample rule (module docstring, 3)."""
    from pyspark.sql import functions as F

    pairs: list[Column] = []
    for broker, first_ts in sorted(first_ts_by_broker.items()):
        pairs += [F.lit(broker), F.lit(first_ts)]
    broker_first = F.create_map(*pairs)[F.col("broker")] if pairs else F.lit(None).cast("long")
    born_later = F.col("ts") > broker_first
    return F.when(
        F.col("is_first"), F.when(born_later, F.col("value")).otherwise(F.lit(0.0))
    ).otherwise(F.col("delta"))


ALL_WINDOW = "all"  # the whole input as one window: feeds the summary, not written


def _windowed(series: DataFrame, windows: Sequence[Window], span: tuple[int, int]) -> DataFrame:
    """Each sample once per window size, with ``window``, ``window_start_ms``, ``window_ms``.

    One exploded pass (rather than one pass per window) keeps the number of Spark stages
    independent of the number of windows; partial aggregation keeps the shuffle small.
    The pseudo-window :data:`ALL_WINDOW` spans the whole input.
    """
    from pyspark.sql import functions as F

    start, end = span
    specs = [F.struct(F.lit(w.name).alias("n"), F.lit(w.ms).alias("ms")) for w in windows]
    specs.append(F.struct(F.lit(ALL_WINDOW).alias("n"), F.lit(0).cast("long").alias("ms")))
    exploded = series.filter(F.col("ok")).withColumn("_w", F.explode(F.array(*specs)))
    whole = F.col("_w.ms") == 0
    return exploded.select(
        "*",
        F.col("_w.n").alias("window"),
        F.when(whole, F.lit(start))
        .otherwise(F.col("ts") - F.pmod(F.col("ts"), F.col("_w.ms")))
        .alias("window_start_ms"),
        F.when(whole, F.lit(max(end - start, 0))).otherwise(F.col("_w.ms")).alias("window_ms"),
    ).drop("_w")


_KEYS = ("window", "window_start_ms", "window_ms", "cluster", *GROUP_LABELS, "metric", "labels")


def aggregate_counters(windowed: DataFrame, first_ts_by_broker: dict[str, int]) -> DataFrame:
    """Counters and histogram buckets: increase and rate per window and group."""
    from pyspark.sql import functions as F

    keys = (*_KEYS, "kind", "le", "hist_labels")
    # Two plain aggregations (per broker, then summed) rather than collect_set(broker):
    # sums and counts stay in Spark's fast hash aggregate.
    per_broker = (
        windowed.filter(F.col("kind").isin("counter", "bucket"))
        .groupBy(*keys, "broker")
        .agg(
            F.sum(_increase(first_ts_by_broker)).alias("increase"),
            F.count(F.lit(1)).alias("samples"),
            F.sum("reset").alias("resets"),
            # The rate counts only increases of known duration: not a series' first value.
            F.sum(F.when(~F.col("is_first"), F.col("delta"))).alias("timed"),
            F.min(F.col("ts") - F.coalesce(F.col("interval_ms"), F.lit(0))).alias("from_ts"),
            F.max("ts").alias("to_ts"),
        )
    )
    out = per_broker.groupBy(*keys).agg(
        F.sum("increase").alias("increase"),
        F.sum("samples").alias("samples"),
        F.sum("resets").cast("long").alias("resets"),
        F.count(F.lit(1)).cast("int").alias("brokers"),
        (F.max("to_ts") - F.min("from_ts")).alias("covered_ms"),
        F.sum("timed").alias("timed"),
    )
    rate = F.when(
        F.col("covered_ms") > 0,
        F.coalesce(F.col("timed"), F.lit(0.0)) / (F.col("covered_ms") / 1000.0),
    )
    return out.withColumn("rate_per_s", rate).drop("timed")


def aggregate_gauges(windowed: DataFrame) -> DataFrame:
    """Gauges: min/avg/max/last per broker series, then summed over brokers."""
    from pyspark.sql import functions as F

    per_broker = (
        windowed.filter(F.col("kind") == "gauge")
        .groupBy(*_KEYS, "broker")
        .agg(
            F.min("value").alias("min"),
            F.avg("value").alias("avg"),
            F.max("value").alias("max"),
            F.max_by("value", "ts").alias("last"),
            F.count(F.lit(1)).alias("samples"),
        )
    )
    return per_broker.groupBy(*_KEYS).agg(
        F.sum("min").alias("min"),
        F.sum("avg").alias("avg"),
        F.sum("max").alias("max"),
        F.sum("last").alias("last"),
        F.sum("samples").alias("samples"),
        F.count(F.lit(1)).cast("int").alias("brokers"),
        F.lit("gauge").alias("kind"),
    )


def _quantile_columns(df: DataFrame) -> DataFrame:
    """Add p50/p95/p99: Prometheus ``histogram_quantile`` over the array column ``buckets``.

    ``buckets`` is array<struct<le: double, n: double>> sorted by ``le``, cumulative counts.
    As in Prometheus: counts are made monotonic first; no ``+Inf`` bucket, fewer than two
    buckets or no observations give null (Prometheus: NaN); a rank that falls in the
    ``+Inf`` bucket gives the highest finite bound; a rank in the first bucket interpolates
    from 0, unless that bucket's bound is <= 0, which is then the answer.
    """
    from pyspark.sql import functions as F

    prepared = df.select(
        "*",
        F.expr("transform(buckets, b -> b.le)").alias("_u"),
        F.expr(
            "transform(buckets, (b, i) -> array_max(slice(transform(buckets, x -> x.n), 1, i + 1)))"
        ).alias("_c"),
    )
    # Few selects of SQL text: every withColumn would re-analyse the whole plan.
    ranked = prepared.select(
        "*",
        F.expr("element_at(_c, -1)").alias("_total"),
        *[
            F.expr(f"array_position(transform(_c, c -> c >= {q!r} * element_at(_c, -1)), true)")
            .cast("int")
            .alias(f"_i_{name}")
            for name, q in QUANTILES
        ],
    )
    ok = "size(_u) >= 2 AND element_at(_u, -1) = double('Infinity') AND _total > 0"
    quantiles = []
    for name, q in QUANTILES:
        rank, i = f"({q!r} * _total)", f"_i_{name}"
        lo_u, hi_u = f"element_at(_u, {i} - 1)", f"element_at(_u, {i})"
        lo_c, hi_c = f"element_at(_c, {i} - 1)", f"element_at(_c, {i})"
        sql = f"""CASE
            WHEN NOT ({ok}) THEN CAST(NULL AS DOUBLE)
            WHEN {i} = size(_u) THEN {lo_u}
            WHEN {i} = 1 AND element_at(_u, 1) <= 0 THEN element_at(_u, 1)
            WHEN {i} = 1 THEN element_at(_u, 1) * ({rank} / element_at(_c, 1))
            ELSE {lo_u} + ({hi_u} - {lo_u}) * (({rank} - {lo_c}) / ({hi_c} - {lo_c}))
            END"""
        quantiles.append(F.expr(sql).alias(name))
    return ranked.select(*[c for c in df.columns if c != "buckets"], *quantiles)


def aggregate_histograms(counter_rows: DataFrame) -> DataFrame:
    """p50/p95/p99 per window and group from the window's bucket increases."""
    from pyspark.sql import functions as F

    buckets = counter_rows.filter((F.col("kind") == "bucket") & F.col("le").isNotNull())
    keys = [k for k in _KEYS if k not in ("metric", "labels")]
    grouped = buckets.groupBy(
        *keys,
        F.regexp_replace("metric", "_bucket$", "").alias("metric"),
        F.col("hist_labels").alias("labels"),
    ).agg(
        F.array_sort(
            F.collect_list(F.struct(F.col("le").alias("le"), F.col("increase").alias("n")))
        ).alias("buckets"),
        F.sum("samples").alias("samples"),
        F.max("brokers").alias("brokers"),
        F.sum("resets").cast("long").alias("resets"),
        F.max("covered_ms").alias("covered_ms"),
    )
    total = F.expr("element_at(buckets, -1).n")
    has_inf = F.expr("element_at(buckets, -1).le = double('Infinity')")
    rate = F.when(has_inf & (F.col("covered_ms") > 0), total / (F.col("covered_ms") / 1000.0))
    out = grouped.select(
        *_KEYS,
        F.lit("histogram").alias("kind"),
        "samples",
        "brokers",
        "resets",
        F.when(has_inf, total).alias("increase"),
        rate.alias("rate_per_s"),
        "covered_ms",
        "buckets",
    )
    return _quantile_columns(out)


def _conform(df: DataFrame) -> DataFrame:
    """Shape any aggregate into OUTPUT_COLUMNS (absent columns become typed nulls)."""
    from pyspark.sql import functions as F

    start = F.timestamp_millis(F.col("window_start_ms"))
    derived = {
        "window_start": start,
        "window_end": F.timestamp_millis(F.col("window_start_ms") + F.col("window_ms")),
        "date": F.date_format(start, "yyyy-MM-dd"),
    }
    if "covered_ms" in df.columns:
        derived["covered_s"] = F.when(F.col("covered_ms") > 0, F.col("covered_ms") / 1000.0)
    present = set(df.columns)
    cols = []
    for name, dtype in OUTPUT_COLUMNS:
        if name in derived:
            cols.append(derived[name].cast(dtype).alias(name))
        elif name in present:
            cols.append(F.col(name).cast(dtype).alias(name))
        else:
            cols.append(F.lit(None).cast(dtype).alias(name))
    return df.select(*cols)


def rollup(
    series: DataFrame,
    windows: Sequence[Window],
    span: tuple[int, int],
    first_ts_by_broker: dict[str, int],
) -> DataFrame:
    """Every output row of every window, plus the :data:`ALL_WINDOW` rows.

    ``span`` is (first, last) sample timestamp of the input; ``first_ts_by_broker`` each
    broker's first snapshot time (the first-sample rule of ``_increase``).
    """
    windowed = _windowed(series, windows, span)
    counters = aggregate_counters(windowed, first_ts_by_broker)
    return (
        _conform(counters)
        .unionByName(_conform(aggregate_gauges(windowed)))
        .unionByName(_conform(aggregate_histograms(counters)))
    )
