"""A topic's stamp: every figure its exported series are made of, read without building them.

Theory of operation
-------------------
:meth:`broker.metrics.collector.HoraeCollector.collect_rendered_async` keeps each topic's
rendered text between scrapes. Reading a topic into the record that text is compared against
(``_collect_topic``) costs per topic what a scrape of 10,000 idle topics cannot afford. A
stamp (:func:`read_stamp`) is the same reads taken straight into one flat tuple: the topic's
counters, sizes, quota limits, latency and entry-size buckets, the windowed counts of those
buckets, and for each subscription the figures of its series. Equal stamps mean equal inputs,
so equal text: a topic whose stamp equals the one kept with its text reuses that text without
being read into a record.

A stamp has two parts. The *static* part holds what only changes when something happens to the
topic (a publish, an ack, a subscription or producer coming or going, a policy or a trim). The
*timed* part holds what the passing of time alone moves: the topic's rates (its meter decays
to 0), the subscriptions' rates (deltas over the time since the previous scrape) and the
backlog age. A stamp is kept only when its timed part equals the same figures in the record
the text was made of (:func:`timed_in_signature`), read within the same loop turn: that makes
the text a function of the stamp. Windowed counts are taken with the scrape's clock, once, by
the stamp (the record's read of the same key at the same time returns the same counts; a
window in a steady state is read without building the topic's table), so a window that rolls
changes the stamp. Subscription rates are read through the collector's
rate table, which marks their keys as seen and moves their baseline exactly as a full read.

Not stamped (always read in full): topics with a subscription that has a delayed-delivery
tracker (its index gauges and due times move with time and with the bucket index's own
operations, which the scrape also totals across topics).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from broker.metrics.entry_size import ENTRY_SIZE_BUCKETS_BYTES
from broker.metrics.rates import PUBLISH_LATENCY_BUCKETS_MS
from broker.metrics.sources import TopicFigures, TopicMeterFigures
from broker.metrics.write_latency import LatencyWindows

__all__ = ["Stamp", "entry_size_table", "latency_table", "read_stamp", "timed_in_signature"]

#: (the topic's label values, static figures, timed figures); see the module docstring.
Stamp = tuple[tuple[str, ...], tuple[object, ...], tuple[object, ...]]
#: The collector's subscription rate: (rate key, counter, the scrape's seen keys) -> per second.
RateOf = Callable[[tuple[str, ...], float, set[tuple[str, ...]]], float]

#: Places of the topic meter's six rates in the record's topic values (see the collector's
#: ``_TOPIC_SERIES``: rate_in, throughput_in, rate_out, throughput_out, then storage write and
#: read rates).
_RATE_PLACES = (4, 5, 6, 7, 11, 12)
#: The subscription series whose values are timed, in the order the record adds them.
_TIMED_SUB_SERIES = frozenset({"pulsar_subscription_msg_rate_out",
                               "pulsar_subscription_msg_rate_redeliver",
                               "pulsar_subscription_msg_throughput_out"})
_AGE_PLACE = 8   # the backlog age's value among the record's maxima (three triples)


def latency_table(meters: TopicMeterFigures) -> list[float]:
    """A topic's write-latency counts as the scrape accumulates them: the buckets, then the
    latency sum (floats, so windows and histograms see the same values whoever builds it)."""
    n = len(PUBLISH_LATENCY_BUCKETS_MS) + 1
    buckets = meters.publish_latency_buckets
    if len(buckets) == n:   # the usual case; 0.0 + c: exactly what adding to 0.0 gives
        acc = [0.0 + c for c in buckets]
        acc.append(0.0 + meters.publish_latency_sum_ms)
        return acc
    acc = [0.0] * (n + 1)
    for i, c in enumerate(meters.publish_latency_buckets[:n]):
        acc[i] += c
    acc[-1] += meters.publish_latency_sum_ms
    return acc


def entry_size_table(meters: TopicMeterFigures) -> list[float]:
    """A topic's entry-size counts as the scrape accumulates them: [buckets..., overflow,
    sum bytes, unused] (:mod:`broker.metrics.entry_size`)."""
    buckets = meters.entry_size_buckets
    if len(buckets) == len(ENTRY_SIZE_BUCKETS_BYTES) + 1:   # the usual case
        sizes = [0.0 + c for c in buckets]
        sizes += (0.0 + meters.entry_size_sum_bytes, 0.0)
        return sizes
    sizes = [0.0] * (len(ENTRY_SIZE_BUCKETS_BYTES) + 3)
    for i, c in enumerate(meters.entry_size_buckets[: len(sizes) - 2]):
        sizes[i] += c
    sizes[-2] += meters.entry_size_sum_bytes
    return sizes


def read_stamp(topic: TopicFigures, key: tuple[str, ...], rate: RateOf,
               seen: set[tuple[str, ...]], latency_windows: LatencyWindows, latency_now: float,
               size_windows: LatencyWindows, size_now: float) -> Stamp | None:
    """*topic*'s stamp under its label values *key*, or ``None`` when it is not stamped (a
    subscription with a delayed-delivery tracker)."""
    full = topic.full
    subs: list[object] = []
    timed: list[object] = []
    for name, sub in topic.subscriptions.items():
        if sub.delayed_tracker is not None:
            return None
        consumers = sub.consumers
        delayed = sub.delayed
        revisions = sub.revisions
        subs += (name, sub.cursor.backlog, len(consumers), sub.msg_delayed,
                 sum(c.unacked_messages for c in consumers), sub.blocked_on_unacked,
                 sub.paused_on_ack_state, revisions.increase_count, revisions.task_state,
                 delayed.due_total, delayed.read_ahead_total, delayed.next_due_ms(),
                 delayed.last_due_ms())
        timed += (rate(("sout", full, name), sub.msg_out_counter, seen), sub.redeliver_rate(),
                  rate(("sbout", full, name), sub.bytes_out_counter, seen))
    meters = topic.meters
    latency, latency_sum = meters.publish_latency_buckets, meters.publish_latency_sum_ms
    sizes, sizes_sum = meters.entry_size_buckets, meters.entry_size_sum_bytes
    latency_windowed = latency_windows.steady(key, latency, latency_now)
    if latency_windowed is None:
        latency_windowed = latency_windows.count(key, latency_table(meters), latency_now)
    sizes_windowed = size_windows.steady(key, [*sizes, sizes_sum], size_now)
    if sizes_windowed is None:
        sizes_windowed = size_windows.count(key, entry_size_table(meters), size_now)
    static = (
        tuple(latency), latency_sum, tuple(sizes), sizes_sum, latency_windowed, sizes_windowed,
        meters.msg_in_counter, meters.bytes_in_counter, meters.msg_out_counter,
        meters.bytes_out_counter, meters.storage_size, meters.storage_logical_size,
        meters.backlog_size_bytes(), len(topic.producers), meters.delayed_rejected_counter,
        meters.fixed_delay_overridden_counter, meters.dedup_producers_evicted_counter,
        topic.publish_rate.limited_times, meters.backlog_quota_limits(), tuple(subs))
    timed += (meters.rate_figures(), meters.backlog_age_seconds())
    return key, static, tuple(timed)


def timed_in_signature(topic_values: Sequence[float], flat: Sequence[object],
                       maxima: Sequence[object]) -> tuple[object, ...]:
    """The timed figures of a record (its topic values, flat subscription series and maxima)
    in the order of a stamp's timed part."""
    timed: list[object] = [flat[i + 2] for i in range(0, len(flat), 3)
                           if flat[i] in _TIMED_SUB_SERIES]
    timed += (tuple(topic_values[i] for i in _RATE_PLACES), maxima[_AGE_PLACE])
    return tuple(timed)
