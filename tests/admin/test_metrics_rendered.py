"""Per-topic rendered series: the cached /metrics text and snapshot file equal the uncached
ones byte for byte as topics change, and only the topics that changed are rendered again."""

from __future__ import annotations

import gzip
import pathlib

from prometheus_client import generate_latest

from broker.config import BrokerConfig
from broker.metrics.collector import PROMETHEUS, SNAPSHOT, HoraeCollector, _Families, render_text
from broker.metrics.snapshots import MetricSnapshotWriter

from .test_admin_metrics import (
    T,
    _FakeBucketTracker,
    _FakeConsumer,
    _FakeCursor,
    _FakeService,
    _FakeSubscription,
    _FakeTopic,
)

TS = 1_767_225_600_000


def _service() -> _FakeService:
    delayed = _FakeSubscription(cursor=_FakeCursor(backlog=3), delayed_tracker=_FakeBucketTracker(),
                                consumers=[_FakeConsumer(unacked_messages=1)])
    a = _FakeTopic(f"{T}/a", subscriptions={"d": delayed}, producers={"p": object()},
                   msg_in_counter=4, storage_size=400)
    b = _FakeTopic(f"{T}/b", producers={"p": object()})
    c = _FakeTopic(f"{T}/c", subscriptions={"s": _FakeSubscription(
        cursor=_FakeCursor(backlog=5), consumers=[_FakeConsumer(unacked_messages=2),
                                                  _FakeConsumer()])})
    config = BrokerConfig(cluster_name="c1")
    return _FakeService(config, {t.full: t for t in (a, b, c)})


class _Check:
    def __init__(self, service: _FakeService, root: pathlib.Path) -> None:
        self.now = 1000.0
        self.collector = HoraeCollector(service, clock=lambda: self.now)
        self.root = root
        self.rounds = 0

    async def outputs_match(self) -> dict[str, object]:
        """Uncached and cached outputs of one moment are equal; the kept entries by topic."""
        collector = self.collector
        uncached = await collector.collect_async()
        prometheus = render_text(await collector.collect_rendered_async(PROMETHEUS))
        snapshot = await collector.collect_rendered_async(SNAPSHOT)
        assert prometheus == generate_latest(_Families(uncached))
        self.rounds += 1
        plain = MetricSnapshotWriter(self.root / f"plain-{self.rounds}", "b:8080", "c1", 0)
        cached = MetricSnapshotWriter(self.root / "cached", "b:8080", "c1", 0)
        # The text, not the gzip stream: how the writer splits its writes may change the
        # compressed bytes of the same text.
        expected = gzip.decompress(plain.write(plain.collect_rows(uncached, TS), TS).read_bytes())
        assert gzip.decompress(cached.write_families(snapshot, TS).read_bytes()) == expected
        assert collector._rendered[PROMETHEUS].keys() == collector._rendered[SNAPSHOT].keys()
        return dict(collector._rendered[PROMETHEUS])


async def test_rendered_series_equal_the_uncached_ones_and_only_changed_topics_render(
        tmp_path: pathlib.Path) -> None:
    service = _service()
    a, b, c = (service.topics[f"{T}/{n}"] for n in "abc")
    check = _Check(service, tmp_path)
    first = await check.outputs_match()
    assert set(first) == {a.full, b.full, c.full}

    def moved(before: dict[str, object], after: dict[str, object]) -> set[str]:
        return {name for name, entry in after.items() if before.get(name) is not entry}

    check.now += 5   # nothing happened
    idle = await check.outputs_match()
    assert moved(first, idle) == set()

    b.msg_in_counter += 10   # a publish
    b.bytes_in_counter += 1000
    b.publish_latency_buckets[2] += 1
    b.publish_latency_sum_ms += 3.5
    b.entry_size_buckets[3] += 1
    b.entry_size_sum_bytes += 1000
    b.storage_size += 1000
    published = await check.outputs_match()
    assert moved(idle, published) == {b.full}

    c.subscriptions["s"].cursor.backlog = 2   # an ack
    c.subscriptions["s"].consumers[0].unacked_messages = 0
    acked = await check.outputs_match()
    assert moved(published, acked) == {c.full}

    b.subscriptions["new"] = _FakeSubscription()   # a new subscription
    subscribed = await check.outputs_match()
    assert moved(acked, subscribed) == {b.full}

    c.subscriptions["s"].consumers.pop()   # a consumer disconnects
    disconnected = await check.outputs_match()
    assert moved(subscribed, disconnected) == {c.full}

    c.subscriptions["s"].msg_out_counter += 7   # a dispatch: the subscription's rate moves
    c.subscriptions["s"].bytes_out_counter += 700
    check.now += 2
    dispatched = await check.outputs_match()
    assert moved(disconnected, dispatched) == {c.full}
    check.now += 2   # and falls back to zero
    settled = await check.outputs_match()
    assert moved(dispatched, settled) == {c.full}

    del service.topics[a.full]   # a topic deleted (unloaded)
    deleted = await check.outputs_match()
    assert set(deleted) == {b.full, c.full}
    assert moved(settled, deleted) == set()

    b.quota_limits = (1 << 20, 3600)   # a backlog quota policy set
    b.backlog_age = 0
    policed = await check.outputs_match()
    assert moved(deleted, policed) == {b.full}

    # The write-latency and entry-size windows: the first one (b's publish in it) completes
    # with what it showed in progress, the next holds nothing: b's bucket gauges drop.
    check.now += 61
    rolled = await check.outputs_match()
    assert moved(policed, rolled) == set()
    check.now += 61
    quiet = await check.outputs_match()
    assert moved(rolled, quiet) == {b.full}
    check.now += 61
    assert moved(quiet, await check.outputs_match()) == set()

    service.topics[a.full] = a   # loaded again
    assert moved(quiet, await check.outputs_match()) == {a.full}


async def test_namespace_level_series_are_not_kept_per_topic(tmp_path: pathlib.Path) -> None:
    service = _service()
    service.config = BrokerConfig(cluster_name="c1",
                                  expose_topic_level_metrics_in_prometheus=False)
    collector = HoraeCollector(service, clock=lambda: 1000.0)
    uncached = await collector.collect_async()
    rendered = await collector.collect_rendered_async(PROMETHEUS)
    assert render_text(rendered) == generate_latest(_Families(uncached))
    assert collector._rendered == {}
