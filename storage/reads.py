"""EntryReader: the read path of one managed ledger (cache first, then disk in read threads).

Owned by its ManagedLedger, which shares (never replaces) its ledger table and id list with
it; loop-only. Reads stop at each ledger's confirmed count (never past what was synced and
acknowledged); a record that fails its checks on disk is never returned: on_corrupt is
called (the ledger marks the entry missing, reports it and lets cursors move past it).
Out of file descriptors while reading is TooManyOpenFilesError.

Read-ahead: a disk read that starts where the previous one of this reader ended (a reader
going through entries in order that are not in the entry cache: a herd of delayed messages
falling due after their entries aged out of the cache, a backlog caught up from disk) also
reads up to :data:`READ_AHEAD_ENTRIES` / :data:`READ_AHEAD_BYTES` beyond what was asked, in the
same read, and keeps them (:class:`_Ahead`, one per reader) for the reads that follow: one
read-thread hop per ~1,000 entries instead of per 100 (Pulsar's dispatcherMaxReadBatchSize).
Entries never change once durable, so what is kept stays valid; it is bounded in bytes, served
only within the ledger's confirmed count while the ledger exists, dropped as soon as a read
asks for something else, and dropped after :data:`READ_AHEAD_KEEP_S` unread. The entry
cache's rule holds: nothing read from disk enters the cache.
"""

from __future__ import annotations

import asyncio
import bisect
from collections.abc import Callable, Mapping
from concurrent.futures import Executor

from storage.cache import EntryCache
from storage.errors import TooManyOpenFilesError
from storage.fileops import FileOps
from storage.index_pages import IndexPager
from storage.ledger_state import LedgerState
from storage.limits import is_fd_exhaustion
from storage.positions import Entry, Position
from storage.relocation import RelocatedEntries
from storage.segment_file import IndexResidency
from storage.segments import read_records

DEFAULT_MAX_READ_BYTES = 5 * 1024 * 1024
#: Entries / bytes a sequential disk read takes beyond what was asked (module doc).
READ_AHEAD_ENTRIES = 1000
READ_AHEAD_BYTES = 1024 * 1024
#: Seconds kept entries stay unread before they are dropped.
READ_AHEAD_KEEP_S = 1.0


class _Ahead:
    """Entries read beyond a sequential read: entry ids *start* .. *end* - 1 of a ledger are
    covered, *ids* ascending are those that exist (missing or corrupt ones are absent) with
    their *datas*."""

    __slots__ = ("datas", "end", "ids", "ledger_id", "start")

    def __init__(self, ledger_id: int, start: int, end: int, ids: list[int],
                 datas: list[bytes]) -> None:
        self.ledger_id = ledger_id
        self.start = start
        self.end = end
        self.ids = ids
        self.datas = datas

OnCorrupt = Callable[[LedgerState, int, int, int], None]
"""on_corrupt(ledger, entry_id, offset, length): a record failed its checks when read."""


class EntryReader:
    def __init__(
        self, loop: asyncio.AbstractEventLoop, ops: FileOps, cache: EntryCache, pool: Executor,
        pager: IndexPager, ledgers: Mapping[int, LedgerState], ledger_ids: list[int],
        on_corrupt: OnCorrupt, relocated: RelocatedEntries | None = None,
    ) -> None:
        self._relocated = relocated
        self._pager = pager
        self._loop = loop
        self._ops = ops
        self._cache = cache
        self._pool = pool
        self._ledgers = ledgers
        self._ledger_ids = ledger_ids
        self._on_corrupt = on_corrupt
        self._ahead: _Ahead | None = None
        self._ahead_timer: asyncio.TimerHandle | None = None
        #: (ledger id, entry id) where the last disk read ended: a read starting there is
        #: sequential and reads ahead.
        self._disk_end: tuple[int, int] | None = None
        self.read_ahead_entries = 0
        """Entries served from read-ahead (tests, benchmarks)."""

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
                ahead = self._ahead
                if ahead is not None:
                    if ahead.ledger_id == ledger_id and ahead.start <= entry_id < ahead.end:
                        entry_id, nbytes = self._take_ahead(
                            ahead, entry_id, min(led.confirmed, ahead.end), max_entries,
                            max_bytes, out, nbytes)
                        continue
                    self._drop_ahead()
                # a run of cached entries takes one cache lookup, not one per entry
                run = cache.get_run(ledger_id, entry_id,
                                    min(max_entries - len(out), led.confirmed - entry_id))
                if run:
                    for data in run:
                        out.append(Entry(Position(ledger_id, entry_id), data))
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

    def _take_ahead(self, ahead: _Ahead, entry_id: int, end: int, max_entries: int,
                    max_bytes: int, out: list[Entry], nbytes: int) -> tuple[int, int]:
        """Serve kept entries from *entry_id* (inside what *ahead* covers) up to *end* and the
        read's limits; returns the next entry id and the bytes so far."""
        ids, datas = ahead.ids, ahead.datas
        i = bisect.bisect_left(ids, entry_id)
        ledger_id = ahead.ledger_id
        served = 0
        while i < len(ids) and ids[i] < end and len(out) < max_entries and (
                not out or nbytes < max_bytes):
            data = datas[i]
            out.append(Entry(Position(ledger_id, ids[i]), data))
            nbytes += len(data)
            i += 1
            served += 1
        self.read_ahead_entries += served
        nxt = ids[i] if i < len(ids) else ahead.end
        nxt = min(nxt, end)
        if nxt >= ahead.end:          # all served: the next disk read here goes on reading ahead
            self._drop_ahead()
            self._disk_end = (ledger_id, ahead.end)
        else:
            ahead.start = nxt
        return nxt, nbytes

    def _drop_ahead(self) -> None:
        self._ahead = None
        if self._ahead_timer is not None:
            self._ahead_timer.cancel()
            self._ahead_timer = None

    async def _read_from_disk(
        self, led: LedgerState, entry_id: int, max_entries: int, max_bytes: int,
        out: list[Entry], nbytes: int,
    ) -> tuple[int, int]:
        segment = led.segment
        if segment.index is not IndexResidency.RESIDENT:  # paged in/out by the pager (LRU)
            offsets, lengths = await self._pager.arrays(segment)
        else:
            offsets, lengths = segment.offsets, segment.lengths
        wanted: list[tuple[int, int, int]] = []
        planned = nbytes
        end = entry_id
        while end < led.confirmed and len(out) + len(wanted) < max_entries and (
            not (out or wanted) or planned < max_bytes
        ):
            offset = offsets[end]
            if offset >= 0:
                wanted.append((end, offset, lengths[end]))
                planned += lengths[end]
            end += 1
        asked_end, asked = end, len(wanted)
        if self._disk_end == (led.ledger_id, entry_id) and wanted:
            # sequential: read ahead in the same read (module doc)
            extra_bytes = 0
            stop = min(led.confirmed, end + READ_AHEAD_ENTRIES)
            while end < stop and extra_bytes < READ_AHEAD_BYTES:
                offset = offsets[end]
                if offset >= 0:
                    wanted.append((end, offset, lengths[end]))
                    extra_bytes += lengths[end]
                end += 1
        self._disk_end = (led.ledger_id, end)
        if not wanted:
            return end, nbytes
        try:
            got = await self._loop.run_in_executor(
                self._pool, read_records, self._ops, segment.path, wanted, segment.format,
                segment.ledger_id,
            )
        except FileNotFoundError:  # trimmed or deleted while we were reading
            return led.confirmed, nbytes
        except OSError as exc:
            if is_fd_exhaustion(exc):
                raise TooManyOpenFilesError(f"reading {segment.path.name}: {exc}") from exc
            raise
        ids: list[int] = []
        datas: list[bytes] = []
        for k, (got_id, data) in enumerate(got):
            if data is None:
                self._on_corrupt(led, got_id, offsets[got_id], lengths[got_id])
            elif k < asked:
                out.append(Entry(Position(led.ledger_id, got_id), data))
                nbytes += len(data)
            else:
                ids.append(got_id)
                datas.append(data)
        if end > asked_end:
            self._drop_ahead()
            self._ahead = _Ahead(led.ledger_id, asked_end, end, ids, datas)
            self._ahead_timer = self._loop.call_later(READ_AHEAD_KEEP_S, self._drop_ahead)
        return asked_end, nbytes
