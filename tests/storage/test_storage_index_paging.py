"""The per-entry index of sealed segments is paged within index_cache_bytes: a big ledger
opens holding no sealed segment's index, and reads page indexes in and out."""

from __future__ import annotations

import asyncio
from pathlib import Path

from storage_testlib import ledger_dir, write_segment

from storage import Position, SegmentStore, StorageConfig
from storage.index_pages import ENTRY_INDEX_BYTES

TOPIC = "persistent://public/default/paged"
PER_SEGMENT = 20_000
SEGMENTS = 6


async def test_sealed_indexes_are_paged_within_the_budget(tmp_path: Path) -> None:
    directory = ledger_dir(tmp_path, TOPIC)
    for ledger_id in range(SEGMENTS):
        payloads = [b"%d:%d" % (ledger_id, i) for i in range(PER_SEGMENT)]
        write_segment(directory, ledger_id, payloads)
    (directory / "NAME").write_text(TOPIC)
    store = await SegmentStore.open(tmp_path)
    await store.open_ledger(TOPIC)  # first open: scans, writes the .idx files
    await store.close()
    budget = 2 * PER_SEGMENT * ENTRY_INDEX_BYTES  # two segments' indexes
    store = await SegmentStore.open(tmp_path, StorageConfig(index_cache_bytes=budget))
    ml = await store.open_ledger(TOPIC)
    assert store.pager.resident_bytes == 0  # opened without keeping any sealed index
    assert ml.number_of_entries == SEGMENTS * PER_SEGMENT
    for ledger_id in range(SEGMENTS):  # read across every segment: pages in, evicts
        got = await ml.read_entries(Position(ledger_id, PER_SEGMENT - 2), 1)
        assert [e.data for e in got] == [b"%d:%d" % (ledger_id, PER_SEGMENT - 2)]
        assert store.pager.resident_bytes <= budget
    assert store.pager.loads == SEGMENTS
    assert store.pager.evictions == SEGMENTS - 2
    # Concurrent reads of one paged-out segment share a single load.
    loads = store.pager.loads
    got = await asyncio.gather(*(ml.read_entry(Position(0, i)) for i in range(5)))
    assert [e.data for e in got if e is not None] == [b"0:%d" % i for i in range(5)]
    assert store.pager.loads == loads + 1
    await store.close()


async def test_rolled_over_segment_is_paged_out_once_its_index_is_written(
    tmp_path: Path,
) -> None:
    config = StorageConfig(max_entries_per_ledger=100, index_cache_bytes=0)
    store = await SegmentStore.open(tmp_path, config)
    ml = await store.open_ledger(TOPIC)
    positions = await asyncio.gather(*(ml.append(b"m%d" % i) for i in range(250)))
    await ml.close()  # waits for the index jobs
    ml = await store.open_ledger(TOPIC)
    got = await ml.read_entries(positions[0], 300)
    assert [e.data for e in got] == [b"m%d" % i for i in range(250)]
    assert store.pager.resident_bytes <= 100 * ENTRY_INDEX_BYTES  # at most the last one read
    await store.close()
