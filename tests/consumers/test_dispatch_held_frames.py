"""A busy dispatcher writes each consumer's frames in fewer, larger writes (a consumer's few
queued frames wait for the next slice); a dispatcher that runs out of work writes at once; a
redelivery of everything drops the frames still queued instead of writing them too."""

from __future__ import annotations

from typing import Any

import pytest

from broker.net.consumers import ConsumerSide
from broker.subscriptions.consumer import HOLD_FRAMES, Consumer
from broker.subscriptions.dispatchers import base as dispatch_base
from broker.subscriptions.subscription import Subscription
from protocol import pulsar_pb as pb
from tests.consumers.test_dispatch_unit import (
    FakeConnection,
    StubTopic,
    _entry,
    _settle_dispatch,
    ledger,
)

__all__ = ["ledger"]   # the fixture, imported for these tests


class CountingConnection(FakeConnection):
    def __init__(self) -> None:
        super().__init__()
        self.writes = 0

    def write(self, data: bytes) -> None:
        self.writes += 1
        super().write(data)


async def _shared(ledger: Any, entries: int, consumers: int, permits: int
                  ) -> tuple[Any, list[CountingConnection], list[Consumer]]:
    for i in range(entries):
        await ledger.append(_entry(i))
    sub = await Subscription.open(StubTopic(ledger), "s", durable=True,
                                  initial_position="earliest")
    conns, members = [], []
    for n in range(consumers):
        conn = CountingConnection()
        side = ConsumerSide(conn)
        consumer = Consumer(side, 1, name=f"c{n}", sub_type=1)
        side.attach(consumer, sub)
        await sub.add_consumer(consumer)
        consumer.permits = permits
        conns.append(conn)
        members.append(consumer)
    return sub, conns, members


async def test_a_busy_dispatcher_writes_each_consumer_in_fewer_larger_writes(
        ledger: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    # every round ends a slice: a round's 100 entries give each of two consumers 50 frames,
    # which wait until a consumer holds HOLD_FRAMES or every HOLD_SLICES slices
    monkeypatch.setattr(dispatch_base, "DISPATCH_SLICE_S", 0.0)
    monkeypatch.setattr(dispatch_base, "DISPATCH_PAUSE_S", 0.0)
    sub, conns, members = await _shared(ledger, 1000, 2, 1000)
    await _settle_dispatch(sub)    # the first subscriber's rounds may already have run
    sub.dispatcher.schedule()
    await _settle_dispatch(sub)
    ids = [conn.message_ids() for conn in conns]
    everything = sorted(ids[0] + ids[1])
    assert len(everything) == 1000 and len(set(everything)) == 1000
    assert all(mine == sorted(mine) for mine in ids)
    rounds = 1000 // dispatch_base.MAX_READ_ENTRIES
    for conn, mine in zip(conns, ids, strict=True):
        # one write per round before; now one per ~HOLD_FRAMES frames
        assert conn.writes <= len(mine) // (HOLD_FRAMES // 2) + 1 < rounds
    assert all(c.oldest_queued_revision is None for c in members)


async def test_a_consumer_out_of_permits_is_written_at_once(
        ledger: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(dispatch_base, "DISPATCH_SLICE_S", 0.0)
    monkeypatch.setattr(dispatch_base, "DISPATCH_PAUSE_S", 0.0)
    sub, conns, members = await _shared(ledger, 400, 2, 30)
    sub.dispatcher.schedule()
    await _settle_dispatch(sub)
    assert [len(conn.message_ids()) for conn in conns] == [30, 30]
    assert all(c.permits == 0 and c.oldest_queued_revision is None for c in members)


async def test_a_lone_entry_is_written_when_the_round_ends(ledger: Any) -> None:
    sub, conns, members = await _shared(ledger, 0, 1, 100)
    for i in range(3):
        await ledger.append(_entry(i))
        sub.dispatcher.schedule()
        await _settle_dispatch(sub)
        assert len(conns[0].message_ids()) == i + 1
        assert conns[0].writes == i + 1 and members[0].oldest_queued_revision is None


async def test_redeliver_all_drops_the_queued_frames_instead_of_writing_them_too(
        ledger: Any) -> None:
    sub, conns, members = await _shared(ledger, 3, 1, 0)
    await _settle_dispatch(sub)
    consumer, dispatcher = members[0], sub.dispatcher
    consumer.permits = 10
    entries = await ledger.read_entries(sub.cursor.read_position, 3)
    sub.cursor.read_position = ledger.next_position(entries[-1].position)
    # what a busy dispatcher holds between two slices: queued, pending, not written
    assert dispatcher._deliver(entries, from_replay=False, blocked=set(),
                               revision=sub.revisions.revision) == 3
    assert consumer.oldest_queued_revision is not None and len(consumer.pending) == 3
    sub.redeliver(consumer, None)
    assert consumer.oldest_queued_revision is None and conns[0].message_ids() == []
    assert consumer.permits == 10
    dispatcher.schedule()
    await _settle_dispatch(sub)
    ids = conns[0].message_ids()
    assert ids == sorted({(e.position.ledger_id, e.position.entry_id) for e in entries})


async def test_redeliver_of_named_ids_writes_the_queued_frames_first(ledger: Any) -> None:
    sub, conns, members = await _shared(ledger, 3, 1, 0)
    await _settle_dispatch(sub)
    consumer, dispatcher = members[0], sub.dispatcher
    consumer.permits = 10
    entries = await ledger.read_entries(sub.cursor.read_position, 3)
    sub.cursor.read_position = ledger.next_position(entries[-1].position)
    dispatcher._deliver(entries, from_replay=False, blocked=set(),
                        revision=sub.revisions.revision)
    first = entries[0].position
    sub.redeliver(consumer, [first])
    # the queued frames went out before the named one was handed back (frames stay in order)
    ids = [(e.position.ledger_id, e.position.entry_id) for e in entries]
    assert conns[0].message_ids() == ids and consumer.oldest_queued_revision is None
    assert first in dispatcher.replay and first not in consumer.pending
    dispatcher.schedule()
    await _settle_dispatch(sub)
    assert conns[0].message_ids() == [*ids, ids[0]]
    redelivered = [c.message for c in conns[0].commands if c.type == pb.BaseCommand.MESSAGE][-1]
    assert redelivered.redelivery_count == 1


async def _rounds_of_five(ledger: Any, monkeypatch: pytest.MonkeyPatch, *, behind: bool
                          ) -> tuple[CountingConnection, int]:
    """A dispatch task of ten rounds, each a slice of its own sending five messages, as a
    stream of messages falling due a few a millisecond makes while other work keeps the task
    going (``behind`` False) or a backlog does (True). Returns the connection and its writes
    before the task ended."""
    monkeypatch.setattr(dispatch_base, "DISPATCH_SLICE_S", 0.0)
    monkeypatch.setattr(dispatch_base, "DISPATCH_PAUSE_S", 0.0)
    sub, conns, members = await _shared(ledger, 0, 1, 1000)
    await _settle_dispatch(sub)
    for i in range(50):
        await ledger.append(_entry(i))
    conn, consumer, dispatcher = conns[0], members[0], sub.dispatcher
    entries = await ledger.read_entries(sub.cursor.read_position, 50)
    sub.cursor.read_position = ledger.next_position(entries[-1].position)
    writes_before = conn.writes
    rounds = iter(range(0, 50, 5))
    writes_at_rounds: list[int] = []

    async def five() -> bool:
        start = next(rounds, None)
        if start is None:
            return False
        writes_at_rounds.append(conn.writes)
        dispatcher._behind = behind
        dispatcher._again = True   # more work arrived meanwhile: the task goes on
        return dispatcher._deliver(entries[start:start + 5], from_replay=False, blocked=set(),
                                   revision=sub.revisions.revision) > 0

    monkeypatch.setattr(dispatcher, "_dispatch_once", five)
    monkeypatch.setattr(dispatch_base, "_lone_round", lambda d: False)   # the task's rounds
    dispatcher.schedule()
    await _settle_dispatch(sub)
    assert conn.message_ids() == [e.position for e in entries]
    assert consumer.oldest_queued_revision is None
    return conn, writes_at_rounds[-1] - writes_before


async def test_a_dispatcher_not_behind_its_work_writes_at_every_slice_end(
        ledger: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    # each slice's five frames are written when it ends, not held for HOLD_SLICES slices
    _, writes = await _rounds_of_five(ledger, monkeypatch, behind=False)
    assert writes == 9


async def test_a_dispatcher_behind_its_work_for_long_holds_a_consumers_few_frames(
        ledger: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    # written at the end of each of the first HOLD_SLICES slices behind (a stream catching up
    # after a long loop turn), then every HOLD_SLICES slices (a backlog that lasts)
    _, writes = await _rounds_of_five(ledger, monkeypatch, behind=True)
    hold = dispatch_base.HOLD_SLICES
    assert writes == sum(1 for end in range(1, 10) if end <= hold or end % hold == 0) < 9
