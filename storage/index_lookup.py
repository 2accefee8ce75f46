"""Scattered records of sealed segments looked up in their index files, a small pread each.

A catch-up of due delayed messages reads a few entries of each of many sealed segments per
round (a delayed index's order is not the log's): paging each segment's whole index in to
read one or a few of its entries (12 bytes per entry: ~600 KB read and CRC-checked for a
50,000-entry ledger) cost more than everything else of a message, and with more segments
than the index cache holds (storage/index_pages.py), every round paged them all in again.

A segment whose index file was already checked in this process (PAGED_OUT: by recovery or by
a page-in) is looked up in place instead: the segment's size and the index's header are
matched (magic, ledger, format, the index file's size for its entry count), then each wanted
entry's offset and length are read with a pread each, and its record as every read reads it
(stored length, entry id, and the CRC over them, the ledger id and the data: format 3 only,
where the CRC names the ledger). Whatever does not match is RETRY, never missing or damaged
here: the caller reads it through the paged-in, CRC-checked index, which alone decides that
an entry is missing (dropped by recovery) or reports a damaged record, so bit rot in an index
file never costs an entry or blames a record.

Blocking: a read thread.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path

from crc32c import crc32c

from storage.fileops import FileOps
from storage.segments import (
    CRC_PREFIX,
    FORMAT_V3,
    INDEX_HEADER,
    INDEX_HEADER_SIZE,
    INDEX_MAGIC,
    MAX_RECORD_BYTES,
    RECORD_HEADER,
    RECORD_HEADER_SIZE,
    index_path,
    length_bias,
)

_I64 = struct.Struct("<q")
_I32 = struct.Struct("<i")

RETRY = 0
"""An entry this lookup could not vouch for: read it through the checked index."""


def read_indexed(
    ops: FileOps, path: Path, ledger_id: int, fmt: int, entry_ids: list[int], budget: int,
    taken: bool,
) -> tuple[list[bytes | int], int] | None:
    """The records of ``entry_ids`` (ascending) of the sealed segment at ``path``, each
    looked up in its index file. Returns (an outcome per entry id: its data or RETRY, the
    bytes read) for a prefix of ``entry_ids``: once ``budget`` bytes are read and an entry was
    taken (``taken``: by the caller's job already), the rest is not reached. None: the segment
    file is gone (trimmed or deleted meanwhile)."""
    retry_all: tuple[list[bytes | int], int] = ([RETRY] * len(entry_ids), 0)
    if fmt < FORMAT_V3:
        return retry_all
    try:
        sfd = ops.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        try:
            ifd = ops.open(index_path(path), os.O_RDONLY)
        except FileNotFoundError:
            return retry_all
        try:
            head = ops.pread(ifd, INDEX_HEADER_SIZE, 0)
            if len(head) < INDEX_HEADER_SIZE:
                return retry_all
            magic, got_id, seg_size, entries, _created, got_fmt, _missing, _bytes = (
                INDEX_HEADER.unpack_from(head))
            if (magic != INDEX_MAGIC or got_id != ledger_id or got_fmt != fmt
                    or os.fstat(ifd).st_size != INDEX_HEADER_SIZE + 12 * entries
                    or os.fstat(sfd).st_size != seg_size):
                return retry_all
            return _read(ops, sfd, ifd, ledger_id, fmt, entries, entry_ids, budget, taken)
        finally:
            ops.close(ifd)
    finally:
        ops.close(sfd)


def _read(
    ops: FileOps, sfd: int, ifd: int, ledger_id: int, fmt: int, entries: int,
    entry_ids: list[int], budget: int, taken: bool,
) -> tuple[list[bytes | int], int]:
    out: list[bytes | int] = []
    append = out.append
    pread = ops.pread
    unpack_offset, unpack_length = _I64.unpack_from, _I32.unpack_from
    unpack_header = RECORD_HEADER.unpack_from
    prefix = CRC_PREFIX.pack
    bias = length_bias(fmt)
    lengths_at = INDEX_HEADER_SIZE + 8 * entries
    nbytes = 0
    for entry_id in entry_ids:
        if nbytes >= budget and taken:
            break
        if not 0 <= entry_id < entries:
            append(RETRY)
            continue
        raw_offset = pread(ifd, 8, INDEX_HEADER_SIZE + 8 * entry_id)
        raw_length = pread(ifd, 4, lengths_at + 4 * entry_id)
        if len(raw_offset) != 8 or len(raw_length) != 4:
            append(RETRY)
            continue
        (offset,), (length,) = unpack_offset(raw_offset), unpack_length(raw_length)
        if offset < 0 or not 0 <= length <= MAX_RECORD_BYTES:
            append(RETRY)      # missing (-1) or damaged: the checked index decides
            continue
        blob = pread(sfd, RECORD_HEADER_SIZE + length, offset)
        if len(blob) != RECORD_HEADER_SIZE + length:
            append(RETRY)
            continue
        stored, crc, got_id = unpack_header(blob, 0)
        data = blob[RECORD_HEADER_SIZE:]
        if (stored != length + bias or got_id != entry_id
                or crc32c(data, crc32c(prefix(stored, entry_id, ledger_id))) != crc):
            append(RETRY)
            continue
        append(data)
        nbytes += length
        taken = True
    return out, nbytes
