"""ManagedCursor bounds: acks and resets naming entries that do not exist are ignored or
clamped, so future messages are never swallowed and the id allocator is never poisoned."""

from __future__ import annotations

import asyncio
from pathlib import Path

from storage import Position, SegmentStore, StorageConfig
from storage.cursor import MAX_ENTRY_ID

TOPIC = "persistent://public/default/bounds"


async def _filled(root: Path, n: int, **kw: object) -> tuple[SegmentStore, list[Position]]:
    store = await SegmentStore.open(root, StorageConfig(**kw))  # type: ignore[arg-type]
    ml = await store.open_ledger(TOPIC)
    positions = await asyncio.gather(*(ml.append(b"e%d" % i) for i in range(n)))
    return store, list(positions)


async def test_individual_ack_of_future_entry_is_ignored(tmp_path: Path) -> None:
    store, ps = await _filled(tmp_path, 1)
    ml = store.open_ledgers[TOPIC]
    cursor = await ml.open_cursor("s", initial_position="earliest")
    lid = ps[0].ledger_id
    cursor.delete([Position(lid, 2), Position(lid + 12, 3), Position(lid, 1 << 40),
                   Position(lid, -7)])
    assert len(cursor.individually_deleted) == 0
    later = await asyncio.gather(*(ml.append(b"m%d" % i) for i in range(3)))
    assert later[1] == Position(lid, 2)
    assert not cursor.is_deleted(later[1])
    assert cursor.backlog == 4
    await store.close()


async def test_cumulative_ack_beyond_last_confirmed_is_ignored(tmp_path: Path) -> None:
    store, ps = await _filled(tmp_path, 3)
    ml = store.open_ledgers[TOPIC]
    cursor = await ml.open_cursor("s", initial_position="earliest")
    cursor.mark_delete(Position(1 << 62, 0))
    cursor.mark_delete(Position(ps[0].ledger_id, 99))
    assert cursor.mark_delete_position == Position(ps[0].ledger_id, -1)
    assert cursor.backlog == 3
    cursor.mark_delete(ps[1])
    assert cursor.mark_delete_position == ps[1]
    await store.close()


async def test_is_deleted_of_out_of_range_ids_is_false_not_overflow(tmp_path: Path) -> None:
    store, ps = await _filled(tmp_path, 2)
    cursor = await store.open_ledgers[TOPIC].open_cursor("s", initial_position="earliest")
    cursor.delete([ps[1]])
    lid = ps[0].ledger_id
    assert not cursor.is_deleted(Position(lid, MAX_ENTRY_ID))
    assert not cursor.is_deleted(Position(lid, 1 << 62))
    assert cursor.is_deleted(ps[1])
    await store.close()


async def test_bulk_entry_id_acks_beyond_extent_are_ignored(tmp_path: Path) -> None:
    store, ps = await _filled(tmp_path, 2)
    ml = store.open_ledgers[TOPIC]
    cursor = await ml.open_cursor("s", initial_position="earliest")
    lid = ps[0].ledger_id
    cursor.delete_entry_ids(lid, [1, 5, 1 << 40])
    assert cursor.individually_deleted.copies() == {lid: cursor.individually_deleted.copies()[lid]}
    assert list(cursor.individually_deleted.copies()[lid]) == [1]
    await store.close()


async def test_reset_beyond_end_lands_on_end_and_keeps_new_messages(tmp_path: Path) -> None:
    store, ps = await _filled(tmp_path, 2)
    ml = store.open_ledgers[TOPIC]
    cursor = await ml.open_cursor("s", initial_position="earliest")
    cursor.reset(Position(99999, 0))
    end = Position(ps[-1].ledger_id, ps[-1].entry_id + 1)
    assert cursor.read_position == end
    assert cursor.mark_delete_position == ps[-1]
    new = await ml.append(b"new")
    assert new == end
    assert not cursor.is_deleted(new)
    assert cursor.backlog == 1
    await cursor.flush()
    await store.close()
    reopened = await SegmentStore.open(tmp_path, StorageConfig())
    ml2 = await reopened.open_ledger(TOPIC)
    again = await ml2.open_cursor("s")
    assert again.read_position <= Position(new.ledger_id + 1, 0)
    assert ml2.current_ledger_id < 99999  # the allocator did not count 99999
    await reopened.close()


async def test_reset_to_missing_entry_of_closed_ledger_moves_to_next_ledger(
        tmp_path: Path) -> None:
    store, ps = await _filled(tmp_path, 5, max_entries_per_ledger=3)
    ml = store.open_ledgers[TOPIC]
    cursor = await ml.open_cursor("s", initial_position="earliest")
    cursor.reset(Position(ps[0].ledger_id, 7))
    assert cursor.read_position == ps[3]
    assert cursor.mark_delete_position == Position(ps[3].ledger_id, -1)
    await store.close()
