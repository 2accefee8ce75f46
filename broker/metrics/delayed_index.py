"""Delayed-index metric families: the trackers' gauges and the bucket tracker's operations.

Theory of operation
-------------------
During a scrape the collector hands every subscription's tracker here. :func:`index_gauges`
gives the three gauges Pulsar reports for a delayed index (buckets, loaded indexes, snapshot
bytes) -- an in-memory tracker holds every index in memory, so its ``loaded`` is its size and it
has no buckets or snapshots. :class:`BucketOps` accumulates a bucket tracker's operation counts
(Pulsar's ``state`` label: succeed, failed and their sum ``all``) and latency histograms, at
topic level and, with topic-level metrics on, at subscription level too (one family holds both,
as in Pulsar), and turns them into families at the end of the scrape.

Reads only :mod:`broker.metrics.sources` figures; loop thread, one object per scrape.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator

from prometheus_client.core import GaugeMetricFamily, HistogramMetricFamily, Metric

from broker.metrics.exposition import NS_LABELS, SUB_LABELS, TOPIC_LABELS, cumulative
from broker.metrics.sources import BucketIndexFigures, DelayedIndexFigures

__all__ = ["BUCKET_GAUGES", "BUCKET_OP_LATENCY_BOUNDS_MS", "BucketOps", "index_gauges"]

#: Pulsar's BucketDelayedMessageIndexStats latency buckets (ms), plus overflow.
BUCKET_OP_LATENCY_BOUNDS_MS: tuple[float, ...] = (50, 100, 500, 1000, 5000, 30000, 60000)

_TOTAL = "pulsar_delayed_message_index_bucket_total"
_LOADED = "pulsar_delayed_message_index_loaded"
_SNAPSHOT = "pulsar_delayed_message_index_bucket_snapshot_size_bytes"

#: Gauges with topic-level and subscription-level series in one family (Pulsar's): name -> help.
BUCKET_GAUGES: dict[str, str] = {
    _TOTAL: "Delayed-index buckets (immutable + last mutable)",
    _LOADED: "Delayed indexes loaded in memory",
    _SNAPSHOT: "Bytes of the persisted bucket snapshots",
}


def index_gauges(tracker: DelayedIndexFigures,
                 bucket: BucketIndexFigures | None) -> dict[str, float]:
    """The :data:`BUCKET_GAUGES` of one subscription's tracker (*bucket*: the same tracker
    when it is a bucket tracker)."""
    if bucket is None:
        return {_TOTAL: 0.0, _LOADED: float(len(tracker)), _SNAPSHOT: 0.0}
    return {_TOTAL: float(bucket.bucket_count), _LOADED: float(bucket.loaded_index_count),
            _SNAPSHOT: float(bucket.snapshot_size_bytes)}


class BucketOps:
    """Bucket operation counts and latencies of one scrape, per label key."""

    def __init__(self) -> None:
        # (*labels, state, type) -> operations
        self._counts: dict[tuple[str, ...], float] = defaultdict(float)
        # (*labels, type) -> [non-cumulative counts per bound..., overflow, sum ms]
        self._latency: dict[tuple[str, ...], list[float]] = {}

    def add(self, bucket: BucketIndexFigures, topic_key: tuple[str, ...],
            sub_key: tuple[str, ...] | None) -> None:
        """Add *bucket*'s figures under *topic_key* and, if given, *sub_key*."""
        keys = (topic_key,) if sub_key is None else (topic_key, sub_key)
        per_op: dict[tuple[str, str], float] = defaultdict(float)
        for (op_type, state), ops in bucket.op_count.items():
            per_op[(op_type, state)] += ops
        for op_type in {t for t, _ in per_op}:
            if (op_type, "all") not in per_op:
                per_op[(op_type, "all")] = sum(
                    n for (t, st), n in list(per_op.items()) if t == op_type and st != "all")
        for (op_type, state), n in per_op.items():
            for key in keys:
                self._counts[(*key, state, op_type)] += n
        sums = bucket.op_latency_sum_ms
        for op_type, counts in bucket.op_latency_buckets.items():
            for key in keys:
                acc = self._latency.setdefault((*key, op_type),
                                               [0.0] * (len(BUCKET_OP_LATENCY_BOUNDS_MS) + 2))
                for i, c in enumerate(counts[: len(acc) - 1]):
                    acc[i] += c
                acc[-1] += sums.get(op_type, 0.0)

    def families(self, topic_level: bool) -> Iterator[Metric]:
        base = TOPIC_LABELS if topic_level else NS_LABELS
        count = GaugeMetricFamily(
            "pulsar_delayed_message_index_bucket_op_count",
            "Bucket operations of the delayed-index bucket tracker by state and type")
        for key, value in self._counts.items():
            names = (*(SUB_LABELS if len(key) == 6 else base), "state", "type")
            count.add_sample(count.name, dict(zip(names, key, strict=True)), value)
        yield count
        latency = HistogramMetricFamily(
            "pulsar_delayed_message_index_bucket_op_latency_ms",
            "Latency of delayed-index bucket operations by type, in milliseconds")
        for key, acc in self._latency.items():
            names = (*(SUB_LABELS if len(key) == 5 else base), "type")
            labels = dict(zip(names, key, strict=True))
            for le, cum in cumulative(acc[:-1], BUCKET_OP_LATENCY_BOUNDS_MS):
                latency.add_sample(latency.name + "_bucket", {**labels, "le": le}, cum)
            latency.add_sample(latency.name + "_count", labels, sum(acc[:-1]))
            latency.add_sample(latency.name + "_sum", labels, acc[-1])
        yield latency
