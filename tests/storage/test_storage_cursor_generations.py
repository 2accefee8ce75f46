"""Cursor files keep their previous generation; a damaged cursor falls back to it, else to
the earliest position; trimming waits until the cursor is saved again."""

from __future__ import annotations

import asyncio
from pathlib import Path

from storage_testlib import flip_bit, ledger_dir

from storage import Position, SegmentStore, StorageConfig
from storage.names import encode_name

TOPIC = "persistent://public/default/generations"
CONFIG = StorageConfig(max_entries_per_ledger=10, mark_delete_rate_limit_per_sec=0)


def _cursor_file(root: Path, name: str, suffix: str = ".cur") -> Path:
    return ledger_dir(root, TOPIC) / "cursors" / (encode_name(name) + suffix)


async def _topic_with_cursor(root: Path, entries: int) -> list[Position]:
    store = await SegmentStore.open(root, CONFIG)
    ml = await store.open_ledger(TOPIC)
    await ml.open_cursor("sub", initial_position="earliest")
    positions = [await ml.append(b"m%d" % i) for i in range(entries)]
    await store.close()
    return positions


async def test_flipped_bit_in_only_cursor_file_loses_no_backlog_to_trim(tmp_path: Path) -> None:
    # The reproduction: a subscription with 30 unacknowledged entries over 3 ledgers.
    positions = await _topic_with_cursor(tmp_path, 30)
    flip_bit(_cursor_file(tmp_path, "sub"), 12, 3)
    store = await SegmentStore.open(tmp_path, CONFIG)
    ml = await store.open_ledger(TOPIC)
    assert "sub" in ml.cursors
    assert ml.trim_blockers
    assert await ml.trim() is None  # refused: trimming waits for the cursor to be good again
    await ml.flush_cursors()  # saved again: a trim is safe now, and deletes nothing unread
    assert not ml.trim_blockers
    await ml.trim()
    got = await ml.read_entries(positions[0], 100)
    assert [e.data for e in got] == [b"m%d" % i for i in range(30)]
    assert ml.cursors["sub"].backlog == 30
    stats = store.stats()
    assert (stats.corrupt_cursors, stats.cursor_fallbacks) == (1, 1)
    await store.close()


async def test_damaged_cursor_falls_back_to_its_previous_generation(tmp_path: Path) -> None:
    positions = await _topic_with_cursor(tmp_path, 20)
    store = await SegmentStore.open(tmp_path, CONFIG)
    ml = await store.open_ledger(TOPIC)
    cursor = ml.cursors["sub"]
    cursor.mark_delete(positions[4])
    await cursor.flush()  # generation A: 0..4 acknowledged
    cursor.mark_delete(positions[9])
    await cursor.flush()  # generation B: 0..9 acknowledged
    await store.close()
    assert _cursor_file(tmp_path, "sub", ".cur.prev").exists()
    flip_bit(_cursor_file(tmp_path, "sub"), 20, 1)
    store = await SegmentStore.open(tmp_path, CONFIG)
    ml = await store.open_ledger(TOPIC)
    # Generation A: entries 5..9 come again (duplicates), nothing is lost.
    assert ml.cursors["sub"].mark_delete_position == positions[4]
    assert store.trim_unsafe() == {TOPIC: {"sub": "cursor recovered from fallback previous"}}
    assert "trimming suspended" in " ".join(store.health_problems())
    await store.flush()
    assert store.trim_unsafe() == {}
    await store.close()


async def test_crash_between_the_renames_of_a_save_keeps_the_previous_generation(
    tmp_path: Path,
) -> None:
    positions = await _topic_with_cursor(tmp_path, 5)
    store = await SegmentStore.open(tmp_path, CONFIG)
    ml = await store.open_ledger(TOPIC)
    ml.cursors["sub"].mark_delete(positions[2])
    await ml.cursors["sub"].flush()
    await store.close()
    # As a crash after "rename .cur -> .cur.prev" leaves it: no .cur, a stray temporary file.
    current = _cursor_file(tmp_path, "sub")
    current.replace(_cursor_file(tmp_path, "sub", ".cur.prev"))
    _cursor_file(tmp_path, "sub", ".cur.tmp").write_bytes(b"half a cursor")
    store = await SegmentStore.open(tmp_path, CONFIG)
    ml = await store.open_ledger(TOPIC)
    assert ml.cursors["sub"].mark_delete_position == positions[2]
    assert not _cursor_file(tmp_path, "sub", ".cur.tmp").exists()
    await store.close()


async def test_cursor_whose_name_cannot_be_recovered_blocks_trimming(tmp_path: Path) -> None:
    long_name = "s" * 300  # hashed file name: the name lives only inside the file
    store = await SegmentStore.open(tmp_path, CONFIG)
    ml = await store.open_ledger(TOPIC)
    await ml.open_cursor(long_name, initial_position="earliest")
    for i in range(25):
        await ml.append(b"x%d" % i)
    await store.close()
    path = _cursor_file(tmp_path, long_name)
    path.write_bytes(b"\xff" * path.stat().st_size)  # header and all
    store = await SegmentStore.open(tmp_path, CONFIG)
    ml = await store.open_ledger(TOPIC)
    assert long_name not in ml.cursors
    assert ml.trim_blockers
    assert await ml.trim() is None
    assert store.stats().trim_unsafe_ledgers == 1
    await store.close()


async def test_hashed_cursor_name_is_recovered_from_a_damaged_body(tmp_path: Path) -> None:
    long_name = "t" * 300
    store = await SegmentStore.open(tmp_path, CONFIG)
    ml = await store.open_ledger(TOPIC)
    await ml.open_cursor(long_name, initial_position="earliest")
    await asyncio.gather(*(ml.append(b"y%d" % i) for i in range(3)))
    await store.close()
    path = _cursor_file(tmp_path, long_name)
    flip_bit(path, path.stat().st_size - 6, 0)  # the body, not the header with the name
    store = await SegmentStore.open(tmp_path, CONFIG)
    ml = await store.open_ledger(TOPIC)
    assert ml.cursors[long_name].backlog == 3  # recreated at the earliest position
    await store.close()


async def test_deleted_cursor_leaves_no_generation_behind(tmp_path: Path) -> None:
    positions = await _topic_with_cursor(tmp_path, 3)
    store = await SegmentStore.open(tmp_path, CONFIG)
    ml = await store.open_ledger(TOPIC)
    ml.cursors["sub"].mark_delete(positions[0])
    await ml.cursors["sub"].flush()
    await ml.delete_cursor("sub")
    await store.close()
    assert list((ledger_dir(tmp_path, TOPIC) / "cursors").iterdir()) == []
    store = await SegmentStore.open(tmp_path, CONFIG)
    assert "sub" not in (await store.open_ledger(TOPIC)).cursors
    await store.close()
