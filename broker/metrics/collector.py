"""The broker's Prometheus collector: plain counters read at scrape time, Pulsar's names.

Theory of operation
-------------------
Topics, subscriptions and delayed-delivery trackers keep their figures as plain ints that
the hot path bumps (``topic.msg_in_counter += n``). Nothing on that path looks up a label
set or touches prometheus_client. At scrape time :meth:`HoraeCollector.collect` (called on
the broker loop, where those ints live, so no locks) walks ``service.topics``, reads the
ints, and yields metric families under Pulsar's names with labels ``cluster``,
``namespace``, ``topic`` and ``subscription``. With ``exposeTopicLevelMetricsInPrometheus``
false, topic-level series are summed per namespace (no ``topic`` label) and subscription
series are omitted, as Pulsar does.

Rules:
1. Counters are named without ``_total`` (prometheus_client appends it). Two Pulsar counters
   whose names end in ``_count`` (``pulsar_cursor_epoch_increase_count``,
   ``pulsar_delayed_message_index_bucket_op_count``) are exposed as gauges so the sample
   name stays exactly Pulsar's.
2. Rates (``pulsar_rate_in`` msg/s, ``pulsar_throughput_in`` bytes/s, ...) are the topic's
   own rate meter (``topic.rates()``, the figures its stats show) when it has one; otherwise,
   and for subscriptions, counter deltas over at least :data:`RATE_MIN_INTERVAL_S` (a scrape
   sooner than that repeats the last rate, so concurrent scrapers do not make it jitter).
3. Everything optional is read with ``getattr`` defaults: a topic without a tracker, a
   tracker without bucket figures, or a topic without a latency histogram yields zeros, never
   an exception. One broken topic is logged and skipped; it never fails the scrape.
4. ``horae_event_loop_lag_seconds`` comes from :class:`LoopLagProbe`: a ``call_later`` timer
   that measures how late it fires.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import weakref
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, Protocol

from prometheus_client import CollectorRegistry, GCCollector, PlatformCollector, ProcessCollector
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from broker.config import BrokerConfig
from broker.delayed.cancels import CancelStats
from broker.delayed.tracker import DelayedDeliveryTracker
from broker.metrics.rates import PUBLISH_LATENCY_BUCKETS_MS

log = logging.getLogger("horae.metrics")

RATE_MIN_INTERVAL_S = 1.0

#: Pulsar's storage write latency buckets (ms): pulsar_storage_write_latency_le_0_5 ... _overflow.
STORAGE_WRITE_LATENCY_BOUNDS_MS: tuple[float, ...] = (0.5, 1, 5, 10, 20, 50, 100, 200, 1000)
#: Pulsar's BucketDelayedMessageIndexStats latency buckets (ms), plus overflow.
BUCKET_OP_LATENCY_BOUNDS_MS: tuple[float, ...] = (50, 100, 500, 1000, 5000, 30000, 60000)
BUCKET_OP_TYPES = ("create", "load", "delete", "merge")
BUCKET_OP_STATES = ("succeed", "failed", "all")
#: Event-loop lag histogram buckets (seconds).
LOOP_LAG_BOUNDS_S: tuple[float, ...] = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
                                        2.5, 5.0)

#: label values -> (bucket bounds, [non-cumulative counts..., overflow, sum]).
_Hist = dict[tuple[str, ...], tuple[tuple[float, ...], list[float]]]

TOPIC_LABELS = ("cluster", "namespace", "topic")
NS_LABELS = ("cluster", "namespace")
SUB_LABELS = ("cluster", "namespace", "topic", "subscription")

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
    "pulsar_topics_count": ("gauge", "Loaded topics in the namespace", "ns"),
    "pulsar_subscription_back_log": ("gauge", "Backlog of the subscription (messages)", "sub"),
    "pulsar_subscription_delayed": ("gauge", "Delayed messages tracked by the subscription",
                                    "sub"),
    "pulsar_subscription_unacked_messages": ("gauge", "Messages delivered and not acknowledged",
                                             "sub"),
    "pulsar_subscription_msg_rate_out": ("gauge", "Dispatch rate (messages/s)", "sub"),
    "pulsar_subscription_msg_throughput_out": ("gauge", "Dispatch throughput (bytes/s)", "sub"),
    "pulsar_subscription_consumers_count": ("gauge", "Consumers of the subscription", "sub"),
    "pulsar_subscription_delayed_message_index_size_bytes": (
        "gauge", "Memory used by the subscription's delayed-delivery tracker (bytes)", "sub"),
    "pulsar_cursor_epoch_increase_count": (
        "gauge", "Cursor state revisions (PIP-269): position resets of the cursor", "sub"),
    # PIP-423 tracker-level cancels (Horae's names: Pulsar exposes none).
    "pulsar_subscription_delayed_cancels_applied": (
        "counter", "Cancels that cleared a tracked delayed message (PIP-423)", "sub"),
    "pulsar_subscription_delayed_cancels_refused": (
        "counter", "Cancels refused: the deliver time was already due (PIP-423)", "sub"),
    "pulsar_subscription_delayed_cancels_pending": (
        "gauge", "Cancels recorded whose target has not been read yet (PIP-423)", "sub"),
}

# Bucket-tracker gauges: topic-level and subscription-level series in one family (Pulsar's).
_BUCKET_GAUGES: dict[str, tuple[str, tuple[str, ...]]] = {
    "pulsar_delayed_message_index_bucket_total": (
        "Delayed-index buckets (immutable + last mutable)", ("bucket_count", "num_buckets")),
    "pulsar_delayed_message_index_loaded": (
        "Delayed indexes loaded in memory", ("loaded_index_count", "loaded_count", "loaded")),
    "pulsar_delayed_message_index_bucket_snapshot_size_bytes": (
        "Bytes of the persisted bucket snapshots", ("snapshot_size_bytes", "snapshots_size_bytes")),
}


def cancel_figures(tracker: object) -> CancelStats | None:
    """The PIP-423 cancel counters of a subscription's tracker (typed: the tracker interface's
    ``cancel_stats``); None without a tracker."""
    if isinstance(tracker, DelayedDeliveryTracker):
        return tracker.cancel_stats()
    return None


def _num(value: Any) -> float:
    """A plain number from an attribute that may be a value, a property or a method."""
    if callable(value):
        value = value()
    if value is None:
        return 0.0
    try:
        return float(value)
    except (TypeError, ValueError):
        return 0.0


def _first_attr(obj: Any, names: Sequence[str], default: Any = None) -> Any:
    for name in names:
        value = getattr(obj, name, None)
        if value is not None:
            return value() if callable(value) else value
    return default


def _publish_latency_bounds() -> tuple[float, ...]:
    return PUBLISH_LATENCY_BUCKETS_MS


def _full_name(topic: Any) -> str:
    name = getattr(topic, "name", topic)
    return str(getattr(name, "full", name))


def _namespace(full: str) -> str:
    parts = full.split("://", 1)[-1].split("/")
    return "/".join(parts[:2])


class LoopLagProbe:
    """Measures event-loop lag: a ``call_later`` timer records how late it fires.

    Start it on the loop it measures (create_app's on_startup); :meth:`stop` cancels it.
    Bucket counts are plain ints (non-cumulative, overflow last), read at scrape time.
    """

    def __init__(self, interval_s: float = 0.5,
                 bounds_s: Sequence[float] = LOOP_LAG_BOUNDS_S) -> None:
        self.interval_s = interval_s
        self.bounds_s = tuple(bounds_s)
        self.last_lag_s = 0.0
        self.max_lag_s = 0.0
        self.buckets = [0] * (len(self.bounds_s) + 1)
        self.sum_s = 0.0
        self.count = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._handle: asyncio.TimerHandle | None = None
        self._expected = 0.0

    def start(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        self._loop = loop or asyncio.get_running_loop()
        self._schedule()

    def _schedule(self) -> None:
        assert self._loop is not None
        self._expected = self._loop.time() + self.interval_s
        self._handle = self._loop.call_later(self.interval_s, self._tick)

    def _tick(self) -> None:
        assert self._loop is not None
        self.record(max(0.0, self._loop.time() - self._expected))
        self._schedule()

    def record(self, lag_s: float) -> None:
        self.last_lag_s = lag_s
        self.max_lag_s = max(self.max_lag_s, lag_s)
        self.sum_s += lag_s
        self.count += 1
        for i, bound in enumerate(self.bounds_s):
            if lag_s <= bound:
                self.buckets[i] += 1
                return
        self.buckets[-1] += 1

    def stop(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    @property
    def running(self) -> bool:
        return self._handle is not None


def _cumulative(counts: Sequence[int | float], bounds: Sequence[float]) -> list[tuple[str, float]]:
    """Non-cumulative counts (len(bounds)+1, overflow last) -> Prometheus (le, cumulative)."""
    out: list[tuple[str, float]] = []
    total = 0.0
    for i, bound in enumerate(bounds):
        total += float(counts[i]) if i < len(counts) else 0.0
        out.append((_le(bound), total))
    total += sum(float(c) for c in counts[len(bounds):])
    out.append(("+Inf", total))
    return out


def _le(bound: float) -> str:
    return str(int(bound)) if float(bound).is_integer() else str(bound)


class _Rates:
    """Per-key rates from counter deltas, refreshed at most every RATE_MIN_INTERVAL_S."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        self._state: dict[tuple[str, ...], tuple[float, float, float]] = {}
        self._seen: set[tuple[str, ...]] = set()

    def rate(self, key: tuple[str, ...], counter: float) -> float:
        now = self._clock()
        self._seen.add(key)
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

    def end_scrape(self) -> None:
        for key in [k for k in self._state if k not in self._seen]:
            del self._state[key]   # unloaded topics / deleted subscriptions
        self._seen.clear()


class MetricsSource(Protocol):
    """What the collector scrapes (:class:`broker.topics.service.BrokerService`, handed in by
    the server and the admin app): the broker config and the loaded topics. The topics'
    own figures are still read by name below (see rule 3 of the module docstring)."""

    @property
    def config(self) -> BrokerConfig: ...

    @property
    def topics(self) -> Mapping[str, Any]: ...


class HoraeCollector(Collector):
    """Collector over a BrokerService (see module docstring). Call collect() on the loop."""

    def __init__(self, service: MetricsSource, *, lag_probe: LoopLagProbe | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.service = service
        self.lag_probe = lag_probe
        self._rates = _Rates(clock)

    def describe(self) -> list[Metric]:
        return []   # no collect() at registration time: the service may not be ready

    def collect(self) -> Iterator[Metric]:
        config = self.service.config
        cluster = config.cluster_name
        topic_level = config.expose_topic_level_metrics_in_prometheus
        values: dict[str, dict[tuple[str, ...], float]] = defaultdict(lambda: defaultdict(float))
        hist: _Hist = {}
        bucket_ops: dict[tuple[str, ...], float] = defaultdict(float)
        bucket_lat: dict[tuple[str, ...], list[float]] = {}
        for topic in list(self.service.topics.values()):
            try:
                self._collect_topic(topic, cluster, topic_level, values, hist, bucket_ops,
                                    bucket_lat)
            except Exception:
                log.exception("metrics: skipping topic %r", _full_name(topic))
        self._rates.end_scrape()
        yield from self._families(values, topic_level)
        yield self._write_latency_family(hist, topic_level)
        yield from self._bucket_op_families(bucket_ops, bucket_lat, topic_level)
        yield from self._loop_lag_families()

    # --- reading one topic ---------------------------------------------------------------
    def _collect_topic(self, topic: Any, cluster: str, topic_level: bool,
                       values: dict[str, dict[tuple[str, ...], float]],
                       hist: _Hist,
                       bucket_ops: dict[tuple[str, ...], float],
                       bucket_lat: dict[tuple[str, ...], list[float]]) -> None:
        full = _full_name(topic)
        ns = _namespace(full)
        key = (cluster, ns, full) if topic_level else (cluster, ns)
        values["pulsar_topics_count"][(cluster, ns)] += 1

        msg_in = _num(getattr(topic, "msg_in_counter", 0))
        bytes_in = _num(getattr(topic, "bytes_in_counter", 0))
        msg_out = _num(getattr(topic, "msg_out_counter", 0))
        bytes_out = _num(getattr(topic, "bytes_out_counter", 0))
        add = self._adder(values, key)
        add("pulsar_in_messages", msg_in)
        add("pulsar_in_bytes", bytes_in)
        add("pulsar_out_messages", msg_out)
        add("pulsar_out_bytes", bytes_out)
        for name, value in zip(("pulsar_rate_in", "pulsar_throughput_in", "pulsar_rate_out",
                                "pulsar_throughput_out"),
                               self._topic_rates(topic, full, msg_in, bytes_in, msg_out,
                                                 bytes_out), strict=True):
            add(name, value)
        ledger = getattr(topic, "ledger", None)
        add("pulsar_storage_size", _num(getattr(ledger, "total_size_bytes", 0)))
        add("pulsar_producers_count", len(getattr(topic, "producers", ()) or ()))
        add("pulsar_broker_topic_messages_delayed_rejected",
            _num(getattr(topic, "delayed_rejected_counter", 0)))
        add("pulsar_broker_topic_messages_fixed_delay_overridden",
            _num(getattr(topic, "fixed_delay_overridden_counter", 0)))
        self._add_write_latency(topic, key, hist)

        subs = dict(getattr(topic, "subscriptions", {}) or {})
        add("pulsar_subscriptions_count", len(subs))
        backlog_total = consumers_total = index_bytes_total = 0.0
        bucket_totals: dict[str, float] = defaultdict(float)
        for sub_name, sub in subs.items():
            skey = (cluster, ns, full, str(sub_name))
            backlog = self._backlog(sub)
            consumers = len(getattr(sub, "consumers", ()) or ())
            tracker = getattr(sub, "delayed_tracker", None)
            index_bytes = _num(getattr(tracker, "memory_bytes", 0)) if tracker is not None else 0.0
            backlog_total += backlog
            consumers_total += consumers
            index_bytes_total += index_bytes
            bucket_figures = self._bucket_figures(tracker)
            for name, value in bucket_figures.items():
                bucket_totals[name] += value
            self._read_bucket_ops(tracker, key, skey if topic_level else None, bucket_ops,
                                  bucket_lat)
            if not topic_level:
                continue
            sadd = self._adder(values, skey)
            sadd("pulsar_subscription_back_log", backlog)
            sadd("pulsar_subscription_delayed", self._delayed(sub, tracker))
            sadd("pulsar_subscription_unacked_messages", self._unacked(sub))
            sadd("pulsar_subscription_consumers_count", consumers)
            sadd("pulsar_subscription_msg_rate_out", self._rates.rate(
                ("sout", full, sub_name), _num(getattr(sub, "msg_out_counter", 0))))
            sadd("pulsar_subscription_msg_throughput_out", self._rates.rate(
                ("sbout", full, sub_name), _num(getattr(sub, "bytes_out_counter", 0))))
            sadd("pulsar_subscription_delayed_message_index_size_bytes", index_bytes)
            sadd("pulsar_cursor_epoch_increase_count",
                 _num(getattr(getattr(sub, "cursor", None), "revision", 0)))
            for name, value in bucket_figures.items():
                sadd(name, value)
            cancels = cancel_figures(tracker)
            if cancels is not None:
                sadd("pulsar_subscription_delayed_cancels_applied", cancels.applied_total)
                sadd("pulsar_subscription_delayed_cancels_refused", cancels.refused_total)
                sadd("pulsar_subscription_delayed_cancels_pending", cancels.pending)
        add("pulsar_msg_backlog", backlog_total)
        add("pulsar_consumers_count", consumers_total)
        add("pulsar_delayed_message_index_size_bytes", index_bytes_total)
        for name, value in bucket_totals.items():
            add(name, value)

    def _topic_rates(self, topic: Any, full: str, *counters: float) -> tuple[float, ...]:
        """(rate in, throughput in, rate out, throughput out): the topic's own rate meter
        (``topic.rates()``, what its stats report) when it has one, else counter deltas."""
        rates = getattr(topic, "rates", None)
        if callable(rates):
            values = tuple(float(v) for v in rates())
            if len(values) == 4:
                return values
        return tuple(self._rates.rate((kind, full), c)
                     for kind, c in zip(("in", "bin", "out", "bout"), counters, strict=True))

    @staticmethod
    def _adder(values: dict[str, dict[tuple[str, ...], float]],
               key: tuple[str, ...]) -> Callable[[str, float], None]:
        def add(name: str, value: float) -> None:
            values[name][key] += value
        return add

    @staticmethod
    def _backlog(sub: Any) -> float:
        value = _first_attr(sub, ("msg_backlog", "backlog"))
        if value is None:
            value = getattr(getattr(sub, "cursor", None), "backlog", 0)
        return _num(value)

    @staticmethod
    def _delayed(sub: Any, tracker: Any) -> float:
        value = getattr(sub, "msg_delayed", None)
        if value is not None:
            return _num(value)
        return float(len(tracker)) if tracker is not None else 0.0

    @staticmethod
    def _unacked(sub: Any) -> float:
        value = _first_attr(sub, ("unacked_messages", "unacked_count"))
        if value is not None:
            return _num(value)
        total = 0.0
        for consumer in getattr(sub, "consumers", ()) or ():
            total += _num(_first_attr(consumer, ("unacked_messages", "unacked_count"), 0))
        return total

    @staticmethod
    def _bucket_figures(tracker: Any) -> dict[str, float]:
        if tracker is None:
            return {}
        out = {}
        for name, (_, attrs) in _BUCKET_GAUGES.items():
            out[name] = _num(_first_attr(tracker, attrs, 0))
        # An in-memory tracker holds every index in memory: that is its loaded count.
        if not any(getattr(tracker, a, None) is not None
                   for a in _BUCKET_GAUGES["pulsar_delayed_message_index_loaded"][1]):
            with contextlib.suppress(TypeError):
                out["pulsar_delayed_message_index_loaded"] = float(len(tracker))
        return out

    @staticmethod
    def _read_bucket_ops(tracker: Any, key: tuple[str, ...], skey: tuple[str, ...] | None,
                         ops: dict[tuple[str, ...], float],
                         lat: dict[tuple[str, ...], list[float]]) -> None:
        """``tracker.op_count``: {(type, state): n} (or {type: {state: n}}) with states
        succeed/failed, Pulsar's state="all" derived as their sum when absent;
        ``tracker.op_latency_buckets``: {type: [counts per bound..., overflow]} and, if the
        tracker keeps it, ``tracker.op_latency_sum_ms``: {type: ms}. Absent -> nothing."""
        if tracker is None:
            return
        counts = _first_attr(tracker, ("op_count", "bucket_op_counts", "op_counts"), None)
        if isinstance(counts, Mapping):
            per_op: dict[tuple[str, str], float] = defaultdict(float)
            for k, v in counts.items():
                if isinstance(k, tuple) and len(k) == 2:
                    per_op[(str(k[0]), str(k[1]))] += _num(v)
                elif isinstance(v, Mapping):
                    for state, n in v.items():
                        per_op[(str(k), str(state))] += _num(n)
            for op_type in {t for t, _ in per_op}:
                if (op_type, "all") not in per_op:
                    per_op[(op_type, "all")] = sum(
                        n for (t, st), n in list(per_op.items()) if t == op_type and st != "all")
            for (op_type, state), n in per_op.items():
                for label_key in (key, skey):
                    if label_key is not None:
                        ops[(*label_key, state, op_type)] += n
        buckets = _first_attr(tracker, ("op_latency_buckets", "bucket_op_latency_buckets"), None)
        sums = _first_attr(tracker, ("op_latency_sum_ms", "bucket_op_latency_sum_ms"), None) or {}
        if isinstance(buckets, Mapping):
            for op_type, counts_list in buckets.items():
                for label_key in (key, skey):
                    if label_key is None:
                        continue
                    acc = lat.setdefault((*label_key, str(op_type)),
                                         [0.0] * (len(BUCKET_OP_LATENCY_BOUNDS_MS) + 2))
                    for i, c in enumerate(list(counts_list)[: len(acc) - 1]):
                        acc[i] += _num(c)
                    acc[-1] += _num(sums.get(op_type, 0)) if isinstance(sums, Mapping) else 0.0

    @staticmethod
    def _add_write_latency(topic: Any, key: tuple[str, ...], hist: _Hist) -> None:
        """Core's Topic keeps ``publish_latency_buckets``: non-cumulative counts, one per bound
        of ``broker.metrics.rates.PUBLISH_LATENCY_BUCKETS_MS`` plus overflow, and
        ``publish_latency_sum_ms``. (``write_latency_*`` names are accepted too.)"""
        counts = _first_attr(topic, ("publish_latency_buckets", "write_latency_buckets"))
        if counts is None:
            return
        bounds = tuple(_first_attr(topic, ("publish_latency_bounds_ms", "write_latency_bounds_ms"),
                                   _publish_latency_bounds()))
        total_ms = _num(_first_attr(topic, ("publish_latency_sum_ms", "write_latency_sum_ms"), 0))
        first_bounds, acc = hist.setdefault(key, (bounds, [0.0] * (len(bounds) + 2)))
        if first_bounds != bounds:
            return   # topics disagreeing on bounds cannot be summed; keep the first
        for i, c in enumerate(list(counts)[: len(bounds) + 1]):
            acc[i] += _num(c)
        acc[-1] += total_ms

    # --- emitting --------------------------------------------------------------------------
    def _families(self, values: dict[str, dict[tuple[str, ...], float]],
                  topic_level: bool) -> Iterator[Metric]:
        topic_labels = TOPIC_LABELS if topic_level else NS_LABELS
        families = dict(_FAMILIES)
        for name, (doc, _) in _BUCKET_GAUGES.items():
            families[name] = ("gauge", doc, "mixed")
        for name, (kind, doc, level) in families.items():
            if level == "sub" and not topic_level:
                continue
            labels = {"topic": topic_labels, "sub": SUB_LABELS, "ns": NS_LABELS}.get(level)
            family: Metric
            if kind == "counter":
                family = CounterMetricFamily(name, doc, labels=labels)
            else:
                family = GaugeMetricFamily(name, doc, labels=labels)
            for label_values, value in values.get(name, {}).items():
                if labels is None:   # mixed: topic-level and subscription-level series
                    names = SUB_LABELS if len(label_values) == 4 else topic_labels
                    family.add_sample(name, dict(zip(names, label_values, strict=True)), value)
                else:
                    family.add_metric(list(label_values), value)
            yield family

    def _write_latency_family(self, hist: _Hist,
                              topic_level: bool) -> Metric:
        labels = TOPIC_LABELS if topic_level else NS_LABELS
        family = HistogramMetricFamily(
            "pulsar_storage_write_latency",
            "Ledger append latency until durable, in milliseconds", labels=labels)
        for key, (bounds, acc) in hist.items():
            family.add_metric(list(key), _cumulative(acc[:-1], bounds), sum_value=acc[-1])
        return family

    def _bucket_op_families(self, ops: dict[tuple[str, ...], float],
                            lat: dict[tuple[str, ...], list[float]],
                            topic_level: bool) -> Iterator[Metric]:
        base = TOPIC_LABELS if topic_level else NS_LABELS
        count = GaugeMetricFamily(
            "pulsar_delayed_message_index_bucket_op_count",
            "Bucket operations of the delayed-index bucket tracker by state and type")
        for key, value in ops.items():
            names = (*(SUB_LABELS if len(key) == 6 else base), "state", "type")
            count.add_sample(count.name, dict(zip(names, key, strict=True)), value)
        yield count
        latency = HistogramMetricFamily(
            "pulsar_delayed_message_index_bucket_op_latency_ms",
            "Latency of delayed-index bucket operations by type, in milliseconds")
        for key, acc in lat.items():
            names = (*(SUB_LABELS if len(key) == 5 else base), "type")
            labels = dict(zip(names, key, strict=True))
            for le, cum in _cumulative(acc[:-1], BUCKET_OP_LATENCY_BOUNDS_MS):
                latency.add_sample(latency.name + "_bucket", {**labels, "le": le}, cum)
            latency.add_sample(latency.name + "_count", labels, sum(acc[:-1]))
            latency.add_sample(latency.name + "_sum", labels, acc[-1])
        yield latency

    def _loop_lag_families(self) -> Iterator[Metric]:
        probe = self.lag_probe
        if probe is None:
            return
        yield GaugeMetricFamily("horae_event_loop_lag_seconds",
                                "How late the last event-loop probe timer fired (seconds)",
                                value=probe.last_lag_s)
        hist = HistogramMetricFamily("horae_event_loop_lag_histogram_seconds",
                                     "Distribution of event-loop probe lateness (seconds)")
        hist.add_metric([], _cumulative(probe.buckets, probe.bounds_s), sum_value=probe.sum_s)
        yield hist


# Per service: the first registry (create_app's, serving /metrics) and its loop-lag probe,
# so the snapshot exporter (collect_families, or a second create_registry) reports the same
# families, loop lag included.
_REGISTRIES: weakref.WeakKeyDictionary[Any, CollectorRegistry] = weakref.WeakKeyDictionary()
_PROBES: weakref.WeakKeyDictionary[Any, LoopLagProbe] = weakref.WeakKeyDictionary()


def create_registry(service: MetricsSource, lag_probe: LoopLagProbe | None = None) -> CollectorRegistry:
    """A fresh private registry (never prometheus_client's global one: several brokers may
    share a process) with :class:`HoraeCollector` and the process, platform and GC
    collectors. Without ``lag_probe`` it uses the probe an earlier call registered for
    ``service`` (create_app's)."""
    with contextlib.suppress(TypeError):   # not weakly referenceable: nothing shared
        if lag_probe is None:
            lag_probe = _PROBES.get(service)
        else:
            _PROBES[service] = lag_probe
    registry = CollectorRegistry(auto_describe=False)
    registry.register(HoraeCollector(service, lag_probe=lag_probe))
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    GCCollector(registry=registry)
    with contextlib.suppress(TypeError):
        _REGISTRIES.setdefault(service, registry)
    return registry


def collect_families(service: MetricsSource) -> Iterable[Metric]:
    """Every family /metrics serves for ``service`` (a ``collect`` for the snapshot
    exporter). Call on the broker loop."""
    registry = _REGISTRIES.get(service)
    if registry is None:
        registry = create_registry(service)
    return list(registry.collect())
