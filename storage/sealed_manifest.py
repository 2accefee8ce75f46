"""The sealed-segment manifest of a managed ledger: what each sealed, indexed segment holds,
in one file, so opening a ledger of many segments need not read every segment and index.

Theory of operation
-------------------
``<ledger dir>/sealed.log`` is a sequence of fixed-size records, one appended each time a
sealed segment's index (``.idx``) has been written (storage/segment_io.py, the I/O thread):

  ledger_id u64 | entries u64 | size_bytes u64 | created_ms u64 | segment_size u64 |
  format u32 | missing u32 | crc32c u32 | reserved u32          (56 bytes, little-endian)

the CRC covering the 48 bytes before it. A later record of a ledger replaces an earlier one.

It is advisory, never the only copy of anything: the segment and its index stay the truth.
Recovery (storage/recovery.py) trusts a record only when the directory listing still has the
segment and its index and the segment file still has ``segment_size`` bytes (one ``stat``),
the record says nothing is missing, and no fence of this process cut the segment. Anything
else (no record: a crash before the append, a store written before the manifest; a damaged or
torn record; a segment cut or grown since; a record naming a segment that is gone) is the full
check of that segment as before. What a trusted record does not vouch for (the index's bytes,
the segment's header and records) is checked at the segment's first read
(storage/sealed_checks.py), before anything of it is served. So the file is never synced: a
lost or torn append only costs a full check. A record is appended at a multiple of the record
size (a torn tail is overwritten), and a damaged record is skipped, not the records after it.
The file is rewritten (tmp + rename) when most of its records name gone segments: at open, and
after a trim that deleted ledgers (compact_manifest, in the I/O thread).
"""

from __future__ import annotations

import logging
import os
import struct
from collections.abc import Iterable
from pathlib import Path
from typing import NamedTuple

from crc32c import crc32c

from storage.fileops import FileOps

log = logging.getLogger("horae.storage")

MANIFEST_NAME = "sealed.log"
_RECORD = struct.Struct("<QQQQQII")
_CRC = struct.Struct("<II")
RECORD_SIZE = _RECORD.size + _CRC.size  # 56


class SealedRecord(NamedTuple):
    """One sealed segment as its index describes it (segment_size: the logical end)."""

    ledger_id: int
    entries: int
    size_bytes: int
    created_ms: int
    segment_size: int
    format: int
    missing: int


def encode_records(records: Iterable[SealedRecord]) -> bytes:
    out = bytearray()
    pack, crc_pack = _RECORD.pack, _CRC.pack
    for record in records:
        body = pack(*record)
        out += body
        out += crc_pack(crc32c(body), 0)
    return bytes(out)


def decode_records(data: bytes) -> tuple[dict[int, SealedRecord], int]:
    """(ledger id -> its last intact record, how many records were read, intact or not)."""
    out: dict[int, SealedRecord] = {}
    whole = len(data) - len(data) % RECORD_SIZE
    body_size = _RECORD.size
    unpack = _RECORD.unpack_from
    view = memoryview(data)
    count = 0
    for at in range(0, whole, RECORD_SIZE):
        count += 1
        (crc,) = struct.unpack_from("<I", data, at + body_size)
        if crc32c(view[at : at + body_size]) != crc:
            continue  # damaged or torn: that segment gets the full check
        record = SealedRecord(*unpack(data, at))
        out[record.ledger_id] = record
    return out, count


def read_manifest(ops: FileOps, directory: Path) -> tuple[dict[int, SealedRecord], int]:
    """The directory's manifest (decode_records); empty when there is none or it is unreadable."""
    try:
        data = ops.read_file(directory / MANIFEST_NAME)
    except FileNotFoundError:
        return {}, 0
    except OSError:
        return {}, 0
    return decode_records(data)


def append_records(ops: FileOps, directory: Path, records: list[SealedRecord]) -> None:
    """Append records (not synced: see the module's docstring). Blocking; one writer per
    directory at a time (the I/O thread, or recovery under the ledger's open lock)."""
    if not records:
        return
    fd = ops.open(directory / MANIFEST_NAME, os.O_WRONLY | os.O_CREAT)
    try:
        size = os.fstat(fd).st_size
        ops.pwrite_all(fd, encode_records(records), size - size % RECORD_SIZE)
    finally:
        ops.close(fd)


def rewrite_manifest(ops: FileOps, directory: Path, records: Iterable[SealedRecord]) -> None:
    """Replace the manifest by exactly these records (tmp + rename, not synced)."""
    ops.atomic_write(directory / MANIFEST_NAME, encode_records(records), sync=False)


def too_large(stored: int, listed: int) -> bool:
    """Whether a manifest of *stored* records, *listed* segments on disk, is due a rewrite."""
    return stored > 2 * listed + 64


def compact_manifest(ops: FileOps, directory: Path, listed: int) -> bool:
    """Blocking (the I/O thread, after a trim): when the manifest holds far more records than
    the ledger has segments (*listed*), rewrite it with the records of segments still there.
    One stat when it is not due. True when it was rewritten; a failure is logged only
    (advisory: the next open compacts it)."""
    try:
        size = os.stat(directory / MANIFEST_NAME).st_size
        if not too_large(size // RECORD_SIZE, listed):
            return False
        records, _ = read_manifest(ops, directory)
        with os.scandir(directory) as entries:
            names = {entry.name for entry in entries}
        rewrite_manifest(ops, directory, [record for ledger_id, record in sorted(records.items())
                                          if f"{ledger_id:020d}.seg" in names])
    except OSError as exc:
        log.warning("storage: compacting the sealed-segment manifest of %s failed (%s)",
                    directory, exc)
        return False
    return True
