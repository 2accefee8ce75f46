"""EntryReader: the read path of one managed ledger (cache first, then disk: a run the page
cache holds read in place without waiting for the disk, storage/read_fds.py, the rest in read
threads).

Owned by its ManagedLedger, which shares (never replaces) its ledger table and id list with
it; loop-only. Reads stop at each ledger's confirmed count (never past what was synced and
acknowledged); a record that fails its checks on disk is never returned: on_corrupt is
called (the ledger marks the entry missing, reports it and lets cursors move past it). A
segment recovery took from the sealed-segment manifest is checked against its files first
(storage/sealed_checks.py).
Out of file descriptors while reading is TooManyOpenFilesError.
"""

from __future__ import annotations

import asyncio
import bisect
import os
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Executor
from operator import itemgetter
from pathlib import Path

from storage.cache import EntryCache
from storage.errors import TooManyOpenFilesError
from storage.fileops import FileOps
from storage.index_lookup import read_indexed
from storage.index_pages import IndexPager
from storage.ledger_state import LedgerState
from storage.limits import is_fd_exhaustion
from storage.positions import Entry, Position
from storage.read_fds import ReadFds
from storage.relocation import RelocatedEntries
from storage.sealed_checks import SealedChecks
from storage.segment_file import IndexResidency
from storage.segments import (
    FORMAT_V3,
    RECORD_HEADER_SIZE,
    parse_records,
    read_records,
    records_span,
)

DEFAULT_MAX_READ_BYTES = 5 * 1024 * 1024

#: ``tuple.__new__``: entries and positions built per entry read, without the Python
#: ``__new__`` a NamedTuple generates (storage/positions.py)
_new = tuple.__new__
_ledger_id = itemgetter(0)   # a Position's fields
_entry_id = itemgetter(1)

OnCorrupt = Callable[[LedgerState, int, int, int], None]
"""on_corrupt(ledger, entry_id, offset, length): a record failed its checks when read."""


class EntryReader:
    def __init__(
        self, loop: asyncio.AbstractEventLoop, ops: FileOps, cache: EntryCache, pool: Executor,
        pager: IndexPager, ledgers: Mapping[int, LedgerState], ledger_ids: list[int],
        on_corrupt: OnCorrupt, fds: ReadFds, relocated: RelocatedEntries | None = None,
        checks: SealedChecks | None = None,
    ) -> None:
        self._fds = fds
        self._relocated = relocated
        self._checks = checks
        self._pager = pager
        self._loop = loop
        self._ops = ops
        self._cache = cache
        self._pool = pool
        self._ledgers = ledgers
        self._ledger_ids = ledger_ids
        self._on_corrupt = on_corrupt

    async def read_entries(
        self, start: Position, max_entries: int, max_bytes: int = DEFAULT_MAX_READ_BYTES
    ) -> list[Entry]:
        """Entries from start (inclusive) in order, across ledgers, up to each ledger's
        confirmed count. Missing entries are skipped. At least one entry is returned if any
        exists, even if it is larger than max_bytes."""
        out: list[Entry] = []
        if max_entries <= 0:
            return out
        cache = self._cache
        cache.last_touch = cache.clock   # a read from disk keeps the cache in use too
        nbytes = 0
        ids = list(self._ledger_ids)
        for i in range(bisect.bisect_left(ids, start.ledger_id), len(ids)):
            led = self._ledgers.get(ids[i])
            if led is None:
                continue
            ledger_id = led.ledger_id
            entry_id = max(start.entry_id, 0) if ledger_id == start.ledger_id else 0
            relocated = self._relocated
            if relocated is not None and ledger_id in relocated.ghosts:
                # Its segment is gone: the pending entries copied forward, original ids.
                for got_id, copy in await relocated.read(
                        ledger_id, entry_id, led.confirmed, max_entries - len(out)):
                    out.append(Entry(Position(ledger_id, got_id), copy))
                    nbytes += len(copy)
                if len(out) >= max_entries or (out and nbytes >= max_bytes):
                    break
                continue
            while entry_id < led.confirmed and len(out) < max_entries and (
                not out or nbytes < max_bytes
            ):
                # a run of cached entries takes one cache lookup, not one per entry
                run = cache.get_run(ledger_id, entry_id,
                                    min(max_entries - len(out), led.confirmed - entry_id))
                if run:
                    for data in run:
                        out.append(_new(Entry, (_new(Position, (ledger_id, entry_id)), data)))
                        nbytes += len(data)
                        entry_id += 1
                        if nbytes >= max_bytes:
                            break
                    continue
                entry_id, nbytes = await self._read_from_disk(
                    led, entry_id, max_entries, max_bytes, out, nbytes
                )
            if len(out) >= max_entries or (out and nbytes >= max_bytes):
                break
        return out

    async def read_positions(
        self, positions: Sequence[Position], max_bytes: int = DEFAULT_MAX_READ_BYTES
    ) -> tuple[list[Entry], list[Position]]:
        """Entries at scattered positions (in position order, as a dispatcher's due or replay
        positions come): those in the entry cache at once, every other one from disk in ONE
        read-thread job (one small pread each), instead of a job per position. Returns the
        entries found, in the order given, and the positions known not to exist (a ledger gone,
        beyond its confirmed count, dropped by recovery, failing its checks, trimmed during the
        read). Once ``max_bytes`` are taken (at least one entry) the positions not reached are
        neither read nor missing: the caller asks again."""
        cache = self._cache
        cache.last_touch = cache.clock
        found: dict[Position, Entry] = {}
        missing: list[Position] = []
        by_ledger: dict[int, list[Position]] = {}
        nbytes = 0
        uncached = self._uncached_run(positions)
        if uncached is not None:   # one ledger's, none cached: all from disk below
            by_ledger[uncached] = list(positions)
            positions_left: Sequence[Position] = ()
        else:
            positions_left = positions
        for pos in positions_left:
            if nbytes >= max_bytes and (found or by_ledger):
                break
            led = self._ledgers.get(pos.ledger_id)
            if led is None or not 0 <= pos.entry_id < led.confirmed:
                missing.append(pos)
                continue
            data = cache.get(pos.ledger_id, pos.entry_id)
            if data is not None:
                found[pos] = _new(Entry, (pos, data))
                nbytes += len(data)
                continue
            relocated = self._relocated
            if relocated is not None and pos.ledger_id in relocated.ghosts:
                got = await self.read_entries(pos, 1)
                if got and got[0].position == pos:
                    found[pos] = got[0]
                    nbytes += len(got[0].data)
                else:
                    missing.append(pos)
                continue
            by_ledger.setdefault(pos.ledger_id, []).append(pos)
        # One read-thread job for them all, in position order within the byte limit: the
        # entries of segments whose index is in memory (or paged in, a first read checked)
        # from its arrays; those of segments checked already and paged out looked up in their
        # index files (storage/index_lookup.py), not paged in whole for a few entries each.
        # What a lookup cannot vouch for is read again through the checked, paged-in index.
        budget = max_bytes - nbytes
        taken = bool(found)
        relocated = self._relocated
        moved: list[Position] = []
        lookups = True
        while by_ledger:
            groups: list[tuple[LedgerState, list[Position], list[tuple[int, int, int]] | None]]
            jobs: list[_Job]
            groups, jobs = [], []    # (segment, format, ledger, ids to look up, records)
            for ledger_id, wanted in by_ledger.items():
                led = self._ledgers.get(ledger_id)
                if led is None:      # trimmed or deleted meanwhile
                    missing.extend(wanted)
                    continue
                segment = led.segment
                if lookups and segment.index is IndexResidency.PAGED_OUT \
                        and segment.format >= FORMAT_V3:
                    groups.append((led, wanted, None))
                    jobs.append((segment.path, segment.format, ledger_id,
                                 [p.entry_id for p in wanted], None))
                    continue
                arrays = await self._index_arrays(led)
                if arrays is None:   # trimmed or deleted meanwhile
                    missing.extend(wanted)
                    continue
                offsets, lengths = arrays
                limit = min(led.confirmed, len(offsets))
                records: list[tuple[int, int, int]] = []
                kept: list[Position] = []
                ids = list(map(_entry_id, wanted))
                if max(ids) < limit:   # in range: their records in C-level calls
                    starts = list(map(offsets.__getitem__, ids))
                    if min(starts) >= 0:   # none dropped by recovery
                        records = list(zip(ids, starts, map(lengths.__getitem__, ids), strict=True))
                        kept, wanted = wanted, []
                for pos in wanted:
                    entry_id = pos.entry_id
                    if entry_id >= limit or offsets[entry_id] < 0:
                        missing.append(pos)    # dropped by recovery (or past the checked arrays)
                        continue
                    records.append((entry_id, offsets[entry_id], lengths[entry_id]))
                    kept.append(pos)
                if records and jobs:
                    self._fds.want(segment)   # read in place next time
                elif records:
                    # what the page cache holds is read in place, in order, until a record
                    # it lacks (the rest goes to the thread, which keeps the order)
                    done, budget = self._scattered_in_place(led, kept, records, found, missing,
                                                            budget)
                    if done:
                        taken = taken or bool(found)
                        kept, records = kept[done:], records[done:]
                        if budget <= 0 and taken:
                            break    # the byte limit: the rest neither read nor missing
                if records:
                    groups.append((led, kept, records))
                    jobs.append((segment.path, segment.format, ledger_id, [], records))
            by_ledger = {}
            if not jobs:
                break
            try:
                results, size = await self._loop.run_in_executor(
                    self._pool, _read_scattered, self._ops, jobs, budget, taken)
            except OSError as exc:
                if is_fd_exhaustion(exc):
                    raise TooManyOpenFilesError(f"reading scattered entries: {exc}") from exc
                raise
            budget -= size
            # groups past the byte limit are not in results: neither read nor missing
            for (led, wanted, planned), outcomes in zip(groups, results, strict=False):
                if outcomes is None:   # the segment was trimmed or deleted meanwhile
                    if relocated is not None and led.ledger_id in relocated.ghosts:
                        moved.extend(wanted)   # its pending entries were copied forward first
                    else:
                        missing.extend(wanted)
                    continue
                for i, (pos, outcome) in enumerate(zip(wanted, outcomes, strict=False)):
                    if isinstance(outcome, bytes):
                        found[pos] = _new(Entry, (pos, outcome))
                        taken = True
                    elif planned is None:     # a lookup's RETRY: the checked index decides
                        by_ledger.setdefault(pos.ledger_id, []).append(pos)
                    else:                     # failed its checks: reported, never served
                        entry_id, offset, length = planned[i]
                        self._on_corrupt(led, entry_id, offset, length)
                        missing.append(pos)
            lookups = False
        for pos in moved:      # read from the copies, as a ghost ledger's positions are above
            got = await self.read_entries(pos, 1)
            if got and got[0].position == pos:
                found[pos] = got[0]
            else:
                missing.append(pos)
        return [found[p] for p in positions if p in found], missing

    def _uncached_run(self, positions: Sequence[Position]) -> int | None:
        """The ledger id when ``positions`` are all of one open ledger, within its confirmed
        entries, not relocated, and the entry cache holds nothing of it (a delayed index's due
        positions, long after their publish): each is then a miss, counted at once, without a
        lookup each. None otherwise (the caller looks at each)."""
        if not positions or len(set(map(_ledger_id, positions))) != 1:
            return None
        ledger_id = positions[0].ledger_id
        led = self._ledgers.get(ledger_id)
        relocated = self._relocated
        if led is None or (relocated is not None and ledger_id in relocated.ghosts):
            return None
        ids = list(map(_entry_id, positions))
        if min(ids) < 0 or max(ids) >= led.confirmed or not self._cache.misses_all(ledger_id,
                                                                                   len(ids)):
            return None
        return ledger_id

    def _scattered_in_place(
        self, led: LedgerState, positions: list[Position], records: list[tuple[int, int, int]],
        found: dict[Position, Entry], missing: list[Position], budget: int,
    ) -> tuple[int, int]:
        """Read scattered ``records`` of ``positions`` in place (storage/read_fds.py), in
        order, each checked, until one the page cache lacks or ``budget`` bytes once an entry
        is found. Returns how many were answered (found, or missing: failed the checks) and
        the budget left."""
        got = self._fds.read_records(led.segment, records, budget, bool(found))
        if got is None:
            return 0, budget
        datas, budget = got
        for pos, record, data in zip(positions, records, datas, strict=False):   # datas: fewer
            if data is None:     # failed its checks: reported, never served
                self._on_corrupt(led, *record)
                missing.append(pos)
            else:
                found[pos] = _new(Entry, (pos, data))
        return len(datas), budget

    async def _index_arrays(self, led: LedgerState) -> tuple[Sequence[int], Sequence[int]] | None:
        """A segment's (offsets, lengths) of its entries, None when it is gone (trimmed or
        deleted meanwhile). A segment opened from the manifest is checked against its files
        before its first read; an index not resident is paged in (the pager's LRU)."""
        segment = led.segment
        if segment.index is IndexResidency.UNCHECKED and self._checks is not None:
            try:
                await self._checks.check(led)
            except FileNotFoundError:
                return None
        if segment.index is not IndexResidency.RESIDENT:
            return await self._pager.arrays(segment)
        return segment.offsets, segment.lengths

    async def _read_from_disk(
        self, led: LedgerState, entry_id: int, max_entries: int, max_bytes: int,
        out: list[Entry], nbytes: int,
    ) -> tuple[int, int]:
        segment = led.segment
        arrays = await self._index_arrays(led)
        if arrays is None:   # trimmed or deleted meanwhile
            return led.confirmed, nbytes
        offsets, lengths = arrays
        wanted: list[tuple[int, int, int]] = []
        planned = nbytes
        end = entry_id
        # Entries past the arrays are missing (a first-read check found fewer than counted).
        limit = min(led.confirmed, len(offsets))
        stop = min(limit, entry_id + max_entries - len(out))
        if stop - entry_id > 1:
            # The usual run (a herd falling due, a backlog): no entry missing and all of it
            # within the byte limit (the last one may cross it, as below), planned in C.
            offs, lens = offsets[entry_id:stop], lengths[entry_id:stop]
            if min(offs) >= 0 and nbytes + sum(lens) - lens[-1] < max_bytes:
                wanted = list(zip(range(entry_id, stop), offs, lens, strict=True))
                end = stop
        while end < limit and len(out) + len(wanted) < max_entries and (
            not (out or wanted) or planned < max_bytes
        ):
            offset = offsets[end]
            if offset >= 0:
                wanted.append((end, offset, lengths[end]))
                planned += lengths[end]
            end += 1
        if end >= limit:
            end = max(end, led.confirmed)
        if not wanted:
            return end, nbytes
        first, size = records_span(wanted)
        blob = self._fds.read(segment, size, first)   # in place, if the page cache has it all
        try:
            if blob is not None:
                got = parse_records(blob, wanted, segment.format, segment.ledger_id)
            else:
                got = await self._loop.run_in_executor(
                    self._pool, read_records, self._ops, segment.path, wanted,
                    segment.format, segment.ledger_id,
                )
        except FileNotFoundError:  # trimmed or deleted while we were reading
            return led.confirmed, nbytes
        except OSError as exc:
            if is_fd_exhaustion(exc):
                raise TooManyOpenFilesError(f"reading {segment.path.name}: {exc}") from exc
            raise
        ledger_id = led.ledger_id
        append = out.append
        for got_id, data in got:
            if data is None:
                self._on_corrupt(led, got_id, offsets[got_id], lengths[got_id])
                continue
            append(_new(Entry, (_new(Position, (ledger_id, got_id)), data)))
            nbytes += len(data)
        return end, nbytes


_Job = tuple[Path, int, int, list[int], list[tuple[int, int, int]] | None]
"""(segment path, format, ledger id, entry ids to look up in its index file, or None and the
(entry id, offset, length) records to read)"""


def _read_scattered(
    ops: FileOps, jobs: list[_Job], budget: int, taken: bool,
) -> tuple[list[list[bytes | int | None] | None], int]:
    """In a read thread, in order, until ``budget`` bytes are read once an entry is ``taken``:
    each job's records read with a pread each (scattered entries: one pread over their span
    would read everything between them), their data or None (failed its checks); or its entry
    ids looked up in the segment's index file (storage/index_lookup.py), their data or RETRY.
    An answer per job reached, a prefix of its entries each (None: the segment is gone,
    trimmed or deleted meanwhile), and the bytes read."""
    out: list[list[bytes | int | None] | None] = []
    nbytes = 0
    for path, fmt, ledger_id, entry_ids, records in jobs:
        if nbytes >= budget and taken:
            break
        outcomes: list[bytes | int | None] = []
        if records is None:
            got = read_indexed(ops, path, ledger_id, fmt, entry_ids, budget - nbytes, taken)
            if got is None:
                out.append(None)
                continue
            outcomes.extend(got[0])
            nbytes += got[1]
            taken = taken or any(isinstance(o, bytes) for o in got[0])
            out.append(outcomes)
            continue
        try:
            fd = ops.open(path, os.O_RDONLY)   # one descriptor for the job's records
        except FileNotFoundError:
            out.append(None)
            continue
        try:
            for record in records:
                if nbytes >= budget and taken:
                    break
                _, offset, length = record
                blob = ops.pread(fd, RECORD_HEADER_SIZE + length, offset)
                data = parse_records(blob, [record], fmt, ledger_id)[0][1]
                outcomes.append(data)
                if data is not None:
                    nbytes += len(data)
                    taken = True
        finally:
            ops.close(fd)
        out.append(outcomes)
    return out, nbytes
