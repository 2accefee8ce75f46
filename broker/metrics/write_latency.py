"""Storage write latency under both names: the Prometheus histogram and Pulsar's bucket gauges.

Theory of operation
-------------------
Topics count each durable append in the non-cumulative buckets of
:data:`broker.metrics.rates.PUBLISH_LATENCY_BUCKETS_MS` (0.5 ms ... 1 s, then overflow) and a
latency sum. A scrape accumulates them per label set (topic, or namespace when topic-level
metrics are off) and :func:`write_latency_families` exports

* ``pulsar_storage_write_latency`` as a cumulative Prometheus histogram (``_bucket{le}``,
  ``_count``, ``_sum``, counted since the topic loaded): quantiles with ``histogram_quantile``;
* Pulsar's own series, as its topic stats export them, so Pulsar dashboards work unchanged:
  ``pulsar_storage_write_latency_le_0_5``, ``_le_1``, ``_le_5``, ``_le_10``, ``_le_20``,
  ``_le_50``, ``_le_100``, ``_le_200``, ``_le_1000`` and ``_overflow``: gauges holding how many
  appends fell in that bucket (not cumulative) during the last stats window of
  :data:`STATS_WINDOW_S` (Pulsar's ``statsUpdateFrequencyInSecs``, 60). Until a label set's
  first window completes, the window in progress is shown (a fresh broker shows data at once).

:class:`LatencyWindows` keeps, per label set, the cumulative counts at the start of the current
window and the counts of the last completed one; it forgets label sets not seen in a scrape
(unloaded topics) and starts over when counts go down (a topic reloaded with fresh counters).
It lives in the collector, on the broker loop; no locks.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from prometheus_client.core import GaugeMetricFamily, HistogramMetricFamily, Metric

from broker.metrics.exposition import NS_LABELS, TOPIC_LABELS, cumulative
from broker.metrics.rates import PUBLISH_LATENCY_BUCKETS_MS

__all__ = ["PULSAR_BUCKET_SERIES", "STATS_WINDOW_S", "LatencyTable", "LatencyWindows",
           "write_latency_families"]

#: Pulsar's statsUpdateFrequencyInSecs default: the window its *_le_* gauges cover.
STATS_WINDOW_S = 60.0
HISTOGRAM = "pulsar_storage_write_latency"
#: Pulsar's series names, one per bucket of PUBLISH_LATENCY_BUCKETS_MS, then overflow.
PULSAR_BUCKET_SERIES: tuple[str, ...] = (
    *(f"{HISTOGRAM}_le_{str(b).removesuffix('.0').replace('.', '_')}"
      for b in PUBLISH_LATENCY_BUCKETS_MS),
    f"{HISTOGRAM}_overflow",
)

#: label values -> [non-cumulative counts per bound..., overflow, sum ms].
LatencyTable = dict[tuple[str, ...], list[float]]


@dataclass(slots=True)
class _Window:
    started: float
    baseline: list[float]
    last: list[float] | None = None


class LatencyWindows:
    """Per label set: bucket counts over the last completed :data:`STATS_WINDOW_S` window."""

    def __init__(self, clock: Callable[[], float] = time.monotonic,
                 window_s: float = STATS_WINDOW_S) -> None:
        self._clock = clock
        self._window_s = window_s
        self._state: dict[tuple[str, ...], _Window] = {}

    def counts(self, table: LatencyTable) -> LatencyTable:
        """*table* (cumulative counts, sum last) -> the windowed counts (no sum), per key."""
        now = self._clock()
        out: LatencyTable = {}
        for key, acc in table.items():
            current = list(acc[:-1])
            state = self._state.get(key)
            if state is None or any(c < b for c, b in zip(current, state.baseline, strict=True)):
                state = self._state[key] = _Window(now, [0.0] * len(current))
            if now - state.started >= self._window_s:
                state.last = [c - b for c, b in zip(current, state.baseline, strict=True)]
                state.baseline = current
                state.started = now
            out[key] = state.last if state.last is not None else [
                c - b for c, b in zip(current, state.baseline, strict=True)]
        for key in [k for k in self._state if k not in table]:
            del self._state[key]
        return out


def write_latency_families(table: LatencyTable, windows: LatencyWindows,
                           topic_level: bool) -> Iterator[Metric]:
    labels = TOPIC_LABELS if topic_level else NS_LABELS
    histogram = HistogramMetricFamily(
        HISTOGRAM, "Ledger append latency until durable, in milliseconds", labels=labels)
    for key, acc in table.items():
        histogram.add_metric(list(key), cumulative(acc[:-1], PUBLISH_LATENCY_BUCKETS_MS),
                             sum_value=acc[-1])
    yield histogram
    windowed = windows.counts(table)
    for i, name in enumerate(PULSAR_BUCKET_SERIES):
        gauge = GaugeMetricFamily(
            name, f"Appends in this write-latency bucket during the last {int(STATS_WINDOW_S)} s "
            "(Pulsar's topic-stats series; not cumulative)", labels=labels)
        for key, counts in windowed.items():
            gauge.add_metric(list(key), _at(counts, i))
        yield gauge


def _at(counts: Sequence[float], i: int) -> float:
    return float(counts[i]) if i < len(counts) else 0.0
