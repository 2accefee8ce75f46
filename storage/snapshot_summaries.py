"""Snapshot summaries: a few bytes per snapshot, readable without opening the snapshots.

Theory of operation
-------------------
A recovery with tens of thousands of snapshots wants a little about each (the delayed tracker:
a bucket's ledger range and first deliver time) before it has read any of them, so it can read
the one due soonest first. :class:`SummaryLog` keeps these in one append-only file beside the
snapshots, ``summaries.log``; per record::

    snapshot id u64 | length u16 | bytes | crc32c u32 (of the id, the length and the bytes)

A record is appended once its snapshot file is in place (``SnapshotStore.create``) or later
(``SnapshotStore.add_summaries``, for a snapshot written without one). The file is never synced:
it is advisory, and whatever it lacks the caller reads from the snapshots themselves.
:meth:`SummaryLog.read` keeps the records of snapshots that still exist (ids are never reused,
so a record can only describe the snapshot it was written for; the last record of an id wins)
and stops at the first record that is torn or fails its CRC (a crash in the middle of an
append, a damaged file): a snapshot with no summary is one its reader must open. When the
file holds more dead records than live ones it is rewritten with the live ones
(``FileOps.atomic_write``: the old file or the new, never a mix).

Blocking: every method runs in the store's IO pool, never on the event loop; a lock orders
appends and rewrites between pool threads.
"""

from __future__ import annotations

import os
import struct
import threading
from collections.abc import Iterable, Set
from pathlib import Path
from typing import Final

from crc32c import crc32c

from storage.fileops import FileOps

SUMMARY_LOG_NAME: Final = "summaries.log"

#: The largest summary a record holds, bytes (the length is a u16).
MAX_SUMMARY_BYTES: Final = 0xFFFF

_HEAD: Final = struct.Struct("<QH")
_CRC: Final = struct.Struct("<I")

#: A log is rewritten when it holds more than this many records beyond twice the live ones.
_REWRITE_SLACK: Final = 1024


def encode_record(snapshot_id: int, summary: bytes) -> bytes:
    if len(summary) > MAX_SUMMARY_BYTES:
        raise ValueError(f"a snapshot summary is at most {MAX_SUMMARY_BYTES} bytes")
    body = _HEAD.pack(snapshot_id, len(summary)) + summary
    return body + _CRC.pack(crc32c(body))


def decode_records(data: bytes) -> tuple[dict[int, bytes], int, int]:
    """(summary by snapshot id, records read, bytes read): every whole record with a good CRC
    up to the first one that is not."""
    out: dict[int, bytes] = {}
    offset, n, size = 0, 0, len(data)
    head, crc_size = _HEAD.size, _CRC.size
    while offset + head <= size:
        snapshot_id, length = _HEAD.unpack_from(data, offset)
        end = offset + head + length
        if end + crc_size > size:
            break                               # torn tail
        (crc,) = _CRC.unpack_from(data, end)
        if crc32c(data[offset:end]) != crc:
            break                               # damaged: nothing after it is trusted
        out[snapshot_id] = data[offset + head:end]
        offset = end + crc_size
        n += 1
    return out, n, offset


class SummaryLog:
    """The summaries file of one snapshot directory (module docstring)."""

    def __init__(self, directory: Path, ops: FileOps) -> None:
        self._path = directory / SUMMARY_LOG_NAME
        self._ops = ops
        self._lock = threading.Lock()

    def append(self, records: Iterable[tuple[int, bytes]]) -> None:
        """Blocking: append summaries (not synced: advisory)."""
        data = b"".join(encode_record(snapshot_id, summary) for snapshot_id, summary in records)
        if not data:
            return
        with self._lock:
            fd = self._ops.open(self._path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
            try:
                self._ops.write_all(fd, data)
            finally:
                self._ops.close(fd)

    def read(self, live: Set[int]) -> dict[int, bytes]:
        """Blocking: the summaries of the snapshots in ``live``; the file is rewritten when
        most of its records are dead."""
        with self._lock:
            try:
                data = self._ops.read_file(self._path)
            except FileNotFoundError:
                return {}
            found, n, good = decode_records(data)
            kept = {k: v for k, v in found.items() if k in live}
            # a torn or damaged tail goes too: records appended after it would not be read
            if good < len(data) or n > 2 * len(kept) + _REWRITE_SLACK:
                self._ops.atomic_write(self._path, b"".join(
                    encode_record(k, v) for k, v in kept.items()), sync=False)
            return kept
