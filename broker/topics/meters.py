"""A persistent topic's counters and rates: what the metrics and the topic stats read.

Theory of operation
-------------------
One :class:`TopicMeters` per loaded topic (``Topic.meters``). Counters are plain ints,
incremented on the hot path (the topic's publish checks, appends and receipts)
and read at scrape time (:mod:`broker.metrics`, :mod:`broker.topics.stats`); rates are derived
from them over a sliding window (:class:`RateMeter`), sampled by the service's once-a-second
tick while the topic is active (:class:`broker.topics.activity.TopicActivity`).
``msg_out_counter`` and ``bytes_out_counter`` are the sums over subscriptions (whose
dispatchers count deliveries), plus what subscriptions deleted since the load had delivered
(kept by :class:`broker.topics.topic_subscriptions.TopicSubscriptions`).

The figures that are not counters (storage size, backlog, quota limits, evicted producer
names) are read from their owners (the ledger, the backlog policies, deduplication) here, so
the metrics read one object per topic.
"""

from __future__ import annotations

import asyncio

from broker.metrics.entry_size import ENTRY_SIZE_BUCKETS_BYTES
from broker.metrics.rates import PUBLISH_LATENCY_BUCKETS_MS, RateMeter
from broker.topics.access_modes import ProducerAdmission
from broker.topics.backlog_policies import BacklogPolicies
from broker.topics.dedup import MessageDeduplication
from broker.topics.topic_subscriptions import TopicSubscriptions
from storage.ledger import ManagedLedger

__all__ = ["TopicMeters"]


class TopicMeters:
    """The counters and rate meter of one topic (see the module docstring)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, ledger: ManagedLedger,
                 subscriptions: TopicSubscriptions, admission: ProducerAdmission,
                 backlog: BacklogPolicies, dedup: MessageDeduplication) -> None:
        self.loop = loop
        self.ledger = ledger
        self.subscriptions = subscriptions
        self.admission = admission
        self.backlog = backlog
        self.dedup = dedup
        self.msg_in_counter = 0
        self.bytes_in_counter = 0
        self.entries_added_counter = 0
        self.delayed_rejected_counter = 0
        self.fixed_delay_overridden_counter = 0
        self.publish_latency_buckets = [0] * (len(PUBLISH_LATENCY_BUCKETS_MS) + 1)
        self.publish_latency_sum_ms = 0.0
        self.publish_latency_count = 0
        #: Appended entries per size bound of ENTRY_SIZE_BUCKETS_BYTES (overflow last), bytes.
        self.entry_size_buckets = [0] * (len(ENTRY_SIZE_BUCKETS_BYTES) + 1)
        self.entry_size_sum_bytes = 0
        self._rates = RateMeter()

    # ------------------------------------------------------------------ counters, rates

    @property
    def msg_out_counter(self) -> int:
        subs = self.subscriptions
        return subs.removed_msg_out + sum(s.msg_out_counter for s in subs.values())

    @property
    def bytes_out_counter(self) -> int:
        subs = self.subscriptions
        return subs.removed_bytes_out + sum(s.bytes_out_counter for s in subs.values())

    def _counter_values(self) -> tuple[float, ...]:
        return (self.msg_in_counter, self.bytes_in_counter, self.msg_out_counter,
                self.bytes_out_counter, self.entries_added_counter, self.ledger.entries_read)

    def resume_rates(self, since: float) -> None:
        """Rate sampling paused while the topic stood still (:meth:`RateMeter.resume`)."""
        self._rates.resume(since)
        self.admission.resume_rates(since)
        for sub in list(self.subscriptions.values()):
            sub.resume_rates(since)

    def sample_rates(self, now: float) -> None:
        self._rates.sample(now, self._counter_values())
        self.admission.sample_rates(now)
        for sub in list(self.subscriptions.values()):
            sub.sample_rates(now)

    def rates(self) -> tuple[float, float, float, float]:
        """(msgRateIn, msgThroughputIn, msgRateOut, msgThroughputOut) per second."""
        r = self._rates.rates(self.loop.time(), self._counter_values())
        return r[0], r[1], r[2], r[3]

    def rate_figures(self) -> tuple[float, ...]:
        """:meth:`rates` then :meth:`storage_rates` (six figures) from one reading of the
        counters (the metrics read both at every scrape)."""
        return self._rates.rates(self.loop.time(), self._counter_values())

    def storage_rates(self) -> tuple[float, float]:
        """(entries appended, entries read) per second: Pulsar's storage write and read
        rates, from the same meter as :meth:`rates` (sampled while the topic is active)."""
        r = self._rates.rates(self.loop.time(), self._counter_values())
        return r[4], r[5]

    # ------------------------------------------------------------------ figures of other owners

    @property
    def storage_size(self) -> int:
        return int(self.ledger.total_size_bytes)

    @property
    def storage_logical_size(self) -> int:
        """Bytes of the stored entries, one copy (Pulsar's size before replication; Horae
        keeps one copy, so it equals :attr:`storage_size`)."""
        return int(self.ledger.total_size_bytes)

    def backlog_quota_limits(self) -> tuple[int, int]:
        """(limitSize bytes, limitTime seconds) of the backlog quotas in force; -1: none."""
        return self.backlog.quota_limits()

    def backlog_age_seconds(self) -> int:
        """Age of the oldest unacknowledged message at the last backlog check (-1: none yet)."""
        return self.backlog.backlog_age_seconds()

    def backlog_size_bytes(self) -> int:
        """Bytes not yet acknowledged by the slowest durable subscription (estimate)."""
        if not self.subscriptions:
            return 0
        entries = self.ledger.number_of_entries
        if not entries:
            return 0
        backlog = max((s.cursor.backlog or 0)
                      for s in self.subscriptions.values())
        return int(self.ledger.total_size_bytes * min(1.0, backlog / entries))

    @property
    def dedup_producers_evicted_counter(self) -> int:
        """Producer names deduplication forgot over brokerDeduplicationMaxNumberOfProducers."""
        return self.dedup.evicted_producers
