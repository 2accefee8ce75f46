"""/metrics: valid Prometheus text under Pulsar's names, read from plain counters."""

from __future__ import annotations

import dataclasses
import datetime
from typing import Any

import pulsar
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families
from waiting import wait_until

from broker.config import BrokerConfig
from broker.delayed.cancels import CancelStats
from broker.metrics import BrokerMetrics, ConnectionFigures
from broker.metrics.collector import HoraeCollector
from broker.metrics.lag import LoopLagProbe
from broker.metrics.sources import MetricsSource
from broker.net.throttle import OutputPauses, PublishBuffer
from broker.topics.publish_rate import PublishRateLimiter
from storage.stats import StorageStats

from .conftest import Api

T = "persistent://public/default"
WAIT_S = 10.0


def _samples(text: str) -> dict[str, list[Any]]:
    out: dict[str, list[Any]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out.setdefault(sample.name, []).append(sample)
    return out


def _value(samples: dict[str, list[Any]], name: str, **labels: str) -> float | None:
    for s in samples.get(name, []):
        if all(s.labels.get(k) == v for k, v in labels.items()):
            return float(s.value)
    return None


def _scrape(api: Api) -> dict[str, list[Any]]:
    reply = api("GET", "/metrics")
    assert reply.status == 200
    assert reply.content_type.startswith("text/plain")
    return _samples(reply.body)


def _scrape_when(api: Api, name: str, value: float, **labels: str) -> dict[str, list[Any]] | None:
    """The scrape if the sample ``name{labels}`` is ``value`` (counters: at least it), else None."""
    samples = _scrape(api)
    seen = _value(samples, name, **labels)
    if seen is None:
        return None
    reached = seen >= value if name.endswith(("_count", "_total")) else seen == value
    return samples if reached else None


def test_metrics_count_what_the_official_client_published_and_consumed(
        api: Api, client: Any) -> None:
    topic = f"{T}/metered"
    consumer = client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Shared)
    producer = client.create_producer(topic, batching_enabled=False)
    for i in range(7):
        producer.send(f"message-{i}".encode())
    samples = _scrape(api)
    labels = {"topic": topic, "namespace": "public/default", "cluster": "standalone"}
    assert _value(samples, "pulsar_in_messages_total", **labels) == 7
    assert _value(samples, "pulsar_in_bytes_total", **labels) >= 7 * len(b"message-0")
    assert _value(samples, "pulsar_storage_size", **labels) > 0
    assert _value(samples, "pulsar_producers_count", **labels) == 1
    assert _value(samples, "pulsar_consumers_count", **labels) == 1
    assert _value(samples, "pulsar_subscriptions_count", **labels) == 1
    assert _value(samples, "pulsar_topics_count", namespace="public/default") >= 1
    assert _value(samples, "pulsar_storage_write_latency_count", **labels) == 7
    assert _value(samples, "pulsar_storage_write_latency_bucket", le="+Inf", **labels) == 7
    for _ in range(7):
        consumer.acknowledge(consumer.receive(timeout_millis=5000))
    # acks are asynchronous: scrape until the backlog has drained
    samples = wait_until(
        lambda: _scrape_when(api, "pulsar_subscription_back_log", 0, subscription="sub", **labels),
        timeout_s=WAIT_S, message="pulsar_subscription_back_log drains to 0",
    )
    assert _value(samples, "pulsar_out_messages_total", **labels) == 7
    assert _value(samples, "pulsar_subscription_unacked_messages", subscription="sub",
                  **labels) == 0
    assert _value(samples, "pulsar_msg_backlog", **labels) == 0
    for name in ("pulsar_rate_in", "pulsar_rate_out", "pulsar_throughput_in",
                 "pulsar_throughput_out", "pulsar_subscription_delayed",
                 "pulsar_cursor_epoch_increase_count",
                 "pulsar_broker_topic_messages_delayed_rejected_total",
                 "pulsar_broker_topic_messages_fixed_delay_overridden_total",
                 "pulsar_delayed_message_index_size_bytes"):
        assert _value(samples, name, **labels) is not None, name
    producer.close()
    consumer.close()


def test_metrics_include_process_and_event_loop_lag(api: Api) -> None:
    # the lag probe fires every 0.5 s
    samples = wait_until(
        lambda: _scrape_when(api, "horae_event_loop_lag_histogram_seconds_count", 1),
        timeout_s=WAIT_S, interval_s=0.1, message="the loop lag probe records a sample",
    )
    assert _value(samples, "horae_event_loop_lag_seconds") is not None
    assert _value(samples, "process_cpu_seconds_total") is not None
    assert _value(samples, "process_resident_memory_bytes") > 0


def test_delayed_messages_and_cursor_resets_show_in_metrics(api: Api, client: Any) -> None:
    topic = f"{T}/delayed-metrics"
    consumer = client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Shared)
    producer = client.create_producer(topic, batching_enabled=False)
    producer.send(b"later", deliver_after=datetime.timedelta(minutes=10))
    labels = {"topic": topic, "subscription": "sub"}
    samples = wait_until(
        lambda: _scrape_when(api, "pulsar_subscription_delayed", 1, **labels),
        timeout_s=WAIT_S, message="pulsar_subscription_delayed reaches 1",
    )
    assert _value(samples, "pulsar_delayed_message_index_size_bytes", topic=topic) > 0
    assert _value(samples, "pulsar_subscription_delayed_message_index_size_bytes", **labels) > 0
    before = _value(samples, "pulsar_cursor_epoch_increase_count", **labels)
    assert before == 0  # subscribing (a topic load) is not a reset
    path = "/admin/v2/persistent/public/default/delayed-metrics/subscription/sub/skip_all"
    assert api("POST", path).status == 204
    after_samples = _scrape(api)
    after = _value(after_samples, "pulsar_cursor_epoch_increase_count", **labels)
    assert after == before + 1
    assert _value(after_samples, "pulsar_cursor_epoch_increase_task_state", **labels) == 0
    internal = api("GET", "/admin/v2/persistent/public/default/delayed-metrics/internalStats")
    cursor = internal.body["cursors"]["sub"]
    assert (cursor["revision"], cursor["isUnderRevision"]) == (1, False)
    producer.close()
    consumer.close()


# --- the collector on its own (typed fakes of broker.metrics.sources) ---------------------------
@dataclasses.dataclass
class _FakeBucketTracker:
    size: int = 10
    memory_bytes: int = 240
    bucket_count: int = 3
    loaded_index_count: int = 10
    snapshot_size_bytes: int = 4096
    op_count: dict[tuple[str, str], int] = dataclasses.field(default_factory=lambda: {
        ("create", "succeed"): 2, ("create", "failed"): 1, ("load", "failed"): 1})
    op_latency_buckets: dict[str, list[int]] = dataclasses.field(
        default_factory=lambda: {"create": [1, 1, 0, 0, 0, 0, 0, 0]})
    op_latency_sum_ms: dict[str, float] = dataclasses.field(
        default_factory=lambda: {"create": 120.0})
    cancel_journal_failures: int = 0

    def __len__(self) -> int:
        return self.size

    def cancel_stats(self) -> CancelStats:
        return CancelStats(applied_total=6, refused_total=2, pending=4)


@dataclasses.dataclass
class _FakeMemoryTracker:
    size: int = 7
    memory_bytes: int = 100

    def __len__(self) -> int:
        return self.size

    def cancel_stats(self) -> CancelStats:
        return CancelStats(applied_total=0, refused_total=0, pending=0)


@dataclasses.dataclass
class _FakeCursor:
    backlog: int = 0
    revision: int = 0


@dataclasses.dataclass
class _FakeConsumer:
    unacked_messages: int = 0


@dataclasses.dataclass
class _FakeRevisions:
    increase_count: int = 0
    task_state: int = 0


@dataclasses.dataclass
class _FakeDelayed:
    due_total: int = 0
    read_ahead_total: int = 0
    next_due: int | None = None
    last_due: int | None = None

    def next_due_ms(self) -> int | None:
        return self.next_due

    def last_due_ms(self) -> int | None:
        return self.last_due


@dataclasses.dataclass
class _FakeSubscription:
    cursor: _FakeCursor = dataclasses.field(default_factory=_FakeCursor)
    revisions: _FakeRevisions = dataclasses.field(default_factory=_FakeRevisions)
    consumers: list[_FakeConsumer] = dataclasses.field(default_factory=list)
    msg_out_counter: int = 0
    bytes_out_counter: int = 0
    blocked_on_unacked: bool = False
    paused_on_ack_state: bool = False
    delayed_tracker: _FakeBucketTracker | _FakeMemoryTracker | None = None
    delayed: _FakeDelayed = dataclasses.field(default_factory=_FakeDelayed)
    redeliver: float = 0.0

    def redeliver_rate(self) -> float:
        return self.redeliver

    @property
    def msg_delayed(self) -> int:
        return len(self.delayed_tracker) if self.delayed_tracker is not None else 0

    @property
    def bucket_index(self) -> _FakeBucketTracker | None:
        tracker = self.delayed_tracker
        return tracker if isinstance(tracker, _FakeBucketTracker) else None


@dataclasses.dataclass
class _FakeTopic:
    full: str
    subscriptions: dict[str, _FakeSubscription] = dataclasses.field(default_factory=dict)
    producers: dict[str, object] = dataclasses.field(default_factory=dict)
    msg_in_counter: int = 0
    bytes_in_counter: int = 0
    msg_out_counter: int = 0
    bytes_out_counter: int = 0
    delayed_rejected_counter: int = 0
    fixed_delay_overridden_counter: int = 0
    dedup_producers_evicted_counter: int = 0
    publish_rate: PublishRateLimiter = dataclasses.field(default_factory=PublishRateLimiter)
    storage_size: int = 0
    publish_latency_buckets: list[int] = dataclasses.field(default_factory=lambda: [0] * 10)
    publish_latency_sum_ms: float = 0.0
    storage_logical_size: int = 0
    backlog_bytes: int = 0
    write_read_rates: tuple[float, float] = (0.0, 0.0)
    quota_limits: tuple[int, int] = (-1, -1)
    backlog_age: int = -1
    entry_size_buckets: list[int] = dataclasses.field(default_factory=lambda: [0] * 9)
    entry_size_sum_bytes: int = 0

    @property
    def meters(self) -> _FakeTopic:
        """The fake keeps its counters itself (a real topic's are its ``meters``)."""
        return self

    def rates(self) -> tuple[float, float, float, float]:
        return 0.0, 0.0, 0.0, 0.0

    def storage_rates(self) -> tuple[float, float]:
        return self.write_read_rates

    def rate_figures(self) -> tuple[float, ...]:
        return (*self.rates(), *self.storage_rates())

    def backlog_size_bytes(self) -> int:
        return self.backlog_bytes

    def backlog_quota_limits(self) -> tuple[int, int]:
        return self.quota_limits

    def backlog_age_seconds(self) -> int:
        return self.backlog_age


def storage_stats_with(**values: float) -> StorageStats:
    """A StorageStats of zeros but *values* (field name -> value)."""
    fields = {f.name: (False if f.type in ("bool", bool) else 0)
              for f in dataclasses.fields(StorageStats)}
    fields.update(values)
    return StorageStats(**fields)  # type: ignore[arg-type]


@dataclasses.dataclass
class _FakeService:
    config: BrokerConfig
    topics: dict[str, _FakeTopic] = dataclasses.field(default_factory=dict)
    stats: StorageStats = dataclasses.field(default_factory=storage_stats_with)
    publish_refused: dict[str, int] = dataclasses.field(default_factory=lambda: {"disk": 0})
    transactions: None = None   # no transaction coordinator

    def storage_stats(self) -> StorageStats:
        return self.stats


def _fake_service(*, topic_level: bool = True) -> MetricsSource:
    sub = _FakeSubscription(cursor=_FakeCursor(backlog=5, revision=9),
                            revisions=_FakeRevisions(increase_count=4, task_state=1),
                            consumers=[_FakeConsumer(unacked_messages=2)],
                            delayed_tracker=_FakeBucketTracker(),
                            delayed=_FakeDelayed(due_total=7, read_ahead_total=3,
                                                 next_due=1_767_225_600_000,
                                                 last_due=1_767_225_601_500),
                            msg_out_counter=8, bytes_out_counter=80)
    topic = _FakeTopic(
        f"{T}/fake", subscriptions={"s": sub}, producers={"p": object()}, msg_in_counter=20,
        bytes_in_counter=200, msg_out_counter=8, bytes_out_counter=80,
        delayed_rejected_counter=3, fixed_delay_overridden_counter=4, storage_size=1000,
        publish_latency_buckets=[1, 2, 0, 0, 0, 0, 0, 0, 0, 1], publish_latency_sum_ms=2000.5)
    config = BrokerConfig(cluster_name="c1", expose_topic_level_metrics_in_prometheus=topic_level)
    return _FakeService(config, {topic.full: topic})


def _exposition(service: MetricsSource, probe: LoopLagProbe | None = None, **figures: Any) -> str:
    registry = CollectorRegistry()
    registry.register(HoraeCollector(service, lag_probe=probe, **figures))
    return generate_latest(registry).decode()


def test_collector_reads_plain_counters_trackers_and_histograms() -> None:
    samples = _samples(_exposition(_fake_service()))
    topic = {"cluster": "c1", "namespace": "public/default", "topic": f"{T}/fake"}
    sub = {**topic, "subscription": "s"}
    assert _value(samples, "pulsar_in_messages_total", **topic) == 20
    assert _value(samples, "pulsar_storage_size", **topic) == 1000
    assert _value(samples, "pulsar_producers_count", **topic) == 1
    assert _value(samples, "pulsar_broker_topic_messages_delayed_rejected_total", **topic) == 3
    assert _value(samples, "pulsar_broker_topic_messages_fixed_delay_overridden_total",
                  **topic) == 4
    assert _value(samples, "pulsar_subscription_back_log", **sub) == 5
    assert _value(samples, "pulsar_subscription_unacked_messages", **sub) == 2
    assert _value(samples, "pulsar_subscription_delayed", **sub) == 10
    assert _value(samples, "pulsar_cursor_epoch_increase_count", **sub) == 4  # not revision 9
    assert _value(samples, "pulsar_cursor_epoch_increase_task_state", **sub) == 1
    assert _value(samples, "pulsar_subscription_delayed_cancels_applied_total", **sub) == 6
    assert _value(samples, "pulsar_subscription_delayed_cancels_refused_total", **sub) == 2
    assert _value(samples, "pulsar_subscription_delayed_cancels_pending", **sub) == 4
    assert _value(samples, "horae_subscription_delayed_due_total", **sub) == 7
    assert _value(samples, "horae_subscription_delayed_read_ahead_total", **sub) == 3
    assert _value(samples, "horae_subscription_delayed_next_due_timestamp_seconds",
                  **sub) == 1_767_225_600.0
    assert _value(samples, "horae_subscription_delayed_last_due_timestamp_seconds",
                  **sub) == 1_767_225_601.5
    assert _value(samples, "pulsar_delayed_message_index_size_bytes", **topic) == 240
    assert _value(samples, "pulsar_delayed_message_index_bucket_total", **sub) == 3
    assert _value(samples, "pulsar_delayed_message_index_loaded", **sub) == 10
    assert _value(samples, "pulsar_delayed_message_index_bucket_snapshot_size_bytes",
                  **sub) == 4096
    assert _value(samples, "pulsar_delayed_message_index_bucket_op_count",
                  state="succeed", type="create", **sub) == 2
    assert _value(samples, "pulsar_delayed_message_index_bucket_op_count",
                  state="failed", type="load", **topic) == 1
    assert _value(samples, "pulsar_delayed_message_index_bucket_op_count",
                  state="all", type="create", **sub) == 3
    assert _value(samples, "pulsar_delayed_message_index_bucket_op_latency_ms_bucket",
                  le="100", type="create", **sub) == 2
    assert _value(samples, "pulsar_delayed_message_index_bucket_op_latency_ms_sum",
                  type="create", **sub) == 120
    # Pulsar's storage write latency buckets (ms), cumulative.
    assert _value(samples, "pulsar_storage_write_latency_bucket", le="0.5", **topic) == 1
    assert _value(samples, "pulsar_storage_write_latency_bucket", le="1", **topic) == 3
    assert _value(samples, "pulsar_storage_write_latency_bucket", le="1000", **topic) == 3
    assert _value(samples, "pulsar_storage_write_latency_bucket", le="+Inf", **topic) == 4
    assert _value(samples, "pulsar_storage_write_latency_sum", **topic) == 2000.5


def test_collector_without_topic_level_metrics_sums_per_namespace() -> None:
    samples = _samples(_exposition(_fake_service(topic_level=False)))
    assert _value(samples, "pulsar_in_messages_total", namespace="public/default") == 20
    assert all("topic" not in s.labels for s in samples["pulsar_in_messages_total"])
    assert "pulsar_subscription_back_log" not in samples


def test_collector_reports_zeros_for_a_subscription_without_tracker() -> None:
    topic = _FakeTopic(f"{T}/bare", subscriptions={"s": _FakeSubscription()})
    samples = _samples(_exposition(_FakeService(BrokerConfig(), {topic.full: topic})))
    assert _value(samples, "pulsar_in_messages_total", topic=f"{T}/bare") == 0
    assert _value(samples, "pulsar_subscription_delayed", topic=f"{T}/bare") == 0
    assert _value(samples, "pulsar_delayed_message_index_bucket_total",
                  topic=f"{T}/bare") is None


def test_in_memory_tracker_reports_its_size_as_loaded_and_no_buckets() -> None:
    sub = _FakeSubscription(delayed_tracker=_FakeMemoryTracker(size=7, memory_bytes=100))
    topic = _FakeTopic(f"{T}/mem", subscriptions={"s": sub})
    samples = _samples(_exposition(_FakeService(BrokerConfig(), {topic.full: topic})))
    labels = {"topic": f"{T}/mem", "subscription": "s"}
    assert _value(samples, "pulsar_delayed_message_index_loaded", **labels) == 7
    assert _value(samples, "pulsar_delayed_message_index_bucket_total", **labels) == 0
    assert _value(samples, "pulsar_subscription_delayed_message_index_size_bytes",
                  **labels) == 100
    assert samples.get("pulsar_delayed_message_index_bucket_op_count", []) == []


def test_cancel_journal_failures_are_exported_per_topic_and_namespace() -> None:
    def service(topic_level: bool) -> MetricsSource:
        sub = _FakeSubscription(delayed_tracker=_FakeBucketTracker(cancel_journal_failures=3))
        topic = _FakeTopic(f"{T}/journal", subscriptions={"s": sub, "t": sub})
        config = BrokerConfig(expose_topic_level_metrics_in_prometheus=topic_level)
        return _FakeService(config, {topic.full: topic})

    by_topic = _samples(_exposition(service(True)))
    by_ns = _samples(_exposition(service(False)))
    assert _value(by_topic, "horae_delayed_cancel_journal_failures_total",
                  topic=f"{T}/journal") == 6   # two subscriptions' trackers
    assert _value(by_ns, "horae_delayed_cancel_journal_failures_total",
                  namespace="public/default") == 6


def test_publish_buffer_throttled_times_are_exported_when_handed_over() -> None:
    service = _FakeService(BrokerConfig(cluster_name="c1"))
    assert "horae_publish_buffer_throttled_total" not in _samples(_exposition(service))
    buffer = PublishBuffer(1)
    buffer.add(1 << 20)   # full: throttled once
    buffer.release(1 << 20)
    buffer.add(1 << 20)   # and again
    samples = _samples(_exposition(service, publish_buffer=buffer))
    assert _value(samples, "horae_publish_buffer_throttled_total", cluster="c1") == 2


def test_loop_lag_probe_buckets_lateness() -> None:
    probe = LoopLagProbe()
    for lag in (0.0005, 0.02, 7.0):
        probe.record(lag)
    samples = _samples(_exposition(_FakeService(BrokerConfig()), probe))
    assert _value(samples, "horae_event_loop_lag_seconds") == 7.0
    assert _value(samples, "horae_event_loop_lag_histogram_seconds_bucket", le="0.001") == 1
    assert _value(samples, "horae_event_loop_lag_histogram_seconds_bucket", le="0.025") == 2
    assert _value(samples, "horae_event_loop_lag_histogram_seconds_bucket", le="+Inf") == 3
    assert _value(samples, "horae_event_loop_lag_histogram_seconds_count") == 3


def test_registry_holds_process_metrics_and_stays_private() -> None:
    text = generate_latest(BrokerMetrics(_FakeService(BrokerConfig())).registry).decode()
    names = {f.name for f in text_string_to_metric_families(text)}
    assert {"process_cpu_seconds", "pulsar_in_messages"} <= names
    # Two brokers' metrics in one process share nothing: each reads its own figures.
    one, two = _FakeService(BrokerConfig(cluster_name="one")), _FakeService(BrokerConfig())
    throttled = PublishBuffer(1)
    throttled.add(1 << 20)
    first = BrokerMetrics(one, publish_buffer=throttled,
                          connections=ConnectionFigures(OutputPauses()))
    second = BrokerMetrics(two)
    first_names = {m.name for m in first.collect()}
    second_names = {m.name for m in second.collect()}
    assert {"horae_publish_buffer_throttled", "horae_connection_output_paused"} <= first_names
    assert not {"horae_publish_buffer_throttled",
                "horae_connection_output_paused"} & second_names


def test_bucket_tracker_figures_reach_the_exposition(broker_factory: Any) -> None:
    from .conftest import http

    handle = broker_factory(config_overrides={
        "delayedDeliveryTrackerFactoryClassName": "bucket"})
    client = pulsar.Client(handle.service_url, operation_timeout_seconds=10,
                           logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn))
    try:
        topic = f"{T}/bucketed"
        consumer = client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Shared)
        producer = client.create_producer(topic, batching_enabled=False)
        producer.send(b"later", deliver_after=datetime.timedelta(minutes=10))
        labels = {"topic": topic, "subscription": "sub"}
        def scraped_with_a_bucket() -> dict[str, list[Any]] | None:
            samples = _samples(http(handle.web_url, "GET", "/metrics").body)
            buckets = _value(samples, "pulsar_delayed_message_index_bucket_total", **labels)
            return samples if buckets is not None and buckets >= 1 else None

        samples = wait_until(scraped_with_a_bucket, timeout_s=WAIT_S,
                             message="pulsar_delayed_message_index_bucket_total reaches 1")
        assert _value(samples, "pulsar_delayed_message_index_loaded", **labels) == 1
        assert _value(samples, "pulsar_delayed_message_index_bucket_op_count",
                      state="all", type="create", **labels) is not None
        assert _value(samples, "pulsar_delayed_message_index_bucket_op_latency_ms_count",
                      type="create", **labels) is not None
        producer.close()
        consumer.close()
    finally:
        client.close()


def test_snapshot_exporter_sees_the_same_families_as_metrics(broker: Any) -> None:
    from broker.admin.app import METRICS_KEY

    expected = {"pulsar_in_messages", "process_cpu_seconds", "horae_event_loop_lag_seconds",
                "pulsar_storage_write_latency", "horae_publish_buffer_throttled",
                "horae_connection_output_paused", "horae_http_connections"}
    metrics = broker.call(lambda: broker.server.metrics)
    names = broker.call(lambda: {m.name for m in metrics.collect()})
    assert expected <= names
    # The web app serves the very object the exporter collects (one composition).
    app = broker.call(lambda: broker.server._runner.app)
    assert app[METRICS_KEY] is metrics


def test_storage_health_and_publish_refusals_are_exported_under_the_alerted_names() -> None:
    service = _fake_service()
    assert isinstance(service, _FakeService)
    service.stats = storage_stats_with(
        failed_fsyncs=2, corrupt_records=3, truncated_bytes=40, cursor_fallbacks=1,
        read_only=True, disk_usage=0.96, oldest_unsaved_ack_seconds=1.5, cursors_failing_save=1,
        relocated_entries=6, relocated_bytes=1300, relocated_ledgers=3, cache_hits=11,
        cache_misses=5, interpreter_waits=8, interpreter_wait_seconds=0.25,
        interpreter_yields=4, interpreter_yield_seconds=0.01)
    service.publish_refused = {"disk": 7}
    scraped = _samples(_exposition(service))
    assert _value(scraped, "horae_storage_fsync_failures_total", cluster="c1") == 2
    assert _value(scraped, "horae_storage_corrupt_records_total", cluster="c1") == 3
    assert _value(scraped, "horae_storage_truncated_bytes_total", cluster="c1") == 40
    assert _value(scraped, "horae_storage_cursor_fallbacks_total", cluster="c1") == 1
    assert _value(scraped, "horae_storage_read_only", cluster="c1") == 1
    assert _value(scraped, "horae_storage_disk_usage_ratio", cluster="c1") == 0.96
    assert _value(scraped, "horae_storage_oldest_unsaved_ack_age_seconds", cluster="c1") == 1.5
    assert _value(scraped, "horae_storage_cursors_failing_save", cluster="c1") == 1
    assert _value(scraped, "horae_storage_relocated_entries", cluster="c1") == 6
    assert _value(scraped, "horae_storage_relocated_bytes", cluster="c1") == 1300
    assert _value(scraped, "horae_storage_relocated_ledgers", cluster="c1") == 3
    assert _value(scraped, "horae_storage_cache_hits_total", cluster="c1") == 11
    assert _value(scraped, "horae_storage_cache_misses_total", cluster="c1") == 5
    assert _value(scraped, "horae_storage_interpreter_waits_total", cluster="c1") == 8
    assert _value(scraped, "horae_storage_interpreter_wait_seconds_total", cluster="c1") == 0.25
    assert _value(scraped, "horae_storage_interpreter_yields_total", cluster="c1") == 4
    assert _value(scraped, "horae_storage_interpreter_yield_seconds_total", cluster="c1") == 0.01
    assert _value(scraped, "horae_publish_refused_total", cluster="c1", reason="disk") == 7


def _storage_topic(name: str, **kw: Any) -> _FakeTopic:
    sub = _FakeSubscription(cursor=_FakeCursor(backlog=3), redeliver=2.5,
                            consumers=[_FakeConsumer()])
    fields: dict[str, Any] = {
        "subscriptions": {"s": sub}, "storage_size": 4000, "storage_logical_size": 4000,
        "backlog_bytes": 1200, "write_read_rates": (5.0, 7.5), "quota_limits": (10_000, 600),
        "backlog_age": 42,
        # 128 B: 1, 1 KB: 2, 2 KB: 1, 1 MB: 0, over 1 MB: 1
        "entry_size_buckets": [1, 0, 2, 1, 0, 0, 0, 0, 1], "entry_size_sum_bytes": 2_100_000}
    fields.update(kw)
    return _FakeTopic(name, **fields)


def test_collector_exports_pulsar_storage_and_subscription_series() -> None:
    topic = _storage_topic(f"{T}/stored")
    samples = _samples(_exposition(_FakeService(BrokerConfig(cluster_name="c1"),
                                                {topic.full: topic})))
    labels = {"cluster": "c1", "namespace": "public/default", "topic": topic.full}
    sub = {**labels, "subscription": "s"}
    expected = {
        "pulsar_storage_logical_size": 4000, "pulsar_storage_backlog_size": 1200,
        "pulsar_storage_write_rate": 5.0, "pulsar_storage_read_rate": 7.5,
        "pulsar_storage_backlog_quota_limit": 10_000,
        "pulsar_storage_backlog_quota_limit_time": 600,
        "pulsar_storage_backlog_age_seconds": 42,
        "pulsar_entry_size_le_128": 1, "pulsar_entry_size_le_512": 0,
        "pulsar_entry_size_le_1_kb": 2, "pulsar_entry_size_le_2_kb": 1,
        "pulsar_entry_size_le_4_kb": 0, "pulsar_entry_size_le_16_kb": 0,
        "pulsar_entry_size_le_100_kb": 0, "pulsar_entry_size_le_1_mb": 0,
        "pulsar_entry_size_le_overflow": 1,
        "pulsar_entry_size_count": 5, "pulsar_entry_size_sum": 2_100_000,
    }
    for name, value in expected.items():
        assert _value(samples, name, **labels) == value, name
        assert [s.labels for s in samples[name]] == [labels], name
    assert _value(samples, "pulsar_subscription_msg_rate_redeliver", **sub) == 2.5
    assert _value(samples, "pulsar_subscription_blocked_on_unacked_messages", **sub) == 0
    blocked = _storage_topic(f"{T}/blocked")
    blocked.subscriptions["s"].blocked_on_unacked = True
    samples = _samples(_exposition(_FakeService(BrokerConfig(), {blocked.full: blocked})))
    assert _value(samples, "pulsar_subscription_blocked_on_unacked_messages",
                  topic=blocked.full, subscription="s") == 1
    assert _value(samples, "pulsar_subscription_paused_on_ack_state",
                  topic=blocked.full, subscription="s") == 0
    blocked.subscriptions["s"].paused_on_ack_state = True
    samples = _samples(_exposition(_FakeService(BrokerConfig(), {blocked.full: blocked})))
    assert _value(samples, "pulsar_subscription_paused_on_ack_state",
                  topic=blocked.full, subscription="s") == 1


def test_namespace_level_storage_series_sum_sizes_and_take_the_largest_limits() -> None:
    a = _storage_topic(f"{T}/a", quota_limits=(-1, -1), backlog_age=-1)
    b = _storage_topic(f"{T}/b", backlog_age=7)
    config = BrokerConfig(cluster_name="c1", expose_topic_level_metrics_in_prometheus=False)
    samples = _samples(_exposition(_FakeService(config, {a.full: a, b.full: b})))
    ns = {"cluster": "c1", "namespace": "public/default"}
    assert _value(samples, "pulsar_storage_backlog_size", **ns) == 2400
    assert _value(samples, "pulsar_storage_write_rate", **ns) == 10.0
    assert _value(samples, "pulsar_storage_backlog_quota_limit", **ns) == 10_000
    assert _value(samples, "pulsar_storage_backlog_quota_limit_time", **ns) == 600
    assert _value(samples, "pulsar_storage_backlog_age_seconds", **ns) == 7
    assert _value(samples, "pulsar_entry_size_le_1_kb", **ns) == 4
    assert _value(samples, "pulsar_entry_size_count", **ns) == 10
    assert all("topic" not in s.labels for s in samples["pulsar_entry_size_sum"])
    assert "pulsar_subscription_msg_rate_redeliver" not in samples


def test_entry_size_gauges_cover_the_last_stats_window() -> None:
    now = [1000.0]
    topic = _storage_topic(f"{T}/windowed")
    service = _FakeService(BrokerConfig(), {topic.full: topic})
    registry = CollectorRegistry()
    registry.register(HoraeCollector(service, clock=lambda: now[0]))

    def scrape() -> dict[str, list[Any]]:
        return _samples(generate_latest(registry).decode())

    assert _value(scrape(), "pulsar_entry_size_count", topic=topic.full) == 5  # in progress
    now[0] += 61.0
    assert _value(scrape(), "pulsar_entry_size_count", topic=topic.full) == 5  # closed
    topic.entry_size_buckets[0] += 3          # three more 128-byte entries
    topic.entry_size_sum_bytes += 300
    now[0] += 61.0                            # the next window: only what came in it
    samples = scrape()
    assert _value(samples, "pulsar_entry_size_le_128", topic=topic.full) == 3
    assert _value(samples, "pulsar_entry_size_le_overflow", topic=topic.full) == 0
    assert _value(samples, "pulsar_entry_size_count", topic=topic.full) == 3
    assert _value(samples, "pulsar_entry_size_sum", topic=topic.full) == 300


def test_backlog_age_follows_the_backlog_quota_check(broker_factory: Any) -> None:
    from .conftest import http

    handle = broker_factory(config_overrides={"backlogQuotaCheckIntervalInSeconds": 1})
    client = pulsar.Client(handle.service_url, operation_timeout_seconds=10,
                           logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn))
    topic = f"{T}/aged"

    def age_when(accept: Any) -> bool:
        reply = http(handle.web_url, "GET", "/metrics")
        seen = _value(_samples(reply.body), "pulsar_storage_backlog_age_seconds", topic=topic)
        return seen is not None and bool(accept(seen))

    try:
        consumer = client.subscribe(topic, "sub")
        producer = client.create_producer(topic, batching_enabled=False)
        producer.send(b"waiting")
        # The backlog's oldest message is noted at a check: an age of zero or more seconds.
        wait_until(lambda: age_when(lambda v: v >= 0), timeout_s=WAIT_S,
                   message="the backlog age is known")
        msg = consumer.receive(10_000)
        consumer.acknowledge(msg)
        # Nothing left once the ack arrives: a later check says 0, and the size series agree.
        wait_until(lambda: age_when(lambda v: v == 0), timeout_s=WAIT_S,
                   message="the backlog age drops to 0 once everything is acknowledged")
        samples = _samples(http(handle.web_url, "GET", "/metrics").body)
        assert _value(samples, "pulsar_storage_backlog_size", topic=topic) == 0
        assert _value(samples, "pulsar_storage_backlog_quota_limit", topic=topic) == -1
        assert _value(samples, "pulsar_storage_backlog_quota_limit_time", topic=topic) == -1
    finally:
        client.close()
