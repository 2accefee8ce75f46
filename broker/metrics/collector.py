"""The broker's Prometheus collector: plain counters read at scrape time, Pulsar's names.

Theory of operation
-------------------
Topics, subscriptions and delayed-delivery trackers keep their figures as plain ints that
the hot path bumps (``topic.meters.msg_in_counter += n``). Nothing on that path looks up a label
set or touches prometheus_client. At scrape time :meth:`HoraeCollector.collect` (called on
the broker loop, where those ints live, so no locks) walks ``service.topics``, reads the
typed figures of :mod:`broker.metrics.sources`, and yields metric families under Pulsar's
names with labels ``cluster``, ``namespace``, ``topic`` and ``subscription``. With
``exposeTopicLevelMetricsInPrometheus`` false, topic-level series are summed per namespace
(no ``topic`` label) and subscription series are omitted, as Pulsar does.

Rules:
1. Counters are named without ``_total`` (prometheus_client appends it). Two Pulsar counters
   whose names end in ``_count`` (``pulsar_cursor_epoch_increase_count``,
   ``pulsar_delayed_message_index_bucket_op_count``) are exposed as gauges so the sample
   name stays exactly Pulsar's.
2. Topic rates (``pulsar_rate_in`` msg/s, ``pulsar_throughput_in`` bytes/s, ...) are the
   topic's own rate meter (``topic.meters.rate_figures()``, the figures its stats show). Subscription rates
   are counter deltas over at least :data:`RATE_MIN_INTERVAL_S` (a scrape sooner than that
   repeats the last rate, so concurrent scrapers do not make it jitter), but for
   ``pulsar_subscription_msg_rate_redeliver``, the subscription's own meter (its stats'
   ``msgRateRedeliver``). ``pulsar_storage_write_rate`` / ``_read_rate`` (entries appended /
   read per second) come from the topic's meter too, so they move only while it is active.
   With topic-level metrics off, a namespace's ``pulsar_storage_backlog_quota_limit``,
   ``_limit_time`` and ``pulsar_storage_backlog_age_seconds`` are the largest of its topics'
   (as Pulsar's AggregatedNamespaceStats); everything else is summed.
3. A topic without subscriptions, a subscription without a tracker, an in-memory tracker
   (no buckets) yield zeros where Pulsar reports zeros. One topic whose figures raise is
   logged and skipped; it never fails the scrape.
4. The store's families (``horae_storage_*``, ``horae_publish_refused_total``) live in
   :mod:`broker.metrics.storage_families`; the write-latency histogram and Pulsar's
   ``pulsar_storage_write_latency_le_*`` gauges in :mod:`broker.metrics.write_latency`; Pulsar's ``pulsar_entry_size_le_*`` gauges in
   :mod:`broker.metrics.entry_size`; the delayed-index families in :mod:`broker.metrics.delayed_index`, the loop-lag probe
   (``horae_event_loop_lag_seconds``) in :mod:`broker.metrics.lag`.
5. ``horae_publish_buffer_throttled_total{cluster}`` comes from the publish buffer the server
   hands over, ``horae_delayed_cancel_journal_failures_total`` from the bucket trackers (per
   topic, or per namespace); the listeners' families (``horae_connection_output_paused_total``,
   ``horae_http_*``) from :mod:`broker.metrics.connection_families`;
   ``pulsar_authentication_success_total`` and ``pulsar_authentication_failures_total``
   from the authentication service's counters (:mod:`broker.metrics.auth_families`).

6. ``/metrics`` and the snapshot exporter take :meth:`HoraeCollector.collect_rendered_async`:
   every topic's figures are read as above, into a flat record per topic, and each topic
   keeps the text of its series in that consumer's format with the record it was made of;
   only the families whose figures moved are rendered again, written straight from the
   record (:mod:`broker.metrics.topic_lines`: the lines those families' samples would give,
   without building them), so the output is byte for byte that of rendering every sample,
   and idle topics cost a read and a comparison. The kept text is one
   entry per loaded topic per format (unloaded topics' are dropped at the next scrape).

Wiring: the server composes one :class:`BrokerMetrics` from the service, the loop-lag probe,
the publish buffer and the listeners' figures, and passes it to the web app (``/metrics``)
and to the snapshot exporter, which therefore report the same families from the same
registry. Nothing is kept at module level: two brokers in one process share nothing.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import defaultdict
from collections.abc import AsyncGenerator, Callable, Iterator

from prometheus_client import (
    CollectorRegistry,
    GCCollector,
    PlatformCollector,
    ProcessCollector,
    generate_latest,
)
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector
from prometheus_client.samples import Sample

from broker.metrics.auth_families import AuthenticationFigures, authentication_families
from broker.metrics.connection_families import ConnectionFigures, connection_families
from broker.metrics.delayed_index import BUCKET_GAUGES, BucketOps, index_gauges
from broker.metrics.entry_size import COUNT as ENTRY_SIZE_COUNT
from broker.metrics.entry_size import (
    ENTRY_SIZE_BUCKETS_BYTES,
    ENTRY_SIZE_SERIES,
    entry_size_families,
)
from broker.metrics.entry_size import SUM as ENTRY_SIZE_SUM
from broker.metrics.exposition import (
    NS_LABELS,
    SUB_LABELS,
    TOPIC_LABELS,
    CollectedFamilies,
    LabelSets,
    RenderedFamily,
    SampleTable,
    topic_namespace,
)
from broker.metrics.lag import LoopLagProbe, loop_lag_families
from broker.metrics.rates import PUBLISH_LATENCY_BUCKETS_MS
from broker.metrics.resource_group_families import (
    ResourceGroupCollector,
    ResourceGroupFigures,
)
from broker.metrics.sources import MetricsSource, PublishBufferFigures, TopicFigures
from broker.metrics.storage_families import storage_families
from broker.metrics.topic_columns import TopicColumns
from broker.metrics.topic_lines import TopicLines
from broker.metrics.topic_stamps import Stamp, read_stamp, timed_in_signature
from broker.metrics.txn_families import transaction_families
from broker.metrics.write_latency import (
    HISTOGRAM,
    PULSAR_BUCKET_SERIES,
    LatencyTable,
    LatencyWindows,
    write_latency_steps,
)

__all__ = ["BrokerMetrics", "BrokerRegistry", "HoraeCollector", "LoopLagProbe",
           "MetricsSource", "exposition"]

log = logging.getLogger("horae.metrics")

RATE_MIN_INTERVAL_S = 1.0
#: Topics walked per loop turn by :meth:`HoraeCollector.collect_async`.
SLICE_TOPICS = 256
#: Changed topics rendered to text per loop turn by :meth:`HoraeCollector.collect_rendered_async`.
RENDER_TOPICS = 64
#: Topics' text of one family joined into one piece of a /metrics body (:func:`render_chunks`).
CHUNK_PARTS = 1024
#: The two text formats :meth:`HoraeCollector.collect_rendered_async` renders.
PROMETHEUS = "prometheus"
SNAPSHOT = "snapshot"


# name -> (kind, help, level). kind: counter | gauge. level: topic | sub | ns.
_FAMILIES: dict[str, tuple[str, str, str]] = {
    "pulsar_in_messages": ("counter", "Messages published to the topic", "topic"),
    "pulsar_out_messages": ("counter", "Messages dispatched from the topic", "topic"),
    "pulsar_in_bytes": ("counter", "Bytes published to the topic", "topic"),
    "pulsar_out_bytes": ("counter", "Bytes dispatched from the topic", "topic"),
    "pulsar_rate_in": ("gauge", "Publish rate (messages/s)", "topic"),
    "pulsar_rate_out": ("gauge", "Dispatch rate (messages/s)", "topic"),
    "pulsar_throughput_in": ("gauge", "Publish throughput (bytes/s)", "topic"),
    "pulsar_throughput_out": ("gauge", "Dispatch throughput (bytes/s)", "topic"),
    "pulsar_msg_backlog": ("gauge", "Backlog of the topic (sum over subscriptions, messages)",
                           "topic"),
    "pulsar_storage_size": ("gauge", "Bytes stored for the topic", "topic"),
    "pulsar_storage_logical_size": (
        "gauge", "Bytes stored for the topic, one copy (before replication)", "topic"),
    "pulsar_storage_backlog_size": (
        "gauge", "Bytes not yet acknowledged by the topic's slowest subscription (estimate)",
        "topic"),
    "pulsar_storage_write_rate": ("gauge", "Entries appended to the topic's ledger per second",
                                  "topic"),
    "pulsar_storage_read_rate": ("gauge", "Entries read from the topic's ledger per second",
                                 "topic"),
    "pulsar_storage_backlog_quota_limit": (
        "gauge", "Backlog size quota of the topic (destination_storage limitSize, bytes; "
        "-1: none)", "topic"),
    "pulsar_storage_backlog_quota_limit_time": (
        "gauge", "Backlog age quota of the topic (message_age limitTime, seconds; -1: none)",
        "topic"),
    "pulsar_storage_backlog_age_seconds": (
        "gauge", "Age of the oldest unacknowledged message of the topic, as of the last backlog "
        "quota check (seconds; 0: no backlog, -1: not checked yet)", "topic"),
    "pulsar_producers_count": ("gauge", "Connected producers", "topic"),
    "pulsar_consumers_count": ("gauge", "Connected consumers", "topic"),
    "pulsar_subscriptions_count": ("gauge", "Subscriptions of the topic", "topic"),
    "pulsar_delayed_message_index_size_bytes": (
        "gauge", "Memory used by the delayed-delivery trackers (bytes)", "topic"),
    "pulsar_broker_topic_messages_delayed_rejected": (
        "counter", "Messages rejected for exceeding the max delivery delay (PIP-315)", "topic"),
    "pulsar_broker_topic_messages_fixed_delay_overridden": (
        "counter", "Messages whose client deliver-at was overridden by a fixed delay (PIP-437)",
        "topic"),
    "pulsar_broker_topic_deduplication_producers_evicted": (
        "counter", "Producer names whose deduplication state was evicted over "
        "brokerDeduplicationMaxNumberOfProducers", "topic"),
    "pulsar_publish_rate_limit_times": (
        "gauge", "Times the topic's publish rate paused its producers' reads", "topic"),
    "pulsar_topics_count": ("gauge", "Loaded topics in the namespace", "ns"),
    "pulsar_subscription_back_log": ("gauge", "Backlog of the subscription (messages)", "sub"),
    "pulsar_subscription_delayed": ("gauge", "Delayed messages tracked by the subscription",
                                    "sub"),
    "pulsar_subscription_unacked_messages": ("gauge", "Messages delivered and not acknowledged",
                                             "sub"),
    "pulsar_subscription_blocked_on_unacked_messages": (
        "gauge", "1 while dispatch is held by maxUnackedMessagesPerSubscription", "sub"),
    "pulsar_subscription_paused_on_ack_state": (
        "gauge", "1 while new reads are paused by dispatcherPauseOnAckStatePersistent (the "
        "cursor holds more acknowledged ranges than managedLedgerMaxUnackedRangesToPersist)",
        "sub"),
    "pulsar_subscription_msg_rate_out": ("gauge", "Dispatch rate (messages/s)", "sub"),
    "pulsar_subscription_msg_rate_redeliver": (
        "gauge", "Messages sent again after a negative ack or a redelivery request "
        "(messages/s)", "sub"),
    "pulsar_subscription_msg_throughput_out": ("gauge", "Dispatch throughput (bytes/s)", "sub"),
    "pulsar_subscription_consumers_count": ("gauge", "Consumers of the subscription", "sub"),
    "pulsar_subscription_delayed_message_index_size_bytes": (
        "gauge", "Memory used by the subscription's delayed-delivery tracker (bytes)", "sub"),
    "pulsar_cursor_epoch_increase_count": (
        "gauge", "Cursor state revisions (PIP-269): position resets of the cursor since the "
        "subscription was loaded (topic loads are not counted)", "sub"),
    "pulsar_cursor_epoch_increase_task_state": (
        "gauge", "Cursor state revision task (PIP-269): 1 while a position reset runs, else 0",
        "sub"),
    # PIP-423 tracker-level cancels (Horae's names: Pulsar exposes none).
    "pulsar_subscription_delayed_cancels_applied": (
        "counter", "Cancels that cleared a tracked delayed message (PIP-423)", "sub"),
    "pulsar_subscription_delayed_cancels_refused": (
        "counter", "Cancels refused: the deliver time was already due (PIP-423)", "sub"),
    "pulsar_subscription_delayed_cancels_pending": (
        "gauge", "Cancels accepted before their target was read whose deliver time is not "
        "over (PIP-423; since the broker started)", "sub"),
    "horae_subscription_delayed_due": (
        "counter", "Delayed messages that fell due and were handed to the dispatcher", "sub"),
    "horae_subscription_delayed_read_ahead": (
        "counter", "Delayed messages read ahead of their deliver time after a quiet spell "
        "(delayedDeliveryReadAheadMillis)", "sub"),
    "horae_subscription_delayed_next_due_timestamp_seconds": (
        "gauge", "Earliest deliver time tracked (seconds since the epoch; absent when none)",
        "sub"),
    "horae_subscription_delayed_last_due_timestamp_seconds": (
        "gauge", "Latest deliver time tracked (seconds since the epoch; absent when none)",
        "sub"),
    "horae_delayed_cancel_journal_failures": (
        "counter", "Failed reads of cancel journals left by an earlier version (PIP-423; "
        "their subscription's load fails), summed over the topic's subscriptions", "topic"),
}


#: The topic-level series every topic has, in the order of the values
#: :meth:`HoraeCollector._collect_topic` reads them (one tuple per topic, no call per series).
_TOPIC_SERIES: tuple[str, ...] = (
    "pulsar_in_messages", "pulsar_in_bytes", "pulsar_out_messages", "pulsar_out_bytes",
    "pulsar_rate_in", "pulsar_throughput_in", "pulsar_rate_out", "pulsar_throughput_out",
    "pulsar_storage_size", "pulsar_storage_logical_size", "pulsar_storage_backlog_size",
    "pulsar_storage_write_rate", "pulsar_storage_read_rate", "pulsar_producers_count",
    "pulsar_broker_topic_messages_delayed_rejected",
    "pulsar_broker_topic_messages_fixed_delay_overridden",
    "pulsar_broker_topic_deduplication_producers_evicted", "pulsar_publish_rate_limit_times",
    "pulsar_subscriptions_count", "pulsar_msg_backlog", "pulsar_consumers_count",
    "pulsar_delayed_message_index_size_bytes", "horae_delayed_cancel_journal_failures")


class _Rates:
    """Per-key rates from counter deltas, refreshed at most every RATE_MIN_INTERVAL_S."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        self._state: dict[tuple[str, ...], tuple[float, float, float]] = {}

    def rate(self, key: tuple[str, ...], counter: float, seen: set[tuple[str, ...]]) -> float:
        now = self._clock()
        seen.add(key)
        prev = self._state.get(key)
        if prev is None:
            self._state[key] = (now, counter, 0.0)
            return 0.0
        t0, c0, last = prev
        if now - t0 < RATE_MIN_INTERVAL_S:
            return last
        # A counter that went down belongs to a re-created topic: restart from it.
        rate = (counter - c0) / (now - t0) if counter >= c0 else 0.0
        self._state[key] = (now, counter, rate)
        return rate

    def end_scrape(self, seen: set[tuple[str, ...]]) -> None:
        """Forget keys one whole scrape did not see (each scrape keeps its own *seen*, so a
        sliced scrape and a /metrics scrape interleaving on the loop do not confuse them)."""
        for key in [k for k in self._state if k not in seen]:
            del self._state[key]   # unloaded topics / deleted subscriptions


class _Scrape:
    """What one collect() accumulates before it becomes families."""

    def __init__(self, cluster: str, topic_level: bool) -> None:
        self.cluster = cluster
        self.topic_level = topic_level
        self.values: SampleTable = defaultdict(lambda: defaultdict(float))
        self.write_latency: LatencyTable = {}
        self.entry_sizes: LatencyTable = {}
        self.bucket_ops = BucketOps()
        self.labels = LabelSets()
        self.seen: set[tuple[str, ...]] = set()

    def add(self, name: str, key: tuple[str, ...], value: float) -> None:
        self.values[name][key] += value

    def add_topic(self, key: tuple[str, ...], values: tuple[float, ...]) -> None:
        """The :data:`_TOPIC_SERIES` of one topic, *values* in that order."""
        tables = self.values
        for name, value in zip(_TOPIC_SERIES, values, strict=True):
            tables[name][key] += value

    def maximum(self, name: str, key: tuple[str, ...], value: float) -> None:
        """The largest *value* per key (a namespace's quota limits and backlog age)."""
        table = self.values[name]
        table[key] = max(table[key], value) if key in table else value


class _TopicScrape:
    """One topic's share of a scrape (:meth:`HoraeCollector.collect_rendered_async`): what
    :meth:`HoraeCollector._collect_topic` adds: its :data:`_TOPIC_SERIES` values as one
    tuple under its key, the other series kept flat (family name, label values, value: three
    items per series, no object per series) in the order they were added; the namespace's
    topic count goes to the whole scrape."""

    __slots__ = ("bucket_ops", "cluster", "entry_sizes", "flat", "key", "maxima", "scrape",
                 "seen", "topic_level", "topic_values", "write_latency")

    def __init__(self, scrape: _Scrape) -> None:
        self.scrape = scrape
        self.cluster = scrape.cluster
        self.topic_level = scrape.topic_level
        self.seen = scrape.seen
        self.bucket_ops = scrape.bucket_ops
        self.flat: list[object] = []
        self.maxima: list[object] = []
        self.key: tuple[str, ...] = ()
        self.topic_values: tuple[float, ...] = ()
        self.write_latency: LatencyTable = {}
        self.entry_sizes: LatencyTable = {}

    def reset(self) -> None:
        """Empty again, for the next topic (a topic whose text is reused keeps no record)."""
        self.flat.clear()
        self.maxima.clear()
        self.write_latency.clear()
        self.entry_sizes.clear()

    def add_topic(self, key: tuple[str, ...], values: tuple[float, ...]) -> None:
        self.key = key
        self.topic_values = values

    def add(self, name: str, key: tuple[str, ...], value: float) -> None:
        if name == "pulsar_topics_count":
            self.scrape.add(name, key, value)
        else:
            self.flat += (name, key, value)

    def maximum(self, name: str, key: tuple[str, ...], value: float) -> None:
        self.maxima += (name, key, value)


#: A topic's rendered series in one format: what they were made of (its signature) and the
#: text of its share of each family of the per-topic template, in template order. Plain tuples
#: of strings and numbers: the garbage collector stops tracking them, so 10,000 kept topics do
#: not lengthen its full collections.
_TopicText = tuple[tuple[object, ...], tuple[str, ...] | tuple[bytes, ...]]


class HoraeCollector(Collector):
    """Collector over a BrokerService (see module docstring). Call collect() on the loop."""

    def __init__(self, service: MetricsSource, *, lag_probe: LoopLagProbe | None = None,
                 publish_buffer: PublishBufferFigures | None = None,
                 connections: ConnectionFigures | None = None,
                 authentication: AuthenticationFigures | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.service = service
        self.lag_probe = lag_probe
        self.publish_buffer = publish_buffer
        self.connections = connections
        self.authentication = authentication
        self._rates = _Rates(clock)
        self._latency_windows = LatencyWindows(clock)
        self._entry_size_windows = LatencyWindows(clock)
        # format -> topic -> its rendered series (collect_rendered_async); loaded topics only.
        self._rendered: dict[str, dict[str, _TopicText]] = {}
        # format -> topic -> the stamp its kept text is made of (broker.metrics.topic_stamps).
        self._stamps: dict[str, dict[str, Stamp]] = {}
        # format -> the last scrape's rows and per-family columns (broker.metrics.topic_columns)
        self._columns = TopicColumns()
        self._template: list[Metric] | None = None
        self._template_index: dict[str, int] = {}   # family name -> its place in the template
        self._lines: dict[str, TopicLines] = {}   # per format: a topic's lines from its record

    def describe(self) -> list[Metric]:
        return []   # no collect() at registration time: the service may not be ready

    def collect(self) -> Iterator[Metric]:
        """Every family in one go (prometheus_client's Collector API; blocks the loop for the
        whole walk: at 10,000 topics prefer :meth:`collect_async`)."""
        scrape = self._begin()
        for full, topic in list(self.service.topics.items()):
            self._collect_one(full, topic, scrape)
        for step in self._finish(scrape, len(scrape.write_latency) + 1):
            if step is not None:
                yield step

    async def collect_async(self, slice_topics: int = SLICE_TOPICS) -> list[Metric]:
        """The same families as :meth:`collect`, walking the topics in slices of
        *slice_topics* and building one family at a time, yielding to the loop in between.

        A topic unloaded between two slices is still read (its counters stay readable); a
        topic loaded after the walk started is in the next scrape."""
        scrape = self._begin()
        topics = list(self.service.topics.items())
        for start in range(0, len(topics), slice_topics):
            for full, topic in topics[start:start + slice_topics]:
                self._collect_one(full, topic, scrape)
            await asyncio.sleep(0)
        families: list[Metric] = []
        # Each family is O(topics), the write-latency histogram comes in slices: one step
        # per loop turn.
        for step in self._finish(scrape, slice_topics):
            if step is not None:
                families.append(step)
            await asyncio.sleep(0)
        return families

    async def collect_rendered_async(self, fmt: str,
                                     slice_topics: int = SLICE_TOPICS) -> list[Metric]:
        """The families of :meth:`collect_async`, the per-topic ones as
        :class:`RenderedFamily` text in *fmt* (:data:`PROMETHEUS` lines, or :data:`SNAPSHOT`
        lines for :class:`broker.metrics.snapshots.MetricSnapshotWriter`), rendered again
        only for the topics whose series changed.

        Every topic's figures are still read (the walk of :meth:`collect_async`, into a flat
        record per topic instead of samples); a topic whose record, latency histogram and
        windowed bucket counts equal those its kept text was made of reuses that text (equal
        values render to equal text). The others are written from their records
        (:class:`broker.metrics.topic_lines.TopicLines`: the lines :meth:`collect_async`'s
        samples of that topic render to). So the output is byte for byte that of
        :meth:`collect_async` rendered whole, and an idle topic costs its reads and one
        comparison. With topic-level metrics off (series summed per
        namespace) there is nothing per topic to keep: :meth:`collect_async`'s families."""
        scrape = self._begin()
        if not scrape.topic_level:
            self._rendered.clear()
            self._stamps.clear()
            self._columns.clear()
            return await self.collect_async(slice_topics)
        latency_windows, size_windows = self._latency_windows, self._entry_size_windows
        latency_now, size_now = latency_windows.now(), size_windows.now()
        cluster, rate, seen = scrape.cluster, self._rates.rate, scrape.seen
        kept = self._rendered.get(fmt, {})
        kept_stamps = self._stamps.get(fmt, {})
        stamps: dict[str, Stamp] = {}
        rendered: dict[str, _TopicText] = {}
        order: list[_TopicText | None] = []
        changed: list[tuple[int, str, _TopicScrape, tuple[object, ...],
                            _TopicText | None]] = []
        keys: set[tuple[str, ...]] = set()
        topics = list(self.service.topics.items())
        row: _TopicScrape | None = None
        for start in range(0, len(topics), slice_topics):
            for full, topic in topics[start:start + slice_topics]:
                old = kept.get(full)
                old_stamp = kept_stamps.get(full)
                try:
                    if old_stamp is not None and old_stamp[0][0] == cluster:
                        stamp_key = old_stamp[0]
                    else:
                        stamp_key = (cluster, topic_namespace(full), full)
                    stamp = read_stamp(topic, stamp_key, rate, seen, latency_windows,
                                       latency_now, size_windows, size_now)
                except Exception:
                    stamp = None   # the full read below logs it
                if stamp is not None and old is not None and stamp == old_stamp:
                    # Nothing the text is made of moved: reuse it without a record.
                    scrape.add("pulsar_topics_count", stamp_key[:2], 1)
                    keys.add(stamp_key)
                    rendered[full] = old
                    stamps[full] = old_stamp   # the new one dies young: nothing to collect
                    order.append(old)
                    continue
                if row is None:
                    row = _TopicScrape(scrape)
                else:
                    row.reset()
                try:
                    self._collect_topic(topic, row)
                except Exception:
                    log.exception("metrics: skipping topic %r", full)
                    continue
                # Compared at once, so an unchanged topic's record dies young.
                ((key, latency),) = row.write_latency.items()
                keys.add(key)
                signature: tuple[object, ...] = (
                    key, row.topic_values, tuple(row.flat), tuple(row.maxima), tuple(latency),
                    tuple(latency_windows.count(key, latency, latency_now)),
                    tuple(size_windows.count(key, row.entry_sizes[key], size_now)))
                if (stamp is not None and stamp[0] == key and stamp[2] == timed_in_signature(
                        row.topic_values, signature[2], signature[3])):  # type: ignore[arg-type]
                    stamps[full] = stamp   # the text below is made of what the stamp holds
                if old is not None and old[0] == signature:
                    rendered[full] = old
                    order.append(old)
                else:
                    changed.append((len(order), full, row, signature, old))
                    order.append(None)
                    row = None   # kept for rendering
            await asyncio.sleep(0)
        latency_windows.retain(keys)
        size_windows.retain(keys)
        template = self._families_template()
        for start in range(0, len(changed), RENDER_TOPICS):
            part = changed[start:start + RENDER_TOPICS]
            texts = self._render(fmt, [(row, signature, old) for _, _, row, signature, old
                                       in part], len(template))
            for (index, full, _, signature, _), topic_texts in zip(part, texts, strict=True):
                order[index] = rendered[full] = (signature, topic_texts)
            await asyncio.sleep(0)
        self._rendered[fmt] = rendered
        self._stamps[fmt] = stamps
        families: list[Metric] = []
        # Per family, every topic's text in topic order: the kept columns where the rows are
        # the kept ones, patched where topics were rendered again.
        columns = self._columns.columns(fmt, [entry for entry in order if entry is not None],
                                        len(template))
        for j, shape in enumerate(template):
            if shape.name == "pulsar_topics_count":
                counts = {"pulsar_topics_count": scrape.values.get("pulsar_topics_count", {})}
                families.extend(f for f in _families(counts, True, scrape.labels)
                                if f.name == "pulsar_topics_count")
            else:
                families.append(RenderedFamily(shape.name, shape.documentation, shape.type,
                                               columns[j]))
        await asyncio.sleep(0)
        for step in self._finish_rest(scrape):
            if step is not None:
                families.append(step)
            await asyncio.sleep(0)
        return families

    def _families_template(self) -> list[Metric]:
        """The per-topic families with topic-level metrics, without samples: the order,
        names, help and types :meth:`collect_rendered_async` renders in."""
        if self._template is None:
            self._template = self._topic_families({}, {}, {}, {}, LabelSets())
            self._template_index = {family.name: j for j, family in enumerate(self._template)}
        return self._template

    def _topic_families(self, values: SampleTable, latency: LatencyTable,
                        latency_windowed: LatencyTable, sizes_windowed: LatencyTable,
                        labels: LabelSets) -> list[Metric]:
        families = list(_families(values, True, labels))
        families.extend(f for f in write_latency_steps(
            latency, self._latency_windows, True, labels, len(latency) + 1,
            windowed=latency_windowed) if f is not None)
        families.extend(entry_size_families({}, self._entry_size_windows, True, labels,
                                            windowed=sizes_windowed))
        return families

    def _changed_families(self, old: tuple[object, ...],
                          new: tuple[object, ...]) -> set[int] | None:
        """The template families whose text differs between two signatures of one topic, or
        ``None`` when its series themselves differ (a subscription came or went...)."""
        index = self._template_index
        if old[0] != new[0]:   # the topic's labels
            return None
        changed: set[int] = set()
        a, b = old[1], new[1]   # the _TOPIC_SERIES values
        if a != b:
            changed.update(index[name] for name, x, y in zip(  # type: ignore[call-overload]
                _TOPIC_SERIES, a, b, strict=True) if x != y)
        for part in (2, 3):   # (name, key, value) triples: same series, values compared
            a, b = old[part], new[part]
            if a == b:
                continue
            if (len(a) != len(b) or a[0::3] != b[0::3]  # type: ignore[index, arg-type]
                    or a[1::3] != b[1::3]):  # type: ignore[index]
                return None
            for i in range(2, len(a), 3):  # type: ignore[arg-type]
                if a[i] != b[i]:  # type: ignore[index]
                    changed.add(index[b[i - 2]])  # type: ignore[index]
        for part, names in ((4, (HISTOGRAM,)), (5, PULSAR_BUCKET_SERIES),
                            (6, (*ENTRY_SIZE_SERIES, ENTRY_SIZE_COUNT, ENTRY_SIZE_SUM))):
            if old[part] != new[part]:
                changed.update(index[name] for name in names)
        return changed

    def _render(self, fmt: str,
                rows: list[tuple[_TopicScrape, tuple[object, ...], _TopicText | None]],
                width: int) -> list[tuple[str, ...] | tuple[bytes, ...]]:
        """The text of *rows*' share of each template family, per row, in *fmt*: a row with
        its signature (which holds its windowed latency and entry-size counts) and what was
        kept for it. Only the families whose values moved since then are rendered again,
        written straight from the signature (:mod:`broker.metrics.topic_lines`). Snapshot
        text is kept UTF-8 encoded (the writer compresses bytes: no encoding of every topic's
        text at every export)."""
        lines = self._lines.get(fmt)
        if lines is None:
            lines = self._lines[fmt] = TopicLines(self._families_template(), _TOPIC_SERIES,
                                                  snapshot=fmt == SNAPSHOT)
        empty: str | bytes = b"" if fmt == SNAPSHOT else ""
        out: list[tuple[str, ...] | tuple[bytes, ...]] = []
        for row, signature, old in rows:
            redo = None if old is None else self._changed_families(old[0], signature)
            texts = [empty] * width if redo is None else list(old[1])  # type: ignore[index]
            ((_, latency),) = row.write_latency.items()
            lines.render((row.key, row.topic_values, row.flat, row.maxima, latency,
                          signature[5], signature[6]), texts, redo)  # type: ignore[arg-type]
            out.append(tuple(texts))  # type: ignore[arg-type]
        return out

    def _begin(self) -> _Scrape:
        config = self.service.config
        return _Scrape(config.cluster_name, config.expose_topic_level_metrics_in_prometheus)

    def _collect_one(self, full: str, topic: TopicFigures, scrape: _Scrape) -> None:
        try:
            self._collect_topic(topic, scrape)
        except Exception:
            log.exception("metrics: skipping topic %r", full)

    def _finish(self, scrape: _Scrape, slice_keys: int) -> Iterator[Metric | None]:
        """The families of *scrape*, and ``None`` where an async caller may yield."""
        yield from _families(scrape.values, scrape.topic_level, scrape.labels)
        yield from write_latency_steps(scrape.write_latency, self._latency_windows,
                                       scrape.topic_level, scrape.labels, slice_keys)
        yield from entry_size_families(scrape.entry_sizes, self._entry_size_windows,
                                       scrape.topic_level, scrape.labels)
        yield None
        yield from self._finish_rest(scrape)

    def _finish_rest(self, scrape: _Scrape) -> Iterator[Metric | None]:
        """The families after the per-topic ones (bucket operations, store, listeners...)."""
        self._rates.end_scrape(scrape.seen)
        config = self.service.config
        yield from scrape.bucket_ops.families(scrape.topic_level)
        yield from storage_families(config.cluster_name, self.service.storage_stats(),
                                    self.service.publish_refused)
        buffer = self.publish_buffer
        if buffer is not None:
            throttled = CounterMetricFamily(
                "horae_publish_buffer_throttled", "Times the broker-wide publish buffer "
                "(maxMessagePublishBufferSizeInMB) filled and every connection stopped reading",
                labels=["cluster"])
            throttled.add_metric([config.cluster_name], float(buffer.throttled_times))
            yield throttled
        yield from connection_families(self.connections, config.cluster_name)
        yield from authentication_families(self.authentication, config.cluster_name)
        yield from transaction_families(self.service.transactions, config.cluster_name,
                                        scrape.topic_level)
        if self.lag_probe is not None:
            yield from loop_lag_families(self.lag_probe)

    def _collect_topic(self, topic: TopicFigures, scrape: _Scrape | _TopicScrape) -> None:
        """Add *topic*'s series to *scrape* (a whole scrape, or the topic's own share)."""
        cluster = scrape.cluster
        full = topic.full
        meters = topic.meters
        ns = topic_namespace(full)
        key = (cluster, ns, full) if scrape.topic_level else (cluster, ns)
        scrape.add("pulsar_topics_count", (cluster, ns), 1)

        def add(name: str, value: float) -> None:
            scrape.add(name, key, value)

        limit_size, limit_time = meters.backlog_quota_limits()
        scrape.maximum("pulsar_storage_backlog_quota_limit", key, limit_size)
        scrape.maximum("pulsar_storage_backlog_quota_limit_time", key, limit_time)
        scrape.maximum("pulsar_storage_backlog_age_seconds", key, meters.backlog_age_seconds())
        buckets = meters.publish_latency_buckets
        n = len(PUBLISH_LATENCY_BUCKETS_MS) + 1
        acc = scrape.write_latency.get(key)
        if acc is None and len(buckets) >= n:   # the usual case: one key per topic
            # 0.0 + c: exactly what adding to a fresh [0.0, ...] gives
            acc = scrape.write_latency[key] = [0.0 + c for c in buckets[:n]]
            acc.append(0.0 + meters.publish_latency_sum_ms)
        else:
            if acc is None:
                acc = scrape.write_latency[key] = [0.0] * (n + 1)
            for i, c in enumerate(buckets[:n]):
                acc[i] += c
            acc[-1] += meters.publish_latency_sum_ms
        sizes = scrape.entry_sizes.get(key)
        if sizes is None:   # [buckets..., overflow, sum bytes, unused] (entry_size module)
            sizes = scrape.entry_sizes[key] = [0.0] * (len(ENTRY_SIZE_BUCKETS_BYTES) + 3)
        for i, c in enumerate(meters.entry_size_buckets[: len(sizes) - 2]):
            sizes[i] += c
        sizes[-2] += meters.entry_size_sum_bytes

        subs = dict(topic.subscriptions)
        backlog_total = consumers_total = index_bytes_total = journal_failures = 0.0
        bucket_totals: dict[str, float] = {}
        for sub_name, sub in subs.items():
            skey = (cluster, ns, full, sub_name)
            backlog = sub.cursor.backlog
            consumers = len(sub.consumers)
            tracker = sub.delayed_tracker
            index_bytes = float(tracker.memory_bytes) if tracker is not None else 0.0
            backlog_total += backlog
            consumers_total += consumers
            index_bytes_total += index_bytes
            gauges: dict[str, float] = {}
            if tracker is not None:
                bucket = sub.bucket_index
                gauges = index_gauges(tracker, bucket)
                for name, value in gauges.items():
                    bucket_totals[name] = bucket_totals.get(name, 0.0) + value
                if bucket is not None:
                    scrape.bucket_ops.add(bucket, key, skey if scrape.topic_level else None)
                    journal_failures += bucket.cancel_journal_failures
            if not scrape.topic_level:
                continue

            def sadd(name: str, value: float, skey: tuple[str, ...] = skey) -> None:
                scrape.add(name, skey, value)

            sadd("pulsar_subscription_back_log", backlog)
            sadd("pulsar_subscription_delayed", sub.msg_delayed)
            sadd("pulsar_subscription_unacked_messages",
                 sum(c.unacked_messages for c in sub.consumers))
            sadd("pulsar_subscription_blocked_on_unacked_messages", int(sub.blocked_on_unacked))
            sadd("pulsar_subscription_paused_on_ack_state", int(sub.paused_on_ack_state))
            sadd("pulsar_subscription_consumers_count", consumers)
            sadd("pulsar_subscription_msg_rate_out",
                 self._rates.rate(("sout", full, sub_name), sub.msg_out_counter,
                                 scrape.seen))
            sadd("pulsar_subscription_msg_rate_redeliver", sub.redeliver_rate())
            sadd("pulsar_subscription_msg_throughput_out",
                 self._rates.rate(("sbout", full, sub_name), sub.bytes_out_counter,
                                 scrape.seen))
            sadd("pulsar_subscription_delayed_message_index_size_bytes", index_bytes)
            sadd("pulsar_cursor_epoch_increase_count", sub.revisions.increase_count)
            sadd("pulsar_cursor_epoch_increase_task_state", int(sub.revisions.task_state))
            for name, value in gauges.items():
                sadd(name, value)
            delayed = sub.delayed
            sadd("horae_subscription_delayed_due", delayed.due_total)
            sadd("horae_subscription_delayed_read_ahead", delayed.read_ahead_total)
            for name, due_ms in (
                    ("horae_subscription_delayed_next_due_timestamp_seconds",
                     delayed.next_due_ms()),
                    ("horae_subscription_delayed_last_due_timestamp_seconds",
                     delayed.last_due_ms())):
                if due_ms is not None:
                    sadd(name, due_ms / 1000.0)
            if tracker is not None:
                cancels = tracker.cancel_stats()
                sadd("pulsar_subscription_delayed_cancels_applied", cancels.applied_total)
                sadd("pulsar_subscription_delayed_cancels_refused", cancels.refused_total)
                sadd("pulsar_subscription_delayed_cancels_pending", cancels.pending)
        rate_in, throughput_in, rate_out, throughput_out, write_rate, read_rate = (
            meters.rate_figures())
        scrape.add_topic(key, (
            meters.msg_in_counter, meters.bytes_in_counter, meters.msg_out_counter,
            meters.bytes_out_counter, rate_in, throughput_in, rate_out, throughput_out,
            meters.storage_size, meters.storage_logical_size, meters.backlog_size_bytes(),
            write_rate, read_rate,
            len(topic.producers), meters.delayed_rejected_counter,
            meters.fixed_delay_overridden_counter, meters.dedup_producers_evicted_counter,
            topic.publish_rate.limited_times, len(subs), backlog_total, consumers_total,
            index_bytes_total, journal_failures))
        for name, value in bucket_totals.items():
            add(name, value)


def _families(values: SampleTable, topic_level: bool, labels_of: LabelSets) -> Iterator[Metric]:
    topic_labels = TOPIC_LABELS if topic_level else NS_LABELS
    families = dict(_FAMILIES)
    for name, doc in BUCKET_GAUGES.items():
        families[name] = ("gauge", doc, "mixed")
    for name, (kind, doc, level) in families.items():
        if level == "sub" and not topic_level:
            continue
        labels = {"topic": topic_labels, "sub": SUB_LABELS, "ns": NS_LABELS}.get(level)
        family: Metric
        if kind == "counter":
            family = CounterMetricFamily(name, doc, labels=labels)
            sample_name = name + "_total"
        else:
            family = GaugeMetricFamily(name, doc, labels=labels)
            sample_name = name
        samples = family.samples
        for label_values, value in values.get(name, {}).items():
            if labels is None:   # mixed: topic-level and subscription-level series
                names = SUB_LABELS if len(label_values) == 4 else topic_labels
            else:
                names = labels
            samples.append(Sample(sample_name, labels_of(names, label_values), value))
        yield family


class BrokerRegistry(CollectorRegistry):
    """A private registry: :class:`HoraeCollector` first, then prometheus_client's process,
    platform and GC collectors (registered on this registry as usual).

    ``collect()`` (what ``generate_latest`` calls) walks everything at once;
    :meth:`collect_async` yields to the loop while it walks the topics (the snapshot exporter
    and an off-loop /metrics use it) and returns a list of finished families, which
    :func:`exposition` serialises in the default executor."""

    def __init__(self, horae: HoraeCollector) -> None:
        super().__init__(auto_describe=False)
        self.horae = horae
        ProcessCollector(registry=self)
        PlatformCollector(registry=self)
        GCCollector(registry=self)

    def collect(self) -> Iterator[Metric]:
        yield from self.horae.collect()
        yield from super().collect()

    async def collect_async(self) -> list[Metric]:
        families = await self.horae.collect_async()
        families.extend(super().collect())   # a few process figures: cheap
        return families

    async def collect_rendered_async(self, fmt: str) -> list[Metric]:
        """:meth:`collect_async` with the per-topic families rendered in *fmt*
        (:meth:`HoraeCollector.collect_rendered_async`)."""
        families = await self.horae.collect_rendered_async(fmt)
        families.extend(super().collect())
        return families


def render_text(families: list[Metric]) -> bytes:
    """``generate_latest`` of *families*, where a :class:`RenderedFamily` is its header
    followed by its Prometheus text lines (``generate_latest`` renders family by family)."""
    return b"".join(render_chunks(families))


def render_chunks(families: list[Metric]) -> Iterator[bytes]:
    """:func:`render_text` in pieces of about :data:`CHUNK_PARTS` topics' text of one family
    (about a MiB at most), each joined and encoded on its own: whoever renders them holds the
    interpreter for one piece at a time, not for the whole body (~75 MiB at 10,000 topics),
    and never keeps more than a piece of it."""
    for family in families:
        head = generate_latest(CollectedFamilies([family]))
        if not isinstance(family, RenderedFamily):
            yield head
            continue
        parts = family.parts
        for start in range(0, len(parts), CHUNK_PARTS):
            piece = parts[start:start + CHUNK_PARTS]
            text = (b"".join(piece) if piece and isinstance(piece[0], bytes)
                    else "".join(piece).encode("utf-8"))  # type: ignore[arg-type]
            yield head + text if start == 0 else text
        if not parts:
            yield head


async def exposition_chunks(registry: BrokerRegistry) -> AsyncGenerator[bytes, None]:
    """The Prometheus text for a /metrics response, piece by piece, without blocking the
    loop: families are collected in slices on the loop (idle topics' lines kept from the
    previous scrape), and each piece of :func:`render_chunks` is joined in the default
    executor (the families are finished values by then; the render reads nothing live)."""
    families = await registry.collect_rendered_async(PROMETHEUS)
    loop = asyncio.get_running_loop()
    pieces = render_chunks(families)
    while True:
        piece = await loop.run_in_executor(None, next, pieces, None)
        if piece is None:
            return
        yield piece


async def exposition(registry: BrokerRegistry) -> bytes:
    """The whole of :func:`exposition_chunks`, as one body."""
    return b"".join([piece async for piece in exposition_chunks(registry)])


class BrokerMetrics:
    """The broker's metrics, composed once by the server (see the module docstring): the
    collector over *service* with the loop-lag probe, the publish buffer, the listeners'
    figures and the authentication counters, in one private registry that ``/metrics`` and the snapshot exporter share."""

    def __init__(self, service: MetricsSource, *, lag_probe: LoopLagProbe | None = None,
                 publish_buffer: PublishBufferFigures | None = None,
                 connections: ConnectionFigures | None = None,
                 authentication: AuthenticationFigures | None = None,
                 resource_groups: ResourceGroupFigures | None = None) -> None:
        self.lag_probe = lag_probe
        self.collector = HoraeCollector(service, lag_probe=lag_probe,
                                        publish_buffer=publish_buffer, connections=connections,
                                        authentication=authentication)
        self.registry = BrokerRegistry(self.collector)
        if resource_groups is not None:
            self.registry.register(ResourceGroupCollector(resource_groups))

    def collect(self) -> list[Metric]:
        """Every family at once (on the broker loop; blocks it for the whole walk)."""
        return list(self.registry.collect())

    async def collect_async(self) -> list[Metric]:
        """Every family, the topics walked in slices."""
        return await self.registry.collect_async()

    async def snapshot_families(self) -> list[Metric]:
        """:meth:`collect_async` with the per-topic families as snapshot text, rendered
        again only for the topics that changed (the snapshot exporter's collect)."""
        return await self.registry.collect_rendered_async(SNAPSHOT)

    async def exposition(self) -> bytes:
        """The ``/metrics`` body (:func:`exposition`)."""
        return await exposition(self.registry)

    def exposition_chunks(self) -> AsyncGenerator[bytes, None]:
        """The ``/metrics`` body piece by piece (:func:`exposition_chunks`), for a streamed
        response."""
        return exposition_chunks(self.registry)
