"""Pulsar's pulsar_storage_write_latency_le_* series beside the histogram.

Pulsar's topic stats export one gauge per latency bucket (``_le_0_5`` ... ``_le_1000``,
``_overflow``) holding the appends of the last stats window; Horae exports them under the same
names and labels next to its cumulative histogram, so Pulsar dashboards find their series.
"""

from __future__ import annotations

from typing import Any

import pulsar
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from broker.metrics import HoraeCollector
from broker.metrics.write_latency import PULSAR_BUCKET_SERIES, LatencyWindows
from tests.admin.test_admin_metrics import _fake_service

PULSAR_NAMES = ("pulsar_storage_write_latency_le_0_5", "pulsar_storage_write_latency_le_1",
                "pulsar_storage_write_latency_le_5", "pulsar_storage_write_latency_le_10",
                "pulsar_storage_write_latency_le_20", "pulsar_storage_write_latency_le_50",
                "pulsar_storage_write_latency_le_100", "pulsar_storage_write_latency_le_200",
                "pulsar_storage_write_latency_le_1000", "pulsar_storage_write_latency_overflow")


def _gauges(text: str, **labels: str) -> dict[str, float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name in PULSAR_NAMES and labels.items() <= s.labels.items():
                out[s.name] = s.value
    return out


def test_series_names_are_pulsars() -> None:
    assert PULSAR_BUCKET_SERIES == PULSAR_NAMES


def test_collector_exports_each_bucket_not_cumulative_beside_the_histogram() -> None:
    registry = CollectorRegistry()
    registry.register(HoraeCollector(_fake_service()))
    text = generate_latest(registry).decode()
    topic = {"cluster": "c1", "namespace": "public/default",
             "topic": "persistent://public/default/fake"}
    # the fake topic: 1 append <= 0.5 ms, 2 in (0.5, 1], 1 over 1 s
    assert _gauges(text, **topic) == {name: 0.0 for name in PULSAR_NAMES} | {
        "pulsar_storage_write_latency_le_0_5": 1.0, "pulsar_storage_write_latency_le_1": 2.0,
        "pulsar_storage_write_latency_overflow": 1.0}
    histogram = [s for f in text_string_to_metric_families(text) for s in f.samples
                 if s.name == "pulsar_storage_write_latency_bucket" and s.labels["le"] == "+Inf"]
    assert [s.value for s in histogram] == [4.0]   # the histogram stays, cumulative
    ns_level = CollectorRegistry()
    ns_level.register(HoraeCollector(_fake_service(topic_level=False)))
    ns_text = generate_latest(ns_level).decode()
    assert _gauges(ns_text, namespace="public/default")["pulsar_storage_write_latency_le_1"] == 2


def test_windows_report_the_last_completed_stats_window() -> None:
    now = [0.0]
    windows = LatencyWindows(lambda: now[0], window_s=60.0)
    key = ("c", "public/default")
    # counts per bucket then the latency sum (ignored by the gauges)
    assert windows.counts({key: [1, 0, 5.0]})[key] == [1, 0]   # window in progress
    now[0] = 30.0
    assert windows.counts({key: [3, 1, 9.0]})[key] == [3, 1]
    now[0] = 60.0
    assert windows.counts({key: [4, 1, 9.0]})[key] == [4, 1]   # window 0..60 closed
    now[0] = 100.0
    assert windows.counts({key: [10, 2, 9.0]})[key] == [4, 1]  # still the last closed one
    now[0] = 120.0
    assert windows.counts({key: [10, 3, 9.0]})[key] == [6, 2]  # window 60..120
    assert windows.counts({}) == {}
    assert windows.counts({key: [1, 0, 1.0]})[key] == [1, 0]   # forgotten: starts over


def test_windows_start_over_when_a_reloaded_topic_counts_from_zero() -> None:
    now = [0.0]
    windows = LatencyWindows(lambda: now[0], window_s=60.0)
    key = ("c", "ns", "t")
    windows.counts({key: [50, 5, 0.0]})
    now[0] = 10.0
    assert windows.counts({key: [2, 0, 0.0]})[key] == [2, 0]


def test_a_real_broker_exports_pulsars_series_for_its_appends(broker: Any) -> None:
    import urllib.request

    client = pulsar.Client(broker.service_url, operation_timeout_seconds=10,
                           logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn))
    try:
        producer = client.create_producer("persistent://public/default/lat")
        for i in range(5):
            producer.send(f"m{i}".encode())
        producer.close()
    finally:
        client.close()
    with urllib.request.urlopen(f"{broker.web_url}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    gauges = _gauges(text, topic="persistent://public/default/lat")
    assert set(gauges) == set(PULSAR_NAMES)
    assert sum(gauges.values()) == 5


def test_a_window_over_unchanged_counts_keeps_its_lists() -> None:
    now = [0.0]
    windows = LatencyWindows(lambda: now[0], window_s=60.0)
    key = ("c", "ns", "t")
    windows.counts({key: [3, 1, 2.0]})
    now[0] = 60.0
    first = windows.counts({key: [3, 1, 2.0]})[key]
    assert first == [3, 1]
    now[0] = 120.0
    second = windows.counts({key: [3, 1, 2.0]})[key]
    assert second == [0, 0]
    now[0] = 180.0   # nothing moved since: the same (equal) lists are kept, not new ones
    assert windows.counts({key: [3, 1, 2.0]})[key] is second
    now[0] = 240.0   # a count moved: a new window's counts
    assert windows.counts({key: [4, 1, 2.0]})[key] == [1, 0]
    now[0] = 300.0
    assert windows.counts({key: [4, 1, 2.0]})[key] == [0, 0]


def test_steady_answers_as_count_does_whenever_it_answers() -> None:
    """A scrape asks steady() first and count() when it declines: over random counts and
    times, that gives what count() alone gives, and leaves the same windows behind (an idle
    label set's completed window included, which steady() rolls itself)."""
    import random

    rnd = random.Random(5)
    rolled_by_steady = 0
    now = [0.0]
    for _ in range(200):
        now[0] = 0.0
        both = LatencyWindows(lambda: now[0], window_s=60.0)
        alone = LatencyWindows(lambda: now[0], window_s=60.0)
        key = ("c", "ns", "t")
        counts = [0.0, 0.0]
        for _ in range(40):
            now[0] += rnd.choice((1.0, 30.0, 59.0, 60.0, 61.0, 200.0))
            if rnd.random() < 0.3:
                counts[rnd.randrange(2)] += rnd.randrange(1, 4)
            acc = [*counts, 7.0]
            before = both._state[key].started if key in both._state else None
            got = both.steady(key, counts, now[0])
            if got is None:
                got = both.count(key, acc, now[0])
            elif before is not None and both._state[key].started != before:
                rolled_by_steady += 1
            assert got == alone.count(key, acc, now[0])
            mine, theirs = both._state[key], alone._state[key]
            assert (mine.started, mine.baseline, mine.last) == (
                theirs.started, theirs.baseline, theirs.last)
    assert rolled_by_steady > 0
