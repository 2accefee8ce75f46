"""Topic stamps: an idle topic's kept text is reused without reading it into a record, and any
one figure that moves (or a window that rolls) renders it again, byte for byte as a full read.

Each case below changes one figure of an idle topic that had its text reused; the cached
/metrics text and snapshot must still equal the uncached render of the same moment. A figure
left out of the stamp would reuse the stale text and fail its case."""

from __future__ import annotations

import pathlib
from collections.abc import Callable

import pytest

from broker.metrics.collector import SNAPSHOT, HoraeCollector
from broker.metrics.sources import TopicFigures

from .test_admin_metrics import (
    T,
    _FakeConsumer,
    _FakeCursor,
    _FakeMemoryTracker,
    _FakeService,
    _FakeSubscription,
    _FakeTopic,
)
from .test_metrics_rendered import _Check

PLAIN, SUBSCRIBED = f"{T}/plain", f"{T}/subscribed"


def _service() -> _FakeService:
    from broker.config import BrokerConfig
    plain = _FakeTopic(PLAIN, producers={"p": object()}, msg_in_counter=4, storage_size=400,
                       storage_logical_size=400)
    sub = _FakeSubscription(cursor=_FakeCursor(backlog=5),
                            consumers=[_FakeConsumer(unacked_messages=2), _FakeConsumer()],
                            msg_out_counter=3, bytes_out_counter=30)
    subscribed = _FakeTopic(SUBSCRIBED, subscriptions={"s": sub}, msg_in_counter=8,
                            msg_out_counter=3, bytes_out_counter=30)
    return _FakeService(BrokerConfig(cluster_name="c1"), {plain.full: plain,
                                                           subscribed.full: subscribed})


class _Counting(_Check):
    """:class:`_Check` that also counts the topics the cached renders read into a record."""

    def __init__(self, service: _FakeService, root: pathlib.Path) -> None:
        super().__init__(service, root)
        self.read: list[str] = []
        collector = self.collector
        full_read = collector._collect_topic

        def counted(topic: TopicFigures, scrape: object) -> None:
            self.read.append(topic.full)
            full_read(topic, scrape)  # type: ignore[arg-type]

        self.counted = counted
        self.full_read = full_read

    async def cached_reads(self) -> set[str]:
        """Outputs match; the topics the two cached renders read in full."""
        collector: HoraeCollector = self.collector
        uncached = collector.collect_async
        self.read.clear()

        async def plain_uncached() -> list[object]:
            collector._collect_topic = self.full_read  # type: ignore[method-assign]
            try:
                return await uncached()  # type: ignore[return-value]
            finally:
                collector._collect_topic = self.counted  # type: ignore[method-assign]

        collector.collect_async = plain_uncached  # type: ignore[method-assign, assignment]
        collector._collect_topic = self.counted  # type: ignore[method-assign]
        try:
            await self.outputs_match()
        finally:
            del collector.collect_async
            del collector._collect_topic
        return set(self.read)


Change = Callable[[_FakeService], None]


def _sub(service: _FakeService) -> _FakeSubscription:
    return service.topics[SUBSCRIBED].subscriptions["s"]


def _plain(service: _FakeService) -> _FakeTopic:
    return service.topics[PLAIN]


def _set(target: Callable[[_FakeService], object], name: str, value: object) -> Change:
    return lambda service: setattr(target(service), name, value)


def _bump(target: Callable[[_FakeService], object], name: str, by: float = 1) -> Change:
    return lambda service: setattr(target(service), name, getattr(target(service), name) + by)


def _index_bump(target: Callable[[_FakeService], object], name: str, i: int) -> Change:
    def change(service: _FakeService) -> None:
        getattr(target(service), name)[i] += 1
    return change


CHANGES: dict[str, tuple[str, Change]] = {
    # topic-level figures
    "publish": (PLAIN, _bump(_plain, "msg_in_counter")),
    "bytes in": (PLAIN, _bump(_plain, "bytes_in_counter", 100)),
    "dispatch out": (PLAIN, _bump(_plain, "msg_out_counter")),
    "bytes out": (PLAIN, _bump(_plain, "bytes_out_counter", 100)),
    "trim": (PLAIN, _bump(_plain, "storage_size", -100)),
    "logical size": (PLAIN, _bump(_plain, "storage_logical_size", 10)),
    "backlog bytes": (PLAIN, _bump(_plain, "backlog_bytes", 10)),
    "producer added": (PLAIN, lambda s: _plain(s).producers.__setitem__("q", object())),
    "producer left": (PLAIN, lambda s: _plain(s).producers.clear()),
    "delay rejected": (PLAIN, _bump(_plain, "delayed_rejected_counter")),
    "fixed delay": (PLAIN, _bump(_plain, "fixed_delay_overridden_counter")),
    "dedup eviction": (PLAIN, _bump(_plain, "dedup_producers_evicted_counter")),
    "publish rate limited": (PLAIN, lambda s: setattr(
        _plain(s).publish_rate, "limited_times", _plain(s).publish_rate.limited_times + 1)),
    "quota policy": (PLAIN, _set(_plain, "quota_limits", (1 << 20, 3600))),
    "backlog checked": (PLAIN, _set(_plain, "backlog_age", 0)),
    "storage rates": (PLAIN, _set(_plain, "write_read_rates", (2.0, 1.0))),
    "latency bucket": (PLAIN, _index_bump(_plain, "publish_latency_buckets", 3)),
    "latency overflow": (PLAIN, _index_bump(_plain, "publish_latency_buckets", 9)),
    "latency sum": (PLAIN, _bump(_plain, "publish_latency_sum_ms", 2.5)),
    "entry size bucket": (PLAIN, _index_bump(_plain, "entry_size_buckets", 2)),
    "entry size sum": (PLAIN, _bump(_plain, "entry_size_sum_bytes", 100)),
    # subscription-level figures
    "subscription added": (SUBSCRIBED, lambda s: s.topics[SUBSCRIBED].subscriptions.__setitem__(
        "t", _FakeSubscription())),
    "subscription removed": (SUBSCRIBED, lambda s: s.topics[SUBSCRIBED].subscriptions.clear()),
    "ack": (SUBSCRIBED, lambda s: setattr(_sub(s).cursor, "backlog", 4)),
    "consumer added": (SUBSCRIBED, lambda s: _sub(s).consumers.append(_FakeConsumer())),
    "unacked": (SUBSCRIBED, lambda s: setattr(_sub(s).consumers[1], "unacked_messages", 3)),
    "blocked": (SUBSCRIBED, _set(_sub, "blocked_on_unacked", True)),
    "paused": (SUBSCRIBED, _set(_sub, "paused_on_ack_state", True)),
    "cursor reset": (SUBSCRIBED, lambda s: setattr(_sub(s).revisions, "increase_count", 1)),
    "reset running": (SUBSCRIBED, lambda s: setattr(_sub(s).revisions, "task_state", 1)),
    "delayed due": (SUBSCRIBED, lambda s: setattr(_sub(s).delayed, "due_total", 2)),
    "read ahead": (SUBSCRIBED, lambda s: setattr(_sub(s).delayed, "read_ahead_total", 2)),
    "next due": (SUBSCRIBED, lambda s: setattr(_sub(s).delayed, "next_due", 1_767_225_600_000)),
    "last due": (SUBSCRIBED, lambda s: setattr(_sub(s).delayed, "last_due", 1_767_225_600_000)),
    "subscription dispatch": (SUBSCRIBED, _bump(_sub, "msg_out_counter", 5)),
    "subscription bytes": (SUBSCRIBED, _bump(_sub, "bytes_out_counter", 50)),
    "redelivery": (SUBSCRIBED, _set(_sub, "redeliver", 1.5)),
    "tracker attached": (SUBSCRIBED, _set(_sub, "delayed_tracker", _FakeMemoryTracker())),
}


async def _idle(check: _Counting) -> None:
    """Rounds until the topics' text is reused without a read (rates settled)."""
    for _ in range(4):
        check.now += 2
        if not await check.cached_reads():
            return
    raise AssertionError("idle topics are still read in full")


@pytest.mark.parametrize("case", sorted(CHANGES))
async def test_one_moved_figure_renders_its_topic_again(case: str,
                                                        tmp_path: pathlib.Path) -> None:
    service = _service()
    check = _Counting(service, tmp_path)
    assert await check.cached_reads() == {PLAIN, SUBSCRIBED}   # no stamps yet
    await _idle(check)
    target, change = CHANGES[case]
    change(service)
    check.now += 2
    assert await check.cached_reads() == {target}   # and the outputs match


@pytest.mark.parametrize("buckets", ["publish_latency_buckets", "entry_size_buckets"])
async def test_idle_topics_are_not_read_and_windows_still_roll(buckets: str,
                                                               tmp_path: pathlib.Path) -> None:
    service = _service()
    check = _Counting(service, tmp_path)
    await check.cached_reads()
    getattr(_plain(service), buckets)[2] += 1   # in the first window of that series
    await _idle(check)
    for _ in range(3):
        check.now += 5
        assert await check.cached_reads() == set()
    # The first window completes (what it showed in progress stays), the next one is empty:
    # the topic's bucket gauges drop without anything happening to it.
    check.now += 61
    assert await check.cached_reads() == set()
    check.now += 61
    assert await check.cached_reads() == {PLAIN}
    check.now += 61
    assert await check.cached_reads() == set()
    # An append in a window that follows a complete one: the cumulative histogram moves (the
    # entry sizes only show complete windows: read again, its text is the same).
    getattr(_plain(service), buckets)[4] += 1
    check.now += 2
    assert await check.cached_reads() == {PLAIN}
    check.now += 2
    assert await check.cached_reads() == set()
    # A subscription's rate: a dispatch, then the rate falls back to zero a scrape later.
    _sub(service).msg_out_counter += 7
    check.now += 2
    assert await check.cached_reads() == {SUBSCRIBED}
    check.now += 2
    assert await check.cached_reads() == {SUBSCRIBED}
    check.now += 2
    assert await check.cached_reads() == set()
    # A deleted topic is gone, the other still reused; loaded again, it is read.
    plain = service.topics.pop(PLAIN)
    check.now += 2
    assert await check.cached_reads() == set()
    service.topics[PLAIN] = plain
    check.now += 2
    assert await check.cached_reads() == {PLAIN}
    check.now += 2
    assert await check.cached_reads() == set()


async def test_idle_scrapes_keep_the_same_stamps_and_windows(tmp_path: pathlib.Path) -> None:
    """An idle topic's scrape leaves nothing new behind for the garbage collector to walk: the
    kept stamp is the one already held, and a window that rolls over unchanged counts keeps
    its lists. A moved figure still replaces the stamp."""
    service = _service()
    check = _Counting(service, tmp_path)
    await check.cached_reads()
    await _idle(check)
    check.now += 61   # the first windows complete
    assert await check.cached_reads() == set()
    collector: HoraeCollector = check.collector
    stamps = dict(collector._stamps[SNAPSHOT])
    windows = {key: (w.baseline, w.last)
               for key, w in collector._latency_windows._state.items()}
    for _ in range(3):   # each one rolls every window over unchanged counts
        check.now += 61
        assert await check.cached_reads() == set()
        assert all(collector._stamps[SNAPSHOT][full] is stamp for full, stamp in stamps.items())
        assert {key: (w.baseline, w.last)
                for key, w in collector._latency_windows._state.items()} == windows
        assert all(w.baseline is windows[key][0] and w.last is windows[key][1]
                   for key, w in collector._latency_windows._state.items())
    _plain(service).msg_in_counter += 1
    check.now += 2
    assert await check.cached_reads() == {PLAIN}
    assert collector._stamps[SNAPSHOT][PLAIN] != stamps[PLAIN]
    assert collector._stamps[SNAPSHOT][SUBSCRIBED] is stamps[SUBSCRIBED]
