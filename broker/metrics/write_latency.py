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
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import dataclass

from prometheus_client.core import GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.samples import Sample

from broker.metrics.exposition import NS_LABELS, TOPIC_LABELS, LabelSets, cumulative
from broker.metrics.rates import PUBLISH_LATENCY_BUCKETS_MS

__all__ = ["LE_LABELS", "PULSAR_BUCKET_SERIES", "STATS_WINDOW_S", "LatencyTable",
           "LatencyWindows", "write_latency_families", "write_latency_steps"]

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
        """*table* (cumulative counts, sum last) -> the windowed counts (no sum), per key.

        O(keys); an idle label set (counts unchanged since its window started) allocates
        nothing: its baseline or last window is returned as is. Callers must not mutate the
        lists returned."""
        now = self._clock()
        out = {key: self.count(key, acc, now) for key, acc in table.items()}
        self.retain(out)
        return out

    def now(self) -> float:
        """The clock, for :meth:`count`."""
        return self._clock()

    def count(self, key: tuple[str, ...], acc: list[float], now: float) -> list[float]:
        """One label set of :meth:`counts` (*now*: :meth:`now`, once per scrape); a scrape
        that counts label sets one by one then calls :meth:`retain` with all of them."""
        n = len(acc) - 1
        state = self._state.get(key)
        if state is None or (acc[:n] != state.baseline and _went_down(acc, state.baseline)):
            state = self._state[key] = _Window(now, [0.0] * n)
        elif now - state.started < self._window_s:
            if state.last is not None:
                return state.last
        else:
            # A window completes. Lists equal to the ones kept are not replaced: an idle
            # label set's roll then leaves no new objects behind for the collector to walk.
            last = [acc[i] - b for i, b in enumerate(state.baseline)]
            if last != state.last:
                state.last = last
            baseline = acc[:n]
            if baseline != state.baseline:
                state.baseline = baseline
            state.started = now
            return state.last
        # The first window of this label set, still in progress: show it.
        return [acc[i] - b for i, b in enumerate(state.baseline)]

    def steady(self, key: tuple[str, ...], counts: Sequence[float],
               now: float) -> list[float] | None:
        """What :meth:`count` would return for *key* at *now* when that changes nothing and
        needs no table: its last window is complete, the next one not due yet, and *counts*
        (the table's counts without the sum) equal the counts it started at. ``None``
        otherwise (then call :meth:`count`).

        An idle label set whose window completes is steady too when its last window counted
        nothing: :meth:`count`'s roll would then only restart the window (its last window
        and baseline stay the objects they are), which is done here. With windows as long as
        the export interval every export meets a completed window, so this is an idle
        topic's usual case."""
        state = self._state.get(key)
        if state is None or state.last is None or counts != state.baseline:
            return None
        if now - state.started >= self._window_s:
            if any(state.last):
                return None
            state.started = now
        return state.last

    def retain(self, keys: Collection[tuple[str, ...]]) -> None:
        """Forget the label sets not in *keys* (a whole scrape's: unloaded topics)."""
        state_of = self._state
        if len(state_of) > len(keys):
            for key in [k for k in state_of if k not in keys]:
                del state_of[key]


def _went_down(acc: Sequence[float], baseline: Sequence[float]) -> bool:
    """A count below its baseline: the label set's topic was reloaded with fresh counters."""
    return any(a < b for a, b in zip(acc, baseline, strict=False))


def write_latency_families(table: LatencyTable, windows: LatencyWindows, topic_level: bool,
                           labels_of: LabelSets | None = None) -> Iterator[Metric]:
    """The histogram and Pulsar's bucket gauges for one scrape's *table*, at once."""
    for step in write_latency_steps(table, windows, topic_level, labels_of, len(table) + 1):
        if step is not None:
            yield step


def write_latency_steps(table: LatencyTable, windows: LatencyWindows, topic_level: bool,
                        labels_of: LabelSets | None, slice_keys: int,
                        windowed: LatencyTable | None = None) -> Iterator[Metric | None]:
    """:func:`write_latency_families` in steps: each finished family, and ``None`` after every
    *slice_keys* label sets of the histogram (a point where an async caller may yield to the
    loop: the histogram alone is 12 samples per topic).

    O(label sets): per label set one labels dict (shared by its ``_count``, ``_sum`` and gauge
    samples, or taken from *labels_of*, which shares it with the collector's other families)
    and one dict per histogram bucket, which must carry ``le``; nothing else per label set
    beyond the samples themselves. *windowed*: ``windows.counts(table)`` already taken (a
    caller rendering part of a scrape's label sets; *windows* is then not asked)."""
    names = TOPIC_LABELS if topic_level else NS_LABELS
    if labels_of is None:
        labels_of = LabelSets()
    histogram = HistogramMetricFamily(
        HISTOGRAM, "Ledger append latency until durable, in milliseconds", labels=names)
    if windowed is None:
        windowed = windows.counts(table)
    yield None
    bucket_name, count_name, sum_name = (f"{HISTOGRAM}_bucket", f"{HISTOGRAM}_count",
                                         f"{HISTOGRAM}_sum")
    samples = histogram.samples
    n_bounds = len(LE_LABELS)
    for done, (key, acc) in enumerate(table.items(), 1):
        labels = labels_of(names, key)
        total = 0.0
        for i, le in enumerate(LE_LABELS):
            total += acc[i]
            samples.append(Sample(bucket_name, {**labels, "le": le}, total))
        for c in acc[n_bounds:-1]:
            total += c
        samples.append(Sample(bucket_name, {**labels, "le": "+Inf"}, total))
        samples.append(Sample(count_name, labels, total))
        samples.append(Sample(sum_name, labels, float(acc[-1])))
        if done % slice_keys == 0:
            yield None
    yield histogram
    # One family per pass over the label sets (10,000 samples at 10,000 topics).
    for i, name in enumerate(PULSAR_BUCKET_SERIES):
        gauge = GaugeMetricFamily(
            name, f"Appends in this write-latency bucket during the last {int(STATS_WINDOW_S)} s "
            "(Pulsar's topic-stats series; not cumulative)", labels=names)
        out = gauge.samples
        for key, counts in windowed.items():
            out.append(Sample(name, labels_of(names, key),
                              float(counts[i]) if i < len(counts) else 0.0))
        yield gauge


#: The ``le`` label of each finite bound of PUBLISH_LATENCY_BUCKETS_MS (``+Inf`` comes last).
LE_LABELS: tuple[str, ...] = tuple(
    le for le, _ in cumulative([], PUBLISH_LATENCY_BUCKETS_MS)[:-1])
