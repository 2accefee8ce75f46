"""Entry sizes as Pulsar's topic stats print them: ``pulsar_entry_size_le_*``, ``_count``, ``_sum``.

Theory of operation
-------------------
Topics count each appended entry (a batch is one entry) in the non-cumulative buckets of
:data:`ENTRY_SIZE_BUCKETS_BYTES` (128 B ... 1 MB, then overflow; an entry of exactly a
bound's size counts in that bound's bucket) and add its size to a byte sum: on the append
path one bisect per entry, or two per run when the run's smallest and largest entry share a
bucket, and a few additions, nothing else. A scrape accumulates them per label
set (topic, or namespace when topic-level metrics are off) as ``[buckets..., overflow,
sum bytes, 0]`` and :func:`entry_size_families` exports Pulsar's gauges:

* ``pulsar_entry_size_le_128``, ``_le_512``, ``_le_1_kb``, ``_le_2_kb``, ``_le_4_kb``,
  ``_le_16_kb``, ``_le_100_kb``, ``_le_1_mb`` and ``pulsar_entry_size_le_overflow``: entries
  appended in that bucket (not cumulative);
* ``pulsar_entry_size_count`` (entries) and ``pulsar_entry_size_sum`` (bytes),

all over the last stats window (:data:`broker.metrics.write_latency.STATS_WINDOW_S`, Pulsar's
``statsUpdateFrequencyInSecs``), exactly as the write-latency bucket gauges: the windowing is
:class:`broker.metrics.write_latency.LatencyWindows` (it windows every slot but the last, so the
accumulator ends with an unused slot and the byte sum is windowed like a bucket).
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.samples import Sample

from broker.metrics.exposition import NS_LABELS, TOPIC_LABELS, LabelSets
from broker.metrics.write_latency import STATS_WINDOW_S, LatencyTable, LatencyWindows

__all__ = ["ENTRY_SIZE_BUCKETS_BYTES", "ENTRY_SIZE_SERIES", "entry_size_families"]

#: Pulsar's ManagedLedgerMBeanImpl.ENTRY_SIZE_BUCKETS_BYTES.
ENTRY_SIZE_BUCKETS_BYTES: tuple[int, ...] = (128, 512, 1024, 2048, 4096, 16_384, 102_400,
                                             1_048_576)
#: Pulsar's series, one per bucket of ENTRY_SIZE_BUCKETS_BYTES, then overflow.
ENTRY_SIZE_SERIES: tuple[str, ...] = (
    "pulsar_entry_size_le_128", "pulsar_entry_size_le_512", "pulsar_entry_size_le_1_kb",
    "pulsar_entry_size_le_2_kb", "pulsar_entry_size_le_4_kb", "pulsar_entry_size_le_16_kb",
    "pulsar_entry_size_le_100_kb", "pulsar_entry_size_le_1_mb", "pulsar_entry_size_le_overflow",
)
COUNT = "pulsar_entry_size_count"
SUM = "pulsar_entry_size_sum"
_WINDOW = f"during the last {int(STATS_WINDOW_S)} s (Pulsar's topic-stats series)"


def entry_size_families(table: LatencyTable, windows: LatencyWindows, topic_level: bool,
                        labels_of: LabelSets,
                        windowed: LatencyTable | None = None) -> Iterator[Metric]:
    """The gauges for one scrape's *table* (label values -> ``[buckets..., overflow, sum
    bytes, 0]``), windowed by *windows* (a :class:`LatencyWindows` of its own). O(label sets)
    per family. *windowed*: ``windows.counts(table)`` already taken."""
    names = TOPIC_LABELS if topic_level else NS_LABELS
    if windowed is None:
        windowed = windows.counts(table)
    n = len(ENTRY_SIZE_SERIES)
    for i, name in enumerate(ENTRY_SIZE_SERIES):
        gauge = GaugeMetricFamily(
            name, f"Entries appended in this size bucket {_WINDOW}; not cumulative",
            labels=names)
        out = gauge.samples
        for key, counts in windowed.items():
            out.append(Sample(name, labels_of(names, key), float(counts[i])))
        yield gauge
    count = GaugeMetricFamily(COUNT, f"Entries appended {_WINDOW}", labels=names)
    total = GaugeMetricFamily(SUM, f"Bytes of the entries appended {_WINDOW}", labels=names)
    for key, counts in windowed.items():
        labels = labels_of(names, key)
        count.samples.append(Sample(COUNT, labels, float(sum(counts[:n]))))
        total.samples.append(Sample(SUM, labels, float(counts[n])))
    yield count
    yield total
