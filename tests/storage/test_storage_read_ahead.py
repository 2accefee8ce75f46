"""Read-ahead of sequential disk reads (storage/reads.py): every entry once, in order, from
fewer reads; kept entries never outlive their ledger's reads elsewhere or their bound."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from waiting import wait_until_async

from storage import Position, SegmentStore, StorageConfig, reads
from storage.reads import READ_AHEAD_ENTRIES

TOPIC = "persistent://public/default/t"


async def _written(root: Path, n: int) -> list[Position]:
    store = await SegmentStore.open(root, StorageConfig())
    ml = await store.open_ledger(TOPIC)
    positions: list[Position] = []
    for start in range(0, n, 500):
        positions += await asyncio.gather(*(ml.append(b"e%d" % i)
                                            for i in range(start, min(n, start + 500))))
    await store.close()
    return positions


async def test_sequential_reads_of_100_return_every_entry_once_in_order_from_fewer_reads(
        tmp_path: Path) -> None:
    n = 3 * READ_AHEAD_ENTRIES + 250
    positions = await _written(tmp_path, n)
    store = await SegmentStore.open(tmp_path, StorageConfig(entry_cache_bytes=0))  # disk only
    ml = await store.open_ledger(TOPIC)
    preads = 0
    pread = store._ops.pread

    def counting(fd: int, size: int, offset: int) -> bytes:
        nonlocal preads
        preads += 1
        return pread(fd, size, offset)

    store._ops.pread = counting  # type: ignore[method-assign]
    got: list[bytes] = []
    seen: list[Position] = []
    pos = positions[0]
    while True:
        entries = await ml.read_entries(pos, 100)
        if not entries:
            break
        got += [e.data for e in entries]
        seen += [e.position for e in entries]
        pos = ml.next_position(entries[-1].position)
    assert got == [b"e%d" % i for i in range(n)]
    assert seen == positions
    reader = ml._reader
    assert reader.read_ahead_entries > 2 * READ_AHEAD_ENTRIES
    assert preads < n // 100 // 2   # a read per ~1,100 entries, not per 100
    await store.close()


async def test_a_read_elsewhere_drops_what_was_kept_and_still_gets_its_own_entries(
        tmp_path: Path) -> None:
    positions = await _written(tmp_path, 2000)
    store = await SegmentStore.open(tmp_path, StorageConfig(entry_cache_bytes=0))
    ml = await store.open_ledger(TOPIC)
    await ml.read_entries(positions[0], 100)
    await ml.read_entries(positions[100], 100)      # sequential: reads ahead
    assert ml._reader._ahead is not None
    back = await ml.read_entries(positions[10], 5)   # elsewhere: dropped, read from disk
    assert [e.data for e in back] == [b"e%d" % i for i in range(10, 15)]
    assert [e.position for e in back] == positions[10:15]
    assert ml._reader._ahead is None
    # forward inside what was kept: served from it, the positions asked for and on
    await ml.read_entries(positions[15], 100)
    await ml.read_entries(positions[115], 100)
    kept = ml._reader.read_ahead_entries
    mid = await ml.read_entries(positions[400], 50)  # skips ahead inside the kept range
    assert [e.position for e in mid] == positions[400:450]
    assert [e.data for e in mid] == [b"e%d" % i for i in range(400, 450)]
    assert ml._reader.read_ahead_entries == kept + 50
    await store.close()


async def test_kept_entries_are_dropped_after_a_while_unread(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    positions = await _written(tmp_path, 1000)
    monkeypatch.setattr(reads, "READ_AHEAD_KEEP_S", 0.01)
    store = await SegmentStore.open(tmp_path, StorageConfig(entry_cache_bytes=0))
    ml = await store.open_ledger(TOPIC)
    await ml.read_entries(positions[0], 100)
    await ml.read_entries(positions[100], 100)
    assert ml._reader._ahead is not None
    await wait_until_async(lambda: ml._reader._ahead is None, message="kept entries dropped")
    rest = await ml.read_entries(positions[200], 800)
    assert [e.data for e in rest] == [b"e%d" % i for i in range(200, 1000)]
    await store.close()
