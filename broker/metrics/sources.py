"""The typed figures the metrics layer reads: what a scraped object must offer, nothing more.

Theory of operation
-------------------
The collector (:mod:`broker.metrics.collector`) and its delayed-index part
(:mod:`broker.metrics.delayed_index`) read topics, subscriptions, consumers and the
delayed-delivery trackers through these ``typing.Protocol`` s only. The objects implement them
structurally with the plain counters they already keep (``meters.msg_in_counter += n`` on the
hot path), so a scrape allocates nothing on them and the hot path never learns about metrics.
mypy checks the implementations where the service hands its topics in as a
:class:`MetricsSource`; a renamed counter is a type error, not a silent zero.

Implemented by (higher layers; this module imports none of them):

- :class:`MetricsSource` -- ``broker.topics.service.BrokerService``
- :class:`TopicFigures` -- ``broker.topics.topic.Topic``
- :class:`TopicMeterFigures` -- ``broker.topics.meters.TopicMeters``, a topic's ``meters``
- :class:`SubscriptionFigures` -- ``broker.subscriptions.subscription.Subscription``
- :class:`CursorFigures` -- storage's ``ManagedCursor`` and the readers' ``MemoryCursor``
- :class:`RevisionFigures` -- ``broker.subscriptions.revision.RevisionController``
- :class:`ConsumerFigures` -- ``broker.subscriptions.consumer.Consumer``
- :class:`DelayedIndexFigures` -- every delayed-delivery tracker
- :class:`BucketIndexFigures` -- the bucket tracker (PIP-195), whose subscription hands it out
  as ``bucket_index``
- :class:`PublishBufferFigures` -- ``broker.net.throttle.PublishBuffer``, which the server owns
  and hands to the metrics it composes (``broker.metrics.collector.BrokerMetrics``)

Units: counters are messages or bytes as their names say; latency sums are milliseconds.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

from broker.config import BrokerConfig
from broker.metrics.txn_families import TransactionFigures
from storage.stats import StorageStats

__all__ = [
    "BucketIndexFigures", "ConsumerFigures", "CursorFigures", "DelayedIndexFigures",
    "DueFigures", "MetricsSource", "PublishBufferFigures", "RevisionFigures", "SubscriptionFigures",
    "TopicFigures", "TopicMeterFigures",
]


class CancelFigures(Protocol):
    """PIP-423 tracker-level cancels of one subscription (Horae's metrics; Pulsar has none)."""

    @property
    def applied_total(self) -> int: ...

    @property
    def refused_total(self) -> int: ...

    @property
    def pending(self) -> int: ...


class DelayedIndexFigures(Protocol):
    """Any delayed-delivery tracker: ``len()`` is the number of delayed messages tracked."""

    def __len__(self) -> int: ...

    def cancel_stats(self) -> CancelFigures:
        """Cancels applied and refused (totals) and pending (now)."""
        ...

    @property
    def memory_bytes(self) -> int:
        """Memory of the index (``pulsar_delayed_message_index_size_bytes``)."""
        ...


class BucketIndexFigures(DelayedIndexFigures, Protocol):
    """The bucket tracker's figures (Pulsar's ``BucketDelayedMessageIndexStats``)."""

    @property
    def bucket_count(self) -> int:
        """Immutable buckets plus the mutable one."""
        ...

    @property
    def loaded_index_count(self) -> int:
        """Indexes held in memory."""
        ...

    @property
    def snapshot_size_bytes(self) -> int:
        """Bytes of the live persisted snapshots."""
        ...

    @property
    def op_count(self) -> Mapping[tuple[str, str], int]:
        """(type, state) -> operations; type create/load/delete/merge, state succeed/failed."""
        ...

    @property
    def op_latency_buckets(self) -> Mapping[str, Sequence[int]]:
        """type -> non-cumulative counts of succeeded operations per latency bound of
        :data:`broker.metrics.delayed_index.BUCKET_OP_LATENCY_BOUNDS_MS`, overflow last."""
        ...

    @property
    def op_latency_sum_ms(self) -> Mapping[str, float]:
        """type -> total latency (ms) of the succeeded operations."""
        ...

    @property
    def cancel_journal_failures(self) -> int:
        """Failed reads of a cancel journal an earlier version left (PIP-423;
        ``horae_delayed_cancel_journal_failures_total``)."""
        ...


class PublishBufferFigures(Protocol):
    """The broker-wide publish buffer (``maxMessagePublishBufferSizeInMB``)."""

    @property
    def throttled_times(self) -> int:
        """Times the buffer filled and every connection stopped reading
        (``horae_publish_buffer_throttled_total``)."""
        ...


class CursorFigures(Protocol):
    """A subscription's cursor (durable or a reader's)."""

    @property
    def backlog(self) -> int:
        """Messages not yet acknowledged."""
        ...

    @property
    def revision(self) -> int:
        """PIP-269 cursor state revision: bumped on every position reset."""
        ...


class RevisionFigures(Protocol):
    """A subscription's PIP-269 revision controller."""

    @property
    def increase_count(self) -> int:
        """Cursor position resets done since the subscription was loaded (never topic loads)."""
        ...

    @property
    def task_state(self) -> int:
        """``pulsar_cursor_epoch_increase_task_state``: 1 while a reset runs, else 0."""
        ...


class PublishRateFigures(Protocol):
    @property
    def limited_times(self) -> int:
        """Windows in which the topic's publish rate paused its producers' reads."""
        ...


class ConsumerFigures(Protocol):
    @property
    def unacked_messages(self) -> int:
        """Messages delivered to this consumer and not yet acknowledged."""
        ...


class DueFigures(Protocol):
    """A subscription's delayed delivery: what fell due, and the due times tracked."""

    @property
    def due_total(self) -> int:
        """Delayed messages handed to the dispatcher as due since the subscription loaded."""
        ...

    @property
    def read_ahead_total(self) -> int:
        """Delayed messages read ahead of their deliver time since the subscription loaded."""
        ...

    def next_due_ms(self) -> int | None: ...

    def last_due_ms(self) -> int | None: ...


class SubscriptionFigures(Protocol):
    @property
    def delayed(self) -> DueFigures: ...

    @property
    def cursor(self) -> CursorFigures: ...

    @property
    def revisions(self) -> RevisionFigures: ...

    @property
    def consumers(self) -> Sequence[ConsumerFigures]: ...

    @property
    def msg_out_counter(self) -> int: ...

    @property
    def bytes_out_counter(self) -> int: ...

    @property
    def blocked_on_unacked(self) -> bool:
        """Dispatch is held by ``maxUnackedMessagesPerSubscription``."""
        ...

    @property
    def paused_on_ack_state(self) -> bool:
        """New reads are paused by ``dispatcherPauseOnAckStatePersistent``."""
        ...

    @property
    def msg_delayed(self) -> int:
        """Messages held by the delayed-delivery tracker (0 without one)."""
        ...

    def redeliver_rate(self) -> float:
        """Messages sent again per second after a negative ack or a redelivery request
        (``msgRateRedeliver``)."""
        ...

    @property
    def delayed_tracker(self) -> DelayedIndexFigures | None: ...

    @property
    def bucket_index(self) -> BucketIndexFigures | None:
        """The tracker again when it is a bucket tracker, else None."""
        ...


class TopicMeterFigures(Protocol):
    """A topic's counters and rates."""

    @property
    def msg_in_counter(self) -> int: ...

    @property
    def bytes_in_counter(self) -> int: ...

    @property
    def msg_out_counter(self) -> int: ...

    @property
    def bytes_out_counter(self) -> int: ...

    @property
    def delayed_rejected_counter(self) -> int:
        """Messages refused for exceeding the max delivery delay (PIP-315)."""
        ...

    @property
    def fixed_delay_overridden_counter(self) -> int:
        """Messages whose deliver-at a fixed delay replaced (PIP-437)."""
        ...

    @property
    def dedup_producers_evicted_counter(self) -> int:
        """Producer names deduplication evicted over brokerDeduplicationMaxNumberOfProducers."""
        ...

    @property
    def storage_size(self) -> int:
        """Bytes stored for the topic."""
        ...

    @property
    def storage_logical_size(self) -> int:
        """Bytes stored for the topic, one copy (before any replication)."""
        ...

    def backlog_size_bytes(self) -> int:
        """Bytes not yet acknowledged by the slowest subscription (estimate)."""
        ...

    def storage_rates(self) -> tuple[float, float]:
        """(entries appended, entries read) per second."""
        ...

    def rate_figures(self) -> tuple[float, ...]:
        """(msgRateIn, msgThroughputIn, msgRateOut, msgThroughputOut, entries appended, entries
        read) per second, from one reading of the counters."""
        ...

    def backlog_quota_limits(self) -> tuple[int, int]:
        """(size limit in bytes, time limit in seconds) of the backlog quotas; -1: none."""
        ...

    def backlog_age_seconds(self) -> int:
        """Age of the oldest unacknowledged message at the last check (-1: not known)."""
        ...

    @property
    def entry_size_buckets(self) -> Sequence[int]:
        """Non-cumulative counts of appended entries per bound of
        :data:`broker.metrics.entry_size.ENTRY_SIZE_BUCKETS_BYTES`, overflow last."""
        ...

    @property
    def entry_size_sum_bytes(self) -> int: ...

    @property
    def publish_latency_buckets(self) -> Sequence[int]:
        """Non-cumulative counts per bound of
        :data:`broker.metrics.rates.PUBLISH_LATENCY_BUCKETS_MS`, overflow last."""
        ...

    @property
    def publish_latency_sum_ms(self) -> float: ...

    def rates(self) -> tuple[float, float, float, float]:
        """(msgRateIn, msgThroughputIn, msgRateOut, msgThroughputOut) per second."""
        ...


class TopicFigures(Protocol):
    @property
    def full(self) -> str:
        """The full topic name (``persistent://tenant/ns/topic``)."""
        ...

    @property
    def publish_rate(self) -> PublishRateFigures:
        """The topic's publish rate limiter."""
        ...

    @property
    def producers(self) -> Mapping[str, object]: ...

    @property
    def subscriptions(self) -> Mapping[str, SubscriptionFigures]: ...

    @property
    def meters(self) -> TopicMeterFigures:
        """Its counters and rates."""
        ...


class MetricsSource(Protocol):
    """What the collector scrapes: the broker config, the loaded topics by full name, and the
    store's figures (:mod:`broker.metrics.storage_families`)."""

    @property
    def config(self) -> BrokerConfig: ...

    @property
    def topics(self) -> Mapping[str, TopicFigures]: ...

    def storage_stats(self) -> StorageStats:
        """The segment store's counters and gauges (storage.stats.StorageStats)."""
        ...

    @property
    def publish_refused(self) -> Mapping[str, int]:
        """Refused publishes by reason (``horae_publish_refused_total{reason}``)."""
        ...

    @property
    def transactions(self) -> TransactionFigures | None:
        """The transaction components' figures, None without the coordinator
        (:mod:`broker.metrics.txn_families`)."""
        ...
