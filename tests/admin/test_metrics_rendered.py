"""Per-topic rendered series: the cached /metrics text and snapshot file equal the uncached
ones byte for byte as topics change, and only the topics that changed are rendered again."""

from __future__ import annotations

import dataclasses
import gzip
import pathlib
import tempfile

from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import generate_latest
from prometheus_client.core import GaugeMetricFamily

from broker.config import BrokerConfig
from broker.metrics.collector import (
    CHUNK_PARTS,
    PROMETHEUS,
    SNAPSHOT,
    HoraeCollector,
    render_chunks,
    render_text,
)
from broker.metrics.exposition import CollectedFamilies, RenderedFamily
from broker.metrics.snapshots import MetricSnapshotWriter

from .test_admin_metrics import (
    T,
    _FakeBucketTracker,
    _FakeConsumer,
    _FakeCursor,
    _FakeDelayed,
    _FakeMemoryTracker,
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
        assert prometheus == generate_latest(CollectedFamilies(uncached))
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
    assert render_text(rendered) == generate_latest(CollectedFamilies(uncached))
    assert collector._rendered == {}


_NAMES = st.text(st.characters(codec="utf-8"), min_size=1, max_size=12)
_COUNTS = st.integers(0, 1 << 60)
_FIGURES = st.one_of(st.integers(-(1 << 60), 1 << 60),
                     st.floats(allow_nan=False, allow_infinity=True, width=64))


@st.composite
def _topics(draw: st.DrawFn) -> list[_FakeTopic]:
    """Topics with figures of every kind: large counts, fractions, negative zero and
    infinities where a float goes, quota limits, subscriptions (some with a tracker and due
    times) whose names need escaping, and several namespaces."""
    topics = []
    for n in range(draw(st.integers(1, 4))):
        subs = {}
        for name in draw(st.lists(_NAMES, max_size=3, unique=True)):
            tracker = draw(st.sampled_from([None, "memory", "bucket"]))
            subs[name] = _FakeSubscription(
                cursor=_FakeCursor(backlog=draw(_COUNTS)),
                consumers=[_FakeConsumer(unacked_messages=draw(_COUNTS))
                           for _ in range(draw(st.integers(0, 2)))],
                msg_out_counter=draw(_COUNTS), bytes_out_counter=draw(_COUNTS),
                blocked_on_unacked=draw(st.booleans()),
                delayed_tracker=(None if tracker is None else _FakeMemoryTracker()
                                 if tracker == "memory" else _FakeBucketTracker()),
                delayed=_FakeDelayed(due_total=draw(_COUNTS),
                                     next_due=draw(st.none() | st.integers(0, 1 << 45)),
                                     last_due=draw(st.none() | st.integers(0, 1 << 45))),
                redeliver=draw(_FIGURES))
        namespace = draw(st.sampled_from(["public/default", "t\u00e9/n\"s"]))
        topics.append(_FakeTopic(
            f"persistent://{namespace}/{n}-{draw(_NAMES)}", subscriptions=subs,
            producers={str(i): object() for i in range(draw(st.integers(0, 2)))},
            msg_in_counter=draw(_COUNTS), bytes_in_counter=draw(_COUNTS),
            storage_size=draw(_COUNTS), backlog_bytes=draw(_COUNTS),
            publish_latency_buckets=draw(st.lists(_COUNTS, min_size=10, max_size=10)),
            publish_latency_sum_ms=draw(_FIGURES),
            write_read_rates=(draw(_FIGURES), draw(_FIGURES)),
            quota_limits=(draw(_COUNTS), draw(st.integers(-1, 1 << 40))),
            backlog_age=draw(st.integers(-1, 1 << 40)),
            entry_size_buckets=draw(st.lists(_COUNTS, min_size=9, max_size=9)),
            entry_size_sum_bytes=draw(_COUNTS)))
    return topics


@settings(max_examples=60, deadline=None)
@given(topics=_topics(), later=_topics())
async def test_lines_written_from_records_equal_the_serialisers_own(
        topics: list[_FakeTopic], later: list[_FakeTopic]) -> None:
    """Whatever a topic's figures, its text written straight from its record (at its first
    scrape, and when its figures change under the same series) is the text prometheus_client
    and the snapshot writer serialise from the families of an uncached collect."""
    config = BrokerConfig(cluster_name="c1")
    service = _FakeService(config, {t.full: t for t in topics})
    now = [1000.0]
    collector = HoraeCollector(service, clock=lambda: now[0])
    with tempfile.TemporaryDirectory() as tmp:
        root = pathlib.Path(tmp)
        for rounds in range(3):
            if rounds == 1:   # the same topics and series, other figures
                for old, new in zip(topics, later, strict=False):
                    new.full, new.subscriptions = old.full, {
                        name: dataclasses.replace(new_sub, delayed_tracker=sub.delayed_tracker,
                                                  delayed=dataclasses.replace(
                                                      new_sub.delayed,
                                                      next_due=sub.delayed.next_due,
                                                      last_due=sub.delayed.last_due))
                        for (name, sub), new_sub in zip(
                            old.subscriptions.items(),
                            [*new.subscriptions.values(), *old.subscriptions.values()],
                            strict=False)}
                    service.topics[old.full] = new
            now[0] += 61
            uncached = await collector.collect_async()
            prometheus = render_text(await collector.collect_rendered_async(PROMETHEUS))
            assert prometheus == generate_latest(CollectedFamilies(uncached))
            snapshot = await collector.collect_rendered_async(SNAPSHOT)
            plain = MetricSnapshotWriter(root / f"plain-{rounds}", "b:8080", "c1", 0)
            cached = MetricSnapshotWriter(root / f"cached-{rounds}", "b:8080", "c1", 0)
            expected = plain.write(plain.collect_rows(uncached, TS), TS).read_bytes()
            written = cached.write_families(snapshot, TS).read_bytes()
            assert gzip.decompress(written) == gzip.decompress(expected)


def test_a_metrics_body_is_rendered_in_bounded_pieces() -> None:
    """The /metrics body comes in pieces of at most CHUNK_PARTS topics' text of one family
    (the renderer holds the interpreter for one piece at a time), and the pieces are the body."""
    topics = 2 * CHUNK_PARTS + 5
    lines = [f'pulsar_rate_in{{topic="t{i}"}} {i}.0\n' for i in range(topics)]
    big = RenderedFamily("pulsar_rate_in", "Publish rate", "gauge", lines)
    encoded = RenderedFamily("pulsar_rate_out", "Dispatch rate", "gauge",
                             [line.replace("_in", "_out").encode() for line in lines[:3]])
    empty = RenderedFamily("pulsar_storage_size", "Bytes stored", "gauge", [])
    plain = GaugeMetricFamily("horae_plain", "A family with samples", value=1.0)
    pieces = list(render_chunks([big, encoded, empty, plain]))
    header = generate_latest(CollectedFamilies([big]))
    assert pieces[0] == header + "".join(lines[:CHUNK_PARTS]).encode()
    assert pieces[1] == "".join(lines[CHUNK_PARTS:2 * CHUNK_PARTS]).encode()
    assert pieces[2] == "".join(lines[2 * CHUNK_PARTS:]).encode()
    assert len(pieces) == 6   # three of the big family, one each for the others
    assert b"".join(pieces) == b"".join([
        header, "".join(lines).encode(), generate_latest(CollectedFamilies([encoded])),
        b"".join(encoded.parts),  # type: ignore[arg-type]
        generate_latest(CollectedFamilies([empty])), generate_latest(CollectedFamilies([plain]))])
    assert render_text([big, encoded, empty, plain]) == b"".join(pieces)
