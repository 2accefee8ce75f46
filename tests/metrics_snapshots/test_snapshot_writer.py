"""MetricSnapshotWriter and run_exporter: rows, complete files, retention, off-loop writes."""

from __future__ import annotations

import asyncio
import datetime as dt
import gzip
import json
import math
import os
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Info, Summary
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
)
from prometheus_client.metrics_core import Metric

from broker.metrics.snapshots import MetricSnapshotWriter, run_exporter

TS = int(dt.datetime(2026, 11, 20, 23, 59, 30, tzinfo=dt.UTC).timestamp() * 1000)
HOUR_MS = 3_600_000


def read_rows(path: Path) -> list[dict[str, Any]]:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def snapshot_files(root: Path) -> list[Path]:
    return sorted((root / "metrics").rglob("*.jsonl.gz"))


@pytest.fixture
def registry() -> CollectorRegistry:
    reg = CollectorRegistry()
    msgs = Counter("pulsar_in_messages", "in", ["cluster", "namespace", "topic"], registry=reg)
    msgs.labels("c1", "public/default", "persistent://public/default/t").inc(42)
    Gauge("pulsar_subscription_delayed", "d", ["topic", "subscription"], registry=reg).labels(
        "persistent://public/default/t", "s"
    ).set(7)
    lat = Histogram("pulsar_storage_write_latency", "ms", buckets=(1, 10), registry=reg)
    lat.observe(0.5)
    lat.observe(5)
    Summary("horae_loop_lag_seconds", "lag", registry=reg).observe(0.25)
    Info("horae_build", "build", registry=reg).info({"version": "0.1.0"})
    return reg


def test_rows_follow_the_schema(registry: CollectorRegistry, tmp_path: Path) -> None:
    writer = MetricSnapshotWriter(tmp_path, "localhost:8080", "c1", 24)
    rows = writer.collect_rows(registry, TS)
    by_name = {(r["metric"], r["labels"].get("le")): r for r in rows}
    counter = by_name[("pulsar_in_messages_total", None)]
    assert counter == {
        "ts": TS,
        "broker": "localhost:8080",
        "cluster": "c1",
        "metric": "pulsar_in_messages_total",
        "type": "counter",
        "labels": {"namespace": "public/default", "topic": "persistent://public/default/t"},
        "value": 42.0,
    }
    assert list(counter) == ["ts", "broker", "cluster", "metric", "type", "labels", "value"]
    assert by_name[("pulsar_subscription_delayed", None)]["type"] == "gauge"
    buckets = {le: r["value"] for (name, le), r in by_name.items() if name.endswith("_bucket")}
    assert buckets == {"1.0": 1.0, "10.0": 2.0, "+Inf": 2.0}
    assert by_name[("pulsar_storage_write_latency_count", None)]["type"] == "histogram"
    assert by_name[("horae_loop_lag_seconds_sum", None)]["type"] == "summary"
    assert by_name[("horae_build_info", None)]["type"] == "gauge"


def test_created_samples_and_cluster_label_are_not_exported(
    registry: CollectorRegistry, tmp_path: Path
) -> None:
    rows = MetricSnapshotWriter(tmp_path, "b", "c1", 24).collect_rows(registry, TS)
    assert not [r for r in rows if r["metric"].endswith("_created")]
    assert all("cluster" not in r["labels"] for r in rows)


def test_nan_is_dropped_and_infinity_survives(tmp_path: Path) -> None:
    nan = GaugeMetricFamily("g_nan", "x", value=math.nan)
    inf = GaugeMetricFamily("g_inf", "x", value=math.inf)
    untyped = Metric("u", "x", "unknown")
    untyped.add_sample("u", {}, 3.0)
    writer = MetricSnapshotWriter(tmp_path, "b", "c1", 24)
    rows = writer.collect_rows([nan, inf, untyped], TS)
    assert [(r["metric"], r["type"], r["value"]) for r in rows] == [
        ("g_inf", "gauge", math.inf),
        ("u", "untyped", 3.0),
    ]
    written = read_rows(writer.write(rows, TS))
    assert written[0]["value"] == math.inf


def test_write_families_writes_the_same_bytes_as_rows(
    registry: CollectorRegistry, tmp_path: Path
) -> None:
    shared = {"cluster": "c1", "topic": "persistent://public/default/é"}
    gauge = GaugeMetricFamily("g", "x", labels=["cluster", "topic"])
    gauge.add_sample("g", shared, -math.inf)
    gauge.add_sample("g", shared, 1e-7)
    families = [*registry.collect(), gauge, GaugeMetricFamily("g_nan", "x", value=math.nan)]
    writer = MetricSnapshotWriter(tmp_path, "b:1", 'c"1', 24)
    by_rows = writer.write(writer.collect_rows(families, TS), TS).read_bytes()
    by_families = writer.write_families(families, TS).read_bytes()
    assert by_families == by_rows
    assert len(read_rows(writer.path_for(TS))) == len(writer.collect_rows(families, TS))


def _topic_families(values: dict[str, float], extra: str = "") -> list[Metric]:
    """A counter and a gauge per topic (labels shared per topic, as the collector does)
    and a histogram whose bucket labels are fresh dicts per sample."""
    counter = CounterMetricFamily("pulsar_in_messages", "in", labels=["cluster", "topic"])
    gauge = GaugeMetricFamily("pulsar_rate_in", "rate", labels=["cluster", "topic"])
    hist = HistogramMetricFamily("lat", "ms", labels=["topic"])
    for topic, value in values.items():
        labels = {"cluster": "c1", "topic": topic}
        counter.add_sample("pulsar_in_messages_total", labels, value)
        gauge.add_sample("pulsar_rate_in", labels, value / 2 if extra else 0.0)
        hist.add_sample("lat_bucket", {"topic": topic, "le": "1.0"}, value)
        hist.add_sample("lat_bucket", {"topic": topic, "le": "+Inf"}, value + 1)
        hist.add_sample("lat_count", {"topic": topic}, value + 1)
    return [counter, gauge, hist]


def test_consecutive_snapshots_reuse_unchanged_text_and_match_a_fresh_writer(
    tmp_path: Path,
) -> None:
    values = {f"persistent://public/default/t{i}": float(i) for i in range(100)}
    writer = MetricSnapshotWriter(tmp_path / "kept", "b:1", "c1", 24)
    writer.write_families(_topic_families(values), TS)
    changes: list[dict[str, float]] = [
        dict(values),                                      # nothing moved
        {**values, "persistent://public/default/t7": 1e9},  # one topic moved
        {k: v for k, v in values.items() if not k.endswith("t50")},  # one unloaded
        {**values, "persistent://public/default/new": -0.5},  # one loaded
        {k.replace("t3", "x3"): v for k, v in values.items()},  # same values, other labels
    ]
    for step, moved in enumerate(changes, 1):
        ts = TS + step * 60_000
        families = _topic_families(moved, extra="x" if step == 2 else "")
        kept = writer.write_families(families, ts).read_bytes()
        fresh_writer = MetricSnapshotWriter(tmp_path / f"fresh{step}", "b:1", "c1", 24)
        fresh = fresh_writer.write(fresh_writer.collect_rows(families, ts), ts).read_bytes()
        assert kept == fresh, step
        rows = read_rows(writer.path_for(ts))
        assert {row["ts"] for row in rows} == {ts}
        assert len(rows) == 5 * len(moved)


def test_write_places_a_complete_file_by_utc_date(
    registry: CollectorRegistry, tmp_path: Path
) -> None:
    writer = MetricSnapshotWriter(tmp_path, "localhost:8080", "c1", 24)
    rows = writer.collect_rows(registry, TS)
    path = writer.write(rows, TS)
    assert (
        path == tmp_path / "metrics" / "date=2026-11-20" / f"metrics-localhost_8080-{TS}.jsonl.gz"
    )
    assert read_rows(path) == rows
    assert sorted(p.name for p in path.parent.iterdir()) == [path.name]  # no tmp file left behind


def test_failed_write_leaves_no_file(tmp_path: Path) -> None:
    writer = MetricSnapshotWriter(tmp_path, "b", "c1", 24)
    with pytest.raises(TypeError):
        writer.write([{"ts": TS, "value": object()}], TS)
    assert list((tmp_path / "metrics").rglob("*")) == [tmp_path / "metrics" / "date=2026-11-20"]


def test_empty_snapshot_is_a_valid_empty_file(tmp_path: Path) -> None:
    path = MetricSnapshotWriter(tmp_path, "b", "c1", 24).write([], TS)
    assert read_rows(path) == []


def test_retention_deletes_old_files_and_empty_date_dirs(tmp_path: Path) -> None:
    writer = MetricSnapshotWriter(tmp_path, "b", "c1", retention_hours=24)
    day_ms = 24 * HOUR_MS
    old = [writer.write([], TS - 3 * day_ms), writer.write([], TS - 2 * day_ms)]
    boundary_old = writer.write([], TS - day_ms - 1)
    kept = [writer.write([], TS - day_ms + 1), writer.write([], TS)]
    stale_tmp = old[1].with_name(".metrics-b-1.jsonl.gz.tmp")
    stale_tmp.write_bytes(b"")
    os.utime(stale_tmp, ((TS - 2 * day_ms) / 1000,) * 2)
    foreign = old[1].parent / "notes.txt"
    foreign.write_text("not ours")

    deleted = writer.apply_retention(TS)

    assert set(deleted) >= {*old, boundary_old, stale_tmp, old[0].parent}
    assert old[1].parent not in deleted  # still holds notes.txt
    assert foreign.exists()
    assert snapshot_files(tmp_path) == sorted(kept)


def test_retention_of_zero_keeps_everything(tmp_path: Path) -> None:
    writer = MetricSnapshotWriter(tmp_path, "b", "c1", retention_hours=0)
    path = writer.write([], TS - 365 * 24 * HOUR_MS)
    assert writer.apply_retention(TS) == []
    assert path.exists()


class _CountingCollector:
    """Collects on the loop thread only, and counts how often it was asked."""

    def __init__(self) -> None:
        self.calls = 0
        self.threads: set[int] = set()

    def collect(self) -> Iterable[Metric]:
        self.calls += 1
        self.threads.add(threading.get_ident())
        family = CounterMetricFamily("pulsar_in_messages", "in", labels=["topic"])
        family.add_metric(["t"], float(self.calls))
        return [family]

    async def collect_async(self) -> Iterable[Metric]:
        return self.collect()


async def test_exporter_writes_now_periodically_and_on_stop_off_the_loop(tmp_path: Path) -> None:
    writer = MetricSnapshotWriter(tmp_path, "b", "c1", 24)
    write_threads: list[int] = []
    written = asyncio.Event()
    loop = asyncio.get_running_loop()
    original = writer.write_families_and_retain

    def spy(rows: Any, ts_ms: int) -> Path:
        write_threads.append(threading.get_ident())
        path = original(rows, ts_ms)
        if len(write_threads) >= 3:
            loop.call_soon_threadsafe(written.set)
        return path

    writer.write_families_and_retain = spy  # type: ignore[method-assign]
    collector = _CountingCollector()
    stop = asyncio.Event()
    task = asyncio.create_task(run_exporter(writer, collector.collect_async, 0.05, stop))
    await asyncio.wait_for(written.wait(), timeout=10)
    stop.set()
    await asyncio.wait_for(task, timeout=10)

    loop_thread = threading.get_ident()
    assert collector.calls == len(write_threads) >= 4  # first, >= 2 ticks, final
    assert collector.threads == {loop_thread}
    assert loop_thread not in write_threads
    values = sorted(read_rows(p)[0]["value"] for p in snapshot_files(tmp_path))
    assert values[-1] == float(collector.calls)


async def test_exporter_survives_a_failing_write(tmp_path: Path) -> None:
    writer = MetricSnapshotWriter(tmp_path, "b", "c1", 24)
    attempts: list[int] = []
    loop = asyncio.get_running_loop()
    retried = asyncio.Event()

    def broken(rows: Any, ts_ms: int) -> Path:
        attempts.append(ts_ms)
        if len(attempts) >= 2:
            loop.call_soon_threadsafe(retried.set)
        raise OSError("disk full")

    writer.write_families_and_retain = broken  # type: ignore[method-assign]
    stop = asyncio.Event()
    task = asyncio.create_task(run_exporter(writer, _CountingCollector().collect_async, 0.05, stop))
    await asyncio.wait_for(retried.wait(), timeout=10)
    stop.set()
    await asyncio.wait_for(task, timeout=10)
    assert len(attempts) >= 3


async def test_exporter_stopped_at_once_still_writes_a_snapshot(tmp_path: Path) -> None:
    writer = MetricSnapshotWriter(tmp_path, "b", "c1", 24)
    stop = asyncio.Event()
    stop.set()
    await asyncio.wait_for(run_exporter(writer, _CountingCollector().collect_async, 60, stop), timeout=10)
    assert 1 <= len(snapshot_files(tmp_path)) <= 2  # the two may share a millisecond


async def test_exporter_rejects_a_non_positive_interval(tmp_path: Path) -> None:
    writer = MetricSnapshotWriter(tmp_path, "b", "c1", 24)
    with pytest.raises(ValueError, match="interval_s"):
        await run_exporter(writer, _CountingCollector().collect_async, 0, asyncio.Event())
    assert not (tmp_path / "metrics").exists()
