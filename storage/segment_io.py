"""The writer thread's operations on one segment file: create it, append records, cut it back.

Called only by the group-commit writer (storage/writer.py), in its thread; every file
operation goes through FileOps. What they keep true:
- create_segment: the header (and, with pre-zeroing, the first chunk of zeros) is written
  and the directory entry is made durable before any record of the file can be
  acknowledged; the ledger id is reserved durably first (never reused).
- write_records: one header pack and two crc32c calls per record (format 3: the crc also
  covers the segment's ledger id), one writev of header/data pairs without copying the
  payloads; the index arrays grow with C-level map/accumulate. A segment reopened after its
  fd was evicted (positioned False) is written at explicit offsets instead.
- write_zeros: a pre-zero step's zeros ahead of the write head (the sync stage syncs them).
- write_index_logged: a final segment's persisted index, for the I/O thread (a failure only
  costs a scan at the next open), then its record in the ledger's sealed-segment manifest
  (storage/sealed_manifest.py).
- cut_back: a broken segment (a write or fdatasync failed) is truncated to synced_offset and
  that is synced, so nothing unsynced survives into a reopen.
"""

from __future__ import annotations

import logging
import os
from array import array
from collections.abc import Sequence
from functools import partial
from itertools import accumulate, islice
from operator import add

from crc32c import crc32c

from storage.fileops import FileOps
from storage.ids import IdAllocator
from storage.sealed_manifest import SealedRecord, append_records
from storage.segment_file import SegmentFile
from storage.segments import (
    CRC_PREFIX,
    RECORD_HEADER,
    RECORD_HEADER_SIZE,
    encode_file_header,
    write_index,
)

log = logging.getLogger("horae.storage")

IOV_MAX = 1024
PAGE = 4096
ZEROS = bytes(1024 * 1024)  # the pre-zero write buffer (written in pieces of this size)
_RECORD_PLUS = partial(add, RECORD_HEADER_SIZE)  # data length -> record size


def round_up(offset: int) -> int:
    return -(-offset // PAGE) * PAGE


def create_segment(
    ops: FileOps, ids: IdAllocator, segment: SegmentFile, *, prezero_bytes: int, fsync: bool
) -> None:
    """Create the segment file: header, then prezero_bytes of zeros (0: none)."""
    ids.ensure_durable(segment.ledger_id)
    fd = ops.open(segment.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
    try:
        header = encode_file_header(segment.ledger_id, segment.created_ms)
        ops.write_all(fd, header)  # records follow at the fd position (pwrite writes the
        # zeros, so the position stays at the write head)
        segment.zeroed_end = len(header)
        if prezero_bytes:
            # The first chunk: the first batch's fdatasync commits it with the header.
            end = round_up(len(header) + prezero_bytes)
            ops.pwrite_all(fd, memoryview(ZEROS)[: end - len(header)], len(header))
            segment.zeroed_end = end
        if fsync:
            # The new directory entry must be durable before anything in it is acknowledged.
            ops.fsync_dir(segment.path.parent)
    except BaseException:
        ops.close(fd)
        raise
    segment.fd = fd
    segment.positioned = True
    segment.write_offset = len(header)


def write_records(
    ops: FileOps, segment: SegmentFile, datas: Sequence[bytes], first_entry_id: int
) -> None:
    """Append records for datas (entry ids from first_entry_id) at the write head."""
    ledger_id = segment.ledger_id  # format 3: the crc covers the segment's ledger id too
    if len(datas) == 1 and segment.positioned:
        # A lone record (one append in lockstep): its header and data in one writev, no
        # per-group lists.
        data = datas[0]
        stored = len(data) + RECORD_HEADER_SIZE
        crc = crc32c(data, crc32c(CRC_PREFIX.pack(stored, first_entry_id, ledger_id)))
        header = RECORD_HEADER.pack(stored, crc, first_entry_id)
        start = segment.write_offset
        written = ops.writev(segment.fd, [header, data])
        if written < stored:  # a short write: finish it with plain writes
            ops.write_all(segment.fd, memoryview(header + data)[written:])
        segment.write_offset = start + stored
        segment.offsets.append(start)
        segment.lengths.append(len(data))
        return
    # Hot loop (holds the GIL): one header pack and two crc32c calls per record, nothing
    # else per entry.
    pack_header = RECORD_HEADER.pack
    pack_prefix = CRC_PREFIX.pack
    buffers: list[bytes] = []
    push = buffers.append
    entry_id = first_entry_id
    for data in datas:
        stored = len(data) + RECORD_HEADER_SIZE  # the length counts the header
        crc = crc32c(data, crc32c(pack_prefix(stored, entry_id, ledger_id)))
        push(pack_header(stored, crc, entry_id))
        push(data)
        entry_id += 1
    lengths = array("i", map(len, datas))
    start = segment.write_offset
    total = sum(lengths) + RECORD_HEADER_SIZE * len(datas)
    if not segment.positioned:  # reopened after an eviction: write at the write head
        ops.pwrite_all(segment.fd, b"".join(buffers), start)
    else:
        # writev in pieces of IOV_MAX buffers (IOV_MAX // 2 records): the kernel gathers them
        # without the GIL, where one b"".join would copy the whole group holding it.
        step = IOV_MAX // 2
        for first in range(0, len(datas), step):
            piece = buffers[2 * first : 2 * (first + step)]
            size = sum(lengths[first : first + step]) + RECORD_HEADER_SIZE * (len(piece) // 2)
            written = ops.writev(segment.fd, piece)
            if written < size:  # a short write: finish the piece with plain writes
                ops.write_all(segment.fd, memoryview(b"".join(piece))[written:])
    segment.write_offset = start + total
    # Offsets of the records: start, then running sums of the record sizes.
    segment.offsets.extend(
        islice(accumulate(map(_RECORD_PLUS, lengths), initial=start), len(datas))
    )
    segment.lengths.extend(lengths)


def write_zeros(ops: FileOps, fd: int, start: int, end: int) -> None:
    """Write zeros over [start, end) (a pre-zero step; not synced here)."""
    zeros = memoryview(ZEROS)
    at = start
    while at < end:
        piece = min(len(zeros), end - at)
        ops.pwrite_all(fd, zeros[:piece], at)
        at += piece


def cut_back(ops: FileOps, segment: SegmentFile, *, fsync: bool) -> None:
    """Seal a broken segment: drop everything after its last durable sync, and sync that
    (the unsynced records must never be served after a reopen). If this fails too, the
    writer's fenced_ends still makes the next open cut it back before reading it."""
    synced = segment.synced_offset
    try:
        ops.ftruncate(segment.fd, synced)
        if fsync:
            ops.fsync(segment.fd)
    except OSError as exc:
        log.error("storage writer: cutting %s back to %d failed (%s)", segment.path, synced, exc)
        return
    segment.write_offset = segment.zeroed_end = synced


def write_index_logged(ops: FileOps, segment: SegmentFile, size_bytes: int, sync: bool) -> bool:
    """write_index() of a final segment for a background job: a failure only costs a scan on
    the next open. True once the index is on disk."""
    try:
        written = write_index(
            ops, segment.path, segment.ledger_id, segment.write_offset, segment.created_ms,
            segment.format, segment.offsets, segment.lengths, size_bytes, sync=sync,
        )
    except OSError as exc:
        log.warning("storage: writing a segment index failed (%s); it will be rebuilt", exc)
        return False
    if written:
        # After the index: a record never describes an index that is not there yet.
        record = SealedRecord(segment.ledger_id, len(segment.offsets), size_bytes,
                              segment.created_ms, segment.write_offset, segment.format,
                              segment.offsets.count(-1))
        try:
            append_records(ops, segment.path.parent, [record])
        except OSError as exc:  # advisory: the next open checks that segment in full
            log.warning("storage: appending to the sealed-segment manifest failed (%s)", exc)
    return written
