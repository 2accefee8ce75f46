"""The sealed-segment manifest: a ledger opens from it without opening its sealed segments, and
each segment is checked against its files before its first read is served. A torn or damaged
manifest, a segment changed or gone since its record, a damaged index or header: never a
wrong payload, nothing lost that the files still hold, every loss reported."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest
from storage_testlib import copy_store, flip_bit, ledger_dir, segment_paths

from storage import Position, SegmentStore, StorageConfig
from storage.fileops import FileOps
from storage.sealed_manifest import (
    MANIFEST_NAME,
    RECORD_SIZE,
    SealedRecord,
    decode_records,
    encode_records,
)
from storage.segment_file import IndexResidency

TOPIC = "persistent://public/default/manifest"
PER_LEDGER = 20
LEDGERS = 6


class CountingOps(FileOps):
    """Counts the opens of segment and index files."""

    def __init__(self) -> None:
        self.opened: list[str] = []

    def open(self, path: str | Path, flags: int, mode: int = 0o644) -> int:
        name = os.fspath(path).rsplit("/", 1)[-1]
        if name.endswith((".seg", ".idx")):
            self.opened.append(name)
        return super().open(path, flags, mode)


@pytest.fixture
async def base(tmp_path: Path) -> tuple[Path, dict[Position, bytes]]:
    root = tmp_path / "base"
    store = await SegmentStore.open(root, StorageConfig(max_entries_per_ledger=PER_LEDGER))
    ml = await store.open_ledger(TOPIC)
    payloads = [b"entry-%03d" % i for i in range(PER_LEDGER * LEDGERS)]
    positions = await asyncio.gather(*(ml.append(p) for p in payloads))
    await store.close()
    return root, dict(zip(positions, payloads, strict=True))


async def _open(root: Path, ops: FileOps | None = None) -> tuple[SegmentStore, object]:
    store = await SegmentStore.open(root, StorageConfig(entry_cache_bytes=0), file_ops=ops)
    return store, await store.open_ledger(TOPIC)


async def _read_all(root: Path) -> tuple[SegmentStore, dict[Position, bytes]]:
    store = await SegmentStore.open(root, StorageConfig(entry_cache_bytes=0))
    ml = await store.open_ledger(TOPIC)
    got = await ml.read_entries(Position(0, 0), 10_000, 1 << 30)
    return store, {e.position: e.data for e in got}


def test_records_round_trip_and_a_damaged_one_is_skipped() -> None:
    records = [SealedRecord(i, 10 + i, 100 + i, 5, 32 + i, 3, 0) for i in range(4)]
    data = bytearray(encode_records(records))
    assert len(data) == 4 * RECORD_SIZE
    data[RECORD_SIZE + 3] ^= 1  # the second record's body
    got, count = decode_records(bytes(data) + b"torn")  # a torn tail is not a record
    assert count == 4
    assert sorted(got) == [0, 2, 3]
    assert got[2] == records[2]
    newer = records[0]._replace(entries=99)
    got, _ = decode_records(encode_records([records[0], newer]))
    assert got[0] == newer  # a later record of a ledger replaces an earlier one


async def test_sealed_segments_open_without_opening_their_files(
    base: tuple[Path, dict[Position, bytes]],
) -> None:
    root, original = base
    assert (ledger_dir(root, TOPIC) / MANIFEST_NAME).exists()
    ops = CountingOps()
    store, ml = await _open(root, ops)
    try:
        assert ops.opened == []  # every sealed segment came from the manifest
        assert ml.number_of_entries == len(original)  # type: ignore[attr-defined]
        sealed = [led for led in ml._ledgers.values() if led.sealed]  # type: ignore[attr-defined]
        assert len(sealed) == LEDGERS
        assert {led.segment.index for led in sealed} == {IndexResidency.UNCHECKED}
        got = await ml.read_entries(Position(0, 0), 10_000, 1 << 30)  # type: ignore[attr-defined]
        assert {e.position: e.data for e in got} == original
        assert ml.sealed_checks.checked == LEDGERS  # type: ignore[attr-defined]
        assert ml.sealed_checks.scanned == 0  # type: ignore[attr-defined]
        assert store.recovery_report.events == ()
    finally:
        await store.close()


@pytest.mark.parametrize("damage", ["torn", "flipped", "garbage", "emptied", "removed"])
async def test_a_torn_or_damaged_manifest_falls_back_to_the_full_check(
    base: tuple[Path, dict[Position, bytes]], tmp_path: Path, damage: str,
) -> None:
    root, original = base
    copy = copy_store(root, tmp_path / damage)
    manifest = ledger_dir(copy, TOPIC) / MANIFEST_NAME
    data = manifest.read_bytes()
    if damage == "torn":
        manifest.write_bytes(data[: 2 * RECORD_SIZE + 17])
    elif damage == "flipped":
        for k in range(len(data) // RECORD_SIZE):
            flip_bit(manifest, k * RECORD_SIZE + 9, 2)  # every record's entry count
    elif damage == "garbage":
        manifest.write_bytes(os.urandom(len(data)))
    elif damage == "emptied":
        manifest.write_bytes(b"")
    else:
        manifest.unlink()
    store, got = await _read_all(copy)
    try:
        assert got == original
        assert store.recovery_report.events == ()
    finally:
        await store.close()
    # The open brought the manifest up to date: every sealed segment has an intact record.
    records, _ = decode_records(manifest.read_bytes())
    assert set(records) >= {int(p.stem) for p in segment_paths(copy, TOPIC)[:LEDGERS]}
    ops = CountingOps()
    store, _ml = await _open(copy, ops)
    await store.close()
    assert ops.opened == []  # the next open takes every sealed segment from it again


async def test_a_segment_cut_after_its_record_is_checked_and_reported_at_open(
    base: tuple[Path, dict[Position, bytes]], tmp_path: Path,
) -> None:
    root, original = base
    copy = copy_store(root, tmp_path / "cut")
    first = segment_paths(copy, TOPIC)[0]
    first.write_bytes(first.read_bytes()[:-5])  # the last record of ledger 0 is torn
    store, ml = await _open(copy)
    try:
        # Found by the open (the size no longer matches the record), before any read.
        assert [e.kind for e in store.recovery_report.events] == ["truncated_tail"]
        assert ml.number_of_entries == len(original) - 1  # type: ignore[attr-defined]
    finally:
        await store.close()
    store, got = await _read_all(copy)
    try:
        assert [p for p in original if p not in got] == [Position(0, PER_LEDGER - 1)]
        assert all(original[p] == data for p, data in got.items())
        assert store.recovery_report.events == ()  # the repair's record is trusted again
    finally:
        await store.close()


async def test_a_missing_segment_or_index_is_not_taken_from_the_manifest(
    base: tuple[Path, dict[Position, bytes]], tmp_path: Path,
) -> None:
    root, original = base
    copy = copy_store(root, tmp_path / "gone")
    paths = segment_paths(copy, TOPIC)
    paths[1].unlink()  # a segment gone (its record stays): not listed, not served
    paths[2].with_suffix(".idx").unlink()  # an index gone: the segment is scanned at open
    store, got = await _read_all(copy)
    try:
        lost = {p for p in original if p not in got}
        assert lost == {Position(1, i) for i in range(PER_LEDGER)}
        assert all(original[p] == data for p, data in got.items())
    finally:
        await store.close()
    assert paths[2].with_suffix(".idx").exists()  # rewritten after the scan


async def test_header_rot_in_a_trusted_segment_is_found_and_reported_at_its_first_read(
    base: tuple[Path, dict[Position, bytes]], tmp_path: Path,
) -> None:
    root, original = base
    copy = copy_store(root, tmp_path / "header")
    first = segment_paths(copy, TOPIC)[0]
    flip_bit(first, 3, 1)  # the header's magic: same size, so the record is trusted
    flip_bit(first, 32 + 16 + 2, 0)  # and the payload of entry (0, 0)
    store, ml = await _open(copy)
    try:
        assert store.recovery_report.events == ()  # nothing read yet
        cursor = await ml.open_cursor("s", initial_position="earliest")  # type: ignore[attr-defined]
        got = await ml.read_entries(Position(0, 0), 10_000, 1 << 30)  # type: ignore[attr-defined]
        assert all(original[e.position] == e.data for e in got)
        assert [e.position for e in got] == [p for p in original if p != Position(0, 0)]
        kinds = [e.kind for e in store.recovery_report.events]
        assert kinds == ["bad_header", "corrupt_record"]
        assert store.recovery_report.corrupt_records == 1
        assert await ml.read_entry(Position(0, 0)) is None  # type: ignore[attr-defined]
        assert cursor.mark_delete_position == Position(0, 0)  # the hole is not a backlog
        assert ml.sealed_checks.scanned == 1  # type: ignore[attr-defined]
    finally:
        await store.close()


async def test_a_damaged_index_of_a_trusted_segment_is_rewritten_at_its_first_read(
    base: tuple[Path, dict[Position, bytes]], tmp_path: Path,
) -> None:
    root, original = base
    copy = copy_store(root, tmp_path / "index")
    index = segment_paths(copy, TOPIC)[3].with_suffix(".idx")
    good = index.read_bytes()
    flip_bit(index, 70, 4)  # an offset: the index's CRC fails
    store, got = await _read_all(copy)
    try:
        assert got == original
        assert store.recovery_report.events == ()
    finally:
        await store.close()
    assert index.read_bytes() == good


async def test_entries_a_record_counts_but_the_files_lack_become_missing(
    base: tuple[Path, dict[Position, bytes]], tmp_path: Path,
) -> None:
    root, original = base
    copy = copy_store(root, tmp_path / "lying")
    directory = ledger_dir(copy, TOPIC)
    records, _ = decode_records((directory / MANIFEST_NAME).read_bytes())
    # A record claiming more entries than ledger 0's files hold (same segment size).
    with open(directory / MANIFEST_NAME, "ab") as f:
        f.write(encode_records([records[0]._replace(entries=PER_LEDGER + 3)]))
    store, ml = await _open(copy)
    try:
        cursor = await ml.open_cursor("s", initial_position="earliest")  # type: ignore[attr-defined]
        got = await ml.read_entries(Position(0, 0), 10_000, 1 << 30)  # type: ignore[attr-defined]
        assert {e.position: e.data for e in got} == original  # nothing invented, nothing lost
        for entry_id in range(PER_LEDGER, PER_LEDGER + 3):
            assert await ml.read_entry(Position(0, entry_id)) is None  # type: ignore[attr-defined]
        cursor.delete([e.position for e in got if e.position.ledger_id == 0])
        assert cursor.mark_delete_position >= Position(0, PER_LEDGER + 2)
    finally:
        await store.close()


async def test_the_manifest_is_compacted_when_most_records_name_gone_segments(
    tmp_path: Path,
) -> None:
    store = await SegmentStore.open(tmp_path, StorageConfig(max_entries_per_ledger=2))
    ml = await store.open_ledger(TOPIC)
    for _ in range(200):
        await ml.append(b"x")
    await ml.close()
    manifest = ledger_dir(tmp_path, TOPIC) / MANIFEST_NAME
    assert len(manifest.read_bytes()) >= 100 * RECORD_SIZE
    ml = await store.open_ledger(TOPIC)
    assert await ml.trim() is not None  # no cursor: every sealed ledger goes
    await store.close()  # the I/O thread's compaction after the trim is done by then
    records, count = decode_records(manifest.read_bytes())
    assert count == 0
    # ... and an open compacts one too (here: records appended back by hand).
    manifest.write_bytes(encode_records(
        [SealedRecord(i, 2, 2, 0, 64, 3, 0) for i in range(100)]))
    store = await SegmentStore.open(tmp_path)
    ml = await store.open_ledger(TOPIC)
    await store.close()
    records, count = decode_records(manifest.read_bytes())
    assert count <= 2 and all(
        (ledger_dir(tmp_path, TOPIC) / f"{i:020d}.seg").exists() for i in records)


async def test_the_pager_pages_in_an_unchecked_segment_it_is_asked_for(
    base: tuple[Path, dict[Position, bytes]],
) -> None:
    root, _ = base
    store, ml = await _open(root)
    try:
        led = ml._ledgers[0]  # type: ignore[attr-defined]
        assert led.segment.index is IndexResidency.UNCHECKED
        offsets, lengths = await store.pager.arrays(led.segment)
        assert len(offsets) == len(lengths) == PER_LEDGER
        assert all(offset > 0 for offset in offsets)
    finally:
        await store.close()
