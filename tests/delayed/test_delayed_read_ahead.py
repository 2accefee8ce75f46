"""Reading the first due entries ahead of a deliver time that follows a quiet spell.

- The tracker's timer fires its lead ``lead_ms`` before a deadline aimed at from farther away,
  once, and never for a deadline closer than that (a stream falling due); re-aiming moves it,
  a cancel or clear drops it.
- :class:`ReadAhead` reads what the delivery lists, one read at a time, only while the
  dispatcher may read, survives a failed read and stops on close.
- Over the wire (official client, in-process broker): the dispatcher reads each due entry
  ahead (``read_ahead_total``), the one due 1.6 s later not with the first; every message
  still arrives not before its time and once; ``delayedDeliveryReadAheadMillis=0`` reads
  nothing ahead; ``horae_subscription_delayed_read_ahead_total`` in /metrics says the same.
"""

from __future__ import annotations

import asyncio
import datetime
import time
from typing import Any

import pulsar
import pytest
from conftest import make_client
from delayed_testlib import T0, DueCounter, FakeLoop
from rest import subscription_metric

from broker.config import BrokerConfig, ConfigError
from broker.delayed.in_memory import InMemoryDelayedDeliveryTracker
from broker.subscriptions.dispatchers.read_ahead import ReadAhead
from storage.positions import Position


class Leads:
    def __init__(self, loop: FakeLoop) -> None:
        self.loop = loop
        self.at: list[int] = []

    def __call__(self) -> None:
        self.at.append(self.loop.now_ms - T0)


def _tracker(loop: FakeLoop, lead_ms: int = 200) -> tuple[InMemoryDelayedDeliveryTracker,
                                                           Leads, DueCounter]:
    due = DueCounter()
    tracker = InMemoryDelayedDeliveryTracker(tick_time_ms=1000, strict=True, on_due=due,
                                             loop=loop, clock_ms=loop.clock_ms)
    leads = Leads(loop)
    tracker.read_ahead(lead_ms, leads)
    return tracker, leads, due


def test_the_lead_fires_once_before_a_deadline_after_a_quiet_spell() -> None:
    loop = FakeLoop()
    tracker, leads, due = _tracker(loop)
    tracker.add(Position(1, 0), T0 + 1000)
    loop.advance_to(T0 + 799)
    assert leads.at == []
    loop.advance_to(T0 + 800)
    assert leads.at == [800]
    loop.advance_to(T0 + 1000)
    assert due.calls == 1 and leads.at == [800]
    assert tracker.get_scheduled(10) == [Position(1, 0)]


def test_no_lead_within_a_stream_falling_due() -> None:
    loop = FakeLoop()
    tracker, leads, _ = _tracker(loop)
    for i in range(10):
        tracker.add(Position(1, i), T0 + 1000 + 50 * i)
    loop.advance_to(T0 + 1000)
    assert leads.at == [800]
    for step in range(1, 10):   # each hand-out aims at the next deadline, 50 ms on
        tracker.get_scheduled(10)
        loop.advance_to(T0 + 1000 + 50 * step)
    assert leads.at == [800], "deadlines 50 ms apart: no read-ahead"
    tracker.get_scheduled(10)
    tracker.add(Position(1, 10), T0 + 5000)     # a quiet spell, then one more
    loop.advance_to(T0 + 5000)
    assert leads.at == [800, 4800]


def test_re_aiming_moves_the_lead_and_cancelling_drops_it() -> None:
    loop = FakeLoop()
    tracker, leads, _ = _tracker(loop)
    tracker.add(Position(1, 0), T0 + 1000)
    tracker.add(Position(1, 1), T0 + 600)       # an earlier head: its lead time is now 400
    loop.advance_to(T0 + 1000)
    assert leads.at == [400]
    tracker.get_scheduled(10)
    tracker.add(Position(1, 2), T0 + 3000)
    assert tracker.cancel(Position(1, 2))
    tracker.clear()
    loop.advance_to(T0 + 4000)
    assert leads.at == [400]


def test_a_lead_asked_for_after_the_timer_was_aimed_applies_at_once() -> None:
    loop = FakeLoop()
    tracker, leads, _ = _tracker(loop, lead_ms=0)
    tracker.add(Position(1, 0), T0 + 1000)
    tracker.read_ahead(300, leads)
    loop.advance_to(T0 + 1000)
    assert leads.at == [700]
    tracker.read_ahead(0, None)                 # 0: no lead from the next aim on
    tracker.get_scheduled(10)
    tracker.add(Position(1, 1), T0 + 3000)
    loop.advance_to(T0 + 3000)
    assert leads.at == [700]


def test_the_setting_is_a_non_negative_number_of_ms() -> None:
    assert BrokerConfig().delayed_delivery_read_ahead_millis == 200
    with pytest.raises(ConfigError, match="delayedDeliveryReadAheadMillis"):
        BrokerConfig(delayed_delivery_read_ahead_millis=-1)


class Source:
    def __init__(self, positions: list[Position]) -> None:
        self.positions = positions
        self.asked = 0

    async def upcoming(self, limit: int) -> list[Position]:
        self.asked += 1
        return self.positions[:limit]


async def test_read_ahead_reads_what_is_listed_one_read_at_a_time() -> None:
    source = Source([Position(1, i) for i in range(5)])
    reads: list[list[Position]] = []
    gate = asyncio.Event()

    async def read(positions: list[Position]) -> object:
        reads.append(positions)
        await gate.wait()
        return None

    ready = [False]
    ahead = ReadAhead(source, read, lambda: ready[0], limit=3)
    ahead.wake()
    assert not ahead.running and source.asked == 0     # the dispatcher may not read
    ready[0] = True
    ahead.wake()
    ahead.wake()                                        # one at a time
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert reads == [[Position(1, 0), Position(1, 1), Position(1, 2)]] and source.asked == 1
    gate.set()
    for _ in range(10):
        if not ahead.running:
            break
        await asyncio.sleep(0)
    assert not ahead.running
    ahead.wake()
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert len(reads) == 2
    await ahead.close()


async def test_a_failed_read_ahead_is_only_logged_and_close_stops_one() -> None:
    async def failing(positions: list[Position]) -> object:
        raise OSError("disk gone")

    ahead = ReadAhead(Source([Position(1, 0)]), failing, lambda: True, limit=10)
    ahead.wake()
    for _ in range(10):
        await asyncio.sleep(0)
    assert not ahead.running
    never = asyncio.Event()

    async def hangs(positions: list[Position]) -> object:
        await never.wait()
        return None

    ahead = ReadAhead(Source([Position(1, 0)]), hangs, lambda: True, limit=10)
    ahead.wake()
    await asyncio.sleep(0)
    assert ahead.running
    await asyncio.wait_for(ahead.close(), 5)
    assert not ahead.running


def _read_ahead_total(handle: Any, topic: str, sub: str) -> int:
    async def read() -> int:
        return int(handle.service.topics[topic].subscriptions[sub].delayed.read_ahead_total)

    return handle.call(read)  # type: ignore[no-any-return]


@pytest.mark.parametrize("tracker", ["in-memory", "bucket"])
@pytest.mark.parametrize("read_ahead_ms", [300, 0])
def test_over_the_wire_each_due_entry_is_read_ahead_alone_and_arrives_on_time(
        broker_factory: Any, tracker: str, read_ahead_ms: int) -> None:
    handle = broker_factory(config_overrides={
        "delayedDeliveryTrackerFactoryClassName": tracker,
        "delayedDeliveryReadAheadMillis": read_ahead_ms})
    client = make_client(handle.service_url)
    topic = f"persistent://public/default/read-ahead-{tracker}-{read_ahead_ms}"
    try:
        consumer = client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Shared)
        producer = client.create_producer(topic, batching_enabled=False)
        due: dict[bytes, int] = {}
        for data, delay_ms in ((b"first", 1200), (b"second", 2800)):
            due[data] = time.time_ns() // 1_000_000 + delay_ms
            producer.send(data, deliver_after=datetime.timedelta(milliseconds=delay_ms))
        read_ahead: list[int] = []
        for expected in (b"first", b"second"):
            msg = consumer.receive(10_000)
            received_ms = time.time_ns() // 1_000_000
            consumer.acknowledge(msg)
            assert msg.data() == expected
            assert received_ms >= due[expected], f"early by {due[expected] - received_ms} ms"
            read_ahead.append(_read_ahead_total(handle, topic, "s"))
        with pytest.raises(pulsar.Timeout):
            consumer.receive(300)
        # the first read-ahead reads the first message only: the second is due after the
        # first's read-ahead horizon and has a read-ahead of its own
        assert read_ahead == ([1, 2] if read_ahead_ms else [0, 0])
        assert subscription_metric(handle.web_url, "horae_subscription_delayed_read_ahead_total",
                               topic, "s") == read_ahead[-1]
    finally:
        client.close()
