"""Deterministic reproductions of PIP-269's races on one node.

Each test holds a storage read (or the old tracker's close during a type change) at a chosen
point with :class:`ReadGate` / an event, runs a cursor position reset meanwhile, releases the
read and checks what every consumer received. Forward resets move the cursor past what was read
(skip, clear-backlog, seek ahead); backward resets move it before (seek back, rewind).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from protocol.errors import ConsumerBusyError
from storage.config import StorageConfig
from storage.positions import Position
from storage.store import SegmentStore
from tests.consumers.revision_testlib import (
    ReadGate,
    append,
    join,
    open_sub,
    settle,
)

SHARED, EXCLUSIVE, KEY_SHARED = 1, 0, 3


@pytest.fixture
async def ledger(tmp_path: Path) -> AsyncIterator[Any]:
    store = await SegmentStore.open(tmp_path, StorageConfig(fsync=False))
    led = await store.open_ledger("persistent://public/default/revision")
    yield led
    await store.close()


def _lid(ledger: Any) -> int:
    return int(ledger.last_confirmed.ledger_id)


# ---------------------------------------------------------------- case 1: replay read vs reset

async def test_replay_read_in_flight_is_discarded_by_a_backward_seek(ledger: Any) -> None:
    await append(ledger, range(10))
    sub, _ = await open_sub(ledger)
    c1, conn1 = await join(sub, SHARED, "c1")
    await settle(sub)
    assert conn1.entry_ids() == list(range(10))
    lid = _lid(ledger)
    gate = ReadGate(ledger, lambda p: p == Position(lid, 5))
    sub.redeliver(c1, [Position(lid, 5), Position(lid, 6)])
    await asyncio.wait_for(gate.started.wait(), 5)
    await sub.resets.reset_cursor((lid, 2))          # backward: consumers are closed and re-join
    _, conn2 = await join(sub, SHARED, "c2")
    gate.release.set()
    await settle(sub)
    assert conn1.entry_ids()[10:] == []       # [5, 6] of the old read never go out
    assert conn2.entry_ids() == list(range(2, 10))


async def test_replay_read_in_flight_is_discarded_by_a_forward_skip(ledger: Any) -> None:
    await append(ledger, range(10))
    sub, _ = await open_sub(ledger)
    c1, conn1 = await join(sub, SHARED, "c1")
    await settle(sub)
    lid = _lid(ledger)
    gate = ReadGate(ledger, lambda p: p == Position(lid, 5))
    sub.redeliver(c1, [Position(lid, 5), Position(lid, 6)])
    await asyncio.wait_for(gate.started.wait(), 5)
    await sub.resets.skip(7)                          # forward: 0..6 acknowledged, no disconnect
    gate.release.set()
    await settle(sub)
    assert conn1.entry_ids()[10:] == []
    assert sorted(c1.pending) == [Position(lid, e) for e in (7, 8, 9)]
    assert c1.unacked_messages == 3


# ---------------------------------------------------------------- case 2: sequential read vs reset

async def test_sequential_read_in_flight_is_discarded_by_a_backward_seek(ledger: Any) -> None:
    await append(ledger, range(10))
    sub, _ = await open_sub(ledger)
    _c1, conn1 = await join(sub, EXCLUSIVE, "c1")
    await settle(sub)
    lid = _lid(ledger)
    gate = ReadGate(ledger, lambda p: p.entry_id >= 10)
    await append(ledger, range(10, 20))
    sub.on_new_entries()
    await asyncio.wait_for(gate.started.wait(), 5)
    await sub.resets.reset_cursor((lid, 3))
    _, conn2 = await join(sub, EXCLUSIVE, "c2")
    gate.release.set()
    await settle(sub)
    assert conn1.entry_ids() == list(range(10))
    assert conn2.entry_ids() == list(range(3, 20))   # nothing skipped, nothing twice
    assert sub.cursor.read_position == Position(lid, 20)


async def test_sequential_read_in_flight_is_discarded_by_a_forward_seek(ledger: Any) -> None:
    await append(ledger, range(20))
    sub, _ = await open_sub(ledger)
    lid = _lid(ledger)
    gate = ReadGate(ledger, lambda p: p.entry_id == 0)
    _, conn1 = await join(sub, EXCLUSIVE, "c1")
    await asyncio.wait_for(gate.started.wait(), 5)
    await sub.resets.reset_cursor((lid, 15))
    _, conn2 = await join(sub, EXCLUSIVE, "c2")
    gate.release.set()
    await settle(sub)
    assert conn1.entry_ids() == []
    assert conn2.entry_ids() == list(range(15, 20))


# ---------------------------------------------------------------- half-in-flight frames

async def _queued_but_unwritten(ledger: Any) -> tuple[Any, Any, Any, ReadGate, int]:
    """c1 got 0..4 and asked for redelivery; the round queued 0..4 again for c1 (not yet
    written) and then waits in the sequential read of 5.. ."""
    await append(ledger, range(5))
    sub, _ = await open_sub(ledger)
    c1, conn1 = await join(sub, SHARED, "c1")
    await settle(sub)
    assert conn1.entry_ids() == list(range(5))
    lid = _lid(ledger)
    await append(ledger, range(5, 10))
    gate = ReadGate(ledger, lambda p: p.entry_id == 5)
    sub.redeliver(c1, None)
    await asyncio.wait_for(gate.started.wait(), 5)
    return sub, c1, conn1, gate, lid


async def test_frames_queued_before_clear_backlog_are_never_written(ledger: Any) -> None:
    sub, c1, conn1, gate, _ = await _queued_but_unwritten(ledger)
    assert c1.permits == 1000 - 10             # 5 written, 5 queued
    await sub.resets.skip_all()                       # forward
    assert c1.permits == 1000 - 5              # the reset itself dropped the queued frames
    gate.release.set()
    await settle(sub)
    assert conn1.entry_ids()[5:] == []         # today: [0..4, 0..4]
    assert c1.pending == {} and c1.unacked_messages == 0


async def test_frames_queued_before_a_skip_are_never_written(ledger: Any) -> None:
    sub, _c1, conn1, gate, _ledger_id = await _queued_but_unwritten(ledger)
    await sub.resets.skip(2)                          # forward: 0 and 1 acknowledged
    gate.release.set()
    await settle(sub)
    after = conn1.entry_ids()[5:]
    assert 0 not in after and 1 not in after
    assert sorted(after) == list(range(2, 10)) and len(after) == len(set(after))


async def test_frames_queued_before_a_backward_seek_are_never_written(ledger: Any) -> None:
    sub, _c1, conn1, gate, lid = await _queued_but_unwritten(ledger)
    await sub.resets.reset_cursor((lid, 1))           # backward
    _, conn2 = await join(sub, SHARED, "c2")
    gate.release.set()
    await settle(sub)
    assert conn1.entry_ids()[5:] == []
    assert conn2.entry_ids() == list(range(1, 10))


# ---------------------------------------------------------------- clear-backlog leftovers

async def test_clear_backlog_drops_pending_and_key_shared_ownership(ledger: Any) -> None:
    await append(ledger, range(10), key=lambda i: f"k{i % 3}")
    sub, _ = await open_sub(ledger)
    c1, conn1 = await join(sub, KEY_SHARED, "c1", mode=0)
    await settle(sub)
    assert conn1.entry_ids() == list(range(10))
    await sub.resets.skip_all()
    d = sub.dispatcher
    assert c1.pending == {} and c1.unacked_messages == 0
    assert d is not None and d.owner == {} and d.hash_owner == {}  # type: ignore[attr-defined]
    _c2, conn2 = await join(sub, KEY_SHARED, "c2", mode=0)
    await append(ledger, range(10, 40), key=lambda i: f"k{i % 3}")
    sub.on_new_entries()
    await settle(sub)
    got = sorted(conn1.entry_ids()[10:] + conn2.entry_ids())
    assert got == list(range(10, 40))       # no key stuck behind a stale owner


# ---------------------------------------------------------------- reset vs (re)join, Key_Shared

async def test_key_shared_joins_during_a_read_and_a_backward_seek(ledger: Any) -> None:
    await append(ledger, range(10), key=lambda i: f"k{i % 4}")
    sub, _ = await open_sub(ledger)
    _, conn1 = await join(sub, KEY_SHARED, "c1", mode=0)
    await settle(sub)
    lid = _lid(ledger)
    gate = ReadGate(ledger, lambda p: p.entry_id == 10)
    await append(ledger, range(10, 20), key=lambda i: f"k{i % 4}")
    sub.on_new_entries()
    await asyncio.wait_for(gate.started.wait(), 5)
    await sub.resets.reset_cursor((lid, 0))
    _, conn2 = await join(sub, KEY_SHARED, "c2", mode=0)
    _, conn3 = await join(sub, KEY_SHARED, "c3", mode=0)
    gate.release.set()
    await settle(sub)
    assert conn1.entry_ids() == list(range(10))
    a, b = conn2.entry_ids(), conn3.entry_ids()
    assert sorted(a + b) == list(range(20))  # everything once, nobody stuck
    assert a == sorted(a) and b == sorted(b)  # per-consumer (so per-key) order


async def test_key_shared_join_during_a_read_and_a_forward_skip(ledger: Any) -> None:
    await append(ledger, range(20), key=lambda i: f"k{i % 4}")
    sub, _ = await open_sub(ledger)
    lid = _lid(ledger)
    gate = ReadGate(ledger, lambda p: p.entry_id == 0)
    _c1, conn1 = await join(sub, KEY_SHARED, "c1", mode=0)
    await asyncio.wait_for(gate.started.wait(), 5)
    _, conn2 = await join(sub, KEY_SHARED, "c2", mode=0)
    await sub.resets.skip(8)
    gate.release.set()
    await settle(sub)
    a, b = conn1.entry_ids(), conn2.entry_ids()
    assert sorted(a + b) == list(range(8, 20))
    assert a == sorted(a) and b == sorted(b)
    assert sub.cursor.mark_delete_position == Position(lid, 7)


# ---------------------------------------------------------------- type switch during a reset

async def _shared_then_gone(ledger: Any) -> tuple[Any, Any, int]:
    """A Shared subscription with a delayed tracker: 0..4 delivered, 0..2 acknowledged, then
    its consumer leaves; the old tracker's close() will wait on the topic's close_gate."""
    await append(ledger, range(10))
    sub, topic = await open_sub(ledger)
    await sub.delayed.recover()     # builds the tracker (an in-memory one has nothing to recover)
    c1, conn1 = await join(sub, SHARED, "c1", permits=5)
    await settle(sub)
    assert conn1.entry_ids() == list(range(5))
    lid = _lid(ledger)
    sub.acknowledge(c1, [(Position(lid, e), None) for e in range(3)], cumulative=False)
    sub.remove_consumer(c1)
    topic.close_gate = asyncio.Event()
    return sub, topic, lid


async def test_type_switch_rewind_is_not_overtaken_by_a_joining_consumer(ledger: Any) -> None:
    sub, topic, _ledger_id = await _shared_then_gone(ledger)
    first = asyncio.create_task(join(sub, EXCLUSIVE, "a"))
    await asyncio.wait_for(topic.closing.wait(), 5)        # type switch under way
    second = asyncio.create_task(join(sub, EXCLUSIVE, "b"))
    for _ in range(20):
        await asyncio.sleep(0)
    assert sub.revisions.under_revision  # type: ignore[attr-defined]
    topic.close_gate.set()
    results = await asyncio.gather(first, second, return_exceptions=True)
    winners = [r for r in results if not isinstance(r, BaseException)]
    assert len(winners) == 1
    assert sum(isinstance(r, ConsumerBusyError) for r in results) == 1
    await settle(sub)
    _, conn = winners[0]
    assert conn.entry_ids() == list(range(3, 10))   # today: [5..9, 3, 4, 5..9]


async def test_a_skip_during_a_type_switch_is_queued_behind_it(ledger: Any) -> None:
    sub, topic, lid = await _shared_then_gone(ledger)
    first = asyncio.create_task(join(sub, EXCLUSIVE, "a"))
    await asyncio.wait_for(topic.closing.wait(), 5)
    skip = asyncio.create_task(sub.resets.skip(2))                # forward, behind the rewind
    for _ in range(20):
        await asyncio.sleep(0)
    assert not skip.done()
    topic.close_gate.set()
    await skip
    _, conn = await first
    await settle(sub)
    assert sub.cursor.mark_delete_position == Position(lid, 4)
    assert conn.entry_ids() == list(range(5, 10))


# ---------------------------------------------------------------- no round under revision

async def test_no_read_starts_while_a_revision_runs(ledger: Any) -> None:
    await append(ledger, range(5))
    sub, _ = await open_sub(ledger)
    reads: list[Position] = []
    real = ledger.read_entries

    async def counting(start: Position, n: int, *a: Any, **kw: Any) -> Any:
        reads.append(start)
        return await real(start, n, *a, **kw)

    ledger.read_entries = counting
    rev = await sub.revisions.start()
    assert sub.revisions.task_state == 1
    _c1, conn1 = await join_during(sub, rev)
    await settle(sub)
    assert reads == [] and conn1.entry_ids() == []
    sub.revisions.end(rev)
    sub.on_new_entries()
    await settle(sub)
    assert conn1.entry_ids() == list(range(5))
    assert sub.revisions.task_state == 0


async def join_during(sub: Any, rev: Any) -> tuple[Any, Any]:
    """Attach a consumer while ``rev`` runs (bypassing add_consumer's wait, as a consumer that
    joined just before the reset started would be) and give it permits."""
    from tests.consumers.revision_testlib import new_consumer

    consumer, conn, side = new_consumer(SHARED, "c1")
    side.attach(consumer, sub)
    sub.dispatcher = sub._new_dispatcher(consumer)
    sub.sub_type = SHARED
    sub.consumers.append(consumer)
    sub.dispatcher.add_consumer(consumer)
    consumer.permits = 1000
    sub.on_new_entries()
    return consumer, conn


# ---------------------------------------------------------------- case 7: last consumer leaves

async def test_last_consumer_leaving_during_a_read_then_joins_rewind_once(ledger: Any) -> None:
    await append(ledger, range(20), key=lambda i: f"k{i % 5}")
    sub, _ = await open_sub(ledger)
    c1, conn1 = await join(sub, KEY_SHARED, "c1", permits=10, mode=0)
    await settle(sub)
    assert conn1.entry_ids() == list(range(10))
    gate = ReadGate(ledger, lambda p: p.entry_id == 10)
    c1.permits += 10
    sub.on_new_entries()
    await asyncio.wait_for(gate.started.wait(), 5)
    count = sub.revisions.increase_count
    sub.remove_consumer(c1)                      # the last consumer leaves mid-read
    _, conn2 = await join(sub, KEY_SHARED, "c2", mode=0)   # first join: Pulsar's rewind
    _, conn3 = await join(sub, KEY_SHARED, "c3", mode=0)
    gate.release.set()
    await settle(sub)
    assert sub.revisions.increase_count == count + 1
    a, b = conn2.entry_ids(), conn3.entry_ids()
    assert sorted(a + b) == list(range(20))      # from the first unacked entry, once each
    assert a == sorted(a) and b == sorted(b)


async def test_a_subscribe_waits_for_a_running_reset(ledger: Any) -> None:
    await append(ledger, range(5))
    sub, _ = await open_sub(ledger)
    rev = await sub.revisions.start()
    joining = asyncio.create_task(join(sub, SHARED, "late"))
    for _ in range(20):
        await asyncio.sleep(0)
    assert not joining.done() and sub.consumers == []
    lid = _lid(ledger)
    cursor = sub.cursor
    rev.apply_at_end(lambda: cursor.reset(Position(lid, 3)))
    sub.revisions.end(rev)
    _, conn = await asyncio.wait_for(joining, 5)
    await settle(sub)
    assert conn.entry_ids() == [3, 4]
