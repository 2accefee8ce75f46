"""SealedChecks: the first-read check of the sealed segments a ledger opened from its manifest.

Theory of operation
-------------------
Recovery (storage/recovery.py) takes a sealed segment from the ledger's sealed-segment manifest
(storage/sealed_manifest.py) when the record still matches the directory listing and the
segment's size, without opening the segment or its index: its state is ``UNCHECKED`` and its
entry count, bytes and creation time are the record's. What recovery used to check there is
checked here, once, before the first read of that segment is served (storage/reads.py asks):
the index file's CRC and consistency, the segment's size and header against it
(segments.load_index). If they hold, the index's arrays are the segment's (paged like any
other). If not, the segment is scanned exactly as recovery scans it (bad records dropped and
reported, a torn tail cut, the file synced), its index rewritten (not for a bad header) and a
new manifest record appended with it. Either way the arrays are the truth from then on: an
entry the record counted that they lack (or mark -1) becomes missing (never served, reported
by the scan's events, cursors move past it as past any entry recovery dropped), and
``size_bytes`` follows the scan.

Loop-only, except ``check_sealed`` (blocking, a read thread). Concurrent first reads of one
segment share one check. Owned by the ManagedLedger, which hands it to its EntryReader.
"""

from __future__ import annotations

import asyncio
from array import array
from collections.abc import Callable
from concurrent.futures import Executor
from pathlib import Path

from pyroaring import BitMap

from storage.fileops import FileOps
from storage.ledger_state import LedgerState
from storage.segment_file import IndexResidency, SegmentFile
from storage.segments import RecoveryEvent, ScanResult, load_index, scan_segment


def check_sealed(ops: FileOps, path: Path, ledger_id: int, sync: bool) -> tuple[ScanResult, bool]:
    """Blocking: (the segment's index if it is consistent and matches the segment, else a
    recovery scan of it (truncating, synced with sync), whether it was scanned)."""
    indexed = load_index(ops, path, ledger_id)
    if indexed is not None:
        return indexed, False
    return scan_segment(ops, path, ledger_id, truncate=True, sync=sync), True


class SealedChecks:
    """The pending first-read checks of one managed ledger's UNCHECKED segments."""

    def __init__(
        self, loop: asyncio.AbstractEventLoop, ops: FileOps, pool: Executor, name: str,
        sync: bool, report: Callable[[RecoveryEvent], None],
        rewrite_index: Callable[[SegmentFile, int], object],
        adopt: Callable[[SegmentFile, array[int], array[int]], None],
        entries_lost: Callable[[], None],
    ) -> None:
        self._loop = loop
        self._ops = ops
        self._pool = pool
        self._name = name
        self._sync = sync
        self._report = report
        self._rewrite_index = rewrite_index
        self._adopt = adopt
        self._entries_lost = entries_lost
        self._checking: dict[SegmentFile, asyncio.Future[None]] = {}
        self.checked = 0
        self.scanned = 0

    async def check(self, led: LedgerState) -> None:
        """Loop: check led's segment if it is UNCHECKED (once; others wait for that one).
        Raises what the check raised (FileNotFoundError: the segment was deleted)."""
        segment = led.segment
        if segment.index is not IndexResidency.UNCHECKED:
            return
        pending = self._checking.get(segment)
        if pending is not None:
            await asyncio.shield(pending)
            return
        pending = self._checking[segment] = self._loop.create_future()
        try:
            result, scanned = await self._loop.run_in_executor(
                self._pool, check_sealed, self._ops, segment.path, segment.ledger_id,
                self._sync)
            if segment.index is IndexResidency.UNCHECKED:
                self._apply(led, result, scanned)
            pending.set_result(None)
        except BaseException as exc:
            pending.set_exception(exc)
            pending.exception()  # retrieved: waiters (if any) re-raise it
            raise
        finally:
            del self._checking[segment]

    def _apply(self, led: LedgerState, result: ScanResult, scanned: bool) -> None:
        segment = led.segment
        self.checked += 1
        for kind, offset, length, entry_ids in result.events:
            self._report(RecoveryEvent(kind, self._name, led.ledger_id, offset, length,
                                       entry_ids))
        offsets = result.offsets
        count = min(led.confirmed, len(offsets))
        missing = result.missing if result.missing >= 0 else offsets.count(-1)
        lost = [i for i in range(count) if offsets[i] < 0] if missing else []
        lost.extend(range(count, led.confirmed))  # counted by the record, not in the file
        if lost:
            if led.missing is None:
                led.missing = BitMap()
            led.missing.update(lost)
        segment.format = result.format
        if scanned:
            segment.offsets, segment.lengths = offsets, result.lengths
            segment.index = IndexResidency.RESIDENT
            self.scanned += 1
            segment.write_offset = segment.synced_offset = result.valid_end
            led.size_bytes = led.assigned_bytes = result.size_bytes
            if not result.removed and not any(e[0] == "bad_header" for e in result.events):
                self._rewrite_index(segment, result.size_bytes)  # then PAGEABLE once durable
        else:
            self._adopt(segment, offsets, result.lengths)
        if lost:
            self._entries_lost()
