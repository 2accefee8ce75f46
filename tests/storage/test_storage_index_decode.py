"""A persisted segment index's checks (storage/segments.py decode_index): the header's count of
missing entries must match the offsets, with or without -1 among them; an index with missing
entries is used at open and keeps them missing."""

from __future__ import annotations

import asyncio
import struct
from array import array
from pathlib import Path

from crc32c import crc32c
from storage_testlib import flip_bit, segment_paths

from storage import Position, SegmentStore, StorageConfig
from storage.segments import (
    FILE_HEADER_SIZE,
    FORMAT_V3,
    INDEX_HEADER_SIZE,
    RECORD_HEADER_SIZE,
    decode_index,
    encode_index,
)

LEDGER = 7
CREATED = 1_700_000_000_000
_MISSING_AT = 44  # magic 8 | ledger 8 | size 8 | entries 8 | created 8 | format 4 | missing u32
_CRC_AT = INDEX_HEADER_SIZE - 8


def index(offsets: list[int], lengths: list[int]) -> tuple[bytes, int]:
    size = offsets[-1] + RECORD_HEADER_SIZE + lengths[-1]
    data = encode_index(LEDGER, size, CREATED, FORMAT_V3, array("q", offsets),
                        array("i", lengths),
                        sum(n for o, n in zip(offsets, lengths, strict=True) if o >= 0))
    return data, size


def with_missing(data: bytes, missing: int) -> bytes:
    """The index with its header's missing count replaced, and a CRC that holds."""
    out = bytearray(data)
    struct.pack_into("<I", out, _MISSING_AT, missing)
    crc = crc32c(bytes(out[INDEX_HEADER_SIZE:]), crc32c(bytes(out[:_CRC_AT])))
    struct.pack_into("<I", out, _CRC_AT, crc)
    return bytes(out)


def test_missing_entries_are_counted_and_a_wrong_count_is_refused() -> None:
    offsets = [FILE_HEADER_SIZE, -1, FILE_HEADER_SIZE + 26, -1, FILE_HEADER_SIZE + 52]
    lengths = [10, 0, 10, 0, 10]
    data, size = index(offsets, lengths)
    got = decode_index(data, LEDGER)
    assert got is not None
    assert (got.missing, list(got.offsets), got.valid_end) == (2, offsets, size)
    for wrong in (0, 1, 3):
        assert decode_index(with_missing(data, wrong), LEDGER) is None
    assert decode_index(with_missing(data, 2), LEDGER) is not None


def test_no_missing_entry_even_with_offsets_full_of_0xff_bytes() -> None:
    # Offsets and lengths whose bytes hold long runs of 0xff, next to each other: only an
    # offset of -1 is a missing entry.
    offsets = [FILE_HEADER_SIZE, 0xFF_FFFF_FFFF_FFFF, 0xFF_FFFF_FFFF_FFFF + 0xFF + 16]
    lengths = [0x7FFF_FFFF, 0xFF, 0x7FFF_FFFF]
    data, _ = index(offsets, lengths)
    got = decode_index(data, LEDGER)
    assert got is not None
    assert got.missing == 0 and list(got.offsets) == offsets
    assert decode_index(with_missing(data, 1), LEDGER) is None


def test_an_index_of_no_entries_has_none_missing() -> None:
    data = encode_index(LEDGER, FILE_HEADER_SIZE, CREATED, FORMAT_V3, array("q"), array("i"), 0)
    got = decode_index(data, LEDGER)
    assert got is not None and got.missing == 0 and got.entries == 0
    assert decode_index(with_missing(data, 1), LEDGER) is None


async def test_an_indexed_segment_with_missing_entries_reopens_without_them(
    tmp_path: Path,
) -> None:
    # Entry (0, 3) fails its CRC: the scan drops it and rewrites ledger 0's index with one
    # missing entry; the next open takes that index (no scan, nothing reported again) and
    # still knows the entry is missing.
    topic = "persistent://public/default/missing"
    store = await SegmentStore.open(tmp_path, StorageConfig(max_entries_per_ledger=10))
    ml = await store.open_ledger(topic)
    await asyncio.gather(*(ml.append(bytes([i]) * 20) for i in range(25)))
    await ml.open_cursor("s", initial_position="earliest")
    await store.close()
    first = segment_paths(tmp_path, topic)[0]
    first.with_suffix(".idx").unlink()
    flip_bit(first, FILE_HEADER_SIZE + 3 * (RECORD_HEADER_SIZE + 20) + RECORD_HEADER_SIZE, 0)
    store = await SegmentStore.open(tmp_path)
    ml = await store.open_ledger(topic)
    assert [e.kind for e in store.recovery_report.events] == ["corrupt_record"]
    await store.close()
    rewritten = decode_index(first.with_suffix(".idx").read_bytes(), 0)
    assert rewritten is not None and rewritten.missing == 1
    store = await SegmentStore.open(tmp_path, StorageConfig(entry_cache_bytes=0))
    try:
        ml = await store.open_ledger(topic)
        assert store.recovery_report.events == ()
        _, _, missing = ml.ledger_extent(0)
        assert missing is not None and list(missing) == [3]
        got = await ml.read_entries(Position(0, 0), 10)
        assert [e.position.entry_id for e in got[:9]] == [0, 1, 2, 4, 5, 6, 7, 8, 9]
    finally:
        await store.close()
