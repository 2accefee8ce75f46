"""Segment files: one append-only file per ledger, its record format, recovery scan and reads.

File layout: ``<topic dir>/<ledger_id:020d>.seg`` =
  header (32 bytes): magic | ledger_id u64 | created_ms u64 | reserved u32 | crc32c u32
  records, back to back:  length u32 | crc32c u32 | entry_id u64 | data
  then, in the open ledger's segment, a pre-zeroed tail (see below).
  crc32c covers the length field, entry_id and data (so a flipped length is detected too).
  Format 3 (magic b"HORAESG3", written by this code): as format 2, and the crc also covers
  the segment's ledger id (crc over length u32 | entry_id u64 | ledger_id u64 | data; the
  ledger id is not stored in the record), so a stale block of another segment (a reused
  disk block, a copied file) never passes as a record of this one, not even on resync.
  Format 2 (b"HORAESG2", read only): length = the whole record's size (16-byte header +
  data), so every valid length is >= 16 and a length of 0 (an all-zero header) is never a
  record; crc without the ledger id. Format 1 (b"HORAESG1", read only): length = data size.

Pre-zeroed tail: the writer keeps the open segment filled with written (and fdatasync'ed)
zeros ahead of its write head (storage/writer.py), so appends overwrite allocated, initialised
blocks and their fdatasync commits no file-size/extent metadata. The logical end of a segment
is therefore not its file size: it is the end of the last valid record. Sealed segments are
truncated to their logical end when sealed (not synced: a crash before the truncation is
durable just leaves a zero tail, which the scan handles).

Invariants:
- Records are appended in entry-id order; a sealed segment (every segment but the current
  ledger's) is never written again, except that recovery may cut off a torn tail.
- Entry ids inside records let recovery resynchronise after a corrupt record without mislabelling
  the records that follow: the scan searches for the next record id (bytes.find, C speed),
  validates its CRC, and marks the ids in between missing. A record that fails its CRC is never
  returned as data; it is reported (RecoveryEvent) and counted.
- The scan finds the last non-zero byte first (data_end). From a record boundary at or after
  data_end there are only zeros: that is the clean logical end, nothing is reported. An
  all-zero header before data_end is damage like any other (valid records follow it, so it
  is not the end): the same resync applies, so a zeroed sector in the middle never hides the
  records after it.
- If no valid record follows a bad one, the rest of the file is a torn tail: it is truncated,
  and reported as data_end - offset bytes (the non-zero garbage; the zero tail is not data).

Persisted index (``<ledger_id:020d>.idx``, next to the segment): written once a segment is
sealed (truncated to its logical end), by the I/O thread, with tmp + fsync + rename, so
open_ledger loads it instead of scanning the segment:
  header (64 bytes): magic b"HORAEIX1" | ledger_id u64 | segment_size u64 | entries u64 |
                     created_ms u64 | format u32 | missing u32 | size_bytes u64 | crc32c u32 | pad u32
  offsets: entries x i64 (-1 = missing), then lengths: entries x i32 (data sizes), little-endian
  crc32c covers the header up to the crc field and both arrays.
It is used only if its CRC holds, it names this ledger, the segment file still has exactly
segment_size bytes, the segment's own header is valid and names the same ledger and created_ms,
and its last record ends at segment_size. Anything else (no index: a crash before it was written;
a damaged one; a segment that changed) falls back to the scan, which rewrites the index. An
index says nothing about the records' contents: every read checks each record's CRC, so bit
rot in an indexed segment is caught (and reported) when read, never served.

Everything here is blocking and runs off the event loop (writer thread or executors).
"""

from __future__ import annotations

import mmap
import os
import struct
import sys
import time
from array import array
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from crc32c import crc32c

from storage.fileops import FileOps

SEGMENT_MAGIC = b"HORAESG3"
SEGMENT_MAGIC_V2 = b"HORAESG2"
SEGMENT_MAGIC_V1 = b"HORAESG1"
FORMAT_V1 = 1
FORMAT_V2 = 2
FORMAT_V3 = 3
FORMATS = (FORMAT_V1, FORMAT_V2, FORMAT_V3)
_FILE_HEADER = struct.Struct("<8sQQI")  # magic, ledger_id, created_ms, reserved; then crc u32
FILE_HEADER_SIZE = _FILE_HEADER.size + 4  # 32
RECORD_HEADER = struct.Struct("<IIQ")  # length, crc32c, entry_id
_RECORD_HEADER = RECORD_HEADER
RECORD_HEADER_SIZE = _RECORD_HEADER.size  # 16
CRC_PREFIX = struct.Struct("<IQQ")  # format 3: the crc covers length, entry_id, ledger_id, data
_CRC_PREFIX_V2 = struct.Struct("<IQ")  # formats 1 and 2: length, entry_id, data
_ENTRY_ID = struct.Struct("<Q")
MAX_RECORD_BYTES = 64 * 1024 * 1024
"""Larger lengths are treated as corruption (entries are <= 5 MiB + padding on the wire)."""
#: up to this many data bytes a record's crc is computed over its prefix and data joined
_JOINED_CRC_BYTES = 4096
RESYNC_SEARCH_IDS = 1024
"""After a bad record, look this many entry ids ahead for the next valid record."""
RESYNC_WINDOW_BYTES = 8 * 1024 * 1024
"""First search for the next valid record this close to the bad one."""
_ZERO_PROBE = 256 * 1024
"""Chunk size of the backwards search for the last non-zero byte."""
_ZEROS = bytes(_ZERO_PROBE)
_ZERO_STRIP = 256
"""The reference's backwards search strips zeros byte by byte in at most this many bytes."""


INDEX_MAGIC = b"HORAEIX1"
INDEX_HEADER = struct.Struct("<8sQQQQIIQ")  # then crc32c u32 + pad u32
_INDEX_HEADER = INDEX_HEADER
INDEX_HEADER_SIZE = _INDEX_HEADER.size + 8  # 64
_LITTLE = sys.byteorder == "little"
_ALL_ONES = b"\xff" * 8  # an offset of -1 (a missing entry) in the index
_I64 = struct.Struct("<q")
_I32 = struct.Struct("<i")


def length_bias(fmt: int) -> int:
    """What the length field adds to the data size in a format."""
    return RECORD_HEADER_SIZE if fmt >= FORMAT_V2 else 0


def segment_name(ledger_id: int) -> str:
    return f"{ledger_id:020d}.seg"


def index_path(segment_path: Path) -> Path:
    return segment_path.with_suffix(".idx")


def encode_file_header(ledger_id: int, created_ms: int) -> bytes:
    head = _FILE_HEADER.pack(SEGMENT_MAGIC, ledger_id, created_ms, 0)
    return head + struct.pack("<I", crc32c(head))


def decode_file_header(data: bytes) -> tuple[int, int] | None:
    """(ledger_id, created_ms), or None if the header is short or fails its CRC."""
    got = decode_file_header_format(data)
    return None if got is None else (got[0], got[1])


def decode_file_header_format(data: bytes) -> tuple[int, int, int] | None:
    """(ledger_id, created_ms, format), or None if the header is short or fails its CRC."""
    if len(data) < FILE_HEADER_SIZE:
        return None
    head = data[: _FILE_HEADER.size]
    (crc,) = struct.unpack_from("<I", data, _FILE_HEADER.size)
    magic, ledger_id, created_ms, _ = _FILE_HEADER.unpack(head)
    if crc != crc32c(head):
        return None
    if magic == SEGMENT_MAGIC:
        return ledger_id, created_ms, FORMAT_V3
    if magic == SEGMENT_MAGIC_V2:
        return ledger_id, created_ms, FORMAT_V2
    if magic == SEGMENT_MAGIC_V1:
        return ledger_id, created_ms, FORMAT_V1
    return None


def record_crc(
    length: int, entry_id: int, data: bytes | memoryview, ledger_id: int | None = None
) -> int:
    """CRC of a record; length is the stored length field (formats 2, 3: header + data size).
    ledger_id: the segment's ledger for format 3, None for formats 1 and 2."""
    if ledger_id is None:
        return crc32c(data, crc32c(_CRC_PREFIX_V2.pack(length, entry_id)))
    return crc32c(data, crc32c(CRC_PREFIX.pack(length, entry_id, ledger_id)))


def crc_identity(fmt: int, ledger_id: int) -> int | None:
    """What record_crc's ledger_id must be for a segment of this format and ledger."""
    return ledger_id if fmt >= FORMAT_V3 else None


def encode_record_header(entry_id: int, data: bytes, *, ledger_id: int) -> bytes:
    """A format-3 record header for data in ledger_id's segment."""
    length = len(data) + RECORD_HEADER_SIZE
    return _RECORD_HEADER.pack(length, record_crc(length, entry_id, data, ledger_id), entry_id)


@dataclass(frozen=True, slots=True)
class RecoveryEvent:
    """One thing recovery (or a later read) found wrong and dropped.

    kind: "truncated_tail" (non-zero bytes after the last valid record were cut off; length
    counts them, not the pre-zeroed tail, which is not data), "corrupt_record"
    (a record inside a segment failed its checks; entry_ids lists the ids now missing),
    "corrupt_read" (a record failed its CRC when read after recovery), "torn_header"
    (a segment shorter than its header was removed), "bad_header" (header CRC failed; the
    records were still scanned), "corrupt_cursor" (a cursor file failed its checks; detail
    names it), "cursor_fallback" (a cursor was recovered from its previous generation or
    recreated at the earliest position, or lost: detail says which; trimming stops until
    it is saved again).
    """

    kind: str
    ledger_name: str
    ledger_id: int
    offset: int
    length: int
    entry_ids: tuple[int, ...] = ()
    detail: str = ""


@dataclass(slots=True)
class ScanResult:
    ledger_id: int
    created_ms: int
    offsets: array[int]  # entry_id -> record offset, -1 = missing
    lengths: array[int]  # entry_id -> data length
    size_bytes: int  # sum of data lengths of valid records
    valid_end: int  # file offset after the last valid record: the logical end
    events: list[tuple[str, int, int, tuple[int, ...]]] = field(default_factory=list)
    removed: bool = False  # the file was a torn header only and was deleted
    format: int = FORMAT_V3  # record format (from the header; the current one if it is bad)
    zero_tail_bytes: int = 0  # pre-zeroed bytes after the logical end (cut off if truncate)
    missing: int = -1  # how many offsets are -1, when known (an index's checked header)

    @property
    def entries(self) -> int:
        return len(self.offsets)


def _valid_at(
    buf: mmap.mmap | bytes, size: int, off: int, min_id: int, bias: int, ident: int | None
) -> tuple[int, int] | None:
    """(data length, entry_id) if a valid record with entry_id >= min_id starts at off."""
    if off < FILE_HEADER_SIZE or off + RECORD_HEADER_SIZE > size:
        return None
    stored, crc, entry_id = _RECORD_HEADER.unpack_from(buf, off)
    length = stored - bias
    if (
        length < 0  # format 2: a zeroed header (length 0) is never a record
        or length > MAX_RECORD_BYTES
        or off + RECORD_HEADER_SIZE + length > size
        or entry_id < min_id
    ):
        return None
    start = off + RECORD_HEADER_SIZE
    if record_crc(stored, entry_id, memoryview(buf)[start : start + length], ident) != crc:
        return None
    return length, entry_id


def _scan_in_order(
    buf: mmap.mmap, size: int, off: int, data_end: int, last_id: int, bias: int,
    ident: int | None, offsets: array[int], lengths: array[int],
) -> tuple[int, int, int]:
    """The run of whole, intact records numbered on from last_id that starts at off, added to
    offsets and lengths: (the offset after it, its last entry id, its data bytes).

    The same checks as :func:`_valid_at` for the one id expected next, inlined: a segment's
    records are nearly always all in order, and a recovery scans the whole unsealed tail
    (~50,000 records a ledger at the defaults) before its ledger opens. It stops at the
    first record that is not the next one (torn, damaged, an id skipped): the caller's
    general path decides what that is."""
    unpack = _RECORD_HEADER.unpack_from
    # The crc covers the length field, the entry id (and the ledger id: format 3) and data.
    pack = _CRC_PREFIX_V2.pack if ident is None else CRC_PREFIX.pack
    extra = () if ident is None else (ident,)
    add_offset, add_length = offsets.append, lengths.append
    run_bytes = 0
    while off < data_end and off + RECORD_HEADER_SIZE <= size:
        stored, crc, entry_id = unpack(buf, off)
        length = stored - bias
        start = off + RECORD_HEADER_SIZE
        end = start + length
        if entry_id != last_id + 1 or length < 0 or length > MAX_RECORD_BYTES or end > size:
            break
        prefix = pack(stored, entry_id, *extra)
        # a small record's crc in one call over a joined copy; a large one's without copying
        # it twice
        if (crc32c(prefix + buf[start:end]) if length <= _JOINED_CRC_BYTES
                else crc32c(buf[start:end], crc32c(prefix))) != crc:
            break
        add_offset(off)
        add_length(length)
        run_bytes += length
        last_id = entry_id
        off = end
    return off, last_id, run_bytes


def _data_end(buf: mmap.mmap, start: int, size: int) -> int:
    """Offset after the last non-zero byte at or after start (start if there is none).

    Searched backwards in chunks, each compared with zeros (memcmp), so a long zero tail costs
    a memcmp pass and a segment without one costs a single small probe; the chunk that is not
    all zeros is halved by the same compare down to _ZERO_STRIP bytes before an rstrip, which
    walks byte by byte (~3 ns a byte: ~10 ms over a 4 MiB pre-zeroed tail)."""
    end = size
    probe = 4096
    while end > start:
        lo = max(start, end - probe)
        chunk = buf[lo:end]
        if not _ZEROS.startswith(chunk):   # memcmp, no copy of the zeros
            a, b = 0, len(chunk)
            while b - a > _ZERO_STRIP:  # chunk[b:] is zeros, chunk[a:b] is not
                mid = (a + b) // 2
                if not _ZEROS.startswith(chunk[mid:b]):
                    a = mid
                else:
                    b = mid
            return lo + a + len(chunk[a:b].rstrip(b"\0"))  # lo + len(chunk.rstrip(b"\0"))
        end = lo
        probe = min(probe * 4, _ZERO_PROBE)
    return start


try:
    import storage._scan_accel as _scan_accel
except ImportError:  # built without a compiler: the references, same results
    SCAN_ACCELERATED = False
    _scan_run = _scan_in_order
    _find_data_end = _data_end
else:
    # the C twins (storage/_scan_accel.c): the same run, ~6x less CPU a record, and the same
    # end read in place; what they cannot hold in C integers they hand to the references
    SCAN_ACCELERATED = True
    _scan_run = partial(_scan_accel.scan_in_order, _scan_in_order, crc32c, MAX_RECORD_BYTES,
                        _JOINED_CRC_BYTES)
    _find_data_end = partial(_scan_accel.data_end, _data_end)


def _resync(
    buf: mmap.mmap | bytes, size: int, end: int, bad: int, last_id: int, bias: int,
    ident: int | None,
) -> int | None:
    """Offset of the next valid record after a bad one at offset bad, or None (torn tail).

    Only candidates starting before end are considered (end = data_end + header size: a
    valid record's length field is non-zero, so it starts before data_end; beyond it are
    only zeros, which would match every search for entry id 0).
    Searches a window after the bad record first (the usual case: one damaged record), then
    the whole rest of the file, so a damaged big segment costs a few scans, not thousands."""
    end = min(end, size)
    window_end = min(end, bad + RESYNC_WINDOW_BYTES)
    found = _search_ids(buf, size, bad, window_end, last_id, bias, ident)
    if found is None and window_end < end:
        found = _search_ids(buf, size, bad, end, last_id, bias, ident)
    return found


def _search_ids(
    buf: mmap.mmap | bytes, size: int, bad: int, end: int, last_id: int, bias: int,
    ident: int | None,
) -> int | None:
    for k in range(1, RESYNC_SEARCH_IDS + 1):
        pattern = _ENTRY_ID.pack(last_id + k)
        at = bad + 1
        while True:
            hit = buf.find(pattern, at + 8, end)
            if hit < 0:
                break
            candidate = hit - 8
            if _valid_at(buf, size, candidate, last_id + 1, bias, ident) is not None:
                return candidate
            at = candidate + 1
    return None


def scan_segment(
    ops: FileOps, path: Path, ledger_id: int, *, truncate: bool = True, sync: bool = True
) -> ScanResult:
    """Rebuild a segment's index; drop and report bad records; truncate a torn tail and the
    pre-zeroed tail (truncate=True) so the file ends at its logical end. With truncate and
    sync (recovery), the file is then fsynced whether or not it was cut: a segment that was
    being written when the process died may hold records no fdatasync covered yet (the page
    cache survived the process), and nothing unsynced may be served."""
    fd = ops.open(path, os.O_RDWR)
    try:
        size = os.fstat(fd).st_size
        result = ScanResult(ledger_id, 0, array("q"), array("i"), 0, FILE_HEADER_SIZE)
        if size < FILE_HEADER_SIZE:
            result.removed = True
            result.events.append(("torn_header", 0, size, ()))
            return result
        with mmap.mmap(fd, size, access=mmap.ACCESS_READ) as buf:
            header = decode_file_header_format(buf[:FILE_HEADER_SIZE])
            if header is None:
                result.created_ms = int(os.fstat(fd).st_mtime * 1000)
                result.events.append(("bad_header", 0, FILE_HEADER_SIZE, ()))
            else:
                result.created_ms = header[1]
                result.format = header[2]
            bias = length_bias(result.format)
            ident = crc_identity(result.format, ledger_id)
            data_end = _find_data_end(buf, FILE_HEADER_SIZE, size)
            search_end = data_end + RECORD_HEADER_SIZE
            offsets, lengths = result.offsets, result.lengths
            off = FILE_HEADER_SIZE
            last_id = -1
            # Past data_end only zeros remain: the logical end (a record's length field is
            # never zero, so a valid record always starts before data_end).
            while off < data_end:
                off, last_id, run_bytes = _scan_run(
                    buf, size, off, data_end, last_id, bias, ident, offsets, lengths)
                result.size_bytes += run_bytes
                if off >= data_end:
                    break
                found = _valid_at(buf, size, off, last_id + 1, bias, ident)
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
                nxt = _resync(buf, size, search_end, off, last_id, bias, ident)
                if nxt is None:
                    result.events.append(("truncated_tail", off, data_end - off, ()))
                    break
                next_id = _RECORD_HEADER.unpack_from(buf, nxt)[2]
                result.events.append(
                    ("corrupt_record", off, nxt - off, tuple(range(last_id + 1, next_id)))
                )
                off = nxt
            result.valid_end = min(off, size)
            result.zero_tail_bytes = size - max(result.valid_end, data_end)
            if header is None and result.entries == 0 and data_end == FILE_HEADER_SIZE:
                # A bad header and nothing but zeros after it: a header torn by a crash in
                # a pre-zeroed file (not bit rot of a ledger that has records): remove it.
                nonzero = _find_data_end(buf, 0, FILE_HEADER_SIZE)
                result.events[:] = [("torn_header", 0, nonzero, ())]
                result.removed = True
                return result
        if truncate:
            if result.valid_end < size:
                ops.ftruncate(fd, result.valid_end)
            if sync:
                ops.fsync(fd)
        return result
    finally:
        ops.close(fd)


def read_records(
    ops: FileOps, path: Path, wanted: list[tuple[int, int, int]], fmt: int, ledger_id: int,
) -> list[tuple[int, bytes | None]]:
    """Read (entry_id, offset, length) records (length = data size), in offset order, with
    one pread. fmt is the segment's record format, ledger_id its ledger.

    Returns (entry_id, data) pairs; data is None when the record fails its checks (bit rot after
    recovery): the caller reports it and never serves it. Raises FileNotFoundError if the
    segment was deleted (trimmed) meanwhile.
    """
    if not wanted:
        return []
    first, size = records_span(wanted)
    fd = ops.open(path, os.O_RDONLY)
    try:
        blob = ops.pread(fd, size, first)
    finally:
        ops.close(fd)
    return parse_records(blob, wanted, fmt, ledger_id)


def records_span(wanted: list[tuple[int, int, int]]) -> tuple[int, int]:
    """(offset, size) of the one read that covers (entry_id, offset, length) records in
    offset order."""
    first = wanted[0][1]
    return first, wanted[-1][1] + RECORD_HEADER_SIZE + wanted[-1][2] - first


def parse_records(blob: bytes | memoryview, wanted: list[tuple[int, int, int]], fmt: int,
                  ledger_id: int) -> list[tuple[int, bytes | None]]:
    """The records of :func:`read_records` out of ``blob``, the bytes of their span
    (:func:`records_span`), each checked: (entry_id, data), data None when it fails. Each
    record's data is a copy (``bytes``): nothing returned refers to ``blob``, which may be a
    view of a buffer read into again (storage/read_fds.py)."""
    first = wanted[0][1]
    bias = length_bias(fmt)
    ident = crc_identity(fmt, ledger_id)
    # record_crc inlined (a drain from disk runs this once per entry): the prefix, then the data
    prefix_v3 = CRC_PREFIX.pack
    prefix_v2 = _CRC_PREFIX_V2.pack
    unpack_header = _RECORD_HEADER.unpack_from
    size = len(blob)
    out: list[tuple[int, bytes | None]] = []
    append = out.append
    for entry_id, offset, length in wanted:
        start = offset - first + RECORD_HEADER_SIZE
        stop = start + length
        if stop > size:
            append((entry_id, None))
            continue
        stored, crc, got_id = unpack_header(blob, start - RECORD_HEADER_SIZE)
        data = bytes(blob[start:stop])   # a copy (of a bytes slice: that slice itself)
        prefix = (prefix_v2(stored, entry_id) if ident is None
                  else prefix_v3(stored, entry_id, ident))
        if stored != length + bias or got_id != entry_id or crc32c(data, crc32c(prefix)) != crc:
            append((entry_id, None))
        else:
            append((entry_id, data))
    return out


def check_record(record: bytes | memoryview, entry_id: int, length: int, bias: int,
                 ident: int | None) -> bytes | None:
    """The data of one record read on its own (its header, then ``length`` bytes), as
    :func:`parse_records` checks it: a copy, or None when the record fails its checks.
    ``bias`` and ``ident`` are :func:`length_bias` and :func:`crc_identity` of its segment."""
    stored, crc, got_id = _RECORD_HEADER.unpack_from(record, 0)
    data = bytes(record[RECORD_HEADER_SIZE:RECORD_HEADER_SIZE + length])
    if len(data) != length or stored != length + bias or got_id != entry_id:
        return None
    prefix = (_CRC_PREFIX_V2.pack(stored, entry_id) if ident is None
              else CRC_PREFIX.pack(stored, entry_id, ident))
    return data if crc32c(data, crc32c(prefix)) == crc else None


def now_ms() -> int:
    return int(time.time() * 1000)


def encode_index(
    ledger_id: int, segment_size: int, created_ms: int, fmt: int, offsets: array[int],
    lengths: array[int], size_bytes: int,
) -> bytes:
    """A segment's persisted index (format at the top of this module)."""
    if len(offsets) != len(lengths):
        raise ValueError("offsets and lengths differ in length")
    offs, lens = array("q", offsets), array("i", lengths)  # copies: the caller's may grow
    if not _LITTLE:
        offs.byteswap()
        lens.byteswap()
    body = offs.tobytes() + lens.tobytes()
    head = _INDEX_HEADER.pack(INDEX_MAGIC, ledger_id, segment_size, len(offs), created_ms, fmt,
                              offs.count(-1), size_bytes)
    crc = crc32c(body, crc32c(head))
    return head + struct.pack("<II", crc, 0) + body


@dataclass(frozen=True, slots=True)
class IndexSummary:
    """What a consistent persisted index says of its segment, without its arrays."""

    entries: int
    valid_end: int  # the segment size it was written for: the logical end
    created_ms: int
    format: int
    missing: int  # entries whose offset is -1
    size_bytes: int


def _check_index(data: bytes, ledger_id: int) -> IndexSummary | None:
    """The index's summary if its CRC and its consistency checks hold, else None."""
    if len(data) < INDEX_HEADER_SIZE:
        return None
    magic, got_id, seg_size, entries, created_ms, fmt, missing, size_bytes = (
        _INDEX_HEADER.unpack_from(data)
    )
    (crc,) = struct.unpack_from("<I", data, _INDEX_HEADER.size)
    if (
        magic != INDEX_MAGIC
        or got_id != ledger_id
        or fmt not in FORMATS
        or len(data) != INDEX_HEADER_SIZE + 12 * entries
    ):
        return None
    view = memoryview(data)
    if crc32c(view[INDEX_HEADER_SIZE:], crc32c(view[: _INDEX_HEADER.size])) != crc:
        return None
    # Cheap consistency checks (the CRC already vouches for the writer's intent).
    ends = INDEX_HEADER_SIZE + 8 * entries  # the offsets, then the lengths
    if entries:
        (last_offset,) = _I64.unpack_from(data, ends - 8)
        (last_length,) = _I32.unpack_from(data, len(data) - 4)
        if last_offset + RECORD_HEADER_SIZE + last_length != seg_size:
            return None
    elif seg_size != FILE_HEADER_SIZE:
        return None
    # -1 is eight 0xff bytes in either byte order: no such run in the offsets, no -1 among them
    # (a C search; counting compares every entry as a Python int).
    count = 0
    if data.find(_ALL_ONES, INDEX_HEADER_SIZE, ends) >= 0:
        count = _offsets(view[INDEX_HEADER_SIZE:ends]).count(-1)
    if missing != count:
        return None
    return IndexSummary(entries, seg_size, created_ms, fmt, missing, size_bytes)


def _offsets(raw: memoryview) -> array[int]:
    offsets = array("q")
    offsets.frombytes(raw)
    if not _LITTLE:
        offsets.byteswap()
    return offsets


def decode_index(data: bytes, ledger_id: int) -> ScanResult | None:
    """The ScanResult an index describes (valid_end = the segment size it was written for),
    or None if it is damaged or names another ledger. The segment is not checked here."""
    summary = _check_index(data, ledger_id)
    return None if summary is None else _index_result(data, ledger_id, summary)


def _index_result(data: bytes, ledger_id: int, summary: IndexSummary) -> ScanResult:
    ends = INDEX_HEADER_SIZE + 8 * summary.entries
    view = memoryview(data)
    offsets, lengths = _offsets(view[INDEX_HEADER_SIZE:ends]), array("i")
    lengths.frombytes(view[ends:])
    if not _LITTLE:
        lengths.byteswap()
    result = ScanResult(ledger_id, summary.created_ms, offsets, lengths, summary.size_bytes,
                        summary.valid_end)
    result.format = summary.format
    result.missing = summary.missing
    return result


def _load_checked(
    ops: FileOps, segment: str | Path, index: str | Path, ledger_id: int
) -> tuple[bytes, IndexSummary] | None:
    """The index file's bytes and summary if it is consistent and still matches the segment:
    the segment has the size the index was written for and a valid header naming the same
    ledger, creation time and format."""
    try:
        data = ops.read_file(index)
    except FileNotFoundError:
        return None
    summary = _check_index(data, ledger_id)
    if summary is None:
        return None
    fd = ops.open(segment, os.O_RDONLY)
    try:
        if os.fstat(fd).st_size != summary.valid_end:
            return None
        header = decode_file_header_format(ops.pread(fd, FILE_HEADER_SIZE, 0))
    finally:
        ops.close(fd)
    if header is None or header != (ledger_id, summary.created_ms, summary.format):
        return None
    return data, summary


def load_index(ops: FileOps, path: Path, ledger_id: int) -> ScanResult | None:
    """The segment at path's index if it has a consistent one, else None (then scan)."""
    got = _load_checked(ops, path, index_path(path), ledger_id)
    return None if got is None else _index_result(got[0], ledger_id, got[1])


def load_index_summary(
    ops: FileOps, segment: str | Path, index: str | Path, ledger_id: int
) -> IndexSummary | None:
    """load_index's checks of the segment file and its index file, without building the
    index arrays: the summary if the index is consistent and matches the segment, else None."""
    got = _load_checked(ops, segment, index, ledger_id)
    return None if got is None else got[1]


def write_index(
    ops: FileOps, path: Path, ledger_id: int, segment_size: int, created_ms: int, fmt: int,
    offsets: array[int], lengths: array[int], size_bytes: int, *, sync: bool,
) -> bool:
    """Persist the index of the sealed segment at path (tmp + fsync + rename). Skipped if
    the segment is gone (trimmed meanwhile). Without a directory fsync: a lost rename only
    means a scan on the next open."""
    if not path.exists():
        return False
    data = encode_index(ledger_id, segment_size, created_ms, fmt, offsets, lengths, size_bytes)
    target = index_path(path)
    tmp = target.with_name(target.name + ".tmp")
    fd = ops.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    try:
        ops.write_all(fd, data)
        if sync:
            ops.fsync(fd)
    finally:
        ops.close(fd)
    ops.replace(tmp, target)
    return True
