"""Segment files: one append-only file per ledger, its record format, recovery scan and reads.

File layout: ``<topic dir>/<ledger_id:020d>.seg`` =
  header (32 bytes): b"HORAESG1" | ledger_id u64 | created_ms u64 | reserved u32 | crc32c u32
  records, back to back:  length u32 | crc32c u32 | entry_id u64 | data (length bytes)
  where crc32c covers length, entry_id and data (so a flipped length is detected too).

Invariants:
- Records are appended in entry-id order; a sealed segment (every segment but the current
  ledger's) is never written again, except that recovery may cut off a torn tail.
- Entry ids inside records let recovery resynchronise after a corrupt record without mislabelling
  the records that follow: the scan searches for the next record id (bytes.find, C speed),
  validates its CRC, and marks the ids in between missing. A record that fails its CRC is never
  returned as data; it is reported (RecoveryEvent) and counted.
- If no valid record follows a bad one, the rest of the file is a torn tail: it is truncated.

Everything here is blocking and runs off the event loop (writer thread or executors).
"""

from __future__ import annotations

import mmap
import os
import struct
import time
from array import array
from dataclasses import dataclass, field
from pathlib import Path

from crc32c import crc32c

from storage.fileops import FileOps

SEGMENT_MAGIC = b"HORAESG1"
_FILE_HEADER = struct.Struct("<8sQQI")  # magic, ledger_id, created_ms, reserved; then crc u32
FILE_HEADER_SIZE = _FILE_HEADER.size + 4  # 32
RECORD_HEADER = struct.Struct("<IIQ")  # length, crc32c, entry_id
_RECORD_HEADER = RECORD_HEADER
RECORD_HEADER_SIZE = _RECORD_HEADER.size  # 16
CRC_PREFIX = struct.Struct("<IQ")  # what the crc covers before the data: length, entry_id
_CRC_PREFIX = CRC_PREFIX
_ENTRY_ID = struct.Struct("<Q")
MAX_RECORD_BYTES = 64 * 1024 * 1024
"""Larger lengths are treated as corruption (entries are <= 5 MiB + padding on the wire)."""
RESYNC_SEARCH_IDS = 1024
"""After a bad record, look this many entry ids ahead for the next valid record."""
RESYNC_WINDOW_BYTES = 8 * 1024 * 1024
"""First search for the next valid record this close to the bad one."""


def segment_name(ledger_id: int) -> str:
    return f"{ledger_id:020d}.seg"


def encode_file_header(ledger_id: int, created_ms: int) -> bytes:
    head = _FILE_HEADER.pack(SEGMENT_MAGIC, ledger_id, created_ms, 0)
    return head + struct.pack("<I", crc32c(head))


def decode_file_header(data: bytes) -> tuple[int, int] | None:
    """(ledger_id, created_ms), or None if the header is short or fails its CRC."""
    if len(data) < FILE_HEADER_SIZE:
        return None
    head = data[: _FILE_HEADER.size]
    (crc,) = struct.unpack_from("<I", data, _FILE_HEADER.size)
    magic, ledger_id, created_ms, _ = _FILE_HEADER.unpack(head)
    if magic != SEGMENT_MAGIC or crc != crc32c(head):
        return None
    return ledger_id, created_ms


def record_crc(length: int, entry_id: int, data: bytes | memoryview) -> int:
    return crc32c(data, crc32c(_CRC_PREFIX.pack(length, entry_id)))


def encode_record_header(entry_id: int, data: bytes) -> bytes:
    length = len(data)
    return _RECORD_HEADER.pack(length, record_crc(length, entry_id, data), entry_id)


@dataclass(frozen=True, slots=True)
class RecoveryEvent:
    """One thing recovery (or a later read) found wrong and dropped.

    kind: "truncated_tail" (bytes after the last valid record were cut off), "corrupt_record"
    (a record inside a segment failed its checks; entry_ids lists the ids now missing),
    "corrupt_read" (a record failed its CRC when read after recovery), "torn_header"
    (a segment shorter than its header was removed), "bad_header" (header CRC failed; the
    records were still scanned).
    """

    kind: str
    ledger_name: str
    ledger_id: int
    offset: int
    length: int
    entry_ids: tuple[int, ...] = ()


@dataclass(slots=True)
class ScanResult:
    ledger_id: int
    created_ms: int
    offsets: array[int]  # entry_id -> record offset, -1 = missing
    lengths: array[int]  # entry_id -> data length
    size_bytes: int  # sum of data lengths of valid records
    valid_end: int  # file offset after the last valid record
    events: list[tuple[str, int, int, tuple[int, ...]]] = field(default_factory=list)
    removed: bool = False  # the file was a torn header only and was deleted

    @property
    def entries(self) -> int:
        return len(self.offsets)


def _valid_at(buf: mmap.mmap | bytes, size: int, off: int, min_id: int) -> tuple[int, int] | None:
    """(length, entry_id) if a valid record with entry_id >= min_id starts at off."""
    if off < FILE_HEADER_SIZE or off + RECORD_HEADER_SIZE > size:
        return None
    length, crc, entry_id = _RECORD_HEADER.unpack_from(buf, off)
    if length > MAX_RECORD_BYTES or off + RECORD_HEADER_SIZE + length > size or entry_id < min_id:
        return None
    start = off + RECORD_HEADER_SIZE
    if record_crc(length, entry_id, memoryview(buf)[start : start + length]) != crc:
        return None
    return length, entry_id


def _resync(buf: mmap.mmap | bytes, size: int, bad: int, last_id: int) -> int | None:
    """Offset of the next valid record after a bad one at offset bad, or None (torn tail).

    Searches a window after the bad record first (the usual case: one damaged record), then
    the whole rest of the file, so a damaged big segment costs a few scans, not thousands."""
    window_end = min(size, bad + RESYNC_WINDOW_BYTES)
    found = _search_ids(buf, size, bad, window_end, last_id)
    if found is None and window_end < size:
        found = _search_ids(buf, size, bad, size, last_id)
    return found


def _search_ids(
    buf: mmap.mmap | bytes, size: int, bad: int, end: int, last_id: int
) -> int | None:
    for k in range(1, RESYNC_SEARCH_IDS + 1):
        pattern = _ENTRY_ID.pack(last_id + k)
        at = bad + 1
        while True:
            hit = buf.find(pattern, at + 8, end)
            if hit < 0:
                break
            candidate = hit - 8
            if _valid_at(buf, size, candidate, last_id + 1) is not None:
                return candidate
            at = candidate + 1
    return None


def scan_segment(ops: FileOps, path: Path, ledger_id: int, *, truncate: bool = True) -> ScanResult:
    """Rebuild a segment's index; drop and report bad records; truncate a torn tail."""
    fd = ops.open(path, os.O_RDWR)
    try:
        size = os.fstat(fd).st_size
        result = ScanResult(ledger_id, 0, array("q"), array("i"), 0, FILE_HEADER_SIZE)
        if size < FILE_HEADER_SIZE:
            result.removed = True
            result.events.append(("torn_header", 0, size, ()))
            return result
        with mmap.mmap(fd, size, access=mmap.ACCESS_READ) as buf:
            header = decode_file_header(buf[:FILE_HEADER_SIZE])
            if header is None:
                result.created_ms = int(os.fstat(fd).st_mtime * 1000)
                result.events.append(("bad_header", 0, FILE_HEADER_SIZE, ()))
            else:
                result.created_ms = header[1]
            offsets, lengths = result.offsets, result.lengths
            off = FILE_HEADER_SIZE
            last_id = -1
            while off < size:
                found = _valid_at(buf, size, off, last_id + 1)
                if found is not None:
                    length, entry_id = found
                    if entry_id == last_id + 1:
                        offsets.append(off)
                        lengths.append(length)
                    else:  # ids skipped by an earlier resync are missing
                        gap = range(last_id + 1, entry_id)
                        offsets.extend([-1] * len(gap))
                        lengths.extend([0] * len(gap))
                        offsets.append(off)
                        lengths.append(length)
                    result.size_bytes += length
                    last_id = entry_id
                    off += RECORD_HEADER_SIZE + length
                    continue
                nxt = _resync(buf, size, off, last_id)
                if nxt is None:
                    result.events.append(("truncated_tail", off, size - off, ()))
                    break
                next_id = _RECORD_HEADER.unpack_from(buf, nxt)[2]
                result.events.append(
                    ("corrupt_record", off, nxt - off, tuple(range(last_id + 1, next_id)))
                )
                off = nxt
            result.valid_end = min(off, size)
        if result.valid_end < size and truncate:
            ops.ftruncate(fd, result.valid_end)
            ops.fsync(fd)
        return result
    finally:
        ops.close(fd)


def read_records(
    ops: FileOps, path: Path, wanted: list[tuple[int, int, int]]
) -> list[tuple[int, bytes | None]]:
    """Read (entry_id, offset, length) records, in offset order, with one pread.

    Returns (entry_id, data) pairs; data is None when the record fails its checks (bit rot after
    recovery): the caller reports it and never serves it. Raises FileNotFoundError if the
    segment was deleted (trimmed) meanwhile.
    """
    if not wanted:
        return []
    first = wanted[0][1]
    end = wanted[-1][1] + RECORD_HEADER_SIZE + wanted[-1][2]
    fd = ops.open(path, os.O_RDONLY)
    try:
        blob = ops.pread(fd, end - first, first)
    finally:
        ops.close(fd)
    view = memoryview(blob)
    out: list[tuple[int, bytes | None]] = []
    for entry_id, offset, length in wanted:
        rel = offset - first
        if rel + RECORD_HEADER_SIZE + length > len(blob):
            out.append((entry_id, None))
            continue
        got_length, crc, got_id = _RECORD_HEADER.unpack_from(blob, rel)
        data = view[rel + RECORD_HEADER_SIZE : rel + RECORD_HEADER_SIZE + length]
        if got_length != length or got_id != entry_id or record_crc(length, entry_id, data) != crc:
            out.append((entry_id, None))
        else:
            out.append((entry_id, bytes(data)))
    return out


def now_ms() -> int:
    return int(time.time() * 1000)
