"""Segment record format and recovery scan (storage/segments.py), without a store."""

from __future__ import annotations

import os
import struct
from pathlib import Path

from storage_testlib import flip_bit, write_segment, write_segment_v1, zero_range

from storage.fileops import FileOps
from storage.segments import (
    FILE_HEADER_SIZE,
    FORMAT_V1,
    FORMAT_V3,
    RECORD_HEADER_SIZE,
    decode_file_header,
    encode_file_header,
    encode_record_header,
    read_records,
    record_crc,
    scan_segment,
)

OPS = FileOps()
PAYLOADS = [bytes([i % 251]) * (100 + i) for i in range(50)]
LOGICAL_END = FILE_HEADER_SIZE + sum(RECORD_HEADER_SIZE + len(p) for p in PAYLOADS)
ZERO_TAIL = 256 * 1024


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
    got = read_records(OPS, path, [(i, result.offsets[i], result.lengths[i]) for i in range(21, 50)],
                       FORMAT_V3, 7)
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
    got = read_records(OPS, path, [(i, offsets[i], len(PAYLOADS[i])) for i in range(6)],
                       FORMAT_V3, 7)
    assert [i for i, _ in got] == list(range(6))
    assert got[3][1] is None
    assert [d for i, d in got if i != 3] == [PAYLOADS[i] for i in (0, 1, 2, 4, 5)]


# -- the pre-zeroed tail -------------------------------------------------------------------


def test_zero_length_is_never_a_valid_record() -> None:
    # The length field counts the 16-byte header, so an empty entry is stored as 16 and a
    # zeroed header (length 0) can never pass as a record, whatever its CRC says.
    header = encode_record_header(0, b"", ledger_id=0)
    assert struct.unpack_from("<I", header)[0] == RECORD_HEADER_SIZE
    assert record_crc(0, 0, b"") != 0


def test_zero_tail_is_the_logical_end_not_data_and_is_cut_off(tmp_path: Path) -> None:
    path = write_segment(tmp_path, 7, PAYLOADS, zero_tail=ZERO_TAIL)
    result = scan_segment(OPS, path, 7, truncate=False)
    assert result.entries == len(PAYLOADS)
    assert result.events == []
    assert result.valid_end == LOGICAL_END
    assert result.zero_tail_bytes == ZERO_TAIL
    assert result.size_bytes == sum(map(len, PAYLOADS))
    assert path.stat().st_size == LOGICAL_END + ZERO_TAIL  # truncate=False leaves it
    result = scan_segment(OPS, path, 7)
    assert result.events == []
    assert path.stat().st_size == LOGICAL_END


def test_empty_entries_and_entries_ending_in_zeros_survive_a_zero_tail(tmp_path: Path) -> None:
    payloads = [b"x", b"", b"abc" + bytes(100), b"", bytes(300)]
    path = write_segment(tmp_path, 7, payloads, zero_tail=4096)
    result = scan_segment(OPS, path, 7)
    assert result.entries == len(payloads)
    assert result.events == []
    got = read_records(OPS, path, [(i, result.offsets[i], result.lengths[i])
                                   for i in range(len(payloads))], FORMAT_V3, 7)
    assert [d for _, d in got] == payloads


def test_header_and_zeros_only_is_an_empty_ledger(tmp_path: Path) -> None:
    path = write_segment(tmp_path, 7, [], zero_tail=ZERO_TAIL)
    result = scan_segment(OPS, path, 7)
    assert (result.entries, result.events, result.removed) == (0, [], False)
    assert path.stat().st_size == FILE_HEADER_SIZE


def test_torn_header_in_a_pre_zeroed_file_is_removed(tmp_path: Path) -> None:
    path = write_segment(tmp_path, 7, [], zero_tail=ZERO_TAIL)
    zero_range(path, 8, FILE_HEADER_SIZE)  # the header reached the disk only in part
    result = scan_segment(OPS, path, 7)
    assert result.removed
    assert [e[0] for e in result.events] == ["torn_header"]


def test_truncation_inside_the_zero_tail_loses_and_reports_nothing(tmp_path: Path) -> None:
    for cut in (LOGICAL_END, LOGICAL_END + 1, LOGICAL_END + 15, LOGICAL_END + 4097):
        path = write_segment(tmp_path, 7, PAYLOADS, zero_tail=ZERO_TAIL)
        os.truncate(path, cut)
        result = scan_segment(OPS, path, 7)
        assert result.entries == len(PAYLOADS)
        assert result.events == []
        assert path.stat().st_size == LOGICAL_END


def test_bit_flips_in_the_zero_tail_are_a_small_torn_tail(tmp_path: Path) -> None:
    for flip_at in (LOGICAL_END, LOGICAL_END + 3, LOGICAL_END + 12, LOGICAL_END + 5000,
                    LOGICAL_END + ZERO_TAIL - 1):
        path = write_segment(tmp_path, 7, PAYLOADS, zero_tail=ZERO_TAIL)
        flip_bit(path, flip_at, 2)
        result = scan_segment(OPS, path, 7)
        assert result.entries == len(PAYLOADS)
        assert all(off >= 0 for off in result.offsets)
        # Reported as garbage after the last record, counting only the non-zero span.
        assert result.events == [("truncated_tail", LOGICAL_END, flip_at + 1 - LOGICAL_END, ())]
        assert path.stat().st_size == LOGICAL_END


def test_torn_record_before_the_zero_tail_is_truncated(tmp_path: Path) -> None:
    # A record whose header reached the disk but whose data did not (still zeros), and one
    # whose header did not but whose data did: both are torn tails, never records.
    tail = PAYLOADS[-1]
    for keep_header in (True, False):
        path = write_segment(tmp_path, 7, PAYLOADS, zero_tail=ZERO_TAIL)
        last = LOGICAL_END - RECORD_HEADER_SIZE - len(tail)
        if keep_header:
            zero_range(path, last + RECORD_HEADER_SIZE, LOGICAL_END)
        else:
            zero_range(path, last, last + RECORD_HEADER_SIZE)
        result = scan_segment(OPS, path, 7)
        assert result.entries == len(PAYLOADS) - 1
        assert [e[0] for e in result.events] == ["truncated_tail"]
        assert result.events[0][2] <= RECORD_HEADER_SIZE + len(tail)
        assert path.stat().st_size == last


def test_zeroed_header_in_the_middle_is_damage_not_the_end(tmp_path: Path) -> None:
    path = write_segment(tmp_path, 7, PAYLOADS, zero_tail=ZERO_TAIL)
    offsets = _offsets(PAYLOADS)
    zero_range(path, offsets[10], offsets[10] + RECORD_HEADER_SIZE)  # a zeroed sector, say
    result = scan_segment(OPS, path, 7)
    assert result.entries == len(PAYLOADS)
    assert result.offsets[10] == -1
    assert list(result.offsets[11:]) == offsets[11:]
    assert [(e[0], e[3]) for e in result.events] == [("corrupt_record", (10,))]
    assert path.stat().st_size == LOGICAL_END


def test_format_1_segments_are_still_read(tmp_path: Path) -> None:
    payloads = [b"old", b"", b"segment" * 10]
    path = write_segment_v1(tmp_path, 3, payloads)
    result = scan_segment(OPS, path, 3)
    assert result.format == FORMAT_V1
    assert result.entries == 3
    assert result.events == []
    got = read_records(OPS, path, [(i, result.offsets[i], result.lengths[i]) for i in range(3)],
                       result.format, 3)
    assert [d for _, d in got] == payloads


def test_a_lone_record_is_written_as_in_a_group(tmp_path: Path) -> None:
    """write_records of one record (its own path) lays out the bytes, offsets and lengths a
    group of records gets."""
    from storage.ids import IdAllocator
    from storage.segment_file import SegmentFile
    from storage.segment_io import create_segment, write_records

    ops = FileOps()
    ids = IdAllocator.load(ops, tmp_path / "ids", 0)
    datas = [b"a" * 1024, b"", b"b" * 7]
    segments = []
    for name, chunks in (("one", [[d] for d in datas]), ("group", [datas])):
        (tmp_path / name).mkdir()
        segment = SegmentFile(5, tmp_path / name / "5.seg", 1)
        create_segment(ops, ids, segment, prezero_bytes=0, fsync=False)
        entry_id = 0
        for chunk in chunks:
            write_records(ops, segment, chunk, entry_id)
            entry_id += len(chunk)
        ops.close(segment.fd)
        segments.append(segment)
    one, group = segments
    assert one.path.read_bytes() == group.path.read_bytes()
    assert (one.write_offset, list(one.offsets), list(one.lengths)) == \
        (group.write_offset, list(group.offsets), list(group.lengths))
    scan = scan_segment(ops, one.path, 5, truncate=False)
    wanted = [(i, scan.offsets[i], scan.lengths[i]) for i in range(scan.entries)]
    assert [d for _, d in read_records(ops, one.path, wanted, scan.format, 5)] == datas


def test_scan_checks_the_crc_of_small_and_large_records_alike(tmp_path: Path) -> None:
    # Records on both sides of the size where the in-order scan stops joining the crc's
    # prefix and data into one buffer: a flipped bit in any of them is found.
    payloads = [bytes([i]) * n for i, n in enumerate([1, 4095, 4096, 4097, 70_000, 3, 70_001])]
    offsets = _offsets(payloads)
    for damaged in range(len(payloads)):
        path = write_segment(tmp_path / str(damaged), 7, payloads)
        flip_bit(path, offsets[damaged] + RECORD_HEADER_SIZE + len(payloads[damaged]) - 1, 0)
        result = scan_segment(OPS, path, 7, truncate=False)
        intact = [o for i, o in enumerate(offsets) if i != damaged]
        assert [o for o in result.offsets if o != -1] == intact, damaged
        assert damaged == len(payloads) - 1 or result.offsets[damaged] == -1  # the last: torn
        assert result.size_bytes == sum(len(p) for i, p in enumerate(payloads) if i != damaged)


def test_scan_refuses_records_of_another_ledger(tmp_path: Path) -> None:
    # Format 3's crc covers the ledger id: a segment copied under another ledger's name is
    # not served as that ledger's entries.
    path = write_segment(tmp_path, 7, PAYLOADS)
    moved = path.with_name("moved")
    path.rename(moved)
    result = scan_segment(OPS, moved, 8, truncate=False)
    assert result.entries == 0
