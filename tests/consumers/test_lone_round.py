"""The lone round: one new entry in the entry cache, sent without a dispatch task.

White-box, on a real segment store without sockets (the helpers of ``test_dispatch_unit``).
Each scenario runs twice, once as the broker runs it and once with the lone round turned off
(every round made by the dispatch task): the frames written, byte for byte, and what the
subscription and its consumer keep (permits, pending, owners, replay set, counters, read
position, delayed tracker) must be the same. The plain case must also make no task at all.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from broker.net.consumers import ConsumerSide
from broker.subscriptions.consumer import Consumer
from broker.subscriptions.dispatchers import base as dispatch_base
from broker.subscriptions.subscription import Subscription
from protocol import pulsar_pb as pb
from protocol.metadata import encode_entry
from storage.config import StorageConfig
from storage.positions import Position
from storage.store import SegmentStore

from .test_dispatch_unit import FakeConnection, StubTopic, _entry

Scenario = Callable[[Any, Any, Any, Any], Awaitable[None]]


@pytest.fixture
async def ledger(tmp_path: Path) -> AsyncIterator[Any]:
    store = await SegmentStore.open(tmp_path / "lone", StorageConfig(fsync=False))
    yield await store.open_ledger("persistent://public/default/unit")
    await store.close()


class RawConnection(FakeConnection):
    """Keeps the written bytes too (compared between the two runs)."""

    def __init__(self) -> None:
        super().__init__()
        self.raw = bytearray()

    def write(self, data: bytes) -> None:
        self.raw += data
        super().write(data)


async def _idle(sub: Any) -> None:
    """Until no round is under way or asked for (bounded)."""
    for _ in range(10_000):
        await asyncio.sleep(0)
        if sub.dispatcher._task is None:
            return
    raise AssertionError("the dispatcher never went idle")


async def _new(ledger: Any, sub: Any, data: bytes) -> Position:
    """Append *data*, tell the subscription as the topic does, wait until no round is left."""
    pos: Position = await ledger.append(data)
    sub.on_new_entries()
    await _idle(sub)
    return pos


#: A delivery time an hour ahead, the same in both runs of a scenario.
LATER_MS = int(time.time() * 1000) + 3_600_000


def _e(i: int, **kw: Any) -> bytes:
    """Entry *i* with a fixed publish time (both runs write the same bytes)."""
    return _entry(i, publish_time=1000 + i, **kw)


def _delayed_entry(i: int) -> bytes:
    md = pb.MessageMetadata(producer_name="p", sequence_id=i, publish_time=1000 + i,
                            deliver_at_time=LATER_MS)
    return encode_entry(md, f"d{i}".encode())


async def plain(ledger: Any, sub: Any, consumer: Any, conn: Any) -> None:
    for i in range(5):
        await _new(ledger, sub, _e(i))


async def batch_entries(ledger: Any, sub: Any, consumer: Any, conn: Any) -> None:
    consumer.permits = 7
    for i in range(3):   # 5 messages each: the second goes past the permits, the third waits
        await _new(ledger, sub, _e(i, batch=5))


async def no_permits_then_flow(ledger: Any, sub: Any, consumer: Any, conn: Any) -> None:
    consumer.permits = 0
    await _new(ledger, sub, _e(0))
    consumer.permits = 10
    sub.dispatcher.schedule()
    await _idle(sub)
    await _new(ledger, sub, _e(1))


async def acknowledged_before_it_is_read(ledger: Any, sub: Any, consumer: Any,
                                         conn: Any) -> None:
    await _new(ledger, sub, _e(0))   # pending: the mark-delete position stays before it
    pos = await ledger.append(_e(1))
    sub.cursor.delete((pos,))   # acknowledged individually, the read position still on it
    assert sub.cursor.read_position == pos
    sub.on_new_entries()
    await _idle(sub)
    await _new(ledger, sub, _e(2))


async def batch_indexes_acknowledged(ledger: Any, sub: Any, consumer: Any, conn: Any) -> None:
    pos = await ledger.append(_e(0, batch=3))
    sub.batch_acks[pos] = 0b110   # index 0 acknowledged (a rewind brought it back)
    sub.on_new_entries()
    await _idle(sub)


async def with_a_redelivery_count(ledger: Any, sub: Any, consumer: Any, conn: Any) -> None:
    pos = await ledger.append(_e(0))
    sub.redelivery_counts[pos] = 2
    sub.on_new_entries()
    await _idle(sub)


async def a_replay_goes_first(ledger: Any, sub: Any, consumer: Any, conn: Any) -> None:
    first = await _new(ledger, sub, _e(0))
    sub.redeliver(consumer, [first])   # back in the replay set with no permits to send it
    consumer.permits = 0
    await _idle(sub)
    await ledger.append(_e(1))
    consumer.permits = 10
    sub.on_new_entries()
    await _idle(sub)


async def two_entries_at_once(ledger: Any, sub: Any, consumer: Any, conn: Any) -> None:
    await ledger.append(_e(0))
    await ledger.append(_e(1))
    sub.on_new_entries()
    await _idle(sub)
    await _new(ledger, sub, _e(2))


async def a_delayed_entry_is_held(ledger: Any, sub: Any, consumer: Any, conn: Any) -> None:
    await _new(ledger, sub, _delayed_entry(0))
    await _new(ledger, sub, _e(1))


async def a_schedule_before_the_round(ledger: Any, sub: Any, consumer: Any, conn: Any) -> None:
    await ledger.append(_e(0))
    sub.dispatcher.schedule()   # a FLOW, say: the round is asked for, not made yet
    sub.on_new_entries()        # so the new entry joins that round
    await _idle(sub)
    await _new(ledger, sub, _e(1))


SCENARIOS: list[tuple[Scenario, int]] = [
    (plain, 1),
    (plain, 0),                       # Exclusive
    (batch_entries, 1),
    (no_permits_then_flow, 1),
    (acknowledged_before_it_is_read, 1),
    (batch_indexes_acknowledged, 1),
    (with_a_redelivery_count, 1),
    (a_replay_goes_first, 1),
    (two_entries_at_once, 1),
    (a_delayed_entry_is_held, 1),
    (a_schedule_before_the_round, 1),
    (plain, 2),                       # Failover
    (plain, 3),                       # Key_Shared: always the task
]


async def _run(ledger: Any, scenario: Scenario, sub_type: int) -> tuple[Any, ...]:
    sub = await Subscription.open(StubTopic(ledger), "s", durable=True,
                                  initial_position="earliest")
    conn = RawConnection()
    side = ConsumerSide(conn)  # type: ignore[arg-type]
    consumer = Consumer(side, 1, name="c", sub_type=sub_type)
    side.attach(consumer, sub)
    await sub.add_consumer(consumer)
    consumer.permits = 100
    await _idle(sub)
    await scenario(ledger, sub, consumer, conn)
    d = sub.dispatcher
    tracker = d.delayed.tracker if d.delayed is not None else None
    state = (bytes(conn.raw), consumer.permits, dict(consumer.pending),
             consumer.unacked_messages, consumer.msg_out_counter, consumer.bytes_out_counter,
             sub.msg_out_counter, sub.bytes_out_counter, {p: c.consumer_id for p, c in d.owner.items()},
             list(d.replay), sub.cursor.read_position, dict(sub.redelivery_counts),
             dict(sub.batch_acks), len(tracker) if tracker is not None else 0)
    await sub.close()
    return state


@pytest.mark.parametrize(("scenario", "sub_type"), SCENARIOS,
                         ids=[f"{s.__name__}-{t}" for s, t in SCENARIOS])
async def test_the_lone_round_sends_what_the_task_would(
        ledger: Any, tmp_path: Path, scenario: Scenario, sub_type: int,
        monkeypatch: pytest.MonkeyPatch) -> None:
    lone = await _run(ledger, scenario, sub_type)
    store = await SegmentStore.open(tmp_path / "tasks", StorageConfig(fsync=False))
    try:
        other = await store.open_ledger("persistent://public/default/unit")
        monkeypatch.setattr(dispatch_base, "_lone_round", lambda d: False)
        by_task = await _run(other, scenario, sub_type)
    finally:
        await store.close()
    assert lone[0], "the scenario sent nothing"
    assert lone == by_task


async def test_a_lone_new_entry_is_sent_in_the_notification_itself(ledger: Any) -> None:
    sub = await Subscription.open(StubTopic(ledger), "s", durable=True,
                                  initial_position="earliest")
    conn = RawConnection()
    side = ConsumerSide(conn)  # type: ignore[arg-type]
    consumer = Consumer(side, 1, name="c", sub_type=1)
    side.attach(consumer, sub)
    await sub.add_consumer(consumer)
    consumer.permits = 100
    await _idle(sub)
    d = sub.dispatcher
    tasks = 0
    real_run = d._run

    def counted_run() -> Any:
        nonlocal tasks
        tasks += 1
        return real_run()

    d._run = counted_run   # type: ignore[method-assign]
    for i in range(4):
        pos = await ledger.append(_e(i))
        sub.on_new_entries()
        # written before any loop turn, and no round is left under way or asked for
        assert conn.message_ids()[-1] == (pos.ledger_id, pos.entry_id)
        assert d._task is None
        assert d.owner[pos] is consumer
    assert tasks == 0
    assert consumer.permits == 96
    # a schedule (FLOW, ACK) asks for a round on the next turn; an idle one makes no task
    d.schedule()
    assert d._task is not None
    await _idle(sub)
    assert tasks == 0
    # two entries at once: the task reads them
    await ledger.append(_e(10))
    await ledger.append(_e(11))
    sub.on_new_entries()
    await _idle(sub)
    assert tasks == 1
    assert len(conn.message_ids()) == 6
    await sub.close()


async def test_close_drops_a_round_asked_for_and_not_started(ledger: Any) -> None:
    sub = await Subscription.open(StubTopic(ledger), "s", durable=True,
                                  initial_position="earliest")
    conn = RawConnection()
    side = ConsumerSide(conn)  # type: ignore[arg-type]
    consumer = Consumer(side, 1, name="c", sub_type=1)
    side.attach(consumer, sub)
    await sub.add_consumer(consumer)
    await _idle(sub)
    await ledger.append(_e(0))
    consumer.permits = 10
    d = sub.dispatcher
    d.schedule()
    assert isinstance(d._task, asyncio.Handle)
    await d.close()
    assert d._task is None
    for _ in range(5):
        await asyncio.sleep(0)
    assert conn.message_ids() == []
    assert d._task is None


async def test_a_failing_lone_round_is_logged_and_tried_again(
        ledger: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    sub = await Subscription.open(StubTopic(ledger), "s", durable=True,
                                  initial_position="earliest")
    conn = RawConnection()
    side = ConsumerSide(conn)  # type: ignore[arg-type]
    consumer = Consumer(side, 1, name="c", sub_type=1)
    side.attach(consumer, sub)
    await sub.add_consumer(consumer)
    consumer.permits = 10
    await _idle(sub)
    real = dispatch_base._lone_round
    failures = [RuntimeError("read failed")]

    def flaky(d: Any) -> bool:
        if failures:
            raise failures.pop()
        return real(d)

    monkeypatch.setattr(dispatch_base, "_lone_round", flaky)
    pos = await ledger.append(_e(0))
    sent = asyncio.get_running_loop().create_future()
    real_write = conn.write

    def write(data: bytes) -> None:
        real_write(data)
        if not sent.done():
            sent.set_result(None)

    conn.write = write   # type: ignore[method-assign]
    sub.on_new_entries()
    assert "dispatch failed" in caplog.text
    await asyncio.wait_for(sent, 10)
    assert conn.message_ids() == [(pos.ledger_id, pos.entry_id)]
    await sub.close()


async def test_a_round_asked_for_during_the_lone_round_is_the_only_one(
        ledger: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    sub = await Subscription.open(StubTopic(ledger), "s", durable=True,
                                  initial_position="earliest")
    conn = RawConnection()
    side = ConsumerSide(conn)  # type: ignore[arg-type]
    consumer = Consumer(side, 1, name="c", sub_type=1)
    side.attach(consumer, sub)
    await sub.add_consumer(consumer)
    consumer.permits = 10
    await _idle(sub)
    d = sub.dispatcher
    running = most = 0
    real_run = d._run

    async def counted_run() -> None:
        nonlocal running, most
        running += 1
        most = max(most, running)
        try:
            await real_run()
        finally:
            running -= 1

    d._run = counted_run   # type: ignore[method-assign]
    real = dispatch_base._lone_round
    asked = [True]

    def asking(disp: Any) -> bool:
        if asked:   # a schedule (say, the tracker waking) while the lone round runs
            asked.pop()
            disp.schedule()
            return False
        return real(disp)

    monkeypatch.setattr(dispatch_base, "_lone_round", asking)
    real_read = ledger.read_entries

    async def slow_read(*args: Any, **kw: Any) -> Any:
        await asyncio.sleep(0)   # a store read that suspends: rounds could overlap
        return await real_read(*args, **kw)

    monkeypatch.setattr(ledger, "read_entries", slow_read)
    await ledger.append(_e(0))
    await ledger.append(_e(1))   # two entries: the rounds need the task
    sub.on_new_entries()
    await _idle(sub)
    await _idle(sub)
    assert most == 1
    assert len(conn.message_ids()) == 2
    await sub.close()
