"""White-box dispatch tests on a real segment store, without sockets.

They pin what the official client cannot observe directly: a read that started before a cursor
reset is discarded (PIP-269), permits bound what is sent, batch entries cost their message
count, and the Key_Shared selectors behave like Pulsar's.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from broker.config import BrokerConfig
from broker.delayed import DelayPolicy, TrackerFactory
from broker.net.consumers import ConsumerSide
from broker.subscriptions.consumer import Consumer, HashRange
from broker.subscriptions.dispatch_rate import TopicDispatch
from broker.subscriptions.dispatchers import base as dispatch_base
from broker.subscriptions.selectors import (
    ConsistentHashingSelector,
    ConsumerAssignError,
    HashRangeAutoSplitSelector,
    StickyRangeSelector,
    new_selector,
)
from broker.subscriptions.stats import subscription_stats
from broker.subscriptions.subscription import Subscription
from protocol import pulsar_pb as pb
from protocol.frames import NEED_DATA, FrameDecoder
from protocol.metadata import encode_entry
from storage.config import StorageConfig
from storage.positions import Position
from storage.store import SegmentStore


class FakeConnection:
    protocol_version = 20
    remote_address = "127.0.0.1:1"
    client_version = "test"
    writes_paused = False

    def __init__(self) -> None:
        self.decoder = FrameDecoder()
        self.commands: list[pb.BaseCommand] = []

    def write(self, data: bytes) -> None:
        self.decoder.receive_data(data)
        while (frame := self.decoder.next_frame()) is not NEED_DATA:
            self.commands.append(frame.command)

    def writelines(self, parts: list[bytes]) -> None:
        self.write(b"".join(parts))

    def message_ids(self) -> list[tuple[int, int]]:
        return [(c.message.message_id.ledgerId, c.message.message_id.entryId)
                for c in self.commands if c.type == pb.BaseCommand.MESSAGE]


class StubSubscriptions(dict[str, Any]):
    def remove_subscription(self, sub: Any) -> None:
        self.pop(sub.name, None)

    def consumer_count(self) -> int:
        return sum(len(sub.consumers) for sub in self.values())

    def update_caching(self) -> None:
        return None


class StubTopic:
    def __init__(self, ledger: Any) -> None:
        self.ledger = ledger
        self.partition_index = -1
        self.terminated = False
        self.subscriptions = StubSubscriptions()
        self.topic_dispatch = TopicDispatch(lambda: (0, 0))   # no dispatchRate

    full = "persistent://public/default/stub"

    def transaction_view(self, subscription: str) -> None:
        return None   # no transaction touched this topic

    touches = 0

    def touch(self) -> None:
        self.touches += 1   # the rate tick's activity signal

    @property
    def delivery(self) -> StubTopic:
        """The stub answers for what subscriptions are built with itself."""
        return self

    failover_delay_s = 0.0
    read_ahead_ms = 0     # no read-ahead timers in these unit tests

    def new_key_shared_selector(self, sticky: bool) -> Any:
        return new_selector(sticky, consistent_hashing=True)

    def delay_policy(self) -> DelayPolicy:
        return DelayPolicy(active=True, tick_time_ms=1, max_delay_ms=0, fixed_delay_ms=0,
                           strict=True)

    def tracker_factory(self, cursor: Any | None) -> TrackerFactory:
        return TrackerFactory(BrokerConfig(), asyncio.get_running_loop())


def _entry(i: int, batch: int | None = None, publish_time: int | None = None) -> bytes:
    md = pb.MessageMetadata(producer_name="p", sequence_id=i,
                            publish_time=publish_time or int(time.time() * 1000))
    if batch is not None:
        md.num_messages_in_batch = batch
    return encode_entry(md, f"m{i}".encode())


@pytest.fixture
async def ledger(tmp_path: Path) -> AsyncIterator[Any]:
    store = await SegmentStore.open(tmp_path, StorageConfig(fsync=False))
    led = await store.open_ledger("persistent://public/default/unit")
    yield led
    await store.close()


async def _setup(ledger: Any, n: int, sub_type: int = 0, *, times: bool = False,
                 **entry_kw: Any) -> tuple[Any, ...]:
    for i in range(n):
        if times:
            entry_kw["publish_time"] = 1000 + 10 * i
        await ledger.append(_entry(i, **entry_kw))
    sub = await Subscription.open(StubTopic(ledger), "s", durable=True,
                                  initial_position="earliest")
    conn = FakeConnection()
    side = ConsumerSide(conn)
    consumer = Consumer(side, 1, name="c", sub_type=sub_type)
    side.attach(consumer, sub)
    await sub.add_consumer(consumer)
    return sub, conn, consumer


async def _settle() -> None:
    for _ in range(20):
        await asyncio.sleep(0)


async def test_a_read_started_before_a_reset_is_discarded(ledger: Any) -> None:
    sub, conn, consumer = await _setup(ledger, 10)
    gate = asyncio.Event()
    started = asyncio.Event()
    real_read = ledger.read_entries

    async def slow_read(start: Position, n: int, *args: Any, **kw: Any) -> Any:
        started.set()
        await gate.wait()
        return await real_read(start, n, *args, **kw)

    ledger.read_entries = slow_read
    consumer.permits = 100
    sub.dispatcher.schedule()
    await asyncio.wait_for(started.wait(), 5)
    lid = ledger.last_confirmed.ledger_id
    revision = sub.cursor.revision
    await sub.resets.reset_to(Position(lid, 6), disconnect=False)  # the reset races the read
    assert sub.cursor.revision == revision + 1
    gate.set()
    await _settle()
    assert conn.message_ids() == [(lid, e) for e in range(6, 10)]


async def test_permits_bound_delivery_and_batches_cost_their_size(ledger: Any) -> None:
    sub, conn, consumer = await _setup(ledger, 10, batch=5)
    consumer.permits = 12  # three batch entries (15 messages) fit, the fourth waits
    sub.dispatcher.schedule()
    await _settle()
    assert len(conn.message_ids()) == 3
    assert consumer.permits == -3
    consumer.permits += 10
    sub.dispatcher.schedule()
    await _settle()
    assert len(conn.message_ids()) == 5


async def test_acked_entries_are_not_redelivered_after_redeliver_all(ledger: Any) -> None:
    sub, conn, consumer = await _setup(ledger, 5)
    consumer.permits = 100
    sub.dispatcher.schedule()
    await _settle()
    lid = ledger.last_confirmed.ledger_id
    sub.acknowledge(consumer, [(Position(lid, 1), None), (Position(lid, 3), None)],
                    cumulative=False)
    sub.redeliver(consumer, None)
    await _settle()
    ids = conn.message_ids()
    assert ids[:5] == [(lid, e) for e in range(5)]
    assert ids[5:] == [(lid, 0), (lid, 2), (lid, 4)]
    redelivered = [c.message.redelivery_count for c in conn.commands
                   if c.type == pb.BaseCommand.MESSAGE][5:]
    assert redelivered == [1, 1, 1]


async def test_batch_index_ack_is_sent_back_as_ack_set(ledger: Any) -> None:
    sub, conn, consumer = await _setup(ledger, 1, sub_type=1, batch=3)
    consumer.permits = 100
    sub.dispatcher.schedule()
    await _settle()
    lid = ledger.last_confirmed.ledger_id
    sub.acknowledge(consumer, [(Position(lid, 0), [0b110])], cumulative=False)  # index 0 acked
    assert not sub.cursor.is_deleted(Position(lid, 0))
    sub.redeliver(consumer, [Position(lid, 0)])
    await _settle()
    last = [c for c in conn.commands if c.type == pb.BaseCommand.MESSAGE][-1]
    assert list(last.message.ack_set) == [0b110]
    sub.acknowledge(consumer, [(Position(lid, 0), [0])], cumulative=False)
    assert sub.cursor.is_deleted(Position(lid, 0))


async def test_acknowledge_entries_is_acknowledge_of_whole_entries(ledger: Any) -> None:
    sub, conn, consumer = await _setup(ledger, 6, sub_type=1, batch=3)
    consumer.permits = 100
    sub.dispatcher.schedule()
    await _settle()
    lid = ledger.last_confirmed.ledger_id
    acked_before = sub.msg_ack_counter
    # ids past the last entry are ignored, as by acknowledge
    sub.acknowledge_entries(consumer, [Position(lid, 1), Position(lid, 3), Position(lid, 99)])
    assert [sub.cursor.is_deleted(Position(lid, e)) for e in range(6)] == \
        [False, True, False, True, False, False]
    assert sub.msg_ack_counter == acked_before + 2
    assert Position(lid, 1) not in consumer.pending and Position(lid, 0) in consumer.pending
    # an entry acknowledged by batch index keeps its bits until a whole-entry ack drops them
    sub.acknowledge(consumer, [(Position(lid, 4), [0b110])], cumulative=False)
    assert sub.batch_acks == {Position(lid, 4): 0b110}
    sub.acknowledge_entries(consumer, [Position(lid, 0), Position(lid, 4)])
    assert sub.batch_acks == {}
    assert sub.cursor.is_deleted(Position(lid, 0)) and sub.cursor.is_deleted(Position(lid, 4))
    sub.redeliver(consumer, None)
    await _settle()
    assert conn.message_ids()[6:] == [(lid, 2), (lid, 5)]


async def test_admin_skip_acknowledges_the_next_unacked_entries(ledger: Any) -> None:
    sub, conn, consumer = await _setup(ledger, 10, sub_type=1)
    lid = ledger.last_confirmed.ledger_id
    sub.cursor.delete([Position(lid, 1)])
    await sub.resets.skip(3)  # entries 0, 2, 3 (1 was already acknowledged)
    assert sub.cursor.mark_delete_position == Position(lid, 3)
    assert subscription_stats(sub)["msgBacklog"] == 6
    await sub.resets.skip_all()
    assert subscription_stats(sub)["msgBacklog"] == 0
    consumer.permits = 100
    sub.dispatcher.schedule()
    await _settle()
    assert conn.message_ids() == []


async def test_skip_by_message_ids_acks_entries_and_batch_indexes(ledger: Any) -> None:
    sub, conn, consumer = await _setup(ledger, 3, sub_type=1, batch=2)
    lid = ledger.last_confirmed.ledger_id
    await sub.resets.skip_by_message_ids([(lid, 0), (lid, 1, 0)])
    assert sub.cursor.is_deleted(Position(lid, 0))
    assert not sub.cursor.is_deleted(Position(lid, 1))  # one of its two messages is left
    await sub.resets.skip_by_message_ids([(lid, 1, 1)])
    assert sub.cursor.is_deleted(Position(lid, 1))
    consumer.permits = 100
    sub.dispatcher.schedule()
    await _settle()
    assert conn.message_ids() == [(lid, 2)]


async def test_skip_by_message_ids_is_refused_on_exclusive(ledger: Any) -> None:
    from protocol.errors import NotAllowedError

    sub, _, _ = await _setup(ledger, 3, sub_type=0)
    with pytest.raises(NotAllowedError):
        await sub.resets.skip_by_message_ids([(0, 0)])
    assert not sub.cursor.is_deleted(Position(ledger.last_confirmed.ledger_id, 0))


async def test_reset_to_timestamp_closes_consumers_and_finds_the_first_later_entry(
        ledger: Any) -> None:
    sub, conn, consumer = await _setup(ledger, 50, times=True)
    lid = ledger.last_confirmed.ledger_id
    revision = sub.cursor.revision
    await sub.resets.reset_cursor_to_timestamp(1000 + 10 * 17 - 5)
    assert sub.cursor.read_position == Position(lid, 17)
    assert sub.cursor.revision > revision
    assert [c.type for c in conn.commands] == [pb.BaseCommand.CLOSE_CONSUMER]
    assert sub.consumers == [] and consumer.closed
    await sub.resets.reset_cursor_to_timestamp(0)
    assert sub.cursor.read_position == Position(lid, 0)
    await sub.resets.reset_cursor_to_timestamp(10**13)
    assert sub.cursor.read_position == Position(lid, 50)


def _consumer(name: str, ranges: tuple[HashRange, ...] = ()) -> Consumer:
    return Consumer(ConsumerSide(FakeConnection()), 1, name=name, sub_type=3, hash_ranges=ranges)


def test_consistent_hashing_moves_only_part_of_the_keys() -> None:
    selector = ConsistentHashingSelector()
    a, b, c = _consumer("a"), _consumer("b"), _consumer("c")
    selector.add(a)
    selector.add(b)
    before = {slot: selector.select(slot) for slot in range(0, 65536, 16)}
    assert {x.name for x in before.values()} == {"a", "b"}
    selector.add(c)
    after = {slot: selector.select(slot) for slot in before}
    moved = [s for s in before if before[s] is not after[s]]
    assert all(after[s] is c for s in moved)  # keys only move to the newcomer
    assert 0.1 < len(moved) / len(before) < 0.6
    selector.remove(c)
    assert {slot: selector.select(slot) for slot in before} == before


def test_hash_range_auto_split_halves_the_largest_range_as_pulsar_does() -> None:
    selector = HashRangeAutoSplitSelector()
    a, b, c, d = _consumer("a"), _consumer("b"), _consumer("c"), _consumer("d")
    assert selector.select(0) is None
    selector.add(a)
    assert selector.ranges_of(a) == [(0, 65536)]
    selector.add(b)                       # the newcomer takes the lower half
    assert selector.ranges_of(b) == [(0, 32768)]
    assert selector.ranges_of(a) == [(32769, 65536)]
    assert (selector.select(32768), selector.select(32769), selector.select(65535)) == (b, a, a)
    selector.add(c)                       # the first largest range in slot order: b's
    assert selector.ranges_of(c) == [(0, 16384)]
    selector.add(d)                       # now a's is the largest
    assert selector.ranges_of(d) == [(32769, 49152)]
    assert selector.ranges_of(a) == [(49153, 65536)]
    selector.remove(d)                    # the next higher range (a's) takes it back
    assert selector.ranges_of(a) == [(32769, 65536)]
    selector.remove(a)                    # the top range takes the one below it
    assert selector.ranges_of(b) == [(16385, 65536)]
    assert selector.select(65535) is b and selector.select(0) is c
    selector.remove(c)
    selector.remove(b)
    assert selector.select(0) is None


def test_selector_kind_follows_the_setting() -> None:
    assert isinstance(new_selector(False, consistent_hashing=True), ConsistentHashingSelector)
    assert isinstance(new_selector(False, consistent_hashing=False), HashRangeAutoSplitSelector)
    assert isinstance(new_selector(True, consistent_hashing=False), StickyRangeSelector)


def test_sticky_ranges_select_and_refuse_overlaps() -> None:
    selector = StickyRangeSelector()
    low = _consumer("low", (HashRange(0, 99),))
    high = _consumer("high", (HashRange(100, 65535),))
    selector.add(low)
    selector.add(high)
    assert selector.select(5) is low
    assert selector.select(100) is high
    with pytest.raises(ConsumerAssignError) as info:
        selector.add(_consumer("clash", (HashRange(50, 150),)))
    assert info.value.code == pb.ConsumerAssignError
    selector.remove(low)
    assert selector.select(5) is None


async def test_key_shared_slow_consumer_keys_do_not_hide_other_keys(ledger: Any) -> None:
    """Thousands of entries for a consumer without permits wait at the head of the replay set;
    another consumer still gets its keys from behind them."""
    from protocol.metadata import sticky_key_hash

    keys = [b"slow"] * 2990 + [f"fast{i}".encode() for i in range(10)]
    for i, key in enumerate(keys):
        md = pb.MessageMetadata(producer_name="p", sequence_id=i, publish_time=1,
                                partition_key=key.decode())
        await ledger.append(encode_entry(md, b"x"))
    sub = await Subscription.open(StubTopic(ledger), "s", durable=True,
                                  initial_position="earliest")
    slow = sticky_key_hash(b"slow")
    used = {sticky_key_hash(k) for k in keys}
    idle = next(h for h in range(65536) if h not in used)  # a range no entry maps to

    def others(*taken: int) -> tuple[HashRange, ...]:
        cuts = sorted(taken)
        out, start = [], 0
        for cut in cuts:
            if start <= cut - 1:
                out.append(HashRange(start, cut - 1))
            start = cut + 1
        if start <= 65535:
            out.append(HashRange(start, 65535))
        return tuple(out)

    ranges = [(HashRange(slow, slow),), others(slow, idle), (HashRange(idle, idle),)]
    conns = [FakeConnection() for _ in ranges]
    consumers = [Consumer(ConsumerSide(conn), 1, name=f"c{n}", sub_type=3,
                          key_shared_mode=1, hash_ranges=r)
                 for n, (conn, r) in enumerate(zip(conns, ranges, strict=True))]
    for c in consumers:
        await sub.add_consumer(c)
    consumers[2].permits = 1000  # keeps reading going: every entry ends up in the replay set
    sub.dispatcher.schedule()
    await _settle_dispatch(sub)
    assert len(sub.dispatcher.replay) == 3000
    consumers[1].permits = 100
    sub.dispatcher.schedule()
    await _settle_dispatch(sub)
    assert len(conns[1].message_ids()) == 10
    assert conns[0].message_ids() == []


async def _settle_dispatch(sub: Any) -> None:
    for _ in range(10_000):
        await asyncio.sleep(0)
        if sub.dispatcher._task is None:
            return


async def test_shared_consumer_with_too_many_unacked_messages_waits_for_acks(
        ledger: Any) -> None:
    sub, conn, consumer = await _setup(ledger, 10, sub_type=1)
    consumer.max_unacked_messages = 3
    consumer.permits = 100
    sub.dispatcher.schedule()
    await _settle_dispatch(sub)
    assert len(conn.message_ids()) == 3
    assert consumer.stats()["blockedConsumerOnUnackedMsgs"]
    lid = ledger.last_confirmed.ledger_id
    sub.acknowledge(consumer, [(Position(lid, 0), None), (Position(lid, 1), None)],
                    cumulative=False)
    await _settle_dispatch(sub)
    assert len(conn.message_ids()) == 5


async def test_a_herd_of_due_messages_stays_in_the_tracker_beyond_the_permits(
        ledger: Any) -> None:
    """1,500 messages due in the same millisecond, a Shared consumer with 1,000 permits: the
    1,000 go out in position order and the other 500 stay in the delayed index (not moved into
    the replay set round after round); new permits take them, still in order."""
    # due far enough ahead that all 1,500 are read (and held) before they fall due, even on a
    # loaded machine: read when already due, an entry is not held and the count below differs
    due_at = int(time.time() * 1000) + 2000
    for i in range(1500):
        md = pb.MessageMetadata(producer_name="p", sequence_id=i,
                                publish_time=int(time.time() * 1000), deliver_at_time=due_at)
        await ledger.append(encode_entry(md, f"m{i}".encode()))
    sub = await Subscription.open(StubTopic(ledger), "s", durable=True,
                                  initial_position="earliest")
    conn = FakeConnection()
    side = ConsumerSide(conn)
    consumer = Consumer(side, 1, name="c", sub_type=1)
    side.attach(consumer, sub)
    await sub.add_consumer(consumer)
    consumer.permits = 1000
    dispatcher = sub.dispatcher
    dispatcher.schedule()
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 30
    while len(conn.message_ids()) < 1000 and loop.time() < deadline:
        await asyncio.sleep(0.01)
    await _settle_dispatch(sub)
    ids = conn.message_ids()
    assert len(ids) == 1000
    assert ids == sorted(ids)
    assert int(time.time() * 1000) >= due_at
    assert len(dispatcher.replay) == 0
    assert dispatcher.delayed is not None and len(dispatcher.delayed) == 500
    consumer.permits = 1000
    dispatcher.schedule()
    deadline = loop.time() + 30
    while len(conn.message_ids()) < 1500 and loop.time() < deadline:
        await asyncio.sleep(0.01)
    ids = conn.message_ids()
    assert len(ids) == 1500 and ids == sorted(ids) and len(set(ids)) == 1500


async def test_a_key_shared_herd_moves_no_more_into_the_replay_set_than_its_scan_reads(
        ledger: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """300 messages due in the same millisecond, one Key_Shared consumer with 10 permits and a
    replay scan of 50: at most 50 due positions wait in the replay set, the rest stay in the
    delayed index; with permits again everything goes out once."""
    monkeypatch.setattr(dispatch_base, "MAX_REPLAY_SCAN", 50)
    due_at = int(time.time() * 1000) + 2000
    for i in range(300):
        md = pb.MessageMetadata(producer_name="p", sequence_id=i, partition_key=f"k{i % 7}",
                                publish_time=int(time.time() * 1000), deliver_at_time=due_at)
        await ledger.append(encode_entry(md, f"m{i}".encode()))
    sub = await Subscription.open(StubTopic(ledger), "s", durable=True,
                                  initial_position="earliest")
    conn = FakeConnection()
    side = ConsumerSide(conn)
    consumer = Consumer(side, 1, name="c", sub_type=3)
    side.attach(consumer, sub)
    await sub.add_consumer(consumer)
    consumer.permits = 10
    dispatcher = sub.dispatcher
    assert dispatcher.needs_hash
    dispatcher.schedule()
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 30
    while (len(conn.message_ids()) < 10 or int(time.time() * 1000) < due_at + 50) \
            and loop.time() < deadline:
        await asyncio.sleep(0.01)
        dispatcher.schedule()
    await _settle_dispatch(sub)
    assert len(conn.message_ids()) == 10
    assert 0 < len(dispatcher.replay) <= 50
    assert dispatcher.delayed is not None and len(dispatcher.delayed) >= 240
    for _ in range(100):
        consumer.permits = 1000
        dispatcher.schedule()
        await asyncio.sleep(0.01)
        if len(conn.message_ids()) >= 300:
            break
    await _settle_dispatch(sub)
    ids = conn.message_ids()
    assert len(ids) == 300 and len(set(ids)) == 300


async def test_held_entries_that_fall_due_before_the_tracker_takes_them_are_delivered(
        ledger: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The entries of one read due after the cutoff the dispatcher looked up are held in one
    tracker call after the read; one that fell due in between (here: a cutoff looked up long
    before) is not kept by the tracker and goes out as a due message, not lost; the others
    stay held."""
    from broker.delayed.delivery import DelayedDelivery

    now = int(time.time() * 1000)
    for i in range(20):
        at = now - 5_000 if i % 2 == 0 else now + 3_600_000     # due already / an hour out
        md = pb.MessageMetadata(producer_name="p", sequence_id=i, publish_time=now,
                                deliver_at_time=at)
        await ledger.append(encode_entry(md, f"m{i}".encode()))
    monkeypatch.setattr(DelayedDelivery, "hold_after_ms", lambda self: now - 60_000)
    sub = await Subscription.open(StubTopic(ledger), "s", durable=True,
                                  initial_position="earliest")
    conn = FakeConnection()
    side = ConsumerSide(conn)
    consumer = Consumer(side, 1, name="c", sub_type=1)
    side.attach(consumer, sub)
    await sub.add_consumer(consumer)
    consumer.permits = 100
    sub.dispatcher.schedule()
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 30
    while len(conn.message_ids()) < 10 and loop.time() < deadline:
        await asyncio.sleep(0.01)
    await _settle_dispatch(sub)
    lid = ledger.last_confirmed.ledger_id
    assert sorted(conn.message_ids()) == [(lid, i) for i in range(0, 20, 2)]
    delayed = sub.dispatcher.delayed
    assert delayed is not None and len(delayed) == 10
    assert len(sub.dispatcher.replay) == 0


async def test_reading_positions_finds_entries_and_the_missing_ones_run_or_scattered(
        ledger: Any) -> None:
    """``_read_positions`` on a run of consecutive positions (one read) and on scattered ones:
    the same entries and the same missing positions, when the store skips a dropped entry in
    the middle and when a read runs on past the run's end into the next ledger."""
    sub, _, _ = await _setup(ledger, 12)
    dispatcher = sub.dispatcher
    lid = ledger.last_confirmed.ledger_id
    real_read = ledger.read_entries
    dropped = {Position(lid, 4)}

    async def read_with_a_gap(start: Position, n: int, *args: Any, **kw: Any) -> Any:
        got = [e for e in await real_read(start, n + 1, *args, **kw) if e.position not in dropped]
        # the store skips the dropped entry and fills up to n entries from further on, as a
        # read past a ledger's end would (here the entry after the run stands for it)
        return got[:n]

    ledger.read_entries = read_with_a_gap
    ledger.read_entry = lambda pos: _read_one(real_read, pos, dropped)
    real_positions = ledger.read_positions

    async def read_positions_with_a_gap(positions: Any) -> Any:
        entries, missing = await real_positions([p for p in positions if p not in dropped])
        return entries, missing + [p for p in positions if p in dropped]

    ledger.read_positions = read_positions_with_a_gap
    ledger.cached_entry = lambda pos: None
    run = [Position(lid, e) for e in range(2, 8)]
    entries, missing = await dispatcher._read_positions(run)
    assert [e.position for e in entries] == [p for p in run if p not in dropped]
    assert missing == [Position(lid, 4)]
    scattered = [Position(lid, e) for e in (0, 2, 3, 4, 5, 9)]
    entries, missing = await dispatcher._read_positions(scattered)
    assert [e.position for e in entries] == [p for p in scattered if p not in dropped]
    assert missing == [Position(lid, 4)]
    whole = [Position(lid, e) for e in range(5, 12)]
    entries, missing = await dispatcher._read_positions(whole)
    assert [e.position for e in entries] == whole and missing == []
    dropped.add(Position(lid, 11))   # the run's last entry gone: the read goes past it
    entries, missing = await dispatcher._read_positions(whole)
    assert [e.position for e in entries] == whole[:-1] and missing == []


async def _read_one(real_read: Any, pos: Position, dropped: set[Position]) -> Any:
    if pos in dropped:
        return None
    got = await real_read(pos, 1)
    return got[0] if got and got[0].position == pos else None


async def test_one_at_a_time_entries_come_from_the_cache_and_an_ack_schedules_no_idle_round(
        ledger: Any) -> None:
    sub, conn, consumer = await _setup(ledger, 0, sub_type=1)
    consumer.permits = 100
    reads: list[Position] = []
    real_read = ledger.read_entries

    async def counted_read(start: Position, n: int, *args: Any, **kw: Any) -> Any:
        reads.append(start)
        return await real_read(start, n, *args, **kw)

    ledger.read_entries = counted_read
    for i in range(5):
        pos = await ledger.append(_entry(i))
        sub.on_new_entries()
        await _settle_dispatch(sub)
        assert conn.message_ids()[-1] == (pos.ledger_id, pos.entry_id)
        sub.acknowledge(consumer, [(pos, None)], cumulative=False)
        # drained: nothing to replay, read or fall due, nothing blocked: no round to run
        assert sub.dispatcher._task is None
    assert len(conn.message_ids()) == 5
    assert reads == []   # each lone new entry was taken from the entry cache
    assert consumer.permits == 95
    assert not consumer.pending


async def test_an_ack_still_schedules_a_round_when_one_could_do_something(ledger: Any) -> None:
    sub, conn, consumer = await _setup(ledger, 4, sub_type=1)
    consumer.permits = 100
    sub.dispatcher.schedule()
    await _settle_dispatch(sub)
    lid = ledger.last_confirmed.ledger_id
    assert conn.message_ids() == [(lid, e) for e in range(4)]
    # a replay waiting (handed back, no permits to send it now): an ACK wakes a round
    consumer.permits = 0
    sub.dispatcher.hand_back(consumer, [Position(lid, 2)], count_redelivery=False)
    await _settle_dispatch(sub)
    sub.acknowledge(consumer, [(Position(lid, 0), None)], cumulative=False)
    assert sub.dispatcher._task is not None
    await _settle_dispatch(sub)
    consumer.permits = 10
    sub.dispatcher.schedule()
    await _settle_dispatch(sub)
    assert conn.message_ids()[4:] == [(lid, 2)]
    # the subscription blocked on unacknowledged messages: an ACK lets a round look again
    sub.max_unacked_messages = 3
    sub.dispatcher.schedule()
    await _settle_dispatch(sub)
    assert sub.dispatcher.blocked_on_unacked
    sub.acknowledge(consumer, [(Position(lid, 1), None), (Position(lid, 2), None)],
                    cumulative=False)
    assert sub.dispatcher._task is not None
    await _settle_dispatch(sub)
    assert not sub.dispatcher.blocked_on_unacked


async def _keyed_scenario(tmp: Path, *, known: bool) -> tuple[Any, ...]:
    """Keyed entries published under replace-by-key (re-scheduled keys, a tombstone, an
    ordinary message, one due already, a batch), recorded in a schedule; with ``known`` their
    deliver times are noted as at publish. Returns what one Shared dispatch did."""
    from broker.delayed.known_times import WITHHELD, KnownDeliverTimes
    from broker.delayed.replace_by_key import KeyedSchedule, classify_timed

    store = await SegmentStore.open(tmp, StorageConfig(fsync=False))
    led = await store.open_ledger("persistent://public/default/known")
    now = int(time.time() * 1000)
    entries = []
    for i in range(40):
        md = pb.MessageMetadata(producer_name="p", sequence_id=i, publish_time=now)
        payload = f"m{i}".encode()
        if i == 13:
            pass                                         # ordinary: delivered, read
        elif i == 21:
            md.partition_key, payload = "k3", b""        # a tombstone for k3
        elif i in (5, 27):
            md.partition_key, md.deliver_at_time = f"d{i}", now - 1000   # due already
        elif i == 30:
            md.num_messages_in_batch = 1                 # a batch: read
            from protocol.metadata import encode_batch_payload
            payload = encode_batch_payload([(pb.SingleMessageMetadata(payload_size=2), b"bb")])
        else:
            md.partition_key = f"u{i}" if i < 8 else f"k{i % 5}"
            md.deliver_at_time = now + 3_600_000 + 7919 * i % 100_000
        entries.append(encode_entry(md, payload))
    for data in entries:
        await led.append(data)
    lid = led.last_confirmed.ledger_id
    schedule = KeyedSchedule()
    classified = [classify_timed(data) for data in entries]
    sub = await Subscription.open(StubTopic(led), "s", durable=True, initial_position="earliest")
    sub.delayed.replacements = schedule

    def acknowledge(packed: list[int], _bitmaps: Any) -> None:
        sub.cursor.delete([Position(p >> 32, p & 0xFFFF_FFFF) for p in packed])

    schedule.on_superseded = acknowledge
    if known:
        sub.delayed.known_times = KnownDeliverTimes()
        sub.delayed.known_times.note(lid, 0, [WITHHELD if k is not None and k[1] else at
                                              for k, at in classified])
    schedule.record_run(lid, 0, [k for k, _ in classified])
    reads: list[tuple[Position, int]] = []
    real_read = led.read_entries

    async def counting_read(start: Position, n: int) -> Any:
        reads.append((start, n))
        return await real_read(start, n)

    led.read_entries = counting_read
    conn = FakeConnection()
    side = ConsumerSide(conn)
    consumer = Consumer(side, 1, name="c", sub_type=1)
    side.attach(consumer, sub)
    await sub.add_consumer(consumer)
    consumer.permits = 100
    sub.dispatcher.schedule()
    await _settle_dispatch(sub)
    tracker = sub.dispatcher.delayed.tracker
    held = sorted(e for e in range(40) if tracker is not None
                  and tracker.contains(Position(lid, e)))
    acked = [e for e in range(40) if sub.cursor.is_deleted(Position(lid, e))]
    result = (sorted(e for _, e in conn.message_ids()), held, acked,
              sub.cursor.read_position, reads)
    await store.close()
    return result


async def test_keyed_messages_known_at_publish_are_held_unread_as_a_read_would(
        tmp_path: Path) -> None:
    """Under replace-by-key the deliver times learnt at publish let the dispatcher hold new
    keyed messages without reading them: the same messages delivered, held, acknowledged
    unseen and the same read position as when it reads every entry, with fewer entries read
    (only from the first one whose time is not known or that is due already)."""
    sent, held, acked, read_to, reads = await _keyed_scenario(tmp_path / "known", known=True)
    sent0, held0, acked0, read_to0, reads0 = await _keyed_scenario(tmp_path / "read", known=False)
    assert (sent, held, acked, read_to) == (sent0, held0, acked0, read_to0)
    assert sent == [5, 13, 27, 30]              # due already, ordinary, the batch
    assert 21 in acked and 18 in acked         # the tombstone and the version it cancelled
    assert held and not set(held) & set(acked) and not set(held) & set(sent)
    assert len(held) + len(sent) + len(acked) == 40
    # the known run before the ordinary message was never read; the read path read from 0
    assert reads0[0][0].entry_id == 0
    assert reads and reads[0][0].entry_id == 5
    assert all(start.entry_id >= 5 for start, _ in reads)


async def _plain_scenario(tmp: Path, *, known: bool, sub_type: int,
                          active: bool = True) -> tuple[Any, ...]:
    """Delayed messages without keys (no replace-by-key): some due already, an ordinary one,
    a delayed batch, two acknowledged before any dispatch; with ``known`` their deliver times
    go through the publish check's hand-over (:class:`CheckedTimes`) into the topic's known
    times. Returns what one Shared dispatch did."""
    from broker.delayed.known_times import UNKNOWN, CheckedTimes, KnownDeliverTimes, deliver_time
    from protocol.metadata import encode_batch_payload
    from protocol.metadata_scan import scan_publish_metadata

    store = await SegmentStore.open(tmp, StorageConfig(fsync=False))
    led = await store.open_ledger("persistent://public/default/plain-known")
    now = int(time.time() * 1000)
    entries = []
    for i in range(40):
        md = pb.MessageMetadata(producer_name="p", sequence_id=i, publish_time=now)
        payload = f"m{i}".encode()
        if i == 13:
            pass                                         # ordinary: delivered, read
        elif i in (5, 27):
            md.deliver_at_time = now - 1000              # due already
        elif i == 30:
            md.num_messages_in_batch = 1                 # a delayed batch: held as a read would
            md.deliver_at_time = now + 3_600_000
            payload = encode_batch_payload([(pb.SingleMessageMetadata(payload_size=2), b"bb")])
        else:
            md.deliver_at_time = now + 3_600_000 + 7919 * i % 100_000
        entries.append(encode_entry(md, payload))
    checked = CheckedTimes()
    for data in entries:
        scanned = scan_publish_metadata(data)
        assert scanned is not None
        checked.note(data, scanned[2])              # as the publish check does: each entry
    varints = checked.take(entries)
    assert varints is not None and not checked
    times = [deliver_time(v) for v in varints]
    assert times[13] == UNKNOWN and times[5] == times[27] == now - 1000
    for data in entries:
        await led.append(data)
    lid = led.last_confirmed.ledger_id
    sub = await Subscription.open(StubTopic(led), "s", durable=True, initial_position="earliest")
    sub.cursor.delete([Position(lid, 9), Position(lid, 10)])   # acknowledged before any read
    if not active:                              # delayed delivery switched off by a policy
        sub.delayed.set_policy(dataclasses.replace(sub.delayed.policy, active=False))
    if known:
        sub.delayed.known_times = KnownDeliverTimes()
        sub.delayed.known_times.note(lid, 0, times)
    reads: list[tuple[Position, int]] = []
    real_read = led.read_entries

    async def counting_read(start: Position, n: int) -> Any:
        reads.append((start, n))
        return await real_read(start, n)

    led.read_entries = counting_read
    conn = FakeConnection()
    side = ConsumerSide(conn)
    consumer = Consumer(side, 1, name="c", sub_type=sub_type)
    side.attach(consumer, sub)
    await sub.add_consumer(consumer)
    assert sub.dispatcher.needs_hash == (sub_type == 3)
    consumer.permits = 100
    sub.dispatcher.schedule()
    await _settle_dispatch(sub)
    tracker = sub.dispatcher.delayed.tracker
    held = sorted(e for e in range(40) if tracker is not None
                  and tracker.contains(Position(lid, e)))
    acked = [e for e in range(40) if sub.cursor.is_deleted(Position(lid, e))]
    result = (sorted(e for _, e in conn.message_ids()), held, acked,
              sub.cursor.read_position, reads)
    await store.close()
    return result


@pytest.mark.parametrize("sub_type", [1, 3], ids=["shared", "key_shared"])
async def test_plain_delayed_messages_known_at_publish_are_held_unread_as_a_read_would(
        tmp_path: Path, sub_type: int) -> None:
    """Without replace-by-key the deliver times the publish check read let the dispatcher hold
    new delayed messages without reading them: the same messages delivered (none early), held
    and passed over (none acknowledged held), the same read position as when it reads every
    entry, with fewer entries read; on Shared and Key_Shared."""
    sent, held, acked, read_to, reads = await _plain_scenario(
        tmp_path / "known", known=True, sub_type=sub_type)
    sent0, held0, acked0, read_to0, reads0 = await _plain_scenario(
        tmp_path / "read", known=False, sub_type=sub_type)
    assert (sent, held, acked, read_to) == (sent0, held0, acked0, read_to0)
    assert sent == [5, 13, 27]                  # due already, ordinary
    assert acked == [9, 10]
    assert 30 in held
    assert set(held) == set(range(40)) - {5, 9, 10, 13, 27}
    assert reads0[0][0].entry_id == 0
    assert reads and all(start.entry_id >= 5 for start, _ in reads)


async def test_known_times_hold_nothing_while_delayed_delivery_is_off(tmp_path: Path) -> None:
    """A policy without delayed delivery: the known times are not used, every entry is read
    and delivered at once, as without them."""
    sent, held, acked, read_to, reads = await _plain_scenario(
        tmp_path / "known", known=True, sub_type=1, active=False)
    sent0, held0, acked0, read_to0, _ = await _plain_scenario(
        tmp_path / "read", known=False, sub_type=1, active=False)
    assert (sent, held, acked, read_to) == (sent0, held0, acked0, read_to0)
    assert sent == [e for e in range(40) if e not in (9, 10)] and held == []
    assert reads and reads[0][0].entry_id == 0


def test_checked_times_are_taken_by_the_very_entry_and_bounded() -> None:
    """A time noted at the publish check is found only for that entry object (an equal copy,
    a rewritten entry: unknown), everything is forgotten at the take, and past MAX_CHECKED
    notes no more are kept; a time is read as the int64 upb reads, 0 and below as unknown."""
    from broker.delayed.known_times import MAX_CHECKED, UNKNOWN, CheckedTimes, deliver_time

    checked = CheckedTimes()
    a, b = b"\x00entry-a", b"\x00entry-b"
    one_k, two_k = b"\xe8\x07", b"\xd0\x0f"            # varints of 1,000 and 2,000
    checked.note(a, one_k)
    copy = bytes(bytearray(a))
    assert copy == a and copy is not a
    assert checked.take([copy, b]) is None
    assert not checked
    checked.note(a, one_k)
    assert checked.take([b, a, copy]) == [None, one_k, None]
    assert checked.take([a]) is None            # taken once
    many = [bytes([i % 256]) * (4 + i // 256) for i in range(MAX_CHECKED + 1)]
    for entry in many:
        checked.note(entry, b"\x05")
    assert checked.take(many) == [b"\x05"] * MAX_CHECKED + [None]
    checked.note(a, one_k)
    checked.note(b, two_k)
    assert checked.take([a, b]) == [one_k, two_k]      # the usual run: all noted, in order
    checked.note(a, None)
    checked.note(b, None)
    assert checked.take([a, b]) is None                 # noted, none with a time
    assert [deliver_time(v) for v in (one_k, two_k, None, b"\x00", b"\xff" * 9 + b"\x01")] == [
        1_000, 2_000, UNKNOWN, UNKNOWN, UNKNOWN]       # none, 0, -1


def test_append_notes_the_known_times_of_keyed_and_plain_entries() -> None:
    """What the append notes for the dispatchers, with and without replace-by-key: a keyed
    scheduling message's time from its classification, a tombstone withheld, a plain delayed
    message's time from the publish check, an ordinary one and a rewritten (not checked) one
    unknown; a run of keyed entries only drops what the check noted."""
    from broker.delayed.known_times import UNKNOWN, WITHHELD, CheckedTimes
    from broker.delayed.replace_by_key import KeyedSchedule
    from broker.topics.replace_by_key import TopicReplaceByKey
    from protocol.metadata_scan import scan_publish_metadata

    now = int(time.time() * 1000)

    def entry(i: int, key: str | None = None, at: int | None = None, body: bytes = b"x") -> bytes:
        md = pb.MessageMetadata(producer_name="p", sequence_id=i, publish_time=now)
        if key is not None:
            md.partition_key = key
        if at is not None:
            md.deliver_at_time = at
        return encode_entry(md, body)

    class Sink:
        def entries_durable(self, ledger_id: int, first_entry_id: int, count: int) -> None:
            pass

        def entries_failed(self, count: int, error: BaseException) -> None:
            pass

    run = [entry(0, "k1", now + 5_000), entry(1, "k2", body=b""), entry(2, None, now + 7_000),
           entry(3), entry(4, None, now + 9_000)]
    rewritten = entry(4, None, now + 9_000)     # an equal copy: not the object checked
    for policy in (True, False):
        topic = TopicReplaceByKey(Any, lambda: True, lambda: [])  # type: ignore[arg-type]
        if policy:
            topic.schedule = KeyedSchedule()
        checked = CheckedTimes()
        for data in run:
            scanned = scan_publish_metadata(data)
            assert scanned is not None
            checked.note(data, scanned[2])
        stored = [*run[:4], rewritten]
        sink = topic.sink_for(stored, Sink(), checked)
        assert not checked
        sink.entries_durable(7, 0, len(stored))
        times, n = topic.known_times.run_from(7, 0, 10)
        assert n == 5
        assert list(times) == ([now + 5_000, WITHHELD, now + 7_000, UNKNOWN, UNKNOWN] if policy
                               else [now + 5_000, UNKNOWN, now + 7_000, UNKNOWN, UNKNOWN])
    topic = TopicReplaceByKey(Any, lambda: True, lambda: [])  # type: ignore[arg-type]
    topic.schedule = KeyedSchedule()
    checked = CheckedTimes()
    for data in run[:2]:                        # keyed only: times from the classification
        checked.note(data, scan_publish_metadata(data)[2])  # type: ignore[index]
    topic.sink_for(run[:2], Sink(), checked).entries_durable(7, 0, 2)
    assert not checked
    assert list(topic.known_times.run_from(7, 0, 10)[0]) == [now + 5_000, WITHHELD]


def test_scattered_positions_of_one_ledger_are_read_each_on_its_own() -> None:
    from broker.subscriptions.dispatchers.base import _no_neighbours

    P = Position
    assert _no_neighbours([P(3, 1), P(3, 5), P(3, 9)])
    assert not _no_neighbours([P(3, 1), P(3, 2), P(3, 9)])     # a run of two
    assert not _no_neighbours([P(3, 8), P(3, 9)])
    assert not _no_neighbours([P(3, 1), P(4, 5)])              # two ledgers: looked at each
    assert not _no_neighbours([P(3, 5), P(3, 5)])              # the same twice
    assert not _no_neighbours([P(3, 9), P(3, 1)])              # out of order
