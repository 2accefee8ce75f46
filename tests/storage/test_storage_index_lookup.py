"""Scattered reads of sealed segments whose index is paged out look their entries up in the
index file (storage/index_lookup.py) instead of paging the whole index in; whatever a lookup
cannot vouch for (a damaged index file, an entry dropped or damaged) is decided by the
checked index, as before."""

from __future__ import annotations

import asyncio
import struct
from pathlib import Path

from storage_testlib import flip_bit, open_store, segment_paths

from storage import Position, SegmentStore
from storage.ledger import ManagedLedger
from storage.segment_file import IndexResidency
from storage.segments import INDEX_HEADER_SIZE, RECORD_HEADER_SIZE, index_path

TOPIC = "persistent://public/default/looked-up"
PER_LEDGER = 20
LEDGERS = 8


async def _written(root: Path, size: int = 50) -> list[Position]:
    store = await open_store(root, max_entries_per_ledger=PER_LEDGER)
    ml = await store.open_ledger(TOPIC)
    written = list(await asyncio.gather(*(ml.append(b"%05d" % i + b"x" * (size - 5))
                                          for i in range(PER_LEDGER * LEDGERS))))
    await store.close()
    return written


async def _paged_out(root: Path, written: list[Position]
                     ) -> tuple[SegmentStore, ManagedLedger]:
    """The store reopened with room for one segment's index: every sealed segment read once
    (its first-read check), then paged out again by the next one's."""
    store = await open_store(root, max_entries_per_ledger=PER_LEDGER, index_cache_bytes=0)
    ml = await store.open_ledger(TOPIC)
    for pos in written[::PER_LEDGER]:
        assert await ml.read_entry(pos) is not None
    return store, ml


def _payload(i: int, size: int = 50) -> bytes:
    return b"%05d" % i + b"x" * (size - 5)


def _scattered(written: list[Position]) -> list[Position]:
    """A due round's order turned into position order: a few entries of every segment."""
    return sorted(written[i] for i in range(3, len(written), 7))


async def test_paged_out_segments_are_read_without_paging_their_indexes_in(
        tmp_path: Path) -> None:
    written = await _written(tmp_path)
    store, ml = await _paged_out(tmp_path, written)
    segments = [ml._ledgers[pos.ledger_id].segment for pos in written[::PER_LEDGER]]
    assert sum(s.index is IndexResidency.PAGED_OUT for s in segments) >= LEDGERS - 2
    loads = store.pager.loads
    wanted = _scattered(written)
    for _ in range(3):
        entries, missing = await ml.read_positions(wanted)
        assert missing == []
        assert [e.position for e in entries] == wanted
        assert [e.data for e in entries] == [_payload(written.index(p)) for p in wanted]
    assert store.pager.loads == loads          # not one index paged in for them
    assert store.corrupt_records_total == 0
    await store.close()


async def test_a_byte_limit_bounds_the_lookups_too(tmp_path: Path) -> None:
    written = await _written(tmp_path, size=1000)
    store, ml = await _paged_out(tmp_path, written)
    wanted = _scattered(written)
    entries, missing = await ml._reader.read_positions(wanted, 2500)
    assert missing == []
    assert 1 <= len(entries) <= 3              # 2,500 bytes: three entries of 1,000
    assert [e.position for e in entries] == wanted[:len(entries)]
    assert [e.data for e in entries] == [_payload(written.index(e.position), 1000)
                                         for e in entries]
    await store.close()


async def test_a_damaged_index_file_costs_no_entry_and_blames_no_record(
        tmp_path: Path) -> None:
    written = await _written(tmp_path)
    store, ml = await _paged_out(tmp_path, written)
    victim = written[PER_LEDGER + 5]         # the second segment's sixth entry
    segment = ml._ledgers[victim.ledger_id].segment
    assert segment.index is IndexResidency.PAGED_OUT
    idx = index_path(segment.path)
    with open(idx, "r+b") as f:               # its offset now points at another record
        f.seek(INDEX_HEADER_SIZE + 8 * victim.entry_id)
        (offset,) = struct.unpack("<q", f.read(8))
        f.seek(INDEX_HEADER_SIZE + 8 * victim.entry_id)
        f.write(struct.pack("<q", offset + RECORD_HEADER_SIZE + 50))
    with open(idx, "r+b") as f:               # and the next one's says missing (-1)
        f.seek(INDEX_HEADER_SIZE + 8 * (victim.entry_id + 1))
        f.write(struct.pack("<q", -1))
    wanted = [written[3], victim, written[PER_LEDGER + 6], written[3 * PER_LEDGER + 1]]
    entries, missing = await ml.read_positions(wanted)
    assert missing == []
    assert [e.position for e in entries] == wanted
    assert [e.data for e in entries] == [_payload(written.index(p)) for p in wanted]
    assert store.corrupt_records_total == 0   # the checked index (a scan) read them right
    await store.close()


async def test_a_damaged_record_of_a_paged_out_segment_is_missing_and_reported(
        tmp_path: Path) -> None:
    written = await _written(tmp_path)
    victim = written[2 * PER_LEDGER + 4]
    path = segment_paths(tmp_path, TOPIC)[2]
    head = path.stat().st_size - PER_LEDGER * (RECORD_HEADER_SIZE + 50)
    flip_bit(path, head + 4 * (RECORD_HEADER_SIZE + 50) + RECORD_HEADER_SIZE + 20, 1)
    store, ml = await _paged_out(tmp_path, written)
    assert ml._ledgers[victim.ledger_id].segment.index is IndexResidency.PAGED_OUT
    wanted = [written[2 * PER_LEDGER + 3], victim, written[5 * PER_LEDGER]]
    entries, missing = await ml.read_positions(wanted)
    assert [e.position for e in entries] == [wanted[0], wanted[2]]
    assert missing == [victim]
    assert store.corrupt_records_total == 1   # reported once, by the checked read
    assert await ml.read_entry(victim) is None
    await store.close()


async def test_a_segment_gone_meanwhile_has_its_positions_missing(tmp_path: Path) -> None:
    written = await _written(tmp_path)
    store, ml = await _paged_out(tmp_path, written)
    victim = written[4 * PER_LEDGER + 2]
    segment = ml._ledgers[victim.ledger_id].segment
    assert segment.index is IndexResidency.PAGED_OUT
    segment.path.unlink()                     # as a trim does, between the plan and the read
    wanted = [written[PER_LEDGER + 1], victim, written[4 * PER_LEDGER + 9],
              written[6 * PER_LEDGER]]
    entries, missing = await ml.read_positions(wanted)
    assert [e.position for e in entries] == [wanted[0], wanted[3]]
    assert [e.data for e in entries] == [_payload(written.index(p)) for p in
                                         (wanted[0], wanted[3])]
    assert missing == [victim, wanted[2]]
    assert store.corrupt_records_total == 0
    await store.close()
