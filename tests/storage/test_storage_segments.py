"""Segment record format and recovery scan (storage/segments.py), without a store."""

from __future__ import annotations

import os
from pathlib import Path

from storage_testlib import flip_bit, write_segment

from storage.fileops import FileOps
from storage.segments import (
    FILE_HEADER_SIZE,
    RECORD_HEADER_SIZE,
    decode_file_header,
    encode_file_header,
    read_records,
    scan_segment,
)

OPS = FileOps()
PAYLOADS = [bytes([i % 251]) * (100 + i) for i in range(50)]


def _offsets(payloads: list[bytes]) -> list[int]:
    out, off = [], FILE_HEADER_SIZE
    for p in payloads:
        out.append(off)
        off += RECORD_HEADER_SIZE + len(p)
    return out


def test_file_header_round_trips_and_detects_corruption() -> None:
    header = encode_file_header(42, 1234)
    assert decode_file_header(header) == (42, 1234)
    broken = bytearray(header)
    broken[9] ^= 1
    assert decode_file_header(bytes(broken)) is None
    assert decode_file_header(header[:10]) is None


def test_scan_of_intact_segment_indexes_every_record(tmp_path: Path) -> None:
    path = write_segment(tmp_path, 7, PAYLOADS)
    result = scan_segment(OPS, path, 7)
    assert result.entries == len(PAYLOADS)
    assert list(result.offsets) == _offsets(PAYLOADS)
    assert list(result.lengths) == [len(p) for p in PAYLOADS]
    assert result.events == []
    assert result.size_bytes == sum(map(len, PAYLOADS))


def test_torn_tail_is_truncated_at_last_valid_record(tmp_path: Path) -> None:
    path = write_segment(tmp_path, 7, PAYLOADS)
    cut = _offsets(PAYLOADS)[40] + 20  # in the middle of record 40
    os.truncate(path, cut)
    result = scan_segment(OPS, path, 7)
    assert result.entries == 40
    assert path.stat().st_size == _offsets(PAYLOADS)[40]
    assert [e[0] for e in result.events] == ["truncated_tail"]


def test_corrupt_middle_record_is_skipped_and_later_records_kept(tmp_path: Path) -> None:
    path = write_segment(tmp_path, 7, PAYLOADS)
    flip_bit(path, _offsets(PAYLOADS)[10] + RECORD_HEADER_SIZE + 5, 3)  # payload of record 10
    result = scan_segment(OPS, path, 7)
    assert result.entries == len(PAYLOADS)
    assert result.offsets[10] == -1
    assert [e[0] for e in result.events] == ["corrupt_record"]
    assert result.events[0][3] == (10,)
    assert path.stat().st_size == _offsets(PAYLOADS)[-1] + RECORD_HEADER_SIZE + len(PAYLOADS[-1])


def test_corrupt_length_field_does_not_shift_later_entry_ids(tmp_path: Path) -> None:
    path = write_segment(tmp_path, 7, PAYLOADS)
    flip_bit(path, _offsets(PAYLOADS)[20] + 1, 6)  # length of record 20 grows by 16 KiB
    result = scan_segment(OPS, path, 7)
    assert result.offsets[20] == -1
    assert list(result.offsets[21:]) == _offsets(PAYLOADS)[21:]
    got = read_records(OPS, path, [(i, result.offsets[i], result.lengths[i]) for i in range(21, 50)])
    assert [d for _, d in got] == PAYLOADS[21:]


def test_bad_file_header_is_reported_but_records_survive(tmp_path: Path) -> None:
    path = write_segment(tmp_path, 7, PAYLOADS)
    flip_bit(path, 3, 0)
    result = scan_segment(OPS, path, 7)
    assert result.entries == len(PAYLOADS)
    assert [e[0] for e in result.events] == ["bad_header"]


def test_segment_shorter_than_header_is_marked_removed(tmp_path: Path) -> None:
    path = tmp_path / "x.seg"
    path.write_bytes(b"HORAE")
    result = scan_segment(OPS, path, 7)
    assert result.removed
    assert result.entries == 0


def test_read_records_never_returns_a_corrupt_payload(tmp_path: Path) -> None:
    path = write_segment(tmp_path, 7, PAYLOADS)
    offsets = _offsets(PAYLOADS)
    flip_bit(path, offsets[3] + RECORD_HEADER_SIZE, 0)
    got = read_records(OPS, path, [(i, offsets[i], len(PAYLOADS[i])) for i in range(6)])
    assert [i for i, _ in got] == list(range(6))
    assert got[3][1] is None
    assert [d for i, d in got if i != 3] == [PAYLOADS[i] for i in (0, 1, 2, 4, 5)]
