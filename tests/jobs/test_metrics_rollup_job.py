"""The PySpark rollup job on local[1], checked against expectations computed in plain Python.

One SparkSession serves the module (Spark start-up costs ~10 s); the main fixture runs the
job once over the fixture of ``rollup_fixtures.py`` and the tests read its outputs.
"""

from __future__ import annotations

import gzip
import json
import logging
import math
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import rollup_fixtures as fx
from waiting import wait_until

pytest.importorskip("pyspark")
if shutil.which("java") is None:
    pytest.skip("Spark needs a Java runtime", allow_module_level=True)

from jobs import metrics_rollup
from jobs.metrics_rollup import EXIT_NO_INPUT, EXIT_OK, main

# The module's fixture runs the whole job (~50 s on a quiet 2-core machine, over 300 s beside
# other heavy work): a test timeout inside one of its Spark calls leaves the session's gateway
# mid-answer and fails every later Spark test of the run, so the bound is wide.
pytestmark = pytest.mark.timeout(1200)

WINDOWS = {"1m": 60_000, "1h": 3_600_000}
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    from pyspark.sql import SparkSession

    session = (
        SparkSession.builder.master("local[1]")
        .appName("horae-rollup-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "1")
        .config("spark.default.parallelism", "1")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.memory", "1g")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


class JobRun:
    def __init__(
        self, root: Path, out: Path, samples: list[dict[str, Any]], rc: int, log: str
    ) -> None:
        self.root, self.out, self.samples, self.rc, self.log = root, out, samples, rc, log
        self.rows: dict[fx.Key, dict[str, Any]] = {}


@pytest.fixture(scope="module")
def job(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> JobRun:
    from pyspark.sql import functions as F

    base = tmp_path_factory.mktemp("rollup")
    root, out = base / "metrics", base / "out"
    samples = fx.write_fixture(root)
    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append  # type: ignore[method-assign]
    logger = logging.getLogger("horae.rollup")
    logger.addHandler(handler)
    try:
        rc = main(["--input", str(root), "--output", str(out), "--window", "1m,1h"])
    finally:
        logger.removeHandler(handler)
    run = JobRun(root, out, samples, rc, "\n".join(r.getMessage() for r in records))
    if rc == EXIT_OK:
        table = spark.read.parquet(str(out / "rollup")).withColumn(
            "window_start_ms", F.unix_millis("window_start")
        )
        for r in table.collect():
            key = (
                r["window"],
                r["window_start_ms"],
                r["cluster"],
                r["namespace"],
                r["topic"],
                r["subscription"],
                r["metric"],
                r["labels"],
                r["kind"],
            )
            assert key not in run.rows, f"duplicate output row {key}"
            run.rows[key] = r.asDict()
    return run


def _key(
    window: str,
    k: int,
    topic: str,
    metric: str,
    kind: str,
    *,
    sub: str = "",
    labels: str = "",
    ns: str = fx.NS,
) -> fx.Key:
    ms = WINDOWS[window]
    return (window, fx.ts(k) - fx.ts(k) % ms, fx.CLUSTER, ns, topic, sub, metric, labels, kind)


def _approx(value: float | None) -> Any:
    return None if value is None else pytest.approx(value, rel=1e-9, abs=1e-9)


# -- the whole output against the independent computation -------------------------------------


def test_job_exits_zero_despite_corrupt_input(job: JobRun) -> None:
    assert job.rc == EXIT_OK, job.log


def test_every_output_row_matches_the_plain_python_rollup(job: JobRun) -> None:
    expected = fx.expected_rollup(job.samples, WINDOWS)
    assert set(job.rows) == set(expected)
    for key, want in expected.items():
        got = job.rows[key]
        for column, value in want.items():
            assert got[column] == _approx(value), (key, column)


# -- hand-computed cases: the reference and the job must not share a mistake --------------------


def test_counter_reset_counts_the_post_reset_value(job: JobRun) -> None:
    # broker b restarts at k=24 (00:02:00): 238 -> 2 is a reset, then +2 per tick.
    row = job.rows[_key("1m", 24, fx.T2, "pulsar_in_messages_total", "counter")]
    assert (row["increase"], row["resets"]) == (6.0, 1)
    hour = job.rows[_key("1h", 24, fx.T2, "pulsar_in_messages_total", "counter")]
    assert (hour["increase"], hour["resets"]) == (6 * 6 + 2 + 11 * 2, 1)
    # The hour window holds k = 18..35 of broker b: 18 intervals of 20 s since the previous
    # sample, so 360 s covered, and the rate is per covered second, not per 3600 s.
    assert hour["covered_s"] == pytest.approx(360)
    assert hour["rate_per_s"] == pytest.approx(60 / 360)


def test_series_in_first_snapshot_is_a_baseline_and_later_series_count_from_zero(
    job: JobRun,
) -> None:
    first = job.rows[_key("1m", 0, fx.T1, "pulsar_in_messages_total", "counter")]
    assert first["increase"] == 10.0  # 0 -> 5 -> 10: the first sample itself is history
    born = job.rows[_key("1m", 20, fx.BORN, "pulsar_in_messages_total", "counter")]
    assert born["increase"] == 7.0  # born at k=20 with value 7: all of it is new


def test_increase_across_a_gap_lands_in_the_first_window_after_it(job: JobRun) -> None:
    for k in (9, 12):  # 23:57 and 23:58: broker a silent
        assert _key("1m", k, fx.T1, "pulsar_in_messages_total", "counter") not in job.rows
    after = job.rows[_key("1m", 17, fx.T1, "pulsar_in_messages_total", "counter")]
    assert after["increase"] == 90 - 42  # value at k=17 minus value at k=8


def test_late_file_is_ordered_by_timestamp_not_arrival(job: JobRun) -> None:
    row = job.rows[_key("1m", fx.LATE_TICK, fx.T1, "pulsar_in_messages_total", "counter")]
    assert (row["increase"], row["resets"], row["samples"]) == (16.0, 0, 3)
    whole_hour = job.rows[_key("1h", 0, fx.T1, "pulsar_in_messages_total", "counter")]
    assert (whole_hour["increase"], whole_hour["resets"]) == (90.0, 0)


def test_two_brokers_are_summed_per_broker_series(job: JobRun) -> None:
    hour = job.rows[_key("1h", 0, fx.SHARED, "pulsar_in_messages_total", "counter")]
    assert (hour["increase"], hour["brokers"]) == (80.0 + 10.0, 2)
    topics = job.rows[_key("1m", 0, "", "pulsar_topics_count", "gauge")]
    assert (topics["last"], topics["min"], topics["max"], topics["brokers"]) == (5.0, 5.0, 5.0, 2)
    in_gap = job.rows[_key("1m", 12, "", "pulsar_topics_count", "gauge")]
    assert (in_gap["last"], in_gap["brokers"]) == (3.0, 1)


def test_gauge_min_avg_max_last(job: JobRun) -> None:
    row = job.rows[_key("1m", 0, fx.T1, "pulsar_msg_backlog", "gauge")]  # values 0, 7, 3
    assert (row["min"], row["max"], row["last"]) == (0.0, 7.0, 3.0)
    assert row["avg"] == pytest.approx(10 / 3)


def test_histogram_quantiles_interpolate_like_prometheus(job: JobRun) -> None:
    # 23:54 window increases: le=1: 2, le=5: 6, le=10: 8, +Inf: 9.
    row = job.rows[_key("1m", 0, fx.T1, "pulsar_storage_write_latency", "histogram")]
    assert row["increase"] == 9.0
    assert row["p50"] == pytest.approx(1 + 4 * (4.5 - 2) / (6 - 2))
    assert (row["p95"], row["p99"]) == (10.0, 10.0)  # rank in +Inf: highest finite bound
    # 00:02 on broker b, across its restart: le=0.5: 3, le=2: 6, +Inf: 7.
    after_reset = job.rows[_key("1m", 24, fx.T2, "pulsar_storage_write_latency", "histogram")]
    assert after_reset["p50"] == pytest.approx(0.75)
    assert after_reset["p99"] == 2.0


def test_histogram_quantile_reference_matches_prometheus_examples() -> None:
    buckets = [(0.1, 10.0), (0.5, 60.0), (1.0, 90.0), (math.inf, 100.0)]
    assert fx.histogram_quantile(0.5, buckets) == pytest.approx(0.42)
    assert fx.histogram_quantile(0.05, buckets) == pytest.approx(0.05)
    assert fx.histogram_quantile(0.99, buckets) == 1.0
    assert fx.histogram_quantile(0.5, [(1.0, 5.0), (2.0, 9.0)]) is None  # no +Inf bucket
    assert fx.histogram_quantile(0.5, [(1.0, 0.0), (math.inf, 0.0)]) is None


def test_unknown_metrics_and_types_are_carried_as_gauges(job: JobRun) -> None:
    custom = job.rows[
        _key("1m", 0, "", "horae_custom_widgets", "gauge", labels="shape=round", ns="")
    ]
    assert (custom["min"], custom["max"]) == (0.0, 2.0)
    assert _key("1m", 0, "", "horae_strange", "gauge", ns="") in job.rows
    assert "unknown type were carried as gauges" in job.log


def test_delayed_delivery_figures_are_in_the_output(job: JobRun) -> None:
    hour = lambda metric, kind, **kw: job.rows[_key("1h", 18, fx.T1, metric, kind, **kw)]  # noqa: E731
    assert (
        hour("pulsar_broker_topic_messages_delayed_rejected_total", "counter")["increase"] == 8 - 4
    )
    assert (
        hour("pulsar_broker_topic_messages_fixed_delay_overridden_total", "counter")["increase"]
        == 5 - 2
    )
    assert hour("pulsar_subscription_delayed", "gauge", sub="s1")["max"] == 4.0
    assert hour("pulsar_delayed_message_index_size_bytes", "gauge")["last"] == 3500.0


# -- files, partitions, report -------------------------------------------------------------------


def test_parquet_is_partitioned_by_date_and_window(job: JobRun) -> None:
    parts = sorted(
        p.relative_to(job.out / "rollup").as_posix() for p in (job.out / "rollup").glob("*/*")
    )
    assert parts == [
        "date=2026-11-20/window=1h",
        "date=2026-11-20/window=1m",
        "date=2026-11-21/window=1h",
        "date=2026-11-21/window=1m",
    ]
    assert list((job.out / "rollup" / "date=2026-11-21" / "window=1m").glob("*.parquet"))


def test_corrupt_files_and_bad_lines_are_skipped_with_a_warning(job: JobRun) -> None:
    assert all(fx.GHOST not in key for key in job.rows)
    assert "metrics-garbage-1.jsonl.gz: corrupt gzip" in job.log
    assert f"{fx.BROKER_B}-{fx.ts(7) + 1}.jsonl.gz: corrupt gzip" in job.log
    bad_file = f"metrics-broker-a_8080-{fx.ts(fx.BAD_LINES_TICK)}.jsonl.gz"
    assert f"skipped {len(fx.BAD_LINES)} bad line(s) in" in job.log
    assert bad_file in job.log
    assert "ignored 1 NaN samples" in job.log


def test_progress_is_logged_per_stage(job: JobRun) -> None:
    for stage in ("[1/5]", "[2/5]", "[3/5]", "[4/5]", "[5/5]", "window 1m:", "done in"):
        assert stage in job.log


def test_summary_names_busiest_topics_and_delayed_delivery(job: JobRun) -> None:
    text = (job.out / "summary.md").read_text()
    lines = text.splitlines()
    t2 = next(line for line in lines if f"`{fx.T2}`" in line and line.startswith("| "))
    # t2 whole range: 23 * 6 before the restart (k=0 is a baseline), then 2 + 11 * 2 after it.
    assert "| 162 |" in t2.replace(",", "")
    assert "rejected for exceeding the max delivery delay" in text
    assert "pulsar_broker_topic_messages_delayed_rejected_total): 8" in text
    assert "pulsar_broker_topic_messages_fixed_delay_overridden_total): 5" in text
    assert "metrics-garbage-1.jsonl.gz" in text
    assert "pulsar_storage_write_latency" in text


def test_summary_states_the_covered_span_and_peaks_never_fall_below_the_average(
    job: JobRun,
) -> None:
    text = (job.out / "summary.md").read_text()
    # k = 0..35 at 20 s: 11m 40s from the first to the last snapshot, across midnight.
    assert "Covered span: 11m 40s" in text
    assert "1h: 2 window(s), 2 partly covered" in text
    header = next(line for line in text.splitlines() if line.startswith("| # |"))
    columns = [c.strip() for c in header.strip("|").split("|")]
    avg, peak_1m, peak_1h = (
        columns.index("avg in/s"),
        columns.index("peak in/s (1m)"),
        columns.index("peak in/s (1h)"),
    )
    rows = [
        [c.strip().replace(",", "") for c in line.strip("|").split("|")]
        for line in text.splitlines()
        if line.startswith("| ") and "`" in line and line.count("|") == len(columns) + 1
    ]
    assert rows
    for cells in rows:
        if "-" in (cells[avg], cells[peak_1m], cells[peak_1h]):
            continue
        # Over partial windows the rates are per covered second: no peak below the average.
        assert float(cells[peak_1m]) >= float(cells[avg]) - 1e-3, cells
        assert float(cells[peak_1h]) >= float(cells[avg]) - 1e-3, cells


def test_rates_of_a_partly_covered_window_are_per_covered_second(job: JobRun) -> None:
    # The first minute (23:54:00 .. 23:55:00) of t1 on broker a: k = 0..2 are in it, and k=0
    # is the baseline, so 40 s are covered (a full minute would divide by 60 s).
    row = job.rows[_key("1m", 0, fx.T1, "pulsar_in_messages_total", "counter")]
    assert row["covered_s"] == pytest.approx(40)
    assert row["rate_per_s"] == pytest.approx(row["increase"] / 40)


def test_chart_is_a_real_png_with_a_time_axis(job: JobRun) -> None:
    from jobs import rollup_report

    data = (job.out / "rollup.png").read_bytes()
    assert data[:8] == PNG_MAGIC
    assert len(data) > 10_000
    assert rollup_report.chart_window(["1m", "1h"], WINDOWS, fx.ts(0), fx.ts(35)) == "1m"
    # Forty days of 1 m windows are too many points: the chart falls back to the hour.
    assert rollup_report.chart_window(["1m", "1h"], WINDOWS, 0, 40 * 86_400_000) == "1h"


# -- inputs that cannot be rolled up --------------------------------------------------------------


def test_missing_input_directory_exits_2(tmp_path: Path) -> None:
    assert (
        main(["--input", str(tmp_path / "nope"), "--output", str(tmp_path / "out")])
        == EXIT_NO_INPUT
    )
    assert not (tmp_path / "out").exists()


def test_empty_input_directory_exits_2(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    (tmp_path / "in" / "date=2026-11-20").mkdir(parents=True)
    caplog.set_level(logging.INFO, logger="horae.rollup")
    assert (
        main(["--input", str(tmp_path / "in"), "--output", str(tmp_path / "out")]) == EXIT_NO_INPUT
    )
    assert "no snapshot files" in caplog.text


def test_every_file_corrupt_exits_2(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "metrics-b-1.jsonl.gz").write_bytes(b"junk")
    caplog.set_level(logging.INFO, logger="horae.rollup")
    assert (
        main(["--input", str(tmp_path / "in"), "--output", str(tmp_path / "out")]) == EXIT_NO_INPUT
    )
    assert "every snapshot file is unreadable" in caplog.text


def test_no_valid_line_exits_2(
    spark: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "in").mkdir()
    with gzip.open(tmp_path / "in" / "metrics-b-1.jsonl.gz", "wt") as f:
        f.write("not json\n" + json.dumps({"ts": 1, "metric": "m"}) + "\n")
    caplog.set_level(logging.INFO, logger="horae.rollup")
    assert (
        main(["--input", str(tmp_path / "in"), "--output", str(tmp_path / "out")]) == EXIT_NO_INPUT
    )
    assert "no valid sample" in caplog.text


def test_bad_window_exits_2(tmp_path: Path) -> None:
    assert (
        main(["--input", str(tmp_path), "--output", str(tmp_path), "--window", "5x"])
        == EXIT_NO_INPUT
    )


def test_windows_parse_sorted_and_deduplicated() -> None:
    windows = metrics_rollup.parse_windows("1h, 1m,60s,1d")
    assert [(w.name, w.ms) for w in windows] == [
        ("1m", 60_000),
        ("1h", 3_600_000),
        ("1d", 86_400_000),
    ]


def test_hadoop_listing_finds_snapshots_and_skips_hidden_files(spark: Any, job: JobRun) -> None:
    listing = metrics_rollup.discover_remote(spark, job.root.as_uri())
    names = {Path(p).name for p in listing.files}
    assert len(names) == 2 * fx.TICKS - len(fx.A_GAP) + 2  # + the two corrupt files
    assert not any(name.startswith(".") for name in names)
    assert "README.txt" not in names


# -- the contract end to end: the broker's writer feeds the job -----------------------------------


def test_writer_snapshots_roll_up_to_the_published_counts(spark: Any, tmp_path: Path) -> None:
    from prometheus_client import CollectorRegistry, Counter, Histogram
    from pyspark.sql import functions as F

    from broker.metrics.snapshots import MetricSnapshotWriter

    registry = CollectorRegistry()
    msgs = Counter("pulsar_in_messages", "in", ["cluster", "namespace", "topic"], registry=registry)
    latency = Histogram(
        "pulsar_storage_write_latency", "ms", ["topic"], buckets=(1, 10), registry=registry
    )
    writer = MetricSnapshotWriter(
        tmp_path / "data", "localhost:8080", "standalone", retention_hours=0
    )
    t, u = "persistent://public/default/t", "persistent://public/default/u"
    msgs.labels(
        "standalone", "public/default", t
    )  # the topic exists at start-up, nothing published
    start = fx.T0_MS
    for step, (published_t, published_u) in enumerate([(0, 0), (5, 0), (7, 0), (0, 3)]):
        msgs.labels("standalone", "public/default", t).inc(published_t)
        if published_u:
            msgs.labels("standalone", "public/default", u).inc(published_u)
        for _ in range(published_t):
            latency.labels(t).observe(4)
        ts_ms = start + 20_000 * step
        # The broker's path: consecutive snapshots reuse the text of unchanged series.
        writer.write_families(registry.collect(), ts_ms)

    out = tmp_path / "out"
    assert (
        main(["--input", str(writer.metrics_dir), "--output", str(out), "--window", "1m"])
        == EXIT_OK
    )
    table = spark.read.parquet(str(out / "rollup"))
    totals = {
        r["topic"]: r["total"]
        for r in table.filter("metric = 'pulsar_in_messages_total'")
        .groupBy("topic")
        .agg(F.sum("increase").alias("total"))
        .collect()
    }
    assert totals == {t: 12.0, u: 3.0}
    hist = table.filter("metric = 'pulsar_storage_write_latency' AND kind = 'histogram'").collect()
    assert sum(r["increase"] for r in hist) == 12.0
    assert [r["p50"] for r in hist if r["increase"]] == [pytest.approx(1 + 9 * 6 / 12)]


# -- end to end: a real broker exports every second, the job rolls its files up ----------------


def test_broker_snapshots_roll_up_to_what_the_official_client_sent(
    spark: Any, broker_factory: Any, tmp_path: Path
) -> None:
    import pulsar
    from pyspark.sql import functions as F

    data_dir = tmp_path / "broker-data"
    broker = broker_factory(data_dir=data_dir, config_overrides={"metricsExportIntervalSeconds": 1})
    topic = "persistent://public/default/rollup-e2e"
    sent = 37
    client = pulsar.Client(broker.service_url, operation_timeout_seconds=10)
    try:
        consumer = client.subscribe(topic, "rollup-sub", consumer_type=pulsar.ConsumerType.Shared)
        producer = client.create_producer(topic)
        for i in range(sent):
            producer.send(f"m-{i}".encode())
        for _ in range(sent):
            consumer.acknowledge(consumer.receive(timeout_millis=10_000))
    finally:
        client.close()
    metrics_dir = data_dir / "metrics"
    # Let the once-a-second exporter write at least one periodic snapshot besides the
    # start-up one, then stop: the exporter writes a last snapshot on the way out.
    wait_until(lambda: len(list(metrics_dir.rglob("*.jsonl.gz"))) >= 2, timeout_s=15,
               interval_s=0.1, message="the exporter writes a periodic snapshot")
    broker.stop()
    assert len(list(metrics_dir.rglob("*.jsonl.gz"))) >= 3

    out = tmp_path / "out"
    assert main(["--input", str(metrics_dir), "--output", str(out), "--window", "1m,1h"]) == EXIT_OK
    table = spark.read.parquet(str(out / "rollup")).filter(F.col("topic") == topic)
    for window in ("1m", "1h"):
        totals = {
            r["metric"]: r["total"]
            for r in table.filter(F.col("window") == window)
            .filter(F.col("metric").isin("pulsar_in_messages_total", "pulsar_out_messages_total"))
            .groupBy("metric")
            .agg(F.sum("increase").alias("total"))
            .collect()
        }
        assert totals == {
            "pulsar_in_messages_total": float(sent),
            "pulsar_out_messages_total": float(sent),
        }, window


def test_picture_series_follow_the_smallest_window(job: JobRun, spark: Any) -> None:
    from jobs import rollup_report

    table = spark.read.parquet(str(job.out / "rollup"))
    timeline = rollup_report._timeline(table, "1m", [fx.T1])
    t1 = timeline.rates["public/default/t1"]
    assert len(t1) >= 6  # one point per minute of t1's data
    assert all(t % 60_000 == 0 for t, _, _ in t1)
    rejected = dict(timeline.delayed["rejected (max delay)"])
    assert sum(rejected.values()) == 8  # the whole range's increase, spread over the minutes
